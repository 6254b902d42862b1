//! Where the crate's HTTP exchanges run: on the caller's task when it runs on a
//! multi-threaded runtime, else on one I/O runtime the crate owns.
//!
//! A pooled connection is served by a task on the runtime that opened it. A
//! multi-threaded runtime (the common case: one runtime for the process) always runs its
//! tasks, so its caller drives its own exchange, with no thread hop: a connection it
//! opens is served by that runtime's workers and reused by every later caller, from any
//! runtime, for as long as that runtime lives (when it ends, its connections close and
//! leave the pool). A current-thread runtime runs its tasks only while someone drives it
//! (one per test, a runtime per job, a runtime that ends while the credential lives on):
//! a connection opened there would hang the next caller from elsewhere. Those callers,
//! and callers without a runtime, hand their exchange to a single-threaded runtime in a
//! thread of the crate's own, started on first use and alive for the rest of the
//! process, as `reqwest::blocking` does. Connections are pooled in the client either way:
//! a cold token or a refresh does not pay a new TCP and TLS handshake.
//!
//! A caller that stops waiting drops or aborts its exchange (the request's own timeout
//! bounds it in any case).

use std::future::Future;
use std::pin::Pin;
use std::sync::OnceLock;
use std::task::{Context, Poll};

use tokio::runtime::{Builder, Handle, RuntimeFlavor};
use tokio::task::JoinHandle;

/// Why an exchange ended without an answer: the I/O runtime could not be started, or the
/// exchange task ended abnormally. Each caller reports it as its own layer's error.
#[derive(Debug)]
pub(crate) struct Abandoned(pub &'static str);

/// The I/O runtime's handle; `None` when its thread could not be started (the exchange
/// then runs on the caller's task, as before pooling).
fn io_runtime() -> Option<&'static Handle> {
    static IO: OnceLock<Option<Handle>> = OnceLock::new();
    IO.get_or_init(|| {
        let runtime = Builder::new_current_thread()
            .enable_all()
            .thread_name("msi-dataplane-io")
            .build()
            .ok()?;
        let handle = runtime.handle().clone();
        let started = std::thread::Builder::new()
            .name("msi-dataplane-io".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()));
        match started {
            Ok(_) => Some(handle),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the HTTP I/O thread; exchanges run on the caller's runtime");
                None
            }
        }
    })
    .as_ref()
}

/// Run one exchange: on the caller's task on a multi-threaded runtime, else on the I/O
/// runtime, waited for from the caller's task.
pub(crate) async fn run<F, T>(exchange: F) -> Result<T, Abandoned>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    if on_multi_threaded_runtime() {
        return Ok(exchange.await);
    }
    match io_runtime() {
        Some(io) => AbortOnDrop(io.spawn(exchange))
            .await
            .map_err(|_| Abandoned("the HTTP exchange task ended without an answer")),
        None => Ok(exchange.await),
    }
}

/// Whether the caller runs on a runtime that drives its tasks whoever awaits them (not a
/// current-thread one).
fn on_multi_threaded_runtime() -> bool {
    Handle::try_current().is_ok_and(|h| h.runtime_flavor() != RuntimeFlavor::CurrentThread)
}

/// A spawned exchange, aborted when the caller stops waiting for it.
struct AbortOnDrop<T>(JoinHandle<T>);

impl<T> Future for AbortOnDrop<T> {
    type Output = Result<T, tokio::task::JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn on_a_multi_threaded_runtime_the_callers_task_runs_the_exchange() {
        let caller = Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("caller-worker")
            .build()
            .unwrap();
        let thread = caller.block_on(async {
            let exchange = run(async { std::thread::current().name().map(str::to_owned) });
            tokio::spawn(exchange).await.unwrap().unwrap()
        });
        assert_eq!(thread.as_deref(), Some("caller-worker"));
    }

    #[test]
    fn current_thread_runtimes_hand_their_exchanges_to_one_thread() {
        let names: Vec<String> = (0..2)
            .map(|_| {
                let caller = Builder::new_current_thread().build().unwrap();
                caller
                    .block_on(run(async {
                        std::thread::current().name().map(str::to_owned)
                    }))
                    .unwrap()
                    .unwrap()
            })
            .collect();
        assert_eq!(names, ["msi-dataplane-io", "msi-dataplane-io"]);
    }

    #[test]
    fn a_caller_that_stops_waiting_aborts_the_exchange() {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        struct Dropped(std::sync::mpsc::Sender<()>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                let _ = self.0.send(());
            }
        }
        let caller = Builder::new_current_thread().enable_time().build().unwrap();
        caller.block_on(async {
            let guard = Dropped(tx);
            let slow = run(async move {
                let _guard = guard;
                std::future::pending::<()>().await;
            });
            let _ = tokio::time::timeout(std::time::Duration::from_millis(20), slow).await;
        });
        rx.recv_timeout(std::time::Duration::from_secs(10))
            .expect("the exchange was dropped");
    }
}

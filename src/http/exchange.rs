//! Where the crate's token requests and HTTP exchanges run: on the caller's runtime when
//! it is multi-threaded, else on one I/O runtime the crate owns.
//!
//! A pooled connection is served by a task on the runtime that opened it, and a task runs
//! only while its runtime is driven. A multi-threaded runtime (the common case: one
//! runtime for the process) always runs its tasks: there a token request runs as a task
//! of its own (on [`runtime`]) and an exchange on the caller's task ([`run`]), with no thread
//! hop; a connection opened there is served by that runtime's workers and reused by
//! every later caller, from any runtime, for as long as that runtime lives (when it ends,
//! its connections close and leave the pool). A current-thread runtime runs its tasks
//! only while someone drives it (one per test, a runtime per job, a runtime that ends
//! while the credential lives on): a request started there, or a connection opened
//! there, would stall the next caller from elsewhere. Those callers hand their requests
//! and exchanges (and callers without a runtime, their exchanges) to a single-threaded
//! runtime on a thread of the crate's own, `msi-dataplane-io`, started on first use and
//! alive for the rest of the process, as `reqwest::blocking` does. Connections are pooled
//! in the client either way: a cold token or a refresh does not pay a new TCP and TLS
//! handshake.
//!
//! A caller that stops waiting for an exchange drops or aborts it (the request's own
//! timeout bounds it in any case); a spawned request runs to its end. [`send`] is an
//! exchange that reads its answer whole, bounded.

use std::cell::Cell;
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

const NO_IO_THREAD: Abandoned = Abandoned("the crate's I/O thread could not be started");
const NO_RUNTIME: Abandoned = Abandoned("no Tokio runtime to run it on");

thread_local! {
    /// Set on the I/O runtime's thread: what runs there needs no hop.
    static ON_IO_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// The I/O runtime's handle; `None` when its thread could not be started.
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
            .spawn(move || {
                ON_IO_THREAD.set(true);
                runtime.block_on(std::future::pending::<()>())
            });
        match started {
            Ok(_) => Some(handle),
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the crate's I/O thread");
                None
            }
        }
    })
    .as_ref()
}

/// The caller's runtime, when work polled on this thread is driven whoever awaits it: a
/// multi-threaded runtime, or the I/O runtime's own thread.
fn driven_here() -> Option<Handle> {
    let here = Handle::try_current().ok()?;
    let driven = here.runtime_flavor() != RuntimeFlavor::CurrentThread || ON_IO_THREAD.get();
    driven.then_some(here)
}

/// The runtime a task of the crate's own (a token request) runs on for this caller: its
/// own when it is multi-threaded, else the I/O runtime (started on first use: call this
/// before taking a lock others wait on). Nobody need wait for such a task. A caller
/// without a Tokio runtime gets none.
pub(crate) fn runtime() -> Result<Handle, Abandoned> {
    match driven_here() {
        Some(here) => Ok(here),
        None if Handle::try_current().is_err() => Err(NO_RUNTIME),
        None => io_runtime().cloned().ok_or(NO_IO_THREAD),
    }
}

/// Run one exchange: on the caller's task on a multi-threaded runtime (or the I/O
/// runtime), else on the I/O runtime, waited for from the caller's task.
pub(crate) async fn run<F, T>(exchange: F) -> Result<T, Abandoned>
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    if driven_here().is_some() {
        return Ok(exchange.await);
    }
    let io = io_runtime().ok_or(NO_IO_THREAD)?;
    AbortOnDrop(io.spawn(exchange))
        .await
        .map_err(|_| Abandoned("the HTTP exchange task ended without an answer"))
}

/// An answer read whole: its status, its headers and its body (`None` when longer than
/// [`MAX_RESPONSE_BYTES`](super::body::MAX_RESPONSE_BYTES)).
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: reqwest::header::HeaderMap,
    pub(crate) body: Option<Vec<u8>>,
}

/// Send `request` where exchanges run ([`run`]) and read its answer, its body bounded
/// ([`read_limited_body`](super::body::read_limited_body)).
pub(crate) async fn send(
    request: reqwest::RequestBuilder,
) -> Result<reqwest::Result<Answer>, Abandoned> {
    run(async move {
        let mut response = request.send().await?;
        let status = response.status().as_u16();
        let headers = std::mem::take(response.headers_mut());
        let body = super::body::read_limited_body(&mut response).await?;
        Ok(Answer {
            status,
            headers,
            body,
        })
    })
    .await
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
    fn requests_run_on_a_multi_threaded_callers_runtime_else_on_the_io_thread() {
        let on = |caller: tokio::runtime::Runtime| {
            let (tx, rx) = std::sync::mpsc::channel();
            caller.block_on(async move {
                runtime().unwrap().spawn(async move {
                    let _ = tx.send(std::thread::current().name().map(str::to_owned));
                });
                tokio::task::yield_now().await;
            });
            let name = rx.recv_timeout(std::time::Duration::from_secs(10));
            drop(caller);
            name.expect("the task ran").expect("a named thread")
        };
        let multi = Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("caller-worker")
            .build()
            .unwrap();
        assert_eq!(on(multi), "caller-worker");
        let current = Builder::new_current_thread().build().unwrap();
        assert_eq!(on(current), "msi-dataplane-io");
        // From the I/O thread itself, an exchange runs in place (no second hop).
        let (tx, rx) = std::sync::mpsc::channel();
        let current = Builder::new_current_thread().build().unwrap();
        current.block_on(async move {
            runtime().unwrap().spawn(async move {
                let _ = tx.send(driven_here().is_some());
            });
        });
        assert!(rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap());
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

//! A future its caller drives in its own task, handed to the runtime to finish if the
//! caller leaves (is dropped) before it ends: the first caller of a cache miss runs the
//! token request itself, without waking another thread for it, and the request still
//! ends for the callers that joined it if that caller goes.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::runtime::Handle;

/// The work, boxed; dropped once it has ended.
pub(crate) type Work = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// See the module docs.
pub(crate) struct Driven {
    work: Option<Work>,
    /// Where the rest runs if the caller leaves.
    handle: Handle,
}

impl Driven {
    /// `work`, to be driven by whoever awaits this; spawned on `handle` if dropped first.
    pub(crate) fn new(work: Work, handle: Handle) -> Self {
        Driven {
            work: Some(work),
            handle,
        }
    }

    /// Run it in a task of its own, driven by nobody here.
    pub(crate) fn detach(self) {
        drop(self);
    }
}

impl Future for Driven {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let Some(work) = self.work.as_mut() else {
            return Poll::Ready(());
        };
        if work.as_mut().poll(cx).is_pending() {
            return Poll::Pending;
        }
        self.work = None;
        Poll::Ready(())
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        // Not while unwinding from a panic in the work itself: it cannot be resumed.
        if let Some(work) = self.work.take()
            && !std::thread::panicking()
        {
            // On a runtime shutting down the task is dropped at once, which ends the
            // request for its waiters (they get `RequestAbandoned`).
            drop(self.handle.spawn(work));
        }
    }
}

//! A token request driven by the callers waiting on it, in their own tasks, and handed to
//! the runtime to finish if they leave before it ends.
//!
//! The caller that starts a cache miss runs the request in its own poll, without waking
//! another thread for it. The callers that join it hold the same work
//! ([`Shared`]): whichever of them is polled drives it, so a caller that keeps its future
//! without polling it holds no one back. The first of them dropped before the work ends
//! spawns what is left of it, so the request still ends for those who stay and for the
//! cache. A panic in the work ends it (its waiters get no answer, and say so) and is
//! logged; it is not passed on to whichever caller happened to be polling it.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use futures_util::FutureExt as _;
use futures_util::future::{CatchUnwind, Map, Shared, WeakShared};
use tokio::runtime::Handle;

/// The work, boxed; dropped once it has ended.
pub(crate) type Work = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The work, its panic caught.
type Caught = Map<CatchUnwind<AssertUnwindSafe<Work>>, fn(std::thread::Result<()>)>;

/// One caller's hold on the work. See the module docs.
pub(crate) struct Driven {
    work: Shared<Caught>,
    spawn: Spawn,
    /// This hold saw the work end (a `Shared` that has answered holds nothing more).
    ended: bool,
}

/// What the cache keeps so that later callers can join the work: no hold on it, so the
/// work (and what it holds) is dropped once no caller and no task has it.
pub(crate) struct Joinable {
    work: Option<WeakShared<Caught>>,
    spawn: Spawn,
}

/// Where the rest runs if a caller leaves, and whether one already made it run there.
#[derive(Clone)]
struct Spawn {
    handle: Handle,
    spawned: Arc<AtomicBool>,
}

impl Driven {
    /// `work`, to be driven by whoever awaits this or a hold joined from the
    /// [`Joinable`]; spawned on `handle` if one is dropped before it ends.
    pub(crate) fn new(work: Work, handle: Handle) -> (Self, Joinable) {
        let caught: Caught = AssertUnwindSafe(work).catch_unwind().map(logged as fn(_));
        let work = caught.shared();
        let spawn = Spawn {
            handle,
            spawned: Arc::new(AtomicBool::new(false)),
        };
        let joinable = Joinable {
            // `None` only for a work that has ended, which this one has not.
            work: work.downgrade(),
            spawn: spawn.clone(),
        };
        let driven = Driven {
            work,
            spawn,
            ended: false,
        };
        (driven, joinable)
    }

    /// Run it in a task of its own, driven by nobody here.
    pub(crate) fn detach(self) {
        drop(self);
    }
}

impl Joinable {
    /// A hold on the work, unless no caller or task holds it any more (a hold on a work
    /// that has ended is ready at once).
    pub(crate) fn join(&self) -> Option<Driven> {
        Some(Driven {
            work: self.work.as_ref()?.upgrade()?,
            spawn: self.spawn.clone(),
            ended: false,
        })
    }
}

/// The work's end: a panic is logged (its message may hold anything: not logged).
fn logged(ended: std::thread::Result<()>) {
    if ended.is_err() {
        tracing::error!("a token request panicked; its callers get no answer");
    }
}

impl Future for Driven {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.ended {
            return Poll::Ready(());
        }
        let polled = Pin::new(&mut self.work).poll(cx);
        self.ended = polled.is_ready();
        polled
    }
}

impl Drop for Driven {
    fn drop(&mut self) {
        // Only the first caller to leave spawns it: the task then holds it for everyone.
        let ended = self.ended || self.work.peek().is_some();
        if !ended && !self.spawn.spawned.swap(true, Ordering::AcqRel) {
            // On a runtime shutting down the task is dropped at once, which ends the
            // request for its waiters (they get `RequestAbandoned`) once no caller holds it.
            drop(self.spawn.handle.spawn(self.work.clone()));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::task::Waker;
    use std::time::Duration;

    use super::*;

    /// A work that waits for `go`, then counts itself done.
    fn gated(done: &Arc<AtomicUsize>) -> (Work, tokio::sync::oneshot::Sender<()>) {
        let (go, gate) = tokio::sync::oneshot::channel::<()>();
        let done = done.clone();
        let work: Work = Box::pin(async move {
            let _ = gate.await;
            done.fetch_add(1, Ordering::SeqCst);
        });
        (work, go)
    }

    fn poll_once(f: &mut Driven) -> Poll<()> {
        Pin::new(f).poll(&mut Context::from_waker(Waker::noop()))
    }

    #[tokio::test]
    async fn a_joined_caller_drives_the_work_its_starter_stopped_polling() {
        let done = Arc::new(AtomicUsize::new(0));
        let (work, go) = gated(&done);
        let (mut first, joinable) = Driven::new(work, Handle::current());
        assert!(poll_once(&mut first).is_pending());
        let joined = joinable.join().expect("in flight");
        go.send(()).expect("gate");
        tokio::time::timeout(Duration::from_secs(10), joined)
            .await
            .expect("the joined caller drove it");
        assert_eq!(done.load(Ordering::SeqCst), 1);
        assert!(poll_once(&mut first).is_ready(), "one work, ended for both");
        assert!(joinable.join().is_none(), "an ended work cannot be joined");
        drop(first);
        assert!(
            !joinable.spawn.spawned.load(Ordering::SeqCst),
            "a work that ended was handed to a task"
        );
    }

    #[tokio::test]
    async fn the_first_caller_to_leave_hands_the_rest_to_one_task() {
        let done = Arc::new(AtomicUsize::new(0));
        let (work, go) = gated(&done);
        let (mut first, joinable) = Driven::new(work, Handle::current());
        assert!(poll_once(&mut first).is_pending());
        let second = joinable.join().expect("in flight");
        drop(first);
        drop(second);
        drop(joinable);
        go.send(()).expect("the spawned task holds the work");
        tokio::time::timeout(Duration::from_secs(10), async {
            while done.load(Ordering::SeqCst) == 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the spawned task finished it");
        assert_eq!(done.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_panic_in_the_work_ends_it_for_every_caller_without_reaching_them() {
        let work: Work = Box::pin(async { panic!("a bug in the request") });
        let (first, joinable) = Driven::new(work, Handle::current());
        let joined = joinable.join().expect("in flight");
        first.await;
        joined.await;
        assert!(joinable.join().is_none());
        assert!(!joinable.spawn.spawned.load(Ordering::SeqCst));
    }
}

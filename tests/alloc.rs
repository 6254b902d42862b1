//! The cache hit path allocates nothing: a counting global allocator watches
//! `get_token` on a warm cache.

mod support;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use support::entra::EntraServer;
use support::harness::{ARM, credential};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    static LIVE_BYTES: Cell<i64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; only counts on the side. The counters are
// const-initialised thread-locals without destructors, so touching them never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        let _ = LIVE_BYTES.try_with(|c| c.set(c.get() + layout.size() as i64));
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let _ = LIVE_BYTES.try_with(|c| c.set(c.get() - layout.size() as i64));
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn counters() -> (u64, i64) {
    (ALLOCATIONS.with(Cell::get), LIVE_BYTES.with(Cell::get))
}

#[test]
fn cached_get_token_allocates_nothing_and_the_heap_does_not_grow() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = rt.block_on(EntraServer::start());
    let cred = {
        let _guard = rt.enter();
        credential(&server, "pem-pkcs8")
    };
    let first = rt.block_on(cred.get_token(&[ARM])).unwrap();

    let mut cx = Context::from_waker(Waker::noop());
    let mut hit = || match pin!(cred.get_token(&[ARM])).poll(&mut cx) {
        Poll::Ready(Ok(token)) => token,
        other => panic!("not a ready hit: {:?}", other.map(|r| r.map(|_| ()))),
    };
    // Warm the thread's first use of the lock-free structures.
    for _ in 0..10 {
        drop(hit());
    }

    // The counter sees allocations (so a zero below means something).
    let (a0, _) = counters();
    let probe = std::hint::black_box(vec![0u8; 64]);
    assert_eq!(counters().0, a0 + 1);
    drop(probe);

    let (allocs_before, bytes_before) = counters();
    for _ in 0..1_000_000 {
        let token = hit();
        assert_eq!(token.expires_on(), first.expires_on());
    }
    let (allocs_after, bytes_after) = counters();
    assert_eq!(
        allocs_after - allocs_before,
        0,
        "the hit path allocated {} times in 10^6 calls",
        allocs_after - allocs_before
    );
    assert_eq!(bytes_after, bytes_before, "the heap grew on the hit path");
    assert_eq!(server.token_requests(), 1);
}

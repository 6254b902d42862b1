//! The cache hit path allocates nothing and does not grow the heap: a counting global
//! allocator (tests/support/counting.rs) watches 10⁶ `get_token` calls on a warm cache,
//! on one scope and one thread, then on ten scopes and two threads at once. And during an
//! Entra outage, the data plane client's token read past the refresh point costs the same
//! few allocations at 10 and at 1,000 cached scopes: no table copied, no fetch started.

mod support;

use std::future::Future;
use std::pin::pin;
use std::sync::{Barrier, Mutex};
use std::task::{Context, Poll, Waker};

use msi_dataplane::dataplane::TokenSource;
use msi_dataplane::{AccessToken, ClientCertificateCredential, RetryPolicy};
use support::counting::{Counting, count_this_thread, live_bytes, thread_allocations};
use support::entra::{EntraServer, Scripted, TokenShape};
use support::harness::{ARM, credential_on_clock, credential_with, https_env, options};
use tokio::runtime::Runtime;

#[global_allocator]
static GLOBAL: Counting = Counting;

/// `live_bytes` is process-wide: one measurement at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The server on its own runtime, whose threads are not counted.
fn server() -> (Runtime, EntraServer) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = rt.block_on(EntraServer::start());
    (rt, server)
}

/// The client side's runtime: current-thread, so a `block_on` that returns has also
/// finished (and freed) the request task it waited on. Its blocking threads are counted.
fn client_runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .on_thread_start(count_this_thread)
        .enable_all()
        .build()
        .unwrap()
}

/// One `get_token` polled once in place: a hit must be `Ready` at once.
fn hit(cred: &ClientCertificateCredential, scope: &str) -> AccessToken {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(cred.get_token(&[scope])).poll(&mut cx) {
        Poll::Ready(Ok(token)) => token,
        other => panic!("not a ready hit: {:?}", other.map(|r| r.map(|_| ()))),
    }
}

/// The counters see allocations (so a zero below means something). The heap figure is
/// process-wide, so another test's thread may move it meanwhile: a few tries.
fn assert_counters_see_an_allocation() {
    let seen = (0..20).any(|_| {
        let (a0, b0) = (thread_allocations(), live_bytes());
        let probe = std::hint::black_box(vec![0u8; 64]);
        assert_eq!(thread_allocations(), a0 + 1);
        let grew = live_bytes() == b0 + 64;
        drop(probe);
        grew && live_bytes() == b0
    });
    assert!(
        seen,
        "the heap counter never saw a 64-byte allocation come and go"
    );
}

/// A credential made in `rt`'s context.
fn hit_path_credential(
    server: &EntraServer,
    rt: &tokio::runtime::Runtime,
) -> ClientCertificateCredential {
    let _guard = rt.enter();
    credential_with(server, "pem-pkcs8", options())
}

/// The crate's I/O thread finishes with the last request's connection (back into the
/// pool) on its own time: wait until the process-wide heap figure holds still for 100 ms
/// before taking it.
fn wait_for_a_still_heap() {
    let mut last = live_bytes();
    let mut still_for = 0;
    for _ in 0..200 {
        std::thread::sleep(std::time::Duration::from_millis(20));
        let now = live_bytes();
        if now == last {
            still_for += 1;
            if still_for == 5 {
                return;
            }
        } else {
            (last, still_for) = (now, 0);
        }
    }
}

#[test]
fn cached_get_token_allocates_nothing_and_the_heap_does_not_grow() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    count_this_thread();
    let (_server_rt, server) = server();
    let rt = client_runtime();
    let cred = hit_path_credential(&server, &rt);
    let first = rt.block_on(cred.get_token(&[ARM])).unwrap();
    // Warm the thread's first use of what the hit path touches.
    for _ in 0..10 {
        drop(hit(&cred, ARM));
    }
    assert_counters_see_an_allocation();

    wait_for_a_still_heap();
    let (allocs_before, bytes_before) = (thread_allocations(), live_bytes());
    for _ in 0..1_000_000 {
        let token = hit(&cred, ARM);
        assert_eq!(token.expires_on(), first.expires_on());
    }
    let (allocs_after, bytes_after) = (thread_allocations(), live_bytes());
    assert_eq!(
        allocs_after - allocs_before,
        0,
        "the hit path allocated {} times in 10^6 calls",
        allocs_after - allocs_before
    );
    assert_eq!(bytes_after, bytes_before, "the heap grew on the hit path");
    assert_eq!(server.token_requests(), 1);
}

#[test]
fn hits_on_ten_scopes_from_two_threads_allocate_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    count_this_thread();
    let (_server_rt, server) = server();
    let rt = client_runtime();
    let cred = hit_path_credential(&server, &rt);
    let scopes: Vec<String> = (0..10)
        .map(|i| format!("https://svc{i}.example.com/.default"))
        .collect();
    for scope in &scopes {
        rt.block_on(cred.get_token(&[scope.as_str()])).unwrap();
    }
    assert_eq!(server.token_requests(), 10);

    // Whatever keeps a record per thread on a first read (thread-locals, `arc-swap`'s
    // records in the statics of the HTTP stack: made on a thread's first read, handed to
    // a later thread when its thread ends, never freed): two threads reading at once
    // first, so that the measured pair reuses them: what remains is what the cache
    // itself keeps.
    let first_read = Barrier::new(2);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                drop(hit(&cred, &scopes[0]));
                first_read.wait();
            });
        }
    });

    const PER_THREAD: usize = 500_000;
    let barrier = Barrier::new(2);
    wait_for_a_still_heap();
    let bytes_before = live_bytes();
    let work = || {
        count_this_thread();
        // Warm this thread, then wait for the other thread.
        for scope in &scopes {
            drop(hit(&cred, scope));
        }
        barrier.wait();
        let before = thread_allocations();
        for i in 0..PER_THREAD {
            let token = hit(&cred, &scopes[i % scopes.len()]);
            assert!(!token.token().is_empty());
        }
        thread_allocations() - before
    };
    // A plain array for the results: the heap figure below is taken while it is alive.
    let allocations: [u64; 2] = std::thread::scope(|s| {
        let a = s.spawn(work);
        let b = s.spawn(work);
        [a.join().unwrap(), b.join().unwrap()]
    });
    // Both threads ended: what is left must be what there was before (no thread kept
    // anything of its own).
    assert_eq!(
        allocations,
        [0, 0],
        "allocations per thread in {PER_THREAD} hits"
    );
    assert_eq!(
        live_bytes(),
        bytes_before,
        "2 x {PER_THREAD} hits over ten scopes left the heap changed"
    );
    assert_eq!(server.token_requests(), 10, "every call was a hit");
}

/// The read the data plane client makes before each call (`TokenSource::token`, the
/// credential's one cache), polled once in place: it must be `Ready` at once.
fn data_plane_read(cred: &ClientCertificateCredential, scope: &str) -> AccessToken {
    let mut cx = Context::from_waker(Waker::noop());
    match pin!(TokenSource::token(cred, scope, cred.tenant_id())).poll(&mut cx) {
        Poll::Ready(Ok(token)) => token,
        other => panic!("not a ready read: {:?}", other.map(|r| r.map(|_| ()))),
    }
}

/// Data plane token reads measured per cache size.
const READS: u64 = 1_000;

/// Allocations on this thread in [`READS`] data plane token reads, with `n` scopes cached and the
/// read scope's token past its refresh point while Entra answers 503 (its refresh failed
/// once and is backing off); and the token requests the reads made.
fn outage_reads(rt: &Runtime, n: usize) -> (u64, usize) {
    let (_server_rt, server) = server();
    let server = &server;
    server.set_token_shape(TokenShape {
        expires_in: 500,
        ..TokenShape::default()
    });
    let (clock, cred) = {
        let _guard = rt.enter();
        let options = options()
            .with_environment(https_env().with_retry_policy(RetryPolicy::none()))
            .with_max_cached_scopes(n);
        credential_on_clock(server, "pem-pkcs8", options)
    };
    let scopes: Vec<String> = (0..n)
        .map(|i| format!("https://svc{i}.example.com/.default"))
        .collect();
    for scope in &scopes {
        rt.block_on(cred.get_token(&[scope.as_str()])).unwrap();
    }
    let before_outage = server.token_requests();
    for _ in 0..50 {
        server.enqueue(Scripted::status(503));
    }
    // 500 s tokens: the window opens at 250 s at the latest; 240 s of validity left.
    clock.advance(std::time::Duration::from_secs(260));
    let scope = scopes[n / 2].as_str();
    // In the runtime's context, as the client's calls are: a refresh a read starts is
    // spawned on it (and runs whenever it is driven below).
    let _context = rt.enter();
    let first = data_plane_read(&cred, scope); // starts the one background refresh
    let settle = |ms| {
        let pause = std::time::Duration::from_millis(ms);
        rt.block_on(async move { tokio::time::sleep(pause).await })
    };
    for _ in 0..250 {
        if server.token_requests() > before_outage {
            break;
        }
        settle(20);
    }
    settle(100); // the 503 recorded: the refresh backs off
    assert_eq!(
        server.token_requests(),
        before_outage + 1,
        "the one refresh"
    );
    for _ in 0..10 {
        drop(data_plane_read(&cred, scope));
    }
    // Rounds of reads with the runtime driven between them, as an application's would
    // be: a fetch a read started runs (and ends) before the next round.
    let mut allocations = 0;
    for _ in 0..READS / 50 {
        let before = thread_allocations();
        for _ in 0..50 {
            let token = data_plane_read(&cred, scope);
            assert_eq!(token.token(), first.token(), "the still-valid token");
        }
        allocations += thread_allocations() - before;
        settle(5);
    }
    settle(100);
    (allocations, server.token_requests() - before_outage)
}

#[test]
fn an_outage_past_the_refresh_point_copies_nothing_and_fetches_nothing_per_read() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    count_this_thread();
    let rt = client_runtime();
    assert_counters_see_an_allocation();
    let (small, small_requests) = outage_reads(&rt, 10);
    let (large, large_requests) = outage_reads(&rt, 1_000);
    // The read's boxed future (`TokenSource` returns one) and nothing that grows with
    // the cache: a copied table, a spawned fetch or a new channel would add to it.
    assert!(
        small <= READS && large == small,
        "allocations in {READS} reads: {small} at 10 scopes, {large} at 1,000"
    );
    assert_eq!(
        (small_requests, large_requests),
        (1, 1),
        "token requests for 1,000 reads during the outage (the backoff holds the next)"
    );
}

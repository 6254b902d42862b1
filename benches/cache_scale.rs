//! The token cache at size: the time to add one scope and the memory per cached scope,
//! at 10, 1,000, 10,000 and 50,000 scopes on one credential.
//!
//! `cargo bench --features full --bench cache_scale` (BENCHMARKS.md records the results).
//!
//! For each size N, one credential bounded at N scopes
//! (`with_max_cached_scopes(N)`) is filled with N scopes (real token requests to the
//! test Entra server), then:
//!
//! - `scale/add_scope/N`: one `get_token` for a scope never asked before: a miss, its
//!   token request (signature + loopback HTTPS POST + parse) and the insert into a
//!   full cache, which evicts the least recently used eighth every N/8 inserts (their
//!   cost spread over those inserts). The cache stays at N throughout.
//! - `scale/add_scope_baseline`: the same request past the cache (`request_token`): the
//!   part of the figures above that is not the cache's. `add_scope/N` minus it is the
//!   cache's own cost of a new scope at N.
//!
//! The memory per scope (printed, not timed) is the heap that filling the N scopes left
//! live (a counting global allocator: Rust's heap on the client's threads, so the
//! server's tokens and the TLS library's C heap are not counted), divided by N: the
//! entry, its key, its place in the map and the token's text and handle.

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use msi_dataplane::{ClientCertificateCredential, Environment};

use support::counting::{Counting, count_this_thread, live_bytes};
use support::entra::EntraServer;
use support::harness::{ARM, credential_with, https_client, options, server_runtime};

#[global_allocator]
static GLOBAL: Counting = Counting;

const SIZES: [usize; 4] = [10, 1_000, 10_000, 50_000];

/// In criterion's test mode (`cargo test --benches`: no `--bench` argument), where each
/// bench runs once to prove it works, small sizes: filling 50,000 scopes takes a minute.
const TEST_MODE_SIZES: [usize; 2] = [10, 100];

/// Scope names never repeated across the whole run.
static NEXT: AtomicUsize = AtomicUsize::new(0);

fn new_scope() -> String {
    format!(
        "https://r{}.scale.example/.default",
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

fn bench_scale(c: &mut Criterion) {
    let server_rt = server_runtime();
    let server = server_rt.block_on(EntraServer::start());
    server.set_replay_check(false);
    // Multi-threaded, as most callers are: the requests' tasks run (and allocate) on its
    // worker, counted as this thread is.
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .on_thread_start(count_this_thread)
        .enable_all()
        .build()
        .expect("client runtime");
    count_this_thread();
    let client = https_client();
    let credential = |max: usize| {
        let http = Environment::default().with_http_client(client.clone());
        let options = options().with_environment(http).with_max_cached_scopes(max);
        credential_with(&server, "pem-pkcs8", options)
    };

    let mut g = c.benchmark_group("scale");
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(4));

    let baseline = credential(1);
    client_rt
        .block_on(baseline.request_token(&[ARM]))
        .expect("token");
    g.bench_function("add_scope_baseline", |b| {
        b.to_async(&client_rt)
            .iter(|| async { baseline.request_token(&[ARM]).await.expect("token") })
    });

    let measuring = std::env::args().any(|a| a == "--bench");
    let sizes: &[usize] = if measuring { &SIZES } else { &TEST_MODE_SIZES };
    for &n in sizes {
        let cred = credential(n);
        client_rt.block_on(cred.get_token(&[ARM])).expect("token");
        let before = live_bytes();
        let token_len = fill(&client_rt, &cred, n - 1);
        let per_scope = (live_bytes() - before) as f64 / (n - 1).max(1) as f64;
        eprintln!(
            "scale: {n} scopes: {per_scope:.0} bytes live per cached scope \
             (token text {token_len} bytes)"
        );
        server.clear_requests();
        g.bench_with_input(BenchmarkId::new("add_scope", n), &cred, |b, cred| {
            b.to_async(&client_rt).iter(|| async {
                let scope = new_scope();
                cred.get_token(&[&scope]).await.expect("token")
            })
        });
        server.clear_requests();
    }
    g.finish();
}

/// Add `count` new scopes to `cred`, 32 requests at a time; the last token's length.
fn fill(rt: &tokio::runtime::Runtime, cred: &ClientCertificateCredential, count: usize) -> usize {
    rt.block_on(async {
        let mut len = 0;
        let mut left = count;
        while left > 0 {
            let batch = left.min(32);
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..batch {
                let cred = cred.clone();
                tasks.spawn(async move { cred.get_token(&[&new_scope()]).await });
            }
            while let Some(token) = tasks.join_next().await {
                len = token.expect("task").expect("token").token().len();
            }
            left -= batch;
        }
        len
    })
}

criterion_group! {
    name = benches;
    config = Criterion::default().warm_up_time(Duration::from_secs(1));
    targets = bench_scale
}
criterion_main!(benches);

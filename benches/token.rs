//! Token acquisition: the cached hit path (the crate's own overhead) and the cold path
//! (sign + HTTPS POST + parse) beside its unavoidable parts, measured in the same run.
//!
//! `cargo bench --bench token` (BENCHMARKS.md records the results).
//!
//! Groups:
//!
//! - `cached/floor/{1thread,2threads}`: the floor of any token cache: a plain
//!   `std::sync::RwLock<std::collections::HashMap<String, AccessToken>>` look-up of the
//!   same token by its scope, cloned (same harness as the hits). The target: a hit at
//!   most 1.1× it, on one thread and on two. With `MSI_BENCH_PAIRS=1` the two-thread
//!   floor and hit also run alternately in 21 short rounds, and the median of their
//!   ratios is printed (`pairs:`): on a loaded machine, criterion's sequential figures
//!   can fall on different loads.
//! - `cached/get_token/1thread`: one `get_token(&[ARM])` cache hit, polled once in place
//!   with a no-op waker (no runtime hop): the hit path must be `Ready` on the first poll.
//! - `cached/get_token/{2,4,8}threads`: N OS threads hitting the same credential and scope
//!   at once. Each thread does `iters` hits; the reported time is the wall-clock window
//!   covering all threads (earliest start to latest end) divided by `iters` (not by
//!   `N * iters`): the time one call takes as each thread sees it. With `t1` = 1thread
//!   time and `tN` = Nthreads time: aggregate throughput = `N / tN` hits/s, scaling =
//!   `N * t1 / tN` (N = perfect, 1 = fully serialised). On a 2-core machine 4 and 8
//!   threads show oversubscription (ideal: `tN = N/2 * t1`).
//! - `cached/get_token/100scopes`: hits rotating over 100 distinct warmed scopes.
//! - `cached/get_token/100creds/{1thread,2threads}`: hits rotating over 100 warmed
//!   credentials (each its own cache), on one thread and on two at once (same harness and
//!   arithmetic as `{2,4,8}threads`): the many-identities process (one credential per
//!   managed identity).
//! - `machine/hash/{1thread,2threads}`: the same harness on pure computation that shares
//!   nothing (ten foldhash runs per call): the 2-thread scaling this machine gives at
//!   the time of the run.
//! - `cold/get_token`: `request_token(&[ARM])`, always one fresh request: sign an assertion,
//!   POST it over loopback HTTPS (pooled keep-alive connection), parse the answer.
//! - `cold/get_token_miss`: `clear_cache()` + `get_token(&[ARM])`: the same request made
//!   the way a cache miss makes it (single flight: a spawned task, its callers woken by a
//!   channel). Target: at most 1.15× `cold/sign_only` + `cold/raw_https_round_trip`.
//! - `cold/herd_64`: 64 callers (spawned tasks) on one cold scope at once; the token
//!   requests per herd (target: 1) are counted at the server and printed.
//! - `cold/get_token_miss_crate_client`: the same miss through the client the crate
//!   builds (the test CA added with `with_extra_root_certificates_pem`); the TLS
//!   handshakes per token request over the run are counted at the server and printed
//!   (target: at most 0.15).
//! - `cold/raw_https_round_trip`: the baseline: a raw `reqwest` POST of the same form
//!   (same fields and sizes, same headers, a pre-signed valid assertion) with the same
//!   client to the same server URL, reading the whole body.
//! - `cold/sign_only`: `client_assertion()`, building and signing one assertion.
//! - `cold_spaced/{get_token_miss,raw_https_round_trip}`: the miss and the raw POST with
//!   an untimed 30 ms gap after each, as cold requests come in a process (minutes apart:
//!   the threads on both sides park in between). Target: the miss at most 1.15×
//!   `cold/sign_only` + `cold_spaced/raw_https_round_trip`.
//!
//! - `cold_mt/*`, `cold_mt_spaced/*`: the same with the client side on a multi-threaded
//!   runtime (two workers), where a miss's request is a task on the caller's runtime and
//!   its exchange runs there; on the current-thread `cold/*` both go to the crate's I/O
//!   thread (a hop there and back).
//!
//! The Entra-compatible server runs on its own single-worker multi-thread runtime (its own
//! OS thread), not on the runtime that drives the measured futures: the client-side
//! measurement then never pays for scheduling the server's tasks on its own thread, the
//! two sides run in parallel on the two cores as a real client and Entra would, and both
//! cold benches see exactly the same server. The replay check is off for the whole cold
//! group so that both POSTs cost the server the same (the raw one replays one `jti`;
//! every other verification, including the signature, still runs).

#[path = "../tests/support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Barrier, RwLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use msi_dataplane::{
    AccessToken, ClientCertificateCredential, ClientCertificateCredentialOptions, Environment,
};
use tokio::runtime::Handle;

use support::by_hand::post_token_request;
use support::entra::EntraServer;
use support::harness::{ARM, credential, https_client, options, server_runtime};

/// Hits that were not `Ready` on the first poll and went through the fallback runtime.
static FALLBACKS: AtomicU64 = AtomicU64::new(0);

/// One `get_token` call polled in place with a no-op waker. A cache hit is `Ready` on the
/// first poll; anything else (a miss, or no cache) is finished on `fallback` and counted.
/// The calling thread must have entered `fallback`'s context (a miss may spawn or do I/O
/// during that first poll).
#[inline]
fn hit(cred: &ClientCertificateCredential, scope: &str, fallback: &Handle) -> AccessToken {
    let scopes = [scope];
    let mut fut = pin!(cred.get_token(&scopes));
    match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(token) => token.expect("get_token"),
        Poll::Pending => {
            FALLBACKS.fetch_add(1, Ordering::Relaxed);
            fallback.block_on(fut).expect("get_token")
        }
    }
}

fn report_fallbacks(bench: &str) {
    let n = FALLBACKS.swap(0, Ordering::Relaxed);
    if n > 0 {
        eprintln!(
            "note: {bench}: {n} get_token calls were not Ready on the first poll (not cache \
             hits); they were finished on a runtime, so this measures the uncached path"
        );
    }
}

/// Credentials of `cached/get_token/100creds/*`.
const CREDENTIALS: usize = 100;

thread_local! {
    /// The next credential a `100creds` thread hits.
    static NEXT_CREDENTIAL: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Thread counts of `cached/get_token/{n}threads` (the machine's cores and beyond, for
/// the latency-vs-threads plot).
const THREADS: [usize; 3] = [2, 4, 8];

/// `threads` OS threads, each running `work` `iters` times, all at once. Returns the
/// window covering them all (earliest start to latest end), so criterion's time/iter
/// `tN` = window / iters is the time one call takes as each thread sees it, the
/// aggregate throughput is `N / tN` calls/s, and with `t1` the one-thread time, the
/// scaling is `N * t1 / tN` (N = perfect, 1 = fully serialised). `setup` runs first on
/// each thread, outside the window; what it returns is kept until the thread's end.
fn on_threads<G, S, W>(threads: usize, iters: u64, setup: S, work: W) -> Duration
where
    S: Fn() -> G + Sync,
    W: Fn() + Sync,
{
    let barrier = Barrier::new(threads);
    let spans: Vec<(Instant, Instant)> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(|| {
                    let _kept = setup();
                    barrier.wait();
                    let start = Instant::now();
                    for _ in 0..iters {
                        work();
                    }
                    (start, Instant::now())
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("bench thread"))
            .collect()
    });
    let start = spans.iter().map(|s| s.0).min().expect("spans");
    let end = spans.iter().map(|s| s.1).max().expect("spans");
    end - start
}

/// The floor and the hit on two threads, alternating in short rounds (so the machine's
/// load falls on both alike): each round's time per call, and the median ratio.
fn interleaved(
    floor: &(dyn Fn() -> AccessToken + Sync),
    hit: &(dyn Fn() + Sync),
    fallback: &Handle,
) {
    let round = |work: &(dyn Fn() + Sync)| {
        on_threads(2, 200_000, || fallback.enter(), work).as_nanos() as f64 / 200_000.0
    };
    let floor_work = || drop(black_box(floor()));
    let mut ratios = Vec::new();
    for r in 0..21 {
        let (f, h) = if r % 2 == 0 {
            let f = round(&floor_work);
            (f, round(hit))
        } else {
            let h = round(hit);
            (round(&floor_work), h)
        };
        eprintln!(
            "pairs: round {r}: floor {f:.1} ns, hit {h:.1} ns, ratio {:.2}",
            h / f
        );
        ratios.push(h / f);
    }
    ratios.sort_by(f64::total_cmp);
    eprintln!(
        "pairs: median ratio hit/floor on two threads {:.2}",
        ratios[ratios.len() / 2]
    );
}

/// The machine's own scaling, as context for the 2-thread target: ten foldhash runs over
/// a 38-byte scope per call (about as long as a cache hit), each thread with its own
/// hasher, so nothing is shared and nothing is written to shared memory. Its `2 * t1 /
/// t2` is what two threads of pure computation get on this machine at the time of the
/// run (a VM's two vCPUs may share a physical core, or a busy host).
fn bench_machine(c: &mut Criterion) {
    use std::hash::{BuildHasher, Hasher};
    let state = hashbrown::DefaultHashBuilder::default();
    let work = || {
        let mut acc = 0u64;
        for i in 0..10u8 {
            let mut h = state.build_hasher();
            h.write(black_box(ARM).as_bytes());
            h.write_u8(i);
            acc ^= h.finish();
        }
        black_box(acc);
    };
    let mut g = c.benchmark_group("machine/hash");
    g.bench_function("1thread", |b| b.iter(work));
    g.bench_function("2threads", |b| {
        b.iter_custom(|iters| on_threads(2, iters, || (), work))
    });
    g.finish();
}

/// With `MSI_BENCH_RECORDER=prometheus` (and the `metrics` feature), install the
/// Prometheus recorder `msi-credential` uses before measuring: the cost of recording. Without
/// it, no recorder: the facade's no-op one, as in an application that installs none.
fn recorder_if_asked() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let asked = std::env::var("MSI_BENCH_RECORDER").ok();
        #[cfg(feature = "metrics")]
        if asked.as_deref() == Some("prometheus") {
            metrics_exporter_prometheus::PrometheusBuilder::new()
                .install_recorder()
                .expect("install the Prometheus recorder");
            msi_dataplane::telemetry::describe();
            eprintln!("metrics: the Prometheus recorder is installed");
            return;
        }
        if asked.is_some() {
            eprintln!("metrics: MSI_BENCH_RECORDER needs the `metrics` feature and `prometheus`");
        }
        let feature = if cfg!(feature = "metrics") {
            "on"
        } else {
            "off"
        };
        eprintln!("metrics: feature {feature}, no recorder");
    });
}

fn bench_cached(c: &mut Criterion) {
    recorder_if_asked();
    let server_rt = server_runtime();
    let server = server_rt.block_on(EntraServer::start());
    // Finishes calls that are not Ready on the first poll (warm-up misses; every call
    // while there is no cache). Its own client, so no pooled connection crosses runtimes.
    let fallback_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("fallback")
        .enable_all()
        .build()
        .expect("fallback runtime");
    let fallback = fallback_rt.handle().clone();
    let cred = credential(&server, "pem-pkcs8");

    let _entered = fallback.enter();
    let warm = fallback
        .block_on(cred.get_token(&[ARM]))
        .expect("warm-up get_token");
    FALLBACKS.store(0, Ordering::Relaxed);
    black_box(hit(&cred, ARM, &fallback));
    let ready = FALLBACKS.load(Ordering::Relaxed) == 0;
    eprintln!(
        "cached: a warmed get_token is {} on the first poll",
        if ready { "Ready" } else { "NOT Ready" }
    );
    FALLBACKS.store(0, Ordering::Relaxed);

    // The floor: a plain `RwLock<HashMap>` (std's, default hasher) look-up of the same
    // token by its scope, cloned: what any cache of tokens costs at least. Measured just
    // before the hits, with the same harness.
    let floor: RwLock<HashMap<String, AccessToken>> =
        RwLock::new(HashMap::from([(ARM.to_owned(), warm.clone())]));
    let look_up = || {
        let map = floor.read().expect("floor");
        map.get(black_box(ARM)).cloned().expect("floor token")
    };
    let mut f = c.benchmark_group("cached/floor");
    f.bench_function("1thread", |b| b.iter(look_up));
    f.bench_function("2threads", |b| {
        b.iter_custom(|iters| on_threads(2, iters, || (), || drop(black_box(look_up()))))
    });
    f.finish();

    if std::env::var_os("MSI_BENCH_PAIRS").is_some() {
        interleaved(
            &look_up,
            &|| drop(black_box(hit(&cred, black_box(ARM), &fallback))),
            &fallback,
        );
    }

    let mut g = c.benchmark_group("cached/get_token");

    g.bench_function("1thread", |b| {
        b.iter(|| hit(&cred, black_box(ARM), &fallback))
    });
    report_fallbacks("cached/get_token/1thread");

    for threads in THREADS {
        let name = format!("{threads}threads");
        g.bench_function(&name, |b| {
            b.iter_custom(|iters| {
                on_threads(
                    threads,
                    iters,
                    || fallback.enter(),
                    || drop(black_box(hit(&cred, black_box(ARM), &fallback))),
                )
            })
        });
        report_fallbacks(&format!("cached/get_token/{name}"));
    }

    let scopes: Vec<String> = (0..100)
        .map(|i| format!("https://svc{i}.example.com/.default"))
        .collect();
    for scope in &scopes {
        fallback
            .block_on(cred.get_token(&[scope.as_str()]))
            .expect("warm-up get_token");
    }
    FALLBACKS.store(0, Ordering::Relaxed);
    let mut next = 0;
    g.bench_function("100scopes", |b| {
        b.iter(|| {
            let scope = scopes[next].as_str();
            next = if next == 99 { 0 } else { next + 1 };
            hit(&cred, black_box(scope), &fallback)
        })
    });
    report_fallbacks("cached/get_token/100scopes");

    // 100 credentials (each its own cache), every one warmed; each call hits the next.
    let shared = options();
    let creds: Vec<ClientCertificateCredential> = (0..CREDENTIALS)
        .map(|_| support::harness::credential_with(&server, "pem-pkcs8", shared.clone()))
        .collect();
    for cred in &creds {
        fallback
            .block_on(cred.get_token(&[ARM]))
            .expect("warm-up get_token");
    }
    FALLBACKS.store(0, Ordering::Relaxed);
    let rotate = || {
        let i = NEXT_CREDENTIAL.with(|n| {
            let i = n.get();
            n.set(if i + 1 == CREDENTIALS { 0 } else { i + 1 });
            i
        });
        drop(black_box(hit(&creds[i], black_box(ARM), &fallback)));
    };
    g.bench_function("100creds/1thread", |b| b.iter(rotate));
    report_fallbacks("cached/get_token/100creds/1thread");
    g.bench_function("100creds/2threads", |b| {
        b.iter_custom(|iters| on_threads(2, iters, || fallback.enter(), rotate))
    });
    report_fallbacks("cached/get_token/100creds/2threads");

    g.finish();
    drop(_entered);
    server.shutdown();
}

fn bench_cold(c: &mut Criterion) {
    recorder_if_asked();
    // A current-thread caller: its exchanges go to the crate's I/O thread.
    let current_thread = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("client runtime");
    cold_group(c, "cold", &current_thread);
    // A multi-threaded caller: its exchanges run on its own tasks (no hop).
    let multi_thread = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("client runtime");
    cold_group(c, "cold_mt", &multi_thread);
}

/// The cold benches (module docs) with the client side on `client_rt`.
fn cold_group(c: &mut Criterion, group: &str, client_rt: &tokio::runtime::Runtime) {
    let server_rt = server_runtime();
    let server = server_rt.block_on(EntraServer::start());
    server.set_replay_check(false);
    let client = https_client();
    let cred = support::harness::credential_with(
        &server,
        "pem-pkcs8",
        options().with_environment(Environment::default().with_http_client(client.clone())),
    );

    // The raw baseline: the crate's exact request, with a pre-signed assertion.
    let url = reqwest::Url::parse(cred.token_url()).expect("token URL");
    let client_id = cred.client_id().to_owned();
    let client_request_id = uuid::Uuid::new_v4().to_string();
    let assertion = cred.client_assertion().expect("client_assertion");
    let raw = || {
        post_token_request(
            &client,
            url.as_str(),
            &client_id,
            ARM,
            assertion.expose_secret(),
            &client_request_id,
        )
    };
    // Outside the timing: the replayed assertion is accepted (twice, so replay is really
    // off) and the crate's own path works against this server.
    client_rt.block_on(async {
        for _ in 0..2 {
            let (status, body) = raw().await;
            assert_eq!(
                status,
                200,
                "raw baseline: {}",
                String::from_utf8_lossy(&body)
            );
            assert!(
                body.windows(14).any(|w| w == b"\"access_token\""),
                "raw baseline body has no access_token"
            );
        }
        cred.request_token(&[ARM]).await.expect("request_token");
    });
    server.clear_requests();

    let mut g = c.benchmark_group(group);
    g.sample_size(30);
    g.measurement_time(Duration::from_secs(4));

    g.bench_function("get_token", |b| {
        b.to_async(client_rt)
            .iter(|| async { black_box(cred.request_token(&[ARM]).await.expect("request_token")) })
    });
    server.clear_requests();

    g.bench_function("get_token_miss", |b| {
        b.to_async(client_rt).iter(|| async {
            cred.clear_cache();
            black_box(cred.get_token(&[ARM]).await.expect("get_token"))
        })
    });
    server.clear_requests();

    // A herd: 64 callers on one cold scope at once, one request for all of them (counted
    // at the server and printed).
    let before = server.token_requests();
    let mut herds = 0u64;
    g.bench_function("herd_64", |b| {
        b.to_async(client_rt).iter(|| {
            herds += 1;
            let cred = cred.clone();
            async move {
                cred.clear_cache();
                let callers: Vec<_> = (0..64)
                    .map(|_| {
                        let cred = cred.clone();
                        tokio::spawn(async move { cred.get_token(&[ARM]).await })
                    })
                    .collect();
                for caller in callers {
                    black_box(caller.await.expect("task").expect("get_token"));
                }
            }
        })
    });
    let requests = server.token_requests() - before;
    println!(
        "{group}/herd_64: {requests} token requests for {herds} herds of 64 callers ({:.2} per herd)",
        requests as f64 / herds.max(1) as f64
    );
    server.clear_requests();

    // The same miss through the client the crate builds (extra roots: the test CA), which
    // pools its connections on the crate's I/O thread: TLS handshakes per token request
    // are counted at the server and printed (BENCHMARKS.md records them).
    let crate_client = support::harness::credential_with(
        &server,
        "pem-pkcs8",
        ClientCertificateCredentialOptions::default().with_environment(
            Environment::default()
                .with_extra_root_certificates_pem(&EntraServer::ca_pem())
                .expect("test CA"),
        ),
    );
    let (connections, tokens) = (server.connections(), server.tokens_issued());
    g.bench_function("get_token_miss_crate_client", |b| {
        b.to_async(client_rt).iter(|| async {
            crate_client.clear_cache();
            black_box(crate_client.get_token(&[ARM]).await.expect("get_token"))
        })
    });
    let handshakes = server.connections() - connections;
    let requests = server.tokens_issued() - tokens;
    println!(
        "{group}/get_token_miss_crate_client: {handshakes} TLS handshakes for {requests} \
         token requests ({:.4} per request)",
        handshakes as f64 / requests.max(1) as f64
    );
    server.clear_requests();

    g.bench_function("raw_https_round_trip", |b| {
        b.to_async(client_rt).iter(|| async {
            let (status, body) = raw().await;
            debug_assert_eq!(status, 200);
            black_box(body)
        })
    });
    server.clear_requests();

    g.bench_function("sign_only", |b| {
        b.iter(|| black_box(cred.client_assertion().expect("client_assertion")))
    });
    g.finish();

    // Cold requests as they come in a process, apart: an untimed gap after each (the
    // threads on both sides park meanwhile), the miss against the same POST spaced
    // alike. Few iterations: the gaps, not the timed parts, take the time.
    let mut g = c.benchmark_group(format!("{group}_spaced"));
    g.sample_size(10);
    g.warm_up_time(Duration::from_millis(100));
    g.measurement_time(Duration::from_millis(400));
    g.bench_function("get_token_miss", |b| {
        b.to_async(client_rt).iter_custom(|iters| {
            let cred = cred.clone();
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    cred.clear_cache();
                    let start = Instant::now();
                    black_box(cred.get_token(&[ARM]).await.expect("get_token"));
                    total += start.elapsed();
                    tokio::time::sleep(SPACING).await;
                }
                total
            }
        })
    });
    server.clear_requests();
    g.bench_function("raw_https_round_trip", |b| {
        b.to_async(client_rt).iter_custom(|iters| async move {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let start = Instant::now();
                let (status, body) = raw().await;
                total += start.elapsed();
                debug_assert_eq!(status, 200);
                black_box(body);
                tokio::time::sleep(SPACING).await;
            }
            total
        })
    });
    g.finish();
    server.set_replay_check(true);
    server.shutdown();
}

/// The untimed gap after each request of the `*_spaced` groups.
const SPACING: Duration = Duration::from_millis(30);

criterion_group! {
    name = benches;
    config = Criterion::default()
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1));
    targets = bench_cached, bench_machine, bench_cold
}
criterion_main!(benches);

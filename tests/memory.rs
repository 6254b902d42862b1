//! What one loaded credential with ten cached scopes keeps on the heap, measured with a
//! counting global allocator (tests/support/counting.rs), and that dropping it gives
//! every byte back. BENCHMARKS.md records the printed figures
//! (`cargo test --release --test memory -- --nocapture`).
//!
//! Method: the test Entra server runs on a runtime whose threads are not counted; the
//! client side (this thread, and the worker of a multi-threaded runtime) is. One HTTP client is shared, as
//! the crate's default client is one per process, and warmed with a first credential
//! doing the same work, so the runtime, the pooled TLS connection and lazily built
//! statics are at their steady state before the measurement. The measured credential is
//! built from the file (`from_path` + `new`) and fills ten scopes on a thread of its own
//! (with the pool of per-thread records `arc-swap` keeps grown beforehand), so the "after
//! drop" figure is exact. Each request is a task on the runtime's worker, which may still be
//! freeing it when the caller has its answer: each figure is read once the heap holds
//! still.

mod support;

use std::time::Duration;

use msi_dataplane::{
    ClientCertificateCredential, ClientCertificateCredentialOptions, Environment,
    UserAssignedIdentityCredentials,
};
use support::counting::{Counting, count_this_thread, live_blocks, live_bytes};
use support::entra::EntraServer;
use support::fixtures::load_with_endpoint;
use support::harness::{https_client, register};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The figures are process-wide: one test at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

const FIXTURE: &str = "pem-pkcs8";
/// The size of the access tokens the server issues: the large end of Entra app-only
/// tokens (1–2 KB), so the per-scope figure is not flattered by short test tokens.
const TOKEN_LEN: usize = 2048;
const SCOPES: usize = 10;

/// Heap figures of one credential, in bytes, each relative to before it was built.
#[derive(Debug)]
struct Footprint {
    /// After `from_path` + `new` (the parsed file dropped).
    built: i64,
    /// After the first scope's token.
    one_scope: i64,
    /// After all ten.
    ten_scopes: i64,
    /// After dropping the credential (and the thread that used it).
    dropped: i64,
}

fn measure(
    path: &std::path::Path,
    client: &reqwest::Client,
    rt: &tokio::runtime::Runtime,
) -> Footprint {
    let scopes: Vec<String> = (0..SCOPES)
        .map(|i| format!("https://svc{i}.example.com/.default"))
        .collect();
    let before = live_bytes();
    let (built, one_scope, ten_scopes) = std::thread::scope(|s| {
        s.spawn(|| {
            count_this_thread();
            let cred = {
                let creds = UserAssignedIdentityCredentials::from_path(path).unwrap();
                let options = ClientCertificateCredentialOptions::default()
                    .with_environment(Environment::default().with_http_client(client.clone()));
                ClientCertificateCredential::new(&creds, options).unwrap()
            };
            let built = live_bytes() - before;
            rt.block_on(cred.get_token(&[scopes[0].as_str()])).unwrap();
            let one_scope = still_heap() - before;
            for scope in &scopes[1..] {
                rt.block_on(cred.get_token(&[scope.as_str()])).unwrap();
            }
            // Every scope is a hit now.
            for scope in &scopes {
                let token = rt.block_on(cred.get_token(&[scope.as_str()])).unwrap();
                assert_eq!(token.token().len(), TOKEN_LEN);
            }
            let ten_scopes = still_heap() - before;
            (built, one_scope, ten_scopes)
        })
        .join()
        .unwrap()
    });
    // Let the client's connection task settle after the last request.
    rt.block_on(async { tokio::time::sleep(Duration::from_millis(50)).await });
    Footprint {
        built,
        one_scope,
        ten_scopes,
        dropped: still_heap() - before,
    }
}

/// The process's live heap bytes once they have held still for 100 ms (up to 4 s).
fn still_heap() -> i64 {
    let mut last = live_bytes();
    let mut still_for = 0;
    for _ in 0..200 {
        std::thread::sleep(Duration::from_millis(20));
        let now = live_bytes();
        if now == last {
            still_for += 1;
            if still_for == 5 {
                break;
            }
        } else {
            (last, still_for) = (now, 0);
        }
    }
    last
}

#[test]
fn a_credential_with_ten_cached_scopes_is_small_and_dropping_it_frees_everything() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let server = server_rt.block_on(EntraServer::start());
    server.set_access_token_length(TOKEN_LEN);
    register(&server, FIXTURE);
    let dir = std::env::temp_dir().join(format!("msi-dp-memory-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("identity");
    let json = load_with_endpoint(FIXTURE, &server.base_url())
        .to_json()
        .unwrap();
    std::fs::write(&path, json).unwrap();

    count_this_thread();
    // A multi-threaded runtime, as most callers have: each request is a task on its
    // (counted) worker.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .on_thread_start(count_this_thread)
        .enable_all()
        .build()
        .unwrap();
    let client = https_client();

    // `arc-swap` (in the HTTP stack's and the crate's statics) gives each thread that
    // reads or replaces a value a record from a process-wide pool (192 B, reused by later
    // threads, never freed). Which threads touch one here varies from run to run, so the
    // pool is grown first, on uncounted threads: no measured thread then adds a record.
    let holding = std::sync::Barrier::new(4);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                let creds = UserAssignedIdentityCredentials::from_path(&path).unwrap();
                let options = ClientCertificateCredentialOptions::default()
                    .with_environment(Environment::default().with_http_client(client.clone()));
                drop(ClientCertificateCredential::new(&creds, options).unwrap());
                holding.wait();
            });
        }
    });
    // Warm-up: the same work with another credential (same client, same runtime).
    let warm = measure(&path, &client, &rt);
    // The measurement.
    let m = measure(&path, &client, &rt);
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(server.token_requests(), 2 * SCOPES);

    let per_scope = (m.ten_scopes - m.one_scope) / (SCOPES as i64 - 1);
    let chain: i64 = {
        let creds =
            UserAssignedIdentityCredentials::from_path(support::fixtures::credential_path(FIXTURE))
                .unwrap();
        let cert = msi_dataplane::ClientCertificate::from_credentials(&creds).unwrap();
        cert.chain().iter().map(|der| der.len() as i64).sum()
    };
    eprintln!(
        "memory: Rust heap of one credential: built {} B; with 1 scope {} B; with {SCOPES} \
         scopes {} B ({TOKEN_LEN}-byte tokens); per further scope {per_scope} B; after drop \
         {} B. Certificate chain {chain} B of DER. The shared HTTP client's pooled TLS \
         connection: {} B (warm-up run: {warm:?})",
        m.built, m.one_scope, m.ten_scopes, m.dropped, warm.dropped
    );

    // Dropping the credential gives back every byte it took.
    assert_eq!(m.dropped, 0, "bytes left after dropping the credential");
    // A scope holds its token text once, its handle (a reference count and the times),
    // an entry (scope strings, request state) and a table slot: under 1 KiB besides the
    // token.
    assert!(
        per_scope >= TOKEN_LEN as i64,
        "a cached scope ({per_scope} B) must hold its {TOKEN_LEN}-byte token"
    );
    assert!(
        per_scope <= TOKEN_LEN as i64 + 1024,
        "a cached scope costs {per_scope} B: more than its token ({TOKEN_LEN} B) and 1 KiB"
    );
    // The credential itself keeps the chain as DER (1x), the encoded JWS header prefix
    // holding `x5c` (the chain in base64 inside JSON inside base64url: 16/9x), and a few
    // KB of the rest: the credential's own struct, ids, the token URL, the Rust half of
    // the key (its public key; AWS-LC keeps the private key on the C heap, see
    // `the_signing_key_on_the_c_heap`), the empty cache. Measured: 5.9 KB for an 865-byte
    // chain; the bound leaves room for allocator rounding.
    let bound = 4 * chain + 4096;
    assert!(
        m.built <= bound,
        "a built credential takes {} B of Rust heap (bound 4 x {chain} B chain + 4 KiB = \
         {bound} B)",
        m.built
    );
    // With ten scopes: the built credential plus ten scopes, nothing else retained (the
    // requests' transient buffers are gone).
    assert!(
        m.ten_scopes <= m.built + SCOPES as i64 * (TOKEN_LEN as i64 + 1024),
        "{} B with {SCOPES} scopes",
        m.ten_scopes
    );
}

/// glibc's `mallinfo2`: what `malloc` has handed out, whoever called it (the Rust heap
/// goes through `malloc` too).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn malloc_in_use() -> i64 {
    #[repr(C)]
    struct Mallinfo2 {
        arena: usize,
        ordblks: usize,
        smblks: usize,
        hblks: usize,
        hblkhd: usize,
        usmblks: usize,
        fsmblks: usize,
        uordblks: usize,
        fordblks: usize,
        keepcost: usize,
    }
    unsafe extern "C" {
        fn mallinfo2() -> Mallinfo2;
    }
    // SAFETY: glibc ≥ 2.33 (Debian 12 has 2.36); no arguments, returns a plain struct.
    let info = unsafe { mallinfo2() };
    (info.uordblks + info.hblkhd) as i64
}

/// The private key lives on AWS-LC's (C) heap, which the counting allocator does not
/// see; `mallinfo2` sees every `malloc`. Building 50 credentials and signing one
/// assertion with each (AWS-LC completes a key's precomputation on first use), the
/// growth of `malloc`'s figure beyond the Rust heap's (bytes plus the counting
/// allocator's per-block header) is AWS-LC's share, its own per-block overhead included.
/// Only this thread allocates meanwhile (the client is built beforehand, no server is
/// involved), so the figure is steady.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn the_signing_key_on_the_c_heap() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    count_this_thread();
    const N: i64 = 50;
    let creds = load_with_endpoint(FIXTURE, "https://login.microsoftonline.com/");
    let client = https_client();
    let build = || {
        let options = ClientCertificateCredentialOptions::default()
            .with_environment(Environment::default().with_http_client(client.clone()));
        let cred = ClientCertificateCredential::new(&creds, options).unwrap();
        drop(cred.client_assertion().unwrap());
        cred
    };
    let mut kept = Vec::with_capacity(N as usize);
    kept.push(build());
    kept.clear();
    let before = (malloc_in_use(), live_bytes(), live_blocks());
    for _ in 0..N {
        kept.push(build());
    }
    let malloc = (malloc_in_use() - before.0) / N;
    let rust = (live_bytes() - before.1) / N;
    let headers = (live_blocks() - before.2) * 16 / N;
    let c_heap = malloc - rust - headers;
    eprintln!(
        "memory: per credential after one signature: {malloc} B of malloc in use: {rust} B \
         Rust heap (+{headers} B of counting headers) and {c_heap} B on AWS-LC's side (the \
         private key)"
    );
    // An RSA-2048 private key: n, e, d, p, q, dP, dQ, qInv (~1.2 KB of numbers), the
    // Montgomery constants for n, p and q, blinding, and malloc's per-block overhead:
    // a few KB, well under 16 KiB.
    assert!(
        c_heap > 1024 && c_heap < 16 * 1024,
        "AWS-LC key state of {c_heap} B per key is outside 1-16 KiB"
    );
    drop(kept);
}

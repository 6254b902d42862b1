//! Credentials outlive the Tokio runtime they were built or used on: a program that
//! creates and drops runtimes (a `#[tokio::test]` each, a sync program with a runtime per
//! job) keeps getting tokens, and a credential file keeps being followed, or says that it
//! is not.

use crate::support;

use std::time::{Duration, Instant};

use msi_dataplane::{
    ClientCertificateCredential, ClientCertificateCredentialOptions, Environment, ErrorKind,
    ReloadOptions, ReloadOutcome, ReloadStatus, RetryPolicy, UserAssignedIdentityCredential,
};
use support::atomic_writer::{TempDir, write_temp_then_rename};
use support::entra::EntraServer;
use support::fixtures::load_with_endpoint;
use support::harness::{ARM, register};

/// The test server on a runtime of its own, alive for the whole test.
fn http_server(name: &str) -> (tokio::runtime::Runtime, EntraServer) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("server runtime");
    let server = rt.block_on(EntraServer::start_http());
    register(&server, name);
    (rt, server)
}

fn short_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// The crate's shared HTTP client (no client given), no retries: a request that fails on
/// a connection left over from a dead runtime is reported, not silently retried.
fn shared_client_options() -> ClientCertificateCredentialOptions {
    ClientCertificateCredentialOptions::default().with_environment(
        Environment::default()
            .allow_http_loopback(true)
            .with_request_timeout(Duration::from_secs(10))
            .expect("10 s is a valid timeout")
            .with_retry_policy(RetryPolicy::none()),
    )
}

/// Runtimes one after the other, each getting tokens through the crate's client: from a
/// new credential, and from one credential that outlives them all (a cache miss each
/// time: a new scope). `keep_idle`: the earlier runtimes stay alive but are no longer
/// driven (a sync program holding its runtimes); otherwise each is dropped.
fn runtimes_in_sequence(keep_idle: bool) {
    let name = "pem-pkcs8";
    let (_server_rt, server) = http_server(name);
    let creds = load_with_endpoint(name, &server.base_url());
    let shared = ClientCertificateCredential::new(&creds, shared_client_options()).expect("new");
    let scopes = [
        "https://a.example/.default",
        "https://b.example/.default",
        "https://c.example/.default",
    ];
    let mut idle = Vec::new();
    for (round, scope) in scopes.iter().enumerate() {
        let rt = short_runtime();
        rt.block_on(async {
            let fresh =
                ClientCertificateCredential::new(&creds, shared_client_options()).expect("new");
            let token = fresh
                .get_token(&[ARM])
                .await
                .unwrap_or_else(|e| panic!("runtime {round}: a new credential: {e}"));
            assert!(server.issued(token.token()).is_some());
            let token = shared
                .get_token(&[scope])
                .await
                .unwrap_or_else(|e| panic!("runtime {round}: the shared credential: {e}"));
            assert!(server.issued(token.token()).is_some());
        });
        if keep_idle {
            idle.push(rt);
        }
    }
    assert_eq!(server.tokens_issued(), 2 * scopes.len());
    // One pooled connection served every runtime (no new connection per request).
    assert!(
        server.connections() <= 2,
        "{} connections",
        server.connections()
    );
}

/// Over HTTPS, through the crate-built client (the test CA as an extra root): cold tokens
/// (a new scope each) from runtimes that come and go reuse the pooled TLS connection.
#[test]
fn cold_tokens_reuse_one_tls_connection_across_runtimes() {
    let name = "pem-pkcs8";
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("server runtime");
    let server = server_rt.block_on(EntraServer::start());
    register(&server, name);
    let creds = load_with_endpoint(name, &server.base_url());
    let http = Environment::default()
        .with_extra_root_certificates_pem(&EntraServer::ca_pem())
        .expect("test CA");
    let options = ClientCertificateCredentialOptions::default()
        .with_environment(http.with_retry_policy(RetryPolicy::none()));
    let credential = ClientCertificateCredential::new(&creds, options).expect("new");
    let requests = 20;
    for round in 0..4 {
        short_runtime().block_on(async {
            for i in 0..requests / 4 {
                let scope = format!("https://r{round}-{i}.example/.default");
                credential.get_token(&[&scope]).await.expect("token");
            }
        });
    }
    assert_eq!(server.tokens_issued(), requests);
    let per_request = server.connections() as f64 / requests as f64;
    assert!(
        per_request <= 0.15,
        "{} TLS handshakes for {requests} requests",
        server.connections()
    );
}

#[test]
fn runtimes_dropped_in_sequence_each_get_tokens() {
    runtimes_in_sequence(false);
}

#[test]
fn runtimes_left_idle_in_sequence_each_get_tokens() {
    runtimes_in_sequence(true);
}

// ---------------------------------------------------------------------------------------
// the reload task and its runtime
// ---------------------------------------------------------------------------------------

/// A fixture's JSON (the authority is never contacted: these tests get no tokens).
fn fixture_json(name: &str) -> Vec<u8> {
    load_with_endpoint(name, "https://127.0.0.1:9/")
        .to_json()
        .expect("to_json")
        .into_bytes()
}

/// Poll `status()` from this thread (no runtime needed) until `pred` holds.
fn wait_status(
    cred: &UserAssignedIdentityCredential,
    what: &str,
    pred: impl Fn(&ReloadStatus) -> bool,
) -> ReloadStatus {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let s = cred.status();
        if pred(&s) {
            return s;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {s:#?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_credential_whose_runtime_ended_says_it_is_no_longer_watching() {
    let dir = TempDir::new("runtime-ended");
    let path = dir.join("identity");
    std::fs::write(&path, fixture_json("rotation-1")).expect("write");

    let rt = short_runtime();
    let cred = rt
        .block_on(UserAssignedIdentityCredential::new(
            &path,
            ClientCertificateCredentialOptions::default(),
            ReloadOptions::default(),
        ))
        .expect("new");
    assert!(cred.status().watching, "{:#?}", cred.status());
    assert!(cred.status().last_error.is_none());
    drop(rt);

    let s = cred.status();
    assert!(
        !s.watching,
        "the runtime is gone but status says watching: {s:#?}"
    );
    let err = s.last_error.as_ref().expect("an error saying why");
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Abandoned {
                code: "reload_stopped",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.kind().code(), "reload_stopped");
    assert!(err.to_string().contains("runtime"), "{err}");

    // Still serving, and check_now (on another runtime) still works.
    write_temp_then_rename(&path, &fixture_json("rotation-2"));
    let rt = short_runtime();
    assert_eq!(rt.block_on(cred.check_now()), ReloadOutcome::Swapped);
    assert_eq!(cred.status().reloads, 1);
}

#[test]
fn a_dedicated_thread_keeps_following_the_file_after_the_runtime_ends() {
    let dir = TempDir::new("runtime-dedicated");
    let path = dir.join("identity");
    std::fs::write(&path, fixture_json("rotation-1")).expect("write");

    let rt = short_runtime();
    let cred = rt
        .block_on(UserAssignedIdentityCredential::new(
            &path,
            ClientCertificateCredentialOptions::default(),
            ReloadOptions::default()
                .with_debounce(Duration::from_millis(50))
                .with_dedicated_thread(true),
        ))
        .expect("new");
    drop(rt);

    for (round, name) in ["rotation-2", "rotation-3"].into_iter().enumerate() {
        write_temp_then_rename(&path, &fixture_json(name));
        let s = wait_status(&cred, &format!("{name} to be picked up"), |s| {
            s.reloads == round as u64 + 1
        });
        // `Unchanged` if a late event of the same write re-read it after the swap.
        assert!(
            matches!(
                s.last_outcome,
                Some(ReloadOutcome::Swapped | ReloadOutcome::Unchanged)
            ),
            "{s:#?}"
        );
        assert!(s.watching, "{s:#?}");
        assert!(s.last_error.is_none(), "{s:#?}");
    }

    // The task (and its thread) ends on cancel, without an error.
    cred.cancel();
    let s = wait_status(&cred, "the task to stop", |s| !s.watching);
    assert!(s.last_error.is_none(), "{s:#?}");
}

/// A connector layer that notes the name of the thread each connection is opened on:
/// the thread that performs the exchange's I/O.
#[derive(Clone, Default)]
struct ConnectThreads(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

#[derive(Clone)]
struct Noting<S>(S, ConnectThreads);

impl<S> tower_layer::Layer<S> for ConnectThreads {
    type Service = Noting<S>;
    fn layer(&self, inner: S) -> Noting<S> {
        Noting(inner, self.clone())
    }
}

impl<S: tower_service::Service<R>, R> tower_service::Service<R> for Noting<S> {
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;
    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }
    fn call(&mut self, request: R) -> S::Future {
        let name = std::thread::current().name().unwrap_or("?").to_owned();
        self.1.0.lock().unwrap().push(name);
        self.0.call(request)
    }
}

/// A credential over a client of its own whose connections note their thread.
fn noting_credential(
    server: &EntraServer,
    name: &str,
) -> (ConnectThreads, ClientCertificateCredential) {
    let threads = ConnectThreads::default();
    let ca = reqwest::Certificate::from_pem(&EntraServer::ca_pem()).expect("test CA");
    let client = reqwest::Client::builder()
        .tls_certs_only([ca])
        .redirect(reqwest::redirect::Policy::none())
        .pool_max_idle_per_host(0)
        .connector_layer(threads.clone())
        .build()
        .expect("client");
    let creds = load_with_endpoint(name, &server.base_url());
    let options = ClientCertificateCredentialOptions::default().with_environment(
        Environment::default()
            .with_http_client(client)
            .with_retry_policy(RetryPolicy::none()),
    );
    let credential = ClientCertificateCredential::new(&creds, options).expect("new");
    (threads, credential)
}

/// From one multi-threaded runtime, the caller's own workers open the connections and
/// drive the exchanges (no hop to the crate's I/O thread); from a current-thread
/// runtime, the crate's I/O thread does.
#[test]
fn the_exchange_runs_where_the_caller_is_on_a_multi_threaded_runtime() {
    let name = "pem-pkcs8";
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("server runtime");
    let server = server_rt.block_on(EntraServer::start());
    register(&server, name);
    // No idle connection kept: each request opens one, on the thread doing its I/O.
    let (threads, credential) = noting_credential(&server, name);
    let caller = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("caller-worker")
        .enable_all()
        .build()
        .expect("caller runtime");
    caller.block_on(async {
        for i in 0..3 {
            let scope = format!("https://mt{i}.example/.default");
            let credential = credential.clone();
            tokio::spawn(async move { credential.get_token(&[&scope]).await })
                .await
                .unwrap()
                .expect("token");
        }
    });
    let seen = std::mem::take(&mut *threads.0.lock().unwrap());
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen.iter().all(|t| t == "caller-worker"), "{seen:?}");

    short_runtime().block_on(async {
        credential
            .get_token(&["https://ct.example/.default"])
            .await
            .expect("token");
    });
    let seen = threads.0.lock().unwrap().clone();
    assert_eq!(seen, ["msi-dataplane-io"]);
}

/// Multi-threaded runtimes one after the other, each getting a cold token through the
/// crate's shared client without retries: a connection left by a runtime that ended is
/// never used (it closed with its runtime), so no request fails on it.
#[test]
fn multi_threaded_runtimes_dropped_in_sequence_each_get_tokens() {
    let name = "pem-pkcs8";
    let (_server_rt, server) = http_server(name);
    let creds = load_with_endpoint(name, &server.base_url());
    let shared = ClientCertificateCredential::new(&creds, shared_client_options()).expect("new");
    for round in 0..4 {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let scope = format!("https://mt-seq{round}.example/.default");
            let token = shared
                .get_token(&[&scope])
                .await
                .unwrap_or_else(|e| panic!("runtime {round}: {e}"));
            assert!(server.issued(token.token()).is_some());
        });
        // A current-thread caller in between reuses what is pooled (or the I/O thread's).
        short_runtime().block_on(async {
            let scope = format!("https://ct-seq{round}.example/.default");
            shared
                .get_token(&[&scope])
                .await
                .unwrap_or_else(|e| panic!("runtime {round}: {e}"));
        });
    }
    assert_eq!(server.tokens_issued(), 8);
}

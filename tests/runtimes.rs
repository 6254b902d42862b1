//! Credentials outlive the Tokio runtime they were built or used on: a program that
//! creates and drops runtimes (a `#[tokio::test]` each, a sync program with a runtime per
//! job) keeps getting tokens, and a credential file keeps being followed, or says that it
//! is not.

mod support;

use std::time::Duration;

use msi_dataplane::{ClientCertificateCredential, ClientCertificateCredentialOptions, RetryPolicy};
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
    ClientCertificateCredentialOptions::default()
        .allow_http_loopback(true)
        .with_retry_policy(RetryPolicy::none())
        .with_request_timeout(Duration::from_secs(10))
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
}

#[test]
fn runtimes_dropped_in_sequence_each_get_tokens() {
    runtimes_in_sequence(false);
}

#[test]
fn runtimes_left_idle_in_sequence_each_get_tokens() {
    runtimes_in_sequence(true);
}

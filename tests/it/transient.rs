//! "Transient" means a retry can help, for all three clients (token endpoint, MSI data
//! plane, Key Vault store): a refused connection or one closed before the answer is
//! retried; a malformed answer or a certificate the client does not trust is tried once.
//! Attempts are counted on real local servers (accepted connections, requests read) or, for
//! a port where nothing listens, by the waits between attempts on a manual clock.
#![cfg(feature = "keyvault")]

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use msi_dataplane::dataplane::ClientFactory;
use msi_dataplane::keyvault::store::{CredentialStore, StoreOptions};
use msi_dataplane::{
    ClientCertificateCredential, ClientCertificateCredentialOptions, Environment, Error,
    ErrorCategory, ErrorKind, ManualClock, RetryPolicy,
};
use support::entra::EntraServer;
use support::fixtures::load_with_endpoint;
use support::harness::{ARM, credential, https_env};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const AUDIENCE: &str = "https://dataplane.msi-test.example/";
const IDENTITY_PATH: &str = "/subscriptions/1d3e5f7a-9b2c-4d6e-8f0a-2b4c6d8e0f1a/resourcegroups/msi-test/providers/Microsoft.RedHatOpenShift/hcpOpenShiftClusters/cluster-1/credentials/v2/identities";
const IDENTITY_QUERY: &str = "arpid=a&keyid=k&sig=SIGNATURE&sigver=1.0&tid=t";
const UA_ID: &str = "7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d";

/// Three attempts, waits of a millisecond or so.
fn three_attempts() -> RetryPolicy {
    RetryPolicy::default()
        .with_max_attempts(3)
        .with_initial_delay(Duration::from_millis(1))
        .with_max_delay(Duration::from_millis(5))
}

/// What the raw server does once it has read a request.
#[derive(Clone, Copy)]
enum Answer {
    /// A status line, then a header line without a colon: not HTTP.
    MalformedHeader,
    /// Close the connection without a byte of answer.
    Close,
    /// A status line and headers announcing 500 bytes, 11 of them, then close.
    CutBody,
}

/// A TLS server on loopback with the kit's test CA, that answers every request as told,
/// counting the connections it accepted and the requests it read.
struct RawServer {
    url: String,
    connections: Arc<AtomicUsize>,
    requests: Arc<AtomicUsize>,
}

impl RawServer {
    async fn start(answer: Answer) -> RawServer {
        let acceptor = tokio_rustls::TlsAcceptor::from(msi_dataplane_testing::server_tls_config());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicUsize::new(0));
        let (accepted, read) = (connections.clone(), requests.clone());
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                let acceptor = acceptor.clone();
                let read = read.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    if !read_request(&mut tls).await {
                        return;
                    }
                    read.fetch_add(1, Ordering::SeqCst);
                    let bytes: &[u8] = match answer {
                        Answer::MalformedHeader => {
                            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nthis line is no header\r\n\r\n{}"
                        }
                        Answer::Close => b"",
                        Answer::CutBody => {
                            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"access_tok"
                        }
                    };
                    let _ = tls.write_all(bytes).await;
                    let _ = tls.flush().await;
                    let _ = tls.shutdown().await;
                });
            }
        });
        RawServer {
            url: format!("https://{addr}/"),
            connections,
            requests,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

/// Read one request whole (headers, then a `content-length` body), so that the answer is
/// what the client meets, not a connection closed under a request still being sent.
async fn read_request(stream: &mut (impl AsyncReadExt + Unpin)) -> bool {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let Ok(n) = stream.read(&mut chunk).await else {
            return false;
        };
        if n == 0 {
            return false;
        }
        buf.extend_from_slice(&chunk[..n]);
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            continue;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(0);
        if buf.len() >= end + 4 + length {
            return true;
        }
    }
}

/// An https URL on a loopback port where nothing listens.
async fn refusing_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("https://{addr}/")
}

// ---- the three clients, each pointed at a URL ----

/// A token from the endpoint under `authority`.
async fn token_error(authority: &str, http: Environment, clock: Arc<ManualClock>) -> Error {
    let creds = load_with_endpoint("pem-pkcs8", authority);
    let options = ClientCertificateCredentialOptions::default()
        .with_environment(http.with_retry_policy(three_attempts()).with_clock(clock));
    let credential = ClientCertificateCredential::new(&creds, options).unwrap();
    within_seconds(credential.get_token(&[ARM])).await
}

/// The system-assigned identity from a data plane at `base` (its token source never
/// reached: no challenge comes).
async fn data_plane_error(base: &str, http: Environment, clock: Arc<ManualClock>) -> Error {
    let entra = EntraServer::start().await;
    let factory = ClientFactory::new(
        credential(&entra, "pem-pkcs8"),
        AUDIENCE,
        http.with_retry_policy(three_attempts()).with_clock(clock),
    )
    .unwrap();
    let identity_url = format!(
        "{}{IDENTITY_PATH}?{IDENTITY_QUERY}",
        base.trim_end_matches('/')
    );
    let client = factory.client(&identity_url).unwrap();
    within_seconds(client.get_system_assigned_identity_credentials()).await
}

/// A user-assigned identity from a Key Vault at `vault` (through the Azure SDK, whose
/// retry policy the crate's feeds).
async fn key_vault_error(vault: &str, http: Environment) -> Error {
    let entra = EntraServer::start().await;
    let store = CredentialStore::new(
        vault,
        Arc::new(credential(&entra, "pem-pkcs8")),
        StoreOptions::default()
            .with_environment(http.with_retry_policy(three_attempts()))
            .verify_challenge_resource(false),
    )
    .unwrap();
    within_seconds(store.get_user_assigned_identity(UA_ID, None)).await
}

async fn within_seconds<T: std::fmt::Debug>(
    call: impl std::future::Future<Output = Result<T, Error>>,
) -> Error {
    tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("no hang")
        .unwrap_err()
}

fn manual_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(time::OffsetDateTime::now_utc()))
}

/// The error is a transport failure of `service`, transient or not as said, with the
/// category that goes with it.
fn assert_transport(err: &Error, service: &str, transient: bool, category: ErrorCategory) {
    let ErrorKind::Transport(t) = err.kind() else {
        panic!("not a transport failure: {err:?}")
    };
    assert_eq!(t.service, service, "{err}");
    assert_eq!(t.transient, transient, "{err}");
    assert_eq!(err.is_transient(), transient, "{err}");
    assert_eq!(err.category(), category, "{err}");
}

// ---- a refused connection: retried ----

#[tokio::test]
async fn a_refused_connection_is_retried_by_the_token_endpoint() {
    let clock = manual_clock();
    let err = token_error(&refusing_url().await, https_env(), clock.clone()).await;
    assert_transport(&err, "token", true, ErrorCategory::Transient);
    assert_eq!(clock.sleeps().len(), 2, "3 attempts, 2 waits: {err}");
}

#[tokio::test]
async fn a_refused_connection_is_retried_by_the_data_plane() {
    let clock = manual_clock();
    let err = data_plane_error(&refusing_url().await, https_env(), clock.clone()).await;
    assert_transport(&err, "data plane", true, ErrorCategory::Transient);
    assert_eq!(clock.sleeps().len(), 2, "3 attempts, 2 waits: {err}");
}

#[tokio::test]
async fn a_refused_connection_is_transient_for_key_vault() {
    let err = key_vault_error(&refusing_url().await, https_env()).await;
    assert_transport(&err, "Key Vault", true, ErrorCategory::Transient);
}

// ---- a connection closed before the answer: retried (counted on the server) ----

#[tokio::test]
async fn a_connection_closed_before_the_answer_is_retried_by_the_token_endpoint() {
    let server = RawServer::start(Answer::Close).await;
    let err = token_error(&server.url, https_env(), manual_clock()).await;
    assert_transport(&err, "token", true, ErrorCategory::Transient);
    assert_eq!((server.connections(), server.requests()), (3, 3), "{err}");
}

#[tokio::test]
async fn a_connection_closed_before_the_answer_is_retried_by_the_data_plane() {
    let server = RawServer::start(Answer::Close).await;
    let err = data_plane_error(&server.url, https_env(), manual_clock()).await;
    assert_transport(&err, "data plane", true, ErrorCategory::Transient);
    assert_eq!((server.connections(), server.requests()), (3, 3), "{err}");
}

#[tokio::test]
async fn a_connection_closed_before_the_answer_is_retried_by_key_vault() {
    let server = RawServer::start(Answer::Close).await;
    let err = key_vault_error(&server.url, https_env()).await;
    assert_transport(&err, "Key Vault", true, ErrorCategory::Transient);
    assert_eq!((server.connections(), server.requests()), (3, 3), "{err}");
}

// ---- an answer cut short: retried (reqwest reports it as a body it cannot decode; the
// cause, an early end of stream, decides) ----

#[tokio::test]
async fn an_answer_cut_short_is_retried_by_the_token_endpoint() {
    let server = RawServer::start(Answer::CutBody).await;
    let err = token_error(&server.url, https_env(), manual_clock()).await;
    assert_transport(&err, "token", true, ErrorCategory::Transient);
    assert_eq!((server.connections(), server.requests()), (3, 3), "{err}");
}

#[tokio::test]
async fn an_answer_cut_short_is_retried_by_key_vault() {
    let server = RawServer::start(Answer::CutBody).await;
    let err = key_vault_error(&server.url, https_env()).await;
    assert_transport(&err, "Key Vault", true, ErrorCategory::Transient);
    assert_eq!((server.connections(), server.requests()), (3, 3), "{err}");
}

// ---- a malformed answer: tried once ----

#[tokio::test]
async fn a_malformed_header_is_not_retried_by_the_token_endpoint() {
    let server = RawServer::start(Answer::MalformedHeader).await;
    let clock = manual_clock();
    let err = token_error(&server.url, https_env(), clock.clone()).await;
    assert_transport(&err, "token", false, ErrorCategory::Service);
    assert_eq!((server.connections(), server.requests()), (1, 1), "{err}");
    assert!(clock.sleeps().is_empty());
}

#[tokio::test]
async fn a_malformed_header_is_not_retried_by_the_data_plane() {
    let server = RawServer::start(Answer::MalformedHeader).await;
    let clock = manual_clock();
    let err = data_plane_error(&server.url, https_env(), clock.clone()).await;
    assert_transport(&err, "data plane", false, ErrorCategory::Service);
    assert_eq!((server.connections(), server.requests()), (1, 1), "{err}");
    assert!(clock.sleeps().is_empty());
}

#[tokio::test]
async fn a_malformed_header_is_not_retried_by_key_vault() {
    let server = RawServer::start(Answer::MalformedHeader).await;
    let err = key_vault_error(&server.url, https_env()).await;
    assert_transport(&err, "Key Vault", false, ErrorCategory::Service);
    assert_eq!((server.connections(), server.requests()), (1, 1), "{err}");
}

// ---- a certificate the client does not trust: tried once ----

/// The client of `Environment::default()` trusts the system's roots, not the kit's test CA.
fn untrusting() -> Environment {
    Environment::default()
}

#[tokio::test]
async fn an_untrusted_certificate_is_not_retried_by_the_token_endpoint() {
    let server = RawServer::start(Answer::Close).await;
    let clock = manual_clock();
    let err = token_error(&server.url, untrusting(), clock.clone()).await;
    assert_transport(&err, "token", false, ErrorCategory::Configuration);
    assert_eq!((server.connections(), server.requests()), (1, 0), "{err}");
    assert!(clock.sleeps().is_empty());
    let source = std::error::Error::source(&err).unwrap();
    assert!(source.downcast_ref::<reqwest::Error>().is_some());
}

#[tokio::test]
async fn an_untrusted_certificate_is_not_retried_by_the_data_plane() {
    let server = RawServer::start(Answer::Close).await;
    let clock = manual_clock();
    let err = data_plane_error(&server.url, untrusting(), clock.clone()).await;
    assert_transport(&err, "data plane", false, ErrorCategory::Configuration);
    assert_eq!((server.connections(), server.requests()), (1, 0), "{err}");
    assert!(clock.sleeps().is_empty());
}

#[tokio::test]
async fn an_untrusted_certificate_is_not_retried_by_key_vault() {
    let server = RawServer::start(Answer::Close).await;
    let err = key_vault_error(&server.url, untrusting()).await;
    assert_transport(&err, "Key Vault", false, ErrorCategory::Configuration);
    assert_eq!((server.connections(), server.requests()), (1, 0), "{err}");
}

//! Limits, transport safety, expiry awareness and network faults: each ends in a typed
//! error or a served cached token, never a hang or a panic.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use msi_dataplane::limits::{MAX_CERTIFICATES, MAX_RESPONSE_BYTES};
use msi_dataplane::{
    ClientCertificate, ClientCertificateCredential, Environment, ErrorKind, ManualClock,
    RetryPolicy, UserAssignedIdentityCredentials,
};
use support::entra::{EntraServer, Scripted};
use support::fixtures::load_with_endpoint;
use support::harness::{ARM, credential, credential_with, https_env, options, register};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Without retries, and without the failure memory: each scripted answer reaches the
/// next call (tests/it/cache.rs tests the memory).
fn no_retry() -> msi_dataplane::ClientCertificateCredentialOptions {
    options()
        .with_environment(https_env().with_retry_policy(RetryPolicy::none()))
        .with_failure_memory(Duration::ZERO)
}

// ---- limits ----

#[test]
fn too_many_certificates_are_refused() {
    let text = String::from_utf8(support::fixtures::bundle("pem-pkcs8")).unwrap();
    let cert_start = text.find("-----BEGIN CERTIFICATE-----").unwrap();
    let cert_end =
        text.find("-----END CERTIFICATE-----").unwrap() + "-----END CERTIFICATE-----\n".len();
    let cert = &text[cert_start..cert_end];
    let mut big = text.clone();
    for _ in 0..MAX_CERTIFICATES {
        big.push_str(cert);
    }
    let err = ClientCertificate::from_bundle(big.as_bytes()).unwrap_err();
    assert!(
        err.kind().code() == "too_many_certificates"
            && err.to_string().contains(&format!(
                "holds {} certificates; at most {MAX_CERTIFICATES} are accepted",
                MAX_CERTIFICATES + 1
            )),
        "{err}"
    );
}

#[test]
fn deeply_nested_json_is_a_typed_error_not_a_stack_overflow() {
    // An unknown key whose value nests 100,000 deep: skipped without recursion, or cut
    // at serde_json's recursion limit (128) where values are built.
    let deep = |close: bool| {
        let mut json = String::from("{\"future_key\":");
        json.push_str(&"[".repeat(100_000));
        if close {
            json.push_str(&"]".repeat(100_000));
            json.push('}');
        }
        json
    };
    let err = UserAssignedIdentityCredentials::from_slice(deep(false).as_bytes()).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::File { code: "json", .. }),
        "{err}"
    );
    let err = UserAssignedIdentityCredentials::from_slice(deep(true).as_bytes()).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::File {
                code: "missing_fields",
                ..
            }
        ),
        "{err}"
    );
    // In a typed field, the recursion limit answers.
    let mut json = String::from("{\"custom_claims\":{\"xms_az_nwperimid\":");
    json.push_str(&"[".repeat(100_000));
    let err = UserAssignedIdentityCredentials::from_slice(json.as_bytes()).unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::File { code: "json", .. }),
        "{err}"
    );
}

#[tokio::test]
async fn a_huge_token_response_is_refused() {
    let server = EntraServer::start().await;
    let cred = credential_with(&server, "pem-pkcs8", no_retry());
    let huge = format!(
        "{{\"access_token\":\"{}\",\"expires_in\":3599}}",
        "a".repeat(MAX_RESPONSE_BYTES)
    );
    server.enqueue(Scripted::status(200).body(&huge));
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::InvalidAnswer { code: "invalid_token_response", message } if message.contains("exceeds")),
        "{err}"
    );
    // The same for a huge error page.
    server.enqueue(Scripted::status(502).body(&"x".repeat(MAX_RESPONSE_BYTES + 1)));
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::InvalidAnswer {
                code: "invalid_token_response",
                ..
            }
        ),
        "{err}"
    );
}

// ---- transport safety ----

#[tokio::test]
async fn redirects_are_not_followed() {
    // The crate-built client (system roots plus the test CA), not the tests' own client.
    let server = EntraServer::start().await;
    register(&server, "pem-pkcs8");
    let creds = load_with_endpoint("pem-pkcs8", &server.base_url());
    let http = Environment::default()
        .with_extra_root_certificates_pem(&EntraServer::ca_pem())
        .unwrap();
    let options = msi_dataplane::ClientCertificateCredentialOptions::default()
        .with_environment(http.with_retry_policy(RetryPolicy::none()));
    let cred = ClientCertificateCredential::new(&creds, options).unwrap();
    // It works at all...
    cred.request_token(&[ARM]).await.unwrap();
    // ...and a redirect (to the very same, valid, token URL) is not followed.
    let target = cred.token_url().to_owned();
    server.enqueue(Scripted::status(307).header("location", &target));
    let err = cred.request_token(&[ARM]).await.unwrap_err();
    let ErrorKind::TokenEndpoint(e) = err.kind() else {
        panic!("{err:?}")
    };
    assert_eq!(e.status, 307);
    assert_eq!(server.token_requests(), 2, "the redirect was not followed");
}

#[tokio::test]
async fn one_decoded_bundle_serves_two_credentials() {
    let server = EntraServer::start().await;
    register(&server, "pem-pkcs8");
    let creds = load_with_endpoint("pem-pkcs8", &server.base_url());
    let cert = ClientCertificate::from_credentials(&creds).unwrap();
    let copy = cert.clone();
    assert_eq!(copy.thumbprint_sha256(), cert.thumbprint_sha256());
    let make = |cert: ClientCertificate| {
        ClientCertificateCredential::from_parts(
            &server.base_url(),
            creds.tenant_id.as_deref().unwrap(),
            creds.client_id.as_deref().unwrap(),
            cert,
            no_retry(),
        )
        .unwrap()
    };
    let (a, b) = (make(cert), make(copy));
    // The server checks each assertion's signature against the registered leaf.
    let ta = a.request_token(&[ARM]).await.unwrap();
    let tb = b.request_token(&[ARM]).await.unwrap();
    assert_ne!(ta.token(), tb.token());
    assert_eq!(server.token_requests(), 2);
    assert!(server.issued(ta.token()).is_some() && server.issued(tb.token()).is_some());
}

#[tokio::test]
async fn the_default_client_validates_tls_and_refuses_plain_http() {
    // Default options: the crate's shared client with the system roots, which do not
    // include the test CA.
    let server = EntraServer::start().await;
    register(&server, "pem-pkcs8");
    let creds = load_with_endpoint("pem-pkcs8", &server.base_url());
    let cred = ClientCertificateCredential::new(
        &creds,
        msi_dataplane::ClientCertificateCredentialOptions::default()
            .with_environment(Environment::default().with_retry_policy(RetryPolicy::none())),
    )
    .unwrap();
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Transport(_)), "{err}");
    assert!(
        err.to_string().to_lowercase().contains("certificate"),
        "{err}"
    );
    assert_eq!(server.tokens_issued(), 0);

    let http = load_with_endpoint("pem-pkcs8", "http://login.example.test/");
    let err = ClientCertificateCredential::new(&http, Default::default()).unwrap_err();
    assert!(
        matches!(
            err.kind(),
            ErrorKind::File {
                code: "invalid_field",
                field: Some("authentication_endpoint"),
                ..
            }
        ),
        "{err}"
    );
    // The file's `authentication_endpoint`: the credential file is what to fix.
    assert_eq!(err.category(), msi_dataplane::ErrorCategory::CredentialFile);
}

// ---- expiry awareness ----

#[tokio::test]
async fn renew_after_and_near_expiry_warn_once_per_credential() {
    let log = support::log_capture::captured();
    let server = EntraServer::start().await;
    register(&server, "pem-pkcs8");
    let mut creds = load_with_endpoint("pem-pkcs8", &server.base_url());
    let now = time::OffsetDateTime::now_utc();
    creds.renew_after = Some(
        (now - time::Duration::hours(1))
            .format(&time::format_description::well_known::Rfc3339)
            .unwrap(),
    );
    let cred = ClientCertificateCredential::new(&creds, options()).unwrap();
    cred.request_token(&[ARM]).await.unwrap();
    cred.request_token(&[ARM]).await.unwrap();
    let thumb = cred.certificate().thumbprint_sha256_hex();
    let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    let warnings = text
        .lines()
        .filter(|l| l.contains("past its renew_after") && l.contains(&thumb))
        .count();
    assert_eq!(warnings, 1, "{text}");

    // Within the margin of not_after: a different warning, also once.
    let clock = Arc::new(ManualClock::new(
        cred.certificate().not_after() - time::Duration::days(2),
    ));
    let near = credential_with(
        &server,
        "pem-pkcs8",
        options().with_environment(
            https_env()
                .with_clock(clock)
                .with_retry_policy(RetryPolicy::none()),
        ),
    );
    let _ = near.request_token(&[ARM]).await; // the server (real time) refuses the far-future assertion
    let _ = near.request_token(&[ARM]).await;
    let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    assert_eq!(
        text.lines().filter(|l| l.contains("expires soon")).count(),
        1,
        "{text}"
    );
}

#[tokio::test]
async fn an_expired_credential_fails_before_any_network_call() {
    let server = EntraServer::start().await;
    let cred = credential(&server, "expired");
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Expired { .. }), "{err}");
    assert_eq!(server.token_requests(), 0);
}

// ---- faults ----

/// A TLS server (the testing kit's TLS, which the test client trusts) that reads a
/// request, writes the start of an answer, and closes. The counter tells how many requests
/// it read: the handshake worked, so the error comes from the cut answer, not from TLS.
async fn half_answering_server() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio_rustls::TlsAcceptor;
    let acceptor = TlsAcceptor::from(msi_dataplane_testing::server_tls_config());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let read = Arc::new(AtomicUsize::new(0));
    let counter = read.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut buf = vec![0u8; 64 * 1024];
                if matches!(tls.read(&mut buf).await, Ok(n) if n > 0) {
                    counter.fetch_add(1, Ordering::SeqCst);
                }
                let _ = tls
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"access_tok")
                    .await;
                let _ = tls.flush().await;
                // Close mid-body.
            });
        }
    });
    (format!("https://{addr}/"), read)
}

#[tokio::test]
async fn a_server_closing_mid_response_is_a_transport_error() {
    let (authority, read) = half_answering_server().await;
    let creds = load_with_endpoint("pem-pkcs8", &authority);
    let cred = ClientCertificateCredential::new(&creds, no_retry()).unwrap();
    let err = tokio::time::timeout(Duration::from_secs(10), cred.get_token(&[ARM]))
        .await
        .expect("no hang")
        .unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Transport(_)), "{err}");
    assert!(err.is_transient());
    assert_eq!(
        read.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "the request got through TLS: the failure is the cut answer"
    );
}

#[tokio::test]
async fn a_5xx_storm_ends_in_a_typed_error_after_bounded_retries() {
    let server = EntraServer::start().await;
    let clock = Arc::new(ManualClock::new(time::OffsetDateTime::now_utc()));
    let cred = credential_with(
        &server,
        "pem-pkcs8",
        options().with_environment(https_env().with_clock(clock.clone())),
    );
    for status in [500, 502, 503, 504, 500, 502, 503, 504] {
        server.enqueue(Scripted::status(status));
    }
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    assert!(err.is_transient());
    assert_eq!(server.token_requests(), 4);
    assert!(clock.sleeps().iter().sum::<Duration>() <= Duration::from_secs(60));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_during_refresh_are_invisible_while_the_token_is_valid() {
    let server = EntraServer::start().await;
    server.set_token_shape(support::entra::TokenShape {
        expires_in: 500,
        ..Default::default()
    });
    let clock = Arc::new(ManualClock::new(time::OffsetDateTime::now_utc()));
    let options = no_retry();
    let environment = options.environment().clone().with_clock(clock.clone());
    let options = options.with_environment(environment);
    let cred = credential_with(&server, "pem-pkcs8", options);
    let token = cred.get_token(&[ARM]).await.unwrap();
    clock.advance(std::time::Duration::from_secs(260)); // inside the refresh window
    server.enqueue(Scripted::status(200).body("<html>not json</html>"));
    for _ in 0..20 {
        assert_eq!(cred.get_token(&[ARM]).await.unwrap(), token);
    }
}

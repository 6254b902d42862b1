//! From a credential file to a token that the verifying Entra-compatible server accepted.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use msi_dataplane::{
    AssertionAlgorithm, ClientCertificateCredential, Environment, ErrorKind, ManualClock,
    RetryPolicy,
};
use support::entra::{EntraServer, Outcome, Scripted, TokenShape};
use support::fixtures::{GOOD, load, load_with_endpoint};
use support::harness::{
    ARM, credential, credential_with, https_env, leaf_sha256_hex, options, register,
};

/// Without retries, and without the failure memory: each scripted answer reaches the
/// next call (tests/it/cache.rs tests the memory).
fn no_retry() -> msi_dataplane::ClientCertificateCredentialOptions {
    options()
        .with_environment(https_env().with_retry_policy(RetryPolicy::none()))
        .with_failure_memory(Duration::ZERO)
}

#[tokio::test]
async fn every_good_fixture_gets_a_verified_token() {
    let server = EntraServer::start().await;
    for name in GOOD {
        let cred = credential(&server, name);
        let token = cred
            .get_token(&[ARM])
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let issued = server
            .issued(token.token())
            .unwrap_or_else(|| panic!("{name}: token not issued by the server"));
        assert_eq!(
            issued.cert_sha256_hex,
            leaf_sha256_hex(name),
            "{name}: signed with the wrong certificate"
        );
        assert_eq!(issued.alg, "PS256", "{name}");
        assert_eq!(issued.scope, ARM);
        let lifetime = token.expires_on() - time::OffsetDateTime::now_utc();
        assert!(
            lifetime > time::Duration::minutes(55) && lifetime <= time::Duration::seconds(3599),
            "{name}: {lifetime}"
        );
    }
}

#[tokio::test]
async fn ps256_default_sends_x5t_s256_and_full_chain() {
    let server = EntraServer::start().await;
    let cred = credential(&server, "pem-chain");
    assert_eq!(cred.assertion_algorithm(), AssertionAlgorithm::Ps256);
    cred.get_token(&[ARM]).await.unwrap();
    let req = &server.requests()[0];
    assert_eq!(req.alg.as_deref(), Some("PS256"));
    assert_eq!(req.typ.as_deref(), Some("JWT"));
    assert!(req.x5t_s256.is_some());
    assert!(req.x5t.is_none());
    assert_eq!(
        req.x5c_len, 3,
        "leaf + intermediate + root, as in the bundle"
    );
    assert_eq!(req.aud.as_deref(), Some(req.expected_aud.as_str()));
    assert_eq!(req.iss, req.client_id);
    assert_eq!(req.sub, req.client_id);
    let (nbf, iat, exp) = (req.nbf.unwrap(), req.iat.unwrap(), req.exp.unwrap());
    assert_eq!(nbf, iat);
    assert_eq!(exp - iat, 600);
}

#[tokio::test]
async fn rs256_option_sends_x5t() {
    let server = EntraServer::start().await;
    let cred = credential_with(
        &server,
        "pfx-legacy",
        options().with_assertion_algorithm(AssertionAlgorithm::Rs256),
    );
    let token = cred.get_token(&[ARM]).await.unwrap();
    assert_eq!(server.issued(token.token()).unwrap().alg, "RS256");
    let req = &server.requests()[0];
    assert_eq!(req.alg.as_deref(), Some("RS256"));
    assert!(req.x5t.is_some());
    assert!(req.x5t_s256.is_none());
    assert_eq!(req.x5c_len, 2);
}

#[tokio::test]
async fn request_carries_the_form_and_headers() {
    let server = EntraServer::start().await;
    let cred = credential(&server, "pem-pkcs8");
    cred.get_token(&[ARM]).await.unwrap();
    let req = &server.requests()[0];
    assert_eq!(req.method, "POST");
    assert_eq!(req.grant_type.as_deref(), Some("client_credentials"));
    assert_eq!(
        req.client_assertion_type.as_deref(),
        Some("urn:ietf:params:oauth:client-assertion-type:jwt-bearer")
    );
    for field in [
        "grant_type",
        "client_id",
        "scope",
        "client_assertion_type",
        "client_assertion",
    ] {
        assert!(
            req.form_fields.iter().any(|f| f == field),
            "form lacks {field}: {:?}",
            req.form_fields
        );
    }
    let rid = req.header("client-request-id").expect("client-request-id");
    assert!(uuid::Uuid::parse_str(rid).is_ok(), "{rid}");
    assert_eq!(req.header("return-client-request-id"), Some("true"));
    assert_eq!(req.header("x-client-sku"), Some("msi-dataplane"));
    assert_eq!(req.header("x-client-ver"), Some(env!("CARGO_PKG_VERSION")));
    assert_eq!(req.header("x-ms-lib-capability"), Some("retry-after, h429"));
    assert!(
        req.header("content-type")
            .unwrap()
            .starts_with("application/x-www-form-urlencoded")
    );
}

#[tokio::test]
async fn each_token_request_uses_a_fresh_assertion() {
    // The server refuses a replayed jti, so two successes prove two assertions.
    let server = EntraServer::start().await;
    let cred = credential(&server, "pem-pkcs8");
    let a = cred.request_token(&[ARM]).await.unwrap();
    let b = cred.request_token(&[ARM]).await.unwrap();
    assert_ne!(a.token(), b.token());
    let reqs = server.requests();
    assert_ne!(reqs[0].jti, reqs[1].jti);
}

#[tokio::test]
async fn authority_with_a_path_keeps_it() {
    let server = EntraServer::start().await;
    register(&server, "pem-pkcs8");
    let authority = format!("{}regional/prefix/", server.base_url());
    let creds = load_with_endpoint("pem-pkcs8", &authority);
    let cred = ClientCertificateCredential::new(&creds, options()).unwrap();
    assert!(
        cred.token_url()
            .contains("/regional/prefix/72f988bf-86f1-41af-91ab-2d7cd011db47/oauth2/v2.0/token"),
        "{}",
        cred.token_url()
    );
    let token = cred.get_token(&[ARM]).await.unwrap();
    assert!(server.issued(token.token()).is_some());
    let req = &server.requests()[0];
    assert!(req.path.starts_with("/regional/prefix/"), "{}", req.path);
    assert_eq!(req.aud.as_deref(), Some(req.expected_aud.as_str()));
    // With or without a trailing `/`, one `/` before the tenant.
    for authority in [
        server.base_url(),
        server.base_url().trim_end_matches('/').to_owned(),
    ] {
        let creds = load_with_endpoint("pem-pkcs8", &authority);
        let cred = ClientCertificateCredential::new(&creds, options()).unwrap();
        let tenant = creds.tenant_id.as_deref().unwrap();
        let base = server.base_url();
        assert_eq!(
            cred.token_url(),
            format!("{base}{tenant}/oauth2/v2.0/token")
        );
    }
}

#[tokio::test]
async fn response_without_ext_expires_in_and_with_string_numbers() {
    let server = EntraServer::start().await;
    server.set_token_shape(TokenShape {
        expires_in: 7200,
        expires_in_as_string: true,
        ext_expires_in: None,
        refresh_in: Some(3600),
        token_type: None,
    });
    let cred = credential(&server, "pem-pkcs8");
    let before = time::OffsetDateTime::now_utc();
    let token = cred.get_token(&[ARM]).await.unwrap();
    let after = time::OffsetDateTime::now_utc();
    let secs = |d: time::Duration| d.whole_seconds();
    assert!(secs(token.expires_on() - before) >= 7199 && secs(token.expires_on() - after) <= 7200);
    let refresh = token.refresh_on().expect("refresh_in honoured");
    assert!(secs(refresh - before) >= 3599 && secs(refresh - after) <= 3600);
}

#[tokio::test]
async fn aadsts_errors_are_surfaced_with_their_fields() {
    let server = EntraServer::start().await;
    // The server never registered this fixture's certificate: Entra answers AADSTS700027.
    let creds = load_with_endpoint("pfx-aes", &server.base_url());
    server.register_tenant(creds.tenant_id.as_deref().unwrap());
    register(&server, "pem-pkcs8"); // same client id, another certificate
    let cred = ClientCertificateCredential::new(&creds, options()).unwrap();
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    assert!(!err.is_transient());
    let ErrorKind::TokenEndpoint(e) = err.kind() else {
        panic!("{err:?}")
    };
    assert_eq!(e.status, 401);
    assert_eq!(e.error.as_deref(), Some("invalid_client"));
    assert_eq!(e.error_codes, vec![700027]);
    assert_eq!(e.aadsts_code(), Some(700027));
    assert!(
        e.error_description
            .as_deref()
            .unwrap()
            .starts_with("AADSTS700027")
    );
    assert!(e.trace_id.is_some());
    assert!(e.timestamp.is_some());
    // Entra echoes the client-request-id as the correlation id.
    assert_eq!(e.correlation_id, e.client_request_id);
    assert_eq!(
        server.requests()[0].header("client-request-id"),
        e.client_request_id.as_deref()
    );
    let message = err.to_string();
    assert!(
        message.contains("AADSTS700027") && message.contains("401"),
        "{message}"
    );
    assert!(
        !message.contains("eyJ"),
        "no assertion in the message: {message}"
    );
}

/// Entra's description holds its message, then the trace id, correlation id and
/// timestamp on lines of their own (`\r\n`): the error's message is one readable line
/// with Entra's message and each id once.
#[tokio::test]
async fn an_aadsts_refusal_reads_as_one_line_with_each_id_once() {
    let server = EntraServer::start().await;
    let creds = load_with_endpoint("pfx-aes", &server.base_url());
    server.register_tenant(creds.tenant_id.as_deref().unwrap());
    register(&server, "pem-pkcs8"); // same client id, another certificate: AADSTS700027
    let cred = ClientCertificateCredential::new(&creds, options()).unwrap();
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    let ErrorKind::TokenEndpoint(e) = err.kind() else {
        panic!("{err:?}")
    };
    let (trace, correlation) = (
        e.trace_id.clone().unwrap(),
        e.correlation_id.clone().unwrap(),
    );
    let description = e.error_description.clone().unwrap();
    let message = err.to_string();
    assert_eq!(
        message,
        format!(
            "the token endpoint answered HTTP 401 invalid_client: {description} \
             (trace id {trace}, correlation id {correlation})"
        )
    );
    assert!(description.starts_with("AADSTS700027: "), "{description}");
    for trailer in [
        "\\r",
        "\\n",
        "\r",
        "\n",
        "Trace ID",
        "Correlation ID",
        "Timestamp",
    ] {
        assert!(!message.contains(trailer), "{trailer:?} in {message}");
    }
    assert_eq!(message.matches(trace.as_str()).count(), 1, "{message}");
    assert_eq!(
        message.matches(correlation.as_str()).count(),
        1,
        "{message}"
    );
}

#[tokio::test]
async fn invalid_scope_is_a_400_not_transient() {
    let server = EntraServer::start().await;
    let cred = credential(&server, "pem-pkcs8");
    let err = cred
        .get_token(&["https://management.azure.com/user_impersonation"])
        .await
        .unwrap_err();
    let ErrorKind::TokenEndpoint(e) = err.kind() else {
        panic!("{err:?}")
    };
    assert_eq!(e.status, 400);
    assert_eq!(e.aadsts_code(), Some(1002012));
    assert!(!err.is_transient());
}

#[tokio::test]
async fn scripted_503_is_transient_with_retry_after() {
    // With retries off, the 503 reaches the caller with its fields.
    let server = EntraServer::start().await;
    let cred = credential_with(&server, "pem-pkcs8", no_retry());
    server
        .enqueue(Scripted::aadsts(503, "temporarily_unavailable", 90033, "busy").retry_after("7"));
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    assert!(err.is_transient());
    let ErrorKind::TokenEndpoint(e) = err.kind() else {
        panic!("{err:?}")
    };
    assert_eq!(e.status, 503);
    assert_eq!(e.retry_after, Some(Duration::from_secs(7)));
    assert_eq!(e.aadsts_code(), Some(90033));
    // Normal service resumes.
    cred.get_token(&[ARM]).await.unwrap();
}

#[tokio::test]
async fn malformed_and_html_bodies_are_typed_errors() {
    let server = EntraServer::start().await;
    let cred = credential_with(&server, "pem-pkcs8", no_retry());
    server.enqueue(Scripted::status(200).body("{\"access_token\": \"abc\", "));
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
    assert!(!err.to_string().contains("abc"));

    server.enqueue(Scripted::status(200).body(r#"{"token_type":"Bearer","expires_in":3599}"#));
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    assert!(err.to_string().contains("access_token"), "{err}");

    server.enqueue(
        Scripted::status(502)
            .body("<html><body>Bad Gateway</body></html>")
            .header("content-type", "text/html"),
    );
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    let ErrorKind::TokenEndpoint(e) = err.kind() else {
        panic!("{err:?}")
    };
    assert_eq!((e.status, e.error.as_deref()), (502, None));
    assert!(err.is_transient());
}

#[tokio::test]
async fn expired_credential_fails_before_any_request() {
    let server = EntraServer::start().await;
    let cred = credential(&server, "expired");
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    let ErrorKind::Expired { expired_at, now } = *err.kind() else {
        panic!("{err:?}")
    };
    let file_end = load("expired").not_after().unwrap();
    let cert_end = cred.certificate().not_after();
    assert_eq!(expired_at, file_end.map_or(cert_end, |f| f.min(cert_end)));
    assert!(now > expired_at, "{err}");
    assert_eq!(err.kind().code(), "credential_expired");
    assert!(!err.is_transient());
    assert_eq!(server.token_requests(), 0);

    // A valid certificate with the clock past its end: the same, decided by the clock,
    // naming the end (the file's `not_after`) and the clock's time.
    let creds = load("pem-pkcs8");
    let end = creds.not_after().unwrap().unwrap();
    let clock = Arc::new(ManualClock::new(end + time::Duration::seconds(1)));
    let cred = credential_with(
        &server,
        "pem-pkcs8",
        options().with_environment(https_env().with_clock(clock.clone())),
    );
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    assert!(
        matches!(
            *err.kind(),
            ErrorKind::Expired { expired_at, now }
                if expired_at == end.min(cred.certificate().not_after())
                    && now == end + time::Duration::seconds(1)
        ),
        "{err:?}"
    );
    // ... and before its start (beyond the 5 minute skew allowance): its own kind, with
    // the start and the clock's time.
    let early = cred.certificate().not_before() - time::Duration::minutes(6);
    clock.set(early);
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    let ErrorKind::NotYetValid { valid_from, now } = *err.kind() else {
        panic!("{err:?}")
    };
    assert_eq!(valid_from, cred.certificate().not_before());
    assert_eq!(now, early);
    assert_eq!(err.kind().code(), "credential_not_yet_valid");
    assert!(!err.is_transient());
    // Within the skew allowance it is usable.
    clock.set(cred.certificate().not_before() - time::Duration::minutes(4));
    assert!(
        !matches!(
            cred.request_token(&[ARM])
                .await
                .map_err(|e| e.kind().code()),
            Err("credential_not_yet_valid" | "credential_expired")
        ),
        "4 minutes early is within the skew allowance"
    );
    assert_eq!(server.token_requests(), 1);
}

#[tokio::test]
async fn assertion_times_come_from_the_clock() {
    // With the clock 20 minutes ahead, the assertion is not yet valid: the server (on real
    // time, 5 minutes of skew allowed) refuses it with AADSTS700024, which proves
    // nbf/exp come from the clock.
    let server = EntraServer::start().await;
    let clock = Arc::new(ManualClock::new(
        time::OffsetDateTime::now_utc() + time::Duration::minutes(20),
    ));
    let cred = credential_with(
        &server,
        "pem-pkcs8",
        options().with_environment(https_env().with_clock(clock)),
    );
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    let ErrorKind::TokenEndpoint(e) = err.kind() else {
        panic!("{err:?}")
    };
    assert_eq!(e.aadsts_code(), Some(700024));
}

#[tokio::test]
async fn http_authority_needs_the_loopback_opt_in() {
    let server = EntraServer::start_http().await;
    register(&server, "pem-pkcs8");
    let creds = load_with_endpoint("pem-pkcs8", &server.base_url());
    let err = ClientCertificateCredential::new(&creds, options()).unwrap_err();
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
    let cred = ClientCertificateCredential::new(
        &creds,
        options().with_environment(https_env().allow_http_loopback(true)),
    )
    .unwrap();
    let token = cred.get_token(&[ARM]).await.unwrap();
    assert!(server.issued(token.token()).is_some());
}

#[tokio::test]
async fn tls_is_verified() {
    // A client that does not trust the test CA cannot talk to the server.
    let server = EntraServer::start().await;
    register(&server, "pem-pkcs8");
    let creds = load_with_endpoint("pem-pkcs8", &server.base_url());
    let untrusting = reqwest::Client::builder()
        .tls_certs_only([])
        .build()
        .unwrap();
    let cred = ClientCertificateCredential::new(
        &creds,
        msi_dataplane::ClientCertificateCredentialOptions::default()
            .with_environment(Environment::default().with_http_client(untrusting)),
    )
    .unwrap();
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Transport(t) if !t.timeout),
        "{err}"
    );
    // A certificate not trusted is met again by the next attempt: not transient, and
    // which roots to trust is configuration.
    assert!(!err.is_transient());
    assert_eq!(err.category(), msi_dataplane::ErrorCategory::Configuration);
    assert_eq!(server.tokens_issued(), 0);
}

#[tokio::test]
async fn transport_failures_are_typed() {
    // Connection refused: bind a port, then free it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let creds = load_with_endpoint("pem-pkcs8", &format!("https://127.0.0.1:{port}/"));
    let cred = ClientCertificateCredential::new(&creds, no_retry()).unwrap();
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Transport(_)), "{err}");
    // The HTTP client's error is the source, down to the refused connection.
    let source = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<reqwest::Error>())
        .unwrap_or_else(|| panic!("no reqwest::Error source: {err:?}"));
    assert!(source.is_connect(), "{source:?}");
    let mut chain = Vec::new();
    let mut next: Option<&dyn std::error::Error> = Some(&err);
    while let Some(e) = next {
        chain.push(e);
        next = e.source();
    }
    assert!(
        chain.iter().any(|e| e
            .downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)),
        "{err:?}"
    );
    // No secret anywhere in it: not the bundle, not an assertion (a JWS starts `eyJ`).
    let secret = creds.client_secret.as_ref().unwrap().expose_secret();
    for e in &chain {
        for text in [e.to_string(), format!("{e:?}")] {
            assert!(!text.contains(secret) && !text.contains("eyJ"), "{text}");
        }
    }

    // A server slower than the request timeout.
    let server = EntraServer::start().await;
    let cred = credential_with(
        &server,
        "pem-pkcs8",
        no_retry().with_environment(
            https_env()
                .with_retry_policy(RetryPolicy::none())
                .with_request_timeout(Duration::from_millis(300))
                .unwrap(),
        ),
    );
    server.enqueue(Scripted::status(200).delayed(Duration::from_secs(3)));
    let started = std::time::Instant::now();
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Transport(t) if t.timeout),
        "{err}"
    );
    let source = std::error::Error::source(&err).and_then(|s| s.downcast_ref::<reqwest::Error>());
    assert!(source.is_some_and(reqwest::Error::is_timeout), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(3));

    // The server closing the connection without answering.
    server.enqueue(Scripted::close_connection());
    let err = cred.get_token(&[ARM]).await.unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Transport(_)), "{err}");
    assert!(matches!(
        server.requests().last().unwrap().outcome,
        Outcome::Scripted(_)
    ));
}

#[tokio::test]
async fn bad_scopes_are_refused_locally() {
    let server = EntraServer::start().await;
    let cred = credential(&server, "pem-pkcs8");
    for scopes in [&[][..], &[""][..], &["a b"][..]] {
        let err = cred.get_token(scopes).await.unwrap_err();
        assert!(
            matches!(
                err.kind(),
                ErrorKind::Config {
                    code: "invalid_scopes",
                    ..
                }
            ),
            "{scopes:?}"
        );
    }
    assert_eq!(server.token_requests(), 0);
}

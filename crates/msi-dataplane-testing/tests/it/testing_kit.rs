//! The testing kit through its public API only, as a downstream crate uses it: a
//! credential made at run time, a token from the kit's Entra-compatible server, a CSI
//! rotation by the kit's writer, then a token signed by the new certificate; and the
//! kit's protected resource, which answers only tokens issued for its scope.
#![cfg(unix)]

use std::time::Duration;

use msi_dataplane::{
    BundleFormat, ClientCertificateCredentialOptions, Environment, ReloadOptions, ReloadOutcome,
    UserAssignedIdentityCredential,
};
use msi_dataplane_testing::{
    CsiMount, EntraServer, Outcome, ResourceServer, TestCa, TestCertificate, TestIdentity,
};

const ARM: &str = "https://management.azure.com/.default";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_time_credential_token_rotation_then_token_signed_by_the_new_certificate() {
    let server = EntraServer::start().await;
    let identity = TestIdentity::new();
    let ca = TestCa::new("downstream CA");
    let first = TestCertificate::builder().signed_by(&ca);
    server.register(&identity, &first);

    let mut mount = CsiMount::with_credentials(&identity.credentials(
        &first,
        &server.base_url(),
        BundleFormat::Pem,
    ));
    let options = ClientCertificateCredentialOptions::default()
        .with_environment(Environment::default().with_http_client(server.client()));
    let reload = ReloadOptions::default().with_debounce(Duration::from_millis(50));
    let credential = UserAssignedIdentityCredential::new(mount.visible_path(), options, reload)
        .await
        .expect("credential from the mounted file");

    let token = credential.get_token(&[ARM]).await.expect("first token");
    let issued = server.issued(token.token()).expect("issued by the kit");
    assert_eq!(issued.cert_sha256_hex, first.sha256_hex());
    assert_eq!(issued.client_id, identity.client_id);
    assert_eq!(issued.tenant, identity.tenant_id);

    // The MSI service renews: a new key and certificate (PKCS#12 this time), registered
    // with Entra, published by the CSI driver with the `..data` swap.
    let second = TestCertificate::builder().renewing(&first).signed_by(&ca);
    server.register(&identity, &second);
    let mut rx = credential.subscribe();
    mount.rotate_credentials(&identity.credentials(
        &second,
        &server.base_url(),
        BundleFormat::Pkcs12,
    ));
    let status = tokio::time::timeout(
        Duration::from_secs(20),
        rx.wait_for(|s| {
            s.thumbprint_sha256
                .eq_ignore_ascii_case(&second.sha256_hex())
        }),
    )
    .await
    .expect("rotation picked up")
    .expect("status channel open")
    .clone();
    // One swap. The outcome may already read `Unchanged`: after the `..data` swap the
    // writer removes the old `..<timestamp>` directory, and that event's (debounced)
    // re-read finds the new credential already active.
    assert_eq!(status.reloads, 1, "{status:#?}");
    assert!(
        matches!(
            status.last_outcome,
            Some(ReloadOutcome::Swapped | ReloadOutcome::Unchanged)
        ),
        "{status:#?}"
    );
    assert!(status.last_error.is_none(), "{status:#?}");

    // The old certificate is no longer accepted: only the new one can get a token.
    server.clear_certificates(&identity.client_id, &identity.tenant_id);
    server.register(&identity, &second);
    let token = credential
        .get_token(&["https://vault.azure.net/.default"])
        .await
        .expect("token after rotation");
    let issued = server.issued(token.token()).expect("issued");
    assert_eq!(issued.cert_sha256_hex, second.sha256_hex());
    let last = server.requests().pop().expect("recorded request");
    assert_eq!(
        last.matched_cert_sha256.as_deref(),
        Some(second.sha256_hex().as_str())
    );
    assert!(matches!(last.outcome, Outcome::Token(_)));
}

#[tokio::test]
async fn the_server_rejects_an_unregistered_certificate_and_stops_on_drop() {
    let server = EntraServer::start().await;
    let identity = TestIdentity::new();
    let registered = TestCertificate::self_signed();
    let other = TestCertificate::self_signed();
    server.register(&identity, &registered);
    let creds = identity.credentials(&other, &server.base_url(), BundleFormat::Pem);
    let options = ClientCertificateCredentialOptions::default()
        .with_environment(Environment::default().with_http_client(server.client()));
    let credential = msi_dataplane::ClientCertificateCredential::new(&creds, options).unwrap();
    let err = credential
        .get_token(&[ARM])
        .await
        .expect_err("unregistered certificate");
    assert!(err.to_string().contains("AADSTS"), "{err}");
    assert_eq!(server.tokens_issued(), 0);

    let addr = server.addr();
    assert!(addr.ip().is_loopback());
    drop(server);
    // Give the accept loop a moment to see the stop.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        tokio::net::TcpStream::connect(addr).await.is_err(),
        "still listening after drop"
    );
}

#[tokio::test]
async fn the_resource_server_answers_only_valid_tokens_for_its_audience() {
    let entra = EntraServer::start().await;
    let arm = ResourceServer::start(&entra, ResourceServer::ARM_SCOPE).await;
    assert!(arm.addr().ip().is_loopback());
    let identity = TestIdentity::new();
    let cert = TestCertificate::self_signed();
    entra.register(&identity, &cert);
    let creds = identity.credentials(&cert, &entra.base_url(), BundleFormat::Pem);
    let options = ClientCertificateCredentialOptions::default()
        .with_environment(Environment::default().with_http_client(entra.client()));
    let credential = msi_dataplane::ClientCertificateCredential::new(&creds, options).unwrap();
    let arm_token = credential.get_token(&[ARM]).await.unwrap();
    let vault_token = credential
        .get_token(&["https://vault.azure.net/.default"])
        .await
        .unwrap();

    let http = entra.client();
    let url = format!("{}subscriptions", arm.url());
    let call = |token: Option<&str>| {
        let mut request = http.get(&url);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        async move { request.send().await.unwrap() }
    };
    let ok = call(Some(arm_token.token())).await;
    assert_eq!(ok.status(), 200);
    assert_eq!(ok.text().await.unwrap(), r#"{"value":[]}"#);
    for (token, code, reason) in [
        (
            None,
            "AuthenticationFailed",
            "The 'Authorization' header is missing",
        ),
        (
            Some("forged.token"),
            "InvalidAuthenticationToken",
            "The token is malformed: a JWT is three non-empty base64url parts",
        ),
        (
            Some(vault_token.token()),
            "InvalidAuthenticationTokenAudience",
            "The audience 'https://vault.azure.net' is invalid",
        ),
    ] {
        let refused = call(token).await;
        assert_eq!(refused.status(), 401, "{token:?}");
        let challenge = refused.headers()["www-authenticate"].to_str().unwrap();
        assert!(
            challenge.starts_with(&format!(
                "Bearer authorization_uri=\"{}common\"",
                entra.base_url()
            )),
            "{challenge}"
        );
        // RFC 6750: an error code only when a token was sent.
        assert_eq!(
            challenge.contains("error=\"invalid_token\""),
            token.is_some(),
            "{challenge}"
        );
        let body: serde_json::Value = serde_json::from_str(&refused.text().await.unwrap()).unwrap();
        assert_eq!(body["error"]["code"], code, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(reason), "{message}");
    }

    let seen = arm.requests();
    assert_eq!(seen.len(), 4, "{seen:?}");
    assert!(
        seen.iter()
            .all(|r| r.method == "GET" && r.path == "/subscriptions")
    );
    let statuses: Vec<u16> = seen.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [200, 401, 401, 401]);
    let issued = seen[0].issued.as_ref().expect("issued by the kit");
    assert_eq!(issued.cert_sha256_hex, cert.sha256_hex());
    assert_eq!(issued.client_id, identity.client_id);
    assert_eq!(seen[0].bearer_token.as_deref(), Some(arm_token.token()));
    assert_eq!(
        seen[0].claims.as_ref().map(|c| c.aud.as_str()),
        Some("https://management.azure.com")
    );
    assert!(seen[1].issued.is_none() && seen[1].bearer_token.is_none());
    assert!(seen[1].rejection.is_none(), "no token, nothing to reject");
    assert_eq!(seen[2].bearer_token.as_deref(), Some("forged.token"));
    assert!(seen[2].issued.is_none());
    assert!(seen[3].issued.is_some(), "a real token, for another scope");
    assert_eq!(
        seen[3].rejection.as_ref().map(|r| r.code()),
        Some("InvalidAuthenticationTokenAudience")
    );
    // The log's Debug never shows a token.
    let debug = format!("{seen:?}");
    assert!(!debug.contains(arm_token.token()) && !debug.contains("forged.token"));

    arm.clear_requests();
    assert!(arm.requests().is_empty());
    let addr = arm.addr();
    drop(arm);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

//! The testing kit through its public API only, as a downstream crate uses it: a
//! credential made at run time, a token from the kit's Entra-compatible server, a CSI
//! rotation by the kit's writer, then a token signed by the new certificate.
#![cfg(all(feature = "test-util", unix))]

use std::time::Duration;

use msi_dataplane::testing::{
    CsiMount, EntraServer, Outcome, TestCa, TestCertificate, TestIdentity,
};
use msi_dataplane::{
    BundleFormat, ClientCertificateCredentialOptions, ReloadOutcome,
    UserAssignedIdentityCredential, UserAssignedIdentityCredentialOptions,
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
    let options = UserAssignedIdentityCredentialOptions::default()
        .with_client_options(
            ClientCertificateCredentialOptions::default().with_http_client(server.client()),
        )
        .with_debounce(Duration::from_millis(50));
    let credential = UserAssignedIdentityCredential::new(mount.visible_path(), options)
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
    let options = ClientCertificateCredentialOptions::default().with_http_client(server.client());
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

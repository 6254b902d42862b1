//! The kit's waiting helpers, on a real CSI-style mount, the real watcher and the kit's
//! Entra server. Public API only.
#![cfg(unix)]

use std::time::{Duration, Instant};

use msi_dataplane::{
    BundleFormat, ClientCertificateCredentialOptions, Environment, ReloadOptions, ReloadOutcome,
    UserAssignedIdentityCredential,
};
use msi_dataplane_testing::{
    CsiMount, EntraServer, TestCertificate, TestIdentity, wait_for_certificate, wait_for_status,
};

#[tokio::test]
async fn wait_for_certificate_returns_once_the_rotation_is_active() {
    let entra = EntraServer::start().await;
    let identity = TestIdentity::new();
    let old = TestCertificate::self_signed();
    let new = TestCertificate::builder().renewing(&old).self_signed();
    entra.register(&identity, &old);
    entra.register(&identity, &new);
    let file = |cert| identity.credentials(cert, &entra.base_url(), BundleFormat::Pem);
    let mut mount = CsiMount::with_credentials(&file(&old));
    let http = Environment::default().with_http_client(entra.client());
    let options = ClientCertificateCredentialOptions::default().with_environment(http);
    let credential = UserAssignedIdentityCredential::new(
        mount.visible_path(),
        options,
        ReloadOptions::default(),
    )
    .await
    .unwrap();
    // Already there: at once.
    let status = wait_for_certificate(&credential, &old, Duration::from_secs(1)).await;
    assert_eq!(status.reloads, 0);

    mount.rotate_credentials(&file(&new));
    let started = Instant::now();
    let status = wait_for_certificate(&credential, &new, Duration::from_secs(10)).await;
    assert!(
        status
            .thumbprint_sha256
            .eq_ignore_ascii_case(&new.sha256_hex())
    );
    assert_eq!(status.reloads, 1);
    assert!(started.elapsed() < Duration::from_secs(10));

    // A condition that never holds: `Err` with the last status, at the deadline.
    let never = wait_for_status(&credential, Duration::from_millis(50), |s| s.reloads > 5).await;
    assert_eq!(never.unwrap_err().reloads, 1);
}

#[tokio::test]
#[should_panic(expected = "still serves certificate")]
async fn wait_for_certificate_panics_naming_what_it_saw() {
    let entra = EntraServer::start().await;
    let identity = TestIdentity::new();
    let (served, never) = (
        TestCertificate::self_signed(),
        TestCertificate::self_signed(),
    );
    entra.register(&identity, &served);
    let mount = CsiMount::with_credentials(&identity.credentials(
        &served,
        &entra.base_url(),
        BundleFormat::Pem,
    ));
    let credential = UserAssignedIdentityCredential::new(
        mount.visible_path(),
        Default::default(),
        Default::default(),
    )
    .await
    .unwrap();
    wait_for_certificate(&credential, &never, Duration::from_millis(100)).await;
}

#[tokio::test]
async fn wait_for_token_requests_sees_a_background_request() {
    let entra = EntraServer::start().await;
    let identity = TestIdentity::new();
    let cert = TestCertificate::self_signed();
    entra.register(&identity, &cert);
    let file = identity.credentials(&cert, &entra.base_url(), BundleFormat::Pem);
    let http = Environment::default().with_http_client(entra.client());
    let options = ClientCertificateCredentialOptions::default().with_environment(http);
    let credential = msi_dataplane::ClientCertificateCredential::new(&file, options).unwrap();
    let task = tokio::spawn(async move {
        credential
            .get_token(&["https://management.azure.com/.default"])
            .await
    });
    assert_eq!(
        entra
            .wait_for_token_requests(1, Duration::from_secs(10))
            .await,
        1
    );
    task.await.unwrap().unwrap();
}

/// A mount named as the CSI driver names it, and an in-place write through its symlinks,
/// which the reloading credential follows (the debounced path, not the `..data` swap).
#[tokio::test]
async fn an_in_place_write_through_the_mount_s_symlinks_is_picked_up() {
    let entra = EntraServer::start().await;
    let identity = TestIdentity::new();
    let old = TestCertificate::self_signed();
    let new = TestCertificate::builder().renewing(&old).self_signed();
    let file = |cert| identity.credentials(cert, &entra.base_url(), BundleFormat::Pem);
    let mount = CsiMount::with_credentials_named("uamsi-cpo", &file(&old));
    assert!(mount.visible_path().ends_with("uamsi-cpo"));
    let ts_before = mount.current_ts_dir().to_owned();
    let credential = UserAssignedIdentityCredential::new(
        mount.visible_path(),
        Default::default(),
        Default::default(),
    )
    .await
    .unwrap();
    mount.write_in_place(&msi_dataplane_testing::credentials_json(&file(&new)));
    let link = std::fs::symlink_metadata(mount.visible_path()).unwrap();
    assert!(link.file_type().is_symlink(), "the link stays a link");
    assert_eq!(mount.current_ts_dir(), ts_before, "no swap");
    wait_for_certificate(&credential, &new, Duration::from_secs(10)).await;
}

/// The fixture in one call: a token from the mounted file, its HTTP settings and store
/// options for the kit's vault, a renewal taken up, and a distrusted certificate refused.
#[tokio::test]
async fn the_identity_fixture_wires_everything_to_the_kit() {
    use msi_dataplane::keyvault::store::CredentialStore;
    use msi_dataplane_testing::{IdentityFixture, KeyVaultServer};

    let mut fixture = IdentityFixture::start().await;
    assert!(
        fixture
            .mount
            .visible_path()
            .ends_with(format!("uamsi-{}", fixture.identity.client_id))
    );
    let token = fixture
        .credential
        .get_token(&["https://management.azure.com/.default"])
        .await
        .unwrap();
    let issued = fixture.entra.issued(token.token()).unwrap();
    assert_eq!(issued.cert_sha256_hex, fixture.certificate.sha256_hex());

    let vault = KeyVaultServer::start(&fixture.entra, &fixture.identity.tenant_id).await;
    let credential = std::sync::Arc::new(fixture.credential.clone());
    let store = CredentialStore::new(
        &vault.url(),
        credential,
        msi_dataplane::keyvault::store::StoreOptions::default()
            .with_environment(fixture.environment())
            .verify_challenge_resource(false),
    )
    .unwrap();
    assert!(store.list().await.unwrap().is_empty());

    let renewed = TestCertificate::builder()
        .renewing(&fixture.certificate)
        .self_signed();
    let status = fixture
        .rotate_to(renewed.clone(), BundleFormat::Pkcs12)
        .await;
    assert_eq!(status.thumbprint_sha256, renewed.sha256_hex());
    assert_eq!(fixture.certificate.sha256_hex(), renewed.sha256_hex());

    fixture.distrust();
    let e = fixture
        .credential
        .get_token(&["https://graph.microsoft.com/.default"])
        .await
        .unwrap_err();
    assert_eq!(e.service_code().as_deref(), Some("AADSTS700027"), "{e}");
}

/// A rotation the credential refuses as not newer: the waiter's panic gives that as the
/// reason (there is no reload error to show).
#[tokio::test]
async fn wait_for_certificate_says_a_rotation_was_not_newer() {
    let entra = EntraServer::start().await;
    let identity = TestIdentity::new();
    let older = TestCertificate::self_signed();
    let newer = TestCertificate::builder().renewing(&older).self_signed();
    entra.register(&identity, &older);
    entra.register(&identity, &newer);
    let file = |cert| identity.credentials(cert, &entra.base_url(), BundleFormat::Pem);
    let mut mount = CsiMount::with_credentials(&file(&newer));
    let credential = UserAssignedIdentityCredential::new(
        mount.visible_path(),
        ClientCertificateCredentialOptions::default()
            .with_environment(Environment::default().with_http_client(entra.client())),
        ReloadOptions::default().with_debounce(Duration::from_millis(20)),
    )
    .await
    .unwrap();
    // Back to the older certificate: checked and refused as not newer.
    mount.rotate_credentials(&file(&older));
    wait_for_status(&credential, Duration::from_secs(10), |s| {
        s.last_outcome == Some(ReloadOutcome::NotNewer)
    })
    .await
    .expect("the rotation is checked");
    let waiting = tokio::spawn(async move {
        wait_for_certificate(&credential, &older, Duration::from_millis(50)).await;
    });
    let panic = waiting.await.unwrap_err().into_panic();
    let message = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(message.contains("still serves certificate"), "{message}");
    assert!(
        message.contains("found a credential not newer than the active one"),
        "{message}"
    );
    assert!(!message.contains("last reload error: none"), "{message}");
}

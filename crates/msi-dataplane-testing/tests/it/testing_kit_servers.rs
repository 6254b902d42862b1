//! The testing kit's data plane and Key Vault servers through the public API only, as a
//! downstream crate uses them: the data plane issues an identity made at run time → the
//! store puts it in the kit's Key Vault → the data plane rotates it → renewal stores the
//! new version; the issue log and the stored versions tell what happened. Then: rotating
//! every identity, and both servers stopping when dropped.

use std::sync::Arc;
use std::time::Duration;

use msi_dataplane::dataplane::{ClientFactory, UserAssignedIdentitiesRequest};
use msi_dataplane::keyvault::renewal::RenewalOutcome;
use msi_dataplane::keyvault::store::{CredentialStore, StoreOptions};
use msi_dataplane::{
    BundleFormat, ClientCertificateCredential, ClientCertificateCredentialOptions, Environment,
    UserAssignedIdentityCredentials,
};
use msi_dataplane_testing::{
    DataPlaneServer, EntraServer, KeyVaultServer, TestCertificate, TestIdentity,
};

const RID: &str = "/subscriptions/0b1c2d3e-0000-4000-8000-000000000001/resourcegroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/cpo";
const ARM: &str = "https://management.azure.com/.default";

/// The managing service's application, registered with `entra`.
fn app_credential(entra: &EntraServer, app: &TestIdentity) -> ClientCertificateCredential {
    let cert = TestCertificate::self_signed();
    entra.register(app, &cert);
    let creds = app.credentials(&cert, &entra.base_url(), BundleFormat::Pem);
    let options = ClientCertificateCredentialOptions::default()
        .with_environment(Environment::default().with_http_client(entra.client()));
    ClientCertificateCredential::new(&creds, options).expect("app credential")
}

async fn token_cert(entra: &EntraServer, creds: &UserAssignedIdentityCredentials) -> String {
    let options = ClientCertificateCredentialOptions::default()
        .with_environment(Environment::default().with_http_client(entra.client()));
    let credential = ClientCertificateCredential::new(creds, options).expect("identity credential");
    let token = credential.get_token(&[ARM]).await.expect("token");
    entra
        .issued(token.token())
        .expect("issued by the kit")
        .cert_sha256_hex
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_store_rotate_renew_with_the_issue_log_and_stored_versions() {
    let entra = EntraServer::start().await;
    let app = TestIdentity::new();
    let tenant = app.tenant_id.clone();
    let dp = DataPlaneServer::start(&entra, &tenant, DataPlaneServer::AUDIENCE).await;
    let vault = KeyVaultServer::start(&entra, &tenant).await;
    let service = app_credential(&entra, &app);
    let http = Environment::default().with_http_client(entra.client());
    let factory =
        ClientFactory::new(service.clone(), DataPlaneServer::AUDIENCE, http.clone()).unwrap();
    let client = factory.client(&dp.identity_url()).unwrap();
    let store = CredentialStore::new(
        &vault.url(),
        Arc::new(service),
        StoreOptions::default()
            .with_environment(http)
            .verify_challenge_resource(false),
    )
    .unwrap();

    // 1. The data plane issues the identity made at run time.
    let (identity, made) = dp.create_user_assigned(RID);
    assert_eq!(identity.tenant_id, tenant);
    let first = dp.certificate(RID).expect("a run-time certificate");
    assert_eq!(
        made.sha256_hex(),
        first.sha256_hex(),
        "the certificate it returned"
    );
    let issued = client
        .get_user_assigned_identities_credentials(&UserAssignedIdentitiesRequest::new([RID]))
        .await
        .unwrap();
    let creds = issued
        .user_assigned_identity(RID)
        .expect("the identity")
        .clone();
    assert_eq!(
        creds.client_id.as_deref(),
        Some(identity.client_id.as_str())
    );
    let log = dp.issued();
    assert_eq!(log.len(), 1, "{log:?}");
    assert_eq!(log[0].resource_id.as_deref(), Some(RID));
    assert_eq!(
        log[0].client_id.as_deref(),
        Some(identity.client_id.as_str())
    );
    assert_eq!(
        log[0].cert_sha256_hex.as_deref(),
        Some(first.sha256_hex().as_str())
    );
    assert_eq!(log[0].not_before, creds.not_before);
    // Its certificate works at the Entra server (the data plane registered it).
    assert_eq!(token_cert(&entra, &creds).await, first.sha256_hex());

    // 2. The store puts it in the vault: one version, the format's tags, the value.
    let put = store
        .put_user_assigned_identity("cpo", &creds)
        .await
        .unwrap();
    let name = put.name.clone();
    assert_eq!(name, "uamsi-cpo");
    let stored = vault.secret(&name).expect("stored");
    assert_eq!(stored.versions.len(), 1);
    let v1 = &stored.versions[0];
    assert_eq!(Some(&v1.version), put.version.as_ref());
    assert_eq!(
        v1.tags.as_ref().unwrap()["renew_after"],
        creds.renew_after.clone().unwrap()
    );
    assert_eq!(v1.not_before, Some(first.not_before().unix_timestamp()));
    let value = vault
        .secret_value(&name, Some(&v1.version))
        .expect("a value");
    assert_eq!(
        UserAssignedIdentityCredentials::from_slice(value.as_bytes()).unwrap(),
        creds
    );

    // 3. The data plane rotates: a later certificate, also registered with Entra.
    let second = dp.rotate(RID);
    assert!(second.not_before() > first.not_before());
    assert_ne!(second.sha256_hex(), first.sha256_hex());
    assert_eq!(
        dp.certificate(RID).unwrap().sha256_hex(),
        second.sha256_hex()
    );

    // 4. Renewal asks the data plane again and stores the newer credentials.
    let outcome = store.renew(&client, &name).await.unwrap();
    assert!(
        matches!(outcome, RenewalOutcome::Stored { .. }),
        "{outcome:?}"
    );
    let log = dp.issued();
    assert_eq!(log.len(), 2, "{log:?}");
    assert_eq!(
        log[1].cert_sha256_hex.as_deref(),
        Some(second.sha256_hex().as_str())
    );
    assert!(log[1].not_before > log[0].not_before, "{log:?}");
    let stored = vault.secret(&name).unwrap();
    assert_eq!(stored.versions.len(), 2);
    assert!(
        stored.versions[1].not_before > stored.versions[0].not_before,
        "{stored:?}"
    );
    let latest = vault.latest_value(&name).unwrap();
    let renewed = UserAssignedIdentityCredentials::from_slice(latest.as_bytes()).unwrap();
    assert_eq!(token_cert(&entra, &renewed).await, second.sha256_hex());

    // 5. Again: nothing newer, nothing stored (the data plane was still asked).
    let again = store.renew(&client, &name).await.unwrap();
    assert!(
        matches!(again, RenewalOutcome::NotNewer { .. }),
        "{again:?}"
    );
    assert_eq!(vault.secret(&name).unwrap().versions.len(), 2);
    assert_eq!(dp.issued().len(), 3);

    // 6. Deleted secrets are inspectable too, without their value.
    store.delete(&name).await.unwrap();
    assert!(vault.secret(&name).is_none());
    assert!(vault.secret_value(&name, None).is_none());
    let deleted = vault.deleted_secrets();
    assert_eq!(deleted.len(), 1);
    assert_eq!(deleted[0].secret.name, name);
    assert_eq!(deleted[0].secret.versions.len(), 2);
    assert!(
        deleted[0]
            .recovery_id
            .ends_with("/deletedsecrets/uamsi-cpo")
    );
    assert_eq!(store.list_deleted().await.unwrap().len(), 1);
}

#[tokio::test]
async fn rotate_all_rotates_every_run_time_identity_and_leaves_json_ones() {
    let entra = EntraServer::start().await;
    let dp = DataPlaneServer::start(&entra, "contoso.example", DataPlaneServer::AUDIENCE).await;
    let other = RID.replace("/cpo", "/ingress");
    dp.create_user_assigned(RID);
    dp.create_user_assigned(&other);
    dp.create_system_assigned();
    dp.add_user_assigned("/given/as/json", serde_json::json!({"client_id": "x"}));
    let before = (
        dp.certificate(RID).unwrap(),
        dp.certificate(&other).unwrap(),
        dp.system_assigned_certificate().unwrap(),
    );
    assert_eq!(dp.rotate_all(), 3);
    assert!(dp.certificate(RID).unwrap().not_before() > before.0.not_before());
    assert!(dp.certificate(&other).unwrap().not_before() > before.1.not_before());
    assert!(dp.system_assigned_certificate().unwrap().not_before() > before.2.not_before());
    assert!(dp.certificate("/given/as/json").is_none());
}

#[tokio::test]
async fn the_data_plane_and_the_vault_bind_loopback_and_stop_when_dropped() {
    let entra = EntraServer::start().await;
    let dp = DataPlaneServer::start(&entra, "contoso.example", DataPlaneServer::AUDIENCE).await;
    let vault = KeyVaultServer::start(&entra, "contoso.example").await;
    let (dp_addr, vault_addr) = (dp.addr(), vault.addr());
    assert!(dp_addr.ip().is_loopback() && vault_addr.ip().is_loopback());
    // Serving: an unauthenticated request gets the challenge.
    for url in [dp.identity_url(), vault.url()] {
        let answer = entra.client().get(&url).send().await.unwrap();
        assert_eq!(answer.status(), 401, "{url}");
        assert!(answer.headers().contains_key("www-authenticate"));
    }
    // A clone keeps a server up; dropping the last handle stops it.
    let dp_clone = dp.clone();
    drop(dp);
    assert!(tokio::net::TcpStream::connect(dp_addr).await.is_ok());
    drop(dp_clone);
    drop(vault);
    tokio::time::sleep(Duration::from_millis(100)).await;
    for addr in [dp_addr, vault_addr] {
        assert!(
            tokio::net::TcpStream::connect(addr).await.is_err(),
            "{addr} still listening after drop"
        );
    }
    // The Entra server they held is still up for its own handle.
    assert!(tokio::net::TcpStream::connect(entra.addr()).await.is_ok());
}

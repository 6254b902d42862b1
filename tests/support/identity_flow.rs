//! The whole identity flow on loopback, producer to consumer, shared by
//! `tests/identity_flow.rs` and `examples/identity_flow.rs`:
//!
//! managed identities file → data plane issues the control-plane operator's credentials →
//! the store puts them in Key Vault → a CSI-style writer gets the secret's value and
//! publishes it the way kubelet's AtomicWriter does → `UserAssignedIdentityCredential`
//! on that path gets a token (verified against that certificate) → the data plane rotates
//! the identity → renewal stores the new version → the writer swaps it in → the next token
//! is signed by the new certificate, with no failed `get_token` in between.
#![allow(dead_code)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use msi_dataplane::dataplane::{ClientFactory, ClientOptions, UserAssignedIdentitiesRequest};
use msi_dataplane::hypershift::Component;
use msi_dataplane::managed_identities::ManagedIdentities;
use msi_dataplane::renewal::needing_renewal;
use msi_dataplane::store::{CredentialStore, StoreOptions};
use msi_dataplane::{
    ClientCertificateCredential, ClientCertificateCredentialOptions, RenewalOutcome,
    UserAssignedIdentityCredential, UserAssignedIdentityCredentialOptions,
    UserAssignedIdentityCredentials,
};

use msi_dataplane::testing::{DataPlaneServer, KeyVaultServer};

use super::atomic_writer::AtomicDir;
use super::entra::EntraServer;

const AUDIENCE: &str = DataPlaneServer::AUDIENCE;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
pub const IDENTITY: &str = "/subscriptions/1d3e5f7a-9b2c-4d6e-8f0a-2b4c6d8e0f1a/resourcegroups/msi-test/providers/Microsoft.ManagedIdentity/userAssignedIdentities/control-plane-operator";
const ARM: &str = "https://management.azure.com/.default";

/// What the flow observed, for the test to check.
#[derive(Debug)]
pub struct FlowReport {
    pub secret_name: String,
    pub versions_stored: usize,
    pub first_cert_sha256: String,
    pub second_cert_sha256: String,
    pub expected_first: String,
    pub expected_second: String,
    pub token_calls: usize,
    pub token_failures: usize,
    pub renewal: RenewalOutcome,
    pub steps: Vec<String>,
}

fn https_client() -> Result<reqwest::Client, BoxError> {
    let ca = reqwest::Certificate::from_pem(&EntraServer::ca_pem())?;
    Ok(reqwest::Client::builder()
        .tls_certs_only([ca])
        .redirect(reqwest::redirect::Policy::none())
        .build()?)
}

/// Run the flow; `print` writes each step to stdout as it happens.
pub async fn run(print: bool) -> Result<FlowReport, BoxError> {
    let mut steps = Vec::new();
    let mut step = |text: String| {
        if print {
            println!("{text}");
        }
        steps.push(text);
    };

    // 0. Where HyperShift starts: the managed identities file.
    let file = ManagedIdentities::from_slice(&std::fs::read(format!(
        "{ROOT}/fixtures/hypershift/managed-identities.json"
    ))?)?;
    let cpo = file
        .component(Component::ControlPlaneOperator)
        .ok_or("the file has no controlPlaneOperator")?
        .clone();
    let secret_name = cpo.credentials_secret_name.clone();
    let identifier = secret_name
        .strip_prefix("uamsi-")
        .ok_or("the credentials secret is not a uamsi- secret")?
        .to_owned();
    step(format!(
        "1. managed identities file: vault {} (tenant {}), controlPlaneOperator client {} -> secret {secret_name}",
        file.key_vault.name, file.key_vault.tenant_id, cpo.client_id
    ));

    // The local services: Entra, the data plane, the vault (in the file's tenant).
    let tenant = file.key_vault.tenant_id.clone();
    let entra = EntraServer::start().await;
    let dp = DataPlaneServer::start(&entra, &tenant, AUDIENCE).await;
    // The identity's key and certificate are made at run time and registered with Entra.
    dp.create_user_assigned(IDENTITY);
    let expected_first = dp
        .certificate(IDENTITY)
        .ok_or("the data plane has no certificate for the identity")?
        .sha256_hex();
    let vault = KeyVaultServer::start(&entra, &tenant).await;
    let http = https_client()?;

    // The managing service's own credential (fixture pem-pkcs8) for the data plane and the vault.
    let app_file = UserAssignedIdentityCredentials::from_path(format!(
        "{ROOT}/fixtures/credentials/pem-pkcs8.json"
    ))?;
    let app_client_id = app_file.client_id.clone().unwrap_or_default();
    entra.register_certificate_file(
        &app_client_id,
        &tenant,
        format!("{ROOT}/fixtures/certs/pem-pkcs8.leaf.pem"),
    );
    let app = ClientCertificateCredential::from_parts(
        &entra.base_url(),
        &tenant,
        &app_client_id,
        msi_dataplane::ClientCertificate::from_credentials(&app_file)?,
        ClientCertificateCredentialOptions::default().with_http_client(http.clone()),
    )?;
    let factory = ClientFactory::new(
        app.clone(),
        AUDIENCE,
        ClientOptions::default().with_http_client(http.clone()),
    )?;
    let dataplane = factory.client(&dp.identity_url())?;
    let store = CredentialStore::new(
        &vault.url(),
        Arc::new(app),
        StoreOptions::default()
            .with_http_client(http.clone())
            .verify_challenge_resource(false),
    )?;

    // 2. The data plane issues the identity's credentials.
    let issued = dataplane
        .get_user_assigned_identities_credentials(&UserAssignedIdentitiesRequest::new([IDENTITY]))
        .await?;
    let identity = issued
        .user_assigned_identity(IDENTITY)
        .ok_or("the data plane did not return the identity")?;
    step(format!(
        "2. data plane issued credentials: not_before {}, renew_after {}",
        identity.not_before.as_deref().unwrap_or("?"),
        identity.renew_after.as_deref().unwrap_or("?")
    ));

    // 3. The store puts them in Key Vault.
    let put = store
        .put_user_assigned_identity(&identifier, identity)
        .await?;
    step(format!(
        "3. stored in Key Vault as {} version {}",
        put.name,
        put.version.as_deref().unwrap_or("?")
    ));

    // 4. The CSI driver's part: read the value, publish it with AtomicWriter's ..data swap.
    let (value, _) = store.get_value(&secret_name, None).await?;
    let mut mount = AtomicDir::new(&secret_name, value.expose_secret().as_bytes());
    step(format!(
        "4. CSI writer published {} ({} via ..data)",
        mount.visible_path().display(),
        mount.current_ts_dir()
    ));

    // 5. The component's reloading credential gets a token, verified against that certificate.
    let credential = UserAssignedIdentityCredential::new(
        mount.visible_path(),
        UserAssignedIdentityCredentialOptions::default().with_client_options(
            ClientCertificateCredentialOptions::default().with_http_client(http.clone()),
        ),
    )
    .await?;
    let token = credential.get_token(&[ARM]).await?;
    let first = entra
        .issued(token.token())
        .ok_or("the token was not issued by the test Entra")?;
    step(format!(
        "5. token from the mounted file, signed by certificate {}",
        &first.cert_sha256_hex[..16]
    ));

    // Keep asking for tokens from here on: none may fail across the rotation.
    let calls = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let poller = {
        let (credential, calls, failures, stop) = (
            credential.clone(),
            calls.clone(),
            failures.clone(),
            stop.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                calls.fetch_add(1, Ordering::Relaxed);
                if credential.get_token(&[ARM]).await.is_err() {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };

    // 6. The data plane rotates the identity (Entra knows both certificates meanwhile).
    let expected_second = dp.rotate(IDENTITY).sha256_hex();
    step(format!(
        "6. data plane rotated the identity (new certificate {})",
        &expected_second[..16]
    ));

    // 7. The managing service's schedule: list, see what is due at the new renew point, renew.
    let listed = store.list().await?;
    let at = time::OffsetDateTime::parse(
        identity.renew_after.as_deref().unwrap_or_default(),
        &time::format_description::well_known::Rfc3339,
    )?;
    let plan = needing_renewal(&listed, at);
    let renewal = store.renew(&dataplane, &secret_name).await?;
    match &renewal {
        RenewalOutcome::Stored {
            properties,
            previous_not_before,
            not_before,
            ..
        } => step(format!(
            "7. renewal: {} due at renew_after; stored version {} (not_before {previous_not_before} -> {not_before})",
            plan.due.len(),
            properties.version.as_deref().unwrap_or("?")
        )),
        other => step(format!("7. renewal did nothing: {other:?}")),
    }

    // 8. The CSI driver's next sync swaps the new version in.
    let (value, _) = store.get_value(&secret_name, None).await?;
    mount.rotate(value.expose_secret().as_bytes());
    step(format!(
        "8. CSI writer swapped in {} via ..data",
        mount.current_ts_dir()
    ));

    // 9. The next token comes from the new certificate.
    let deadline = Instant::now() + Duration::from_secs(20);
    let second = loop {
        let token = credential.get_token(&[ARM]).await?;
        let issued = entra.issued(token.token()).ok_or("unknown token")?;
        if issued.cert_sha256_hex == expected_second || Instant::now() > deadline {
            break issued;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stop.store(true, Ordering::Relaxed);
    poller.await?;
    let token_calls = calls.load(Ordering::Relaxed);
    let token_failures = failures.load(Ordering::Relaxed);
    step(format!(
        "9. next token signed by certificate {}; {token_calls} get_token calls during the rotation, {token_failures} failed",
        &second.cert_sha256_hex[..16]
    ));

    let _ = Path::new(ROOT);
    Ok(FlowReport {
        versions_stored: vault.version_count(&secret_name),
        secret_name,
        first_cert_sha256: first.cert_sha256_hex,
        second_cert_sha256: second.cert_sha256_hex,
        expected_first,
        expected_second,
        token_calls,
        token_failures,
        renewal,
        steps,
    })
}

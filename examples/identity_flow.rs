//! The whole identity flow on loopback, producer to consumer: a HyperShift managed
//! identities file → the MSI data plane issues the control-plane operator's credentials →
//! the credential store puts them in Key Vault → a CSI-style writer publishes the secret
//! the way kubelet's AtomicWriter does → `UserAssignedIdentityCredential` gets a token →
//! the data plane rotates the identity → renewal stores the new version → the writer
//! swaps it in → the next token is signed by the new certificate, and no `get_token` call
//! failed across the rotation.
//!
//! The producer side's metrics, as an operator would scrape them: the flow installs the
//! Prometheus recorder (`metrics-exporter-prometheus`) before building any credential,
//! and ends by writing its scrape (the text format `promtool check metrics` reads): the
//! data plane and Key Vault calls, the renewal, the token requests and the credential
//! gauges of both credentials. It goes to the file named by the first argument, or to
//! stdout.
//!
//! Every service is a server of the testing kit (the
//! `msi-dataplane-testing` crate) on 127.0.0.1: Entra, the data plane and Key Vault, over HTTPS with the
//! kit's CA; every key and certificate is made at run time. The flow checks each step and
//! fails (exit code 1) when one goes wrong; `cargo test` runs it as a test too.
//!
//! ```text
//! cargo run --example identity_flow --features keyvault,metrics -- flow.prom
//! promtool check metrics < flow.prom
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use msi_dataplane::dataplane::{ClientFactory, UserAssignedIdentitiesRequest};
use msi_dataplane::hypershift::Component;
use msi_dataplane::hypershift::managed_identities::ManagedIdentities;
use msi_dataplane::keyvault::renewal::{RenewalOutcome, needing_renewal};
use msi_dataplane::keyvault::store::{CredentialStore, StoreOptions};
use msi_dataplane::telemetry;
use msi_dataplane::{
    BundleFormat, ClientCertificateCredential, ClientCertificateCredentialOptions, Environment,
    ReloadOptions, UserAssignedIdentityCredential, rfc3339,
};
use msi_dataplane_testing::{
    CsiMount, DataPlaneServer, EntraServer, KeyVaultServer, TestCertificate, TestIdentity,
};

/// HyperShift's managed identities file for a test cluster.
const MANAGED_IDENTITIES: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fixtures/hypershift/managed-identities.json"
);
/// The control-plane operator's user-assigned identity.
const IDENTITY: &str = "/subscriptions/1d3e5f7a-9b2c-4d6e-8f0a-2b4c6d8e0f1a/resourcegroups/msi-test/providers/Microsoft.ManagedIdentity/userAssignedIdentities/control-plane-operator";
const ARM_SCOPE: &str = "https://management.azure.com/.default";

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> ExitCode {
    let written = flow().await.and_then(|scrape| {
        match std::env::args_os().nth(1) {
            Some(path) => {
                std::fs::write(&path, scrape)?;
                println!("10. metrics written to {}", path.to_string_lossy());
            }
            None => println!("10. metrics:\n{scrape}"),
        }
        Ok(())
    });
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `Err(what)` unless `ok`.
fn check(ok: bool, what: impl FnOnce() -> String) -> Result<(), BoxError> {
    if ok { Ok(()) } else { Err(what().into()) }
}

/// The whole flow; its metrics' scrape when every step went as it should.
async fn flow() -> Result<String, BoxError> {
    // 0. The metrics recorder, before any credential is built: each credential then sets
    //    its series at 0 as it is built, and `initialize` the ones known in advance.
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()?;
    telemetry::describe();
    telemetry::initialize();

    // 1. Where HyperShift starts: the managed identities file names the vault and the
    //    control-plane operator's secret.
    let file = ManagedIdentities::from_slice(&std::fs::read(MANAGED_IDENTITIES)?)?;
    let cpo = file
        .component(Component::ControlPlaneOperator)
        .ok_or("the file has no controlPlaneOperator")?
        .clone();
    let secret_name = cpo.credentials_secret_name.clone();
    let identifier = secret_name
        .strip_prefix("uamsi-")
        .ok_or("the credentials secret is not a uamsi- secret")?;
    println!(
        "1. managed identities file: vault {} (tenant {}), controlPlaneOperator client {} -> secret {secret_name}",
        file.key_vault.name, file.key_vault.tenant_id, cpo.client_id
    );

    // The local services, in the file's tenant: Entra, the data plane (which makes the
    // identity's key and certificate now and registers them with Entra) and the vault.
    let tenant = file.key_vault.tenant_id.clone();
    let entra = EntraServer::start().await;
    let dp = DataPlaneServer::start(&entra, &tenant, DataPlaneServer::AUDIENCE).await;
    dp.create_user_assigned(IDENTITY);
    let first_sha256 = dp
        .certificate(IDENTITY)
        .ok_or("the data plane has no certificate for the identity")?
        .sha256_hex();
    let vault = KeyVaultServer::start(&entra, &tenant).await;
    // Every client trusts the kit's test CA.
    let http = Environment::default().with_http_client(entra.client());

    // The managing service's own application credential, for the data plane and the vault.
    let app = TestIdentity {
        tenant_id: tenant.clone(),
        ..TestIdentity::new()
    };
    let app_certificate = TestCertificate::self_signed();
    entra.register(&app, &app_certificate);
    let app_credential = ClientCertificateCredential::new(
        &app.credentials(&app_certificate, &entra.base_url(), BundleFormat::Pem),
        ClientCertificateCredentialOptions::default().with_environment(http.clone()),
    )?;
    let factory = ClientFactory::new(
        app_credential.clone(),
        DataPlaneServer::AUDIENCE,
        http.clone(),
    )?;
    let dataplane = factory.client(&dp.identity_url())?;
    let store = CredentialStore::new(
        &vault.url(),
        Arc::new(app_credential),
        StoreOptions::default()
            .with_environment(http.clone())
            .verify_challenge_resource(false),
    )?;

    // 2. The data plane issues the identity's credentials.
    let issued = dataplane
        .get_user_assigned_identities_credentials(&UserAssignedIdentitiesRequest::new([IDENTITY]))
        .await?;
    let identity = issued
        .user_assigned_identity(IDENTITY)
        .ok_or("the data plane did not return the identity")?;
    println!(
        "2. data plane issued credentials: not_before {}, renew_after {}",
        identity.not_before.as_deref().unwrap_or("?"),
        identity.renew_after.as_deref().unwrap_or("?")
    );

    // 3. The store puts them in Key Vault.
    let put = store
        .put_user_assigned_identity(identifier, identity)
        .await?;
    println!(
        "3. stored in Key Vault as {} version {}",
        put.name,
        put.version.as_deref().unwrap_or("?")
    );

    // 4. The CSI driver's part: read the value, publish it with AtomicWriter's ..data swap.
    let (value, _) = store.get_value(&secret_name, None).await?;
    let mut mount = CsiMount::new(&secret_name, value.expose_secret().as_bytes());
    println!(
        "4. CSI writer published {} ({} via ..data)",
        mount.visible_path().display(),
        mount.current_ts_dir()
    );

    // 5. The component's reloading credential gets a token, signed by that certificate.
    let credential = UserAssignedIdentityCredential::new(
        mount.visible_path(),
        ClientCertificateCredentialOptions::default().with_environment(http.clone()),
        ReloadOptions::default(),
    )
    .await?;
    let token = credential.get_token(&[ARM_SCOPE]).await?;
    let signer = |token: &str| {
        entra
            .issued(token)
            .map(|issued| issued.cert_sha256_hex)
            .ok_or("the token was not issued by the test Entra")
    };
    let first = signer(token.token())?;
    check(first == first_sha256, || {
        format!("the first token is signed by {first}, not by the issued certificate")
    })?;
    println!(
        "5. token from the mounted file, signed by certificate {}",
        &first[..16]
    );

    // Keep asking for tokens from here on, as a busy component does: none may fail
    // across the rotation.
    let calls = Arc::new(AtomicUsize::new(0));
    let failures = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let poller = tokio::spawn({
        let (credential, calls, failures, stop) = (
            credential.clone(),
            calls.clone(),
            failures.clone(),
            stop.clone(),
        );
        async move {
            while !stop.load(Ordering::Relaxed) {
                calls.fetch_add(1, Ordering::Relaxed);
                if credential.get_token(&[ARM_SCOPE]).await.is_err() {
                    failures.fetch_add(1, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });

    // 6. The data plane rotates the identity (Entra knows both certificates meanwhile).
    let second_sha256 = dp.rotate(IDENTITY).sha256_hex();
    println!(
        "6. data plane rotated the identity (new certificate {})",
        &second_sha256[..16]
    );

    // 7. The managing service's schedule: list, see what is due at the renew point, renew.
    let listed = store.list().await?;
    let renew_at = time::OffsetDateTime::parse(
        identity.renew_after.as_deref().unwrap_or_default(),
        &time::format_description::well_known::Rfc3339,
    )?;
    let due = needing_renewal(&listed, renew_at).due.len();
    let RenewalOutcome::Stored {
        properties,
        previous_not_before,
        not_before,
        ..
    } = store.renew(&dataplane, &secret_name).await?
    else {
        return Err("renewal stored nothing".into());
    };
    println!(
        "7. renewal: {due} due at renew_after; stored version {} (not_before {} -> {})",
        properties.version.as_deref().unwrap_or("?"),
        rfc3339(previous_not_before),
        rfc3339(not_before)
    );
    let versions = vault.version_count(&secret_name);
    check(versions == 2, || {
        format!("{versions} versions stored, not 2")
    })?;

    // 8. The CSI driver's next sync swaps the new version in.
    let (value, _) = store.get_value(&secret_name, None).await?;
    mount.rotate(value.expose_secret().as_bytes());
    println!(
        "8. CSI writer swapped in {} via ..data",
        mount.current_ts_dir()
    );

    // 9. The next token comes from the new certificate (within 20 s).
    let deadline = Instant::now() + Duration::from_secs(20);
    let second = loop {
        let signed_by = signer(credential.get_token(&[ARM_SCOPE]).await?.token())?;
        if signed_by == second_sha256 || Instant::now() > deadline {
            break signed_by;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    stop.store(true, Ordering::Relaxed);
    poller.await?;
    let (calls, failures) = (
        calls.load(Ordering::Relaxed),
        failures.load(Ordering::Relaxed),
    );
    println!(
        "9. next token signed by certificate {}; {calls} get_token calls during the rotation, {failures} failed",
        &second[..16]
    );
    check(second == second_sha256, || {
        format!("after the swap, tokens are still signed by {second}")
    })?;
    check(calls > 0 && failures == 0, || {
        format!("{failures} of {calls} get_token calls failed during the rotation")
    })?;
    Ok(metrics.render())
}

/// The values the flow implies in its scrape (CI runs the program and checks the scrape
/// it writes with Prometheus's own `promtool check metrics`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_flow_with_a_rotation_and_no_failed_token_request() {
    let scrape = flow().await.unwrap_or_else(|e| panic!("{e}"));
    let value = |name: &str, labels: &[(&str, &str)]| {
        sample(&scrape, name, labels)
            .unwrap_or_else(|| panic!("no {name} {labels:?} in:\n{scrape}"))
    };
    let ok = |operation| {
        [
            ("operation", operation),
            ("outcome", "success"),
            ("error_code", "none"),
        ]
    };
    // The data plane: the issue (step 2) and the renewal's request (step 7).
    assert_eq!(
        value(telemetry::DATAPLANE_REQUESTS, &ok("get_user_assigned")),
        2.0
    );
    // Key Vault: the put (3), the reads for the CSI writer (4, 8), the listing and the
    // renewal (7), which stores the new version (a second put) after reading the stored one.
    for (operation, n) in [("put", 2.0), ("get", 3.0), ("list", 1.0), ("renew", 1.0)] {
        assert_eq!(
            value(telemetry::KEYVAULT_REQUESTS, &ok(operation)),
            n,
            "{operation}"
        );
    }
    // Nothing failed, and the counters a rule reads were there at 0.
    assert!(!scrape.contains("outcome=\"transient\"") && !scrape.contains("outcome=\"refused\""));
    // The renewal: one stored; none refused for not being newer, none failed.
    let renewals = telemetry::RENEWALS;
    assert_eq!(value(renewals, &[("outcome", "renewed")]), 1.0);
    assert_eq!(value(renewals, &[("outcome", "not_newer")]), 0.0);
    assert_eq!(value(renewals, &[("outcome", "failed")]), 0.0);
}

/// The value of the sample `name` with exactly `labels` in a Prometheus text scrape.
#[cfg(test)]
fn sample(scrape: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut want: Vec<String> = labels.iter().map(|(k, v)| format!("{k}=\"{v}\"")).collect();
    want.sort();
    scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, "}"));
            let mut have: Vec<String> = rest
                .trim_end_matches('}')
                .split(',')
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect();
            have.sort();
            (metric == name && have == want).then(|| value.parse().ok())?
        })
}

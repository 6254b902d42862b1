//! The spans operators' traces get: `token_request`, `credential_reload`,
//! `dataplane_request` and `keyvault_request`, each closed with its fields, and none
//! holding a token. Public API only, on the testing kit; one subscriber for the process.
#![cfg(all(unix, feature = "keyvault"))]

mod support;

use std::sync::{Arc, Mutex};

use msi_dataplane::BundleFormat;
use msi_dataplane::dataplane::{ClientFactory, UserAssignedIdentitiesRequest};
use msi_dataplane::keyvault::store::CredentialStore;
use msi_dataplane_testing::{
    DataPlaneServer, IdentityFixture, KeyVaultServer, Match, Outcome, Scripted, TestCertificate,
};
use tracing_subscriber::fmt::format::FmtSpan;

/// Every event and span close of the process, as text.
fn captured() -> &'static Arc<Mutex<Vec<u8>>> {
    support::log_capture::captured_with(FmtSpan::CLOSE)
}

/// The closing lines of spans named `name` that mention `needle`, waiting (5 s at most)
/// for at least one: a span closes when its task lets go of it, which may be just after
/// the caller got its answer.
async fn closed(name: &str, needle: &str) -> Vec<String> {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        let text = String::from_utf8_lossy(&captured().lock().unwrap()).into_owned();
        let lines: Vec<String> = text
            .lines()
            .filter(|l| {
                l.contains(&format!("{name}{{")) && l.contains(": close") && l.contains(needle)
            })
            .map(str::to_owned)
            .collect();
        if !lines.is_empty() || std::time::Instant::now() > end {
            return lines;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

const UA: &str = "/subscriptions/1d3e5f7a-9b2c-4d6e-8f0a-2b4c6d8e0f1a/resourcegroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/spans";
const VAULT: &str = "https://vault.azure.net/.default";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_operation_closes_a_span_with_its_fields_and_no_secret() {
    captured();
    let mut fx = IdentityFixture::start().await;
    let cid = fx.identity.client_id.clone();
    let tenant = fx.identity.tenant_id.clone();

    // Token requests: a success, then an AADSTS refusal.
    fx.credential
        .get_token(&["https://management.azure.com/.default"])
        .await
        .unwrap();
    let refusal = fx
        .entra
        .on(Match::any().client_id(&cid).scope(VAULT))
        .respond(Scripted::aadsts(401, "invalid_client", 700027, "no"))
        .expect(1)
        .mount_scoped();
    assert!(fx.credential.get_token(&[VAULT]).await.is_err());
    drop(refusal);
    let ok = closed("token_request", &cid).await;
    let ok: Vec<&String> = ok
        .iter()
        .filter(|l| l.contains("outcome=\"success\""))
        .collect();
    assert!(!ok.is_empty(), "{ok:?}");
    for field in [
        format!("client_id={cid}"),
        format!("tenant=\"{tenant}\""),
        "scope=https://management.azure.com/.default".to_owned(),
        "attempt=1".to_owned(),
        "duration_ms=".to_owned(),
    ] {
        assert!(ok[0].contains(&field), "{field} in {}", ok[0]);
    }
    let refused = closed("token_request", "error_code=\"AADSTS700027\"").await;
    assert!(
        refused
            .iter()
            .any(|l| l.contains(&cid) && l.contains("outcome=\"refused\"")),
        "{refused:?}"
    );

    // A reload: the rotation.
    let next = TestCertificate::builder()
        .renewing(&fx.certificate)
        .self_signed();
    fx.rotate_to(next, BundleFormat::Pem).await;
    let reloads = closed("credential_reload", "outcome=\"swapped\"").await;
    assert!(
        reloads
            .iter()
            .any(|l| l.contains(&cid) && l.contains("reason=\"none\"") && l.contains("trigger=")),
        "{reloads:?}"
    );

    // A data plane and a Key Vault operation.
    let dp = DataPlaneServer::start(&fx.entra, &tenant, DataPlaneServer::AUDIENCE).await;
    dp.create_user_assigned(UA);
    let options = fx.environment();
    let factory =
        ClientFactory::new(fx.credential.clone(), DataPlaneServer::AUDIENCE, options).unwrap();
    factory
        .client(&dp.identity_url())
        .unwrap()
        .get_user_assigned_identities_credentials(&UserAssignedIdentitiesRequest::new([UA]))
        .await
        .unwrap();
    let vault = KeyVaultServer::start(&fx.entra, &tenant).await;
    let store = CredentialStore::new(
        &vault.url(),
        Arc::new(fx.credential.clone()),
        msi_dataplane::keyvault::store::StoreOptions::default()
            .with_environment(fx.environment())
            .verify_challenge_resource(false),
    )
    .unwrap();
    assert!(store.get("absent-secret", None).await.is_err());
    let dp_spans = closed("dataplane_request", "operation=\"get_user_assigned\"").await;
    assert!(
        dp_spans.iter().any(|l| l.contains("outcome=\"success\"")),
        "{dp_spans:?}"
    );
    let kv_spans = closed("keyvault_request", "operation=\"get\"").await;
    assert!(
        kv_spans
            .iter()
            .any(|l| l.contains("outcome=\"refused\"") && l.contains("error_code=\"404\"")),
        "{kv_spans:?}"
    );

    // No token reached a span or an event.
    let text = String::from_utf8_lossy(&captured().lock().unwrap()).into_owned();
    let tokens: Vec<String> = fx
        .entra
        .requests()
        .into_iter()
        .filter_map(|r| match r.outcome {
            Outcome::Token(t) => Some(t),
            _ => None,
        })
        .collect();
    assert!(tokens.len() >= 3);
    for token in tokens {
        assert!(!text.contains(&token), "a token in the trace");
    }
}

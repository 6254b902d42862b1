//! The kit's scripted answers: matchers, answer counts, `clear_scripts` and expectations
//! on the Entra, data plane and Key Vault servers, driven by the crate's own clients over
//! HTTPS. Public API only.
#![cfg(unix)]

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use msi_dataplane::dataplane::{ClientFactory, UserAssignedIdentitiesRequest};
use msi_dataplane::keyvault::store::CredentialStore;
use msi_dataplane::{
    BundleFormat, ClientCertificateCredential, ClientCertificateCredentialOptions, Environment,
    RetryPolicy,
};
use msi_dataplane_testing::{
    DataPlaneServer, EntraServer, Expected, IdentityFixture, KeyVaultServer, Match, Outcome,
    Scripted, TestCertificate, TestIdentity,
};

const ARM: &str = "https://management.azure.com/.default";
const VAULT: &str = "https://vault.azure.net/.default";

/// A credential for a new identity registered with `entra`, in `tenant` when given; one
/// attempt per token (no retries) and no failure memory, so that each scripted answer
/// reaches the caller.
fn credential(
    entra: &EntraServer,
    tenant: Option<&str>,
) -> (TestIdentity, ClientCertificateCredential) {
    let mut identity = TestIdentity::new();
    if let Some(tenant) = tenant {
        identity.tenant_id = tenant.to_owned();
    }
    let cert = TestCertificate::self_signed();
    entra.register(&identity, &cert);
    let creds = identity.credentials(&cert, &entra.base_url(), BundleFormat::Pem);
    let http = Environment::default().with_http_client(entra.client());
    let options = ClientCertificateCredentialOptions::default()
        .with_environment(http.with_retry_policy(RetryPolicy::default().with_max_attempts(1)))
        .with_failure_memory(std::time::Duration::ZERO);
    let credential = ClientCertificateCredential::new(&creds, options).unwrap();
    (identity, credential)
}

/// The message a panic carried.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

#[tokio::test]
async fn entra_scripts_answer_only_the_requests_they_match() {
    let entra = EntraServer::start().await;
    let (a, cred_a) = credential(&entra, None);
    let (_b, cred_b) = credential(&entra, None);
    let (c, cred_c) = credential(&entra, Some("5f1c9a3e-7b2d-4e6f-8a0b-1c2d3e4f5a6b"));

    // Client a's vault tokens: a 401 AADSTS700027, twice.
    entra
        .on(Match::any().client_id(&a.client_id).scope(VAULT))
        .respond(Scripted::aadsts(
            401,
            "invalid_client",
            700027,
            "Client assertion failed signature validation.",
        ))
        .times(2)
        .expect(3)
        .mount();
    // Every request in c's tenant: 503 until cleared.
    entra
        .on(Match::any().tenant(&c.tenant_id))
        .respond(Scripted::status(503))
        .until_cleared()
        .mount();

    // b and a's other scope are answered as usual, whatever was mounted first.
    cred_b.get_token(&[VAULT]).await.unwrap();
    cred_a.get_token(&[ARM]).await.unwrap();
    for _ in 0..2 {
        let e = cred_a.get_token(&[VAULT]).await.unwrap_err();
        assert!(e.to_string().contains("AADSTS700027"), "{e}");
    }
    // Two answers given: the third request gets a token.
    cred_a.get_token(&[VAULT]).await.unwrap();
    for _ in 0..3 {
        assert!(cred_c.get_token(&[ARM]).await.is_err());
    }
    assert_eq!(entra.pending_scripted(), 0);

    let outcomes: Vec<(String, Outcome)> = entra
        .requests()
        .into_iter()
        .map(|r| (r.client_id.unwrap(), r.outcome))
        .collect();
    let scripted = |id: &str| {
        outcomes
            .iter()
            .filter(|(c, o)| c == id && matches!(o, Outcome::Scripted(_)))
            .count()
    };
    assert_eq!(scripted(&a.client_id), 2);
    assert_eq!(scripted(&c.client_id), 3);

    // Cleared: c's tenant is answered as usual again.
    entra.clear_scripts();
    cred_c.get_token(&[ARM]).await.unwrap();
    entra.verify();
}

#[tokio::test]
async fn a_scoped_script_is_removed_with_its_guard() {
    let entra = EntraServer::start().await;
    let (_a, cred) = credential(&entra, None);
    {
        let guard = entra
            .on(Match::any().method("POST"))
            .respond(Scripted::status(500))
            .until_cleared()
            .expect(2..)
            .mount_scoped();
        assert!(cred.get_token(&[ARM]).await.is_err());
        assert!(cred.get_token(&[VAULT]).await.is_err());
        assert_eq!(guard.matched(), 2);
    }
    cred.get_token(&[ARM]).await.unwrap();
}

#[tokio::test]
async fn a_failed_expectation_says_what_the_server_received() {
    let entra = EntraServer::start().await;
    let (a, cred) = credential(&entra, None);
    let guard = entra
        .on(Match::any().scope(VAULT))
        .named("vault tokens")
        .expect(1)
        .mount_scoped();
    cred.get_token(&[ARM]).await.unwrap();
    let message = guard.finish().unwrap_err().to_string();
    assert!(
        message.starts_with(
            "EntraServer: script \"vault tokens\" (scope = https://vault.azure.net/.default; \
             no answer of its own) expected exactly 1 matching request(s), got 0"
        ),
        "{message}"
    );
    assert!(message.contains("Requests received while it was mounted (1):"));
    assert!(
        message.contains(&format!("client_id={:?}", a.client_id)) && message.contains(ARM),
        "{message}"
    );

    // At most one: the second request fails it, and dropping the guard panics.
    let at_most_one = entra
        .on(Match::any().client_id(&a.client_id))
        .expect(msi_dataplane_testing::Expected::at_most(1))
        .mount_scoped();
    cred.get_token(&[VAULT]).await.unwrap();
    cred.get_token(&["api://other/.default"]).await.unwrap();
    let panic = catch_unwind(AssertUnwindSafe(|| drop(at_most_one))).unwrap_err();
    let message = panic_message(panic);
    assert!(
        message.contains("expected at most 1 matching request(s), got 2"),
        "{message}"
    );
}

#[tokio::test]
async fn the_server_checks_its_expectations_when_its_last_handle_goes() {
    let entra = EntraServer::start().await;
    let clone = entra.clone();
    entra
        .on(Match::any())
        .respond(Scripted::status(503))
        .expect(1)
        .mount();
    // Dropping a clone checks nothing; the last handle does.
    drop(clone);
    let panic = catch_unwind(AssertUnwindSafe(|| drop(entra))).unwrap_err();
    let message = panic_message(panic);
    assert!(
        message.contains("(any request; answers status 503 1 time(s)) expected exactly 1"),
        "{message}"
    );
    assert!(message.contains("mounted (0): none"), "{message}");
}

#[tokio::test]
async fn data_plane_scripts_match_by_method_and_tenant() {
    let entra = EntraServer::start().await;
    let app = TestIdentity::new();
    let app_cert = TestCertificate::self_signed();
    entra.register(&app, &app_cert);
    let dp = DataPlaneServer::start(&entra, &app.tenant_id, DataPlaneServer::AUDIENCE).await;
    let other_tenant = "5f1c9a3e-7b2d-4e6f-8a0b-1c2d3e4f5a6b";
    // A multi-tenant app: registered in the customer's tenant too.
    let app_elsewhere = TestIdentity {
        tenant_id: other_tenant.to_owned(),
        ..app.clone()
    };
    entra.register(&app_elsewhere, &app_cert);
    let home = "/subscriptions/1d3e5f7a-9b2c-4d6e-8f0a-2b4c6d8e0f1a/resourcegroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/home";
    let away = "/subscriptions/1d3e5f7a-9b2c-4d6e-8f0a-2b4c6d8e0f1a/resourcegroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/away";
    dp.create_user_assigned(home);
    dp.create_user_assigned_in(other_tenant, away);
    // The managing service's credential, allowed into the customer's tenant.
    let http = Environment::default().with_http_client(entra.client());
    let credential = ClientCertificateCredential::new(
        &app.credentials(&app_cert, &entra.base_url(), BundleFormat::Pem),
        ClientCertificateCredentialOptions::default()
            .with_environment(http.clone())
            .with_additionally_allowed_tenants(["*"]),
    )
    .unwrap();

    // The other tenant's POSTs are refused with 403 until cleared; none of the home
    // tenant's may be.
    let refused = dp
        .on(Match::any().method("POST").tenant(other_tenant))
        .respond(Scripted::status(403).body(r#"{"error":{"code":"Forbidden","message":"no"}}"#))
        .until_cleared()
        .expect(1)
        .mount_scoped();
    let home_posts = dp
        .on(Match::any()
            .method("post")
            .tenant(&app.tenant_id)
            .path(DataPlaneServer::IDENTITY_PATH))
        .expect(1)
        .mount_scoped();

    let options = http.with_retry_policy(RetryPolicy::default().with_max_attempts(1));
    let factory = ClientFactory::new(credential, DataPlaneServer::AUDIENCE, options).unwrap();
    let request = |id: &str| UserAssignedIdentitiesRequest::new([id]);
    let issued = factory
        .client(&dp.identity_url())
        .unwrap()
        .get_user_assigned_identities_credentials(&request(home))
        .await
        .unwrap();
    assert!(issued.user_assigned_identity(home).is_some());
    let e = factory
        .client(&dp.identity_url_in(other_tenant))
        .unwrap()
        .get_user_assigned_identities_credentials(&request(away))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("403"), "{e}");
    assert_eq!((refused.matched(), home_posts.matched()), (1, 1));
    drop((refused, home_posts));

    // Cleared with its guard: the other tenant is served.
    let issued = factory
        .client(&dp.identity_url_in(other_tenant))
        .unwrap()
        .get_user_assigned_identities_credentials(&request(away))
        .await
        .unwrap();
    assert!(issued.user_assigned_identity(away).is_some());
}

#[tokio::test]
async fn key_vault_scripts_match_by_path_and_answer_n_times() {
    let fx = IdentityFixture::start().await;
    let vault = KeyVaultServer::start(&fx.entra, &fx.identity.tenant_id).await;
    let store = CredentialStore::new(
        &vault.url(),
        Arc::new(fx.credential.clone()),
        msi_dataplane::keyvault::store::StoreOptions::default()
            .with_environment(fx.environment())
            .verify_challenge_resource(false),
    )
    .unwrap();
    let denied = r#"{"error":{"code":"Forbidden","message":"denied"}}"#;
    vault
        .on(Match::any()
            .path_prefix("/secrets/cpo")
            .client_id(&fx.identity.client_id))
        .respond(Scripted::status(403).body(denied))
        .times(2)
        .expect(3)
        .mount();
    for _ in 0..2 {
        let e = store.get("cpo", None).await.unwrap_err();
        assert!(e.to_string().contains("403"), "{e}");
    }
    // Other secrets are not matched; after two answers, `cpo` reaches the vault (which
    // has no such secret).
    let e = store.get("other", None).await.unwrap_err();
    assert!(e.to_string().contains("404"), "{e}");
    let e = store.get("cpo", None).await.unwrap_err();
    assert!(e.to_string().contains("404"), "{e}");
    assert_eq!(vault.pending_scripted(), 0);
    vault.verify();

    // A script that must not be reached, cleared before the server's drop.
    vault.on(Match::any().method("DELETE")).expect(1).mount();
    vault.clear_scripts();
    drop(vault);
}

#[tokio::test]
async fn try_verify_gives_a_typed_failure_marking_the_matched_requests_and_what_each_got() {
    let entra = EntraServer::start().await;
    let (a, cred_a) = credential(&entra, None);
    let (_b, cred_b) = credential(&entra, None);
    assert!(entra.try_verify().is_ok(), "nothing mounted");
    entra
        .on(Match::any().client_id(&a.client_id).scope(VAULT))
        .named("a's vault token")
        .respond(Scripted::aadsts(
            401,
            "invalid_client",
            700027,
            "Key not found.",
        ))
        .expect(1)
        .mount();
    let e = cred_a.get_token(&[VAULT]).await.unwrap_err();
    assert!(e.to_string().contains("AADSTS700027"), "{e}");
    cred_b.get_token(&[ARM]).await.unwrap();
    cred_a.get_token(&[VAULT]).await.unwrap();

    let failure = entra.try_verify().unwrap_err();
    assert_eq!(failure.server, "EntraServer");
    assert_eq!(failure.unmet.len(), 1);
    assert_eq!(failure.unmet[0].expected, Expected::from(1));
    assert_eq!(failure.unmet[0].matched, 2);
    assert!(failure.unmet[0].script.contains("a's vault token"));
    let label = "\"a's vault token\"".to_owned();
    let listed: Vec<(u64, Vec<String>, Option<String>)> = failure
        .requests
        .iter()
        .map(|r| (r.number, r.matched.clone(), r.scripted.clone()))
        .collect();
    assert_eq!(
        listed,
        [
            (
                1,
                vec![label.clone()],
                Some(format!("status 401 from script {label}"))
            ),
            (2, vec![], None),
            (3, vec![label.clone()], None),
        ]
    );
    let text = failure.to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    assert!(
        lines[2].ends_with(&format!(
            "[matched {label}] -> status 401 from script {label}"
        )),
        "{text}"
    );
    assert!(lines[3].ends_with("-> the server's own answer") && !lines[3].contains("[matched"));
    assert!(lines[4].ends_with(&format!("[matched {label}] -> the server's own answer")));

    // An `Error` for `?` and `Box<dyn Error>`; `verify()` panics with the same text.
    let boxed: Box<dyn std::error::Error> = Box::new(failure.clone());
    assert_eq!(boxed.to_string(), text);
    let panic = catch_unwind(AssertUnwindSafe(|| entra.verify())).unwrap_err();
    assert_eq!(panic_message(panic), text);
    // Still mounted: checking did not remove it.
    assert_eq!(entra.try_verify().unwrap_err(), failure);
    entra.clear_scripts();
    assert!(entra.try_verify().is_ok());
}

#[tokio::test]
async fn the_request_log_keeps_the_aadsts_code_of_scripted_and_own_errors() {
    let entra = EntraServer::start().await;
    let (a, cred) = credential(&entra, None);
    entra
        .on(Match::any().client_id(&a.client_id))
        .respond(Scripted::aadsts(
            400,
            "unauthorized_client",
            700016,
            "Application not found.",
        ))
        .mount();
    entra.enqueue(Scripted::status(503));
    assert!(cred.get_token(&[ARM]).await.is_err());
    assert!(cred.get_token(&[ARM]).await.is_err());
    cred.get_token(&[ARM]).await.unwrap();
    // Entra's own refusal of a client it does not know.
    let stranger = TestIdentity::new();
    let cert = TestCertificate::self_signed();
    let file = stranger.credentials(&cert, &entra.base_url(), BundleFormat::Pem);
    let http = Environment::default().with_http_client(entra.client());
    let options = ClientCertificateCredentialOptions::default().with_environment(http);
    let unknown = ClientCertificateCredential::new(&file, options).unwrap();
    let e = unknown
        .get_token(&["https://vault.azure.net/.default"])
        .await
        .unwrap_err();
    assert!(e.to_string().contains("AADSTS90002"), "{e}");

    let log: Vec<(Outcome, Option<u32>)> = entra
        .requests()
        .into_iter()
        .map(|r| (r.outcome, r.aadsts_code))
        .collect();
    assert_eq!(log[0], (Outcome::Scripted(400), Some(700016)));
    assert_eq!(
        log[1],
        (Outcome::Scripted(503), None),
        "a body without codes"
    );
    assert!(matches!(log[2], (Outcome::Token(_), None)));
    assert_eq!(
        log[3].1,
        Some(90002),
        "the server's own error: {:?}",
        log[3].0
    );
}

/// Set in the child process of the test below: the test then fails on its own, with an
/// unmet guard and an unmet server-wide script in scope.
const CHILD: &str = "MSI_DATAPLANE_TESTING_PANICKING_CHILD";
const OWN_ERROR: &str = "the test's own assertion failed";

#[test]
fn an_unmet_expectation_goes_to_stderr_when_the_test_is_already_panicking() {
    if std::env::var_os(CHILD).is_some() {
        let entra = EntraServer::start_blocking();
        entra
            .on(Match::any())
            .named("server-wide")
            .expect(1)
            .mount();
        let _guard = entra
            .on(Match::any())
            .named("scoped")
            .expect(2)
            .mount_scoped();
        panic!("{OWN_ERROR}");
    }
    let name = "testing_kit_scripts::an_unmet_expectation_goes_to_stderr_when_the_test_is_already_panicking";
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let stdout = String::from_utf8_lossy(&output.stdout);
    // The harness reports a failed test (exit code 101), not a process aborted by a
    // panic during a panic (a signal, no code).
    assert_eq!(output.status.code(), Some(101), "{stdout}\n{stderr}");
    assert!(stdout.contains("1 failed"), "{stdout}");
    // The test's own error is the panic; both expectations are reported beside it.
    assert!(stderr.contains(OWN_ERROR), "{stderr}");
    for script in ["\"scoped\"", "\"server-wide\""] {
        assert!(
            stderr.contains(&format!(
                "script {script} (any request; no answer of its own)"
            )),
            "{stderr}"
        );
    }
    assert_eq!(
        stderr
            .matches("not raised: the thread is already panicking")
            .count(),
        2,
        "{stderr}"
    );
    assert!(!stderr.contains("panic in a destructor"), "{stderr}");
}

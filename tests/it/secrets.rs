//! Secret hygiene: no `Debug`/`Display` of a public type, no error, and no log line
//! (captured at TRACE level from every crate during a full token flow and a reload)
//! contains the client secret, key material, an assertion or an access token.

use crate::support;

use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

use msi_dataplane::{
    ClientCertificate, ClientCertificateCredential, Environment, ManualClock, ReloadOptions,
    RetryPolicy, UserAssignedIdentityCredential, UserAssignedIdentityCredentials,
};
use support::entra::{EntraServer, Scripted};
use support::fixtures::{load, load_with_endpoint};
use support::harness::{ARM, https_env, options, register};
use support::log_capture::captured;
use support::malformed::{block, blocks, credential_json, malformed_bundles, runs_for};
use support::secrets::{Runs, Secrets};

#[test]
fn debug_and_display_of_every_public_type_hold_no_secret() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _guard = rt.enter();
    let server = rt.block_on(EntraServer::start());
    register(&server, "pem-pkcs8");
    let mut secrets = Secrets::of("pem-pkcs8");

    let creds = load_with_endpoint("pem-pkcs8", &server.base_url());
    let cred = ClientCertificateCredential::new(&creds, options()).unwrap();
    let token = rt.block_on(cred.get_token(&[ARM])).unwrap();
    secrets.add("access token", token.token());
    let assertion = cred.client_assertion().unwrap();
    let a = assertion.expose_secret();
    let signature = a.rsplit('.').next().unwrap();
    secrets.add("assertion", a);
    secrets.add("assertion signature", &signature[..40]);

    let cert = ClientCertificate::from_credentials(&creds).unwrap();
    let azure_token = {
        use azure_core::credentials::TokenCredential;
        rt.block_on(TokenCredential::get_token(&cred, &[ARM], None))
            .unwrap()
    };
    let mut texts = vec![
        ("credentials", format!("{creds:?} {creds:#?}")),
        (
            "secret",
            format!("{0:?} {0} {0:#?}", creds.client_secret.as_ref().unwrap()),
        ),
        ("certificate", format!("{cert:?} {cert:#?}")),
        ("credential", format!("{cred:?} {cred:#?}")),
        ("options", format!("{:?}", options())),
        ("token", format!("{token:?} {token:#?}")),
        ("assertion", format!("{assertion:?} {assertion}")),
        ("azure token", format!("{azure_token:?}")),
        ("retry policy", format!("{:?}", RetryPolicy::default())),
        (
            "clock",
            format!("{:?}", ManualClock::new(token.expires_on())),
        ),
    ];

    // Errors of every kind this data can produce, from bad fixtures and server answers.
    for name in [
        "ec-key",
        "rsa-1024",
        "mismatched",
        "encrypted-key",
        "encrypted-legacy",
        "two-keys",
        "no-key",
        "pfx-password",
    ] {
        let e = ClientCertificate::from_credentials(&load(name)).unwrap_err();
        texts.push(("bundle error", format!("{e} {e:?} {:?}", e.kind())));
        let mut s = Secrets::of(name);
        s.add("x", "\u{0}never");
        s.assert_absent(name, &format!("{e} {e:?}"));
    }
    let no_retry = options().with_environment(https_env().with_retry_policy(RetryPolicy::none()));
    let cred2 = ClientCertificateCredential::new(&creds, no_retry).unwrap();
    for scripted in [
        Scripted::aadsts(401, "invalid_client", 700027, "bad cert"),
        Scripted::status(200).body(&format!("{{\"access_token\":\"{}\"", token.token())),
        Scripted::status(200).body(&format!(
            "{{\"access_token\":\"{}\",\"expires_in\":\"x\"}}",
            token.token()
        )),
        Scripted::status(500).body(&format!("<html>{}</html>", token.token())),
    ] {
        server.enqueue(scripted);
        let e = rt.block_on(cred2.request_token(&[ARM])).unwrap_err();
        texts.push(("endpoint error", format!("{e} {e:?}")));
    }
    let camel = UserAssignedIdentityCredentials::from_slice(
        format!(
            "{{\"clientSecret\":\"{}\"}}",
            creds.client_secret.as_ref().unwrap().expose_secret()
        )
        .as_bytes(),
    )
    .unwrap_err();
    texts.push(("camelCase error", format!("{camel} {camel:?}")));
    let wrong_type = UserAssignedIdentityCredentials::from_slice(
        format!(
            "{{\"client_secret\":[\"{}\"]}}",
            creds.client_secret.as_ref().unwrap().expose_secret()
        )
        .as_bytes(),
    )
    .unwrap_err();
    texts.push(("type error", format!("{wrong_type} {wrong_type:?}")));

    for (context, text) in &texts {
        secrets.assert_absent(context, text);
    }
    // And the redaction is really there (so the absence is not an accident of formatting).
    assert!(texts.iter().any(|(_, t)| t.contains("redacted")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_of_a_token_flow_and_a_reload_hold_no_secret() {
    let log = captured();
    let server = EntraServer::start().await;
    for name in ["rotation-1", "rotation-2"] {
        register(&server, name);
    }
    let mut secrets = Secrets::of("rotation-1");
    secrets.extend(Secrets::of("rotation-2"));

    let dir = std::env::temp_dir().join(format!("msi-dp-secrets-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("identity");
    let json = |name: &str| {
        load_with_endpoint(name, &server.base_url())
            .to_json()
            .unwrap()
    };
    std::fs::write(&path, json("rotation-1")).unwrap();

    let cred = UserAssignedIdentityCredential::new(
        &path,
        options(),
        ReloadOptions::default().with_debounce(Duration::from_millis(50)),
    )
    .await
    .unwrap();
    // A token, a retried failure, and a refused request: every log path of a flow.
    let t1 = cred.get_token(&[ARM]).await.unwrap();
    server.enqueue(Scripted::status(503));
    let t2 = cred
        .current()
        .request_token(&["https://graph.microsoft.com/.default"])
        .await
        .unwrap();
    server.enqueue(Scripted::aadsts(401, "invalid_client", 700027, "nope"));
    let _ = cred.current().request_token(&[ARM]).await.unwrap_err();
    let header = cred
        .current()
        .client_assertion()
        .unwrap()
        .expose_secret()
        .split('.')
        .next()
        .unwrap()
        .to_owned();
    secrets.add("access token", t1.token());
    secrets.add("access token", t2.token());
    secrets.add("assertion header segment", &header);

    // A bad file, then a rotation.
    std::fs::write(&path, &json("rotation-2")[..200]).unwrap();
    let mut rx = cred.subscribe();
    tokio::time::timeout(
        Duration::from_secs(5),
        rx.wait_for(|s| s.last_error.is_some()),
    )
    .await
    .unwrap()
    .unwrap();
    std::fs::write(&path, json("rotation-2")).unwrap();
    tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|s| s.reloads == 1))
        .await
        .unwrap()
        .unwrap();
    let t3 = cred.get_token(&[ARM]).await.unwrap();
    secrets.add("access token", t3.token());
    let new_header = cred
        .current()
        .client_assertion()
        .unwrap()
        .expose_secret()
        .split('.')
        .next()
        .unwrap()
        .to_owned();
    secrets.add("assertion header segment", &new_header);
    let status = cred.status();
    secrets.assert_absent("status", &format!("{status:?} {cred:?}"));

    drop(cred);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    // The capture works, and saw the events that matter.
    assert!(
        text.contains("credential file rotated"),
        "no rotation event in:\n{text}"
    );
    assert!(
        text.contains("credential file unusable"),
        "no refusal event in:\n{text}"
    );
    assert!(text.contains("retrying"), "no retry event in:\n{text}");
    secrets.assert_absent("tracing output", &text);
    let _ = std::fs::remove_dir_all(&dir);
}

// ---------------------------------------------------------------------------------------
// Malformed bundles: every parser complaint about a bundle built
// from a fixture key, through every surface that shows errors, holds no run of 40
// characters of the secret, of the key's base64 or of its DER.
// ---------------------------------------------------------------------------------------

#[test]
fn malformed_bundles_are_refused_without_quoting_them() {
    for (what, bundle) in malformed_bundles() {
        let runs = runs_for(&bundle);
        let err = ClientCertificate::from_base64(&STANDARD.encode(&bundle))
            .err()
            .unwrap_or_else(|| panic!("{what}: accepted"));
        let text = format!("{err}\n{err:?}\n{:?}\n{}", err.kind(), err.kind());
        runs.assert_absent(what, &text);
        // Through a file: the error names the file, the report lists the problem.
        let dir = std::env::temp_dir().join(format!("msi-dp-malformed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("identity");
        std::fs::write(&path, credential_json(&bundle, None)).unwrap();
        let report = msi_dataplane::inspect::CredentialReport::from_path(
            &path,
            time::OffsetDateTime::now_utc(),
            msi_dataplane::inspect::EXPIRES_SOON_MARGIN,
        );
        let report = report.err().unwrap_or_else(|| panic!("{what}: a report"));
        assert_eq!(report.path(), Some(path.as_path()), "{what}");
        runs.assert_absent(what, &format!("{report}\n{report:?}"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
fn go_pem_layouts_are_accepted() {
    // Go's encoding/pem accepts a body in one line, blank lines in it, and a blank line
    // before END; so does the crate (the `pem` crate read the line as a "header").
    let pkcs8 = blocks("pem-pkcs8");
    let (cert_begin, cert_body, cert_end) = &pkcs8[0];
    let (key_begin, key_body, key_end) = &pkcs8[1];
    let cert = block(cert_begin, cert_body, cert_end);
    let one_line = format!("{cert}{key_begin}\n{}\n\n{key_end}\n", key_body.concat());
    let blank_lines = format!(
        "{key_begin}\n\n{}\n\n{key_end}\n\n{cert}",
        key_body.join("\n\n")
    );
    let expected = ClientCertificate::from_credentials(&load("pem-pkcs8")).unwrap();
    for bundle in [one_line, blank_lines] {
        let cert = ClientCertificate::from_bundle(bundle.as_bytes())
            .unwrap_or_else(|e| panic!("{e}:\n{bundle}"));
        assert_eq!(cert.thumbprint_sha256(), expected.thumbprint_sha256());
    }
}

#[test]
fn malformed_json_around_the_secret_is_refused_without_quoting_it() {
    let good = load("pem-pkcs8").to_json().unwrap();
    let secret = support::fixtures::secret("pem-pkcs8");
    let at = good.find(&secret).unwrap() + secret.len() / 2;
    let mut runs = Runs::of("pem-pkcs8");
    runs.add("client_secret", secret.as_bytes());
    for (what, text) in [
        ("truncated in the secret", good[..at].to_owned()),
        (
            "invalid escape in the secret",
            format!("{}\\q{}", &good[..at], &good[at..]),
        ),
        (
            "control character in the secret",
            format!("{}\u{1}{}", &good[..at], &good[at..]),
        ),
        (
            "secret as a number",
            good.replace(&format!("\"{secret}\""), "12"),
        ),
        (
            "secret as an object key",
            format!("{{\"{secret}\": 1, \"x\": }}"),
        ),
        (
            "secret as an array",
            good.replace(&format!("\"{secret}\""), &format!("[\"{secret}\"]")),
        ),
    ] {
        let err = UserAssignedIdentityCredentials::from_slice(text.as_bytes())
            .err()
            .unwrap_or_else(|| panic!("{what}: accepted"));
        runs.assert_absent(what, &format!("{err}\n{err:?}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bundles_leave_no_secret_in_status_or_logs() {
    let log = captured();
    let server = EntraServer::start().await;
    register(&server, "pem-pkcs8");
    let dir = std::env::temp_dir().join(format!("msi-dp-malformed-reload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("identity");
    let good = support::fixtures::bundle("pem-pkcs8");
    std::fs::write(&path, credential_json(&good, Some(&server.base_url()))).unwrap();
    let cred = UserAssignedIdentityCredential::new(
        &path,
        options(),
        ReloadOptions::default().with_debounce(Duration::from_millis(20)),
    )
    .await
    .unwrap();
    let mut rx = cred.subscribe();
    let mut all = Runs::of("pem-pkcs8");
    for (index, (what, bundle)) in malformed_bundles().into_iter().enumerate() {
        all.add(
            "malformed client_secret",
            STANDARD.encode(&bundle).as_bytes(),
        );
        let before = rx.borrow().last_check;
        // A later `not_before` than the active file's: refused for its bundle alone.
        let mut creds: UserAssignedIdentityCredentials =
            serde_json::from_str(&credential_json(&bundle, Some(&server.base_url()))).unwrap();
        creds.not_before = Some(format!("2026-11-22T08:{:02}:00Z", index % 60));
        std::fs::write(&path, creds.to_json().unwrap()).unwrap();
        tokio::time::timeout(
            Duration::from_secs(10),
            rx.wait_for(|s| s.last_check != before && s.last_error.is_some()),
        )
        .await
        .unwrap_or_else(|_| panic!("{what} (#{index}): no refusal"))
        .unwrap();
        let status = cred.status();
        runs_for(&bundle).assert_absent(what, &format!("{status:?}"));
    }
    assert!(
        cred.get_token(&[ARM]).await.is_ok(),
        "the good key still serves"
    );
    drop(cred);
    let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
    assert!(text.contains("credential file unusable"), "{text}");
    all.add(
        "pfx client_secret",
        support::fixtures::secret("pfx-legacy").as_bytes(),
    );
    all.assert_absent("tracing output", &text);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The testing kit (`msi-dataplane-testing`): its servers, certificates and writer print no
/// key material, client secret, assertion or access token in `Debug`, and nothing secret
/// reaches the logs during a token flow, a scripted failure and a CSI rotation.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_testing_kit_prints_and_logs_no_secret() {
    use msi_dataplane::BundleFormat;
    use msi_dataplane_testing::{CsiMount, TestCa, TestCertificate, TestIdentity};

    captured();
    let server = EntraServer::start().await;
    let identity = TestIdentity::new();
    let ca = TestCa::new("secrets CA");
    let cert = TestCertificate::builder().signed_by(&ca);
    server.register(&identity, &cert);
    let creds = identity.credentials(&cert, &server.base_url(), BundleFormat::Pem);

    let mut secrets = Secrets::none();
    let secret = creds
        .client_secret
        .as_ref()
        .unwrap()
        .expose_secret()
        .to_owned();
    secrets.add("client_secret prefix", &secret[..48]);
    secrets.add(
        "client_secret middle",
        &secret[secret.len() / 2..secret.len() / 2 + 48],
    );
    for block in pem::parse_many(cert.bundle(BundleFormat::Pem).as_slice()).unwrap() {
        if block.tag().contains("PRIVATE KEY") {
            let b64 = STANDARD.encode(block.contents());
            secrets.add("key base64", &b64[100..160]);
        }
    }
    let p12 = STANDARD.encode(cert.bundle(BundleFormat::Pkcs12).as_slice());
    secrets.add("PKCS#12 bundle", &p12[200..260]);
    let mut mount = CsiMount::with_credentials(&creds);
    let cred = UserAssignedIdentityCredential::new(
        mount.visible_path(),
        options()
            .with_environment(Environment::default().with_http_client(server.client()))
            // The scripted failure, then a token at once.
            .with_failure_memory(Duration::ZERO),
        ReloadOptions::default().with_debounce(Duration::from_millis(50)),
    )
    .await
    .unwrap();
    server.enqueue(Scripted::aadsts(400, "invalid_client", 700027, "scripted"));
    let _ = cred.get_token(&[ARM]).await;
    let token = cred.get_token(&[ARM]).await.unwrap();
    secrets.add("access token", token.token());
    let second = TestCertificate::builder().renewing(&cert).signed_by(&ca);
    server.register(&identity, &second);
    let mut rx = cred.subscribe();
    mount.rotate_credentials(&identity.credentials(
        &second,
        &server.base_url(),
        BundleFormat::Pkcs12,
    ));
    tokio::time::timeout(
        Duration::from_secs(20),
        rx.wait_for(|s| {
            s.thumbprint_sha256
                .eq_ignore_ascii_case(&second.sha256_hex())
        }),
    )
    .await
    .unwrap()
    .unwrap();
    let token = cred
        .get_token(&["https://vault.azure.net/.default"])
        .await
        .unwrap();
    secrets.add("second access token", token.token());

    let texts = [
        ("server", format!("{server:?} {server:#?}")),
        (
            "requests",
            format!("{:?} {:#?}", server.requests(), server.requests()),
        ),
        ("issued", format!("{:?}", server.issued(token.token()))),
        ("certificate", format!("{cert:?} {cert:#?} {second:?}")),
        ("CA", format!("{ca:?}")),
        ("identity", format!("{identity:?}")),
        ("mount", format!("{mount:?}")),
    ];
    for (what, text) in &texts {
        secrets.assert_absent(what, text);
    }
    secrets.assert_absent("logs", &support::log_capture::text());
}

/// The kit's data plane and Key Vault servers: a full issue → store → read round, then
/// their `Debug`, request logs, issue log and stored-state views, and the logs, hold no
/// client secret, key material or bearer token.
#[cfg(feature = "keyvault")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kit_data_plane_and_key_vault_print_and_log_no_secret() {
    use std::sync::Arc;

    use msi_dataplane::dataplane::{ClientFactory, UserAssignedIdentitiesRequest};
    use msi_dataplane::keyvault::store::{CredentialStore, StoreOptions};
    use msi_dataplane_testing::{DataPlaneServer, KeyVaultServer};

    const RID: &str = "/subscriptions/0b1c2d3e-0000-4000-8000-000000000001/resourcegroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/secrets";
    const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
    captured();
    let entra = EntraServer::start().await;
    register(&entra, "pem-pkcs8");
    let http = Environment::default().with_http_client(entra.client());
    let app = ClientCertificateCredential::new(
        &load_with_endpoint("pem-pkcs8", &entra.base_url()),
        options().with_environment(http.clone()),
    )
    .unwrap();
    let dp = DataPlaneServer::start(&entra, TENANT, DataPlaneServer::AUDIENCE).await;
    let vault = KeyVaultServer::start(&entra, TENANT).await;
    dp.create_user_assigned(RID);
    let factory = ClientFactory::new(app.clone(), DataPlaneServer::AUDIENCE, http.clone()).unwrap();
    let client = factory.client(&dp.identity_url()).unwrap();
    let issued = client
        .get_user_assigned_identities_credentials(&UserAssignedIdentitiesRequest::new([RID]))
        .await
        .unwrap();
    let creds = issued.user_assigned_identity(RID).unwrap().clone();
    let store = CredentialStore::new(
        &vault.url(),
        Arc::new(app),
        StoreOptions::default()
            .with_environment(http)
            .verify_challenge_resource(false),
    )
    .unwrap();
    store
        .put_user_assigned_identity("secrets", &creds)
        .await
        .unwrap();
    store
        .get_user_assigned_identity("secrets", None)
        .await
        .unwrap();
    dp.rotate(RID);
    store.renew(&client, "uamsi-secrets").await.unwrap();
    store.delete("uamsi-secrets").await.unwrap();

    let mut secrets = Secrets::none();
    let secret = creds
        .client_secret
        .as_ref()
        .unwrap()
        .expose_secret()
        .to_owned();
    secrets.add("client_secret prefix", &secret[..48]);
    secrets.add(
        "client_secret middle",
        &secret[secret.len() / 2..secret.len() / 2 + 48],
    );
    let latest = dp.certificate(RID).unwrap();
    for block in
        pem::parse_many(latest.bundle(msi_dataplane::BundleFormat::Pem).as_slice()).unwrap()
    {
        if block.tag().contains("PRIVATE KEY") {
            let b64 = STANDARD.encode(block.contents());
            secrets.add("rotated key base64", &b64[100..160]);
        }
    }
    // The bearer tokens the servers saw (read from their logs on purpose).
    for auth in dp
        .requests()
        .iter()
        .filter_map(|r| r.header("authorization").map(str::to_owned))
    {
        secrets.add(
            "data plane bearer token",
            auth.trim_start_matches("Bearer "),
        );
    }
    assert!(vault.requests().iter().any(|r| r.authorized));
    assert!(
        vault
            .requests()
            .iter()
            .any(|r| r.body.contains(&secret[..48]))
    );

    let texts = [
        ("data plane", format!("{dp:?} {dp:#?}")),
        (
            "data plane requests",
            format!("{:?} {:#?}", dp.requests(), dp.requests()),
        ),
        ("data plane issue log", format!("{:?}", dp.issued())),
        ("vault", format!("{vault:?} {vault:#?}")),
        (
            "vault requests",
            format!("{:?} {:#?}", vault.requests(), vault.requests()),
        ),
        ("vault secrets", format!("{:?}", vault.secrets())),
        ("vault deleted", format!("{:?}", vault.deleted_secrets())),
    ];
    for (what, text) in &texts {
        secrets.assert_absent(what, text);
    }
    secrets.assert_absent("logs", &support::log_capture::text());
}

//! Secret hygiene: no `Debug`/`Display` of a public type, no error, and no log line
//! (captured at TRACE level from every crate during a full token flow and a reload)
//! contains the client secret, key material, an assertion or an access token.

mod support;

use std::time::Duration;

use msi_dataplane::{
    ClientCertificate, ClientCertificateCredential, ManualClock, RetryPolicy,
    UserAssignedIdentityCredential, UserAssignedIdentityCredentialOptions,
    UserAssignedIdentityCredentials,
};
use support::entra::{EntraServer, Scripted};
use support::fixtures::{load, load_with_endpoint};
use support::harness::{ARM, options, register};
use support::log_capture::captured;
use support::secrets::Secrets;

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
    let no_retry = options().with_retry_policy(RetryPolicy::none());
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
        UserAssignedIdentityCredentialOptions::default()
            .with_client_options(options())
            .with_debounce(Duration::from_millis(50)),
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

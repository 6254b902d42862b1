//! Real clients, not written here, against the token server (`serve`) backed by the kit's
//! verifying Entra server: Python `azure-identity`'s `ManagedIdentityCredential` (in the
//! tests' Python environment: `tests/support/python.rs`, `.ci/python-requirements.txt`)
//! and the Azure SDK for Rust's `azure_identity` 1.x `ManagedIdentityCredential` (this
//! test binary run again as a child process). Each runs as an application in the pod
//! does: a process of its own with only `IDENTITY_ENDPOINT`, `IDENTITY_HEADER` and
//! `NO_PROXY` set for it.
//!
//! Two identities are chosen by `client_id` and `object_id` (and by `mi_res_id` from
//! Python); after a CSI `..data` rotation the tokens served were obtained with the new
//! certificate (the Entra server's log says which certificate signed each request); a
//! token endpoint that refuses the identity reaches each client as a clear error after
//! one request, not after the clients' retry schedules.
#![cfg(unix)]

use crate::serving;
use crate::support;

use std::process::Command;
use std::time::Duration;

use msi_credential::serve::{ServeOptions, TokenServer};
use msi_dataplane::UserAssignedIdentityCredential;
use msi_dataplane_testing::{EntraServer, Scripted, wait_for_certificate};
use serde_json::Value;
use serving::{Mounted, SECRET, start};

const SCOPE: &str = "https://management.azure.com/.default";

/// A client's result: `{"token", "expires_on"}` or an error message.
#[derive(Debug)]
enum ClientResult {
    Token(String),
    Error(String),
}

impl ClientResult {
    fn token(self) -> String {
        match self {
            ClientResult::Token(token) => token,
            ClientResult::Error(e) => panic!("the client failed: {e}"),
        }
    }

    fn error(self) -> String {
        match self {
            ClientResult::Error(e) => e,
            ClientResult::Token(_) => panic!("the client got a token"),
        }
    }
}

/// The environment of an application in the pod, and nothing else that would choose
/// another managed identity source.
fn pod_env(command: &mut Command, server: &TokenServer) {
    for name in [
        "IDENTITY_SERVER_THUMBPRINT",
        "IMDS_ENDPOINT",
        "MSI_ENDPOINT",
        "MSI_SECRET",
        "AZURE_CLIENT_ID",
        "AZURE_POD_IDENTITY_AUTHORITY_HOST",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "http_proxy",
        "https_proxy",
    ] {
        command.env_remove(name);
    }
    command
        .env("IDENTITY_ENDPOINT", server.endpoint())
        .env("IDENTITY_HEADER", SECRET)
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("no_proxy", "127.0.0.1,localhost");
}

fn parse_result(line: &str) -> ClientResult {
    let json: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    match json["token"].as_str() {
        Some(token) => {
            assert!(json["expires_on"].as_i64().is_some(), "{line}");
            ClientResult::Token(token.to_owned())
        }
        None => ClientResult::Error(format!("{}: {}", json["error_type"], json["message"])),
    }
}

/// Python `azure-identity`, in a process of its own.
async fn python(server: &TokenServer, selector: Option<(&str, &str)>) -> ClientResult {
    let interpreter = support::python::interpreter();
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/serving/mi_client.py");
    let mut command = Command::new(&interpreter);
    command.arg(script).arg(SCOPE);
    if let Some((kind, value)) = selector {
        command.arg(kind).arg(value);
    }
    pod_env(&mut command, server);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", interpreter.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("No module named 'azure"),
        "Python azure-identity is not installed for {}: see .ci/python-requirements.txt \
         and MSI_TEST_PYTHON ({stderr})",
        interpreter.display()
    );
    let line = stdout
        .lines()
        .last()
        .unwrap_or_else(|| panic!("no output; stderr: {stderr}"));
    parse_result(line)
}

/// JavaScript `@azure/identity` on the machine's `node`, in a process of its own, for
/// `scope`.
async fn javascript(
    server: &TokenServer,
    scope: &str,
    selector: Option<(&str, &str)>,
) -> ClientResult {
    let modules = support::node::modules();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/it/serving/mi_client.cjs"
    );
    let mut command = Command::new("node");
    command.arg(script).arg(scope).env("NODE_PATH", &modules);
    if let Some((kind, value)) = selector {
        command.arg(kind).arg(value);
    }
    pod_env(&mut command, server);
    command.env_remove("AZURE_TOKEN_CREDENTIALS");
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap_or_else(|e| panic!("cannot run node: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stdout.lines().last().unwrap_or_else(|| {
        panic!(
            "no output (NODE_PATH {}); stderr: {stderr}",
            modules.display()
        )
    });
    parse_result(line)
}

/// The Azure SDK for Rust's `ManagedIdentityCredential`: this binary again, running only
/// [`rust_client_child`], with the pod's environment.
async fn rust(server: &TokenServer, selector: Option<(&str, &str)>) -> ClientResult {
    let mut command = Command::new(std::env::current_exe().unwrap());
    // Tests are named by their module path inside the binary (`serve_clients::…`).
    let module = module_path!().split_once("::").map_or("", |(_, m)| m);
    command.args([
        &format!("{module}::rust_client_child"),
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    command.env("MSI_SERVE_CHILD_SCOPE", SCOPE);
    if let Some((kind, value)) = selector {
        command.env("MSI_SERVE_CHILD_SELECTOR", format!("{kind}={value}"));
    }
    pod_env(&mut command, server);
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|l| l.split_once("CHILD-RESULT ").map(|(_, json)| json))
        .unwrap_or_else(|| {
            panic!(
                "no result: {stdout} {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    parse_result(line)
}

/// Run by [`rust`] in a child process (ignored otherwise): `azure_identity`'s
/// `ManagedIdentityCredential` gets one token and prints it as `CHILD-RESULT {json}`.
#[test]
#[ignore = "the Rust client's child process, run by the other tests with the pod's environment"]
fn rust_client_child() {
    use azure_core::credentials::TokenCredential as _;
    use azure_identity::{
        ManagedIdentityCredential, ManagedIdentityCredentialOptions, UserAssignedId,
    };
    let Ok(scope) = std::env::var("MSI_SERVE_CHILD_SCOPE") else {
        return; // not started by a test: nothing to do
    };
    let user_assigned_id = std::env::var("MSI_SERVE_CHILD_SELECTOR").ok().map(|s| {
        let (kind, value) = s.split_once('=').unwrap();
        match kind {
            "client_id" => UserAssignedId::ClientId(value.to_owned()),
            "object_id" => UserAssignedId::ObjectId(value.to_owned()),
            _ => UserAssignedId::ResourceId(value.to_owned()),
        }
    });
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let result = runtime.block_on(async {
        let options = ManagedIdentityCredentialOptions {
            user_assigned_id,
            ..Default::default()
        };
        let credential = ManagedIdentityCredential::new(Some(options))?;
        credential.get_token(&[&scope], None).await
    });
    let json = match result {
        Ok(token) => serde_json::json!({
            "token": token.token.secret(),
            "expires_on": token.expires_on.unix_timestamp(),
        }),
        Err(e) => serde_json::json!({"error_type": "azure_core::Error", "message": e.to_string()}),
    };
    println!("CHILD-RESULT {json}");
}

/// Two identities mounted and served by one token server; the first's reloading
/// credential (to wait for its rotation).
async fn two_identities(
    entra: &EntraServer,
) -> (
    Mounted,
    Mounted,
    UserAssignedIdentityCredential,
    TokenServer,
) {
    let (a, b) = (Mounted::new(entra), Mounted::new(entra));
    let served_a = a.serve(entra, Default::default()).await;
    let credential_a = served_a.credential().clone();
    let served_b = b.serve(entra, Default::default()).await;
    let server = start(vec![served_a, served_b], ServeOptions::default()).await;
    (a, b, credential_a, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_and_rust_clients_get_tokens_through_a_csi_rotation() {
    let entra = EntraServer::start().await;
    let (mut a, b, credential_a, server) = two_identities(&entra).await;
    let issued = |token: String| {
        entra
            .issued(&token)
            .expect("a token the Entra server issued")
    };
    // Each identity, by each selector, from each client.
    let cases = [
        ("python", &a, "client_id", a.identity.client_id.clone()),
        ("python", &b, "object_id", b.identity.object_id.clone()),
        ("python", &a, "resource_id", a.identity.resource_id.clone()),
        ("rust", &b, "client_id", b.identity.client_id.clone()),
        ("rust", &a, "object_id", a.identity.object_id.clone()),
    ];
    for (client, mounted, kind, value) in cases {
        let result = match client {
            "python" => python(&server, Some((kind, &value))).await,
            _ => rust(&server, Some((kind, &value))).await,
        };
        let token = issued(result.token());
        assert_eq!(
            token.client_id, mounted.identity.client_id,
            "{client} {kind}"
        );
        assert_eq!(
            token.cert_sha256_hex,
            mounted.certificate.sha256_hex(),
            "{client} {kind}"
        );
        assert_eq!(token.scope, SCOPE, "{client} {kind}");
    }
    // The MSI service renews a's certificate; the CSI driver swaps `..data`.
    let old = a.certificate.sha256_hex();
    let next = a.rotate(&entra);
    wait_for_certificate(&credential_a, &next, Duration::from_secs(20)).await;
    entra
        .wait_for_token_requests(3, Duration::from_secs(20))
        .await;
    let by_python = issued(
        python(&server, Some(("client_id", &a.identity.client_id)))
            .await
            .token(),
    );
    let by_rust = issued(
        rust(&server, Some(("object_id", &a.identity.object_id)))
            .await
            .token(),
    );
    for token in [by_python, by_rust] {
        assert_eq!(token.client_id, a.identity.client_id);
        assert_eq!(token.cert_sha256_hex, next.sha256_hex());
        assert_ne!(token.cert_sha256_hex, old);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_token_endpoint_reaches_each_client_as_a_clear_error_after_one_request() {
    let (entra, a, server) = serving::one_identity(ServeOptions::default()).await;
    // Without a selector: the only identity.
    let token = entra.issued(&python(&server, None).await.token()).unwrap();
    assert_eq!(token.client_id, a.identity.client_id);
    // Entra stops trusting the identity's certificate, and the cached token is gone
    // (a fresh scope would do as well).
    entra.clear_certificates(&a.identity.client_id, &a.identity.tenant_id);
    a.serve(&entra, Default::default())
        .await
        .credential()
        .current()
        .clear_cache();
    // The served identity's own cache: clear it through the server's credential.
    drop(server);
    // Each client's request reaches Entra: no failure memory (tests/it/cache.rs tests it).
    let client = msi_dataplane::ClientCertificateCredentialOptions::default()
        .with_failure_memory(std::time::Duration::ZERO);
    let served = a.serve(&entra, client).await;
    let server = start(vec![served], ServeOptions::default()).await;
    for client in ["python", "rust"] {
        let before = entra.token_requests();
        let error = match client {
            "python" => python(&server, Some(("client_id", &a.identity.client_id))).await,
            _ => rust(&server, Some(("client_id", &a.identity.client_id))).await,
        }
        .error();
        assert!(error.contains("AADSTS700027"), "{client}: {error}");
        assert!(error.contains(&a.identity.client_id), "{client}: {error}");
        assert!(!error.contains(SECRET), "{client}: {error}");
        assert_eq!(
            entra.token_requests() - before,
            1,
            "{client} retried a refusal that no retry can mend"
        );
    }
}

/// JavaScript's `ManagedIdentityCredential` (MSAL Node underneath) obeys `Retry-After`
/// exactly: through an Entra outage shorter than the server's failure memory, it must be
/// told to wait until the memory ends, or it spends its retries on the remembered
/// failure and fails although Entra has recovered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn javascript_client_gets_tokens_through_a_csi_rotation_and_a_short_outage() {
    let entra = EntraServer::start().await;
    let (mut a, b, credential_a, server) = two_identities(&entra).await;
    let issued = |token: String| {
        entra
            .issued(&token)
            .expect("a token the Entra server issued")
    };
    for (mounted, kind, value) in [
        (&a, "clientId", a.identity.client_id.clone()),
        (&b, "objectId", b.identity.object_id.clone()),
    ] {
        let token = issued(
            javascript(&server, SCOPE, Some((kind, &value)))
                .await
                .token(),
        );
        assert_eq!(token.client_id, mounted.identity.client_id, "{kind}");
        assert_eq!(
            token.cert_sha256_hex,
            mounted.certificate.sha256_hex(),
            "{kind}"
        );
    }
    // The CSI driver swaps `..data`: the next process gets the new certificate's token.
    let next = a.rotate(&entra);
    wait_for_certificate(&credential_a, &next, Duration::from_secs(20)).await;
    entra
        .wait_for_token_requests(3, Duration::from_secs(20))
        .await;
    let by_js = issued(
        javascript(&server, SCOPE, Some(("clientId", &a.identity.client_id)))
            .await
            .token(),
    );
    assert_eq!(by_js.cert_sha256_hex, next.sha256_hex());
    // A short outage: Entra asks for a second, twice (the server's own two attempts),
    // then answers. The client, retrying at the server's Retry-After, gets a token.
    let fresh = "api://after-the-outage/.default";
    entra.enqueue(Scripted::status(503).retry_after("1"));
    entra.enqueue(Scripted::status(503).retry_after("1"));
    let token = issued(
        javascript(&server, fresh, Some(("clientId", &a.identity.client_id)))
            .await
            .token(),
    );
    assert_eq!(token.scope, fresh);
    let asked = entra
        .requests()
        .iter()
        .filter(|r| r.scope.as_deref() == Some(fresh))
        .count();
    assert_eq!(
        asked, 3,
        "two failed attempts, then the one the client's retry made"
    );
    // A refusal reaches it in the SDKs' dialect: MSAL Node prints Entra's error codes,
    // timestamp and trace id from the body ("Not Available" where they are missing).
    let refused = "api://refused/.default";
    entra
        .on(msi_dataplane_testing::Match::any().scope(refused))
        .respond(Scripted::aadsts(
            400,
            "invalid_scope",
            70011,
            "The scope is not valid.",
        ))
        .mount();
    let error = javascript(&server, refused, Some(("clientId", &b.identity.client_id)))
        .await
        .error();
    let code = entra
        .requests()
        .iter()
        .rev()
        .find(|r| r.scope.as_deref() == Some(refused))
        .map(|r| r.aadsts_code)
        .unwrap();
    assert_eq!(code, Some(70011), "the refusal came from Entra");
    assert!(error.contains("AADSTS70011"), "{error}");
    assert!(
        error.contains("Error(s): 70011"),
        "Entra's error codes: {error}"
    );
    assert!(
        !error.contains("Trace ID: Not Available"),
        "Entra's trace id: {error}"
    );
    assert!(
        !error.contains("Timestamp: Not Available"),
        "Entra's timestamp: {error}"
    );
}

//! `msi-credential vault list` against the test Key Vault: each stored credential with its
//! renewal state, in text and `--json`, and never a secret value.
#![cfg(feature = "keyvault")]

use crate::support;

use assert_cmd::Command;
use msi_dataplane_testing::{KeyVaultServer, Scripted};
use serde_json::{Value, json};
use support::entra::EntraServer;
use support::fixtures::credential_path;

const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vault_list_reports_each_credential_s_renewal_state_without_values() {
    let entra = EntraServer::start().await;
    support::harness::register(&entra, "pem-pkcs8");
    let vault = KeyVaultServer::start(&entra, TENANT).await;
    vault.set_page_size(2);
    let tags = |ra: &str, cra: &str| json!({"renew_after": ra, "cannot_renew_after": cra});
    vault.seed(
        "uamsi-current",
        "VALUE-NEEDLE-1",
        tags("2999-01-01T00:00:00Z", "2999-06-01T00:00:00Z"),
        1_700_000_000,
        32_503_680_000,
    );
    vault.seed(
        "uamsi-due",
        "VALUE-NEEDLE-2",
        tags("2020-01-01T00:00:00Z", "2999-06-01T00:00:00Z"),
        1_700_000_000,
        32_503_680_000,
    );
    vault.seed(
        "msi-dead",
        "VALUE-NEEDLE-3",
        tags("2020-01-01T00:00:00Z", "2021-01-01T00:00:00Z"),
        1_600_000_000,
        32_503_680_000,
    );
    vault.seed(
        "db-password",
        "VALUE-NEEDLE-4",
        json!({}),
        1_600_000_000,
        32_503_680_000,
    );

    // The credential file points at the test Entra server.
    let dir = support::atomic_writer::TempDir::new("cli-vault");
    let mut creds: Value =
        serde_json::from_slice(&std::fs::read(credential_path("pem-pkcs8")).unwrap()).unwrap();
    creds["authentication_endpoint"] = json!(entra.base_url());
    let cred_file = dir.join("app.json");
    std::fs::write(&cred_file, creds.to_string()).unwrap();
    let run = |json: bool| {
        let (url, cred_file) = (vault.url(), cred_file.clone());
        let ca_file = EntraServer::write_ca_pem(dir.path());
        tokio::task::spawn_blocking(move || {
            let mut cmd = Command::cargo_bin("msi-credential").unwrap();
            cmd.args(["vault", "list", &url, "--credential"])
                .arg(&cred_file);
            cmd.arg("--ca-file")
                .arg(&ca_file)
                .arg("--no-verify-challenge-resource");
            if json {
                cmd.arg("--json");
            }
            cmd.output().unwrap()
        })
    };
    let out = run(true).await.unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(&stdout).unwrap();
    let states: Vec<(String, String)> = v["credentials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_owned(),
                c["state"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [
            ("msi-dead".to_owned(), "unusable".to_owned()),
            ("uamsi-current".to_owned(), "current".to_owned()),
            ("uamsi-due".to_owned(), "due".to_owned()),
        ]
    );
    assert!(!stdout.contains("VALUE-NEEDLE"));

    let out = run(false).await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success());
    assert!(text.contains("3 stored credential(s)"), "{text}");
    assert!(text.contains("past cannot_renew_after"), "{text}");
    assert!(!text.contains("VALUE-NEEDLE"));
    // No value was ever requested: only listing pages.
    assert!(
        vault
            .requests()
            .iter()
            .filter(|r| r.authorized)
            .all(|r| r.path == "/secrets")
    );
}

/// A Key Vault failure is the service's (exit 5) or transient (exit 7), never "the
/// credential file is unusable" (exit 4), though the command was given a credential file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vault_failures_exit_by_category_not_as_file_errors() {
    let entra = EntraServer::start().await;
    support::harness::register(&entra, "pem-pkcs8");
    let vault = KeyVaultServer::start(&entra, TENANT).await;
    let dir = support::atomic_writer::TempDir::new("cli-vault-fail");
    let mut creds: Value =
        serde_json::from_slice(&std::fs::read(credential_path("pem-pkcs8")).unwrap()).unwrap();
    creds["authentication_endpoint"] = json!(entra.base_url());
    let cred_file = dir.join("app.json");
    std::fs::write(&cred_file, creds.to_string()).unwrap();
    let ca_file = EntraServer::write_ca_pem(dir.path());
    let list = |url: String| {
        let (cred_file, ca_file) = (cred_file.clone(), ca_file.clone());
        tokio::task::spawn_blocking(move || {
            let out = Command::cargo_bin("msi-credential")
                .unwrap()
                .args([
                    "vault",
                    "list",
                    &url,
                    "--json",
                    "--no-verify-challenge-resource",
                ])
                .args(["--attempts", "1"])
                .arg("--credential")
                .arg(&cred_file)
                .arg("--ca-file")
                .arg(&ca_file)
                .output()
                .unwrap();
            let json: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            (out.status.code(), json)
        })
    };

    // Key Vault refuses: the service's answer, with its code.
    for _ in 0..2 {
        vault.enqueue(
            Scripted::status(403)
                .body(r#"{"error":{"code":"Forbidden","message":"Caller is not authorized"}}"#),
        );
    }
    let (code, json) = list(vault.url()).await.unwrap();
    assert_eq!(code, Some(5), "{json}");
    assert_eq!(json["error"]["category"], "service", "{json}");
    assert_eq!(json["error"]["kind"], "key_vault", "{json}");
    assert_eq!(json["error"]["file"], Value::Null, "{json}");

    // Nobody listens: a transport failure, worth trying again later.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let (code, json) = list(format!("https://127.0.0.1:{port}/")).await.unwrap();
    assert_eq!(code, Some(7), "{json}");
    assert_eq!(json["error"]["category"], "transient", "{json}");
}

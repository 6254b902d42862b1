//! The HTTP settings shared by the credential, the data plane client and the Key Vault
//! store (`Environment`): each refuses a client of the caller's together with extra roots,
//! and each trusts extra roots in the client it builds (a real HTTPS server whose CA only
//! the extra roots name).

use crate::support;

use std::time::Duration;

use msi_dataplane::dataplane::ClientFactory;
use msi_dataplane::{
    ClientCertificateCredential, ClientCertificateCredentialOptions, Environment, Error, ErrorKind,
    RetryPolicy,
};
use support::entra::EntraServer;
use support::fixtures::load_with_endpoint;
use support::harness::{ARM, https_client, register};

/// A client of the caller's and extra roots: the one conflict every builder refuses.
fn both() -> Environment {
    Environment::default()
        .with_http_client(https_client())
        .with_extra_root_certificates_pem(&EntraServer::ca_pem())
        .unwrap()
}

fn assert_conflict(err: &Error) {
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Config {
                code: "conflicting_options",
                field: "http_client",
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.kind().code(), "conflicting_options");
    assert!(err.to_string().contains("add_root_certificate"), "{err}");
}

/// The test CA's roots in the crate-built client, nothing retried.
fn roots() -> Environment {
    Environment::default()
        .with_extra_root_certificates_pem(&EntraServer::ca_pem())
        .unwrap()
        .with_request_timeout(Duration::from_secs(10))
        .unwrap()
}

fn credential_options(http: Environment) -> ClientCertificateCredentialOptions {
    ClientCertificateCredentialOptions::default()
        .with_environment(http.with_retry_policy(RetryPolicy::none()))
}

/// A credential that reaches `server` through the tests' own client.
fn credential(server: &EntraServer) -> ClientCertificateCredential {
    register(server, "pem-pkcs8");
    let creds = load_with_endpoint("pem-pkcs8", &server.base_url());
    ClientCertificateCredential::new(
        &creds,
        credential_options(Environment::default().with_http_client(https_client())),
    )
    .unwrap()
}

#[test]
fn the_settings_are_made_once_and_one_value_serves_every_builder() {
    let pem = EntraServer::ca_pem();
    let timeout = Duration::from_secs(7);
    let http = Environment::default()
        .with_extra_root_certificates_pem(&pem)
        .unwrap()
        .allow_http_loopback(true)
        .with_request_timeout(timeout)
        .unwrap();
    let credential = ClientCertificateCredentialOptions::default().with_environment(http.clone());
    for got in [credential.environment(), &http] {
        let debug = format!("{got:?}");
        assert!(debug.contains("extra_root_certificates: 1"), "{debug}");
        assert!(debug.contains("allow_http_loopback: true"), "{debug}");
        assert_eq!(got.request_timeout(), timeout);
    }
    // Cargo's scratch directory for integration tests (under target/).
    let from_file = Environment::default()
        .with_extra_root_certificates_file(EntraServer::write_ca_pem(env!("CARGO_TARGET_TMPDIR")))
        .unwrap();
    assert!(
        format!("{from_file:?}").contains("extra_root_certificates: 1"),
        "{from_file:?}"
    );
    // `with_environment` replaces the settings made before.
    let shared = Environment::default()
        .with_request_timeout(Duration::from_secs(3))
        .unwrap();
    let replaced = credential.clone().with_environment(shared.clone());
    assert_eq!(
        replaced.environment().request_timeout(),
        Duration::from_secs(3)
    );
    let debug = format!("{:?}", replaced.environment());
    assert!(debug.contains("extra_root_certificates: 0"), "{debug}");
    // Debug shows the settings, never the client's internals.
    let debug = format!("{credential:?}");
    assert!(debug.contains("extra_root_certificates: 1"), "{debug}");
    assert!(debug.contains("request_timeout: 7s"), "{debug}");
    // A file without a certificate is refused, naming the file.
    let empty = std::env::temp_dir().join(format!("http-options-empty-{}.pem", std::process::id()));
    std::fs::write(&empty, b"no certificate here\n").unwrap();
    let err = Environment::default()
        .with_extra_root_certificates_file(&empty)
        .unwrap_err();
    assert!(err.to_string().contains(&*empty.to_string_lossy()), "{err}");
    assert!(
        matches!(
            err.kind(),
            ErrorKind::Config {
                code: "http_client",
                ..
            }
        ),
        "{err:?}"
    );
    std::fs::remove_file(&empty).unwrap();
}

#[test]
fn the_credential_refuses_a_client_with_extra_roots() {
    let creds = load_with_endpoint("pem-pkcs8", "https://127.0.0.1:1/");
    let err = ClientCertificateCredential::new(&creds, credential_options(both())).unwrap_err();
    assert_conflict(&err);
    // The roots would apply only to the crate-built client: refused, not dropped. Each
    // alone is fine.
    ClientCertificateCredential::new(&creds, credential_options(roots())).unwrap();
    let own = Environment::default().with_http_client(https_client());
    ClientCertificateCredential::new(&creds, credential_options(own)).unwrap();
}

#[tokio::test]
async fn the_data_plane_client_refuses_a_client_with_extra_roots() {
    let server = EntraServer::start().await;
    let options = both();
    let err = ClientFactory::new(credential(&server), "https://identity.azure.net/", options)
        .unwrap_err();
    assert_conflict(&err);
    // Each alone is fine.
    ClientFactory::new(
        credential(&server),
        "https://identity.azure.net/",
        Environment::default().with_http_client(https_client()),
    )
    .unwrap();
    ClientFactory::new(credential(&server), "https://identity.azure.net/", roots()).unwrap();
}

#[tokio::test]
async fn the_credential_trusts_extra_roots() {
    let server = EntraServer::start().await;
    register(&server, "pem-pkcs8");
    let creds = load_with_endpoint("pem-pkcs8", &server.base_url());
    // Without the roots, the test CA is unknown: the TLS handshake fails, nothing arrives.
    let untrusting =
        ClientCertificateCredential::new(&creds, credential_options(Environment::default()))
            .unwrap();
    let err = untrusting.get_token(&[ARM]).await.unwrap_err();
    assert!(matches!(err.kind(), ErrorKind::Transport(_)), "{err:?}");
    assert_eq!(server.token_requests(), 0);
    // With them, a token.
    let trusting = ClientCertificateCredential::new(&creds, credential_options(roots())).unwrap();
    trusting.get_token(&[ARM]).await.unwrap();
    assert_eq!(server.token_requests(), 1);
}

#[tokio::test]
async fn the_data_plane_client_trusts_extra_roots() {
    // The Entra server stands in for a data plane host: any HTTPS answer proves the
    // handshake; it answers 404 on paths that are not token paths.
    let server = EntraServer::start().await;
    let identity_url = format!(
        "{}/subscriptions/0000/resourcegroups/rg/providers/Microsoft.Compute/virtualMachines/vm/credentials/v2/identities?arpId=x",
        server.base_url().trim_end_matches('/')
    );
    let no_retry = RetryPolicy::none();
    let untrusting = ClientFactory::new(
        credential(&server),
        "https://identity.azure.net/",
        Environment::default().with_retry_policy(no_retry.clone()),
    )
    .unwrap();
    let err = untrusting
        .client(&identity_url)
        .unwrap()
        .get_system_assigned_identity_credentials()
        .await
        .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Transport(t) if t.service == "data plane"),
        "{err:?}"
    );
    let trusting = ClientFactory::new(
        credential(&server),
        "https://identity.azure.net/",
        roots().with_retry_policy(no_retry),
    )
    .unwrap();
    let err = trusting
        .client(&identity_url)
        .unwrap()
        .get_system_assigned_identity_credentials()
        .await
        .unwrap_err();
    let ErrorKind::Service(answer) = err.kind() else {
        panic!("the server's answer, not a transport failure: {err:?}")
    };
    assert_eq!(answer.status, 404, "{err:?}");
}

#[cfg(feature = "keyvault")]
mod store {
    use std::sync::Arc;

    use msi_dataplane::RetryPolicy;
    use msi_dataplane::keyvault::store::{CredentialStore, StoreOptions};

    use super::*;

    fn store_options(http: Environment) -> StoreOptions {
        StoreOptions::default().with_environment(http.with_retry_policy(RetryPolicy::none()))
    }

    #[tokio::test]
    async fn the_store_refuses_a_client_with_extra_roots() {
        let server = EntraServer::start().await;
        let credential = Arc::new(credential(&server));
        let err = CredentialStore::new(
            "https://my-vault.vault.azure.net/",
            credential.clone(),
            store_options(both()),
        )
        .unwrap_err();
        assert_conflict(&err);
        CredentialStore::new(
            "https://my-vault.vault.azure.net/",
            credential,
            store_options(roots()),
        )
        .unwrap();
    }

    #[tokio::test]
    async fn the_store_trusts_extra_roots() {
        // The Entra server stands in for the vault: any HTTPS answer proves the handshake
        // (404: `/secrets` is not a token path).
        let server = EntraServer::start().await;
        let credential = Arc::new(credential(&server));
        let untrusting = CredentialStore::new(
            &server.base_url(),
            credential.clone(),
            store_options(Environment::default()),
        )
        .unwrap();
        let err = untrusting.list().await.unwrap_err();
        assert!(
            matches!(err.kind(), ErrorKind::Transport(t) if t.service == "Key Vault"),
            "{err:?}"
        );
        let trusting =
            CredentialStore::new(&server.base_url(), credential, store_options(roots())).unwrap();
        let err = trusting.list().await.unwrap_err();
        assert!(
            matches!(
                err.kind(),
                ErrorKind::Service(e) if e.status == 404
            ),
            "the vault's answer, not a transport failure: {err:?}"
        );
    }
}

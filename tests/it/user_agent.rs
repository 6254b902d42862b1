//! The `User-Agent` on the wire, as the test servers recorded it: a token request, a data
//! plane call and a Key Vault call each carry `azsdk-rust-msi-dataplane/<version> (<OS>;
//! <ARCH>)`, after the application id when one is set, whichever HTTP client sends them.

use crate::support;

use std::time::Duration;

use msi_dataplane::dataplane::ClientFactory;
use msi_dataplane::{
    ClientCertificateCredential, Environment, ErrorCategory, ErrorKind, RetryPolicy,
};
use msi_dataplane_testing::{DataPlaneServer, RecordedRequest};
use support::entra::EntraServer;
use support::fixtures::fixture_credentials;
use support::harness::{ARM, credential_with, https_client, https_env};

/// The fixtures' home tenant (the test servers' tenant).
const TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";

/// What the crate sends, built here independently of the crate's code.
fn crate_agent() -> String {
    format!(
        "azsdk-rust-msi-dataplane/{} ({}; {})",
        env!("CARGO_PKG_VERSION"),
        std::env::consts::OS,
        std::env::consts::ARCH
    )
}

fn with_app(http: Environment) -> Environment {
    http.with_application_id("myapp").unwrap()
}

fn credential(entra: &EntraServer, http: Environment) -> ClientCertificateCredential {
    credential_with(
        entra,
        "pem-pkcs8",
        msi_dataplane::ClientCertificateCredentialOptions::default().with_environment(http),
    )
}

fn token_agents(entra: &EntraServer) -> Vec<Option<String>> {
    entra
        .requests()
        .iter()
        .map(|r: &RecordedRequest| r.user_agent.clone())
        .collect()
}

#[tokio::test]
async fn a_token_request_names_the_crate_and_its_platform() {
    let entra = EntraServer::start().await;
    let credential = credential(&entra, https_env());
    credential.get_token(&[ARM]).await.unwrap();
    assert_eq!(token_agents(&entra), [Some(crate_agent())]);
    // The recorded value is the header as sent.
    let requests = entra.requests();
    assert_eq!(
        requests[0].header("user-agent"),
        Some(crate_agent().as_str())
    );
}

#[tokio::test]
async fn a_token_request_puts_the_application_id_first() {
    let entra = EntraServer::start().await;
    let credential = credential(&entra, with_app(https_env()));
    credential.get_token(&[ARM]).await.unwrap();
    let agents = token_agents(&entra);
    assert_eq!(agents, [Some(format!("myapp {}", crate_agent()))]);
    assert!(agents[0].as_deref().unwrap().starts_with("myapp "));
}

#[tokio::test]
async fn a_callers_own_client_with_its_own_default_agent_still_sends_the_crates() {
    let ca = reqwest::Certificate::from_pem(&EntraServer::ca_pem()).unwrap();
    let own = reqwest::Client::builder()
        .tls_certs_only([ca])
        .redirect(reqwest::redirect::Policy::none())
        .user_agent("somebody-else/9.9")
        .build()
        .unwrap();
    let entra = EntraServer::start().await;
    let http = Environment::default().with_http_client(own);
    let credential = credential(&entra, with_app(http));
    credential.get_token(&[ARM]).await.unwrap();
    let requests = entra.requests();
    let sent: Vec<&str> = requests[0]
        .headers
        .iter()
        .filter(|(n, _)| n == "user-agent")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(
        sent,
        [format!("myapp {}", crate_agent())],
        "one value, ours"
    );
}

#[tokio::test]
async fn the_crate_built_client_sends_it_too() {
    // No client of the caller's: the crate's own (extra roots for the test CA).
    let entra = EntraServer::start().await;
    let http = Environment::default()
        .with_extra_root_certificates_pem(&EntraServer::ca_pem())
        .unwrap();
    let credential = credential(&entra, with_app(http));
    credential.get_token(&[ARM]).await.unwrap();
    assert_eq!(
        token_agents(&entra),
        [Some(format!("myapp {}", crate_agent()))]
    );
}

#[tokio::test]
async fn the_servers_record_a_bounded_escaped_agent() {
    let entra = EntraServer::start().await;
    let sent = format!("tab\there {}", "a".repeat(600));
    let answer = https_client()
        .post(entra.token_url(TENANT))
        .header("user-agent", &sent)
        .form(&[("grant_type", "client_credentials")])
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 400);
    let recorded = entra.requests()[0].user_agent.clone().unwrap();
    assert!(recorded.starts_with("tab\\there aaa"), "{recorded}");
    assert!(!recorded.contains('\t'), "{recorded}");
    assert!(recorded.ends_with("more bytes)"), "{recorded}");
    assert!(recorded.chars().count() < 540, "{}", recorded.len());
}

fn data_plane_options(http: Environment) -> Environment {
    http.with_retry_policy(
        RetryPolicy::default()
            .with_initial_delay(Duration::from_millis(10))
            .with_max_delay(Duration::from_millis(50)),
    )
}

/// A data plane call (challenge, token, call): every request the data plane and Entra
/// saw, with their `User-Agent`s.
async fn data_plane_call(http: Environment) -> (Vec<Option<String>>, Vec<Option<String>>) {
    let entra = EntraServer::start().await;
    let dp = DataPlaneServer::start(&entra, TENANT, DataPlaneServer::AUDIENCE).await;
    dp.set_system_assigned(fixture_credentials("pem-chain", &entra.base_url()));
    let factory = ClientFactory::new(
        credential(&entra, http.clone()),
        DataPlaneServer::AUDIENCE,
        data_plane_options(http),
    )
    .unwrap();
    let client = factory.client(&dp.identity_url()).unwrap();
    client
        .get_system_assigned_identity_credentials()
        .await
        .unwrap();
    let dp_agents: Vec<Option<String>> = dp.requests().into_iter().map(|r| r.user_agent).collect();
    assert_eq!(dp_agents.len(), 2, "the challenge, then the call");
    (dp_agents, token_agents(&entra))
}

#[tokio::test]
async fn every_data_plane_request_names_the_crate() {
    let (dp, tokens) = data_plane_call(https_env()).await;
    for agent in dp.iter().chain(&tokens) {
        assert_eq!(agent.as_deref(), Some(crate_agent().as_str()));
    }
    assert_eq!(tokens.len(), 1);
}

#[tokio::test]
async fn every_data_plane_request_puts_the_application_id_first() {
    let (dp, tokens) = data_plane_call(with_app(https_env())).await;
    let expected = format!("myapp {}", crate_agent());
    for agent in dp.iter().chain(&tokens) {
        assert_eq!(agent.as_deref(), Some(expected.as_str()));
    }
}

#[tokio::test]
async fn a_bad_application_id_is_a_configuration_error_naming_the_option() {
    for bad in ["", "my app", "myapp/1.0", "an_id_of_twenty_five_chars"] {
        let err = Environment::default().with_application_id(bad).unwrap_err();
        assert!(
            matches!(
                err.kind(),
                ErrorKind::Config {
                    code: "invalid_option",
                    field: "application_id",
                    ..
                }
            ),
            "{bad:?}: {err:?}"
        );
        assert_eq!(err.kind().code(), "invalid_option");
        assert_eq!(err.category(), ErrorCategory::Configuration);
        assert!(err.to_string().contains("application_id"), "{err}");
    }
    let http = Environment::default()
        .with_application_id("exactly_24_characters!!!")
        .unwrap();
    assert_eq!(
        http.user_agent(),
        format!("exactly_24_characters!!! {}", crate_agent())
    );
    assert_eq!(Environment::default().user_agent(), crate_agent());
}

#[cfg(feature = "keyvault")]
mod key_vault {
    use std::sync::Arc;

    use msi_dataplane::keyvault::store::{CredentialStore, StoreOptions};
    use msi_dataplane_testing::KeyVaultServer;

    use super::*;
    use support::fixtures::load;

    const ID: &str = "7c6a1e2b-3f4d-4b8a-9c1e-2d3f4a5b6c7d";

    /// A put and a get through the store: the `User-Agent` of every request the vault and
    /// Entra saw.
    async fn key_vault_calls(http: Environment) -> (Vec<Option<String>>, Vec<Option<String>>) {
        let entra = EntraServer::start().await;
        let vault = KeyVaultServer::start(&entra, TENANT).await;
        let store = CredentialStore::new(
            &vault.url(),
            Arc::new(credential(&entra, http.clone())),
            StoreOptions::default()
                .with_environment(http)
                .verify_challenge_resource(false),
        )
        .unwrap();
        store
            .put_user_assigned_identity(ID, &load("rotation-1"))
            .await
            .unwrap();
        store.get_user_assigned_identity(ID, None).await.unwrap();
        let agents: Vec<Option<String>> =
            vault.requests().into_iter().map(|r| r.user_agent).collect();
        assert!(agents.len() >= 3, "challenge, put, get: {agents:?}");
        (agents, token_agents(&entra))
    }

    /// The crate's agent, then the SDK's own.
    fn assert_key_vault_agent(agent: Option<&str>, prefix: &str) {
        let agent = agent.unwrap_or_else(|| panic!("no User-Agent"));
        let ours = format!("{prefix}{} ", crate_agent());
        let sdk = agent
            .strip_prefix(&ours)
            .unwrap_or_else(|| panic!("{agent:?} does not start with {ours:?}"));
        assert!(
            sdk.starts_with("azsdk-rust-security_keyvault_secrets/"),
            "the SDK's agent follows: {agent:?}"
        );
        assert!(
            sdk.ends_with(&format!(
                "{}; {})",
                std::env::consts::OS,
                std::env::consts::ARCH
            )),
            "{agent:?}"
        );
        assert!(!sdk.contains("myapp"), "the id appears once: {agent:?}");
    }

    #[tokio::test]
    async fn every_key_vault_request_names_the_crate_then_the_sdk() {
        let (vault, tokens) = key_vault_calls(https_env()).await;
        for agent in &vault {
            assert_key_vault_agent(agent.as_deref(), "");
        }
        for agent in &tokens {
            assert_eq!(agent.as_deref(), Some(crate_agent().as_str()));
        }
    }

    #[tokio::test]
    async fn every_key_vault_request_puts_the_application_id_first() {
        let (vault, tokens) = key_vault_calls(with_app(https_env())).await;
        for agent in &vault {
            assert!(agent.as_deref().unwrap().starts_with("myapp "), "{agent:?}");
            assert_key_vault_agent(agent.as_deref(), "myapp ");
        }
        let expected = format!("myapp {}", crate_agent());
        for agent in &tokens {
            assert_eq!(agent.as_deref(), Some(expected.as_str()));
        }
    }
}

//! An Azure SDK-style client authenticating with the reloading credential.
//!
//! Every Azure SDK for Rust client is an `azure_core::http::Pipeline` with azure_core's
//! `BearerTokenAuthorizationPolicy`; this example builds one exactly so, hands it
//! [`UserAssignedIdentityCredential`] as its `Arc<dyn TokenCredential>`, and calls a
//! resource service. Everything runs on loopback: the Entra-compatible test server (which
//! verifies each assertion as Entra does) and an HTTPS resource service that accepts only
//! tokens that server issued. No network is needed.
//!
//! With a real SDK client, the credential goes where the client asks for one, e.g.
//! `SecretClient::new(vault_url, credential.clone(), None)`.
//!
//! ```text
//! cargo run --example azure_sdk_client
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::ExitCode;
use std::sync::Arc;

use azure_core::credentials::TokenCredential;
use msi_dataplane::{UserAssignedIdentityCredential, UserAssignedIdentityCredentialOptions};
use support::atomic_writer::TempDir;
use support::azure_sdk::{Resource, get, pipeline};
use support::entra::EntraServer;
use support::fixtures::load_with_endpoint;
use support::harness::{options, register};

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    // The credential file, as the Secrets Store CSI driver would mount it.
    let entra = EntraServer::start().await;
    register(&entra, "pem-pkcs8");
    let dir = TempDir::new("azure-sdk-client");
    let path = dir.join("cloud-provider");
    std::fs::write(
        &path,
        load_with_endpoint("pem-pkcs8", &entra.base_url()).to_json()?,
    )?;

    // The reloading credential, shared by every client of the component.
    let options = UserAssignedIdentityCredentialOptions::default().with_client_options(options());
    let credential: Arc<dyn TokenCredential> =
        Arc::new(UserAssignedIdentityCredential::new(&path, options).await?);

    // An SDK client's pipeline, and three calls: one token request, then the policy's cache.
    let resource = Resource::start(&entra).await;
    let client = pipeline(credential);
    for path in ["/subscriptions", "/resourceGroups", "/providers"] {
        let response = get(&client, &resource.url(path)).await?;
        println!("GET {path} -> {}", u16::from(response.status()));
        if !response.status().is_success() {
            return Err(format!("{path}: HTTP {}", u16::from(response.status())).into());
        }
    }
    println!(
        "token requests to Entra: {} (later calls reused the cached token)",
        entra.token_requests()
    );
    Ok(())
}

//! A cloud-config consumer: read `azure.json`, build the credential it names, and get an
//! ARM token for the config's cloud.
//!
//! With no arguments, it writes an ARO HCP-style `azure.json` and the credential file it
//! points to into a temporary directory, and talks to the Entra-compatible test server on
//! loopback (no network). It also shows the refusal of a config that selects both the VM
//! managed identity and a credential file.
//!
//! With `--config PATH`, it reads that cloud config and uses the real Entra endpoint of
//! the credential file it names.
//!
//! ```text
//! cargo run --example cloud_config
//! cargo run --example cloud_config -- --config /etc/kubernetes/azure.json
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::process::ExitCode;

use msi_dataplane::{
    ClientCertificateCredentialOptions, CloudConfig, UserAssignedIdentityCredential,
    UserAssignedIdentityCredentialOptions,
};
use support::atomic_writer::TempDir;
use support::entra::EntraServer;
use support::fixtures::load_with_endpoint;
use support::harness::{options, register};

#[tokio::main]
async fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let config = match (args.next().as_deref(), args.next()) {
        (None, _) => None,
        (Some("--config"), Some(path)) => Some(PathBuf::from(path)),
        _ => {
            eprintln!("usage: cloud_config [--config PATH]");
            return ExitCode::from(2);
        }
    };
    let result = match config {
        Some(path) => consume(&path, ClientCertificateCredentialOptions::default())
            .await
            .map_err(Into::into),
        None => demo().await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What a component does with its cloud config.
async fn consume(
    config_path: &std::path::Path,
    client: ClientCertificateCredentialOptions,
) -> Result<(), msi_dataplane::Error> {
    let config = CloudConfig::from_path(config_path)?;
    let cloud = config.cloud()?;
    println!(
        "cloud:          {cloud} (ARM {})",
        cloud.resource_manager_endpoint()
    );
    println!("identity file:  {}", config.identity_path()?.display());
    let options = UserAssignedIdentityCredentialOptions::default().with_client_options(client);
    let credential = UserAssignedIdentityCredential::from_cloud_config(&config, options).await?;
    let scope = cloud.resource_manager_scope();
    let token = credential.get_token(&[scope.as_str()]).await?;
    println!("token for:      {scope}");
    println!("expires on:     {}", token.expires_on());
    Ok(())
}

/// Writes a config and credential file, then consumes them against the local server.
async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    let entra = EntraServer::start().await;
    register(&entra, "pem-pkcs8");
    let dir = TempDir::new("cloud-config-example");
    let identity = dir.join("cloud-provider");
    std::fs::write(
        &identity,
        load_with_endpoint("pem-pkcs8", &entra.base_url()).to_json()?,
    )?;
    let config = |use_imds: bool| {
        serde_json::json!({
            "cloud": "AzurePublicCloud",
            "tenantId": "72f988bf-86f1-41af-91ab-2d7cd011db47",
            "subscriptionId": "11111111-2222-3333-4444-555555555555",
            "resourceGroup": "hcp-managed-rg",
            "location": "eastus",
            "useManagedIdentityExtension": use_imds,
            "aadMSIDataPlaneIdentityPath": identity,
        })
        .to_string()
    };
    let good = dir.join("azure.json");
    std::fs::write(&good, config(false))?;
    consume(&good, options()).await?;

    let conflicting = dir.join("azure-conflicting.json");
    std::fs::write(&conflicting, config(true))?;
    match consume(&conflicting, options()).await {
        Err(e) => println!("\nrefused, as it should be:\n  {e}"),
        Ok(()) => return Err("a conflicting config was accepted".into()),
    }
    Ok(())
}

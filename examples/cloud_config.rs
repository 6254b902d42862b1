//! A cloud-config consumer: read `azure.json`, build the credential it names, and get an
//! ARM token for the config's cloud.
//!
//! With no arguments, it writes an ARO HCP-style `azure.json` and the credential file it
//! points to into a temporary directory, and talks to the testing kit's Entra-compatible
//! server on loopback (the `msi-dataplane-testing` crate; no network): the identity and its certificate
//! are made at run time and registered with that server. It also shows the refusal of a
//! config that selects both the VM managed identity and a credential file.
//!
//! With `--config PATH`, it reads that cloud config and uses the real Entra endpoint of
//! the credential file it names.
//!
//! ```text
//! cargo run --example cloud_config
//! cargo run --example cloud_config -- --config /etc/kubernetes/azure.json
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use msi_dataplane::{
    BundleFormat, ClientCertificateCredentialOptions, CloudConfig, Environment, ReloadOptions,
};
use msi_dataplane_testing::{EntraServer, TempDir, TestCertificate, TestIdentity};

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
    let credential = config
        .identity_credential(client, ReloadOptions::default())
        .await?;
    let scope = cloud.resource_manager_scope();
    let token = credential.get_token(&[scope.as_str()]).await?;
    println!("token for:      {scope}");
    println!(
        "expires on:     {}",
        msi_dataplane::rfc3339(token.expires_on())
    );
    Ok(())
}

/// Writes a config and credential file, then consumes them against the local server.
async fn demo() -> Result<(), Box<dyn std::error::Error>> {
    // Entra on loopback, and an identity with a certificate it trusts.
    let entra = EntraServer::start().await;
    let identity = TestIdentity::new();
    let certificate = TestCertificate::self_signed();
    entra.register(&identity, &certificate);
    // The credential file, and the config naming it.
    let dir = TempDir::new("cloud-config-example");
    let identity_path = dir.join("cloud-provider");
    let creds = identity.credentials(&certificate, &entra.base_url(), BundleFormat::Pem);
    std::fs::write(&identity_path, creds.to_json()?)?;
    let config = |use_imds: bool| {
        serde_json::json!({
            "cloud": "AzurePublicCloud",
            "tenantId": identity.tenant_id,
            "subscriptionId": "11111111-2222-3333-4444-555555555555",
            "resourceGroup": "hcp-managed-rg",
            "location": "eastus",
            "useManagedIdentityExtension": use_imds,
            "aadMSIDataPlaneIdentityPath": identity_path,
        })
        .to_string()
    };
    // The HTTP client trusts the kit's test CA (a real component keeps the default).
    let options = ClientCertificateCredentialOptions::default()
        .with_environment(Environment::default().with_http_client(entra.client()));
    let good = dir.join("azure.json");
    std::fs::write(&good, config(false))?;
    consume(&good, options.clone()).await?;

    let conflicting = dir.join("azure-conflicting.json");
    std::fs::write(&conflicting, config(true))?;
    match consume(&conflicting, options).await {
        Err(e) => println!("\nrefused, as it should be:\n  {e}"),
        Ok(()) => return Err("a conflicting config was accepted".into()),
    }
    Ok(())
}

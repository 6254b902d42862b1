//! A control-plane component as HyperShift runs one on ARO HCP: it learns where its
//! credential file is from `MANAGED_AZURE_HCP_CREDENTIALS_FILE_PATH`, builds the reloading
//! credential once at start-up, and asks it for a token whenever it calls Azure.
//!
//! Run as a component (the variables set, as in the pod):
//!
//! ```text
//! MANAGED_SERVICE=ARO-HCP MANAGED_AZURE_HCP_CREDENTIALS_FILE_PATH=/mnt/certs/<secret> \
//!     cargo run --example cpo_component
//! ```
//!
//! With the variable unset (`cargo run --example cpo_component`), it
//! plays the pod for you, without any network: it starts the testing kit's
//! Entra-compatible server on loopback, makes an identity and certificate at run time,
//! writes their credential file into a temporary directory, and runs itself as the
//! component with the variables set (a child process, so the variables are read from a
//! real environment). The child trusts the test server's CA through
//! `MSI_DATAPLANE_EXAMPLE_CA_FILE`, a variable of this example only.

use std::process::{Command, ExitCode};

use msi_dataplane::hypershift::{self, CREDENTIALS_FILE_PATH_ENV, MANAGED_SERVICE_ENV};
use msi_dataplane::{
    BundleFormat, ClientCertificateCredentialOptions, Cloud, Environment, ReloadOptions,
};
use msi_dataplane_testing::{EntraServer, TempDir, TestCertificate, TestIdentity};

/// This example's own variable: a PEM file of extra root CAs to trust (the test CA).
const CA_FILE_ENV: &str = "MSI_DATAPLANE_EXAMPLE_CA_FILE";

#[tokio::main]
async fn main() -> ExitCode {
    let result = if std::env::var_os(CREDENTIALS_FILE_PATH_ENV).is_some() {
        component().await
    } else {
        play_the_pod().await
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What the component does: everything it needs comes from its environment.
async fn component() -> Result<(), Box<dyn std::error::Error>> {
    if !hypershift::is_aro_hcp() {
        println!("[component] {MANAGED_SERVICE_ENV} is not ARO-HCP: no managed identity to use");
        return Ok(());
    }
    println!(
        "[component] credential file: {}",
        hypershift::credentials_path()?.display()
    );
    let mut http = Environment::default();
    if let Some(ca) = std::env::var_os(CA_FILE_ENV) {
        http = http.with_extra_root_certificates_pem(&std::fs::read(ca)?)?;
    }
    let client = ClientCertificateCredentialOptions::default().with_environment(http);
    let credential = hypershift::credential_from_env(client, ReloadOptions::default()).await?;
    let status = credential.status();
    println!(
        "[component] active certificate {} (valid until {})",
        status.thumbprint_sha256,
        msi_dataplane::rfc3339(status.not_after)
    );

    let scope = Cloud::AZURE_PUBLIC.resource_manager_scope();
    for call in 1..=3 {
        let token = credential.get_token(&[scope.as_str()]).await?;
        println!(
            "[component] call {call}: token for {scope}, expires on {}",
            msi_dataplane::rfc3339(token.expires_on())
        );
    }
    Ok(())
}

/// The pod: a mounted credential file, the variables, and the component started with them.
async fn play_the_pod() -> Result<(), Box<dyn std::error::Error>> {
    // Entra on loopback, and the component's identity with a certificate it trusts.
    let entra = EntraServer::start().await;
    let identity = TestIdentity::new();
    let certificate = TestCertificate::self_signed();
    entra.register(&identity, &certificate);
    // The file the CSI driver mounts at /mnt/certs/<secret>.
    let certs = TempDir::new("cpo-component-certs");
    let file = certs.join("managed-azure-cpo");
    let creds = identity.credentials(&certificate, &entra.base_url(), BundleFormat::Pem);
    std::fs::write(&file, creds.to_json()?)?;
    println!("[pod] {CREDENTIALS_FILE_PATH_ENV}={}", file.display());

    let child = Command::new(std::env::current_exe()?)
        .env(MANAGED_SERVICE_ENV, hypershift::ARO_HCP)
        .env(CREDENTIALS_FILE_PATH_ENV, &file)
        .env(CA_FILE_ENV, EntraServer::write_ca_pem(certs.path()))
        .spawn()?;
    // The server runs on this process's runtime: wait for the child off it.
    let status = tokio::task::spawn_blocking(move || child.wait_with_output()).await??;
    println!(
        "[pod] component exited with {}; Entra answered {} token request(s)",
        status.status,
        entra.token_requests()
    );
    if !status.status.success() {
        return Err("the component failed".into());
    }
    if entra.token_requests() != 1 {
        return Err("expected one token request (the other calls are cached)".into());
    }
    Ok(())
}

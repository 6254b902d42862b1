//! Testing your component's Azure authentication without Azure, with the crate's testing
//! kit (feature `test-util`): copy this into your tests.
//!
//! The "component" is what a service built on this crate looks like: an Azure SDK-style
//! `azure_core` pipeline (with azure_core's `BearerTokenAuthorizationPolicy`) that calls
//! an ARM-like endpoint with the reloading credential read from a CSI-mounted file. The
//! test makes a credential at run time, serves tokens from the kit's verifying Entra
//! server, rotates the mounted file as the CSI driver does, and checks the component's
//! calls are then authorized by a token signed with the new certificate.
//!
//! ```text
//! cargo run --example test_my_component --features test-util
//! ```

#[path = "../tests/support/mod.rs"]
mod support;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use azure_core::credentials::TokenCredential;
use azure_core::http::{Pipeline, Url};
use msi_dataplane::testing::{CsiMount, EntraServer, TestCa, TestCertificate, TestIdentity};
use msi_dataplane::{
    BundleFormat, ClientCertificateCredentialOptions, UserAssignedIdentityCredential,
    UserAssignedIdentityCredentialOptions,
};
// The ARM-like endpoint (accepts only tokens the kit's server issued for ARM) and an
// azure_core transport over reqwest; in your tests, your own service and transport.
use support::azure_sdk::{Resource, get, pipeline};

/// The component under test: lists resource groups through an SDK pipeline.
struct Component {
    pipeline: Pipeline,
    arm: Url,
}

impl Component {
    fn new(credential: Arc<dyn TokenCredential>, arm: Url) -> Component {
        Component {
            pipeline: pipeline(credential),
            arm,
        }
    }

    async fn list_resource_groups(&self) -> Result<u16, azure_core::Error> {
        let url = self
            .arm
            .join("/subscriptions/00000000-0000-0000-0000-000000000000/resourcegroups")?;
        Ok(u16::from(get(&self.pipeline, &url).await?.status()))
    }
}

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
    // Azure without Azure: an identity, a certificate from a test CA, Entra.
    let entra = EntraServer::start().await;
    let identity = TestIdentity::new();
    let ca = TestCa::new("my component tests");
    let first = TestCertificate::builder().signed_by(&ca);
    entra.register(&identity, &first);

    // The credential file, mounted as the Secrets Store CSI driver mounts it.
    let mut mount = CsiMount::with_credentials(&identity.credentials(
        &first,
        &entra.base_url(),
        BundleFormat::Pem,
    ));
    let options = UserAssignedIdentityCredentialOptions::default()
        .with_client_options(
            ClientCertificateCredentialOptions::default().with_http_client(entra.client()),
        )
        .with_debounce(Duration::from_millis(50));
    let credential =
        Arc::new(UserAssignedIdentityCredential::new(mount.visible_path(), options).await?);

    let arm = Resource::start(&entra).await;
    let component = Component::new(credential.clone(), arm.url("/"));
    call_signed_by(&component, &arm, &entra, &first, "before rotation").await?;

    // The MSI service renews; Entra drops the old certificate; the CSI driver rotates.
    let second = TestCertificate::builder().renewing(&first).signed_by(&ca);
    entra.clear_certificates(&identity.client_id, &identity.tenant_id);
    entra.register(&identity, &second);
    let mut status_rx = credential.subscribe();
    mount.rotate_credentials(&identity.credentials(
        &second,
        &entra.base_url(),
        BundleFormat::Pkcs12,
    ));
    tokio::time::timeout(
        Duration::from_secs(20),
        status_rx.wait_for(|s| {
            s.thumbprint_sha256
                .eq_ignore_ascii_case(&second.sha256_hex())
        }),
    )
    .await??;

    // A new component instance (a fresh SDK client: no cached token) after the rotation.
    let component = Component::new(credential, arm.url("/"));
    call_signed_by(&component, &arm, &entra, &second, "after rotation").await?;
    Ok(())
}

/// The component's call succeeds, and the token it sent was signed by `certificate`.
async fn call_signed_by(
    component: &Component,
    arm: &Resource,
    entra: &EntraServer,
    certificate: &TestCertificate,
    when: &str,
) -> Result<(), Box<dyn std::error::Error>> {
    let status = component.list_resource_groups().await?;
    check(status == 200, format!("{when}: HTTP {status}"))?;
    let token = arm
        .seen()
        .pop()
        .and_then(|s| s.token)
        .ok_or("no bearer token seen")?;
    let signer = entra
        .issued(&token)
        .ok_or("token not issued by the kit")?
        .cert_sha256_hex;
    check(
        signer == certificate.sha256_hex(),
        format!("{when}: token signed by the expected certificate"),
    )?;
    println!("{when}: HTTP {status}, token signed by {}", &signer[..16]);
    Ok(())
}

fn check(ok: bool, what: impl Into<String>) -> Result<(), Box<dyn std::error::Error>> {
    if ok { Ok(()) } else { Err(what.into().into()) }
}

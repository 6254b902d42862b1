//! An Azure SDK-style client authenticating with the reloading credential.
//!
//! Every Azure SDK for Rust client is an `azure_core::http::Pipeline` with azure_core's
//! `BearerTokenAuthorizationPolicy`; this example builds one exactly so, hands it
//! [`UserAssignedIdentityCredential`] as its `Arc<dyn TokenCredential>`, and calls a
//! resource service. Everything runs on loopback with the testing kit (the
//! `msi-dataplane-testing` crate): its Entra-compatible server (which verifies each assertion as Entra does)
//! and its `ResourceServer`, an HTTPS service that accepts only tokens that server signed
//! for ARM. No network is needed.
//!
//! With a real SDK client, the credential goes where the client asks for one, e.g.
//! `SecretClient::new(vault_url, credential.clone(), None)`, and the transport is the
//! SDK's default one.
//!
//! ```text
//! cargo run --example azure_sdk_client
//! ```

use std::process::ExitCode;
use std::sync::Arc;

use azure_core::credentials::TokenCredential;
use azure_core::http::policies::Policy;
use azure_core::http::policies::auth::BearerTokenAuthorizationPolicy;
use azure_core::http::{ClientOptions, Context, Method, Pipeline, Request, Transport, Url};
use msi_dataplane::{
    BundleFormat, ClientCertificateCredentialOptions, Environment, ReloadOptions,
    UserAssignedIdentityCredential,
};
use msi_dataplane_testing::{EntraServer, ResourceServer, TempDir, TestCertificate, TestIdentity};

const ARM_SCOPE: &str = "https://management.azure.com/.default";

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

/// An SDK client's pipeline: the bearer-token policy for `scope` over `transport`.
fn pipeline(credential: Arc<dyn TokenCredential>, scope: &str, transport: Transport) -> Pipeline {
    let options = ClientOptions {
        transport: Some(transport),
        ..Default::default()
    };
    let auth: Arc<dyn Policy> = Arc::new(BearerTokenAuthorizationPolicy::new(credential, [scope]));
    Pipeline::new(
        Some("my-component"),
        Some("0.1.0"),
        options,
        Vec::new(),
        vec![auth],
        None,
    )
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    // Azure without Azure: Entra, an identity with a certificate it trusts, and ARM.
    let entra = EntraServer::start().await;
    let identity = TestIdentity::new();
    let certificate = TestCertificate::self_signed();
    entra.register(&identity, &certificate);
    let arm = ResourceServer::start(&entra, ARM_SCOPE).await;

    // The credential file, as the Secrets Store CSI driver would mount it.
    let dir = TempDir::new("azure-sdk-client");
    let path = dir.join("cloud-provider");
    let creds = identity.credentials(&certificate, &entra.base_url(), BundleFormat::Pem);
    std::fs::write(&path, creds.to_json()?)?;

    // The reloading credential, shared by every client of the component. Its HTTP client
    // (and the pipeline's transport below) trusts the kit's test CA.
    let options = ClientCertificateCredentialOptions::default()
        .with_environment(Environment::default().with_http_client(entra.client()));
    let reload = ReloadOptions::default();
    let credential: Arc<dyn TokenCredential> =
        Arc::new(UserAssignedIdentityCredential::new(&path, options, reload).await?);

    // An SDK client's pipeline, and three calls: one token request, then the policy's cache.
    let transport = Transport::new(Arc::new(entra.client()));
    let client = pipeline(credential, ARM_SCOPE, transport);
    let base = Url::parse(&arm.url())?;
    for path in ["/subscriptions", "/resourceGroups", "/providers"] {
        let mut request = Request::new(base.join(path)?, Method::Get);
        let response = client.send(&Context::new(), &mut request, None).await?;
        println!("GET {path} -> {}", u16::from(response.status()));
    }

    // What the service saw: every call authorized by a token signed with our certificate.
    for seen in arm.requests() {
        let signer = seen.issued.map(|issued| issued.cert_sha256_hex);
        if seen.status != 200 || signer.as_deref() != Some(certificate.sha256_hex().as_str()) {
            return Err(format!(
                "{}: HTTP {}, token signed by {signer:?}",
                seen.path, seen.status
            )
            .into());
        }
    }
    println!(
        "token requests to Entra: {} (later calls reused the cached token)",
        entra.token_requests()
    );
    if entra.token_requests() != 1 {
        return Err("expected one token request".into());
    }
    Ok(())
}

//! The producer side: a service asks the MSI data plane for a user-assigned identity's
//! certificate credentials, formats them for Key Vault, and gets a token with them.
//!
//! Everything runs on 127.0.0.1 (HTTPS with the testing kit's CA, the `msi-dataplane-testing` crate):
//! the kit's Entra-compatible server and its data plane (`testing::DataPlaneServer`),
//! which answers the first request with a 401 challenge naming the identity's tenant,
//! checks that the bearer token was issued for its audience in that tenant, and serves
//! the identity's credentials, made at run time and registered with the Entra server.
//!
//! 1. The service's own application credential (fixture `pem-pkcs8`, home tenant A),
//!    built from parts, allowed to answer challenges from other tenants.
//! 2. `ClientFactory::new(credential, audience)`, then `client(identity_url)` for the
//!    identity URL ARM gave (`x-ms-identity-url`).
//! 3. `get_user_assigned_identities_credentials`: 401 challenge for tenant B, a token in
//!    tenant B, the request again; the answer holds the identity's credential.
//! 4. The Key Vault form of it (`uamsi-<id>`), as the CSI driver would mount it.
//! 5. A token with the identity's own certificate.
//!
//! ```text
//! cargo run --example dataplane
//! ```

use std::process::ExitCode;

use msi_dataplane::dataplane::{ClientFactory, UserAssignedIdentitiesRequest};
use msi_dataplane::{
    ClientCertificate, ClientCertificateCredential, ClientCertificateCredentialOptions,
    Environment, UserAssignedIdentityCredentials, keyvault,
};
use msi_dataplane_testing::{DataPlaneServer, EntraServer};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures");
const SERVICE_TENANT: &str = "72f988bf-86f1-41af-91ab-2d7cd011db47";
const IDENTITY_TENANT: &str = "b1d2e3f4-0000-4000-8000-00000000beef";
const IDENTITY: &str = "/subscriptions/1d3e5f7a-9b2c-4d6e-8f0a-2b4c6d8e0f1a/resourcegroups/msi-test/providers/Microsoft.ManagedIdentity/userAssignedIdentities/pfx-aes";
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

fn test_ca_client() -> Result<reqwest::Client, Box<dyn std::error::Error>> {
    let ca = reqwest::Certificate::from_pem(&EntraServer::ca_pem())?;
    Ok(reqwest::Client::builder()
        .tls_certs_only([ca])
        .redirect(reqwest::redirect::Policy::none())
        .build()?)
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    // The local services.
    let entra = EntraServer::start().await;
    let dp = DataPlaneServer::start(&entra, IDENTITY_TENANT, DataPlaneServer::AUDIENCE).await;
    // The identity: a key and certificate made now, registered with the Entra server.
    dp.create_user_assigned(IDENTITY);
    let http = Environment::default().with_http_client(test_ca_client()?);

    // 1. The service's application credential, from parts.
    let service = UserAssignedIdentityCredentials::from_path(format!(
        "{FIXTURES}/credentials/pem-pkcs8.json"
    ))?;
    let service_client_id = service.client_id.clone().unwrap_or_default();
    for tenant in [SERVICE_TENANT, IDENTITY_TENANT] {
        entra.register_certificate_file(
            &service_client_id,
            tenant,
            format!("{FIXTURES}/certs/pem-pkcs8.leaf.pem"),
        );
    }
    let app = ClientCertificateCredential::from_parts(
        &entra.base_url(),
        SERVICE_TENANT,
        &service_client_id,
        ClientCertificate::from_credentials(&service)?,
        ClientCertificateCredentialOptions::default()
            .with_environment(http.clone())
            .with_additionally_allowed_tenants(["*"]),
    )?;
    println!("service app        {service_client_id} (home tenant {SERVICE_TENANT})");
    println!(
        "token endpoint     local Entra-compatible server at {}",
        entra.base_url()
    );

    // 2. The factory, once; a client per identity URL.
    let factory = ClientFactory::new(app, DataPlaneServer::AUDIENCE, http.clone())?;
    let identity_url = dp.identity_url();
    let client = factory.client(&identity_url)?;
    println!("data plane         {client:?} (query not shown: it is signed)");
    println!("scope              {}", factory.scope());

    // 3. The identity's credentials.
    let creds = client
        .get_user_assigned_identities_credentials(&UserAssignedIdentitiesRequest::new([IDENTITY]))
        .await?;
    let identity = creds
        .user_assigned_identity(IDENTITY)
        .ok_or("the data plane did not return the identity asked for")?;
    let requests = dp.requests();
    println!();
    println!(
        "data plane calls   {} ({} challenge(s); the token was for tenant {})",
        requests.len(),
        dp.challenges_sent(),
        entra
            .requests()
            .last()
            .and_then(|r| r.tenant.clone())
            .unwrap_or_default()
    );
    println!(
        "identity           {} client id {}",
        IDENTITY.rsplit('/').next().unwrap_or_default(),
        identity.client_id.as_deref().unwrap_or_default()
    );
    println!(
        "valid              {} .. {} (renew after {})",
        identity.not_before.as_deref().unwrap_or("?"),
        identity.not_after.as_deref().unwrap_or("?"),
        identity.renew_after.as_deref().unwrap_or("?")
    );

    // A second call reuses the token: no second challenge.
    client
        .get_user_assigned_identities_credentials(&UserAssignedIdentitiesRequest::new([IDENTITY]))
        .await?;
    println!(
        "second call        {} challenge(s) in all",
        dp.challenges_sent()
    );

    // 4. Its Key Vault form.
    let client_id = identity.client_id.clone().unwrap_or_default();
    let secret =
        keyvault::format_user_assigned_identity_credentials_for_storage(&client_id, identity)?;
    println!();
    println!("key vault secret   {}", secret.name());
    println!(
        "attributes         nbf {} exp {}",
        secret.attributes().not_before,
        secret.attributes().expires
    );
    println!("tags               {:?}", secret.tags());
    println!("value              {:?}", secret.value());

    // 5. A token with the identity's own certificate (the data plane registered it).
    let credential = ClientCertificateCredential::new(
        identity,
        ClientCertificateCredentialOptions::default().with_environment(http),
    )?;
    let token = credential.get_token(&[ARM_SCOPE]).await?;
    let issued = entra
        .issued(token.token())
        .ok_or("the local Entra server did not issue this token")?;
    println!();
    println!(
        "token for          {ARM_SCOPE}, expires on {}",
        msi_dataplane::rfc3339(token.expires_on())
    );
    println!(
        "issued to          {} in tenant {} (certificate {})",
        issued.client_id, issued.tenant, issued.cert_sha256_hex
    );
    let handed_out = dp.issued();
    println!(
        "data plane log     {} issue(s), the last with certificate {}",
        handed_out.len(),
        handed_out
            .last()
            .and_then(|i| i.cert_sha256_hex.as_deref())
            .unwrap_or("?")
    );
    Ok(())
}

//! Wiring a credential to the local Entra-compatible server.

use msi_dataplane::{ClientCertificateCredential, ClientCertificateCredentialOptions};

use super::entra::EntraServer;
use super::fixtures::{leaf_pem_path, load_with_endpoint};

/// An HTTP client that trusts the test CA (and only it), follows no redirects.
pub fn https_client() -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(&EntraServer::ca_pem()).expect("test CA");
    reqwest::Client::builder()
        .tls_certs_only([ca])
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client")
}

/// Options that reach the test server.
pub fn options() -> ClientCertificateCredentialOptions {
    ClientCertificateCredentialOptions::default().with_http_client(https_client())
}

/// Register a fixture's leaf (from the generator's own file) with the server.
pub fn register(server: &EntraServer, name: &str) {
    let creds = super::fixtures::load(name);
    server.register_certificate_file(
        creds.client_id.as_deref().unwrap(),
        creds.tenant_id.as_deref().unwrap(),
        leaf_pem_path(name),
    );
}

/// A credential for fixture `name`, registered with and pointed at `server`.
pub fn credential(server: &EntraServer, name: &str) -> ClientCertificateCredential {
    credential_with(server, name, options())
}

/// As [`credential`], with options.
pub fn credential_with(
    server: &EntraServer,
    name: &str,
    options: ClientCertificateCredentialOptions,
) -> ClientCertificateCredential {
    register(server, name);
    let creds = load_with_endpoint(name, &server.base_url());
    ClientCertificateCredential::new(&creds, options).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// Hex (lowercase) SHA-256 of the fixture's leaf DER.
pub fn leaf_sha256_hex(name: &str) -> String {
    use sha2::Digest;
    let der = super::fixtures::pem_file_der(&leaf_pem_path(name));
    sha2::Sha256::digest(&der)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The ARM scope used throughout.
pub const ARM: &str = "https://management.azure.com/.default";

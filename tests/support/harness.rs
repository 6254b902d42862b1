//! Wiring a credential to the local Entra-compatible server.

use std::sync::Arc;
use std::time::Duration;

use msi_dataplane::{
    ClientCertificateCredential, ClientCertificateCredentialOptions, Environment, ManualClock,
};

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

/// An environment that reaches the test servers: [`https_client`].
pub fn https_env() -> Environment {
    Environment::default().with_http_client(https_client())
}

/// Options that reach the test server.
pub fn options() -> ClientCertificateCredentialOptions {
    ClientCertificateCredentialOptions::default().with_environment(https_env())
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

/// A manual clock at the present: a credential on it signs assertions the server (on real
/// time) accepts while the clock stays within the server's 5 minutes of skew.
pub fn manual_clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(time::OffsetDateTime::now_utc()))
}

/// As [`credential_with`], on a fresh [`manual_clock`] (returned too).
pub fn credential_on_clock(
    server: &EntraServer,
    name: &str,
    options: ClientCertificateCredentialOptions,
) -> (Arc<ManualClock>, ClientCertificateCredential) {
    let clock = manual_clock();
    let environment = options.environment().clone().with_clock(clock.clone());
    let options = options.with_environment(environment);
    let credential = credential_with(server, name, options);
    (clock, credential)
}

/// A server started with fixture `name` registered (its generator-written leaf).
pub async fn server_with(name: &str) -> EntraServer {
    let server = EntraServer::start().await;
    register(&server, name);
    server
}

/// Wait (really, up to 5 s) until the server has seen `n` token requests.
pub async fn wait_for_token_requests(server: &EntraServer, n: usize) {
    server
        .wait_for_token_requests(n, Duration::from_secs(5))
        .await;
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

/// For benchmarks: the test servers' runtime, one worker thread named `servers`, so the
/// thread that measures runs nothing of theirs.
pub fn server_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("servers")
        .enable_all()
        .build()
        .expect("server runtime")
}

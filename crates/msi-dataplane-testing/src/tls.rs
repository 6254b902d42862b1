//! The kit servers' TLS: one test CA made at run time per process, a server certificate it
//! issues for 127.0.0.1 and localhost, and a client that trusts only that CA.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use super::credentials::TestCa;

/// The process's test CA, made on first use.
pub(crate) fn test_ca() -> &'static TestCa {
    static CA: OnceLock<TestCa> = OnceLock::new();
    CA.get_or_init(|| TestCa::new("msi-dataplane testing CA"))
}

/// Write the test CA certificate (PEM) to `dir/msi-dataplane-testing-ca.pem`, for
/// programs given a CA file; the caller's directory owns (and removes) it.
pub(crate) fn write_ca_pem(dir: &std::path::Path) -> PathBuf {
    let path = dir.join("msi-dataplane-testing-ca.pem");
    std::fs::write(&path, test_ca().certificate_pem())
        .unwrap_or_else(|e| panic!("testing: write {}: {e}", path.display()));
    path
}

/// The rustls configuration every kit server uses (HTTP/1.1, AWS-LC provider), with a
/// certificate for `127.0.0.1` and `localhost` from the kit's test CA: for your own test
/// servers that a client from [`EntraServer::client`](super::EntraServer::client) must
/// trust.
pub fn server_tls_config() -> Arc<rustls::ServerConfig> {
    static CONFIG: OnceLock<Arc<rustls::ServerConfig>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let (cert, key) = test_ca().issue_server(&["127.0.0.1", "localhost"]);
            let certs = vec![
                CertificateDer::from(cert),
                CertificateDer::from(test_ca().certificate_der().to_vec()),
            ];
            let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.to_vec()));
            let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
            let mut config = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .expect("testing: TLS protocol versions")
                .with_no_client_auth()
                .with_single_cert(certs, key)
                .expect("testing: server certificate/key");
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Arc::new(config)
        })
        .clone()
}

/// A client trusting the kit's test CA only, following no redirects.
pub(crate) fn client() -> reqwest::Client {
    let ca = reqwest::Certificate::from_pem(test_ca().certificate_pem().as_bytes())
        .expect("testing: test CA certificate");
    reqwest::Client::builder()
        .tls_certs_only([ca])
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("testing: HTTP client")
}

//! Loading the committed fixtures (see fixtures/README.md).

use std::path::PathBuf;

use msi_dataplane::UserAssignedIdentityCredentials;

/// `fixtures/credentials/<name>.json`.
pub fn credential_path(name: &str) -> PathBuf {
    super::repo_root().join(format!("fixtures/credentials/{name}.json"))
}

/// `fixtures/certs/<name>.leaf.pem`: the leaf as the generator wrote it, independent of the
/// crate's own leaf selection.
pub fn leaf_pem_path(name: &str) -> PathBuf {
    super::repo_root().join(format!("fixtures/certs/{name}.leaf.pem"))
}

/// `fixtures/identity/<name>.pem`: the identity PKI's CA certificates.
pub fn identity_pem_path(name: &str) -> PathBuf {
    super::repo_root().join(format!("fixtures/identity/{name}.pem"))
}

/// Parse a fixture credential file.
pub fn load(name: &str) -> UserAssignedIdentityCredentials {
    UserAssignedIdentityCredentials::from_path(credential_path(name))
        .unwrap_or_else(|e| panic!("fixture {name}: {e}"))
}

/// Parse a fixture and point it at another authority (a local test server).
pub fn load_with_endpoint(name: &str, authority: &str) -> UserAssignedIdentityCredentials {
    let mut creds = load(name);
    creds.authentication_endpoint = Some(authority.to_owned());
    creds
}

/// A fixture's `client_secret` (standard base64 of the bundle).
pub fn secret(name: &str) -> String {
    load(name)
        .client_secret
        .expect("fixture has client_secret")
        .expose_secret()
        .to_owned()
}

/// A fixture's decoded certificate bundle.
pub fn bundle(name: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(secret(name))
        .expect("fixture client_secret is base64")
}

/// DER of the first certificate in a PEM file.
pub fn pem_file_der(path: &std::path::Path) -> Vec<u8> {
    let text = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    pem::parse(text).expect("PEM").into_contents()
}

/// The good fixtures: each must yield a token.
pub const GOOD: &[&str] = &[
    "pem-pkcs8",
    "pem-pkcs1-crlf",
    "pem-pkcs8-with-pkcs1-content",
    "pem-chain",
    "pem-rsa4096",
    "pfx-legacy",
    "pfx-3des",
    "pfx-aes",
    "rotation-1",
];

/// Credentials JSON from `fixtures/credentials/<name>.json` with `authentication_endpoint`
/// set to `authority` (the test Entra server), as the data plane would hand them out: for
/// `DataPlaneServer::set_system_assigned` / `add_user_assigned` (the fixture path; the
/// kit's default makes identities at run time).
pub fn fixture_credentials(name: &str, authority: &str) -> serde_json::Value {
    let path = credential_path(name);
    let text =
        std::fs::read(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut value: serde_json::Value = serde_json::from_slice(&text).expect("fixture JSON");
    value["authentication_endpoint"] = serde_json::json!(authority);
    value
}

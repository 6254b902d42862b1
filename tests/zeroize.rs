//! Key material is not left in freed memory: a scanning global
//! allocator (tests/support/scanning.rs) searches every block freed while a credential
//! file is read, its bundle decoded, its key loaded and an assertion signed, and then
//! while it all is dropped, for pieces of the `client_secret`, of the key's DER and of
//! the key's base64. What the crate owns is zeroized before it is freed; SECURITY.md
//! lists what it does not own.

mod support;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use msi_dataplane::inspect::CredentialReport;
use msi_dataplane::{
    ClientCertificate, ClientCertificateCredential, UserAssignedIdentityCredentials,
};
use support::fixtures::credential_path;
use support::harness::options;
use support::scanning::{Scanning, arm, disarm, set_needles};

/// The test's own copy of a returned secret string, wiped as the caller is asked to.
fn zeroizing(s: String) -> msi_dataplane::SecretString {
    msi_dataplane::SecretString::from(s)
}

#[global_allocator]
static GLOBAL: Scanning = Scanning;

#[test]
fn loading_signing_and_dropping_a_pem_credential_leaves_no_key_material_in_freed_memory() {
    // The needles, from the fixture read here (these copies stay alive past the check).
    let secret = support::fixtures::secret("pem-pkcs8");
    let bundle = support::fixtures::bundle("pem-pkcs8");
    let key_der = pem::parse_many(&bundle)
        .unwrap()
        .into_iter()
        .find(|b| b.tag() == "PRIVATE KEY")
        .unwrap()
        .into_contents();
    let key_b64 = STANDARD.encode(&key_der);
    let mid = |len: usize| len / 2 - 16..len / 2 + 16;
    set_needles(vec![
        (
            "client_secret".into(),
            secret.as_bytes()[mid(secret.len())].to_vec(),
        ),
        (
            "client_secret (start)".into(),
            secret.as_bytes()[100..132].to_vec(),
        ),
        ("key DER".into(), key_der[mid(key_der.len())].to_vec()),
        ("key DER (prime)".into(), key_der[400..432].to_vec()),
        (
            "key base64".into(),
            key_b64.as_bytes()[mid(key_b64.len())].to_vec(),
        ),
    ]);
    let path = credential_path("pem-pkcs8");

    arm();
    {
        let creds = UserAssignedIdentityCredentials::from_path(&path).unwrap();
        let cert = ClientCertificate::from_credentials(&creds).unwrap();
        assert_eq!(cert.key_bits(), 2048);
        let cred = ClientCertificateCredential::new(&creds, options()).unwrap();
        let assertion = cred.client_assertion().unwrap();
        assert_eq!(assertion.expose_secret().split('.').count(), 3);
        let report = CredentialReport::from_path(
            &path,
            time::OffsetDateTime::now_utc(),
            msi_dataplane::inspect::EXPIRES_SOON_MARGIN,
        )
        .unwrap();
        assert_eq!(report.certificate.key_bits, 2048);
        // Writing the credential back (to_json, the Key Vault storage format and body).
        let json = zeroizing(creds.to_json().unwrap());
        assert!(json.expose_secret().contains("client_secret"));
        let stored =
            msi_dataplane::keyvault::format_user_assigned_identity_credentials_for_storage(
                "uami-test",
                &creds,
            )
            .unwrap();
        let body = stored.set_secret_body().unwrap();
        assert!(body.expose_secret().starts_with('{'));
    }
    let leaks = disarm();
    assert!(
        leaks.is_empty(),
        "freed without zeroizing (needle, blocks): {leaks:?}"
    );
    drop((secret, bundle, key_der, key_b64));
}

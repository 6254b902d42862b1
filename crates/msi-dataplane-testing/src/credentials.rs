//! Credentials made at run time: a fresh RSA key and certificate (self-signed or issued by
//! a test CA the kit makes), with chosen validity, as a credential file's content.
//!
//! Keys come from AWS-LC (`RsaKeyPair::generate`, through rcgen's AWS-LC backend);
//! certificates from rcgen; PKCS#12 archives from p12-keystore. No `openssl` CLI.

use std::fmt;
use std::path::Path;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, PKCS_RSA_SHA256, RsaKeySize, SanType,
};
use time::{Duration, OffsetDateTime};
use zeroize::Zeroizing;

use msi_dataplane::BundleFormat;
use msi_dataplane::SecretString;
use msi_dataplane::UserAssignedIdentityCredentials;

/// How long a [`TestCertificate`] is valid by default: from an hour ago to 30 days ahead.
pub const DEFAULT_VALIDITY: Duration = Duration::days(30);

fn fresh_rsa_key() -> KeyPair {
    KeyPair::generate_rsa_for(&PKCS_RSA_SHA256, RsaKeySize::_2048)
        .unwrap_or_else(|e| panic!("testing: RSA key generation failed: {e}"))
}

fn name(common_name: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, common_name);
    dn
}

/// A credential file's time: the crate's one RFC 3339 form (UTC, to the second).
fn rfc3339(t: OffsetDateTime) -> String {
    msi_dataplane::rfc3339(t).to_string()
}

/// A certificate authority made at run time, for issuing client certificates
/// ([`TestCertificateBuilder::signed_by`]) and the test servers' TLS certificates.
///
/// ```
/// use msi_dataplane_testing::{TestCa, TestCertificate};
///
/// let ca = TestCa::new("my tests CA");
/// let cert = TestCertificate::builder().signed_by(&ca);
/// assert_eq!(cert.chain_der().len(), 1); // the leaf carries its CA in the bundle
/// assert!(ca.certificate_pem().starts_with("-----BEGIN CERTIFICATE-----"));
/// ```
pub struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    der: Vec<u8>,
    pem: String,
}

impl TestCa {
    /// A fresh RSA CA named `common_name`, valid from a day ago for ten years.
    ///
    /// # Panics
    ///
    /// When key generation or signing fails (AWS-LC unavailable).
    pub fn new(common_name: &str) -> TestCa {
        let key = fresh_rsa_key();
        let mut params = CertificateParams::default();
        params.distinguished_name = name(common_name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::days(1);
        params.not_after = now + Duration::days(3650);
        let cert = params
            .self_signed(&key)
            .unwrap_or_else(|e| panic!("testing: CA self-signing failed: {e}"));
        TestCa {
            der: cert.der().to_vec(),
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    /// The CA certificate, DER.
    pub fn certificate_der(&self) -> &[u8] {
        &self.der
    }

    /// The CA certificate, PEM (for `reqwest::Certificate::from_pem`).
    pub fn certificate_pem(&self) -> &str {
        &self.pem
    }

    /// A TLS server certificate for `hosts` (DNS names or IP addresses) and its PKCS#8
    /// key, DER.
    pub(crate) fn issue_server(&self, hosts: &[&str]) -> (Vec<u8>, Zeroizing<Vec<u8>>) {
        let key = fresh_rsa_key();
        let mut params = CertificateParams::default();
        params.distinguished_name = name("msi-dataplane test server");
        params.subject_alt_names = hosts
            .iter()
            .map(|h| match h.parse() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(
                    (*h).try_into()
                        .unwrap_or_else(|e| panic!("testing: bad host name {h}: {e}")),
                ),
            })
            .collect();
        params
            .extended_key_usages
            .push(rcgen::ExtendedKeyUsagePurpose::ServerAuth);
        let now = OffsetDateTime::now_utc();
        params.not_before = now - Duration::days(1);
        params.not_after = now + Duration::days(365);
        let cert = params
            .signed_by(&key, &self.issuer)
            .unwrap_or_else(|e| panic!("testing: server certificate signing failed: {e}"));
        (cert.der().to_vec(), Zeroizing::new(key.serialize_der()))
    }
}

impl fmt::Debug for TestCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

/// Choices for a [`TestCertificate`]: subject and validity.
#[derive(Clone, Debug)]
pub struct TestCertificateBuilder {
    common_name: String,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
}

impl TestCertificateBuilder {
    /// The subject's common name (default `msi-dataplane test client`).
    pub fn common_name(mut self, common_name: &str) -> Self {
        common_name.clone_into(&mut self.common_name);
        self
    }

    /// The validity period (default: an hour ago to [`DEFAULT_VALIDITY`] ahead). Past or
    /// future periods make expired and not-yet-valid certificates.
    pub fn validity(mut self, not_before: OffsetDateTime, not_after: OffsetDateTime) -> Self {
        self.not_before = not_before;
        self.not_after = not_after;
        self
    }

    /// Start validity one second after `previous` starts (keeping the same length), so
    /// the new certificate counts as a renewal: reloads only move to a credential whose
    /// `not_before` is later.
    pub fn renewing(mut self, previous: &TestCertificate) -> Self {
        let length = self.not_after - self.not_before;
        if self.not_before <= previous.not_before {
            self.not_before = previous.not_before + Duration::seconds(1);
            self.not_after = self.not_before + length;
        }
        self
    }

    fn params(&self) -> CertificateParams {
        let mut params = CertificateParams::default();
        params.distinguished_name = name(&self.common_name);
        params.not_before = self.not_before;
        params.not_after = self.not_after;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params
            .extended_key_usages
            .push(rcgen::ExtendedKeyUsagePurpose::ClientAuth);
        params
    }

    /// A self-signed certificate on a fresh RSA-2048 key.
    ///
    /// # Panics
    ///
    /// When key generation or signing fails.
    pub fn self_signed(self) -> TestCertificate {
        let key = fresh_rsa_key();
        let cert = self
            .params()
            .self_signed(&key)
            .unwrap_or_else(|e| panic!("testing: self-signing failed: {e}"));
        TestCertificate::new(&key, cert.der().to_vec(), Vec::new(), &self)
    }

    /// A certificate on a fresh RSA-2048 key issued by `ca`; the bundle carries the CA
    /// certificate after the leaf, as the MSI service's bundles carry their chain.
    ///
    /// # Panics
    ///
    /// When key generation or signing fails.
    pub fn signed_by(self, ca: &TestCa) -> TestCertificate {
        let key = fresh_rsa_key();
        let cert = self
            .params()
            .signed_by(&key, &ca.issuer)
            .unwrap_or_else(|e| panic!("testing: signing by the test CA failed: {e}"));
        TestCertificate::new(&key, cert.der().to_vec(), vec![ca.der.clone()], &self)
    }
}

/// A client certificate and its private key, made at run time. The key never appears in
/// `Debug`.
///
/// ```
/// use msi_dataplane_testing::{TestCertificate, TestIdentity};
/// use msi_dataplane::{BundleFormat, ClientCertificate};
///
/// let cert = TestCertificate::self_signed();
/// let identity = TestIdentity::new();
/// let creds = identity.credentials(&cert, "https://127.0.0.1:8443/", BundleFormat::Pkcs12);
/// // The crate reads it back as any credential file.
/// let parsed = ClientCertificate::from_credentials(&creds)?;
/// assert_eq!(parsed.leaf_der(), cert.certificate_der());
/// assert!(!format!("{cert:?}").contains("PRIVATE KEY"));
/// # Ok::<(), msi_dataplane::Error>(())
/// ```
#[derive(Clone)]
pub struct TestCertificate {
    key_pkcs8_der: Zeroizing<Vec<u8>>,
    key_pem: Zeroizing<String>,
    der: Vec<u8>,
    chain: Vec<Vec<u8>>,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
}

impl TestCertificate {
    /// Choose subject and validity, then make a self-signed or CA-issued certificate.
    pub fn builder() -> TestCertificateBuilder {
        // X.509 times have whole seconds.
        let now = OffsetDateTime::now_utc()
            .replace_nanosecond(0)
            .unwrap_or(OffsetDateTime::now_utc());
        TestCertificateBuilder {
            common_name: "msi-dataplane test client".to_owned(),
            not_before: now - Duration::hours(1),
            not_after: now + DEFAULT_VALIDITY,
        }
    }

    /// A self-signed certificate with the default subject and validity.
    pub fn self_signed() -> TestCertificate {
        Self::builder().self_signed()
    }

    fn new(
        key: &KeyPair,
        der: Vec<u8>,
        chain: Vec<Vec<u8>>,
        choices: &TestCertificateBuilder,
    ) -> TestCertificate {
        TestCertificate {
            key_pkcs8_der: Zeroizing::new(key.serialize_der()),
            key_pem: Zeroizing::new(key.serialize_pem()),
            der,
            chain,
            not_before: choices.not_before,
            not_after: choices.not_after,
        }
    }

    /// The leaf certificate, DER (what a token server registers for the client).
    pub fn certificate_der(&self) -> &[u8] {
        &self.der
    }

    /// The leaf certificate, PEM.
    pub fn certificate_pem(&self) -> String {
        pem_block("CERTIFICATE", &self.der)
    }

    /// The issuing CA certificates after the leaf (empty when self-signed), DER.
    pub fn chain_der(&self) -> &[Vec<u8>] {
        &self.chain
    }

    /// Lowercase hex SHA-256 of the leaf DER: the thumbprint the servers report.
    pub fn sha256_hex(&self) -> String {
        let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &self.der);
        hex(digest.as_ref())
    }

    /// Start of validity.
    pub fn not_before(&self) -> OffsetDateTime {
        self.not_before
    }

    /// End of validity.
    pub fn not_after(&self) -> OffsetDateTime {
        self.not_after
    }

    /// The bundle as the MSI service stores it: PEM (`PRIVATE KEY` then the leaf and its
    /// chain) or a PKCS#12 archive with an empty password (AES-256 and HMAC-SHA256).
    /// Secret: handle as key material.
    ///
    /// # Panics
    ///
    /// When p12-keystore cannot write the archive.
    pub fn bundle(&self, format: BundleFormat) -> Zeroizing<Vec<u8>> {
        match format {
            BundleFormat::Pkcs12 => self.pkcs12(),
            _ => {
                let mut out = self.key_pem.as_bytes().to_vec();
                for der in std::iter::once(&self.der).chain(&self.chain) {
                    out.extend_from_slice(pem_block("CERTIFICATE", der).as_bytes());
                }
                Zeroizing::new(out)
            }
        }
    }

    fn pkcs12(&self) -> Zeroizing<Vec<u8>> {
        let fail = |e: p12_keystore::error::Error| -> ! {
            panic!("testing: PKCS#12 archive: {e}");
        };
        let key =
            p12_keystore::PrivateKey::from_der(&self.key_pkcs8_der).unwrap_or_else(|e| fail(e));
        let certs = std::iter::once(&self.der)
            .chain(&self.chain)
            .map(|der| p12_keystore::Certificate::from_der(der).unwrap_or_else(|e| fail(e)))
            .collect::<Vec<_>>();
        let local_key_id =
            aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA1_FOR_LEGACY_USE_ONLY, &self.der);
        let chain = p12_keystore::PrivateKeyChain::new(local_key_id.as_ref().to_vec(), key, certs);
        let mut store = p12_keystore::KeyStore::new();
        store.add_entry("1", p12_keystore::KeyStoreEntry::PrivateKeyChain(chain));
        Zeroizing::new(store.writer("").write().unwrap_or_else(|e| fail(e)))
    }
}

impl fmt::Debug for TestCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestCertificate")
            .field("sha256", &self.sha256_hex())
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .field("chain_len", &self.chain.len())
            .finish_non_exhaustive()
    }
}

/// An identity's names (random UUIDs by default), to put in credential files and register
/// with the token server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TestIdentity {
    /// Application (client) id.
    pub client_id: String,
    /// Directory (tenant) id.
    pub tenant_id: String,
    /// Object (principal) id.
    pub object_id: String,
    /// ARM resource id of the user-assigned identity.
    pub resource_id: String,
}

impl Default for TestIdentity {
    fn default() -> Self {
        Self::new()
    }
}

impl TestIdentity {
    /// Fresh random ids; the resource id names a user-assigned identity in a test
    /// subscription.
    pub fn new() -> TestIdentity {
        let id = || uuid::Uuid::new_v4().to_string();
        let subscription = id();
        let client_id = id();
        TestIdentity {
            resource_id: format!(
                "/subscriptions/{subscription}/resourcegroups/msi-test/providers/Microsoft.ManagedIdentity/userAssignedIdentities/{client_id}"
            ),
            client_id,
            tenant_id: id(),
            object_id: id(),
        }
    }

    /// A credential file's content for this identity carrying `cert` as a `format`
    /// bundle, pointed at `authority` (e.g. [`EntraServer::base_url`]). Its
    /// `not_before`/`not_after` are the certificate's; renewal is due at two thirds of
    /// the validity, as the MSI service sets it.
    ///
    /// [`EntraServer::base_url`]: crate::EntraServer::base_url
    pub fn credentials(
        &self,
        cert: &TestCertificate,
        authority: &str,
        format: BundleFormat,
    ) -> UserAssignedIdentityCredentials {
        let bundle = cert.bundle(format);
        let secret = Zeroizing::new(STANDARD.encode(bundle.as_slice()));
        let span = cert.not_after - cert.not_before;
        let mut file = UserAssignedIdentityCredentials::default();
        file.authentication_endpoint = Some(authority.to_owned());
        file.client_id = Some(self.client_id.clone());
        file.tenant_id = Some(self.tenant_id.clone());
        file.object_id = Some(self.object_id.clone());
        file.resource_id = Some(self.resource_id.clone());
        file.client_secret = Some(SecretString::from(secret.as_str()));
        file.not_before = Some(rfc3339(cert.not_before));
        file.not_after = Some(rfc3339(cert.not_after));
        file.renew_after = Some(rfc3339(cert.not_before + span * 2 / 3));
        file.cannot_renew_after = Some(rfc3339(cert.not_after));
        file
    }
}

/// Write a credential file (JSON, as the CSI driver mounts it) to `path`, replacing it
/// in place. For the CSI publication styles use [`CsiMount`](crate::CsiMount).
///
/// # Panics
///
/// When the file cannot be written (the panic names the path).
pub fn write_credentials_file(path: impl AsRef<Path>, creds: &UserAssignedIdentityCredentials) {
    let path = path.as_ref();
    std::fs::write(path, credentials_json(creds))
        .unwrap_or_else(|e| panic!("testing: write {}: {e}", path.display()));
}

/// A credential file's JSON bytes. Secret: it carries the bundle.
pub fn credentials_json(creds: &UserAssignedIdentityCredentials) -> Zeroizing<Vec<u8>> {
    let json = creds
        .to_json()
        .unwrap_or_else(|e| panic!("testing: credential JSON: {e}"));
    Zeroizing::new(json.into_bytes())
}

fn pem_block(label: &str, der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use msi_dataplane::ClientCertificate;

    #[test]
    fn pem_and_pkcs12_bundles_parse_back_to_the_same_leaf_and_chain() {
        let ca = TestCa::new("unit CA");
        let cert = TestCertificate::builder().signed_by(&ca);
        for format in [BundleFormat::Pem, BundleFormat::Pkcs12] {
            let parsed = ClientCertificate::from_bundle(&cert.bundle(format)).unwrap();
            assert_eq!(parsed.leaf_der(), cert.certificate_der(), "{format:?}");
            assert_eq!(parsed.chain().len(), 2, "{format:?}: leaf then CA");
            assert_eq!(parsed.chain()[1], ca.certificate_der(), "{format:?}");
            assert!(
                parsed
                    .thumbprint_sha256_hex()
                    .eq_ignore_ascii_case(&cert.sha256_hex())
            );
        }
    }

    #[test]
    fn chosen_validity_is_the_certificates_and_the_files() {
        let nb = OffsetDateTime::now_utc().replace_nanosecond(0).unwrap() - Duration::days(10);
        let na = nb + Duration::days(2);
        let cert = TestCertificate::builder().validity(nb, na).self_signed();
        let parsed = ClientCertificate::from_bundle(&cert.bundle(BundleFormat::Pem)).unwrap();
        assert_eq!(parsed.not_before(), nb);
        assert_eq!(parsed.not_after(), na);
        let creds = TestIdentity::new().credentials(&cert, "https://127.0.0.1/", BundleFormat::Pem);
        assert_eq!(creds.not_after().unwrap(), Some(na));
        creds.validate().unwrap();
    }

    #[test]
    fn each_certificate_has_a_fresh_key() {
        let a = TestCertificate::self_signed();
        let b = TestCertificate::self_signed();
        assert_ne!(a.sha256_hex(), b.sha256_hex());
        assert_ne!(a.key_pkcs8_der.as_slice(), b.key_pkcs8_der.as_slice());
    }

    #[test]
    fn written_file_reads_back() {
        let dir = std::env::temp_dir().join(format!("msi-kit-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let cert = TestCertificate::self_signed();
        let identity = TestIdentity::new();
        let creds = identity.credentials(&cert, "https://127.0.0.1/", BundleFormat::Pkcs12);
        let path = dir.join("credentials.json");
        write_credentials_file(&path, &creds);
        let read = UserAssignedIdentityCredentials::from_path(&path).unwrap();
        assert_eq!(read, creds);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! The client certificate: the RSA key, the leaf certificate that carries its public key,
//! the rest of the chain in input order, and the leaf's thumbprints.

use std::fmt;
use std::sync::Arc;

use aws_lc_rs::digest;
use aws_lc_rs::signature::{KeyPair as _, RsaKeyPair};
use time::OffsetDateTime;
use x509_parser::prelude::{FromDer, X509Certificate};

use crate::error::{Error, Result};
use crate::file::bundle::{self, BundleFormat, secret_error};
use crate::file::key;
use crate::file::model::UserAssignedIdentityCredentials;

/// Certificate `index` of the bundle cannot be parsed.
fn invalid_certificate(
    index: usize,
    e: &x509_parser::nom::Err<x509_parser::error::X509Error>,
) -> Error {
    let reason = crate::parser_errors::x509(e);
    let message = format!("certificate #{index} in the bundle cannot be parsed: {reason}");
    secret_error("invalid_certificate", message)
}

/// A decoded certificate bundle, ready to sign client assertions.
///
/// The **leaf** is the certificate whose public key matches the private key, wherever it
/// stands in the bundle; the other certificates follow it in input order.
/// `Debug` shows the thumbprint, validity and sizes, never key material.
/// `Clone` is cheap for the key (shared, never copied): one decoded bundle can serve
/// several credentials ([`ClientCertificateCredential::from_parts`](crate::ClientCertificateCredential::from_parts)).
///
/// ```
/// # fn main() -> Result<(), msi_dataplane::Error> {
/// # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/credentials/pem-chain.json");
/// use msi_dataplane::{ClientCertificate, UserAssignedIdentityCredentials};
///
/// let creds = UserAssignedIdentityCredentials::from_path(path)?;
/// let cert = ClientCertificate::from_credentials(&creds)?;
/// assert_eq!(cert.chain().len(), 3); // leaf, then intermediate and root in input order
/// assert_eq!(cert.thumbprint_sha256().len(), 32);
/// assert!(cert.subject()?.contains("msi-dataplane-test-pem-chain"));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct ClientCertificate {
    /// Shared by every clone: one decoded bundle serves several credentials.
    key: Arc<RsaKeyPair>,
    key_bits: usize,
    /// Leaf first, then the others in input order.
    chain: Vec<Vec<u8>>,
    sha1: [u8; 20],
    sha256: [u8; 32],
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
    format: BundleFormat,
}

impl ClientCertificate {
    /// Decode the `client_secret` of a credential file (validated or not: a missing
    /// `client_secret` is reported as such).
    pub fn from_credentials(creds: &UserAssignedIdentityCredentials) -> Result<Self> {
        let secret = creds.client_secret.as_ref().ok_or_else(|| {
            let message = "missing required key(s): client_secret";
            Error::file("missing_fields", None, message)
        })?;
        Self::from_base64(secret.expose_secret())
    }

    /// Decode a standard-base64 bundle, as held in `client_secret`.
    pub fn from_base64(secret: &str) -> Result<Self> {
        let bytes = bundle::decode_base64(secret)?;
        Self::from_bundle(&bytes)
    }

    /// Decode bundle bytes: a PEM bundle (`CERTIFICATE` blocks and one `PRIVATE KEY` or
    /// `RSA PRIVATE KEY` block, any order, LF or CRLF) or a PKCS#12 archive with an empty
    /// password (legacy RC2/3DES with a SHA-1 MAC, or AES-256 with a SHA-256 MAC).
    pub fn from_bundle(bytes: &[u8]) -> Result<Self> {
        let raw = bundle::decode_bundle(bytes)?;
        let (loaded, mut certificates) = (key::load(raw.key)?, raw.certificates);
        let public = loaded.pair.public_key().as_ref();
        let mut leaf = None;
        for (index, der) in certificates.iter().enumerate() {
            let (_, cert) =
                X509Certificate::from_der(der).map_err(|e| invalid_certificate(index, &e))?;
            if leaf.is_none() && cert.public_key().subject_public_key.data.as_ref() == public {
                let validity = cert.validity();
                leaf = Some((
                    index,
                    validity.not_before.to_datetime(),
                    validity.not_after.to_datetime(),
                ));
            }
        }
        let (index, not_before, not_after) =
            leaf.ok_or_else(|| {
                let checked = certificates.len();
                let message = format!("no certificate in the bundle matches the private key ({checked} certificate(s) checked)");
                secret_error("no_matching_certificate", message)
            })?;
        let leaf_der = certificates.remove(index);
        certificates.insert(0, leaf_der);
        let sha1 = fixed(digest::digest(
            &digest::SHA1_FOR_LEGACY_USE_ONLY,
            &certificates[0],
        ));
        let sha256 = fixed(digest::digest(&digest::SHA256, &certificates[0]));
        Ok(ClientCertificate {
            key: Arc::new(loaded.pair),
            key_bits: loaded.bits,
            chain: certificates,
            sha1,
            sha256,
            not_before,
            not_after,
            format: raw.format,
        })
    }

    /// The leaf certificate, DER.
    pub fn leaf_der(&self) -> &[u8] {
        &self.chain[0]
    }

    /// Every certificate, DER: the leaf first, then the others in input order.
    pub fn chain(&self) -> &[Vec<u8>] {
        &self.chain
    }

    /// SHA-1 of the leaf DER (what `x5t` carries).
    pub fn thumbprint_sha1(&self) -> &[u8; 20] {
        &self.sha1
    }

    /// SHA-256 of the leaf DER (what `x5t#S256` carries).
    pub fn thumbprint_sha256(&self) -> &[u8; 32] {
        &self.sha256
    }

    /// Lower-case hex of the SHA-1 thumbprint (the Azure portal shows it in upper case:
    /// compare ignoring case). Every thumbprint the crate and its testing kit print is
    /// lower-case hex.
    pub fn thumbprint_sha1_hex(&self) -> String {
        hex_lower(&self.sha1)
    }

    /// Lower-case hex of the SHA-256 thumbprint (as `sha256sum` prints a digest).
    pub fn thumbprint_sha256_hex(&self) -> String {
        hex_lower(&self.sha256)
    }

    /// Start of the leaf certificate's validity.
    pub fn not_before(&self) -> OffsetDateTime {
        self.not_before
    }

    /// End of the leaf certificate's validity.
    pub fn not_after(&self) -> OffsetDateTime {
        self.not_after
    }

    /// RSA modulus size in bits.
    pub fn key_bits(&self) -> usize {
        self.key_bits
    }

    /// Whether the bundle was PEM or PKCS#12.
    pub fn format(&self) -> BundleFormat {
        self.format
    }

    /// The leaf's subject, as an RFC 4514 string (parsed on demand).
    pub fn subject(&self) -> Result<String> {
        self.with_leaf(|c| c.subject().to_string())
    }

    /// The leaf's issuer, as an RFC 4514 string (parsed on demand).
    pub fn issuer(&self) -> Result<String> {
        self.with_leaf(|c| c.issuer().to_string())
    }

    fn with_leaf<T>(&self, f: impl FnOnce(&X509Certificate<'_>) -> T) -> Result<T> {
        let (_, cert) =
            X509Certificate::from_der(&self.chain[0]).map_err(|e| invalid_certificate(0, &e))?;
        Ok(f(&cert))
    }

    pub(crate) fn key_pair(&self) -> &RsaKeyPair {
        &self.key
    }
}

impl fmt::Debug for ClientCertificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientCertificate")
            .field("thumbprint_sha256", &self.thumbprint_sha256_hex())
            .field("not_before", &self.not_before)
            .field("not_after", &self.not_after)
            .field("key_bits", &self.key_bits)
            .field("chain_len", &self.chain.len())
            .field("format", &self.format)
            .finish_non_exhaustive()
    }
}

fn fixed<const N: usize>(d: digest::Digest) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(d.as_ref());
    out
}

fn hex_lower(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(HEX[usize::from(b >> 4)]));
        s.push(char::from(HEX[usize::from(b & 0xf)]));
    }
    s
}

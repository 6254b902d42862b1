//! Decoding `client_secret`: base64, then a PEM bundle or a PKCS#12 archive, into raw
//! certificates (DER, in input order) and raw key material. No cryptography happens here
//! beyond what PKCS#12 needs to open its bags; [`crate::file::key`] loads the key and
//! [`crate::file::certificate`] pairs it with its certificate.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use zeroize::Zeroizing;

use crate::error::{Error, Result};
use crate::file::{pem_blocks, pkcs12_scan};

/// At most this many certificates are accepted in one bundle.
pub const MAX_CERTIFICATES: usize = 32;

/// Which container the bundle came in. Serializes (serde) as `"pem"` or `"pkcs12"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum BundleFormat {
    /// PEM blocks.
    Pem,
    /// A PKCS#12 (PFX) archive with an empty password.
    Pkcs12,
}

/// Private key material as found, before it is loaded.
pub(crate) enum RawKey {
    /// PKCS#8 `PrivateKeyInfo` DER (or, from a mislabelled PEM block, PKCS#1 DER).
    Pkcs8(Zeroizing<Vec<u8>>),
    /// PKCS#1 `RSAPrivateKey` DER.
    Pkcs1(Zeroizing<Vec<u8>>),
    /// A key in a form that is refused, with the error to give.
    Refused(Error),
}

/// What a bundle holds.
pub(crate) struct RawBundle {
    pub format: BundleFormat,
    pub certificates: Vec<Vec<u8>>,
    pub key: RawKey,
}

/// Base64-decode `client_secret` into a zeroized buffer.
pub(crate) fn decode_base64(secret: &str) -> Result<Zeroizing<Vec<u8>>> {
    let trimmed = secret.trim();
    let mut out = Zeroizing::new(Vec::with_capacity(trimmed.len() / 4 * 3 + 3));
    STANDARD
        .decode_vec(trimmed.as_bytes(), &mut out)
        .map_err(|e| {
            let reason = describe_base64_error(&e);
            let message = format!("`client_secret` is not valid base64: {reason}");
            secret_error("secret_not_base64", message)
        })?;
    Ok(out)
}

/// Decode the bundle bytes: PEM first, then PKCS#12.
pub(crate) fn decode_bundle(bytes: &[u8]) -> Result<RawBundle> {
    if bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return decode_pem(bytes);
    }
    if pkcs12_scan::is_der_sequence(bytes) {
        return decode_pkcs12(bytes);
    }
    Err(unknown_format(
        "no PEM `-----BEGIN` line, and not a DER SEQUENCE spanning the whole input as a \
         PKCS#12 archive is",
    ))
}

fn decode_pem(bytes: &[u8]) -> Result<RawBundle> {
    let malformed =
        |reason: String| unknown_format(&format!("the PEM bundle is malformed: {reason}"));
    let blocks = pem_blocks::parse(bytes).map_err(malformed)?;
    let mut certificates = Vec::new();
    let mut keys = Vec::new();
    for block in blocks {
        match block.known_label() {
            Some("CERTIFICATE") => {
                certificates.push(block.decode().map_err(malformed)?.to_vec());
            }
            Some("PRIVATE KEY") => keys.push(RawKey::Pkcs8(block.decode().map_err(malformed)?)),
            Some("RSA PRIVATE KEY") => keys.push(if block.encrypted {
                RawKey::Refused(encrypted("legacy PEM encryption (Proc-Type: 4,ENCRYPTED)"))
            } else {
                RawKey::Pkcs1(block.decode().map_err(malformed)?)
            }),
            Some("ENCRYPTED PRIVATE KEY") => {
                keys.push(RawKey::Refused(encrypted("PKCS#8 EncryptedPrivateKeyInfo")));
            }
            Some("EC PRIVATE KEY") => {
                let message = "the private key is EC (SEC1 `EC PRIVATE KEY`); only RSA keys \
                               are supported";
                keys.push(RawKey::Refused(secret_error(
                    "unsupported_key_type",
                    message,
                )));
            }
            _ => {
                tracing::debug!(line = block.line, "ignoring PEM block with an unused label");
            }
        }
    }
    if certificates.is_empty() && keys.is_empty() {
        return Err(unknown_format(
            "the PEM bundle has no CERTIFICATE or private key block",
        ));
    }
    finish(BundleFormat::Pem, certificates, keys)
}

/// Pre-scan the archive (module [`pkcs12_scan`]), then open it with the empty password.
fn decode_pkcs12(bytes: &[u8]) -> Result<RawBundle> {
    let bags = pkcs12_scan::scan(bytes)?;
    tracing::debug!(bags, "PKCS#12 archive within bounds");
    let archive = p12_keystore::Pkcs12Archive::from_pkcs12(bytes, "")
        .map_err(|e| pkcs12_scan::unreadable(crate::parser_errors::pkcs12(&e)))?;
    let certificates = archive
        .certs
        .iter()
        .map(|bag| bag.cert.as_der().to_vec())
        .collect();
    let keys = archive
        .keys
        .iter()
        .map(|bag| RawKey::Pkcs8(Zeroizing::new(bag.key.as_der().to_vec())))
        .collect();
    finish(BundleFormat::Pkcs12, certificates, keys)
}

fn finish(
    format: BundleFormat,
    certificates: Vec<Vec<u8>>,
    mut keys: Vec<RawKey>,
) -> Result<RawBundle> {
    let (count, holds) = (certificates.len(), "the certificate bundle holds");
    let refused = if count > MAX_CERTIFICATES {
        let message =
            format!("{holds} {count} certificates; at most {MAX_CERTIFICATES} are accepted");
        secret_error("too_many_certificates", message)
    } else if keys.len() > 1 {
        let message = format!(
            "{holds} {} private keys; exactly one is expected",
            keys.len()
        );
        secret_error("multiple_private_keys", message)
    } else if let Some(key) = keys.pop() {
        if count == 0 {
            secret_error("no_certificate", format!("{holds} no certificate"))
        } else {
            return Ok(RawBundle {
                format,
                certificates,
                key,
            });
        }
    } else {
        secret_error("no_private_key", format!("{holds} no private key"))
    };
    Err(refused)
}

/// A refusal of the certificate bundle: `code` from the table, about `client_secret`.
pub(crate) fn secret_error(code: &'static str, message: impl Into<String>) -> Error {
    Error::file(code, Some("client_secret"), message)
}

fn unknown_format(reason: &str) -> Error {
    let message =
        format!("`client_secret` holds neither a PEM bundle nor a PKCS#12 (PFX) archive: {reason}");
    secret_error("unknown_bundle_format", message)
}

fn encrypted(format: &str) -> Error {
    let message =
        format!("the private key is encrypted ({format}); an unencrypted key is required");
    secret_error("encrypted_private_key", message)
}

fn describe_base64_error(e: &base64::DecodeError) -> String {
    use base64::DecodeError as D;
    match e {
        D::InvalidByte(offset, _) => format!("invalid character at offset {offset}"),
        D::InvalidLength(len) => format!("invalid length {len}"),
        D::InvalidLastSymbol(offset, _) => format!("invalid last symbol at offset {offset}"),
        D::InvalidPadding => "invalid padding".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn base64_error_gives_offset_not_content() {
        let err = decode_base64("abc$").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("offset 3"), "{msg}");
        assert!(!msg.contains('$'), "{msg}");
    }
}

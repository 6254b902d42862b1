//! Decoding `client_secret`: base64, then a PEM bundle or a PKCS#12 archive, into raw
//! certificates (DER, in input order) and raw key material. No cryptography happens here
//! beyond what PKCS#12 needs to open its bags; [`crate::key`] loads the key and
//! [`crate::certificate`] pairs it with its certificate.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use zeroize::Zeroizing;

use crate::error::{ErrorKind, Result};

/// At most this many certificates are accepted in one bundle.
pub const MAX_CERTIFICATES: usize = 32;

/// Which container the bundle came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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
    Refused(ErrorKind),
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
        .map_err(|e| ErrorKind::SecretNotBase64 {
            reason: describe_base64_error(&e),
        })?;
    Ok(out)
}

/// Decode the bundle bytes: PEM first, then PKCS#12 (DESIGN §2).
pub(crate) fn decode_bundle(bytes: &[u8]) -> Result<RawBundle> {
    if looks_like_pem(bytes) {
        return decode_pem(bytes);
    }
    if looks_like_der_sequence(bytes) {
        return decode_pkcs12(bytes);
    }
    Err(ErrorKind::UnknownBundleFormat {
        reason: "no PEM `-----BEGIN` line, and not a DER SEQUENCE spanning the whole input \
                 as a PKCS#12 archive is"
            .into(),
    }
    .into())
}

fn looks_like_pem(bytes: &[u8]) -> bool {
    bytes.windows(11).any(|w| w == b"-----BEGIN ")
}

/// A PKCS#12 archive is one DER SEQUENCE; check its header spans the input exactly.
fn looks_like_der_sequence(bytes: &[u8]) -> bool {
    let [0x30, first, rest @ ..] = bytes else {
        return false;
    };
    let (len, header) = if first & 0x80 == 0 {
        (usize::from(*first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return false;
        }
        let len = rest[..n]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (len, 2 + n)
    };
    header + len == bytes.len()
}

fn decode_pem(bytes: &[u8]) -> Result<RawBundle> {
    let blocks = pem::parse_many(bytes).map_err(|e| ErrorKind::UnknownBundleFormat {
        reason: format!("the PEM bundle is malformed: {e}"),
    })?;
    let mut certificates = Vec::new();
    let mut keys = Vec::new();
    for block in blocks {
        match block.tag() {
            "CERTIFICATE" => certificates.push(block.into_contents()),
            "PRIVATE KEY" => keys.push(RawKey::Pkcs8(Zeroizing::new(block.into_contents()))),
            "RSA PRIVATE KEY" => {
                let encrypted = block
                    .headers()
                    .get("Proc-Type")
                    .is_some_and(|v| v.contains("ENCRYPTED"));
                let contents = Zeroizing::new(block.into_contents());
                keys.push(if encrypted {
                    RawKey::Refused(ErrorKind::EncryptedPrivateKey {
                        format: "legacy PEM encryption (Proc-Type: 4,ENCRYPTED)",
                    })
                } else {
                    RawKey::Pkcs1(contents)
                });
            }
            "ENCRYPTED PRIVATE KEY" => {
                drop(Zeroizing::new(block.into_contents()));
                keys.push(RawKey::Refused(ErrorKind::EncryptedPrivateKey {
                    format: "PKCS#8 EncryptedPrivateKeyInfo",
                }));
            }
            "EC PRIVATE KEY" => {
                drop(Zeroizing::new(block.into_contents()));
                keys.push(RawKey::Refused(ErrorKind::UnsupportedKeyType {
                    algorithm: "EC (SEC1 `EC PRIVATE KEY`)".into(),
                }));
            }
            other => {
                tracing::debug!(label = other, "ignoring PEM block with an unused label");
                drop(Zeroizing::new(block.into_contents()));
            }
        }
    }
    if certificates.is_empty() && keys.is_empty() {
        return Err(ErrorKind::UnknownBundleFormat {
            reason: "the PEM bundle has no CERTIFICATE or private key block".into(),
        }
        .into());
    }
    finish(BundleFormat::Pem, certificates, keys)
}

fn decode_pkcs12(bytes: &[u8]) -> Result<RawBundle> {
    let archive = p12_keystore::Pkcs12Archive::from_pkcs12(bytes, "").map_err(pkcs12_error)?;
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
    if certificates.len() > MAX_CERTIFICATES {
        return Err(ErrorKind::TooManyCertificates {
            count: certificates.len(),
            limit: MAX_CERTIFICATES,
        }
        .into());
    }
    let key = match keys.len() {
        0 => return Err(ErrorKind::NoPrivateKey.into()),
        1 => keys.remove(0),
        count => return Err(ErrorKind::MultiplePrivateKeys { count }.into()),
    };
    if certificates.is_empty() {
        return Err(ErrorKind::NoCertificate.into());
    }
    Ok(RawBundle {
        format,
        certificates,
        key,
    })
}

fn pkcs12_error(e: p12_keystore::error::Error) -> ErrorKind {
    use p12_keystore::error::Error as E;
    let reason = match e {
        E::MacError(_) => "the integrity MAC does not verify with an empty password: the archive \
                           is password-protected or corrupt (only empty-password archives are supported)"
            .to_owned(),
        E::UnsupportedEncryptionScheme => "it uses an unsupported encryption scheme".to_owned(),
        E::UnsupportedMacAlgorithm => "it uses an unsupported MAC algorithm".to_owned(),
        other => redact_quoted_owned(other.to_string()),
    };
    ErrorKind::Pkcs12 { reason }
}

fn redact_quoted_owned(s: String) -> String {
    crate::error::redact_quoted(&s)
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
    fn der_sequence_detection() {
        assert!(looks_like_der_sequence(&[0x30, 0x01, 0x00]));
        assert!(!looks_like_der_sequence(&[0x30, 0x05, 0x00]));
        let mut long = vec![0x30, 0x82, 0x01, 0x00];
        long.resize(4 + 256, 0);
        assert!(looks_like_der_sequence(&long));
        assert!(!looks_like_der_sequence(b"hello"));
        assert!(!looks_like_der_sequence(&[]));
    }

    #[test]
    fn base64_error_gives_offset_not_content() {
        let err = decode_base64("abc$").unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("offset 3"), "{msg}");
        assert!(!msg.contains('$'), "{msg}");
    }
}

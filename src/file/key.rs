//! Loading the RSA private key with the signing backend (AWS-LC through `aws-lc-rs`).
//!
//! The key is classified first (PKCS#8 algorithm, modulus size) so that an EC key, a short
//! RSA key or a malformed key each get their own error, then handed to AWS-LC, which
//! validates it and keeps it for constant-time signing. AWS-LC wipes the key on drop; the
//! DER buffers given here are zeroized by their owners.

use aws_lc_rs::signature::RsaKeyPair;
use pkcs8::der::Decode;

use crate::error::{Error, Result};
use crate::file::bundle::{RawKey, secret_error};

/// RSA keys shorter than this are refused.
pub const MIN_RSA_BITS: usize = 2048;
/// RSA keys longer than this are refused (the signing backend's limit).
pub const MAX_RSA_BITS: usize = 8192;

const OID_RSA: &str = "1.2.840.113549.1.1.1";

/// A loaded RSA private key.
pub(crate) struct LoadedKey {
    pub pair: RsaKeyPair,
    pub bits: usize,
}

/// Load the bundle's key.
pub(crate) fn load(raw: RawKey) -> Result<LoadedKey> {
    match raw {
        RawKey::Refused(error) => Err(error),
        RawKey::Pkcs1(der) => load_pkcs1(&der),
        RawKey::Pkcs8(der) => match pkcs8::PrivateKeyInfoRef::from_der(&der) {
            // PKCS#8 RSA wraps the PKCS#1 key.
            Ok(info) => match info.algorithm.oid.to_string().as_str() {
                OID_RSA => load_pkcs1(info.private_key.as_bytes()),
                other => Err(unsupported(&algorithm_name(other))),
            },
            // A `PRIVATE KEY` block holding PKCS#1 content: accepted, as the Go stack does.
            Err(_) => load_pkcs1(&der),
        },
    }
}

fn load_pkcs1(der: &[u8]) -> Result<LoadedKey> {
    let bits = rsa_bits(der)?;
    check_bits(bits)?;
    let pair = RsaKeyPair::from_der(der)
        .map_err(|e| invalid_key(format!("rejected by the signing backend ({e})")))?;
    Ok(LoadedKey { pair, bits })
}

/// The modulus size of a PKCS#1 `RSAPrivateKey`, read without loading the key.
fn rsa_bits(pkcs1_der: &[u8]) -> Result<usize> {
    let key = pkcs1::RsaPrivateKeyRef::from_der(pkcs1_der).map_err(|e| {
        let reason = crate::parser_errors::der(&e);
        invalid_key(format!("neither PKCS#8 nor PKCS#1 RSA DER ({reason})"))
    })?;
    let modulus = key.modulus.as_bytes();
    let leading = modulus.iter().take_while(|b| **b == 0).count();
    let significant = &modulus[leading..];
    Ok(match significant.first() {
        None => 0,
        Some(top) => significant.len() * 8 - top.leading_zeros() as usize,
    })
}

fn check_bits(bits: usize) -> Result<()> {
    if bits < MIN_RSA_BITS {
        let message = format!("the RSA key has {bits} bits; at least {MIN_RSA_BITS} are required");
        return Err(secret_error("key_too_small", message));
    }
    if bits > MAX_RSA_BITS {
        let reason = format!("the RSA key has {bits} bits; at most {MAX_RSA_BITS} are supported");
        return Err(invalid_key(reason));
    }
    Ok(())
}

fn invalid_key(reason: String) -> Error {
    let message = format!("the private key cannot be decoded: {reason}");
    secret_error("invalid_private_key", message)
}

/// A private key that is not RSA (`EC`, ...).
fn unsupported(algorithm: &str) -> Error {
    let message = format!("the private key is {algorithm}; only RSA keys are supported");
    secret_error("unsupported_key_type", message)
}

fn algorithm_name(oid: &str) -> String {
    match oid {
        "1.2.840.10045.2.1" => "EC".to_owned(),
        "1.3.101.112" => "Ed25519".to_owned(),
        "1.3.101.113" => "Ed448".to_owned(),
        "1.2.840.10040.4.1" => "DSA".to_owned(),
        "1.2.840.113549.1.1.10" => "RSASSA-PSS (restricted RSA key)".to_owned(),
        other => format!("an unsupported algorithm (OID {other})"),
    }
}

//! Dependency parser errors (DER, x509, PKCS#12, JSON) turned into text this crate writes
//! itself: the class of the problem and its position, never bytes or text of the input.
//! A parser's own message may quote what it read, and what it reads here is key material.

use x509_parser::error::X509Error;

use crate::untrusted_text::redact_quoted;

/// A `der` (0.7: PKCS#1, PKCS#8) error: its class and byte offset.
pub(crate) fn der(e: &pkcs8::der::Error) -> String {
    use pkcs8::der::ErrorKind as K;
    let class = match e.kind() {
        K::Incomplete { .. } => "truncated",
        K::TagUnexpected { .. } | K::TagUnknown { .. } | K::TagNumberInvalid => "unexpected tag",
        K::Length { .. } | K::Overlength | K::Overflow | K::IndefiniteLength => "invalid length",
        K::TrailingData { .. } => "trailing data",
        K::Noncanonical { .. } => "non-canonical encoding",
        K::Value { .. } => "invalid value",
        K::OidMalformed | K::OidUnknown { .. } => "invalid object identifier",
        _ => "malformed",
    };
    match e.position() {
        Some(at) => format!("{class} DER at byte {}", u32::from(at)),
        None => format!("{class} DER"),
    }
}

/// An `x509-parser` error: its class only (the parser gives no position).
pub(crate) fn x509(e: &x509_parser::nom::Err<X509Error>) -> String {
    use x509_parser::nom::Err;
    let e = match e {
        Err::Incomplete(_) => return "truncated DER".to_owned(),
        Err::Error(e) | Err::Failure(e) => e,
    };
    match e {
        X509Error::InvalidVersion => "invalid version",
        X509Error::InvalidSerial => "invalid serial number",
        X509Error::InvalidAlgorithmIdentifier => "invalid algorithm identifier",
        X509Error::InvalidX509Name => "invalid subject or issuer name",
        X509Error::InvalidDate => "invalid validity date",
        X509Error::InvalidSPKI => "invalid subject public key info",
        X509Error::InvalidExtensions | X509Error::DuplicateExtensions => "invalid extensions",
        X509Error::InvalidSignatureValue => "invalid signature value",
        X509Error::InvalidTbsCertificate => "invalid to-be-signed certificate",
        X509Error::Der(_) | X509Error::NomError(_) => "malformed DER",
        _ => "not a valid X.509 certificate",
    }
    .to_owned()
}

/// Why a PKCS#12 archive whose MAC does not verify is refused.
pub(crate) const PKCS12_MAC_MISMATCH: &str = "the integrity MAC does not verify with an empty \
     password: the archive is password-protected or corrupt (only empty-password archives \
     are supported)";

/// A `p12-keystore` error. Its DER errors carry a position; nothing else is kept.
pub(crate) fn pkcs12(e: &p12_keystore::error::Error) -> String {
    use p12_keystore::error::Error as E;
    match e {
        E::MacError(_) => PKCS12_MAC_MISMATCH.to_owned(),
        E::UnsupportedEncryptionScheme => "it uses an unsupported encryption scheme".to_owned(),
        E::UnsupportedMacAlgorithm => "it uses an unsupported MAC algorithm".to_owned(),
        E::DerError(d) => match d.position() {
            Some(at) => format!("malformed DER at byte {}", u32::from(at)),
            None => "malformed DER".to_owned(),
        },
        E::X509Error(x) => format!("a certificate bag is not a certificate ({})", x509(x)),
        E::InvalidVersion => "unsupported PFX version (3 is expected)".to_owned(),
        E::UnsupportedContentType => "a content type other than data or encrypted data".to_owned(),
        E::UnsupportedCertificateType => "a certificate bag that is not X.509".to_owned(),
        E::InvalidLength | E::UnpadError | E::InvalidData | E::Pkcs5Error(_) => {
            "decryption failed (corrupt data or a wrong password)".to_owned()
        }
        E::InvalidParameters => "invalid encryption or MAC parameters".to_owned(),
        E::InvalidPrivateKey => "a key bag does not hold a valid private key".to_owned(),
        E::IoError(_) => "read error".to_owned(),
    }
}

/// A `serde_json` error, without the line and column (reported apart). Syntax messages are
/// fixed texts; data messages have every quoted value redacted (see [`redact_quoted`]).
pub(crate) fn json(e: &serde_json::Error) -> String {
    let text = e.to_string();
    // serde_json appends " at line L column C".
    let text = match text.rfind(" at line ") {
        Some(at) if e.line() > 0 => &text[..at],
        _ => text.as_str(),
    };
    redact_quoted(text)
}

/// A JSON document that does not parse, as the crate's error (serde's message without
/// the values it quotes, and where it stopped).
pub(crate) fn json_error(e: serde_json::Error) -> crate::error::Error {
    let (line, column, message) = (e.line(), e.column(), json(&e));
    let message = format!("invalid JSON at line {line}, column {column}: {message}");
    crate::error::Error::file("json", None, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn der_errors_give_class_and_position() {
        use pkcs8::der::Decode;
        let e = pkcs1::RsaPrivateKeyRef::from_der(&[0x30, 0x05, 0x02, 0x01]).unwrap_err();
        let text = der(&e);
        assert!(text.contains("DER"), "{text}");
    }

    #[test]
    fn json_messages_lose_quoted_values() {
        let e = serde_json::from_str::<Vec<u8>>(r#""c2VjcmV0c2VjcmV0""#).unwrap_err();
        let text = json(&e);
        assert!(!text.contains("c2Vj"), "{text}");
        assert!(!text.contains("at line"), "{text}");
    }
}

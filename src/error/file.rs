//! Failures of the files the crate reads and of the certificate bundle.

use std::sync::Arc;

use time::OffsetDateTime;

use super::quoted;
use crate::clock::rfc3339;

/// Failures of a file the crate reads (a credential file, a cloud config, a CA file,
/// a managed identities file) and of the certificate bundle in a credential file, and the
/// credential's validity.
///
/// Reached through [`ErrorKind`](crate::error::ErrorKind); marked `#[non_exhaustive]`: new
/// failures may be added.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// The credential file could not be read.
    #[error("cannot be read: {source}")]
    Io {
        /// The underlying I/O error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The path names something other than a regular file (a FIFO, a device, a socket, a
    /// directory): it is refused without being read, since reading it may never end.
    #[error("is a {kind}, not a regular file")]
    NotARegularFile {
        /// What it is: `"FIFO"`, `"character device"`, `"block device"`, `"socket"`,
        /// `"directory"` or `"special file"`.
        kind: &'static str,
    },
    /// The credential file is larger than the limit.
    #[error("is {size} bytes; credential files over {limit} bytes are refused")]
    FileTooLarge {
        /// Size seen, in bytes (at least `limit + 1`).
        size: u64,
        /// The limit, in bytes.
        limit: u64,
    },
    /// The credential file is not valid JSON or a value has the wrong type.
    #[error("invalid JSON at line {line}, column {column}: {message}")]
    Json {
        /// 1-based line of the problem.
        line: usize,
        /// 1-based column of the problem.
        column: usize,
        /// What the parser found; quoted values from the file are redacted.
        message: String,
    },
    /// Required keys are missing from the credential file; every missing key is named.
    #[error("missing required key(s): {}", fields.join(", "))]
    MissingFields {
        /// The missing keys, in schema order.
        fields: Vec<&'static str>,
    },
    /// The file uses camelCase keys; the format (like the Go reference) is snake_case.
    #[error(
        "found camelCase key(s) {}; credential files use snake_case keys (e.g. {})",
        quoted(keys),
        quoted(expected)
    )]
    CamelCaseKeys {
        /// The camelCase keys seen.
        keys: Vec<String>,
        /// The snake_case key each one should have been.
        expected: Vec<String>,
    },
    /// A key is present but its value is unusable.
    #[error("invalid value for `{field}`: {reason}")]
    InvalidField {
        /// The key, as spelled in the file.
        field: &'static str,
        /// Why the value is refused (never the value itself when it is secret).
        reason: String,
    },
    /// `client_secret` is not standard base64.
    #[error("`client_secret` is not valid base64: {reason}")]
    SecretNotBase64 {
        /// The decoder's complaint (offsets only, no content).
        reason: String,
    },
    /// The decoded `client_secret` is neither a PEM bundle nor a PKCS#12 archive.
    #[error("`client_secret` holds neither a PEM bundle nor a PKCS#12 (PFX) archive: {reason}")]
    UnknownBundleFormat {
        /// What was tried and why it failed.
        reason: String,
    },
    /// The PKCS#12 archive could not be opened with an empty password.
    #[error("PKCS#12 archive cannot be read: {reason}")]
    Pkcs12 {
        /// Why (for example a MAC that does not verify: the archive has a password).
        reason: String,
    },
    /// The PKCS#12 archive asks for more work than is accepted (iterations, bags or
    /// containers over the documented bounds); refused before any key derivation.
    #[error(
        "PKCS#12 archive refused before decryption: {what} is {value}, at most {limit} are accepted"
    )]
    Pkcs12Limit {
        /// What is over the bound ("bags", "containers", or the iterations of an item
        /// with its byte offset).
        what: String,
        /// The value seen.
        value: u64,
        /// The bound.
        limit: u64,
    },
    /// The bundle holds no private key.
    #[error("the certificate bundle holds no private key")]
    NoPrivateKey,
    /// The bundle holds more than one private key.
    #[error("the certificate bundle holds {count} private keys; exactly one is expected")]
    MultiplePrivateKeys {
        /// How many keys were found.
        count: usize,
    },
    /// The private key is encrypted; only unencrypted keys are supported.
    #[error("the private key is encrypted ({format}); an unencrypted key is required")]
    EncryptedPrivateKey {
        /// Which encrypted form was seen.
        format: &'static str,
    },
    /// The private key is not RSA.
    #[error("the private key is {algorithm}; only RSA keys are supported")]
    UnsupportedKeyType {
        /// The key algorithm seen (e.g. `EC`).
        algorithm: String,
    },
    /// The RSA key is shorter than 2048 bits.
    #[error("the RSA key has {bits} bits; at least {min_bits} are required")]
    KeyTooSmall {
        /// Modulus size seen.
        bits: usize,
        /// The minimum accepted.
        min_bits: usize,
    },
    /// The private key could not be decoded.
    #[error("the private key cannot be decoded: {reason}")]
    InvalidPrivateKey {
        /// Why (no key bytes are included).
        reason: String,
    },
    /// The bundle holds no certificate.
    #[error("the certificate bundle holds no certificate")]
    NoCertificate,
    /// A certificate could not be parsed.
    #[error("certificate #{index} in the bundle cannot be parsed: {reason}")]
    InvalidCertificate {
        /// 0-based position in the bundle.
        index: usize,
        /// The parser's complaint.
        reason: String,
    },
    /// No certificate in the bundle carries the private key's public key.
    #[error(
        "no certificate in the bundle matches the private key ({certificates} certificate(s) checked)"
    )]
    NoMatchingCertificate {
        /// How many certificates were compared.
        certificates: usize,
    },
    /// The bundle has more certificates than the limit.
    #[error("the certificate bundle holds {count} certificates; at most {limit} are accepted")]
    TooManyCertificates {
        /// How many were found.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// The credential's validity has ended: `now` is past the earlier of the leaf
    /// certificate's `notAfter` and the file's `not_after`. Checked before any network
    /// call. Not transient: the credential file must be renewed.
    #[error("the credential expired at {} (now {})", rfc3339(*expired_at), rfc3339(*now))]
    CredentialExpired {
        /// The end of the validity that was passed.
        expired_at: OffsetDateTime,
        /// The time the credential was checked at (its clock's reading).
        now: OffsetDateTime,
    },
    /// The credential is not valid yet: the leaf certificate's `notBefore` is more than the
    /// allowed clock skew (5 minutes) after `now`. Checked before any network call. Not
    /// transient in the retry sense (it can be hours): the credential becomes usable 5
    /// minutes before `valid_from`, or a clock is wrong.
    #[error(
        "the credential is not valid until {} (now {})",
        rfc3339(*valid_from),
        rfc3339(*now)
    )]
    CredentialNotYetValid {
        /// The start of the validity (the leaf certificate's `notBefore`).
        valid_from: OffsetDateTime,
        /// The time the credential was checked at (its clock's reading).
        now: OffsetDateTime,
    },
}

impl FileError {
    /// A stable snake_case name for the failure (see
    /// [`ErrorKind::code`](crate::error::ErrorKind::code)).
    pub fn code(&self) -> &'static str {
        match self {
            FileError::Io { .. } => "io",
            FileError::NotARegularFile { .. } => "not_a_regular_file",
            FileError::FileTooLarge { .. } => "file_too_large",
            FileError::Json { .. } => "json",
            FileError::MissingFields { .. } => "missing_fields",
            FileError::CamelCaseKeys { .. } => "camel_case_keys",
            FileError::InvalidField { .. } => "invalid_field",
            FileError::SecretNotBase64 { .. } => "secret_not_base64",
            FileError::UnknownBundleFormat { .. } => "unknown_bundle_format",
            FileError::Pkcs12 { .. } => "pkcs12",
            FileError::Pkcs12Limit { .. } => "pkcs12_limit",
            FileError::NoPrivateKey => "no_private_key",
            FileError::MultiplePrivateKeys { .. } => "multiple_private_keys",
            FileError::EncryptedPrivateKey { .. } => "encrypted_private_key",
            FileError::UnsupportedKeyType { .. } => "unsupported_key_type",
            FileError::KeyTooSmall { .. } => "key_too_small",
            FileError::InvalidPrivateKey { .. } => "invalid_private_key",
            FileError::NoCertificate => "no_certificate",
            FileError::InvalidCertificate { .. } => "invalid_certificate",
            FileError::NoMatchingCertificate { .. } => "no_matching_certificate",
            FileError::TooManyCertificates { .. } => "too_many_certificates",
            FileError::CredentialExpired { .. } => "credential_expired",
            FileError::CredentialNotYetValid { .. } => "credential_not_yet_valid",
        }
    }
}

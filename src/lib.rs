#![doc = include_str!("guide.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// The layers, lowest first; each uses only its own and those above it here
// (`tests/it/layers.rs` checks it).
//
// The basics: errors (the root `Error` and what failed), time, secrets,
// untrusted text, the log budget, parser messages, bounded file reading, clouds, the HTTP plumbing
// (the crate's client, bounded answers, retries, Azure error bodies), the environment
// every client is given (HTTP client, timeout, clock, retries) and telemetry (metrics
// and spans).
mod clock;
mod cloud;
mod environment;
mod error;
mod http;
mod log_budget;
mod parser_errors;
mod regular_file;
mod secret;
pub mod telemetry;
mod untrusted_text;

// Then, in this order (rustfmt sorts the declarations): `file` (the credential file),
// `token` (file to token), `reload` (following rotations), `azure` (azure_core glue),
// `dataplane` (the MSI data plane), `keyvault` (Key Vault storage), `hypershift`
// (HyperShift and Kubernetes).
mod azure;
pub mod dataplane;
mod file;
pub mod hypershift;
pub mod keyvault;
mod reload;
mod token;

// Across the layers: the health report of a credential file, the fixed limits, and the
// helpers this workspace's other crates share with the library (no semver promise).
pub mod inspect;
pub mod limits;
#[doc(hidden)]
pub mod unstable;

// Documentation only: the long form, one chapter per cross-cutting topic (no code).
pub mod guide;

pub use azure::cloud_config::CloudConfig;
pub use clock::{Clock, ManualClock, Sleep, SystemClock, rfc3339};
pub use cloud::{Cloud, default_scope};
pub use environment::Environment;
pub use error::{
    Error, ErrorCategory, ErrorKind, Result, ServiceError, TokenEndpointError, TransportError,
};
pub use file::bundle::BundleFormat;
pub use file::certificate::ClientCertificate;
pub use file::model::{CustomClaims, UserAssignedIdentityCredentials};
pub use http::retry::RetryPolicy;
pub use reload::options::ReloadOptions;
pub use reload::rule::ReloadOutcome;
pub use reload::status::ReloadStatus;
pub use reload::user_assigned::UserAssignedIdentityCredential;
pub use secret::SecretString;
pub use token::access_token::AccessToken;
pub use token::assertion::AssertionAlgorithm;
pub use token::credential::ClientCertificateCredential;
pub use token::options::ClientCertificateCredentialOptions;

/// Entry points for the fuzz targets in `fuzz/` (built only with `--cfg fuzzing`, as
/// `cargo fuzz` does): the parsers that see untrusted bytes.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    /// Parse a token endpoint answer (success or error body) as `get_token` does.
    pub fn token_response(status: u16, retry_after: Option<&str>, body: &[u8]) {
        let now = time::OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000);
        let _ =
            crate::token::endpoint::parse_response(status, retry_after, Some(body), now, "fuzz");
    }
}

/// The README's example, compiled as a doctest.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#![doc = include_str!("guide.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// Shared by everything below: errors, time, secrets, the hot-path publication
// primitive, reading files safely, parser messages without input, clouds, and the
// health report (which reads across the file and the token layers). `inspect` (the
// report's parts) and `limits` (fixed limits and timings) are public modules, so the
// crate root keeps what most users need.
mod azure_error_body;
mod clock;
mod cloud;
mod error;
pub mod inspect;
pub mod limits;
mod parser_errors;
mod regular_file;
mod secret;
mod service_link;
mod untrusted_text;

// The layers, each using only those above it: the credential file; file to token;
// following rotations; Azure glue; HyperShift and Kubernetes; the MSI data plane; Key
// Vault storage.
mod azure;
pub mod dataplane;
mod file;
pub mod hypershift;
pub mod keyvault;
mod reload;
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub mod testing;
mod token;

#[cfg(feature = "k8s")]
#[doc(inline)]
pub use hypershift::k8s;
#[doc(inline)]
pub use hypershift::managed_identities;
#[doc(inline)]
pub use keyvault::renewal;
#[cfg(feature = "keyvault")]
#[doc(inline)]
pub use keyvault::store;

pub use azure::cloud_config::CloudConfig;
pub use clock::{Clock, ManualClock, Sleep, SystemClock};
pub use cloud::{Cloud, default_scope};
pub use dataplane::ManagedIdentityCredentials;
pub use error::{Error, ErrorKind, Result, TokenEndpointError};
pub use file::bundle::BundleFormat;
pub use file::certificate::ClientCertificate;
pub use file::model::{CustomClaims, UserAssignedIdentityCredentials};
pub use inspect::CredentialReport;
#[cfg(feature = "keyvault")]
pub use keyvault::renew::RenewalOutcome;
pub use reload::rule::ReloadOutcome;
pub use reload::user_assigned::{
    ReloadStatus, UserAssignedIdentityCredential, UserAssignedIdentityCredentialOptions,
};
/// How many directory watches (one per watched directory, shared by every credential in
/// it) are alive in this process: for tests and diagnostics, not a stable API.
#[doc(hidden)]
pub use reload::watch::live_directory_watchers;
pub use secret::SecretString;
pub use service_link::LinkFault;
pub use token::access_token::AccessToken;
pub use token::assertion::AssertionAlgorithm;
pub use token::credential::{ClientCertificateCredential, ClientCertificateCredentialOptions};
pub use token::http::HttpOptions;
pub use token::retry::RetryPolicy;
/// Re-exported for [`UserAssignedIdentityCredentialOptions::with_cancellation_token`].
pub use tokio_util::sync::CancellationToken;

/// Entry points for the fuzz targets in `fuzz/` (built only with `--cfg fuzzing`, as
/// `cargo fuzz` does): the parsers that see untrusted bytes.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    /// Parse a token endpoint answer (success or error body) as `get_token` does.
    pub fn token_response(status: u16, retry_after: Option<&str>, body: &[u8]) {
        let raw = crate::token::endpoint::RawResponse {
            status,
            retry_after: retry_after.map(str::to_owned),
            body: body.to_vec(),
        };
        let now = time::OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000);
        let _ = crate::token::endpoint::parse_response(&raw, now, "fuzz");
    }
}

/// The README's examples, compiled as doctests (one uses `azure_core`).
#[cfg(all(doctest, feature = "azure_core"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

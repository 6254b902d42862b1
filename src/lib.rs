#![doc = include_str!("guide.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "token/assertion.rs"]
mod assertion;
#[cfg(feature = "azure_core")]
#[path = "azure/token_credential.rs"]
mod azure;
#[path = "file/bundle.rs"]
mod bundle;
#[path = "token/cache.rs"]
mod cache;
#[path = "file/certificate.rs"]
mod certificate;
mod clock;
mod cloud;
#[path = "azure/cloud_config.rs"]
mod cloud_config;
#[path = "token/credential.rs"]
mod credential;
pub mod dataplane;
#[path = "token/endpoint.rs"]
mod endpoint;
mod error;
#[path = "hypershift/mod.rs"]
pub mod hypershift;
mod inspect;
#[cfg(feature = "k8s")]
#[path = "hypershift/k8s.rs"]
pub mod k8s;
#[path = "file/key.rs"]
mod key;
#[path = "keyvault/format.rs"]
pub mod keyvault;
#[path = "hypershift/managed_identities.rs"]
pub mod managed_identities;
#[path = "file/model.rs"]
mod model;
mod parser_errors;
#[path = "file/pem_blocks.rs"]
mod pem_blocks;
#[path = "file/pkcs12_scan.rs"]
mod pkcs12_scan;
mod published;
mod regular_file;
#[path = "reload/rule.rs"]
mod reload;
#[cfg(feature = "keyvault")]
#[path = "keyvault/renew.rs"]
mod renew;
#[path = "keyvault/renewal.rs"]
pub mod renewal;
#[path = "token/retry.rs"]
mod retry;
#[path = "token/roots.rs"]
mod roots;
#[cfg(feature = "keyvault")]
#[path = "azure/sdk_transport.rs"]
mod sdk_transport;
mod secret;
#[cfg(feature = "keyvault")]
#[path = "keyvault/store.rs"]
pub mod store;
#[path = "token/access_token.rs"]
mod token;
#[path = "reload/user_assigned.rs"]
mod user_assigned;
#[path = "reload/watch.rs"]
mod watch;

pub use assertion::{ASSERTION_LIFETIME_SECS, AssertionAlgorithm};
pub use bundle::{BundleFormat, MAX_CERTIFICATES};
pub use cache::{EXPIRY_MARGIN, MAX_SLOTS, MIN_REFRESH_BACKOFF, REFRESH_WINDOW};
pub use certificate::ClientCertificate;
pub use clock::{Clock, ManualClock, Sleep, SystemClock};
pub use cloud::{Cloud, default_scope};
pub use cloud_config::CloudConfig;
pub use credential::{
    ClientCertificateCredential, ClientCertificateCredentialOptions, NOT_BEFORE_SKEW,
    get_credential,
};
pub use dataplane::ManagedIdentityCredentials;
pub use endpoint::MAX_RESPONSE_BYTES;
pub use error::{Error, ErrorKind, Result, TokenEndpointError};
pub use inspect::{
    CertificateSummary, CredentialReport, EXPIRES_SOON_MARGIN, FileTimes, Problem, ProblemKind,
    Severity, Validity,
};
pub use key::{MAX_RSA_BITS, MIN_RSA_BITS};
pub use model::{CustomClaims, MAX_CREDENTIAL_FILE_BYTES, UserAssignedIdentityCredentials};
pub use pkcs12_scan::{MAX_PKCS12_BAGS, MAX_PKCS12_CONTAINERS, MAX_PKCS12_ITERATIONS};
pub use reload::ReloadOutcome;
#[cfg(feature = "keyvault")]
pub use renew::RenewalOutcome;
pub use retry::RetryPolicy;
pub use secret::SecretString;
pub use token::AccessToken;
/// Re-exported for [`UserAssignedIdentityCredentialOptions::with_cancellation_token`].
pub use tokio_util::sync::CancellationToken;
pub use user_assigned::{
    ReloadStatus, UserAssignedIdentityCredential, UserAssignedIdentityCredentialOptions,
    new_user_assigned_identity_credential,
};
/// How many directory watches (one per watched directory, shared by every credential in
/// it) are alive in this process: for tests and diagnostics, not a stable API.
#[doc(hidden)]
pub use watch::live_directory_watchers;

/// Entry points for the fuzz targets in `fuzz/` (built only with `--cfg fuzzing`, as
/// `cargo fuzz` does): the parsers that see untrusted bytes.
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod fuzzing {
    /// Parse a token endpoint answer (success or error body) as `get_token` does.
    pub fn token_response(status: u16, retry_after: Option<&str>, body: &[u8]) {
        let raw = crate::endpoint::RawResponse {
            status,
            retry_after: retry_after.map(str::to_owned),
            body: body.to_vec(),
        };
        let now = time::OffsetDateTime::UNIX_EPOCH + time::Duration::days(20_000);
        let _ = crate::endpoint::parse_response(&raw, now, "fuzz");
    }
}

/// The README's examples, compiled as doctests (one uses `azure_core`).
#[cfg(all(doctest, feature = "azure_core"))]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

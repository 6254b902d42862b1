//! # msi-dataplane
//!
//! Azure managed-identity certificate credentials for control-plane components of Azure
//! Red Hat OpenShift with hosted control planes (ARO HCP): the Rust counterpart of Go's
//! `github.com/Azure/msi-dataplane`.
//!
//! A component's identity arrives as a JSON file that the Secrets Store CSI driver mounts
//! from Key Vault (`/mnt/certs/<name>`). It holds a base64 certificate bundle (PEM or
//! PKCS#12). This crate parses the file ([`UserAssignedIdentityCredentials`]), decodes the
//! bundle and loads the RSA key ([`ClientCertificate`]), signs an RFC 7523 client assertion
//! (PS256 with `x5t#S256` by default, RS256 with `x5t` on request) and exchanges it with
//! Entra ID for access tokens ([`ClientCertificateCredential`]).
//!
//! ## Quick start
//!
//! ```no_run
//! use msi_dataplane::{ClientCertificateCredential, UserAssignedIdentityCredentials};
//!
//! # async fn run() -> Result<(), msi_dataplane::Error> {
//! let creds = UserAssignedIdentityCredentials::from_path("/mnt/certs/my-identity")?;
//! let credential = ClientCertificateCredential::new(&creds, Default::default())?;
//! let token = credential
//!     .get_token(&["https://management.azure.com/.default"])
//!     .await?;
//! println!("expires on {}", token.expires_on());
//! # Ok(()) }
//! ```
//!
//! ## Go to Rust
//!
//! | Go (`github.com/Azure/msi-dataplane/pkg/dataplane`) | Rust (`msi_dataplane`) |
//! |---|---|
//! | `UserAssignedIdentityCredentials` | [`UserAssignedIdentityCredentials`] |
//! | `GetCredential(clientOpts, uaIdentity)` | [`get_credential`] / [`ClientCertificateCredential::new`] |
//! | `*azidentity.ClientCertificateCredential` | [`ClientCertificateCredential`] |
//! | `cred.GetToken(ctx, policy.TokenRequestOptions{Scopes})` | [`ClientCertificateCredential::get_token`] |
//! | `azcore.AccessToken{Token, ExpiresOn}` | [`AccessToken`] (`token()`, `expires_on()`) |
//! | `azidentity.ParseCertificates(data, nil)` | [`ClientCertificate::from_bundle`] |
//! | `NewUserAssignedIdentityCredential(ctx, path, opts...)` | [`UserAssignedIdentityCredential::new`] / [`new_user_assigned_identity_credential`] |
//! | `WithBackstopRefresh(d)` | [`UserAssignedIdentityCredentialOptions::with_backstop_interval`] |
//!
//! ## Caching, refresh and rotation
//!
//! [`ClientCertificateCredential::get_token`] answers from a per-scope cache without locks
//! or allocation, shares one request among concurrent callers, refreshes ahead of expiry
//! and keeps serving a valid token through failed refreshes; requests are retried per
//! [`RetryPolicy`]. [`UserAssignedIdentityCredential`] follows the credential file through
//! every Secrets Store CSI rotation (it watches the directory, where the atomic `..data`
//! swap is visible), swaps only a valid file with a later `not_before`, and keeps the last
//! good credential otherwise; [`ReloadStatus`] says what it serves.
//!
//! ## Crate features
//!
//! - `azure_core` (default): `azure_core::credentials::TokenCredential` for
//!   [`ClientCertificateCredential`] (azure_core 1.x).
//! - `k8s`: the `k8s` module: HyperShift's CSI volume, mounts and environment variable
//!   and a typed `SecretProviderClass`, as `k8s-openapi` 0.29 types.
//!
//! ## Errors
//!
//! Every failure is an [`Error`] whose [`kind`](Error::kind) says what failed (a missing
//! key, an EC key, an `AADSTS` answer, ...), whose [`path`](Error::path) names the file
//! when there is one, and whose [`is_transient`](Error::is_transient) says whether trying
//! again can help. No error, `Debug` or log line contains the client secret, key
//! material, an assertion or an access token.
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod assertion;
#[cfg(feature = "azure_core")]
mod azure;
mod bundle;
mod cache;
mod certificate;
mod clock;
mod credential;
mod endpoint;
mod error;
pub mod hypershift;
#[cfg(feature = "k8s")]
pub mod k8s;
mod key;
mod model;
mod published;
mod reload;
mod retry;
mod secret;
mod token;
mod user_assigned;
mod watch;

pub use assertion::{ASSERTION_LIFETIME_SECS, AssertionAlgorithm};
pub use bundle::{BundleFormat, MAX_CERTIFICATES};
pub use cache::{EXPIRY_MARGIN, MAX_SLOTS, MIN_REFRESH_BACKOFF, REFRESH_WINDOW};
pub use certificate::ClientCertificate;
pub use clock::{Clock, ManualClock, Sleep, SystemClock};
pub use credential::{
    ClientCertificateCredential, ClientCertificateCredentialOptions, NOT_BEFORE_SKEW,
    get_credential,
};
pub use endpoint::MAX_RESPONSE_BYTES;
pub use error::{Error, ErrorKind, Result, TokenEndpointError};
pub use key::{MAX_RSA_BITS, MIN_RSA_BITS};
pub use model::{CustomClaims, MAX_CREDENTIAL_FILE_BYTES, UserAssignedIdentityCredentials};
pub use reload::ReloadOutcome;
pub use retry::RetryPolicy;
pub use secret::SecretString;
pub use token::AccessToken;
/// Re-exported for [`UserAssignedIdentityCredentialOptions::with_cancellation_token`].
pub use tokio_util::sync::CancellationToken;
pub use user_assigned::{
    ReloadStatus, UserAssignedIdentityCredential, UserAssignedIdentityCredentialOptions,
    new_user_assigned_identity_credential,
};

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

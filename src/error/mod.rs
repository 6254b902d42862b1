//! The crate's error: [`Error`], what to do about it ([`ErrorCategory`]), and each layer's
//! failures, one enum per layer ([`ErrorKind`] names the layer).
//!
//! [`Error`] pairs an [`ErrorKind`] (what failed, with the details a caller can act on) with
//! the file it concerns, when there is one. Every message is written so that it
//! never contains secret material: no `client_secret`, no key bytes, no assertion and no
//! access token. Values echoed from parsers are redacted before they reach a message.

use std::fmt;
use std::path::Path;
use std::sync::Arc;

mod config;
mod dataplane;
mod file;
mod keyvault;
mod reload;
mod token;
mod transport;

pub use config::ConfigError;
pub use dataplane::{DataPlaneError, DataPlaneServiceError};
pub use file::FileError;
pub use keyvault::{KeyVaultError, LinkFault};
pub use reload::ReloadError;
pub use token::{TokenEndpointError, TokenError};
pub use transport::TransportError;
pub(crate) use transport::TransportFault;
#[cfg(feature = "keyvault")]
pub(crate) use transport::classify as classify_transport;

/// How messages name a credential file.
pub(crate) const CREDENTIAL_FILE: &str = "credential file";

/// Shorthand for `Result<T, msi_dataplane::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An error from loading a credential or acquiring a token.
///
/// `Error` is cheap to clone (it is shared between every caller waiting on one token
/// request) and carries:
/// - [`kind`](Error::kind): the failure class, with its details;
/// - [`path`](Error::path): the credential file concerned, when the error came from one;
/// - [`is_transient`](Error::is_transient): whether trying again later can help.
///
/// - [`category`](Error::category): what to do about it (retry, fix the configuration,
///   replace the credential file, or treat it as a service failure);
/// - [`status`](Error::status), [`service_code`](Error::service_code) and
///   [`request_id`](Error::request_id): what a service answered, when one did.
///
/// ```
/// # use msi_dataplane::{ErrorCategory, ErrorKind, FileError, UserAssignedIdentityCredentials};
/// let err = UserAssignedIdentityCredentials::from_slice(br#"{"client_id": "x"}"#).unwrap_err();
/// assert_eq!(err.category(), ErrorCategory::CredentialFile);
/// match err.kind() {
///     ErrorKind::File(FileError::MissingFields { fields }) => {
///         assert_eq!(fields, &["authentication_endpoint", "tenant_id", "client_secret"]);
///     }
///     other => panic!("unexpected: {other}"),
/// }
/// assert!(!err.is_transient());
/// ```
#[derive(Clone)]
pub struct Error {
    /// The failure and, for a remembered token request's failure, when it is tried again
    /// (one box keeps `Error` two words).
    inner: Box<Inner>,
    /// The file concerned, shared.
    file: Option<Arc<FileRef>>,
}

#[derive(Clone)]
struct Inner {
    kind: ErrorKind,
    retry_at: Option<time::OffsetDateTime>,
}

/// A file an error is about, and what kind of file it is.
struct FileRef {
    /// For messages: "credential file", "cloud config file".
    role: &'static str,
    path: std::path::PathBuf,
}

impl Error {
    /// The failure class and its details.
    pub fn kind(&self) -> &ErrorKind {
        &self.inner.kind
    }

    /// When the credential will try again: for the error of a token request that failed
    /// at the token endpoint or on the way there, the end of the credential's failure
    /// memory ([`failure_memory`](crate::ClientCertificateCredentialOptions::with_failure_memory)),
    /// until which every `get_token` for the same scopes without a usable cached token
    /// gets this error again rather than a new request. A caller that waits until then
    /// gets a fresh attempt (a server handing the error on can send it as `Retry-After`).
    /// `None` for errors that are not remembered: refusals made before any request (a
    /// credential outside its validity, unusable scopes) and errors of other operations.
    pub fn retry_at(&self) -> Option<time::OffsetDateTime> {
        self.inner.retry_at
    }

    /// The same error, remembered until `at` ([`retry_at`](Self::retry_at)).
    pub(crate) fn with_retry_at(mut self, at: time::OffsetDateTime) -> Self {
        self.inner.retry_at = Some(at);
        self
    }

    /// The file this error is about (a credential file, or a cloud config file), if it
    /// came from one.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_deref().map(|f| f.path.as_path())
    }

    /// Whether the same operation may succeed if tried again later without any change on
    /// the caller's side: a connection refused, reset or closed before the answer, a
    /// timeout ([`TransportError::transient`]), and HTTP 408, 429, 500, 502, 503 and 504
    /// answers, exactly what [`RetryPolicy`](crate::RetryPolicy) retries (for Key Vault,
    /// what the Azure SDK's retry policy retries). Not transient: a server certificate the
    /// client does not trust or another TLS failure, an answer that breaks HTTP (a
    /// malformed header), bad files, bad certificates, a credential outside its validity,
    /// 400/401 answers and an exchange abandoned ([`TokenError::RequestAbandoned`] and
    /// its data plane, Key Vault and reload counterparts: no Tokio runtime, or one
    /// shutting down).
    pub fn is_transient(&self) -> bool {
        self.inner.kind.is_transient()
    }

    /// What to do about this error: see [`ErrorCategory`] for the table of every failure's
    /// category. A file error
    /// counts as [`CredentialFile`](ErrorCategory::CredentialFile) when the file is a
    /// credential file (or none is named), as
    /// [`Configuration`](ErrorCategory::Configuration) for other files (a cloud config, a
    /// CA file).
    ///
    /// ```
    /// # use msi_dataplane::{ErrorCategory, UserAssignedIdentityCredentials};
    /// let err = UserAssignedIdentityCredentials::from_slice(b"not json").unwrap_err();
    /// assert_eq!(err.category(), ErrorCategory::CredentialFile);
    /// ```
    pub fn category(&self) -> ErrorCategory {
        let credential_file = self
            .file
            .as_deref()
            .is_none_or(|f| f.role == CREDENTIAL_FILE);
        self.inner.kind.category(credential_file)
    }

    /// The HTTP status a service answered with, when the error is its answer (the token
    /// endpoint, the data plane, Key Vault).
    pub fn status(&self) -> Option<u16> {
        self.inner.kind.status()
    }

    /// The service's error code, when it sent one: Entra's `AADSTS` code (as
    /// `"AADSTS700027"`, else its OAuth `error` such as `invalid_client`), or Azure's
    /// `code` from the data plane or Key Vault (`"SecretNotFound"`). Bounded and escaped:
    /// safe to log.
    pub fn service_code(&self) -> Option<std::borrow::Cow<'_, str>> {
        use std::borrow::Cow;
        match &self.inner.kind {
            ErrorKind::Token(TokenError::Endpoint(e)) => match e.aadsts_code() {
                Some(code) => Some(Cow::Owned(format!("AADSTS{code}"))),
                None => e.error.as_deref().map(Cow::Borrowed),
            },
            ErrorKind::DataPlane(DataPlaneError::Service(e)) => {
                e.code.as_deref().map(Cow::Borrowed)
            }
            ErrorKind::KeyVault(KeyVaultError::Service { code, .. }) => {
                code.as_deref().map(Cow::Borrowed)
            }
            _ => None,
        }
    }

    /// The id to quote to the service's support, when the answer carried one: Entra's
    /// `trace_id`, the data plane's `x-ms-request-id`.
    pub fn request_id(&self) -> Option<&str> {
        match &self.inner.kind {
            ErrorKind::Token(TokenError::Endpoint(e)) => e.trace_id.as_deref(),
            ErrorKind::DataPlane(DataPlaneError::Service(e)) => e.request_id.as_deref(),
            _ => None,
        }
    }

    /// Attach the credential file this error concerns (kept if one is already set).
    pub(crate) fn with_path(self, path: &Path) -> Self {
        self.with_file(path, CREDENTIAL_FILE)
    }

    /// Attach the file this error concerns and what kind of file it is (kept if a file is
    /// already set).
    pub(crate) fn with_file(mut self, path: &Path, role: &'static str) -> Self {
        if self.file.is_none() {
            self.file = Some(Arc::new(FileRef {
                role,
                path: path.to_path_buf(),
            }));
        }
        self
    }
}

impl From<ErrorKind> for Error {
    fn from(kind: ErrorKind) -> Self {
        Error {
            inner: Box::new(Inner {
                kind,
                retry_at: None,
            }),
            file: None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.file.as_deref() {
            Some(file) => write!(
                f,
                "{} {}: {}",
                file.role,
                file.path.display(),
                self.inner.kind
            ),
            None => fmt::Display::fmt(&self.inner.kind, f),
        }
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.inner.kind)
            .field("path", &self.path())
            .field("retry_at", &self.inner.retry_at)
            .finish()
    }
}

/// The underlying error itself (not the `Arc` sharing it), so that a caller can
/// `downcast_ref::<reqwest::Error>()` a transport failure's source, or
/// `downcast_ref::<std::io::Error>()` an I/O failure's.
impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.inner.kind {
            ErrorKind::Transport(e) => std::error::Error::source(e),
            // The shared errors themselves, not the `Arc`s holding them (which
            // `downcast_ref` would not see through).
            ErrorKind::File(FileError::Io { source }) => Some(&**source),
            ErrorKind::Token(TokenError::External { source, .. }) => Some(&**source),
            kind => std::error::Error::source(kind),
        }
    }
}

/// What failed: the layer that failed, with its details. Marked `#[non_exhaustive]`.
///
/// Each layer's failures are one enum; most callers need none of them and ask the
/// [`Error`] what to do ([`Error::category`]) and what the service said
/// ([`Error::status`], [`Error::service_code`], [`Error::request_id`]).
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A file the crate reads (the credential file, a cloud config, a CA file, a managed
    /// identities file), the certificate bundle, or the credential's validity.
    #[error(transparent)]
    File(FileError),
    /// A value the caller chose (an option, a cloud, a URL, a scope, a tenant, a name, an
    /// environment variable).
    #[error(transparent)]
    Config(ConfigError),
    /// A request that did not complete (connection, TLS, I/O, a malformed answer, timeout),
    /// to any service; [`TransportError::transient`] says whether a retry can help.
    #[error(transparent)]
    Transport(TransportError),
    /// A token request: the endpoint's error answer, an unusable answer, signing.
    #[error(transparent)]
    Token(TokenError),
    /// Following the credential file's rotations.
    #[error(transparent)]
    Reload(ReloadError),
    /// The MSI data plane.
    #[error(transparent)]
    DataPlane(DataPlaneError),
    /// The Key Vault store.
    #[error(transparent)]
    KeyVault(KeyVaultError),
}

/// What a caller should do about an [`Error`]: the one decision most callers need.
///
/// | category | what to do | examples |
/// |---|---|---|
/// | [`Transient`](Self::Transient) | try again later (the crate's own retries are already spent) | connection refused, reset or closed before the answer, timeout, HTTP 408, 429, 500, 502, 503, 504 |
/// | [`Configuration`](Self::Configuration) | fix the program's configuration | a bad scope, conflicting options, an invalid application id, an argument refused (a Key Vault URL, a secret version, a client id, a tenant, an authority passed in code), an unknown cloud, a missing environment variable, a tenant not allowed, an unusable cloud config or CA file, a server certificate not trusted (or another TLS failure: which roots to trust is configuration), no Tokio runtime |
/// | [`CredentialFile`](Self::CredentialFile) | fix or replace the credential file (a rotation may be on its way) | unreadable, not JSON, missing keys, unusable certificate bundle, an unusable `authentication_endpoint`, expired or not yet valid, a key that cannot sign |
/// | [`Service`](Self::Service) | the service refused or failed: read [`Error::service_code`], quote [`Error::request_id`] to support | an Entra `AADSTS` error, a data plane or Key Vault error answer, an unusable answer, an answer that breaks HTTP (a malformed header), a link refused |
///
/// Marked `#[non_exhaustive]`: treat an unknown category as [`Service`](Self::Service).
///
#[doc = include_str!("categories.md")]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCategory {
    /// Trying again later, unchanged, may succeed.
    Transient,
    /// The program's configuration must change.
    Configuration,
    /// The credential file must be fixed or replaced.
    CredentialFile,
    /// A service refused or failed; nothing on this side can be corrected from the error.
    Service,
}

impl ErrorCategory {
    /// A stable snake_case name: `transient`, `configuration`, `credential_file`,
    /// `service` (for logs, metrics labels and `msi-credential --json`).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCategory::Transient => "transient",
            ErrorCategory::Configuration => "configuration",
            ErrorCategory::CredentialFile => "credential_file",
            ErrorCategory::Service => "service",
        }
    }
}

impl fmt::Display for ErrorCategory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl ErrorKind {
    /// A stable snake_case name for the failure (`"missing_fields"`,
    /// `"credential_expired"`, `"token_endpoint"`, ...), for metrics labels and
    /// machine-readable output such as `msi-credential --json`. Never contains details.
    ///
    /// ```
    /// # use msi_dataplane::UserAssignedIdentityCredentials;
    /// let err = UserAssignedIdentityCredentials::from_slice(b"{}").unwrap_err();
    /// assert_eq!(err.kind().code(), "missing_fields");
    /// ```
    pub fn code(&self) -> &'static str {
        match self {
            ErrorKind::File(e) => e.code(),
            ErrorKind::Config(e) => e.code(),
            ErrorKind::Transport(_) => "transport",
            ErrorKind::Token(e) => e.code(),
            ErrorKind::Reload(e) => e.code(),
            ErrorKind::DataPlane(e) => e.code(),
            ErrorKind::KeyVault(e) => e.code(),
        }
    }

    /// The HTTP status of a service's answer, when the failure is one.
    fn status(&self) -> Option<u16> {
        match self {
            ErrorKind::Token(TokenError::Endpoint(e)) => Some(e.status),
            ErrorKind::Token(TokenError::InvalidResponse { status, .. })
            | ErrorKind::DataPlane(DataPlaneError::InvalidResponse { status, .. })
            | ErrorKind::KeyVault(KeyVaultError::Service { status, .. }) => Some(*status),
            ErrorKind::DataPlane(DataPlaneError::Service(e)) => Some(e.status),
            _ => None,
        }
    }

    /// The one rule for both [`Error::is_transient`] and the retry policy.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            // Not `RequestAbandoned`: no runtime, or one shutting down, is not fixed by
            // waiting. Not an unusable answer: the same answer would come again.
            // A transport failure says itself whether a retry can help (a refused
            // connection can, an untrusted certificate or a malformed answer cannot).
            ErrorKind::Transport(e) => e.transient,
            ErrorKind::Token(TokenError::Endpoint(_))
            | ErrorKind::DataPlane(DataPlaneError::Service(_))
            | ErrorKind::KeyVault(KeyVaultError::Service { .. }) => {
                self.status().is_some_and(is_transient_status)
            }
            _ => false,
        }
    }

    /// What to do, given whether the file concerned (if any) is a credential file.
    ///
    /// Every variant is named here, none by a wildcard: each failure's category is
    /// decided where its variant is chosen (by the layer that meets it), and a new
    /// variant cannot compile without one. `categories.md` is the table of it, checked
    /// by a test.
    fn category(&self, credential_file: bool) -> ErrorCategory {
        use ErrorCategory::{Configuration, CredentialFile, Service};
        if self.is_transient() {
            return ErrorCategory::Transient;
        }
        match self {
            // A credential file's content is the file's; any other file the crate reads
            // (a cloud config, a CA file) is the program's configuration.
            ErrorKind::File(_) if credential_file => CredentialFile,
            ErrorKind::File(_) => Configuration,
            // Values the caller chose, passed or set in the environment.
            ErrorKind::Config(_) => Configuration,
            // Which roots to trust is this side's configuration (a missing CA file, a
            // distroless image without roots, a proxy's own CA); so is a request that
            // cannot be built. A malformed answer is the service's.
            ErrorKind::Transport(e) => match e.fault {
                TransportFault::Tls | TransportFault::Request => Configuration,
                TransportFault::Passing | TransportFault::Protocol => Service,
            },
            ErrorKind::Token(e) => match e {
                TokenError::Endpoint(_)
                | TokenError::InvalidResponse { .. }
                | TokenError::External { .. } => Service,
                // The key in the credential file cannot sign.
                TokenError::Signing => CredentialFile,
                // No runtime, or one shutting down: the program's doing.
                TokenError::RequestAbandoned { .. } => Configuration,
            },
            // A stopped watch or an abandoned read leaves the credential serving; the
            // runtime that ran it is gone, which is the program's doing.
            ErrorKind::Reload(e) => match e {
                ReloadError::Stopped { .. } | ReloadError::ReadAbandoned { .. } => Configuration,
            },
            ErrorKind::DataPlane(e) => match e {
                DataPlaneError::Service(_)
                | DataPlaneError::InvalidChallenge { .. }
                | DataPlaneError::InvalidResponse { .. } => Service,
                DataPlaneError::RequestAbandoned { .. } => Configuration,
            },
            ErrorKind::KeyVault(e) => match e {
                KeyVaultError::Service { .. }
                | KeyVaultError::SecretNameHeldByDeletedSecret { .. }
                | KeyVaultError::InvalidResponse { .. }
                | KeyVaultError::RefusedLink { .. }
                | KeyVaultError::InvalidStoredSecret { .. } => Service,
                KeyVaultError::RequestAbandoned { .. } => Configuration,
            },
            // Where to listen, the secret, the identities: the program's setup.
        }
    }
}

/// Whether an HTTP status from a token endpoint is worth retrying.
pub(crate) fn is_transient_status(status: u16) -> bool {
    matches!(status, 408 | 429 | 500 | 502 | 503 | 504)
}

pub(crate) fn quoted(items: &[String]) -> String {
    items
        .iter()
        .map(|s| format!("`{s}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl From<std::io::Error> for ErrorKind {
    fn from(source: std::io::Error) -> Self {
        ErrorKind::File(FileError::Io {
            source: Arc::new(source),
        })
    }
}

macro_rules! layer_into_error {
    ($($variant:ident($ty:ty)),* $(,)?) => {$(
        impl From<$ty> for ErrorKind {
            fn from(e: $ty) -> Self {
                ErrorKind::$variant(e)
            }
        }

        impl From<$ty> for Error {
            fn from(e: $ty) -> Self {
                Error::from(ErrorKind::$variant(e))
            }
        }
    )*};
}

layer_into_error!(
    File(FileError),
    Config(ConfigError),
    Transport(TransportError),
    Token(TokenError),
    Reload(ReloadError),
    DataPlane(DataPlaneError),
    KeyVault(KeyVaultError),
);

/// An error's message followed by each of its causes' (`a: b: c`), skipping a cause whose
/// message the text already holds (wrappers often repeat their source). For transport
/// failures, whose own message is terse: the causes say what happened (refused, a
/// certificate not trusted, ...).
pub(crate) fn cause_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// Redact the values that a parser echoes back: double-quoted ones (serde_json quotes the
/// offending string in `invalid type: string "..."` messages) always, and backtick-quoted
/// ones unless they look like a schema key (up to 32 characters of `a-z`, `0-9`, `_`, `#`)
/// or a token of the grammar (one or two punctuation characters), so "missing field
/// `access_token`" and "expected `,` or `}`" stay whole and nothing long is ever echoed.
pub(crate) fn redact_quoted(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(at) = rest.find(['"', '`']) {
        let quote = &rest[at..at + 1];
        out.push_str(&rest[..=at]);
        let inner = &rest[at + 1..];
        let Some(close) = inner.find(quote) else {
            // An unterminated quote: drop what follows it.
            out.push('…');
            return out;
        };
        let value = &inner[..close];
        let keep = quote == "`"
            && ((value.len() <= 32
                && !value.is_empty()
                && value.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'#'
                }))
                || (value.len() <= 2 && value.bytes().all(|b| b.is_ascii_punctuation())));
        out.push_str(if keep { value } else { "…" });
        out.push_str(quote);
        rest = &inner[close + 1..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_is_send_sync_and_small() {
        fn check<T: Send + Sync + Clone + 'static>() {}
        check::<Error>();
        assert!(std::mem::size_of::<Error>() <= 2 * std::mem::size_of::<usize>());
    }

    #[test]
    fn redacts_quoted_values() {
        assert_eq!(
            redact_quoted(r#"invalid type: string "c2VjcmV0", expected a sequence"#),
            r#"invalid type: string "…", expected a sequence"#
        );
        assert_eq!(
            redact_quoted("missing field `access_token`"),
            "missing field `access_token`"
        );
        assert_eq!(redact_quoted("expected `,` or `}`"), "expected `,` or `}`");
        assert_eq!(
            redact_quoted("unknown field `LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t`, expected `a`"),
            "unknown field `…`, expected `a`"
        );
        assert_eq!(redact_quoted(r#"string "abc"#), r#"string "…"#);
    }

    #[test]
    fn aadsts_code_from_description_when_codes_absent() {
        let e = TokenEndpointError {
            status: 401,
            error_description: Some("AADSTS700027: Client assertion failed".into()),
            ..Default::default()
        };
        assert_eq!(e.aadsts_code(), Some(700027));
        let e = TokenEndpointError {
            status: 401,
            error_codes: vec![7000215],
            ..Default::default()
        };
        assert_eq!(e.aadsts_code(), Some(7000215));
    }

    #[test]
    fn transient_classes() {
        for (status, transient) in [
            (400, false),
            (401, false),
            (408, true),
            (429, true),
            (500, true),
            (503, true),
            (404, false),
        ] {
            let e = Error::from(ErrorKind::Token(TokenError::Endpoint(Box::new(
                TokenEndpointError {
                    status,
                    ..Default::default()
                },
            ))));
            assert_eq!(e.is_transient(), transient, "status {status}");
        }
        assert!(!Error::from(ErrorKind::File(FileError::NoPrivateKey)).is_transient());
    }

    #[test]
    fn transient_is_exactly_what_the_retry_policy_retries() {
        let endpoint = |status| {
            ErrorKind::Token(TokenError::Endpoint(Box::new(TokenEndpointError {
                status,
                ..Default::default()
            })))
        };
        let at = time::macros::datetime!(2026-01-01 00:00 UTC);
        let cases = [
            (
                ErrorKind::Transport(TransportError::new(
                    "token",
                    "https://login.example/t/oauth2/v2.0/token",
                    false,
                    TransportFault::Passing,
                    "connection refused".into(),
                    None,
                )),
                true,
            ),
            (
                ErrorKind::Transport(TransportError::new(
                    "token",
                    "https://login.example/t/oauth2/v2.0/token",
                    false,
                    TransportFault::Tls,
                    "invalid peer certificate: UnknownIssuer".into(),
                    None,
                )),
                false,
            ),
            (endpoint(503), true),
            (endpoint(429), true),
            (endpoint(401), false),
            (endpoint(501), false),
            (
                ErrorKind::Token(TokenError::RequestAbandoned {
                    reason: "no Tokio runtime to run it on",
                }),
                false,
            ),
            (
                ErrorKind::File(FileError::CredentialExpired {
                    expired_at: at,
                    now: at,
                }),
                false,
            ),
            (
                ErrorKind::File(FileError::CredentialNotYetValid {
                    valid_from: at,
                    now: at,
                }),
                false,
            ),
            (ErrorKind::Token(TokenError::Signing), false),
            (ErrorKind::File(FileError::NoPrivateKey), false),
        ];
        for (kind, transient) in cases {
            let code = kind.code();
            let e = Error::from(kind);
            assert_eq!(e.is_transient(), transient, "{code}");
            assert_eq!(crate::http::retry::is_retryable(&e), transient, "{code}");
        }
    }

    #[test]
    fn validity_errors_are_two_kinds_with_their_instants() {
        let expired = ErrorKind::File(FileError::CredentialExpired {
            expired_at: time::macros::datetime!(2026-02-01 00:00 UTC),
            now: time::macros::datetime!(2026-02-01 00:00:01 UTC),
        });
        assert_eq!(expired.code(), "credential_expired");
        assert_eq!(
            expired.to_string(),
            "the credential expired at 2026-02-01T00:00:00Z (now 2026-02-01T00:00:01Z)"
        );
        let early = ErrorKind::File(FileError::CredentialNotYetValid {
            valid_from: time::macros::datetime!(2026-02-01 12:00 UTC),
            now: time::macros::datetime!(2026-02-01 11:00 UTC),
        });
        assert_eq!(early.code(), "credential_not_yet_valid");
        assert_eq!(
            early.to_string(),
            "the credential is not valid until 2026-02-01T12:00:00Z (now 2026-02-01T11:00:00Z)"
        );
    }

    #[test]
    fn io_source_is_the_io_error_itself() {
        let e = Error::from(ErrorKind::from(std::io::Error::from(
            std::io::ErrorKind::NotFound,
        )));
        let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(source.map(|s| s.kind()), Some(std::io::ErrorKind::NotFound));
    }

    /// One failure of every variant, with the category it must have (no file attached;
    /// a file error counts as the credential file's).
    fn one_of_each() -> Vec<(ErrorKind, ErrorCategory)> {
        use ErrorCategory::{Configuration as Cfg, CredentialFile as Cred, Service as Svc};
        let at = time::macros::datetime!(2026-01-01 00:00 UTC);
        let io = || Arc::new(std::io::Error::from(std::io::ErrorKind::NotFound));
        let r = || "r".to_owned();
        let transport = |fault| {
            ErrorKind::Transport(TransportError::new(
                "token",
                "https://h/",
                false,
                fault,
                r(),
                None,
            ))
        };
        let token = |status| {
            ErrorKind::Token(TokenError::Endpoint(Box::new(TokenEndpointError {
                status,
                ..Default::default()
            })))
        };
        let data_plane = |status| {
            ErrorKind::DataPlane(DataPlaneError::Service(Box::new(DataPlaneServiceError {
                status,
                ..Default::default()
            })))
        };
        let key_vault = |status| {
            ErrorKind::KeyVault(KeyVaultError::Service {
                operation: "get",
                name: "n".into(),
                status,
                code: None,
                message: None,
            })
        };
        let file = |e| (ErrorKind::File(e), Cred);
        let config = |e| (ErrorKind::Config(e), Cfg);
        vec![
            file(FileError::Io { source: io() }),
            file(FileError::NotARegularFile { kind: "FIFO" }),
            file(FileError::FileTooLarge { size: 2, limit: 1 }),
            file(FileError::Json {
                line: 1,
                column: 1,
                message: r(),
            }),
            file(FileError::MissingFields {
                fields: vec!["client_id"],
            }),
            file(FileError::CamelCaseKeys {
                keys: vec![],
                expected: vec![],
            }),
            file(FileError::InvalidField {
                field: "f",
                reason: r(),
            }),
            file(FileError::SecretNotBase64 { reason: r() }),
            file(FileError::UnknownBundleFormat { reason: r() }),
            file(FileError::Pkcs12 { reason: r() }),
            file(FileError::Pkcs12Limit {
                what: r(),
                value: 2,
                limit: 1,
            }),
            file(FileError::NoPrivateKey),
            file(FileError::MultiplePrivateKeys { count: 2 }),
            file(FileError::EncryptedPrivateKey { format: "f" }),
            file(FileError::UnsupportedKeyType { algorithm: r() }),
            file(FileError::KeyTooSmall {
                bits: 1024,
                min_bits: 2048,
            }),
            file(FileError::InvalidPrivateKey { reason: r() }),
            file(FileError::NoCertificate),
            file(FileError::InvalidCertificate {
                index: 0,
                reason: r(),
            }),
            file(FileError::NoMatchingCertificate { certificates: 1 }),
            file(FileError::TooManyCertificates { count: 2, limit: 1 }),
            file(FileError::CredentialExpired {
                expired_at: at,
                now: at,
            }),
            file(FileError::CredentialNotYetValid {
                valid_from: at,
                now: at,
            }),
            config(ConfigError::InvalidAuthority {
                authority: r(),
                reason: r(),
            }),
            config(ConfigError::InvalidScopes { reason: r() }),
            config(ConfigError::ConflictingOptions {
                first: "a",
                second: "b",
                hint: "h",
            }),
            config(ConfigError::InvalidOption {
                option: "o",
                reason: r(),
            }),
            config(ConfigError::InvalidArgument {
                argument: "a",
                reason: r(),
            }),
            config(ConfigError::HttpClient { reason: r() }),
            config(ConfigError::UnknownCloud { name: r() }),
            config(ConfigError::InvalidCloud {
                field: "name",
                reason: r(),
            }),
            config(ConfigError::ConflictingIdentitySources { identity_path: r() }),
            config(ConfigError::NoIdentityPath {
                uses_managed_identity_extension: true,
            }),
            config(ConfigError::MissingEnvironmentVariable { name: "X" }),
            config(ConfigError::InvalidEnvironmentVariable {
                name: "X",
                reason: r(),
            }),
            config(ConfigError::InvalidKubernetesObject {
                field: "f",
                reason: r(),
            }),
            config(ConfigError::InvalidIdentityUrl {
                url: r(),
                reason: r(),
            }),
            config(ConfigError::TenantNotAllowed {
                tenant: r(),
                credential_tenant: r(),
            }),
            config(ConfigError::InvalidSecretName {
                name: r(),
                reason: "r",
            }),
            config(ConfigError::MissingStorageTime { field: "not_after" }),
            config(ConfigError::InvalidManagedIdentities {
                problems: vec![r()],
            }),
            (transport(TransportFault::Passing), ErrorCategory::Transient),
            (transport(TransportFault::Tls), Cfg),
            (transport(TransportFault::Request), Cfg),
            (transport(TransportFault::Protocol), Svc),
            (token(401), Svc),
            (token(503), ErrorCategory::Transient),
            (
                ErrorKind::Token(TokenError::InvalidResponse {
                    status: 200,
                    reason: r(),
                }),
                Svc,
            ),
            (
                ErrorKind::Token(TokenError::External {
                    message: r(),
                    source: Arc::new(std::io::Error::other("r")),
                }),
                Svc,
            ),
            (ErrorKind::Token(TokenError::Signing), Cred),
            (
                ErrorKind::Token(TokenError::RequestAbandoned { reason: "r" }),
                Cfg,
            ),
            (ErrorKind::Reload(ReloadError::Stopped { reason: "r" }), Cfg),
            (
                ErrorKind::Reload(ReloadError::ReadAbandoned { reason: "r" }),
                Cfg,
            ),
            (data_plane(404), Svc),
            (data_plane(429), ErrorCategory::Transient),
            (
                ErrorKind::DataPlane(DataPlaneError::InvalidChallenge { reason: r() }),
                Svc,
            ),
            (
                ErrorKind::DataPlane(DataPlaneError::InvalidResponse {
                    status: 200,
                    reason: r(),
                }),
                Svc,
            ),
            (
                ErrorKind::DataPlane(DataPlaneError::RequestAbandoned { reason: "r" }),
                Cfg,
            ),
            (key_vault(403), Svc),
            (key_vault(500), ErrorCategory::Transient),
            (
                ErrorKind::KeyVault(KeyVaultError::SecretNameHeldByDeletedSecret { name: r() }),
                Svc,
            ),
            (
                ErrorKind::KeyVault(KeyVaultError::InvalidResponse {
                    operation: "get",
                    reason: r(),
                }),
                Svc,
            ),
            (
                ErrorKind::KeyVault(KeyVaultError::RefusedLink {
                    service: "Key Vault",
                    operation: "list",
                    fault: LinkFault::Loop { page: 2 },
                }),
                Svc,
            ),
            (
                ErrorKind::KeyVault(KeyVaultError::InvalidStoredSecret {
                    name: r(),
                    reason: r(),
                }),
                Svc,
            ),
            (
                ErrorKind::KeyVault(KeyVaultError::RequestAbandoned { reason: "r" }),
                Cfg,
            ),
        ]
    }

    /// The table in `categories.md` (the docs of `ErrorCategory`): code, category text.
    fn documented_categories() -> Vec<(&'static str, &'static str)> {
        include_str!("categories.md")
            .lines()
            .filter_map(|line| {
                let cells: Vec<&str> = line.split('|').map(str::trim).collect();
                let code = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
                Some((code, *cells.get(3)?))
            })
            .collect()
    }

    #[test]
    fn every_failure_has_the_category_its_table_row_says() {
        let table = documented_categories();
        let samples = one_of_each();
        for (kind, expected) in &samples {
            let code = kind.code();
            let e = Error::from(kind.clone());
            assert_eq!(e.category(), *expected, "{code}");
            let row = table.iter().find(|(c, _)| *c == code);
            let Some((_, documented)) = row else {
                panic!("`{code}` has no row in categories.md");
            };
            assert!(
                documented.contains(&format!("{expected:?}")),
                "`{code}` is {expected:?}, categories.md says {documented}"
            );
        }
        // Every row is a failure the crate has (no stale row), listed once.
        for (code, _) in &table {
            assert!(
                samples.iter().any(|(k, _)| k.code() == *code),
                "stale row `{code}`"
            );
            assert_eq!(
                table.iter().filter(|(c, _)| c == code).count(),
                1,
                "`{code}`"
            );
        }
        // A row whose failure is transient only by its status names its other
        // category first.
        for (kind, expected) in &samples {
            let code = kind.code();
            let Some((_, documented)) = table.iter().find(|(c, _)| *c == code) else {
                continue;
            };
            if *expected != ErrorCategory::Transient && code != "transport" {
                assert!(documented.starts_with(&format!("{expected:?}")), "`{code}`");
            }
        }
    }

    #[test]
    fn a_file_error_is_configuration_for_a_file_other_than_a_credential_file() {
        let kind = ErrorKind::File(FileError::Json {
            line: 1,
            column: 1,
            message: "m".into(),
        });
        let cloud_config =
            Error::from(kind.clone()).with_file(Path::new("/c"), "cloud config file");
        assert_eq!(cloud_config.category(), ErrorCategory::Configuration);
        let credential = Error::from(kind).with_path(Path::new("/f"));
        assert_eq!(credential.category(), ErrorCategory::CredentialFile);
    }

    #[test]
    fn environment_and_kubernetes_errors_are_not_transient() {
        // Setting the variable (or fixing the input) is a change on the caller's side.
        for kind in [
            ErrorKind::Config(ConfigError::MissingEnvironmentVariable { name: "X" }),
            ErrorKind::Config(ConfigError::InvalidEnvironmentVariable {
                name: "X",
                reason: "r".into(),
            }),
            ErrorKind::Config(ConfigError::InvalidKubernetesObject {
                field: "f",
                reason: "r".into(),
            }),
        ] {
            assert!(!Error::from(kind).is_transient());
        }
    }
}

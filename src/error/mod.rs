//! The crate's error: [`Error`], what to do about it ([`ErrorCategory`]), and what failed
//! ([`ErrorKind`]).
//!
//! [`Error`] pairs an [`ErrorKind`] with the file it concerns, when there is one. The kinds
//! are sized to what callers do with them: most callers ask the error what to do
//! ([`Error::category`], [`Error::is_transient`]) and what a service said
//! ([`Error::status`], [`Error::service_code`], [`Error::request_id`]). A kind has a
//! variant of its own where a caller branches on it or its message needs fields of its
//! own (an I/O error's source, a validity's instants, a transport failure, a service's
//! answer); every other failure is one of four shapes (an unusable file, a value the
//! caller chose, an unusable answer, an abandoned request) with a stable
//! [`code`](ErrorKind::code) and a message naming the field or file. The codes and their
//! categories are the table in the docs of [`ErrorCategory`].
//!
//! Every message is written so that it never contains secret material: no
//! `client_secret`, no key bytes, no assertion and no access token. Values echoed from
//! parsers are redacted before they reach a message.

use std::borrow::Cow;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use time::OffsetDateTime;

use crate::clock::rfc3339;

#[cfg(feature = "keyvault")]
mod link;
mod service;
mod token;
mod transport;

#[cfg(feature = "keyvault")]
pub(crate) use link::LinkFault;
pub use service::ServiceError;
pub(crate) use service::{DATA_PLANE, KEY_VAULT};
pub use token::TokenEndpointError;
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
/// - [`kind`](Error::kind): what failed, with its details and its stable
///   [`code`](ErrorKind::code);
/// - [`path`](Error::path): the file concerned, when the error came from one;
/// - [`is_transient`](Error::is_transient): whether trying again later can help;
/// - [`category`](Error::category): what to do about it (retry, fix the configuration,
///   replace the credential file, or treat it as a service failure);
/// - [`status`](Error::status), [`service_code`](Error::service_code) and
///   [`request_id`](Error::request_id): what a service answered, when one did.
///
/// ```
/// # use msi_dataplane::{ErrorCategory, ErrorKind, UserAssignedIdentityCredentials};
/// let err = UserAssignedIdentityCredentials::from_slice(br#"{"client_id": "x"}"#).unwrap_err();
/// assert_eq!(err.category(), ErrorCategory::CredentialFile);
/// assert_eq!(err.kind().code(), "missing_fields");
/// assert!(matches!(err.kind(), ErrorKind::File { code: "missing_fields", .. }));
/// assert_eq!(
///     err.to_string(),
///     "missing required key(s): authentication_endpoint, tenant_id, client_secret"
/// );
/// assert!(!err.is_transient());
/// ```
#[derive(Clone, Debug)]
pub struct Error {
    /// The failure and, for a remembered token request's failure, when it is tried again
    /// (one box keeps `Error` two words).
    inner: Box<Inner>,
    /// The file concerned, shared.
    file: Option<Arc<FileRef>>,
}

#[derive(Clone, Debug)]
struct Inner {
    kind: ErrorKind,
    retry_at: Option<OffsetDateTime>,
}

/// A file an error is about, and what kind of file it is.
#[derive(Debug)]
struct FileRef {
    /// For messages: "credential file", "cloud config file".
    role: &'static str,
    path: std::path::PathBuf,
}

impl Error {
    /// What failed, with its details.
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
    pub fn retry_at(&self) -> Option<OffsetDateTime> {
        self.inner.retry_at
    }

    /// The same error, remembered until `at` ([`retry_at`](Self::retry_at)).
    pub(crate) fn with_retry_at(mut self, at: OffsetDateTime) -> Self {
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
    /// 400/401 answers and an abandoned request ([`ErrorKind::Abandoned`]: no Tokio
    /// runtime, or one shutting down).
    pub fn is_transient(&self) -> bool {
        match &self.inner.kind {
            ErrorKind::Transport(e) => e.transient,
            ErrorKind::TokenEndpoint(_) | ErrorKind::Service(_) => self
                .status()
                .is_some_and(|s| matches!(s, 408 | 429 | 500 | 502 | 503 | 504)),
            _ => false,
        }
    }

    /// What to do about this error: see [`ErrorCategory`] for the table of every failure's
    /// category. A file's failure counts as
    /// [`CredentialFile`](ErrorCategory::CredentialFile) when the file is a credential
    /// file (or none is named), as [`Configuration`](ErrorCategory::Configuration) for
    /// other files (a cloud config, a CA file).
    ///
    /// ```
    /// # use msi_dataplane::{ErrorCategory, UserAssignedIdentityCredentials};
    /// let err = UserAssignedIdentityCredentials::from_slice(b"not json").unwrap_err();
    /// assert_eq!(err.category(), ErrorCategory::CredentialFile);
    /// ```
    pub fn category(&self) -> ErrorCategory {
        use ErrorCategory::{Configuration, CredentialFile, Service, Transient};
        if self.is_transient() {
            return Transient;
        }
        match &self.inner.kind {
            // A credential file's content is the file's; any other file the crate reads
            // is the program's configuration.
            ErrorKind::Io { .. }
            | ErrorKind::File { .. }
            | ErrorKind::Expired { .. }
            | ErrorKind::NotYetValid { .. } => match self.file.as_deref() {
                Some(file) if file.role != CREDENTIAL_FILE => Configuration,
                _ => CredentialFile,
            },
            // Values the caller chose; no runtime, or one shutting down.
            ErrorKind::Config { .. } | ErrorKind::Abandoned { .. } => Configuration,
            // Which roots to trust is this side's configuration; so is a request that
            // cannot be built. A malformed answer is the service's.
            ErrorKind::Transport(e) => match e.fault {
                TransportFault::Tls | TransportFault::Request => Configuration,
                TransportFault::Passing | TransportFault::Protocol => Service,
            },
            ErrorKind::TokenEndpoint(_)
            | ErrorKind::Service(_)
            | ErrorKind::InvalidAnswer { .. }
            | ErrorKind::External { .. } => Service,
        }
    }

    /// The HTTP status a service answered with, when the error is its error answer (the
    /// token endpoint, the data plane, Key Vault).
    pub fn status(&self) -> Option<u16> {
        match &self.inner.kind {
            ErrorKind::TokenEndpoint(e) => Some(e.status),
            ErrorKind::Service(e) => Some(e.status),
            _ => None,
        }
    }

    /// The service's error code, when it sent one: Entra's `AADSTS` code (as
    /// `"AADSTS700027"`, else its OAuth `error` such as `invalid_client`), or Azure's
    /// `code` from the data plane or Key Vault (`"SecretNotFound"`). Bounded and escaped:
    /// safe to log.
    pub fn service_code(&self) -> Option<Cow<'_, str>> {
        match &self.inner.kind {
            ErrorKind::TokenEndpoint(e) => match e.aadsts_code() {
                Some(code) => Some(Cow::Owned(format!("AADSTS{code}"))),
                None => e.error.as_deref().map(Cow::Borrowed),
            },
            ErrorKind::Service(e) => e.code.as_deref().map(Cow::Borrowed),
            _ => None,
        }
    }

    /// The id to quote to the service's support, when the answer carried one: Entra's
    /// `trace_id`, the data plane's `x-ms-request-id`.
    pub fn request_id(&self) -> Option<&str> {
        match &self.inner.kind {
            ErrorKind::TokenEndpoint(e) => e.trace_id.as_deref(),
            ErrorKind::Service(e) => e.request_id.as_deref(),
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
            let path = path.to_path_buf();
            self.file = Some(Arc::new(FileRef { role, path }));
        }
        self
    }

    /// [`ErrorKind::File`]: a file's content, `code` from the table, the `field` concerned.
    pub(crate) fn file(
        code: &'static str,
        field: Option<&'static str>,
        message: impl Into<String>,
    ) -> Self {
        let message = message.into();
        ErrorKind::File {
            code,
            field,
            message,
        }
        .into()
    }

    /// [`ErrorKind::File`] `invalid_field`: a key present with an unusable value.
    pub(crate) fn invalid_field(field: &'static str, reason: impl fmt::Display) -> Self {
        let message = format!("invalid value for `{field}`: {reason}");
        Error::file("invalid_field", Some(field), message)
    }

    /// [`ErrorKind::Config`]: a value the caller chose, `code` from the table.
    pub(crate) fn config(
        code: &'static str,
        field: &'static str,
        message: impl Into<String>,
    ) -> Self {
        let message = message.into();
        ErrorKind::Config {
            code,
            field,
            message,
        }
        .into()
    }

    /// [`ErrorKind::Config`] `invalid_argument`: a value passed to a function.
    pub(crate) fn invalid_argument(argument: &'static str, reason: impl fmt::Display) -> Self {
        let message = format!("invalid argument `{argument}`: {reason}");
        Error::config("invalid_argument", argument, message)
    }

    /// [`ErrorKind::Config`] `invalid_option`: an option's value.
    pub(crate) fn invalid_option(option: &'static str, reason: impl fmt::Display) -> Self {
        let message = format!("invalid option `{option}`: {reason}");
        Error::config("invalid_option", option, message)
    }

    /// [`ErrorKind::InvalidAnswer`]: a service's answer this crate cannot use.
    pub(crate) fn answer(code: &'static str, message: impl Into<String>) -> Self {
        let message = message.into();
        ErrorKind::InvalidAnswer { code, message }.into()
    }

    /// [`ErrorKind::Abandoned`]: a request or task that ended without a result.
    pub(crate) fn abandoned(code: &'static str, message: impl Into<String>) -> Self {
        let message = message.into();
        ErrorKind::Abandoned { code, message }.into()
    }

    /// [`ErrorKind::External`] for a token source's own error, kept as its source.
    #[cfg(feature = "azure_core")]
    pub(crate) fn external(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        let message = crate::untrusted_text::service_text(&error.to_string());
        let source = Arc::new(error);
        ErrorKind::External { message, source }.into()
    }
}

impl From<ErrorKind> for Error {
    fn from(kind: ErrorKind) -> Self {
        let inner = Box::new(Inner {
            kind,
            retry_at: None,
        });
        Error { inner, file: None }
    }
}

impl From<TransportError> for Error {
    fn from(e: TransportError) -> Self {
        ErrorKind::Transport(e).into()
    }
}

impl From<std::io::Error> for ErrorKind {
    fn from(source: std::io::Error) -> Self {
        let source = Arc::new(source);
        ErrorKind::Io { source }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = &self.inner.kind;
        match self.file.as_deref() {
            Some(file) => write!(f, "{} {}: {kind}", file.role, file.path.display()),
            None => fmt::Display::fmt(kind, f),
        }
    }
}

/// The underlying error itself (not the `Arc` sharing it), so that a caller can
/// `downcast_ref::<reqwest::Error>()` a transport failure's source,
/// `downcast_ref::<std::io::Error>()` an I/O failure's, or an external credential's own.
impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.inner.kind {
            ErrorKind::Transport(e) => std::error::Error::source(e),
            ErrorKind::Io { source } => Some(&**source),
            ErrorKind::External { source, .. } => Some(&**source),
            _ => None,
        }
    }
}

/// What failed, with the details a caller can act on. Marked `#[non_exhaustive]`.
///
/// [`code`](Self::code) names each failure stably; the docs of [`ErrorCategory`] list
/// every code with its category. The four coded shapes ([`File`](Self::File),
/// [`Config`](Self::Config), [`InvalidAnswer`](Self::InvalidAnswer),
/// [`Abandoned`](Self::Abandoned)) carry their code and a one-line message.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A file could not be read (code `io`).
    #[error("cannot be read: {source}")]
    Io {
        /// The underlying I/O error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// A file's content is unusable: the credential file (not JSON, a key missing or
    /// unusable, a certificate bundle without a usable key and certificate, a key that
    /// cannot sign), a cloud config, a CA file, a managed identities file.
    #[error("{message}")]
    File {
        /// The failure's stable name (`missing_fields`, `no_private_key`, ...).
        code: &'static str,
        /// The key concerned, as spelled in the file, when there is one.
        field: Option<&'static str>,
        /// What is wrong, naming the key (never a secret value).
        message: String,
    },
    /// The credential's validity has ended (code `credential_expired`): `now` is past the
    /// earlier of the leaf certificate's `notAfter` and the file's `not_after`. Checked
    /// before any network call; the credential file must be renewed.
    #[error("the credential expired at {} (now {})", rfc3339(*expired_at), rfc3339(*now))]
    Expired {
        /// The end of the validity that was passed.
        expired_at: OffsetDateTime,
        /// The time the credential was checked at (its clock's reading).
        now: OffsetDateTime,
    },
    /// The credential is not valid yet (code `credential_not_yet_valid`): the leaf
    /// certificate's `notBefore` is more than the allowed clock skew (5 minutes) after
    /// `now`. It becomes usable 5 minutes before `valid_from`, or a clock is wrong.
    #[error("the credential is not valid until {} (now {})", rfc3339(*valid_from), rfc3339(*now))]
    NotYetValid {
        /// The start of the validity (the leaf certificate's `notBefore`).
        valid_from: OffsetDateTime,
        /// The time the credential was checked at (its clock's reading).
        now: OffsetDateTime,
    },
    /// A value the caller chose cannot be used: an option, a cloud, a URL, a scope, a
    /// tenant, a name, an environment variable, a Kubernetes object.
    #[error("{message}")]
    Config {
        /// The failure's stable name (`invalid_argument`, `unknown_cloud`, ...).
        code: &'static str,
        /// The argument, option, variable or field concerned, as its documentation
        /// spells it (`tenant`, `application_id`, `AZURE_CLIENT_ID`, `metadata.name`).
        field: &'static str,
        /// What is wrong (quoting at most a bounded, escaped start of the value).
        message: String,
    },
    /// A request that did not complete (connection, TLS, I/O, a malformed answer,
    /// timeout), to any service; [`TransportError::transient`] says whether a retry can
    /// help (code `transport`).
    #[error(transparent)]
    Transport(TransportError),
    /// The token endpoint's error answer (code `token_endpoint`).
    #[error("{0}")]
    TokenEndpoint(Box<TokenEndpointError>),
    /// The MSI data plane's or Key Vault's error answer (code `data_plane` or
    /// `key_vault`).
    #[error("{0}")]
    Service(Box<ServiceError>),
    /// A service's answer this crate cannot use: a 2xx body that is not what the
    /// operation returns (never quoted: it may hold secrets), a data plane challenge, a
    /// link not followed, a stored secret that is not a credential.
    #[error("{message}")]
    InvalidAnswer {
        /// The failure's stable name (`invalid_token_response`, `refused_link`, ...).
        code: &'static str,
        /// What is wrong with the answer.
        message: String,
    },
    /// A request or task ended without a result: no Tokio runtime to run it on, one
    /// shutting down, or its task ended abnormally.
    #[error("{message}")]
    Abandoned {
        /// The failure's stable name (`request_abandoned`, `reload_stopped`, ...).
        code: &'static str,
        /// What was abandoned, and why.
        message: String,
    },
    /// A token source other than this crate's credentials (an `azure_core`
    /// `TokenCredential`) failed (code `external_credential`); its own error is the
    /// [`source`](std::error::Error::source), for `downcast_ref`.
    #[error("the token credential failed: {message}")]
    External {
        /// Its error message, escaped and bounded as a service's text is.
        message: String,
        /// The token source's own error.
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
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
            ErrorKind::Io { .. } => "io",
            ErrorKind::File { code, .. }
            | ErrorKind::Config { code, .. }
            | ErrorKind::InvalidAnswer { code, .. }
            | ErrorKind::Abandoned { code, .. } => code,
            ErrorKind::Expired { .. } => "credential_expired",
            ErrorKind::NotYetValid { .. } => "credential_not_yet_valid",
            ErrorKind::Transport(_) => "transport",
            ErrorKind::TokenEndpoint(_) => "token_endpoint",
            ErrorKind::Service(e) if e.service == KEY_VAULT => "key_vault",
            ErrorKind::Service(_) => "data_plane",
            ErrorKind::External { .. } => "external_credential",
        }
    }
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

/// Items quoted with backticks and joined: `` `a`, `b` ``.
pub(crate) fn quoted(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| format!("`{s}`")).collect();
    quoted.join(", ")
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use ErrorCategory::{Configuration as Cfg, CredentialFile as Cred, Service as Svc};

    #[test]
    fn error_is_send_sync_and_small() {
        fn check<T: Send + Sync + Clone + 'static>() {}
        check::<Error>();
        assert!(std::mem::size_of::<Error>() <= 2 * std::mem::size_of::<usize>());
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

    fn endpoint(status: u16) -> ErrorKind {
        ErrorKind::TokenEndpoint(Box::new(TokenEndpointError {
            status,
            ..Default::default()
        }))
    }

    fn transport(fault: TransportFault) -> ErrorKind {
        let url = "https://login.example/t/oauth2/v2.0/token";
        ErrorKind::Transport(TransportError::new(
            "token",
            url,
            false,
            fault,
            "r".into(),
            None,
        ))
    }

    fn coded(code: &'static str) -> ErrorKind {
        let message = "m".to_owned();
        ErrorKind::File {
            code,
            field: None,
            message,
        }
    }

    #[test]
    fn transient_is_exactly_what_the_retry_policy_retries() {
        let at = time::macros::datetime!(2026-01-01 00:00 UTC);
        let abandoned = ErrorKind::Abandoned {
            code: "request_abandoned",
            message: "no Tokio runtime to run it on".into(),
        };
        let cases = [
            (transport(TransportFault::Passing), true),
            (transport(TransportFault::Tls), false),
            (endpoint(400), false),
            (endpoint(401), false),
            (endpoint(404), false),
            (endpoint(408), true),
            (endpoint(429), true),
            (endpoint(500), true),
            (endpoint(503), true),
            (endpoint(501), false),
            (abandoned, false),
            (
                ErrorKind::Expired {
                    expired_at: at,
                    now: at,
                },
                false,
            ),
            (
                ErrorKind::NotYetValid {
                    valid_from: at,
                    now: at,
                },
                false,
            ),
            (coded("signing"), false),
            (coded("no_private_key"), false),
        ];
        for (kind, transient) in cases {
            let e = Error::from(kind);
            assert_eq!(e.is_transient(), transient, "{e}");
            assert_eq!(crate::http::retry::is_retryable(&e), transient, "{e}");
        }
    }

    #[test]
    fn validity_errors_are_two_kinds_with_their_instants() {
        let expired = ErrorKind::Expired {
            expired_at: time::macros::datetime!(2026-02-01 00:00 UTC),
            now: time::macros::datetime!(2026-02-01 00:00:01 UTC),
        };
        assert_eq!(expired.code(), "credential_expired");
        assert_eq!(
            expired.to_string(),
            "the credential expired at 2026-02-01T00:00:00Z (now 2026-02-01T00:00:01Z)"
        );
        let early = ErrorKind::NotYetValid {
            valid_from: time::macros::datetime!(2026-02-01 12:00 UTC),
            now: time::macros::datetime!(2026-02-01 11:00 UTC),
        };
        assert_eq!(early.code(), "credential_not_yet_valid");
        assert_eq!(
            early.to_string(),
            "the credential is not valid until 2026-02-01T12:00:00Z (now 2026-02-01T11:00:00Z)"
        );
    }

    #[test]
    fn io_source_is_the_io_error_itself() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let e = Error::from(ErrorKind::from(io));
        let source = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(source.map(|s| s.kind()), Some(std::io::ErrorKind::NotFound));
    }

    /// One failure of each kind whose code is fixed, with the category it must have (no
    /// file attached: a file's failure counts as the credential file's).
    fn fixed_codes() -> Vec<(ErrorKind, ErrorCategory)> {
        let at = time::macros::datetime!(2026-01-01 00:00 UTC);
        let io = Arc::new(std::io::Error::from(std::io::ErrorKind::NotFound));
        let service = |service, status| {
            ErrorKind::Service(Box::new(ServiceError {
                service,
                status,
                ..Default::default()
            }))
        };
        vec![
            (ErrorKind::Io { source: io }, Cred),
            (
                ErrorKind::Expired {
                    expired_at: at,
                    now: at,
                },
                Cred,
            ),
            (
                ErrorKind::NotYetValid {
                    valid_from: at,
                    now: at,
                },
                Cred,
            ),
            (transport(TransportFault::Passing), ErrorCategory::Transient),
            (transport(TransportFault::Tls), Cfg),
            (transport(TransportFault::Request), Cfg),
            (transport(TransportFault::Protocol), Svc),
            (endpoint(401), Svc),
            (endpoint(503), ErrorCategory::Transient),
            (service(DATA_PLANE, 404), Svc),
            (service(DATA_PLANE, 429), ErrorCategory::Transient),
            (service(KEY_VAULT, 403), Svc),
            (service(KEY_VAULT, 500), ErrorCategory::Transient),
            (
                ErrorKind::External {
                    message: "r".into(),
                    source: Arc::new(std::io::Error::other("r")),
                },
                Svc,
            ),
        ]
    }

    /// Every code the crate's sources give one of the coded shapes, with the category of
    /// that shape: the literal first argument of each `Error::file`, `Error::config`,
    /// `Error::answer` and `Error::abandoned` call under `src/`.
    fn coded_in_sources() -> Vec<(String, ErrorCategory)> {
        let shapes = [
            ("Error::file(", Cred),
            ("secret_error(", Cred), // the bundle's refusals: Error::file about client_secret
            ("Error::config(", Cfg),
            ("Error::answer(", Svc),
            ("Error::abandoned(", Cfg),
        ];
        let mut dirs = vec![std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src"
        ))];
        let mut found = Vec::new();
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                    continue;
                }
                let text = std::fs::read_to_string(&path).unwrap_or_default();
                for (call, category) in shapes {
                    for (at, _) in text.match_indices(call) {
                        let rest = text[at + call.len()..].trim_start();
                        let Some(code) = rest.strip_prefix('"') else {
                            continue;
                        };
                        let code = &code[..code.find('"').unwrap()];
                        if code.is_empty()
                            || !code
                                .bytes()
                                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                        {
                            continue; // not a literal code (the patterns above)
                        }
                        found.push((code.to_owned(), category));
                    }
                }
            }
        }
        found
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
        let row = |code: &str| match table.iter().find(|(c, _)| *c == code) {
            Some((_, documented)) => *documented,
            None => panic!("`{code}` has no row in categories.md"),
        };
        let fixed = fixed_codes();
        for (kind, expected) in &fixed {
            let code = kind.code();
            assert_eq!(Error::from(kind.clone()).category(), *expected, "{code}");
            assert!(row(code).contains(&format!("{expected:?}")), "`{code}`");
        }
        let coded = coded_in_sources();
        assert!(coded.len() > 40, "{coded:?}");
        for (code, expected) in &coded {
            // The row names the category first (a status may make it transient).
            assert!(
                row(code).starts_with(&format!("{expected:?}")),
                "`{code}`: {expected:?}"
            );
        }
        // Every row is a failure the crate has (no stale row), listed once.
        for (code, _) in &table {
            let used = fixed.iter().any(|(k, _)| k.code() == *code)
                || coded.iter().any(|(c, _)| c == code);
            assert!(used, "stale row `{code}`");
            assert_eq!(
                table.iter().filter(|(c, _)| c == code).count(),
                1,
                "`{code}`"
            );
        }
    }

    #[test]
    fn a_file_error_is_configuration_for_a_file_other_than_a_credential_file() {
        let kind = coded("json");
        let cloud_config =
            Error::from(kind.clone()).with_file(Path::new("/c"), "cloud config file");
        assert_eq!(cloud_config.category(), ErrorCategory::Configuration);
        assert_eq!(cloud_config.to_string(), "cloud config file /c: m");
        let credential = Error::from(kind).with_path(Path::new("/f"));
        assert_eq!(credential.category(), ErrorCategory::CredentialFile);
    }
}

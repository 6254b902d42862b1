//! Failures of setting up the token server.

use std::net::SocketAddr;
use std::sync::Arc;

use msi_dataplane::ErrorCategory;

/// What the token server's setting up returns: [`ServeError`] when it fails.
pub type Result<T, E = ServeError> = std::result::Result<T, E>;

/// Failures of setting up the token server: where it listens, the identity header's
/// secret, the identities it serves, or a served identity's credential (the library's
/// [`msi_dataplane::Error`], kept whole in [`Credential`](Self::Credential)). Answers to
/// its clients are not errors of this kind: each is an HTTP status and a JSON body.
///
/// Marked `#[non_exhaustive]`: new failures may be added.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The listen address is not a loopback address: the token server listens on
    /// 127.0.0.0/8 or `::1` only (a pod's containers share its loopback; nothing outside
    /// the pod reaches it).
    #[error(
        "refusing to listen on {addr}: the token server listens on a loopback address only \
         (127.0.0.1 or [::1])"
    )]
    NonLoopbackAddress {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// The listen address cannot be bound (in use, not available).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The operating system's error.
        source: Arc<std::io::Error>,
    },
    /// The identity header's secret cannot be used: missing, unreadable, too short or
    /// too long, or with characters an HTTP header cannot carry. The secret itself is
    /// never part of the message.
    #[error("the identity header secret from {origin} is not usable: {reason}")]
    InvalidSecret {
        /// Where it was read from: `file /path` or `environment variable NAME`.
        origin: String,
        /// What is wrong.
        reason: String,
    },
    /// No identity to serve.
    #[error("the token server has no identity to serve")]
    NoIdentity,
    /// Two served identities share an id, so a request naming it could not choose.
    #[error("two served identities share {field} `{value}`")]
    DuplicateIdentity {
        /// `client_id`, `object_id` or `mi_res_id`.
        field: &'static str,
        /// The shared value.
        value: String,
    },
    /// A server option cannot be used (the token path, a limit of zero, ...).
    #[error("invalid token server option `{option}`: {reason}")]
    InvalidOption {
        /// The option.
        option: &'static str,
        /// Why.
        reason: String,
    },
    /// A served identity's credential could not be loaded, or the secret's file read:
    /// the library's error, whole (its file, category and code).
    #[error(transparent)]
    Credential(#[from] msi_dataplane::Error),
}

impl ServeError {
    /// A stable snake_case name for the failure (a credential's failure: its own,
    /// [`msi_dataplane::ErrorKind::code`]).
    pub fn code(&self) -> &'static str {
        match self {
            ServeError::NonLoopbackAddress { .. } => "non_loopback_address",
            ServeError::Bind { .. } => "bind",
            ServeError::InvalidSecret { .. } => "invalid_identity_header_secret",
            ServeError::NoIdentity => "no_identity",
            ServeError::DuplicateIdentity { .. } => "duplicate_identity",
            ServeError::InvalidOption { .. } => "invalid_serve_option",
            ServeError::Credential(e) => e.kind().code(),
        }
    }

    /// What to do about it: the server's own failures are
    /// [`Configuration`](ErrorCategory::Configuration) (an address, a secret, an option
    /// to fix); a credential's are its own category.
    pub fn category(&self) -> ErrorCategory {
        match self {
            ServeError::Credential(e) => e.category(),
            _ => ErrorCategory::Configuration,
        }
    }

    /// The library's error, when the failure is a credential's.
    pub fn as_credential_error(&self) -> Option<&msi_dataplane::Error> {
        match self {
            ServeError::Credential(e) => Some(e),
            _ => None,
        }
    }
}

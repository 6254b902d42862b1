//! Failures of a token request.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::untrusted_text::service_text;

/// Failures of a token request: the token endpoint's error answers and unusable answers,
/// and token sources other than this crate's credentials.
///
/// Reached through [`ErrorKind`](crate::error::ErrorKind); marked `#[non_exhaustive]`: new
/// failures may be added.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The token endpoint answered with an error (an Entra `AADSTS` error when the body
    /// had that shape).
    #[error("{0}")]
    Endpoint(Box<TokenEndpointError>),
    /// The token endpoint answered 2xx with a body that is not a usable token response.
    #[error("the token endpoint answered HTTP {status} with an unusable body: {reason}")]
    InvalidResponse {
        /// HTTP status.
        status: u16,
        /// What is wrong (the body itself is never included: it may hold a token).
        reason: String,
    },
    /// A token source other than this crate's credentials (an `azure_core`
    /// `TokenCredential`) failed. Its own error is the `source` (what
    /// [`std::error::Error::source`] returns), for `downcast_ref`.
    #[error("the token credential failed: {message}")]
    External {
        /// Its error message, escaped and bounded as a service's text is.
        message: String,
        /// The token source's own error.
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
    /// Signing the client assertion failed.
    #[error("cannot sign the client assertion")]
    Signing,
    /// The token request this call waited on ended without an answer (no Tokio runtime
    /// to run it on, one shutting down, or the exchange's task ended abnormally). For the
    /// token endpoint only: the data plane, Key Vault and the credential file's reading
    /// report theirs ([`DataPlaneError::RequestAbandoned`](crate::DataPlaneError::RequestAbandoned),
    /// [`KeyVaultError::RequestAbandoned`](crate::KeyVaultError::RequestAbandoned),
    /// [`ReloadError::ReadAbandoned`](crate::ReloadError::ReadAbandoned)).
    #[error("the token request was abandoned: {reason}")]
    RequestAbandoned {
        /// Why.
        reason: &'static str,
    },
}

impl TokenError {
    /// [`External`](Self::External) for a token source's own error, kept as its source.
    pub(crate) fn external(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        TokenError::External {
            message: service_text(&error.to_string()),
            source: Arc::new(error),
        }
    }

    /// A stable snake_case name for the failure (see
    /// [`ErrorKind::code`](crate::error::ErrorKind::code)).
    pub fn code(&self) -> &'static str {
        match self {
            TokenError::RequestAbandoned { .. } => "request_abandoned",
            TokenError::Signing => "signing",
            TokenError::Endpoint(_) => "token_endpoint",
            TokenError::InvalidResponse { .. } => "invalid_token_response",
            TokenError::External { .. } => "external_credential",
        }
    }
}

/// An error answer from the token endpoint, with every Entra error field it carried.
///
/// Every field but `status` is optional: endpoints and proxies answer with bodies of any
/// shape, and none of these fields is guaranteed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenEndpointError {
    /// HTTP status code.
    pub status: u16,
    /// The OAuth `error` code, e.g. `invalid_client`.
    pub error: Option<String>,
    /// Entra's `error_description` (starts with `AADSTSnnnnnn:`).
    pub error_description: Option<String>,
    /// Entra's `error_codes`, e.g. `[700027]`.
    pub error_codes: Vec<i64>,
    /// Entra's `trace_id`.
    pub trace_id: Option<String>,
    /// Entra's `correlation_id` (the request's `client-request-id`).
    pub correlation_id: Option<String>,
    /// Entra's `timestamp`.
    pub timestamp: Option<String>,
    /// The `Retry-After` the server asked for, if any.
    pub retry_after: Option<Duration>,
    /// The `client-request-id` this crate sent with the request.
    pub client_request_id: Option<String>,
}

impl TokenEndpointError {
    /// The first `AADSTS` code, from `error_codes` or else parsed from the description.
    pub fn aadsts_code(&self) -> Option<i64> {
        if let Some(code) = self.error_codes.first() {
            return Some(*code);
        }
        let rest = self.error_description.as_deref()?.strip_prefix("AADSTS")?;
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        rest[..digits].parse().ok()
    }
}

impl fmt::Display for TokenEndpointError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the token endpoint answered HTTP {}", self.status)?;
        if let Some(error) = &self.error {
            write!(f, " {error}")?;
        }
        if let Some(description) = &self.error_description {
            // Entra's description repeats the ids on extra lines; the first line says it.
            let first = description.lines().next().unwrap_or_default();
            write!(f, ": {first}")?;
        }
        if let Some(trace) = &self.trace_id {
            write!(f, " (trace id {trace}")?;
            if let Some(corr) = &self.correlation_id {
                write!(f, ", correlation id {corr}")?;
            }
            f.write_str(")")?;
        }
        Ok(())
    }
}

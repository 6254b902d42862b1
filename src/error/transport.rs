//! A request that did not complete, whichever service it was for.

use std::fmt;
use std::sync::Arc;

/// A request that did not complete: connection, TLS or I/O failure, or a timeout. The
/// same shape for the token endpoint, the MSI data plane and Key Vault; always transient
/// ([`Error::is_transient`](crate::Error::is_transient)).
///
/// The `Display` spells out the HTTP client's error and each of its causes;
/// [`source`](std::error::Error::source) is that error itself, for matching
/// (`downcast_ref::<reqwest::Error>()` and its `is_connect`, `is_timeout`, ... for the
/// token endpoint and the data plane; `azure_core::Error` for Key Vault).
#[derive(Clone)]
#[non_exhaustive]
pub struct TransportError {
    /// The service: `"token"`, `"data plane"` or `"Key Vault"`.
    pub service: &'static str,
    /// The request URL, without its query (a data plane URL's query holds a signature).
    pub url: String,
    /// Whether the failure was a timeout.
    pub timeout: bool,
    /// What went wrong: the HTTP client's error and each of its causes.
    pub message: String,
    /// The HTTP client's error (shared, so the error stays cheap to clone). Its `Display`
    /// and `Debug` name the URL, never a request body.
    pub source: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl TransportError {
    /// A transport failure of `service` at `url`.
    pub(crate) fn new(
        service: &'static str,
        url: impl Into<String>,
        timeout: bool,
        message: String,
        source: Option<Arc<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        TransportError {
            service,
            url: url.into(),
            timeout,
            message,
            source,
        }
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let timeout = if self.timeout { " (timeout)" } else { "" };
        write!(
            f,
            "{} request to {} failed{timeout}: {}",
            self.service, self.url, self.message
        )
    }
}

impl fmt::Debug for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransportError")
            .field("service", &self.service)
            .field("url", &self.url)
            .field("timeout", &self.timeout)
            .field("message", &self.message)
            .finish_non_exhaustive()
    }
}

impl std::error::Error for TransportError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|s| s as &(dyn std::error::Error + 'static))
    }
}

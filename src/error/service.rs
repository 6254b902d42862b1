//! An error answer from the MSI data plane or Key Vault.

use std::fmt;
use std::time::Duration;

/// How messages name the MSI data plane.
pub(crate) const DATA_PLANE: &str = "the MSI data plane";
/// How messages name Key Vault.
pub(crate) const KEY_VAULT: &str = "Key Vault";

/// An error answer from the MSI data plane or Key Vault: its status, the service's error
/// code and message, and the ids to quote to support. Reached through
/// [`ErrorKind::Service`](crate::ErrorKind::Service).
///
/// Every field but `service`, `status` and `request` is optional: the body may be
/// `{"error": {"code", "message"}}`, a bare `{"code", "message"}`, empty, or a proxy's
/// HTML page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ServiceError {
    /// The service: `"the MSI data plane"` or `"Key Vault"`.
    pub service: &'static str,
    /// HTTP status code.
    pub status: u16,
    /// The service's error code, e.g. `NotFound`, `SecretNotFound` (bounded, control
    /// characters escaped: safe to log).
    pub code: Option<String>,
    /// The service's message (bounded and escaped as `code`), or what to do about it.
    pub message: Option<String>,
    /// The service's request id (the data plane's `x-ms-request-id`).
    pub request_id: Option<String>,
    /// The `x-ms-client-request-id` this crate sent.
    pub client_request_id: Option<String>,
    /// The `Retry-After` the service asked for.
    pub retry_after: Option<Duration>,
    /// What was asked: the data plane's method and URL path (never the query, which holds
    /// a signature), or the Key Vault operation and secret (``get of secret `n` ``).
    pub request: String,
}

impl fmt::Display for ServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (service, status, request) = (self.service, self.status, &self.request);
        write!(f, "{service} answered HTTP {status} to {request}")?;
        for part in [&self.code, &self.message].into_iter().flatten() {
            write!(f, ": {part}")?;
        }
        match &self.request_id {
            Some(id) => write!(f, " (request id {id})"),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_status_code_and_request_id() {
        let e = ServiceError {
            service: DATA_PLANE,
            status: 404,
            code: Some("NotFound".into()),
            // As the client stores a service's message: bounded and escaped.
            message: Some("gone\\nsecond line".into()),
            request_id: Some("r-1".into()),
            request: "GET /subscriptions/s".into(),
            ..Default::default()
        };
        assert_eq!(
            e.to_string(),
            "the MSI data plane answered HTTP 404 to GET /subscriptions/s: NotFound: gone\\nsecond line (request id r-1)"
        );
    }
}

//! Failures of the MSI data plane.

use std::fmt;
use std::time::Duration;

/// Failures of the MSI data plane: its error answers, its challenge and its bodies.
///
/// Reached through [`ErrorKind`](crate::error::ErrorKind); marked `#[non_exhaustive]`: new
/// failures may be added.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DataPlaneError {
    /// The data plane answered with an error status.
    #[error("{0}")]
    Service(Box<DataPlaneServiceError>),
    /// The data plane's `WWW-Authenticate` challenge cannot be used: not RFC 9110
    /// syntax, no `Bearer` challenge, or no usable tenant in its `authorization` URL.
    #[error("cannot use the data plane's authentication challenge: {reason}")]
    InvalidChallenge {
        /// What is wrong.
        reason: String,
    },
    /// An exchange with the data plane ended without an answer: the task running it
    /// ended abnormally or its runtime is gone. Not transient.
    #[error("the data plane request was abandoned: {reason}")]
    RequestAbandoned {
        /// Why.
        reason: &'static str,
    },
    /// The data plane answered 2xx with a body that is not what the operation returns.
    #[error("the data plane answered HTTP {status} with an unusable body: {reason}")]
    InvalidResponse {
        /// HTTP status.
        status: u16,
        /// What is wrong (the body itself is never included: it may hold secrets).
        reason: String,
    },
}

impl DataPlaneError {
    /// A stable snake_case name for the failure (see
    /// [`ErrorKind::code`](crate::error::ErrorKind::code)).
    pub fn code(&self) -> &'static str {
        match self {
            DataPlaneError::Service(_) => "data_plane",
            DataPlaneError::InvalidChallenge { .. } => "invalid_challenge",
            DataPlaneError::InvalidResponse { .. } => "invalid_data_plane_response",
            DataPlaneError::RequestAbandoned { .. } => "data_plane_request_abandoned",
        }
    }
}

/// An error answer from the MSI data plane: its status, the service's error code and
/// message, and the ids to quote to support. Reached through
/// [`DataPlaneError::Service`].
///
/// Every field but `status` is optional: the body may be `{"error": {"code", "message"}}`,
/// a bare `{"code", "message"}`, empty, or a proxy's HTML page.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DataPlaneServiceError {
    /// HTTP status code.
    pub status: u16,
    /// The service's error code, e.g. `NotFound` (at most 512 characters, control
    /// characters escaped: safe to log).
    pub code: Option<String>,
    /// The service's message (bounded and escaped as `code`).
    pub message: Option<String>,
    /// The service's `x-ms-request-id`.
    pub request_id: Option<String>,
    /// The `x-ms-client-request-id` this crate sent.
    pub client_request_id: Option<String>,
    /// The `Retry-After` the service asked for.
    pub retry_after: Option<Duration>,
    /// The operation (`GET`, `POST`, ...) and the URL path (never the query, which holds
    /// a signature).
    pub request: String,
}

impl fmt::Display for DataPlaneServiceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the MSI data plane answered HTTP {} to {}",
            self.status, self.request
        )?;
        if let Some(code) = &self.code {
            write!(f, ": {code}")?;
        }
        if let Some(message) = &self.message {
            write!(f, ": {message}")?;
        }
        if let Some(id) = &self.request_id {
            write!(f, " (request id {id})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_status_code_and_request_id() {
        let e = DataPlaneServiceError {
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

//! Failures of following a credential file's rotations.

/// Failures of following a credential file's rotations.
///
/// Reached through [`ErrorKind`](crate::error::ErrorKind); marked `#[non_exhaustive]`: new
/// failures may be added.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The task that follows the credential file stopped without being asked to: the
    /// Tokio runtime it ran on shut down. The active credential keeps serving;
    /// `check_now` still re-reads on request.
    #[error("the credential file is no longer watched: {reason}")]
    Stopped {
        /// Why.
        reason: &'static str,
    },
    /// Reading the credential file in the background ended without a result: the
    /// blocking task ended abnormally or its runtime is shutting down. The active
    /// credential keeps serving.
    #[error("reading the credential file was abandoned: {reason}")]
    ReadAbandoned {
        /// Why.
        reason: &'static str,
    },
}

impl ReloadError {
    /// A stable snake_case name for the failure (see
    /// [`ErrorKind::code`](crate::error::ErrorKind::code)).
    pub fn code(&self) -> &'static str {
        match self {
            ReloadError::Stopped { .. } => "reload_stopped",
            ReloadError::ReadAbandoned { .. } => "read_abandoned",
        }
    }
}

//! `ReloadOptions`: how a reloading credential follows its file.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How a [`UserAssignedIdentityCredential`](crate::UserAssignedIdentityCredential)
/// follows its file: the backstop re-read (the Go reference's `WithBackstopRefresh`),
/// the debounce after file events, the directory watch, cancellation, and where its
/// background task runs. What the credential does with its tokens, and the environment it
/// runs in (HTTP, clock, retries), are its other argument,
/// [`ClientCertificateCredentialOptions`](crate::ClientCertificateCredentialOptions); the
/// environment's clock also drives the backstop and the debounce.
///
/// ```
/// use std::time::Duration;
/// use msi_dataplane::ReloadOptions;
///
/// let options = ReloadOptions::default().with_backstop_interval(Duration::from_secs(3600));
/// assert_eq!(options.debounce, Duration::from_millis(200));
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ReloadOptions {
    /// Re-read the file this often even when no file event arrives. Default 6 h.
    pub backstop_interval: Duration,
    /// After a file event, wait this long for more before re-reading. Default 200 ms.
    pub debounce: Duration,
    /// Watch the file's directory. Default `true`; `false` leaves only the backstop (for
    /// file systems without change notification).
    pub watch: bool,
    /// Stop watching when this token is cancelled (the credential keeps serving).
    pub cancellation: Option<CancellationToken>,
    /// Run the background task on a thread of its own (with its own single-threaded
    /// Tokio runtime) instead of on the runtime that calls `new`. Default `false`. See
    /// [`with_dedicated_thread`](Self::with_dedicated_thread).
    pub dedicated_thread: bool,
}

impl Default for ReloadOptions {
    fn default() -> Self {
        ReloadOptions {
            backstop_interval: Duration::from_secs(6 * 60 * 60),
            debounce: Duration::from_millis(200),
            watch: true,
            cancellation: None,
            dedicated_thread: false,
        }
    }
}

impl ReloadOptions {
    /// Set the backstop interval (Go: `WithBackstopRefresh`).
    pub fn with_backstop_interval(mut self, interval: Duration) -> Self {
        self.backstop_interval = interval;
        self
    }

    /// Set the debounce after file events.
    pub fn with_debounce(mut self, debounce: Duration) -> Self {
        self.debounce = debounce;
        self
    }

    /// Watch the directory for changes (default) or not.
    pub fn with_watch(mut self, watch: bool) -> Self {
        self.watch = watch;
        self
    }

    /// Stop watching when `token` is cancelled (Go: cancelling the `ctx`).
    pub fn with_cancellation_token(mut self, token: CancellationToken) -> Self {
        self.cancellation = Some(token);
        self
    }

    /// Run the background task (file events, backstop) on a thread of its own, with its
    /// own single-threaded Tokio runtime, so that it keeps following the file after the
    /// runtime that called
    /// [`UserAssignedIdentityCredential::new`](crate::UserAssignedIdentityCredential::new) ends: for a credential
    /// built inside a short-lived `block_on`, or kept in a `static`. The thread ends
    /// with the task (last handle dropped, `cancel`, or the cancellation token).
    pub fn with_dedicated_thread(mut self, dedicated: bool) -> Self {
        self.dedicated_thread = dedicated;
        self
    }
}

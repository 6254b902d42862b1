//! `UserAssignedIdentityCredential`: the credential file, followed through every rotation.
//!
//! The whole path of a rotation is here: the background task ([`Task::run`]) turns the
//! directory watch's signals ([`watch`](super::watch): debounced, an atomic swap at once)
//! and the backstop into re-reads; one re-read ([`Reloader::check`]) reads the file, tells
//! a file already decided on from a new one, applies the swap rule ([`rule`](super::rule)),
//! swaps, and records the outcome ([`Reloader::record`]: log, metrics, status); after a
//! swap the new credential fetches the old one's scopes ahead ([`Reloader::prefetch`]).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};
use tokio::sync::{Mutex as AsyncMutex, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::clock::{Clock, Rfc3339, saturating_add, to_time};
use crate::error::{Error, ErrorKind, Result};
use crate::file::model::read_limited;
use crate::reload::options::ReloadOptions;
use crate::reload::rule::{self, ReloadOutcome};
use crate::reload::status::ReloadStatus;
use crate::reload::watch::{DirSignal, FileWatch};
use crate::telemetry;
use crate::token::access_token::AccessToken;
use crate::token::credential::ClientCertificateCredential;
use crate::token::options::ClientCertificateCredentialOptions;

/// At most this many scope sets are fetched ahead after a swap.
const MAX_PREFETCH: usize = 16;

/// How often the task tries to re-arm its directory's lost watch. Real time, not the
/// credential's clock: it looks at the real file system.
const REARM_POLL: Duration = Duration::from_secs(1);

/// A user-assigned managed identity read from its credential file and kept current as
/// the file is rotated: the Rust counterpart of Go's
/// `dataplane.NewUserAssignedIdentityCredential(ctx, path, opts...)`.
///
/// - It loads the file once and fails if that fails.
/// - It watches the file's **directory** (so it sees the Secrets Store CSI driver's
///   atomic `..data` symlink swap, which a watch on the file misses — the Go reference
///   misses every such rotation and only its 6-hour backstop catches it), debounces, and
///   re-reads the visible path; it also re-reads every `backstop_interval`.
/// - A re-read file replaces the active credential only if it is valid and its
///   `not_before` is strictly later (see [`crate::ReloadOutcome`] and the rule in
///   [`guide::rotation`](crate::guide::rotation)); bad files never replace a good one,
///   and each refusal is a `tracing` event.
/// - `get_token` serves from the active credential's cache and is never blocked by a
///   re-read (reading and parsing happen on blocking threads; the swap is one pointer
///   store). After a swap, tokens come from the new credential only.
/// - Dropping the last handle, [`cancel`](Self::cancel), or the options' cancellation
///   token stops the background task (the credential keeps serving its active identity).
///
/// ```no_run
/// use msi_dataplane::{
///     ClientCertificateCredentialOptions, ReloadOptions, UserAssignedIdentityCredential,
/// };
///
/// # async fn run() -> Result<(), msi_dataplane::Error> {
/// let credential = UserAssignedIdentityCredential::new(
///     "/mnt/certs/my-identity",
///     ClientCertificateCredentialOptions::default(),
///     ReloadOptions::default(),
/// )
/// .await?;
/// let token = credential.get_token(&["https://management.azure.com/.default"]).await?;
/// let status = credential.status();
/// println!("serving {} valid until {}", status.thumbprint_sha256, status.not_after);
/// # let _ = token; Ok(()) }
/// ```
#[derive(Clone)]
pub struct UserAssignedIdentityCredential {
    inner: Arc<Reloader>,
}

impl UserAssignedIdentityCredential {
    /// Load `path` (off the async threads) into a credential with `options` (its token
    /// settings and [`Environment`](crate::Environment)), then follow the file as
    /// `reload` says. Fails, naming the file, if the first load fails. Needs a Tokio
    /// runtime.
    ///
    /// The background task that follows the file runs on the runtime that calls `new`
    /// and ends with it: if that runtime shuts down while the credential lives on,
    /// [`status`](Self::status) then shows `watching: false` and a
    /// `reload_stopped` error, the active credential keeps serving, and
    /// [`check_now`](Self::check_now) still re-reads on request. Build it on the
    /// runtime that lives as long as it, or use
    /// [`with_dedicated_thread`](ReloadOptions::with_dedicated_thread).
    /// (The Go reference's `NewUserAssignedIdentityCredential`.)
    #[doc(alias = "new_user_assigned_identity_credential")]
    #[doc(alias = "NewUserAssignedIdentityCredential")]
    pub async fn new(
        path: impl Into<PathBuf>,
        options: ClientCertificateCredentialOptions,
        reload: ReloadOptions,
    ) -> Result<Self> {
        let path = path.into();
        let (tx, signals) = unbounded_channel();
        let (load_path, load_options, watching) = (path.clone(), options.clone(), reload.watch);
        let (watch, active) = tokio::task::spawn_blocking(move || {
            // Watch first: a change after the load is then never missed.
            let watch = watching.then(|| FileWatch::new(&load_path, tx));
            let bytes = read_limited(&load_path)?;
            let credential = rule::build(&load_path, &bytes, load_options)?;
            Ok::<_, Error>((watch, Active::new(credential, rule::digest_of(&bytes))))
        })
        .await
        .map_err(|_| abandoned())??;
        let clock = options.environment().clock().clone();
        let watching = watch.as_ref().is_some_and(FileWatch::is_armed);
        let status = ReloadStatus::new(path.clone(), &active.credential, clock.now(), watching);
        let parent = reload.cancellation.as_ref();
        let cancel = parent.map_or_else(CancellationToken::new, CancellationToken::child_token);
        telemetry::reload_client(active.credential.client_id());
        tracing::info!(path = %path.display(), "loaded credential file");
        let inner = Arc::new(Reloader {
            path,
            options,
            active: ArcSwap::new(active),
            status: watch::channel(status).0,
            cancel: cancel.clone(),
            refused: AsyncMutex::new(None),
        });
        let dedicated = reload.dedicated_thread;
        let task = Task {
            reloader: Arc::downgrade(&inner),
            cancel,
            clock,
            options: reload,
            watch,
            signals,
            ended: false,
        };
        if dedicated {
            task.spawn_dedicated()?;
        } else {
            tokio::spawn(task.run());
        }
        Ok(UserAssignedIdentityCredential { inner })
    }

    /// Get an access token for `scopes` from the active credential (cached, single
    /// flight, refresh ahead: see [`ClientCertificateCredential::get_token`]).
    pub async fn get_token(&self, scopes: &[&str]) -> Result<AccessToken> {
        if let Some(token) = self.cached_token(scopes) {
            return Ok(token);
        }
        let active = self.inner.active.load_full();
        active.credential.get_token(scopes).await
    }

    /// For this workspace's token server, not a stable API: [`get_token`](Self::get_token),
    /// but a new token request is started only if `admit` says so (`Ok(None)` when it
    /// does not, with nothing started); a cached token, or joining a request already in
    /// flight for the same scopes, never calls `admit`. The server takes its token
    /// endpoint budget in `admit`, so that joining a request costs none.
    #[doc(hidden)]
    pub async fn get_token_admitted(
        &self,
        scopes: &[&str],
        admit: impl FnOnce() -> bool,
    ) -> Result<Option<AccessToken>> {
        let active = self.inner.active.load_full();
        active.credential.get_token_admitted(scopes, admit).await
    }

    /// The active credential's cached token for `scopes` if one can be handed out now,
    /// without any request (the hit path of [`get_token`](Self::get_token)).
    pub fn cached_token(&self, scopes: &[&str]) -> Option<AccessToken> {
        self.inner.active.load().credential.cached_token(scopes)
    }

    /// The active credential.
    pub fn current(&self) -> ClientCertificateCredential {
        self.inner.active.load_full().credential.clone()
    }

    /// What is active and how the last re-read went.
    pub fn status(&self) -> ReloadStatus {
        self.inner.status.borrow().clone()
    }

    /// A receiver that sees the status after every re-read (`changed().await`).
    pub fn subscribe(&self) -> watch::Receiver<ReloadStatus> {
        self.inner.status.subscribe()
    }

    /// Re-read the file now (as a file event or the backstop would).
    pub async fn check_now(&self) -> ReloadOutcome {
        self.inner.check("on request").await
    }

    /// Stop watching (the directory watch and the backstop). The active credential keeps
    /// serving; [`check_now`](Self::check_now) still works.
    pub fn cancel(&self) {
        self.inner.cancel.cancel();
    }

    /// The credential file's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }
}

/// Its [`status`](UserAssignedIdentityCredential::status), which holds no secret.
impl fmt::Debug for UserAssignedIdentityCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.status();
        f.debug_tuple("UserAssignedIdentityCredential")
            .field(&status)
            .finish()
    }
}

/// The active credential, and its file's digest.
struct Active {
    credential: ClientCertificateCredential,
    /// SHA-256 of the file's bytes.
    digest: [u8; 32],
}

impl Active {
    /// The credential in use from now on (its gauges set, with the `metrics` feature).
    fn new(credential: ClientCertificateCredential, digest: [u8; 32]) -> Arc<Self> {
        credential.gauges().record();
        Arc::new(Active { credential, digest })
    }
}

/// A file as the last refusal remembers it: its bytes' digest, or why it could not be read
/// (the same failure again is the same file).
type FileKey = std::result::Result<[u8; 32], &'static str>;

/// The last file refused, and what was decided about it (its outcome and error).
#[derive(Clone)]
struct Refusal(FileKey, ReloadOutcome, Option<Error>);

/// What one read of the file found.
enum Read {
    /// A file decided on before (the active credential's, or the last refused): its
    /// outcome and error again.
    Seen(ReloadOutcome, Option<Error>),
    /// A file not decided on before, and what building a credential from it gave.
    New(FileKey, Result<ClientCertificateCredential>),
}

/// Shared by the handles and (weakly) by the background task.
struct Reloader {
    path: PathBuf,
    options: ClientCertificateCredentialOptions,
    /// Swapped whole on a rotation; the one swapped out is freed when the last call that
    /// loaded it returns.
    active: ArcSwap<Active>,
    status: watch::Sender<ReloadStatus>,
    cancel: CancellationToken,
    /// Serializes re-reads (the task's and `check_now`'s), and holds the last refused
    /// file: the same bad file is not decided, logged and counted again.
    refused: AsyncMutex<Option<Refusal>>,
}

impl Drop for Reloader {
    fn drop(&mut self) {
        // The task holds only a weak reference; this wakes it to stop.
        self.cancel.cancel();
    }
}

impl Reloader {
    /// One re-read, in a `credential_reload` span, under the lock from the read to the
    /// status, so that re-reads decide one after another, each on what it read: read and
    /// build (off the async threads), decide, swap, record. `get_token` never waits for it.
    async fn check(&self, trigger: &'static str) -> ReloadOutcome {
        let client_id = self.active.load().credential.client_id().to_owned();
        let span = tracing::info_span!(
            "credential_reload",
            client_id = %client_id,
            trigger,
            outcome = tracing::field::Empty,
            reason = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
        );
        self.check_file(trigger, &client_id, Instant::now())
            .instrument(span)
            .await
    }

    async fn check_file(&self, trigger: &str, client_id: &str, started: Instant) -> ReloadOutcome {
        let mut refused = self.refused.lock().await;
        let active = self.active.load_full();
        let (file, built) = match self.read(&active, refused.clone()).await {
            Read::Seen(outcome, error) => {
                return self.record(client_id, started, outcome, error, false);
            }
            Read::New(file, built) => (file, built),
        };
        let active_not_before = active.credential.window().not_before;
        let not_before = built.as_ref().ok().map(|c| c.window().not_before);
        let outcome = rule::decide(active_not_before, not_before);
        match (built, file) {
            (Ok(new), Ok(digest)) if outcome == ReloadOutcome::Swapped => {
                tracing::info!(
                    path = %self.path.display(),
                    trigger,
                    old_not_before = %Rfc3339(active_not_before),
                    new_not_before = %Rfc3339(new.window().not_before),
                    thumbprint_sha256 = %new.certificate().thumbprint_sha256_hex(),
                    "credential file rotated; the new credential is active"
                );
                *refused = None;
                telemetry::reload_client(new.client_id());
                // The old credential writes no gauge from now on (not even for a token
                // request still in flight on it); the new one sets them.
                active.credential.gauges().retire();
                self.active.store(Active::new(new.clone(), digest));
                let recorded = self.record(client_id, started, outcome, None, true);
                // Only now that it is active: its tokens replace the old ones.
                self.prefetch(&active, new);
                recorded
            }
            (built, file) => {
                let error = built.err();
                let path = self.path.display();
                let active_not_before = Rfc3339(active_not_before);
                match &error {
                    Some(error) => {
                        tracing::warn!(%path, trigger, %error, "credential file unusable; keeping the active credential")
                    }
                    None => {
                        tracing::warn!(%path, trigger, %active_not_before, "credential file not newer than the active credential; keeping the active one")
                    }
                }
                *refused = Some(Refusal(file, outcome, error.clone()));
                self.record(client_id, started, outcome, error, true)
            }
        }
    }

    /// Where every re-read's outcome is decided and recorded: the metrics (one count per
    /// file decided on: a file decided on before, read again, counts as `unchanged`), the
    /// span, then the status (so that whoever waits for the status sees the count).
    /// `new_file`: the file was not decided on before.
    fn record(
        &self,
        client_id: &str,
        started: Instant,
        outcome: ReloadOutcome,
        error: Option<Error>,
        new_file: bool,
    ) -> ReloadOutcome {
        // Why the file now in place is refused, read again or not ("none": it is in use).
        let refused = match (outcome, &error) {
            (ReloadOutcome::Swapped | ReloadOutcome::Unchanged, _) => "none",
            (_, Some(error)) => telemetry::reload_reason(error),
            (_, None) => "not_newer",
        };
        let (label, reason) = match outcome {
            _ if !new_file => ("unchanged", "none"),
            ReloadOutcome::Swapped => ("swapped", "none"),
            _ => ("kept_last_good", refused),
        };
        telemetry::reload(client_id, label, reason);
        telemetry::file_rejected(client_id, refused);
        let span = tracing::Span::current();
        span.record("outcome", label);
        span.record("reason", reason);
        span.record("duration_ms", started.elapsed().as_millis() as u64);
        let now = self.options.environment().clock().now();
        let active = self.active.load();
        self.status.send_modify(|s| {
            if new_file && outcome == ReloadOutcome::Swapped {
                let shown = ReloadStatus::new(s.path.clone(), &active.credential, now, s.watching);
                *s = ReloadStatus {
                    reloads: s.reloads + 1,
                    ..shown
                };
            }
            s.last_check = Some(now);
            s.last_outcome = Some(outcome);
            s.last_new_file = new_file;
            s.last_error = error;
        });
        outcome
    }

    /// Read the file and, unless it is one decided on before, build a credential from
    /// it: off the async threads.
    async fn read(&self, active: &Active, refused: Option<Refusal>) -> Read {
        let (path, options, active_digest) =
            (self.path.clone(), self.options.clone(), active.digest);
        tokio::task::spawn_blocking(move || {
            let bytes = read_limited(&path);
            let file = bytes
                .as_deref()
                .map(|b| rule::digest_of(b))
                .map_err(telemetry::reload_reason);
            if file == Ok(active_digest) {
                return Read::Seen(ReloadOutcome::Unchanged, None);
            }
            if let Some(Refusal(_, outcome, error)) = refused.filter(|r| r.0 == file) {
                return Read::Seen(outcome, error);
            }
            Read::New(file, bytes.and_then(|b| rule::build(&path, &b, options)))
        })
        .await
        .unwrap_or_else(|_| {
            let error = abandoned();
            Read::New(Err(telemetry::reload_reason(&error)), Err(error))
        })
    }

    /// In the background, fetch tokens with the new (now active) credential for the
    /// scopes the old one served recently (at most [`MAX_PREFETCH`]; single flight as for
    /// any caller), so that the first `get_token` after the swap finds them cached. A
    /// failure shows at once: a `tracing` warning, and `last_prefetch_error`.
    fn prefetch(&self, old: &Active, new: ClientCertificateCredential) {
        let old_not_after = old.credential.window().end;
        for scopes in old.credential.live_scopes(MAX_PREFETCH) {
            let (new, status, path) = (new.clone(), self.status.clone(), self.path.clone());
            tokio::spawn(async move {
                let refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
                let Err(error) = new.get_token(&refs).await else {
                    return;
                };
                tracing::warn!(
                    path = %path.display(),
                    scope = %crate::untrusted_text::service_text(&scopes.join(" ")),
                    %error,
                    old_not_after = %Rfc3339(old_not_after),
                    "the new credential's token request failed; callers will see this error"
                );
                status.send_modify(|s| s.last_prefetch_error = Some(error));
            });
        }
    }

    /// The watch's state, as the status shows it.
    fn set_watching(&self, watching: bool) {
        self.status
            .send_if_modified(|s| std::mem::replace(&mut s.watching, watching) != watching);
    }
}

/// The background task: file events (debounced; a complete change at once), the backstop,
/// and the watch (its state in the status, re-armed when lost, moved after each re-read).
struct Task {
    reloader: Weak<Reloader>,
    cancel: CancellationToken,
    /// The environment's clock: the backstop and the debounce.
    clock: Arc<dyn Clock>,
    options: ReloadOptions,
    watch: Option<FileWatch>,
    signals: UnboundedReceiver<DirSignal>,
    /// Set when `run` ends by itself; a task dropped before that was dropped with its
    /// runtime.
    ended: bool,
}

impl Task {
    async fn run(mut self) {
        let clock = self.clock.clone();
        let interval = to_time(self.options.backstop_interval);
        let mut backstop = saturating_add(clock.now(), interval);
        'run: loop {
            let armed = self.watch.as_ref().is_some_and(FileWatch::is_armed);
            let trigger = tokio::select! {
                _ = self.cancel.cancelled() => break,
                Some(signal) = self.signals.recv() => {
                    // Debounce: let the writer finish, then read once for all its events;
                    // a complete change (an atomic swap) ends the wait. On the injected
                    // clock, like every timer here.
                    let settled = saturating_add(clock.now(), to_time(self.options.debounce));
                    let mut complete = signal == DirSignal::Complete;
                    while !complete {
                        tokio::select! {
                            _ = self.cancel.cancelled() => break 'run,
                            _ = clock.sleep_until(settled) => break,
                            Some(signal) = self.signals.recv() => {
                                complete = signal == DirSignal::Complete;
                            }
                        }
                    }
                    while self.signals.try_recv().is_ok() {}
                    "file event"
                }
                _ = clock.sleep_until(backstop) => {
                    backstop = saturating_add(clock.now(), interval);
                    "backstop"
                }
                // The watch is lost (its directory removed or moved away): re-arm it once
                // the directory is back, whoever does, and re-read what it holds.
                _ = tokio::time::sleep(REARM_POLL), if self.watch.is_some() && !armed => {
                    self.with_watch(FileWatch::rearm).await;
                    if !self.watch.as_ref().is_some_and(FileWatch::is_armed) {
                        continue;
                    }
                    "watch re-armed"
                }
            };
            let Some(reloader) = self.reloader.upgrade() else {
                break;
            };
            reloader.set_watching(self.watch.as_ref().is_some_and(FileWatch::is_armed));
            tokio::select! {
                _ = self.cancel.cancelled() => break,
                _ = reloader.check(trigger) => {}
            }
            drop(reloader);
            // Each AtomicWriter swap moves the directory the path resolves to.
            self.with_watch(FileWatch::follow).await;
        }
        self.ended = true;
    }

    /// Run `f` on the watch, off the async threads.
    async fn with_watch(&mut self, f: fn(&mut FileWatch)) {
        if let Some(mut watch) = self.watch.take() {
            let done = tokio::task::spawn_blocking(move || {
                f(&mut watch);
                watch
            });
            self.watch = done.await.ok();
        }
    }

    /// Run on a thread of its own with a single-threaded runtime.
    fn spawn_dedicated(self) -> Result<()> {
        std::thread::Builder::new()
            .name("msi-dataplane-reload".into())
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                match runtime {
                    Ok(runtime) => runtime.block_on(self.run()),
                    // Dropping the task records that nothing follows the file.
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot start the reload thread's runtime")
                    }
                }
            })
            .map(drop)
            .map_err(|e| Error::from(ErrorKind::from(e)))
    }
}

impl Drop for Task {
    /// The watch ends with the task. A task dropped before it ended was dropped with its
    /// runtime: the status says so, where callers look.
    fn drop(&mut self) {
        let Some(reloader) = self.reloader.upgrade() else {
            return;
        };
        if !self.ended && !reloader.cancel.is_cancelled() {
            tracing::warn!(
                path = %reloader.path.display(),
                "the runtime running the credential reload task shut down; the file is no longer followed"
            );
            let message = "the credential file is no longer watched: the Tokio runtime running \
                           the reload task shut down";
            let stopped = Error::abandoned("reload_stopped", message);
            reloader
                .status
                .send_modify(|s| s.last_error = Some(stopped));
        }
        reloader.set_watching(false);
    }
}

fn abandoned() -> Error {
    let message = "reading the credential file was abandoned: the blocking task reading the \
                   credential file did not finish";
    Error::abandoned("read_abandoned", message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environment::Environment;
    // The kit's copy of this crate (unit tests link a second one): its file format.
    use msi_dataplane_testing::msi_dataplane::BundleFormat;
    use msi_dataplane_testing::write_credentials_file;
    use msi_dataplane_testing::{EntraServer, TempDir, TestCertificate, TestIdentity};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_rotated_out_key_is_freed_when_the_last_call_holding_it_returns() {
        const FAST: &str = "https://fast.example.com/.default";
        const SLOW: &str = "https://slow.example.com/.default";
        let server = EntraServer::start().await;
        let identity = TestIdentity::new();
        let old = TestCertificate::self_signed();
        let new = TestCertificate::builder().renewing(&old).self_signed();
        server.register(&identity, &old);
        server.register(&identity, &new);
        let dir = TempDir::new("rotated-out-key");
        let path = dir.join("identity");
        let file = |cert| identity.credentials(cert, &server.base_url(), BundleFormat::Pem);
        write_credentials_file(&path, &file(&old));
        let cred = reloading(&server, &path, ReloadOptions::default().with_watch(false)).await;
        let weak = cred.current().downgrade();
        // Hits on several threads: none of them may keep the credential alive afterwards.
        cred.get_token(&[FAST]).await.unwrap();
        let hits: Vec<_> = (0..8)
            .map(|_| {
                tokio::spawn({
                    let cred = cred.clone();
                    async move { cred.get_token(&[FAST]).await.map(drop) }
                })
            })
            .collect();
        for hit in hits {
            hit.await.unwrap().unwrap();
        }
        // A call that started before the rotation and holds the old credential.
        server.set_scope_delay(SLOW, Duration::from_millis(500));
        let slow = tokio::spawn({
            let cred = cred.clone();
            async move { cred.get_token(&[SLOW]).await }
        });
        while server.token_requests() < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        write_credentials_file(&path, &file(&new));
        assert_eq!(cred.check_now().await, ReloadOutcome::Swapped);
        cred.get_token(&[FAST]).await.unwrap();
        assert!(weak.upgrade().is_some(), "freed while a call still held it");
        slow.await.unwrap().unwrap();
        // Its request task ends just after answering: give it a moment, no more.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while weak.upgrade().is_some() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(
            weak.upgrade().is_none(),
            "the rotated-out credential is still alive"
        );
    }

    /// A reloading credential on `path`, its tokens from `server`.
    async fn reloading(
        server: &EntraServer,
        path: &Path,
        reload: ReloadOptions,
    ) -> UserAssignedIdentityCredential {
        let options = ClientCertificateCredentialOptions::default()
            .with_environment(Environment::default().with_http_client(server.client()));
        UserAssignedIdentityCredential::new(path, options, reload)
            .await
            .unwrap()
    }
}

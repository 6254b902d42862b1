//! `UserAssignedIdentityCredential`: the credential file, followed through every rotation.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Instant;

use arc_swap::ArcSwap;
use time::OffsetDateTime;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};
use tokio::sync::{Mutex as AsyncMutex, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::clock::{Clock, Rfc3339, saturating_add, to_time};
use crate::error::{Error, ErrorKind, ReloadError, Result};
use crate::reload::options::ReloadOptions;
use crate::reload::rule::{self, Candidate, Loaded, ReloadOutcome};
use crate::reload::watch::{DirSignal, Subscription, subscribe as watch_dir};
use crate::telemetry;
use crate::token::access_token::AccessToken;
use crate::token::credential::{ClientCertificateCredential, ClientCertificateCredentialOptions};

/// What a reloading credential is serving, and how its last re-read went: for health
/// endpoints, metrics and the CLI. Secrets are not included. It is `Serialize` (times RFC
/// 3339, the error as `{"code", "message", "transient"}`), `Display` (one line) and
/// `PartialEq` (errors compared by code and message).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ReloadStatus {
    /// The credential file's visible path.
    pub path: PathBuf,
    /// The active credential's effective `not_before` (the file's, else the leaf's).
    pub not_before: OffsetDateTime,
    /// The active credential's end: the earlier of the file's `not_after` and the leaf's.
    pub not_after: OffsetDateTime,
    /// Lower-case hex SHA-256 thumbprint of the active leaf certificate.
    pub thumbprint_sha256: String,
    /// When the active credential became active.
    pub loaded_at: OffsetDateTime,
    /// When the file was last re-read (`None`: not since the first load).
    pub last_check: Option<OffsetDateTime>,
    /// How the last re-read ended.
    pub last_outcome: Option<ReloadOutcome>,
    /// Whether the last re-read decided on a file not decided on before (`true` for a
    /// swap and for a first refusal); `false` when it found the file last decided on
    /// again (the active credential's, or the one already refused, which is not refused
    /// a second time). The metrics count a refusal only when this is `true`.
    pub last_new_file: bool,
    /// The error of the last re-read, if it failed (`None` when the last one did not).
    pub last_error: Option<Error>,
    /// How many times a newer credential was swapped in.
    pub reloads: u64,
    /// Whether the directory watch is in place (false: backstop only, or stopped).
    pub watching: bool,
    /// Why fetching tokens ahead with the last swapped-in credential failed (for the
    /// scopes its predecessor had served), `None` when the last such fetch succeeded or
    /// none was made. Set as soon as it fails, before any caller asks: a new credential
    /// that Entra rejects shows here while the old one may still be valid.
    pub last_prefetch_error: Option<Error>,
}

/// The active credential and what is known of it.
struct Active {
    credential: ClientCertificateCredential,
    not_before: OffsetDateTime,
    not_after: OffsetDateTime,
    digest: [u8; 32],
}

/// Shared by the handles and (weakly) by the background task.
struct Reloader {
    path: PathBuf,
    client_options: ClientCertificateCredentialOptions,
    /// Swapped whole on a rotation; the one swapped out is freed when the last call that
    /// loaded it returns.
    active: ArcSwap<Active>,
    status: watch::Sender<ReloadStatus>,
    cancel: CancellationToken,
    /// Serializes re-reads (task and `check_now`); holds the last file that was refused,
    /// so the same bad bytes (or the same read failure) are not decided, logged and
    /// counted again.
    check: AsyncMutex<Option<Refusal>>,
    /// Re-reads decided so far: a check whose read began before another's decision
    /// reads again (its bytes may be older than what was decided meanwhile).
    decided: AtomicU64,
    /// For the crate's tests: the next `check_now` stops between its read and the lock.
    #[cfg(test)]
    pause: std::sync::Mutex<Option<Pause>>,
    /// For subscribing to the directory the visible path resolves to (`None`: not
    /// watching).
    target_tx: Option<UnboundedSender<DirSignal>>,
    /// The watch on that directory, when it is not the visible directory.
    target: std::sync::Mutex<Option<(PathBuf, Subscription)>>,
}

impl Drop for Reloader {
    fn drop(&mut self) {
        // The task holds only a weak reference; this wakes it to stop.
        self.cancel.cancel();
    }
}

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
    /// [`ReloadError::Stopped`] error, the active credential keeps serving, and
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
        let (changed_tx, changed) = unbounded_channel();
        let target_tx = reload.watch.then(|| changed_tx.clone());
        let subscribe = reload.watch.then(|| (watched_dir(&path), changed_tx));
        let clock = options.environment().clock().clone();
        let (watcher, target, loaded) =
            load_blocking(path.clone(), options.clone(), subscribe).await?;
        let now = clock.now();
        let status = ReloadStatus {
            path: path.clone(),
            not_before: loaded.not_before,
            not_after: loaded.not_after,
            thumbprint_sha256: loaded.credential.certificate().thumbprint_sha256_hex(),
            loaded_at: now,
            last_check: None,
            last_outcome: None,
            last_new_file: false,
            last_error: None,
            reloads: 0,
            watching: watcher.as_ref().is_some_and(Subscription::is_armed),
            last_prefetch_error: None,
        };
        let cancel = match &reload.cancellation {
            Some(parent) => parent.child_token(),
            None => CancellationToken::new(),
        };
        let inner = Arc::new(Reloader {
            path: path.clone(),
            client_options: options,
            active: ArcSwap::from_pointee(active_from(loaded)),
            status: watch::channel(status).0,
            cancel: cancel.clone(),
            check: AsyncMutex::new(None),
            decided: AtomicU64::new(0),
            #[cfg(test)]
            pause: std::sync::Mutex::new(None),
            target_tx,
            target: std::sync::Mutex::new(target),
        });
        telemetry::reload_client(inner.active.load().credential.client_id());
        tracing::info!(path = %path.display(), "loaded credential file");
        let dedicated = reload.dedicated_thread;
        let task = ReloadTask {
            reloader: Arc::downgrade(&inner),
            cancel,
            clock,
            options: reload,
            watcher,
            changed,
            ended: false,
        };
        if dedicated {
            spawn_dedicated(task)?;
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

impl fmt::Debug for UserAssignedIdentityCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let status = self.status();
        f.debug_struct("UserAssignedIdentityCredential")
            .field("path", &status.path)
            .field("thumbprint_sha256", &status.thumbprint_sha256)
            .field("not_before", &status.not_before)
            .field("not_after", &status.not_after)
            .field("reloads", &status.reloads)
            .finish_non_exhaustive()
    }
}

/// The `outcome` of a reload in the metrics and spans.
fn outcome_label(outcome: ReloadOutcome) -> &'static str {
    match outcome {
        ReloadOutcome::Swapped => "swapped",
        ReloadOutcome::Unchanged => "unchanged",
        ReloadOutcome::NotNewer | ReloadOutcome::Invalid => "kept_last_good",
    }
}

/// The credential in use from now on (its gauges set, with the `metrics` feature).
fn active_from(loaded: Loaded) -> Active {
    loaded.credential.record_times();
    Active {
        credential: loaded.credential,
        not_before: loaded.not_before,
        not_after: loaded.not_after,
        digest: loaded.digest,
    }
}

/// On a blocking thread: subscribe to the directory's changes (first: a change after the
/// load is then never missed), then read and build.
async fn load_blocking(
    path: PathBuf,
    options: ClientCertificateCredentialOptions,
    subscribe: Option<(PathBuf, tokio::sync::mpsc::UnboundedSender<DirSignal>)>,
) -> Result<(
    Option<Subscription>,
    Option<(PathBuf, Subscription)>,
    Loaded,
)> {
    tokio::task::spawn_blocking(move || {
        let target = subscribe.as_ref().and_then(|(_, tx)| {
            let dir = resolved_dir(&path).flatten()?;
            Some((dir.clone(), watch_dir(dir, tx.clone())))
        });
        let watcher = subscribe.map(|(dir, tx)| watch_dir(dir, tx));
        let bytes = rule::read(&path)?;
        Ok((watcher, target, rule::build(&path, &bytes, options)?))
    })
    .await
    .map_err(|_| abandoned())?
}

/// Run `task` on a thread of its own with a single-threaded runtime.
fn spawn_dedicated(task: ReloadTask) -> Result<()> {
    std::thread::Builder::new()
        .name("msi-dataplane-reload".into())
        .spawn(move || {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt.block_on(task.run()),
                // Dropping the task records that nothing follows the file.
                Err(e) => tracing::warn!(error = %e, "cannot start the reload thread's runtime"),
            }
        })
        .map(drop)
        .map_err(|e| Error::from(ErrorKind::from(e)))
}

fn abandoned() -> Error {
    ErrorKind::Reload(ReloadError::ReadAbandoned {
        reason: "the blocking task reading the credential file did not finish",
    })
    .into()
}

/// What reading the file found, before the swap rule.
enum Read {
    /// The bytes of the active credential.
    Same,
    /// The bytes last refused (the refusal is repeated without re-parsing).
    Refused,
    /// New bytes that built a newer credential.
    Built(Box<Loaded>),
    /// New bytes of a valid file that is not newer (its effective `not_before`), with
    /// nothing built.
    NotNewer([u8; 32], OffsetDateTime),
    /// The file could not be read, or its bytes (digest) did not build.
    Bad(Option<[u8; 32]>, Error),
}

/// What a refusal was about: a file's bytes, or a failure to read it (by reason).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Refused {
    Bytes([u8; 32]),
    Unread(&'static str),
}

/// The last refused file: what it was and why.
#[derive(Clone)]
struct Refusal {
    what: Refused,
    outcome: ReloadOutcome,
    error: Option<Error>,
}

/// For the crate's tests: where a paused check says it has read, and waits to go on.
#[cfg(test)]
struct Pause {
    read: tokio::sync::oneshot::Sender<()>,
    resume: tokio::sync::oneshot::Receiver<()>,
}

impl Reloader {
    /// One re-read: read, compare, build, decide, swap; record the outcome.
    ///
    /// The file is read before the `check` lock is taken: a read that stalls (a hung
    /// network file system) then holds up only its own caller, never `check_now` or the
    /// background task. When another re-read decided while this one read or waited for
    /// the lock, it reads again under the lock (the other's read has just finished), so
    /// that old bytes are never decided on after newer ones were swapped in. Under the
    /// lock otherwise only CPU work happens (decide, build, swap).
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
        let started = Instant::now();
        let (outcome, reason) = self
            .check_file(trigger, &client_id)
            .instrument(span.clone())
            .await;
        span.record("outcome", outcome_label(outcome));
        span.record("reason", reason);
        span.record("duration_ms", started.elapsed().as_millis() as u64);
        outcome
    }

    /// [`check`](Self::check)'s work: the outcome, and why the last good credential was
    /// kept (`"none"` when it was not: a swap or the same bytes). Counted (the `metrics`
    /// feature) before the status changes, so that whoever waits for the status sees the
    /// count.
    async fn check_file(
        &self,
        trigger: &'static str,
        client_id: &str,
    ) -> (ReloadOutcome, &'static str) {
        let decided = self.decided.load(Ordering::Acquire);
        let mut bytes = self.read_file().await;
        #[cfg(test)]
        self.paused(trigger).await;
        let mut refusal = self.check.lock().await;
        if self.decided.load(Ordering::Acquire) != decided {
            // Another re-read decided while this one read or waited: these bytes may be
            // older than what it swapped in. Read again, now that the other read is done.
            bytes = self.read_file().await;
        }
        let mut prefetch = None;
        let read = match bytes {
            Err(e) => {
                let unread = Refused::Unread(telemetry::reload_reason(&e));
                match refusal.as_ref() {
                    Some(r) if r.what == unread => Read::Refused,
                    _ => Read::Bad(None, e),
                }
            }
            Ok(bytes) => {
                let path = self.path.clone();
                let active = self.active.load_full();
                let (active_digest, active_not_before) = (active.digest, active.not_before);
                drop(active);
                let refused = refusal.as_ref().map(|r| r.what);
                let options = self.client_options.clone();
                // Compare, and build only when the bytes are new and newer: off the async
                // threads.
                tokio::task::spawn_blocking(move || {
                    let digest = rule::digest_of(&bytes);
                    if digest == active_digest {
                        return Read::Same;
                    }
                    if Some(Refused::Bytes(digest)) == refused {
                        return Read::Refused;
                    }
                    match rule::build_if_newer(&path, &bytes, active_not_before, options) {
                        Ok(Candidate::Newer(loaded)) => Read::Built(loaded),
                        Ok(Candidate::NotNewer(not_before)) => Read::NotNewer(digest, not_before),
                        Err(e) => Read::Bad(Some(digest), e),
                    }
                })
                .await
                .unwrap_or_else(|_| Read::Bad(None, abandoned()))
            }
        };

        let new_file = !matches!(read, Read::Same | Read::Refused);
        let (outcome, error, swapped) = match read {
            Read::Same => (ReloadOutcome::Unchanged, None, false),
            Read::Refused => match refusal.as_ref() {
                Some(r) => (r.outcome, r.error.clone(), false),
                None => (ReloadOutcome::Unchanged, None, false),
            },
            Read::Bad(digest, error) => {
                tracing::warn!(
                    path = %self.path.display(),
                    trigger,
                    error = %error,
                    "credential file unusable; keeping the active credential"
                );
                let what = match digest {
                    Some(digest) => Refused::Bytes(digest),
                    None => Refused::Unread(telemetry::reload_reason(&error)),
                };
                *refusal = Some(Refusal {
                    what,
                    outcome: ReloadOutcome::Invalid,
                    error: Some(error.clone()),
                });
                (ReloadOutcome::Invalid, Some(error), false)
            }
            Read::Built(loaded) => {
                let active_not_before = self.active.load().not_before;
                tracing::info!(
                    path = %self.path.display(),
                    trigger,
                    old_not_before = %Rfc3339(active_not_before),
                    new_not_before = %Rfc3339(loaded.not_before),
                    thumbprint_sha256 = %loaded.credential.certificate().thumbprint_sha256_hex(),
                    "credential file rotated; the new credential is active"
                );
                *refusal = None;
                prefetch = Some((self.active.load_full(), loaded.credential.clone()));
                telemetry::reload_client(loaded.credential.client_id());
                // The old credential writes no gauge from now on (not even for a token
                // request still in flight on it); the new one sets them.
                self.active.load().credential.retire_gauges();
                self.active.store(Arc::new(active_from(*loaded)));
                (ReloadOutcome::Swapped, None, true)
            }
            Read::NotNewer(digest, file_not_before) => {
                tracing::warn!(
                    path = %self.path.display(),
                    trigger,
                    active_not_before = %Rfc3339(self.active.load().not_before),
                    file_not_before = %Rfc3339(file_not_before),
                    "credential file is not newer than the active credential; keeping the active one"
                );
                *refusal = Some(Refusal {
                    what: Refused::Bytes(digest),
                    outcome: ReloadOutcome::NotNewer,
                    error: None,
                });
                (ReloadOutcome::NotNewer, None, false)
            }
        };
        self.decided.fetch_add(1, Ordering::AcqRel);
        // One count per file decided on: the file last decided on, read again, is
        // `unchanged` (as `msi-credential watch` prints it).
        let reason = match (&error, outcome) {
            _ if !new_file => "none",
            (Some(e), _) => telemetry::reload_reason(e),
            (None, ReloadOutcome::NotNewer) => "not_newer",
            (None, _) => "none",
        };
        let label = if new_file {
            outcome_label(outcome)
        } else {
            "unchanged"
        };
        telemetry::reload(client_id, label, reason);
        self.follow_target().await;
        let now = self.client_options.environment().clock().now();
        let active = self.active.load_full();
        self.status.send_modify(|s| {
            s.last_check = Some(now);
            s.last_outcome = Some(outcome);
            s.last_new_file = new_file;
            s.last_error = error;
            if swapped {
                s.reloads += 1;
                s.loaded_at = now;
            }
            s.not_before = active.not_before;
            s.not_after = active.not_after;
            s.thumbprint_sha256 = active.credential.certificate().thumbprint_sha256_hex();
        });
        // After the swap and its status: the new credential's tokens are cached only once
        // it is the active one.
        if let Some((old, new)) = prefetch {
            self.prefetch(&old, new);
        }
        (outcome, reason)
    }

    /// Read the file off the async threads.
    async fn read_file(&self) -> Result<zeroize::Zeroizing<Vec<u8>>> {
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || rule::read(&path))
            .await
            .unwrap_or_else(|_| Err(abandoned()))
    }

    /// For the crate's tests: stop a `check_now` between its read and the lock, once.
    #[cfg(test)]
    async fn paused(&self, trigger: &'static str) {
        if trigger != "on request" {
            return;
        }
        let pause = lock(&self.pause).take();
        if let Some(Pause { read, resume }) = pause {
            let _ = read.send(());
            let _ = resume.await;
        }
    }

    /// Watch the directory the visible path resolves to (the real file's directory:
    /// `..<timestamp>/` in the AtomicWriter layout, a symlink target's directory
    /// elsewhere) as well as the visible directory, so that a write through the symlink is
    /// seen. Re-armed after every re-read: each AtomicWriter swap changes the target.
    async fn follow_target(&self) {
        let Some(tx) = self.target_tx.clone() else {
            return;
        };
        let path = self.path.clone();
        let current = lock(&self.target).as_ref().map(|(dir, _)| dir.clone());
        let found = tokio::task::spawn_blocking(move || {
            let resolved = resolved_dir(&path)?;
            if resolved == current {
                return None;
            }
            Some(resolved.map(|dir| {
                tracing::debug!(dir = %dir.display(), "watching the credential file's real directory");
                (dir.clone(), watch_dir(dir, tx))
            }))
        })
        .await;
        // `None`: unresolvable now (keep what is watched) or unchanged.
        if let Ok(Some(next)) = found {
            *lock(&self.target) = next;
        }
    }

    /// In the background, fetch tokens with the new (now active) credential for the
    /// scopes the old one served recently (at most [`MAX_PREFETCH`]; single flight as for
    /// any caller), so that the first `get_token` after the swap finds them cached. A
    /// failure is reported at once (`tracing` warning, `last_prefetch_error`).
    fn prefetch(&self, old: &Active, new: ClientCertificateCredential) {
        let scope_sets = old.credential.live_scopes(MAX_PREFETCH);
        if scope_sets.is_empty() {
            return;
        }
        let status = self.status.clone();
        let path = self.path.clone();
        let old_not_after = old.not_after;
        let clock = self.client_options.environment().clock().clone();
        tokio::spawn(async move {
            let mut fetches = tokio::task::JoinSet::new();
            for scopes in scope_sets {
                let new = new.clone();
                fetches.spawn(async move {
                    let refs: Vec<&str> = scopes.iter().map(String::as_str).collect();
                    new.get_token(&refs)
                        .await
                        .map(drop)
                        .map_err(|e| (scopes.join(" "), e))
                });
            }
            let mut failed = None;
            while let Some(done) = fetches.join_next().await {
                if let Ok(Err((scope, error))) = done {
                    if failed.is_none() {
                        tracing::warn!(
                            path = %path.display(),
                            scope = %crate::untrusted_text::service_text(&scope),
                            error = %error,
                            old_still_valid = clock.now() < old_not_after,
                            old_not_after = %Rfc3339(old_not_after),
                            "the new credential's token request failed; callers will see this error"
                        );
                        status.send_modify(|s| s.last_prefetch_error = Some(error.clone()));
                    }
                    failed = Some(error);
                }
            }
            if failed.is_none() {
                status.send_if_modified(|s| s.last_prefetch_error.take().is_some());
            }
        });
    }

    fn set_watching(&self, watching: bool) {
        self.status.send_if_modified(|s| {
            let changed = s.watching != watching;
            s.watching = watching;
            changed
        });
    }
}

/// The background task: file events (debounced), the backstop, the watch's state.
struct ReloadTask {
    reloader: Weak<Reloader>,
    cancel: CancellationToken,
    /// The environment's clock: the backstop and the debounce.
    clock: Arc<dyn Clock>,
    options: ReloadOptions,
    watcher: Option<Subscription>,
    changed: UnboundedReceiver<DirSignal>,
    /// Set when `run` ends by itself; a task dropped before that was dropped with its
    /// runtime.
    ended: bool,
}

impl ReloadTask {
    async fn run(mut self) {
        let clock = self.clock.clone();
        let interval = to_time(self.options.backstop_interval);
        let mut next_backstop = saturating_add(clock.now(), interval);
        'run: loop {
            let trigger = tokio::select! {
                _ = self.cancel.cancelled() => break,
                Some(signal) = self.changed.recv() => match signal {
                    DirSignal::Changed => {
                        // Debounce: let the writer finish, then read once for all events;
                        // an atomic swap meanwhile ends the wait (its content is complete).
                        // On the injected clock, like every timer here.
                        let settled = saturating_add(clock.now(), to_time(self.options.debounce));
                        let mut rearmed = false;
                        let mut swapped = false;
                        while !swapped {
                            tokio::select! {
                                _ = self.cancel.cancelled() => break 'run,
                                _ = clock.sleep_until(settled) => break,
                                Some(signal) = self.changed.recv() => {
                                    rearmed |= signal == DirSignal::Armed;
                                    swapped |= signal == DirSignal::Swapped;
                                }
                            }
                        }
                        while let Ok(signal) = self.changed.try_recv() {
                            rearmed |= signal == DirSignal::Armed;
                            swapped |= signal == DirSignal::Swapped;
                        }
                        Some(if rearmed {
                            "directory re-armed"
                        } else if swapped {
                            "atomic swap"
                        } else {
                            "file event"
                        })
                    }
                    DirSignal::Swapped => {
                        // The swap is atomic: no debounce. Fold what is already queued.
                        let mut rearmed = false;
                        while let Ok(signal) = self.changed.try_recv() {
                            rearmed |= signal == DirSignal::Armed;
                        }
                        Some(if rearmed { "directory re-armed" } else { "atomic swap" })
                    }
                    DirSignal::Armed => Some("directory re-armed"),
                    DirSignal::Disarmed => None,
                },
                _ = clock.sleep_until(next_backstop) => {
                    next_backstop = saturating_add(clock.now(), interval);
                    Some("backstop")
                }
            };
            let armed = self.watcher.as_ref().is_some_and(Subscription::is_armed);
            self.with_reloader(|r| r.set_watching(armed));
            let Some(trigger) = trigger else { continue };
            let Some(reloader) = self.reloader.upgrade() else {
                break;
            };
            tokio::select! {
                _ = self.cancel.cancelled() => break,
                _ = reloader.check(trigger) => {}
            }
        }
        self.ended = true;
        self.with_reloader(|r| r.set_watching(false));
        tracing::debug!("credential reload task stopped");
    }

    fn with_reloader(&self, f: impl FnOnce(&Reloader)) {
        if let Some(r) = self.reloader.upgrade() {
            f(&r);
        }
    }
}

impl Drop for ReloadTask {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        // Dropped before it ended: its runtime shut down. Say so where callers look.
        let Some(reloader) = self.reloader.upgrade() else {
            return;
        };
        if reloader.cancel.is_cancelled() {
            return;
        }
        tracing::warn!(
            path = %reloader.path.display(),
            "the runtime running the credential reload task shut down; the file is no longer followed"
        );
        reloader.status.send_modify(|s| {
            s.watching = false;
            s.last_error = Some(
                ErrorKind::Reload(ReloadError::Stopped {
                    reason: "the Tokio runtime running the reload task shut down",
                })
                .into(),
            );
        });
    }
}

/// At most this many scope sets are fetched ahead after a swap.
const MAX_PREFETCH: usize = 16;

fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Blocking: the directory the visible path resolves to, when it is not the visible
/// path's own directory (`Some(None)`: the same directory; `None`: unresolvable now).
fn resolved_dir(path: &Path) -> Option<Option<PathBuf>> {
    let real = std::fs::canonicalize(path).ok()?;
    let real_dir = real.parent()?.to_path_buf();
    let visible_dir = std::fs::canonicalize(watched_dir(path)).ok()?;
    Some((real_dir != visible_dir).then_some(real_dir))
}

/// The directory to watch: the visible path's parent (the file itself may be a symlink
/// into `..data`, whose target changes).
fn watched_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environment::Environment;
    use std::time::Duration;
    // The kit's copy of this crate (unit tests link a second one): its file type and format.
    use msi_dataplane_testing::msi_dataplane::{BundleFormat, UserAssignedIdentityCredentials};
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

    /// Write `creds` to a temporary file beside `path` and rename it over `path`: the
    /// watcher never sees a partial file.
    fn replace(path: &Path, creds: &UserAssignedIdentityCredentials) -> std::io::Result<()> {
        let tmp = path.with_extension("tmp");
        write_credentials_file(&tmp, creds);
        std::fs::rename(&tmp, path)
    }

    fn thumbprint(cert: &TestCertificate) -> [u8; 32] {
        let mut out = [0u8; 32];
        out.copy_from_slice(
            aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, cert.certificate_der()).as_ref(),
        );
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_check_held_at_the_lock_while_the_watcher_swaps_a_newer_file_in_refuses_nothing() {
        let server = EntraServer::start().await;
        let identity = TestIdentity::new();
        let v1 = TestCertificate::self_signed();
        let v2 = TestCertificate::builder().renewing(&v1).self_signed();
        let v3 = TestCertificate::builder().renewing(&v2).self_signed();
        let dir = TempDir::new("held-check");
        let path = dir.join("identity");
        let file = |cert| identity.credentials(cert, &server.base_url(), BundleFormat::Pem);
        replace(&path, &file(&v1)).unwrap();
        let cred = reloading(&server, &path, ReloadOptions::default()).await;
        let mut updates = cred.subscribe();
        let outcomes = tokio::spawn(async move {
            let mut seen = Vec::new();
            while updates.changed().await.is_ok() {
                let s = updates.borrow_and_update().clone();
                seen.push((s.last_outcome, s.last_new_file));
            }
            seen
        });

        // A check reads v2 and is held before the lock ...
        let (read_tx, read_rx) = tokio::sync::oneshot::channel();
        let (resume_tx, resume_rx) = tokio::sync::oneshot::channel();
        *lock(&cred.inner.pause) = Some(Pause {
            read: read_tx,
            resume: resume_rx,
        });
        replace(&path, &file(&v2)).unwrap();
        let held = tokio::spawn({
            let cred = cred.clone();
            async move { cred.check_now().await }
        });
        read_rx.await.unwrap();
        // ... while the watcher swaps in v2 and then the newer v3.
        replace(&path, &file(&v3)).unwrap();
        let v3_hex = v3.sha256_hex();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while cred.status().thumbprint_sha256 != v3_hex {
            assert!(
                std::time::Instant::now() < deadline,
                "the watcher swaps v3 in"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        resume_tx.send(()).unwrap();
        let outcome = held.await.unwrap();

        assert_eq!(
            outcome,
            ReloadOutcome::Unchanged,
            "it decided on what it held"
        );
        let status = cred.status();
        assert_eq!(status.thumbprint_sha256, v3_hex);
        assert_eq!(status.last_outcome, Some(ReloadOutcome::Unchanged));
        assert_eq!(status.last_error.as_ref().map(ToString::to_string), None);
        drop(cred);
        let seen = outcomes.await.unwrap();
        assert!(
            seen.iter().all(|(outcome, _)| matches!(
                outcome,
                Some(ReloadOutcome::Swapped | ReloadOutcome::Unchanged)
            )),
            "something was refused: {seen:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_file_that_is_not_newer_loads_no_key_and_signs_nothing() {
        let server = EntraServer::start().await;
        let identity = TestIdentity::new();
        let old = TestCertificate::self_signed();
        let active = TestCertificate::builder().renewing(&old).self_signed();
        let newer = TestCertificate::builder().renewing(&active).self_signed();
        let dir = TempDir::new("not-newer-unbuilt");
        let path = dir.join("identity");
        let file = |cert| identity.credentials(cert, &server.base_url(), BundleFormat::Pem);
        replace(&path, &file(&active)).unwrap();
        let cred = reloading(&server, &path, ReloadOptions::default().with_watch(false)).await;
        use crate::file::certificate::probe::{KEY_LOADS, SIGNATURES, count};

        // The older file, with its not_before; then without one (the certificates' own
        // notBefore decide, decoded without the key).
        replace(&path, &file(&old)).unwrap();
        assert_eq!(cred.check_now().await, ReloadOutcome::NotNewer);
        let mut bare = file(&old);
        bare.not_before = None;
        replace(&path, &bare).unwrap();
        assert_eq!(cred.check_now().await, ReloadOutcome::NotNewer);
        // Give a background signature, had one been started, the time to happen.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(count(&KEY_LOADS, &thumbprint(&old)), 0, "key loaded");
        assert_eq!(count(&SIGNATURES, &thumbprint(&old)), 0, "assertion signed");

        // The probe sees a key that is loaded: the newer file's.
        replace(&path, &file(&newer)).unwrap();
        assert_eq!(cred.check_now().await, ReloadOutcome::Swapped);
        assert_eq!(count(&KEY_LOADS, &thumbprint(&newer)), 1);
    }
}

//! `UserAssignedIdentityCredential`: the credential file, followed through every rotation
//! (a re-read: [`check`](super::check); the background task: [`task`](super::task)).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio::sync::{Mutex as AsyncMutex, watch};
use tokio_util::sync::CancellationToken;

use crate::error::Result;
use crate::reload::check::{Refusal, abandoned};
use crate::reload::options::ReloadOptions;
use crate::reload::rule::{self, ReloadOutcome};
use crate::reload::status::ReloadStatus;
use crate::reload::target::{resolved_dir, watched_dir};
use crate::reload::task::{ReloadTask, spawn_dedicated};
use crate::reload::watch::{DirSignal, Subscription, subscribe as watch_dir};
use crate::telemetry;
use crate::token::access_token::AccessToken;
use crate::token::credential::ClientCertificateCredential;
use crate::token::options::ClientCertificateCredentialOptions;

/// The active credential, and its file's digest.
pub(super) struct Active {
    pub(super) credential: ClientCertificateCredential,
    /// SHA-256 of the file's bytes.
    pub(super) digest: [u8; 32],
}

impl Active {
    /// The credential in use from now on (its gauges set, with the `metrics` feature).
    pub(super) fn new(credential: ClientCertificateCredential, digest: [u8; 32]) -> Self {
        credential.gauges().record();
        Active { credential, digest }
    }
}

/// Shared by the handles and (weakly) by the background task.
pub(super) struct Reloader {
    pub(super) path: PathBuf,
    pub(super) client_options: ClientCertificateCredentialOptions,
    /// Swapped whole on a rotation; the one swapped out is freed when the last call that
    /// loaded it returns.
    pub(super) active: ArcSwap<Active>,
    pub(super) status: watch::Sender<ReloadStatus>,
    pub(super) cancel: CancellationToken,
    /// Serializes re-reads (task and `check_now`); holds the last file that was refused,
    /// so the same bad bytes (or the same read failure) are not decided, logged and
    /// counted again.
    pub(super) check: AsyncMutex<Option<Refusal>>,
    /// Re-reads decided so far: a check whose read began before another's decision
    /// reads again (its bytes may be older than what was decided meanwhile).
    pub(super) decided: AtomicU64,
    /// For the crate's tests: the next `check_now` stops between its read and the lock.
    #[cfg(test)]
    pub(super) pause: Mutex<Option<super::check::Pause>>,
    /// For subscribing to the directory the visible path resolves to (`None`: not
    /// watching).
    pub(super) target_tx: Option<UnboundedSender<DirSignal>>,
    /// The watch on that directory, when it is not the visible directory.
    pub(super) target: Mutex<Option<(PathBuf, Subscription)>>,
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
        let (changed_tx, changed) = unbounded_channel();
        let target_tx = reload.watch.then(|| changed_tx.clone());
        let subscribe = reload.watch.then(|| (watched_dir(&path), changed_tx));
        let clock = options.environment().clock().clone();
        let (watcher, target, active) =
            load_blocking(path.clone(), options.clone(), subscribe).await?;
        let now = clock.now();
        let window = active.credential.window();
        let status = ReloadStatus {
            path: path.clone(),
            not_before: window.not_before,
            not_after: window.end,
            thumbprint_sha256: active.credential.certificate().thumbprint_sha256_hex(),
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
            active: ArcSwap::from_pointee(active),
            status: watch::channel(status).0,
            cancel: cancel.clone(),
            check: AsyncMutex::new(None),
            decided: AtomicU64::new(0),
            #[cfg(test)]
            pause: Mutex::new(None),
            target_tx,
            target: Mutex::new(target),
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

/// On a blocking thread: subscribe to the directory's changes (first: a change after the
/// load is then never missed), then read and build.
async fn load_blocking(
    path: PathBuf,
    options: ClientCertificateCredentialOptions,
    subscribe: Option<(PathBuf, tokio::sync::mpsc::UnboundedSender<DirSignal>)>,
) -> Result<(
    Option<Subscription>,
    Option<(PathBuf, Subscription)>,
    Active,
)> {
    tokio::task::spawn_blocking(move || {
        let target = subscribe.as_ref().and_then(|(_, tx)| {
            let dir = resolved_dir(&path).flatten()?;
            Some((dir.clone(), watch_dir(dir, tx.clone())))
        });
        let watcher = subscribe.map(|(dir, tx)| watch_dir(dir, tx));
        let bytes = rule::read(&path)?;
        let credential = rule::build(&path, &bytes, options)?;
        Ok((
            watcher,
            target,
            Active::new(credential, rule::digest_of(&bytes)),
        ))
    })
    .await
    .map_err(|_| abandoned())?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::environment::Environment;
    use crate::reload::check::Pause;
    use crate::reload::lock;
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

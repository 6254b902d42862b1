//! One re-read of the credential file: read it (off the async threads, before any lock),
//! compare it with the active credential's and with the last refused file, build and
//! decide under the lock, swap, and record the outcome (status, metrics, span).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use time::OffsetDateTime;
use tracing::Instrument as _;

use crate::clock::Rfc3339;
use crate::error::{Error, Result};
use crate::reload::rule::{self, Candidate, ReloadOutcome};
use crate::reload::user_assigned::{Active, Reloader};
use crate::telemetry;
use crate::token::credential::ClientCertificateCredential;

/// What reading the file found, before the swap rule.
enum Read {
    /// The bytes of the active credential.
    Same,
    /// The bytes last refused (the refusal is repeated without re-parsing).
    Refused,
    /// New bytes (their digest) that built a newer credential.
    Built(ClientCertificateCredential, [u8; 32]),
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
pub(super) struct Refusal {
    what: Refused,
    outcome: ReloadOutcome,
    error: Option<Error>,
}

/// For the crate's tests: where a paused check says it has read, and waits to go on.
#[cfg(test)]
pub(super) struct Pause {
    pub(super) read: tokio::sync::oneshot::Sender<()>,
    pub(super) resume: tokio::sync::oneshot::Receiver<()>,
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
    pub(super) async fn check(&self, trigger: &'static str) -> ReloadOutcome {
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
                let active_digest = active.digest;
                let active_not_before = active.credential.window().not_before;
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
                        Ok(Candidate::Newer(credential)) => Read::Built(credential, digest),
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
            Read::Built(credential, digest) => {
                let old = self.active.load_full();
                tracing::info!(
                    path = %self.path.display(),
                    trigger,
                    old_not_before = %Rfc3339(old.credential.window().not_before),
                    new_not_before = %Rfc3339(credential.window().not_before),
                    thumbprint_sha256 = %credential.certificate().thumbprint_sha256_hex(),
                    "credential file rotated; the new credential is active"
                );
                *refusal = None;
                telemetry::reload_client(credential.client_id());
                // The old credential writes no gauge from now on (not even for a token
                // request still in flight on it); the new one sets them.
                old.credential.gauges().retire();
                prefetch = Some((old, credential.clone()));
                self.active.store(Arc::new(Active::new(credential, digest)));
                (ReloadOutcome::Swapped, None, true)
            }
            Read::NotNewer(digest, file_not_before) => {
                tracing::warn!(
                    path = %self.path.display(),
                    trigger,
                    active_not_before = %Rfc3339(self.active.load().credential.window().not_before),
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
        let refused = match (&error, outcome) {
            (Some(e), _) => telemetry::reload_reason(e),
            (None, ReloadOutcome::NotNewer) => "not_newer",
            (None, _) => "none",
        };
        let reason = if new_file { refused } else { "none" };
        let label = if new_file {
            outcome_label(outcome)
        } else {
            "unchanged"
        };
        telemetry::reload(client_id, label, reason);
        telemetry::file_rejected(client_id, refused);
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
            let window = active.credential.window();
            s.not_before = window.not_before;
            s.not_after = window.end;
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
        let pause = crate::reload::lock(&self.pause).take();
        if let Some(Pause { read, resume }) = pause {
            let _ = read.send(());
            let _ = resume.await;
        }
    }

    /// The watch's state, as the status shows it.
    pub(super) fn set_watching(&self, watching: bool) {
        self.status.send_if_modified(|s| {
            let changed = s.watching != watching;
            s.watching = watching;
            changed
        });
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

pub(super) fn abandoned() -> Error {
    let message = "reading the credential file was abandoned: the blocking task reading the \
                   credential file did not finish";
    Error::abandoned("read_abandoned", message)
}

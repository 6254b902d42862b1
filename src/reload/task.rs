//! The background task of a reloading credential: file events (debounced; an atomic swap
//! at once), the backstop, the watch's state; on its own thread when asked.

use std::sync::{Arc, Weak};

use tokio::sync::mpsc::UnboundedReceiver;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, saturating_add, to_time};
use crate::error::{Error, ErrorKind, Result};
use crate::reload::options::ReloadOptions;
use crate::reload::user_assigned::Reloader;
use crate::reload::watch::{DirSignal, Subscription};

/// The background task: file events (debounced), the backstop, the watch's state.
pub(super) struct ReloadTask {
    pub(super) reloader: Weak<Reloader>,
    pub(super) cancel: CancellationToken,
    /// The environment's clock: the backstop and the debounce.
    pub(super) clock: Arc<dyn Clock>,
    pub(super) options: ReloadOptions,
    pub(super) watcher: Option<Subscription>,
    pub(super) changed: UnboundedReceiver<DirSignal>,
    /// Set when `run` ends by itself; a task dropped before that was dropped with its
    /// runtime.
    pub(super) ended: bool,
}

impl ReloadTask {
    pub(super) async fn run(mut self) {
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
            let message = "the credential file is no longer watched: the Tokio runtime running \
                           the reload task shut down";
            s.last_error = Some(Error::abandoned("reload_stopped", message));
        });
    }
}

/// Run `task` on a thread of its own with a single-threaded runtime.
pub(super) fn spawn_dedicated(task: ReloadTask) -> Result<()> {
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

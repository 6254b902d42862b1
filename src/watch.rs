//! Watching the credential file's directory with `notify`.
//!
//! The Secrets Store CSI driver writes with kubelet's AtomicWriter: `<name>` is a symlink
//! to `..data/<name>`, and a rotation renames a new `..data_tmp` symlink over `..data`. A
//! watch on the file itself follows the old inode and never sees a modify event; a watch
//! on the directory sees the new timestamped directory, `..data_tmp` and the rename, but
//! no event that names `<name>`. So the directory is watched and **every** event (and
//! every watcher error) is taken as "maybe changed": the caller re-reads the visible path
//! and compares bytes.
//!
//! If the directory itself is removed and comes back (a remount, a test harness), the
//! watch on the old inode is dead; [`DirWatcher::rearm_if_needed`], called about once a
//! second, notices the new inode and watches it.

#[cfg(unix)]
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc::UnboundedSender;

/// A watch on one directory that signals `changed` on every event.
pub(crate) struct DirWatcher {
    dir: PathBuf,
    changed: UnboundedSender<()>,
    watcher: Option<RecommendedWatcher>,
    /// (device, inode) of the directory the watch is on.
    armed: Option<(u64, u64)>,
    /// Set by the watcher when the watched directory itself was removed or moved: the
    /// watch is dead even if a new directory has the same inode number (ext4 reuses them).
    dead: Arc<AtomicBool>,
}

impl DirWatcher {
    /// A watcher for `dir`; not armed until [`rearm_if_needed`](Self::rearm_if_needed).
    pub(crate) fn new(dir: PathBuf, changed: UnboundedSender<()>) -> Self {
        DirWatcher {
            dir,
            changed,
            watcher: None,
            armed: None,
            dead: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Whether a watch is in place.
    pub(crate) fn is_armed(&self) -> bool {
        self.armed.is_some()
    }

    /// (Re)arm when the directory exists and is not the one watched. Returns true when it
    /// armed a new watch (the directory may hold a new file: the caller should check).
    pub(crate) fn rearm_if_needed(&mut self) -> bool {
        let current = identity(&self.dir);
        let dead = self.dead.swap(false, Ordering::AcqRel);
        if current == self.armed && !dead {
            return false;
        }
        // The directory went away or was replaced: the old watch is dead.
        self.watcher = None;
        self.armed = None;
        let Some(identity) = current else {
            return false;
        };
        match self.watch() {
            Ok(watcher) => {
                self.watcher = Some(watcher);
                self.armed = Some(identity);
                tracing::debug!(dir = %self.dir.display(), "watching the credential directory");
                true
            }
            Err(e) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot watch the credential directory; relying on the backstop");
                false
            }
        }
    }

    fn watch(&self) -> notify::Result<RecommendedWatcher> {
        let changed = self.changed.clone();
        let dead = self.dead.clone();
        let dir = self.dir.clone();
        let mut watcher = notify::recommended_watcher(
            move |event: notify::Result<notify::Event>| {
                match &event {
                    Ok(event) => {
                        if !may_change_content(&event.kind) {
                            return;
                        }
                        if removes_or_moves(&event.kind) && event.paths.contains(&dir) {
                            dead.store(true, Ordering::Release);
                        }
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "file watcher error; re-reading the credential file");
                    }
                }
                // The receiver is gone only when the reload task ended.
                let _ = changed.send(());
            },
        )?;
        watcher.watch(&self.dir, RecursiveMode::NonRecursive)?;
        Ok(watcher)
    }
}

/// Reads (opening, reading, closing without writing) change nothing; our own re-reads
/// cause them, so reacting to them would re-read forever. Everything else may.
fn may_change_content(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

fn removes_or_moves(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_))
    )
}

#[cfg(unix)]
fn identity(dir: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()))
}

/// Without inode numbers, only presence is known: re-arming after a replacement then
/// waits for the directory to be missing at one poll.
#[cfg(not(unix))]
fn identity(dir: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(dir).ok().map(|_| (0, 0))
}

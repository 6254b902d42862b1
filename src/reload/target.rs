//! The directories a reloading credential watches: the visible path's own, and the one
//! it resolves to (`..<timestamp>/` in the CSI driver's layout, a symlink target's
//! directory elsewhere), followed after every re-read.

use std::path::{Path, PathBuf};

use crate::reload::lock;
use crate::reload::user_assigned::Reloader;
use crate::reload::watch::subscribe as watch_dir;

impl Reloader {
    /// Watch the directory the visible path resolves to (the real file's directory:
    /// `..<timestamp>/` in the AtomicWriter layout, a symlink target's directory
    /// elsewhere) as well as the visible directory, so that a write through the symlink is
    /// seen. Re-armed after every re-read: each AtomicWriter swap changes the target.
    pub(super) async fn follow_target(&self) {
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
}

/// Blocking: the directory the visible path resolves to, when it is not the visible
/// path's own directory (`Some(None)`: the same directory; `None`: unresolvable now).
pub(super) fn resolved_dir(path: &Path) -> Option<Option<PathBuf>> {
    let real = std::fs::canonicalize(path).ok()?;
    let real_dir = real.parent()?.to_path_buf();
    let visible_dir = std::fs::canonicalize(watched_dir(path)).ok()?;
    Some((real_dir != visible_dir).then_some(real_dir))
}

/// The directory to watch: the visible path's parent (the file itself may be a symlink
/// into `..data`, whose target changes).
pub(super) fn watched_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

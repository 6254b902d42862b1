//! Watching a credential file the way the Secrets Store CSI driver writes it, through one
//! `notify` watcher for the whole process.
//!
//! The driver writes with kubelet's AtomicWriter: `<name>` is a symlink to `..data/<name>`,
//! and a rotation renames a new `..data_tmp` symlink over `..data`. A watch on the file
//! itself follows the old inode and never sees a modify event; a watch on the directory
//! sees the new timestamped directory, `..data_tmp` and the rename, but no event that
//! names `<name>`. So a [`FileWatch`] watches the file's **directory** (and the directory
//! the path resolves to, where a write through the symlink lands), and **every** event
//! there (and every watcher error) means "maybe changed": the credential re-reads its
//! visible path and compares bytes.
//!
//! Every credential in the process shares one `notify` watcher (one inotify instance: the
//! per-user limit is 128 per node, shared by every container). Each directory is watched
//! once, whatever the number of credentials in it, and unwatched with the last of them; the
//! watcher ends with the last watch.
//!
//! A directory that is removed or moved away loses its watch. Its credentials' reload
//! tasks then call [`FileWatch::rearm`] about once a second until the directory is back.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind, RenameMode};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc::UnboundedSender;

/// What a subscriber is told about its directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DirSignal {
    /// Something in the directory may have changed: re-read after the debounce (a plain
    /// write may be partial).
    Changed,
    /// What the directory holds is complete: a symlink was created or renamed into place
    /// (the AtomicWriter's `..data` rename), or its lost watch was re-armed. Re-read at once.
    Complete,
}

/// The watched directories (absolute paths) and their subscribers. The watcher's event
/// handler takes only this lock, so it is never held while calling the watcher (whose
/// calls wait for its event thread, which may be in the handler).
static DIRS: Mutex<BTreeMap<PathBuf, Dir>> = Mutex::new(BTreeMap::new());

/// The process's watcher while a directory is watched. Taken before [`DIRS`], never after.
static WATCHER: Mutex<Option<RecommendedWatcher>> = Mutex::new(None);

#[derive(Default)]
struct Dir {
    subscribers: Vec<(u64, UnboundedSender<DirSignal>)>,
    /// Whether the watch is in place (false: the directory went away, or watching failed).
    armed: bool,
}

/// Lock, recovering from a poisoned lock: these locks guard plain values, valid after any
/// panic while held.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How many directories have a watch in place in this process (all of them through one
/// `notify` watcher, an inotify instance on Linux), each shared by every credential whose
/// file is in it and removed when the last of them is dropped. For a health page, or a
/// test that checks that dropping credentials stops their watches.
///
/// ```
/// assert_eq!(msi_dataplane::unstable::live_directory_watchers(), 0);
/// ```
pub fn live_directory_watchers() -> usize {
    lock(&DIRS).values().filter(|d| d.armed).count()
}

/// A credential file's watch: its directory's, and the one of the directory its path
/// resolves to when that is another. Signals go to the `tx` it was made with; dropping it
/// unsubscribes.
pub(crate) struct FileWatch {
    path: PathBuf,
    tx: UnboundedSender<DirSignal>,
    dir: Subscription,
    target: Option<Subscription>,
}

impl FileWatch {
    /// Watch `path`'s directory, and the one it resolves to. Blocking (`stat`,
    /// `inotify_add_watch`): call it off the async threads.
    pub(crate) fn new(path: &Path, tx: UnboundedSender<DirSignal>) -> Self {
        let dir = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let dir = Subscription::new(dir, tx.clone());
        let mut watch = FileWatch {
            path: path.to_path_buf(),
            tx,
            dir,
            target: None,
        };
        watch.follow();
        watch
    }

    /// Whether the directory's watch is in place.
    pub(crate) fn is_armed(&self) -> bool {
        lock(&DIRS).get(&self.dir.dir).is_some_and(|d| d.armed)
    }

    /// Watch the directory the path resolves to now (`..<timestamp>/` in the AtomicWriter
    /// layout, a symlink target's directory elsewhere), so that a write through the
    /// symlink is seen; each swap moves it. Kept as it is while the path does not resolve.
    /// Blocking.
    pub(crate) fn follow(&mut self) {
        let real = |p: &Path| std::fs::canonicalize(p).ok();
        let (Some(file), Some(visible)) = (real(&self.path), real(&self.dir.dir)) else {
            return;
        };
        let target = file.parent().filter(|d| *d != visible);
        if target != self.target.as_ref().map(|s| s.dir.as_path()) {
            self.target = target.map(|dir| {
                tracing::debug!(dir = %dir.display(), "watching the credential file's real directory");
                Subscription::new(dir.to_path_buf(), self.tx.clone())
            });
        }
    }

    /// Re-arm the directory's lost watch if the directory is back, and tell every
    /// credential in it ([`DirSignal::Complete`]). Blocking.
    pub(crate) fn rearm(&mut self) {
        let dir = &self.dir.dir;
        let mut watcher = lock(&WATCHER);
        if self.is_armed() || !dir.is_dir() {
            return;
        }
        // A directory moved away is still watched where it went.
        if let Some(w) = watcher.as_mut() {
            let _ = w.unwatch(dir);
        }
        if arm(&mut watcher, dir) {
            tracing::debug!(dir = %dir.display(), "watching the credential directory again");
            if let Some(d) = lock(&DIRS).get(dir) {
                d.subscribers.iter().for_each(|(_, tx)| {
                    let _ = tx.send(DirSignal::Complete);
                });
            }
        }
    }
}

/// One subscriber's place in a directory's watch.
struct Subscription {
    dir: PathBuf,
    id: u64,
}

impl Subscription {
    /// Subscribe `tx` to `dir`'s changes, watching it if no one does yet. Blocking.
    fn new(dir: PathBuf, tx: UnboundedSender<DirSignal>) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        // As the watcher names the paths of its events.
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        let mut watcher = lock(&WATCHER);
        let mut dirs = lock(&DIRS);
        let subscribers = &mut dirs.entry(dir.clone()).or_default().subscribers;
        subscribers.push((id, tx));
        let first = subscribers.len() == 1;
        drop(dirs);
        if first && !arm(&mut watcher, &dir) {
            tracing::warn!(dir = %dir.display(), "cannot watch the credential directory; relying on the backstop until it can be");
        }
        Subscription { dir, id }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut watcher = lock(&WATCHER);
        let mut dirs = lock(&DIRS);
        let Some(d) = dirs.get_mut(&self.dir) else {
            return;
        };
        d.subscribers.retain(|(id, _)| *id != self.id);
        if !d.subscribers.is_empty() {
            return;
        }
        dirs.remove(&self.dir);
        let last = dirs.is_empty();
        drop(dirs);
        if last {
            // Its thread and inotify instance end.
            *watcher = None;
        } else if let Some(w) = watcher.as_mut() {
            let _ = w.unwatch(&self.dir);
        }
    }
}

/// Watch `dir` with the process's watcher (started if need be), holding its lock; record
/// and return whether the watch is in place.
fn arm(watcher: &mut Option<RecommendedWatcher>, dir: &Path) -> bool {
    if watcher.is_none() {
        *watcher = notify::recommended_watcher(on_event)
            .map_err(|e| tracing::warn!(error = %e, "cannot start the file watcher"))
            .ok();
    }
    let armed = watcher.as_mut().is_some_and(|w| {
        w.watch(dir, RecursiveMode::NonRecursive)
            .map_err(
                |e| tracing::debug!(dir = %dir.display(), error = %e, "cannot watch the directory"),
            )
            .is_ok()
    });
    if let Some(d) = lock(&DIRS).get_mut(dir) {
        d.armed = armed;
    }
    armed
}

/// The watcher's event handler (on its thread): tell the subscribers of the directory an
/// event is in, or of every directory on a watcher error; note a watched directory that
/// went away.
fn on_event(event: notify::Result<notify::Event>) {
    let event = match event {
        Ok(event) if !may_change_content(&event.kind) => return,
        Ok(event) => Some(event),
        Err(e) => {
            tracing::debug!(error = %e, "file watcher error; re-reading the credential files");
            None
        }
    };
    let signal = match &event {
        Some(event) if is_symlink_swap(event) => DirSignal::Complete,
        _ => DirSignal::Changed,
    };
    for (dir, d) in lock(&DIRS).iter_mut() {
        if let Some(event) = &event
            && event.paths.contains(dir)
            && removes_or_moves(&event.kind)
        {
            d.armed = false;
        }
        let paths = event.as_ref().map(|e| e.paths.as_slice());
        if paths.is_none_or(|paths| paths.iter().any(|p| p == dir || p.parent() == Some(dir))) {
            d.subscribers.iter().for_each(|(_, tx)| {
                let _ = tx.send(signal);
            });
        }
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

/// A symlink created or renamed into place (the AtomicWriter's `..data_tmp` created and
/// renamed over `..data`): a swap whose new content is already complete. Runs on the
/// watcher's thread (an `lstat` per path), never on an async worker.
fn is_symlink_swap(event: &notify::Event) -> bool {
    let lands = matches!(
        event.kind,
        EventKind::Create(_)
            | EventKind::Modify(ModifyKind::Name(
                RenameMode::To | RenameMode::Both | RenameMode::Any
            ))
    );
    lands && event.paths.iter().any(|p| is_swap_target(p))
}

/// `..data`, or any path that is now a symlink, except `..data_tmp`: the AtomicWriter's
/// staging link, whose creation changes nothing a reader of the visible path sees (the
/// rename that follows is the swap; reacting to both would re-read twice).
fn is_swap_target(path: &Path) -> bool {
    match path.file_name() {
        Some(n) if n == "..data" => true,
        Some(n) if n == "..data_tmp" => false,
        _ => std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()),
    }
}

fn removes_or_moves(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_))
    )
}

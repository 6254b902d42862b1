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
//! tasks then call [`FileWatch::rearm`] about once a second until the directory is back,
//! and re-read when it is.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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
    /// The AtomicWriter's `..data` symlink was created or renamed into place: the new
    /// content is complete. Re-read at once.
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
    subscribers: Vec<UnboundedSender<DirSignal>>,
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
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
        let dir = Subscription::new(dir.unwrap_or(Path::new(".")).to_path_buf(), tx.clone());
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

    /// Re-arm the directory's lost watch if the directory is back. Blocking.
    pub(crate) fn rearm(&mut self) {
        let dir = &self.dir.dir;
        let mut watcher = lock(&WATCHER);
        if !self.is_armed() && dir.is_dir() {
            // A directory moved away is still watched where it went.
            if let Some(w) = watcher.as_mut() {
                let _ = w.unwatch(dir);
            }
            let _ = arm(&mut watcher, dir);
        }
    }
}

/// One subscriber's place in a directory's watch (its channel, once in each directory).
struct Subscription {
    dir: PathBuf,
    tx: UnboundedSender<DirSignal>,
}

impl Subscription {
    /// Subscribe `tx` to `dir`'s changes, watching it if no one does yet. Blocking.
    fn new(dir: PathBuf, tx: UnboundedSender<DirSignal>) -> Self {
        // As the watcher names the paths of its events.
        let dir = std::path::absolute(&dir).unwrap_or(dir);
        let mut watcher = lock(&WATCHER);
        let mut dirs = lock(&DIRS);
        let subscribers = &mut dirs.entry(dir.clone()).or_default().subscribers;
        subscribers.push(tx.clone());
        let first = subscribers.len() == 1;
        drop(dirs);
        if first && let Err(error) = arm(&mut watcher, &dir) {
            let dir = dir.display();
            tracing::warn!(%dir, %error, "cannot watch the credential directory; relying on the backstop until it can be");
        }
        Subscription { dir, tx }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        let mut watcher = lock(&WATCHER);
        let mut dirs = lock(&DIRS);
        let Some(d) = dirs.get_mut(&self.dir) else {
            return;
        };
        d.subscribers.retain(|tx| !tx.same_channel(&self.tx));
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
/// whether the watch is in place.
fn arm(watcher: &mut Option<RecommendedWatcher>, dir: &Path) -> notify::Result<()> {
    let watcher = match watcher {
        Some(w) => w,
        None => watcher.insert(notify::recommended_watcher(on_event)?),
    };
    let armed = watcher.watch(dir, RecursiveMode::NonRecursive);
    if let Some(d) = lock(&DIRS).get_mut(dir) {
        d.armed = armed.is_ok();
    }
    armed
}

/// The one access that may change content: closing a file written to.
const WRITTEN: AccessKind = AccessKind::Close(AccessMode::Write);

/// The watcher's event handler (on its thread): tell the subscribers of the directory an
/// event is in, or of every directory on a watcher error; note a watched directory that
/// went away.
fn on_event(event: notify::Result<notify::Event>) {
    let event = match event {
        // Reads (opening, reading, closing without writing) change nothing; our own
        // re-reads cause them, so reacting to them would re-read forever.
        Ok(event) if matches!(event.kind, EventKind::Access(a) if a != WRITTEN) => return,
        Ok(event) => Some(event),
        Err(e) => {
            tracing::debug!(error = %e, "file watcher error; re-reading the credential files");
            None
        }
    };
    let signal = match &event {
        Some(event) if is_atomic_swap(event) => DirSignal::Complete,
        _ => DirSignal::Changed,
    };
    for (dir, d) in lock(&DIRS).iter_mut() {
        // The directory itself removed or moved away: its watch is gone.
        if let Some(event) = &event
            && event.paths.contains(dir)
            && matches!(
                event.kind,
                EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_))
            )
        {
            d.armed = false;
        }
        let paths = event.as_ref().map(|e| e.paths.as_slice());
        if paths.is_none_or(|paths| paths.iter().any(|p| p == dir || p.parent() == Some(dir))) {
            d.subscribers.iter().for_each(|tx| {
                let _ = tx.send(signal);
            });
        }
    }
}

/// The AtomicWriter's `..data` symlink created or renamed into place (over `..data`,
/// from `..data_tmp`): a swap whose new content is already complete. Any other change
/// (a plain write may be partial) waits for the debounce.
fn is_atomic_swap(event: &notify::Event) -> bool {
    let lands = matches!(
        event.kind,
        EventKind::Create(_)
            | EventKind::Modify(ModifyKind::Name(
                RenameMode::To | RenameMode::Both | RenameMode::Any
            ))
    );
    let data = |p: &PathBuf| p.file_name().is_some_and(|n| n == "..data");
    lands && event.paths.iter().any(data)
}

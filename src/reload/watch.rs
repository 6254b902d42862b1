//! Watching credential files' directories with `notify`: one watch per directory for the
//! whole process.
//!
//! The Secrets Store CSI driver writes with kubelet's AtomicWriter: `<name>` is a symlink
//! to `..data/<name>`, and a rotation renames a new `..data_tmp` symlink over `..data`. A
//! watch on the file itself follows the old inode and never sees a modify event; a watch
//! on the directory sees the new timestamped directory, `..data_tmp` and the rename, but
//! no event that names `<name>`. So the directory is watched and **every** event (and
//! every watcher error) is taken as "maybe changed": each subscriber re-reads its visible
//! path and compares bytes.
//!
//! Ten identities mounted under `/mnt/certs` share one `notify` watcher (one inotify
//! instance: the per-user limit is 128 per node, shared by every container): a process-wide
//! registry keeps one [`DirEntry`] per directory, fans each event out to its
//! [`Subscription`]s, and drops the watch when the last subscription goes.
//!
//! If a directory itself is removed and comes back (a remount, a test harness), the watch
//! on the old inode is dead. One process-wide thread (never an async worker: it calls
//! `stat`) looks at every watched directory about once a second, re-arms a watch on the
//! new inode, and tells the subscribers ([`DirSignal::Armed`], [`DirSignal::Disarmed`]).
//! It runs only while some directory is watched.

use std::collections::BTreeMap;
#[cfg(unix)]
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use crate::reload::lock;
use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind, RenameMode};
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc::UnboundedSender;

/// How often the re-arm thread looks at each watched directory. Real time, not a
/// credential's [`Clock`]: the thread is shared by every credential in the
/// process (each may have its own clock) and polls the real file system. What it finds
/// reaches each credential's task as a [`DirSignal`], whose timers are on its clock.
const REARM_POLL: Duration = Duration::from_secs(1);

/// What a subscriber is told about its directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum DirSignal {
    /// Something in the directory may have changed: re-read (after the debounce: a plain
    /// write may be partial).
    Changed,
    /// A symlink was created or renamed into place in the directory (the AtomicWriter's
    /// `..data` rename): the new content is complete, re-read at once.
    Swapped,
    /// A new watch is in place (the directory came back): re-read, it may hold a new file.
    Armed,
    /// The directory is gone; nothing is watched until it comes back.
    Disarmed,
}

/// One subscriber's place in a directory's watch. Dropping it unsubscribes; the last one
/// dropped removes the watch.
pub(crate) struct Subscription {
    entry: Arc<DirEntry>,
    id: u64,
}

impl Subscription {
    /// Whether the directory's watch is in place.
    pub(crate) fn is_armed(&self) -> bool {
        self.entry.armed_flag.load(Ordering::Acquire)
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        lock(&self.entry.subscribers).retain(|(id, _)| *id != self.id);
    }
}

/// Subscribe `tx` to the changes of `dir`, watching it if no one does yet. Blocking
/// (the first subscriber's `stat` and `inotify_add_watch`): call it off the async threads.
pub(crate) fn subscribe(dir: PathBuf, tx: UnboundedSender<DirSignal>) -> Subscription {
    static NEXT_ID: AtomicU64 = AtomicU64::new(0);
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let mut registry = lock(&REGISTRY);
    let existing = registry.dirs.get(&dir).and_then(Weak::upgrade);
    let entry = match existing {
        Some(entry) => entry,
        None => {
            let entry = Arc::new(DirEntry::new(dir.clone()));
            entry.rearm_if_needed();
            registry.dirs.insert(dir, Arc::downgrade(&entry));
            if !registry.poller_running {
                registry.poller_running = start_poller();
            }
            entry
        }
    };
    lock(&entry.subscribers).push((id, tx));
    Subscription { entry, id }
}

/// How many directory watches are alive in this process: one `notify` watcher (an
/// inotify instance on Linux) per watched directory, shared by every credential whose
/// file is in it, and stopped when the last of them is dropped. For a health page, or a
/// test that checks that dropping credentials stops their watches.
///
/// ```
/// assert_eq!(msi_dataplane::unstable::live_directory_watchers(), 0);
/// ```
pub fn live_directory_watchers() -> usize {
    LIVE_WATCHERS.load(Ordering::Acquire)
}

static LIVE_WATCHERS: AtomicUsize = AtomicUsize::new(0);

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    dirs: BTreeMap::new(),
    poller_running: false,
});

struct Registry {
    dirs: BTreeMap<PathBuf, Weak<DirEntry>>,
    poller_running: bool,
}

type Subscribers = Arc<Mutex<Vec<(u64, UnboundedSender<DirSignal>)>>>;

/// The watch on one directory, shared by its subscribers.
struct DirEntry {
    dir: PathBuf,
    subscribers: Subscribers,
    arm: Mutex<Arm>,
    armed_flag: AtomicBool,
    /// Set by the watcher when the watched directory itself was removed or moved: the
    /// watch is dead even if a new directory has the same inode number (ext4 reuses them).
    dead: Arc<AtomicBool>,
}

#[derive(Default)]
struct Arm {
    watcher: Option<CountedWatcher>,
    /// (device, inode) of the directory the watch is on.
    armed: Option<(u64, u64)>,
}

impl DirEntry {
    fn new(dir: PathBuf) -> Self {
        DirEntry {
            dir,
            subscribers: Arc::default(),
            arm: Mutex::default(),
            armed_flag: AtomicBool::new(false),
            dead: Arc::new(AtomicBool::new(false)),
        }
    }

    /// (Re)arm when the directory exists and is not the one watched. Returns the signal
    /// for the subscribers when the state changed.
    fn rearm_if_needed(&self) -> Option<DirSignal> {
        let current = identity(&self.dir);
        let mut arm = lock(&self.arm);
        let dead = self.dead.swap(false, Ordering::AcqRel);
        if current == arm.armed && !dead {
            return None;
        }
        // The directory went away or was replaced: the old watch is dead.
        let was_armed = arm.armed.is_some();
        arm.watcher = None;
        arm.armed = None;
        let signal = match current.map(|identity| (identity, self.watch())) {
            Some((identity, Ok(watcher))) => {
                arm.watcher = Some(watcher);
                arm.armed = Some(identity);
                tracing::debug!(dir = %self.dir.display(), "watching the credential directory");
                Some(DirSignal::Armed)
            }
            Some((_, Err(e))) => {
                tracing::warn!(dir = %self.dir.display(), error = %e, "cannot watch the credential directory; relying on the backstop");
                was_armed.then_some(DirSignal::Disarmed)
            }
            None => was_armed.then_some(DirSignal::Disarmed),
        };
        self.armed_flag
            .store(arm.armed.is_some(), Ordering::Release);
        signal
    }

    fn watch(&self) -> notify::Result<CountedWatcher> {
        let subscribers = self.subscribers.clone();
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
                        if is_symlink_swap(event) {
                            broadcast(&subscribers, DirSignal::Swapped);
                            return;
                        }
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "file watcher error; re-reading the credential files");
                    }
                }
                broadcast(&subscribers, DirSignal::Changed);
            },
        )?;
        watcher.watch(&self.dir, RecursiveMode::NonRecursive)?;
        Ok(CountedWatcher::new(watcher))
    }
}

impl Drop for DirEntry {
    fn drop(&mut self) {
        let mut registry = lock(&REGISTRY);
        // A new entry for the same directory may already be registered: keep that one.
        if registry
            .dirs
            .get(&self.dir)
            .is_some_and(|w| w.strong_count() == 0)
        {
            registry.dirs.remove(&self.dir);
        }
    }
}

/// Tell every subscriber; a subscriber whose task ended is skipped (it unsubscribes when
/// its [`Subscription`] drops).
fn broadcast(subscribers: &Subscribers, signal: DirSignal) {
    for (_, tx) in lock(subscribers).iter() {
        let _ = tx.send(signal);
    }
}

/// A `notify` watcher, counted for `live_directory_watchers`.
struct CountedWatcher(#[allow(dead_code)] RecommendedWatcher);

impl CountedWatcher {
    fn new(watcher: RecommendedWatcher) -> Self {
        LIVE_WATCHERS.fetch_add(1, Ordering::AcqRel);
        CountedWatcher(watcher)
    }
}

impl Drop for CountedWatcher {
    fn drop(&mut self) {
        LIVE_WATCHERS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Start the re-arm thread; false if the thread cannot be started (then watches are
/// not re-armed, and the next subscription tries again).
fn start_poller() -> bool {
    let spawned = std::thread::Builder::new()
        .name("msi-dataplane-rearm".into())
        .spawn(poll_loop);
    if let Err(e) = &spawned {
        tracing::warn!(error = %e, "cannot start the directory re-arm thread");
    }
    spawned.is_ok()
}

/// Every [`REARM_POLL`], re-arm each watched directory that needs it; end when no
/// directory is watched.
fn poll_loop() {
    loop {
        std::thread::sleep(REARM_POLL);
        let entries: Vec<Arc<DirEntry>> = {
            let mut registry = lock(&REGISTRY);
            let entries: Vec<_> = registry.dirs.values().filter_map(Weak::upgrade).collect();
            if entries.is_empty() {
                registry.poller_running = false;
                return;
            }
            entries
        };
        for entry in entries {
            if let Some(signal) = entry.rearm_if_needed() {
                broadcast(&entry.subscribers, signal);
            }
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

/// Pure but for the `lstat`: `..data`, or any path that is now a symlink, except
/// `..data_tmp`: the AtomicWriter's staging link, whose creation changes nothing a reader
/// of the visible path sees (the rename that follows is the swap; reacting to both would
/// re-read twice).
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

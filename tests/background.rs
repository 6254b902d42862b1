//! The guide's background chapter (`src/guide/background.md`), checked against the
//! process: every thread the library starts while a reloading credential gets a token is
//! named there, a credential used from a multi-threaded runtime starts no
//! `msi-dataplane-io` thread, and the threads it says end with the credential do.
//!
//! One test in this binary, so that the threads it lists are its own. Linux only: it reads
//! thread names from `/proc/self/task/*/comm`, where the kernel keeps the first 15 bytes.
#![cfg(target_os = "linux")]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use msi_dataplane::{ReloadOptions, UserAssignedIdentityCredential};
use support::atomic_writer::TempDir;
use support::entra::EntraServer;
use support::fixtures::load_with_endpoint;
use support::harness::{ARM, options, register};

const CHAPTER: &str = include_str!("../src/guide/background.md");
const DEADLINE: Duration = Duration::from_secs(10);
/// The kernel's limit on a thread's name in `comm` (16 bytes with the terminating NUL).
const COMM_LEN: usize = 15;
/// This test's own runtime threads.
const TEST_THREADS: &str = "test-owned";

/// Thread id → name, for every thread of this process.
fn threads() -> BTreeMap<u64, String> {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task")
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let tid = entry.file_name().to_str()?.parse().ok()?;
            // A thread that ended between the listing and the read has no comm: skip it.
            let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
            Some((tid, comm.trim_end_matches('\n').to_owned()))
        })
        .collect()
}

/// The names as `comm` shows them.
fn truncated(name: &str) -> String {
    let mut end = name.len().min(COMM_LEN);
    while !name.is_char_boundary(end) {
        end -= 1;
    }
    name[..end].to_owned()
}

/// Every name the chapter writes in backticks, as `comm` would show it.
fn named_in_chapter() -> BTreeSet<String> {
    CHAPTER
        .split('`')
        .skip(1)
        .step_by(2)
        .map(truncated)
        .collect()
}

fn count(threads: &BTreeMap<u64, String>, name: &str) -> usize {
    let name = truncated(name);
    threads.values().filter(|n| **n == name).count()
}

fn wait_until(what: &str, pred: impl Fn(&BTreeMap<u64, String>) -> bool) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let now = threads();
        if pred(&now) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: threads now {now:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The threads started since `before` that the chapter does not name (this test's own
/// runtime threads aside).
fn undocumented(before: &BTreeSet<u64>, during: &BTreeMap<u64, String>) -> Vec<String> {
    let documented = named_in_chapter();
    during
        .iter()
        .filter(|(tid, _)| !before.contains(tid))
        .map(|(_, name)| name.clone())
        .filter(|name| *name != truncated(TEST_THREADS) && !documented.contains(name))
        .collect()
}

/// A reloading credential on `path`, built and used for one token on `rt`.
fn credential_on(
    rt: &tokio::runtime::Runtime,
    path: &std::path::Path,
    reload: ReloadOptions,
) -> UserAssignedIdentityCredential {
    let cred = rt.block_on(async {
        let cred = UserAssignedIdentityCredential::new(path, options(), reload)
            .await
            .expect("new");
        cred.get_token(&[ARM]).await.expect("get_token");
        cred
    });
    assert!(cred.status().watching, "{:#?}", cred.status());
    cred
}

/// Every thread started since `before` is named in the chapter (the testing kit's server
/// threads are in its last section), or is this test's own.
fn assert_documented(before: &BTreeSet<u64>, during: &BTreeMap<u64, String>) {
    let undocumented = undocumented(before, during);
    assert!(
        undocumented.is_empty(),
        "threads not in src/guide/background.md: {undocumented:?} (documented: {:?})",
        named_in_chapter()
    );
}

#[test]
fn every_thread_the_library_starts_is_in_the_guide_and_ends_as_it_says() {
    let before: BTreeSet<u64> = threads().into_keys().collect();
    let certs = TempDir::new("background");
    let path = certs.join("identity");

    // A multi-threaded runtime, as most callers have: the token requests run as its
    // tasks and the reload task on it; the library starts no thread but the watch's.
    let mt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name(TEST_THREADS)
        .build()
        .expect("runtime");
    let server = mt.block_on(EntraServer::start());
    register(&server, "rotation-1");
    let json = load_with_endpoint("rotation-1", &server.base_url())
        .to_json()
        .expect("to_json");
    std::fs::write(&path, json).expect("write");
    let cred = credential_on(&mt, &path, ReloadOptions::default());
    let during = threads();
    assert_documented(&before, &during);
    assert_eq!(
        count(&during, "msi-dataplane-io"),
        0,
        "a multi-threaded runtime's requests started the I/O thread: {during:?}"
    );
    // The watcher's thread: notify's.
    assert_eq!(count(&during, "notify-rs inotify loop"), 1, "{during:?}");
    drop(cred);
    wait_until("the watcher's thread to end", |now| {
        count(now, "notify-rs inotify loop") == 0
    });
    drop(mt);

    // A current-thread runtime, as a caller without a multi-threaded one has: its
    // requests go to the I/O thread, and the reload runs on a thread of its own.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name(TEST_THREADS)
        .build()
        .expect("runtime");
    let cred = credential_on(
        &rt,
        &path,
        ReloadOptions::default().with_dedicated_thread(true),
    );
    let during = threads();
    assert_documented(&before, &during);
    // The threads this setup must start, each under the name the chapter gives it.
    assert!(count(&during, "msi-dataplane-io") >= 1, "{during:?}");
    assert_eq!(count(&during, "msi-dataplane-reload"), 1, "{during:?}");
    assert_eq!(count(&during, "notify-rs inotify loop"), 1, "{during:?}");
    assert!(
        count(&during, "msi-dataplane-test-server") >= 1,
        "{during:?}"
    );

    // The chapter: the reload thread ends with its task, the watcher's thread with the
    // last watched directory; the I/O thread lives on.
    drop(cred);
    wait_until("the reload and watcher threads to end", |now| {
        count(now, "msi-dataplane-reload") == 0 && count(now, "notify-rs inotify loop") == 0
    });
    assert!(
        count(&threads(), "msi-dataplane-io") >= 1,
        "the I/O thread ended: {:?}",
        threads()
    );
    drop(server);
    drop(rt);
}

//! Ten identities in one directory (`/mnt/certs/<name>` for each) share one directory
//! watch, fanned out to every credential and gone with the last credential; every
//! directory in the process is watched through one `notify` watcher, one inotify instance
//! (the per-user limit is 128 per node, shared by every container), gone with the last
//! watch.
//!
//! One test in this binary, so that the process-wide counts it asserts are its own.

mod support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use msi_dataplane::unstable::live_directory_watchers;
use msi_dataplane::{
    ClientCertificateCredentialOptions, ReloadOptions, ReloadOutcome,
    UserAssignedIdentityCredential,
};
use support::atomic_writer::{TempDir, write_temp_then_rename};
use support::fixtures::load_with_endpoint;

const DEADLINE: Duration = Duration::from_secs(10);

fn fixture_json(name: &str) -> Vec<u8> {
    load_with_endpoint(name, "https://127.0.0.1:9/")
        .to_json()
        .expect("to_json")
        .into_bytes()
}

/// inotify instances open in this process (Linux: `/proc/self/fd` links to
/// `anon_inode:inotify`).
#[cfg(target_os = "linux")]
fn inotify_instances() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.as_os_str() == "anon_inode:inotify")
        .count()
}

#[cfg(not(target_os = "linux"))]
fn inotify_instances() -> usize {
    live_directory_watchers()
}

async fn wait_for(what: &str, pred: impl Fn() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !pred() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_credentials_in_one_directory_share_one_watch() {
    let before_instances = inotify_instances();
    assert_eq!(live_directory_watchers(), 0);

    let certs = TempDir::new("shared-watch");
    let paths: Vec<PathBuf> = (0..10)
        .map(|i| certs.join(&format!("identity-{i}")))
        .collect();
    let mut creds = Vec::new();
    for path in &paths {
        std::fs::write(path, fixture_json("rotation-1")).expect("write");
        let options = ClientCertificateCredentialOptions::default();
        let reload = ReloadOptions::default().with_debounce(Duration::from_millis(50));
        creds.push(
            UserAssignedIdentityCredential::new(path, options, reload)
                .await
                .expect("new"),
        );
    }
    assert_eq!(live_directory_watchers(), 1, "one watch for one directory");
    assert_eq!(
        inotify_instances(),
        before_instances + 1,
        "inotify instances"
    );
    assert!(creds.iter().all(|c| c.status().watching));

    // Another directory is another watch, through the same inotify instance.
    let other = TempDir::new("shared-watch-other");
    let other_path = other.join("identity");
    std::fs::write(&other_path, fixture_json("rotation-1")).expect("write");
    let lone = UserAssignedIdentityCredential::new(
        &other_path,
        ClientCertificateCredentialOptions::default(),
        ReloadOptions::default(),
    )
    .await
    .expect("new");
    assert_eq!(live_directory_watchers(), 2);
    assert_eq!(inotify_instances(), before_instances + 1);
    drop(lone);
    wait_for("the other directory's watch to go", || {
        live_directory_watchers() == 1 && inotify_instances() == before_instances + 1
    })
    .await;

    // Every credential hears its own rotation through the shared watch.
    let rotation_2 = load_with_endpoint("rotation-2", "https://127.0.0.1:9/")
        .not_before()
        .expect("not_before")
        .expect("set");
    for path in &paths {
        write_temp_then_rename(path, &fixture_json("rotation-2"));
    }
    for (cred, path) in creds.iter().zip(&paths) {
        wait_for(&format!("{} to rotate", path.display()), || {
            cred.status().reloads == 1
        })
        .await;
        // One swap, to rotation-2. (Not `last_outcome == Swapped`: a sibling's later
        // write in the same directory re-reads this file too, which ends `Unchanged`.)
        let s = cred.status();
        assert_eq!(s.not_before, rotation_2, "{s:#?}");
        assert!(
            matches!(
                s.last_outcome,
                Some(ReloadOutcome::Swapped | ReloadOutcome::Unchanged)
            ),
            "{s:#?}"
        );
    }

    // The watch stays while any credential does, and goes with the last one.
    let last = creds.pop().expect("ten");
    drop(creds);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(live_directory_watchers(), 1);
    assert!(last.status().watching, "{:#?}", last.status());
    write_temp_then_rename(last.path(), &fixture_json("rotation-3"));
    wait_for("the last credential to rotate again", || {
        last.status().reloads == 2
    })
    .await;
    drop(last);
    wait_for("the watch to go with the last credential", || {
        live_directory_watchers() == 0 && inotify_instances() == before_instances
    })
    .await;
}

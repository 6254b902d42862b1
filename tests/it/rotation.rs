//! `UserAssignedIdentityCredential`: the credential that follows its file as it is rotated.
//!
//! Every test uses real files (and, for the CSI driver's layout, real symlinks) and the
//! verifying Entra-compatible server, so "picked up" means "the next token was signed by
//! the new certificate and accepted". Waits are on the credential's own status (polled
//! or subscribed, with a deadline), never a fixed sleep followed by an assertion; the
//! only fixed waits are the ones that give a change a chance to be (wrongly) noticed.

use crate::support;

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use msi_dataplane::{
    ErrorKind, ManualClock, ReloadOptions, ReloadOutcome, ReloadStatus,
    UserAssignedIdentityCredential,
};
use support::atomic_writer::{
    AtomicDir, InPlaceWrite, TempDir, delete_then_recreate, write_in_place, write_temp_then_rename,
};
use support::entra::EntraServer;
use support::fixtures::{load, load_with_endpoint};
use support::harness::{ARM, https_env, leaf_sha256_hex, options, register};
use time::OffsetDateTime;

/// How long a change may take to be noticed before a test fails.
const DEADLINE: Duration = Duration::from_secs(20);
/// The file name used in every directory (as the CSI driver names the object).
const NAME: &str = "uami-credential";

// ---------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------

/// A test server with all three rotation leaves registered.
async fn server() -> EntraServer {
    let server = EntraServer::start().await;
    for name in ["rotation-1", "rotation-2", "rotation-3"] {
        register(&server, name);
    }
    server
}

/// The fixture's JSON, pointed at the test server.
fn bytes(server: &EntraServer, name: &str) -> Vec<u8> {
    load_with_endpoint(name, &server.base_url())
        .to_json()
        .expect("to_json")
        .into_bytes()
}

/// Reload options reaching the test server, with a short debounce.
fn reload_options() -> ReloadOptions {
    ReloadOptions::default().with_debounce(Duration::from_millis(50))
}

/// The fixture file's `not_before`.
fn nb(name: &str) -> OffsetDateTime {
    load(name)
        .not_before()
        .expect("fixture not_before")
        .expect("fixture has not_before")
}

/// Lower-case hex SHA-256 of the fixture's leaf, as `ReloadStatus::thumbprint_sha256`.
fn thumb(name: &str) -> String {
    leaf_sha256_hex(name)
}

/// Poll `status()` until `pred` holds, for up to `within`; panic with the last status.
async fn wait_status_within(
    cred: &UserAssignedIdentityCredential,
    what: &str,
    within: Duration,
    pred: impl Fn(&ReloadStatus) -> bool,
) -> ReloadStatus {
    let deadline = Instant::now() + within;
    loop {
        let s = cred.status();
        if pred(&s) {
            return s;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {within:?} waiting for {what}; last status: {s:#?}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

async fn wait_status(
    cred: &UserAssignedIdentityCredential,
    what: &str,
    pred: impl Fn(&ReloadStatus) -> bool,
) -> ReloadStatus {
    wait_status_within(cred, what, DEADLINE, pred).await
}

/// Wait until the active credential is fixture `name` (by its file's `not_before`).
async fn wait_active(cred: &UserAssignedIdentityCredential, name: &str) -> ReloadStatus {
    let want = nb(name);
    wait_status(cred, &format!("{name} to become active"), |s| {
        s.not_before == want
    })
    .await
}

/// The last re-read swapped, or (later) found that swapped-in credential unchanged: after
/// a swap, events the writer's clean-up causes (the old `..<timestamp>` directory
/// removed, a temporary file's rename seen late) can trigger one more, debounced re-read
/// before the test looks. Callers assert the exact swap count from `reloads`.
fn assert_swap_outcome(s: &ReloadStatus) {
    assert!(
        matches!(
            s.last_outcome,
            Some(ReloadOutcome::Swapped | ReloadOutcome::Unchanged)
        ),
        "{s:#?}"
    );
}

/// The active credential is fixture `name`, by every view of it.
fn assert_active(cred: &UserAssignedIdentityCredential, name: &str) {
    let s = cred.status();
    assert_eq!(s.not_before, nb(name), "not_before: {s:#?}");
    assert_eq!(s.thumbprint_sha256, thumb(name), "thumbprint: {s:#?}");
    assert_eq!(
        cred.current().certificate().thumbprint_sha256_hex(),
        thumb(name),
        "current()"
    );
}

/// Get a token and check which leaf signed the assertion that obtained it.
async fn token_signed_by(
    server: &EntraServer,
    cred: &UserAssignedIdentityCredential,
    name: &str,
) -> String {
    let token = cred
        .get_token(&[ARM])
        .await
        .unwrap_or_else(|e| panic!("get_token while {name} is active: {e}"));
    let issued = server
        .issued(token.token())
        .unwrap_or_else(|| panic!("token not issued by the test server (expected {name})"));
    assert_eq!(
        issued.cert_sha256_hex,
        leaf_sha256_hex(name),
        "token was obtained with the wrong certificate (expected {name})"
    );
    token.token().to_owned()
}

/// A plain directory (no symlinks) holding `NAME` with fixture `name`.
fn plain_dir(server: &EntraServer, name: &str) -> (TempDir, std::path::PathBuf) {
    let dir = TempDir::new("plain");
    let path = dir.join(NAME);
    std::fs::write(&path, bytes(server, name)).expect("write initial file");
    (dir, path)
}

async fn new_cred(path: &Path) -> UserAssignedIdentityCredential {
    UserAssignedIdentityCredential::new(path, options(), reload_options())
        .await
        .unwrap_or_else(|e| panic!("new({}): {e}", path.display()))
}

/// Start on rotation-1 at `path`, let `change` put rotation-2 there, and check that it is
/// picked up and used.
async fn plain_write_style_is_picked_up(change: impl FnOnce(&Path, &[u8]) + Send + 'static) {
    let server = server().await;
    let (_dir, path) = plain_dir(&server, "rotation-1");
    let cred = new_cred(&path).await;
    assert_active(&cred, "rotation-1");
    let old = token_signed_by(&server, &cred, "rotation-1").await;

    let b2 = bytes(&server, "rotation-2");
    let p = path.clone();
    // Off the runtime's workers: some styles block (delete-then-recreate waits).
    tokio::task::spawn_blocking(move || change(&p, &b2))
        .await
        .expect("writer");

    let s = wait_active(&cred, "rotation-2").await;
    assert_eq!(s.reloads, 1, "{s:#?}");
    assert_swap_outcome(&s);
    assert_active(&cred, "rotation-2");
    let new = token_signed_by(&server, &cred, "rotation-2").await;
    assert_ne!(
        new, old,
        "the old certificate's cached token is still served"
    );
}

// ---------------------------------------------------------------------------------------
// tests
// ---------------------------------------------------------------------------------------

/// The CSI driver (kubelet's AtomicWriter) never writes the file at the configured path:
/// it swaps the `..data` symlink and deletes the old timestamped directory. The Go
/// reference (`pkg/dataplane/reloadCredentials.go`) watches the file itself and reloads
/// only on fsnotify `Write` events, so it misses every one of these rotations (the first
/// one removes the watched inode, after which it has no watch at all) and only its 6 h
/// ticker ever picks up a new certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_second_and_third_csi_rotations_are_each_picked_up() {
    let server = server().await;
    let mut dir = AtomicDir::new(NAME, &bytes(&server, "rotation-1"));
    let cred = new_cred(&dir.visible_path()).await;

    let s = cred.status();
    assert_eq!(s.path, dir.visible_path());
    assert_eq!(s.reloads, 0);
    assert!(s.watching, "{s:#?}");
    assert!(s.last_error.is_none(), "{s:#?}");
    assert_active(&cred, "rotation-1");
    let mut previous = token_signed_by(&server, &cred, "rotation-1").await;

    let mut rx = cred.subscribe();
    for (i, name) in ["rotation-2", "rotation-3"].into_iter().enumerate() {
        let old_ts = dir.current_ts_dir().to_owned();
        dir.rotate(&bytes(&server, name));
        assert!(!dir.dir().join(&old_ts).exists(), "old ts dir removed");

        let want = nb(name);
        let s = tokio::time::timeout(DEADLINE, rx.wait_for(|s| s.not_before == want))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "rotation to {name} not published on subscribe() within {DEADLINE:?}; \
                     status: {:#?}",
                    cred.status()
                )
            })
            .expect("status channel closed")
            .clone();
        assert_eq!(s.reloads, i as u64 + 1, "{s:#?}");
        assert_swap_outcome(&s);
        assert!(s.last_error.is_none(), "{s:#?}");
        assert_eq!(s.thumbprint_sha256, thumb(name), "{s:#?}");
        assert!(s.last_check.is_some(), "{s:#?}");
        assert_active(&cred, name);
        assert_eq!(cred.status().reloads, i as u64 + 1);

        let token = token_signed_by(&server, &cred, name).await;
        assert_ne!(
            token, previous,
            "{name}: the previous certificate's token is still served"
        );
        previous = token;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_place_rewrite_is_picked_up() {
    plain_write_style_is_picked_up(write_in_place).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rename_over_is_picked_up() {
    plain_write_style_is_picked_up(write_temp_then_rename).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_then_recreate_is_picked_up() {
    plain_write_style_is_picked_up(|p, b| delete_then_recreate(p, b, Duration::from_millis(300)))
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn older_or_equal_not_before_is_not_swapped() {
    let server = server().await;
    let (_dir, path) = plain_dir(&server, "rotation-2");
    let cred = new_cred(&path).await;
    assert_active(&cred, "rotation-2");

    // An older file.
    let before = cred.status().last_check;
    write_temp_then_rename(&path, &bytes(&server, "rotation-1"));
    wait_status(&cred, "the watcher to find the older file not newer", |s| {
        s.last_check != before && s.last_outcome == Some(ReloadOutcome::NotNewer)
    })
    .await;
    assert_eq!(cred.check_now().await, ReloadOutcome::NotNewer);
    assert_eq!(cred.status().reloads, 0);
    assert_active(&cred, "rotation-2");

    // A different (valid) certificate whose file claims the same not_before.
    let mut same = load_with_endpoint("rotation-3", &server.base_url());
    same.not_before = load("rotation-2").not_before;
    let before = cred.status().last_check;
    write_temp_then_rename(&path, same.to_json().expect("to_json").as_bytes());
    wait_status(&cred, "the watcher to find the equal file not newer", |s| {
        s.last_check != before && s.last_outcome == Some(ReloadOutcome::NotNewer)
    })
    .await;
    assert_eq!(cred.check_now().await, ReloadOutcome::NotNewer);
    let s = cred.status();
    assert_eq!(s.reloads, 0, "{s:#?}");
    assert!(s.last_error.is_none(), "NotNewer is not an error: {s:#?}");
    assert_active(&cred, "rotation-2");
    token_signed_by(&server, &cred, "rotation-2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_written_file_then_complete_ends_with_the_complete_one_and_no_failed_get_token() {
    let server = server().await;
    let (_dir, path) = plain_dir(&server, "rotation-1");
    let cred = Arc::new(new_cred(&path).await);
    token_signed_by(&server, &cred, "rotation-1").await;

    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let errors = Arc::new(Mutex::new(Vec::<String>::new()));
    let last_token = Arc::new(Mutex::new(String::new()));
    let caller = tokio::spawn({
        let (cred, stop, calls, errors, last_token) = (
            cred.clone(),
            stop.clone(),
            calls.clone(),
            errors.clone(),
            last_token.clone(),
        );
        async move {
            while !stop.load(Ordering::Relaxed) {
                match cred.get_token(&[ARM]).await {
                    Ok(t) => *last_token.lock().unwrap() = t.token().to_owned(),
                    Err(e) => errors.lock().unwrap().push(e.to_string()),
                }
                calls.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });

    let full = bytes(&server, "rotation-2");
    let half = full.len() / 2;
    let writer = InPlaceWrite::begin(&path, &full[..half]);
    let s = wait_status(&cred, "the half-written file to be seen as invalid", |s| {
        s.last_outcome == Some(ReloadOutcome::Invalid)
    })
    .await;
    assert!(s.last_error.is_some(), "{s:#?}");
    assert_eq!(s.reloads, 0, "{s:#?}");
    assert_active(&cred, "rotation-1");

    writer.finish(&full[half..]);
    let s = wait_active(&cred, "rotation-2").await;
    assert_eq!(s.reloads, 1, "{s:#?}");
    assert_swap_outcome(&s);

    // Let the caller run a few more times on the new credential.
    let seen = calls.load(Ordering::Relaxed);
    let deadline = Instant::now() + DEADLINE;
    while calls.load(Ordering::Relaxed) < seen + 5 {
        assert!(Instant::now() < deadline, "the get_token loop stalled");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    caller.await.expect("caller task");

    let errors = errors.lock().unwrap().clone();
    assert!(
        errors.is_empty(),
        "{} of {} get_token calls failed: {errors:?}",
        errors.len(),
        calls.load(Ordering::Relaxed)
    );
    assert_active(&cred, "rotation-2");
    let last = last_token.lock().unwrap().clone();
    let issued = server
        .issued(&last)
        .expect("last token issued by the server");
    assert_eq!(issued.cert_sha256_hex, leaf_sha256_hex("rotation-2"));
}

/// Apply `change` (a bad file written atomically, so the watcher sees all of it, or a
/// removal) and wait for the check that finds it invalid for the expected reason.
async fn expect_invalid(
    cred: &UserAssignedIdentityCredential,
    what: &str,
    change: impl FnOnce(),
    is_reason: impl Fn(&msi_dataplane::Error) -> bool,
) -> msi_dataplane::Error {
    let before = cred.status().last_check;
    change();
    let s = wait_status(cred, what, |s| {
        s.last_check != before
            && s.last_outcome == Some(ReloadOutcome::Invalid)
            && s.last_error.as_ref().is_some_and(&is_reason)
    })
    .await;
    assert_eq!(s.reloads, 0, "{what}: {s:#?}");
    assert_active(cred, "rotation-1");
    let error = s.last_error.expect("checked above");
    assert_eq!(
        error.path(),
        Some(s.path.as_path()),
        "{what}: names the file"
    );
    error
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_files_keep_the_last_good_credential() {
    let server = server().await;
    let (_dir, path) = plain_dir(&server, "rotation-1");
    let cred = new_cred(&path).await;
    let token = token_signed_by(&server, &cred, "rotation-1").await;
    let b2 = bytes(&server, "rotation-2");

    // Truncated JSON.
    expect_invalid(
        &cred,
        "truncated JSON",
        || write_temp_then_rename(&path, &b2[..b2.len() / 2]),
        |e| matches!(e.kind(), ErrorKind::File { code: "json", message, .. } if message.contains("EOF")),
    )
    .await;

    // Malformed JSON (the error is on line 3).
    expect_invalid(
        &cred,
        "malformed JSON",
        || {
            write_temp_then_rename(
                &path,
                b"{\n  \"client_id\": \"x\",\n  \"tenant_id\": ,\n}\n",
            )
        },
        |e| matches!(e.kind(), ErrorKind::File { code: "json", message, .. } if message.starts_with("invalid JSON at line 3,")),
    )
    .await;

    // A newer file whose key is EC.
    let mut ec = load_with_endpoint("ec-key", &server.base_url());
    ec.not_before = Some("2027-01-01T00:00:00Z".to_owned());
    let ec = ec.to_json().expect("to_json");
    expect_invalid(
        &cred,
        "EC key",
        || write_temp_then_rename(&path, ec.as_bytes()),
        |e| {
            matches!(
                e.kind(),
                ErrorKind::File {
                    code: "unsupported_key_type",
                    ..
                }
            )
        },
    )
    .await;

    // The file is gone.
    expect_invalid(
        &cred,
        "missing file",
        || std::fs::remove_file(&path).expect("remove"),
        |e| {
            matches!(e.kind(), ErrorKind::Io { source } if source.kind() == std::io::ErrorKind::NotFound)
        },
    )
    .await;

    // An unreadable (but otherwise newer and good) file: created with mode 000 before it
    // is renamed into place, so there is never a readable version to pick up. As root
    // (CAP_DAC_OVERRIDE), mode 000 is still readable, and this sub-case cannot be made.
    {
        use std::os::unix::fs::PermissionsExt as _;
        let tmp = path.with_file_name(".unreadable.tmp");
        std::fs::write(&tmp, &b2).expect("write");
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o000)).expect("chmod");
        if std::fs::read(&tmp).is_ok() {
            eprintln!("running with CAP_DAC_OVERRIDE (root?): skipping the unreadable-file case");
            std::fs::remove_file(&tmp).expect("remove");
        } else {
            expect_invalid(
                &cred,
                "unreadable file",
                || std::fs::rename(&tmp, &path).expect("rename"),
                |e| {
                    matches!(e.kind(), ErrorKind::Io { source } if source.kind() == std::io::ErrorKind::PermissionDenied)
                },
            )
            .await;
            std::fs::remove_file(&path).expect("remove");
        }
    }

    // Through all of it, the last good credential kept serving.
    assert_eq!(
        cred.get_token(&[ARM]).await.expect("cached token").token(),
        token
    );

    // A good, newer file is picked up.
    write_temp_then_rename(&path, &b2);
    let s = wait_active(&cred, "rotation-2").await;
    assert_swap_outcome(&s);
    assert_eq!(s.reloads, 1, "{s:#?}");
    assert_active(&cred, "rotation-2");
    token_signed_by(&server, &cred, "rotation-2").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backstop_picks_up_a_change_the_watcher_cannot_see() {
    let server = server().await;
    let (_dir, path) = plain_dir(&server, "rotation-1");
    // Near the real time: the test server checks assertion times against the real clock.
    let clock = Arc::new(ManualClock::new(OffsetDateTime::now_utc()));
    let interval = Duration::from_secs(3600);
    let cred = UserAssignedIdentityCredential::new(
        &path,
        options().with_environment(https_env().with_clock(clock.clone())),
        ReloadOptions::default()
            .with_watch(false)
            .with_backstop_interval(interval),
    )
    .await
    .expect("new");
    assert!(!cred.status().watching, "{:#?}", cred.status());
    token_signed_by(&server, &cred, "rotation-1").await;

    write_temp_then_rename(&path, &bytes(&server, "rotation-2"));
    // Give a (wrong) watcher, or a backstop running on the real clock, time to notice.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s = cred.status();
    assert_eq!(
        s.reloads, 0,
        "picked up without a watcher or backstop: {s:#?}"
    );
    assert_active(&cred, "rotation-1");

    clock.advance(interval + Duration::from_secs(1));
    let want = nb("rotation-2");
    let s = wait_status(&cred, "the backstop to pick up rotation-2", |s| {
        s.not_before == want
    })
    .await;
    assert_eq!(s.reloads, 1, "{s:#?}");
    assert_swap_outcome(&s);
    assert_active(&cred, "rotation-2");
    // No get_token here: the manual clock is an hour ahead of the server's.
}

/// A debounce the manual clock below has to be moved through: in real time it never ends.
const HELD_DEBOUNCE: Duration = Duration::from_secs(60);

/// A watching credential on a plain file whose reloads wait [`HELD_DEBOUNCE`] on a manual
/// clock (starting now) after each write, with the backstop out of the way.
async fn held_in_debounce() -> (
    EntraServer,
    TempDir,
    std::path::PathBuf,
    Arc<ManualClock>,
    UserAssignedIdentityCredential,
) {
    let server = server().await;
    let (dir, path) = plain_dir(&server, "rotation-1");
    let clock = Arc::new(ManualClock::starting_now());
    let options = options();
    let environment = options.environment().clone().with_clock(clock.clone());
    let options = options.with_environment(environment);
    let cred = UserAssignedIdentityCredential::new(
        &path,
        options,
        ReloadOptions::default()
            .with_debounce(HELD_DEBOUNCE)
            .with_backstop_interval(Duration::from_secs(24 * 3600)),
    )
    .await
    .expect("new");
    assert!(cred.status().watching, "{:#?}", cred.status());
    (server, dir, path, clock, cred)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debounce_runs_on_the_injected_clock() {
    let (server, _dir, path, clock, cred) = held_in_debounce().await;
    token_signed_by(&server, &cred, "rotation-1").await;

    // The watcher sees the write, and the debounce starts; in real time it never ends.
    write_temp_then_rename(&path, &bytes(&server, "rotation-2"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    let s = cred.status();
    assert_eq!(s.reloads, 0, "re-read before the debounce elapsed: {s:#?}");
    assert!(s.last_check.is_none(), "{s:#?}");
    assert_active(&cred, "rotation-1");

    // Not yet: one second short of the debounce.
    clock.advance(HELD_DEBOUNCE - Duration::from_secs(1));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(cred.status().reloads, 0, "{:#?}", cred.status());

    clock.advance(Duration::from_secs(1));
    let s = wait_active(&cred, "rotation-2").await;
    assert_eq!(s.reloads, 1, "{s:#?}");
    assert_swap_outcome(&s);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_removed_and_restored_is_rearmed() {
    let server = server().await;
    let parent = TempDir::new("rearm");
    let dir = parent.join("mount");
    std::fs::create_dir(&dir).expect("mkdir");
    let path = dir.join(NAME);
    std::fs::write(&path, bytes(&server, "rotation-1")).expect("write");
    let cred = new_cred(&path).await;
    token_signed_by(&server, &cred, "rotation-1").await;

    std::fs::remove_dir_all(&dir).expect("remove dir");
    // Let the watcher notice the directory is gone before it comes back (not asserted:
    // what it reports meanwhile is its business).
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::create_dir(&dir).expect("recreate dir");
    write_temp_then_rename(&path, &bytes(&server, "rotation-2"));

    // The watcher re-arms by polling for the directory about once a second.
    let s = wait_status_within(&cred, "rotation-2 after re-arm", 2 * DEADLINE, |s| {
        s.not_before == nb("rotation-2")
    })
    .await;
    assert_eq!(s.reloads, 1, "{s:#?}");
    token_signed_by(&server, &cred, "rotation-2").await;

    // The watch is live again, not a one-off: a later change is seen too.
    wait_status(&cred, "the watch to be re-armed", |s| s.watching).await;
    write_temp_then_rename(&path, &bytes(&server, "rotation-3"));
    let s = wait_active(&cred, "rotation-3").await;
    assert_eq!(s.reloads, 2, "{s:#?}");
    token_signed_by(&server, &cred, "rotation-3").await;
}

#[tokio::test]
async fn first_load_failure_is_a_clear_error() {
    let dir = TempDir::new("first-load");

    let missing = dir.join("does-not-exist");
    let err = UserAssignedIdentityCredential::new(&missing, options(), reload_options())
        .await
        .expect_err("a missing file is an error");
    assert_eq!(err.path(), Some(missing.as_path()), "{err:?}");
    assert!(
        matches!(err.kind(), ErrorKind::Io { source } if source.kind() == std::io::ErrorKind::NotFound),
        "{err:?}"
    );
    assert!(err.to_string().contains("does-not-exist"), "{err}");

    let bad = dir.join("bad.json");
    std::fs::write(&bad, b"{\"client_id\": ").expect("write");
    let err = UserAssignedIdentityCredential::new(&bad, options(), reload_options())
        .await
        .expect_err("bad JSON is an error");
    assert_eq!(err.path(), Some(bad.as_path()), "{err:?}");
    assert!(
        matches!(err.kind(), ErrorKind::File { code: "json", .. }),
        "{err:?}"
    );
}

/// Reading the file must not count as a change to it: inotify reports the credential's
/// own open/read/close of the file (notify's `Access` events) on the watched directory,
/// and re-reading on those re-reads forever, once per debounce period.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_credential_does_not_keep_rereading_its_file() {
    let server = server().await;
    let (_dir, path) = plain_dir(&server, "rotation-1");
    let cred = new_cred(&path).await;
    let mut rx = cred.subscribe();
    rx.borrow_and_update();
    // Nothing touches the file for this long (20 debounce periods).
    let window = Duration::from_secs(1);
    let end = tokio::time::Instant::now() + window;
    let mut changes = 0;
    while let Ok(Ok(())) = tokio::time::timeout_at(end, rx.changed()).await {
        changes += 1;
        rx.borrow_and_update();
    }
    // One check right after start (events from the first load) is tolerated.
    let s = cred.status();
    assert!(
        changes <= 1,
        "{changes} status changes in {window:?} with no file change; last status: {s:#?}"
    );
    assert_eq!(s.reloads, 0);
    assert!(s.last_error.is_none(), "{s:#?}");
}

/// Poll the runtime's live task count until it is `want`.
fn wait_tasks(rt: &tokio::runtime::Runtime, want: usize, what: &str) {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let n = rt.metrics().num_alive_tasks();
        if n == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {n} tasks still alive after {DEADLINE:?}, expected {want}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn dropping_or_cancelling_stops_every_task() {
    // The server lives on its own runtime so that its tasks are not counted.
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("server runtime");
    let server = server_rt.block_on(server());
    let (_dir, path) = plain_dir(&server, "rotation-1");

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let baseline = rt.metrics().num_alive_tasks();

    // Dropped.
    let cred = rt.block_on(new_cred(&path));
    let running = rt.metrics().num_alive_tasks();
    assert!(
        running > baseline,
        "no background task is running ({running} alive, baseline {baseline})"
    );
    drop(cred);
    wait_tasks(&rt, baseline, "after drop");

    // Cancelled, and still serving.
    let cred = rt.block_on(new_cred(&path));
    assert!(rt.metrics().num_alive_tasks() > baseline);
    cred.cancel();
    wait_tasks(&rt, baseline, "after cancel");
    assert!(!cred.status().watching, "{:#?}", cred.status());
    rt.block_on(async {
        let token = cred
            .get_token(&[ARM])
            .await
            .expect("get_token after cancel");
        assert_eq!(
            server
                .issued(token.token())
                .expect("issued")
                .cert_sha256_hex,
            leaf_sha256_hex("rotation-1")
        );
    });
    // A change is no longer followed (check_now still works on request).
    write_temp_then_rename(&path, &bytes(&server, "rotation-2"));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(cred.status().reloads, 0, "{:#?}", cred.status());
    assert_eq!(rt.block_on(cred.check_now()), ReloadOutcome::Swapped);
    assert_active(&cred, "rotation-2");
    drop(cred);
    drop(rt);
    drop(server_rt);
}

/// While a reload is under way, `get_token` does not wait for it. The reload here is held
/// in its debounce on a manual clock, so in real time it never ends: a call that waited
/// for it would never return (each call gets a generous deadline that only a hang
/// reaches; no assertion here is about speed). A cached token comes back, a new scope goes
/// to the network with the credential still in place, and once the clock moves the swap
/// happens and the next request uses the new certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_token_is_not_blocked_by_a_reload() {
    const HANG: Duration = Duration::from_secs(10);
    const VAULT: &str = "https://vault.azure.net/.default";
    let (server, _dir, path, clock, cred) = held_in_debounce().await;
    let warm = token_signed_by(&server, &cred, "rotation-1").await;
    let requests = server.token_requests();

    // The watcher sees the write and the debounce starts; it ends only when the clock moves.
    write_temp_then_rename(&path, &bytes(&server, "rotation-2"));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(cred.status().reloads, 0, "{:#?}", cred.status());

    for i in 0..20 {
        let token = tokio::time::timeout(HANG, cred.get_token(&[ARM]))
            .await
            .unwrap_or_else(|_| panic!("cached get_token {i} waited for the pending reload"))
            .expect("get_token");
        assert_eq!(
            token.token(),
            warm,
            "call {i} did not take the cached token"
        );
    }
    assert_eq!(
        server.token_requests(),
        requests,
        "cached calls made a request"
    );
    let vault = tokio::time::timeout(HANG, cred.get_token(&[VAULT]))
        .await
        .expect("a new scope's get_token waited for the pending reload")
        .expect("get_token for a new scope");
    let issued = server.issued(vault.token()).expect("issued by the server");
    assert_eq!(
        issued.cert_sha256_hex,
        leaf_sha256_hex("rotation-1"),
        "the credential in place answers until the swap"
    );
    assert_eq!(cred.status().reloads, 0, "{:#?}", cred.status());

    // The debounce ends: the swap happens, and the new credential requests its own token.
    clock.advance(HELD_DEBOUNCE);
    let s = wait_active(&cred, "rotation-2").await;
    assert_eq!(s.reloads, 1, "{s:#?}");
    token_signed_by(&server, &cred, "rotation-2").await;
}

// ---------------------------------------------------------------------------------------
// writes through the symlink; the atomic swap without the debounce
// ---------------------------------------------------------------------------------------

/// In the CSI layout, a tool that rewrites the file in place through the visible path
/// (open, truncate, write) changes `..<timestamp>/<name>`: nothing happens in the mount
/// directory itself. The credential watches the directory the path resolves to as well,
/// re-armed after each swap (the first rotation below moves it to a new `..<timestamp>/`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_through_the_symlink_is_picked_up_in_the_atomic_writer_layout() {
    let server = server().await;
    let mut dir = AtomicDir::new(NAME, &bytes(&server, "rotation-1"));
    let cred = new_cred(&dir.visible_path()).await;
    token_signed_by(&server, &cred, "rotation-1").await;

    // A swap first: the watch must follow the new timestamped directory.
    dir.rotate(&bytes(&server, "rotation-2"));
    wait_active(&cred, "rotation-2").await;

    let visible = dir.visible_path();
    let b3 = bytes(&server, "rotation-3");
    tokio::task::spawn_blocking(move || write_in_place(&visible, &b3))
        .await
        .expect("writer");
    let want = nb("rotation-3");
    let s = wait_status_within(
        &cred,
        "the in-place write through the symlink",
        Duration::from_secs(1),
        |s| s.not_before == want,
    )
    .await;
    assert_eq!(s.reloads, 2, "{s:#?}");
    assert!(
        dir.dir().join(dir.current_ts_dir()).join(NAME).exists(),
        "the write went to the timestamped directory"
    );
    token_signed_by(&server, &cred, "rotation-3").await;
}

/// The visible path is a symlink to a file in another directory: an in-place write of the
/// target is seen through the watch on the target's directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn write_through_a_symlink_into_another_directory_is_picked_up() {
    let server = server().await;
    let real_dir = TempDir::new("symlink-target");
    let real = real_dir.join("real-credential.json");
    std::fs::write(&real, bytes(&server, "rotation-1")).expect("write target");
    let visible_dir = TempDir::new("symlink-visible");
    let visible = visible_dir.join(NAME);
    std::os::unix::fs::symlink(&real, &visible).expect("symlink");
    let cred = new_cred(&visible).await;
    token_signed_by(&server, &cred, "rotation-1").await;

    let b2 = bytes(&server, "rotation-2");
    let through = visible.clone();
    tokio::task::spawn_blocking(move || write_in_place(&through, &b2))
        .await
        .expect("writer");
    let want = nb("rotation-2");
    wait_status_within(
        &cred,
        "the in-place write of the symlink's target",
        Duration::from_secs(1),
        |s| s.not_before == want,
    )
    .await;
    token_signed_by(&server, &cred, "rotation-2").await;
}

/// The `..data` rename is atomic: it is acted on at once, whatever the debounce. A plain
/// write (which may be partial) still waits for the debounce.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_atomic_swap_skips_the_debounce_and_plain_writes_keep_it() {
    let server = server().await;
    let debounce = Duration::from_secs(3);
    let reload = reload_options().with_debounce(debounce);
    let options = options();

    let mut dir = AtomicDir::new(NAME, &bytes(&server, "rotation-1"));
    let cred =
        UserAssignedIdentityCredential::new(dir.visible_path(), options.clone(), reload.clone())
            .await
            .expect("new");
    dir.rotate(&bytes(&server, "rotation-2"));
    let want = nb("rotation-2");
    let s = wait_status_within(
        &cred,
        "the atomic swap without the debounce",
        Duration::from_secs(1),
        |s| s.not_before == want,
    )
    .await;
    assert_eq!(s.reloads, 1, "{s:#?}");
    token_signed_by(&server, &cred, "rotation-2").await;

    let (_plain, path) = plain_dir(&server, "rotation-1");
    let plain = UserAssignedIdentityCredential::new(&path, options, reload)
        .await
        .expect("new");
    let started = Instant::now();
    let b2 = bytes(&server, "rotation-2");
    tokio::task::spawn_blocking(move || write_in_place(&path, &b2))
        .await
        .expect("writer");
    // A fixed wait that gives the write a chance to be (wrongly) acted on early.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(plain.status().reloads, 0, "{:#?}", plain.status());
    wait_status(&plain, "the plain write after the debounce", |s| {
        s.not_before == want
    })
    .await;
    assert!(
        started.elapsed() >= debounce,
        "picked up before the debounce"
    );
}

// ---------------------------------------------------------------------------------------
// zero-wait swaps
// ---------------------------------------------------------------------------------------

const VAULT: &str = "https://vault.azure.net/.default";

/// Wait until the server has answered `want` token requests.
async fn wait_requests(server: &EntraServer, want: usize, what: &str) {
    let deadline = Instant::now() + DEADLINE;
    while server.token_requests() < want {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {} of {want} requests",
            server.token_requests()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// After a swap, the new credential fetches tokens for the scopes the old one served, in
/// the background: the first `get_token` for each makes no request, and its token was
/// obtained with the new certificate.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_swap_the_first_get_token_for_a_served_scope_makes_no_request() {
    let server = server().await;
    let mut dir = AtomicDir::new(NAME, &bytes(&server, "rotation-1"));
    let cred = new_cred(&dir.visible_path()).await;
    token_signed_by(&server, &cred, "rotation-1").await;
    cred.get_token(&[VAULT]).await.expect("vault token");
    assert_eq!(server.token_requests(), 2);

    dir.rotate(&bytes(&server, "rotation-2"));
    wait_active(&cred, "rotation-2").await;
    wait_requests(&server, 4, "the two tokens fetched ahead").await;

    token_signed_by(&server, &cred, "rotation-2").await;
    let vault = cred.get_token(&[VAULT]).await.expect("vault token");
    let issued = server.issued(vault.token()).expect("issued by the server");
    assert_eq!(issued.cert_sha256_hex, leaf_sha256_hex("rotation-2"));
    assert_eq!(
        server.token_requests(),
        4,
        "a get_token after the swap made a request"
    );
    let s = cred.status();
    assert!(s.last_prefetch_error.is_none(), "{s:#?}");
}

/// A new credential that Entra rejects (its certificate is not registered) is reported in
/// `status()` by the fetch ahead, before any caller asks for a token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_credential_entra_rejects_is_reported_before_any_caller_asks() {
    let server = EntraServer::start().await;
    register(&server, "rotation-1");
    let mut dir = AtomicDir::new(NAME, &bytes(&server, "rotation-1"));
    let cred = new_cred(&dir.visible_path()).await;
    token_signed_by(&server, &cred, "rotation-1").await;

    dir.rotate(&bytes(&server, "rotation-2"));
    let s = wait_status(&cred, "the prefetch failure in status()", |s| {
        s.last_prefetch_error.is_some()
    })
    .await;
    assert_eq!(s.not_before, nb("rotation-2"), "{s:#?}");
    let error = s.last_prefetch_error.expect("error");
    assert!(
        error.to_string().to_lowercase().contains("invalid_client")
            || error.to_string().contains("AADSTS"),
        "{error}"
    );
    // Only the fetch ahead asked: no caller has since the first token.
    assert!(
        server.requests()[1..]
            .iter()
            .all(|r| r.matched_cert_sha256.as_deref() != Some(&leaf_sha256_hex("rotation-1"))),
        "{:#?}",
        server.requests()
    );
}

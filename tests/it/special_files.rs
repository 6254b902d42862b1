//! A FIFO, a device or a directory where a file is expected: every reader refuses it at
//! once with a typed error naming the path, and nothing waits on it (a FIFO opened for
//! reading waits for a writer; `/dev/zero` never ends).
//!
//! Each FIFO test keeps a second name for its FIFO and, when it ends, opens it for
//! writing: a reader stuck in `open` (the bug these tests catch) is released, so a
//! failure is reported as a failure instead of a hung test binary.
#![cfg(unix)]

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use msi_dataplane::{
    ClientCertificateCredentialOptions, CloudConfig, ErrorKind, ReloadOptions, ReloadOutcome,
    UserAssignedIdentityCredential, UserAssignedIdentityCredentials,
};
use support::atomic_writer::{TempDir, write_temp_then_rename};
use support::fixtures::load_with_endpoint;

/// Far longer than any non-blocking open and read takes; a bound, not a measurement.
const BOUND: Duration = Duration::from_secs(5);

/// A FIFO at `path`, with a spare hard link that [`Fifo::drop`] opens for writing.
struct Fifo {
    spare: PathBuf,
}

impl Fifo {
    fn make(path: &Path) -> Fifo {
        let status = Command::new("mkfifo").arg(path).status().expect("mkfifo");
        assert!(status.success(), "mkfifo {}", path.display());
        let spare = path.with_extension("spare-link");
        std::fs::hard_link(path, &spare).expect("hard link to the FIFO");
        Fifo { spare }
    }
}

impl Drop for Fifo {
    fn drop(&mut self) {
        // Read+write never blocks on Linux; it releases any reader waiting in `open`.
        let _ = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.spare);
    }
}

fn fixture_json(name: &str) -> Vec<u8> {
    // The authority is never contacted: building a credential makes no network call.
    load_with_endpoint(name, "https://127.0.0.1:9/")
        .to_json()
        .expect("to_json")
        .into_bytes()
}

#[track_caller]
fn assert_refused(err: &msi_dataplane::Error, path: &Path, kind: &str) {
    assert!(
        err.to_string()
            .ends_with(&format!(": is a {kind}, not a regular file")),
        "{err:?}"
    );
    assert_eq!(err.kind().code(), "not_a_regular_file");
    assert_eq!(err.path(), Some(path), "{err:?}");
    assert!(
        err.to_string().contains(&path.display().to_string()),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_on_a_fifo_is_a_typed_error_not_a_hang() {
    let dir = TempDir::new("fifo-new");
    let path = dir.join("identity");
    let _fifo = Fifo::make(&path);
    let err = tokio::time::timeout(
        BOUND,
        UserAssignedIdentityCredential::new(
            &path,
            ClientCertificateCredentialOptions::default(),
            ReloadOptions::default(),
        ),
    )
    .await
    .expect("UserAssignedIdentityCredential::new on a FIFO did not return")
    .expect_err("a FIFO is not a credential file");
    assert_refused(&err, &path, "FIFO");
}

#[tokio::test]
async fn devices_and_directories_are_refused_by_kind() {
    let zero = Path::new("/dev/zero");
    let err = UserAssignedIdentityCredential::new(
        zero,
        ClientCertificateCredentialOptions::default(),
        ReloadOptions::default(),
    )
    .await
    .expect_err("/dev/zero");
    assert_refused(&err, zero, "character device");
    let err = UserAssignedIdentityCredentials::from_path(zero).expect_err("/dev/zero");
    assert_refused(&err, zero, "character device");

    let dir = TempDir::new("dir-as-file");
    let err = UserAssignedIdentityCredentials::from_path(dir.path()).expect_err("a directory");
    assert_refused(&err, dir.path(), "directory");
}

#[test]
fn the_cloud_config_reader_refuses_a_fifo() {
    let dir = TempDir::new("fifo-cloud-config");
    let path = dir.join("azure.json");
    let _fifo = Fifo::make(&path);
    let (tx, rx) = std::sync::mpsc::channel();
    let p = path.clone();
    std::thread::spawn(move || {
        let _ = tx.send(CloudConfig::from_path(&p).map(|_| ()));
    });
    let err = rx
        .recv_timeout(BOUND)
        .expect("CloudConfig::from_path on a FIFO did not return")
        .expect_err("a FIFO is not a cloud config");
    assert!(
        matches!(
            err.kind(),
            ErrorKind::File {
                code: "not_a_regular_file",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().ends_with("is a FIFO, not a regular file"),
        "{err}"
    );
    assert_eq!(err.path(), Some(path.as_path()));
}

/// A FIFO renamed over the file: the watcher's re-read and `check_now` both see it, both
/// return, the active credential keeps serving, and a good file afterwards is taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_now_after_a_fifo_is_renamed_over_the_file_returns() {
    let dir = TempDir::new("fifo-rename");
    let path = dir.join("identity");
    std::fs::write(&path, fixture_json("rotation-1")).expect("write");
    let cred = UserAssignedIdentityCredential::new(
        &path,
        ClientCertificateCredentialOptions::default(),
        ReloadOptions::default().with_debounce(Duration::from_millis(20)),
    )
    .await
    .expect("new");
    let before = cred.status();

    let staged = dir.join("staged");
    let _fifo = Fifo::make(&staged);
    std::fs::rename(&staged, &path).expect("rename the FIFO over the file");
    // Let the watcher's own re-read start first: it must not keep the check lock.
    tokio::time::sleep(Duration::from_millis(200)).await;

    for attempt in 1..=2 {
        let outcome = tokio::time::timeout(BOUND, cred.check_now())
            .await
            .unwrap_or_else(|_| panic!("check_now #{attempt} on a FIFO did not return"));
        assert_eq!(outcome, ReloadOutcome::Invalid);
        let s = cred.status();
        let err = s.last_error.as_ref().expect("last_error");
        assert_refused(err, &path, "FIFO");
        assert_eq!(s.thumbprint_sha256, before.thumbprint_sha256, "{s:#?}");
    }

    write_temp_then_rename(&path, &fixture_json("rotation-2"));
    let outcome = tokio::time::timeout(BOUND, cred.check_now())
        .await
        .expect("check_now on a good file did not return");
    assert_eq!(outcome, ReloadOutcome::Swapped);
    assert!(cred.status().last_error.is_none(), "{:#?}", cred.status());
}

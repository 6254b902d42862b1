//! The ways a credential file gets replaced on disk, with real files and symlinks: the CSI
//! mount writer.
//!
//! [`CsiMount`] reproduces kubelet's `AtomicWriter` (pkg/volume/util/atomic_writer.go),
//! which the Secrets Store CSI driver uses to publish a mounted secret:
//!
//! ```text
//! dir/..2026_11_22_10_00_00.123456789/<name>      the real file
//! dir/..data -> ..2026_11_22_10_00_00.123456789   symlink (relative)
//! dir/<name> -> ..data/<name>                     symlink (relative)
//! ```
//!
//! An update writes a new timestamped directory, points `..data_tmp` at it, renames
//! `..data_tmp` over `..data` (the atomic step), then removes the old timestamped
//! directory. The user-visible `<name>` symlink is never touched, so a watcher on that
//! name alone (or on the inode it resolved to) never sees a write.
//!
//! The free functions are the other ways people replace a file: in place, write-then-rename
//! and delete-then-recreate.

use std::fs::{self, File, OpenOptions};
use std::io::Write as _;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const DATA: &str = "..data";
const DATA_TMP: &str = "..data_tmp";

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A unique, empty directory under the system temp dir; removed (recursively) on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    /// Create `$TMPDIR/msi-dataplane-<label>-<pid>-<n>-<nanos>`.
    pub fn new(label: &str) -> TempDir {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "msi-dataplane-{label}-{}-{n}-{nanos}",
            std::process::id()
        ));
        fs::create_dir_all(&path).unwrap_or_else(|e| panic!("mkdir {}: {e}", path.display()));
        TempDir { path }
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `self.path()/name`.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        // Unlinking needs no permission on the files themselves (a `chmod 000` file goes too).
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// A directory published the way kubelet's `AtomicWriter` publishes a secret volume.
#[derive(Debug)]
pub struct CsiMount {
    dir: TempDir,
    name: String,
    current_ts: String,
}

impl CsiMount {
    /// A fresh directory (removed on drop) holding one file `name` with `bytes`, in
    /// AtomicWriter's layout.
    ///
    /// ```
    /// use msi_dataplane_testing::CsiMount;
    ///
    /// let mut mount = CsiMount::new("credentials.json", b"v1");
    /// let path = mount.visible_path();
    /// assert_eq!(std::fs::read(&path).unwrap(), b"v1");
    /// mount.rotate(b"v2");
    /// assert_eq!(std::fs::read(&path).unwrap(), b"v2");
    /// // The visible name is still the same symlink into `..data`.
    /// assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_symlink());
    /// ```
    pub fn new(name: &str, bytes: &[u8]) -> CsiMount {
        let dir = TempDir::new("atomic");
        let ts = new_ts_dir(dir.path(), name, bytes);
        symlink(&ts, dir.join(DATA)).expect("symlink ..data");
        symlink(Path::new(DATA).join(name), dir.join(name)).expect("symlink <name>");
        CsiMount {
            dir,
            name: name.to_owned(),
            current_ts: ts,
        }
    }

    /// A mount publishing `creds` as `credentials.json` (JSON as the CSI driver mounts
    /// it); point the reloading credential at [`CsiMount::visible_path`].
    pub fn with_credentials(creds: &msi_dataplane::UserAssignedIdentityCredentials) -> CsiMount {
        CsiMount::new(
            "credentials.json",
            &super::credentials::credentials_json(creds),
        )
    }

    /// A mount publishing `creds` under `name`, as the CSI driver names the file: the
    /// SecretProviderClass object's alias or name, which for a HyperShift component is
    /// the Key Vault secret's name (`uamsi-<id>`), so the component reads
    /// `/mnt/certs/uamsi-<id>`.
    ///
    /// ```
    /// use msi_dataplane_testing::{CsiMount, TestCertificate, TestIdentity};
    /// use msi_dataplane::BundleFormat;
    ///
    /// let identity = TestIdentity::new();
    /// let file = identity.credentials(&TestCertificate::self_signed(), "https://login.microsoftonline.com/", BundleFormat::Pem);
    /// let mount = CsiMount::with_credentials_named("uamsi-cpo", &file);
    /// assert!(mount.visible_path().ends_with("uamsi-cpo"));
    /// ```
    pub fn with_credentials_named(
        name: &str,
        creds: &msi_dataplane::UserAssignedIdentityCredentials,
    ) -> CsiMount {
        CsiMount::new(name, &super::credentials::credentials_json(creds))
    }

    /// Rewrite the visible file in place, through its symlinks (`<name>` → `..data/<name>`
    /// → the current timestamped directory's file), without the `..data` swap: what a tool
    /// writing into the mount, not the CSI driver, does. Two real writes, as
    /// [`write_in_place`].
    pub fn write_in_place(&self, bytes: &[u8]) {
        write_in_place(&self.visible_path(), bytes);
    }

    /// Publish `creds` (e.g. a renewed certificate) with the `..data` swap.
    pub fn rotate_credentials(
        &mut self,
        creds: &msi_dataplane::UserAssignedIdentityCredentials,
    ) -> Instant {
        self.rotate(&super::credentials::credentials_json(creds))
    }

    /// The directory (what a pod sees as the mount point).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `dir/<name>`: the path an application is configured with.
    pub fn visible_path(&self) -> PathBuf {
        self.dir.join(&self.name)
    }

    /// The current timestamped directory's name (`..2026_...`).
    pub fn current_ts_dir(&self) -> &str {
        &self.current_ts
    }

    /// Publish new content exactly as AtomicWriter does; returns the instant just after
    /// the rename of `..data_tmp` over `..data` (the moment the new content is visible).
    pub fn rotate(&mut self, bytes: &[u8]) -> Instant {
        let root = self.dir.path();
        // (4)-(5) new timestamped directory with the payload.
        let ts = new_ts_dir(root, &self.name, bytes);
        // (6) ..data_tmp -> ..<ts>
        let tmp = root.join(DATA_TMP);
        let _ = fs::remove_file(&tmp);
        symlink(&ts, &tmp).expect("symlink ..data_tmp");
        // (7) rename ..data_tmp over ..data: the atomic switch.
        fs::rename(&tmp, root.join(DATA)).expect("rename ..data_tmp -> ..data");
        let visible = Instant::now();
        // (8) user-visible symlinks already exist (same file name).
        // (10) remove the old timestamped directory.
        let old = std::mem::replace(&mut self.current_ts, ts);
        fs::remove_dir_all(root.join(&old))
            .unwrap_or_else(|e| panic!("remove old ts dir {old}: {e}"));
        visible
    }
}

/// `..YYYY_MM_DD_HH_MM_SS.<digits>` (as `os.MkdirTemp(dir, time.Now().UTC().Format(
/// "..2006_01_02_15_04_05."))`), created inside `root` with `name` holding `bytes`.
fn new_ts_dir(root: &Path, name: &str, bytes: &[u8]) -> String {
    let now = time::OffsetDateTime::now_utc();
    loop {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let ts = format!(
            "..{:04}_{:02}_{:02}_{:02}_{:02}_{:02}.{:09}{n}",
            now.year(),
            u8::from(now.month()),
            now.day(),
            now.hour(),
            now.minute(),
            now.second(),
            now.nanosecond(),
        );
        let dir = root.join(&ts);
        match fs::create_dir(&dir) {
            Ok(()) => {
                let mut f = File::create(dir.join(name)).expect("create payload file");
                f.write_all(bytes).expect("write payload");
                f.sync_all().expect("fsync payload");
                return ts;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => panic!("mkdir {}: {e}", dir.display()),
        }
    }
}

/// Rewrite `path` in place: open with truncate, write the first half, flush, write the
/// rest (two real writes, so a reader can see the half). A symlink is followed: the file
/// it points to is rewritten, the link stays.
pub fn write_in_place(path: &Path, bytes: &[u8]) {
    let half = bytes.len() / 2;
    let w = InPlaceWrite::begin(path, &bytes[..half]);
    w.finish(&bytes[half..]);
}

/// An in-place rewrite stopped half way: the file is truncated and holds only what
/// [`begin`](Self::begin) wrote until [`finish`](Self::finish).
#[derive(Debug)]
pub struct InPlaceWrite {
    file: File,
}

impl InPlaceWrite {
    /// Open `path` with truncate (creating it if needed), write `first` and flush it.
    pub fn begin(path: &Path, first: &[u8]) -> InPlaceWrite {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .unwrap_or_else(|e| panic!("open {}: {e}", path.display()));
        file.write_all(first).expect("write first part");
        file.flush().expect("flush");
        file.sync_data().expect("fsync first part");
        InPlaceWrite { file }
    }

    /// Write the rest and close the file.
    pub fn finish(mut self, rest: &[u8]) {
        self.file.write_all(rest).expect("write rest");
        self.file.flush().expect("flush");
        self.file.sync_data().expect("fsync rest");
    }
}

/// Write `bytes` to a temporary file next to `path`, then rename it over `path`.
pub fn write_temp_then_rename(path: &Path, bytes: &[u8]) {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let file_name = path
        .file_name()
        .expect("path has a file name")
        .to_string_lossy();
    let tmp = path.with_file_name(format!(".{file_name}.tmp{n}"));
    {
        let mut f = File::create(&tmp).unwrap_or_else(|e| panic!("create {}: {e}", tmp.display()));
        f.write_all(bytes).expect("write temp");
        f.sync_all().expect("fsync temp");
    }
    fs::rename(&tmp, path).unwrap_or_else(|e| panic!("rename over {}: {e}", path.display()));
}

/// Delete `path`, wait `gap` (blocking the calling thread), then create it with `bytes`.
pub fn delete_then_recreate(path: &Path, bytes: &[u8], gap: Duration) {
    fs::remove_file(path).unwrap_or_else(|e| panic!("remove {}: {e}", path.display()));
    std::thread::sleep(gap);
    let mut f = File::create(path).unwrap_or_else(|e| panic!("create {}: {e}", path.display()));
    f.write_all(bytes).expect("write");
    f.sync_all().expect("fsync");
}

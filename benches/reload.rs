//! Reload latency, with the default options (200 ms debounce) and the real `notify`
//! watcher, seen through `subscribe()`:
//!
//! - `reload/rename_to_active`: from the AtomicWriter's `rename("..data_tmp", "..data")`
//!   to the new credential being active. The rename is atomic, so it is acted on without
//!   the debounce.
//! - `reload/plain_write_to_active`: from the end of an in-place rewrite of a plain file
//!   (open, truncate, write, close) to the new credential being active: a plain write may
//!   be partial, so it waits for the debounce.
//!
//! `cargo bench --bench reload`

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode, criterion_group, criterion_main};
use msi_dataplane::{
    ClientCertificateCredentialOptions, ReloadOptions, UserAssignedIdentityCredential,
    UserAssignedIdentityCredentials,
};

/// kubelet's AtomicWriter, reduced to what a rotation does.
struct AtomicDir {
    dir: PathBuf,
    name: &'static str,
    current: PathBuf,
    n: u64,
}

impl AtomicDir {
    fn new(bytes: &[u8]) -> Self {
        let dir = std::env::temp_dir().join(format!("msi-dp-bench-reload-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let name = "identity";
        let mut this = AtomicDir {
            dir,
            name,
            current: PathBuf::new(),
            n: 0,
        };
        this.current = this.write_version(bytes);
        std::os::unix::fs::symlink(this.current.file_name().unwrap(), this.dir.join("..data"))
            .unwrap();
        std::os::unix::fs::symlink(Path::new("..data").join(name), this.dir.join(name)).unwrap();
        this
    }

    fn write_version(&mut self, bytes: &[u8]) -> PathBuf {
        self.n += 1;
        let ts = self
            .dir
            .join(format!("..2026_11_22_10_00_00.{:09}", self.n));
        std::fs::create_dir(&ts).unwrap();
        std::fs::write(ts.join(self.name), bytes).unwrap();
        ts
    }

    /// Rotate; returns the instant right after the rename.
    fn rotate(&mut self, bytes: &[u8]) -> Instant {
        let next = self.write_version(bytes);
        let tmp = self.dir.join("..data_tmp");
        std::os::unix::fs::symlink(next.file_name().unwrap(), &tmp).unwrap();
        std::fs::rename(&tmp, self.dir.join("..data")).unwrap();
        let renamed = Instant::now();
        std::fs::remove_dir_all(&self.current).unwrap();
        self.current = next;
        renamed
    }

    fn visible_path(&self) -> PathBuf {
        self.dir.join(self.name)
    }
}

impl Drop for AtomicDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The fixture with `not_before` moved forward by `step` seconds.
fn version(step: i64) -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/credentials/rotation-1.json"
    );
    let mut creds = UserAssignedIdentityCredentials::from_path(path).unwrap();
    let base = creds.not_before().unwrap().unwrap();
    let next = base + time::Duration::seconds(step);
    creds.not_before = Some(
        next.format(&time::format_description::well_known::Rfc3339)
            .unwrap(),
    );
    creds.to_json().unwrap().into_bytes()
}

fn bench_reload(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let mut dir = AtomicDir::new(&version(0));
    let cred = rt
        .block_on(UserAssignedIdentityCredential::new(
            dir.visible_path(),
            ClientCertificateCredentialOptions::default(),
            ReloadOptions::default(),
        ))
        .unwrap();
    let mut status = cred.subscribe();
    let mut step = 0i64;

    let mut g = c.benchmark_group("reload");
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(10));
    g.bench_function("rename_to_active", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                step += 1;
                let bytes = version(step);
                let before = cred.status().reloads;
                let renamed = dir.rotate(&bytes);
                rt.block_on(async {
                    tokio::time::timeout(
                        Duration::from_secs(10),
                        status.wait_for(|s| s.reloads > before),
                    )
                    .await
                    .expect("rotation picked up within 10 s")
                    .expect("status channel open");
                });
                total += renamed.elapsed();
            }
            total
        })
    });
    g.finish();

    // A plain file rewritten in place.
    let plain_dir =
        std::env::temp_dir().join(format!("msi-dp-bench-reload-plain-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&plain_dir);
    std::fs::create_dir_all(&plain_dir).unwrap();
    let plain_path = plain_dir.join("identity");
    std::fs::write(&plain_path, version(0)).unwrap();
    let plain = rt
        .block_on(UserAssignedIdentityCredential::new(
            &plain_path,
            ClientCertificateCredentialOptions::default(),
            ReloadOptions::default(),
        ))
        .unwrap();
    let mut plain_status = plain.subscribe();
    let mut plain_step = 0i64;
    let mut g = c.benchmark_group("reload");
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(3));
    g.bench_function("plain_write_to_active", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                plain_step += 1;
                let bytes = version(plain_step);
                let before = plain.status().reloads;
                std::fs::write(&plain_path, &bytes).unwrap();
                let written = Instant::now();
                rt.block_on(async {
                    tokio::time::timeout(
                        Duration::from_secs(10),
                        plain_status.wait_for(|s| s.reloads > before),
                    )
                    .await
                    .expect("write picked up within 10 s")
                    .expect("status channel open");
                });
                total += written.elapsed();
            }
            total
        })
    });
    g.finish();
    let _ = std::fs::remove_dir_all(&plain_dir);
}

criterion_group!(benches, bench_reload);
criterion_main!(benches);

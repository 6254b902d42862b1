//! Shared helpers for the integration tests. Each test binary uses a subset.
#![allow(dead_code)]

// Included by each crate's test binaries (`#[path]`): the library's `tests/it` and the
// separate binaries beside it, and the testing kit's and the command line's `tests/it`.
pub mod atomic_writer;
pub mod by_hand;
pub mod counting;
pub mod entra;
pub mod fixtures;
pub mod harness;
pub mod log_capture;
pub mod malformed;
pub mod node;
pub mod promtool;
pub mod python;
pub mod scanning;
pub mod secrets;

/// The repository's root (where `fixtures/`, `.ci/` and `target/` are), from whichever
/// crate of the workspace includes these helpers.
pub fn repo_root() -> std::path::PathBuf {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    here.ancestors()
        .find(|dir| dir.join("fixtures").is_dir() && dir.join(".ci").is_dir())
        .unwrap_or(here)
        .to_path_buf()
}

/// `target/<name>` (or under `CARGO_TARGET_DIR`), made if `ready` says it is not: built
/// by `build` in a directory of this process's own, then renamed into place, so that no
/// test binary sees half of one (when another was first, its copy stays).
pub fn provisioned(
    name: &str,
    ready: impl Fn(&std::path::Path) -> bool,
    build: impl FnOnce(&std::path::Path),
) -> std::path::PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    let dir = target.join(name);
    if ready(&dir) {
        return dir;
    }
    let building = target.join(format!("{name}.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&building);
    build(&building);
    if std::fs::rename(&building, &dir).is_err() {
        let _ = std::fs::remove_dir_all(&building);
    }
    dir
}

/// A free loopback port (bound, then released for a child process to bind).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

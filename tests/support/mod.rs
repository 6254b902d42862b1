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

/// A free loopback port (bound, then released for a child process to bind).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

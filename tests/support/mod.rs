//! Shared helpers for the integration tests. Each test binary uses a subset.
#![allow(dead_code)]

// The modules that run the testing kit's servers need `test-util`; the test binaries that
// use them require it (Cargo.toml's `[[test]]` entries), so plain `cargo test` builds.
#[cfg(feature = "test-util")]
pub mod atomic_writer;
#[cfg(all(feature = "azure_core", feature = "test-util"))]
pub mod azure_sdk;
pub mod by_hand;
pub mod counting;
#[cfg(feature = "test-util")]
pub mod entra;
pub mod fixtures;
#[cfg(feature = "test-util")]
pub mod harness;
pub mod log_capture;
pub mod promtool;
pub mod python;
pub mod scanning;
pub mod secrets;

/// A free loopback port (bound, then released for a child process to bind).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

//! Shared helpers for the integration tests. Each test binary uses a subset.
#![allow(dead_code)]

pub mod atomic_writer;
#[cfg(feature = "azure_core")]
pub mod azure_sdk;
pub mod by_hand;
pub mod counting;
pub mod entra;
pub mod fixtures;
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

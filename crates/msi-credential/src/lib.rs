#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[doc = include_str!("cli.md")]
pub mod cli {}
pub mod serve;
pub mod telemetry;

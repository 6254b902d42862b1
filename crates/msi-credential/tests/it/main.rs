//! The command line's and the token server's integration tests, in one binary: a
//! module per command or concern.

mod serving;
#[path = "../../../../tests/support/mod.rs"]
mod support;

mod alerts_live;
mod cli;
mod cli_serve;
mod cli_vault;
mod secrets;
mod serve;
mod serve_abuse;
mod serve_clients;
mod serve_floods;
mod serve_logs;
mod serve_soak;

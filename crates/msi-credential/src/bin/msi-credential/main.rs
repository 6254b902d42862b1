//! `msi-credential`: inspect an Azure managed-identity credential file, get a token with
//! it, or watch it rotate. Built with the crate feature `cli`:
//!
//! ```text
//! cargo install msi-dataplane --features cli     # or: cargo run --features cli -- ...
//! msi-credential inspect /mnt/certs/my-identity
//! msi-credential token /mnt/certs/my-identity --scope https://management.azure.com/.default
//! msi-credential watch /mnt/certs/my-identity --json
//! ```
//!
//! - `inspect FILE [--warn-days N]`: identity (client, object and resource ids), tenant,
//!   authority and token URL, the effective validity window and days left, the file's
//!   times, the leaf certificate (subject, issuer, validity, SHA-1 and SHA-256
//!   thumbprints), chain length, key size, bundle format, and every problem found
//!   (see `msi_dataplane::inspect::CredentialReport`).
//! - `token FILE --scope S [--scope S2] [--show-token] [--ca-file PEM]
//!   [--allow-http-loopback] [--timeout D] [--attempts N]`: get a token and print its
//!   expiry and scopes; the token only with `--show-token`.
//! - `watch FILE [--backstop D] [--debounce D] [--no-watch] [--metrics ADDR]`: build the
//!   reloading credential and print one line per reload decision until SIGINT/SIGTERM;
//!   with `--metrics`, the reloads and the credential's times in Prometheus's format on
//!   `http://ADDR/metrics`.
//! - `serve FILE... (--secret-file F | --secret-env NAME) [--listen ADDR] [--path P]
//!   [--metrics ADDR]`:
//!   serve the files' tokens to the pod's other containers over the App Service managed
//!   identity protocol on loopback, until SIGINT/SIGTERM; `probe
//!   [--url URL]` checks its `/healthz` for a Kubernetes `exec` probe.
//! - `--json` (any command): one JSON object on stdout (for `watch`, one per line);
//!   failures too are one JSON object `{"error": {"kind", "message", "file",
//!   "transient"}}` on stdout. Without it, results go to stdout and failures to stderr.
//! - `--log FILTER` / `MSI_CREDENTIAL_LOG`, else `RUST_LOG`: the library's `tracing`
//!   events on stderr (default `warn`; `error` for `watch`; `info` for `serve`), coloured
//!   only when stderr is a terminal.
//!
//! No output ever holds the client secret, key material or a client assertion; the
//! access token appears only with `token --show-token`.
//!
//! # Exit codes
//!
//! | code | meaning |
//! |---|---|
//! | 0 | success: inspect found no problem (info notes allowed), token got a token, watch or serve was stopped by a signal, probe found the token server ready |
//! | 1 | inspect found warnings only: the credential works now but needs attention (rotation due, ends within `--warn-days`, file times disagreeing with the certificate, ...) |
//! | 2 | usage or configuration: invalid command line, an option value that cannot be used (e.g. an unreadable `--ca-file`), a setting the library refused, or a server certificate not trusted (give its CA with `--ca-file`) |
//! | 3 | inspect found errors: the credential cannot get a token now (expired, not yet valid, unusable authority) |
//! | 4 | the credential file cannot be loaded: unreadable, not JSON, missing keys, unusable certificate bundle (the message names the file and the field) |
//! | 5 | a service refused: an error answer from the token endpoint or Key Vault, or an answer that cannot be used (or that breaks HTTP) |
//! | 6 | internal failure: the async runtime, a signal handler, or writing the output |
//! | 7 | transient failure: a connection refused, reset or closed early, a timeout, or HTTP 408, 429, 500, 502, 503, 504 (after the retries); probe: the token server not ready or not answering |
#![forbid(unsafe_code)]
#![deny(missing_docs)]
#![warn(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

// Uses point one way, bottom to top: `args`, `exit`, `signals`, `logging` (no crate
// imports but `exit`); `output` (the `Format` and writing); `render` (the printed shapes
// and their text or JSON, pure); the commands `inspect`, `token`, `watch`, `vault`, `serve` (with `probe`;
// it uses `token`'s HTTP options); main.
mod args;
mod exit;
mod inspect;
mod logging;
mod metrics;
mod output;
mod render;
mod serve;
mod signals;
mod token;
#[cfg(feature = "keyvault")]
mod vault;
mod watch;

use std::process::ExitCode;

use clap::Parser as _;

use crate::args::{Cli, Command};
use crate::exit::Exit;
use crate::output::Format;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // --help and --version end here too, with 0; usage errors with 2.
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(Exit::Usage.code()));
        }
    };
    let format = if cli.json { Format::Json } else { Format::Text };
    let default_filter = match cli.command {
        Command::Watch(_) => "error",
        Command::Serve(_) => "info",
        _ => "warn",
    };
    let rust_log = std::env::var("RUST_LOG").ok();
    let (filter, source) = logging::chosen(cli.log.as_deref(), rust_log.as_deref(), default_filter);
    if let Err(message) = logging::init(filter, source) {
        output::failure(&render::plain_error("usage", &message, format), format);
        return Exit::Usage.into();
    }
    let exit = match &cli.command {
        Command::Inspect(args) => inspect::run(args, format),
        Command::Token(args) => token::run(args, format),
        Command::Watch(args) => watch::run(args, format),
        Command::Serve(args) => serve::run(args, format),
        Command::Probe(args) => serve::probe(args, format),
        #[cfg(feature = "keyvault")]
        Command::Vault(args::VaultCommand::List(args)) => vault::list(args, format),
    };
    exit.into()
}

/// The async runtime for `token` and `watch`: one thread is plenty (the library reads
/// and parses files on blocking threads).
fn runtime() -> Result<tokio::runtime::Runtime, Exit> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            let message = format!("cannot start the async runtime: {e}");
            output::failure(
                &render::plain_error("internal", &message, Format::Text),
                Format::Text,
            );
            Exit::Internal
        })
}

//! `msi-credential`: inspect an Azure managed-identity credential file, get a token with
//! it, watch it rotate, list a Key Vault's stored credentials, or serve the files' tokens
//! to the pod's other containers (`serve`, with `probe` as its health check).
//!
//! The commands, their output and exit codes are documented once, in the library's
//! `cli` chapter (`msi_credential::cli`, from `src/cli.md`), and in `--help` (from
//! `args.rs`); the exit codes are decided in `exit.rs`.
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

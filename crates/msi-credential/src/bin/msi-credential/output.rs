//! Writing results: stdout for results (and, with `--json`, errors), stderr for errors
//! in text mode. Nothing here panics on a closed pipe, unlike `println!`.

use std::io::Write as _;

use crate::exit::Exit;

/// Write `text` and a newline to stdout, and flush (so `watch` lines reach a pipe at
/// once). A write failure is an internal failure (exit 6).
pub fn stdout(text: &str) -> Result<(), Exit> {
    let mut out = std::io::stdout().lock();
    let newline = if text.ends_with('\n') { "" } else { "\n" };
    write!(out, "{text}{newline}")
        .and_then(|()| out.flush())
        .map_err(|_| Exit::Internal)
}

/// Report a failure: JSON on stdout (so scripts read one object), text on stderr.
pub fn failure(text: &str, format: Format) {
    match format {
        Format::Json => {
            let _ = stdout(text);
        }
        Format::Text => {
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "{text}");
        }
    }
}

/// Text or JSON.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Aligned text for people.
    Text,
    /// One JSON object (per line, for `watch`).
    Json,
}

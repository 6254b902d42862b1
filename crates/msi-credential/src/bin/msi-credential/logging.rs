//! Diagnostics: `tracing` events (the library's own logs) to stderr, filtered by `--log`
//! (or `MSI_CREDENTIAL_LOG`), else `RUST_LOG`, else the command's default; colours only
//! when stderr is a terminal.

use std::io::IsTerminal as _;

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Pure: the filter in force: `--log` / `MSI_CREDENTIAL_LOG` when given, else a non-empty
/// `RUST_LOG`, else `default`; and where it came from (for an error about it).
pub fn chosen<'a>(
    flag: Option<&'a str>,
    rust_log: Option<&'a str>,
    default: &'a str,
) -> (&'a str, &'static str) {
    match (flag, rust_log.filter(|v| !v.trim().is_empty())) {
        (Some(flag), _) => (flag, "--log"),
        (None, Some(env)) => (env, "RUST_LOG"),
        (None, None) => (default, "the default"),
    }
}

/// Install the subscriber. `filter` is a level (`warn`) or comma-separated
/// `target=level` directives; an unparsable filter is an error naming `source`.
pub fn init(filter: &str, source: &str) -> Result<(), String> {
    let targets: Targets = filter
        .parse()
        .map_err(|e| format!("invalid {source} filter `{filter}`: {e}"))?;
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal())
                .with_target(true),
        )
        .with(targets)
        .try_init()
        .map_err(|e| format!("cannot install the log subscriber: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_then_rust_log_then_the_default() {
        assert_eq!(
            chosen(Some("debug"), Some("trace"), "warn"),
            ("debug", "--log")
        );
        assert_eq!(chosen(None, Some("trace"), "warn"), ("trace", "RUST_LOG"));
        assert_eq!(chosen(None, Some(" "), "warn"), ("warn", "the default"));
        assert_eq!(chosen(None, None, "info"), ("info", "the default"));
    }
}

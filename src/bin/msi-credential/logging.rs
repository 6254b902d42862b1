//! Diagnostics: `tracing` events (the library's own logs) to stderr, filtered by `--log`.

use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Install the subscriber. `filter` is a level (`warn`) or comma-separated
/// `target=level` directives; an unparsable filter is an error naming it.
pub fn init(filter: &str) -> Result<(), String> {
    let targets: Targets = filter
        .parse()
        .map_err(|e| format!("invalid --log filter `{filter}`: {e}"))?;
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_target(true),
        )
        .with(targets)
        .try_init()
        .map_err(|e| format!("cannot install the log subscriber: {e}"))
}

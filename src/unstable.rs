//! For this workspace's own crates (`msi-credential`'s token server and command line,
//! `msi-dataplane-testing`'s servers) and its tests: helpers of the library they share so
//! that each rule is written once. Not the library's API: hidden from its documentation,
//! and with no semver promise: anything here may change or go in any release, a patch
//! release included. Applications should not use it. (The reloading credential's
//! `get_token_admitted`, for the token server, is hidden likewise.)

/// Whether a host is loopback (`localhost`, `127.0.0.0/8`, `::1`): the rule the library
/// applies to `http://` URLs, which the token server applies to `Host` too.
pub use crate::http::loopback::is_loopback_host;
/// A budget of log lines (a burst, then one per interval, with a count of the rest).
pub use crate::log_budget::{LOG_BURST, LOG_INTERVAL, LogBudget};
/// A bounded read of a regular file (a FIFO or a device is refused, not waited on), as
/// the crate reads credential files: at most 1 MiB, errors naming the file as `role`.
pub use crate::regular_file::read_limited_as;
/// How many directory watches are alive in this process (tests that check that dropping
/// credentials stops their watches).
pub use crate::reload::watch::live_directory_watchers;
/// The range a credential draws a token's refresh-ahead point from (the testing kit
/// checks a refresh against it).
pub use crate::token::refresh::refresh_range;
/// Text from outside (a service's message, a client's input) made safe for an error, a
/// log line or a terminal: cut to a bound, every control and bidirectional character
/// escaped.
pub use crate::untrusted_text::{bounded, quoted_input};

//! What this workspace's own crates (the token server and command line, the testing kit)
//! use from the library and its users do not need: no semver promise, hidden from the
//! documentation. Applications should not use it.

pub use crate::log_budget::{LOG_BURST, LOG_INTERVAL, LogBudget};

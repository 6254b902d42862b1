//! Prometheus's own linter on a scrape: `promtool check metrics`, when `promtool` is on
//! `PATH`. CI sets `MSI_TEST_REQUIRE_PROMTOOL=1` (and installs it), so that there a
//! missing `promtool` fails the test instead of skipping the check.

use std::io::Write as _;
use std::process::{Command, Stdio};

/// Pipe `text` (a scrape in Prometheus's text format) to `promtool check metrics` and
/// assert that it finds nothing. Returns whether the check ran.
pub fn check_metrics(text: &str) -> bool {
    let required = std::env::var_os("MSI_TEST_REQUIRE_PROMTOOL").is_some_and(|v| v == "1");
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) if !required && e.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("promtool is not on PATH: `promtool check metrics` skipped");
            return false;
        }
        Err(e) => panic!("cannot run promtool (MSI_TEST_REQUIRE_PROMTOOL=1): {e}"),
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && report.trim().is_empty(),
        "promtool check metrics:\n{report}\non:\n{text}"
    );
    true
}

//! Log lines that a flood could repeat, bounded whatever the log level: in each interval
//! the first few of a kind are written, the rest are counted, and the count is written
//! with the next line written (or by whoever takes it, for a periodic summary).
//!
//! The rule is a pure function of the time ([`decide`]); [`LogBudget`] keeps its state.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// How often the lines of one kind may be written in full: the first
/// [`LOG_BURST`] in each interval of this length.
pub const LOG_INTERVAL: Duration = Duration::from_secs(10);

/// How many lines of one kind are written in each [`LOG_INTERVAL`] before the rest are
/// only counted.
pub const LOG_BURST: u32 = 5;

/// The lines of one kind written so far in the current interval, and those left out.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Window {
    /// When the interval began (milliseconds on the caller's clock), if one has.
    started: Option<i64>,
    /// Lines written in it.
    written: u32,
    /// Lines left out and not yet reported.
    left_out: u64,
}

/// Pure: whether a line arriving at `now` (milliseconds) is written, given the window so
/// far: `Some(n)` to write it, saying that `n` lines of its kind were left out before it
/// (0: none), `None` to leave it out (counted). A new interval starts with the first line
/// after the last one ended.
pub fn decide(window: Window, now: i64, interval: Duration, burst: u32) -> (Window, Option<u64>) {
    let length = i64::try_from(interval.as_millis()).unwrap_or(i64::MAX);
    let current = window
        .started
        .filter(|start| now >= *start && now - *start < length);
    match current {
        Some(_) if window.written >= burst => (
            Window {
                left_out: window.left_out.saturating_add(1),
                ..window
            },
            None,
        ),
        Some(_) => (
            Window {
                written: window.written + 1,
                left_out: 0,
                ..window
            },
            Some(window.left_out),
        ),
        None => (
            Window {
                started: Some(now),
                written: 1,
                left_out: 0,
            },
            Some(window.left_out),
        ),
    }
}

/// The state of `decide` for one kind of line: one per call site that a flood could
/// repeat (per credential, per server).
#[derive(Debug)]
pub struct LogBudget {
    window: Mutex<Window>,
}

impl Default for LogBudget {
    fn default() -> Self {
        LogBudget::new()
    }
}

impl LogBudget {
    /// A budget that has written nothing yet.
    pub const fn new() -> Self {
        LogBudget {
            window: Mutex::new(Window {
                started: None,
                written: 0,
                left_out: 0,
            }),
        }
    }

    /// Whether to write a line of this kind at `now` (milliseconds): `Some(n)` to write it
    /// (with `n`, the lines left out before it, as a field), `None` to leave it out.
    pub fn admit(&self, now: i64) -> Option<u64> {
        let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        let (next, verdict) = decide(*window, now, LOG_INTERVAL, LOG_BURST);
        *window = next;
        verdict
    }

    /// The lines left out and not yet reported, once their interval has ended at `now`
    /// (for a periodic summary line); they are then reported.
    pub fn take_left_out(&self, now: i64) -> Option<u64> {
        let mut window = self.window.lock().unwrap_or_else(PoisonError::into_inner);
        let length = i64::try_from(LOG_INTERVAL.as_millis()).unwrap_or(i64::MAX);
        let ended = window
            .started
            .is_none_or(|start| now < start || now - start >= length);
        if !ended || window.left_out == 0 {
            return None;
        }
        Some(std::mem::take(&mut window.left_out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: i64 = 1000;

    fn run(budget: &LogBudget, times: &[i64]) -> Vec<Option<u64>> {
        times.iter().map(|t| budget.admit(*t)).collect()
    }

    #[test]
    fn the_first_lines_of_an_interval_are_written_the_rest_counted() {
        let budget = LogBudget::new();
        let verdicts = run(&budget, &[0; 8]);
        assert_eq!(
            verdicts,
            [
                Some(0),
                Some(0),
                Some(0),
                Some(0),
                Some(0),
                None,
                None,
                None
            ]
        );
        // The next interval's first line says how many were left out.
        assert_eq!(budget.admit(10 * SECOND), Some(3));
        assert_eq!(budget.admit(10 * SECOND), Some(0));
    }

    #[test]
    fn a_flood_of_a_hundred_thousand_lines_writes_a_handful_per_interval() {
        let budget = LogBudget::new();
        let written = (0..100_000i64)
            .map(|i| budget.admit(i / 10)) // 10 lines a millisecond for 10 s
            .filter(Option::is_some)
            .count();
        assert_eq!(written, LOG_BURST as usize);
        assert_eq!(
            budget.take_left_out(9 * SECOND),
            None,
            "its interval goes on"
        );
        assert_eq!(budget.take_left_out(10 * SECOND), Some(100_000 - 5));
        assert_eq!(budget.take_left_out(20 * SECOND), None, "reported once");
        assert_eq!(budget.admit(20 * SECOND), Some(0));
    }

    #[test]
    fn a_clock_going_back_starts_a_new_interval() {
        let budget = LogBudget::new();
        assert_eq!(run(&budget, &[50 * SECOND; 6])[5], None);
        assert_eq!(budget.admit(SECOND), Some(1));
    }
}

//! Time, injected.
//!
//! Every time-dependent decision in the crate (assertion times, token expiry, credential
//! validity) reads the time from a [`Clock`], so tests can move time without sleeping.
//! [`SystemClock`] is the one place that reads the real clock.

use std::fmt;
use std::sync::Mutex;

use time::OffsetDateTime;

/// A source of the current time.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time (UTC).
    fn now(&self) -> OffsetDateTime;
}

/// The real wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }
}

/// A clock that only moves when told to: for tests.
///
/// ```
/// use msi_dataplane::{Clock, ManualClock};
/// use time::macros::datetime;
///
/// let clock = ManualClock::new(datetime!(2026-01-01 00:00 UTC));
/// clock.advance(time::Duration::hours(1));
/// assert_eq!(clock.now(), datetime!(2026-01-01 01:00 UTC));
/// ```
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<OffsetDateTime>,
}

impl ManualClock {
    /// A clock stopped at `start`.
    pub fn new(start: OffsetDateTime) -> Self {
        ManualClock {
            now: Mutex::new(start),
        }
    }

    /// Move the clock forward (or backward, with a negative duration).
    pub fn advance(&self, by: time::Duration) {
        let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
        *now += by;
    }

    /// Set the clock to `to`.
    pub fn set(&self, to: OffsetDateTime) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> OffsetDateTime {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }
}

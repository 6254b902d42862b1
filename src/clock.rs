//! Time, injected.
//!
//! Every time-dependent decision in the crate (assertion times, token expiry, credential
//! validity) reads the time from a [`Clock`], so tests can move time without sleeping.
//! [`SystemClock`] is the one place that reads the real clock.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;
use std::time::Duration;

use time::OffsetDateTime;

/// A future returned by [`Clock::sleep`].
pub type Sleep<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// A source of the current time, and of waiting.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time (UTC).
    fn now(&self) -> OffsetDateTime;

    /// The current time as milliseconds since the Unix epoch, for the token cache's hit
    /// path. May be coarse (a few milliseconds behind); the default derives it from
    /// [`now`](Clock::now).
    fn now_unix_millis(&self) -> i64 {
        unix_millis(self.now())
    }

    /// Wait for `duration` (between retries). A test clock may simply advance itself.
    fn sleep(&self, duration: Duration) -> Sleep<'_>;

    /// Wait until the clock reads `deadline` or later (timers such as the reload
    /// backstop). The default sleeps for the time remaining now.
    fn sleep_until(&self, deadline: OffsetDateTime) -> Sleep<'_> {
        let remaining = Duration::try_from(deadline - self.now()).unwrap_or(Duration::ZERO);
        self.sleep(remaining)
    }
}

/// The real wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> OffsetDateTime {
        OffsetDateTime::now_utc()
    }

    /// On Linux, `CLOCK_REALTIME_COARSE` (a vDSO read of the last tick, ~7 ns here,
    /// against ~45 ns for `OffsetDateTime::now_utc`); elsewhere the system clock.
    fn now_unix_millis(&self) -> i64 {
        #[cfg(target_os = "linux")]
        {
            let t = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
            t.tv_sec.saturating_mul(1000) + t.tv_nsec / 1_000_000
        }
        #[cfg(not(target_os = "linux"))]
        {
            unix_millis(OffsetDateTime::now_utc())
        }
    }

    fn sleep(&self, duration: Duration) -> Sleep<'_> {
        Box::pin(tokio::time::sleep(duration))
    }
}

/// A time as people read it: RFC 3339 in UTC, to the second (`2026-11-23T05:25:12Z`),
/// rather than `time`'s `Display` (`2026-11-23 5:25:12.938551692 +00:00:00`). The
/// crate's messages, logs and `msi-credential`'s output all print times this way; use it
/// to print a token's expiry or a certificate's dates the same way. Formats without
/// allocating.
///
/// ```
/// use time::macros::datetime;
///
/// let t = datetime!(2026-11-23 06:25:12.9385 +01:00);
/// assert_eq!(msi_dataplane::rfc3339(t).to_string(), "2026-11-23T05:25:12Z");
/// ```
pub fn rfc3339(t: OffsetDateTime) -> impl fmt::Display + fmt::Debug + Copy {
    Rfc3339(t)
}

/// The value [`rfc3339`] returns; inside the crate, for `tracing` fields and messages.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rfc3339(pub OffsetDateTime);

impl fmt::Debug for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let t = self.0.to_offset(time::UtcOffset::UTC);
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
            t.year(),
            u8::from(t.month()),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        )
    }
}

/// `d` as a `time::Duration`, saturating at `time::Duration::MAX` (std durations longer
/// than `i64::MAX` seconds): the public API speaks `std::time::Duration`; date arithmetic
/// inside uses `time`'s.
pub(crate) fn to_time(d: Duration) -> time::Duration {
    d.try_into().unwrap_or(time::Duration::MAX)
}

/// `t + d`, saturating at the ends of the representable range (in `t`'s offset) instead
/// of panicking: `time`'s own `saturating_add`, for the callers that import it from here.
pub(crate) fn saturating_add(t: OffsetDateTime, d: time::Duration) -> OffsetDateTime {
    t.saturating_add(d)
}

/// Milliseconds since the Unix epoch (saturating far outside ±292 million years).
pub(crate) fn unix_millis(t: OffsetDateTime) -> i64 {
    i64::try_from(t.unix_timestamp_nanos() / 1_000_000).unwrap_or(if t.year() < 0 {
        i64::MIN
    } else {
        i64::MAX
    })
}

/// The time `ms` milliseconds after the Unix epoch (the latest or earliest representable
/// time beyond the range `OffsetDateTime` covers).
pub(crate) fn from_unix_millis(ms: i64) -> OffsetDateTime {
    let nanos = i128::from(ms) * 1_000_000;
    OffsetDateTime::from_unix_timestamp_nanos(nanos).unwrap_or(if ms < 0 {
        time::PrimitiveDateTime::MIN.assume_utc()
    } else {
        time::PrimitiveDateTime::MAX.assume_utc()
    })
}

/// A clock that only moves when told to: for tests. Its [`sleep`](Clock::sleep) returns at
/// once after advancing the clock by the duration, and records it, so a test of "wait two
/// seconds, then retry" takes no time and can check what was waited. Its
/// [`sleep_until`](Clock::sleep_until) (timers) waits until the test moves the clock to the
/// deadline with [`advance`](ManualClock::advance) or [`set`](ManualClock::set).
///
/// ```
/// use msi_dataplane::{Clock, ManualClock};
/// use time::macros::datetime;
///
/// let clock = ManualClock::new(datetime!(2026-01-01 00:00 UTC));
/// clock.advance(std::time::Duration::from_secs(3600));
/// assert_eq!(clock.now(), datetime!(2026-01-01 01:00 UTC));
/// ```
#[derive(Debug)]
pub struct ManualClock {
    now: Mutex<OffsetDateTime>,
    sleeps: Mutex<Vec<Duration>>,
    moved: tokio::sync::Notify,
}

impl ManualClock {
    /// A clock stopped at the system's current time: for a test that moves time on from
    /// now (certificates made at run time are valid from about now).
    ///
    /// ```
    /// use std::time::Duration;
    /// use msi_dataplane::{Clock as _, ManualClock};
    ///
    /// let clock = ManualClock::starting_now();
    /// let start = clock.now();
    /// assert!((time::OffsetDateTime::now_utc() - start).abs() < time::Duration::minutes(1));
    /// clock.advance(Duration::from_secs(3600));
    /// assert_eq!(clock.now() - start, time::Duration::hours(1));
    /// ```
    pub fn starting_now() -> Self {
        ManualClock::new(OffsetDateTime::now_utc())
    }

    /// A clock stopped at `start`.
    pub fn new(start: OffsetDateTime) -> Self {
        ManualClock {
            now: Mutex::new(start),
            sleeps: Mutex::new(Vec::new()),
            moved: tokio::sync::Notify::new(),
        }
    }

    /// Move the clock forward by `by` (saturating at the end of time). To move it back,
    /// [`set`](ManualClock::set) it.
    pub fn advance(&self, by: Duration) {
        {
            let mut now = self.now.lock().unwrap_or_else(|e| e.into_inner());
            *now = saturating_add(*now, to_time(by));
        }
        self.moved.notify_waiters();
    }

    /// Set the clock to `to`.
    pub fn set(&self, to: OffsetDateTime) {
        *self.now.lock().unwrap_or_else(|e| e.into_inner()) = to;
        self.moved.notify_waiters();
    }

    /// Every duration passed to [`sleep`](Clock::sleep), in order.
    pub fn sleeps(&self) -> Vec<Duration> {
        self.sleeps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> OffsetDateTime {
        *self.now.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sleep(&self, duration: Duration) -> Sleep<'_> {
        self.sleeps
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(duration);
        self.advance(duration);
        Box::pin(std::future::ready(()))
    }

    fn sleep_until(&self, deadline: OffsetDateTime) -> Sleep<'_> {
        Box::pin(async move {
            loop {
                let moved = self.moved.notified();
                tokio::pin!(moved);
                moved.as_mut().enable();
                if self.now() >= deadline {
                    return;
                }
                moved.await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    #[test]
    fn additions_saturate_at_the_ends_of_time() {
        let t = datetime!(2026-01-01 00:00 UTC);
        let max = time::PrimitiveDateTime::MAX.assume_utc();
        let min = time::PrimitiveDateTime::MIN.assume_utc();
        assert_eq!(super::saturating_add(t, time::Duration::MAX), max);
        assert_eq!(super::saturating_add(t, time::Duration::MIN), min);
        assert_eq!(
            super::saturating_add(t, time::Duration::HOUR),
            t + time::Duration::HOUR
        );
    }

    #[test]
    fn std_durations_convert_saturating() {
        let d = std::time::Duration::new(90, 5);
        assert_eq!(super::to_time(d), time::Duration::new(90, 5));
        assert_eq!(
            super::to_time(std::time::Duration::MAX),
            time::Duration::MAX
        );
    }

    #[test]
    fn rfc3339_for_people_is_utc_to_the_second() {
        let t = datetime!(2026-11-23 07:25:12.938551692 +02:00);
        assert_eq!(super::Rfc3339(t).to_string(), "2026-11-23T05:25:12Z");
        let t = datetime!(2026-01-05 00:00 UTC);
        assert_eq!(super::Rfc3339(t).to_string(), "2026-01-05T00:00:00Z");
    }
}

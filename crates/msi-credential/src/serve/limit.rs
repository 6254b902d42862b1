//! The token server's budgets: token buckets, one over the token requests that reach the
//! token endpoint (cache misses), so that a runaway client in the pod cannot turn the
//! server into a flood of token requests, and one over refusals before the secret, past
//! which a refusal is held back and its connection closed, so that a flood without the
//! secret waits instead of taking the server's time. The refill is a pure
//! function of the time.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// A token bucket: `rate` requests a second on average, bursts of up to `burst`.
pub(crate) struct RateLimiter {
    rate: f64,
    burst: f64,
    bucket: Mutex<Bucket>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimiter {
    /// `rate` a second, bursts of twice that (at least 1 of each).
    pub(crate) fn new(rate: u32, now: Instant) -> Self {
        let rate = f64::from(rate.max(1));
        let burst = rate * 2.0;
        RateLimiter {
            rate,
            burst,
            bucket: Mutex::new(Bucket {
                tokens: burst,
                at: now,
            }),
        }
    }

    /// Whether a request arriving at `now` is admitted.
    pub(crate) fn admit(&self, now: Instant) -> bool {
        let mut bucket = self.bucket.lock().unwrap_or_else(PoisonError::into_inner);
        let (admitted, next) = take(*bucket, now, self.rate, self.burst);
        *bucket = next;
        admitted
    }
}

/// Pure: refill the bucket for the time since its last use, then take one token if there
/// is one.
fn take(bucket: Bucket, now: Instant, rate: f64, burst: f64) -> (bool, Bucket) {
    let elapsed = now.saturating_duration_since(bucket.at);
    let tokens = (bucket.tokens + elapsed.as_secs_f64() * rate).min(burst);
    let at = now.max(bucket.at);
    if tokens >= 1.0 {
        (
            true,
            Bucket {
                tokens: tokens - 1.0,
                at,
            },
        )
    } else {
        (false, Bucket { tokens, at })
    }
}

/// Refusals answered a second (bursts of twice that) before refused connections are
/// closed after their answer.
pub(crate) const REFUSALS_PER_SECOND: u32 = 50;

/// How long a refusal past the refusals' budget is held back before it is answered (and
/// its connection closed).
pub(crate) const REFUSAL_HOLD_BACK: Duration = Duration::from_secs(1);

/// How long a refused client is asked to wait.
pub(crate) const RATE_LIMITED_RETRY_AFTER: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_then_the_rate() {
        let t0 = Instant::now();
        let limiter = RateLimiter::new(10, t0);
        let admitted = (0..30).filter(|_| limiter.admit(t0)).count();
        assert_eq!(admitted, 20, "a burst of twice the rate");
        assert!(!limiter.admit(t0 + Duration::from_millis(50)));
        assert!(limiter.admit(t0 + Duration::from_millis(100)));
        assert!(!limiter.admit(t0 + Duration::from_millis(100)));
        // A long pause refills no more than the burst.
        let later = t0 + Duration::from_secs(3600);
        assert_eq!((0..30).filter(|_| limiter.admit(later)).count(), 20);
        // Time going backwards takes nothing and gives nothing.
        assert!(!limiter.admit(t0));
    }
}

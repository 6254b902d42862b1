//! The servers' budgets: token buckets, one over the token requests that reach the token
//! endpoint (cache misses), so that a runaway client in the pod cannot turn the server
//! into a flood of token requests, and one over every answer to a caller without the
//! secret (the token server's refusals and its health status, the metrics listener's
//! 404s and 405s), past which each such answer is held back and its connection closed
//! ([`budgeted`]), so that a flood without the secret waits instead of taking the
//! server's time. The refill is a pure function of the time.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Response;
use hyper::header::{CONNECTION, HeaderValue};

use crate::serve::listener::HoldBack;

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

/// Answers to callers without the secret answered a second (bursts of twice that) before
/// they are held back and their connections closed after them.
pub(crate) const REFUSALS_PER_SECOND: u32 = 50;

/// How long an answer past its budget is held back, on average, before it is written (and
/// its connection closed): each between half and one and a half times this ([`spread`]),
/// so that a flood's held-back answers do not all come due, and its connections close,
/// at the same moment.
pub(crate) const REFUSAL_HOLD_BACK: Duration = Duration::from_secs(1);

/// `response`, an answer to a caller without the secret: as is within `budget`; past it
/// held back about [`REFUSAL_HOLD_BACK`] and its connection closed after it, so that a
/// flood waits instead of costing the server.
pub(crate) fn budgeted(
    budget: &RateLimiter,
    mut response: Response<Full<Bytes>>,
) -> Response<Full<Bytes>> {
    if !budget.admit(Instant::now()) {
        response
            .headers_mut()
            .insert(CONNECTION, HeaderValue::from_static("close"));
        response
            .extensions_mut()
            .insert(HoldBack(spread(REFUSAL_HOLD_BACK, jitter())));
    }
    response
}

/// Pure: `mean` moved by `jitter` (in `[0, 1)`) to between half and one and a half times it.
fn spread(mean: Duration, jitter: f64) -> Duration {
    mean.mul_f64(0.5 + jitter.clamp(0.0, 1.0))
}

/// A number in `[0, 1)` that differs from call to call (std's randomly seeded hasher over a
/// counter: enough to spread timers, not for anything secret).
fn jitter() -> f64 {
    use std::hash::{BuildHasher as _, RandomState};
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicU64, Ordering};
    static STATE: OnceLock<RandomState> = OnceLock::new();
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let n = COUNT.fetch_add(1, Ordering::Relaxed);
    let bits = STATE.get_or_init(RandomState::new).hash_one(n) >> 11;
    bits as f64 / (1u64 << 53) as f64
}

/// How long a refused client is asked to wait.
pub(crate) const RATE_LIMITED_RETRY_AFTER: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_back_answers_are_spread_around_the_mean() {
        let second = Duration::from_secs(1);
        assert_eq!(spread(second, 0.0), Duration::from_millis(500));
        assert_eq!(spread(second, 0.5), second);
        assert!(spread(second, 0.999_999) < Duration::from_millis(1500));
        let draws: Vec<f64> = (0..1000).map(|_| jitter()).collect();
        assert!(draws.iter().all(|j| (0.0..1.0).contains(j)));
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        assert!((0.4..0.6).contains(&mean), "{mean}");
    }

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

//! Retrying token requests: which failures are retried and how long to wait.
//!
//! [`next_delay`] is a pure function of the attempt number, the error, the time spent so
//! far and a jitter sample; the loop that sleeps lives with the credential.

use std::time::Duration;

use crate::clock::Clock;
use crate::error::{Error, ErrorKind};

/// How token requests are retried.
///
/// Retried: transport failures a retry can help (a connection refused, reset or closed
/// before the answer, a timeout) and HTTP 408, 429, 500, 502, 503 and 504: the errors
/// whose [`is_transient`](crate::Error::is_transient) is true. Never retried: 400, 401 and
/// every other answer, a TLS failure (a server certificate not trusted), an answer that
/// breaks HTTP (a malformed header), and local failures (a credential outside its
/// validity, a bad scope, a request abandoned for want of a runtime).
///
/// The delay before retry *n* (1-based) is `initial_delay × 2^(n-1)`, capped at
/// `max_delay`, times a jitter factor in `[0.5, 1.0)`. A `Retry-After` from the server
/// replaces that delay. No retry starts once `max_attempts` requests were made, or when
/// the wait would end past `max_total` since the first attempt (the last error is returned,
/// with its `Retry-After` if any).
///
/// ```
/// use std::time::Duration;
/// use msi_dataplane::RetryPolicy;
///
/// let policy = RetryPolicy::default()
///     .with_max_attempts(3)
///     .with_max_total(Duration::from_secs(20));
/// assert!(format!("{policy:?}").contains("max_attempts: 3"));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// At least 1.
    max_attempts: u32,
    initial_delay: Duration,
    max_delay: Duration,
    max_total: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 4,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(8),
            max_total: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// No retries: one request per token fetch.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// Make at most this many requests in all, the first included (0 is taken as 1; 1
    /// disables retries). Default 4.
    pub fn with_max_attempts(mut self, attempts: u32) -> Self {
        self.max_attempts = attempts.max(1);
        self
    }

    /// Wait this long before the first retry. Default 500 ms.
    pub fn with_initial_delay(mut self, delay: Duration) -> Self {
        self.initial_delay = delay;
        self
    }

    /// Wait at most this long between attempts (the computed delay's cap; a server's
    /// `Retry-After` is not capped). Default 8 s.
    pub fn with_max_delay(mut self, delay: Duration) -> Self {
        self.max_delay = delay;
        self
    }

    /// Start no retry later than this after the first attempt. Default 60 s.
    pub fn with_max_total(mut self, total: Duration) -> Self {
        self.max_total = total;
        self
    }

    /// The most requests made in all, the first included (at least 1).
    #[cfg_attr(not(feature = "keyvault"), allow(dead_code))]
    pub(crate) fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The delay before the first retry.
    #[cfg_attr(not(feature = "keyvault"), allow(dead_code))]
    pub(crate) fn initial_delay(&self) -> Duration {
        self.initial_delay
    }

    /// The longest computed delay between attempts.
    #[cfg_attr(not(feature = "keyvault"), allow(dead_code))]
    pub(crate) fn max_delay(&self) -> Duration {
        self.max_delay
    }

    /// The longest total time from the first attempt to the start of the last.
    #[cfg_attr(not(feature = "keyvault"), allow(dead_code))]
    pub(crate) fn max_total(&self) -> Duration {
        self.max_total
    }
}

/// A uniform sample from `[0, 1)` for jitter (AWS-LC's generator; 0.5 if it fails).
pub(crate) fn jitter() -> f64 {
    use aws_lc_rs::rand::SecureRandom;
    let mut bytes = [0u8; 8];
    match aws_lc_rs::rand::SystemRandom::new().fill(&mut bytes) {
        Ok(()) => (u64::from_le_bytes(bytes) >> 11) as f64 / (1u64 << 53) as f64,
        Err(_) => 0.5,
    }
}

/// Run `attempt` until it succeeds or [`next_delay`] gives up, sleeping on `clock` between
/// attempts; `on_retry(attempts, delay, error)` is called before each wait (for logging).
/// The one retry loop of the crate: token requests and data plane requests share it.
pub(crate) async fn run<T, Fut>(
    policy: &RetryPolicy,
    clock: &dyn Clock,
    mut attempt: impl FnMut() -> Fut,
    mut on_retry: impl FnMut(u32, Duration, &Error),
) -> Result<T, Error>
where
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let started = clock.now();
    let mut attempts = 0u32;
    loop {
        attempts += 1;
        let error = match attempt().await {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        let elapsed = Duration::try_from(clock.now() - started).unwrap_or_default();
        let Some(delay) = next_delay(policy, attempts, &error, elapsed, jitter()) else {
            return Err(error);
        };
        on_retry(attempts, delay, &error);
        clock.sleep(delay).await;
    }
}

/// Whether an error is worth another request: exactly when it is transient
/// ([`Error::is_transient`]), so the two never disagree.
pub(crate) fn is_retryable(error: &Error) -> bool {
    error.is_transient()
}

/// The wait before the next attempt, or `None` to give up. `attempts` is how many
/// requests were made so far (≥ 1), `elapsed` the time since the first began, `jitter` a
/// sample from `[0, 1)`.
pub(crate) fn next_delay(
    policy: &RetryPolicy,
    attempts: u32,
    error: &Error,
    elapsed: Duration,
    jitter: f64,
) -> Option<Duration> {
    if attempts >= policy.max_attempts || !is_retryable(error) {
        return None;
    }
    let retry_after = match error.kind() {
        ErrorKind::TokenEndpoint(e) => e.retry_after,
        ErrorKind::Service(e) => e.retry_after,
        _ => None,
    };
    let delay = retry_after.unwrap_or_else(|| {
        let exponent = attempts.saturating_sub(1).min(16);
        let base = policy
            .initial_delay
            .saturating_mul(1u32 << exponent)
            .min(policy.max_delay);
        base.mul_f64(0.5 + jitter.clamp(0.0, 1.0) / 2.0)
    });
    (elapsed.saturating_add(delay) <= policy.max_total).then_some(delay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::TokenEndpointError;
    use crate::error::TransportFault::{Passing, Tls};

    fn status(status: u16, retry_after: Option<u64>) -> Error {
        ErrorKind::TokenEndpoint(Box::new(TokenEndpointError {
            status,
            retry_after: retry_after.map(Duration::from_secs),
            ..Default::default()
        }))
        .into()
    }

    #[test]
    fn retries_only_transient_classes() {
        let p = RetryPolicy::default();
        for code in [408, 429, 500, 502, 503, 504] {
            assert!(
                next_delay(&p, 1, &status(code, None), Duration::ZERO, 0.0).is_some(),
                "{code}"
            );
        }
        for code in [400, 401, 403, 404, 501] {
            assert!(
                next_delay(&p, 1, &status(code, None), Duration::ZERO, 0.0).is_none(),
                "{code}"
            );
        }
        let transport: Error =
            crate::error::TransportError::new("token", "u", true, Passing, "m".into(), None).into();
        assert!(next_delay(&p, 1, &transport, Duration::ZERO, 0.0).is_some());
        // A failure a retry cannot mend (an untrusted certificate, a malformed answer).
        let permanent: Error =
            crate::error::TransportError::new("token", "u", false, Tls, "m".into(), None).into();
        assert!(next_delay(&p, 1, &permanent, Duration::ZERO, 0.0).is_none());
        assert!(
            next_delay(
                &p,
                1,
                &Error::file("no_private_key", None, "m"),
                Duration::ZERO,
                0.0
            )
            .is_none()
        );
    }

    #[test]
    fn exponential_with_jitter_and_cap() {
        let p = RetryPolicy::default();
        let e = status(503, None);
        assert_eq!(
            next_delay(&p, 1, &e, Duration::ZERO, 0.0),
            Some(Duration::from_millis(250))
        );
        assert_eq!(
            next_delay(&p, 2, &e, Duration::ZERO, 0.0),
            Some(Duration::from_millis(500))
        );
        assert_eq!(
            next_delay(&p, 3, &e, Duration::ZERO, 0.999_999).map(|d| d.as_millis()),
            Some(1999)
        );
        let p = p.with_max_attempts(20);
        assert_eq!(
            next_delay(&p, 15, &e, Duration::ZERO, 0.0),
            Some(Duration::from_secs(4))
        );
    }

    #[test]
    fn retry_after_replaces_backoff_and_budgets_hold() {
        let p = RetryPolicy::default();
        assert_eq!(
            next_delay(&p, 1, &status(429, Some(2)), Duration::ZERO, 0.3),
            Some(Duration::from_secs(2))
        );
        // Would end past max_total: give up.
        assert_eq!(
            next_delay(&p, 1, &status(429, Some(61)), Duration::ZERO, 0.3),
            None
        );
        assert_eq!(
            next_delay(&p, 1, &status(429, Some(2)), Duration::from_secs(59), 0.3),
            None
        );
        // Attempts cap.
        assert_eq!(
            next_delay(&p, 4, &status(503, None), Duration::ZERO, 0.3),
            None
        );
        assert_eq!(
            next_delay(
                &RetryPolicy::none(),
                1,
                &status(503, None),
                Duration::ZERO,
                0.3
            ),
            None
        );
    }
}

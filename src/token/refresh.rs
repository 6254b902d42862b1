//! When cached tokens are handed out, refreshed, retried and dropped: the token cache's
//! rules as pure functions of the time (Unix milliseconds or `OffsetDateTime`).

use std::ops::RangeInclusive;
use std::time::Duration;

use time::OffsetDateTime;

use crate::clock::to_time;

/// The refresh window opens at least this long before expiry (the default, and the least
/// [`ClientCertificateCredentialOptions::refresh_window`](crate::ClientCertificateCredentialOptions::refresh_window)
/// takes).
pub const REFRESH_WINDOW: Duration = Duration::from_secs(5 * 60);

/// Tokens this close to expiry are not handed out: a caller would get a token that may
/// expire before its request arrives.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(10);
const EXPIRY_MARGIN_MS: i64 = EXPIRY_MARGIN.as_millis() as i64;

/// Tokens living longer than this are refreshed at half-life.
const LONG_LIVED: time::Duration = time::Duration::hours(2);

/// How long a failed token request's error is the answer for its scope (callers without
/// a usable token get it again rather than a new request), by default
/// ([`ClientCertificateCredentialOptions::with_failure_memory`](crate::ClientCertificateCredentialOptions::with_failure_memory)).
pub const FAILURE_MEMORY: Duration = Duration::from_secs(5);

/// How many scope sets (per tenant) a credential caches tokens for, by default
/// ([`ClientCertificateCredentialOptions::with_max_cached_scopes`](crate::ClientCertificateCredentialOptions::with_max_cached_scopes)).
pub const MAX_CACHED_SCOPES: usize = 1_000;

/// The first wait after a failed background refresh; it doubles per failure.
pub const MIN_REFRESH_BACKOFF: Duration = Duration::from_secs(30);
const MAX_REFRESH_BACKOFF: Duration = Duration::from_secs(600);

/// How usable a cached token is at a given time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Freshness {
    /// Hand it out.
    Fresh,
    /// Hand it out, and refresh it in the background.
    RefreshAhead,
    /// Do not hand it out; fetch a new one.
    Expired,
}

/// Pure: how usable a token with these times (Unix milliseconds) is at `now`.
pub(crate) fn freshness(now: i64, refresh_at: i64, expires_on: i64) -> Freshness {
    if now >= expires_on.saturating_sub(EXPIRY_MARGIN_MS) {
        Freshness::Expired
    } else if now >= refresh_at {
        Freshness::RefreshAhead
    } else {
        Freshness::Fresh
    }
}

/// Pure: the range the refresh point of a token obtained at `issued`, expiring at
/// `expires_on`, is drawn from (uniformly: replicas started together do not refresh
/// together): the server's `refresh_on` if any, else half-life for tokens over 2 h, else
/// expiry − 5 min; always at least `window` (never under 5 minutes; half the lifetime for
/// short tokens) before expiry, for `azure_core`'s bearer policy; starting up to 10% (at
/// most 60 s) of the time until it earlier, never before `issued`
/// ([`guide::token_cache`](crate::guide::token_cache) says why).
///
/// ```
/// use std::time::Duration;
/// use msi_dataplane::limits::MIN_REFRESH_WINDOW;
/// use msi_dataplane::unstable::refresh_range;
/// use time::macros::datetime;
///
/// let issued = datetime!(2026-01-01 00:00 UTC);
/// let hour = refresh_range(issued, issued + Duration::from_secs(3600), None, MIN_REFRESH_WINDOW);
/// assert_eq!(*hour.end(), datetime!(2026-01-01 00:55 UTC));
/// assert_eq!(*hour.start(), datetime!(2026-01-01 00:54 UTC));
/// ```
pub fn refresh_range(
    issued: OffsetDateTime,
    expires_on: OffsetDateTime,
    refresh_on: Option<OffsetDateTime>,
    window: Duration,
) -> RangeInclusive<OffsetDateTime> {
    let lifetime = expires_on - issued;
    let half: time::Duration = lifetime / 2i32;
    let latest = expires_on - to_time(window.max(REFRESH_WINDOW)).min(half);
    let planned = match refresh_on {
        Some(at) => at.min(latest),
        None if lifetime > LONG_LIVED => issued + half,
        None => latest,
    };
    let until: time::Duration = planned - issued;
    let spread = (until / 10i32).clamp(time::Duration::ZERO, time::Duration::seconds(60));
    (planned - spread).max(issued)..=planned.max(issued)
}

/// Pure: the refresh point in [`refresh_range`] that `jitter` in `[0, 1)` picks: the
/// range's end moved earlier by that fraction of its length.
pub(crate) fn refresh_at(
    issued: OffsetDateTime,
    expires_on: OffsetDateTime,
    refresh_on: Option<OffsetDateTime>,
    window: Duration,
    jitter: f64,
) -> OffsetDateTime {
    let range = refresh_range(issued, expires_on, refresh_on, window);
    let (start, end) = (*range.start(), *range.end());
    end - (end - start) * jitter.clamp(0.0, 1.0)
}

/// Pure: how long to wait before the next background refresh after `failures`
/// consecutive failures (≥ 1): 30 s, doubling, at most 10 min, plus up to 10% jitter.
pub(crate) fn refresh_backoff(failures: u32, jitter: f64) -> Duration {
    let exponent = failures.saturating_sub(1).min(8);
    let base = MIN_REFRESH_BACKOFF
        .saturating_mul(1u32 << exponent)
        .min(MAX_REFRESH_BACKOFF);
    base + base.mul_f64(jitter.clamp(0.0, 1.0) / 10.0)
}

/// Pure: how many entries to evict from a cache holding `len` (all idle) of at most `max`
/// before adding one: none while there is room, else enough for the new one and an
/// eighth of `max` more, so that evictions (a scan of the cache) come once per `max / 8`
/// new entries, not once per entry.
pub(crate) fn evict_count(len: usize, max: usize) -> usize {
    match len < max {
        true => 0,
        false => len + 1 + max / 8 - max,
    }
}

/// What the cache keeps of a request once it has ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Settled {
    /// Consecutive failures, this request's included.
    pub(crate) failures: u32,
    /// Until when (Unix ms) the request's error is the answer for callers without a
    /// usable token; `None` after a success or a failure that never left the process.
    pub(crate) error_until: Option<i64>,
    /// No background request before this time (Unix ms): the backoff's end after a
    /// failure, `i64::MIN` after a success.
    pub(crate) quiet_until: i64,
}

/// Pure: what follows a request that ended at `now` (Unix ms) after `failures`
/// consecutive failures before it. `failed`: `None` for a success; `Some(reached)` for a
/// failure, `reached` when the error is the service's answer or a failure on the way to
/// it (remembered for `memory`), not a refusal made before sending (not remembered).
/// Either way the next background request waits [`refresh_backoff`].
pub(crate) fn settled(
    now: i64,
    failures: u32,
    failed: Option<bool>,
    memory: Duration,
    jitter: f64,
) -> Settled {
    let Some(reached) = failed else {
        return Settled {
            failures: 0,
            error_until: None,
            quiet_until: i64::MIN,
        };
    };
    let failures = failures.saturating_add(1);
    Settled {
        failures,
        error_until: reached.then(|| after(now, memory)),
        quiet_until: after(now, refresh_backoff(failures, jitter)),
    }
}

/// The longest `Retry-After` the failure memory follows: the same clamp as the token
/// server's own answer (1 to 60 s).
pub(crate) const MAX_RETRY_AFTER_MEMORY: Duration = Duration::from_secs(60);

/// Pure: how long a failed request's error is remembered: the configured `memory`, but
/// never shorter than the token endpoint's own `Retry-After` (`asked`, clamped to 1 to
/// 60 s), so that the credential asks again no sooner than the endpoint asked.
pub(crate) fn failure_memory(memory: Duration, asked: Option<Duration>) -> Duration {
    let asked = asked.map_or(Duration::ZERO, |a| {
        a.clamp(Duration::from_secs(1), MAX_RETRY_AFTER_MEMORY)
    });
    memory.max(asked)
}

/// A cached token this close to its end is tried again at most
/// [`MIN_REFRESH_BACKOFF`] after a failed refresh, however many failures came before
/// (its callers are about to lose it); the alert on a token ending while its requests
/// fail uses the same 10 minutes.
pub const NEAR_END: Duration = Duration::from_secs(10 * 60);

/// Pure: the end of the backoff after a request that ended at `now` (Unix ms) as
/// [`settled`] says, for a slot whose token expires at `expires_on`: within
/// [`NEAR_END`] of that end no later than [`MIN_REFRESH_BACKOFF`] from now (its callers
/// are about to lose it, and a try after the service's recovery ends the failures at
/// once), never before the error's own memory ends (a `Retry-After` it holds).
pub(crate) fn near_end_quiet(now: i64, next: Settled, expires_on: i64) -> i64 {
    let near_end = i64::try_from(NEAR_END.as_millis()).unwrap_or(i64::MAX);
    if expires_on.saturating_sub(now) > near_end {
        return next.quiet_until;
    }
    let soon = after(now, MIN_REFRESH_BACKOFF);
    let memory = next.error_until.unwrap_or(i64::MIN);
    next.quiet_until.min(soon).max(memory)
}

/// Pure: whether a cached token expiring at `expires_on` (Unix ms) is one a caller can
/// still lose at `now`: not yet expired, or its scope's requests fail (`failures` > 0).
/// An expired token of a scope no one asks for again is not.
pub(crate) fn losable(now: i64, expires_on: i64, failures: u32) -> bool {
    now < expires_on || failures > 0
}

/// `now` (Unix ms) plus `wait`.
fn after(now: i64, wait: Duration) -> i64 {
    now.saturating_add(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {

    #[test]
    fn the_failure_memory_lasts_as_long_as_the_endpoints_retry_after() {
        let five = Duration::from_secs(5);
        assert_eq!(failure_memory(five, None), five);
        assert_eq!(
            failure_memory(five, Some(Duration::from_secs(30))),
            Duration::from_secs(30)
        );
        assert_eq!(failure_memory(five, Some(Duration::from_secs(2))), five);
        assert_eq!(
            failure_memory(five, Some(Duration::from_secs(3600))),
            MAX_RETRY_AFTER_MEMORY
        );
        assert_eq!(
            failure_memory(Duration::ZERO, Some(Duration::ZERO)),
            Duration::from_secs(1)
        );
    }
    use super::*;
    use crate::clock::unix_millis;
    use time::macros::datetime;

    const T0: OffsetDateTime = datetime!(2026-01-01 00:00 UTC);
    const MIN: time::Duration = time::Duration::MINUTE;
    const W: Duration = REFRESH_WINDOW;

    #[test]
    fn freshness_boundaries() {
        let (refresh, expires) = (unix_millis(T0 + 55 * MIN), unix_millis(T0 + 60 * MIN));
        let at = |now| freshness(now, refresh, expires);
        assert_eq!(at(unix_millis(T0)), Freshness::Fresh);
        assert_eq!(at(refresh - 1), Freshness::Fresh);
        assert_eq!(at(refresh), Freshness::RefreshAhead);
        assert_eq!(at(expires - EXPIRY_MARGIN_MS - 1), Freshness::RefreshAhead);
        assert_eq!(at(expires - EXPIRY_MARGIN_MS), Freshness::Expired);
        assert_eq!(at(expires + 3_600_000), Freshness::Expired);
    }

    #[test]
    fn refresh_times() {
        let hour = T0 + time::Duration::seconds(3599);
        assert_eq!(refresh_at(T0, hour, None, W, 0.0), hour - 5 * MIN);
        // Jitter moves it earlier, by at most 60 s.
        let jittered = refresh_at(T0, hour, None, W, 0.999);
        assert!(jittered < hour - 5 * MIN && jittered >= hour - 6 * MIN);
        // Long tokens at half-life; short ones (under 10 min) too.
        let day = T0 + time::Duration::hours(24);
        assert_eq!(refresh_at(T0, day, None, W, 0.0), T0 + 12 * 60 * MIN);
        assert_eq!(refresh_at(T0, T0 + 4 * MIN, None, W, 0.0), T0 + 2 * MIN);
        // `refresh_in` is honoured, but the window opens 5 minutes before expiry.
        let (expires, asked) = (T0 + 60 * MIN, T0 + 30 * MIN);
        assert_eq!(refresh_at(T0, expires, Some(asked), W, 0.0), asked);
        let late = Some(T0 + 58 * MIN);
        assert_eq!(refresh_at(T0, expires, late, W, 0.0), expires - 5 * MIN);
        for secs in [600i64, 3599, 7200, 7201, 86399] {
            let expires = T0 + time::Duration::seconds(secs);
            for jitter in [0.0, 0.5, 0.999] {
                let at = refresh_at(T0, expires, None, W, jitter);
                assert!(
                    at <= expires - to_time(REFRESH_WINDOW) && at >= T0,
                    "{secs}"
                );
            }
        }
    }

    #[test]
    fn a_wider_window_opens_earlier_and_never_narrower_than_five_minutes() {
        let hour = T0 + 60 * MIN;
        let wide = Duration::from_secs(15 * 60);
        assert_eq!(refresh_at(T0, hour, None, wide, 0.0), hour - 15 * MIN);
        // A server's later `refresh_in` does not close it.
        let late = Some(T0 + 50 * MIN);
        assert_eq!(refresh_at(T0, hour, late, wide, 0.0), hour - 15 * MIN);
        // Narrower than 5 minutes is taken as 5; half the lifetime still caps it.
        assert_eq!(
            refresh_at(T0, hour, None, Duration::from_secs(60), 0.0),
            hour - 5 * MIN
        );
        let short = T0 + 20 * MIN;
        assert_eq!(refresh_at(T0, short, None, wide, 0.0), T0 + 10 * MIN);
    }

    #[test]
    fn backoff_is_at_least_30s_and_grows() {
        let secs = |n| refresh_backoff(n, 0.0).as_secs();
        assert_eq!([secs(1), secs(2), secs(3), secs(30)], [30, 60, 120, 600]);
        assert!(refresh_backoff(1, 0.99) <= Duration::from_secs(33));
    }

    #[test]
    fn a_token_near_its_end_is_retried_at_the_first_backoff_however_long_the_run() {
        let (now, memory) = (1_000_000, Duration::from_secs(5));
        let tenth = settled(now, 9, Some(true), memory, 0.0);
        assert_eq!(tenth.quiet_until, now + 600_000);
        // An hour from its end: the run's backoff (10 minutes).
        assert_eq!(near_end_quiet(now, tenth, now + 3_600_000), now + 600_000);
        // Within 10 minutes of it, or past it: 30 s.
        assert_eq!(near_end_quiet(now, tenth, now + 600_000), now + 30_000);
        assert_eq!(near_end_quiet(now, tenth, now - 1), now + 30_000);
        // Never before the error's own memory ends (a long Retry-After it holds).
        let held = Settled {
            error_until: Some(now + 120_000),
            ..tenth
        };
        assert_eq!(near_end_quiet(now, held, now + 60_000), now + 120_000);
        // A success has no backoff to shorten.
        let ok = settled(now, 9, None, memory, 0.0);
        assert_eq!(near_end_quiet(now, ok, now + 60_000), i64::MIN);
    }

    #[test]
    fn an_expired_token_counts_for_the_soonest_expiry_only_while_its_scope_fails() {
        assert!(losable(1_000, 2_000, 0));
        assert!(losable(3_000, 2_000, 1));
        assert!(!losable(3_000, 2_000, 0));
        assert!(!losable(2_000, 2_000, 0));
    }

    #[test]
    fn a_full_cache_evicts_an_eighth_at_a_time() {
        assert_eq!(evict_count(999, 1000), 0);
        assert_eq!(evict_count(1000, 1000), 126);
        assert_eq!(evict_count(1003, 1000), 129);
        assert_eq!(evict_count(4, 4), 1);
        assert_eq!(evict_count(1, 1), 1);
    }

    #[test]
    fn failures_are_remembered_briefly_and_back_off() {
        let (now, memory) = (1_000_000, Duration::from_secs(5));
        let ok = settled(now, 3, None, memory, 0.5);
        assert_eq!(
            (ok.failures, ok.error_until, ok.quiet_until),
            (0, None, i64::MIN)
        );
        // A failure that reached the service: its error for `memory`, the backoff after.
        let first = settled(now, 0, Some(true), memory, 0.0);
        assert_eq!(first.failures, 1);
        assert_eq!(first.error_until, Some(now + 5_000));
        assert_eq!(first.quiet_until, now + 30_000);
        let third = settled(now, 2, Some(true), memory, 0.0);
        assert_eq!((third.failures, third.quiet_until), (3, now + 120_000));
        // A refusal made here is not remembered, but still backs off.
        let local = settled(now, 0, Some(false), memory, 0.0);
        assert_eq!((local.error_until, local.quiet_until), (None, now + 30_000));
        assert_eq!(
            settled(now, 0, Some(true), Duration::ZERO, 0.0).error_until,
            Some(now)
        );
        assert_eq!(after(i64::MAX - 1, Duration::MAX), i64::MAX);
    }
}

//! The token cache: one slot per scope set, single flight, refresh ahead.
//!
//! Each credential has one cache (its authority, tenant and client id are fixed), so the
//! cache key is the scope list **as given**: same scopes in the same order share a slot;
//! no normalisation (case, order, trailing `/`) is applied.
//!
//! - **Hit path**: a read of the cache's generation counter, this thread's copy of the
//!   cache's snapshot (a thread-local), a hash lookup by the borrowed scopes, a time
//!   comparison (a coarse clock read), and a clone of the calling thread's copy of the
//!   token: no lock, no allocation, and no cache line written that another thread also
//!   writes.
//! - **Single flight**: a miss (or an expired token) joins the slot's one request in
//!   flight or starts it. The request runs in a spawned task, so a caller that gives up
//!   does not cancel it for the others; every waiter gets its result or its error.
//! - **Refresh ahead**: inside the refresh window (see [`refresh_at`]) callers get the
//!   cached token at once and one background request replaces it. If that request fails,
//!   callers keep the cached token and the next attempt waits [`refresh_backoff`].
//!
//! Slots are never removed; after [`MAX_SLOTS`] distinct scope sets, further ones are
//! fetched without caching (a bound on memory for callers that invent scopes).

use std::cell::Cell;
use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use hashbrown::HashTable;
use time::OffsetDateTime;
use tokio::sync::watch;

use crate::clock::{Clock, to_time, unix_millis};
use crate::error::{ErrorKind, Result, TokenError};
use crate::published::{LocalCopies, Published};
use crate::token::access_token::AccessToken;

/// At most this many scope sets are cached per credential.
pub const MAX_SLOTS: usize = 1024;

/// The refresh window opens at least this long before expiry.
pub const REFRESH_WINDOW: Duration = Duration::from_secs(5 * 60);

/// Tokens this close to expiry are not handed out: a caller would get a token that may
/// expire before its request arrives.
pub const EXPIRY_MARGIN: Duration = Duration::from_secs(10);
const EXPIRY_MARGIN_MS: i64 = EXPIRY_MARGIN.as_millis() as i64;

/// Tokens living longer than this are refreshed at half-life.
const LONG_LIVED: time::Duration = time::Duration::hours(2);

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

/// Pure: when to start refreshing a token obtained at `issued`.
///
/// - With the server's `refresh_in` (`refresh_on`): then.
/// - Else, for tokens living over 2 h: at half-life (what MSAL does and what Entra's own
///   `refresh_in` advises), so an outage of hours is ridden out on the cached token.
/// - Else: at expiry − 5 min.
///
/// Whatever the rule gives, the window opens at least 5 minutes before expiry (half the
/// lifetime for tokens shorter than 10 minutes), because `azure_core`'s
/// `BearerTokenAuthorizationPolicy` asks for a new token on every request in the last 5
/// minutes. `jitter` in `[0, 1)` moves the time earlier by up to 10% of the time until
/// it, at most 60 s, so replicas started together do not refresh together.
pub(crate) fn refresh_at(
    issued: OffsetDateTime,
    expires_on: OffsetDateTime,
    refresh_on: Option<OffsetDateTime>,
    jitter: f64,
) -> OffsetDateTime {
    let lifetime = expires_on - issued;
    let half: time::Duration = lifetime / 2i32;
    let latest = expires_on - to_time(REFRESH_WINDOW).min(half);
    let planned = match refresh_on {
        Some(at) => at.min(latest),
        None if lifetime > LONG_LIVED => issued + half,
        None => latest,
    };
    let until: time::Duration = planned - issued;
    let spread: time::Duration = until / 10i32;
    let spread = spread.min(time::Duration::seconds(60));
    let spread = spread.max(time::Duration::ZERO);
    (planned - spread * jitter.clamp(0.0, 1.0)).max(issued)
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

/// Per-credential token cache.
pub(crate) struct TokenCache {
    shared: Arc<Shared>,
    hasher: foldhash::fast::RandomState,
}

/// The cache's published state: an immutable snapshot replaced whole on every change (a
/// new scope set, a new token, a clear); readers use their thread's copy (see
/// [`Published`]), so the hit path writes nothing another thread writes.
type Shared = Published<Snapshot>;

thread_local! {
    static CACHE_COPIES: LocalCopies<Snapshot> = const { LocalCopies::new() };
}

#[derive(Clone, Default)]
struct Snapshot {
    entries: HashTable<Entry>,
}

#[derive(Clone)]
struct Entry {
    hash: u64,
    slot: Arc<Slot>,
    cached: Option<Arc<Cached>>,
}

/// One scope set: its request state. Its token lives in the snapshot's [`Entry`].
struct Slot {
    scopes: Box<[Box<str>]>,
    joined: Arc<str>,
    /// A request is running: the hit path checks this before locking.
    refreshing: AtomicBool,
    /// No background refresh before this Unix time (milliseconds), after failures.
    retry_not_before: AtomicI64,
    state: Mutex<SlotState>,
}

#[derive(Default)]
struct SlotState {
    inflight: Option<watch::Receiver<Option<Result<AccessToken>>>>,
    failures: u32,
}

/// A cached token: one copy per stripe, so threads clone different reference counts.
struct Cached {
    stripes: Box<[AccessToken]>,
    /// Unix milliseconds.
    refresh_at: i64,
    /// Unix milliseconds.
    expires_on: i64,
}

impl Cached {
    fn new(token: &AccessToken, refresh_at: OffsetDateTime) -> Self {
        let stripes = (0..stripe_count()).map(|_| token.detached_copy()).collect();
        Cached {
            stripes,
            refresh_at: unix_millis(refresh_at),
            expires_on: unix_millis(token.expires_on()),
        }
    }

    fn for_this_thread(&self) -> Option<AccessToken> {
        let i = stripe_index() % self.stripes.len().max(1);
        self.stripes.get(i).cloned()
    }
}

fn stripe_count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    *COUNT.get_or_init(|| {
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(1)
            .clamp(1, 16)
    })
}

fn stripe_index() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    STRIPE.with(|s| {
        let v = s.get();
        if v != usize::MAX {
            return v;
        }
        let v = NEXT.fetch_add(1, Ordering::Relaxed);
        s.set(v);
        v
    })
}

/// What the caller of [`TokenCache::get`] supplies: a fetch of a new token for the
/// space-joined scopes, runnable in a spawned task.
pub(crate) trait Fetch: Send + Sync + 'static {
    /// Fetch a token for `scope` (space-joined scopes).
    fn fetch(
        self: &Arc<Self>,
        scope: Arc<str>,
    ) -> impl Future<Output = Result<AccessToken>> + Send + 'static;
}

impl TokenCache {
    pub(crate) fn new() -> Self {
        TokenCache {
            shared: Arc::new(Published::new(Snapshot::default(), &CACHE_COPIES)),
            hasher: foldhash::fast::RandomState::default(),
        }
    }

    fn hash(&self, scopes: &[impl AsRef<str>]) -> u64 {
        let mut h = self.hasher.build_hasher();
        for s in scopes {
            h.write(s.as_ref().as_bytes());
            h.write_u8(0xff);
        }
        h.finish()
    }

    /// The cached token for `scopes`, if it can be handed out at `now` (Unix ms): the hit
    /// path. Starts a background refresh when the token is in its refresh window.
    pub(crate) fn get_cached<F: Fetch>(
        &self,
        scopes: &[&str],
        now: i64,
        clock: &Arc<dyn Clock>,
        fetcher: &Arc<F>,
    ) -> Option<AccessToken> {
        let hash = self.hash(scopes);
        self.shared.read(|snapshot| {
            let entry = snapshot.entries.find(hash, |e| e.matches(hash, scopes))?;
            entry.serve(now, &self.shared, clock, fetcher)
        })
    }

    /// Get a token: from the cache, or by joining or starting the slot's one request.
    pub(crate) async fn get<F: Fetch>(
        &self,
        scopes: &[&str],
        clock: &Arc<dyn Clock>,
        fetcher: &Arc<F>,
    ) -> Result<AccessToken> {
        if let Some(token) = self.get_cached(scopes, clock.now_unix_millis(), clock, fetcher) {
            return Ok(token);
        }
        let Some(slot) = self.slot(scopes) else {
            // Over MAX_SLOTS: no caching for new scope sets.
            return fetcher.fetch(Arc::from(scopes.join(" "))).await;
        };
        let mut rx = {
            let mut state = slot.state.lock().unwrap_or_else(|e| e.into_inner());
            // Re-check: a request may have completed since the lookup above.
            if let Some(token) = self.get_cached(scopes, clock.now_unix_millis(), clock, fetcher) {
                return Ok(token);
            }
            match &state.inflight {
                Some(rx) => rx.clone(),
                None => Slot::start(&slot, &self.shared, &mut state, clock, fetcher)?,
            }
        };
        let abandoned = || {
            ErrorKind::Token(TokenError::RequestAbandoned {
                reason: "the task running it ended without an answer (runtime shutting down?)",
            })
        };
        match rx.wait_for(Option::is_some).await {
            Ok(result) => match &*result {
                Some(r) => r.clone(),
                None => Err(abandoned().into()),
            },
            Err(_) => Err(abandoned().into()),
        }
    }

    /// The slot for `scopes`, created if need be (None past MAX_SLOTS).
    fn slot(&self, scopes: &[&str]) -> Option<Arc<Slot>> {
        let hash = self.hash(scopes);
        let find = |snapshot: &Snapshot| {
            snapshot
                .entries
                .find(hash, |e| e.matches(hash, scopes))
                .map(|e| e.slot.clone())
        };
        if let Some(slot) = self.shared.read(find) {
            return Some(slot);
        }
        let mut found = None;
        let mut full = false;
        self.shared.update(|current| {
            if let Some(slot) = find(current) {
                found = Some(slot);
                return None;
            }
            if current.entries.len() >= MAX_SLOTS {
                full = true;
                return None;
            }
            let slot = Arc::new(Slot {
                scopes: scopes.iter().map(|s| Box::from(*s)).collect(),
                joined: Arc::from(scopes.join(" ")),
                refreshing: AtomicBool::new(false),
                retry_not_before: AtomicI64::new(i64::MIN),
                state: Mutex::new(SlotState::default()),
            });
            found = Some(slot.clone());
            let mut snapshot = current.clone();
            snapshot.entries.insert_unique(
                hash,
                Entry {
                    hash,
                    slot,
                    cached: None,
                },
                |e| e.hash,
            );
            Some(snapshot)
        });
        if full {
            tracing::warn!(
                limit = MAX_SLOTS,
                "token cache full; this scope set is not cached"
            );
        }
        found
    }

    /// The scope sets holding a token still unexpired at `now` (Unix ms), at most `max`
    /// of them: what this cache served within about a token's lifetime (the hit path
    /// records nothing, so this is the measure of "recently").
    pub(crate) fn live_scopes(&self, now: i64, max: usize) -> Vec<Vec<String>> {
        self.shared.read(|snapshot| {
            snapshot
                .entries
                .iter()
                .filter(|e| e.cached.as_ref().is_some_and(|c| now < c.expires_on))
                .take(max)
                .map(|e| e.slot.scopes.iter().map(|s| s.to_string()).collect())
                .collect()
        })
    }

    /// Drop every cached token (slots stay). Requests in flight complete and are cached.
    pub(crate) fn clear(&self) {
        self.shared.update(|current| {
            let mut snapshot = current.clone();
            for entry in snapshot.entries.iter_mut() {
                entry.cached = None;
            }
            Some(snapshot)
        });
    }
}

impl Entry {
    fn matches(&self, hash: u64, scopes: &[&str]) -> bool {
        self.hash == hash
            && self.slot.scopes.len() == scopes.len()
            && self.slot.scopes.iter().zip(scopes).all(|(a, b)| **a == **b)
    }

    /// The cached token if it can be handed out at `now`; in the refresh window, also
    /// start the background refresh unless one runs or a failure backoff holds.
    fn serve<F: Fetch>(
        &self,
        now: i64,
        shared: &Arc<Shared>,
        clock: &Arc<dyn Clock>,
        fetcher: &Arc<F>,
    ) -> Option<AccessToken> {
        let cached = self.cached.as_ref()?;
        match freshness(now, cached.refresh_at, cached.expires_on) {
            Freshness::Fresh => cached.for_this_thread(),
            Freshness::RefreshAhead => {
                let slot = &self.slot;
                if !slot.refreshing.load(Ordering::Acquire)
                    && now >= slot.retry_not_before.load(Ordering::Acquire)
                {
                    slot.refresh_in_background(shared, clock, fetcher);
                }
                cached.for_this_thread()
            }
            Freshness::Expired => None,
        }
    }
}

impl Slot {
    fn refresh_in_background<F: Fetch>(
        self: &Arc<Self>,
        shared: &Arc<Shared>,
        clock: &Arc<dyn Clock>,
        fetcher: &Arc<F>,
    ) {
        // `try_lock`: the hit path never waits for a lock; whoever holds it is starting
        // or finishing a request for this slot anyway.
        let Ok(mut state) = self.state.try_lock() else {
            return;
        };
        if state.inflight.is_none() && !self.refreshing.load(Ordering::Acquire) {
            tracing::debug!(scope = %self.joined, "refreshing token ahead of expiry");
            if let Err(e) = Slot::start(self, shared, &mut state, clock, fetcher) {
                tracing::warn!(scope = %self.joined, error = %e, "cannot start the token refresh");
            }
        }
    }

    /// Start the slot's request (the caller holds the state lock and saw none in flight).
    fn start<F: Fetch>(
        slot: &Arc<Slot>,
        shared: &Arc<Shared>,
        state: &mut SlotState,
        clock: &Arc<dyn Clock>,
        fetcher: &Arc<F>,
    ) -> Result<watch::Receiver<Option<Result<AccessToken>>>> {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return Err(ErrorKind::Token(TokenError::RequestAbandoned {
                reason: "no Tokio runtime to run it on",
            })
            .into());
        };
        let (tx, rx) = watch::channel(None);
        state.inflight = Some(rx.clone());
        slot.refreshing.store(true, Ordering::Release);
        let mut guard = FlightGuard {
            slot: slot.clone(),
            shared: shared.clone(),
            done: false,
        };
        let clock = clock.clone();
        let request = fetcher.fetch(slot.joined.clone());
        let task = async move {
            let started = clock.now();
            let result = request.await;
            guard.complete(&result, started, clock.as_ref());
            // Waiters may all have gone; nothing to do then.
            let _ = tx.send(Some(result));
        };
        handle.spawn(task);
        Ok(rx)
    }
}

/// Clears the slot's in-flight state however the request ends (completion, panic, or its
/// task dropped at runtime shutdown), so the next caller can start a new one.
struct FlightGuard {
    slot: Arc<Slot>,
    shared: Arc<Shared>,
    done: bool,
}

impl FlightGuard {
    /// Record the result and clear the in-flight state, in one critical section and
    /// before any waiter is woken: whoever comes next sees the new token (or the backoff)
    /// and no request in flight.
    fn complete(
        &mut self,
        result: &Result<AccessToken>,
        started: OffsetDateTime,
        clock: &dyn Clock,
    ) {
        self.done = true;
        let slot = &self.slot;
        let mut state = slot.state.lock().unwrap_or_else(|e| e.into_inner());
        state.inflight = None;
        slot.refreshing.store(false, Ordering::Release);
        match result {
            Ok(token) => {
                let at = refresh_at(
                    started,
                    token.expires_on(),
                    token.refresh_on(),
                    crate::http::retry::jitter(),
                );
                let cached = Arc::new(Cached::new(token, at));
                self.shared.update(|current| {
                    let mut snapshot = current.clone();
                    for entry in snapshot.entries.iter_mut() {
                        if Arc::ptr_eq(&entry.slot, slot) {
                            entry.cached = Some(cached.clone());
                        }
                    }
                    Some(snapshot)
                });
                state.failures = 0;
                slot.retry_not_before.store(i64::MIN, Ordering::Release);
            }
            Err(error) => {
                state.failures = state.failures.saturating_add(1);
                let wait = refresh_backoff(state.failures, crate::http::retry::jitter());
                let now = clock.now_unix_millis();
                let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
                slot.retry_not_before
                    .store(now.saturating_add(wait_ms), Ordering::Release);
                let still_valid = self.shared.load_full().entries.iter().any(|e| {
                    Arc::ptr_eq(&e.slot, slot)
                        && e.cached.as_ref().is_some_and(|c| {
                            freshness(now, c.refresh_at, c.expires_on) != Freshness::Expired
                        })
                });
                if still_valid {
                    tracing::warn!(
                        scope = %slot.joined,
                        error = %error,
                        failures = state.failures,
                        retry_in_secs = wait.as_secs(),
                        "token refresh failed; serving the cached token until it expires"
                    );
                } else {
                    tracing::warn!(scope = %slot.joined, error = %error, "token request failed");
                }
            }
        }
    }
}

impl Drop for FlightGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let mut state = self.slot.state.lock().unwrap_or_else(|e| e.into_inner());
        state.inflight = None;
        self.slot.refreshing.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::macros::datetime;

    const T0: OffsetDateTime = datetime!(2026-01-01 00:00 UTC);

    #[test]
    fn freshness_boundaries() {
        let ms = unix_millis;
        let refresh = ms(T0 + time::Duration::minutes(55));
        let expires = ms(T0 + time::Duration::minutes(60));
        assert_eq!(freshness(ms(T0), refresh, expires), Freshness::Fresh);
        assert_eq!(freshness(refresh - 1, refresh, expires), Freshness::Fresh);
        assert_eq!(
            freshness(refresh, refresh, expires),
            Freshness::RefreshAhead
        );
        assert_eq!(
            freshness(expires - EXPIRY_MARGIN_MS - 1, refresh, expires),
            Freshness::RefreshAhead
        );
        assert_eq!(
            freshness(expires - EXPIRY_MARGIN_MS, refresh, expires),
            Freshness::Expired
        );
        assert_eq!(
            freshness(expires + 3_600_000, refresh, expires),
            Freshness::Expired
        );
        assert_eq!(EXPIRY_MARGIN.as_millis(), 10_000);
    }

    #[test]
    fn one_hour_token_refreshes_five_minutes_before_expiry() {
        let expires = T0 + time::Duration::seconds(3599);
        assert_eq!(
            refresh_at(T0, expires, None, 0.0),
            expires - time::Duration::minutes(5)
        );
        // Jitter moves it earlier, by at most 60 s.
        let jittered = refresh_at(T0, expires, None, 0.999);
        assert!(jittered < expires - time::Duration::minutes(5));
        assert!(jittered >= expires - time::Duration::minutes(6));
    }

    #[test]
    fn long_token_refreshes_at_half_life() {
        let expires = T0 + time::Duration::hours(24);
        assert_eq!(
            refresh_at(T0, expires, None, 0.0),
            T0 + time::Duration::hours(12)
        );
    }

    #[test]
    fn refresh_in_is_honoured_but_window_opens_five_minutes_before_expiry() {
        let expires = T0 + time::Duration::hours(1);
        let asked = T0 + time::Duration::minutes(30);
        assert_eq!(refresh_at(T0, expires, Some(asked), 0.0), asked);
        let too_late = T0 + time::Duration::minutes(58);
        assert_eq!(
            refresh_at(T0, expires, Some(too_late), 0.0),
            expires - REFRESH_WINDOW
        );
    }

    #[test]
    fn short_token_refreshes_at_half_life() {
        let expires = T0 + time::Duration::minutes(4);
        assert_eq!(
            refresh_at(T0, expires, None, 0.0),
            T0 + time::Duration::minutes(2)
        );
    }

    #[test]
    fn window_always_opens_at_least_five_minutes_early() {
        for secs in [600i64, 3599, 7200, 7201, 86399] {
            let expires = T0 + time::Duration::seconds(secs);
            for jitter in [0.0, 0.5, 0.999] {
                let at = refresh_at(T0, expires, None, jitter);
                assert!(at <= expires - REFRESH_WINDOW, "{secs} {jitter}");
                assert!(at >= T0);
            }
        }
    }

    #[test]
    fn backoff_is_at_least_30s_and_grows() {
        assert_eq!(refresh_backoff(1, 0.0), Duration::from_secs(30));
        assert_eq!(refresh_backoff(2, 0.0), Duration::from_secs(60));
        assert_eq!(refresh_backoff(3, 0.0), Duration::from_secs(120));
        assert_eq!(refresh_backoff(30, 0.0), Duration::from_secs(600));
        assert!(refresh_backoff(1, 0.99) <= Duration::from_secs(33));
    }
}

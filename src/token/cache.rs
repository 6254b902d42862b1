//! The token cache: the one cache of a credential's tokens (its own tenant, its other
//! tenants, the data plane client, the token server), keyed by tenant (`None`: the
//! fetcher's own; others lower-cased by the callers) and the scope list **as given**.
//! The rules are [`guide::token_cache`](crate::guide::token_cache)'s, as pure functions
//! in [`super::refresh`]; here is how they are kept:
//!
//! - one map from a key to its [`Slot`] (its token, requests and failures) behind one
//!   `RwLock`: a hit takes the read lock and clones the token (no allocation); a miss
//!   takes the write lock to decide ([`step`]), a request to land; no lock is held across
//!   an `.await`;
//! - a key's request is a task of its own ([`exchange::runtime`]) whose callers await its
//!   answer on a `watch` channel: a caller that stops waiting cancels no one, and a task
//!   that ends without answering (a panic, its runtime shutting down) drops the sender,
//!   which ends the request (`RequestAbandoned`) for its callers and the next one.

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use hashbrown::{Equivalent, HashMap};
use time::OffsetDateTime;
use tokio::sync::watch;

use crate::clock::{Clock, from_unix_millis, unix_millis};
use crate::error::{Error, ErrorKind, Result};
use crate::http::exchange;
use crate::http::retry::jitter;
use crate::log_budget::LogBudget;
use crate::telemetry;
use crate::token::access_token::AccessToken;
use crate::token::options::ClientCertificateCredentialOptions;
use crate::token::refresh::{
    Freshness, evict_count, freshness, losable, near_end_quiet, refresh_at, settled,
};
use crate::untrusted_text::service_text;

/// The cache (see the module docs), shared with its requests in flight.
pub(crate) struct TokenCache {
    table: RwLock<Map>,
    /// The credential's client id: its warnings and gauges name it.
    client_id: Arc<str>,
    clock: Arc<dyn Clock>,
    /// Refresh tokens at least this long before they expire ([`refresh_at`]).
    window: Duration,
    max_entries: usize,
    failure_memory: Duration,
    /// The warning of a failed request, and the note of an answer from the failure
    /// memory: a flood of failing scopes writes a few lines and a count.
    failure_log: LogBudget,
    remembered_log: LogBudget,
}

type Map = HashMap<Arc<Key>, Slot>;

/// A tenant and scope list: what the map holds.
#[derive(Hash, PartialEq, Eq)]
struct Key {
    tenant: Option<Arc<str>>,
    scopes: Box<[Box<str>]>,
}

/// A key as callers hold it, borrowed. Its derived `Hash` is the [`Key`]'s: std hashes
/// `Arc<str>`, `Box<str>` and `&str` as `str`, and a boxed slice as a slice.
#[derive(Hash)]
struct Query<'a> {
    tenant: Option<&'a str>,
    scopes: &'a [&'a str],
}

impl Equivalent<Arc<Key>> for Query<'_> {
    fn equivalent(&self, key: &Arc<Key>) -> bool {
        key.tenant.as_deref() == self.tenant
            && key
                .scopes
                .iter()
                .map(|s| &**s)
                .eq(self.scopes.iter().copied())
    }
}

/// A key's token and requests (times in Unix ms).
#[derive(Default)]
struct Slot {
    token: Option<AccessToken>,
    /// The token's times: when its refresh is due ([`refresh_at`]), when it expires.
    refresh_at: i64,
    expires_on: i64,
    /// When a caller last asked for it (written by hits, under the read lock).
    used_at: AtomicI64,
    /// The request in flight, while its task holds the sender ([`Slot::in_flight`]).
    inflight: Option<Answer>,
    /// No background request before this time: the backoff's end after failures.
    quiet_until: i64,
    /// Consecutive failures.
    failures: u32,
    /// The last request's error and until when it is the answer.
    failed: Option<(Error, i64)>,
}

/// What the callers of a request await: its result, once it has one.
type Answer = watch::Receiver<Option<Result<AccessToken>>>;

/// What the caller supplies: a fetch of a new token, run as a task of its own.
pub(crate) trait Fetch: Send + Sync + 'static {
    /// A token in `tenant` (`None`: its own) for `scope` (space-joined).
    fn fetch(
        self: &Arc<Self>,
        tenant: Option<Arc<str>>,
        scope: Arc<str>,
    ) -> impl Future<Output = Result<AccessToken>> + Send + 'static;
}

/// What a miss does, decided from a slot ([`step`]).
enum Step {
    Hit(AccessToken),
    Join(Answer),
    Failed(Error),
}

impl TokenCache {
    /// An empty cache of `client_id`'s tokens whose times come from `clock`, bounded as
    /// `options` say.
    pub(crate) fn new(
        client_id: &str,
        clock: Arc<dyn Clock>,
        options: &ClientCertificateCredentialOptions,
    ) -> Arc<Self> {
        Arc::new(TokenCache {
            table: RwLock::new(HashMap::new()),
            client_id: Arc::from(client_id),
            clock,
            window: options.refresh_window,
            max_entries: options.max_cached_scopes,
            failure_memory: options.failure_memory,
            failure_log: LogBudget::new(),
            remembered_log: LogBudget::new(),
        })
    }

    /// The cached token for `scopes` in `tenant` if it can be handed out now: the hit
    /// path. Inside the refresh window it also starts the background refresh.
    pub(crate) fn get_cached<F: Fetch>(
        self: &Arc<Self>,
        tenant: Option<&str>,
        scopes: &[&str],
        fetcher: &Arc<F>,
    ) -> Option<AccessToken> {
        let table = self.read();
        let slot = table.get(&Query { tenant, scopes })?;
        let token = slot.token.as_ref()?;
        // Read once the slot is found: before the lock it made a hit on two threads
        // contend longer (BENCHMARKS.md).
        let now = self.clock.now_unix_millis();
        let freshness = freshness(now, slot.refresh_at, slot.expires_on);
        if freshness == Freshness::Expired {
            return None;
        }
        // Written at most once per millisecond: hits on other CPUs rarely share the line.
        if slot.used_at.load(Ordering::Relaxed) < now {
            slot.used_at.store(now, Ordering::Relaxed);
        }
        let token = token.clone();
        let due = |s: &Slot| s.in_flight().is_none() && now >= s.quiet_until;
        if freshness == Freshness::RefreshAhead && due(slot) {
            drop(table);
            let runtime = exchange::runtime();
            // Again under the write lock: another hit may have started it meanwhile.
            let table = self.write();
            if let Some((key, slot)) = table.get_key_value(&Query { tenant, scopes })
                && due(slot)
            {
                let key = key.clone();
                tracing::debug!(scope = %service_text(&key.scopes.join(" ")), "refreshing token ahead of expiry");
                if let Err(e) = self.start(table, key, fetcher, runtime) {
                    tracing::debug!(error = %e, "cannot start the token refresh");
                }
            }
        }
        Some(token)
    }

    /// Get a token other than `rejected` (if given): a usable cached one, the answer of
    /// the key's request in flight (joined), the error of a request that failed within
    /// the failure memory, or that of a new request, which starts only if `admit()` says
    /// so (`None` when it does not).
    pub(crate) async fn get<F: Fetch>(
        self: &Arc<Self>,
        tenant: Option<&str>,
        scopes: &[&str],
        fetcher: &Arc<F>,
        rejected: Option<&AccessToken>,
        admit: impl FnOnce() -> bool,
    ) -> Result<Option<AccessToken>> {
        let (query, runtime) = (Query { tenant, scopes }, exchange::runtime());
        let now = self.clock.now_unix_millis();
        let step = {
            let mut table = self.write();
            let (key, step) = match table.get_key_value(&query) {
                Some((key, slot)) => (key.clone(), step(slot, now, rejected)),
                None => (self.add(&mut table, &query, now), None),
            };
            match step {
                Some(step) => step,
                None if !admit() => return Ok(None),
                None => Step::Join(self.start(table, key, fetcher, runtime)?),
            }
        };
        match step {
            Step::Hit(token) => Ok(Some(token)),
            Step::Join(answer) => wait(answer).await.map(Some),
            Step::Failed(error) => {
                if let Some(left_out) = self.remembered_log.admit(now) {
                    tracing::debug!(
                        scope = %service_text(&scopes.join(" ")),
                        left_out,
                        "the last token request failed moments ago; its error again (left_out: such lines not written since the last)"
                    );
                }
                Err(error)
            }
        }
    }

    /// Up to `max` scope sets holding an unexpired token in the fetcher's own tenant.
    pub(crate) fn live_scopes(&self, max: usize) -> Vec<Vec<String>> {
        let now = self.clock.now_unix_millis();
        let table = self.read();
        let live = |(k, s): &(&Arc<Key>, &Slot)| {
            k.tenant.is_none() && s.token.is_some() && now < s.expires_on
        };
        let scopes = |(k, _): (&Arc<Key>, _)| k.scopes.iter().map(|s| s.to_string()).collect();
        let live = table.iter().filter(live);
        live.take(max).map(scopes).collect()
    }

    /// Drop every cached token and remembered failure (keys stay). Requests in flight
    /// complete and are cached.
    pub(crate) fn clear(&self) {
        for slot in self.write().values_mut() {
            (slot.token, slot.failed) = (None, None);
        }
    }

    fn read(&self) -> RwLockReadGuard<'_, Map> {
        self.table.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Map> {
        self.table.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Add a slot for `query` (not in the map), after the least recently used leave when
    /// the cache is full ([`evict_count`]), none with a request in flight.
    fn add(&self, table: &mut Map, query: &Query<'_>, now: i64) -> Arc<Key> {
        let (len, max) = (table.len(), self.max_entries);
        if len >= max {
            let idle = table.iter().filter(|(_, s)| s.in_flight().is_none());
            let mut idle: Vec<_> = idle
                .map(|(k, s)| (s.used_at.load(Ordering::Relaxed), k.clone()))
                .collect();
            let count = evict_count(len, max).min(idle.len());
            if count > 0 {
                idle.select_nth_unstable_by_key(count - 1, |(used_at, _)| *used_at);
                for (_, key) in &idle[..count] {
                    table.remove(key);
                }
                tracing::debug!(
                    evicted = count,
                    max,
                    "token cache full; the least recently used left"
                );
            }
        }
        let key = Arc::new(Key {
            tenant: query.tenant.map(Arc::from),
            scopes: query.scopes.iter().map(|s| Box::from(*s)).collect(),
        });
        table.insert(key.clone(), Slot::new(now));
        key
    }

    /// Start `key`'s request (the caller saw none in flight): marked in flight under
    /// `table`'s lock, then, the lock released, run as a task of its own on `runtime`
    /// ([`exchange::runtime`], found before the lock). The answer its callers await.
    fn start<F: Fetch>(
        self: &Arc<Self>,
        mut table: RwLockWriteGuard<'_, Map>,
        key: Arc<Key>,
        fetcher: &Arc<F>,
        runtime: Result<tokio::runtime::Handle, exchange::Abandoned>,
    ) -> Result<Answer> {
        let runtime = runtime.map_err(|a| abandoned(a.0))?;
        let (tx, answer) = watch::channel(None);
        if let Some(slot) = table.get_mut(&key) {
            slot.inflight = Some(answer.clone());
        }
        drop(table);
        let scope: Arc<str> = Arc::from(key.scopes.join(" "));
        let request = fetcher.fetch(key.tenant.clone(), scope.clone());
        let (cache, started) = (self.clone(), self.clock.now());
        let flight = Flight {
            cache,
            key,
            scope,
            tx,
        };
        // On a runtime shutting down the task, and `flight` with it, is dropped at once.
        drop(runtime.spawn(async move {
            let result = request.await;
            flight.land(result, started);
        }));
        Ok(answer)
    }
}

/// What a miss does with `slot` at `now`: hand out its usable token (unless it is
/// `rejected`), join its request in flight, or answer its remembered failure; `None`:
/// start a request.
fn step(slot: &Slot, now: i64, rejected: Option<&AccessToken>) -> Option<Step> {
    if let Some(token) = &slot.token
        && freshness(now, slot.refresh_at, slot.expires_on) != Freshness::Expired
        && rejected.is_none_or(|r| r.token() != token.token())
    {
        return Some(Step::Hit(token.clone()));
    }
    match (slot.in_flight(), &slot.failed) {
        (Some(answer), _) => Some(Step::Join(answer.clone())),
        (None, Some((error, until))) if now < *until => Some(Step::Failed(error.clone())),
        _ => None,
    }
}

impl Slot {
    /// A slot without token or request, added (and last used) at `now`.
    fn new(now: i64) -> Self {
        let used_at = AtomicI64::new(now);
        Slot {
            used_at,
            ..Slot::default()
        }
    }

    /// Its request in flight, if one is: one whose task ended without answering closed
    /// the channel, which ends it for its callers and for the next one.
    fn in_flight(&self) -> Option<&Answer> {
        self.inflight.as_ref().filter(|a| a.has_changed().is_ok())
    }
}

/// Wait for the request's answer.
async fn wait(mut answer: Answer) -> Result<AccessToken> {
    match answer.wait_for(Option::is_some).await.as_deref() {
        Ok(Some(result)) => result.clone(),
        _ => Err(abandoned(
            "the task running it ended without an answer (a panic, or its runtime shutting down)",
        )),
    }
}

fn abandoned(reason: &'static str) -> Error {
    Error::abandoned(
        "request_abandoned",
        format!("the token request was abandoned: {reason}"),
    )
}

/// One request of a key, run in its task: [`land`](Flight::land) caches its result,
/// remembers a failure and answers the waiters.
struct Flight {
    cache: Arc<TokenCache>,
    key: Arc<Key>,
    /// The scopes space-joined: what the request asks for.
    scope: Arc<str>,
    tx: watch::Sender<Option<Result<AccessToken>>>,
}

impl Flight {
    fn land(self, result: Result<AccessToken>, started: OffsetDateTime) {
        let cache = &self.cache;
        let now = cache.clock.now_unix_millis();
        // An answer or a transport failure; not a refusal made here (validity).
        let reached = |e: &Error| {
            use ErrorKind::{Abandoned, External, InvalidAnswer, TokenEndpoint, Transport};
            matches!(
                e.kind(),
                TokenEndpoint(_)
                    | Transport(_)
                    | InvalidAnswer { .. }
                    | External { .. }
                    | Abandoned { .. }
            )
        };
        let mut table = cache.write();
        // A slot in flight never leaves the map (were it gone, it would come back).
        let slot = table
            .entry(self.key.clone())
            .or_insert_with(|| Slot::new(now));
        let failed = result.as_ref().err().map(reached);
        let next = settled(now, slot.failures, failed, cache.failure_memory, jitter());
        let result = result.map_err(|error| match next.error_until {
            Some(until) => error.with_retry_at(from_unix_millis(until)),
            None => error,
        });
        if let Ok(token) = &result {
            let (expires, asked) = (token.expires_on(), token.refresh_on());
            let at = refresh_at(started, expires, asked, cache.window, jitter());
            (slot.refresh_at, slot.expires_on) = (unix_millis(at), unix_millis(expires));
            slot.token = Some(token.clone());
        }
        let failed = result.as_ref().err().zip(next.error_until);
        slot.failed = failed.map(|(error, until)| (error.clone(), until));
        let quiet_until = near_end_quiet(now, next, slot.expires_on);
        (slot.failures, slot.quiet_until) = (next.failures, quiet_until);
        slot.inflight = None;
        let serving_cached = matches!(step(slot, now, None), Some(Step::Hit(_)));
        telemetry::token_soonest_expiry(&cache.client_id, || {
            let cached = table.values().filter(|s| s.token.is_some());
            let losable = cached.filter(|s| losable(now, s.expires_on, s.failures));
            losable.map(|s| s.expires_on).min()
        });
        drop(table);
        if let Err(error) = &result
            && let Some(left_out) = cache.failure_log.admit(now)
        {
            tracing::warn!(
                client_id = %cache.client_id,
                scope = %service_text(&self.scope),
                error = %error,
                failures = next.failures,
                retry_in_secs = (quiet_until - now) / 1000,
                serving_cached,
                left_out,
                "token request failed (left_out: failures of this credential not logged since the last line, at most 5 lines every 10 s)"
            );
        }
        // Waiters may all have gone; nothing to do then.
        let _ = self.tx.send(Some(result));
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // Its message may hold anything: not logged.
            tracing::error!(scope = %service_text(&self.scope), "a token request panicked; its callers get no answer");
        }
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;

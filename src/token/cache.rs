//! The token cache: the one cache of a credential's tokens (its own tenant, its other
//! tenants, the data plane client, the token server), keyed by tenant (`None`: the
//! fetcher's own; others lower-cased by the callers) and the scope list **as given**.
//!
//! - **Publication**: a concurrent map ([`papaya`]) from entry to token. A new entry or
//!   token writes one slot, never a copy of the table; readers take no lock, writers
//!   one short lock; what is replaced is freed once no reader holds it.
//! - **Hit path**: a lookup by the borrowed key, a coarse clock read, the last use noted,
//!   a clone of the token's handle for this CPU: no lock, no allocation.
//! - **Single flight**: a miss joins the entry's one request or starts it, run in the
//!   waiting callers' own tasks ([`Driven`]: whichever is polled drives it, in a task of
//!   its own once one leaves first); every waiter gets its result. After a failure, callers without a usable
//!   token get its error for `failure_memory` ([`settled`]).
//! - **Refresh ahead**: inside the window ([`refresh_at`]) callers get the cached token
//!   and one background request (a task of its own) replaces it, [`settled`]'s backoff
//!   apart after failures.
//! - **Bound**: at most `max_entries` (besides those in flight); past it the least
//!   recently used eighth leaves ([`least_recently_used`]); entries idle for a minute
//!   ([`Entry::evictable`]) leave at the next sweep (at most one a minute).

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use papaya::HashMap;
use seize::Collector;
use time::OffsetDateTime;
use tokio::sync::watch;

use crate::clock::{Clock, from_unix_millis, unix_millis};
use crate::error::{Error, ErrorKind, Result, TokenError};
use crate::http::retry::jitter;
use crate::log_budget::LogBudget;
use crate::token::access_token::AccessToken;
use crate::token::driven::Driven;
use crate::token::entry::{Answer, Cached, Entry, Key, State};
use crate::token::per_cpu::PerCpu;
use crate::token::refresh::{
    Freshness, IDLE_GRACE, Limits, evict_count, freshness, least_recently_used, refresh_at, settled,
};
use crate::untrusted_text::service_text;

/// The cache (see the module docs).
pub(crate) struct TokenCache(Arc<Shared>);

/// What the cache and its requests in flight share.
struct Shared {
    map: HashMap<Arc<Entry>, Option<Cached>, foldhash::fast::RandomState>,
    /// Serializes the map's writers; holds when the next idle sweep is due (Unix ms).
    writer: Mutex<i64>,
    clock: Arc<dyn Clock>,
    limits: Limits,
    /// The warning of a failed request, and the note of an answer from the failure
    /// memory: a flood of failing scopes writes a few lines and a count.
    failure_log: LogBudget,
    remembered_log: LogBudget,
}

/// What the caller supplies: a fetch of a new token, runnable in a spawned task.
pub(crate) trait Fetch: Send + Sync + 'static {
    /// A token in `tenant` (`None`: its own) for `scope` (space-joined), not `rejected`.
    fn fetch(
        self: &Arc<Self>,
        tenant: Option<Arc<str>>,
        scope: Arc<str>,
        rejected: Option<AccessToken>,
    ) -> impl Future<Output = Result<AccessToken>> + Send + 'static;
}

impl TokenCache {
    /// An empty cache whose times come from `clock`, within `limits`.
    pub(crate) fn new(clock: Arc<dyn Clock>, limits: Limits) -> Self {
        // A collector of its own: papaya 0.2's map reclaims every object of its collector
        // when dropped, so a collector shared with another cache would free that cache's
        // retired entries under its readers (seen: a crash in a dropped credential's cache).
        let hasher = foldhash::fast::RandomState::default();
        let map = HashMap::builder()
            .hasher(hasher)
            .collector(Collector::new())
            .build();
        let limits = Limits {
            max_entries: limits.max_entries.max(1),
            ..limits
        };
        let writer = Mutex::new(clock.now_unix_millis().saturating_add(IDLE_GRACE));
        TokenCache(Arc::new(Shared {
            map,
            writer,
            clock,
            limits,
            failure_log: LogBudget::new(),
            remembered_log: LogBudget::new(),
        }))
    }

    /// The cached token for `scopes` in `tenant` if it can be handed out now: the hit
    /// path. Inside the refresh window it also starts the background refresh.
    pub(crate) fn get_cached<F: Fetch>(
        &self,
        tenant: Option<&str>,
        scopes: &[&str],
        fetcher: &Arc<F>,
    ) -> Option<AccessToken> {
        let shared = &self.0;
        let now = shared.clock.now_unix_millis();
        let guard = shared.map.guard();
        let (entry, cached) = shared.map.get_key_value(&Key { tenant, scopes }, &guard)?;
        let cached = cached.as_ref()?;
        match freshness(now, cached.refresh_at, cached.expires_on) {
            Freshness::Expired => return None,
            Freshness::RefreshAhead if now >= entry.quiet_until.load(Ordering::Acquire) => {
                entry.refresh_in_background(shared, fetcher);
            }
            _ => {}
        }
        // Written at most once per clock tick: hits on other CPUs rarely share the line.
        if entry.used_at.load(Ordering::Relaxed) < now {
            entry.used_at.store(now, Ordering::Relaxed);
        }
        cached.handles.token()
    }

    /// Get a token: from the cache, or by joining or starting the entry's one request.
    pub(crate) async fn get<F: Fetch>(
        &self,
        tenant: Option<&str>,
        scopes: &[&str],
        fetcher: &Arc<F>,
    ) -> Result<AccessToken> {
        match self.get_cached(tenant, scopes, fetcher) {
            Some(token) => Ok(token),
            None => started(self.fetch(tenant, scopes, fetcher, None, || true).await),
        }
    }

    /// [`get`](Self::get), but a new request is started only if `admit` says so (`None`
    /// when it does not): a cached token, or a request in flight joined, never asks.
    pub(crate) async fn get_admitted<F: Fetch>(
        &self,
        tenant: Option<&str>,
        scopes: &[&str],
        fetcher: &Arc<F>,
        admit: impl FnOnce() -> bool,
    ) -> Result<Option<AccessToken>> {
        match self.get_cached(tenant, scopes, fetcher) {
            Some(token) => Ok(Some(token)),
            None => self.fetch(tenant, scopes, fetcher, None, admit).await,
        }
    }

    /// A token other than `rejected` (refused by a service): a cached one that differs, else
    /// the entry's request (joined, and once more if that brought `rejected` again).
    pub(crate) async fn get_replacing<F: Fetch>(
        &self,
        tenant: Option<&str>,
        scopes: &[&str],
        fetcher: &Arc<F>,
        rejected: &AccessToken,
    ) -> Result<AccessToken> {
        let token = started(
            self.fetch(tenant, scopes, fetcher, Some(rejected), || true)
                .await,
        )?;
        match token.token() == rejected.token() {
            true => started(
                self.fetch(tenant, scopes, fetcher, Some(rejected), || true)
                    .await,
            ),
            false => Ok(token),
        }
    }

    /// Join or start the entry's request, unless it holds a usable token (not `rejected`)
    /// or its last request failed within the failure memory. A new request is started
    /// only when `admit` says so (else `None`).
    async fn fetch<F: Fetch>(
        &self,
        tenant: Option<&str>,
        scopes: &[&str],
        fetcher: &Arc<F>,
        rejected: Option<&AccessToken>,
        admit: impl FnOnce() -> bool,
    ) -> Result<Option<AccessToken>> {
        let (shared, entry) = (&self.0, self.0.entry(tenant, scopes));
        let (mut rx, work) = {
            let mut state = entry.state();
            // Re-check: a request may have completed since the caller's lookup.
            let other = |t: &AccessToken| rejected.is_none_or(|r| r.token() != t.token());
            if let Some(token) = shared.usable(&entry).filter(other) {
                return Ok(Some(token));
            }
            match (&state.inflight, &state.failed) {
                (Some((rx, work)), _) => (rx.clone(), work.join()),
                (None, Some((error, until))) if shared.clock.now_unix_millis() < *until => {
                    let now = shared.clock.now_unix_millis();
                    if let Some(left_out) = shared.remembered_log.admit(now) {
                        tracing::debug!(
                            scope = %service_text(&entry.joined),
                            left_out,
                            "the last token request failed moments ago; its error again (left_out: such lines not written since the last)"
                        );
                    }
                    return Err(error.clone());
                }
                _ if !admit() => return Ok(None),
                _ => {
                    let (rx, work) = entry.start(&mut state, shared, fetcher, rejected.cloned())?;
                    (rx, Some(work))
                }
            }
        };
        // The callers waiting drive the request in their own tasks (no other thread woken
        // for it); were one dropped first, the request would finish in a task.
        if let Some(work) = work {
            work.await;
        }
        let reason = "the task running it ended without an answer (runtime shutting down?)";
        match rx.wait_for(Option::is_some).await.as_deref() {
            Ok(Some(result)) => result.clone().map(Some),
            _ => Err(ErrorKind::Token(TokenError::RequestAbandoned { reason }).into()),
        }
    }

    /// Up to `max` scope sets holding an unexpired token in `tenant`: recently served.
    pub(crate) fn live_scopes(&self, tenant: Option<&str>, max: usize) -> Vec<Vec<String>> {
        let now = self.0.clock.now_unix_millis();
        let map = self.0.map.pin();
        let ours = map.iter().filter(|(e, _)| e.tenant.as_deref() == tenant);
        let live = ours.filter(|(_, c)| c.as_ref().is_some_and(|c| now < c.expires_on));
        let scopes = |(e, _): (&Arc<Entry>, _)| e.scopes.iter().map(|s| s.to_string()).collect();
        live.take(max).map(scopes).collect()
    }

    /// Drop every cached token and remembered failure (entries stay). Requests in flight
    /// complete and are cached.
    pub(crate) fn clear(&self) {
        let _writer = self.0.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let map = self.0.map.pin();
        for (entry, _) in map.iter() {
            map.insert(entry.clone(), None);
            entry.state().failed = None;
        }
    }
}

/// The answer of a [`fetch`](TokenCache::fetch) that admits every new request.
fn started(answer: Result<Option<AccessToken>>) -> Result<AccessToken> {
    let reason = "a request admitted without condition was not started";
    answer?.ok_or_else(|| ErrorKind::Token(TokenError::RequestAbandoned { reason }).into())
}

impl Shared {
    /// The entry for the key, added if need be (evicting others if the cache is full).
    fn entry(&self, tenant: Option<&str>, scopes: &[&str]) -> Arc<Entry> {
        let key = Key { tenant, scopes };
        if let Some((entry, _)) = self.map.pin().get_key_value(&key) {
            return entry.clone();
        }
        let mut next_sweep = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let map = self.map.pin();
        if let Some((entry, _)) = map.get_key_value(&key) {
            return entry.clone();
        }
        let now = self.clock.now_unix_millis();
        if map.len() >= self.limits.max_entries || now >= *next_sweep {
            *next_sweep = now.saturating_add(IDLE_GRACE);
            self.sweep(now);
        }
        let entry = Arc::new(Entry::new(&key, now));
        map.insert(entry.clone(), None);
        entry
    }

    /// Under the writer lock: drop the entries [`Entry::evictable`] at `now`, then, if the cache
    /// is still full, the least recently used eighth (none with a request in flight).
    fn sweep(&self, now: i64) {
        let map = self.map.pin();
        map.retain(|entry, cached| !entry.evictable(now, cached.as_ref()));
        let max = self.limits.max_entries;
        if map.len() < max {
            return;
        }
        let mut idle: Vec<_> = map.iter().map(|(e, _)| e).filter(|e| !e.busy()).collect();
        let used_at = |e: &&Arc<Entry>| e.used_at.load(Ordering::Relaxed);
        let evicted = least_recently_used(&mut idle, evict_count(map.len(), max), used_at);
        if evicted.is_empty() {
            return;
        }
        for entry in evicted {
            map.remove(&***entry);
        }
        let excess = evicted.len();
        tracing::debug!(
            evicted = excess,
            max,
            "token cache full; the least recently used left"
        );
    }

    /// Cache `token` (obtained by a request started at `started`) in the entry's slot,
    /// unless the entry left meanwhile (its waiters still get the token).
    fn publish(&self, entry: &Arc<Entry>, token: &AccessToken, started: OffsetDateTime) {
        let (expires, asked, jitter) = (token.expires_on(), token.refresh_on(), jitter());
        let at = refresh_at(started, expires, asked, self.limits.window, jitter);
        let cached = Cached {
            handles: PerCpu::new(token),
            refresh_at: unix_millis(at),
            expires_on: unix_millis(expires),
        };
        let _writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let map = self.map.pin();
        if map
            .get_key_value(&**entry)
            .is_some_and(|(e, _)| Arc::ptr_eq(e, entry))
        {
            map.insert(entry.clone(), Some(cached));
        }
    }

    /// The entry's token, if it can be handed out now.
    fn usable(&self, entry: &Arc<Entry>) -> Option<AccessToken> {
        let now = self.clock.now_unix_millis();
        let map = self.map.pin();
        let (found, cached) = map.get_key_value(&**entry)?;
        let c = cached.as_ref().filter(|_| Arc::ptr_eq(found, entry))?;
        let usable = freshness(now, c.refresh_at, c.expires_on) != Freshness::Expired;
        usable.then(|| c.handles.token()).flatten()
    }
}

impl Entry {
    fn refresh_in_background<F: Fetch>(self: &Arc<Self>, shared: &Arc<Shared>, fetcher: &Arc<F>) {
        // `try_lock`: never waits; whoever holds it starts or ends this entry's request.
        if let Some(mut state) = self.try_state()
            && state.inflight.is_none()
        {
            tracing::debug!(scope = %service_text(&self.joined), "refreshing token ahead of expiry");
            match self.start(&mut state, shared, fetcher, None) {
                Ok((_, work)) => work.detach(),
                Err(e) => {
                    tracing::warn!(scope = %service_text(&self.joined), error = %e, "cannot start the token refresh");
                }
            }
        }
    }

    /// Start the entry's request (the caller holds the state lock and saw none in flight):
    /// its answer, and the work that runs it, for the caller to drive or detach.
    fn start<F: Fetch>(
        self: &Arc<Self>,
        state: &mut State,
        shared: &Arc<Shared>,
        fetcher: &Arc<F>,
        rejected: Option<AccessToken>,
    ) -> Result<(Answer, Driven)> {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            let reason = "no Tokio runtime to run it on";
            return Err(ErrorKind::Token(TokenError::RequestAbandoned { reason }).into());
        };
        let (tx, rx) = watch::channel(None);
        let mut flight = Flight(Some((self.clone(), shared.clone())));
        let request = fetcher.fetch(self.tenant.clone(), self.joined.clone(), rejected);
        let started = shared.clock.now();
        let work = Box::pin(async move {
            let result = flight.complete(request.await, started);
            // Waiters may all have gone; nothing to do then.
            let _ = tx.send(Some(result));
        });
        let (work, joinable) = Driven::new(work, handle);
        self.begin(state, rx.clone(), joinable);
        Ok((rx, work))
    }
}

/// Ends the entry's request however it ends (completion, panic, or its task dropped at
/// runtime shutdown), so the next caller can start a new one.
struct Flight(Option<(Arc<Entry>, Arc<Shared>)>);

impl Flight {
    /// Record the result and end the request before any waiter is woken. A token is
    /// published first, then the request ended under the state lock: whoever finds no
    /// request in flight finds the new token (or the error and the backoff). A
    /// remembered error is handed out with the end of its memory ([`Error::retry_at`]).
    fn complete(
        &mut self,
        result: Result<AccessToken>,
        started: OffsetDateTime,
    ) -> Result<AccessToken> {
        let Some((entry, shared)) = self.0.take() else {
            return result;
        };
        if let Ok(token) = &result {
            shared.publish(&entry, token, started);
        }
        let mut state = entry.state();
        let now = shared.clock.now_unix_millis();
        // An answer or a transport failure; not a refusal made here (validity).
        let reached = |e: &Error| matches!(e.kind(), ErrorKind::Token(_) | ErrorKind::Transport(_));
        let memory = shared.limits.failure_memory;
        let reached = result.as_ref().err().map(reached);
        let next = settled(now, state.failures, reached, memory, jitter());
        let result = match (result, next.error_until) {
            (Err(e), Some(until)) => Err(e.with_retry_at(from_unix_millis(until))),
            (result, _) => result,
        };
        let failed = result.as_ref().err();
        state.failures = next.failures;
        state.failed = failed
            .zip(next.error_until)
            .map(|(e, until)| (e.clone(), until));
        if let Some(error) = failed
            && let Some(left_out) = shared.failure_log.admit(now)
        {
            tracing::warn!(
                scope = %service_text(&entry.joined),
                error = %error,
                failures = state.failures,
                retry_in_secs = (next.quiet_until - now) / 1000,
                serving_cached = shared.usable(&entry).is_some(),
                left_out,
                "token request failed (left_out: failures of this credential not logged since the last line, at most 5 lines every 10 s)"
            );
        }
        entry.settle(&mut state, now, next.quiet_until);
        drop(state);
        result
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        if let Some((entry, shared)) = self.0.take() {
            let now = shared.clock.now_unix_millis();
            let mut state = entry.state();
            entry.settle(&mut state, now, i64::MIN);
        }
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;

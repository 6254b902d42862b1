//! The token cache: the one cache of a credential's tokens (its own tenant, its other
//! tenants, the data plane client, the token server), keyed by tenant (`None`: the
//! fetcher's own; others lower-cased by the callers) and the scope list **as given**.
//!
//! - **The map**: a `HashMap` from entry to its token behind one `RwLock`. A hit takes
//!   the read lock, looks the borrowed key up, checks the token's times and clones it: no
//!   allocation. A new entry, a new token and eviction take the write lock briefly; no
//!   lock is held across an `.await`.
//! - **Single flight**: a miss joins the entry's one request or starts it as a task of
//!   its own ([`exchange::runtime`]: the caller's multi-threaded runtime, else the crate's
//!   I/O runtime); its callers await its answer on a `watch` channel, so a caller that
//!   stops waiting cancels no one. However the task ends (an answer, a panic, its runtime
//!   shutting down), [`Flight`] ends the entry's request with it: callers left without
//!   an answer get `RequestAbandoned`, and the next caller starts afresh.
//! - **Failure memory**: after a failed request, callers without a usable token get its
//!   error until [`settled`] says (the error carries that time: `Error::retry_at`).
//! - **Refresh ahead**: inside the window ([`refresh_at`]) callers get the cached token
//!   and one background request replaces it, [`settled`]'s backoff apart after failures.
//! - **Bound**: at most `max_entries` (besides those in flight); past it the least
//!   recently used eighth leaves ([`least_recently_used`]); entries idle for a minute
//!   ([`Entry::evictable`]) leave at the next sweep (at most one a minute).

use std::future::Future;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::{Equivalent, HashMap};
use time::OffsetDateTime;
use tokio::sync::watch;

use crate::clock::{Clock, from_unix_millis, unix_millis};
use crate::error::{Error, ErrorKind, Result, TokenError};
use crate::http::exchange;
use crate::http::retry::jitter;
use crate::log_budget::LogBudget;
use crate::token::access_token::AccessToken;
use crate::token::refresh::{
    Freshness, IDLE_GRACE, Limits, evict_count, evictable, freshness, least_recently_used,
    refresh_at, settled,
};
use crate::untrusted_text::service_text;

/// The cache (see the module docs).
pub(crate) struct TokenCache(Arc<Shared>);

/// What the cache and its requests in flight share.
struct Shared {
    table: RwLock<Table>,
    clock: Arc<dyn Clock>,
    limits: Limits,
    /// The warning of a failed request, and the note of an answer from the failure
    /// memory: a flood of failing scopes writes a few lines and a count.
    failure_log: LogBudget,
    remembered_log: LogBudget,
}

/// The entries and their tokens.
struct Table {
    map: HashMap<Arc<Entry>, Option<Cached>>,
    /// When the next idle sweep is due (Unix ms).
    next_sweep: i64,
}

/// What the caller supplies: a fetch of a new token, run as a task of its own.
pub(crate) trait Fetch: Send + Sync + 'static {
    /// A token in `tenant` (`None`: its own) for `scope` (space-joined).
    fn fetch(
        self: &Arc<Self>,
        tenant: Option<Arc<str>>,
        scope: Arc<str>,
    ) -> impl Future<Output = Result<AccessToken>> + Send + 'static;
}

impl TokenCache {
    /// An empty cache whose times come from `clock`, within `limits`.
    pub(crate) fn new(clock: Arc<dyn Clock>, limits: Limits) -> Self {
        let limits = Limits {
            max_entries: limits.max_entries.max(1),
            ..limits
        };
        let table = Table {
            map: HashMap::new(),
            next_sweep: clock.now_unix_millis().saturating_add(IDLE_GRACE),
        };
        TokenCache(Arc::new(Shared {
            table: RwLock::new(table),
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
        let table = shared.read();
        let (entry, cached) = table.map.get_key_value(&Key { tenant, scopes })?;
        let cached = cached.as_ref()?;
        // Read once the entry is found: before the lock it made a hit on two threads
        // contend longer (BENCHMARKS.md).
        let now = shared.clock.now_unix_millis();
        let freshness = freshness(now, cached.refresh_at, cached.expires_on);
        if freshness == Freshness::Expired {
            return None;
        }
        // Written at most once per millisecond: hits on other CPUs rarely share the line.
        if entry.used_at.load(Ordering::Relaxed) < now {
            entry.used_at.store(now, Ordering::Relaxed);
        }
        let token = cached.token.clone();
        if freshness == Freshness::RefreshAhead && now >= entry.quiet_until.load(Ordering::Acquire)
        {
            let entry = entry.clone();
            drop(table);
            shared.refresh_in_background(&entry, fetcher);
        }
        Some(token)
    }

    /// Get a token: from the cache, or by joining or starting the entry's one request.
    pub(crate) async fn get<F: Fetch>(
        &self,
        tenant: Option<&str>,
        scopes: &[&str],
        fetcher: &Arc<F>,
    ) -> Result<AccessToken> {
        let admitted = self.get_admitted(tenant, scopes, fetcher, || true).await?;
        admitted.ok_or_else(|| abandoned("not admitted"))
    }

    /// As [`get`](Self::get), but a new request starts only if `admit()` says so (`None`
    /// when it does not); a cached token, a request in flight or a remembered failure
    /// never asks it.
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
        let mut token = self
            .fetch(tenant, scopes, fetcher, Some(rejected), || true)
            .await?;
        if token
            .as_ref()
            .is_some_and(|t| t.token() == rejected.token())
        {
            token = self
                .fetch(tenant, scopes, fetcher, Some(rejected), || true)
                .await?;
        }
        token.ok_or_else(|| abandoned("not admitted"))
    }

    /// Join or start the entry's request, unless it holds a usable token (not `rejected`)
    /// or its last request failed within the failure memory. A new request starts only
    /// if `admit()` says so.
    async fn fetch<F: Fetch>(
        &self,
        tenant: Option<&str>,
        scopes: &[&str],
        fetcher: &Arc<F>,
        rejected: Option<&AccessToken>,
        admit: impl FnOnce() -> bool,
    ) -> Result<Option<AccessToken>> {
        let (shared, entry) = (&self.0, self.0.entry(tenant, scopes));
        let answer = {
            let state = entry.state();
            // Re-check: a request may have completed since the caller's lookup.
            let other = |t: &AccessToken| rejected.is_none_or(|r| r.token() != t.token());
            if let Some(token) = shared.usable(&entry).filter(other) {
                return Ok(Some(token));
            }
            if let Some(answer) = &state.inflight {
                answer.clone()
            } else if let Some(error) = remembered(&state, shared.clock.now_unix_millis()) {
                let now = shared.clock.now_unix_millis();
                if let Some(left_out) = shared.remembered_log.admit(now) {
                    tracing::debug!(
                        scope = %service_text(&entry.joined),
                        left_out,
                        "the last token request failed moments ago; its error again (left_out: such lines not written since the last)"
                    );
                }
                return Err(error);
            } else if !admit() {
                return Ok(None);
            } else {
                shared.start(&entry, state, fetcher)?
            }
        };
        wait(answer).await.map(Some)
    }

    /// Up to `max` scope sets holding an unexpired token in `tenant`: recently served.
    pub(crate) fn live_scopes(&self, tenant: Option<&str>, max: usize) -> Vec<Vec<String>> {
        let now = self.0.clock.now_unix_millis();
        let table = self.0.read();
        let ours = table
            .map
            .iter()
            .filter(|(e, _)| e.tenant.as_deref() == tenant);
        let live = ours.filter(|(_, c)| c.as_ref().is_some_and(|c| now < c.expires_on));
        let scopes = |(e, _): (&Arc<Entry>, _)| e.scopes.iter().map(|s| s.to_string()).collect();
        live.take(max).map(scopes).collect()
    }

    /// Drop every cached token and remembered failure (entries stay). Requests in flight
    /// complete and are cached.
    pub(crate) fn clear(&self) {
        let entries: Vec<Arc<Entry>> = {
            let mut table = self.0.write();
            table.map.values_mut().for_each(|cached| *cached = None);
            table.map.keys().cloned().collect()
        };
        // Not under the map's lock: a caller holding an entry's lock may wait for it.
        for entry in entries {
            entry.state().failed = None;
        }
    }
}

impl Shared {
    fn read(&self) -> RwLockReadGuard<'_, Table> {
        self.table.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, Table> {
        self.table.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The entry for the key, added if need be (evicting others if the cache is full).
    fn entry(&self, tenant: Option<&str>, scopes: &[&str]) -> Arc<Entry> {
        let key = Key { tenant, scopes };
        if let Some((entry, _)) = self.read().map.get_key_value(&key) {
            return entry.clone();
        }
        let now = self.clock.now_unix_millis();
        let mut table = self.write();
        if let Some((entry, _)) = table.map.get_key_value(&key) {
            return entry.clone();
        }
        if table.map.len() >= self.limits.max_entries || now >= table.next_sweep {
            table.next_sweep = now.saturating_add(IDLE_GRACE);
            self.sweep(&mut table, now);
        }
        let entry = Arc::new(Entry::new(&key, now));
        table.map.insert(entry.clone(), None);
        entry
    }

    /// Under the write lock: drop the entries [`Entry::evictable`] at `now`, then, if the
    /// cache is still full, the least recently used eighth (none with a request in flight).
    fn sweep(&self, table: &mut Table, now: i64) {
        table
            .map
            .retain(|entry, cached| !entry.evictable(now, cached.as_ref()));
        let (len, max) = (table.map.len(), self.limits.max_entries);
        if len < max {
            return;
        }
        let mut idle: Vec<_> = table.map.keys().filter(|e| !e.busy()).cloned().collect();
        let used_at = |e: &Arc<Entry>| e.used_at.load(Ordering::Relaxed);
        let evicted = least_recently_used(&mut idle, evict_count(len, max), used_at);
        for entry in evicted {
            table.map.remove(&**entry);
        }
        tracing::debug!(
            evicted = evicted.len(),
            max,
            "token cache full; the least recently used left"
        );
    }

    /// The entry's token, if it can be handed out now.
    fn usable(&self, entry: &Arc<Entry>) -> Option<AccessToken> {
        let now = self.clock.now_unix_millis();
        let table = self.read();
        let (found, cached) = table.map.get_key_value(&**entry)?;
        let c = cached.as_ref().filter(|_| Arc::ptr_eq(found, entry))?;
        let usable = freshness(now, c.refresh_at, c.expires_on) != Freshness::Expired;
        usable.then(|| c.token.clone())
    }

    /// Start one background request for the entry unless one is in flight (never waits
    /// for its lock: whoever holds it starts or ends this entry's request).
    fn refresh_in_background<F: Fetch>(self: &Arc<Self>, entry: &Arc<Entry>, fetcher: &Arc<F>) {
        let Ok(state) = entry.state.try_lock() else {
            return;
        };
        if state.inflight.is_some() {
            return;
        }
        tracing::debug!(scope = %service_text(&entry.joined), "refreshing token ahead of expiry");
        if let Err(e) = self.start(entry, state, fetcher) {
            tracing::debug!(scope = %service_text(&entry.joined), error = %e, "cannot start the token refresh");
        }
    }

    /// Start the entry's request (the caller holds its state lock, given here, and saw
    /// none in flight) as a task of its own ([`exchange::runtime`]): the answer its
    /// callers await. A miss needs a Tokio runtime.
    fn start<F: Fetch>(
        self: &Arc<Self>,
        entry: &Arc<Entry>,
        mut state: MutexGuard<'_, State>,
        fetcher: &Arc<F>,
    ) -> Result<Answer> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(abandoned("no Tokio runtime to run it on"));
        }
        let runtime = exchange::runtime().map_err(|a| abandoned(a.0))?;
        let (tx, answer) = watch::channel(None);
        entry.begin(&mut state, answer.clone());
        drop(state);
        self.launch(&runtime, entry, fetcher, tx);
        Ok(answer)
    }

    /// Run the entry's request (marked in flight, no lock held) as a task on `runtime`;
    /// its result answers on `tx`.
    fn launch<F: Fetch>(
        self: &Arc<Self>,
        runtime: &tokio::runtime::Handle,
        entry: &Arc<Entry>,
        fetcher: &Arc<F>,
        tx: watch::Sender<Option<Result<AccessToken>>>,
    ) {
        let flight = Flight {
            shared: self.clone(),
            entry: entry.clone(),
            tx,
            answered: false,
        };
        let request = fetcher.fetch(entry.tenant.clone(), entry.joined.clone());
        let started = self.clock.now();
        // On a runtime shutting down the task, and `flight` with it, is dropped at once.
        drop(runtime.spawn(async move {
            let result = request.await;
            flight.land(result, started);
        }));
    }

    /// Cache `token` (obtained by a request started at `started`) in the entry's slot,
    /// unless the entry left meanwhile (its waiters still get the token).
    fn publish(&self, entry: &Arc<Entry>, token: &AccessToken, started: OffsetDateTime) {
        let (expires, asked, jitter) = (token.expires_on(), token.refresh_on(), jitter());
        let at = refresh_at(started, expires, asked, self.limits.window, jitter);
        let cached = Cached {
            token: token.clone(),
            refresh_at: unix_millis(at),
            expires_on: unix_millis(expires),
        };
        let mut table = self.write();
        if let Some((found, slot)) = table.map.get_key_value_mut(&**entry)
            && Arc::ptr_eq(found, entry)
        {
            *slot = Some(cached);
        }
    }
}

/// The entry's remembered error, if its last request failed and `now` (Unix ms) is
/// within the failure memory.
fn remembered(state: &State, now: i64) -> Option<Error> {
    let (error, until) = state.failed.as_ref()?;
    (now < *until).then(|| error.clone())
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
    ErrorKind::Token(TokenError::RequestAbandoned { reason }).into()
}

/// One request of an entry, run in its task: [`land`](Flight::land) caches its result,
/// remembers a failure and answers the waiters; dropped without landing (a panic, or the
/// task dropped at runtime shutdown), it ends the entry's request all the same.
struct Flight {
    shared: Arc<Shared>,
    entry: Arc<Entry>,
    tx: watch::Sender<Option<Result<AccessToken>>>,
    answered: bool,
}

impl Flight {
    fn land(mut self, result: Result<AccessToken>, started: OffsetDateTime) {
        let (shared, entry) = (&self.shared, &self.entry);
        if let Ok(token) = &result {
            shared.publish(entry, token, started);
        }
        let mut state = entry.state();
        let now = shared.clock.now_unix_millis();
        // An answer or a transport failure; not a refusal made here (validity).
        let reached = |e: &Error| matches!(e.kind(), ErrorKind::Token(_) | ErrorKind::Transport(_));
        let memory = shared.limits.failure_memory;
        let failed = result.as_ref().err().map(reached);
        let next = settled(now, state.failures, failed, memory, jitter());
        state.failures = next.failures;
        let result = result.map_err(|error| match next.error_until {
            Some(until) => error.with_retry_at(from_unix_millis(until)),
            None => error,
        });
        state.failed = match (&result, next.error_until) {
            (Err(error), Some(until)) => Some((error.clone(), until)),
            _ => None,
        };
        if let Err(error) = &result
            && let Some(left_out) = shared.failure_log.admit(now)
        {
            tracing::warn!(
                scope = %service_text(&entry.joined),
                error = %error,
                failures = state.failures,
                retry_in_secs = (next.quiet_until - now) / 1000,
                serving_cached = shared.usable(entry).is_some(),
                left_out,
                "token request failed (left_out: failures of this credential not logged since the last line, at most 5 lines every 10 s)"
            );
        }
        entry.settle(&mut state, now, next.quiet_until);
        drop(state);
        self.answered = true;
        // Waiters may all have gone; nothing to do then.
        let _ = self.tx.send(Some(result));
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        if std::thread::panicking() {
            // Its message may hold anything: not logged.
            tracing::error!(scope = %service_text(&self.entry.joined), "a token request panicked; its callers get no answer");
        }
        let now = self.shared.clock.now_unix_millis();
        let mut state = self.entry.state();
        self.entry.settle(&mut state, now, i64::MIN);
    }
}

/// One tenant and scope set, and its request state.
struct Entry {
    tenant: Option<Arc<str>>,
    scopes: Box<[Box<str>]>,
    /// The scopes space-joined: what a request asks for.
    joined: Arc<str>,
    /// No background request before this Unix time (ms): `i64::MAX` while a request is
    /// in flight, the backoff's end after failures.
    quiet_until: AtomicI64,
    /// When the entry was made or its last request ended (Unix ms).
    settled_at: AtomicI64,
    /// When a caller last asked for it (Unix ms): the least recently used leave first.
    used_at: AtomicI64,
    state: Mutex<State>,
}

/// What the callers waiting on a request await: its result, once it has one. Closed
/// without one when the request's task ended without answering.
type Answer = watch::Receiver<Option<Result<AccessToken>>>;

/// An entry's requests, under its lock.
#[derive(Default)]
struct State {
    /// The request in flight, if one is.
    inflight: Option<Answer>,
    /// Consecutive failures.
    failures: u32,
    /// The last request's error and until when (Unix ms) it is the answer.
    failed: Option<(Error, i64)>,
}

/// A token and its times (Unix ms).
struct Cached {
    token: AccessToken,
    refresh_at: i64,
    expires_on: i64,
}

/// A key as callers hold it: borrowed, hashed and compared like the entry it finds.
struct Key<'a> {
    tenant: Option<&'a str>,
    scopes: &'a [&'a str],
}

impl Entry {
    /// A new entry for the key, made (and last used) at `now` (Unix ms).
    fn new(key: &Key<'_>, now: i64) -> Self {
        Entry {
            tenant: key.tenant.map(Arc::from),
            scopes: key.scopes.iter().map(|s| Box::from(*s)).collect(),
            joined: Arc::from(key.scopes.join(" ")),
            quiet_until: AtomicI64::new(i64::MIN),
            settled_at: AtomicI64::new(now),
            used_at: AtomicI64::new(now),
            state: Mutex::new(State::default()),
        }
    }

    /// Its request state (a poisoned lock is taken as is: the state stays consistent).
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a request is in flight.
    fn busy(&self) -> bool {
        self.quiet_until.load(Ordering::Acquire) == i64::MAX
    }

    /// Whether it may leave the cache at `now` ([`evictable`]).
    fn evictable(&self, now: i64, cached: Option<&Cached>) -> bool {
        let settled = self.settled_at.load(Ordering::Acquire);
        evictable(now, settled, cached.map(|c| c.expires_on), self.busy())
    }

    /// A request starts (the caller holds the state lock and saw none in flight).
    fn begin(&self, state: &mut State, answer: Answer) {
        state.inflight = Some(answer);
        self.quiet_until.store(i64::MAX, Ordering::Release);
    }

    /// The request ended (the caller holds the state lock).
    fn settle(&self, state: &mut State, now: i64, quiet_until: i64) {
        state.inflight = None;
        self.settled_at.store(now, Ordering::Release);
        self.quiet_until.store(quiet_until, Ordering::Release);
    }
}

impl Hash for Entry {
    #[inline]
    fn hash<H: Hasher>(&self, h: &mut H) {
        hash_key(h, self.tenant.as_deref(), self.scopes.iter().map(|s| &**s));
    }
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.tenant == other.tenant && self.scopes == other.scopes
    }
}

impl Eq for Entry {}

impl Hash for Key<'_> {
    #[inline]
    fn hash<H: Hasher>(&self, h: &mut H) {
        hash_key(h, self.tenant, self.scopes.iter().copied());
    }
}

impl Equivalent<Arc<Entry>> for Key<'_> {
    #[inline]
    fn equivalent(&self, entry: &Arc<Entry>) -> bool {
        entry.tenant.as_deref() == self.tenant
            && entry.scopes.len() == self.scopes.len()
            && entry
                .scopes
                .iter()
                .zip(self.scopes)
                .all(|(a, b)| **a == **b)
    }
}

/// The one hash of a key, owned or borrowed.
#[inline]
fn hash_key<'s, H: Hasher>(h: &mut H, tenant: Option<&str>, scopes: impl Iterator<Item = &'s str>) {
    if let Some(tenant) = tenant {
        h.write(tenant.as_bytes());
    }
    for s in scopes {
        h.write_u8(0xff);
        h.write(s.as_bytes());
    }
}

#[cfg(test)]
#[path = "cache_tests.rs"]
mod tests;

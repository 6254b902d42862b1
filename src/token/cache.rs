//! The token cache: one entry per tenant and scope set, single flight, refresh ahead.
//!
//! One design for a credential's own tenant, its other tenants and the data plane's
//! tokens, keyed by tenant (`None`: the fetcher's own; others lower-cased by the callers)
//! and the scope list **as given** (same scopes, same order, same entry).
//!
//! - **Publication**: an immutable table behind an [`ArcSwap`], replaced whole when an
//!   entry or a token is added; a replaced table is freed when its last reader returns.
//! - **Hit path**: one `ArcSwap` load, a hash lookup by the borrowed key, a coarse clock
//!   read and a clone of the token's handle for this CPU: no lock, no allocation.
//! - **Single flight**: a miss joins the entry's one request or starts it, in a spawned
//!   task (a caller that gives up cancels nothing); every waiter gets its result.
//! - **Refresh ahead**: inside the window ([`refresh_at`]) callers get the cached token
//!   and one background request replaces it; after a failure the next waits
//!   [`refresh_backoff`]. A refused token is replaced past the cache
//!   ([`TokenCache::get_replacing`]).
//! - **Memory**: no cap; entries idle for a minute ([`evictable`]) leave the next table.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use arc_swap::ArcSwap;
use hashbrown::HashTable;
use time::OffsetDateTime;
use tokio::sync::watch;

use crate::clock::{Clock, unix_millis};
use crate::error::{ErrorKind, Result, TokenError};
use crate::token::access_token::AccessToken;
use crate::token::per_cpu::PerCpu;
use crate::token::refresh::{Freshness, evictable, freshness, refresh_at, refresh_backoff};

/// The cache (see the module docs).
pub(crate) struct TokenCache(Arc<Shared>);

/// What the cache and its requests in flight share.
struct Shared {
    table: ArcSwap<HashTable<Slot>>,
    writer: Mutex<()>, // serializes the table's replacements
    hasher: foldhash::fast::RandomState,
    clock: Arc<dyn Clock>,
    /// How long before expiry the refresh window opens at least ([`refresh_at`]).
    window: Duration,
}

/// A key's place in the table: its entry and, once fetched, its token.
#[derive(Clone)]
struct Slot {
    entry: Arc<Entry>,
    cached: Option<Arc<Cached>>,
}

/// One tenant and scope set, and its request state.
struct Entry {
    hash: u64,
    tenant: Option<Arc<str>>,
    scopes: Box<[Box<str>]>,
    joined: Arc<str>,
    /// No background request before this Unix time (ms): `i64::MAX` while a request is
    /// in flight, the backoff's end after failures.
    quiet_until: AtomicI64,
    /// When the entry was made or its last request ended (Unix ms).
    settled_at: AtomicI64,
    state: Mutex<State>,
}

type Answer = watch::Receiver<Option<Result<AccessToken>>>;

#[derive(Default)]
struct State {
    inflight: Option<Answer>,
    failures: u32,
}

/// A token and its times (Unix ms), with one handle per CPU.
struct Cached {
    handles: PerCpu,
    refresh_at: i64,
    expires_on: i64,
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
    /// An empty cache whose times come from `clock`, refreshing tokens at least `window`
    /// before they expire.
    pub(crate) fn new(clock: Arc<dyn Clock>, window: Duration) -> Self {
        let (table, writer) = (ArcSwap::from_pointee(HashTable::new()), Mutex::new(()));
        let hasher = Default::default();
        TokenCache(Arc::new(Shared {
            table,
            writer,
            hasher,
            clock,
            window,
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
        let hash = shared.hash(tenant, scopes);
        let table = shared.table.load();
        let slot = table.find(hash, |s| s.entry.matches(hash, tenant, scopes))?;
        let cached = slot.cached.as_deref()?;
        match freshness(now, cached.refresh_at, cached.expires_on) {
            Freshness::Expired => return None,
            Freshness::RefreshAhead if now >= slot.entry.quiet_until.load(Ordering::Acquire) => {
                slot.entry.refresh_in_background(shared, fetcher);
            }
            _ => {}
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
            None => self.fetch(tenant, scopes, fetcher, None).await,
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
        let token = self.fetch(tenant, scopes, fetcher, Some(rejected)).await?;
        match token.token() == rejected.token() {
            true => self.fetch(tenant, scopes, fetcher, Some(rejected)).await,
            false => Ok(token),
        }
    }

    /// Join or start the entry's request, unless it holds a usable token (not `rejected`).
    async fn fetch<F: Fetch>(
        &self,
        tenant: Option<&str>,
        scopes: &[&str],
        fetcher: &Arc<F>,
        rejected: Option<&AccessToken>,
    ) -> Result<AccessToken> {
        let (shared, entry) = (&self.0, self.0.entry(tenant, scopes));
        let mut rx = {
            let mut state = entry.state.lock().unwrap_or_else(PoisonError::into_inner);
            // Re-check: a request may have completed since the caller's lookup.
            let other = |t: &AccessToken| rejected.is_none_or(|r| r.token() != t.token());
            if let Some(token) = shared.usable(&entry).filter(other) {
                return Ok(token);
            }
            match &state.inflight {
                Some(rx) => rx.clone(),
                None => entry.start(&mut state, shared, fetcher, rejected.cloned())?,
            }
        };
        let reason = "the task running it ended without an answer (runtime shutting down?)";
        match rx.wait_for(Option::is_some).await.as_deref() {
            Ok(Some(result)) => result.clone(),
            _ => Err(ErrorKind::Token(TokenError::RequestAbandoned { reason }).into()),
        }
    }

    /// Up to `max` scope sets holding an unexpired token in `tenant`: recently served.
    pub(crate) fn live_scopes(&self, tenant: Option<&str>, max: usize) -> Vec<Vec<String>> {
        let now = self.0.clock.now_unix_millis();
        let table = self.0.table.load();
        let ours = table.iter().filter(|s| s.entry.tenant.as_deref() == tenant);
        let live = ours.filter(|s| s.cached.as_ref().is_some_and(|c| now < c.expires_on));
        let scopes = |s: &Slot| s.entry.scopes.iter().map(|s| s.to_string()).collect();
        live.take(max).map(scopes).collect()
    }

    /// Drop every cached token (entries stay). Requests in flight complete and are cached.
    pub(crate) fn clear(&self) {
        let forget = |table: &mut HashTable<Slot>| table.iter_mut().for_each(|s| s.cached = None);
        self.0.replace(i64::MIN, forget);
    }
}

impl Shared {
    fn hash(&self, tenant: Option<&str>, scopes: &[&str]) -> u64 {
        let mut h = self.hasher.build_hasher();
        if let Some(tenant) = tenant {
            h.write(tenant.as_bytes());
        }
        for s in scopes {
            h.write_u8(0xff);
            h.write(s.as_bytes());
        }
        h.finish()
    }

    /// The entry for the key, added if need be.
    fn entry(&self, tenant: Option<&str>, scopes: &[&str]) -> Arc<Entry> {
        let hash = self.hash(tenant, scopes);
        let find = |table: &HashTable<Slot>| {
            let slot = table.find(hash, |s| s.entry.matches(hash, tenant, scopes));
            slot.map(|s| s.entry.clone())
        };
        if let Some(entry) = find(&self.table.load()) {
            return entry;
        }
        let now = self.clock.now_unix_millis();
        self.replace(now, |table| {
            if let Some(entry) = find(table) {
                return entry;
            }
            let entry = Arc::new(Entry {
                hash,
                tenant: tenant.map(Arc::from),
                scopes: scopes.iter().map(|s| Box::from(*s)).collect(),
                joined: Arc::from(scopes.join(" ")),
                quiet_until: AtomicI64::new(i64::MIN),
                settled_at: AtomicI64::new(now),
                state: Mutex::new(State::default()),
            });
            let slot = Slot {
                entry: entry.clone(),
                cached: None,
            };
            table.insert_unique(hash, slot, |s| s.entry.hash);
            entry
        })
    }

    /// Publish a copy of the table changed by `change`, leaving out the slots evictable
    /// at `now` (under the writer lock: changes are serialized).
    fn replace<R>(&self, now: i64, change: impl FnOnce(&mut HashTable<Slot>) -> R) -> R {
        let _writer = self.writer.lock().unwrap_or_else(PoisonError::into_inner);
        let current = self.table.load();
        let mut next = HashTable::with_capacity(current.len() + 1);
        for slot in current.iter().filter(|s| !s.evictable(now)) {
            next.insert_unique(slot.entry.hash, slot.clone(), |s| s.entry.hash);
        }
        let result = change(&mut next);
        self.table.store(Arc::new(next));
        result
    }

    /// The entry's token, if it can be handed out now.
    fn usable(&self, entry: &Arc<Entry>) -> Option<AccessToken> {
        let now = self.clock.now_unix_millis();
        let table = self.table.load();
        let slot = table.find(entry.hash, |s| Arc::ptr_eq(&s.entry, entry))?;
        let c = slot.cached.as_deref()?;
        let usable = freshness(now, c.refresh_at, c.expires_on) != Freshness::Expired;
        usable.then(|| c.handles.token()).flatten()
    }
}

impl Slot {
    fn evictable(&self, now: i64) -> bool {
        let (entry, expires) = (&self.entry, self.cached.as_ref().map(|c| c.expires_on));
        let busy = entry.quiet_until.load(Ordering::Acquire) == i64::MAX;
        let settled = entry.settled_at.load(Ordering::Acquire);
        evictable(now, settled, expires, busy)
    }
}

impl Entry {
    fn matches(&self, hash: u64, tenant: Option<&str>, scopes: &[&str]) -> bool {
        self.hash == hash
            && self.scopes.len() == scopes.len()
            && self.scopes.iter().zip(scopes).all(|(a, b)| **a == **b)
            && self.tenant.as_deref() == tenant
    }

    fn refresh_in_background<F: Fetch>(self: &Arc<Self>, shared: &Arc<Shared>, fetcher: &Arc<F>) {
        // `try_lock`: never waits; whoever holds it starts or ends this entry's request.
        if let Ok(mut state) = self.state.try_lock()
            && state.inflight.is_none()
        {
            tracing::debug!(scope = %self.joined, "refreshing token ahead of expiry");
            if let Err(e) = self.start(&mut state, shared, fetcher, None) {
                tracing::warn!(scope = %self.joined, error = %e, "cannot start the token refresh");
            }
        }
    }

    /// Start the entry's request (the caller holds the state lock and saw none in flight).
    fn start<F: Fetch>(
        self: &Arc<Self>,
        state: &mut State,
        shared: &Arc<Shared>,
        fetcher: &Arc<F>,
        rejected: Option<AccessToken>,
    ) -> Result<Answer> {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            let reason = "no Tokio runtime to run it on";
            return Err(ErrorKind::Token(TokenError::RequestAbandoned { reason }).into());
        };
        let (tx, rx) = watch::channel(None);
        state.inflight = Some(rx.clone());
        self.quiet_until.store(i64::MAX, Ordering::Release);
        let mut flight = Flight(Some((self.clone(), shared.clone())));
        let request = fetcher.fetch(self.tenant.clone(), self.joined.clone(), rejected);
        let started = shared.clock.now();
        handle.spawn(async move {
            let result = request.await;
            flight.complete(&result, started);
            // Waiters may all have gone; nothing to do then.
            let _ = tx.send(Some(result));
        });
        Ok(rx)
    }

    /// The request ended (the caller holds the state lock).
    fn settle(&self, state: &mut State, now: i64, quiet_until: i64) {
        state.inflight = None;
        self.settled_at.store(now, Ordering::Release);
        self.quiet_until.store(quiet_until, Ordering::Release);
    }
}

/// Ends the entry's request however it ends (completion, panic, or its task dropped at
/// runtime shutdown), so the next caller can start a new one.
struct Flight(Option<(Arc<Entry>, Arc<Shared>)>);

impl Flight {
    /// Record the result and end the request, in one critical section and before any
    /// waiter is woken: whoever comes next sees the new token (or the backoff) and no
    /// request in flight.
    fn complete(&mut self, result: &Result<AccessToken>, started: OffsetDateTime) {
        let Some((entry, shared)) = self.0.take() else {
            return;
        };
        let mut state = entry.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = shared.clock.now_unix_millis();
        let jitter = crate::http::retry::jitter();
        let quiet_until = match result {
            Ok(token) => {
                let (expires, asked) = (token.expires_on(), token.refresh_on());
                let at = refresh_at(started, expires, asked, shared.window, jitter);
                let (refresh_at, expires_on) = (unix_millis(at), unix_millis(token.expires_on()));
                let handles = PerCpu::new(token);
                let cached = Arc::new(Cached {
                    handles,
                    refresh_at,
                    expires_on,
                });
                // Not found: the entry was left out meanwhile; its waiters get the token.
                shared.replace(now, |table| {
                    let slot = table.find_mut(entry.hash, |s| Arc::ptr_eq(&s.entry, &entry));
                    if let Some(slot) = slot {
                        slot.cached = Some(cached);
                    }
                });
                state.failures = 0;
                i64::MIN
            }
            Err(error) => {
                state.failures = state.failures.saturating_add(1);
                let wait = refresh_backoff(state.failures, jitter);
                tracing::warn!(
                    scope = %entry.joined,
                    error = %error,
                    failures = state.failures,
                    retry_in_secs = wait.as_secs(),
                    serving_cached = shared.usable(&entry).is_some(),
                    "token request failed"
                );
                now.saturating_add(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX))
            }
        };
        entry.settle(&mut state, now, quiet_until);
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        if let Some((entry, shared)) = self.0.take() {
            let now = shared.clock.now_unix_millis();
            let mut state = entry.state.lock().unwrap_or_else(PoisonError::into_inner);
            entry.settle(&mut state, now, i64::MIN);
        }
    }
}

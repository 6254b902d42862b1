//! The token cache: one entry per tenant and scope set, single flight, refresh ahead.
//!
//! One design serves a credential's own tenant, the other tenants it may ask for, and the
//! data plane client's tokens. The key is the tenant (`None`: the fetcher's own, such as
//! a credential's; others lower-cased by the callers) and the scope list **as given**:
//! same scopes in the same order share an entry.
//!
//! - **Publication**: the entries and their tokens sit in an immutable table behind an
//!   [`ArcSwap`], replaced whole (copy on write) when an entry or a token is added. No
//!   per-thread copies: a replaced table is freed when the last call that loaded it returns.
//! - **Hit path**: one `ArcSwap` load (a guard that takes no reference count in the common
//!   case), a hash lookup by the borrowed key, a coarse clock read and a clone of the
//!   token's handle for this CPU: no lock, no allocation.
//! - **Single flight**: a miss (or an expired token) joins the entry's one request in
//!   flight or starts it. The request runs in a spawned task, so a caller that gives up
//!   does not cancel it for the others; every waiter gets its result or its error.
//! - **Refresh ahead**: inside the refresh window (see [`refresh_at`]) callers get the
//!   cached token at once and one background request replaces it. If that request fails,
//!   callers keep the cached token and the next attempt waits [`refresh_backoff`].
//! - **Memory**: no cap. Entries idle for a minute (nothing to hand out, no request in
//!   flight: [`evictable`]) are left out of the next table; the rest are recent keys.

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use arc_swap::ArcSwap;
use hashbrown::HashTable;
use time::OffsetDateTime;
use tokio::sync::watch;

use crate::clock::{Clock, unix_millis};
use crate::error::{ErrorKind, Result, TokenError};
use crate::token::access_token::AccessToken;
use crate::token::refresh::{Freshness, evictable, freshness, refresh_at, refresh_backoff};

/// The cache (see the module docs).
pub(crate) struct TokenCache(Arc<Shared>);

/// What the cache and its requests in flight share.
struct Shared {
    table: ArcSwap<HashTable<Slot>>,
    /// Serializes the table's replacements.
    writer: Mutex<()>,
    hasher: foldhash::fast::RandomState,
    clock: Arc<dyn Clock>,
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

/// A token and its times (Unix ms). The token has one handle per CPU (up to 16, sharing
/// the text), so that threads on different CPUs clone different reference counts.
struct Cached {
    handles: Box<[AccessToken]>,
    refresh_at: i64,
    expires_on: i64,
}

impl Cached {
    fn token(&self) -> Option<AccessToken> {
        #[cfg(target_os = "linux")]
        let cpu = rustix::thread::sched_getcpu();
        #[cfg(not(target_os = "linux"))]
        let cpu = 0;
        self.handles.get(cpu % self.handles.len().max(1)).cloned()
    }
}

/// Handles per cached token: one per CPU, at most 16 (one where the CPU is not known).
fn handles() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    let cpus = || std::thread::available_parallelism().map_or(1, usize::from);
    let per_cpu = cfg!(target_os = "linux");
    *COUNT.get_or_init(|| if per_cpu { cpus().min(16) } else { 1 })
}

/// What the caller of [`TokenCache::get`] supplies: a fetch of a new token in a tenant
/// for the space-joined scopes, runnable in a spawned task.
pub(crate) trait Fetch: Send + Sync + 'static {
    /// Fetch a token in `tenant` (`None`: its own) for `scope` (space-joined scopes).
    fn fetch(
        self: &Arc<Self>,
        tenant: Option<Arc<str>>,
        scope: Arc<str>,
    ) -> impl Future<Output = Result<AccessToken>> + Send + 'static;
}

impl TokenCache {
    /// An empty cache whose times come from `clock`.
    pub(crate) fn new(clock: Arc<dyn Clock>) -> Self {
        let (table, writer) = (ArcSwap::from_pointee(HashTable::new()), Mutex::new(()));
        let hasher = foldhash::fast::RandomState::default();
        TokenCache(Arc::new(Shared {
            table,
            writer,
            hasher,
            clock,
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
        cached.token()
    }

    /// Get a token: from the cache, or by joining or starting the entry's one request.
    pub(crate) async fn get<F: Fetch>(
        &self,
        tenant: Option<&str>,
        scopes: &[&str],
        fetcher: &Arc<F>,
    ) -> Result<AccessToken> {
        if let Some(token) = self.get_cached(tenant, scopes, fetcher) {
            return Ok(token);
        }
        let shared = &self.0;
        let entry = shared.entry(tenant, scopes);
        let mut rx = {
            let mut state = entry.state.lock().unwrap_or_else(PoisonError::into_inner);
            // Re-check: a request may have completed since the lookup above.
            if let Some(token) = shared.usable(&entry) {
                return Ok(token);
            }
            match &state.inflight {
                Some(rx) => rx.clone(),
                None => entry.start(&mut state, shared, fetcher)?,
            }
        };
        let reason = "the task running it ended without an answer (runtime shutting down?)";
        match rx.wait_for(Option::is_some).await.as_deref() {
            Ok(Some(result)) => result.clone(),
            _ => Err(ErrorKind::Token(TokenError::RequestAbandoned { reason }).into()),
        }
    }

    /// The scope sets holding a token in `tenant` still unexpired now, at most `max` of
    /// them: what this cache served within about a token's lifetime.
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
    /// The key's hash.
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
        usable.then(|| c.token()).flatten()
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
        // `try_lock`: the hit path never waits for a lock; whoever holds it is starting
        // or finishing a request for this entry anyway.
        if let Ok(mut state) = self.state.try_lock()
            && state.inflight.is_none()
        {
            tracing::debug!(scope = %self.joined, "refreshing token ahead of expiry");
            if let Err(e) = self.start(&mut state, shared, fetcher) {
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
    ) -> Result<Answer> {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            let reason = "no Tokio runtime to run it on";
            return Err(ErrorKind::Token(TokenError::RequestAbandoned { reason }).into());
        };
        let (tx, rx) = watch::channel(None);
        state.inflight = Some(rx.clone());
        self.quiet_until.store(i64::MAX, Ordering::Release);
        let mut flight = Flight(Some((self.clone(), shared.clone())));
        let request = fetcher.fetch(self.tenant.clone(), self.joined.clone());
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
                let at = refresh_at(started, token.expires_on(), token.refresh_on(), jitter);
                let (refresh_at, expires_on) = (unix_millis(at), unix_millis(token.expires_on()));
                let handles = (0..handles()).map(|_| token.detached_copy()).collect();
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

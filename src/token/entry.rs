//! One entry of the token cache: a tenant and a scope list (hashed and compared alike
//! whether owned by the map or borrowed by a caller's lookup), and the state of its
//! requests: the one in flight, the failures, when it was last used and settled.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use hashbrown::Equivalent;
use tokio::sync::watch;

use crate::error::{Error, Result};
use crate::token::access_token::AccessToken;
use crate::token::refresh::evictable;

/// One tenant and scope set, and its request state.
pub(crate) struct Entry {
    pub(crate) tenant: Option<Arc<str>>,
    pub(crate) scopes: Box<[Box<str>]>,
    /// The scopes space-joined: what a request asks for.
    pub(crate) joined: Arc<str>,
    /// No background request before this Unix time (ms): `i64::MAX` while a request is
    /// in flight, the backoff's end after failures.
    pub(crate) quiet_until: AtomicI64,
    /// When the entry was made or its last request ended (Unix ms).
    settled_at: AtomicI64,
    /// When a caller last asked for it (Unix ms): the least recently used leave first.
    pub(crate) used_at: AtomicI64,
    state: Mutex<State>,
}

/// What the callers waiting on a request await: its result, once it has one. Closed
/// without one when the request's task ended without answering.
pub(crate) type Answer = watch::Receiver<Option<Result<AccessToken>>>;

/// An entry's requests, under its lock.
#[derive(Default)]
pub(crate) struct State {
    /// The request in flight, if one is.
    pub(crate) inflight: Option<Answer>,
    /// Consecutive failures.
    pub(crate) failures: u32,
    /// The last request's error and until when (Unix ms) it is the answer.
    pub(crate) failed: Option<(Error, i64)>,
}

/// A token and its times (Unix ms).
pub(crate) struct Cached {
    pub(crate) token: AccessToken,
    pub(crate) refresh_at: i64,
    pub(crate) expires_on: i64,
}

/// A key as callers hold it: borrowed, hashed and compared like the entry it finds.
pub(crate) struct Key<'a> {
    pub(crate) tenant: Option<&'a str>,
    pub(crate) scopes: &'a [&'a str],
}

impl Entry {
    /// A new entry for the key, made (and last used) at `now` (Unix ms).
    pub(crate) fn new(key: &Key<'_>, now: i64) -> Self {
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
    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Its request state, unless someone else holds it.
    pub(crate) fn try_state(&self) -> Option<MutexGuard<'_, State>> {
        self.state.try_lock().ok()
    }

    /// Whether a request is in flight.
    pub(crate) fn busy(&self) -> bool {
        self.quiet_until.load(Ordering::Acquire) == i64::MAX
    }

    /// Whether it may leave the cache at `now` ([`evictable`]).
    pub(crate) fn evictable(&self, now: i64, cached: Option<&Cached>) -> bool {
        let settled = self.settled_at.load(Ordering::Acquire);
        evictable(now, settled, cached.map(|c| c.expires_on), self.busy())
    }

    /// A request starts (the caller holds the state lock and saw none in flight).
    pub(crate) fn begin(&self, state: &mut State, answer: Answer) {
        state.inflight = Some(answer);
        self.quiet_until.store(i64::MAX, Ordering::Release);
    }

    /// The request ended (the caller holds the state lock).
    pub(crate) fn settle(&self, state: &mut State, now: i64, quiet_until: i64) {
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

//! Following rotations: the directory watch (one per directory, shared), the swap rule,
//! and `UserAssignedIdentityCredential`, which keeps the last good credential active.
//! Uses `token/` for each credential it builds and `file/` to read the file.

pub(crate) mod check;
pub(crate) mod options;
pub(crate) mod prefetch;
pub(crate) mod rule;
pub(crate) mod status;
pub(crate) mod target;
pub(crate) mod task;
pub(crate) mod user_assigned;
pub(crate) mod watch;

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Lock, recovering from a poisoned lock: the reload layer's locks guard plain values
/// (subscriber lists, watch states, statuses), valid after any panic while held.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

//! A cached token handed out through one handle per CPU.
//!
//! Every hit clones the token it hands out: a reference count incremented, and
//! decremented when the caller drops it. With one shared handle, two threads hitting the
//! same token write the same cache line on every call. Each handle here is its own
//! allocation (the token's state is aligned to 128 bytes) sharing the token's text, and a
//! thread clones the handle of the CPU it runs on.

use std::sync::OnceLock;

use crate::token::access_token::AccessToken;

/// One token, one handle per CPU (up to 16; one where the CPU number is not known).
pub(crate) struct PerCpu(Box<[AccessToken]>);

impl PerCpu {
    /// The handles of `token`.
    pub(crate) fn new(token: &AccessToken) -> Self {
        PerCpu((0..count()).map(|_| token.detached_copy()).collect())
    }

    /// The token, through the handle of the CPU the calling thread runs on (the cache's
    /// hit path: inlined into it).
    #[inline]
    pub(crate) fn token(&self) -> Option<AccessToken> {
        #[cfg(target_os = "linux")]
        let cpu = rustix::thread::sched_getcpu();
        #[cfg(not(target_os = "linux"))]
        let cpu = 0;
        self.0.get(cpu % self.0.len().max(1)).cloned()
    }
}

/// Handles per token: one per CPU, at most 16 (one where the CPU is not known).
fn count() -> usize {
    static COUNT: OnceLock<usize> = OnceLock::new();
    let cpus = || std::thread::available_parallelism().map_or(1, usize::from);
    let per_cpu = cfg!(target_os = "linux");
    *COUNT.get_or_init(|| if per_cpu { cpus().min(16) } else { 1 })
}

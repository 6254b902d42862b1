//! A value that is read on hot paths by many threads and replaced rarely.
//!
//! [`Published`] keeps the current `Arc<T>` behind a mutex and a generation counter bumped
//! on every replacement. Each thread keeps its own copy of the `Arc` in a thread-local
//! and goes to the mutex only when the generation has moved. A read therefore writes no
//! memory that another thread writes (an `ArcSwap` load or a shared `Arc` clone does),
//! which is what lets the token cache's hit path scale with threads.
//!
//! A thread's copy keeps its value alive: after a replacement, the old value (a rotated-out
//! credential, with its key) lives on in each thread that copied it until that thread
//! next takes the slow path on the same list (reads a value that moved, or a new one),
//! which drops every outdated copy of the list, or until the thread exits. A thread that
//! never reads the list again keeps its copy; SECURITY.md says so.
//!
//! Each use declares its own `thread_local!` list of copies ([`LocalCopies`]) and passes
//! it to [`Published::new`]. A list is borrowed during a read, so a read nested in a read
//! of the same list falls back to the mutex: nest only reads of different lists.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::LocalKey;

/// A thread's copies of published values of one type, one per `Published`. Declare one
/// `thread_local!` of this per use (see the module docs).
pub(crate) type LocalCopies<T> = RefCell<Vec<LocalCopy<T>>>;

/// One thread's copy of one published value.
pub(crate) struct LocalCopy<T> {
    id: u64,
    generation: u64,
    value: Arc<T>,
    owner: Weak<Inner<T>>,
}

impl<T> LocalCopy<T> {
    /// Whether the value copied is still the published one (not replaced, not dropped).
    fn is_current(&self) -> bool {
        self.owner
            .upgrade()
            .is_some_and(|o| o.generation.load(Ordering::Acquire) == self.generation)
    }
}

/// A thread keeps at most this many copies per list (those of dropped values go first).
const MAX_LOCAL_COPIES: usize = 32;

/// See the module docs.
pub(crate) struct Published<T: Send + Sync + 'static> {
    inner: Arc<Inner<T>>,
    local: &'static LocalKey<LocalCopies<T>>,
}

pub(crate) struct Inner<T> {
    id: u64,
    generation: AtomicU64,
    value: Mutex<Arc<T>>,
}

impl<T: Send + Sync + 'static> Published<T> {
    pub(crate) fn new(value: T, local: &'static LocalKey<LocalCopies<T>>) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Published {
            inner: Arc::new(Inner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                generation: AtomicU64::new(0),
                value: Mutex::new(Arc::new(value)),
            }),
            local,
        }
    }

    /// The current value (takes the mutex: not for hot paths).
    pub(crate) fn load_full(&self) -> Arc<T> {
        self.inner
            .value
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Replace the value with what `change` makes of the current one, or keep it when
    /// `change` returns `None` (under the mutex, so concurrent changes are serialized).
    /// Only a replacement moves the generation, so readers keep their copies otherwise.
    pub(crate) fn update(&self, change: impl FnOnce(&T) -> Option<T>) {
        let mut current = self.inner.value.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(next) = change(&current) {
            *current = Arc::new(next);
            self.inner.generation.fetch_add(1, Ordering::Release);
        }
    }

    /// Replace the value.
    pub(crate) fn store(&self, value: T) {
        self.update(|_| Some(value));
    }

    /// Run `f` on this thread's copy of the value, refreshed if the generation moved (on
    /// the shared value if the thread-local is unavailable).
    pub(crate) fn read<R>(&self, f: impl Fn(&T) -> R) -> R {
        let generation = self.inner.generation.load(Ordering::Acquire);
        let id = self.inner.id;
        let local = self.local.try_with(|local| {
            let mut local = local.try_borrow_mut().ok()?;
            let index = match local.iter().position(|l| l.id == id) {
                Some(index) if local[index].generation == generation => index,
                _ => {
                    // The slow path (a new or outdated copy): drop this thread's copies of
                    // every value in the list that was replaced or dropped, so that a
                    // rotated-out credential is not kept alive here until the day this
                    // thread reads that same value again.
                    local.retain(|l| l.id != id && l.is_current());
                    if local.len() >= MAX_LOCAL_COPIES {
                        local.remove(0);
                    }
                    // Read after the generation: at least as new as it.
                    local.push(LocalCopy {
                        id,
                        generation,
                        value: self.load_full(),
                        owner: Arc::downgrade(&self.inner),
                    });
                    local.len() - 1
                }
            };
            let copy = local.get(index)?;
            Some(f(&copy.value))
        });
        match local {
            Ok(Some(result)) => result,
            _ => f(&self.load_full()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static TEST_COPIES: LocalCopies<u32> = const { RefCell::new(Vec::new()) };
        static TEST_VEC_COPIES: LocalCopies<Vec<u8>> = const { RefCell::new(Vec::new()) };
    }

    #[test]
    fn readers_see_updates() {
        let p = Published::new(1u32, &TEST_COPIES);
        assert_eq!(p.read(|v| *v), 1);
        p.store(2);
        assert_eq!(p.read(|v| *v), 2);
        p.update(|v| Some(v + 40));
        assert_eq!(p.read(|v| *v), 42);
        let generation = p.inner.generation.load(Ordering::Acquire);
        p.update(|_| None);
        assert_eq!(p.inner.generation.load(Ordering::Acquire), generation);
        assert_eq!(p.read(|v| *v), 42);
        std::thread::scope(|s| {
            s.spawn(|| assert_eq!(p.read(|v| *v), 42));
        });
    }

    #[test]
    fn nested_reads_on_one_list_fall_back_to_the_shared_value() {
        let a = Published::new(1u32, &TEST_COPIES);
        let b = Published::new(2u32, &TEST_COPIES);
        assert_eq!(a.read(|x| b.read(|y| x + y)), 3);
        b.store(5);
        assert_eq!(a.read(|x| b.read(|y| x + y)), 6);
    }

    #[test]
    fn replaced_values_are_released_at_the_next_slow_read_of_the_list() {
        let p = Published::new(vec![1u8; 8], &TEST_VEC_COPIES);
        let q = Published::new(vec![2u8], &TEST_VEC_COPIES);
        p.read(|v| v.len());
        q.read(|v| v.len());
        let old = Arc::downgrade(&p.load_full());
        p.store(vec![3u8]);
        assert!(old.upgrade().is_some(), "this thread's copy still holds it");
        // Another value of the same list moves: its slow read prunes the outdated copy.
        q.store(vec![4u8]);
        assert_eq!(q.read(|v| v[0]), 4);
        assert!(old.upgrade().is_none(), "the replaced value is still alive");
        assert_eq!(p.read(|v| v[0]), 3);
    }

    #[test]
    fn copies_of_dropped_values_are_released() {
        let p = Published::new(vec![0u8; 16], &TEST_VEC_COPIES);
        p.read(|v| v.len());
        let weak = Arc::downgrade(&p.load_full());
        drop(p);
        // The thread still holds its copy until the list is next pruned.
        let q = Published::new(vec![1u8], &TEST_VEC_COPIES);
        q.read(|v| v.len());
        assert!(
            weak.upgrade().is_none(),
            "the dropped value's copy was pruned"
        );
    }
}

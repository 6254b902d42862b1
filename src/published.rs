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
//!
//! Every live `Published` holds a small slot number, the lowest one free when it was made
//! (numbers are shared by all lists and reused once their value is dropped), and a
//! thread's list is a vector indexed by it: a read finds its copy in O(1) however many
//! values exist, so the hit path takes no lock at any count. A list grows to the highest
//! slot its thread has read (slots stay dense: at most the number of values alive at
//! once). Copies of dropped or replaced values are released at the thread's next slow read
//! (a first read, or a read after a replacement), or when the thread ends.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::LocalKey;

/// A thread's copies of published values of one type, indexed by the values' slots.
/// Declare one `thread_local!` of this per use (see the module docs).
pub(crate) struct LocalCopies<T> {
    copies: RefCell<Vec<Option<LocalCopy<T>>>>,
}

impl<T> LocalCopies<T> {
    /// An empty list (for `thread_local!`'s `const` initializer).
    pub(crate) const fn new() -> Self {
        LocalCopies {
            copies: RefCell::new(Vec::new()),
        }
    }
}

/// One thread's copy of one published value.
struct LocalCopy<T> {
    id: u64,
    generation: u64,
    value: Arc<T>,
    owner: Weak<Inner<T>>,
}

/// Which slot numbers are taken, one bit each (a word is added when all are taken; freeing
/// never allocates).
static SLOTS: Mutex<Vec<u64>> = Mutex::new(Vec::new());

/// The lowest free slot number, now taken.
fn take_slot() -> usize {
    take_lowest(&mut SLOTS.lock().unwrap_or_else(|e| e.into_inner()))
}

fn free_slot(slot: usize) {
    release(&mut SLOTS.lock().unwrap_or_else(|e| e.into_inner()), slot);
}

/// Pure: take the lowest clear bit of `words` (adding a word when all are set).
fn take_lowest(words: &mut Vec<u64>) -> usize {
    for (i, word) in words.iter_mut().enumerate() {
        if *word != u64::MAX {
            let bit = (!*word).trailing_zeros();
            *word |= 1 << bit;
            return i * 64 + bit as usize;
        }
    }
    words.push(1);
    (words.len() - 1) * 64
}

/// Pure: clear bit `slot` of `words`.
fn release(words: &mut [u64], slot: usize) {
    if let Some(word) = words.get_mut(slot / 64) {
        *word &= !(1u64 << (slot % 64));
    }
}

/// See the module docs.
pub(crate) struct Published<T: Send + Sync + 'static> {
    inner: Arc<Inner<T>>,
    local: &'static LocalKey<LocalCopies<T>>,
}

pub(crate) struct Inner<T> {
    /// Unique for the process's life (a slot is reused, an id never is).
    id: u64,
    slot: usize,
    generation: AtomicU64,
    value: Mutex<Arc<T>>,
}

impl<T> Drop for Inner<T> {
    fn drop(&mut self) {
        free_slot(self.slot);
    }
}

impl<T: Send + Sync + 'static> Published<T> {
    pub(crate) fn new(value: T, local: &'static LocalKey<LocalCopies<T>>) -> Self {
        static NEXT_ID: AtomicU64 = AtomicU64::new(1);
        Published {
            inner: Arc::new(Inner {
                id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
                slot: take_slot(),
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
        let local = self.local.try_with(|local| {
            let mut copies = local.copies.try_borrow_mut().ok()?;
            if let Some(Some(copy)) = copies.get(self.inner.slot)
                && copy.id == self.inner.id
                && copy.generation == generation
            {
                return Some(f(&copy.value));
            }
            Some(f(&self.refresh(&mut copies, generation)))
        });
        match local {
            Ok(Some(result)) => result,
            _ => f(&self.load_full()),
        }
    }

    /// The slow read: make or renew this thread's copy (first read, a replacement, or a
    /// slot that held a dropped value's copy), releasing outdated copies first.
    #[cold]
    fn refresh(&self, copies: &mut Vec<Option<LocalCopy<T>>>, generation: u64) -> Arc<T> {
        // Release the copies of values dropped or replaced since (a rotated-out credential
        // is then not kept alive here until the day this thread reads it again).
        prune(copies);
        let slot = self.inner.slot;
        if copies.len() <= slot {
            copies.resize_with(slot + 1, || None);
        }
        // Read after the generation: at least as new as it.
        let value = self.load_full();
        let copy = LocalCopy {
            id: self.inner.id,
            generation,
            value: value.clone(),
            owner: Arc::downgrade(&self.inner),
        };
        // The slot's previous copy (an older value, or a dropped owner's) goes here.
        drop(copies.get_mut(slot).and_then(|c| c.replace(copy)));
        value
    }
}

impl<T> LocalCopy<T> {
    /// Whether the value copied is still the published one (not replaced, not dropped).
    fn is_current(&self) -> bool {
        self.owner
            .upgrade()
            .is_some_and(|o| o.generation.load(Ordering::Acquire) == self.generation)
    }
}

/// Release the copies whose value was dropped or replaced; shorten the list past the last
/// live one.
fn prune<T>(copies: &mut Vec<Option<LocalCopy<T>>>) {
    for entry in copies.iter_mut() {
        if entry.as_ref().is_some_and(|c| !c.is_current()) {
            *entry = None;
        }
    }
    let live = copies
        .iter()
        .rposition(Option::is_some)
        .map_or(0, |i| i + 1);
    copies.truncate(live);
    if copies.capacity() > 4 * copies.len().max(4) {
        copies.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static TEST_COPIES: LocalCopies<u32> = const { LocalCopies::new() };
        static TEST_VEC_COPIES: LocalCopies<Vec<u8>> = const { LocalCopies::new() };
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

    #[test]
    fn hits_take_no_lock_at_any_count() {
        use std::sync::mpsc::channel;
        use std::time::Duration;

        const VALUES: u32 = 100;
        let values: Arc<Vec<Published<u32>>> = Arc::new(
            (0..VALUES)
                .map(|i| Published::new(i, &TEST_COPIES))
                .collect(),
        );
        let (go_tx, go_rx) = channel::<()>();
        let (done_tx, done_rx) = channel::<u32>();
        let reader = {
            let values = values.clone();
            std::thread::spawn(move || {
                let sum = |values: &[Published<u32>]| values.iter().map(|p| p.read(|v| *v)).sum();
                // Warm this thread's copies, then read them all again once the locks are held.
                done_tx.send(sum(&values)).ok();
                if go_rx.recv().is_ok() {
                    done_tx.send(sum(&values)).ok();
                }
            })
        };
        let expected = (0..VALUES).sum::<u32>();
        assert_eq!(done_rx.recv().ok(), Some(expected));
        // Every value's mutex held: a read that needs one waits until they are released.
        let guards: Vec<_> = values
            .iter()
            .map(|p| p.inner.value.lock().unwrap_or_else(|e| e.into_inner()))
            .collect();
        go_tx.send(()).ok();
        let second = done_rx.recv_timeout(Duration::from_secs(10));
        drop(guards);
        reader.join().ok();
        assert_eq!(
            second.ok(),
            Some(expected),
            "hits on {VALUES} values were served from the thread's copies, without the locks"
        );
    }

    #[test]
    fn reused_slots_serve_their_own_value_and_lists_stay_dense() {
        // Values made and dropped in waves: a new value may take a dropped one's slot, and
        // this thread still holds a copy there.
        let mut weak = Vec::new();
        for wave in 0..5u8 {
            let values: Vec<_> = (0..100u8)
                .map(|i| Published::new(vec![wave, i], &TEST_VEC_COPIES))
                .collect();
            for (i, p) in values.iter().enumerate() {
                assert_eq!(p.read(|v| v.clone()), vec![wave, i as u8]);
            }
            weak.extend(values.iter().map(|p| Arc::downgrade(&p.load_full())));
        }
        // All dropped: a first read of a new value releases every copy they left here.
        let p = Published::new(vec![9], &TEST_VEC_COPIES);
        assert_eq!(p.read(|v| v.clone()), vec![9]);
        assert!(
            weak.iter().all(|w| w.upgrade().is_none()),
            "copies released"
        );
        let len = TEST_VEC_COPIES.with(|l| l.copies.borrow().len());
        // This thread's list holds only this value's copy now: it ends at its slot.
        assert_eq!(len, p.inner.slot + 1);
    }

    #[test]
    fn slots_are_reused_lowest_first() {
        let mut words = Vec::new();
        let taken: Vec<usize> = (0..130).map(|_| take_lowest(&mut words)).collect();
        assert_eq!(taken, (0..130).collect::<Vec<_>>());
        assert_eq!(words.len(), 3);
        release(&mut words, 70);
        release(&mut words, 3);
        assert_eq!(take_lowest(&mut words), 3);
        assert_eq!(take_lowest(&mut words), 70);
        assert_eq!(take_lowest(&mut words), 130);
        release(&mut words, 1000); // not taken: ignored
        assert_eq!(words.len(), 3);
    }
}

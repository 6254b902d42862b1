//! A counting global allocator for the memory tests (tests/alloc.rs, tests/memory.rs).
//!
//! A test binary installs it with
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: support::counting::Counting = support::counting::Counting;
//! ```
//!
//! It forwards to the system allocator and counts on the side:
//!
//! - per thread, every allocation the thread makes ([`thread_allocations`]);
//! - process-wide, the bytes live that were allocated by *counted* threads
//!   ([`live_bytes`]) and how many allocations those threads made ([`allocations`]). A
//!   thread is counted once it calls [`count_this_thread`] (a tokio runtime's threads:
//!   `Builder::on_thread_start(count_this_thread)`). Threads that are not counted (the
//!   test server's runtime, libtest's own threads) do not disturb the figures.
//!
//! Every block carries a header saying whether it was counted, so a counted block freed
//! on another thread is subtracted exactly once, and an uncounted one never. Only the
//! Rust heap is seen: C libraries that call `malloc` themselves (AWS-LC) are not.
//! Counts are process-wide: a binary that reads [`live_bytes`] must not run two such
//! measurements at once (serialize its tests).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// See the module docs.
pub struct Counting;

thread_local! {
    static COUNTED: Cell<bool> = const { Cell::new(false) };
    static THREAD_ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);
static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static LIVE_BLOCKS: AtomicI64 = AtomicI64::new(0);

/// Count this thread's allocations in [`live_bytes`] and [`allocations`] from now on.
pub fn count_this_thread() {
    COUNTED.with(|c| c.set(true));
}

/// Bytes allocated by counted threads and not yet freed (by any thread).
pub fn live_bytes() -> i64 {
    LIVE_BYTES.load(Ordering::SeqCst)
}

/// Blocks allocated by counted threads and not yet freed. Each costs the system allocator
/// a header of 16 bytes (or the alignment, when larger) on top of [`live_bytes`].
pub fn live_blocks() -> i64 {
    LIVE_BLOCKS.load(Ordering::SeqCst)
}

/// Allocations made by counted threads so far.
pub fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::SeqCst)
}

/// Allocations made by the calling thread so far (counted or not).
pub fn thread_allocations() -> u64 {
    THREAD_ALLOCATIONS.with(Cell::get)
}

/// The block as allocated: `offset` header bytes before the caller's, at least 16 and a
/// multiple of the alignment, so the caller's pointer keeps its alignment. The last
/// header byte is the counted flag. `None` when the extended layout is impossible (the
/// allocation then fails, as it would have anyway at that size).
fn with_header(layout: Layout) -> Option<(Layout, usize)> {
    let offset = layout.align().max(16);
    let outer = Layout::from_size_align(layout.size().checked_add(offset)?, offset).ok()?;
    Some((outer, offset))
}

// SAFETY: every block comes from and returns to the system allocator with the same
// (header-extended) layout; the caller sees a pointer `offset` bytes in, aligned as it
// asked. The thread-locals are const-initialised without destructors, so touching them
// never allocates; `try_with` tolerates thread teardown.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some((outer, offset)) = with_header(layout) else {
            return std::ptr::null_mut();
        };
        let base = unsafe { System.alloc(outer) };
        if base.is_null() {
            return base;
        }
        let _ = THREAD_ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        let counted = COUNTED.try_with(Cell::get).unwrap_or(false);
        if counted {
            LIVE_BYTES.fetch_add(layout.size() as i64, Ordering::SeqCst);
            ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
            LIVE_BLOCKS.fetch_add(1, Ordering::SeqCst);
        }
        unsafe {
            let ptr = base.add(offset);
            ptr.sub(1).write(u8::from(counted));
            ptr
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // `alloc` succeeded with this layout, so its extension exists.
        let Some((outer, offset)) = with_header(layout) else {
            return;
        };
        unsafe {
            if ptr.sub(1).read() == 1 {
                LIVE_BYTES.fetch_sub(layout.size() as i64, Ordering::SeqCst);
                LIVE_BLOCKS.fetch_sub(1, Ordering::SeqCst);
            }
            System.dealloc(ptr.sub(offset), outer);
        }
    }
}

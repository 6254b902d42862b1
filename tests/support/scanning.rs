//! A global allocator that searches every block freed while it is armed for secret
//! material (tests/zeroize.rs): the crate's claim that it zeroizes what it owns, checked
//! on the real heap. A block that is zeroized before it is freed holds no needle.
//!
//! A test binary installs it with
//!
//! ```ignore
//! #[global_allocator]
//! static GLOBAL: support::scanning::Scanning = support::scanning::Scanning;
//! ```
//!
//! `realloc` always moves (and scans the old block), as the system allocator may: a
//! buffer that grows while holding a secret leaves a copy behind, whether or not it
//! happens to grow in place on this machine. Only the Rust heap is seen (AWS-LC's own
//! `malloc` is not). Armed state is process-wide: arm in one test at a time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// See the module docs.
pub struct Scanning;

static ARMED: AtomicBool = AtomicBool::new(false);
static NEEDLES: OnceLock<Vec<(String, Vec<u8>)>> = OnceLock::new();
static HITS: [AtomicUsize; 16] = [const { AtomicUsize::new(0) }; 16];

/// Set the needles (at most 16, each at least 16 bytes), once per process.
pub fn set_needles(needles: Vec<(String, Vec<u8>)>) {
    assert!(needles.len() <= HITS.len() && needles.iter().all(|(_, n)| n.len() >= 16));
    NEEDLES.set(needles).expect("needles are set once");
}

/// Search freed blocks from now on.
pub fn arm() {
    ARMED.store(true, Ordering::SeqCst);
}

/// Stop searching; return each needle found in a freed block, with how many blocks held it.
pub fn disarm() -> Vec<(String, usize)> {
    ARMED.store(false, Ordering::SeqCst);
    NEEDLES
        .get()
        .map(|needles| {
            needles
                .iter()
                .zip(&HITS)
                .filter_map(|((what, _), hits)| {
                    let n = hits.swap(0, Ordering::SeqCst);
                    (n > 0).then(|| (what.clone(), n))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn scan(block: &[u8]) {
    let Some(needles) = NEEDLES.get() else {
        return;
    };
    for ((_, needle), hits) in needles.iter().zip(&HITS) {
        if block.len() >= needle.len() && block.windows(needle.len()).any(|w| w == needle) {
            hits.fetch_add(1, Ordering::SeqCst);
        }
    }
}

// SAFETY: every block comes from and returns to the system allocator with the layout it
// was allocated with; a freed block is read (never written) before it is returned, while
// it is still owned by the allocator. Scanning allocates nothing.
unsafe impl GlobalAlloc for Scanning {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if ARMED.load(Ordering::SeqCst) {
            scan(unsafe { std::slice::from_raw_parts(ptr, layout.size()) });
        }
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        let new = unsafe { System.alloc(new_layout) };
        if !new.is_null() {
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

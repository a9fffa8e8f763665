//! The bytes the process holds on its heap, as its allocator counts them.
//!
//! DataFusion's memory pool sees the memory its operators reserve, not the arrays a
//! function returns: `repeat(x, n) || repeat(x, n) || …`, or the same large value upper-cased
//! a thousand times in one `SELECT`, allocates outside it until the process is killed. The
//! server's checks ([`crate::serve::memory`]) compare this count with a limit instead.
//!
//! [`Counting`] wraps the process's allocator (mimalloc in the binary) and keeps one
//! relaxed atomic counter: a few nanoseconds per allocation. It also charges each
//! allocation (and credits each free) to the statement current on the thread, if any
//! ([`evalsql_udfs::interrupt::charge`]: a thread-local read and one more atomic), so the
//! server can tell which statement is growing. It is written here rather than
//! taken from a crate because all it needs is that counter; allocators that enforce a limit
//! themselves (such as the `cap` crate) can only refuse by returning null, which aborts a
//! Rust process, while the checks here refuse with an error to the one statement.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

use evalsql_udfs::interrupt::charge;

static ALLOCATED: AtomicUsize = AtomicUsize::new(0);

/// `A`, counting the bytes it hands out.
pub struct Counting<A>(pub A);

// SAFETY: every call is forwarded to `A` unchanged; only the counter is added.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.alloc(layout) };
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
            charge(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.alloc_zeroed(layout) };
        if !p.is_null() {
            ALLOCATED.fetch_add(layout.size(), Ordering::Relaxed);
            charge(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { self.0.dealloc(ptr, layout) };
        ALLOCATED.fetch_sub(layout.size(), Ordering::Relaxed);
        charge(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                ALLOCATED.fetch_add(new_size - layout.size(), Ordering::Relaxed);
            } else {
                ALLOCATED.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
            charge(new_size as isize - layout.size() as isize);
        }
        p
    }
}

/// The heap bytes held now; 0 in a process whose allocator is not [`Counting`] (the
/// checks then never refuse).
pub fn allocated() -> usize {
    ALLOCATED.load(Ordering::Relaxed)
}

//! The bytes the process holds on its heap, as its allocator counts them.
//!
//! DataFusion's memory pool sees the memory its operators reserve, not the arrays a
//! function returns: `repeat(x, n) || repeat(x, n) || …`, or the same large value upper-cased
//! a thousand times in one `SELECT`, allocates outside it until the process is killed. The
//! server's checks ([`crate::serve::memory`]) compare this count with a limit instead.
//!
//! [`Counting`] wraps the process's allocator (mimalloc in the binary) and keeps a count of
//! the bytes it holds. Each thread adds what it allocates and frees to a counter of its own
//! and moves it to the process's counter once it passes [`SLACK`] either way: one shared
//! atomic touched on every allocation costs a contended cache line between the cores (a
//! fifth of the server's time when both cores take OTLP requests), and the count needs to
//! be right only to within a few MiB. It also charges each allocation (and credits each
//! free) to the statement current on the thread, if any
//! ([`evalsql_udfs::interrupt::charge`]: a thread-local read and one more atomic), so the
//! server can tell which statement is growing. It is written here rather than
//! taken from a crate because all it needs is that counter; allocators that enforce a limit
//! themselves (such as the `cap` crate) can only refuse by returning null, which aborts a
//! Rust process, while the checks here refuse with an error to the one statement.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, Ordering};

use evalsql_udfs::interrupt::charge;

static ALLOCATED: AtomicIsize = AtomicIsize::new(0);

/// How far a thread's own count may drift before it is moved to [`ALLOCATED`].
pub const SLACK: isize = 256 << 10;

thread_local! {
    // `const` and without a destructor: reading it never allocates, as an allocator needs.
    static PENDING: Cell<isize> = const { Cell::new(0) };
}

fn count(bytes: isize) {
    let moved = PENDING.try_with(|pending| {
        let now = pending.get() + bytes;
        if now.abs() >= SLACK {
            pending.set(0);
            ALLOCATED.fetch_add(now, Ordering::Relaxed);
        } else {
            pending.set(now);
        }
    });
    if moved.is_err() {
        // The thread is ending and its locals are gone: count directly.
        ALLOCATED.fetch_add(bytes, Ordering::Relaxed);
    }
}

/// Moves this thread's own count to the process's; for threads that end (the runtime calls
/// it as each of its threads stops), so what they leave is not lost.
pub fn settle_thread() {
    let _ = PENDING.try_with(|pending| {
        ALLOCATED.fetch_add(pending.replace(0), Ordering::Relaxed);
    });
}

/// `A`, counting the bytes it hands out.
pub struct Counting<A>(pub A);

// SAFETY: every call is forwarded to `A` unchanged; only the counters are added.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Counting<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.alloc(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
            charge(layout.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size() as isize);
            charge(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded with the caller's guarantees.
        unsafe { self.0.dealloc(ptr, layout) };
        count(-(layout.size() as isize));
        charge(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded with the caller's guarantees.
        let p = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            let grew = new_size as isize - layout.size() as isize;
            count(grew);
            charge(grew);
        }
        p
    }
}

/// The heap bytes held now, to within [`SLACK`] per thread; 0 in a process whose allocator
/// is not [`Counting`] (the checks then never refuse).
pub fn allocated() -> usize {
    ALLOCATED.load(Ordering::Relaxed).max(0) as usize
}

//! Ending a statement inside long computations.
//!
//! DataFusion ends a query by dropping its streams, which takes effect where a task
//! yields: between batches of a scan, at a network call. An operator or a kernel that
//! computes for a long time without yielding (a nested-loop join of two large inputs, an
//! aggregate over a cross join, an edit distance of two long texts) is not stopped by
//! that. A surface that stops statements (the server's timeout and cancel requests) gives
//! each running plan an [`Interrupt`]; the plan's checkpoints make it current on the
//! thread for as long as they poll their input ([`while_current`]), and long loops ask
//! [`check`], which fails with the reason once the statement must stop, or [`stopped`],
//! where giving up early is simpler than returning an error (the checkpoint discards what
//! was computed after the stop).
//!
//! A thread-local, not an argument: kernels are called through DataFusion's interfaces,
//! which carry no per-statement state, and a poll runs on one thread from start to end,
//! so what a checkpoint sets is what every kernel under it sees.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};

use datafusion::common::{DataFusionError, Result};

/// Says whether the statement running now must stop.
pub trait Interrupt: Send + Sync + std::fmt::Debug {
    /// `Some` once the statement must stop.
    fn interrupted(&self) -> Option<Interrupted>;

    /// The statement's count of the heap bytes allocated (less those freed) while it is
    /// current, when it keeps one ([`charge`]).
    fn memory(&self) -> Option<&AtomicIsize> {
        None
    }
}

/// Why a statement stopped, as the surface reports it (a SQLSTATE and PostgreSQL's words).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interrupted {
    pub code: &'static str,
    pub message: &'static str,
}

impl std::fmt::Display for Interrupted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.message)
    }
}

impl std::error::Error for Interrupted {}

thread_local! {
    static CURRENT: RefCell<Option<Arc<dyn Interrupt>>> = const { RefCell::new(None) };
    /// The current statement's memory count (null: none), read by the allocator: a plain
    /// pointer in a constant-initialised cell, so reading it never allocates. It points into
    /// the statement `CURRENT` holds, which keeps it alive.
    static CHARGED: Cell<*const AtomicIsize> = const { Cell::new(std::ptr::null()) };
}

/// Runs `f` with `interrupt` current on this thread (restored afterwards, also on a panic).
pub fn while_current<R>(interrupt: &Arc<dyn Interrupt>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<dyn Interrupt>>, *const AtomicIsize);
    impl Drop for Restore {
        fn drop(&mut self) {
            // The count first: it points into the statement being put back.
            CHARGED.with(|charged| charged.set(self.1));
            let previous = self.0.take();
            CURRENT.with(|current| *current.borrow_mut() = previous);
        }
    }
    let memory = interrupt
        .memory()
        .map_or(std::ptr::null(), |m| m as *const AtomicIsize);
    let previous = CURRENT.with(|current| current.replace(Some(Arc::clone(interrupt))));
    let previous_charged = CHARGED.with(|charged| charged.replace(memory));
    let _restore = Restore(previous, previous_charged);
    f()
}

/// Adds `bytes` (negative: freed) to the current statement's memory count, if a statement
/// is current and keeps one. Called by the process's allocator: it never allocates.
pub fn charge(bytes: isize) {
    let _ = CHARGED.try_with(|charged| {
        let memory = charged.get();
        if !memory.is_null() {
            // SAFETY: non-null only inside `while_current`, whose statement (held in
            // `CURRENT`) owns the count until the cell is reset.
            unsafe { &*memory }.fetch_add(bytes, Ordering::Relaxed);
        }
    });
}

/// The current statement's memory count, if one is current and keeps one.
pub fn charged() -> Option<isize> {
    CHARGED
        .try_with(|charged| {
            let memory = charged.get();
            // SAFETY: as in `charge`.
            (!memory.is_null()).then(|| unsafe { &*memory }.load(Ordering::Relaxed))
        })
        .ok()
        .flatten()
}

/// Why the current statement must stop, if it must.
fn current() -> Option<Interrupted> {
    CURRENT.with(|current| current.borrow().as_ref()?.interrupted())
}

/// Whether the current statement must stop. A kernel deep in a loop that cannot return an
/// error may give up and return any value once this is true: the checkpoint that polled
/// it discards the batch and ends the statement with the reason.
pub fn stopped() -> bool {
    current().is_some()
}

/// Fails once the current statement must stop; `Ok` where no statement is interruptible.
pub fn check() -> Result<()> {
    match current() {
        Some(why) => Err(DataFusionError::External(Box::new(why))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[derive(Debug, Default)]
    struct Flag(AtomicBool);

    impl Interrupt for Flag {
        fn interrupted(&self) -> Option<Interrupted> {
            self.0.load(Ordering::Relaxed).then_some(Interrupted {
                code: "57014",
                message: "canceling statement due to user request",
            })
        }
    }

    #[test]
    fn check_fails_only_inside_an_interrupted_scope() {
        let flag = Arc::new(Flag::default());
        let interrupt: Arc<dyn Interrupt> = flag.clone();
        assert!(check().is_ok());
        while_current(&interrupt, || {
            assert!(check().is_ok());
            flag.0.store(true, Ordering::Relaxed);
            let err = check().unwrap_err().to_string();
            assert!(
                err.contains("canceling statement due to user request"),
                "{err}"
            );
        });
        // Restored when the scope ends.
        assert!(check().is_ok());
    }
}

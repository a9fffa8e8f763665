//! Ctrl-C during a judge query. datafusion-python polls a query on the calling thread and
//! looks for Python's signals between polls; a batch waiting for its judge calls blocks that
//! very thread, so Python's own handler never gets to run. A native SIGINT handler, chained
//! in front of Python's (which still runs, so Python raises `KeyboardInterrupt` once control
//! returns), counts the interrupts; a waiting batch sees the count change, stops sending
//! calls and returns an error. Judgements already received stay in the cache.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

static COUNT: AtomicU64 = AtomicU64::new(0);
/// CLOCK_MONOTONIC milliseconds of the last interrupt (0: none yet).
static LAST_MS: AtomicU64 = AtomicU64::new(0);
/// The handler ours replaced, called after ours. Written before ours is installed and
/// never while it may run.
static mut PREVIOUS: Option<libc::sigaction> = None;
static INSTALL: Mutex<()> = Mutex::new(());

/// Batches started this long after an interrupt send nothing: the query being cancelled may
/// still start one before datafusion-python drops it.
const QUIET_MS: u64 = 2_000;

fn monotonic_ms() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the struct it is given; it is async-signal-safe.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64) * 1000 + (ts.tv_nsec as u64) / 1_000_000
}

/// How many interrupts have arrived.
pub fn count() -> u64 {
    COUNT.load(Ordering::SeqCst)
}

/// Whether an interrupt arrived within the last [`QUIET_MS`].
pub fn recently() -> bool {
    let last = LAST_MS.load(Ordering::SeqCst);
    last != 0 && monotonic_ms().saturating_sub(last) < QUIET_MS
}

extern "C" fn on_sigint(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    COUNT.fetch_add(1, Ordering::SeqCst);
    LAST_MS.store(monotonic_ms().max(1), Ordering::SeqCst);
    // SAFETY: PREVIOUS is written only before this handler is installed.
    let previous = unsafe { *std::ptr::addr_of!(PREVIOUS) };
    let Some(previous) = previous else { return };
    let action = previous.sa_sigaction;
    if action == libc::SIG_IGN {
        return;
    }
    if action == libc::SIG_DFL {
        // Nothing handled SIGINT before us: do what the default would, terminate.
        // SAFETY: restoring the default disposition and re-raising is async-signal-safe.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        return;
    }
    // SAFETY: the previous handler was installed for this signal with these flags.
    unsafe {
        if previous.sa_flags & libc::SA_SIGINFO != 0 {
            let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                std::mem::transmute(action);
            f(sig, info, context);
        } else {
            let f: extern "C" fn(libc::c_int) = std::mem::transmute(action);
            f(sig);
        }
    }
}

/// Puts the handler in front of the current SIGINT handler (again, if Python's `signal`
/// module replaced it since).
pub fn install() {
    let _guard = INSTALL.lock().unwrap_or_else(|p| p.into_inner());
    // SAFETY: plain sigaction calls; PREVIOUS is written while ours is not installed.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGINT, std::ptr::null(), &mut current) != 0 {
            return;
        }
        if current.sa_sigaction == on_sigint as *const () as usize {
            return;
        }
        *std::ptr::addr_of_mut!(PREVIOUS) = Some(current);
        let mut ours: libc::sigaction = std::mem::zeroed();
        ours.sa_sigaction = on_sigint as *const () as usize;
        ours.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut ours.sa_mask);
        libc::sigaction(libc::SIGINT, &ours, std::ptr::null_mut());
    }
}

use std::process::ExitCode;

use clap::Parser;
use mimalloc::MiMalloc;

// Counted, so that `serve` can refuse a statement before its arrays exhaust memory
// (see `evalsql::memory`).
#[global_allocator]
static GLOBAL: evalsql::memory::Counting<MiMalloc> = evalsql::memory::Counting(MiMalloc);

/// The runtime's threads for blocking work (object_store's local file system does each file
/// operation on one). tokio's default is 512, and its idle threads take turns at the work,
/// so under a steady load none stays idle long enough to end: `serve --otlp` grew to 90-130
/// of them. Each keeps the memory it allocated and others freed until it allocates again
/// (mimalloc returns a page to the system only when its owning thread collects it), 10-30
/// MiB a thread: under a 10-minute OTLP flood the process grew by 170 MiB a minute to
/// 2.2 GiB while its live heap stayed under 200 MiB (a collection forced in every thread
/// through gdb gave the memory back, which is how the cause was found). The store's own
/// file operations now run on threads that collect after each (`otlp::synced`); the cap
/// bounds what the others (data files, the judge cache) can keep.
const BLOCKING_THREADS: usize = 16;

fn main() -> ExitCode {
    env_logger::init();
    let args = evalsql::cli::Args::parse();
    // Large stacks for the worker threads, where `serve` plans and runs client statements:
    // a deep expression must end in an error, never in a stack overflow that aborts the
    // process (see `serve::limits`).
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_stack_size(evalsql::serve::limits::WORKER_STACK_BYTES)
        .on_thread_stop(evalsql::memory::settle_thread)
        .max_blocking_threads(BLOCKING_THREADS)
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("Error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(evalsql::cli::run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("Error: {e}");
            ExitCode::FAILURE
        }
    }
}

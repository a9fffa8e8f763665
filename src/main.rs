use std::process::ExitCode;

use clap::Parser;
use mimalloc::MiMalloc;

// Counted, so that `serve` can refuse a statement before its arrays exhaust memory
// (see `evalsql::memory`).
#[global_allocator]
static GLOBAL: evalsql::memory::Counting<MiMalloc> = evalsql::memory::Counting(MiMalloc);

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

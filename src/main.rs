//! The `dlq` binary: parse the command line, run it on a one-thread runtime, exit with its code.

use std::process::ExitCode;

// lapin parses every delivery on its own I/O thread and dlq frees it on another: glibc's
// malloc serialises those frees on the arena lock (13% of a scan's samples); mimalloc
// frees across threads without it (docs/BENCHMARKS-HISTORY.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    // Even a bug must not print a credential: panic messages are scrubbed like any diagnostic.
    std::panic::set_hook(Box::new(|info| {
        use std::io::Write as _;
        // Never a panic inside the hook (a terminal that hung up fails every write).
        let _ = writeln!(
            std::io::stderr(),
            "dlq: internal error (please report): {}",
            dlq::redact::scrub(&info.to_string())
        );
    }));
    let args: Vec<_> = std::env::args_os().collect();
    let cli = match dlq::parse(args) {
        Ok(cli) => cli,
        Err(exit) => return exit.into(),
    };
    dlq::tls::install_crypto_provider();
    // One thread: dlq's own work per message is small next to lapin's I/O thread, and a
    // second runtime thread only added a wake-up and a cross-thread hand-off per message
    // (a 200k-message scan: 26 -> 16 µs of CPU per message; replays unchanged).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(dlq::error::Exit::Failure);
        }
    };
    runtime.block_on(dlq::run(cli)).into()
}

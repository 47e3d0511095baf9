use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    // Even a bug must not print a credential: panic messages are scrubbed like any diagnostic.
    std::panic::set_hook(Box::new(|info| {
        eprintln!(
            "dlq: internal error (please report): {}",
            dlq::redact::scrub(&info.to_string())
        );
    }));
    let cli = dlq::cli::Cli::parse();
    dlq::tls::install_crypto_provider();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
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

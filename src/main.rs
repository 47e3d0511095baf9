use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let cli = dlq::cli::Cli::parse();
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

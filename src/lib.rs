//! dlq: list, inspect, filter, replay and archive dead letters from RabbitMQ DLQs and
//! a Celery failed-task table.
pub mod archive;
pub mod celery;
pub mod cli;
pub mod commands;
pub mod error;
pub mod fingerprint;
pub mod generated;
pub mod jq;
pub mod model;
pub mod output;
pub mod rabbit;
pub mod redact;
pub mod replay;
pub mod report;
pub mod select;
pub mod settings;
pub mod source;
pub mod tls;
pub mod when;

use error::Exit;

/// Runs a parsed command line; the only place outcomes become exit codes.
pub async fn run(cli: cli::Cli) -> Exit {
    match commands::dispatch(cli).await {
        Ok(exit) => exit,
        Err(e) => {
            // Broken pipe (`dlq filter | head`) is not an error worth a message.
            if e.chain().any(|c| {
                c.downcast_ref::<std::io::Error>()
                    .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            }) {
                return Exit::Ok;
            }
            eprintln!("error: {}", redact::scrub(&format!("{e:#}")));
            error::exit_for(&e)
        }
    }
}

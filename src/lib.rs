//! dlq: list, inspect, filter, replay and archive dead letters from RabbitMQ DLQs and
//! a Celery failed-task table.
//!
//! The layers, each importing only from the ones below it:
//!
//! ```text
//! main -> run (this file: the one place outcomes become exit codes)
//!   commands/          one thin file per command: validated options in, an exit code out
//!   replay/, archive/  the actions, each a plan and a run, through bulk's gate
//!                      ("move messages back" is replay/queue.rs)
//!   source/            the two record sources: table/ (all SQL) and queue.rs (deliveries -> records)
//!   rabbit/, celery/,  RabbitMQ mechanics ("take a message without removing it" is rabbit/take.rs,
//!   redis/             publishing with confirms rabbit/publish.rs); Celery's message, dispatch
//!                      (celery/amqp.rs, celery/redis.rs over redis/), workers
//!   model, select, output, settings, bulk, cli, error, redact, tls, when, jq, fingerprint
//! ```
/// `eprintln!` that never panics: once a terminal hangs up (SIGHUP: an SSH session or a
/// terminal window gone), writing to it fails, and `eprintln!` would panic in the middle of
/// giving back what dlq holds.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

pub(crate) mod archive;
pub(crate) mod audit;
pub(crate) mod browse;
pub(crate) mod bulk;
pub(crate) mod celery;
pub mod cli;
pub(crate) mod commands;
pub(crate) mod endpoints;
pub mod error;
pub(crate) mod fingerprint;
pub mod generated;
pub(crate) mod group;
pub(crate) mod jq;
pub(crate) mod model;
pub(crate) mod monitor;
pub(crate) mod output;
pub(crate) mod pace;
pub(crate) mod rabbit;
pub mod redact;
pub(crate) mod redis;
pub(crate) mod reference;
pub(crate) mod replay;
pub(crate) mod report;
pub(crate) mod select;
pub(crate) mod settings;
pub(crate) mod signals;
pub(crate) mod source;
#[doc(hidden)]
pub mod testing;
pub mod tls;
pub(crate) mod transform;
pub(crate) mod when;

use error::Exit;

/// Parses the command line; on a bad one, prints clap's message and returns the exit code:
/// 0 for `--help` / `--version`, 2 for a usage error, but 3 (UNKNOWN) under `dlq check`,
/// whose exit codes are Nagios states (a plugin's usage error is never CRITICAL).
pub fn parse<I, T>(args: I) -> Result<cli::Cli, Exit>
where
    I: IntoIterator<Item = T> + Clone,
    T: Into<std::ffi::OsString> + Clone,
{
    use clap::Parser as _;
    let e = match cli::Cli::try_parse_from(args.clone()) {
        Ok(c) => return Ok(c),
        Err(e) => e,
    };
    let _ = e.print();
    if !e.use_stderr() {
        return Err(Exit::Ok);
    }
    let under_check = cli::command()
        .ignore_errors(true)
        .try_get_matches_from(args)
        .is_ok_and(|m| m.subcommand_name() == Some("check"));
    if under_check {
        let first = e.to_string();
        let first = first.lines().next().unwrap_or("usage error");
        return Err(commands::check::unknown_usage(first));
    }
    Err(Exit::Usage)
}

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
            let mut said = error::describe(&e);
            // What the failed operation saw of a lost connection ("invalid channel state")
            // says less than the loss itself.
            if let Some(led) = rabbit::led_by_loss(&said) {
                said = led;
            }
            say!("error: {}", redact::scrub(&said));
            error::exit_for(&e)
        }
    }
}

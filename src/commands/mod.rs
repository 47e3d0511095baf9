//! One file per subcommand, each thin: validated options in, an exit code out.

pub(crate) mod archive;
pub(crate) mod audit;
pub(crate) mod browse;
pub(crate) mod check;
pub(crate) mod completions;
pub(crate) mod filter;
pub(crate) mod init;
pub(crate) mod inspect;
pub(crate) mod list;
mod lower;
pub(crate) mod metrics;
pub(crate) mod replay;
pub(crate) mod workers;

use crate::cli::{Cli, Command};
use crate::error::Exit;
use crate::settings::Settings;
use anyhow::Result;

/// Builds settings once, runs the command, then lets sources finish their background
/// work (a queue reader giving messages back) before the process may exit.
pub(crate) async fn dispatch(cli: Cli) -> Result<Exit> {
    let result = run_command(cli).await;
    // A notice of the block given on the browser's screen went with it.
    if let Some((_, reason)) = crate::rabbit::blocked()
        && crate::source::unsettled()
    {
        crate::output::notice(format!(
            "dlq gives back what its reads hold once the broker lets it: it blocks publishing ({reason}: a memory or disk alarm); {}",
            crate::rabbit::blocked_stop_hint()
        ));
    }
    // A second signal while the reads give back ends dlq at once.
    crate::bulk::give_back_after(result.as_ref().err(), crate::source::settle()).await;
    match crate::source::late_error() {
        Some(e) if result.is_ok() => Err(e),
        _ => result,
    }
}

/// Each command lowers its own flags (`lower`) into its options, once, then runs.
async fn run_command(cli: Cli) -> Result<Exit> {
    if let Command::Completions(a) = &cli.command {
        return completions::run(a.shell);
    }
    let settings = match Settings::from_env(&cli.global) {
        Ok(s) => s,
        // A monitoring system reads exit codes as Nagios states: never CRITICAL for a typo.
        Err(e) if matches!(cli.command, Command::Check(_)) => {
            return Ok(check::unknown_before_settings(&e));
        }
        Err(e) => return Err(e),
    };
    let printer = settings.printer();
    crate::output::set_notices(&printer);
    crate::audit::set_read_trail(settings.endpoints.audit_log.clone(), printer.clone());
    let (s, p, now) = (&settings, &printer, chrono::Utc::now());
    match cli.command {
        Command::List(a) => list::run(s, p, list::lower(a)).await,
        Command::Inspect(a) => inspect::run(s, p, inspect::lower(a, now)?).await,
        Command::Filter(a) => filter::run(s, p, filter::lower(a, now)?).await,
        Command::Replay(a) => replay::run(s, p, a, now).await,
        Command::Archive(a) => archive::run(s, p, archive::lower(a, now)?).await,
        Command::Init(a) => init::run(s, p, init::lower(a)).await,
        Command::Workers(a) => workers::run(s, p, workers::lower(a)?).await,
        Command::Check(a) => check::run(s, p, check::lower(a)).await,
        Command::Metrics(a) => metrics::run(s, p, metrics::lower(a)).await,
        Command::Audit(a) => audit::run(s, p, audit::lower(a, now)?).await,
        Command::Browse(a) => browse::run(s, p, browse::lower(s, a)?).await,
        Command::Completions(_) => unreachable!("handled above"),
    }
}

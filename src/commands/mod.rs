//! One file per subcommand, each thin: validated options in, an exit code out.

pub mod archive;
pub mod audit;
pub mod check;
pub mod completions;
pub mod filter;
pub mod init;
pub mod inspect;
pub mod list;
pub mod metrics;
pub mod replay;
pub mod workers;

use crate::cli::{Cli, Command, SourceArgs};
use crate::error::Exit;
use crate::settings::{self, Settings};
use crate::source::{QueueOptions, SourceChoice};
use anyhow::Result;

/// Turns the source flags into a source choice.
pub fn source_choice(args: &SourceArgs) -> SourceChoice {
    if args.queues.is_empty() {
        SourceChoice::Table
    } else {
        SourceChoice::Queues(QueueOptions {
            names: args.queues.clone(),
            motivo_headers: args.motivo_header.clone(),
            force: args.force,
        })
    }
}

/// Builds settings once, runs the command, then lets sources finish their background
/// work (a queue reader giving messages back) before the process may exit.
pub async fn dispatch(cli: Cli) -> Result<Exit> {
    let result = run_command(cli).await;
    crate::source::settle().await;
    result
}

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
    crate::audit::set_read_trail(settings.endpoints.audit_log.clone(), printer.clone());
    for w in &settings.warnings {
        printer.warn(w);
    }
    let now = chrono::Utc::now();
    match cli.command {
        Command::List(a) => {
            let opts = list::Options {
                queues: a.queues,
                top: a.top,
                sample: a.sample,
                motivo_headers: a.motivo_header,
                exclude: a.exclude,
            };
            list::run(&settings, &printer, opts).await
        }
        Command::Inspect(a) => {
            let mut selection = settings::selection(&a.selection, now)?;
            if selection.limit.is_none() {
                selection.limit = Some(inspect::DEFAULT_LIMIT);
            }
            let opts = inspect::Options {
                source: source_choice(&a.source),
                selection,
                full: a.full,
            };
            inspect::run(&settings, &printer, opts).await
        }
        Command::Filter(a) => {
            let selection = settings::selection(&a.selection, now)?;
            let mode = match (a.group_by, a.count) {
                (Some(g), _) => filter::Mode::Group(g.into()),
                (None, true) => filter::Mode::Count,
                (None, false) => filter::Mode::Export,
            };
            let opts = filter::Options {
                source: source_choice(&a.source),
                selection,
                mode,
            };
            filter::run(&settings, &printer, opts).await
        }
        Command::Replay(a) => {
            let selection = settings::selection(&a.selection, now)?;
            replay::run(&settings, &printer, source_choice(&a.source), selection, &a).await
        }
        Command::Archive(a) => {
            let selection = settings::selection(&a.selection, now)?;
            archive::run(&settings, &printer, source_choice(&a.source), selection, &a).await
        }
        Command::Init(a) => {
            init::run(&settings, &printer, init::Options { dry_run: a.dry_run }).await
        }
        Command::Workers(a) => {
            let opts = workers::Options {
                full: a.full,
                timeout: settings::worker_timeout(&a.worker_timeout)?,
            };
            workers::run(&settings, &printer, opts).await
        }
        Command::Check(a) => {
            let opts = check::Options {
                queues: a.source.queues,
                motivo_headers: a.source.motivo_header,
                force: a.source.force,
                sample: a.sample,
                warn_pending: a.warn_pending,
                crit_pending: a.crit_pending,
                warn_age: a.warn_age,
                crit_age: a.crit_age,
                warn_new: a.warn_new,
                crit_new: a.crit_new,
                new_within: a.new_within,
            };
            check::run(&settings, &printer, opts).await
        }
        Command::Metrics(a) => {
            let opts = metrics::Options {
                queues: a.source.queues,
                motivo_headers: a.source.motivo_header,
                force: a.source.force,
                sample: a.sample,
                textfile: a.textfile,
                listen: a.listen,
                interval: a.interval,
            };
            metrics::run(&settings, &printer, opts).await
        }
        Command::Audit(a) => {
            let opts = audit::Options {
                since: audit::since(a.since.as_deref(), now)?,
                run: a.run,
            };
            audit::run(&settings, &printer, opts).await
        }
        Command::Completions(_) => unreachable!("handled above"),
    }
}

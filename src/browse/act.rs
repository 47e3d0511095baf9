//! The browser's actions: the same engines as `dlq replay` and `dlq archive`, on the
//! ordinary screen, with their plan, their confirmation (never `--yes`), their progress,
//! their report and their audit record. Nothing here decides what is safe; the engines do.

use super::load::SourceRef;
use super::{Request, Term};
use crate::bulk::Safety;
use crate::endpoints::Endpoints;
use crate::error::Exit;
use crate::model::{RecordId, Target};
use crate::output::Printer;
use crate::replay::{self, ReplayCommon};
use crate::select::Selection;
use crate::source::SourceChoice;
use anyhow::Result;
use std::num::NonZeroUsize;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub(super) enum Action {
    Replay,
    /// Replay, then follow each task to its outcome (`dlq replay --follow`).
    ReplayFollow,
    /// Archive, then delete what was archived (`dlq archive --delete`).
    Archive(PathBuf),
    /// Write to a file, change nothing (`dlq archive` without `--delete`).
    Export(PathBuf),
}

impl Action {
    pub(super) fn verb(&self) -> &'static str {
        match self {
            Action::Replay => "replay",
            Action::ReplayFollow => "replay and follow",
            Action::Archive(_) => "archive",
            Action::Export(_) => "export",
        }
    }
}

/// What an action acts on: the marked records (`ids`), else a group and the prompt's terms.
#[derive(Debug, Clone)]
pub(super) struct Job {
    pub(super) action: Action,
    pub(super) source: SourceRef,
    pub(super) terms: Vec<Term>,
    pub(super) fingerprint: Option<String>,
    pub(super) ids: Vec<String>,
}

impl Job {
    pub(super) fn selection(&self, req: &Request) -> Result<Selection> {
        let mut sel = (req.lower)(&self.terms)?;
        sel.fingerprint = self.fingerprint.clone();
        sel.ids = self.ids.iter().map(|i| RecordId::parse(i)).collect();
        Ok(sel)
    }
}

/// Runs the job on the ordinary screen and waits for Enter, so the report stays readable.
pub(super) async fn run(endpoints: &Endpoints, printer: &Printer, req: &Request, job: &Job) {
    let outcome = match job.selection(req) {
        Ok(sel) => {
            println!(
                "dlq browse: {} {} from {} {}\n",
                job.action.verb(),
                sel.describe(),
                job.source.kind,
                job.source.label
            );
            engine(endpoints, printer, req, job, sel).await
        }
        Err(e) => Err(e),
    };
    match outcome {
        Ok(exit) => println!(
            "\n{} ended with exit {} ({exit:?})",
            job.action.verb(),
            exit as u8
        ),
        Err(e) => say!(
            "\nerror: {}",
            crate::redact::scrub(&crate::error::describe(&e))
        ),
    }
    println!("Press Enter to go back to dlq browse");
    let _ = tokio::task::spawn_blocking(|| std::io::stdin().read_line(&mut String::new())).await;
}

async fn engine(
    endpoints: &Endpoints,
    printer: &Printer,
    req: &Request,
    job: &Job,
    selection: Selection,
) -> Result<Exit> {
    let safety = Safety {
        dry_run: false,
        yes: false,
    };
    let queues = match &job.source.choice {
        SourceChoice::Queues(q) => Some(q.clone()),
        SourceChoice::Table => None,
    };
    match (&job.action, queues) {
        (Action::Replay | Action::ReplayFollow, None) => {
            let opts = replay::table::Options {
                common: common(req, selection, safety),
                target: Target::Queue(crate::celery::DEFAULT_CELERY_QUEUE.into()),
                target_is_default: true,
                canary: None,
                follow: follow(&job.action),
            };
            replay::table::run(endpoints, printer, opts).await
        }
        (Action::Replay | Action::ReplayFollow, Some(q)) => {
            let opts = replay::queue::Options {
                record: record_options(&q),
                queues: q.names,
                force: q.force,
                common: common(req, selection, safety),
                canary: None,
                plan_first: false,
                follow: follow(&job.action),
            };
            replay::queue::run(endpoints, printer, opts).await
        }
        (Action::Archive(to) | Action::Export(to), None) => {
            let opts = crate::archive::table::Options {
                selection,
                to: to.clone(),
                delete: matches!(job.action, Action::Archive(_)),
                safety,
            };
            crate::archive::table::run(endpoints, printer, opts).await
        }
        (Action::Archive(to) | Action::Export(to), Some(q)) => {
            let opts = crate::archive::queue::Options {
                record: record_options(&q),
                queues: q.names,
                force: q.force,
                selection,
                to: to.clone(),
                delete: matches!(job.action, Action::Archive(_)),
                safety,
            };
            crate::archive::queue::run(endpoints, printer, opts).await
        }
    }
}

/// `F`: `--follow --enable-events` with the default timeout (5 minutes). With events on
/// already, nothing changes on a worker; without, an idle worker cannot show they are on
/// (Celery says so only when asked to turn them on), so the browser asks for them, for this
/// run, and turns them off again where it turned them on, as `--enable-events` does.
fn follow(action: &Action) -> Option<replay::follow::Follow> {
    matches!(action, Action::ReplayFollow).then_some(replay::follow::Follow {
        timeout: std::time::Duration::from_secs(300),
        enable_events: true,
        mark_on_success: false,
    })
}

fn record_options(q: &crate::source::QueueOptions) -> crate::source::queue::RecordOptions {
    crate::source::queue::RecordOptions {
        motivo_headers: q.motivo_headers.clone(),
        ..Default::default()
    }
}

/// A replay as `dlq replay` runs it without flags: the default window and pace, the worker
/// check with the browser's `--task-map` / `--worker-timeout`, and a confirmation.
fn common(req: &Request, selection: Selection, safety: Safety) -> ReplayCommon {
    ReplayCommon {
        selection,
        target: None,
        rate: None,
        window: NonZeroUsize::new(replay::DEFAULT_WINDOW).expect("non-zero"),
        window_fixed: false,
        max_replays: 3,
        safety,
        workers: req.workers.clone(),
        transform: None,
    }
}

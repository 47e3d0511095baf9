//! `dlq replay --from-file ARCHIVE`: re-dispatch archived dead letters.
//!
//! The archive's checksum is verified before anything else. Archived table rows become Celery
//! tasks again exactly as a table replay builds them (same validation, confirms, provenance
//! headers). Progress is kept in `<archive>.journal`: each record number is appended right
//! after its confirm, so a re-run resumes and does not publish a record twice (duplicates
//! are limited to the publishes in flight when a run dies: at most `--window`).

use super::{Target, print_plan_groups, print_report};
use crate::archive::{self, Journal};
use crate::broker::{self, Outcome, Outgoing, Publisher};
use crate::celery::{self, ReplayOrigin};
use crate::error::{Exit, usage};
use crate::model::{DeadLetter, SourceKind};
use crate::output::Printer;
use crate::report::Report;
use crate::select::Selection;
use crate::settings::Settings;
use crate::{fingerprint, redact};
use anyhow::Result;
use futures_util::StreamExt;
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

pub struct Options<'a> {
    pub file: &'a Path,
    pub selection: Selection,
    /// Explicit target; archived table rows default to the Celery queue.
    pub target: Option<Target>,
    pub dry_run: bool,
    pub yes: bool,
    pub rate: Option<f64>,
    pub window: usize,
}

/// The stored args text of an archived row (exact), else its payload re-serialized.
fn args_text(rec: &DeadLetter) -> Option<String> {
    if let Some(t) = rec
        .raw
        .as_ref()
        .and_then(|r| r.get("args"))
        .and_then(|a| a.as_str())
    {
        return Some(t.to_string());
    }
    (!rec.payload.is_null()).then(|| rec.payload.to_string())
}

fn build(rec: &DeadLetter, replay_id: &str) -> Result<celery::TaskMessage, celery::InvalidTask> {
    let origin = ReplayOrigin {
        table: rec.location.clone(),
        row_id: rec.id.to_string(),
        replay_id: replay_id.to_string(),
        host: super::hostname(),
    };
    celery::build(
        rec.task.as_deref().unwrap_or(""),
        args_text(rec).as_deref(),
        &origin,
    )
}

/// The archived records this run would act on: selected, not yet restored, in file order.
fn selected<'s>(
    file: &'s Path,
    sel: &'s Selection,
    done: &'s HashSet<u64>,
) -> Result<impl Iterator<Item = Result<(u64, DeadLetter)>> + 's> {
    let mut taken: u64 = 0;
    let records = archive::records(file)?;
    Ok(records.filter(move |r| match r {
        Err(_) => true,
        Ok((n, rec)) => {
            if done.contains(n) || !matches!(sel.matches(rec), Ok(true)) {
                return false;
            }
            if sel.limit.is_some_and(|l| taken >= l) {
                return false;
            }
            taken += 1;
            true
        }
    }))
}

pub async fn run(settings: &Settings, printer: &Printer, opts: Options<'_>) -> Result<Exit> {
    let (header, trailer) = archive::verify(opts.file)?;
    printer.info(format!(
        "archive {}: {} record(s) from {} {} written {} on {}; checksum verified",
        opts.file.display(),
        trailer.count,
        header.source,
        header.location,
        header.created_at,
        header.host
    ));
    if header.source != SourceKind::Table.as_str() {
        return Err(usage(format!(
            "archive {} holds queue messages: restoring them needs queue replay support",
            opts.file.display()
        )));
    }
    let journal = Journal::open(opts.file)?;
    if journal.done_count() > 0 {
        printer.info(format!(
            "{} record(s) already restored by an earlier run (journal)",
            journal.done_count()
        ));
    }
    let target = opts
        .target
        .unwrap_or_else(|| Target::Queue(crate::commands::replay::DEFAULT_CELERY_QUEUE.into()));
    let conn = broker::connect(settings).await?;
    let note = target.check(&conn, printer).await?;

    // Plan pass.
    let replay_id = uuid::Uuid::new_v4().to_string();
    let mut groups: BTreeMap<(String, String), u64> = BTreeMap::new();
    let mut invalid: Vec<(crate::model::RecordId, String)> = Vec::new();
    let mut planned: u64 = 0;
    let mut dry = opts.dry_run.then(|| {
        printer.values(
            &["row", "task", "exchange/routing key", "body"],
            super::table::dry_run_line,
        )
    });
    let done = journal.done().clone();
    for r in selected(opts.file, &opts.selection, &done)? {
        let (_, rec) = r?;
        *groups
            .entry((
                rec.task.clone().unwrap_or_default(),
                fingerprint::fingerprint(rec.motivo.as_deref().unwrap_or("")),
            ))
            .or_default() += 1;
        match build(&rec, &replay_id) {
            Ok(msg) => {
                planned += 1;
                if let Some(out) = dry.as_mut() {
                    out.write(super::table::dry_run_view(&rec, &msg, &target))?;
                }
            }
            Err(e) => invalid.push((rec.id.clone(), e.to_string())),
        }
    }
    if let Some(out) = dry {
        out.finish()?;
    }
    printer.info(format!(
        "Plan: re-dispatch {} archived row(s) ({}) as Celery tasks {} on {}",
        planned + invalid.len() as u64,
        opts.selection.describe(),
        target.describe(),
        redact::url(&settings.amqp_url)
    ));
    print_plan_groups(printer, &groups);
    if let Some(n) = note {
        printer.info(n);
    }
    for (id, why) in invalid.iter().take(10) {
        printer.warn(format!("cannot be replayed: id {id}: {why}"));
    }
    if planned == 0 && invalid.is_empty() {
        printer.info("nothing to replay");
        return Ok(Exit::Ok);
    }
    if opts.dry_run {
        printer.info("dry run: nothing was published");
        return Ok(if invalid.is_empty() {
            Exit::Ok
        } else {
            Exit::Partial
        });
    }
    if !printer
        .confirm(&format!("Re-dispatch {planned} archived row(s)?"), opts.yes)
        .await?
    {
        printer.info("nothing done");
        return Ok(Exit::Ok);
    }

    let mut report = Report::new("replay");
    for (id, why) in invalid {
        report.fail(id, why);
    }
    let publisher = Publisher::start(&conn, opts.window.max(1), opts.rate).await?;
    let (exchange, routing_key) = target.route();
    let bar = printer.progress(Some(planned), "replaying");
    let mut journal = journal;
    // Records are read lazily and published with up to `window` confirms outstanding; a
    // signal stops reading new ones.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let signals = super::stop_on_signal(stop.clone());
    let stop_reading = stop.clone();
    let source = selected(opts.file, &opts.selection, &done)?
        .take_while(move |_| !stop_reading.load(std::sync::atomic::Ordering::SeqCst));
    let outcomes = futures_util::stream::iter(source)
        .filter_map(|r| {
            let rid = replay_id.clone();
            async move {
                match r {
                    Err(e) => Some(Err(e)),
                    Ok((n, rec)) => build(&rec, &rid).ok().map(|m| Ok((n, rec.id, m))),
                }
            }
        })
        .map(|r| {
            let publisher = publisher.clone();
            let (exchange, routing_key) = (exchange.clone(), routing_key.clone());
            async move {
                let (n, id, msg) = r?;
                let outcome = publisher
                    .publish(Outgoing {
                        exchange,
                        routing_key,
                        body: msg.body,
                        properties: msg.properties,
                    })
                    .await;
                Ok::<_, anyhow::Error>((n, id, outcome))
            }
        })
        .buffered(opts.window.max(1));
    let mut outcomes = std::pin::pin!(outcomes);
    while let Some(item) = outcomes.next().await {
        bar.inc(1);
        if stop.load(std::sync::atomic::Ordering::SeqCst) && report.stopped.is_none() {
            // Outcomes already in flight are still recorded; no new publish starts.
            report.stopped = Some("interrupted".into());
        }
        let (n, id, outcome) = match item {
            Ok(x) => x,
            Err(e) => {
                report.stopped = Some(format!("{e:#}"));
                break;
            }
        };
        match outcome {
            Ok(Outcome::Confirmed) => {
                journal.record(n)?;
                report.success();
            }
            Ok(Outcome::Returned { code, text }) => report.fail(
                id,
                format!("returned by the broker as unroutable ({code} {text})"),
            ),
            Ok(Outcome::Nacked) => report.fail(id, "nacked by the broker"),
            Err(e) => {
                report.stopped = Some(format!("broker: {e:#}"));
                report.fail(id, "outcome unknown: broker connection lost");
                break;
            }
        }
    }
    signals.abort();
    journal.sync()?;
    bar.finish_and_clear();
    print_report(printer, &report, "replayed");
    if report.stopped.is_some() {
        printer.warn(
            "run the same command again to finish: records already confirmed are skipped (journal)",
        );
    }
    Ok(report.exit())
}

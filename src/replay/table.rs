//! Table replay: re-dispatch failed Celery tasks from the failed-task table.
//!
//! Each row is handled in its own database transaction: claim it (`FOR UPDATE SKIP LOCKED`,
//! or `BEGIN IMMEDIATE` on SQLite), build and validate its Celery message, publish it with
//! `mandatory` and a publisher confirm, and mark it `reprocessada` and commit right after
//! ITS confirm. Up to `window` rows are in flight at once (one connection each), so a crash
//! can leave at most `window` rows published but not marked: the documented duplicate window.

use super::{Target, print_plan_groups};
use crate::broker::{self, Outcome, Outgoing, Publisher};
use crate::celery::{self, ReplayOrigin};
use crate::error::Exit;
use crate::model::{DeadLetter, RecordId};
use crate::output::{Printer, ellipsize};
use crate::report::Report;
use crate::select::{Selected, Selection};
use crate::settings::{Dialect, Settings};
use crate::source::sql::{DecodeRecord, FailedTable, SqlBuilder, scrubbed};
use crate::{bind_all, redact, with_pool};
use anyhow::Result;
use chrono::Utc;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tokio::sync::mpsc;

pub struct Options {
    pub selection: Selection,
    pub target: Target,
    pub dry_run: bool,
    pub yes: bool,
    pub rate: Option<f64>,
    /// Rows in flight at once (PostgreSQL/MySQL); SQLite always uses 1.
    pub window: usize,
}

/// What the plan pass found.
struct Plan {
    ids: Vec<RecordId>,
    /// (task, reason fingerprint) -> rows
    groups: BTreeMap<(String, String), u64>,
    /// Rows that cannot become a valid Celery message: reported, never published.
    invalid: Vec<(RecordId, String)>,
}

/// How one row ended.
enum RowEvent {
    Replayed,
    Failed(String),
    Skipped(String),
    /// The run must stop (broker or database gone); the row is left un-marked.
    Fatal(String),
}

pub async fn run(settings: &Settings, printer: &Printer, opts: Options) -> Result<Exit> {
    let db = settings.require_database()?;
    let window = match db.dialect {
        Dialect::Sqlite => 1,
        _ => opts.window.max(1),
    };
    // One connection per in-flight row, plus one for reading.
    let table = FailedTable::open_sized(db, &settings.table, window as u32 + 2).await?;
    let replay_id = uuid::Uuid::new_v4().to_string();
    let origin = |row_id: &RecordId| ReplayOrigin {
        table: table.location(),
        row_id: row_id.to_string(),
        replay_id: replay_id.clone(),
        host: super::hostname(),
    };

    // The broker comes first: an unknown target refuses the replay before any planning output.
    let conn = broker::connect(settings).await?;
    let target_note = opts.target.check(&conn, printer).await?;

    let mut dry = opts.dry_run.then(|| {
        printer.values(
            &["row", "task", "exchange/routing key", "body"],
            dry_run_line,
        )
    });
    let plan = plan(&table, &opts.selection, printer, |rec| {
        let built = celery::build(
            rec.task.as_deref().unwrap_or(""),
            rec.payload_text.as_deref(),
            &origin(&rec.id),
        );
        if let (Some(out), Ok(msg)) = (dry.as_mut(), &built) {
            out.write(dry_run_view(rec, msg, &opts.target))?;
        }
        Ok(built.err().map(|e| e.to_string()))
    })
    .await?;
    if let Some(out) = dry {
        out.finish()?;
    }

    let total = plan.ids.len() as u64 + plan.invalid.len() as u64;
    printer.info(format!(
        "Plan: replay {total} row(s) of table {} ({}) as Celery tasks {} on {}",
        table.location(),
        opts.selection.describe(),
        opts.target.describe(),
        redact::url(&settings.amqp_url),
    ));
    print_plan_groups(printer, &plan.groups);
    if let Some(note) = target_note {
        printer.info(note);
    }
    if !plan.invalid.is_empty() {
        printer.warn(format!(
            "{} row(s) cannot become a valid Celery message and will be left untouched:",
            plan.invalid.len()
        ));
        for (id, why) in plan.invalid.iter().take(10) {
            printer.warn(format!("  id {id}: {why}"));
        }
    }
    if total == 0 {
        printer.info("nothing to replay");
        return Ok(Exit::Ok);
    }
    if opts.dry_run {
        printer.info("dry run: nothing was published or marked");
        return Ok(if plan.invalid.is_empty() {
            Exit::Ok
        } else {
            Exit::Partial
        });
    }
    let tasks: Vec<&str> = {
        let mut t: Vec<&str> = plan.groups.keys().map(|(t, _)| t.as_str()).collect();
        t.dedup();
        t
    };
    printer.info(format!(
        "The workers consuming the target must register: {} (a worker drops tasks it does not know).",
        tasks.join(", ")
    ));
    if !printer
        .confirm(&format!("Replay {} row(s)?", plan.ids.len()), opts.yes)
        .await?
    {
        printer.info("nothing done");
        return Ok(Exit::Ok);
    }

    let mut report = Report::new("replay");
    for (id, why) in plan.invalid {
        report.fail(id, why);
    }
    let publisher = Publisher::start(&conn, window, opts.rate).await?;
    let ids = Arc::new(plan.ids);
    let next = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, mut rx) = mpsc::channel::<(RecordId, RowEvent)>(window * 2);
    let sel = Arc::new(opts.selection);
    let target = Arc::new(opts.target);
    for _ in 0..window.min(ids.len()) {
        let (table, ids, next, stop, tx, sel, target, publisher) = (
            table.clone(),
            ids.clone(),
            next.clone(),
            stop.clone(),
            tx.clone(),
            sel.clone(),
            target.clone(),
            publisher.clone(),
        );
        let replay_id = replay_id.clone();
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(id) = ids.get(i) else { break };
                let origin = ReplayOrigin {
                    table: table.location(),
                    row_id: id.to_string(),
                    replay_id: replay_id.clone(),
                    host: super::hostname(),
                };
                let ev = replay_row(&table, &sel, &publisher, &target, id, &origin).await;
                if matches!(ev, RowEvent::Fatal(_)) {
                    stop.store(true, Ordering::SeqCst);
                }
                if tx.send((id.clone(), ev)).await.is_err() {
                    break;
                }
            }
        });
    }
    drop(tx);
    drop(publisher);

    let bar = printer.progress(Some(ids.len() as u64), "replaying");
    let interrupted = super::stop_on_signal(stop.clone());
    while let Some((id, ev)) = rx.recv().await {
        bar.inc(1);
        match ev {
            RowEvent::Replayed => report.success(),
            RowEvent::Failed(why) => report.fail(id, why),
            RowEvent::Skipped(why) => report.skip(id, why),
            RowEvent::Fatal(why) => {
                if report.stopped.is_none() {
                    report.stopped = Some(why.clone());
                }
                report.fail(id, why);
            }
        }
    }
    bar.finish_and_clear();
    if stop.load(Ordering::SeqCst) && report.stopped.is_none() {
        report.stopped = Some("interrupted".into());
    }
    interrupted.abort();
    super::print_report(printer, &report, "replayed");
    if report.stopped.is_some() {
        printer.warn(format!(
            "rows not reported as replayed were left un-marked; run the same command again to finish (at most {window} of them may have been published already and will be published again)"
        ));
    }
    Ok(report.exit())
}

/// Streams the selection once: the ids to replay, groups for the plan, invalid rows.
async fn plan(
    table: &FailedTable,
    sel: &Selection,
    printer: &Printer,
    mut check: impl FnMut(&DeadLetter) -> Result<Option<String>>,
) -> Result<Plan> {
    let rx = table.stream(sel)?;
    let mut selected = Selected::new(rx, sel);
    let mut plan = Plan {
        ids: Vec::new(),
        groups: BTreeMap::new(),
        invalid: Vec::new(),
    };
    while let Some(rec) = selected.next().await {
        let rec = rec?;
        let key = (
            rec.task.clone().unwrap_or_default(),
            crate::fingerprint::fingerprint(rec.motivo.as_deref().unwrap_or("")),
        );
        *plan.groups.entry(key).or_default() += 1;
        match check(&rec)? {
            None => plan.ids.push(rec.id),
            Some(why) => plan.invalid.push((rec.id, why)),
        }
    }
    if let Some(w) = selected.eval_warning() {
        printer.warn(w);
    }
    Ok(plan)
}

/// One row, one transaction: claim, re-check, build, publish, confirm, mark, commit.
async fn replay_row(
    table: &FailedTable,
    sel: &Selection,
    publisher: &Publisher,
    target: &Target,
    id: &RecordId,
    origin: &ReplayOrigin,
) -> RowEvent {
    let mut b = SqlBuilder::new(table.dialect);
    let claim = match table.claim_sql(&mut b, id, sel.replayed) {
        Ok(s) => s,
        Err(e) => return RowEvent::Failed(e.to_string()),
    };
    with_pool!(&table.pool, p => {
        let begun = if table.dialect == Dialect::Sqlite {
            p.begin_with("BEGIN IMMEDIATE").await
        } else {
            p.begin().await
        };
        let mut tx = match begun {
            Ok(tx) => tx,
            Err(e) => return RowEvent::Fatal(format!("database: {}", scrubbed(e))),
        };
        let row = match bind_all!(sqlx::query(sqlx::AssertSqlSafe(claim)), b.binds).fetch_optional(&mut *tx).await {
            Ok(r) => r,
            Err(e) => return RowEvent::Fatal(format!("database: {}", scrubbed(e))),
        };
        let Some(row) = row else {
            return RowEvent::Skipped("already replayed, or being replayed by another run".into());
        };
        let rec = match table.decode(&row) {
            Ok(r) => r,
            Err(e) => return RowEvent::Failed(format!("cannot read row: {e}")),
        };
        // The row may have changed since the plan: replay only what still matches.
        if !matches!(sel.matches(&rec), Ok(true)) {
            return RowEvent::Skipped("no longer matches the selection".into());
        }
        let msg = match celery::build(rec.task.as_deref().unwrap_or(""), rec.payload_text.as_deref(), origin) {
            Ok(m) => m,
            Err(e) => return RowEvent::Failed(e.to_string()),
        };
        let (exchange, routing_key) = target.route();
        let outcome = publisher
            .publish(Outgoing { exchange, routing_key, body: msg.body, properties: msg.properties })
            .await;
        match outcome {
            Ok(Outcome::Confirmed) => {}
            Ok(Outcome::Returned { code, text }) => {
                return RowEvent::Failed(format!("returned by the broker as unroutable ({code} {text}); not marked"));
            }
            Ok(Outcome::Nacked) => return RowEvent::Failed("nacked by the broker; not marked".into()),
            Err(e) => return RowEvent::Fatal(format!("broker: {e:#}")),
        }
        let mut mb = SqlBuilder::new(table.dialect);
        let mark = match table.mark_sql(&mut mb, id, Utc::now()) {
            Ok(s) => s,
            Err(e) => return RowEvent::Fatal(e.to_string()),
        };
        let marked = async {
            bind_all!(sqlx::query(sqlx::AssertSqlSafe(mark)), mb.binds).execute(&mut *tx).await?;
            tx.commit().await
        }
        .await;
        match marked {
            Ok(()) => RowEvent::Replayed,
            Err(e) => RowEvent::Fatal(format!(
                "database: {} (row {id} was published but could not be marked; the next run publishes it again)",
                scrubbed(e)
            )),
        }
    })
}

/// The message a dry run shows for one row.
pub fn dry_run_view(
    rec: &DeadLetter,
    msg: &celery::TaskMessage,
    target: &Target,
) -> serde_json::Value {
    let (exchange, routing_key) = target.route();
    json!({
        "row_id": rec.id,
        "task": msg.task,
        "exchange": exchange,
        "routing_key": routing_key,
        "properties": crate::amqp_codec::properties_to_json(&msg.properties),
        "headers": crate::amqp_codec::table_to_json(&msg.headers),
        "body": serde_json::from_slice::<serde_json::Value>(&msg.body).unwrap_or(serde_json::Value::Null),
    })
}

/// Short one-line view of a would-be message for table output.
pub fn dry_run_line(v: &serde_json::Value) -> Vec<String> {
    vec![
        v["row_id"].to_string(),
        v["task"].as_str().unwrap_or("").to_string(),
        format!(
            "{}/{}",
            v["exchange"].as_str().unwrap_or(""),
            v["routing_key"].as_str().unwrap_or("")
        ),
        ellipsize(&v["body"].to_string(), 80),
    ]
}

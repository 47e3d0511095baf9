//! Queue replay: move selected dead letters back where they died.
//!
//! 1. Plan: take every DLQ's messages present now and hold them unacknowledged, select, and
//!    keep the selected ones in memory (up to about 192 MiB) together with a 64-bit hash
//!    of queue + record id per selected message.
//! 2. After confirmation, move exactly the held selected messages: no second read. Past the
//!    budget, everything is given back and the messages present then are taken again in
//!    order; a message is moved only if it was in the plan and still matches. Each is published (default
//!    exchange -> the queue a consumer last gave up on it in, or `--to-queue`/`--to-exchange`) with
//!    `mandatory` and a confirm, and its DLQ copy is acknowledged only after a clean confirm
//!    without a return. Everything else is given back in place when the run ends.
//! 3. At most `--window` publishes are not yet acknowledged in their DLQ at once (in flight,
//!    or confirmed and waiting for a batched ack: `acks`): if dlq dies, those may exist
//!    both in the destination and (given back) in the DLQ: the duplicate window.
//!
//! This room: the entry (`Options`, `run`) and the `Session` both runs share, which owns
//! the broker connection, the checked DLQs and the audit log; the plan pass is in `plan`,
//! the gate in `gate`, the moving in `mover`, routes in `route`, the dry-run rows in
//! `preview`.

mod follow;
mod gate;
mod mover;
mod plan;
mod preview;
mod route;
pub(crate) mod window;

use super::ReplayCommon;
use super::requeue::Stamp;
use super::{note_target, print_report};
use crate::audit::{Audit, Subject};
use crate::celery::dispatch::Dispatcher;
use crate::endpoints::Endpoints;
use crate::error::{Exit, usage};
use crate::model::RecordId;
use crate::output::Printer;
use crate::rabbit::take::Taker;
use crate::rabbit::topology::QueueKind;
use crate::rabbit::{self, Checked};
use crate::replay::follow::{Follow, Watch};
use crate::report::Report;
use crate::source::queue::{self as record, RecordOptions};
use anyhow::Result;
use mover::Ended;

pub(crate) struct Options {
    pub(crate) queues: Vec<String>,
    pub(crate) record: RecordOptions,
    pub(crate) force: bool,
    /// `common.target` `None`: each message goes back to the queue it died in.
    pub(crate) common: ReplayCommon,
    pub(crate) canary: Option<super::Canary>,
    /// Plan (take and select everything) before moving even under `--yes`.
    pub(crate) plan_first: bool,
    /// `--follow`: each moved message followed to its outcome.
    pub(crate) follow: Option<Follow>,
}

/// `--follow`'s subscription, with the Celery remote control it speaks through.
pub(crate) struct Following {
    pub(crate) watch: Watch,
    pub(crate) dispatcher: Dispatcher,
}

pub(crate) async fn run(
    endpoints: &Endpoints,
    printer: &Printer,
    mut opts: Options,
) -> Result<Exit> {
    let mut session = Session::open(endpoints, printer, &mut opts).await?;
    if streams(session.opts) {
        return mover::stream(session).await;
    }
    // 1. Plan. Every DLQ's messages present now are taken and held unacknowledged (nothing
    // else can take them meanwhile); the selected ones are kept in memory while they fit,
    // so what is moved afterwards is exactly what the plan showed, read once. Past the
    // budget the plan keeps only which messages were selected, and the move reads again.
    let mut taken = plan::take_plan(&session).await?;
    let dry = taken.dry.take();
    let gated = gate::plan_gate(&mut session, &mut taken).await;
    if !matches!(gated, Ok(None)) {
        // Stopped at the gate (or the audit log refused the run): give everything back,
        // and only then wait for a dry run's rows to be read.
        let stopped = gated.as_ref().err();
        crate::bulk::release_unmoved(&session.conn, printer, taken.takers, stopped).await;
        let rows = match dry {
            Some(rows) => rows.finish().await,
            None => Ok(()),
        };
        let exit = gated?.unwrap_or(Exit::Ok);
        return rows.map(|()| exit);
    }
    mover::move_planned(session, taken).await
}

/// With --yes (and no dry run, no canary, no --plan-first) nobody reads the plan: select
/// and move in one pass, as a shovel does, instead of taking everything first.
fn streams(opts: &Options) -> bool {
    opts.common.safety.yes
        && !opts.common.safety.dry_run
        && opts.canary.is_none()
        && !opts.plan_first
}

/// What a record is read with. Without a plan to show, a record needs no more than its
/// id, reason and origin, and what --where reads; the plan shows more but never the
/// readable headers, properties and raw copy. --transform may read anything.
fn record_parts(opts: &Options) -> record::Parts {
    let selected = record::Parts::for_selection(&opts.common.selection);
    if opts.common.transform.is_some() {
        record::Parts::ALL
    } else if streams(opts) {
        record::Parts {
            id: true,
            ..selected
        }
    } else {
        record::Parts {
            headers: selected.headers,
            properties: selected.properties,
            raw: selected.raw,
            ..record::Parts::ALL
        }
    }
}

/// One replay run, streamed or planned: what both set up the same way (the connection,
/// the checked DLQs, the run id and the audit log) and end the same way (`finish`).
pub(crate) struct Session<'a> {
    pub(crate) endpoints: &'a Endpoints,
    pub(crate) printer: &'a Printer,
    pub(crate) opts: &'a Options,
    pub(crate) conn: crate::rabbit::Connection,
    pub(crate) checked: Vec<Checked>,
    pub(crate) replay_id: String,
    pub(crate) audit: Audit,
    /// `--follow`.
    pub(crate) watch: Option<Following>,
    /// The broker's own consumer timeout, asked for under `--rate` (`rabbit::broker_timeout`).
    pub(crate) broker_timeout: Option<u64>,
    /// The signals so far once the session was open: a signal that comes where the run
    /// listens for none (between one DLQ's take and the next, or after the plan's take
    /// before its question) is still one that stops it (`signals::listen_since`).
    pub(crate) signals_at: u64,
}

impl<'a> Session<'a> {
    /// Connects, checks the DLQs (a stream cannot give messages up) and opens the audit
    /// trail; fixes what a record is read with first.
    async fn open(
        endpoints: &'a Endpoints,
        printer: &'a Printer,
        opts: &'a mut Options,
    ) -> Result<Session<'a>> {
        opts.record.parts = record_parts(opts);
        let opts: &'a Options = opts;
        let conn = rabbit::connect(&endpoints.rabbit).await?;
        let checked =
            rabbit::check_queues(&conn, &endpoints.rabbit, printer, &opts.queues, opts.force)
                .await?;
        for q in &checked {
            if q.facts.kind == QueueKind::Stream {
                return Err(usage(format!(
                    "{:?} is a stream: a stream keeps every message, so dlq cannot move messages out of it",
                    q.name
                )));
            }
        }
        let replay_id = uuid::Uuid::new_v4().to_string();
        let names: Vec<&str> = checked.iter().map(|q| q.name.as_str()).collect();
        let subject = Subject {
            action: "replay",
            source: "queue",
            location: names.join(","),
            selection: opts.common.selection.describe(),
            run_id: replay_id.clone(),
        };
        let audit = Audit::new(endpoints.audit_log.as_deref(), printer, subject);
        let watch = match opts.follow {
            Some(f) => Some(Following::start(endpoints, printer, f, opts).await?),
            None => None,
        };
        let broker_timeout = match opts.common.rate {
            Some(_) => asked_broker_timeout(&conn, printer).await,
            None => None,
        };
        Ok(Session {
            endpoints,
            printer,
            opts,
            conn,
            checked,
            replay_id,
            audit,
            watch,
            broker_timeout,
            signals_at: crate::signals::count(),
        })
    }

    /// The `index`th checked DLQ as a take starts on it now.
    pub(crate) fn dlq<'q>(&self, index: usize, q: &'q Checked) -> Dlq<'q> {
        Dlq {
            index,
            name: &q.name,
            stamp: Stamp {
                replay_id: self.replay_id.clone(),
                at: chrono::Utc::now(),
                from_queue: q.name.clone(),
                user: self.endpoints.rabbit.user().to_string(),
                max_replays: self.opts.common.max_replays,
            },
        }
    }

    /// The DLQs, for the plan and the stream's first line.
    pub(crate) fn queue_names(&self) -> String {
        let names: Vec<&str> = self.checked.iter().map(|q| q.name.as_str()).collect();
        names.join(", ")
    }

    /// `--to-queue`/`--to-exchange` checked (its warnings printed): the note for the plan.
    pub(crate) async fn check_target(&self) -> Result<Option<String>> {
        Ok(match &self.opts.common.target {
            Some(t) => note_target(self.printer, rabbit::check_target(&self.conn, t).await?),
            None => None,
        })
    }

    /// The end of both runs: gives back what the plan's takes still hold (`takers`, planned
    /// runs only), stops the progress bar and the signal watch, closes the connection and
    /// reports. `passed` is a streamed run's read error, returned before the close.
    async fn finish(
        mut self,
        ended: Ended,
        takers: Option<Vec<Taker>>,
        passed: Result<()>,
    ) -> Result<Exit> {
        let printer = self.printer;
        if let Some(takers) = takers {
            printer.debug(2, "replay: giving back what was not moved");
            release_all(&self.conn, printer, takers, &ended.acked).await;
        }
        ended.bar.finish_and_clear();
        ended.signals.abort();
        passed?;
        let mut report = ended.report;
        if !self.conn.alive() && !ended.recent.is_empty() {
            self.lost_acks(&ended.recent, &ended.acked, &mut report)
                .await;
        }
        if let (Some(f), Some(moved)) = (&self.watch, ended.followed) {
            f.follow_through(
                self.printer,
                &self.conn,
                &self.checked,
                &self.replay_id,
                moved,
                &mut report,
            )
            .await;
        }
        printer.debug(2, "replay: closing the connection");
        rabbit::close(&self.conn, "dlq replay done").await;
        if let Some(streamed) = ended.streamed {
            if let Some(w) = streamed.warning {
                printer.warn(w);
            }
            if streamed.selected == 0 && report.stopped.is_none() {
                printer.info("nothing to replay");
                self.audit.end(&report, Exit::Ok);
                return Ok(Exit::Ok);
            }
        }
        print_report(printer, &report, "replayed", &mut self.audit);
        if report.stopped.is_some() && !ended.canary_failed {
            warn_unfinished(printer, ended.window_bound);
        }
        Ok(report.exit())
    }
}

/// Under `--rate` a message may wait in dlq's hands for as long as the pace takes to reach
/// it, so the pace is fitted to the consumer timeout: the broker's own too, where it says.
async fn asked_broker_timeout(conn: &rabbit::Connection, printer: &Printer) -> Option<u64> {
    printer.debug(
        1,
        "replay: asking the broker for its own consumer timeout (--rate)",
    );
    let ms = rabbit::reported::broker_timeout(conn).await;
    let said = ms.map_or(
        "not reported (RabbitMQ 3.x, or no management API)".into(),
        crate::rabbit::topology::duration_text,
    );
    printer.debug(
        1,
        format!("replay: the broker's own consumer timeout: {said}"),
    );
    ms
}

impl Session<'_> {
    /// The consumer timeout that applies to `q`'s consumers, and whose it is: the DLQ's own,
    /// else the broker's where it was asked for (`broker_timeout`).
    pub(crate) fn consumer_timeout(&self, q: &Checked) -> Option<(u64, &'static str)> {
        match (q.facts.consumer_timeout, self.broker_timeout) {
            (Some(ms), _) => Some((ms, "its consumer timeout")),
            (None, Some(ms)) => Some((ms, "the broker's consumer_timeout")),
            (None, None) => None,
        }
    }

    /// What a paced take of `q` may hold ahead of its moves (`window::paced_ahead`).
    pub(crate) fn paced_ahead_of(&self, q: &Checked) -> Option<u64> {
        let ms = self.consumer_timeout(q).map(|(ms, _)| ms);
        window::paced_ahead(self.opts.common.rate, ms)
    }

    /// The run's window: `--window N` and `--rate` fix it (fitted to the least its DLQs'
    /// consumer timeouts allow at that rate), else it adapts (`window::of`).
    pub(crate) fn window(&self) -> window::Window {
        let ahead = self
            .checked
            .iter()
            .filter_map(|q| self.paced_ahead_of(q))
            .min();
        window::of(&self.opts.common, ahead)
    }

    /// After a lost connection: the messages counted as moved whose acknowledgement went
    /// with the connection are still in their DLQ as well. Read on a new connection (as
    /// `inspect` reads), once the DLQ has back at least what it had at the start less what
    /// dlq acknowledged (`acked`, per DLQ), they are named and no longer counted as replayed.
    async fn lost_acks(
        &self,
        recent: &std::collections::VecDeque<(usize, RecordId)>,
        acked: &[u64],
        report: &mut Report,
    ) {
        let found = async {
            let conn = rabbit::connect(&self.endpoints.rabbit).await?;
            let mut found = Vec::new();
            for (qi, q) in self.checked.iter().enumerate() {
                let ids: Vec<String> = recent
                    .iter()
                    .filter(|(i, _)| *i == qi)
                    .map(|(_, id)| id.to_string())
                    .collect();
                if ids.is_empty() {
                    continue;
                }
                let (asked, key_of) = (ids.len(), crate::source::queue::record_id);
                let back_to = Some(u64::from(q.depth.ready).saturating_sub(acked[qi]));
                let f = rabbit::reader::find_in_queue(&conn, q, ids, key_of, back_to).await?;
                if !f.all_back {
                    self.printer.warn(format!(
                        "{:?}: the broker had not given back everything the lost connection held when dlq read it again: up to {} message(s) counted as replayed may also still be in it",
                        q.name,
                        asked - f.keys.len()
                    ));
                }
                found.extend(f.keys);
            }
            rabbit::close(&conn, "dlq replay: acknowledgements checked").await;
            anyhow::Ok(found)
        };
        match found.await {
            Ok(found) => {
                for id in found {
                    report.succeeded = report.succeeded.saturating_sub(1);
                    report.fail(
                        RecordId::Text(id),
                        "published and confirmed, but its acknowledgement was lost with the connection: it is in both places (its DLQ and its destination)",
                    );
                }
            }
            Err(e) => self.printer.warn(format!(
                "could not check which acknowledgements were lost with the connection ({e:#}): up to {} message(s) counted as replayed may also still be in their DLQ",
                recent.len()
            )),
        }
    }
}

impl Following {
    /// Subscribes to Celery's events on the DLQs' vhost before anything is taken (every
    /// worker there: each message goes back where it died).
    async fn start(
        endpoints: &Endpoints,
        printer: &Printer,
        follow: Follow,
        opts: &Options,
    ) -> Result<Following> {
        let dispatcher = Dispatcher::amqp(&endpoints.rabbit, &endpoints.mailbox).await?;
        let timeout = opts.common.workers.timeout;
        let watch = Watch::start(&dispatcher, follow, None, timeout).await?;
        printer.info(watch.describe());
        Ok(Following { watch, dispatcher })
    }

    /// After the move: waits for the outcomes, prints them and puts them in the report; turns
    /// off the task events it turned on.
    async fn follow_through(
        &self,
        printer: &Printer,
        conn: &crate::rabbit::Connection,
        checked: &[Checked],
        replay_id: &str,
        moves: follow::Moves,
        report: &mut crate::report::Report,
    ) {
        let (mut tasks, mut stopped) = (moves.earlier, None);
        if !moves.moved.is_empty() {
            let dlqs = (checked, replay_id);
            let timeout = self.watch.follow.timeout;
            let later =
                follow::outcomes(conn, printer, &self.watch, dlqs, moves.moved, timeout).await;
            stopped = later.stopped;
            tasks.extend(later.tasks);
        }
        if !tasks.is_empty() {
            let outcomes = crate::replay::follow::Outcomes::new(tasks, stopped);
            outcomes.print(printer, "message");
            report.follow = Some(outcomes);
        }
        let timeout = self
            .watch
            .follow
            .timeout
            .min(std::time::Duration::from_secs(5));
        if let Some(left_on) = self.watch.finish(&self.dispatcher, timeout).await {
            printer.warn_always(left_on);
        }
    }
}

/// The DLQ a delivery came from: its place among the checked queues, its name, and the
/// replay stamp of what moves out of it.
pub(crate) struct Dlq<'q> {
    pub(crate) index: usize,
    pub(crate) name: &'q str,
    pub(crate) stamp: Stamp,
}

/// Gives back everything the takers hold and not acknowledged (`acked` per DLQ, may be empty).
async fn release_all(
    conn: &crate::rabbit::Connection,
    printer: &Printer,
    takers: Vec<Taker>,
    acked: &[u64],
) {
    for (i, t) in takers.into_iter().enumerate() {
        let held = t.taken.saturating_sub(acked.get(i).copied().unwrap_or(0));
        for note in t.release(conn, held).await {
            printer.warn(note);
        }
    }
}

fn warn_unfinished(printer: &Printer, window: usize) {
    printer.warn(format!(
        "messages not reported as replayed are still in the DLQ; run the same command again to finish (at most {window} may now be both in their destination and in the DLQ)"
    ));
}

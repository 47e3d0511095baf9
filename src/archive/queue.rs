//! Archiving dead-letter queues.
//!
//! Without `--delete` the DLQs are only read (they stay as they are). With `--delete`, the
//! messages present at the start are taken in order and held unacknowledged while the
//! selected ones are written; once the archive is complete, flushed, fsynced and in place,
//! exactly those are acknowledged, and everything else is given back in its place. A crash
//! or a full disk before that point removes nothing: the broker requeues what was held.
//! An exclusive lock queue per DLQ keeps two archive runs from overlapping.

use super::ArchiveWriter;
use crate::bulk::Safety;
use crate::endpoints::Endpoints;
use crate::error::{Exit, usage};
use crate::output::Printer;
use crate::rabbit;
use crate::rabbit::Checked;
use crate::rabbit::reader::ReadSpec;
use crate::rabbit::take::Taker;
use crate::rabbit::topology::QueueKind;
use crate::select::{Selected, Selection, Selector};
use crate::source::queue::{self as record, RecordOptions};
use anyhow::{Result, anyhow, bail};
use lapin::options::QueueDeclareOptions;
use lapin::types::FieldTable;
use std::path::PathBuf;
use std::sync::Arc;

pub(crate) struct Options {
    pub(crate) queues: Vec<String>,
    pub(crate) record: RecordOptions,
    pub(crate) force: bool,
    pub(crate) selection: Selection,
    pub(crate) to: PathBuf,
    pub(crate) delete: bool,
    pub(crate) safety: Safety,
}

/// The name of the exclusive queue that marks "an archive of `queue` is running".
fn lock_name(queue: &str) -> String {
    format!("dlq.archive-lock.{queue}")
}

/// Exclusive queues belong to one connection: a second declare fails, and the broker
/// removes the queue when the connection ends, even after kill -9.
async fn lock(conn: &crate::rabbit::Connection, queue: &str) -> Result<lapin::Channel> {
    let ch = conn.create_channel().await?;
    let opts = QueueDeclareOptions {
        exclusive: true,
        auto_delete: true,
        ..Default::default()
    };
    match ch
        .queue_declare(
            lock_name(queue).as_str().into(),
            opts,
            FieldTable::default(),
        )
        .await
    {
        Ok(_) => Ok(ch),
        Err(e) if rabbit::is_resource_locked(&e) => Err(anyhow!(
            "another dlq archive run holds the lock on queue {queue:?} (try again when it is done)"
        )),
        Err(e) => Err(anyhow!("cannot take the archive lock for {queue:?}: {e}")),
    }
}

/// One run's connection, the queues it checked once, and their archive locks.
struct Session {
    conn: Arc<crate::rabbit::Connection>,
    checked: Vec<Checked>,
    names: Vec<String>,
    _locks: Vec<lapin::Channel>,
}

impl Session {
    /// The selected records, read on this session's connection (nothing is changed).
    fn selected<'a>(&self, printer: &Printer, opts: &'a Options) -> Selected<'a> {
        let rx = crate::source::queue::stream_checked(
            printer.clone(),
            self.conn.clone(),
            self.checked.clone(),
            opts.record.clone(),
            false,
        );
        Selected::new(rx, &opts.selection)
    }
}

/// check -> (count and gate, for a dry run or before --delete) -> write [-> delete].
pub(crate) async fn run(endpoints: &Endpoints, printer: &Printer, opts: Options) -> Result<Exit> {
    if opts.delete && opts.to.as_os_str() == "-" {
        return Err(usage(
            "--delete needs an archive file: stdout cannot be fsynced before deleting",
        ));
    }
    let session = open(endpoints, printer, &opts).await?;
    let mut audit = super::audit(
        endpoints,
        printer,
        opts.delete,
        "queue",
        session.names.join(","),
        opts.selection.describe(),
    );
    if opts.safety.dry_run || (opts.delete && !opts.safety.yes) {
        let mut selected = session.selected(printer, &opts);
        let mut n = 0u64;
        while let Some(r) = selected.next().await {
            r?;
            n += 1;
        }
        drop(selected);
        crate::source::settle().await;
        let intent = super::Intent {
            count: n,
            what: format!("message(s) of {}", session.names.join(", ")),
            selection: &opts.selection.describe(),
            to: &opts.to,
            delete: opts.delete,
            safety: opts.safety,
        };
        if let Some(exit) = super::confirm(printer, intent, audit.as_mut()).await? {
            rabbit::close(&session.conn, "dlq archive done").await;
            return Ok(exit);
        }
    }
    let header = super::header(
        "queue",
        &session.names.join(","),
        &opts.selection.describe(),
    );
    // Under --yes there was no gate: the run starts here.
    if let Some(a) = audit.as_mut() {
        a.start(None)?;
    }
    let writer = ArchiveWriter::create(&opts.to, &header)?;
    let exit = if opts.delete {
        archive_and_delete(printer, &opts, &session, writer, audit.as_mut()).await
    } else {
        archive_only(printer, &opts, &session, writer).await
    };
    // A read that stopped early (an error, a signal) gives back on this connection.
    crate::source::settle().await;
    rabbit::close(&session.conn, "dlq archive done").await;
    exit
}

/// Connects, checks every queue once, and takes each queue's archive lock.
async fn open(endpoints: &Endpoints, printer: &Printer, opts: &Options) -> Result<Session> {
    let target = endpoints.rabbit.clone();
    let conn = rabbit::connect(&target).await?;
    let checked = rabbit::check_queues(&conn, &target, printer, &opts.queues, opts.force).await?;
    if opts.delete
        && let Some(s) = checked.iter().find(|q| q.facts.kind == QueueKind::Stream)
    {
        return Err(usage(format!(
            "{:?} is a stream: a stream keeps every message, so --delete cannot remove any",
            s.name
        )));
    }
    let mut locks = Vec::new();
    for q in &checked {
        locks.push(lock(&conn, &q.name).await?);
    }
    Ok(Session {
        conn: Arc::new(conn),
        names: checked.iter().map(|q| q.name.clone()).collect(),
        checked,
        _locks: locks,
    })
}

/// Without --delete: read (nothing changes) and write.
async fn archive_only(
    printer: &Printer,
    opts: &Options,
    session: &Session,
    mut writer: ArchiveWriter,
) -> Result<Exit> {
    let bar = printer.progress(None, "archiving");
    let mut selected = session.selected(printer, opts);
    while let Some(rec) = selected.next().await {
        writer.write(&rec?)?;
        writer.ready().await?;
        bar.inc(1);
    }
    if let Some(w) = selected.eval_warning() {
        printer.warn(w);
    }
    drop(selected);
    crate::source::settle().await;
    let trailer = writer.finish().await?;
    bar.finish_and_clear();
    printer.info(format!(
        "archive: {} message(s) of {} -> {} (sha256 {})",
        trailer.count,
        session.names.join(", "),
        super::destination(&opts.to),
        &trailer.sha256[..16]
    ));
    Ok(Exit::Ok)
}

/// --delete: take, write, fsync, then acknowledge exactly what was written.
async fn archive_and_delete(
    printer: &Printer,
    opts: &Options,
    session: &Session,
    mut writer: ArchiveWriter,
    audit: Option<&mut crate::audit::Audit>,
) -> Result<Exit> {
    let conn = &*session.conn;
    // A signal from here on either fails the take or comes once the file is whole.
    let signals_at = crate::signals::count();
    let bar = printer.progress(None, "archiving");
    let mut taken: Vec<Take> = Vec::new();
    let mut selector = Selector::new(&opts.selection);
    let result = take_and_write(
        conn,
        opts,
        session,
        &mut writer,
        &mut selector,
        &mut taken,
        &bar,
    )
    .await
    .and_then(|()| none_taken_back(conn, &mut taken));
    let trailer = finish_or_give_back(conn, printer, writer, result, &mut taken).await?;
    // The file is whole: what it holds is removed and the rest given back even after a
    // signal; a second exits at once.
    let finishing =
        crate::signals::Finishing::start(signals_at, false, Some(DELETING), DELETING_TWICE);
    let (acked, ack_error, to_verify) = ack_written(conn, printer, taken).await;
    let removal = match ack_error {
        Some(e) => Removal::AckFailed(e),
        None if finishing.came() => Removal::Interrupted,
        // A quorum queue applies acknowledgements later, and RabbitMQ can drop some when a
        // channel closes: what is still there is counted, not assumed gone.
        None => match still_queued(conn, &session.checked, to_verify).await {
            _ if finishing.came() => Removal::Interrupted,
            Ok(still) => Removal::Counted(still),
            Err(e) => Removal::CheckFailed(e),
        },
    };
    bar.finish_and_clear();
    if let Some(w) = selector.warning() {
        printer.warn(w);
    }
    let line = |removed: String| {
        format!(
            "archive: {} message(s) of {} -> {} (sha256 {}), {removed}",
            trailer.count,
            session.names.join(", "),
            super::destination(&opts.to),
            &trailer.sha256[..16]
        )
    };
    report_removal(printer, trailer.count, acked, removal, line, audit)
}

/// What a first signal says once the archive file is whole.
const DELETING: &str = "interrupted: the archive file is complete; dlq removes what it archived from the queue and gives back the rest, then exits (signal again to exit at once)";

/// What a second signal says then.
const DELETING_TWICE: &str = "interrupted twice: exited at once; the archive file is complete; what dlq held and had not acknowledged goes back to its queue as the connection closes (archived messages among it stay both archived and queued; on a quorum queue that counts a delivery toward its delivery limit)";

/// What is known, once they are acknowledged, of the removal of the archived messages.
enum Removal {
    /// Acknowledging failed: those not acknowledged are both archived and queued.
    AckFailed(anyhow::Error),
    /// Looked for again: how many are still queued.
    Counted(u64),
    /// Looking for them again failed.
    CheckFailed(anyhow::Error),
    /// A signal came: not looked for.
    Interrupted,
}

/// Says what the archive removed (`line` given the words for it), ends the audit run, and
/// the exit: `archived` written, `acked` of them acknowledged.
fn report_removal(
    printer: &Printer,
    archived: u64,
    acked: u64,
    removal: Removal,
    line: impl Fn(String) -> String,
    audit: Option<&mut crate::audit::Audit>,
) -> Result<Exit> {
    match removal {
        Removal::AckFailed(e) => {
            // The archive is complete; the messages not acknowledged are still in the DLQ too.
            printer.warn(line(format!("{acked} deleted")));
            let why = format!(
                "the archive is complete, but only {acked} of {archived} archived message(s) were removed from the queue; the rest are both archived and still queued"
            );
            super::audit_end(audit, archived, acked, Exit::Failure, Some(&why));
            Err(e.context(why))
        }
        Removal::CheckFailed(e) => {
            printer.warn(line(format!("{acked} deleted")));
            let why = format!(
                "the archive is complete and its {archived} message(s) were acknowledged, but reading the queue again to check their removal failed: `dlq inspect` shows what is still there"
            );
            super::audit_end(audit, archived, acked, Exit::Failure, Some(&why));
            Err(e.context(why))
        }
        Removal::Interrupted => {
            printer.warn(line(format!(
                "{acked} acknowledged, their removal not checked"
            )));
            let why = "interrupted by a signal once the archive was complete: the acknowledged messages' removal was not checked";
            super::audit_end(audit, archived, acked, Exit::Interrupted, Some(why));
            Err(crate::error::interrupted(format!(
                "interrupted once the archive was complete: its {archived} message(s) were acknowledged and the rest given back; dlq did not check that the queue applied every acknowledgement (`dlq inspect` shows what is still there)"
            )))
        }
        Removal::Counted(0) => {
            super::audit_end(audit, archived, acked, Exit::Ok, None);
            printer.info(line(format!("{acked} deleted")));
            Ok(Exit::Ok)
        }
        Removal::Counted(still) => {
            let deleted = acked.saturating_sub(still);
            printer.warn(line(format!("{deleted} deleted")));
            let why = format!(
                "{still} of {archived} archived message(s) are still in the queue although dlq acknowledged them (the broker did not apply every acknowledgement): they are both archived and queued; run the same archive again to remove them"
            );
            super::audit_end(audit, archived, deleted, Exit::Partial, Some(&why));
            printer.warn_always(why);
            Ok(Exit::Partial)
        }
    }
}

/// On RabbitMQ 4.3 a quorum DLQ takes back, with the channel open, what a consumer held
/// past the queue's consumer timeout: acknowledging it then removes nothing, and the archive
/// would hold messages still queued. dlq deletes nothing then (the take checks its
/// consumers and channels, `Taker::taken_back`).
fn none_taken_back(conn: &crate::rabbit::Connection, taken: &mut [Take]) -> Result<()> {
    for Take { taker, .. } in taken.iter_mut() {
        if taker.taken_back(conn) {
            bail!(
                "RabbitMQ took back the messages dlq held from {:?} for the archive: it does so when they are held longer than the queue's consumer timeout (x-consumer-timeout, a policy's consumer-timeout, else the broker's consumer_timeout): the archive file is not kept; archive fewer at a time (--limit, or a narrower selection)",
                taker.queue_name()
            );
        }
    }
    Ok(())
}

/// The archive file's trailer once it is complete and synced after `result`, the take;
/// otherwise nothing is acknowledged: every taken message goes back in place.
async fn finish_or_give_back(
    conn: &crate::rabbit::Connection,
    printer: &Printer,
    writer: ArchiveWriter,
    result: Result<()>,
    taken: &mut Vec<Take>,
) -> Result<super::Trailer> {
    let finished = match result {
        Ok(()) => writer.finish().await,
        Err(e) => {
            writer.abort();
            Err(e)
        }
    };
    let e = match finished {
        Ok(t) => return Ok(t),
        Err(e) => e,
    };
    let takers = std::mem::take(taken).into_iter().map(|t| t.taker).collect();
    crate::bulk::release_unmoved(conn, printer, takers, Some(&e)).await;
    Err(e.context("nothing was deleted from the queues"))
}

/// One DLQ's take: what was archived from it, and on a quorum queue the content ids of what
/// it gave back, so that an identical copy left in the queue is not counted as an archived
/// message whose acknowledgement the broker did not apply.
struct Take {
    taker: Taker,
    written: Vec<Written>,
    kept: Vec<String>,
}

/// One archived message: where its acknowledgement goes, and its content id (for checking
/// that it is gone).
struct Written {
    channel: usize,
    tag: u64,
    key: String,
}

/// Acknowledges what the archive holds (the rest goes back in place): how many, the first
/// error (after which a taker acknowledges nothing more), and, per quorum queue, the content
/// ids acknowledged there, to check afterwards.
async fn ack_written(
    conn: &crate::rabbit::Connection,
    printer: &Printer,
    taken: Vec<Take>,
) -> (u64, Option<anyhow::Error>, Vec<ToVerify>) {
    let mut deleted = 0u64;
    let mut ack_error = None;
    let mut to_verify = Vec::new();
    for Take {
        mut taker,
        written,
        kept,
    } in taken
    {
        // The file is whole: the acknowledgements are not stopped by a signal (the copies
        // kept in case nothing was deleted go with the release).
        taker.moving();
        // A quorum queue's archived messages are looked for afterwards (`still_queued`).
        let verified =
            (taker.is_quorum() && !written.is_empty()).then(|| taker.queue_name().to_owned());
        if verified.is_some() {
            taker.removal_checked();
        }
        // Consumers left live by `Taker::open_holding`: cancelled first where that is safe.
        // Acknowledgements take moments.
        taker.before_acks(Some(std::time::Duration::ZERO)).await;
        match ack_each_channel(&mut taker, &written).await {
            Ok(()) => deleted += written.len() as u64,
            Err(e) => {
                ack_error.get_or_insert(e);
            }
        }
        let held = taker.taken.saturating_sub(written.len() as u64);
        for note in taker.release(conn, held).await {
            printer.warn(note);
        }
        if let Some(queue) = verified {
            let archived = written.into_iter().map(|w| w.key).collect();
            to_verify.push(ToVerify::new(queue, archived, kept));
        }
    }
    (deleted, ack_error, to_verify)
}

/// Per take channel, what was archived there: the run of its first deliveries in one
/// `multiple` acknowledgement, the rest one by one (`Taker::ack_tags`; delivery tags run 1,
/// 2, ... per channel).
async fn ack_each_channel(taker: &mut Taker, written: &[Written]) -> Result<()> {
    let mut by_channel: std::collections::BTreeMap<usize, Vec<u64>> = Default::default();
    for w in written {
        by_channel.entry(w.channel).or_default().push(w.tag);
    }
    for (channel, tags) in by_channel {
        taker.ack_tags(channel, &tags).await?;
    }
    Ok(())
}

/// What to look for in a quorum queue once its archived messages are acknowledged: their
/// content ids, and how many copies of each the take gave back (a DLQ can hold identical
/// messages, and an archive may select some of them).
struct ToVerify {
    queue: String,
    archived: Vec<String>,
    given_back: std::collections::HashMap<String, u64>,
}

impl ToVerify {
    fn new(queue: String, archived: Vec<String>, kept: Vec<String>) -> ToVerify {
        let ids: std::collections::HashSet<&String> = archived.iter().collect();
        let mut given_back = std::collections::HashMap::new();
        for k in kept.into_iter().filter(|k| ids.contains(k)) {
            *given_back.entry(k).or_default() += 1;
        }
        ToVerify {
            queue,
            archived,
            given_back,
        }
    }

    /// Of the copies `found` in the queue, how many are archived ones: those beyond the
    /// copies given back.
    fn still_queued(&self, found: Vec<String>) -> u64 {
        let mut seen: std::collections::HashMap<String, u64> = Default::default();
        for k in found {
            *seen.entry(k).or_default() += 1;
        }
        seen.iter()
            .map(|(k, n)| n.saturating_sub(self.given_back.get(k).copied().unwrap_or(0)))
            .sum()
    }
}

/// How many acknowledged messages are still in their quorum queues, found by content id
/// (a non-destructive read, as `inspect` does).
async fn still_queued(
    conn: &crate::rabbit::Connection,
    checked: &[Checked],
    to_verify: Vec<ToVerify>,
) -> Result<u64> {
    let mut still = 0;
    for mut v in to_verify {
        let Some(q) = checked.iter().find(|c| c.name == v.queue) else {
            continue;
        };
        let mut ids = std::mem::take(&mut v.archived);
        ids.extend(
            v.given_back
                .iter()
                .flat_map(|(k, n)| (0..*n).map(|_| k.clone())),
        );
        // dlq's connection is live: only its own closed channels' consumers to wait for.
        let found = rabbit::reader::find_in_queue(conn, q, ids, record::content_key, None).await?;
        still += v.still_queued(found.keys);
    }
    Ok(still)
}

/// Takes every message of every queue (held unacknowledged) and writes the selected ones;
/// `taken` keeps each take channel with the delivery tags written, for the acks.
async fn take_and_write(
    conn: &crate::rabbit::Connection,
    opts: &Options,
    session: &Session,
    writer: &mut ArchiveWriter,
    selector: &mut Selector<'_>,
    taken: &mut Vec<Take>,
    bar: &indicatif::ProgressBar,
) -> Result<()> {
    for q in &session.checked {
        let mut taker = Taker::open_holding(&ReadSpec::for_checked(q, None)).await?;
        // A signal fails the take: everything goes back in place, nothing is deleted.
        taker.stop_on_signal();
        let (mut tags, mut kept) = (Vec::new(), Vec::new());
        let quorum = taker.is_quorum();
        let outcome: Result<()> = async {
            while let Some(d) = taker.next(conn).await? {
                let selected = match selector.full() {
                    // Hold the rest until the release puts it back.
                    true => None,
                    false => record::selected(&q.name, &d, &opts.record, selector),
                };
                let Some(rec) = selected else {
                    if quorum {
                        kept.push(record::content_key(&d.properties, &d.data));
                    }
                    taker.keep(conn, &d).await?;
                    continue;
                };
                // Renewed rather than given back counted if the archive deletes nothing;
                // planned before it is written, so that a write that fails (a full disk)
                // leaves it planned too, not given back by the close (see the plan's
                // dry run, `take_one`).
                taker.plan_move(&d);
                writer.write(&rec)?;
                writer.ready().await?;
                tags.push(Written {
                    channel: taker.channel_index(),
                    tag: d.delivery_tag,
                    key: record::content_key(&d.properties, &d.data),
                });
                bar.inc(1);
            }
            Ok(())
        }
        .await;
        taken.push(Take {
            taker,
            written: tags,
            kept,
        });
        outcome?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(ks: &[&str]) -> Vec<String> {
        ks.iter().map(|k| k.to_string()).collect()
    }

    #[test]
    fn identical_copies_given_back_are_not_counted_as_still_queued() {
        // Archived a, a, b; the take gave back a (twice), c.
        let v = ToVerify::new("q".into(), keys(&["a", "a", "b"]), keys(&["a", "c", "a"]));
        assert_eq!(v.still_queued(keys(&["a", "a"])), 0);
        assert_eq!(v.still_queued(keys(&["a", "a", "a", "b"])), 2);
        assert_eq!(v.still_queued(keys(&["b"])), 1);
    }

    /// The audit trail's end record of `removal` (5 archived, 5 acknowledged) and the exit.
    fn ended(removal: Removal) -> (serde_json::Value, Exit) {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("audit.ndjson");
        let printer = Printer::quiet();
        let subject = crate::audit::Subject {
            action: "archive",
            source: "queue",
            location: "q".into(),
            selection: "all".into(),
            run_id: "r".into(),
        };
        let mut audit = crate::audit::Audit::new(Some(&log), &printer, subject);
        audit.start(Some(5)).unwrap();
        let exit = report_removal(&printer, 5, 5, removal, |s| s, Some(&mut audit))
            .unwrap_or_else(|e| crate::error::exit_for(&e));
        drop(audit);
        let trail = std::fs::read_to_string(&log).unwrap();
        let last = trail.lines().last().unwrap();
        (serde_json::from_str(last).unwrap(), exit)
    }

    #[test]
    fn the_audit_end_says_the_exit_dlq_ends_with() {
        let cases = [
            (Removal::Counted(0), 5),
            (Removal::Counted(2), 3),
            (Removal::CheckFailed(anyhow!("lost")), 5),
            (Removal::AckFailed(anyhow!("lost")), 5),
        ];
        for (removal, done) in cases {
            let (end, exit) = ended(removal);
            assert_eq!(end["event"], "end", "{end}");
            assert_eq!(end["exit"], exit as u8, "{end}");
            assert_eq!(end["done"], done, "{end}");
        }
    }
}

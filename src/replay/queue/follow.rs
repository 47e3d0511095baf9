//! `--follow` on a queue replay: Celery task messages are followed by their task id through
//! Celery's events (`replay::follow`); plain messages by watching their DLQs, for
//! `--follow-timeout`, for a copy carrying this run's replay id and the message's own publish
//! id coming back (what `dlq-publish-id` is for), with the reason it died again.

use crate::model::RecordId;
use crate::output::Printer;
use crate::rabbit::publish::PUBLISH_ID_HEADER;
use crate::rabbit::reader::{self, ReadSpec};
use crate::rabbit::{Checked, passive_declare};
use crate::replay::follow::{Outcomes, State, Tracked, Tracker, Watch};
use crate::replay::requeue::REPLAY_ID;
use anyhow::Result;
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use tokio::sync::mpsc;

/// One replayed message being followed.
#[derive(Debug, Clone)]
pub(crate) struct Followed {
    from: RecordId,
    /// Celery's task id and name, for a Celery task message.
    task: Option<(String, String)>,
    publish_id: String,
}

/// The mover's bookkeeping: what is on its way out, and what moved (its DLQ copy acknowledged).
pub(crate) struct Moves {
    tracker: Tracker,
    moving: HashMap<RecordId, VecDeque<Followed>>,
    /// Moved and not yet followed.
    pub(crate) moved: Vec<Followed>,
    /// Followed already (a canary's part).
    pub(crate) earlier: Vec<Tracked>,
}

impl Moves {
    pub(crate) fn new(tracker: Tracker) -> Moves {
        Moves {
            tracker,
            moving: HashMap::new(),
            moved: Vec::new(),
            earlier: Vec::new(),
        }
    }

    /// A message is about to be published: a Celery task is registered with the tracker
    /// first, so that no event about it can come before.
    pub(crate) fn publishing(
        &mut self,
        from: &RecordId,
        props: &BasicProperties,
        publish_id: &str,
    ) {
        let task = celery_task(props.headers().as_ref());
        if let Some((id, name)) = &task {
            self.tracker.expect(from.clone(), id, name);
        }
        let f = Followed {
            from: from.clone(),
            task,
            publish_id: publish_id.to_owned(),
        };
        self.moving.entry(from.clone()).or_default().push_back(f);
    }

    /// Its publish or acknowledgement settled (in publish order per record): `moved` when
    /// its DLQ copy is acknowledged.
    pub(crate) fn settled(&mut self, from: &RecordId, moved: bool) {
        let Some(q) = self.moving.get_mut(from) else {
            return;
        };
        let f = q.pop_front();
        if q.is_empty() {
            self.moving.remove(from);
        }
        if let (true, Some(f)) = (moved, f) {
            self.moved.push(f);
        }
    }
}

/// The publish id a message's rewritten properties carry (`requeue::prepare` sets it).
pub(crate) fn publish_id(props: &BasicProperties) -> String {
    let h = props.headers().as_ref().map(|h| h.inner());
    match h.and_then(|h| h.get(PUBLISH_ID_HEADER)) {
        Some(AMQPValue::LongString(s)) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
        _ => String::new(),
    }
}

/// A Celery task message (protocol v2 headers).
pub(crate) fn is_task(headers: Option<&FieldTable>) -> bool {
    celery_task(headers).is_some()
}

/// Celery protocol v2's `id` and `task` headers.
fn celery_task(headers: Option<&FieldTable>) -> Option<(String, String)> {
    let h = headers?.inner();
    let text = |k: &str| match h.get(k)? {
        AMQPValue::LongString(s) => String::from_utf8(s.as_bytes().to_vec()).ok(),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    };
    Some((text("id")?, text("task")?))
}

/// Waits for the moved messages' outcomes: the Celery tasks' through their events, the plain
/// messages' by watching the DLQs until `timeout` (`--follow-timeout`, or a canary's wait)
/// passed.
pub(crate) async fn outcomes(
    conn: &crate::rabbit::Connection,
    printer: &Printer,
    watch: &Watch,
    (checked, replay_id): (&[Checked], &str),
    moved: Vec<Followed>,
    timeout: Duration,
) -> Outcomes {
    let deadline = tokio::time::Instant::now() + timeout;
    let tasks: Vec<String> = moved
        .iter()
        .filter_map(|f| f.task.as_ref().map(|t| t.0.clone()))
        .collect();
    let plain: Vec<&Followed> = moved.iter().filter(|f| f.task.is_none()).collect();
    printer.info(format!(
        "following {} task(s) and {} plain message(s) for up to {}s (Ctrl-C stops following; what was sent stays sent)",
        tasks.len(),
        plain.len(),
        timeout.as_secs()
    ));
    let mut followed = watch.wait(printer, &tasks, timeout).await;
    let mut stopped = followed.stopped.take();
    let mut all = std::mem::take(&mut followed.tasks);
    if !plain.is_empty() {
        let said = "stopping after the items in flight (signal again to exit at once)";
        if stopped.is_none() && !crate::replay::wait_unless_signal(deadline, said).await {
            stopped = Some("interrupted: stopped watching the DLQs".into());
        }
        let back = match died_again(conn, checked, replay_id).await {
            Ok(back) => back,
            Err(e) => {
                stopped = Some(format!("cannot read the DLQs again: {e:#}"));
                HashMap::new()
            }
        };
        all.extend(plain.into_iter().map(|f| plain_outcome(f, &back)));
    }
    Outcomes::new(all, stopped)
}

/// A plain message's outcome: back in a DLQ (with the reason it died again) or not.
fn plain_outcome(f: &Followed, back: &HashMap<String, String>) -> Tracked {
    let reason = back.get(&f.publish_id);
    Tracked {
        from: f.from.clone(),
        task_id: f.publish_id.clone(),
        task: "(message)".into(),
        outcome: match reason {
            Some(_) => State::Failed,
            None => State::NotBack,
        },
        worker: None,
        exception: reason.map(|r| format!("dead-lettered again: {r}")),
        retries: 0,
    }
}

/// Publish id -> why it died again, for the copies stamped with this run's replay id that
/// are in the DLQs now (a read: nothing changes).
pub(crate) async fn died_again(
    conn: &crate::rabbit::Connection,
    checked: &[Checked],
    replay_id: &str,
) -> Result<HashMap<String, String>> {
    let mut back = HashMap::new();
    for q in checked {
        let Some(depth) = passive_declare(conn, &q.name).await? else {
            continue;
        };
        let mut now = q.clone();
        now.depth = depth;
        let spec = ReadSpec::for_checked(&now, None);
        let (tx, mut rx) = mpsc::channel(256);
        let id = replay_id.to_string();
        let make = move |_: &str, _: &str, _: &str, p: &BasicProperties, _: &[u8]| {
            stamped(p.headers().as_ref(), &id)
        };
        let read = async {
            let r = reader::read_queue(conn, &spec, &make, &tx).await;
            drop(tx);
            r
        };
        let collect = async {
            let mut found = Vec::new();
            while let Some(Ok(hit)) = rx.recv().await {
                found.extend(hit);
            }
            found
        };
        let (r, found) = tokio::join!(read, collect);
        r?;
        back.extend(found);
    }
    Ok(back)
}

/// (publish id, reason) of a copy this run replayed that died again.
fn stamped(headers: Option<&FieldTable>, replay_id: &str) -> Option<(String, String)> {
    let h = headers?.inner();
    let text = |k: &str| match h.get(k)? {
        AMQPValue::LongString(s) => String::from_utf8(s.as_bytes().to_vec()).ok(),
        _ => None,
    };
    if text(REPLAY_ID)? != replay_id {
        return None;
    }
    let publish_id = text(PUBLISH_ID_HEADER).unwrap_or_default();
    let reason = text("x-first-death-reason").unwrap_or_else(|| "dead-lettered".into());
    Some((publish_id, reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn long(s: &str) -> AMQPValue {
        AMQPValue::LongString(s.as_bytes().to_vec().into())
    }

    #[test]
    fn a_stamped_copy_names_its_publish_and_reason() {
        let mut h = FieldTable::default();
        h.insert(REPLAY_ID.into(), long("run1"));
        h.insert(PUBLISH_ID_HEADER.into(), long("run1-7"));
        h.insert("x-first-death-reason".into(), long("rejected"));
        assert_eq!(
            stamped(Some(&h), "run1"),
            Some(("run1-7".into(), "rejected".into()))
        );
        assert_eq!(stamped(Some(&h), "run2"), None);
        assert_eq!(stamped(None, "run1"), None);
    }

    #[test]
    fn celery_messages_are_known_by_their_headers() {
        let mut h = FieldTable::default();
        h.insert("id".into(), long("9c0e"));
        h.insert("task".into(), long("tasks.add"));
        assert_eq!(
            celery_task(Some(&h)),
            Some(("9c0e".into(), "tasks.add".into()))
        );
        let mut only_id = FieldTable::default();
        only_id.insert("id".into(), long("9c0e"));
        assert_eq!(celery_task(Some(&only_id)), None);
    }
}

//! The consumer timeout RabbitMQ reports for a queue's consumers, dlq's own included.
//!
//! A queue's own timeout is in its arguments or policy (`topology::consumer_timeout`); the
//! broker's `consumer_timeout` (rabbitmq.conf, 30 min by default) is in neither, and AMQP
//! does not tell it. From 4.0 the management API shows each consumer's timeout (the queue's
//! own, else the broker's), 3.10 shows none. dlq asks only while it waits for its output with
//! messages held (`reader::within_hold`), where that timeout decides how long it may wait, so
//! a read that keeps up costs no request.

use super::Connection;
use super::management::Management;
use super::topology::Version;
use lapin::options::{BasicConsumeOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The broker updates consumer statistics every 5 s by default: asking more often learns
/// nothing new.
const ASK_EVERY: Duration = Duration::from_secs(5);
/// How long `broker_timeout` waits for the statistics to show its consumer: one default
/// statistics interval, and time for the request.
const PROBE_WAIT: Duration = Duration::from_secs(7);

/// What a connection's broker reported of its queues' consumer timeouts, shared by every
/// read on that connection.
#[derive(Clone, Default)]
pub(crate) struct ReportedTimeouts {
    /// The management API and the connection's vhost; `None` without an API.
    api: Option<Arc<(Management, String)>>,
    known: Arc<Mutex<HashMap<String, Asked>>>,
}

/// What dlq knows of one queue's reported timeout.
#[derive(Default)]
struct Asked {
    timeout: Option<u64>,
    last: Option<Instant>,
    asking: bool,
    /// The queue's consumers came without a timeout: a broker before 4.0.
    unreported: bool,
}

impl std::fmt::Debug for ReportedTimeouts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReportedTimeouts").finish_non_exhaustive()
    }
}

impl ReportedTimeouts {
    pub(crate) fn new(api: Option<(Management, String)>) -> ReportedTimeouts {
        ReportedTimeouts {
            api: api.map(Arc::new),
            known: Arc::default(),
        }
    }

    /// The consumer timeout RabbitMQ reported for `queue`'s consumers (the shortest, in
    /// milliseconds), if it has; while it has not, asks again in the background, at most
    /// every `ASK_EVERY`. Never waits for the answer.
    pub(crate) fn of(&self, queue: &str) -> Option<u64> {
        let Some(api) = &self.api else {
            return None;
        };
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        let asked = known.entry(queue.to_owned()).or_default();
        let due = asked.last.is_none_or(|t| t.elapsed() >= ASK_EVERY);
        if asked.timeout.is_none() && !asked.unreported && !asked.asking && due {
            asked.asking = true;
            tokio::spawn(ask(api.clone(), self.known.clone(), queue.to_owned()));
        }
        asked.timeout
    }

    /// What RabbitMQ reported for `queue` so far, without asking.
    pub(crate) fn known(&self, queue: &str) -> Option<u64> {
        let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        known.get(queue).and_then(|a| a.timeout)
    }
}

/// The broker's own `consumer_timeout` (rabbitmq.conf), where RabbitMQ reports it (4.0 and
/// later): what the statistics show for a consumer of a queue with no timeout of its own, an
/// exclusive server-named queue dlq declares and consumes from until they show it (at most
/// `PROBE_WAIT`). A policy that gives that queue a timeout would be seen, not the broker's,
/// so then there is no answer; none either without an API, or where dlq may not declare a
/// queue. Costs the statistics' delay (up to 5 s by default): asked only where a message may
/// wait long in dlq's hands (a paced replay).
pub(crate) async fn broker_timeout(conn: &Connection) -> Option<u64> {
    let api = conn.reported_timeouts().api?;
    let (mgmt, vhost) = &*api;
    if mgmt.version().await.ok()?? < Version(4, 0, 0) {
        return None; // 3.x's statistics show no consumer timeout
    }
    let ch = conn.create_channel().await.ok()?;
    let probe = async {
        let opts = QueueDeclareOptions {
            exclusive: true,
            auto_delete: true,
            ..QueueDeclareOptions::default()
        };
        let q = ch
            .queue_declare("".into(), opts, FieldTable::default())
            .await?;
        let tag = "dlq-consumer-timeout-probe".into();
        let consume = BasicConsumeOptions::default();
        let _consumer = ch
            .basic_consume(q.name().clone(), tag, consume, FieldTable::default())
            .await?;
        let deadline = Instant::now() + PROBE_WAIT;
        while Instant::now() < deadline {
            match mgmt.consumer_timeouts(vhost, q.name().as_str()).await {
                Ok(r) if r.consumers > 0 => {
                    return Ok((!r.policy_sets_one)
                        .then(|| r.timeouts.into_iter().min())
                        .flatten());
                }
                Ok(_) => tokio::time::sleep(Duration::from_millis(250)).await,
                Err(_) => break,
            }
        }
        anyhow::Ok(None)
    };
    let found = probe.await.ok().flatten();
    // Closing the channel cancels the consumer, which deletes the queue (auto-delete).
    let _ = ch.close(200, "dlq: consumer timeout asked".into()).await;
    found
}

/// One request for `queue`'s consumers' timeouts; what it learned goes into `known`. An API
/// that does not answer only leaves the timeout unknown: dlq then assumes RabbitMQ's default.
async fn ask(
    api: Arc<(Management, String)>,
    known: Arc<Mutex<HashMap<String, Asked>>>,
    queue: String,
) {
    let (mgmt, vhost) = &*api;
    let answer = mgmt.consumer_timeouts(vhost, &queue).await;
    let mut known = known.lock().unwrap_or_else(|e| e.into_inner());
    let asked = known.entry(queue).or_default();
    asked.asking = false;
    asked.last = Some(Instant::now());
    if let Ok(r) = answer {
        asked.timeout = r.timeouts.into_iter().min();
        asked.unreported = r.consumers > 0 && asked.timeout.is_none();
    }
}

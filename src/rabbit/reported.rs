//! The consumer timeout RabbitMQ reports for a queue's consumers, dlq's own included.
//!
//! A queue's own timeout is in its arguments or policy (`topology::consumer_timeout`); the
//! broker's `consumer_timeout` (rabbitmq.conf, 30 min by default) is in neither, and AMQP
//! does not tell it. From 4.0 the management API shows each consumer's timeout (the queue's
//! own, else the broker's), 3.10 shows none. dlq asks only while it waits for its output with
//! messages held (`reader::within_hold`), where that timeout decides how long it may wait, so
//! a read that keeps up costs no request.

use super::management::Management;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The broker updates consumer statistics every 5 s by default: asking more often learns
/// nothing new.
const ASK_EVERY: Duration = Duration::from_secs(5);

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
    if let Ok((consumers, timeouts)) = answer {
        asked.timeout = timeouts.into_iter().min();
        asked.unreported = consumers > 0 && asked.timeout.is_none();
    }
}

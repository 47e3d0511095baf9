//! Celery's monitoring events, read as Flower reads them (`celery/events/`): on RabbitMQ the
//! topic exchange `celeryev` (routing key = the event type with `-` as `.`, or `task.multi` for
//! a worker's buffered batch, whose body is a list); on Redis kombu's fanout over pub/sub, the
//! channel `<global_keyprefix>/<db>.celeryev/<routing key>` carrying kombu's JSON envelope.
//!
//! A feed is dlq's own: an exclusive auto-delete queue on RabbitMQ (never a non-exclusive
//! transient one, which RabbitMQ 4.3 refuses), a pattern subscription on Redis. Reading it
//! changes nothing a worker or another monitor sees.

use crate::rabbit::Connection;
use anyhow::Result;
use futures_util::StreamExt;
use lapin::options::ExchangeDeclareOptions;
use lapin::types::FieldTable;
use lapin::{Channel, Consumer, ExchangeKind};
use serde_json::Value;

use crate::rabbit::private;
use crate::rabbit::publish::scrubbed;
use crate::redis::envelope;

/// Celery's `EVENT_EXCHANGE_NAME`.
pub(crate) const EXCHANGE: &str = "celeryev";

/// One event, as much of it as dlq uses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Event {
    /// `task-succeeded`, `worker-heartbeat` ...
    pub(crate) kind: String,
    /// The task id (task events only).
    pub(crate) uuid: Option<String>,
    /// The worker that sent it.
    pub(crate) hostname: String,
    /// `task-failed` / `task-retried`: the exception's repr, e.g. `IntegrityError('dup')`.
    pub(crate) exception: Option<String>,
    /// `task-rejected`: whether the worker put it back in the queue.
    pub(crate) requeue: bool,
}

impl Event {
    pub(crate) fn is_task(&self) -> bool {
        self.kind.starts_with("task-")
    }
}

/// The events in one message body: an object, or a list of them (a buffered batch).
pub(crate) fn parse(body: &[u8]) -> Vec<Event> {
    let Ok(v) = serde_json::from_slice::<Value>(body) else {
        return Vec::new();
    };
    match v {
        Value::Array(items) => items.iter().filter_map(one).collect(),
        v => one(&v).into_iter().collect(),
    }
}

fn one(v: &Value) -> Option<Event> {
    let text = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(Event {
        kind: text("type")?,
        uuid: text("uuid"),
        hostname: text("hostname").unwrap_or_default(),
        exception: text("exception"),
        requeue: v.get("requeue").and_then(Value::as_bool).unwrap_or(false),
    })
}

/// A live subscription to the events.
#[allow(clippy::large_enum_variant)] // one per command
pub(crate) enum Feed {
    Amqp { _ch: Channel, consumer: Consumer },
    Redis(redis::aio::PubSub),
}

impl Feed {
    /// Binds a queue of dlq's own to `celeryev` for task and worker events. The exchange is
    /// declared as Celery declares it (topic, durable): a no-op once any worker sent an event.
    pub(crate) async fn amqp(conn: &Connection) -> Result<Feed> {
        let ch = conn.create_channel().await.map_err(scrubbed)?;
        let durable = ExchangeDeclareOptions {
            durable: true,
            ..Default::default()
        };
        let none = FieldTable::default;
        ch.exchange_declare(EXCHANGE.into(), ExchangeKind::Topic, durable, none())
            .await
            .map_err(scrubbed)?;
        let queue = format!("dlq-follow.{}", uuid::Uuid::new_v4());
        let bindings = [(EXCHANGE, "task.#"), (EXCHANGE, "worker.#")];
        let consumer = private::listen(&ch, &queue, none(), &bindings, "dlq-follow").await?;
        Ok(Feed::Amqp { _ch: ch, consumer })
    }

    /// Subscribes to every event the workers publish on `db` under `prefix`.
    pub(crate) async fn redis(
        mut pubsub: redis::aio::PubSub,
        prefix: &str,
        db: i64,
    ) -> Result<Feed> {
        let pattern = format!("{}/{db}.{EXCHANGE}/*", glob_escape(prefix));
        pubsub.psubscribe(&pattern).await.map_err(|e| {
            anyhow::anyhow!(
                "subscribing to Celery's events on Redis: {}",
                crate::redis::said(&e)
            )
        })?;
        Ok(Feed::Redis(pubsub))
    }

    /// The events of the next message; `None` once the feed is gone (connection lost).
    pub(crate) async fn next(&mut self) -> Option<Vec<Event>> {
        match self {
            Feed::Amqp { consumer, .. } => {
                let delivery = consumer.next().await?.ok()?;
                Some(parse(&delivery.data))
            }
            Feed::Redis(pubsub) => {
                let msg = pubsub.on_message().next().await?;
                let opened = envelope::open(msg.get_payload_bytes());
                Some(opened.map(|o| parse(&o.body)).unwrap_or_default())
            }
        }
    }
}

/// A key prefix as a literal inside a PSUBSCRIBE pattern.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_single_events_and_batches() {
        let one = br#"{"type": "task-failed", "uuid": "u1", "hostname": "w@h",
            "exception": "IntegrityError('dup')", "traceback": "...", "timestamp": 1.0}"#;
        let got = parse(one);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].kind, "task-failed");
        assert_eq!(got[0].exception.as_deref(), Some("IntegrityError('dup')"));
        assert!(got[0].is_task());
        let batch = br#"[{"type": "task-received", "uuid": "u1", "hostname": "w"},
            {"type": "task-rejected", "uuid": "u2", "hostname": "w", "requeue": true},
            {"no": "type"}]"#;
        let got = parse(batch);
        assert_eq!(got.len(), 2);
        assert!(got[1].requeue);
        assert!(parse(b"not json").is_empty());
        let hb = parse(br#"{"type": "worker-heartbeat", "hostname": "w"}"#);
        assert!(!hb[0].is_task() && hb[0].uuid.is_none());
    }

    #[test]
    fn prefixes_are_literal_in_patterns() {
        assert_eq!(glob_escape("app:"), "app:");
        assert_eq!(glob_escape("a*b[1]?\\"), "a\\*b\\[1\\]\\?\\\\");
    }
}

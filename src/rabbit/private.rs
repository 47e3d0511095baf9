//! A queue of dlq's own to listen on (Celery's remote-control replies, Celery's events):
//! exclusive and auto-delete, so it dies with dlq's connection and nothing lingers — and never
//! a non-exclusive transient queue, which RabbitMQ 4.3 refuses.

use super::publish::scrubbed;
use anyhow::Result;
use lapin::options::{BasicConsumeOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Consumer};

/// Declares `queue` (with `args`), binds it to each (exchange, routing key) and consumes it
/// without acknowledgements, as the only consumer.
pub(crate) async fn listen(
    ch: &Channel,
    queue: &str,
    args: FieldTable,
    bindings: &[(&str, &str)],
    tag: &str,
) -> Result<Consumer> {
    let private = QueueDeclareOptions {
        exclusive: true,
        auto_delete: true,
        ..Default::default()
    };
    ch.queue_declare(queue.into(), private, args)
        .await
        .map_err(scrubbed)?;
    for (exchange, key) in bindings {
        let bind = QueueBindOptions::default();
        ch.queue_bind(
            queue.into(),
            (*exchange).into(),
            (*key).into(),
            bind,
            FieldTable::default(),
        )
        .await
        .map_err(scrubbed)?;
    }
    let consume = BasicConsumeOptions {
        no_ack: true,
        exclusive: true,
        ..Default::default()
    };
    let consumer = ch
        .basic_consume(queue.into(), tag.into(), consume, FieldTable::default())
        .await;
    consumer.map_err(scrubbed)
}

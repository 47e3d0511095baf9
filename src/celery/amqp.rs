//! Celery tasks over RabbitMQ: published with `mandatory` and publisher confirms.

use super::control::{Answer, Call};
use super::events::Feed;
use super::message::TaskMessage;
use super::sent::{Pending, Sent};
use super::workers::{self, Worker};
use crate::model::Target;
use crate::model::TargetFacts;
use crate::rabbit;
use crate::rabbit::publish::{Outcome, Outgoing, Publisher};
use anyhow::Result;
use std::time::Duration;

pub(crate) struct AmqpDispatch {
    conn: crate::rabbit::Connection,
    /// The broker the tasks go to (`--broker-url` or the AMQP URL), for its management API.
    target: Box<rabbit::Target>,
    mailbox: workers::Mailbox,
}

#[derive(Clone)]
pub(crate) struct AmqpSender {
    publisher: Publisher,
}

impl AmqpDispatch {
    pub(crate) async fn connect(
        target: &rabbit::Target,
        mailbox: workers::Mailbox,
    ) -> Result<AmqpDispatch> {
        let conn = rabbit::connect(target).await?;
        Ok(AmqpDispatch {
            conn,
            target: Box::new(target.clone()),
            mailbox,
        })
    }

    pub(crate) fn describe(&self) -> String {
        self.target.shown.clone()
    }

    pub(crate) async fn length_warning(&self, queue: &str, adding: u64) -> Option<String> {
        rabbit::length_limit_warning(&self.target, queue, adding).await
    }

    pub(crate) async fn check_target(&self, target: &Target) -> Result<TargetFacts> {
        rabbit::check_target(&self.conn, target).await
    }

    pub(crate) async fn workers(&self, timeout: Duration) -> Result<Vec<Worker>> {
        workers::ask_amqp(&self.conn, &self.mailbox, timeout).await
    }

    pub(crate) async fn call(&self, calls: &[Call], timeout: Duration) -> Result<Vec<Answer>> {
        workers::call_amqp(&self.conn, &self.mailbox, calls, timeout).await
    }

    pub(crate) async fn events(&self) -> Result<Feed> {
        Feed::amqp(&self.conn).await
    }

    pub(crate) async fn sender(&self, window: usize, rate: Option<f64>) -> Result<AmqpSender> {
        Ok(AmqpSender {
            publisher: Publisher::start(&self.conn, window, rate).await?,
        })
    }
}

impl AmqpSender {
    pub(crate) async fn submit(&self, msg: TaskMessage, target: &Target) -> Result<Pending> {
        let (exchange, routing_key) = target.route();
        let outcome = self
            .publisher
            .submit(Outgoing {
                exchange,
                routing_key,
                body: msg.body,
                properties: msg.properties,
            })
            .await?;
        Ok(Box::pin(async move { Ok(sent(outcome.await?)) }))
    }
}

/// What a RabbitMQ publish outcome means for a sent record.
pub(crate) fn sent(outcome: Outcome) -> Sent {
    match outcome {
        Outcome::Confirmed => Sent::Delivered,
        Outcome::Returned { code, text } => Sent::Refused(format!(
            "returned by the broker as unroutable ({code} {text})"
        )),
        Outcome::Nacked => Sent::Refused("nacked by the broker".into()),
    }
}

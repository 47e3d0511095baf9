//! How a Celery task reaches the broker its workers read. Table replays and restores of
//! archived rows send tasks only through a [`Dispatcher`]; which broker is behind it is decided
//! once, from the settings (`--broker-url`). RabbitMQ lives in `amqp.rs`, Redis in `redis.rs`
//! (over `src/redis/`): a broker is one more variant here and a file of its own, never a
//! branch in the replay logic.

use super::amqp::AmqpDispatch;
use super::control::{Answer, Call};
use super::events::Feed;
use super::message::TaskMessage;
use super::redis::RedisDispatch;
use super::workers::{Mailbox, Worker};
use crate::endpoints::CeleryBroker;
use crate::model::Target;
use crate::model::TargetFacts;
use anyhow::Result;
use std::time::Duration;

pub(crate) use super::sent::{Pending, Sent};

/// The broker connection Celery tasks are dispatched through, opened once per command.
#[allow(clippy::large_enum_variant)] // one per command
pub(crate) enum Dispatcher {
    Amqp(AmqpDispatch),
    Redis(RedisDispatch),
}

/// A clonable handle that sends tasks in submission order, at most `window` unsettled.
#[derive(Clone)]
pub(crate) enum TaskSender {
    Amqp(super::amqp::AmqpSender),
    Redis(super::redis::RedisSender),
}

impl Dispatcher {
    pub(crate) async fn connect(broker: &CeleryBroker, mailbox: &Mailbox) -> Result<Dispatcher> {
        let mailbox = mailbox.clone();
        Ok(match broker {
            CeleryBroker::Amqp(target) => {
                Dispatcher::Amqp(AmqpDispatch::connect(target, mailbox).await?)
            }
            CeleryBroker::Redis(redis) => {
                Dispatcher::Redis(RedisDispatch::connect(redis, mailbox).await?)
            }
        })
    }

    /// Celery's remote control and events on a RabbitMQ vhost (a queue replay's DLQs).
    pub(crate) async fn amqp(
        target: &crate::rabbit::Target,
        mailbox: &Mailbox,
    ) -> Result<Dispatcher> {
        Ok(Dispatcher::Amqp(
            AmqpDispatch::connect(target, mailbox.clone()).await?,
        ))
    }

    /// The broker, for plans and messages (password scrubbed).
    pub(crate) fn describe(&self) -> String {
        match self {
            Dispatcher::Amqp(d) => d.describe(),
            Dispatcher::Redis(d) => d.describe(),
        }
    }

    /// Where the tasks go, for the plan: kombu's Redis transport has no default exchange to name.
    pub(crate) fn target_text(&self, target: &Target) -> String {
        match (self, target) {
            (Dispatcher::Redis(_), Target::Queue(q)) => format!("to queue {q:?}"),
            _ => target.describe(),
        }
    }

    /// Refuses a destination no worker could ever read (nothing is sent).
    pub(crate) async fn check_target(&self, target: &Target) -> Result<TargetFacts> {
        match self {
            Dispatcher::Amqp(d) => d.check_target(target).await,
            Dispatcher::Redis(d) => d.check_target(target).await,
        }
    }

    /// The live workers, asked once over Celery's remote control.
    pub(crate) async fn workers(&self, timeout: Duration) -> Result<Vec<Worker>> {
        match self {
            Dispatcher::Amqp(d) => d.workers(timeout).await,
            Dispatcher::Redis(d) => d.workers(timeout).await,
        }
    }

    /// Sends remote-control `calls` and collects the answers (see `control`).
    pub(crate) async fn call(&self, calls: &[Call], timeout: Duration) -> Result<Vec<Answer>> {
        match self {
            Dispatcher::Amqp(d) => d.call(calls, timeout).await,
            Dispatcher::Redis(d) => d.call(calls, timeout).await,
        }
    }

    /// A subscription to Celery's events on this broker.
    pub(crate) async fn events(&self) -> Result<Feed> {
        match self {
            Dispatcher::Amqp(d) => d.events().await,
            Dispatcher::Redis(d) => d.events().await,
        }
    }

    /// A warning for the plan when the target queue is at or near its length limit (a
    /// RabbitMQ queue whose overflow would drop what the replay sends). Redis lists have none.
    pub(crate) async fn length_warning(&self, target: &Target, adding: u64) -> Option<String> {
        let Target::Queue(queue) = target else {
            return None;
        };
        match self {
            Dispatcher::Amqp(d) => d.length_warning(queue, adding).await,
            Dispatcher::Redis(_) => None,
        }
    }

    /// Starts sending: `window` is the most unsettled tasks at once, `rate` caps tasks per second.
    pub(crate) async fn sender(&self, window: usize, rate: Option<f64>) -> Result<TaskSender> {
        match self {
            Dispatcher::Amqp(d) => Ok(TaskSender::Amqp(d.sender(window, rate).await?)),
            Dispatcher::Redis(d) => Ok(TaskSender::Redis(d.sender(window, rate).await?)),
        }
    }
}

impl TaskSender {
    /// Queues one task for `target`; the returned future resolves once the broker settled it.
    pub(crate) async fn submit(&self, msg: TaskMessage, target: &Target) -> Result<Pending> {
        match self {
            TaskSender::Amqp(s) => s.submit(msg, target).await,
            TaskSender::Redis(s) => s.submit(msg, target).await,
        }
    }
}

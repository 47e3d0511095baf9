//! RabbitMQ plumbing shared by every command that publishes: connecting (errors without
//! credentials), checking destinations, and a publisher that pipelines publishes with
//! confirms while attributing every `basic.return` to the right message.

use crate::redact;
use anyhow::{Context, Result, anyhow};
use futures_util::FutureExt;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ExchangeKind};
use lapin::{Confirmation, PublisherConfirm};
use std::collections::{HashMap, VecDeque};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Header that carries the per-publish correlation key when `message_id` cannot be used
/// (queue replays keep the original message id).
pub const PUBLISH_ID_HEADER: &str = "dlq-publish-id";

/// Connects to the broker the settings name (one place builds the URI: see
/// `source::amqp::Target`); errors never show the password.
pub async fn connect(settings: &crate::settings::Settings) -> Result<Connection> {
    let target = crate::source::amqp::Target::from_settings(settings)?;
    crate::source::amqp::connect(&target).await
}

/// Scrubs a lapin error for display.
pub fn scrubbed(e: lapin::Error) -> anyhow::Error {
    anyhow!(redact::scrub(&e.to_string()))
}

fn is_not_found(e: &lapin::Error) -> bool {
    crate::source::amqp::is_not_found(e)
}

/// Passive exchange declare: false when it does not exist. The default exchange always exists.
pub async fn exchange_exists(conn: &Connection, name: &str) -> Result<bool> {
    if name.is_empty() {
        return Ok(true);
    }
    let ch = conn.create_channel().await.map_err(scrubbed)?;
    let opts = ExchangeDeclareOptions {
        passive: true,
        ..Default::default()
    };
    match ch
        .exchange_declare(
            name.into(),
            ExchangeKind::Direct,
            opts,
            FieldTable::default(),
        )
        .await
    {
        Ok(()) => {
            let _ = ch.close(200, "done".into()).await;
            Ok(true)
        }
        Err(e) if is_not_found(&e) => Ok(false),
        Err(e) => Err(scrubbed(e)).with_context(|| format!("checking exchange {name:?}")),
    }
}

/// What the broker said about one publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Acked and not returned: a queue has it.
    Confirmed,
    /// Returned as unroutable (then acked): no queue took it.
    Returned { code: u16, text: String },
    /// Nacked: the broker could not take it (e.g. a full queue with reject-publish).
    Nacked,
}

/// One message to publish.
pub struct Outgoing {
    pub exchange: String,
    pub routing_key: String,
    pub body: Vec<u8>,
    /// Must carry a unique correlation key: `message_id`, or the `dlq-publish-id` header.
    pub properties: BasicProperties,
}

/// The correlation key of a message: the `dlq-publish-id` header, else `message_id`.
pub fn correlation_key(p: &BasicProperties) -> Option<String> {
    if let Some(h) = p.headers()
        && let Some(AMQPValue::LongString(s)) = h.inner().get(PUBLISH_ID_HEADER)
    {
        return Some(String::from_utf8_lossy(s.as_bytes()).into_owned());
    }
    p.message_id().as_ref().map(|m| m.as_str().to_string())
}

struct Request {
    msg: Outgoing,
    reply: oneshot::Sender<Result<Outcome>>,
}

struct InFlight {
    key: String,
    confirm: Option<PublisherConfirm>,
    result: Option<Confirmation>,
    reply: oneshot::Sender<Result<Outcome>>,
}

type Write =
    std::pin::Pin<Box<dyn std::future::Future<Output = lapin::Result<PublisherConfirm>> + Send>>;

/// A publish whose frames are queued in lapin but not yet written to the socket.
struct Writing {
    write: Write,
    key: String,
    reply: oneshot::Sender<Result<Outcome>>,
}

/// Handle to the publisher task. Clone it to publish from several tasks.
#[derive(Clone)]
pub struct Publisher {
    tx: mpsc::Sender<Request>,
}

impl Publisher {
    /// Opens a confirm-mode channel and starts the publisher task. `window` is the most
    /// unconfirmed publishes at once; `rate` caps publishes per second.
    pub async fn start(conn: &Connection, window: usize, rate: Option<f64>) -> Result<Publisher> {
        let channel = conn.create_channel().await.map_err(scrubbed)?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(scrubbed)?;
        let (tx, rx) = mpsc::channel(window.max(1));
        tokio::spawn(run(channel, rx, window.max(1), rate));
        Ok(Publisher { tx })
    }

    /// Publishes and resolves once the broker has settled this message. An error means the
    /// outcome is unknown (connection lost): treat the message as not moved.
    pub async fn publish(&self, msg: Outgoing) -> Result<Outcome> {
        self.submit(msg).await?.await
    }

    /// Queues a publish in call order (so messages reach the broker in the order submitted)
    /// and returns a future of its outcome.
    pub async fn submit(
        &self,
        msg: Outgoing,
    ) -> Result<impl std::future::Future<Output = Result<Outcome>> + use<>> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Request { msg, reply })
            .await
            .map_err(|_| anyhow!("the publisher stopped (broker connection lost?)"))?;
        Ok(async move {
            rx.await
                .map_err(|_| anyhow!("the publisher stopped (broker connection lost?)"))?
        })
    }
}

/// Spaces publishes evenly to honour `--rate`.
struct Pace {
    interval: Option<Duration>,
    next: tokio::time::Instant,
}

impl Pace {
    fn new(rate: Option<f64>) -> Pace {
        let interval = rate
            .filter(|r| *r > 0.0)
            .map(|r| Duration::from_secs_f64(1.0 / r));
        Pace {
            interval,
            next: tokio::time::Instant::now(),
        }
    }

    async fn wait(&mut self) {
        if let Some(i) = self.interval {
            tokio::time::sleep_until(self.next).await;
            self.next = tokio::time::Instant::now().max(self.next) + i;
        }
    }
}

/// The publisher task. Confirms are settled here, in one place, because lapin hands a
/// `basic.return` to whichever confirm resolves next, which under pipelining may be
/// another message's. A return always precedes its own message's ack, so:
/// - a confirm that carries nothing: its return (if any) went to an earlier-resolved
///   confirm, already harvested -> decided from the harvested set;
/// - a confirm carrying another message's return: returns are queued; decide nothing more
///   until every in-flight confirm resolved (then every return has been handed out).
async fn run(channel: Channel, mut rx: mpsc::Receiver<Request>, window: usize, rate: Option<f64>) {
    let mut inflight: VecDeque<InFlight> = VecDeque::new();
    let mut returned: HashMap<String, (u16, String)> = HashMap::new();
    let mut draining = false;
    let mut pace = Pace::new(rate);
    // Publishes whose frames are queued but not yet written, oldest first. lapin's
    // `basic_publish` resolves only once the I/O thread has written the frames; awaiting
    // each one before the next cost a thread round trip per message. Its first poll queues
    // the frames (and registers the confirm) synchronously, so polling each once in order
    // keeps the publish order, and the writes complete in that order.
    let mut writing: VecDeque<Writing> = VecDeque::new();
    let mut closed = false;
    loop {
        let can_publish = !closed && !draining && inflight.len() + writing.len() < window;
        if inflight.is_empty() && writing.is_empty() && closed {
            break;
        }
        tokio::select! {
            biased;
            req = rx.recv(), if can_publish => {
                match req {
                    None => closed = true,
                    Some(req) => {
                        pace.wait().await;
                        let Request { msg, reply } = req;
                        let key = correlation_key(&msg.properties).unwrap_or_default();
                        let opts = BasicPublishOptions { mandatory: true, ..Default::default() };
                        let ch = channel.clone();
                        let mut write: Write = Box::pin(async move {
                            ch.basic_publish(msg.exchange.as_str().into(), msg.routing_key.as_str().into(), opts, &msg.body, msg.properties)
                                .await
                        });
                        // The first poll, now: the frames are queued in submission order.
                        let first = std::future::poll_fn(|cx| {
                            std::task::Poll::Ready(write.as_mut().poll(cx))
                        })
                        .await;
                        if let std::task::Poll::Ready(Err(e)) = first {
                            let _ = reply.send(Err(scrubbed(e).context("publishing")));
                            fail_all(&mut inflight, &mut writing, "broker connection lost before the confirm");
                            return;
                        }
                        if let std::task::Poll::Ready(Ok(confirm)) = first {
                            write = Box::pin(std::future::ready(Ok(confirm)));
                        }
                        // In order, behind the writes still pending; moved on at once if written.
                        writing.push_back(Writing { write, key, reply });
                        if let Err(e) = promote_written(&mut writing, &mut inflight) {
                            fail_all(&mut inflight, &mut writing, &lost(&e));
                            return;
                        }
                    }
                }
            }
            res = wait_written(&mut writing), if !writing.is_empty() => {
                if let Err(e) = res {
                    fail_all(&mut inflight, &mut writing, &lost(&e));
                    return;
                }
                if let Err(e) = promote_written(&mut writing, &mut inflight) {
                    fail_all(&mut inflight, &mut writing, &lost(&e));
                    return;
                }
            }
            res = wait_head(&mut inflight), if !inflight.is_empty() => {
                if let Err(e) = res {
                    fail_all(&mut inflight, &mut writing, &lost(&e));
                    return;
                }
                // A confirm can resolve only after its publish was written, and a later
                // publish's confirm may carry an earlier one's return: every written
                // publish must be among those harvested before anything is decided.
                if let Err(e) = promote_written(&mut writing, &mut inflight) {
                    fail_all(&mut inflight, &mut writing, &lost(&e));
                    return;
                }
                // Harvest every confirm that has resolved by now, with what it carries.
                for f in inflight.iter_mut() {
                    if f.result.is_none()
                        && let Some(c) = f.confirm.as_mut()
                        && let Some(r) = c.now_or_never()
                    {
                        f.confirm = None;
                        match r {
                            Ok(conf) => f.result = Some(conf),
                            Err(e) => {
                                fail_all(&mut inflight, &mut writing, &lost(&e));
                                return;
                            }
                        }
                    }
                }
                for f in inflight.iter_mut() {
                    if let Some(Confirmation::Ack(Some(m)) | Confirmation::Nack(Some(m))) = f.result.as_mut() {
                        let key = correlation_key(&m.delivery.properties).unwrap_or_default();
                        if key != f.key {
                            draining = true;
                        }
                        returned.insert(key, (m.reply_code, m.reply_text.as_str().to_string()));
                        // Keep the variant (ack/nack) but drop the carried message: it is recorded.
                        f.result = Some(match f.result.take() {
                            Some(Confirmation::Nack(_)) => Confirmation::Nack(None),
                            _ => Confirmation::Ack(None),
                        });
                    }
                }
                if draining && writing.is_empty() && inflight.iter().all(|f| f.result.is_some()) {
                    draining = false; // every return has been handed out: all decidable now
                }
                if !draining {
                    // Settle resolved confirms in publish order.
                    while inflight.front().is_some_and(|f| f.result.is_some()) {
                        let f = inflight.pop_front().expect("front exists");
                        let outcome = match f.result {
                            Some(Confirmation::Nack(_)) => Outcome::Nacked,
                            _ => match returned.remove(&f.key) {
                                Some((code, text)) => Outcome::Returned { code, text },
                                None => Outcome::Confirmed,
                            },
                        };
                        let _ = f.reply.send(Ok(outcome));
                    }
                }
            }
        }
    }
}

/// Waits for the oldest unresolved confirm.
async fn wait_head(inflight: &mut VecDeque<InFlight>) -> Result<(), lapin::Error> {
    let Some(f) = inflight.iter_mut().find(|f| f.result.is_none()) else {
        return Ok(());
    };
    let Some(c) = f.confirm.as_mut() else {
        return Ok(());
    };
    let r = c.await;
    f.confirm = None;
    f.result = Some(r?);
    Ok(())
}

fn fail_all(inflight: &mut VecDeque<InFlight>, writing: &mut VecDeque<Writing>, msg: &str) {
    for f in inflight.drain(..) {
        // A confirm that already resolved cleanly still counts as unknown here: the
        // outcome is only trusted once decided, and this path stops the run anyway.
        let _ = f.reply.send(Err(anyhow!(msg.to_string())));
    }
    for w in writing.drain(..) {
        let _ = w.reply.send(Err(anyhow!(msg.to_string())));
    }
}

/// What every publish still unsettled is told when the connection fails.
fn lost(e: &lapin::Error) -> String {
    format!(
        "broker connection lost before the confirm: {}",
        redact::scrub(&e.to_string())
    )
}

/// Waits until the oldest pending write is done (it stays at the front).
async fn wait_written(writing: &mut VecDeque<Writing>) -> Result<(), lapin::Error> {
    let Some(w) = writing.front_mut() else {
        return Ok(());
    };
    // Polled again by `promote_written`: a finished lapin publish future returns the same
    // result only once, so peek without consuming it.
    std::future::poll_fn(|cx| match w.write.as_mut().poll(cx) {
        std::task::Poll::Ready(r) => {
            let r2 = r.as_ref().map(|_| ()).map_err(Clone::clone);
            w.write = Box::pin(std::future::ready(r));
            std::task::Poll::Ready(r2)
        }
        std::task::Poll::Pending => std::task::Poll::Pending,
    })
    .await
}

/// Moves the written publishes at the front of `writing`, in order, to `inflight`.
fn promote_written(
    writing: &mut VecDeque<Writing>,
    inflight: &mut VecDeque<InFlight>,
) -> Result<(), lapin::Error> {
    while let Some(w) = writing.front_mut() {
        let Some(r) = w.write.as_mut().now_or_never() else {
            break;
        };
        let w = writing.pop_front().expect("front exists");
        match r {
            Ok(confirm) => inflight.push_back(InFlight {
                key: w.key,
                confirm: Some(confirm),
                result: None,
                reply: w.reply,
            }),
            Err(e) => {
                let _ = w.reply.send(Err(scrubbed(e.clone()).context("publishing")));
                return Err(e);
            }
        }
    }
    Ok(())
}

//! RabbitMQ plumbing shared by every command that publishes: connecting (errors without
//! credentials), checking destinations, and a publisher that pipelines publishes with
//! confirms while attributing every `basic.return` to the right message.

use super::{Connection, Liveness};
use crate::pace::Pace;
use crate::redact;
use anyhow::{Context, Result, anyhow};
use futures_util::FutureExt;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, ExchangeKind};
use lapin::{Confirmation, PublisherConfirm};
use std::collections::{HashMap, VecDeque};
use tokio::sync::{mpsc, oneshot};

/// Header that carries the per-publish correlation key when `message_id` cannot be used
/// (queue replays keep the original message id).
pub(crate) const PUBLISH_ID_HEADER: &str = "dlq-publish-id";

/// Scrubs a lapin error for display.
pub(crate) fn scrubbed(e: lapin::Error) -> anyhow::Error {
    anyhow!(redact::scrub(&e.to_string()))
}

/// Passive exchange declare: false when it does not exist. The default exchange always exists.
pub(crate) async fn exchange_exists(conn: &Connection, name: &str) -> Result<bool> {
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
        Err(e) if crate::rabbit::is_not_found(&e) => Ok(false),
        Err(e) => Err(scrubbed(e)).with_context(|| format!("checking exchange {name:?}")),
    }
}

/// What the broker said about one publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Acked and not returned: a queue has it.
    Confirmed,
    /// Returned as unroutable (then acked): no queue took it.
    Returned { code: u16, text: String },
    /// Nacked: the broker could not take it (e.g. a full queue with reject-publish).
    Nacked,
}

/// One message to publish.
pub(crate) struct Outgoing {
    pub(crate) exchange: String,
    pub(crate) routing_key: String,
    pub(crate) body: Vec<u8>,
    /// Must carry a unique correlation key: `message_id`, or the `dlq-publish-id` header.
    pub(crate) properties: BasicProperties,
}

/// The correlation key of a message: the `dlq-publish-id` header, else `message_id`.
pub(crate) fn correlation_key(p: &BasicProperties) -> Option<String> {
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

/// A publish that was written, waiting for its confirm.
struct InFlight<T> {
    key: String,
    confirm: Option<PublisherConfirm>,
    result: Option<Confirmation>,
    tag: T,
}

impl<T> InFlight<T> {
    /// Takes the confirm's result if it has resolved, without waiting.
    fn harvest(&mut self) -> Result<(), lapin::Error> {
        if self.result.is_none()
            && let Some(c) = self.confirm.as_mut()
            && let Some(r) = c.now_or_never()
        {
            self.confirm = None;
            self.result = Some(r?);
        }
        Ok(())
    }
}

type Write =
    std::pin::Pin<Box<dyn std::future::Future<Output = lapin::Result<PublisherConfirm>> + Send>>;

/// A publish whose frames are queued in lapin but not yet written to the socket.
struct Writing<T> {
    write: Write,
    key: String,
    tag: T,
}

/// A confirm-mode channel driven by the task that publishes: no task of its own, so a
/// publish costs no hand-off between threads. Each message carries a caller's tag `T`,
/// handed back with its outcome, in publish order.
///
/// Publishes are staged and handed to lapin together by [`Pipeline::flush`]: lapin wakes
/// its I/O thread per publish, and one handed over alone goes out in a TCP segment of its
/// own, which costs the broker more than the publish itself.
///
/// Confirms are settled in one place because lapin hands a `basic.return` to whichever
/// confirm resolves next, which under pipelining may be another message's. A return
/// always precedes its own message's ack, so:
/// - a confirm that carries nothing: its return (if any) went to an earlier-resolved
///   confirm, already harvested -> decided from the harvested set;
/// - a confirm carrying another message's return: returns are queued; decide nothing more
///   (and publish nothing more) until every in-flight confirm resolved (then every return
///   has been handed out).
pub(crate) struct Pipeline<T> {
    channel: Channel,
    /// The connection's state, looked at while a confirm is awaited (`wait_progress`).
    connection: Liveness,
    pace: Pace,
    staged: VecDeque<(Outgoing, T)>,
    // Publishes whose frames are queued but not yet written, oldest first. lapin's
    // `basic_publish` resolves only once the I/O thread has written the frames; awaiting
    // each one before the next cost a thread round trip per message. Its first poll queues
    // the frames (and registers the confirm) synchronously, so polling each once in order
    // keeps the publish order, and the writes complete in that order.
    writing: VecDeque<Writing<T>>,
    inflight: VecDeque<InFlight<T>>,
    returned: HashMap<String, (u16, String)>,
    draining: bool,
    settled: VecDeque<(T, Result<Outcome>)>,
    /// Set once the channel failed: every later publish is settled with this error.
    lost: Option<String>,
}

impl<T> Pipeline<T> {
    /// Opens a confirm-mode channel; `rate` caps publishes per second.
    pub(crate) async fn open(conn: &Connection, rate: Option<f64>) -> Result<Pipeline<T>> {
        let channel = conn.create_channel().await.map_err(scrubbed)?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(scrubbed)?;
        Ok(Pipeline {
            channel,
            connection: conn.liveness(),
            pace: Pace::new(rate),
            staged: VecDeque::new(),
            writing: VecDeque::new(),
            inflight: VecDeque::new(),
            returned: HashMap::new(),
            draining: false,
            settled: VecDeque::new(),
            lost: None,
        })
    }

    /// Messages given to the pipeline whose outcome was not taken yet.
    pub(crate) fn len(&self) -> usize {
        self.staged.len() + self.writing.len() + self.inflight.len() + self.settled.len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues a message; it is published, in order, by the next `flush` (or `next`).
    /// It must carry a unique correlation key (see [`correlation_key`]).
    pub(crate) fn stage(&mut self, msg: Outgoing, tag: T) {
        self.staged.push_back((msg, tag));
    }

    /// Takes back every staged message not yet handed to lapin (nothing of them was sent),
    /// returning their tags in order.
    pub(crate) fn unstage(&mut self) -> Vec<T> {
        self.staged.drain(..).map(|(_, tag)| tag).collect()
    }

    /// Publishes every staged message, in order (pacing `--rate`, and waiting while a
    /// misattributed return is being sorted out).
    pub(crate) async fn flush(&mut self) {
        // Taken off `staged` only once started: cancelled at an await (a `select!`), the
        // message stays staged.
        while !self.staged.is_empty() {
            while self.draining && self.lost.is_none() {
                self.wait_progress().await;
                self.progress();
            }
            self.pace.wait().await;
            let (msg, tag) = self.staged.pop_front().expect("not empty");
            self.start(msg, tag);
        }
    }

    /// The next outcome already known, in publish order, without waiting.
    pub(crate) fn try_next(&mut self) -> Option<(T, Result<Outcome>)> {
        self.progress();
        self.settled.pop_front()
    }

    /// The next outcome, in publish order, waiting for it; `None` once nothing is left.
    /// An error means the outcome is unknown (connection lost): treat it as not moved.
    pub(crate) async fn next(&mut self) -> Option<(T, Result<Outcome>)> {
        self.flush().await;
        loop {
            if let Some(done) = self.try_next() {
                return Some(done);
            }
            if self.writing.is_empty() && self.inflight.is_empty() {
                return None;
            }
            self.wait_progress().await;
        }
    }

    /// Hands one publish to lapin: its first poll queues the frames, now.
    fn start(&mut self, msg: Outgoing, tag: T) {
        if let Some(why) = &self.lost {
            self.settled.push_back((tag, Err(anyhow!(why.clone()))));
            return;
        }
        let key = correlation_key(&msg.properties).unwrap_or_default();
        let opts = BasicPublishOptions {
            mandatory: true,
            ..Default::default()
        };
        let ch = self.channel.clone();
        let mut write: Write = Box::pin(async move {
            ch.basic_publish(
                msg.exchange.as_str().into(),
                msg.routing_key.as_str().into(),
                opts,
                &msg.body,
                msg.properties,
            )
            .await
        });
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        if let std::task::Poll::Ready(r) = write.as_mut().poll(&mut cx) {
            write = Box::pin(std::future::ready(r));
        }
        // In order, behind the writes still pending; moved on at once if written.
        self.writing.push_back(Writing { write, key, tag });
        self.progress();
    }

    /// Moves written publishes on, harvests resolved confirms and settles, in publish
    /// order, what can be decided. Never waits.
    fn progress(&mut self) {
        if self.lost.is_some() {
            return;
        }
        if let Err(e) = self.try_progress() {
            self.fail_all(lost(&e));
        }
    }

    fn try_progress(&mut self) -> Result<(), lapin::Error> {
        // A confirm can resolve only after its publish was written, and a later publish's
        // confirm may carry an earlier one's return: every written publish must be among
        // those harvested before anything is decided.
        self.promote_written()?;
        // Nothing can be decided before the oldest confirm resolved: until then only it is
        // looked at (polling a whole window of confirms per publish cost O(window) each).
        if let Some(f) = self.inflight.front_mut() {
            f.harvest()?;
        }
        let head_done = self.inflight.front().is_some_and(|f| f.result.is_some());
        if !head_done && !self.draining {
            return Ok(());
        }
        for f in self.inflight.iter_mut() {
            f.harvest()?;
        }
        for f in self.inflight.iter_mut() {
            if let Some(Confirmation::Ack(Some(m)) | Confirmation::Nack(Some(m))) =
                f.result.as_mut()
            {
                let key = correlation_key(&m.delivery.properties).unwrap_or_default();
                if key != f.key {
                    self.draining = true;
                }
                self.returned
                    .insert(key, (m.reply_code, m.reply_text.as_str().to_string()));
                // Keep the variant (ack/nack) but drop the carried message: it is recorded.
                f.result = Some(match f.result.take() {
                    Some(Confirmation::Nack(_)) => Confirmation::Nack(None),
                    _ => Confirmation::Ack(None),
                });
            }
        }
        if self.draining
            && self.writing.is_empty()
            && self.inflight.iter().all(|f| f.result.is_some())
        {
            self.draining = false; // every return has been handed out: all decidable now
        }
        if !self.draining {
            while self.inflight.front().is_some_and(|f| f.result.is_some()) {
                let f = self.inflight.pop_front().expect("front exists");
                let outcome = match f.result {
                    Some(Confirmation::Nack(_)) => Outcome::Nacked,
                    _ => match self.returned.remove(&f.key) {
                        Some((code, text)) => Outcome::Returned { code, text },
                        None => Outcome::Confirmed,
                    },
                };
                self.settled.push_back((f.tag, Ok(outcome)));
            }
        }
        Ok(())
    }

    /// Moves the written publishes at the front of `writing`, in order, to `inflight`.
    fn promote_written(&mut self) -> Result<(), lapin::Error> {
        while let Some(w) = self.writing.front_mut() {
            let Some(r) = w.write.as_mut().now_or_never() else {
                break;
            };
            let w = self.writing.pop_front().expect("front exists");
            match r {
                Ok(confirm) => self.inflight.push_back(InFlight {
                    key: w.key,
                    confirm: Some(confirm),
                    result: None,
                    tag: w.tag,
                }),
                Err(e) => {
                    self.settled
                        .push_back((w.tag, Err(scrubbed(e.clone()).context("publishing"))));
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Waits until the oldest pending write is done or the oldest unresolved confirm
    /// resolves; a failure settles everything unsettled as lost.
    ///
    /// It looks at the channel and the connection every `CONFIRM_LOOK`: once, in CI, a
    /// node's crash left dlq waiting for a confirm that never came, with lapin's I/O thread
    /// gone and no timer running. A closed channel or connection settles everything as lost
    /// instead; a live one, under flow control or an alarm, may take as long as it takes.
    async fn wait_progress(&mut self) {
        loop {
            if self.lost.is_some() {
                return;
            }
            let wait = async {
                tokio::select! {
                    r = wait_written(&mut self.writing), if !self.writing.is_empty() => r,
                    r = wait_head(&mut self.inflight), if !self.inflight.is_empty() => r,
                    else => Ok(()),
                }
            };
            match tokio::time::timeout(CONFIRM_LOOK, wait).await {
                Ok(Ok(())) => return,
                Ok(Err(e)) => {
                    self.connection.note_loss(&anyhow!(e.clone()));
                    self.fail_all(lost(&e))
                }
                // lapin may call a dead connection connected: another user of it (the
                // run's take) may have seen its loss (see `rabbit::Liveness`).
                Err(_) if self.channel.status().connected() && self.connection.alive() => {}
                Err(_) => self.fail_all(
                    "broker connection lost before the confirm: the channel or connection closed"
                        .into(),
                ),
            }
        }
    }

    /// Settles everything not yet settled, in publish order, as lost.
    fn fail_all(&mut self, why: String) {
        // A confirm that already resolved cleanly still counts as unknown here: the
        // outcome is only trusted once decided, and this path stops the run anyway.
        let tags = (self.inflight.drain(..).map(|f| f.tag))
            .chain(self.writing.drain(..).map(|w| w.tag))
            .chain(self.staged.drain(..).map(|(_, t)| t))
            .collect::<Vec<_>>();
        for tag in tags {
            self.settled.push_back((tag, Err(anyhow!(why.clone()))));
        }
        self.lost = Some(why);
    }
}

/// Handle to a publisher task (a [`Pipeline`] of its own), for callers that publish from
/// several tasks. Clone it to publish from several tasks.
#[derive(Clone)]
pub(crate) struct Publisher {
    tx: mpsc::Sender<Request>,
}

impl Publisher {
    /// Opens a confirm-mode channel and starts the publisher task. `window` is the most
    /// unconfirmed publishes at once; `rate` caps publishes per second.
    pub(crate) async fn start(
        conn: &Connection,
        window: usize,
        rate: Option<f64>,
    ) -> Result<Publisher> {
        let pipeline = Pipeline::open(conn, rate).await?;
        let (tx, rx) = mpsc::channel(window.max(1));
        tokio::spawn(run(pipeline, rx, window.max(1)));
        Ok(Publisher { tx })
    }

    /// Queues a publish in call order (so messages reach the broker in the order submitted)
    /// and returns a future of its outcome.
    pub(crate) async fn submit(
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

/// The publisher task: takes requests while fewer than `window` are unsettled, publishes
/// what arrived together in one go, and answers each as it settles.
async fn run(
    mut pipeline: Pipeline<oneshot::Sender<Result<Outcome>>>,
    mut rx: mpsc::Receiver<Request>,
    window: usize,
) {
    let mut closed = false;
    loop {
        while let Some((reply, out)) = pipeline.try_next() {
            let _ = reply.send(out);
        }
        if closed && pipeline.is_empty() {
            break;
        }
        tokio::select! {
            biased;
            req = rx.recv(), if !closed && pipeline.len() < window => {
                match req {
                    None => closed = true,
                    Some(Request { msg, reply }) => {
                        pipeline.stage(msg, reply);
                        while pipeline.len() < window {
                            match rx.try_recv() {
                                Ok(Request { msg, reply }) => pipeline.stage(msg, reply),
                                Err(_) => break,
                            }
                        }
                        pipeline.flush().await;
                    }
                }
            }
            done = pipeline.next(), if !pipeline.is_empty() => {
                if let Some((reply, out)) = done {
                    let _ = reply.send(out);
                }
            }
        }
    }
}

/// Waits for the oldest unresolved confirm.
async fn wait_head<T>(inflight: &mut VecDeque<InFlight<T>>) -> Result<(), lapin::Error> {
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

/// How often a wait for a confirm looks at the channel and the connection.
const CONFIRM_LOOK: std::time::Duration = std::time::Duration::from_secs(1);

/// What every publish still unsettled is told when the connection fails.
fn lost(e: &lapin::Error) -> String {
    format!(
        "broker connection lost before the confirm: {}",
        redact::scrub(&e.to_string())
    )
}

/// Waits until the oldest pending write is done (it stays at the front).
async fn wait_written<T>(writing: &mut VecDeque<Writing<T>>) -> Result<(), lapin::Error> {
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

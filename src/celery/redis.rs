//! Celery tasks over Redis, exactly as kombu's Redis transport writes them: one LPUSH of
//! kombu's JSON envelope onto the queue's list per task (pipelined within `--window`), and
//! Celery's remote control over kombu's Redis fanout for the worker check.

use super::control::{self, Answer, Call, Ticket};
use super::events::Feed;
use super::message::TaskMessage;
use super::sent::{Pending, Sent};
use super::workers::{self, Mailbox, Worker};
use crate::error::usage;
use crate::model::Target;
use crate::model::TargetFacts;
use crate::pace::Pace;
use crate::tls::TlsFiles;
use anyhow::{Context, Result, anyhow};
use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;
use redis::aio::MultiplexedConnection;
use serde_json::Value;

use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot};

use crate::redis::envelope::{self, Keys};
use crate::redis::{Endpoint, Redis, said};

/// Celery's default exchange: the binding set a worker adds its queues to.
const DEFAULT_EXCHANGE: &str = "celery";
/// How long `WAIT` gives replicas to acknowledge a push (ms).
const WAIT_MS: u64 = 1000;
/// The longest single BRPOP while collecting replies: the deadline is checked in between.
const POLL_SLICE: Duration = Duration::from_secs(1);

/// Celery's Redis broker as its app configures it: the URL (secret: never print), the TLS
/// files for rediss://, and kombu's transport options.
#[derive(Clone)]
pub(crate) struct RedisBroker {
    pub(crate) url: String,
    pub(crate) tls_files: TlsFiles,
    /// kombu's `global_keyprefix` (empty: none).
    pub(crate) key_prefix: String,
    /// kombu's `sep`; `None`: read from the workers' bindings.
    pub(crate) sep: Option<String>,
    /// Replicas to `WAIT` for before rows are marked.
    pub(crate) wait_replicas: Option<u32>,
}

/// Never the password (see `rabbit::Target`).
impl std::fmt::Debug for RedisBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBroker")
            .field("url", &crate::redact::url(&self.url))
            .field("tls_files", &self.tls_files)
            .field("key_prefix", &self.key_prefix)
            .field("sep", &self.sep)
            .field("wait_replicas", &self.wait_replicas)
            .finish()
    }
}

pub(crate) struct RedisDispatch {
    redis: Redis,
    /// For the pub/sub connection `--follow` opens.
    pubsub_at: Box<(Endpoint, TlsFiles)>,
    /// kombu's `global_keyprefix`.
    prefix: String,
    /// kombu's `sep` once given (`--redis-sep`) or read from a binding (see `detect_sep`);
    /// kombu's default until then.
    sep: std::sync::Mutex<Option<String>>,
    mailbox: Mailbox,
    wait_replicas: Option<u32>,
    shown: String,
}

/// Hands pushes to the task that sends them, in submission order.
#[derive(Clone)]
pub(crate) struct RedisSender {
    tx: mpsc::Sender<Push>,
    keys: Keys,
}

/// One LPUSH on its way, and who waits for its reply.
struct Push {
    key: String,
    element: Vec<u8>,
    reply: oneshot::Sender<Result<Sent>>,
}

impl RedisDispatch {
    pub(crate) async fn connect(broker: &RedisBroker, mailbox: Mailbox) -> Result<RedisDispatch> {
        let endpoint = Endpoint::parse(&broker.url)?;
        let d = RedisDispatch {
            redis: endpoint.connect(&broker.tls_files).await?,
            pubsub_at: Box::new((endpoint.clone(), broker.tls_files.clone())),
            prefix: broker.key_prefix.clone(),
            sep: std::sync::Mutex::new(broker.sep.clone()),
            mailbox,
            wait_replicas: broker.wait_replicas,
            shown: crate::redact::url(&broker.url),
        };
        if d.sep_known().is_none()
            && let Some(sep) = d.detect_sep().await?
        {
            d.set_sep(sep);
        }
        Ok(d)
    }

    fn sep_known(&self) -> Option<String> {
        self.sep.lock().expect("not poisoned").clone()
    }

    fn set_sep(&self, sep: String) {
        *self.sep.lock().expect("not poisoned") = Some(sep);
    }

    /// kombu's key names with the separator known so far.
    fn keys(&self) -> Keys {
        Keys {
            prefix: self.prefix.clone(),
            sep: self
                .sep_known()
                .unwrap_or_else(|| envelope::DEFAULT_SEP.into()),
        }
    }

    /// kombu's `sep` transport option as the workers used it (Celery's Redis priority recipe
    /// sets `':'`): read from their bindings to Celery's default exchange, else to their
    /// remote-control fanout. `None` when neither says: kombu's default stands until a
    /// queue's own bindings are read (`declared`).
    async fn detect_sep(&self) -> Result<Option<String>> {
        let keys = self.keys();
        let mut pipe = redis::pipe();
        pipe.cmd("SMEMBERS").arg(keys.binding(DEFAULT_EXCHANGE));
        pipe.cmd("SMEMBERS")
            .arg(keys.binding(&self.mailbox.request));
        let (default, control): (Vec<Vec<u8>>, Vec<Vec<u8>>) =
            self.query_all(&pipe, "reading kombu's bindings").await?;
        let found = default.iter().find_map(|m| envelope::detect_sep(m));
        Ok(found.or_else(|| control.iter().find_map(|m| envelope::detect_fanout_sep(m))))
    }

    pub(crate) fn describe(&self) -> String {
        self.shown.clone()
    }

    /// Refuses `--to-exchange` (kombu's Redis routing has no exchanges of its own to aim at)
    /// and a queue no worker ever declared (a typo would sit in a list nobody reads).
    pub(crate) async fn check_target(&self, target: &Target) -> Result<TargetFacts> {
        let q = match target {
            Target::Queue(q) => q,
            Target::Exchange { exchange, .. } => {
                return Err(usage(format!(
                    "--to-exchange {exchange:?}: on a Redis broker tasks go to a queue: use --to-queue"
                )));
            }
        };
        if !self.declared(q).await? {
            return Err(usage(format!(
                "target queue {q:?} is unknown to Redis at {}: no worker ever declared it (it is not in {}); nothing was replayed (start its workers, check --redis-key-prefix and --redis-sep, or pass --to-queue)",
                self.shown,
                self.keys().binding(DEFAULT_EXCHANGE),
            )));
        }
        let mut pipe = redis::pipe();
        for key in self.keys().queues(q) {
            pipe.cmd("LLEN").arg(key);
        }
        let sizes: Vec<u64> = self.query_all(&pipe, "sizing the target queue").await?;
        Ok(TargetFacts {
            note: Some(format!(
                "queue {q:?}: {} message(s) waiting",
                sizes.iter().sum::<u64>()
            )),
            warnings: Vec::new(),
        })
    }

    /// Whether a worker bound `q` to Celery's default exchange (or, for a queue Celery made
    /// up from `-Q`, to the exchange of the same name).
    ///
    /// Reads the separator from these bindings when nothing said it yet (a `-Q` queue of an app
    /// whose remote control uses another `control_exchange`).
    async fn declared(&self, q: &str) -> Result<bool> {
        for exchange in [DEFAULT_EXCHANGE, q] {
            let mut cmd = redis::cmd("SMEMBERS");
            cmd.arg(self.keys().binding(exchange));
            let members: Vec<Vec<u8>> = self.query(&cmd, "reading kombu's bindings").await?;
            if self.sep_known().is_none()
                && let Some(sep) = members.iter().find_map(|m| envelope::detect_sep(m))
            {
                self.set_sep(sep);
            }
            let keys = self.keys();
            if members
                .iter()
                .any(|m| keys.binding_queue(m).is_some_and(|b| b == q))
            {
                return Ok(true);
            }
        }
        Ok(false)
    }

    pub(crate) async fn workers(&self, timeout: Duration) -> Result<Vec<Worker>> {
        let answers = self.call(&workers::check_calls(), timeout).await?;
        Ok(workers::workers_from(&answers))
    }

    /// Sends `calls` over kombu's Redis fanout and collects the answers until `timeout`, or
    /// until every named worker answered.
    pub(crate) async fn call(&self, calls: &[Call], timeout: Duration) -> Result<Vec<Answer>> {
        let oid = uuid::Uuid::new_v4().to_string();
        let reply_queue = format!("{oid}.{}", self.mailbox.reply);
        // The reply exchange is direct: a worker's answer reaches our list only through this
        // binding, exactly what kombu's `maybe_declare(reply_queue)` adds.
        let keys = self.keys();
        let binding = keys.binding(&self.mailbox.reply);
        let member = keys.binding_member(&oid, "", &reply_queue);
        let mut bind = redis::cmd("SADD");
        bind.arg(&binding).arg(&member);
        let _: i64 = self.query(&bind, "asking the Celery workers").await?;
        let answers = self.ask(calls, &oid, &reply_queue, timeout).await;
        // Removed whatever happened, so that nothing lingers (late answers included: without
        // the binding they are dropped by the worker's publish).
        let mut pipe = redis::pipe();
        pipe.cmd("SREM").arg(&binding).arg(&member).ignore();
        pipe.cmd("DEL").arg(keys.queues(&reply_queue)).ignore();
        let _: Result<()> = self.query_all(&pipe, "cleaning up the reply list").await;
        answers.with_context(|| format!("asking the Celery workers over {}", self.mailbox.request))
    }

    /// Celery's events on this broker (`--follow`).
    pub(crate) async fn events(&self) -> Result<Feed> {
        let (endpoint, tls) = &*self.pubsub_at;
        let pubsub = endpoint.pubsub(tls).await?;
        Feed::redis(pubsub, &self.prefix, self.redis.db).await
    }

    /// Publishes the requests and collects the answers until `timeout`.
    async fn ask(
        &self,
        calls: &[Call],
        oid: &str,
        reply_queue: &str,
        timeout: Duration,
    ) -> Result<Vec<Answer>> {
        let deadline = tokio::time::Instant::now() + timeout;
        let channel = self
            .keys()
            .fanout_channel(self.redis.db, &self.mailbox.request);
        let expires = (unix_now() + timeout).as_secs_f64();
        let mut tickets: Vec<Ticket> = Vec::new();
        let mut listeners = 0;
        for call in calls {
            let ticket = uuid::Uuid::new_v4().to_string();
            let body = control::request_body(&self.mailbox, call, &ticket, oid);
            let mut publish = redis::cmd("PUBLISH");
            publish
                .arg(&channel)
                .arg(envelope::request(&body, &self.mailbox.request, expires));
            listeners += self.query::<i64>(&publish, "publishing").await?;
            tickets.push((ticket, call.method));
        }
        // PUBLISH counts the subscribers that got it: none means no worker is listening.
        if listeners == 0 {
            return Ok(Vec::new());
        }
        let key = self.keys().queue(reply_queue, 0);
        let mut answers = Vec::new();
        while !control::all_answered(&answers, calls)
            && let Some(raw) = self.next_reply(&key, deadline).await?
        {
            answers.extend(answer(&raw, &tickets));
        }
        Ok(answers)
    }

    /// The next element of the reply list, or None once the deadline passed.
    async fn next_reply(
        &self,
        key: &str,
        deadline: tokio::time::Instant,
    ) -> Result<Option<Vec<u8>>> {
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(None);
            }
            let mut pop = redis::cmd("BRPOP");
            pop.arg(key)
                .arg(left.min(POLL_SLICE).as_secs_f64().max(0.01));
            let got: Option<(Vec<u8>, Vec<u8>)> = self.query(&pop, "reading replies").await?;
            if let Some((_, element)) = got {
                return Ok(Some(element));
            }
        }
    }

    pub(crate) async fn sender(&self, window: usize, rate: Option<f64>) -> Result<RedisSender> {
        let window = window.max(1);
        let (tx, rx) = mpsc::channel(window);
        let wait = self.wait_replicas;
        tokio::spawn(drive(self.redis.conn.clone(), rx, window, rate, wait));
        Ok(RedisSender {
            tx,
            keys: self.keys(),
        })
    }

    async fn query<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd, doing: &str) -> Result<T> {
        let mut conn = self.redis.conn.clone();
        let out = cmd.query_async(&mut conn).await;
        out.map_err(|e| self.failed(doing, &e))
    }

    async fn query_all<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
        doing: &str,
    ) -> Result<T> {
        let mut conn = self.redis.conn.clone();
        let out = pipe.query_async(&mut conn).await;
        out.map_err(|e| self.failed(doing, &e))
    }

    fn failed(&self, doing: &str, e: &redis::RedisError) -> anyhow::Error {
        anyhow!("Redis at {}: {doing}: {}", self.redis.place, said(e))
    }
}

impl RedisSender {
    /// Queues the push of one task in call order; the future resolves with Redis' reply.
    pub(crate) async fn submit(&self, msg: TaskMessage, target: &Target) -> Result<Pending> {
        let Target::Queue(queue) = target else {
            return Err(usage(
                "on a Redis broker tasks go to a queue: use --to-queue",
            ));
        };
        let (priority, element) = envelope::task(&msg, queue);
        let key = self.keys.queue(queue, priority);
        let (reply, rx) = oneshot::channel();
        let stopped = || anyhow!("the Redis sender stopped (connection lost?)");
        self.tx
            .send(Push {
                key,
                element,
                reply,
            })
            .await
            .map_err(|_| stopped())?;
        Ok(Box::pin(async move { rx.await.map_err(|_| stopped())? }))
    }
}

/// The sending task: takes pushes while fewer than `window` await their reply, paces them to
/// `rate`, and answers each as its reply arrives (in order: one connection, one pipeline).
async fn drive(
    conn: MultiplexedConnection,
    mut rx: mpsc::Receiver<Push>,
    window: usize,
    rate: Option<f64>,
    wait: Option<u32>,
) {
    let mut pace = Pace::new(rate);
    let mut inflight = FuturesOrdered::new();
    let mut closed = false;
    loop {
        if closed && inflight.is_empty() {
            break;
        }
        tokio::select! {
            biased;
            Some((reply, out)) = inflight.next(), if !inflight.is_empty() => {
                let _: Result<(), _> = oneshot::Sender::send(reply, out);
            }
            push = rx.recv(), if !closed && inflight.len() < window => match push {
                None => closed = true,
                Some(push) => {
                    pace.wait().await;
                    inflight.push_back(send(conn.clone(), push, wait));
                }
            },
        }
    }
}

/// One LPUSH (followed by `WAIT n 1000` when replicas must have it); the reply decides.
async fn send(
    mut conn: MultiplexedConnection,
    push: Push,
    wait: Option<u32>,
) -> (oneshot::Sender<Result<Sent>>, Result<Sent>) {
    let Push {
        key,
        element,
        reply,
    } = push;
    // WAIT apart, not in a pipeline with the push: an error reply then is the push's own.
    let pushed = redis::cmd("LPUSH")
        .arg(&key)
        .arg(element)
        .query_async::<i64>(&mut conn)
        .await;
    let out = match (pushed, wait) {
        (Err(e), _) => match refusal(&e) {
            Some(why) => Ok(Sent::Refused(why)),
            None => Err(anyhow!("Redis: the push got no reply: {}", said(&e))),
        },
        (Ok(_), None) => Ok(Sent::Delivered),
        (Ok(_), Some(n)) => Ok(replicated(&mut conn, n).await),
    };
    (reply, out)
}

/// After a push: whether `n` replicas acknowledged it (`WAIT`); if not, it is in Redis'
/// memory only, and not counted as sent.
async fn replicated(conn: &mut MultiplexedConnection, n: u32) -> Sent {
    let wait = redis::cmd("WAIT").arg(n).arg(WAIT_MS).to_owned();
    match wait.query_async::<i64>(conn).await {
        Ok(got) if got >= i64::from(n) => Sent::Delivered,
        Ok(got) => Sent::Refused(format!(
            "in Redis' memory, but only {got} of {n} replica(s) acknowledged it within {WAIT_MS} ms (--redis-wait-replicas)"
        )),
        Err(e) => Sent::Refused(format!(
            "in Redis' memory, but waiting for its replicas failed: {} (--redis-wait-replicas)",
            said(&e)
        )),
    }
}

/// Redis answered the push with an error (`OOM` past maxmemory, `READONLY` on a replica
/// after a failover, `MISCONF` when it cannot save): nothing was pushed, and the row is
/// refused as a nacked message is. Before, it read "the push got no reply", and the run
/// stopped saying that up to a window of rows may have been published already.
fn refusal(e: &redis::RedisError) -> Option<String> {
    if e.is_io_error() || e.is_connection_dropped() || e.is_timeout() {
        return None;
    }
    let answered = matches!(
        e.kind(),
        redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
    );
    answered.then(|| format!("refused by Redis ({}), nothing pushed", said(e)))
}

/// One reply element, matched to its call by its ticket header.
fn answer(raw: &[u8], tickets: &[Ticket]) -> Option<Answer> {
    let got = envelope::open(raw)?;
    let ticket = got.headers.get("ticket").and_then(Value::as_str);
    control::answer(tickets, ticket, &got.body)
}

fn unix_now() -> Duration {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::celery::control::Method;
    use serde_json::json;

    #[test]
    fn answers_match_their_ticket() {
        let reply = |ticket: &str, body: &str| {
            use base64::Engine as _;
            let b = base64::engine::general_purpose::STANDARD.encode(body);
            json!({"body": b, "headers": {"ticket": ticket, "clock": 3},
                   "properties": {"body_encoding": "base64"}})
            .to_string()
        };
        let tickets = vec![
            ("t1".to_owned(), Method::Registered),
            ("t2".to_owned(), Method::ActiveQueues),
        ];
        let got = answer(reply("t1", r#"{"w@h": ["a"]}"#).as_bytes(), &tickets).unwrap();
        assert_eq!((got.method, got.host.as_str()), (Method::Registered, "w@h"));
        let got = answer(
            reply("t2", r#"{"w@h": [{"name": "q"}]}"#).as_bytes(),
            &tickets,
        );
        assert_eq!(got.unwrap().method, Method::ActiveQueues);
        assert_eq!(
            answer(reply("other", r#"{"w@h": []}"#).as_bytes(), &tickets),
            None
        );
    }
}

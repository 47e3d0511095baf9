//! RabbitMQ test helper: a virtual host of its own per test (so that no `dlq list` of
//! another test ever reads this test's queues), topology, real dead letters, and
//! before/after snapshots of a queue. Uses lapin and the management API directly, not dlq.

use crate::common::{Dlq, Run, unique};
use crate::target::api;
use futures_util::StreamExt;
use lapin::options::{
    BasicConsumeOptions, BasicNackOptions, BasicPublishOptions, ConfirmSelectOptions,
    ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const USER: &str = "guest";
const PASS: &str = "guest";

fn vhost_path(vhost: &str) -> String {
    percent_encoding::utf8_percent_encode(vhost, percent_encoding::NON_ALPHANUMERIC).to_string()
}

pub struct Broker {
    pub vhost: String,
    pub conn: Connection,
    pub ch: Channel,
    http: reqwest::Client,
}

/// One message as a queue holds it: what must be identical before and after a read.
#[derive(Debug, Clone, PartialEq)]
pub struct Snap {
    pub body: Vec<u8>,
    /// Typed properties (lossless), without the headers the broker adds at delivery.
    pub props: Value,
    /// The quorum delivery count at delivery (not part of the stored message).
    pub delivery_count: Option<i64>,
    /// RabbitMQ 4.3's count of a quorum message's earlier deliveries, counted toward the
    /// limit or not (`x-acquired-count`, absent at 0; not part of the stored message either).
    pub acquired_count: Option<i64>,
}

pub fn ls(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

pub fn table(v: Vec<(&str, AMQPValue)>) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, x) in v {
        t.insert(k.into(), x);
    }
    t
}

impl Broker {
    pub async fn new(prefix: &str) -> Broker {
        let vhost = unique(&format!("dlq-it-{prefix}"));
        let http = reqwest::Client::new();
        let put = |path: String, body: Value| {
            let http = http.clone();
            async move {
                let r = http
                    .put(format!("{}/{path}", api()))
                    .basic_auth(USER, Some(PASS))
                    .json(&body)
                    .send()
                    .await
                    .expect("management API reachable");
                assert!(r.status().is_success(), "PUT {path}: {}", r.status());
            }
        };
        put(format!("vhosts/{}", vhost_path(&vhost)), json!({})).await;
        put(
            format!("permissions/{}/{USER}", vhost_path(&vhost)),
            json!({"configure": ".*", "write": ".*", "read": ".*"}),
        )
        .await;
        let conn = Connection::connect(
            &crate::target::amqp_url_as(USER, PASS, &vhost_path(&vhost)),
            ConnectionProperties::default(),
        )
        .await
        .expect("connect to RabbitMQ");
        let ch = conn.create_channel().await.unwrap();
        ch.confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
        Broker {
            vhost,
            conn,
            ch,
            http,
        }
    }

    /// A new connection and channel, after the broker was restarted under the test.
    pub async fn reconnect(&mut self) {
        self.conn = Connection::connect(&self.amqp_url(), ConnectionProperties::default())
            .await
            .expect("reconnect to RabbitMQ");
        self.ch = self.conn.create_channel().await.unwrap();
        self.ch
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .unwrap();
    }

    pub fn amqp_url(&self) -> String {
        crate::target::amqp_url_as(USER, PASS, &vhost_path(&self.vhost))
    }

    /// The dlq binary pointed at this test's virtual host.
    pub fn dlq(&self) -> Dlq {
        Dlq::new().env("DLQ_AMQP_URL", &self.amqp_url())
    }

    /// Runs dlq on a blocking thread so that this test's own broker connection keeps going.
    pub async fn run(&self, args: &[&str]) -> Run {
        self.run_with(args, &[]).await
    }

    pub async fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> Run {
        let mut d = self.dlq().args(args);
        for (k, v) in env {
            d = d.env(k, v);
        }
        tokio::task::spawn_blocking(move || d.run()).await.unwrap()
    }

    pub async fn queue(&self, name: &str, args: FieldTable) {
        self.ch
            .queue_declare(name.into(), QueueDeclareOptions::durable(), args)
            .await
            .unwrap_or_else(|e| panic!("declare {name}: {e}"));
    }

    /// Deletes a queue (and what it holds) and declares it again with other arguments.
    pub async fn redeclare(&self, name: &str, args: FieldTable) {
        self.ch
            .queue_delete(name.into(), Default::default())
            .await
            .unwrap_or_else(|e| panic!("delete {name}: {e}"));
        self.queue(name, args).await;
    }

    pub async fn exchange(&self, name: &str, kind: ExchangeKind) {
        self.ch
            .exchange_declare(
                name.into(),
                kind,
                ExchangeDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
    }

    pub async fn bind(&self, queue: &str, exchange: &str, key: &str) {
        self.ch
            .queue_bind(
                queue.into(),
                exchange.into(),
                key.into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }

    /// A binding with arguments (headers exchanges).
    pub async fn bind_with(&self, queue: &str, exchange: &str, args: FieldTable) {
        self.ch
            .queue_bind(
                queue.into(),
                exchange.into(),
                "".into(),
                QueueBindOptions::default(),
                args,
            )
            .await
            .unwrap();
    }

    /// Publishes through the default exchange and waits for a clean confirm.
    pub async fn publish(&self, queue: &str, body: &[u8], props: BasicProperties) {
        self.publish_to("", queue, body, props).await
    }

    pub async fn publish_to(&self, exchange: &str, key: &str, body: &[u8], props: BasicProperties) {
        let c = self
            .ch
            .basic_publish(
                exchange.into(),
                key.into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                body,
                props,
            )
            .await
            .unwrap()
            .await
            .unwrap();
        assert!(
            matches!(c, Confirmation::Ack(None)),
            "publish to {key}: {c:?}"
        );
    }

    /// Many messages, pipelined, then one wait for all confirms.
    pub async fn publish_many(&self, queue: &str, bodies: impl Iterator<Item = Vec<u8>>) {
        self.publish_many_as(queue, bodies, BasicProperties::default())
            .await
    }

    /// `publish_many` with these properties (persistent) on every message.
    pub async fn publish_many_as(
        &self,
        queue: &str,
        bodies: impl Iterator<Item = Vec<u8>>,
        props: BasicProperties,
    ) {
        let mut pending = Vec::new();
        for b in bodies {
            pending.push(
                self.ch
                    .basic_publish(
                        "".into(),
                        queue.into(),
                        BasicPublishOptions::default(),
                        &b,
                        props.clone().with_delivery_mode(2),
                    )
                    .await
                    .unwrap(),
            );
            if pending.len() >= 5000 {
                for p in pending.drain(..) {
                    assert!(matches!(p.await.unwrap(), Confirmation::Ack(_)));
                }
            }
        }
        for p in pending {
            assert!(matches!(p.await.unwrap(), Confirmation::Ack(_)));
        }
    }

    /// Waits until `queue` exists (a worker on this vhost declared it).
    pub async fn wait_queue(&self, queue: &str) {
        for _ in 0..300 {
            if self.exists(queue).await {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("queue {queue} never appeared");
    }

    /// Ready messages, exactly (passive declare).
    pub async fn depth(&self, queue: &str) -> u32 {
        let ch = self.conn.create_channel().await.unwrap();
        let q = ch
            .queue_declare(
                queue.into(),
                QueueDeclareOptions::default().passive(),
                FieldTable::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("passive declare {queue}: {e}"));
        let _ = ch.close(200, "".into()).await;
        q.message_count()
    }

    /// Whether a queue exists (a 404 closes only a throwaway channel).
    pub async fn exists(&self, queue: &str) -> bool {
        let ch = self.conn.create_channel().await.unwrap();
        let r = ch
            .queue_declare(
                queue.into(),
                QueueDeclareOptions::default().passive(),
                FieldTable::default(),
            )
            .await;
        if r.is_ok() {
            let _ = ch.close(200, "".into()).await;
        }
        r.is_ok()
    }

    /// Dead lettering is asynchronous: waits until the queue holds exactly `n` ready.
    pub async fn wait_depth(&self, queue: &str, n: u32) {
        self.wait_depth_for(queue, n, Duration::from_secs(30), |d| d == n)
            .await;
    }

    /// Waits up to `limit` until `queue`'s ready count passes `done`; `n` is what the
    /// failure names as expected.
    async fn wait_depth_for(
        &self,
        queue: &str,
        n: u32,
        limit: Duration,
        done: impl Fn(u32) -> bool,
    ) {
        let start = Instant::now();
        loop {
            let d = self.depth(queue).await;
            if done(d) {
                return;
            }
            assert!(
                start.elapsed() < limit,
                "{queue} holds {d} ready messages, expected {n}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// What a worker does with messages it cannot process: consumes `n` and rejects them
    /// without requeue, so the broker dead-letters them.
    pub async fn reject(&self, queue: &str, n: usize) {
        let ch = self.reject_on_a_channel(queue, n).await;
        ch.close(200, "worker done".into()).await.unwrap();
    }

    /// `reject` for a quorum `queue` whose DLX feeds `dlq`: its channel stays open until `dlq`
    /// holds `total`. RabbitMQ 3.10 gave 2 of 3,000 back to the queue when the channel closed
    /// right after the last rejection, and dead-letters from a quorum queue at a few hundred
    /// a second here: longer than `wait_depth`'s 30 s.
    pub async fn reject_into(&self, queue: &str, n: usize, dlq: &str, total: u32) {
        let ch = self.reject_on_a_channel(queue, n).await;
        let limit = Duration::from_secs(120);
        self.wait_depth_for(dlq, total, limit, |d| d >= total).await;
        ch.close(200, "worker done".into()).await.unwrap();
        self.wait_depth(dlq, total).await;
    }

    async fn reject_on_a_channel(&self, queue: &str, n: usize) -> Channel {
        let ch = self.conn.create_channel().await.unwrap();
        let mut c = ch
            .basic_consume(
                queue.into(),
                "worker".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        for _ in 0..n {
            let d = c.next().await.unwrap().unwrap();
            assert!(
                d.acker
                    .nack(BasicNackOptions {
                        multiple: false,
                        requeue: false,
                    })
                    .await
                    .unwrap(),
                "nack sent"
            );
        }
        ch
    }

    /// Moves `n` messages as a shovel would: same properties and body, confirmed before
    /// the source is acknowledged.
    pub async fn shovel(&self, from: &str, to: &str, n: usize) {
        for _ in 0..n {
            let m = self
                .ch
                .basic_get(from.into(), lapin::options::BasicGetOptions::default())
                .await
                .unwrap()
                .expect("message to shovel");
            let d = &m.delivery;
            self.publish(to, &d.data, d.properties.clone()).await;
            assert!(
                d.acker
                    .ack(lapin::options::BasicAckOptions::default())
                    .await
                    .unwrap()
            );
        }
    }

    /// Reads every ready message (without the tool under test) and gives them all back
    /// by closing the channel.
    pub async fn snapshot(&self, queue: &str) -> Vec<Snap> {
        let n = self.depth(queue).await as usize;
        let ch = self.conn.create_channel().await.unwrap();
        // Room for all of them at once: without a prefetch a quorum queue (3.10) stopped
        // delivering a 3,000-message snapshot part way. Past 65,535 (classic queues in
        // these tests) no prefetch can hold them all: none, then.
        if let Ok(room) = u16::try_from(n) {
            let qos = lapin::options::BasicQosOptions::default();
            ch.basic_qos(room.max(1), qos).await.unwrap();
        }
        let mut c = ch
            .basic_consume(
                queue.into(),
                "snapshot".into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let d = tokio::time::timeout(Duration::from_secs(20), c.next())
                .await
                .expect("snapshot delivery")
                .unwrap()
                .unwrap();
            let mut props = dlq::testing::properties_to_typed_json(&d.properties);
            let (mut delivery_count, mut acquired_count) = (None, None);
            if let Some(h) = props.get_mut("headers").and_then(Value::as_object_mut) {
                if let Some(v) = h.shift_remove("x-delivery-count") {
                    delivery_count = v[1].as_i64();
                }
                if let Some(v) = h.shift_remove("x-acquired-count") {
                    acquired_count = v[1].as_i64();
                }
                if h.is_empty() {
                    props.as_object_mut().unwrap().remove("headers");
                }
            }
            out.push(Snap {
                body: d.data,
                props,
                delivery_count,
                acquired_count,
            });
        }
        ch.close(200, "snapshot done".into()).await.unwrap();
        out
    }

    /// Removes `n` messages from the head of `queue` one at a time (`basic.get`, no
    /// acknowledgement) and returns their bodies: the queue's own order, with no consumer's
    /// credit in between. Waits up to 30 s for each.
    pub async fn take_all(&self, queue: &str, n: usize) -> Vec<Vec<u8>> {
        let ch = self.conn.create_channel().await.unwrap();
        let mut out = Vec::with_capacity(n);
        let start = Instant::now();
        while out.len() < n {
            let get = lapin::options::BasicGetOptions { no_ack: true };
            match ch.basic_get(queue.into(), get).await.unwrap() {
                Some(m) => out.push(m.delivery.data),
                None => {
                    let had = out.len();
                    assert!(
                        start.elapsed() < Duration::from_secs(30),
                        "{queue}: {had} of {n}"
                    );
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        ch.close(200, "taken".into()).await.unwrap();
        out
    }

    /// Reads a stream from its first offset (streams never change when read).
    pub async fn stream_bodies(&self, queue: &str, n: usize) -> Vec<Vec<u8>> {
        let ch = self.conn.create_channel().await.unwrap();
        ch.basic_qos(1000, Default::default()).await.unwrap();
        let mut c = ch
            .basic_consume(
                queue.into(),
                "stream-snapshot".into(),
                BasicConsumeOptions::default(),
                table(vec![("x-stream-offset", ls("first"))]),
            )
            .await
            .unwrap();
        let mut out = Vec::new();
        while out.len() < n {
            let d = tokio::time::timeout(Duration::from_secs(20), c.next())
                .await
                .expect("stream delivery")
                .unwrap()
                .unwrap();
            out.push(d.data);
        }
        ch.close(200, "".into()).await.unwrap();
        out
    }

    pub async fn policy(&self, name: &str, pattern: &str, definition: Value) {
        let r = self
            .http
            .put(format!(
                "{}/policies/{}/{name}",
                api(),
                vhost_path(&self.vhost)
            ))
            .basic_auth(USER, Some(PASS))
            .json(&json!({"pattern": pattern, "definition": definition, "apply-to": "queues"}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "policy: {}", r.status());
    }

    /// Waits until the management API shows policy `name` on `queue`: that view comes from
    /// the queue's statistics, emitted every 5 s, so right after a policy is set on a queue
    /// that already has statistics the API may still show its earlier effective policy
    /// (seen once in CI on RabbitMQ 4.3: a run named a queue's 600-s argument after an
    /// earlier run had named the new policy's 10 s).
    pub async fn wait_policy(&self, queue: &str, name: &str) {
        let url = format!("{}/queues/{}/{queue}", api(), vhost_path(&self.vhost));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = self
                .http
                .get(&url)
                .basic_auth(USER, Some(PASS))
                .send()
                .await;
            let q: Value = match r {
                Ok(r) if r.status().is_success() => r.json().await.unwrap_or_default(),
                _ => Value::Null,
            };
            if q["policy"] == name && q["effective_policy_definition"].is_object() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the API never showed policy {name:?} on {queue:?}: {q}"
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Deletes the virtual host and everything in it.
    pub async fn delete(self) {
        let _ = self.conn.close(200, "test done".into()).await;
        delete_vhost(&self.http, &self.vhost).await;
    }
}

async fn delete_vhost(http: &reqwest::Client, vhost: &str) {
    let _ = http
        .delete(format!("{}/vhosts/{}", api(), vhost_path(vhost)))
        .basic_auth(USER, Some(PASS))
        .send()
        .await;
}

/// A failed assertion must not leak a virtual host: delete it on unwind too.
impl Drop for Broker {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let vhost = self.vhost.clone();
            let _ = std::thread::spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(delete_vhost(&reqwest::Client::new(), &vhost))
            })
            .join();
        }
    }
}

/// An empty virtual host shared by tests that must not see any queue (table tests' `list`).
pub async fn empty_vhost_url() -> String {
    static URL: tokio::sync::OnceCell<String> = tokio::sync::OnceCell::const_new();
    URL.get_or_init(|| async {
        let vhost = "dlq-it-empty";
        let http = reqwest::Client::new();
        for (path, body) in [
            (format!("vhosts/{vhost}"), json!({})),
            (
                format!("permissions/{vhost}/{USER}"),
                json!({"configure": ".*", "write": ".*", "read": ".*"}),
            ),
        ] {
            let r = http
                .put(format!("{}/{path}", api()))
                .basic_auth(USER, Some(PASS))
                .json(&body)
                .send()
                .await
                .expect("management API reachable");
            assert!(r.status().is_success(), "PUT {path}: {}", r.status());
        }
        crate::target::amqp_url_as(USER, PASS, vhost)
    })
    .await
    .clone()
}

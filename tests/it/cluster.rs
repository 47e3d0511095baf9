//! A node of a 3-node cluster lost under dlq (kill -9), on a quorum DLQ whose leader is on
//! another node: nothing lost, nothing stranded out of sight, the order kept; and messages a
//! dead connection still holds are reported when dlq starts. The cluster is the test's own
//! (`support::cluster`), of the generation the suite runs against.

use crate::common::dlq_command;
use crate::support::cluster::Cluster;
use futures_util::StreamExt;
use lapin::options::{
    BasicCancelOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

const DLQ: &str = "q.dlq";
const MAIN: &str = "q.main";
/// Node roles: the queues' leader is on A (they are declared there); dlq connects to C.
const A: usize = 0;
const C: usize = 2;

async fn connect(url: &str) -> Connection {
    Connection::connect(url, Default::default()).await.unwrap()
}

fn quorum_args() -> FieldTable {
    let mut t = FieldTable::default();
    t.insert(
        "x-queue-type".into(),
        AMQPValue::LongString("quorum".into()),
    );
    t
}

/// Both queues declared through node A (so led by A), and `n` dead letters `m-0` ... in
/// the DLQ, as the broker leaves them.
async fn fill(conn: &Connection, n: usize) {
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    for q in [DLQ, MAIN] {
        let durable = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        ch.queue_declare(q.into(), durable, quorum_args())
            .await
            .unwrap();
    }
    let mut pending = Vec::new();
    for i in 0..n {
        let mut headers = FieldTable::default();
        headers.insert(
            "x-first-death-queue".into(),
            AMQPValue::LongString(MAIN.into()),
        );
        let props = BasicProperties::default()
            .with_message_id(format!("m-{i}").as_str().into())
            .with_delivery_mode(2)
            .with_headers(headers);
        let body = format!(r#"{{"n": {i}}}"#);
        let publish = BasicPublishOptions::default();
        let confirm = ch
            .basic_publish("".into(), DLQ.into(), publish, body.as_bytes(), props)
            .await
            .unwrap();
        pending.push(confirm);
        if pending.len() >= 1000 {
            for p in pending.drain(..) {
                p.await.unwrap();
            }
        }
    }
    for p in pending {
        p.await.unwrap();
    }
}

/// Ready messages of `queue` (passive declare).
async fn ready(conn: &Connection, queue: &str) -> u64 {
    let ch = conn.create_channel().await.unwrap();
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let q = ch
        .queue_declare(queue.into(), passive, FieldTable::default())
        .await
        .unwrap();
    let _ = ch.close(200, "".into()).await;
    u64::from(q.message_count())
}

/// The ids of `queue`'s ready messages (at most 65,535), in queue order: every one is held
/// on one consumer,
/// then all are given back by closing the channel (in order; a quorum queue without a limit
/// on 3.10, and +1 of 20 on 4.0).
async fn ids(conn: &Connection, queue: &str) -> Vec<u64> {
    let n = ready(conn, queue).await;
    let ch = conn.create_channel().await.unwrap();
    // A quorum queue gives a consumer with prefetch 0 a bounded credit: ask for them all.
    assert!(n <= u64::from(u16::MAX));
    let all = n.max(1) as u16;
    ch.basic_qos(all, BasicQosOptions::default()).await.unwrap();
    let mut c = ch
        .basic_consume(
            queue.into(),
            "ids".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let mut out = Vec::new();
    while (out.len() as u64) < n {
        let d = tokio::time::timeout(Duration::from_secs(20), c.next())
            .await
            .expect("a delivery")
            .unwrap()
            .unwrap();
        let id = d.properties.message_id().as_ref().unwrap().to_string();
        out.push(id.trim_start_matches("m-").parse().unwrap());
    }
    let _ = ch.close(200, "".into()).await;
    out
}

/// How many of `ids` come before a smaller one: 0 when in ascending order.
fn out_of_order(ids: &[u64]) -> usize {
    ids.windows(2).filter(|w| w[1] < w[0]).count()
}

/// dlq against node `amqp` of the cluster (management API of node `api`), output captured.
fn dlq(cluster: &Cluster, amqp: usize, api: usize, args: &[&str]) -> std::process::Child {
    dlq_command()
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("dlq-tests-no-config"),
        )
        .env("DLQ_AMQP_URL", cluster.amqp_url(amqp))
        .env("DLQ_MANAGEMENT_URL", cluster.api_url(api))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Waits until the DLQ and the destination together hold at least `n` ready messages: what
/// a lost node held is given back (or `None`: still missing after 30 s, stranded).
async fn all_ready(conn: &Connection, n: u64) -> Option<u64> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let total = ready(conn, DLQ).await + ready(conn, MAIN).await;
        if total >= n {
            return Some(total);
        }
        if Instant::now() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_of_dlqs_node_mid_replay_strands_nothing_and_keeps_the_order() {
    const N: u64 = 20_000;
    let cluster = tokio::task::spawn_blocking(|| Cluster::start("crash"))
        .await
        .unwrap();
    let on_a = connect(&cluster.amqp_url(A)).await;
    fill(&on_a, N as usize).await;

    let child = dlq(
        &cluster,
        C,
        C,
        &["replay", "-Q", DLQ, "--yes", "--rate", "2500"],
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    while ready(&on_a, MAIN).await < 4_000 {
        assert!(Instant::now() < deadline, "the replay made no progress");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cluster.kill(C);
    let out = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(!out.status.success(), "{}", text(&out));

    // Every message is ready again in one queue or the other: none held out of reach.
    let total = all_ready(&on_a, N).await;
    let held = cluster.api_get(A, "queues/%2f/q.dlq");
    assert!(
        total.is_some(),
        "messages stranded after the crash: DLQ {} ready + destination {} < {N}; the queue: \
         {} unacknowledged, {} consumer(s)",
        ready(&on_a, DLQ).await,
        ready(&on_a, MAIN).await,
        held["messages_unacknowledged"],
        held["consumers"]
    );
    let (left, moved) = (ids(&on_a, DLQ).await, ids(&on_a, MAIN).await);
    let mut every: Vec<u64> = left.iter().chain(moved.iter()).copied().collect();
    every.sort_unstable();
    every.dedup();
    assert_eq!(every.len() as u64, N, "ids lost");
    let doubled = left.len() + moved.len() - every.len();
    // At most what was unsettled when the node went: the adaptive window's bound.
    assert!(doubled <= 1024, "{doubled} in both places");
    assert_eq!(out_of_order(&left), 0, "the DLQ's order changed");
    assert_eq!(out_of_order(&moved), 0, "the destination's order changed");

    // A run on a live node moves the rest: the DLQ ends empty, every id in the destination.
    let again = dlq(&cluster, A, A, &["replay", "-Q", DLQ, "--yes"]);
    let out = tokio::task::spawn_blocking(move || again.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(ready(&on_a, DLQ).await, 0);
    let mut moved = ids(&on_a, MAIN).await;
    moved.sort_unstable();
    moved.dedup();
    assert_eq!(moved.len() as u64, N);
}

/// What a plain client leaves after its node crashed: a consumer that received `held`
/// messages and was cancelled without acknowledging them, on node C.
async fn held_by_a_cancelled_consumer(cluster: &Cluster, held: u16) -> Channel {
    let on_c = connect(&cluster.amqp_url(C)).await;
    let ch = on_c.create_channel().await.unwrap();
    ch.basic_qos(held, BasicQosOptions::default())
        .await
        .unwrap();
    let mut c = ch
        .basic_consume(
            DLQ.into(),
            "holder".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    for _ in 0..held {
        tokio::time::timeout(Duration::from_secs(20), c.next())
            .await
            .expect("a delivery")
            .unwrap()
            .unwrap();
    }
    ch.basic_cancel("holder".into(), BasicCancelOptions::default())
        .await
        .unwrap();
    std::mem::forget(on_c);
    ch
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_held_by_a_lost_connection_are_reported_on_start() {
    const N: u64 = 1_000;
    let cluster = tokio::task::spawn_blocking(|| Cluster::start("held"))
        .await
        .unwrap();
    let on_a = connect(&cluster.amqp_url(A)).await;
    fill(&on_a, N as usize).await;
    let _holder = held_by_a_cancelled_consumer(&cluster, 300).await;
    cluster.kill(C);
    // The broker keeps them: 700 ready, 300 held by the lost consumer (as its statistics
    // show once the leader emits them).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let q = cluster.api_get(A, "queues/%2f/q.dlq");
        if q["messages_unacknowledged"] == 300 {
            break;
        }
        assert!(Instant::now() < deadline, "the held messages: {q}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(ready(&on_a, DLQ).await, 700);

    let dry = ["replay", "-Q", DLQ, "--dry-run", "-o", "json"];
    let out = dlq(&cluster, A, A, &dry).wait_with_output().unwrap();
    let said = text(&out);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains(
            "\"q.dlq\": 300 message(s) held unacknowledged by 1 consumer(s) that no live \
             connection owns"
        ) && said.contains("rabbitmq-queues rebalance quorum"),
        "{said}"
    );

    // What the warning says to do works: the node back, then a leader change.
    tokio::task::block_in_place(|| {
        cluster.restart(C);
        cluster.ctl(&cluster.nodes[A], &["stop_app"]);
        cluster.ctl(&cluster.nodes[A], &["start_app"]);
    });
    let on_b = connect(&cluster.amqp_url(1)).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while ready(&on_b, DLQ).await < N {
        assert!(
            Instant::now() < deadline,
            "the held messages did not come back"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // All of them; the broker puts the held ones back where it puts any return.
    let mut back = ids(&on_b, DLQ).await;
    back.sort_unstable();
    back.dedup();
    assert_eq!(back.len() as u64, N);
    let out = dlq(&cluster, 1, 1, &dry).wait_with_output().unwrap();
    assert!(!text(&out).contains("no live connection"), "{}", text(&out));
}

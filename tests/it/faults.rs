//! Faults during queue replays and concurrent runs: count everything before and after;
//! nothing is lost, duplicates stay within the documented window, a re-run completes.

use crate::broker::{Broker, ls, table};
use crate::common::*;
use lapin::BasicProperties;
use lapin::options::BasicPublishOptions;
use lapin::types::FieldTable;
use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const DLQ: &str = "orders.dlq";
const MAIN: &str = "orders.process";
const WINDOW: usize = 8;

/// `n` dead letters as the broker leaves them (x-first-death-queue = MAIN), published fast.
async fn fill(b: &Broker, n: usize) {
    fill_into(b, n, FieldTable::default()).await;
}

/// `fill` into a DLQ declared with `dlq_args`.
async fn fill_into(b: &Broker, n: usize, dlq_args: FieldTable) {
    b.queue(DLQ, dlq_args).await;
    b.queue(MAIN, FieldTable::default()).await;
    let mut pending = Vec::new();
    for i in 0..n {
        let props = BasicProperties::default()
            .with_message_id(format!("m-{i}").as_str().into())
            .with_delivery_mode(2)
            .with_headers(table(vec![
                ("x-first-death-queue", ls(MAIN)),
                ("x-first-death-reason", ls("rejected")),
                (
                    "x-exception-message",
                    ls(if i % 2 == 0 {
                        "KeyError: a"
                    } else {
                        "ValueError: b"
                    }),
                ),
            ]));
        pending.push(
            b.ch.basic_publish(
                "".into(),
                DLQ.into(),
                BasicPublishOptions::default(),
                format!("{{\"i\": {i}}}").as_bytes(),
                props,
            )
            .await
            .unwrap(),
        );
        if pending.len() >= 2000 {
            for p in pending.drain(..) {
                p.await.unwrap();
            }
        }
    }
    for p in pending {
        p.await.unwrap();
    }
    b.wait_depth(DLQ, n as u32).await;
}

/// message id -> copies, over a queue's ready messages (read without changing it).
async fn ids_in(b: &Broker, queue: &str) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for s in b.snapshot(queue).await {
        *m.entry(s.props["message_id"].as_str().unwrap().to_string())
            .or_default() += 1;
    }
    m
}

/// Nothing lost (every id somewhere), no id in the DLQ twice, duplicates within `allowed`.
async fn check_conserved(b: &Broker, n: usize, allowed: usize) -> (usize, usize) {
    let (dlq, dest) = (ids_in(b, DLQ).await, ids_in(b, MAIN).await);
    for i in 0..n {
        let id = format!("m-{i}");
        assert!(
            dlq.contains_key(&id) || dest.contains_key(&id),
            "{id} was lost"
        );
    }
    let in_both = dlq.keys().filter(|k| dest.contains_key(*k)).count();
    let dup_dest: usize = dest.values().map(|c| c - 1).sum();
    assert!(
        in_both + dup_dest <= allowed,
        "{in_both} in both places + {dup_dest} twice in the destination > {allowed}"
    );
    (dlq.values().sum(), dest.values().sum())
}

/// `rate` 0: as fast as it goes.
fn spawn_replay(b: &Broker, rate: u32) -> std::process::Child {
    spawn_replay_with(b, rate, false, WINDOW)
}

fn spawn_replay_with(
    b: &Broker,
    rate: u32,
    plan_first: bool,
    window: usize,
) -> std::process::Child {
    let mut args = vec![
        "replay".to_string(),
        "-Q".into(),
        DLQ.into(),
        "--yes".into(),
        "--window".into(),
        window.to_string(),
    ];
    if rate > 0 {
        args.extend(["--rate".to_string(), rate.to_string()]);
    }
    if plan_first {
        args.push("--plan-first".into());
    }
    spawn_dlq(b, &args)
}

/// dlq with `args` on the test's vhost, no config file, its output captured.
fn spawn_dlq(b: &Broker, args: &[impl AsRef<std::ffi::OsStr>]) -> std::process::Child {
    crate::common::dlq_command()
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("dlq-tests-no-config"),
        )
        .env("DLQ_AMQP_URL", b.amqp_url())
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

async fn wait_moved(b: &Broker, at_least: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while b.depth(MAIN).await < at_least {
        assert!(Instant::now() < deadline, "replay made no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn kill_9_mid_queue_replay() {
    kill_9_mid_queue_replay_with(false).await;
}

/// The same while moving what a plan holds (`--plan-first`).
#[tokio::test]
async fn kill_9_mid_planned_queue_replay() {
    kill_9_mid_queue_replay_with(true).await;
}

async fn kill_9_mid_queue_replay_with(plan_first: bool) {
    let b = Broker::new(if plan_first {
        "fault-kill-plan"
    } else {
        "fault-kill"
    })
    .await;
    let n = 3000;
    fill(&b, n).await;
    let mut child = spawn_replay_with(&b, 1000, plan_first, WINDOW);
    wait_moved(&b, 300).await;
    child.kill().unwrap();
    child.wait().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (dlq, dest) = check_conserved(&b, n, WINDOW).await;
    assert!(
        dlq > 0 && dest < n + WINDOW,
        "the kill came too late to test anything"
    );
    // A re-run finishes the job.
    b.run(&["replay", "-Q", DLQ, "--yes"]).await.ok();
    b.wait_depth(DLQ, 0).await;
    let dest = ids_in(&b, MAIN).await;
    assert_eq!(dest.len(), n);
    assert!(dest.values().map(|c| c - 1).sum::<usize>() <= WINDOW);
    b.delete().await;
}

/// Ctrl-C (SIGINT) mid queue replay: dlq stops after what is in flight, publishes nothing
/// more, and leaves every message in exactly one place; a re-run finishes the job.
#[tokio::test]
async fn interrupted_queue_replay_stops_cleanly() {
    let b = Broker::new("fault-sigint").await;
    let n = 400;
    fill(&b, n).await;
    // 20 a second: ~20 s for everything, so the signal comes well before the end. A wide
    // window: what is waiting to be published must not be paced out first (256 at 20/s
    // would take ~13 s; a stop takes well under a second).
    let child = spawn_replay_with(&b, 20, false, 256);
    wait_moved(&b, 20).await;
    let signalled = Instant::now();
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("STOPPED: interrupted"), "{stderr}");
    // Paced one by one: the stop is seen at the next message, not after a whole window.
    assert!(
        signalled.elapsed() < Duration::from_secs(5),
        "took {:?} to stop",
        signalled.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    // A clean stop: nothing in both places.
    let (dlq, dest) = check_conserved(&b, n, 0).await;
    assert!(dlq > 0 && dest > 0, "dlq {dlq}, dest {dest}");
    let moved: usize = stderr
        .lines()
        .find_map(|l| l.split("replay: ").nth(1)?.split(' ').next()?.parse().ok())
        .expect("summary line");
    assert_eq!(moved, dest, "the report counts what moved: {stderr}");
    b.run(&["replay", "-Q", DLQ, "--yes"]).await.ok();
    b.wait_depth(DLQ, 0).await;
    assert_eq!(ids_in(&b, MAIN).await.len(), n);
    b.delete().await;
}

#[tokio::test]
async fn broker_connection_closed_mid_queue_replay() {
    let b = Broker::new("fault-close").await;
    let n = 2000;
    fill(&b, n).await;
    // Slow enough that the management API lists the connection before the end.
    let child = spawn_replay(&b, 150);
    let pid = child.id();
    wait_moved(&b, 100).await;
    crate::table_faults::close_broker_connection(pid).await;
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("STOPPED"), "{stderr}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    check_conserved(&b, n, WINDOW).await;
    b.run(&["replay", "-Q", DLQ, "--yes"]).await.ok();
    b.wait_depth(DLQ, 0).await;
    assert_eq!(ids_in(&b, MAIN).await.len(), n);
    b.delete().await;
}

#[tokio::test]
async fn target_deleted_mid_replay_leaves_the_rest_in_the_dlq() {
    let b = Broker::new("fault-deleted").await;
    let n = 2000;
    fill(&b, n).await;
    let child = spawn_replay(&b, 400);
    wait_moved(&b, 200).await;
    b.ch.queue_delete(MAIN.into(), Default::default())
        .await
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("unroutable"), "{stderr}");
    // What went to the deleted queue went with it (the operator deleted it); everything
    // dlq could not deliver is still in the DLQ.
    let succeeded: usize = stderr
        .lines()
        .find_map(|l| {
            l.strip_prefix("warning: replay: ")
                .and_then(|r| r.split(' ').next())
                .and_then(|x| x.parse().ok())
        })
        .expect("summary line");
    b.wait_depth(DLQ, (n - succeeded) as u32).await;
    b.delete().await;
}

#[tokio::test]
async fn full_target_nacks_leave_messages_in_the_dlq() {
    let b = Broker::new("fault-full").await;
    let n = 300;
    fill(&b, n).await;
    b.redeclare(
        MAIN,
        table(vec![
            ("x-max-length", lapin::types::AMQPValue::LongLongInt(100)),
            ("x-overflow", ls("reject-publish")),
        ]),
    )
    .await;
    let run = b.run(&["replay", "-Q", DLQ, "--yes", "-o", "json"]).await;
    assert_eq!(run.code(), 3, "{}", run.stderr());
    let report: serde_json::Value = serde_json::from_str(run.stdout().trim()).unwrap();
    assert_eq!(report["succeeded"], 100);
    assert_eq!(report["failed_count"], 200);
    assert!(
        report["failed"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("nacked")
    );
    b.wait_depth(MAIN, 100).await;
    b.wait_depth(DLQ, 200).await;
    check_conserved(&b, n, 0).await;
    b.delete().await;
}

#[tokio::test]
async fn two_queue_replays_and_a_replay_with_an_archive_at_once() {
    let b = Broker::new("fault-concurrent").await;
    let n = 3000;
    fill(&b, n).await;
    let (r1, r2) = (spawn_replay(&b, 0), spawn_replay(&b, 0));
    let (o1, o2) = (
        r1.wait_with_output().unwrap(),
        r2.wait_with_output().unwrap(),
    );
    assert!(
        o1.status.success() && o2.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&o1.stderr),
        String::from_utf8_lossy(&o2.stderr)
    );
    b.wait_depth(DLQ, 0).await;
    let dest = ids_in(&b, MAIN).await;
    assert_eq!(dest.len(), n);
    assert!(dest.values().all(|c| *c == 1), "a message was moved twice");

    // A replay and an archive --delete on the same DLQ: each message ends in exactly one.
    b.ch.queue_purge(MAIN.into(), Default::default())
        .await
        .unwrap();
    b.ch.queue_delete(DLQ.into(), Default::default())
        .await
        .unwrap();
    fill(&b, n).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.ndjson");
    let archive = crate::common::dlq_command()
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("dlq-tests-no-config"),
        )
        .env("DLQ_AMQP_URL", b.amqp_url())
        .args([
            "archive",
            "-Q",
            DLQ,
            "--motivo",
            "KeyError",
            "--to",
            file.to_str().unwrap(),
            "--delete",
            "--yes",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let replay = spawn_replay(&b, 0);
    let (oa, or) = (
        archive.wait_with_output().unwrap(),
        replay.wait_with_output().unwrap(),
    );
    assert!(
        oa.status.success(),
        "{}",
        String::from_utf8_lossy(&oa.stderr)
    );
    assert!(
        or.status.success(),
        "{}",
        String::from_utf8_lossy(&or.stderr)
    );
    let archived: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["id"].as_str().map(str::to_string))
        .collect();
    let dest = ids_in(&b, MAIN).await;
    let left = ids_in(&b, DLQ).await;
    for i in 0..n {
        let id = format!("m-{i}");
        let places = usize::from(archived.contains(&id))
            + dest.get(&id).copied().unwrap_or(0)
            + left.get(&id).copied().unwrap_or(0);
        assert_eq!(places, 1, "{id} is in {places} places");
    }
    b.delete().await;
}

/// A table replay and an archive --delete of the same rows at once: every row ends either
/// replayed (marked, one message) or archived (deleted), never both, never neither.
#[tokio::test]
async fn table_replay_and_archive_at_once() {
    use crate::celery_worker::*;
    let db = TestDb::new(Dialect::Postgres, "fault_tbl").await;
    db.init();
    let rows: Vec<Row> = (0..2000)
        .map(|i| {
            row(
                "processar_pagamento",
                Some(&format!(r#"{{"pedido_id": {i}}}"#)),
                "IntegrityError",
                "2026-10-01T00:00:00Z",
                false,
            )
        })
        .collect();
    db.insert(&rows).await;
    let queue = unique("fault_tbl_q");
    declare_queue(&queue).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("t.ndjson");
    let spawn = |args: Vec<String>| {
        crate::common::dlq_command()
            .env(
                "XDG_CONFIG_HOME",
                std::env::temp_dir().join("dlq-tests-no-config"),
            )
            .env("DLQ_DATABASE_URL", &db.url)
            .env("DLQ_TABLE", &db.table)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let replay = spawn(vec![
        "replay".into(),
        "--no-worker-check".into(),
        "--to-queue".into(),
        queue.clone(),
        "--yes".into(),
    ]);
    let archive = spawn(vec![
        "archive".into(),
        "--to".into(),
        file.to_str().unwrap().into(),
        "--delete".into(),
        "--yes".into(),
    ]);
    let (or, oa) = (
        replay.wait_with_output().unwrap(),
        archive.wait_with_output().unwrap(),
    );
    assert!(
        or.status.success(),
        "{}",
        String::from_utf8_lossy(&or.stderr)
    );
    assert!(
        oa.status.success(),
        "{}",
        String::from_utf8_lossy(&oa.stderr)
    );
    let archived = std::fs::read_to_string(&file).unwrap().lines().count() as i64 - 2;
    let marked = db
        .scalar_i64("SELECT COUNT(*) FROM {t} WHERE reprocessada")
        .await;
    let remaining = db.scalar_i64("SELECT COUNT(*) FROM {t}").await;
    let published = queue_state(&queue).await.unwrap().messages as i64;
    assert_eq!(
        archived + remaining,
        2000,
        "deleted rows are exactly the archived ones"
    );
    assert_eq!(marked, remaining, "every row not archived was replayed");
    assert_eq!(published, marked, "one message per replayed row");
    delete_queue(&queue).await;
    db.drop().await;
}

/// Another server on the AMQP port (here RabbitMQ's own HTTP API): said in plain words.
#[test]
fn a_server_that_is_not_rabbitmq_is_named_as_such() {
    crate::common::Dlq::new()
        .args(&[
            "--amqp-url",
            &format!("amqp://guest:guest@{}/%2f", crate::target::api_addr()),
            "list",
            "-Q",
            "q",
        ])
        .run()
        .fails(1, "is this the AMQP port");
}

/// A TCP proxy to the broker that can stall: it stops forwarding in both directions but
/// keeps both sockets open, as a network that silently drops everything does.
struct StallProxy {
    port: u16,
    stalled: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl StallProxy {
    async fn start(to: String) -> StallProxy {
        use std::sync::atomic::Ordering;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let stalled = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stalled.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = tokio::net::TcpStream::connect(&to).await.unwrap();
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                for (mut from, mut into) in [(cr, sw), (sr, cw)] {
                    let flag = flag.clone();
                    tokio::spawn(async move {
                        use tokio::io::{AsyncReadExt, AsyncWriteExt};
                        let mut buf = vec![0u8; 64 * 1024];
                        while let Ok(n) = from.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            while flag.load(Ordering::SeqCst) {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            if into.write_all(&buf[..n]).await.is_err() {
                                break;
                            }
                        }
                        // Stalled: hold the socket open, say nothing.
                        std::future::pending::<()>().await;
                    });
                }
            }
        });
        StallProxy { port, stalled }
    }

    fn stall(&self) {
        self.stalled
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// #31.5: a network that stalls mid-replay is noticed by dlq's own heartbeat (10 s: about
/// 20 s, not the broker default's 120 s); the run stops with an error, nothing is lost, and a
/// re-run over a healthy network finishes.
#[tokio::test]
async fn a_stalled_network_is_noticed_in_seconds_and_loses_nothing() {
    let b = Broker::new("fault-stall").await;
    let n = 2000;
    fill(&b, n).await;
    let proxy = StallProxy::start(crate::target::amqp_addr()).await;
    let url = b.amqp_url().replace(
        &crate::target::amqp_addr(),
        &format!("127.0.0.1:{}", proxy.port),
    );
    let api = format!("http://{}/", crate::target::api_addr());
    let child = crate::common::dlq_command()
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("dlq-tests-no-config"),
        )
        .env("DLQ_AMQP_URL", &url)
        .env("DLQ_MANAGEMENT_URL", &api)
        .args(["replay", "-Q", DLQ, "--yes", "--rate", "200"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_moved(&b, 100).await;
    proxy.stall();
    let stalled_at = Instant::now();
    let out = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    let took = stalled_at.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("no heartbeat received"), "{stderr}");
    assert!(stderr.contains("still in the DLQ"), "{stderr}");
    assert!(
        took < Duration::from_secs(60),
        "noticed after {took:?}: {stderr}"
    );
    // The broker drops the silent connection too (missed heartbeats): what dlq held goes
    // back to the DLQ.
    let deadline = Instant::now() + Duration::from_secs(90);
    while b.depth(DLQ).await + b.depth(MAIN).await < n as u32 {
        assert!(
            Instant::now() < deadline,
            "messages still held after the stall"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    check_conserved(&b, n, 64).await;
    b.run(&["replay", "-Q", DLQ, "--yes"]).await.ok();
    b.wait_depth(DLQ, 0).await;
    assert_eq!(ids_in(&b, MAIN).await.len(), n);
    b.delete().await;
}

/// #31.4: a memory alarm blocks publishing mid-replay (on a node of the test's own, never the
/// shared one): dlq names it at once and waits; once the alarm clears it says so and the
/// replay finishes, every message moved once.
#[tokio::test]
async fn a_blocked_broker_is_named_at_once_and_the_replay_finishes_after() {
    use lapin::options::QueueDeclareOptions;
    let n: u32 = 500;
    let (node, conn, ch) =
        crate::support::node::with_dead_letters("blocked", DLQ, MAIN, n as usize).await;
    node.memory_alarm(true);
    let mut child = crate::common::dlq_command()
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("dlq-tests-no-config"),
        )
        .env("DLQ_AMQP_URL", node.amqp_url())
        .env("DLQ_MANAGEMENT_URL", node.api_url())
        .args(["replay", "-Q", DLQ, "--yes"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stderr = child.stderr.take().unwrap();
    let reading = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut said = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !said
        .iter()
        .any(|l: &String| l.contains("the broker blocked publishing"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => said.push(line),
            Err(_) => panic!("no blocked notice within 30 s: {said:#?}"),
        }
    }
    assert!(said.iter().any(|l| l.contains("alarm")), "{said:#?}");
    node.memory_alarm(false);
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    // The last lines may still be on their way when dlq has exited: read to the end.
    reading.join().unwrap();
    said.extend(rx.try_iter());
    assert!(status.success(), "{said:#?}");
    assert!(
        said.iter().any(|l| l.contains("unblocked publishing")),
        "{said:#?}"
    );
    let depth = |q: &'static str| {
        let ch = ch.clone();
        async move {
            ch.queue_declare(
                q.into(),
                QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap()
            .message_count()
        }
    };
    assert_eq!((depth(MAIN).await, depth(DLQ).await), (n, 0));
    drop(conn);
}

/// #31.4: Ctrl-C while the broker blocks publishing: dlq does not wait forever for confirms
/// that cannot come. It stops waiting `BLOCKED_STOP_GRACE` (10 s) after the stop, exits 130
/// saying what that leaves, and the audit trail gets the run's end record. Once the alarm
/// clears nothing is lost: every message is in the DLQ or in its destination.
#[tokio::test]
async fn a_stop_while_blocked_exits_after_a_grace_and_closes_the_audit_trail() {
    use lapin::options::QueueDeclareOptions;
    let n: u32 = 300;
    let (node, conn, ch) =
        crate::support::node::with_dead_letters("blockstop", DLQ, MAIN, n as usize).await;
    node.memory_alarm(true);
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.ndjson");
    // One Ctrl-C: the run stops waiting for confirms the grace after the stop.
    let stopped = Instant::now();
    let said = interrupt_while_blocked(&node, &audit, BLOCKED_REPLAY, 1).await;
    let took = stopped.elapsed();
    assert!(took < Duration::from_secs(40), "took {took:?}: {said:#?}");
    assert!(
        said.iter().any(|l| l.contains("still blocks publishing")),
        "{said:#?}"
    );
    // Two: it exits at once.
    let said = interrupt_while_blocked(&node, &audit, BLOCKED_REPLAY, 2).await;
    assert!(
        said.iter().any(|l| l.contains("interrupted twice")),
        "{said:#?}"
    );
    let trail = std::fs::read_to_string(&audit).unwrap();
    let records: Vec<serde_json::Value> = trail
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let ends: Vec<&serde_json::Value> = records.iter().filter(|r| r["event"] == "end").collect();
    assert_eq!(ends.len(), 2, "{trail}");
    assert!(ends.iter().all(|e| e["exit"] == 130), "{trail}");
    assert!(
        ends[0]["reason"]
            .as_str()
            .unwrap()
            .contains("blocks publishing"),
        "{trail}"
    );
    assert!(
        ends[1]["reason"]
            .as_str()
            .unwrap()
            .contains("interrupted twice"),
        "{trail}"
    );
    // Nothing lost once the alarm clears: each message in the DLQ or its destination.
    node.memory_alarm(false);
    let depth = |q: &'static str| {
        let ch = ch.clone();
        async move {
            let passive = QueueDeclareOptions {
                passive: true,
                ..Default::default()
            };
            ch.queue_declare(q.into(), passive, FieldTable::default())
                .await
                .unwrap()
                .message_count()
        }
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while depth(MAIN).await + depth(DLQ).await < n {
        assert!(Instant::now() < deadline, "lost messages");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Each of the two runs may have left its window (64) in flight: published, its DLQ copy
    // never acknowledged.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (main, dlq) = (depth(MAIN).await, depth(DLQ).await);
    assert!(
        main + dlq >= n && main + dlq <= n + 2 * 64,
        "main {main}, dlq {dlq}"
    );
    drop(conn);
}

/// The replay `interrupt_while_blocked` runs.
const BLOCKED_REPLAY: &[&str] = &["replay", "-Q", DLQ, "--yes", "--window", "64"];

/// #31.4: a read of a quorum DLQ with a delivery limit renews what it reads (before 4.3),
/// which publishes: under a memory alarm it cannot finish. One Ctrl-C ends dlq a grace later
/// (exit 130), saying what that leaves; the renewal's audit run gets its end record. Before,
/// nothing listened there: ten minutes and two Ctrl-C later, `inspect` still waited. Once the
/// alarm clears every message is in the DLQ once (those dlq held, counted once: nothing
/// else can be done while the broker reads nothing from dlq).
#[tokio::test]
async fn a_renewing_read_stopped_while_blocked_exits_after_a_grace() {
    use lapin::options::BasicGetOptions;
    // The node is the host's RabbitMQ (3.10, which renews) whatever generation runs: once.
    if crate::target::amqp_port() != crate::target::DEFAULT_AMQP_PORT {
        return;
    }
    let n = 3_000;
    let quorum = table(vec![
        ("x-queue-type", ls("quorum")),
        ("x-delivery-limit", lapin::types::AMQPValue::LongInt(50)),
    ]);
    let (node, conn, ch) =
        crate::support::node::with_dead_letters_in("blockread", DLQ, MAIN, n, quorum).await;
    node.memory_alarm(true);
    let dir = tempfile::tempdir().unwrap();
    let audit = dir.path().join("audit.ndjson");
    let stopped = Instant::now();
    let inspect = ["inspect", "-Q", DLQ, "--limit", "5"];
    let said = interrupt_while_blocked(&node, &audit, &inspect, 1).await;
    let took = stopped.elapsed();
    assert!(took < Duration::from_secs(60), "took {took:?}: {said:#?}");
    assert!(
        said.iter().any(|l| l.contains("still blocks publishing")),
        "{said:#?}"
    );
    let trail = std::fs::read_to_string(&audit).unwrap();
    let end = trail
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|r| r["event"] == "end" && r["action"] == "renew")
        .unwrap_or_else(|| panic!("no end record: {trail}"));
    assert_eq!(end["exit"], 130, "{trail}");
    node.memory_alarm(false);
    let mut ids = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while ids.len() < n {
        assert!(Instant::now() < deadline, "{} of {n} back", ids.len());
        let get = BasicGetOptions { no_ack: true };
        match ch.basic_get(DLQ.into(), get).await.unwrap() {
            Some(m) => assert!(ids.insert(m.delivery.properties.message_id().clone())),
            None => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    drop(conn);
}

/// Runs dlq with `args` on `node` (blocked), waits for its blocked notice, sends `signals`
/// SIGINTs and returns what it said; it must exit 130.
async fn interrupt_while_blocked(
    node: &crate::support::node::OwnNode,
    audit: &std::path::Path,
    args: &[&str],
    signals: usize,
) -> Vec<String> {
    let mut child = crate::common::dlq_command()
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("dlq-tests-no-config"),
        )
        .env("DLQ_AMQP_URL", node.amqp_url())
        .env("DLQ_MANAGEMENT_URL", node.api_url())
        .env("DLQ_AUDIT_LOG", audit)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let stderr = child.stderr.take().unwrap();
    let reading = std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut said = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !said
        .iter()
        .any(|l: &String| l.contains("the broker blocked publishing"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => said.push(line),
            Err(_) => panic!("no blocked notice within 30 s: {said:#?}"),
        }
    }
    let pid = child.id().to_string();
    for _ in 0..signals {
        assert!(
            Command::new("kill")
                .args(["-INT", &pid])
                .status()
                .unwrap()
                .success()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let limit = Duration::from_secs(60);
    let status = tokio::task::spawn_blocking(move || exit_within(child, limit));
    let status = status.await.unwrap();
    // The last lines may still be on their way when dlq has exited: read to the end.
    reading.join().unwrap();
    said.extend(rx.try_iter());
    let status = status.unwrap_or_else(|| panic!("no exit 60 s after the signal: {said:#?}"));
    assert_eq!(status.code(), Some(130), "{said:#?}");
    said
}

/// #31.6: RabbitMQ reached on a non-default AMQP port (here through a forwarder) and no
/// `--management-url`: the API dlq derives (port 15672) is checked against the listeners it
/// reports. It does not listen on that port, so its answers are not used as this broker's and
/// the warning names the URL and what it said; `--management-url` settles it.
#[tokio::test]
async fn a_derived_management_url_is_checked_against_the_amqp_port() {
    let b = Broker::new("fault-mgmt-port").await;
    fill(&b, 3).await;
    let proxy = StallProxy::start(crate::target::amqp_addr()).await;
    let url = b.amqp_url().replace(
        &crate::target::amqp_addr(),
        &format!("127.0.0.1:{}", proxy.port),
    );
    let inspect = |api: Option<String>| {
        let mut d = Dlq::new()
            .env_remove("DLQ_MANAGEMENT_URL")
            .env("DLQ_AMQP_URL", &url)
            .args(&["inspect", "-Q", DLQ, "-o", "ndjson"]);
        if let Some(api) = api {
            d = d.env("DLQ_MANAGEMENT_URL", &api);
        }
        tokio::task::spawn_blocking(move || d.run())
    };
    let derived = inspect(None).await.unwrap();
    let err = derived.stderr();
    assert!(
        err.contains(
            "the management API at http://127.0.0.1:15672/ reports AMQP listeners on port"
        ),
        "{err}"
    );
    assert!(err.contains("pass --management-url"), "{err}");
    assert!(!err.contains("guest:guest"), "{err}");
    let api = format!("http://{}/", crate::target::api_addr());
    let named = inspect(Some(api)).await.unwrap();
    assert_eq!(named.code(), 0, "{}", named.stderr());
    assert!(
        !named.stderr().contains("reports AMQP listeners"),
        "{}",
        named.stderr()
    );
    assert_eq!(named.ndjson().len(), 3);
    b.delete().await;
}

/// #31.6: after a lost connection the report says what happened to each message. Every id
/// in both places is named: either "outcome unknown" (published, the confirm lost) or "its
/// acknowledgement was lost with the connection" (found still in the DLQ by reading it
/// again); every id named as in both places is; and "replayed" counts exactly the messages
/// that are in their destination only. Two runs, at two paces, cut mid-way.
#[tokio::test]
async fn after_a_lost_connection_the_report_names_every_message_in_both_places() {
    for rate in ["300", "800"] {
        let b = Broker::new("fault-named").await;
        let n = 6000;
        fill(&b, n).await;
        let args = [
            "replay", "-Q", DLQ, "--yes", "-o", "json", "--window", "64", "--rate", rate,
        ];
        let child = spawn_dlq(&b, &args);
        let pid = child.id();
        wait_moved(&b, 300).await;
        crate::table_faults::close_broker_connection(pid).await;
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        tokio::time::sleep(Duration::from_millis(800)).await;
        let report: serde_json::Value =
            serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).unwrap();
        // The report names every failure (up to 100,000). When it listed at most 50, a loaded
        // broker left 67 failures at this window, and the ids beyond the 50th looked unnamed.
        assert!(report["lists_cut"].is_null(), "{report}");
        let named = |what: &str| -> BTreeSet<String> {
            let failed = report["failed"].as_array().unwrap();
            failed
                .iter()
                .filter(|f| f["reason"].as_str().unwrap().contains(what))
                .map(|f| f["id"].as_str().unwrap().to_string())
                .collect()
        };
        let (lost_ack, unknown) = (named("in both places"), named("outcome unknown"));
        let (dlq, dest) = (ids_in(&b, DLQ).await, ids_in(&b, MAIN).await);
        let both: BTreeSet<String> = dlq
            .keys()
            .filter(|k| dest.contains_key(*k))
            .cloned()
            .collect();
        assert!(
            lost_ack.is_subset(&both),
            "named {lost_ack:?}, in both {both:?}"
        );
        let explained: BTreeSet<String> = lost_ack.union(&unknown).cloned().collect();
        assert!(
            both.is_subset(&explained),
            "in both {both:?}, named {explained:?}; dlq said: {stderr}"
        );
        let dest_only = dest.keys().filter(|k| !dlq.contains_key(*k)).count();
        assert_eq!(report["succeeded"], dest_only, "{stderr}");
        // The window, and acknowledgements written but lost with the connection.
        check_conserved(&b, n, 64).await;
        b.delete().await;
    }
}

/// Messages that come into a quorum DLQ while a planned replay moves what it holds: its
/// consumers stay live then before 4.3 (a crash of dlq's node strands nothing), so an
/// acknowledgement lets one of them take a newcomer; on 4.3 they are cancelled before the
/// move (`Taker::before_acks`), and none does. The newcomers stay in the DLQ, none held once
/// dlq has ended; every planned message is moved once.
#[tokio::test]
async fn newcomers_while_a_planned_replay_moves_stay_in_the_quorum_dlq() {
    let b = Broker::new("fault-newcomers").await;
    let n = 2000;
    let mut args = table(vec![("x-queue-type", ls("quorum"))]);
    if crate::support::cluster::newer_generation() {
        // 4.x: no delivery limit, the path where dlq holds on live consumers.
        args.insert(
            "x-delivery-limit".into(),
            lapin::types::AMQPValue::LongLongInt(-1),
        );
    }
    fill_into(&b, n, args).await;
    let child = spawn_replay_with(&b, 200, true, 64);
    wait_moved(&b, 200).await;
    for i in 0..30 {
        let props = BasicProperties::default().with_message_id(format!("new-{i}").as_str().into());
        b.publish(DLQ, b"{}", props).await;
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!("{n} replayed, 0 failed")),
        "{stderr}"
    );
    b.wait_depth(DLQ, 30).await;
    let snap = b.snapshot(DLQ).await;
    let left: BTreeSet<String> = snap
        .iter()
        .map(|s| s.props["message_id"].as_str().unwrap().to_string())
        .collect();
    let newcomers: BTreeSet<String> = (0..30).map(|i| format!("new-{i}")).collect();
    assert_eq!(left, newcomers);
    // Before 4.3 some were delivered to dlq's live consumers and given back (their count
    // says so: x-delivery-count): the path this test is about. On 4.3 none was
    // (x-acquired-count, which counts a delivery a nack gives back).
    let given_back = snap
        .iter()
        .filter(|s| s.delivery_count.unwrap_or(0) > 0 || s.acquired_count.unwrap_or(0) > 0)
        .count();
    eprintln!("newcomers given back by dlq: {given_back} of 30");
    if crate::target::rabbitmq_version().await >= (4, 3) {
        assert_eq!(
            given_back, 0,
            "a newcomer reached dlq's consumers: {snap:?}"
        );
    } else {
        assert!(
            given_back > 0,
            "no newcomer reached dlq's consumers: {snap:?}"
        );
    }
    let moved = ids_in(&b, MAIN).await;
    assert_eq!(moved.len(), n);
    assert!(moved.values().all(|&c| c == 1), "moved twice: {moved:?}");
    b.delete().await;
}

//! Throwaway probe: proves `dlq::celery` messages against a REAL Celery worker. Not part of CI.
//!
//! How to run (RabbitMQ on 127.0.0.1:5672, guest/guest):
//!
//! ```text
//! python3 -m venv /work/venv-celery && /work/venv-celery/bin/pip install celery
//! CARGO_TARGET_DIR=/work/target-celery cargo run --example celery_probe
//! ```
//!
//! Env: `CELERY_BIN` (default `/work/venv-celery/bin/celery`), `AMQP_ADDR` (default
//! `amqp://guest:guest@127.0.0.1:5672/%2f`), `KEEP_PROBE_DIR=1` keeps the temp dir (worker log).
//!
//! What it does: writes a tasks module into a temp dir; declares a unique durable queue; publishes
//! messages built by `dlq::celery::build` (publisher confirms, `mandatory`, default exchange,
//! routing key = the queue) plus a few hand-broken bodies that `validate` refuses (published
//! anyway, to show what a worker does with them); starts
//! `celery -A tasksmod worker -P solo --without-gossip --without-mingle --without-heartbeat -Q <queue>`;
//! waits for a final sentinel task; compares what every task received (Python types included)
//! with what was stored; stops the worker with SIGTERM and deletes the queue. Exit code 1 on any
//! mismatch.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use dlq::celery::{self, InvalidTask, ReplayOrigin, TaskMessage};
use lapin::Confirmation;
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeleteOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{Channel, Connection, ConnectionProperties};
use serde_json::{Value, json};

/// The tasks module the worker imports. Every task appends one JSON line describing exactly what
/// Python received (types included); signals record the raw body/headers and failures.
const TASKS_PY: &str = r#"
import base64, datetime, decimal, json, os, sys, uuid
import celery, kombu
from celery import Celery, signals

app = Celery("tasksmod", broker=os.environ["PROBE_BROKER"])
OUT = os.environ["PROBE_OUT"]

def enc(o):
    if o is None: return {"none": None}
    if isinstance(o, bool): return {"bool": o}
    if isinstance(o, int): return {"int": str(o)}
    if isinstance(o, float): return {"float": repr(o)}
    if isinstance(o, str): return {"str": o}
    if isinstance(o, datetime.datetime): return {"datetime": o.isoformat()}
    if isinstance(o, datetime.date): return {"date": o.isoformat()}
    if isinstance(o, datetime.time): return {"time": o.isoformat()}
    if isinstance(o, decimal.Decimal): return {"decimal": str(o)}
    if isinstance(o, uuid.UUID): return {"uuid": str(o)}
    if isinstance(o, bytes): return {"bytes": base64.b64encode(o).decode()}
    if isinstance(o, (list, tuple)): return {"list": [enc(x) for x in o]}
    if isinstance(o, dict): return {"dict": [[k, enc(v)] for k, v in o.items()]}
    return {"other": repr(o)}

def emit(kind, **fields):
    with open(OUT, "a") as f:
        f.write(json.dumps(dict(kind=kind, **fields), default=repr) + "\n")

@signals.worker_ready.connect
def ready(**_):
    emit("ready", celery=celery.__version__, kombu=kombu.__version__,
         python=sys.version.split()[0])

@signals.task_received.connect
def received(request=None, **_):
    m = request._message
    body = m.body if isinstance(m.body, str) else m.body.decode("utf-8")
    emit("received", id=request.id, body=body, headers=m.headers,
         properties={k: v for k, v in m.properties.items() if k != "application_headers"})

@signals.task_failure.connect
def failed(task_id=None, exception=None, **_):
    emit("failed", id=task_id, exception=repr(exception))

def run(self, args, kwargs):
    r = self.request
    emit("ran", id=r.id, task=self.name, args=enc(list(args)), kwargs=enc(kwargs),
         replay_of=r.get("dlq-replay-of"), replay_id=r.get("dlq-replay-id"),
         replayed_at=r.get("dlq-replayed-at"), root_id=r.root_id, parent_id=r.parent_id,
         correlation_id=r.correlation_id, retries=r.retries, origin=r.origin,
         timelimit=r.timelimit, eta=r.eta, expires=r.expires)

@app.task(bind=True, name="probe.record")
def record(self, *args, **kwargs):
    run(self, args, kwargs)

@app.task(bind=True, name="probe.named")
def named(self, a, b=None):
    run(self, (a, b), {})
"#;

/// A stored row replayed through `build`, and what the Python task must receive.
struct Case {
    name: &'static str,
    task: &'static str,
    args: Option<String>,
    /// `Some((args, kwargs))` as the task's `enc()` writes them; `None` = must fail, not run.
    expect: Option<(Value, Value)>,
}

/// A body `validate` refuses, published anyway to show the worker's behaviour.
struct Broken {
    name: &'static str,
    body: String,
}

fn empty() -> (Value, Value) {
    (json!({"list": []}), json!({"dict": []}))
}

fn cases() -> Vec<Case> {
    let big_int = "9".repeat(celery::MAX_INT_DIGITS);
    vec![
        Case {
            name: "kwargs with datetime/date/time markers, key order",
            task: "probe.record",
            args: Some(
                r#"{"z": 1,
                "when": {"__type__": "datetime", "__value__": "2024-03-01T12:30:00.123456+00:00"},
                "naive": {"__type__": "datetime", "__value__": "2024-03-01T12:30:00"},
                "local": {"__type__": "datetime", "__value__": "2024-03-01T09:30:00-03:00"},
                "day": {"__type__": "date", "__value__": "2024-02-29"},
                "at": {"__type__": "time", "__value__": "23:59:59.500000"},
                "a": 2}"#
                    .into(),
            ),
            expect: Some((
                json!({"list": []}),
                json!({"dict": [
                    ["z", {"int": "1"}],
                    ["when", {"datetime": "2024-03-01T12:30:00.123456+00:00"}],
                    ["naive", {"datetime": "2024-03-01T12:30:00"}],
                    ["local", {"datetime": "2024-03-01T09:30:00-03:00"}],
                    ["day", {"date": "2024-02-29"}],
                    ["at", {"time": "23:59:59.500000"}],
                    ["a", {"int": "2"}]
                ]}),
            )),
        },
        Case {
            name: "args with big/precise numbers and decimal/uuid/bytes markers",
            task: "probe.record",
            args: Some(
                r#"[12345678901234567890.123456789, 1e400, 123456789012345678901234567890,
                9007199254740993, 0.1, -0.0, 1E+2,
                {"__type__": "decimal", "__value__": "12345678901234567890.123456789"},
                {"__type__": "uuid", "__value__": {"hex": "0b8f8a0e4c1a4d6e9a0e3f6f4b2a9c11"}},
                {"__type__": "bytes", "__value__": "ol\u00e1"},
                {"__type__": "base64", "__value__": "AAEC/w=="}]"#
                    .into(),
            ),
            expect: Some((
                json!({"list": [
                    {"float": "1.2345678901234567e+19"},
                    {"float": "inf"},
                    {"int": "123456789012345678901234567890"},
                    {"int": "9007199254740993"},
                    {"float": "0.1"},
                    {"float": "-0.0"},
                    {"float": "100.0"},
                    {"decimal": "12345678901234567890.123456789"},
                    {"uuid": "0b8f8a0e-4c1a-4d6e-9a0e-3f6f4b2a9c11"},
                    {"bytes": "b2zDoQ=="},
                    {"bytes": "AAEC/w=="}
                ]}),
                json!({"dict": []}),
            )),
        },
        Case {
            name: "SQL NULL args",
            task: "probe.record",
            args: None,
            expect: Some(empty()),
        },
        Case {
            name: "JSON null args",
            task: "probe.record",
            args: Some("null".into()),
            expect: Some(empty()),
        },
        Case {
            name: "strings, nesting, marker look-alike",
            task: "probe.record",
            args: Some(
                r#"["acentua\u00e7\u00e3o ç 日本", null, true, false,
                [1, {"k": "v", "__type__": "not-a-marker"}], "tab\tnul\u0000", ""]"#
                    .into(),
            ),
            expect: Some((
                json!({"list": [
                    {"str": "acentuação ç 日本"}, {"none": null}, {"bool": true}, {"bool": false},
                    {"list": [{"int": "1"},
                              {"dict": [["k", {"str": "v"}], ["__type__", {"str": "not-a-marker"}]]}]},
                    {"str": "tab\tnul\u{0}"}, {"str": ""}
                ]}),
                json!({"dict": []}),
            )),
        },
        Case {
            name: "kwargs keys that are not identifiers, to a **kwargs task",
            task: "probe.record",
            args: Some(r#"{"1a": 1, "": 2, "a-b": 3, "class": 4, "ç": 5}"#.into()),
            expect: Some((
                json!({"list": []}),
                json!({"dict": [["1a", {"int": "1"}], ["", {"int": "2"}], ["a-b", {"int": "3"}],
                                ["class", {"int": "4"}], ["ç", {"int": "5"}]]}),
            )),
        },
        Case {
            name: "kwargs key that is not an identifier, to a task with named parameters",
            task: "probe.named",
            args: Some(r#"{"1a": 1}"#.into()),
            expect: None,
        },
        Case {
            name: "positional args to a task with named parameters",
            task: "probe.named",
            args: Some(
                r#"["x", {"__type__": "datetime", "__value__": "2001-01-01T00:00:00"}]"#.into(),
            ),
            expect: Some((
                json!({"list": [{"str": "x"}, {"datetime": "2001-01-01T00:00:00"}]}),
                json!({"dict": []}),
            )),
        },
        Case {
            name: "integer with exactly MAX_INT_DIGITS digits",
            task: "probe.record",
            args: Some(format!("[{big_int}]")),
            expect: Some((json!({"list": [{"int": big_int}]}), json!({"dict": []}))),
        },
    ]
}

fn broken() -> Vec<Broken> {
    let embed = r#"{"callbacks":null,"errbacks":null,"chain":null,"chord":null}"#;
    let with_args = |args: &str| format!("[{args},{{}},{embed}]");
    vec![
        Broken {
            name: "integer with MAX_INT_DIGITS + 1 digits",
            body: with_args(&format!("[{}]", "9".repeat(celery::MAX_INT_DIGITS + 1))),
        },
        Broken {
            name: "datetime marker with an impossible date",
            body: with_args(r#"[{"__type__": "datetime", "__value__": "2024-02-30T00:00:00"}]"#),
        },
        Broken {
            name: "marker with an unknown __type__",
            body: with_args(r#"[{"__type__": "pydantic", "__value__": {}}]"#),
        },
        Broken {
            name: "kwargs that are themselves a marker",
            body: format!(
                r#"[[],{{"__type__": "datetime", "__value__": "2024-01-01T00:00:00"}},{embed}]"#
            ),
        },
        Broken {
            name: "datetime marker ending in Z (refused as not isoformat() output)",
            body: with_args(r#"[{"__type__": "datetime", "__value__": "2024-01-01T00:00:00Z"}]"#),
        },
    ]
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let celery_bin =
        std::env::var("CELERY_BIN").unwrap_or_else(|_| "/work/venv-celery/bin/celery".into());
    let amqp_addr = std::env::var("AMQP_ADDR")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into());
    let version = Command::new(&celery_bin)
        .arg("--version")
        .output()
        .with_context(|| format!("running {celery_bin} --version"))?;
    println!(
        "celery --version: {}",
        String::from_utf8_lossy(&version.stdout).trim()
    );

    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("tasksmod.py"), TASKS_PY)?;
    let out_path = dir.path().join("out.jsonl");
    let log_path = dir.path().join("worker.log");
    let queue = format!("dlq-probe-{}", uuid::Uuid::new_v4());
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "localhost".into());
    let origin = ReplayOrigin {
        table: "tasks_falhadas".into(),
        row_id: "probe".into(),
        replay_id: uuid::Uuid::new_v4().to_string(),
        host,
    };

    let conn = Connection::connect(&amqp_addr, ConnectionProperties::default()).await?;
    let channel = conn.create_channel().await?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await?;
    // Durable, no arguments: what Celery itself declares for `-Q <queue>`.
    channel
        .queue_declare(
            queue.as_str().into(),
            QueueDeclareOptions {
                durable: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?;

    let result = run(&channel, &queue, &origin, &celery_bin, dir.path()).await;

    channel
        .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await?;
    channel
        .exchange_delete(queue.as_str().into(), ExchangeDeleteOptions::default())
        .await?;
    conn.close(200, "probe done".into()).await?;
    if let Ok(log) = std::fs::read_to_string(&log_path) {
        println!("\n--- worker log lines of interest ---");
        for line in log.lines().filter(|l| {
            [
                "ERROR",
                "CRITICAL",
                "Unrecoverable",
                "RuntimeWarning",
                "Error: ",
            ]
            .iter()
            .any(|w| l.contains(w))
        }) {
            println!("{}", truncate(line, 220));
        }
    }
    if std::env::var_os("KEEP_PROBE_DIR").is_some() {
        let kept = dir.keep();
        println!("kept {} ({})", kept.display(), out_path.display());
    }
    result
}

async fn run(
    channel: &Channel,
    queue: &str,
    origin: &ReplayOrigin,
    celery_bin: &str,
    dir: &Path,
) -> anyhow::Result<()> {
    let mut expected: Vec<(String, &Case, TaskMessage)> = Vec::new();
    let cases = cases();
    for (i, case) in cases.iter().enumerate() {
        let origin = ReplayOrigin {
            row_id: (i + 1).to_string(),
            ..origin.clone()
        };
        let msg = celery::build(case.task, case.args.as_deref(), &origin)
            .with_context(|| format!("build {}", case.name))?;
        publish(channel, queue, &msg).await?;
        expected.push((msg.task_id.clone(), case, msg));
    }

    // Hand-broken bodies: validate must refuse each; then they go out anyway.
    let mut broken_ids = Vec::new();
    for b in broken() {
        let mut msg = celery::build("probe.record", Some("[]"), origin)?;
        msg.body = b.body.into_bytes();
        let refusal: InvalidTask = celery::validate(&msg)
            .err()
            .with_context(|| format!("validate accepted broken body: {}", b.name))?;
        println!("validate refuses [{}]: {refusal}", b.name);
        publish(channel, queue, &msg).await?;
        broken_ids.push((b.name, msg.task_id.clone()));
    }

    let sentinel = celery::build("probe.record", Some(r#"["sentinel"]"#), origin)?;
    publish(channel, queue, &sentinel).await?;
    println!(
        "published {} messages to queue {queue} (all confirmed, none returned)",
        expected.len() + broken_ids.len() + 1
    );

    let mut worker = start_worker(celery_bin, dir, queue)?;
    let lines = wait_for(&dir.join("out.jsonl"), &sentinel.task_id, &mut worker);
    let alive = worker.try_wait()?.is_none();
    stop_worker(&mut worker)?;
    let lines = lines?;

    let left = channel
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await?
        .message_count();

    let mut by_id: HashMap<String, Vec<&Value>> = HashMap::new();
    for line in &lines {
        if let Some(id) = line["id"].as_str() {
            by_id.entry(id.to_owned()).or_default().push(line);
        }
    }
    if let Some(ready) = lines.iter().find(|l| l["kind"] == "ready") {
        println!(
            "worker: celery {} kombu {} python {}",
            ready["celery"], ready["kombu"], ready["python"]
        );
    }

    let mut failures = 0;
    println!("\n--- replayed rows ---");
    for (id, case, msg) in &expected {
        let seen = by_id.get(id).cloned().unwrap_or_default();
        let ran = seen.iter().find(|l| l["kind"] == "ran");
        let failed = seen.iter().find(|l| l["kind"] == "failed");
        let received = seen.iter().find(|l| l["kind"] == "received");
        let mut problems = Vec::new();
        match received {
            Some(r) => {
                if r["body"].as_str().map(str::as_bytes) != Some(msg.body.as_slice()) {
                    problems.push("raw body differs from the built body".to_owned());
                }
                check_wire_headers(&r["headers"], msg, &mut problems);
            }
            None => problems.push("worker never received it".into()),
        }
        match (&case.expect, ran) {
            (Some((args, kwargs)), Some(ran)) => {
                if &ran["args"] != args {
                    problems.push(format!("args: got {} want {args}", ran["args"]));
                }
                if &ran["kwargs"] != kwargs {
                    problems.push(format!("kwargs: got {} want {kwargs}", ran["kwargs"]));
                }
                check_request(ran, msg, &mut problems);
            }
            (Some(_), None) => problems.push(format!("did not run (failure: {failed:?})")),
            (None, Some(ran)) => problems.push(format!("ran but should have failed: {ran}")),
            (None, None) => {}
        }
        let outcome = match (ran, failed) {
            (Some(_), _) => "ran".to_owned(),
            (None, Some(f)) => format!("failed {}", f["exception"]),
            (None, None) => "no outcome".into(),
        };
        if problems.is_empty() {
            println!("OK   {}: {}", case.name, truncate(&outcome, 160));
        } else {
            failures += 1;
            println!("FAIL {}: {outcome}", case.name);
            for p in problems {
                println!("     - {}", truncate(&p, 400));
            }
        }
    }

    println!("\n--- bodies validate() refuses, published anyway ---");
    for (name, id) in &broken_ids {
        let seen = by_id.get(id).cloned().unwrap_or_default();
        let kinds: Vec<String> = seen
            .iter()
            .map(|l| match l["kind"].as_str() {
                Some("failed") => format!("failed {}", l["exception"]),
                Some("ran") => format!("ran args={} kwargs={}", l["args"], l["kwargs"]),
                Some(k) => k.to_owned(),
                None => "?".into(),
            })
            .collect();
        let kinds = if kinds.is_empty() {
            "never reached a task (dropped before the task ran)".to_owned()
        } else {
            kinds.join("; ")
        };
        println!("{name}: {}", truncate(&kinds, 300));
    }

    println!("\nworker alive when the sentinel ran: {alive}; messages left in the queue: {left}");
    if !alive {
        failures += 1;
    }
    if left != 0 {
        failures += 1;
    }
    ensure!(failures == 0, "{failures} problem(s)");
    println!("probe: all replayed rows ran with exactly the stored arguments");
    Ok(())
}

/// Publish with confirms + mandatory to the default exchange; only a clean ack counts.
async fn publish(channel: &Channel, queue: &str, msg: &TaskMessage) -> anyhow::Result<()> {
    let confirmation = channel
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            &msg.body,
            msg.properties.clone(),
        )
        .await?
        .await?;
    match confirmation {
        Confirmation::Ack(None) => Ok(()),
        Confirmation::Ack(Some(returned)) => bail!("returned: {:?}", returned.reply_text),
        other => bail!("not confirmed: {other:?}"),
    }
}

/// Headers as py-amqp decoded them: strings arrive as str, retries int, timelimit [None, None].
fn check_wire_headers(h: &Value, msg: &TaskMessage, problems: &mut Vec<String>) {
    let want = json!({
        "lang": "py", "task": msg.task, "id": msg.task_id, "root_id": msg.task_id,
        "parent_id": null, "group": null, "retries": 0, "timelimit": [null, null],
        "eta": null, "expires": null, "ignore_result": false,
    });
    for (k, v) in want.as_object().unwrap() {
        if &h[k] != v {
            problems.push(format!("wire header {k}: got {} want {v}", h[k]));
        }
    }
    for k in [
        "argsrepr",
        "kwargsrepr",
        "origin",
        "dlq-replay-of",
        "dlq-replay-id",
        "dlq-replayed-at",
    ] {
        if !h[k].is_string() {
            problems.push(format!("wire header {k} is not a str: {}", h[k]));
        }
    }
}

/// The task's own view (`self.request`): ids and provenance.
fn check_request(ran: &Value, msg: &TaskMessage, problems: &mut Vec<String>) {
    let header = |k: &str| match msg.headers.inner().get(k) {
        Some(lapin::types::AMQPValue::LongString(s)) => {
            Value::String(String::from_utf8_lossy(s.as_bytes()).into_owned())
        }
        _ => Value::Null,
    };
    let want = [
        ("task", Value::String(msg.task.clone())),
        ("root_id", Value::String(msg.task_id.clone())),
        ("correlation_id", Value::String(msg.task_id.clone())),
        ("parent_id", Value::Null),
        ("retries", json!(0)),
        ("eta", Value::Null),
        ("expires", Value::Null),
        ("timelimit", json!([null, null])),
        ("origin", header("origin")),
        ("replay_of", header("dlq-replay-of")),
        ("replay_id", header("dlq-replay-id")),
        ("replayed_at", header("dlq-replayed-at")),
    ];
    for (k, v) in want {
        if ran[k] != v {
            problems.push(format!("request.{k}: got {} want {v}", ran[k]));
        }
    }
}

fn start_worker(celery_bin: &str, dir: &Path, queue: &str) -> anyhow::Result<Child> {
    let log = std::fs::File::create(dir.join("worker.log"))?;
    let child = Command::new(celery_bin)
        .args(["-A", "tasksmod", "worker", "-P", "solo", "--without-gossip"])
        .args([
            "--without-mingle",
            "--without-heartbeat",
            "--loglevel",
            "INFO",
        ])
        .args(["-Q", queue, "--hostname", &format!("{queue}@%h")])
        .current_dir(dir)
        .env("PYTHONPATH", dir)
        .env("PROBE_OUT", dir.join("out.jsonl"))
        .env("PROBE_BROKER", "amqp://guest:guest@127.0.0.1:5672//")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting the celery worker")?;
    Ok(child)
}

/// Polls the task output until the sentinel ran (60 s at most, or until the worker exits).
fn wait_for(out: &Path, sentinel: &str, worker: &mut Child) -> anyhow::Result<Vec<Value>> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let lines: Vec<Value> = std::fs::read_to_string(out)
            .unwrap_or_default()
            .lines()
            .map(serde_json::from_str)
            .collect::<Result<_, _>>()?;
        if lines
            .iter()
            .any(|l| l["kind"] == "ran" && l["id"] == sentinel)
        {
            return Ok(lines);
        }
        if let Some(status) = worker.try_wait()? {
            bail!("worker exited early ({status}); see worker.log");
        }
        if Instant::now() > deadline {
            bail!("sentinel did not run within 60 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// SIGTERM (warm shutdown), then SIGKILL if it lingers.
fn stop_worker(worker: &mut Child) -> anyhow::Result<()> {
    Command::new("kill")
        .args(["-TERM", &worker.id().to_string()])
        .status()?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while worker.try_wait()?.is_none() {
        if Instant::now() > deadline {
            worker.kill()?;
            worker.wait()?;
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(())
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_owned()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}

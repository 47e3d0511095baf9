//! A real, stock Celery worker for interop tests, plus small broker helpers.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// guest on the default vhost of the broker under test (crate::target).
pub fn amqp_url() -> String {
    crate::target::amqp_url("%2f")
}

pub fn python() -> String {
    if let Ok(p) = std::env::var("DLQ_TEST_PYTHON") {
        return p;
    }
    let venv = crate::common::repo_root().join(".ci/.venv/bin/python");
    if venv.exists() {
        return venv.display().to_string();
    }
    "python3".into()
}

pub struct CeleryWorker {
    child: Child,
    pub queue: String,
    pub record: PathBuf,
    _dir: tempfile::TempDir,
}

impl CeleryWorker {
    /// Starts `celery worker -P solo` consuming `queue` and waits until it is consuming.
    pub async fn start(queue: &str) -> CeleryWorker {
        Self::start_with(queue, &[]).await
    }

    pub async fn start_with(queue: &str, env: &[(&str, &str)]) -> CeleryWorker {
        Self::start_app("dlq_test_tasks", queue, env).await
    }

    /// A worker of the Celery app in module `app` (tests/celery/), consuming `queue`. With
    /// `DLQ_TEST_BROKER` in `env` it runs on that broker URL (e.g. a test's own vhost) and is
    /// ready once its log says so; otherwise once it consumes `queue` on the default vhost.
    pub async fn start_app(app: &str, queue: &str, env: &[(&str, &str)]) -> CeleryWorker {
        Self::start_events(app, queue, env, Events::Off).await
    }

    /// `start_app` with the worker's events as `events` says.
    pub async fn start_events(
        app: &str,
        queue: &str,
        env: &[(&str, &str)],
        events: Events,
    ) -> CeleryWorker {
        let dir = tempfile::tempdir().unwrap();
        let record = dir.path().join("runs.ndjson");
        std::fs::write(&record, "").unwrap();
        let log = std::fs::File::create(dir.path().join("worker.log")).unwrap();
        let mut cmd = Command::new(python());
        cmd.args([
            "-m",
            "celery",
            "-A",
            app,
            "worker",
            "-P",
            "solo",
            "--without-gossip",
            "--without-mingle",
            "--loglevel=INFO",
            "-Q",
            queue,
            "-n",
            &format!("{queue}@%h"),
        ])
        .args(events.flags())
        .current_dir(crate::common::repo_root().join("tests/celery"))
        .env("DLQ_TEST_RECORD", &record)
        .env("DLQ_TEST_BROKER", crate::target::amqp_url("/"))
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .expect("start a Celery worker (pip install celery; see .ci/requirements.txt)");
        let mut w = CeleryWorker {
            child,
            queue: queue.to_string(),
            record,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        let own_broker = env.iter().any(|(k, _)| *k == "DLQ_TEST_BROKER");
        loop {
            if own_broker {
                if w.log().contains(" ready.") {
                    break;
                }
            } else if let Some(s) = queue_state(queue).await
                && s.consumers > 0
            {
                break;
            }
            if let Ok(Some(status)) = w.child.try_wait() {
                panic!("celery worker exited ({status}):\n{}", w.log());
            }
            assert!(
                Instant::now() < deadline,
                "celery worker did not start consuming:\n{}",
                w.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Two tasks of one name (a task module importing another's app: Celery's tasks are
        // shared) make which one runs depend on the order of a Python set: once, in CI, a
        // task that should have failed again ran the recorder's twin and succeeded.
        let log = w.log();
        assert!(
            !log.contains("DuplicateTaskNameWarning"),
            "the worker's app registers two tasks under one name:\n{log}"
        );
        w
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("worker.log")).unwrap_or_default()
    }

    /// The runs recorded so far: complete lines only, since a worker may be writing the
    /// last one as it is read (CI once read 52 bytes of one and failed to parse it).
    pub fn runs(&self) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(&self.record).unwrap_or_default();
        let complete = text.rfind('\n').map_or("", |end| &text[..end]);
        complete
            .lines()
            .map(|l| serde_json::from_str(l).expect("record line"))
            .collect()
    }

    /// Waits until at least `n` task executions were recorded, then a little longer to
    /// catch extra (duplicate) executions.
    pub async fn wait_runs(&self, n: usize) -> Vec<serde_json::Value> {
        let deadline = Instant::now() + Duration::from_secs(90);
        while self.runs().len() < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} tasks ran:\n{}",
                self.runs().len(),
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The queue must be drained too: nothing left that could still run.
        let drained = Instant::now() + Duration::from_secs(30);
        while queue_state(&self.queue)
            .await
            .is_some_and(|s| s.messages > 0)
            && Instant::now() < drained
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        self.runs()
    }
}

/// What a test worker sends on Celery's event exchange.
#[derive(Debug, Clone, Copy)]
pub enum Events {
    /// Nothing at all (no -E, no heartbeats): the default for tests.
    Off,
    /// Worker heartbeats only: Celery's default (`enable_events` can add task events).
    WorkerOnly,
    /// Task events too (`-E`).
    Task,
}

impl Events {
    fn flags(self) -> &'static [&'static str] {
        match self {
            Events::Off => &["--without-heartbeat"],
            Events::WorkerOnly => &[],
            Events::Task => &["-E"],
        }
    }
}

impl Drop for CeleryWorker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let q = self.queue.clone();
        // Best effort: the worker declared its queue; remove it.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(delete_queue(&q));
        })
        .join();
    }
}

pub async fn connection() -> lapin::Connection {
    lapin::Connection::connect(&amqp_url(), lapin::ConnectionProperties::default())
        .await
        .expect("connect to RabbitMQ")
}

/// Ready messages and consumers of a queue on the default vhost; `None` when it does not exist.
pub async fn queue_state(name: &str) -> Option<QueueState> {
    let c = connection().await;
    let ch = c.create_channel().await.unwrap();
    let passive = lapin::options::QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let declared = ch
        .queue_declare(name.into(), passive, lapin::types::FieldTable::default())
        .await;
    let s = match declared {
        Ok(q) => Some(QueueState {
            messages: q.message_count(),
            consumers: q.consumer_count(),
        }),
        Err(e) if e.to_string().contains("NOT_FOUND") => None,
        Err(e) => panic!("passive declare of {name}: {e}"),
    };
    let _ = c.close(200, "bye".into()).await;
    s
}

#[derive(Debug, Clone, Copy)]
pub struct QueueState {
    pub messages: u32,
    pub consumers: u32,
}

pub async fn declare_queue(name: &str) {
    let c = connection().await;
    let ch = c.create_channel().await.unwrap();
    ch.queue_declare(
        name.into(),
        lapin::options::QueueDeclareOptions {
            durable: true,
            ..Default::default()
        },
        Default::default(),
    )
    .await
    .unwrap();
    let _ = c.close(200, "bye".into()).await;
}

pub async fn delete_queue(name: &str) {
    let c = connection().await;
    let ch = c.create_channel().await.unwrap();
    let _ = ch.queue_delete(name.into(), Default::default()).await;
    let _ = c.close(200, "bye".into()).await;
}

/// Takes every message from a queue (destructive; test queues only).
pub async fn drain(name: &str) -> Vec<lapin::message::BasicGetMessage> {
    let c = connection().await;
    let ch = c.create_channel().await.unwrap();
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(
            name.into(),
            lapin::options::BasicGetOptions { no_ack: true },
        )
        .await
        .unwrap()
    {
        out.push(m);
    }
    let _ = c.close(200, "bye".into()).await;
    out
}

/// A header as text, if it is a string.
pub fn header_str(props: &lapin::BasicProperties, key: &str) -> Option<String> {
    match props.headers().as_ref()?.inner().get(key)? {
        lapin::types::AMQPValue::LongString(s) => {
            Some(String::from_utf8_lossy(s.as_bytes()).into_owned())
        }
        _ => None,
    }
}

//! A RabbitMQ node of a test's own (the host's RabbitMQ 3.10 package, its own node name,
//! ports and data directory), for faults that would disturb every other test on the shared
//! node: memory alarms. Stopped and removed on drop.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

pub struct OwnNode {
    pub name: String,
    pub amqp_port: u16,
    pub api_port: u16,
    dir: PathBuf,
}

/// A port nothing listens on now, for a node's listener, below the kernel's ephemeral range
/// (32768-60999 here): a port that `bind(0)` found free comes from that range, so any
/// outgoing connection (dlq's, a worker's, another node's) could take it before the node
/// listens on it, and the node then never starts. Spread by process id, since every test
/// is a process of its own.
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOW: u32 = 10_000;
    const SPAN: u32 = 22_000;
    let start = std::process::id().wrapping_mul(7_919);
    loop {
        let k = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (LOW + start.wrapping_add(k.wrapping_mul(7)) % SPAN) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
}

/// Kills the RabbitMQ nodes of tests' own (`dlq-<tag>-...-<test pid>@localhost`) whose test
/// process is gone. nextest kills a test at its time limit, before `Drop` stops its nodes:
/// in one CI run the three nodes of a timed-out cluster test ran on for the rest of it.
pub fn reap_orphans() {
    let Ok(procs) = std::fs::read_dir("/proc") else {
        return;
    };
    for e in procs.flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let name = env
            .split(|b| *b == 0)
            .find_map(|v| v.strip_prefix(b"RABBITMQ_NODENAME=dlq-"))
            .map(|n| String::from_utf8_lossy(n).into_owned());
        let owner = name.as_deref().and_then(|n| {
            let (node, _) = n.split_once('@')?;
            node.rsplit('-').next()?.parse::<u32>().ok()
        });
        if let Some(owner) = owner
            && !std::path::Path::new(&format!("/proc/{owner}")).exists()
        {
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

impl OwnNode {
    pub fn start(tag: &str) -> OwnNode {
        reap_orphans();
        let (amqp_port, api_port, dist_port) = (free_port(), free_port(), free_port());
        let name = format!("dlq-{tag}-{}@localhost", std::process::id());
        let dir = std::env::temp_dir().join(format!("dlq-node-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("mnesia")).unwrap();
        std::fs::create_dir_all(dir.join("log")).unwrap();
        std::fs::write(
            dir.join("rabbitmq.conf"),
            format!(
                "listeners.tcp.local = 127.0.0.1:{amqp_port}\nmanagement.tcp.port = {api_port}\n\
                 management.tcp.ip = 127.0.0.1\n"
            ),
        )
        .unwrap();
        std::fs::write(dir.join("enabled_plugins"), "[rabbitmq_management].\n").unwrap();
        let status = Command::new("/usr/lib/rabbitmq/bin/rabbitmq-server")
            .arg("-detached")
            .env("RABBITMQ_NODENAME", &name)
            .env("RABBITMQ_NODE_PORT", amqp_port.to_string())
            .env("RABBITMQ_DIST_PORT", dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
            .env("RABBITMQ_LOG_BASE", dir.join("log"))
            .env("RABBITMQ_CONFIG_FILE", dir.join("rabbitmq"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
            .env("RABBITMQ_PID_FILE", dir.join("pid"))
            // The same Erlang cookie as rabbitmqctl's (it runs as the rabbitmq user).
            .env("HOME", "/var/lib/rabbitmq")
            .status()
            .expect("RabbitMQ's rabbitmq-server (Debian package)");
        assert!(status.success(), "starting RabbitMQ node {name}");
        let node = OwnNode {
            name,
            amqp_port,
            api_port,
            dir,
        };
        node.wait_for_api();
        node
    }

    /// The management API answering, then the AMQP listener accepting: the API can answer
    /// first (a connection refused right after it did, once in CI).
    fn wait_for_api(&self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        let url = format!("http://127.0.0.1:{}/api/overview", self.api_port);
        while Command::new("curl")
            .args(["-fsS", "-u", "guest:guest", &url])
            .output()
            .map(|o| !o.status.success())
            .unwrap_or(true)
        {
            assert!(
                Instant::now() < deadline,
                "node {} did not start",
                self.name
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        while std::net::TcpStream::connect(("127.0.0.1", self.amqp_port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "node {}: no AMQP listener",
                self.name
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn amqp_url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.amqp_port)
    }

    pub fn api_url(&self) -> String {
        format!("http://127.0.0.1:{}/", self.api_port)
    }

    /// `rabbitmqctl -n NODE ARGS`.
    pub fn ctl(&self, args: &[&str]) {
        let out = Command::new("rabbitmqctl")
            .args(["-q", "-n", &self.name])
            .args(args)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "rabbitmqctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl OwnNode {
    /// Sets (or clears) a memory alarm and waits until the node reports it.
    pub fn memory_alarm(&self, on: bool) {
        self.ctl(&["set_vm_memory_high_watermark", alarm_watermark(on)]);
        await_mem_alarm(self.api_port, &self.name, on);
    }
}

/// A memory high watermark that sets a memory alarm (no node can stay under it), or the
/// default one that clears it.
pub fn alarm_watermark(on: bool) -> &'static str {
    if on { "0.0000001" } else { "0.4" }
}

/// Waits until the management API on `api_port` reports node `name`'s memory alarm as `on`.
pub fn await_mem_alarm(api_port: u16, name: &str, on: bool) {
    let url = format!("http://127.0.0.1:{api_port}/api/nodes");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = Command::new("curl")
            .args(["-fsS", "-u", "guest:guest", &url])
            .output()
            .unwrap();
        let nodes: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let this = nodes
            .as_array()
            .and_then(|a| a.iter().find(|x| x["name"] == name));
        if this.is_some_and(|x| x["mem_alarm"] == on) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} never reported mem_alarm {on}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

impl Drop for OwnNode {
    fn drop(&mut self) {
        let _ = Command::new("rabbitmqctl")
            .args(["-q", "-n", &self.name, "stop"])
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A node of the test's own (started off the test's thread) holding `n` dead letters in
/// `dlq` (ids `m-0` ..., bodies `{"n": i}`, dead-lettered from `dest`), with `dest` declared
/// too; and the test's own connection and confirm channel to it.
pub async fn with_dead_letters(
    tag: &'static str,
    dlq: &str,
    dest: &str,
    n: usize,
) -> (OwnNode, lapin::Connection, lapin::Channel) {
    let args = lapin::types::FieldTable::default();
    with_dead_letters_in(tag, dlq, dest, n, args).await
}

/// `with_dead_letters`, `dlq` declared with `args`.
pub async fn with_dead_letters_in(
    tag: &'static str,
    dlq: &str,
    dest: &str,
    n: usize,
    args: lapin::types::FieldTable,
) -> (OwnNode, lapin::Connection, lapin::Channel) {
    use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions};
    use lapin::types::{AMQPValue, FieldTable};
    let node = tokio::task::spawn_blocking(move || OwnNode::start(tag))
        .await
        .unwrap();
    let conn = lapin::Connection::connect(&node.amqp_url(), Default::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    for (q, args) in [(dlq, args), (dest, FieldTable::default())] {
        let opts = QueueDeclareOptions {
            durable: true,
            ..Default::default()
        };
        ch.queue_declare(q.into(), opts, args).await.unwrap();
    }
    for i in 0..n {
        let mut headers = FieldTable::default();
        let origin = AMQPValue::LongString(dest.as_bytes().to_vec().into());
        headers.insert("x-first-death-queue".into(), origin);
        let props = lapin::BasicProperties::default()
            .with_message_id(format!("m-{i}").as_str().into())
            .with_headers(headers);
        let body = format!(r#"{{"n": {i}}}"#);
        let publish = BasicPublishOptions::default();
        ch.basic_publish("".into(), dlq.into(), publish, body.as_bytes(), props)
            .await
            .unwrap()
            .await
            .unwrap();
    }
    (node, conn, ch)
}

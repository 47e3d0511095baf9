//! A 3-node RabbitMQ cluster of a test's own, of the generation the suite runs against: the
//! host's RabbitMQ 3.10 (Debian 12) or, on gen 4, the 4.0 of the Debian 13 root
//! (`.ci/trixie`), each node with its own name, ports and data directory. For faults that
//! take a node away (kill -9): never done to the shared brokers. Every node is killed and
//! its directory removed on drop.

use super::node::free_port;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The Debian 13 root `.ci/trixie` makes (gen 4), unless `DLQ_TEST_CLUSTER_ROOT` names
/// another (`/var/lib/dlq-forky`: RabbitMQ 4.3).
const TRIXIE_ROOT: &str = "/var/lib/dlq-trixie";

fn newer_root() -> PathBuf {
    PathBuf::from(std::env::var("DLQ_TEST_CLUSTER_ROOT").unwrap_or_else(|_| TRIXIE_ROOT.into()))
}

/// Held (flock) while a cluster boots, in the temporary directory: shared by every test
/// process, the two generations' runs included.
const BOOT_LOCK: &str = "dlq-cluster-boot.lock";

pub struct Node {
    pub name: String,
    pub amqp_port: u16,
    pub api_port: u16,
    dist_port: u16,
    /// The node's directory as the node sees it (inside the root on gen 4).
    dir: String,
}

pub struct Cluster {
    pub nodes: Vec<Node>,
    /// Lines each node's rabbitmq.conf has beyond its listeners (`start_one`).
    conf: String,
    /// Gen 4: the nodes run inside the Debian 13 root.
    root: Option<PathBuf>,
    /// The cluster's directory on the host.
    base: PathBuf,
}

/// Whether the suite runs against RabbitMQ 4 (see `target`).
pub fn newer_generation() -> bool {
    super::target::amqp_port() != super::target::DEFAULT_AMQP_PORT
}

impl Cluster {
    /// Starts three nodes at once, then joins the second and third to the first. One
    /// cluster boots at a time on the machine (`BOOT_LOCK`), whichever test process asks:
    /// two booting at once on two cores missed the 120 s start limit.
    pub fn start(tag: &str) -> Cluster {
        let (cluster, _booting) = Cluster::boot(tag, &["a", "b", "c"], "");
        let first = cluster.nodes[0].name.clone();
        for n in &cluster.nodes[1..] {
            cluster.ctl(n, &["stop_app"]);
            cluster.ctl(n, &["join_cluster", &first]);
            cluster.ctl(n, &["start_app"]);
        }
        for n in &cluster.nodes {
            wait_for_api(n.api_port);
        }
        cluster
    }

    /// One node of the test's own, of the suite's generation, whose rabbitmq.conf also has
    /// `conf`: for a setting of the whole broker, which the shared brokers must not change.
    pub fn start_one(tag: &str, conf: &str) -> Cluster {
        let (node, _booting) = Cluster::boot(tag, &["a"], conf);
        wait_for_api(node.nodes[0].api_port);
        node
    }

    /// Starts the nodes `names` at once (their rabbitmq.conf with `conf`), one boot at a time
    /// on the machine (`BOOT_LOCK`, returned held: the caller's start goes on under it).
    fn boot(tag: &str, names: &[&str], conf: &str) -> (Cluster, std::fs::File) {
        let lock = std::fs::File::create(std::env::temp_dir().join(BOOT_LOCK)).unwrap();
        lock.lock().unwrap();
        super::node::reap_orphans();
        let root = newer_generation().then(newer_root);
        let inner = format!("/tmp/dlq-cluster-{tag}-{}", std::process::id());
        let base = match &root {
            Some(r) => r.join(inner.trim_start_matches('/')),
            None => PathBuf::from(&inner),
        };
        let _ = std::fs::remove_dir_all(&base);
        let nodes: Vec<Node> = names
            .iter()
            .map(|n| Node {
                name: format!("dlq-{tag}-{n}-{}@localhost", std::process::id()),
                amqp_port: free_port(),
                api_port: free_port(),
                dist_port: free_port(),
                dir: format!("{inner}/{n}"),
            })
            .collect();
        let cluster = Cluster {
            nodes,
            conf: conf.to_owned(),
            root,
            base,
        };
        for n in &cluster.nodes {
            cluster.write_config(n);
        }
        if cluster.root.is_some() {
            // Debian's rabbitmq-server runs the node as the root's rabbitmq user.
            let own = ["chown", "-R", "rabbitmq:rabbitmq", inner.as_str()];
            assert!(
                cluster
                    .command(own[0], &[], &own[1..])
                    .status()
                    .unwrap()
                    .success()
            );
        }
        for n in &cluster.nodes {
            let status = cluster
                .command("rabbitmq-server", &cluster.node_env(n), &["-detached"])
                .status()
                .expect("rabbitmq-server");
            assert!(status.success(), "starting RabbitMQ node {}", n.name);
        }
        for n in &cluster.nodes {
            cluster.await_startup(n);
        }
        (cluster, lock)
    }

    fn host_dir(&self, n: &Node) -> PathBuf {
        match &self.root {
            Some(r) => r.join(n.dir.trim_start_matches('/')),
            None => PathBuf::from(&n.dir),
        }
    }

    fn write_config(&self, n: &Node) {
        let dir = self.host_dir(n);
        std::fs::create_dir_all(dir.join("mnesia")).unwrap();
        std::fs::create_dir_all(dir.join("log")).unwrap();
        std::fs::write(
            dir.join("rabbitmq.conf"),
            format!(
                "listeners.tcp.local = 127.0.0.1:{}\nmanagement.tcp.port = {}\n\
                 management.tcp.ip = 127.0.0.1\ncollect_statistics_interval = 500\n{}",
                n.amqp_port, n.api_port, self.conf
            ),
        )
        .unwrap();
        std::fs::write(dir.join("enabled_plugins"), "[rabbitmq_management].\n").unwrap();
    }

    fn node_env(&self, n: &Node) -> Vec<(String, String)> {
        let d = &n.dir;
        vec![
            ("RABBITMQ_NODENAME".into(), n.name.clone()),
            ("RABBITMQ_NODE_PORT".into(), n.amqp_port.to_string()),
            ("RABBITMQ_DIST_PORT".into(), n.dist_port.to_string()),
            ("RABBITMQ_MNESIA_BASE".into(), format!("{d}/mnesia")),
            ("RABBITMQ_LOG_BASE".into(), format!("{d}/log")),
            ("RABBITMQ_CONFIG_FILE".into(), format!("{d}/rabbitmq.conf")),
            (
                "RABBITMQ_ENABLED_PLUGINS_FILE".into(),
                format!("{d}/enabled_plugins"),
            ),
            ("RABBITMQ_PID_FILE".into(), format!("{d}/pid")),
        ]
    }

    /// `prog` with `env`, on the host (gen 3: as the Debian package's own scripts, with the
    /// Erlang cookie of rabbitmqctl's user) or inside the Debian 13 root (gen 4: as
    /// `.ci/trixie` runs its broker).
    fn command(&self, prog: &str, env: &[(String, String)], args: &[&str]) -> Command {
        match &self.root {
            None => {
                let path = if prog == "rabbitmq-server" {
                    "/usr/lib/rabbitmq/bin/rabbitmq-server"
                } else {
                    prog
                };
                let mut c = Command::new(path);
                c.envs(env.iter().cloned())
                    .env("HOME", "/var/lib/rabbitmq")
                    .args(args);
                c
            }
            Some(root) => {
                let mut c = Command::new("chroot");
                c.arg(root)
                    .args(["env", "-i", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"])
                    .args(["HOME=/root", "LANG=C.UTF-8"])
                    .args(env.iter().map(|(k, v)| format!("{k}={v}")))
                    .arg(prog)
                    .args(args);
                c
            }
        }
    }

    /// Until the node answers: `await_startup` fails at once while the node is not yet
    /// known to epmd.
    fn await_startup(&self, n: &Node) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let out = self.ctl_output(n, &["await_startup", "--timeout", "10"]);
            if out.status.success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "node {} did not start: {}\nthe end of its log:\n{}",
                n.name,
                String::from_utf8_lossy(&out.stderr),
                self.log_tail(n)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }

    /// The last lines of node `n`'s logs, to say why it did not start.
    fn log_tail(&self, n: &Node) -> String {
        let Ok(dir) = std::fs::read_dir(self.host_dir(n).join("log")) else {
            return "(no log directory)".into();
        };
        let mut tail = String::new();
        for entry in dir.flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            let from = lines.len().saturating_sub(30);
            tail.push_str(&format!("== {}\n", entry.path().display()));
            tail.push_str(&lines[from..].join("\n"));
            tail.push('\n');
        }
        tail
    }

    fn ctl_output(&self, n: &Node, args: &[&str]) -> std::process::Output {
        let mut all = vec!["-q", "-n", n.name.as_str()];
        all.extend_from_slice(args);
        self.command("rabbitmqctl", &[], &all).output().unwrap()
    }

    /// `rabbitmqctl -n NODE ARGS`, which must succeed.
    pub fn ctl(&self, n: &Node, args: &[&str]) -> String {
        let out = self.ctl_output(n, args);
        assert!(
            out.status.success(),
            "rabbitmqctl -n {} {args:?}: {}{}",
            n.name,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn os_pid(&self, n: &Node) -> Option<i32> {
        std::fs::read_to_string(self.host_dir(n).join("pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Starts node `i` again (after `kill`), from its own data: it rejoins the cluster.
    pub fn restart(&self, i: usize) {
        let n = &self.nodes[i];
        let status = self
            .command("rabbitmq-server", &self.node_env(n), &["-detached"])
            .status()
            .expect("rabbitmq-server");
        assert!(status.success(), "starting RabbitMQ node {} again", n.name);
        self.await_startup(n);
    }

    /// Brings every node back after a fault, so that one cluster serves several trials: a
    /// killed node starts again from its data (and rejoins), a stopped one starts its app.
    pub fn heal(&self) {
        for (i, n) in self.nodes.iter().enumerate() {
            if self.alive(n) {
                if !self.listening(n) {
                    self.ctl(n, &["start_app"]);
                    self.await_startup(n);
                }
            } else {
                self.restart(i);
            }
        }
        for n in &self.nodes {
            wait_for_api(n.api_port);
        }
        self.await_all_running();
    }

    /// Until node A's API counts every node running: a node just restarted answers before
    /// the others see it back.
    fn await_all_running(&self) {
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let nodes = self.api_get(0, "nodes");
            let running = nodes
                .as_array()
                .map_or(0, |all| all.iter().filter(|n| n["running"] == true).count());
            if running == self.nodes.len() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{running} of {} nodes running, as node A sees them",
                self.nodes.len()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Whether node `n` takes AMQP connections: its app runs (a stopped app closes its
    /// listeners).
    fn listening(&self, n: &Node) -> bool {
        std::net::TcpStream::connect(("127.0.0.1", n.amqp_port)).is_ok()
    }

    fn alive(&self, n: &Node) -> bool {
        self.os_pid(n).is_some_and(process_exists)
    }

    /// kill -9 of node `i`'s VM, and waits until it is gone.
    pub fn kill(&self, i: usize) {
        let n = &self.nodes[i];
        let pid = self.os_pid(n).expect("the node's pid file");
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while process_exists(pid) {
            assert!(
                Instant::now() < deadline,
                "node {} outlived kill -9",
                n.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn amqp_url(&self, i: usize) -> String {
        format!(
            "amqp://guest:guest@127.0.0.1:{}/%2f",
            self.nodes[i].amqp_port
        )
    }

    pub fn api_url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}/", self.nodes[i].api_port)
    }

    /// Sets or clears a memory alarm on node `i` (a watermark no node can stay under), and
    /// waits until the cluster's API reports it.
    pub fn memory_alarm(&self, i: usize, on: bool) {
        let n = &self.nodes[i];
        let mark = super::node::alarm_watermark(on);
        self.ctl(n, &["set_vm_memory_high_watermark", mark]);
        super::node::await_mem_alarm(n.api_port, &n.name, on);
    }

    /// GET on node `i`'s management API, as JSON.
    pub fn api_get(&self, i: usize, path: &str) -> serde_json::Value {
        let url = format!("http://127.0.0.1:{}/api/{path}", self.nodes[i].api_port);
        let out = Command::new("curl")
            .args(["-fsS", "-u", "guest:guest", &url])
            .output()
            .unwrap();
        assert!(out.status.success(), "GET {url}");
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn process_exists(pid: i32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn wait_for_api(port: u16) {
    let deadline = Instant::now() + Duration::from_secs(90);
    let url = format!("http://127.0.0.1:{port}/api/overview");
    while Command::new("curl")
        .args(["-fsS", "-u", "guest:guest", &url])
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        assert!(Instant::now() < deadline, "management API on {port}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for n in &self.nodes {
            if let Some(pid) = self.os_pid(n) {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
        }
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

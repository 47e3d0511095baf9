//! Which RabbitMQ and Redis the tests run against: one place, read from the environment, with
//! the Debian 12 services (RabbitMQ 3.10, Redis 7) as defaults. `.ci/run` runs the suite once
//! per broker generation; the newer one (`bash .ci/trixie up`: RabbitMQ 4.0 on 5700/15700,
//! Redis 8 on 6380) is selected with
//!
//! ```text
//! DLQ_TEST_AMQP_PORT=5700 DLQ_TEST_API_PORT=15700 DLQ_TEST_REDIS_PORT=6380 \
//! DLQ_TEST_RABBITMQCTL="bash $PWD/.ci/trixie rabbitmqctl" \
//! DLQ_TEST_REDIS_START="bash $PWD/.ci/trixie up" cargo nextest run
//! ```
//!
//! | variable               | default                                   | used for                  |
//! |------------------------|-------------------------------------------|---------------------------|
//! | `DLQ_TEST_AMQP_PORT`   | 5672                                      | AMQP on 127.0.0.1         |
//! | `DLQ_TEST_API_PORT`    | 15672                                     | management API, http      |
//! | `DLQ_TEST_REDIS_PORT`  | 6379                                      | Redis (Celery's broker)   |
//! | `DLQ_TEST_RABBITMQCTL` | `rabbitmqctl`                             | stop/start the broker app |
//! | `DLQ_TEST_REDIS_START` | `redis-server --daemonize yes ... --port` | start Redis after a stop  |
//! | `DLQ_TEST_CLUSTER_ROOT`| `/var/lib/dlq-trixie` (off the defaults)  | the cluster tests' nodes  |
//!
//! dlq itself derives the management API from the AMQP host on port 15672, and its default
//! AMQP URL is 127.0.0.1:5672: on another port they would reach the other generation's broker.
//! So on a non-default target every dlq the tests run starts from `DLQ_AMQP_URL` (the default
//! vhost) and `DLQ_MANAGEMENT_URL` set to this target, which a test's own flag, variable or
//! URL overrides (see [`dlq_env`]); on the defaults nothing is set, as before.

use std::sync::OnceLock;

pub const DEFAULT_AMQP_PORT: u16 = 5672;
pub const DEFAULT_API_PORT: u16 = 15672;
pub const DEFAULT_REDIS_PORT: u16 = 6379;

struct Target {
    amqp_port: u16,
    api_port: u16,
    redis_port: u16,
    rabbitmqctl: String,
    redis_start: String,
}

fn port(var: &str, default: u16) -> u16 {
    match std::env::var(var) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{var}={v:?} is not a port")),
        _ => default,
    }
}

fn command(var: &str, default: String) -> String {
    std::env::var(var)
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or(default)
}

fn target() -> &'static Target {
    static T: OnceLock<Target> = OnceLock::new();
    T.get_or_init(|| {
        let redis_port = port("DLQ_TEST_REDIS_PORT", DEFAULT_REDIS_PORT);
        Target {
            amqp_port: port("DLQ_TEST_AMQP_PORT", DEFAULT_AMQP_PORT),
            api_port: port("DLQ_TEST_API_PORT", DEFAULT_API_PORT),
            redis_port,
            rabbitmqctl: command("DLQ_TEST_RABBITMQCTL", "rabbitmqctl".into()),
            // What .ci/run starts the Debian 12 Redis with.
            redis_start: command(
                "DLQ_TEST_REDIS_START",
                format!(
                    r#"redis-server --daemonize yes --bind 127.0.0.1 -::1 --port {redis_port} --save "" --appendonly no --dir /var/lib/redis --logfile /var/log/redis/ci.log"#
                ),
            ),
        }
    })
}

/// The broker's AMQP port on 127.0.0.1.
pub fn amqp_port() -> u16 {
    target().amqp_port
}

/// The management API's port on 127.0.0.1 (plain http).
pub fn api_port() -> u16 {
    target().api_port
}

pub fn redis_port() -> u16 {
    target().redis_port
}

/// `127.0.0.1:<AMQP port>`.
pub fn amqp_addr() -> String {
    format!("127.0.0.1:{}", amqp_port())
}

/// `127.0.0.1:<management port>`.
pub fn api_addr() -> String {
    format!("127.0.0.1:{}", api_port())
}

/// guest's AMQP URL for a virtual host given as its URL path segment (`%2f`, `dlq-it-x`).
pub fn amqp_url(vhost_path: &str) -> String {
    amqp_url_as("guest", "guest", vhost_path)
}

/// An AMQP URL on this broker with other credentials.
pub fn amqp_url_as(user: &str, password: &str, vhost_path: &str) -> String {
    format!("amqp://{user}:{password}@{}/{vhost_path}", amqp_addr())
}

/// The management API's base for test requests: `http://127.0.0.1:<port>/api`.
pub fn api() -> String {
    format!("http://{}/api", api_addr())
}

/// The management URL as dlq takes it (`--management-url`): `http://127.0.0.1:<port>/`.
pub fn management_url() -> String {
    format!("http://{}/", api_addr())
}

/// `127.0.0.1:<Redis port>`.
pub fn redis_addr() -> String {
    format!("127.0.0.1:{}", redis_port())
}

/// Redis database 0 on this target.
pub fn redis_url() -> String {
    format!("redis://{}/0", redis_addr())
}

/// The host part of a Redis URL that leaves the port out where that still reaches this target
/// (kombu's default port, 6379), and names it otherwise.
pub fn redis_host_default_port() -> String {
    if redis_port() == DEFAULT_REDIS_PORT {
        "127.0.0.1".into()
    } else {
        redis_addr()
    }
}

/// `redis-cli` for this target's Redis (a shell command prefix).
pub fn redis_cli() -> String {
    format!("redis-cli -h 127.0.0.1 -p {}", redis_port())
}

/// The command (a shell command prefix) that controls the broker: `rabbitmqctl`, or for the
/// RabbitMQ 4 node `bash .ci/trixie rabbitmqctl`.
pub fn rabbitmqctl() -> &'static str {
    &target().rabbitmqctl
}

/// The shell command that starts this target's Redis again after a test shut it down.
pub fn redis_start() -> &'static str {
    &target().redis_start
}

/// What every dlq a test runs starts from on a non-default target (nothing on the defaults):
/// the target's default vhost as `DLQ_AMQP_URL`, its management API as `DLQ_MANAGEMENT_URL`.
/// A test's own `.env(...)` or flag replaces either; a test whose URLs come from a config file
/// removes them (see `Dlq::env_remove`).
pub fn dlq_env() -> Vec<(&'static str, String)> {
    let mut env = Vec::new();
    if amqp_port() != DEFAULT_AMQP_PORT {
        env.push(("DLQ_AMQP_URL", amqp_url("%2f")));
    }
    if api_port() != DEFAULT_API_PORT {
        env.push(("DLQ_MANAGEMENT_URL", management_url()));
    }
    env
}

/// For a config file that names this broker: the `management_url` line dlq needs on a
/// non-default management port (it would derive port 15672), empty on the defaults.
pub fn config_management_line() -> String {
    if api_port() == DEFAULT_API_PORT {
        String::new()
    } else {
        format!("management_url = \"{}\"\n", management_url())
    }
}

/// The broker's version (3.10, 4.0, 4.3 ...), from the management API's `/api/overview`,
/// read once per test process: for the few expectations that truly differ between versions.
pub async fn rabbitmq_version() -> (u32, u32) {
    static VERSION: tokio::sync::OnceCell<(u32, u32)> = tokio::sync::OnceCell::const_new();
    *VERSION
        .get_or_init(|| async {
            let overview: serde_json::Value = reqwest::Client::new()
                .get(format!("{}/overview", api()))
                .basic_auth("guest", Some("guest"))
                .send()
                .await
                .expect("management API reachable")
                .json()
                .await
                .expect("overview is JSON");
            let version = overview["rabbitmq_version"]
                .as_str()
                .unwrap_or_else(|| panic!("no rabbitmq_version in {overview}"));
            let mut parts = version.split('.').map(|p| p.parse().ok());
            match (parts.next().flatten(), parts.next().flatten()) {
                (Some(major), Some(minor)) => (major, minor),
                _ => panic!("rabbitmq_version {version:?}"),
            }
        })
        .await
}

/// The broker's major version (3 for 3.10, 4 for 4.0).
pub async fn rabbitmq_major() -> u32 {
    rabbitmq_version().await.0
}

/// RabbitMQ 4.3+: `basic.nack(requeue)` does not count toward a quorum queue's delivery
/// limit, so dlq gives a limited quorum DLQ back by nacking rather than renewing it.
pub async fn nacks_uncounted() -> bool {
    rabbitmq_version().await >= (4, 3)
}

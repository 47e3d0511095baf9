//! Integration tests: the real binary against real PostgreSQL, MariaDB, SQLite and RabbitMQ.
mod support;
// The harness, at the root as before: `crate::common::Dlq`, `crate::broker::Broker` ...
use support::{broker, celery_worker, common, target, tmux};

mod audit;
mod bad_input;
mod bench_smoke;
mod browse;
mod cluster;
mod disruptive;
mod dramatiq;
mod faults;
mod follow;
mod generated;
mod operate;
mod queue_archive;
mod queue_read;
mod queue_replay;
mod quorum_limits;
mod recorder;
mod redis;
mod secrets;
mod signals;
mod table_archive;
mod table_errors;
mod table_faults;
mod table_read;
mod table_replay;
mod terminal;
mod tls;
mod transform;
mod workers;

/// Generates one test per database for an `async fn(Dialect)`.
#[macro_export]
macro_rules! per_dialect {
    ($name:ident) => {
        mod $name {
            use $crate::common::Dialect;
            #[tokio::test]
            async fn postgres() {
                super::$name(Dialect::Postgres).await
            }
            #[tokio::test]
            async fn mysql() {
                super::$name(Dialect::MySql).await
            }
            #[tokio::test]
            async fn sqlite() {
                super::$name(Dialect::Sqlite).await
            }
        }
    };
}

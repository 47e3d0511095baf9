//! Integration tests: the real binary against real PostgreSQL, MariaDB, SQLite and RabbitMQ.
mod broker;
mod common;
mod generated;
mod queue_read;
mod table_errors;
mod table_read;

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

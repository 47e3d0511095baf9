//! Where dlq connects and writes, built once from the settings (`Settings::build`) and handed
//! down: the engines and the broker, Redis and table code take these, never the settings.
//! Every URL here is a secret: print `rabbit::Target::shown` or `redact::url`, never the field.

use crate::celery::redis::RedisBroker;
use crate::celery::workers::Mailbox;
use crate::error::usage;
use crate::rabbit::Target;
use crate::source::table::{DatabaseUrl, TableName};
use anyhow::Result;
use std::path::PathBuf;

#[derive(Debug, Clone)]
pub(crate) struct Endpoints {
    /// RabbitMQ: AMQP URL, vhost, management API and TLS files.
    pub(crate) rabbit: Target,
    /// Nobody named RabbitMQ (no AMQP URL, management API or vhost): overviews may skip it.
    pub(crate) rabbit_is_default: bool,
    /// The failed-task table, when a database is configured.
    pub(crate) database: Option<Database>,
    /// Where Celery tasks are sent.
    pub(crate) celery: CeleryBroker,
    /// Where Celery workers answer remote control (`--control-exchange`).
    pub(crate) mailbox: Mailbox,
    /// The audit trail; `None` only without XDG_STATE_HOME and HOME (a run that changes
    /// something is then refused).
    pub(crate) audit_log: Option<PathBuf>,
}

/// The database and the failed-task table in it.
#[derive(Debug, Clone)]
pub(crate) struct Database {
    pub(crate) url: DatabaseUrl,
    pub(crate) table: TableName,
}

/// Celery's broker: the RabbitMQ above, another RabbitMQ (`--broker-url amqp://`), or Redis.
#[derive(Debug, Clone)]
pub(crate) enum CeleryBroker {
    Amqp(Target),
    Redis(RedisBroker),
}

impl Endpoints {
    /// The database, or a usage error telling how to configure one.
    pub(crate) fn require_database(&self) -> Result<&Database> {
        self.database.as_ref().ok_or_else(|| {
            usage("no database configured: pass --database-url, set DLQ_DATABASE_URL or DATABASE_URL, or put database_url in the config file")
        })
    }

    /// A Redis-only team: Celery's broker is Redis and RabbitMQ is only the built-in default,
    /// so overviews do not try it (a source nobody configured).
    pub(crate) fn rabbit_unused(&self) -> bool {
        self.rabbit_is_default && matches!(self.celery, CeleryBroker::Redis(_))
    }
}

//! The integration tests' way into a scratch database (re-exported as `crate::testing`):
//! raw statements and seeded rows, so that tests need neither sqlx nor this directory's
//! internals. Nothing in dlq itself calls it.

use super::pool::{self, Pool, bind_all, with_pool};
use super::sql::{Bind, SqlBuilder};
use super::url::quote_ident;
use crate::source::table::{DatabaseUrl, Dialect, TableName};
use anyhow::Result;
use chrono::{DateTime, Utc};
use sqlx::{AssertSqlSafe, Row};

/// A connection pool to a test database.
pub struct Db {
    pool: Pool,
    dialect: Dialect,
}

/// A failed-task row to insert, in the columns `dlq init` creates.
#[derive(Debug, Clone)]
pub struct NewRow<'a> {
    pub task: &'a str,
    /// The args column's JSON text; `None`: SQL NULL.
    pub args: Option<&'a str>,
    pub motivo: &'a str,
    pub created: DateTime<Utc>,
    pub replayed: bool,
}

/// Rows per INSERT statement: under every database's parameter limit.
const INSERT_CHUNK: usize = 200;

impl Db {
    /// Connects; `create` lets SQLite create a missing file.
    pub async fn connect(url: &str, create: bool) -> Result<Db> {
        let db = DatabaseUrl::parse(url).map_err(anyhow::Error::msg)?;
        Ok(Db {
            pool: pool::connect(&db, create).await?,
            dialect: db.dialect,
        })
    }

    /// The table's name as SQL: validated, then quoted for this database.
    pub fn quote(&self, table: &str) -> Result<String> {
        Ok(quote_ident(
            self.dialect,
            &TableName::parse(table).map_err(anyhow::Error::msg)?,
        ))
    }

    /// Runs SQL text (several statements are fine), without parameters.
    pub async fn exec(&self, sql: &str) -> Result<()> {
        let sql = sql.to_string();
        with_pool!(&self.pool, |p| {
            sqlx::raw_sql(AssertSqlSafe(sql)).execute(p).await?;
        });
        Ok(())
    }

    /// The first column of the first row, as an integer.
    pub async fn scalar_i64(&self, sql: &str) -> Result<i64> {
        let sql = sql.to_string();
        Ok(with_pool!(&self.pool, |p| {
            sqlx::query_scalar::<_, i64>(AssertSqlSafe(sql))
                .fetch_one(p)
                .await?
        }))
    }

    /// Every column of the first row, as text (e.g. `SHOW VARIABLES LIKE 'x'`).
    pub async fn row_text(&self, sql: &str) -> Result<Vec<String>> {
        let sql = sql.to_string();
        with_pool!(&self.pool, |p| {
            let row = sqlx::query(AssertSqlSafe(sql)).fetch_one(p).await?;
            (0..row.len())
                .map(|i| Ok(row.try_get::<String, _>(i)?))
                .collect()
        })
    }

    /// Inserts rows into `table`, binding each value the way its column compares.
    pub async fn insert(&self, table: &str, rows: &[NewRow<'_>]) -> Result<()> {
        let q = self.quote(table)?;
        for chunk in rows.chunks(INSERT_CHUNK) {
            let mut b = SqlBuilder::new(self.dialect);
            let values: Vec<String> = chunk
                .iter()
                .map(|r| format!("({})", self.row_params(&mut b, r).join(", ")))
                .collect();
            let sql = format!(
                "INSERT INTO {q} (task_original, args, motivo, criada_em, reprocessada) VALUES {}",
                values.join(", ")
            );
            let stmt = b.finish(sql);
            with_pool!(&self.pool, |p| {
                bind_all!(sqlx::query(AssertSqlSafe(stmt.sql)), stmt.binds)
                    .execute(p)
                    .await?;
            });
        }
        Ok(())
    }

    /// One row's placeholders, in the INSERT's column order.
    fn row_params(&self, b: &mut SqlBuilder, r: &NewRow<'_>) -> [String; 5] {
        // Placeholders are numbered in the order they are made (PostgreSQL's `$n`).
        let task = b.param(Bind::Text(r.task.to_string()));
        let args = match r.args {
            Some(a) => {
                let p = b.param(Bind::Text(a.to_string()));
                match self.dialect {
                    Dialect::Postgres => format!("CAST({p} AS jsonb)"),
                    _ => p,
                }
            }
            None => "NULL".into(),
        };
        let created = match self.dialect {
            Dialect::Postgres => Bind::Tz(r.created),
            Dialect::MySql => Bind::Naive(r.created.naive_utc()),
            Dialect::Sqlite => Bind::Text(r.created.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()),
        };
        let replayed = match self.dialect {
            Dialect::Postgres => Bind::Bool(r.replayed),
            _ => Bind::I64(r.replayed as i64),
        };
        let motivo = b.param(Bind::Text(r.motivo.to_string()));
        [task, args, motivo, b.param(created), b.param(replayed)]
    }
}

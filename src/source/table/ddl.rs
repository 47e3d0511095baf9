//! What `dlq init` creates: the table and an index serving `WHERE NOT reprocessada`.

use super::pool::{Pool, scrubbed, with_pool};
use super::schema::{detect, read_columns};
use super::url::quote_ident;
use crate::source::table::{Dialect, TableName};
use anyhow::Result;
use sqlx::AssertSqlSafe;

/// The DDL `dlq init` runs, in order.
pub(crate) fn init_statements(dialect: Dialect, table: &TableName) -> Vec<String> {
    let q = quote_ident(dialect, table);
    let idx = match dialect {
        Dialect::MySql => format!("`{}_pendentes_idx`", table.name),
        _ => format!("\"{}_pendentes_idx\"", table.name),
    };
    match dialect {
        Dialect::Postgres => vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {q} (\n  id BIGSERIAL PRIMARY KEY,\n  task_original VARCHAR(255) NOT NULL,\n  args JSONB,\n  motivo TEXT NOT NULL DEFAULT '',\n  criada_em TIMESTAMPTZ NOT NULL DEFAULT now(),\n  reprocessada BOOLEAN NOT NULL DEFAULT false,\n  reprocessada_em TIMESTAMPTZ\n)"
            ),
            format!("CREATE INDEX IF NOT EXISTS {idx} ON {q} (id) WHERE NOT reprocessada"),
        ],
        Dialect::MySql => vec![format!(
            "CREATE TABLE IF NOT EXISTS {q} (\n  id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,\n  task_original VARCHAR(255) NOT NULL,\n  args JSON NULL,\n  motivo TEXT NOT NULL,\n  criada_em DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6),\n  reprocessada BOOLEAN NOT NULL DEFAULT FALSE,\n  reprocessada_em DATETIME(6) NULL,\n  INDEX {idx} (reprocessada, id)\n) DEFAULT CHARSET = utf8mb4"
        )],
        Dialect::Sqlite => vec![
            format!(
                "CREATE TABLE IF NOT EXISTS {q} (\n  id INTEGER PRIMARY KEY AUTOINCREMENT,\n  task_original TEXT NOT NULL,\n  args TEXT CHECK (args IS NULL OR json_valid(args)),\n  motivo TEXT NOT NULL DEFAULT '',\n  criada_em TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),\n  reprocessada INTEGER NOT NULL DEFAULT 0,\n  reprocessada_em TEXT\n)"
            ),
            format!("CREATE INDEX IF NOT EXISTS {idx} ON {q} (id) WHERE reprocessada = 0"),
        ],
    }
}

/// Runs `init_statements`; safe to run twice.
pub(super) async fn init(pool: &Pool, dialect: Dialect, table: &TableName) -> Result<()> {
    // An existing table must have dlq's columns before its index is created: otherwise
    // PostgreSQL stops at `CREATE INDEX` naming only the first missing column.
    if !read_columns(pool, table).await?.is_empty() {
        detect(pool, dialect, table).await?;
    }
    for stmt in init_statements(dialect, table) {
        with_pool!(pool, |p| {
            sqlx::query(AssertSqlSafe(stmt))
                .execute(p)
                .await
                .map_err(scrubbed)?;
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_names_the_quoted_table_and_its_index() {
        let t = TableName::parse("app.tasks_falhadas").unwrap();
        let pg = init_statements(Dialect::Postgres, &t);
        assert!(pg[0].starts_with("CREATE TABLE IF NOT EXISTS \"app\".\"tasks_falhadas\" ("));
        assert_eq!(
            pg[1],
            "CREATE INDEX IF NOT EXISTS \"tasks_falhadas_pendentes_idx\" ON \"app\".\"tasks_falhadas\" (id) WHERE NOT reprocessada"
        );
        let my = init_statements(Dialect::MySql, &t);
        assert_eq!(my.len(), 1);
        assert!(my[0].contains("INDEX `tasks_falhadas_pendentes_idx` (reprocessada, id)"));
        let lite = init_statements(Dialect::Sqlite, &TableName::parse("t").unwrap());
        assert!(lite[1].ends_with("ON \"t\" (id) WHERE reprocessada = 0"));
    }
}

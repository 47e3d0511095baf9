//! Schema detection: which columns the table has and how each is typed, read from the
//! database's catalogue, so that queries bind and decode values the way the columns compare.

use super::pool::{Pool, scrubbed};
use super::url::quote_ident;
use crate::error::usage;
use crate::source::table::{Dialect, TableName};
use anyhow::Result;

/// How the id column is typed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum IdKind {
    Int,
    Text,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TimeKind {
    /// timestamptz (PostgreSQL), TIMESTAMP (MySQL): an instant.
    Tz,
    /// timestamp without time zone, DATETIME: read as UTC.
    Naive,
    /// Text (SQLite, or anything else): parsed leniently.
    Text,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FlagKind {
    /// A real boolean column (PostgreSQL).
    Bool,
    /// An integer 0/1 (MySQL BOOLEAN, SQLite).
    Int,
}

#[derive(Debug, Clone)]
pub(super) struct TableSchema {
    pub(super) id: IdKind,
    pub(super) created: TimeKind,
    pub(super) flag: FlagKind,
    pub(super) flag_nullable: bool,
    /// `reprocessada_em`, when the table has it.
    pub(super) replayed_at: Option<TimeKind>,
}

/// Everything SQL text and row decoding depend on: no connection, so it is unit-testable.
#[derive(Debug, Clone)]
pub(super) struct Layout {
    pub(super) dialect: Dialect,
    pub(super) name: TableName,
    /// The quoted identifier to splice into SQL (validated, then quoted).
    pub(super) quoted: String,
    pub(super) schema: TableSchema,
}

impl Layout {
    pub(super) fn new(dialect: Dialect, name: &TableName, schema: TableSchema) -> Layout {
        Layout {
            dialect,
            name: name.clone(),
            quoted: quote_ident(dialect, name),
            schema,
        }
    }
}

/// The columns dlq needs, in `record_columns` order (decoding names them in its messages).
pub(super) const REQUIRED_COLUMNS: [&str; 6] = [
    "id",
    "task_original",
    "args",
    "motivo",
    "criada_em",
    "reprocessada",
];

pub(super) struct Column {
    name: String,
    data_type: String,
    nullable: bool,
}

/// Reads the table's columns and checks that it has dlq's, with usable types.
pub(super) async fn detect(pool: &Pool, dialect: Dialect, table: &TableName) -> Result<Layout> {
    let columns = read_columns(pool, table).await?;
    let schema = schema_of(&columns, dialect, table)?;
    Ok(Layout::new(dialect, table, schema))
}

/// The schema the columns describe, or why dlq cannot use the table.
fn schema_of(columns: &[Column], dialect: Dialect, table: &TableName) -> Result<TableSchema> {
    if columns.is_empty() {
        return Err(usage(format!(
            "table {table} not found in this database (create it with `dlq init`, or name another with --table)"
        )));
    }
    let find = |n: &str| columns.iter().find(|c| c.name.eq_ignore_ascii_case(n));
    let missing: Vec<&str> = REQUIRED_COLUMNS
        .iter()
        .copied()
        .filter(|c| find(c).is_none())
        .collect();
    if !missing.is_empty() {
        let found: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
        return Err(usage(format!(
            "table {table} is missing required column(s): {} (found: {})",
            missing.join(", "),
            found.join(", ")
        )));
    }
    let ty = |n: &str| {
        find(n)
            .map(|c| c.data_type.to_ascii_lowercase())
            .unwrap_or_default()
    };
    let id = if is_integer_type(&ty("id")) {
        IdKind::Int
    } else {
        IdKind::Text
    };
    Ok(TableSchema {
        id,
        created: time_kind(dialect, &ty("criada_em")),
        flag: flag_kind(dialect, table, &ty("reprocessada"))?,
        flag_nullable: find("reprocessada").is_some_and(|c| c.nullable),
        replayed_at: find("reprocessada_em")
            .map(|c| time_kind(dialect, &c.data_type.to_ascii_lowercase())),
    })
}

/// How `reprocessada` holds its flag, given its (lowercased) type.
fn flag_kind(dialect: Dialect, table: &TableName, flag_type: &str) -> Result<FlagKind> {
    match dialect {
        Dialect::Postgres if flag_type.starts_with("bool") => Ok(FlagKind::Bool),
        Dialect::Postgres if is_integer_type(flag_type) => Ok(FlagKind::Int),
        Dialect::Postgres => Err(usage(format!(
            "table {table}: column reprocessada has type {flag_type}, expected boolean"
        ))),
        _ if is_integer_type(flag_type)
            || flag_type.starts_with("bool")
            || flag_type.starts_with("bit") =>
        {
            Ok(FlagKind::Int)
        }
        _ => Err(usage(format!(
            "table {table}: column reprocessada has type {flag_type}, expected a boolean/integer"
        ))),
    }
}

fn is_integer_type(t: &str) -> bool {
    let t = t.to_ascii_lowercase();
    [
        "int",
        "serial",
        "bigint",
        "smallint",
        "tinyint",
        "mediumint",
        "integer",
    ]
    .iter()
    .any(|k| t.contains(k))
}

fn time_kind(dialect: Dialect, data_type: &str) -> TimeKind {
    let t = data_type.to_ascii_lowercase();
    match dialect {
        Dialect::Postgres if t.starts_with("timestamp with time zone") || t == "timestamptz" => {
            TimeKind::Tz
        }
        Dialect::Postgres if t.starts_with("timestamp") => TimeKind::Naive,
        Dialect::MySql if t.starts_with("timestamp") => TimeKind::Tz,
        Dialect::MySql if t.starts_with("datetime") => TimeKind::Naive,
        _ => TimeKind::Text,
    }
}

/// The table's columns in order; empty when there is no such table.
pub(super) async fn read_columns(pool: &Pool, table: &TableName) -> Result<Vec<Column>> {
    let rows: Vec<(String, String, bool)> = match pool {
        Pool::Postgres(p) => {
            let rel = quote_ident(Dialect::Postgres, table);
            sqlx::query_as::<_, (String, String, bool)>(
                "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), NOT a.attnotnull \
                 FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped \
                 ORDER BY a.attnum",
            )
            .bind(rel)
            .fetch_all(p)
            .await
            .map_err(scrubbed)?
        }
        Pool::MySql(p) => {
            let rows: Vec<(String, String, String)> = sqlx::query_as(
                "SELECT CAST(column_name AS CHAR), CAST(column_type AS CHAR), CAST(is_nullable AS CHAR) \
                 FROM information_schema.columns WHERE table_schema = COALESCE(?, DATABASE()) AND table_name = ? \
                 ORDER BY ordinal_position",
            )
            .bind(table.schema.clone())
            .bind(table.name.clone())
            .fetch_all(p)
            .await
            .map_err(scrubbed)?;
            rows.into_iter()
                .map(|(n, t, nul)| (n, t, nul.eq_ignore_ascii_case("YES")))
                .collect()
        }
        Pool::Sqlite(p) => {
            let rows: Result<Vec<(String, String, i64)>, _> = sqlx::query_as(
                "SELECT name, type, \"notnull\" FROM pragma_table_info(?, COALESCE(?, 'main'))",
            )
            .bind(table.name.clone())
            .bind(table.schema.clone())
            .fetch_all(p)
            .await;
            let rows = match rows {
                // `--table public.x`: SQLite has no such schema, so no such table.
                Err(e) if e.to_string().contains("unknown database") => Vec::new(),
                r => r.map_err(scrubbed)?,
            };
            rows.into_iter().map(|(n, t, nn)| (n, t, nn == 0)).collect()
        }
    };
    Ok(rows
        .into_iter()
        .map(|(name, data_type, nullable)| Column {
            name,
            data_type,
            nullable,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, data_type: &str, nullable: bool) -> Column {
        Column {
            name: name.into(),
            data_type: data_type.into(),
            nullable,
        }
    }

    fn dlq_columns(id: &str, created: &str, flag: &str) -> Vec<Column> {
        vec![
            col("id", id, false),
            col("task_original", "text", false),
            col("args", "text", true),
            col("motivo", "text", false),
            col("criada_em", created, false),
            col("reprocessada", flag, true),
        ]
    }

    #[test]
    fn time_kinds() {
        assert_eq!(
            time_kind(Dialect::Postgres, "timestamp with time zone"),
            TimeKind::Tz
        );
        assert_eq!(
            time_kind(Dialect::Postgres, "timestamp(6) without time zone"),
            TimeKind::Naive
        );
        assert_eq!(time_kind(Dialect::MySql, "datetime(6)"), TimeKind::Naive);
        assert_eq!(time_kind(Dialect::Sqlite, "DATETIME"), TimeKind::Text);
    }

    #[test]
    fn schema_from_columns() {
        let t = TableName::parse("tasks_falhadas").unwrap();
        let cols = dlq_columns("bigint", "timestamp with time zone", "boolean");
        let s = schema_of(&cols, Dialect::Postgres, &t).unwrap();
        assert_eq!(s.id, IdKind::Int);
        assert_eq!(s.created, TimeKind::Tz);
        assert_eq!(s.flag, FlagKind::Bool);
        assert!(s.flag_nullable);
        assert_eq!(s.replayed_at, None);

        let cols = dlq_columns("varchar(36)", "TEXT", "tinyint(1)");
        let s = schema_of(&cols, Dialect::MySql, &t).unwrap();
        assert_eq!((s.id, s.flag), (IdKind::Text, FlagKind::Int));
    }

    #[test]
    fn schema_problems_are_named() {
        let t = TableName::parse("tasks_falhadas").unwrap();
        let err = schema_of(&[], Dialect::Sqlite, &t).unwrap_err().to_string();
        assert!(err.contains("not found"), "{err}");
        let err = schema_of(&[col("id", "integer", false)], Dialect::Sqlite, &t)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("missing required column(s): task_original"),
            "{err}"
        );
        let cols = dlq_columns("bigint", "timestamp", "text");
        let err = schema_of(&cols, Dialect::Postgres, &t)
            .unwrap_err()
            .to_string();
        assert!(err.contains("expected boolean"), "{err}");
    }
}

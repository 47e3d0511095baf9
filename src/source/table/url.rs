//! Where the failed-task table is: the database URL (and so its SQL dialect) and the
//! table's validated name. Values only: nothing here connects.

use crate::redact;
use crate::tls;
use std::path::Path;

/// A validated table name: `name` or `schema.name`, each part an SQL identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TableName {
    pub(crate) schema: Option<String>,
    pub(crate) name: String,
}

impl TableName {
    pub(crate) fn parse(s: &str) -> Result<TableName, String> {
        let parts: Vec<&str> = s.split('.').collect();
        let valid = |p: &str| {
            !p.is_empty()
                && p.len() <= 64
                && p.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                && p.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        };
        match parts.as_slice() {
            [name] if valid(name) => Ok(TableName {
                schema: None,
                name: name.to_string(),
            }),
            [schema, name] if valid(schema) && valid(name) => Ok(TableName {
                schema: Some(schema.to_string()),
                name: name.to_string(),
            }),
            _ => Err(format!(
                "invalid table name {s:?}: expected an identifier (letters, digits, _) or schema.table"
            )),
        }
    }
}

impl std::fmt::Display for TableName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.schema {
            Some(s) => write!(f, "{s}.{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// Which SQL database a URL points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    Postgres,
    MySql,
    Sqlite,
}

#[derive(Clone)]
pub(crate) struct DatabaseUrl {
    pub(crate) dialect: Dialect,
    /// The URL as sqlx wants it (mariadb:// rewritten to mysql://). Secret: never print.
    pub(crate) url: String,
}

/// Never the password (see `rabbit::Target`).
impl std::fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseUrl")
            .field("dialect", &self.dialect)
            .field("url", &redact::url(&self.url))
            .finish()
    }
}

impl DatabaseUrl {
    pub(crate) fn parse(raw: &str) -> Result<DatabaseUrl, String> {
        let shown = redact::url(raw);
        let (scheme, rest) = raw.split_once(':').ok_or_else(|| {
            format!("invalid database URL {shown}: expected postgres://, mysql:// or sqlite://")
        })?;
        let dialect = match scheme.to_ascii_lowercase().as_str() {
            "postgres" | "postgresql" => Dialect::Postgres,
            "mysql" | "mariadb" => Dialect::MySql,
            "sqlite" => Dialect::Sqlite,
            other => {
                return Err(format!(
                    "invalid database URL {shown}: unsupported scheme {other:?} (use postgres://, mysql://, mariadb:// or sqlite://)"
                ));
            }
        };
        let url = match dialect {
            Dialect::MySql => format!("mysql:{rest}"),
            _ => raw.to_string(),
        };
        if dialect != Dialect::Sqlite {
            let parsed = url::Url::parse(&url).map_err(|e| {
                format!(
                    "invalid database URL {shown}: {e}{}",
                    redact::encoding_hint(e)
                )
            })?;
            if parsed.host_str().is_none_or(str::is_empty) {
                return Err(format!("invalid database URL {shown}: missing host"));
            }
            // sqlx reads the CA file only when it connects, and then fails with a bare I/O
            // error: check it here like --amqp-ca-file. A value that is PEM itself is inline.
            for (key, value) in parsed.query_pairs() {
                if matches!(&*key, "sslrootcert" | "ssl-root-cert" | "ssl-ca" | "sslca")
                    && !value.trim().starts_with("-----BEGIN")
                {
                    tls::load_ca_file(Path::new(&*value), &format!("{key} in the database URL"))?;
                }
            }
        } else if rest.trim_start_matches('/').is_empty() {
            return Err(format!(
                "invalid database URL {shown}: missing file path (sqlite://path/to/db.sqlite)"
            ));
        }
        Ok(DatabaseUrl { dialect, url })
    }
}

/// The table's name as an SQL identifier of `dialect`, quoted.
pub(crate) fn quote_ident(dialect: Dialect, t: &TableName) -> String {
    let q = |s: &str| match dialect {
        Dialect::MySql => format!("`{s}`"),
        _ => format!("\"{s}\""),
    };
    match &t.schema {
        Some(s) => format!("{}.{}", q(s), q(&t.name)),
        None => q(&t.name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_names() {
        assert!(TableName::parse("tasks_falhadas").is_ok());
        assert_eq!(
            TableName::parse("app.tasks").unwrap().schema.as_deref(),
            Some("app")
        );
        for bad in ["", "a.b.c", "1abc", "a-b", "a\"b", "tasks; drop", "a."] {
            assert!(TableName::parse(bad).is_err(), "{bad}");
        }
    }
}

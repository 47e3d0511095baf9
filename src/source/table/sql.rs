//! SQL text: placeholders and bound values, the selection's WHERE clause, and every
//! statement dlq runs against the table. Pure (no connection), so each dialect's text is
//! unit-tested below.
//!
//! What SQL can decide is pushed down as bound parameters; the selection's own `matches`
//! stays the final word, so every pushed-down predicate only has to select a superset.
//! `LIMIT` is pushed down only when every predicate is exact in SQL.

use super::schema::{FlagKind, IdKind, Layout, TimeKind};
use crate::error::usage;
use crate::model::RecordId;
use crate::select::{ReplayedFilter, Selection};
use crate::source::table::Dialect;
use anyhow::Result;
use chrono::{DateTime, NaiveDateTime, Utc};

/// A value bound to a query parameter.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Bind {
    I64(i64),
    Text(String),
    Bool(bool),
    Tz(DateTime<Utc>),
    Naive(NaiveDateTime),
}

/// A statement and its bound values, in placeholder order.
#[derive(Debug)]
pub(super) struct Statement {
    pub(super) sql: String,
    pub(super) binds: Vec<Bind>,
}

/// Builds SQL with the right placeholder style and collects bind values in order.
pub(super) struct SqlBuilder {
    dialect: Dialect,
    binds: Vec<Bind>,
}

impl SqlBuilder {
    pub(super) fn new(dialect: Dialect) -> SqlBuilder {
        SqlBuilder {
            dialect,
            binds: Vec::new(),
        }
    }

    /// Adds a bind value; returns its placeholder.
    pub(super) fn param(&mut self, b: Bind) -> String {
        self.binds.push(b);
        match self.dialect {
            Dialect::Postgres => format!("${}", self.binds.len()),
            _ => "?".to_string(),
        }
    }

    pub(super) fn finish(self, sql: String) -> Statement {
        Statement {
            sql,
            binds: self.binds,
        }
    }
}

/// Escapes LIKE wildcards with `!` (used with `ESCAPE '!'`).
fn like_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '%' | '_' | '!') {
            out.push('!');
        }
        out.push(c);
    }
    out
}

/// The four statements behind `list`'s summary.
pub(super) struct SummarySql {
    pub(super) total: String,
    pub(super) pending: String,
    /// One record row: the oldest pending.
    pub(super) oldest: String,
    /// (motivo, count) rows.
    pub(super) reasons: String,
}

/// Statements.
impl Layout {
    /// The records a selection pre-selects, ordered by id. With an exact LIMIT, one row past
    /// it lets the consumer tell "more match" from "that was all".
    pub(super) fn select_stmt(&self, sel: &Selection) -> Result<Statement> {
        let mut b = SqlBuilder::new(self.dialect);
        let (clause, exact) = self.where_clause(sel, &mut b)?;
        let limit = match (exact, sel.limit) {
            (true, Some(n)) => format!(" LIMIT {}", n.saturating_add(1)),
            _ => String::new(),
        };
        let sql = format!(
            "SELECT {} FROM {}{clause} ORDER BY id{limit}",
            self.record_columns(),
            self.quoted
        );
        Ok(b.finish(sql))
    }

    /// `SELECT COUNT(*)`; `None` when SQL cannot decide the selection exactly.
    pub(super) fn count_stmt(&self, sel: &Selection) -> Result<Option<Statement>> {
        let mut b = SqlBuilder::new(self.dialect);
        let (clause, exact) = self.where_clause(sel, &mut b)?;
        if !exact {
            return Ok(None);
        }
        let sql = format!("SELECT COUNT(*) FROM {}{clause}", self.quoted);
        Ok(Some(b.finish(sql)))
    }

    /// The rows to archive, in id order; with `lock` (--delete) locked against a concurrent
    /// replay (SQLite: the caller's `BEGIN IMMEDIATE` does that).
    pub(super) fn archive_select_stmt(&self, sel: &Selection, lock: bool) -> Result<Statement> {
        let mut b = SqlBuilder::new(self.dialect);
        let (clause, exact) = self.where_clause(sel, &mut b)?;
        let limit = match (exact, sel.limit) {
            (true, Some(n)) => format!(" LIMIT {n}"),
            _ => String::new(),
        };
        let lock = match (lock, self.dialect) {
            (true, Dialect::Postgres | Dialect::MySql) => " FOR UPDATE SKIP LOCKED",
            _ => "",
        };
        let sql = format!(
            "SELECT {} FROM {}{clause} ORDER BY id{limit}{lock}",
            self.record_columns(),
            self.quoted
        );
        Ok(b.finish(sql))
    }

    pub(super) fn delete_stmt(&self, ids: &[RecordId]) -> Result<Statement> {
        let mut b = SqlBuilder::new(self.dialect);
        let ps = self.id_params(&mut b, ids)?;
        let sql = format!("DELETE FROM {} WHERE id IN ({ps})", self.quoted);
        Ok(b.finish(sql))
    }

    /// Locks these rows for this transaction if they are still selectable by their replayed
    /// flag. PostgreSQL and MySQL skip rows another run holds (`SKIP LOCKED`); SQLite runs
    /// this inside `BEGIN IMMEDIATE`, which admits one writer at a time.
    pub(super) fn claim_stmt(
        &self,
        ids: &[RecordId],
        replayed: ReplayedFilter,
    ) -> Result<Statement> {
        let mut b = SqlBuilder::new(self.dialect);
        let ps = self.id_params(&mut b, ids)?;
        let flag = match replayed {
            ReplayedFilter::Pending => format!(" AND {}", self.pending_sql()),
            ReplayedFilter::Only => format!(" AND {}", self.replayed_sql()),
            ReplayedFilter::All => String::new(),
        };
        let lock = match self.dialect {
            Dialect::Sqlite => "",
            _ => " FOR UPDATE SKIP LOCKED",
        };
        let sql = format!(
            "SELECT {} FROM {} WHERE id IN ({ps}){flag} ORDER BY id{lock}",
            self.record_columns(),
            self.quoted
        );
        Ok(b.finish(sql))
    }

    /// Marks these rows replayed (and `reprocessada_em` when the column exists).
    pub(super) fn mark_stmt(&self, ids: &[RecordId], at: DateTime<Utc>) -> Result<Statement> {
        let mut b = SqlBuilder::new(self.dialect);
        let flag = b.param(self.replayed_flag());
        let mut set = format!("reprocessada = {flag}");
        if let Some(kind) = self.schema.replayed_at {
            let p = b.param(time_bind(kind, at));
            set.push_str(&format!(", reprocessada_em = {p}"));
        }
        let ps = self.id_params(&mut b, ids)?;
        let sql = format!("UPDATE {} SET {set} WHERE id IN ({ps})", self.quoted);
        Ok(b.finish(sql))
    }

    pub(super) fn summary_sql(&self) -> SummarySql {
        let (q, pending) = (&self.quoted, self.pending_sql());
        SummarySql {
            total: format!("SELECT COUNT(*) FROM {q}"),
            pending: format!("SELECT COUNT(*) FROM {q} WHERE {pending}"),
            oldest: format!(
                "SELECT {} FROM {q} WHERE {pending} ORDER BY criada_em LIMIT 1",
                self.record_columns()
            ),
            reasons: format!("SELECT motivo, COUNT(*) FROM {q} WHERE {pending} GROUP BY motivo"),
        }
    }
}

/// Pieces.
impl Layout {
    /// SQL for "not yet replayed".
    fn pending_sql(&self) -> &'static str {
        match (self.schema.flag, self.schema.flag_nullable) {
            (FlagKind::Bool, false) => "NOT reprocessada",
            (FlagKind::Bool, true) => "reprocessada IS NOT TRUE",
            (FlagKind::Int, false) => "reprocessada = 0",
            (FlagKind::Int, true) => "COALESCE(reprocessada, 0) = 0",
        }
    }

    fn replayed_sql(&self) -> &'static str {
        match self.schema.flag {
            FlagKind::Bool => "reprocessada IS TRUE",
            FlagKind::Int => "COALESCE(reprocessada, 0) <> 0",
        }
    }

    /// The value that marks a row replayed.
    fn replayed_flag(&self) -> Bind {
        match self.schema.flag {
            FlagKind::Bool => Bind::Bool(true),
            FlagKind::Int => Bind::I64(1),
        }
    }

    /// An id bound with the column's type; a non-integer id for an integer column is bad input.
    fn id_bind(&self, id: &RecordId) -> Result<Bind> {
        match (self.schema.id, id) {
            (IdKind::Int, RecordId::Int(i)) => Ok(Bind::I64(*i)),
            (IdKind::Int, RecordId::Text(t)) => Err(usage(format!(
                "--id {t:?}: the id column of {} is an integer",
                self.name
            ))),
            (IdKind::Text, id) => Ok(Bind::Text(id.to_string())),
        }
    }

    /// Bound placeholders for a list of ids, comma-separated.
    fn id_params(&self, b: &mut SqlBuilder, ids: &[RecordId]) -> Result<String> {
        let ps = ids
            .iter()
            .map(|id| Ok(b.param(self.id_bind(id)?)))
            .collect::<Result<Vec<_>>>()?;
        Ok(ps.join(", "))
    }

    /// The column list every record query selects, in `decode` order.
    fn record_columns(&self) -> String {
        let int_id = self.schema.id == IdKind::Int;
        let text_time = self.schema.created == TimeKind::Text;
        let (id, args, created) = match self.dialect {
            Dialect::Postgres => (
                if int_id { "id::bigint" } else { "id::text" },
                "args::text",
                if text_time {
                    "criada_em::text"
                } else {
                    "criada_em"
                },
            ),
            Dialect::MySql => (
                if int_id {
                    "CAST(id AS SIGNED)"
                } else {
                    "CAST(id AS CHAR)"
                },
                "CAST(args AS CHAR)",
                if text_time {
                    "CAST(criada_em AS CHAR)"
                } else {
                    "criada_em"
                },
            ),
            Dialect::Sqlite => (
                if int_id { "id" } else { "CAST(id AS TEXT)" },
                "CAST(args AS TEXT)",
                "criada_em",
            ),
        };
        let flag = match self.schema.flag {
            FlagKind::Bool => "COALESCE(reprocessada, false)",
            FlagKind::Int => "(COALESCE(reprocessada, 0) <> 0)",
        };
        format!("{id}, task_original, {args}, motivo, {created}, {flag}")
    }

    /// Translates the selection into a WHERE clause. Returns the clause and whether it is
    /// exact (so that LIMIT may be pushed down).
    fn where_clause(&self, sel: &Selection, b: &mut SqlBuilder) -> Result<(String, bool)> {
        let mut preds: Vec<String> = Vec::new();
        let mut exact = sel.exact_in_sql();
        match sel.replayed {
            ReplayedFilter::Pending => preds.push(self.pending_sql().to_string()),
            ReplayedFilter::Only => preds.push(self.replayed_sql().to_string()),
            ReplayedFilter::All => {}
        }
        if let Some(m) = &sel.motivo {
            exact &= self.motivo_pred(m, sel.ignore_case, b, &mut preds);
        }
        if !sel.tasks.is_empty() {
            let ps: Vec<String> = sel
                .tasks
                .iter()
                .map(|t| b.param(Bind::Text(t.clone())))
                .collect();
            preds.push(format!("task_original IN ({})", ps.join(", ")));
            if self.dialect == Dialect::MySql {
                exact = false; // case-insensitive collations: superset
            }
        }
        if !sel.ids.is_empty() {
            let ps = self.id_params(b, &sel.ids)?;
            preds.push(format!("id IN ({ps})"));
        }
        for (bound, op) in [(sel.since, ">="), (sel.until, "<")] {
            if let Some(t) = bound {
                exact &= self.time_pred(t, op, b, &mut preds);
            }
        }
        let clause = if preds.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", preds.join(" AND "))
        };
        Ok((clause, exact))
    }

    /// Pushes down `--motivo` where it can; returns whether SQL decides it exactly (an
    /// ignore-case needle is never exact: `Selection::exact_in_sql` already says so).
    fn motivo_pred(
        &self,
        m: &str,
        ignore_case: bool,
        b: &mut SqlBuilder,
        preds: &mut Vec<String>,
    ) -> bool {
        let ascii = m.is_ascii();
        if ignore_case {
            // Case folding differs between databases and Rust: a pre-filter only, and
            // only for ASCII needles where every engine folds alike.
            if ascii {
                let p = b.param(Bind::Text(format!("%{}%", like_escape(&m.to_lowercase()))));
                preds.push(match self.dialect {
                    Dialect::Sqlite => format!("motivo LIKE {p} ESCAPE '!'"),
                    _ => format!("LOWER(motivo) LIKE {p} ESCAPE '!'"),
                });
            }
            return true;
        }
        match self.dialect {
            Dialect::Postgres => {
                let p = b.param(Bind::Text(m.to_string()));
                preds.push(format!("strpos(motivo, {p}) > 0"));
            }
            Dialect::Sqlite => {
                let p = b.param(Bind::Text(m.to_string()));
                preds.push(format!("instr(motivo, {p}) > 0"));
            }
            Dialect::MySql if ascii => {
                // Byte-wise search: case-sensitive whatever the column's collation.
                let p = b.param(Bind::Text(m.to_string()));
                preds.push(format!("INSTR(motivo, CAST({p} AS BINARY)) > 0"));
            }
            Dialect::MySql => {
                // Collation-based LIKE selects a superset; the client decides.
                let p = b.param(Bind::Text(format!("%{}%", like_escape(m))));
                preds.push(format!("motivo LIKE {p} ESCAPE '!'"));
                return false;
            }
        }
        true
    }

    /// Pushes down one side of `--since`/`--until`; returns whether SQL decides it exactly.
    fn time_pred(
        &self,
        t: DateTime<Utc>,
        op: &str,
        b: &mut SqlBuilder,
        preds: &mut Vec<String>,
    ) -> bool {
        let p = b.param(time_bind(self.schema.created, t));
        match (self.dialect, self.schema.created) {
            (Dialect::Sqlite, _) => {
                // Text timestamps compare as instants via julianday; rows stored in other
                // shapes, and text julianday cannot read, are left for the client to decide
                // (and report).
                preds.push(format!(
                    "(typeof(criada_em) <> 'text' OR julianday(criada_em) IS NULL OR julianday(criada_em) {op} julianday({p}))"
                ));
                false
            }
            (_, TimeKind::Text) => false,
            _ => {
                preds.push(format!("criada_em {op} {p}"));
                true
            }
        }
    }
}

/// A point in time bound the way the column compares.
fn time_bind(kind: TimeKind, t: DateTime<Utc>) -> Bind {
    match kind {
        TimeKind::Tz => Bind::Tz(t),
        TimeKind::Naive => Bind::Naive(t.naive_utc()),
        TimeKind::Text => Bind::Text(t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::table::TableName;
    use crate::source::table::schema::TableSchema;
    use crate::source::table::url::quote_ident;
    use chrono::TimeZone;

    /// What `dlq init` creates, as each database reports it.
    fn layout(dialect: Dialect) -> Layout {
        let (flag, created) = match dialect {
            Dialect::Postgres => (FlagKind::Bool, TimeKind::Tz),
            Dialect::MySql => (FlagKind::Int, TimeKind::Naive),
            Dialect::Sqlite => (FlagKind::Int, TimeKind::Text),
        };
        let schema = TableSchema {
            id: IdKind::Int,
            created,
            flag,
            flag_nullable: false,
            replayed_at: Some(created),
        };
        Layout::new(
            dialect,
            &TableName::parse("app.tasks_falhadas").unwrap(),
            schema,
        )
    }

    fn at() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 11, 2, 10, 0, 0).unwrap()
    }

    /// `--motivo IntegrityError --task a --since T --limit 5`, pending rows.
    fn selection() -> Selection {
        Selection {
            motivo: Some("IntegrityError".into()),
            tasks: vec!["a".into()],
            since: Some(at()),
            limit: Some(5),
            ..Default::default()
        }
    }

    const IDS: [RecordId; 2] = [RecordId::Int(7), RecordId::Int(9)];

    #[test]
    fn like_escaping() {
        assert_eq!(like_escape("100%_done!"), "100!%!_done!!");
    }

    #[test]
    fn identifiers_are_quoted_per_dialect() {
        let t = TableName::parse("app.tasks_falhadas").unwrap();
        let pg = quote_ident(Dialect::Postgres, &t);
        assert_eq!(pg, "\"app\".\"tasks_falhadas\"");
        assert_eq!(quote_ident(Dialect::MySql, &t), "`app`.`tasks_falhadas`");
        let plain = TableName::parse("tasks_falhadas").unwrap();
        assert_eq!(quote_ident(Dialect::Sqlite, &plain), "\"tasks_falhadas\"");
    }

    #[test]
    fn select_with_a_selection() {
        let s = layout(Dialect::Postgres).select_stmt(&selection()).unwrap();
        assert_eq!(
            s.sql,
            "SELECT id::bigint, task_original, args::text, motivo, criada_em, COALESCE(reprocessada, false) \
             FROM \"app\".\"tasks_falhadas\" WHERE NOT reprocessada AND strpos(motivo, $1) > 0 \
             AND task_original IN ($2) AND criada_em >= $3 ORDER BY id LIMIT 6"
        );
        assert_eq!(
            s.binds,
            [
                Bind::Text("IntegrityError".into()),
                Bind::Text("a".into()),
                Bind::Tz(at())
            ]
        );
        // MySQL: task names compare by collation, so no LIMIT is pushed down.
        let s = layout(Dialect::MySql).select_stmt(&selection()).unwrap();
        assert_eq!(
            s.sql,
            "SELECT CAST(id AS SIGNED), task_original, CAST(args AS CHAR), motivo, criada_em, (COALESCE(reprocessada, 0) <> 0) \
             FROM `app`.`tasks_falhadas` WHERE reprocessada = 0 AND INSTR(motivo, CAST(? AS BINARY)) > 0 \
             AND task_original IN (?) AND criada_em >= ? ORDER BY id"
        );
        assert_eq!(s.binds[2], Bind::Naive(at().naive_utc()));
        let s = layout(Dialect::Sqlite).select_stmt(&selection()).unwrap();
        assert_eq!(
            s.sql,
            "SELECT id, task_original, CAST(args AS TEXT), motivo, criada_em, (COALESCE(reprocessada, 0) <> 0) \
             FROM \"app\".\"tasks_falhadas\" WHERE reprocessada = 0 AND instr(motivo, ?) > 0 \
             AND task_original IN (?) AND (typeof(criada_em) <> 'text' OR julianday(criada_em) IS NULL \
             OR julianday(criada_em) >= julianday(?)) ORDER BY id"
        );
        assert_eq!(s.binds[2], Bind::Text("2026-11-02T10:00:00.000000Z".into()));
    }

    #[test]
    fn ignore_case_and_ids() {
        let sel = Selection {
            motivo: Some("Timeout_50%".into()),
            ignore_case: true,
            ids: IDS.to_vec(),
            replayed: ReplayedFilter::All,
            limit: Some(3),
            ..Default::default()
        };
        let s = layout(Dialect::Postgres).select_stmt(&sel).unwrap();
        assert_eq!(
            s.sql,
            "SELECT id::bigint, task_original, args::text, motivo, criada_em, COALESCE(reprocessada, false) \
             FROM \"app\".\"tasks_falhadas\" WHERE LOWER(motivo) LIKE $1 ESCAPE '!' AND id IN ($2, $3) ORDER BY id"
        );
        assert_eq!(
            s.binds,
            [
                Bind::Text("%timeout!_50!%%".into()),
                Bind::I64(7),
                Bind::I64(9)
            ]
        );
        assert!(
            layout(Dialect::Postgres)
                .count_stmt(&sel)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn count_and_summary() {
        let sel = Selection {
            replayed: ReplayedFilter::Only,
            ..Default::default()
        };
        let s = layout(Dialect::MySql).count_stmt(&sel).unwrap().unwrap();
        assert_eq!(
            s.sql,
            "SELECT COUNT(*) FROM `app`.`tasks_falhadas` WHERE COALESCE(reprocessada, 0) <> 0"
        );
        let sum = layout(Dialect::Postgres).summary_sql();
        assert_eq!(
            sum.pending,
            "SELECT COUNT(*) FROM \"app\".\"tasks_falhadas\" WHERE NOT reprocessada"
        );
        assert!(
            sum.oldest
                .ends_with("WHERE NOT reprocessada ORDER BY criada_em LIMIT 1")
        );
        assert_eq!(
            sum.reasons,
            "SELECT motivo, COUNT(*) FROM \"app\".\"tasks_falhadas\" WHERE NOT reprocessada GROUP BY motivo"
        );
    }

    #[test]
    fn claim_locks_what_is_still_pending() {
        let s = layout(Dialect::Postgres)
            .claim_stmt(&IDS, ReplayedFilter::Pending)
            .unwrap();
        assert_eq!(
            s.sql,
            "SELECT id::bigint, task_original, args::text, motivo, criada_em, COALESCE(reprocessada, false) \
             FROM \"app\".\"tasks_falhadas\" WHERE id IN ($1, $2) AND NOT reprocessada ORDER BY id FOR UPDATE SKIP LOCKED"
        );
        assert_eq!(s.binds, [Bind::I64(7), Bind::I64(9)]);
        let s = layout(Dialect::MySql)
            .claim_stmt(&IDS, ReplayedFilter::Only)
            .unwrap();
        assert!(
            s.sql.ends_with(
                "WHERE id IN (?, ?) AND COALESCE(reprocessada, 0) <> 0 ORDER BY id FOR UPDATE SKIP LOCKED"
            ),
            "{}",
            s.sql
        );
        // SQLite has no row locks: the claim runs inside BEGIN IMMEDIATE.
        let s = layout(Dialect::Sqlite)
            .claim_stmt(&IDS, ReplayedFilter::All)
            .unwrap();
        assert!(
            s.sql.ends_with("WHERE id IN (?, ?) ORDER BY id"),
            "{}",
            s.sql
        );
    }

    #[test]
    fn a_text_id_for_an_integer_column_is_refused() {
        let err = layout(Dialect::Postgres)
            .claim_stmt(&[RecordId::Text("x".into())], ReplayedFilter::Pending)
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "--id \"x\": the id column of app.tasks_falhadas is an integer"
        );
    }

    #[test]
    fn mark_sets_the_flag_and_when() {
        let s = layout(Dialect::Postgres).mark_stmt(&IDS, at()).unwrap();
        assert_eq!(
            s.sql,
            "UPDATE \"app\".\"tasks_falhadas\" SET reprocessada = $1, reprocessada_em = $2 WHERE id IN ($3, $4)"
        );
        assert_eq!(
            s.binds,
            [Bind::Bool(true), Bind::Tz(at()), Bind::I64(7), Bind::I64(9)]
        );
        let mut lite = layout(Dialect::Sqlite);
        lite.schema.replayed_at = None;
        let s = lite.mark_stmt(&IDS, at()).unwrap();
        assert_eq!(
            s.sql,
            "UPDATE \"app\".\"tasks_falhadas\" SET reprocessada = ? WHERE id IN (?, ?)"
        );
        assert_eq!(s.binds[0], Bind::I64(1));
    }

    #[test]
    fn archive_select_and_delete() {
        let sel = Selection {
            tasks: vec!["a".into()],
            limit: Some(5),
            ..Default::default()
        };
        let pg = layout(Dialect::Postgres);
        let s = pg.archive_select_stmt(&sel, true).unwrap();
        assert!(
            s.sql.ends_with(
                "WHERE NOT reprocessada AND task_original IN ($1) ORDER BY id LIMIT 5 FOR UPDATE SKIP LOCKED"
            ),
            "{}",
            s.sql
        );
        let s = pg.archive_select_stmt(&sel, false).unwrap();
        assert!(s.sql.ends_with("ORDER BY id LIMIT 5"), "{}", s.sql);
        let s = layout(Dialect::MySql)
            .archive_select_stmt(&sel, true)
            .unwrap();
        assert!(
            s.sql.ends_with("ORDER BY id FOR UPDATE SKIP LOCKED"),
            "{}",
            s.sql
        );
        let s = layout(Dialect::Sqlite)
            .archive_select_stmt(&sel, true)
            .unwrap();
        assert!(s.sql.ends_with("ORDER BY id LIMIT 5"), "{}", s.sql);

        let s = layout(Dialect::MySql).delete_stmt(&IDS).unwrap();
        assert_eq!(
            s.sql,
            "DELETE FROM `app`.`tasks_falhadas` WHERE id IN (?, ?)"
        );
        let s = pg.delete_stmt(&IDS).unwrap();
        assert_eq!(
            s.sql,
            "DELETE FROM \"app\".\"tasks_falhadas\" WHERE id IN ($1, $2)"
        );
        assert_eq!(s.binds, [Bind::I64(7), Bind::I64(9)]);
    }
}

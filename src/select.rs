//! The selection: which dead letters a command acts on. One definition used by every
//! command and every source. Sources may push parts of it down (SQL); `matches` is
//! always the final word, so a pushed-down predicate only has to be a superset.

use crate::jq::JqFilter;
use crate::model::{DeadLetter, RecordId};
use chrono::{DateTime, Utc};
use regex::Regex;

/// Which rows by their `reprocessada` flag. Queue messages are never "replayed".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum ReplayedFilter {
    /// Default: only what was not replayed yet.
    #[default]
    Pending,
    All,
    Only,
}

#[derive(Debug, Default)]
pub(crate) struct Selection {
    /// Reason contains this text.
    pub(crate) motivo: Option<String>,
    /// `--motivo` compares case-insensitively.
    pub(crate) ignore_case: bool,
    /// Regex over reason, task name and payload text.
    pub(crate) pattern: Option<Regex>,
    /// Task name equals one of these.
    pub(crate) tasks: Vec<String>,
    /// created_at >= since.
    pub(crate) since: Option<DateTime<Utc>>,
    /// created_at < until (the earliest of `--until` and `--older-than`).
    pub(crate) until: Option<DateTime<Utc>>,
    pub(crate) jq: Option<JqFilter>,
    pub(crate) ids: Vec<RecordId>,
    /// The reason's fingerprint equals this (a group of `filter --group-by motivo` or of
    /// the browser): decided here, never in SQL.
    pub(crate) fingerprint: Option<String>,
    pub(crate) replayed: ReplayedFilter,
    pub(crate) limit: Option<u64>,
}

/// `--id 123` parses as an integer, while a queue message's id is text (a message_id may
/// well be "123"): ids are the same when they are equal or read the same.
fn same_id(wanted: &RecordId, id: &RecordId) -> bool {
    wanted == id || wanted.to_string() == id.to_string()
}

/// A jq runtime error on one record: that record is not selected.
#[derive(Debug, Clone)]
pub(crate) struct EvalError {
    pub(crate) id: RecordId,
    pub(crate) message: String,
}

impl Selection {
    /// True when every predicate can be decided by an exact SQL translation, so a
    /// source may push `LIMIT` down.
    pub(crate) fn exact_in_sql(&self) -> bool {
        self.pattern.is_none()
            && self.jq.is_none()
            && self.fingerprint.is_none()
            && !(self.ignore_case && self.motivo.is_some())
    }

    /// Whether a time-based bound exists (the record must have a timestamp).
    pub(crate) fn has_time_bounds(&self) -> bool {
        self.since.is_some() || self.until.is_some()
    }

    /// The final decision for one record.
    pub(crate) fn matches(&self, r: &DeadLetter) -> Result<bool, EvalError> {
        if !self.matches_cheap(r) {
            return Ok(false);
        }
        if let Some(jq) = &self.jq {
            return jq.record_is_truthy(r).map_err(|message| EvalError {
                id: r.id.clone(),
                message,
            });
        }
        Ok(true)
    }

    fn matches_cheap(&self, r: &DeadLetter) -> bool {
        match self.replayed {
            ReplayedFilter::Pending if r.replayed => return false,
            ReplayedFilter::Only if !r.replayed => return false,
            _ => {}
        }
        if !self.ids.is_empty() && !self.ids.iter().any(|i| same_id(i, &r.id)) {
            return false;
        }
        if !self.tasks.is_empty() {
            // A queue message also answers to the queue it goes back to.
            let origin = r.origin_queue();
            let hit = |name: &String| r.task.as_ref() == Some(name) || origin == Some(name);
            if !self.tasks.iter().any(hit) {
                return false;
            }
        }
        if let Some(needle) = &self.motivo {
            let hay = r.motivo.as_deref().unwrap_or("");
            let found = if self.ignore_case {
                hay.to_lowercase().contains(&needle.to_lowercase())
            } else {
                hay.contains(needle.as_str())
            };
            if !found {
                return false;
            }
        }
        if let Some(fp) = &self.fingerprint
            && crate::fingerprint::fingerprint(r.motivo.as_deref().unwrap_or("")) != *fp
        {
            return false;
        }
        if self.has_time_bounds() {
            let Some(t) = r.created_at else {
                return false;
            };
            if self.since.is_some_and(|s| t < s) || self.until.is_some_and(|u| t >= u) {
                return false;
            }
        }
        if let Some(re) = &self.pattern {
            let in_reason = r.motivo.as_deref().is_some_and(|m| re.is_match(m));
            let in_task = r.task.as_deref().is_some_and(|t| re.is_match(t));
            if !(in_reason || in_task || r.payload_matches(re)) {
                return false;
            }
        }
        true
    }

    /// One line describing the selection, for plans and logs.
    pub(crate) fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = &self.motivo {
            let ci = if self.ignore_case {
                " (case-insensitive)"
            } else {
                ""
            };
            parts.push(format!("motivo contains {m:?}{ci}"));
        }
        if let Some(p) = &self.pattern {
            parts.push(format!("matches /{}/", p.as_str()));
        }
        if let Some(fp) = &self.fingerprint {
            parts.push(format!("reason group {fp:?}"));
        }
        if !self.tasks.is_empty() {
            parts.push(format!("task in [{}]", self.tasks.join(", ")));
        }
        if let Some(s) = self.since {
            parts.push(format!("created >= {}", crate::model::rfc3339(&s)));
        }
        if let Some(u) = self.until {
            parts.push(format!("created < {}", crate::model::rfc3339(&u)));
        }
        if let Some(j) = &self.jq {
            parts.push(format!("jq {:?}", j.source()));
        }
        if !self.ids.is_empty() {
            let ids: Vec<String> = self.ids.iter().map(ToString::to_string).collect();
            parts.push(format!("id in [{}]", ids.join(", ")));
        }
        match self.replayed {
            ReplayedFilter::Pending => parts.push("not yet replayed".into()),
            ReplayedFilter::Only => parts.push("already replayed".into()),
            ReplayedFilter::All => {}
        }
        if let Some(l) = self.limit {
            parts.push(format!("first {l}"));
        }
        if parts.is_empty() {
            "everything".into()
        } else {
            parts.join(", ")
        }
    }
}

/// The one place a selection decides, for every command and source: offer each candidate
/// record, and it is taken or skipped. Holds the limit, the tally of records `--where` could
/// not evaluate (they are never selected), and the one warning that reports them.
pub(crate) struct Selector<'a> {
    sel: &'a Selection,
    taken: u64,
    /// The first few records `--where` failed on; all are counted.
    eval_errors: Vec<EvalError>,
    eval_error_count: u64,
    /// Records a time bound could not decide: their stored time is unreadable.
    unreadable_times: u64,
    unreadable_example: Option<(RecordId, String)>,
}

impl<'a> Selector<'a> {
    pub(crate) fn new(sel: &'a Selection) -> Self {
        Selector {
            sel,
            taken: 0,
            eval_errors: Vec::new(),
            eval_error_count: 0,
            unreadable_times: 0,
            unreadable_example: None,
        }
    }

    pub(crate) fn selection(&self) -> &'a Selection {
        self.sel
    }

    /// How many records were taken.
    pub(crate) fn taken(&self) -> u64 {
        self.taken
    }

    /// `--limit` reached: nothing more is taken.
    pub(crate) fn full(&self) -> bool {
        self.sel.limit.is_some_and(|l| self.taken >= l)
    }

    /// True when `rec` is taken (it counts towards the limit).
    pub(crate) fn offer(&mut self, rec: &DeadLetter) -> bool {
        if self.full() {
            return false;
        }
        if let Some(raw) = &rec.unreadable_time
            && self.sel.has_time_bounds()
        {
            self.unreadable_times += 1;
            self.unreadable_example
                .get_or_insert_with(|| (rec.id.clone(), raw.clone()));
        }
        match self.sel.matches(rec) {
            Ok(true) => {
                self.taken += 1;
                true
            }
            Ok(false) => false,
            Err(e) => {
                self.eval_error_count += 1;
                if self.eval_errors.len() < 3 {
                    self.eval_errors.push(e);
                }
                false
            }
        }
    }

    /// A warning line when `--where` failed on some records, or a time bound met records
    /// whose stored time is unreadable (they are never selected by it), else `None`.
    pub(crate) fn warning(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(first) = self.eval_errors.first() {
            parts.push(format!(
                "--where could not be evaluated on {} record(s), which were not selected (e.g. id {}: {})",
                self.eval_error_count, first.id, first.message
            ));
        }
        if let Some((id, raw)) = &self.unreadable_example {
            parts.push(format!(
                "{} record(s) have a time dlq cannot read (e.g. id {id}: {raw:?}): --since, --until and --older-than never select them; fix criada_em or select them by --id",
                self.unreadable_times
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }
}

/// A [`Selector`] over a stream of candidate records from any source.
pub(crate) struct Selected<'a> {
    rx: tokio::sync::mpsc::Receiver<anyhow::Result<DeadLetter>>,
    selector: Selector<'a>,
}

impl<'a> Selected<'a> {
    pub(crate) fn new(
        rx: tokio::sync::mpsc::Receiver<anyhow::Result<DeadLetter>>,
        sel: &'a Selection,
    ) -> Self {
        Selected {
            rx,
            selector: Selector::new(sel),
        }
    }

    /// The next selected record; `None` at the end or once the limit is reached.
    pub(crate) async fn next(&mut self) -> Option<anyhow::Result<DeadLetter>> {
        while !self.selector.full() {
            match self.rx.recv().await? {
                Ok(rec) if self.selector.offer(&rec) => return Some(Ok(rec)),
                Ok(_) => {}
                Err(e) => return Some(Err(e)),
            }
        }
        None
    }

    /// True when the limit stopped the stream and at least one more record matches.
    pub(crate) async fn has_more(&mut self) -> anyhow::Result<bool> {
        if !self.selector.full() {
            return Ok(false);
        }
        let sel = self.selector.selection();
        while let Some(rec) = self.rx.recv().await {
            if matches!(sel.matches(&rec?), Ok(true)) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// A warning line when `--where` failed on some records, else `None`.
    pub(crate) fn eval_warning(&self) -> Option<String> {
        self.selector.warning()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::SourceKind;
    use serde_json::json;

    fn rec(
        id: i64,
        task: &str,
        motivo: &str,
        at: &str,
        replayed: bool,
        payload: serde_json::Value,
    ) -> DeadLetter {
        DeadLetter {
            task: Some(task.into()),
            motivo: Some(motivo.into()),
            created_at: Some(at.parse().unwrap()),
            replayed,
            payload,
            ..DeadLetter::blank(SourceKind::Table, "t", RecordId::Int(id))
        }
    }

    #[test]
    fn pattern_sees_the_decoded_text_whatever_the_stored_escapes() {
        let sel = |p: &str| Selection {
            pattern: Some(regex::Regex::new(p).unwrap()),
            replayed: ReplayedFilter::All,
            ..Default::default()
        };
        // As Python's json.dumps / MariaDB / SQLite store it, and as PostgreSQL's jsonb does.
        for stored in [
            r#"{"nome": "Jo\u00e3o", "acao": "a\u00e7\u00e3o"}"#,
            r#"{"nome": "João", "acao": "ação"}"#,
        ] {
            let mut r = rec(
                1,
                "t",
                "m",
                "2026-01-01T00:00:00Z",
                false,
                serde_json::from_str(stored).unwrap(),
            );
            r.payload_text = Some(stored.into());
            assert!(sel("ação").matches(&r).unwrap(), "{stored}");
            assert!(sel("João").matches(&r).unwrap(), "{stored}");
            // Patterns written against the stored spacing still match.
            assert!(sel(r#""nome": "#).matches(&r).unwrap(), "{stored}");
            assert!(!sel("Maria").matches(&r).unwrap(), "{stored}");
        }
    }

    fn sample() -> Vec<DeadLetter> {
        vec![
            rec(
                1,
                "processar_pagamento",
                "IntegrityError: null value",
                "2026-11-01T00:00:00Z",
                false,
                json!({"pedido_id": 1}),
            ),
            rec(
                2,
                "processar_pagamento",
                "integrityerror lower",
                "2026-11-10T00:00:00Z",
                false,
                json!({"pedido_id": 2}),
            ),
            rec(
                3,
                "enviar_email",
                "TimeoutError",
                "2026-11-20T00:00:00Z",
                false,
                json!([3, "x@y"]),
            ),
            rec(
                4,
                "processar_pagamento",
                "IntegrityError: dup",
                "2026-11-25T00:00:00Z",
                true,
                json!({"pedido_id": 4}),
            ),
        ]
    }

    fn ids(sel: &Selection) -> Vec<i64> {
        sample()
            .iter()
            .filter(|r| sel.matches(r).unwrap_or(false))
            .map(|r| match r.id {
                RecordId::Int(i) => i,
                _ => unreachable!(),
            })
            .collect()
    }

    #[test]
    fn default_excludes_replayed() {
        assert_eq!(ids(&Selection::default()), vec![1, 2, 3]);
        let all = Selection {
            replayed: ReplayedFilter::All,
            ..Default::default()
        };
        assert_eq!(ids(&all), vec![1, 2, 3, 4]);
        let only = Selection {
            replayed: ReplayedFilter::Only,
            ..Default::default()
        };
        assert_eq!(ids(&only), vec![4]);
    }

    #[test]
    fn motivo_is_case_sensitive_unless_asked() {
        let s = Selection {
            motivo: Some("IntegrityError".into()),
            ..Default::default()
        };
        assert_eq!(ids(&s), vec![1]);
        let s = Selection {
            motivo: Some("IntegrityError".into()),
            ignore_case: true,
            ..Default::default()
        };
        assert_eq!(ids(&s), vec![1, 2]);
        assert!(!s.exact_in_sql());
    }

    #[test]
    fn pattern_searches_reason_task_and_payload() {
        let s = Selection {
            pattern: Some(Regex::new("x@y").unwrap()),
            ..Default::default()
        };
        assert_eq!(ids(&s), vec![3]);
        let s = Selection {
            pattern: Some(Regex::new("^enviar").unwrap()),
            ..Default::default()
        };
        assert_eq!(ids(&s), vec![3]);
        let s = Selection {
            pattern: Some(Regex::new(r"Error: \w+").unwrap()),
            ..Default::default()
        };
        assert_eq!(ids(&s), vec![1]);
    }

    #[test]
    fn time_window_and_ids_and_tasks() {
        let s = Selection {
            since: Some("2026-11-05T00:00:00Z".parse().unwrap()),
            until: Some("2026-11-20T00:00:00Z".parse().unwrap()),
            ..Default::default()
        };
        assert_eq!(ids(&s), vec![2]);
        let s = Selection {
            ids: vec![RecordId::Int(3), RecordId::Int(4)],
            ..Default::default()
        };
        assert_eq!(ids(&s), vec![3]);
        let s = Selection {
            tasks: vec!["enviar_email".into()],
            ..Default::default()
        };
        assert_eq!(ids(&s), vec![3]);
    }

    #[test]
    fn jq_over_the_record() {
        let s = Selection {
            jq: Some(JqFilter::compile(".payload.pedido_id >= 2").unwrap()),
            ..Default::default()
        };
        // Record 3 has an array payload: indexing it with a key is an error -> not selected.
        let errs: Vec<_> = sample().iter().filter_map(|r| s.matches(r).err()).collect();
        assert_eq!(errs.len(), 1);
        assert_eq!(ids(&s), vec![2]);
    }

    fn queue_rec(id: &str, task: Option<&str>, origin: Option<&str>) -> DeadLetter {
        DeadLetter {
            task: task.map(Into::into),
            motivo: Some("rejected".into()),
            payload: json!({}),
            headers: Some(json!({})),
            death: Some(json!({"origin_queue": origin, "deaths": []})),
            properties: Some(json!({})),
            ..DeadLetter::blank(SourceKind::Queue, "x.dlq", RecordId::Text(id.into()))
        }
    }

    #[test]
    fn queue_task_matches_celery_task_or_origin_queue() {
        let celery = queue_rec("a", Some("app.tasks.enviar"), Some("celery"));
        let plain = queue_rec(
            "b",
            Some("matriculas.processar"),
            Some("matriculas.processar"),
        );
        let sel = |t: &str| Selection {
            tasks: vec![t.into()],
            ..Default::default()
        };
        assert!(sel("app.tasks.enviar").matches(&celery).unwrap());
        assert!(sel("celery").matches(&celery).unwrap());
        assert!(!sel("celery").matches(&plain).unwrap());
        assert!(sel("matriculas.processar").matches(&plain).unwrap());
        // A table row has no origin queue: only its task counts.
        let mut row = rec(9, "t", "m", "2026-11-01T00:00:00Z", false, json!({}));
        row.death = Some(json!({"origin_queue": "celery"}));
        assert!(!sel("celery").matches(&row).unwrap());
    }

    #[test]
    fn text_ids_match_ids_that_parse_as_numbers() {
        let r = queue_rec("123", None, None);
        let s = Selection {
            ids: vec![RecordId::parse("123")],
            ..Default::default()
        };
        assert!(s.matches(&r).unwrap());
        let s = Selection {
            ids: vec![RecordId::parse("h:0123abcd")],
            ..Default::default()
        };
        assert!(!s.matches(&r).unwrap());
    }

    #[test]
    fn describe_is_readable() {
        let s = Selection {
            motivo: Some("IntegrityError".into()),
            limit: Some(5),
            ..Default::default()
        };
        assert_eq!(
            s.describe(),
            "motivo contains \"IntegrityError\", not yet replayed, first 5"
        );
    }
}

//! The Prometheus text exposition format (version 0.0.4) of the gathered figures: gauges
//! only, one family after another, label values escaped.

use super::SourceFigures;
use crate::source::overview::top_reasons;
use chrono::{DateTime, Utc};
use std::fmt::Write as _;

/// The `Content-Type` of this format.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Reason fingerprints per source; the rest are summed under `other`.
const TOP_REASONS: usize = 20;

/// The whole exposition text.
pub(crate) fn render(sources: &[SourceFigures], now: DateTime<Utc>) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "dlq_dead_letters",
        "Dead letters waiting: pending rows of the failed-task table, ready messages of a DLQ.",
        sources.iter().map(|s| (labels(s, None), s.pending)),
    );
    family(
        &mut out,
        "dlq_oldest_age_seconds",
        "Seconds the oldest pending dead letter has waited (0 when none; queues only with --sample).",
        sources
            .iter()
            .filter_map(|s| Some((labels(s, None), s.oldest_age_seconds(now)?.max(0) as u64))),
    );
    family(
        &mut out,
        "dlq_dead_letters_by_reason",
        "Pending dead letters per reason fingerprint: the table exactly (top 20 and other), a queue in its --sample head.",
        sources.iter().flat_map(|s| {
            reasons(s)
                .into_iter()
                .map(move |(fp, n)| (labels(s, Some(&fp)), n))
        }),
    );
    family(
        &mut out,
        "dlq_replayed",
        "Rows of the failed-task table already replayed (reprocessada).",
        sources
            .iter()
            .filter_map(|s| Some((labels(s, None), s.replayed?))),
    );
    out
}

/// One gauge family: `# HELP`, `# TYPE`, then its samples.
fn family(out: &mut String, name: &str, help: &str, samples: impl Iterator<Item = (String, u64)>) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} gauge");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }
}

fn labels(s: &SourceFigures, reason: Option<&str>) -> String {
    let mut l = format!(
        "source=\"{}\",location=\"{}\"",
        s.source,
        escape(&s.location)
    );
    if let Some(r) = reason {
        let _ = write!(l, ",reason=\"{}\"", escape(r));
    }
    l
}

/// The top fingerprints of a source, then `other` for the rest.
fn reasons(s: &SourceFigures) -> Vec<(String, u64)> {
    let all = top_reasons(s.reasons.iter().cloned(), usize::MAX);
    let rest: u64 = all.iter().skip(TOP_REASONS).map(|r| r.count).sum();
    let mut v: Vec<(String, u64)> = all
        .into_iter()
        .take(TOP_REASONS)
        .map(|r| (r.fingerprint, r.count))
        .collect();
    if rest > 0 {
        v.push(("other".into(), rest));
    }
    v
}

/// A label value as the format wants it: backslash, double quote and line feed escaped.
pub(crate) fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(location: &str, reasons: Vec<(String, u64)>) -> SourceFigures {
        SourceFigures {
            source: "table",
            location: location.into(),
            pending: reasons.iter().map(|r| r.1).sum(),
            oldest: None,
            read: true,
            new: None,
            reasons,
            replayed: Some(2),
            sampled: None,
            not_read: None,
            limit_risk: None,
        }
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape(r#"a\b"c"#), r#"a\\b\"c"#);
        assert_eq!(escape("x\ny"), "x\\ny");
    }

    #[test]
    fn reasons_beyond_the_top_are_other() {
        let many = (0..25u8)
            .map(|i| (format!("Err{}: x", (b'a' + i) as char), 1))
            .collect();
        let r = reasons(&source("t", many));
        assert_eq!(r.len(), TOP_REASONS + 1);
        assert_eq!(r.last().unwrap(), &("other".to_string(), 5));
    }

    #[test]
    fn families_have_help_and_type() {
        let text = render(&[source("t", vec![("E: \"q\"".into(), 3)])], Utc::now());
        for name in [
            "dlq_dead_letters",
            "dlq_oldest_age_seconds",
            "dlq_dead_letters_by_reason",
            "dlq_replayed",
        ] {
            assert!(text.contains(&format!("# TYPE {name} gauge\n")), "{text}");
        }
        assert!(text.contains("dlq_replayed{source=\"table\",location=\"t\"} 2\n"));
    }
}

//! `dlq check`: a Nagios-style check of every dead-letter source. The one command whose
//! exit codes are the plugin convention: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN. Every
//! failure (a bad threshold, an unreachable source) is therefore an UNKNOWN result here,
//! never an error for `run` to map.

use crate::error::Exit;
use crate::model::rfc3339;
use crate::monitor::{self, Request, SourceFigures};
use crate::output::{OutputFormat, Printer};
use crate::redact;
use crate::settings::Settings;
use anyhow::Result;
use chrono::{DateTime, Utc};
use serde::Serialize;

/// `dlq check`'s flags, as given: they are checked in `run`, where a bad value is UNKNOWN (3).
pub(crate) fn lower(a: crate::cli::CheckArgs) -> Options {
    Options {
        queues: a.source.queues,
        motivo_headers: a.source.motivo_header,
        force: a.source.force,
        sample: a.sample,
        warn_pending: a.warn_pending,
        crit_pending: a.crit_pending,
        warn_age: a.warn_age,
        crit_age: a.crit_age,
        warn_new: a.warn_new,
        crit_new: a.crit_new,
        new_within: a.new_within,
    }
}

/// The flags as given: checked here so that a bad value is UNKNOWN (3), not a usage error.
pub(crate) struct Options {
    /// `-Q`: only these queues.
    pub(crate) queues: Vec<String>,
    pub(crate) motivo_headers: Vec<String>,
    pub(crate) force: bool,
    pub(crate) sample: Option<String>,
    pub(crate) warn_pending: Option<String>,
    pub(crate) crit_pending: Option<String>,
    pub(crate) warn_age: Option<String>,
    pub(crate) crit_age: Option<String>,
    pub(crate) warn_new: Option<String>,
    pub(crate) crit_new: Option<String>,
    pub(crate) new_within: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "UPPERCASE")]
enum Status {
    Ok,
    Warning,
    Critical,
    Unknown,
}

impl Status {
    fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Warning => "WARNING",
            Status::Critical => "CRITICAL",
            Status::Unknown => "UNKNOWN",
        }
    }

    /// `Exit`'s variants carry the plugin convention's numbers 0..=3, under other names.
    fn exit(self) -> Exit {
        match self {
            Status::Ok => Exit::Ok,
            Status::Warning => Exit::Failure,
            Status::Critical => Exit::Usage,
            Status::Unknown => Exit::Partial,
        }
    }
}

/// One figure's levels: alert when the figure is above them.
#[derive(Debug, Clone, Default, Serialize)]
struct Limit {
    warn: Option<u64>,
    crit: Option<u64>,
    /// The levels as the user wrote them (`2h`), for messages.
    #[serde(skip)]
    shown: (Option<String>, Option<String>),
}

#[derive(Debug, Clone, Serialize)]
struct Thresholds {
    pending: Limit,
    age_seconds: Limit,
    new: Limit,
    new_within_seconds: u64,
    #[serde(skip)]
    new_within: String,
}

fn parse_thresholds(o: &Options) -> Result<Thresholds, String> {
    let within = seconds(&o.new_within).map_err(|e| format!("--new-within {e}"))?;
    if within == 0 {
        return Err("--new-within must be longer than 0s".into());
    }
    Ok(Thresholds {
        pending: limit("pending", &o.warn_pending, &o.crit_pending, count)?,
        age_seconds: limit("age", &o.warn_age, &o.crit_age, seconds)?,
        new: limit("new", &o.warn_new, &o.crit_new, count)?,
        new_within_seconds: within,
        new_within: o.new_within.trim().to_string(),
    })
}

fn limit(
    name: &str,
    warn: &Option<String>,
    crit: &Option<String>,
    parse: fn(&str) -> Result<u64, String>,
) -> Result<Limit, String> {
    let w = warn.as_deref().map(parse).transpose();
    let w = w.map_err(|e| format!("--warn-{name} {e}"))?;
    let c = crit.as_deref().map(parse).transpose();
    let c = c.map_err(|e| format!("--crit-{name} {e}"))?;
    if let (Some(w), Some(c)) = (w, c)
        && w > c
    {
        return Err(format!(
            "--warn-{name} {} is above --crit-{name} {}: the warning level must not exceed the critical one",
            warn.as_deref().unwrap_or_default(),
            crit.as_deref().unwrap_or_default()
        ));
    }
    Ok(Limit {
        warn: w,
        crit: c,
        shown: (
            warn.as_ref().map(|s| s.trim().to_string()),
            crit.as_ref().map(|s| s.trim().to_string()),
        ),
    })
}

fn count(s: &str) -> Result<u64, String> {
    s.trim()
        .parse::<u64>()
        .map_err(|_| format!("{s:?}: expected a whole number, 0 or more"))
}

fn seconds(s: &str) -> Result<u64, String> {
    let d = crate::when::parse_duration(s).map_err(|e| format!("{s:?}: {e}"))?;
    u64::try_from(d.num_seconds()).map_err(|_| format!("{s:?}: must not be negative"))
}

/// A figure above a level.
#[derive(Debug, Clone, Serialize)]
struct Alert {
    status: Status,
    text: String,
}

/// One source's result, as `-o json` shows it.
#[derive(Debug, Clone, Serialize)]
struct SourceCheck {
    source: &'static str,
    location: String,
    status: Status,
    pending: u64,
    oldest: Option<String>,
    oldest_age_seconds: Option<i64>,
    new: Option<u64>,
    /// Queue only: messages read at its head for `oldest` and `new`.
    sampled: Option<u64>,
    not_read: Option<String>,
    /// A delivery limit that can drop this DLQ's messages: a line of its own, not a status.
    #[serde(skip_serializing_if = "Option::is_none")]
    limit_risk: Option<String>,
    alerts: Vec<Alert>,
    thresholds: Thresholds,
}

/// The whole result.
#[derive(Debug, Clone, Serialize)]
struct Report {
    status: Status,
    summary: String,
    sources: Vec<SourceCheck>,
}

pub(crate) async fn run(settings: &Settings, printer: &Printer, opts: Options) -> Result<Exit> {
    let now = Utc::now();
    let parsed = parse_thresholds(&opts).and_then(|t| {
        let sample = opts.sample.as_deref().map(count).transpose();
        Ok((t, sample.map_err(|e| format!("--sample {e}"))?))
    });
    let (thresholds, sample) = match parsed {
        Ok(p) => p,
        Err(e) => return unknown(printer, &e),
    };
    let req = Request {
        queues: opts.queues,
        config_queues: settings.config_queues.clone(),
        motivo_headers: opts.motivo_headers,
        force: opts.force,
        sample,
        new_since: Some(now - chrono::Duration::seconds(thresholds.new_within_seconds as i64)),
    };
    let figures = match monitor::gather(&settings.endpoints, &req).await {
        Ok(f) => f,
        Err(e) => return unknown(printer, &crate::error::describe(&e)),
    };
    for w in &figures.warnings {
        printer.warn(w);
    }
    if figures.sources.is_empty() {
        return unknown(
            printer,
            "nothing to check: no database configured and no DLQ found (name queues with -Q)",
        );
    }
    let checks: Vec<SourceCheck> = figures
        .sources
        .iter()
        .map(|f| judge(f, &thresholds, now))
        .collect();
    let status = checks.iter().map(|c| c.status).max().unwrap_or(Status::Ok);
    let report = Report {
        status,
        summary: summary(&checks, status, &thresholds),
        sources: checks,
    };
    print(printer, &report)?;
    Ok(status.exit())
}

/// UNKNOWN when the settings themselves could not be built (a malformed URL, a bad config
/// file): there is no printer yet, so the plain first line only.
pub(crate) fn unknown_before_settings(e: &anyhow::Error) -> Exit {
    use std::io::Write as _;
    let reason = redact::scrub(&crate::error::describe(e));
    say!("error: {reason}");
    let _ = writeln!(std::io::stdout(), "DLQ UNKNOWN - {reason}");
    Status::Unknown.exit()
}

/// UNKNOWN for a command line clap refused (its message is already on stderr): the
/// plugin's first line on stdout.
pub(crate) fn unknown_usage(reason: &str) -> Exit {
    use std::io::Write as _;
    let reason = reason.strip_prefix("error: ").unwrap_or(reason);
    let _ = writeln!(std::io::stdout(), "DLQ UNKNOWN - {}", redact::scrub(reason));
    Status::Unknown.exit()
}

/// UNKNOWN with the reason, on stdout (what the monitoring system shows) and stderr.
fn unknown(printer: &Printer, reason: &str) -> Result<Exit> {
    let reason = redact::scrub(reason);
    say!("error: {reason}");
    let report = Report {
        status: Status::Unknown,
        summary: reason,
        sources: Vec::new(),
    };
    print(printer, &report)?;
    Ok(Status::Unknown.exit())
}

fn judge(f: &SourceFigures, t: &Thresholds, now: DateTime<Utc>) -> SourceCheck {
    let age = f.oldest_age_seconds(now);
    // A queue's `new` counts its head sample only: say so when that is not the whole queue.
    let partial = match f.sampled {
        Some(n) if n < f.pending => format!(" (in first {n})"),
        _ => String::new(),
    };
    let figures = [
        (
            Some(f.pending),
            &t.pending,
            format!("{} pending", f.pending),
        ),
        (
            age.map(|a| a.max(0) as u64),
            &t.age_seconds,
            format!("oldest {}", human(age.unwrap_or(0))),
        ),
        (
            f.new,
            &t.new,
            format!("{} new in {}{partial}", f.new.unwrap_or(0), t.new_within),
        ),
    ];
    let alerts: Vec<Alert> = figures
        .into_iter()
        .filter_map(|(value, limit, text)| alert(value?, limit, text))
        .collect();
    SourceCheck {
        source: f.source,
        location: f.location.clone(),
        status: alerts.iter().map(|a| a.status).max().unwrap_or(Status::Ok),
        pending: f.pending,
        oldest: f.oldest.as_ref().map(rfc3339),
        oldest_age_seconds: age,
        new: f.new,
        sampled: f.sampled,
        not_read: f.not_read.clone(),
        limit_risk: f.limit_risk.clone(),
        alerts,
        thresholds: t.clone(),
    }
}

fn alert(value: u64, limit: &Limit, text: String) -> Option<Alert> {
    let (status, level) = match (limit.crit, limit.warn) {
        (Some(c), _) if value > c => (Status::Critical, ("crit", &limit.shown.1)),
        (_, Some(w)) if value > w => (Status::Warning, ("warn", &limit.shown.0)),
        _ => return None,
    };
    Some(Alert {
        status,
        text: format!(
            "{text} ({} {})",
            level.0,
            level.1.as_deref().unwrap_or_default()
        ),
    })
}

/// The first line's text: the worst sources and what put them there, or the totals.
fn summary(checks: &[SourceCheck], status: Status, t: &Thresholds) -> String {
    let mut text = if status == Status::Ok {
        let pending: u64 = checks.iter().map(|c| c.pending).sum();
        let n = checks.len();
        format!(
            "{pending} pending in {n} source{}",
            if n == 1 { "" } else { "s" }
        )
    } else {
        checks
            .iter()
            .filter(|c| c.status == status)
            .map(|c| {
                let alerts: Vec<&str> = c
                    .alerts
                    .iter()
                    .filter(|a| a.status == status)
                    .map(|a| a.text.as_str())
                    .collect();
                format!("{} {}", c.location, alerts.join(", "))
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    // Age and new levels cannot judge a queue whose head was not read: never stay silent.
    let head_levels = [&t.age_seconds, &t.new]
        .iter()
        .any(|l| l.warn.is_some() || l.crit.is_some());
    let unread: Vec<&str> = checks
        .iter()
        .filter(|c| c.not_read.is_some())
        .map(|c| c.location.as_str())
        .collect();
    if head_levels && !unread.is_empty() {
        text.push_str(&format!("; age and new not read on {}", unread.join(", ")));
    }
    text
}

fn print(printer: &Printer, report: &Report) -> Result<()> {
    match printer.format {
        OutputFormat::Json => printer.data_line(&serde_json::to_string_pretty(report)?)?,
        OutputFormat::Ndjson => printer.data_line(&serde_json::to_string(report)?)?,
        OutputFormat::Table | OutputFormat::Csv => {
            printer.data_line(&redact::scrub(&first_line(report)))?;
            for c in &report.sources {
                printer.data_line(&source_line(c))?;
            }
            for risk in report.sources.iter().filter_map(|c| c.limit_risk.as_ref()) {
                printer.data_line(&format!("warning: {risk}"))?;
            }
        }
    }
    Ok(())
}

/// `DLQ CRITICAL - matriculas.dlq 1000 pending (crit 500) | 'matriculas.dlq'=1000;10;500;0 ...`
fn first_line(report: &Report) -> String {
    let mut line = format!("DLQ {} - {}", report.status.as_str(), report.summary);
    let perf: Vec<String> = report.sources.iter().flat_map(perfdata).collect();
    if !perf.is_empty() {
        line.push_str(" | ");
        line.push_str(&perf.join(" "));
    }
    line
}

/// Pending, age in seconds and new, per source: `'label'=value[unit];warn;crit;0`.
fn perfdata(c: &SourceCheck) -> Vec<String> {
    let t = &c.thresholds;
    let mut out = vec![perf(&c.location, c.pending, &t.pending, "")];
    if let Some(age) = c.oldest_age_seconds {
        let label = format!("{} age", c.location);
        out.push(perf(&label, age.max(0) as u64, &t.age_seconds, "s"));
    }
    if let Some(new) = c.new {
        out.push(perf(&format!("{} new", c.location), new, &t.new, ""));
    }
    out
}

fn perf(label: &str, value: u64, limit: &Limit, unit: &str) -> String {
    let level = |l: Option<u64>| l.map(|v| v.to_string()).unwrap_or_default();
    format!(
        "'{}'={value}{unit};{};{};0",
        label.replace('\'', "''"),
        level(limit.warn),
        level(limit.crit)
    )
}

/// The long text: one line per source.
fn source_line(c: &SourceCheck) -> String {
    let mut parts = vec![format!("{} pending", c.pending)];
    match c.oldest_age_seconds {
        Some(age) if c.pending > 0 => parts.push(format!("oldest {}", human(age))),
        _ => {}
    }
    if let Some(new) = c.new {
        parts.push(format!("{new} new in {}", c.thresholds.new_within));
    }
    if let Some(n) = c.sampled.filter(|&n| n < c.pending) {
        parts.push(format!("age and new from the first {n}"));
    }
    if let Some(why) = &c.not_read {
        parts.push(why.clone());
    }
    format!(
        "{} {}: {} - {}",
        c.source,
        c.location,
        c.status.as_str(),
        parts.join(", ")
    )
}

/// `3d 4h`, `2h 5m`, `5m 3s`, `45s`.
fn human(secs: i64) -> String {
    let s = secs.max(0);
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m {}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h {}m", s / 3600, (s / 60) % 60),
        s => format!("{}d {}h", s / 86_400, (s / 3600) % 24),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts() -> Options {
        Options {
            queues: vec![],
            motivo_headers: vec![],
            force: false,
            sample: None,
            warn_pending: None,
            crit_pending: None,
            warn_age: None,
            crit_age: None,
            warn_new: None,
            crit_new: None,
            new_within: "1h".into(),
        }
    }

    #[test]
    fn thresholds_are_checked() {
        let mut o = opts();
        o.warn_pending = Some("10".into());
        o.crit_pending = Some("5".into());
        assert!(
            parse_thresholds(&o)
                .unwrap_err()
                .contains("above --crit-pending")
        );
        o.crit_pending = Some("-1".into());
        assert!(parse_thresholds(&o).is_err());
        o.crit_pending = None;
        o.warn_age = Some("2x".into());
        assert!(parse_thresholds(&o).unwrap_err().starts_with("--warn-age"));
        o.warn_age = Some("30m".into());
        o.crit_age = Some("2h".into());
        let t = parse_thresholds(&o).unwrap();
        assert_eq!(
            (t.age_seconds.warn, t.age_seconds.crit),
            (Some(1800), Some(7200))
        );
    }

    #[test]
    fn levels_alert_above_them() {
        let l = Limit {
            warn: Some(10),
            crit: Some(500),
            shown: (Some("10".into()), Some("500".into())),
        };
        assert!(alert(10, &l, "x".into()).is_none());
        assert_eq!(alert(11, &l, "x".into()).unwrap().status, Status::Warning);
        let a = alert(1000, &l, "1000 pending".into()).unwrap();
        assert_eq!(
            (a.status, a.text.as_str()),
            (Status::Critical, "1000 pending (crit 500)")
        );
    }

    #[test]
    fn perfdata_quotes_labels() {
        let l = Limit::default();
        assert_eq!(perf("it's", 3, &l, "s"), "'it''s'=3s;;;0");
    }
}

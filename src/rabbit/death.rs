//! The dead-letter history (`x-death` and its `x-first-death-*` / `x-last-death-*` companions)
//! and the reason text shown for a dead letter. Pure: no I/O, no broker.

use super::codec::{
    MAX_ERROR_TEXT_CHARS, amqp_kind_name, table_to_json, value_to_json, with_article,
};
use crate::model::{rfc3339, text_lossy};
use chrono::{DateTime, Utc};
use lapin::types::{AMQPValue, FieldTable};
use serde_json::{Value, json};
use std::borrow::Cow;
use std::fmt;

/// One `x-death` entry: one `{queue, reason}` pair of the message's history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Death {
    pub(crate) queue: Option<String>,
    pub(crate) reason: Option<String>,
    pub(crate) count: Option<i64>,
    /// When the message FIRST died for this `{queue, reason}` (the broker does not update it).
    pub(crate) time: Option<DateTime<Utc>>,
    pub(crate) exchange: Option<String>,
    pub(crate) routing_keys: Vec<String>,
    pub(crate) original_expiration: Option<String>,
}

/// Everything the broker's dead-letter headers say, parsed without trusting them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DeathInfo {
    /// Most recent first, as the broker orders them.
    pub(crate) deaths: Vec<Death>,
    pub(crate) first_death_queue: Option<String>,
    pub(crate) first_death_reason: Option<String>,
    pub(crate) first_death_exchange: Option<String>,
    /// `x-last-death-*` exist from RabbitMQ 3.13 on; `None` on older brokers.
    pub(crate) last_death_queue: Option<String>,
    pub(crate) last_death_reason: Option<String>,
    pub(crate) last_death_exchange: Option<String>,
    /// What looked odd, e.g. `x-death[1].count is a string`. Never fatal.
    pub(crate) warnings: Vec<String>,
}

impl DeathInfo {
    /// Where a replay sends the message by default: the queue where a consumer last gave up
    /// on it. "First death" is wrong wherever a message passed through TTL hops (Celery's
    /// `celery_delayed_*` chain, a retry queue): it names a queue whose only role was to
    /// expire it on the way, where a replayed copy would expire and be dropped again.
    pub(crate) fn origin_queue(&self) -> Option<&str> {
        self.origin().map(|(q, _)| q)
    }

    /// [`Self::origin_queue`] with the rule that chose it, for the plan.
    pub(crate) fn origin(&self) -> Option<(&str, &'static str)> {
        // `x-death` is most recent first.
        let gave_up = self.deaths.iter().find(|d| {
            matches!(d.reason.as_deref(), Some("rejected" | "delivery_limit"))
                && death_queue(d).is_some()
        });
        if let Some(q) = gave_up.and_then(death_queue) {
            return Some((q, "last rejected"));
        }
        let not_a_hop = self
            .deaths
            .iter()
            .filter_map(death_queue)
            .find(|q| !is_delay_hop(q));
        if let Some(q) = not_a_hop {
            return Some((q, "last death"));
        }
        self.first_death_queue
            .as_deref()
            .filter(|q| !q.is_empty() && !is_delay_hop(q))
            .map(|q| (q, "first death"))
    }

    /// Why the message is where it is now: `x-last-death-reason`, else the newest `x-death`
    /// entry's reason, else `x-first-death-reason`.
    pub(crate) fn latest_reason(&self) -> Option<&str> {
        self.last_death_reason
            .as_deref()
            .or_else(|| self.deaths.first().and_then(|d| d.reason.as_deref()))
            .or(self.first_death_reason.as_deref())
    }

    /// How many times the message was dead-lettered in all. An entry without a usable count
    /// still stands for at least one death.
    pub(crate) fn total_count(&self) -> i64 {
        self.deaths.iter().fold(0i64, |acc, d| {
            acc.saturating_add(d.count.unwrap_or(1).max(1))
        })
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.deaths.is_empty()
            && self.first_death_queue.is_none()
            && self.first_death_reason.is_none()
            && self.first_death_exchange.is_none()
            && self.last_death_queue.is_none()
            && self.last_death_reason.is_none()
            && self.last_death_exchange.is_none()
    }

    /// JSON for `inspect`/`-o json`: every key always present (null when unknown) so scripts
    /// can rely on the shape.
    pub(crate) fn to_json(&self) -> Value {
        let deaths: Vec<Value> = self
            .deaths
            .iter()
            .map(|d| {
                json!({
                    "queue": d.queue,
                    "reason": d.reason,
                    "count": d.count,
                    "time": d.time.as_ref().map(rfc3339),
                    "exchange": d.exchange,
                    "routing_keys": d.routing_keys,
                    "original_expiration": d.original_expiration,
                })
            })
            .collect();
        json!({
            "deaths": deaths,
            "first_death_queue": self.first_death_queue,
            "first_death_reason": self.first_death_reason,
            "first_death_exchange": self.first_death_exchange,
            "last_death_queue": self.last_death_queue,
            "last_death_reason": self.last_death_reason,
            "last_death_exchange": self.last_death_exchange,
            "origin_queue": self.origin_queue(),
            "origin_rule": self.origin().map(|(_, rule)| rule),
            "total_count": self.total_count(),
            "warnings": self.warnings,
        })
    }
}

fn get<'a>(t: &'a FieldTable, key: &str) -> Option<&'a AMQPValue> {
    t.inner().get(key)
}

/// Text of a string-like value; anything else is a warning and `None`.
fn text_field(
    v: &AMQPValue,
    path: &dyn fmt::Display,
    warnings: &mut Vec<String>,
) -> Option<String> {
    match v {
        AMQPValue::LongString(s) => match std::str::from_utf8(s.as_bytes()) {
            Ok(s) => Some(s.to_owned()),
            Err(_) => {
                warnings.push(format!("{path} is not valid UTF-8"));
                Some(String::from_utf8_lossy(s.as_bytes()).into_owned())
            }
        },
        AMQPValue::ShortString(s) => Some(s.to_string()),
        AMQPValue::ByteArray(b) => {
            warnings.push(format!("{path} is a byte array"));
            Some(String::from_utf8_lossy(b.as_slice()).into_owned())
        }
        AMQPValue::Void => None,
        other => {
            warnings.push(format!("{path} is {}", with_article(amqp_kind_name(other))));
            None
        }
    }
}

fn int_value(v: &AMQPValue) -> Option<i64> {
    Some(match v {
        AMQPValue::ShortShortInt(i) => i64::from(*i),
        AMQPValue::ShortShortUInt(i) => i64::from(*i),
        AMQPValue::ShortInt(i) => i64::from(*i),
        AMQPValue::ShortUInt(i) => i64::from(*i),
        AMQPValue::LongInt(i) => i64::from(*i),
        AMQPValue::LongUInt(i) => i64::from(*i),
        AMQPValue::LongLongInt(i) => *i,
        _ => return None,
    })
}

fn count_field(v: &AMQPValue, path: &dyn fmt::Display, warnings: &mut Vec<String>) -> Option<i64> {
    if let Some(n) = int_value(v) {
        // The broker never writes one; a producer that did says nothing usable.
        if n < 1 {
            warnings.push(format!("{path} is {n}, not a count (counted as one death)"));
        }
        return Some(n);
    }
    match v {
        AMQPValue::LongString(_) | AMQPValue::ShortString(_) => {
            warnings.push(format!("{path} is a string"));
            // A numeric string still says how often; use it, but keep the warning.
            text_field(v, path, &mut Vec::new()).and_then(|s| s.trim().parse().ok())
        }
        AMQPValue::Timestamp(t) => {
            warnings.push(format!("{path} is a timestamp"));
            i64::try_from(*t).ok()
        }
        AMQPValue::Void => None,
        other => {
            warnings.push(format!("{path} is {}", with_article(amqp_kind_name(other))));
            None
        }
    }
}

fn time_field(
    v: &AMQPValue,
    path: &dyn fmt::Display,
    warnings: &mut Vec<String>,
) -> Option<DateTime<Utc>> {
    let secs = match v {
        AMQPValue::Timestamp(t) => i64::try_from(*t).ok(),
        AMQPValue::LongString(_) | AMQPValue::ShortString(_) => {
            warnings.push(format!("{path} is a string"));
            let s = text_field(v, path, &mut Vec::new())?;
            let s = s.trim();
            if let Ok(t) = DateTime::parse_from_rfc3339(s) {
                return Some(t.with_timezone(&Utc));
            }
            s.parse::<i64>().ok()
        }
        AMQPValue::Void => return None,
        other => match int_value(other) {
            Some(n) => Some(n),
            None => {
                warnings.push(format!("{path} is {}", with_article(amqp_kind_name(other))));
                return None;
            }
        },
    };
    let t = secs.and_then(|s| DateTime::from_timestamp(s, 0));
    if t.is_none() {
        warnings.push(format!("{path} is out of range"));
    }
    t
}

fn parse_death(t: &FieldTable, path: &dyn fmt::Display, warnings: &mut Vec<String>) -> Death {
    let mut d = Death::default();
    for (k, v) in t.inner() {
        // Formatted only when a warning names it: every message has a history to read.
        let p = &format_args!("{path}.{k}");
        match k.as_str() {
            "queue" => d.queue = text_field(v, p, warnings),
            "reason" => d.reason = text_field(v, p, warnings),
            "count" => d.count = count_field(v, p, warnings),
            "time" => d.time = time_field(v, p, warnings),
            "exchange" => d.exchange = text_field(v, p, warnings),
            "original-expiration" => d.original_expiration = text_field(v, p, warnings),
            "routing-keys" => match v {
                AMQPValue::FieldArray(a) => {
                    for (i, item) in a.as_slice().iter().enumerate() {
                        if let Some(s) = text_field(item, &format_args!("{p}[{i}]"), warnings) {
                            d.routing_keys.push(s);
                        }
                    }
                }
                AMQPValue::LongString(_) | AMQPValue::ShortString(_) => {
                    warnings.push(format!("{p} is a string, expected an array"));
                    d.routing_keys.extend(text_field(v, p, warnings));
                }
                AMQPValue::Void => {}
                other => {
                    warnings.push(format!("{p} is {}", with_article(amqp_kind_name(other))));
                }
            },
            // Fields a newer broker may add are not our business.
            _ => {}
        }
    }
    d
}

/// Parses `x-death` and `x-first-death-*`/`x-last-death-*`. Never fails: odd values become
/// warnings and missing fields stay `None`.
pub(crate) fn parse_deaths(headers: Option<&FieldTable>) -> DeathInfo {
    let mut info = DeathInfo::default();
    let Some(h) = headers else {
        return info;
    };
    let w = &mut info.warnings;
    let text = |key: &str, w: &mut Vec<String>| get(h, key).and_then(|v| text_field(v, &key, w));
    info.first_death_queue = text("x-first-death-queue", w);
    info.first_death_reason = text("x-first-death-reason", w);
    info.first_death_exchange = text("x-first-death-exchange", w);
    info.last_death_queue = text("x-last-death-queue", w);
    info.last_death_reason = text("x-last-death-reason", w);
    info.last_death_exchange = text("x-last-death-exchange", w);
    match get(h, "x-death") {
        None | Some(AMQPValue::Void) => {}
        Some(AMQPValue::FieldArray(a)) => {
            for (i, item) in a.as_slice().iter().enumerate() {
                let path = format_args!("x-death[{i}]");
                match item {
                    AMQPValue::FieldTable(t) => info.deaths.push(parse_death(t, &path, w)),
                    other => w.push(format!(
                        "{path} is {}, expected a table",
                        with_article(amqp_kind_name(other))
                    )),
                }
            }
        }
        // A single table where an array belongs: still one death's worth of information.
        Some(AMQPValue::FieldTable(t)) => {
            w.push("x-death is a table, expected an array".to_owned());
            info.deaths.push(parse_death(t, &"x-death", w));
        }
        Some(other) => w.push(format!(
            "x-death is {}, expected an array",
            with_article(amqp_kind_name(other))
        )),
    }
    info
}

// ---------------------------------------------------------------------------------------------
// Reason text
// ---------------------------------------------------------------------------------------------

fn death_queue(d: &Death) -> Option<&str> {
    d.queue.as_deref().filter(|q| !q.is_empty())
}

/// Celery's own delayed-delivery queues (5.5+, quorum queues): TTL hops, never where a
/// task is consumed.
/// kombu 5.7 may prefix them (`<prefix>_celery_delayed_N`): `^(.+_)?celery_delayed_(\d+|delivery)$`.
pub(crate) fn is_delay_hop(queue: &str) -> bool {
    let Some(at) = queue.rfind("celery_delayed_") else {
        return false;
    };
    let (prefix, rest) = (&queue[..at], &queue[at + "celery_delayed_".len()..]);
    let prefix_ok = prefix.is_empty() || (prefix.len() > 1 && prefix.ends_with('_'));
    let level_ok =
        rest == "delivery" || (!rest.is_empty() && rest.bytes().all(|b| b.is_ascii_digit()));
    prefix_ok && level_ok
}

/// Headers producers use for the failure text, in priority order. The second name, when present,
/// is the exception type that goes in front of the message (`KeyError: 'usuario_id'`).
const ERROR_HEADERS: &[(&str, Option<&str>)] = &[
    // Spring AMQP RepublishMessageRecoverer.
    ("x-exception-message", None),
    ("x-exception", None),
    ("x-exception-stacktrace", None),
    // MassTransit.
    ("MT-Fault-Message", Some("MT-Fault-ExceptionType")),
    ("MT-Fault-ExceptionType", None),
    // NServiceBus.
    (
        "NServiceBus.ExceptionInfo.Message",
        Some("NServiceBus.ExceptionInfo.ExceptionType"),
    ),
    ("NServiceBus.ExceptionInfo.ExceptionType", None),
    // Hand-rolled producers.
    ("error", None),
    ("exception", None),
    ("motivo", None),
    ("reason", None),
];

/// The reason shown for a dead letter: the dead-letter reason (the latest one: that is why the
/// message is where it is now) plus the first error text a producer attached, e.g.
/// `rejected: KeyError: 'usuario_id'`. `extra_headers` are checked before the known ones.
pub(crate) fn reason_text(
    headers: Option<&FieldTable>,
    deaths: &DeathInfo,
    extra_headers: &[String],
) -> Option<String> {
    let reason = deaths
        .latest_reason()
        .map(str::trim)
        .filter(|r| !r.is_empty());
    let error = headers.and_then(|h| error_text(h, extra_headers));
    match (reason, error) {
        (Some(r), Some(e)) if e == r => Some(e),
        (Some(r), Some(e)) => Some([r, ": ", &e].concat()),
        (Some(r), None) => Some(r.to_owned()),
        (None, e) => e,
    }
}

/// The first error text found in the headers, cut down to one line.
pub(crate) fn error_text(headers: &FieldTable, extra_headers: &[String]) -> Option<String> {
    let extra = extra_headers.iter().map(|h| (h.as_str(), None));
    for (name, type_header) in extra.chain(ERROR_HEADERS.iter().copied()) {
        let Some(message) = header_text(headers, name) else {
            continue;
        };
        let kind = type_header.and_then(|t| header_text(headers, t));
        return Some(match kind {
            Some(kind) if !message.starts_with(&kind) => format!("{kind}: {message}"),
            _ => message,
        });
    }
    None
}

/// One-line text of a header, found by exact name, else ignoring ASCII case.
fn header_text(headers: &FieldTable, name: &str) -> Option<String> {
    let value = get(headers, name).or_else(|| {
        headers
            .inner()
            .iter()
            .find(|(k, _)| k.as_str().eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })?;
    one_line(&loose_text(value, 0)?)
}

/// Best-effort text of any value, for humans. Depth-limited: headers come from anywhere.
/// Borrowed when the value is text already: `one_line` copies it anyway.
fn loose_text(v: &AMQPValue, depth: usize) -> Option<Cow<'_, str>> {
    if depth > 4 {
        return None;
    }
    match v {
        AMQPValue::LongString(s) => Some(text_lossy(s.as_bytes())),
        AMQPValue::ShortString(s) => Some(Cow::Borrowed(s.as_str())),
        AMQPValue::ByteArray(b) => Some(text_lossy(b.as_slice())),
        AMQPValue::Void => None,
        AMQPValue::FieldArray(a) => a.as_slice().iter().find_map(|v| loose_text(v, depth + 1)),
        AMQPValue::FieldTable(t) => ["message", "Message", "msg", "error", "exception"]
            .iter()
            .find_map(|k| get(t, k).and_then(|v| loose_text(v, depth + 1)))
            .or_else(|| Some(Cow::Owned(table_to_json(t).to_string()))),
        other => match value_to_json(other) {
            Value::String(s) => Some(Cow::Owned(s)),
            v => Some(Cow::Owned(v.to_string())),
        },
    }
}

/// Keeps a reason to one line: the first non-blank line, or the exception line at the end of a
/// Python traceback, cut at [`MAX_ERROR_TEXT_CHARS`].
fn one_line(text: &str) -> Option<String> {
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next()?;
    let line = if first.starts_with("Traceback (most recent call last)") {
        // Python puts the exception last; the frames in between are noise here.
        lines.next_back().unwrap_or(first)
    } else {
        first
    };
    // Every dead letter's reason passes here: printable ASCII that fits is kept as it is
    // (the same result as the loop below, without a push per character).
    if line.len() <= MAX_ERROR_TEXT_CHARS && line.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Some(line.to_owned());
    }
    let mut out = String::with_capacity(line.len().min(MAX_ERROR_TEXT_CHARS + 3));
    for (i, c) in line.chars().enumerate() {
        if i == MAX_ERROR_TEXT_CHARS {
            out.push('…');
            break;
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    Some(out)
}

/// Celery's task name (the `task` header of protocol 2 messages).
pub(crate) fn celery_task_name(headers: Option<&FieldTable>) -> Option<String> {
    string_header(headers, "task")
}

/// An integer header (any AMQP integer, or a string of digits); `None` when missing or not
/// an integer.
pub(crate) fn header_int(headers: Option<&FieldTable>, name: &str) -> Option<i64> {
    Some(match get(headers?, name)? {
        AMQPValue::ShortShortInt(n) => i64::from(*n),
        AMQPValue::ShortShortUInt(n) => i64::from(*n),
        AMQPValue::ShortInt(n) => i64::from(*n),
        AMQPValue::ShortUInt(n) => i64::from(*n),
        AMQPValue::LongInt(n) => i64::from(*n),
        AMQPValue::LongUInt(n) => i64::from(*n),
        AMQPValue::LongLongInt(n) => *n,
        AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).trim().parse().ok()?,
        _ => return None,
    })
}

/// A text header, trimmed; `None` when missing, empty or not a string.
pub(crate) fn string_header(headers: Option<&FieldTable>, name: &str) -> Option<String> {
    let s = match get(headers?, name)? {
        AMQPValue::LongString(s) => text_lossy(s.as_bytes()),
        AMQPValue::ShortString(s) => Cow::Borrowed(s.as_str()),
        _ => return None,
    };
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn death(queue: &str, reason: &str) -> Death {
        Death {
            queue: Some(queue.into()),
            reason: Some(reason.into()),
            count: Some(1),
            ..Default::default()
        }
    }

    #[test]
    fn a_task_delayed_then_rejected_goes_back_where_it_was_rejected() {
        // Celery 5.5+ on quorum queues: most recent first, as the broker orders x-death.
        let info = DeathInfo {
            deaths: vec![
                death("pagamentos", "rejected"),
                death("celery_delayed_1", "expired"),
                death("celery_delayed_0", "expired"),
            ],
            first_death_queue: Some("celery_delayed_1".into()),
            ..Default::default()
        };
        assert_eq!(info.origin(), Some(("pagamentos", "last rejected")));
    }

    #[test]
    fn a_count_below_one_is_a_warning() {
        let mut t = FieldTable::default();
        t.insert("queue".into(), AMQPValue::LongString("q".into()));
        t.insert("count".into(), AMQPValue::LongLongInt(-4));
        let mut h = FieldTable::default();
        h.insert(
            "x-death".into(),
            AMQPValue::FieldArray(vec![AMQPValue::FieldTable(t)].into()),
        );
        let info = parse_deaths(Some(&h));
        assert_eq!(info.total_count(), 1);
        assert_eq!(
            info.warnings,
            vec!["x-death[0].count is -4, not a count (counted as one death)"]
        );
    }

    #[test]
    fn a_classic_ttl_retry_goes_back_to_the_work_queue() {
        // work -> (rejected) work.retry -> (expired) work -> ... -> DLQ.
        let info = DeathInfo {
            deaths: vec![death("work.retry", "expired"), death("work", "rejected")],
            first_death_queue: Some("work".into()),
            ..Default::default()
        };
        assert_eq!(info.origin_queue(), Some("work"));
        // A delivery limit counts as giving up too.
        let info = DeathInfo {
            deaths: vec![death("orders", "delivery_limit")],
            ..Default::default()
        };
        assert_eq!(info.origin(), Some(("orders", "last rejected")));
    }

    #[test]
    fn without_a_rejection_the_last_death_that_is_not_a_delay_hop() {
        let info = DeathInfo {
            deaths: vec![
                death("celery_delayed_3", "expired"),
                death("orders", "expired"),
            ],
            ..Default::default()
        };
        assert_eq!(info.origin(), Some(("orders", "last death")));
        let info = DeathInfo {
            first_death_queue: Some("orders".into()),
            ..Default::default()
        };
        assert_eq!(info.origin(), Some(("orders", "first death")));
        assert!(is_delay_hop("celery_delayed_27") && is_delay_hop("celery_delayed_delivery"));
        assert!(!is_delay_hop("celery_delayed_") && !is_delay_hop("celery"));
        assert!(
            is_delay_hop("app1_celery_delayed_3") && is_delay_hop("a_b_celery_delayed_delivery")
        );
        assert!(!is_delay_hop("_celery_delayed_3") && !is_delay_hop("xcelery_delayed_3"));
        assert!(!is_delay_hop("celery_delayed_3x") && !is_delay_hop("celery_delayed_3.dlq"));
    }

    /// The printable-ASCII shortcut must give what the character loop gives, at its edges.
    #[test]
    fn one_line_keeps_short_ascii_and_cuts_the_rest() {
        let max = MAX_ERROR_TEXT_CHARS;
        assert_eq!(
            one_line("  KeyError: 'x'  \n2").as_deref(),
            Some("KeyError: 'x'")
        );
        assert_eq!(one_line(&"a".repeat(max)), Some("a".repeat(max)));
        assert_eq!(one_line(&"a".repeat(max + 1)), Some("a".repeat(max) + "…"));
        assert_eq!(one_line("a\tb\u{7f}c").as_deref(), Some("a b c"));
        assert_eq!(one_line("café").as_deref(), Some("café"));
        assert_eq!(one_line(" \n \t "), None);
    }
}

//! A delivered message -> the one `DeadLetter` record shape. Pure.
//!
//! Decisions (documented in docs/QUEUES.md):
//! * `id`: the `message_id` property when set; else the Celery task id (`id` header of a
//!   message that has a `task` header); else `h:` + 16 hex digits of a SHA-256 over the
//!   message as stored (typed properties and headers, then the body). The headers the
//!   broker adds at delivery time (`codec::DELIVERY_HEADERS`) are left out, so
//!   two reads give the same ids.
//! * `created_at`: when the message was dead-lettered: the latest `time` in `x-death` (the
//!   broker records the FIRST death per queue/reason and never updates it); else the
//!   `timestamp` property; else none.
//! * `task`: the Celery `task` header, else the queue the message goes back to (see
//!   `DeathInfo::origin_queue`).

use super::framework::{self, Facts};
use crate::model::REPLAY_COUNT;
use crate::model::{DeadLetter, RecordId, SourceKind, payload_from_bytes};
use crate::output::Printer;
use crate::rabbit::codec::{
    properties_to_json, properties_to_typed_json, stored_properties, table_to_json,
};
use crate::rabbit::death::{DeathInfo, header_int, parse_deaths, reason_text};
use crate::select::Selection;
use anyhow::Result;
use base64::Engine as _;
use chrono::{DateTime, Utc};
use lapin::BasicProperties;
use lapin::types::FieldTable;
use serde_json::{Value, json};
use sha2::Digest as _;
use tokio::sync::mpsc;

/// What shapes a record besides the message itself.
#[derive(Debug, Clone, Default)]
pub(crate) struct RecordOptions {
    /// Extra headers holding the error text (`--motivo-header`), checked first.
    pub(crate) motivo_headers: Vec<String>,
    /// Which parts to build; the rest stay empty.
    pub(crate) parts: Parts,
}

/// The parts of a record beyond its reason, task, time and payload text, each built only
/// when the command reads it: a scan spends most of its CPU building what nobody looks at
/// (the id hash, the readable headers, the death JSON, the parsed payload), and every
/// allocation is contended between the reader and the selecting thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Parts {
    /// The stable id (a SHA-256 over the message when it has no message_id / Celery id).
    pub(crate) id: bool,
    /// `payload` parsed as JSON (else null; `--pattern` decodes the text when it must).
    pub(crate) payload: bool,
    /// The `death` history as JSON.
    pub(crate) death: bool,
    /// The readable `headers`.
    pub(crate) headers: bool,
    /// The readable `properties`.
    pub(crate) properties: bool,
    /// The lossless `raw` copy (typed properties, base64 body).
    pub(crate) raw: bool,
    /// `payload_text`, the stored body as text: what `--pattern` searches.
    pub(crate) text: bool,
}

impl Default for Parts {
    fn default() -> Self {
        Parts::ALL
    }
}

impl Parts {
    pub(crate) const ALL: Parts = Parts {
        id: true,
        payload: true,
        death: true,
        headers: true,
        properties: true,
        raw: true,
        text: true,
    };
    #[cfg(test)]
    pub(crate) const NONE: Parts = Parts {
        id: false,
        payload: false,
        death: false,
        headers: false,
        properties: false,
        raw: false,
        text: false,
    };

    /// Only what `Selection::matches` reads: a count or a grouping shows nothing else.
    /// A `--where` program gets the fields it names (all of them when it may see the
    /// record whole: see `jq::Reads`).
    pub(crate) fn for_selection(sel: &Selection) -> Parts {
        let jq = |field: &str| sel.jq.as_ref().is_some_and(|f| f.reads().reads(field));
        Parts {
            id: !sel.ids.is_empty() || jq("id"),
            payload: jq("payload"),
            death: jq("death"),
            headers: jq("headers"),
            properties: jq("properties"),
            raw: jq("raw"),
            text: sel.pattern.is_some(),
        }
    }
}

/// A delivered message's content id (delivery-time headers removed): the same message read
/// again has the same one, whatever its delivery count.
pub(crate) fn content_key(props: &BasicProperties, body: &[u8]) -> String {
    content_id(&stored_properties(props), body)
}

/// `h:` + 16 hex digits of SHA-256 over the stored message. serde_json writes the typed
/// JSON deterministically (field tables are sorted maps), so equal messages hash equally.
pub(crate) fn content_id(stored: &BasicProperties, body: &[u8]) -> String {
    let mut h = sha2::Sha256::new();
    let props = serde_json::to_vec(&crate::rabbit::codec::TypedProperties(stored))
        .expect("JSON serializes");
    h.update((props.len() as u64).to_be_bytes());
    h.update(&props);
    h.update(body);
    let digest = h.finalize();
    format!("h:{}", hex::encode(&digest[..8]))
}

/// A delivered message's record id alone: what `from_delivery` puts in `id`.
pub(crate) fn record_id(props: &BasicProperties, body: &[u8]) -> String {
    let facts = framework::recognise(props.headers().as_ref(), body);
    record_id_with(&stored_properties(props), body, facts.as_ref())
}

/// The stable id (see the module docs): the message id, else the framework's own id, else a
/// hash of the content.
fn record_id_with(stored: &BasicProperties, body: &[u8], facts: Option<&Facts>) -> String {
    if let Some(m) = stored.message_id().as_ref().map(|m| m.as_str().trim())
        && !m.is_empty()
    {
        return m.to_owned();
    }
    match facts.and_then(|f| f.id.clone()) {
        Some(id) => id,
        None => content_id(stored, body),
    }
}

/// The reason: RabbitMQ's death reason and the error headers, then the error the framework
/// kept in the message when neither already says it.
fn reason(
    headers: Option<&FieldTable>,
    deaths: &DeathInfo,
    facts: Option<&Facts>,
    extra: &[String],
) -> Option<String> {
    let said = reason_text(headers, deaths, extra);
    match (said, facts.and_then(|f| f.error.as_deref())) {
        (Some(s), Some(e)) if !s.contains(e) => Some(format!("{s}: {e}")),
        (None, Some(e)) => Some(e.to_owned()),
        (said, _) => said,
    }
}

/// When the message was dead-lettered: the latest `x-death` time, else `timestamp`.
fn dead_lettered_at(deaths: &DeathInfo, props: &BasicProperties) -> Option<DateTime<Utc>> {
    deaths
        .deaths
        .iter()
        .filter_map(|d| d.time)
        .max()
        .or_else(|| {
            props
                .timestamp()
                .and_then(|t| i64::try_from(t).ok())
                .and_then(|t| DateTime::from_timestamp(t, 0))
        })
}

/// Only what a `list` sample needs (reason and time), without decoding the rest.
pub(crate) fn reason_and_time(
    props: &BasicProperties,
    body: &[u8],
    opts: &RecordOptions,
) -> (Option<String>, Option<DateTime<Utc>>) {
    let headers = props.headers().as_ref();
    let deaths = parse_deaths(headers);
    let facts = framework::recognise(headers, body);
    (
        reason(headers, &deaths, facts.as_ref(), &opts.motivo_headers),
        dead_lettered_at(&deaths, props),
    )
}

/// Builds the record for one delivered message.
pub(crate) fn from_delivery(
    queue: &str,
    exchange: &str,
    routing_key: &str,
    props: &BasicProperties,
    body: &[u8],
    opts: &RecordOptions,
) -> DeadLetter {
    let parts = opts.parts;
    let headers = props.headers().as_ref();
    let deaths = parse_deaths(headers);
    let stored = stored_properties(props);
    let created_at = dead_lettered_at(&deaths, props);
    let facts = framework::recognise(headers, body);
    let task = facts
        .as_ref()
        .and_then(|f| f.task.clone())
        .or_else(|| deaths.origin_queue().map(str::to_owned));
    DeadLetter {
        source: SourceKind::Queue,
        location: queue.to_owned(),
        id: RecordId::Text(if parts.id {
            record_id_with(&stored, body, facts.as_ref())
        } else {
            String::new()
        }),
        task,
        motivo: reason(headers, &deaths, facts.as_ref(), &opts.motivo_headers),
        created_at,
        replayed: false,
        replay_count: header_int(headers, REPLAY_COUNT)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(0),
        retries: facts.as_ref().and_then(|f| f.retries),
        framework: facts.map(|f| f.framework.to_owned()),
        payload: if parts.payload {
            payload_from_bytes(body)
        } else {
            Value::Null
        },
        headers: parts
            .headers
            .then(|| headers.map(table_to_json).unwrap_or_else(|| json!({}))),
        death: parts.death.then(|| deaths.to_json()),
        properties: parts.properties.then(|| properties_to_json(props)),
        raw: parts.raw.then(|| {
            json!({
                "exchange": exchange,
                "routing_key": routing_key,
                "properties": properties_to_typed_json(&stored),
                "body": base64::engine::general_purpose::STANDARD.encode(body),
            })
        }),
        payload_text: parts
            .text
            .then(|| crate::model::text_lossy(body).into_owned()),
        unreadable_time: None,
        origin: deaths.origin_queue().map(str::to_owned),
    }
}

/// The record of a taken message when the selector takes it.
pub(crate) fn selected(
    queue: &str,
    d: &lapin::message::Delivery,
    opts: &RecordOptions,
    selector: &mut crate::select::Selector<'_>,
) -> Option<DeadLetter> {
    let rec = from_delivery(
        queue,
        d.exchange.as_str(),
        d.routing_key.as_str(),
        &d.properties,
        &d.data,
        opts,
    );
    selector.offer(&rec).then_some(rec)
}

#[derive(Debug, Clone, Default)]
pub(crate) struct StreamOptions {
    pub(crate) names: Vec<String>,
    pub(crate) record: RecordOptions,
    pub(crate) force: bool,
}

/// Records of every message in the named queues, queue by queue, in queue order. Every
/// queue is checked before the first message is read.
pub(crate) async fn open_stream(
    target: &crate::rabbit::Target,
    printer: &Printer,
    opts: &StreamOptions,
    _sel: &Selection,
) -> Result<mpsc::Receiver<Result<DeadLetter>>> {
    let conn = crate::rabbit::connect(target).await?;
    let checked =
        crate::rabbit::check_queues(&conn, target, printer, &opts.names, opts.force).await?;
    Ok(stream_checked(
        printer.clone(),
        std::sync::Arc::new(conn),
        checked,
        opts.record.clone(),
        true,
    ))
}

/// Records of queues already checked, read on the caller's connection (closed at the end
/// when `close`): a command that checked its queues does not connect and check again.
pub(crate) fn stream_checked(
    printer: Printer,
    conn: std::sync::Arc<crate::rabbit::Connection>,
    checked: Vec<crate::rabbit::Checked>,
    record_opts: RecordOptions,
    close: bool,
) -> mpsc::Receiver<Result<DeadLetter>> {
    let (tx, rx) = mpsc::channel(crate::rabbit::CHANNEL_DEPTH);
    let handle = tokio::spawn(async move {
        let make = move |q: &str, ex: &str, rk: &str, p: &lapin::BasicProperties, body: &[u8]| {
            from_delivery(q, ex, rk, p, body, &record_opts)
        };
        for q in &checked {
            let spec = crate::rabbit::reader::ReadSpec::for_checked(q, None);
            match crate::rabbit::reader::read_queue(&conn, &spec, &make, &tx).await {
                Ok(report) => {
                    for w in report.warnings(q) {
                        printer.warn(w);
                    }
                    if let Some(e) = report.stall_error(&q.name) {
                        crate::source::fail(&tx, e).await;
                    }
                    if report.receiver_gone {
                        break;
                    }
                }
                Err(e) => {
                    let e = e.context(format!("reading queue {:?}", q.name));
                    crate::source::fail(&tx, e).await;
                    break;
                }
            }
        }
        if close {
            crate::rabbit::close(&conn, "dlq done").await;
        }
    });
    crate::source::track(handle);
    rx
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rabbit::codec::{delivery_count, stream_offset};
    use lapin::types::{AMQPValue, FieldArray, LongString};

    fn ls(s: &str) -> AMQPValue {
        AMQPValue::LongString(LongString::from(s))
    }

    fn table(v: Vec<(&str, AMQPValue)>) -> FieldTable {
        let mut t = FieldTable::default();
        for (k, x) in v {
            t.insert(k.into(), x);
        }
        t
    }

    fn death(queue: &str, reason: &str, time: u64, count: i64) -> AMQPValue {
        AMQPValue::FieldTable(table(vec![
            ("queue", ls(queue)),
            ("reason", ls(reason)),
            ("count", AMQPValue::LongLongInt(count)),
            ("time", AMQPValue::Timestamp(time)),
            ("exchange", ls("")),
            (
                "routing-keys",
                AMQPValue::FieldArray(FieldArray::from(vec![ls(queue)])),
            ),
        ]))
    }

    fn dead_props(extra: Vec<(&str, AMQPValue)>) -> BasicProperties {
        let mut h = table(vec![
            (
                "x-death",
                AMQPValue::FieldArray(FieldArray::from(vec![
                    death("matriculas.processar", "rejected", 1_700_000_500, 2),
                    death("matriculas.entrada", "expired", 1_700_000_900, 1),
                ])),
            ),
            ("x-first-death-queue", ls("matriculas.entrada")),
            ("x-first-death-reason", ls("expired")),
            ("x-exception-message", ls("KeyError: 'usuario_id'")),
        ]);
        for (k, v) in extra {
            h.insert(k.into(), v);
        }
        BasicProperties::default()
            .with_headers(h)
            .with_timestamp(1_600_000_000)
    }

    #[test]
    fn record_fields_from_a_dead_letter() {
        let p = dead_props(vec![]);
        let r = from_delivery(
            "matriculas.dlq",
            "matriculas.dlx",
            "rk",
            &p,
            br#"{"matricula_id": 7}"#,
            &RecordOptions::default(),
        );
        assert_eq!(r.source, SourceKind::Queue);
        assert_eq!(r.location, "matriculas.dlq");
        assert_eq!(
            r.motivo.as_deref(),
            Some("rejected: KeyError: 'usuario_id'")
        );
        // No Celery header: the queue it goes back to (where a consumer last rejected it,
        // not the first death).
        assert_eq!(r.task.as_deref(), Some("matriculas.processar"));
        // The latest death time, not the first entry's (which is older here).
        assert_eq!(r.created_at.map(|t| t.timestamp()), Some(1_700_000_900));
        assert_eq!(r.payload, json!({"matricula_id": 7}));
        assert!(!r.replayed);
        assert_eq!(
            r.death.as_ref().and_then(|d| d["origin_queue"].as_str()),
            Some("matriculas.processar")
        );
        let raw = r.raw.as_ref().unwrap();
        assert_eq!(raw["body"], "eyJtYXRyaWN1bGFfaWQiOiA3fQ==");
        assert_eq!(raw["exchange"], "matriculas.dlx");
        assert!(matches!(&r.id, RecordId::Text(s) if s.starts_with("h:") && s.len() == 18));
    }

    #[test]
    fn ids_are_stable_and_ignore_delivery_headers() {
        let body = b"\xff\x00binary";
        let a = from_delivery("q", "", "", &dead_props(vec![]), body, &Default::default());
        let b = from_delivery(
            "q",
            "",
            "",
            &dead_props(vec![
                ("x-delivery-count", AMQPValue::LongLongInt(3)),
                // RabbitMQ 4.3 adds it to every quorum delivery after the first.
                ("x-acquired-count", AMQPValue::LongLongInt(5)),
            ]),
            body,
            &Default::default(),
        );
        assert_eq!(a.id, b.id);
        // ... but the readable headers show the count, and raw leaves it out.
        assert_eq!(b.headers.as_ref().unwrap()["x-delivery-count"], 3);
        assert!(
            b.raw.as_ref().unwrap()["properties"]["headers"]
                .get("x-delivery-count")
                .is_none()
        );
        assert!(
            b.raw.as_ref().unwrap()["properties"]["headers"]
                .get("x-acquired-count")
                .is_none()
        );
        let c = from_delivery(
            "q",
            "",
            "",
            &dead_props(vec![]),
            b"other",
            &Default::default(),
        );
        assert_ne!(a.id, c.id);
        assert_eq!(a.payload, json!({"base64": "/wBiaW5hcnk="}));
    }

    #[test]
    fn message_id_then_celery_id() {
        let p = dead_props(vec![("task", ls("app.tasks.enviar")), ("id", ls("c0ffee"))]);
        let r = from_delivery("q", "", "", &p, b"[]", &Default::default());
        assert_eq!(r.id, RecordId::Text("c0ffee".into()));
        assert_eq!(r.task.as_deref(), Some("app.tasks.enviar"));
        let p = p.with_message_id("m-1".into());
        let r = from_delivery("q", "", "", &p, b"[]", &Default::default());
        assert_eq!(r.id, RecordId::Text("m-1".into()));
    }

    #[test]
    fn created_at_falls_back_to_timestamp_then_none() {
        let p = BasicProperties::default().with_timestamp(1_600_000_000);
        let r = from_delivery("q", "", "", &p, b"x", &Default::default());
        assert_eq!(r.created_at.map(|t| t.timestamp()), Some(1_600_000_000));
        assert_eq!(r.motivo, None);
        assert_eq!(r.task, None);
        let r = from_delivery(
            "q",
            "",
            "",
            &BasicProperties::default(),
            b"x",
            &Default::default(),
        );
        assert_eq!(r.created_at, None);
        assert_eq!(r.headers, Some(json!({})));
    }

    #[test]
    fn motivo_header_option() {
        let p = dead_props(vec![("x-app-error", ls("ValueError: cpf"))]);
        let r = from_delivery(
            "q",
            "",
            "",
            &p,
            b"{}",
            &RecordOptions {
                motivo_headers: vec!["x-app-error".into()],
                ..Default::default()
            },
        );
        assert_eq!(r.motivo.as_deref(), Some("rejected: ValueError: cpf"));
    }

    /// A `--where` scan builds only the parts its program names: it must decide every
    /// record as it would on the whole record, errors included.
    #[test]
    fn where_decides_alike_on_the_parts_it_reads() {
        let p = dead_props(vec![("n", AMQPValue::LongLongInt(5))])
            .with_priority(3)
            .with_message_id("m-1".into());
        let body = br#"{"matricula_id": 7, "valor": [1, 2]}"#;
        let build = |parts| {
            let opts = RecordOptions {
                parts,
                ..Default::default()
            };
            from_delivery("matriculas.dlq", "matriculas.dlx", "rk", &p, body, &opts)
        };
        let whole = build(Parts::ALL);
        let every = Parts {
            text: false,
            ..Parts::ALL
        };
        let mut partial_programs = 0;
        for code in [
            ".payload.matricula_id == 7",
            ".payload.valor.x",
            r#".headers.n > 4 and .properties.priority == 3"#,
            r#".death[0].queue == "matriculas.processar""#,
            r#".raw.body | @base64d | test("valor")"#,
            r#"select(.id == "m-1") | .motivo | test("KeyError")"#,
            r#"has("raw") and has("death")"#,
            r#"{id, p: .payload} | .p.valor | length == 2"#,
            r#".id, .headers | not"#,
            "keys | length == 12",
            ". == {}",
            r#"tojson | test("eyJ")"#,
        ] {
            let f = crate::jq::JqFilter::compile(code).unwrap();
            let sel = Selection {
                jq: Some(f),
                ..Default::default()
            };
            let parts = Parts::for_selection(&sel);
            partial_programs += usize::from(parts != every);
            let f = sel.jq.as_ref().unwrap();
            assert_eq!(
                f.record_is_truthy(&build(parts)),
                f.record_is_truthy(&whole),
                "{code} with {parts:?}"
            );
        }
        // The check is not vacuous: most of these build less than the whole record.
        assert_eq!(partial_programs, 9);
        assert_eq!(
            Parts::for_selection(&Selection {
                jq: Some(crate::jq::JqFilter::compile(".headers.n > 4").unwrap()),
                ..Default::default()
            }),
            Parts {
                headers: true,
                ..Parts::NONE
            }
        );
    }

    #[test]
    fn delivery_count_and_offset() {
        let p = dead_props(vec![("x-delivery-count", AMQPValue::LongLongInt(4))]);
        assert_eq!(delivery_count(&p), Some(4));
        assert_eq!(delivery_count(&dead_props(vec![])), None);
        let p = BasicProperties::default()
            .with_headers(table(vec![("x-stream-offset", AMQPValue::LongLongInt(9))]));
        assert_eq!(stream_offset(&p), Some(9));
        assert!(stored_properties(&p).headers().is_none());
    }
}

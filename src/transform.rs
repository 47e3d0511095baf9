//! `--transform JQ`: edit a dead letter on its way back (the seed's scenario 1: a renamed
//! field). The program runs over the record's JSON, the same engine and input as `--where`;
//! its single output object gives the new `.payload` and, for queue messages, `.headers`.
//! Pure: no I/O.

use crate::jq::JqFilter;
use crate::model::DeadLetter;
use serde_json::{Map, Value};
use sha2::Digest as _;

/// A compiled transform and its identity (SHA-256 of the program text, stamped on every
/// message it produced).
#[derive(Debug)]
pub(crate) struct Transform {
    jq: JqFilter,
    sha256: String,
}

/// What the program made of one record.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Edit {
    /// The new payload as JSON text (the body / the task's args).
    pub(crate) payload: String,
    /// Application headers set (`Some(value)`) or removed (`None`), queue messages only.
    pub(crate) headers: Vec<(String, Option<Value>)>,
    /// False when the program left payload and headers as they were.
    pub(crate) changed: bool,
}

/// Headers that belong to the broker and to dlq: a transform may not set or remove them.
fn reserved(key: &str) -> bool {
    key.starts_with("x-") || key.starts_with("dlq-")
}

impl Transform {
    pub(crate) fn compile(code: &str) -> Result<Transform, String> {
        let jq = JqFilter::compile(code)?;
        let sha256 = hex::encode(sha2::Sha256::digest(code.as_bytes()));
        Ok(Transform { jq, sha256 })
    }

    pub(crate) fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Runs the program on one record. `Err` (the record stays where it is, reported): the
    /// payload is not JSON, the program fails, yields no object or several, or touches a
    /// reserved header.
    pub(crate) fn apply(&self, rec: &DeadLetter) -> Result<Edit, String> {
        if let Some(text) = &rec.payload_text
            && serde_json::from_str::<Value>(text).is_err()
        {
            return Err("the body is not JSON, so --transform cannot edit it".into());
        }
        let outputs = self.jq.record_outputs(rec)?;
        let [out] = outputs.as_slice() else {
            return Err(format!(
                "--transform gave {} outputs for this record; it must give exactly one object",
                outputs.len()
            ));
        };
        let Value::Object(out) = out else {
            return Err("--transform must give an object (the edited record)".into());
        };
        let Some(payload) = out.get("payload").cloned() else {
            return Err("--transform's output has no .payload: it must give the edited record (e.g. `.payload.x = 1`)".into());
        };
        let headers = header_changes(rec.headers.as_ref(), out.get("headers"))?;
        let changed = payload != rec.payload || !headers.is_empty();
        Ok(Edit {
            payload: payload.to_string(),
            headers,
            changed,
        })
    }
}

/// The application headers the program set, changed or removed.
fn header_changes(
    before: Option<&Value>,
    after: Option<&Value>,
) -> Result<Vec<(String, Option<Value>)>, String> {
    let empty = Map::new();
    let before = before.and_then(Value::as_object).unwrap_or(&empty);
    let after = match after {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Object(m)) => m,
        Some(_) => return Err("--transform: .headers must be an object".into()),
    };
    let mut changes = Vec::new();
    for (k, v) in after {
        if before.get(k) != Some(v) {
            if reserved(k) {
                return Err(format!(
                    "--transform may not set header {k:?} (x-* and dlq-* headers are the broker's and dlq's)"
                ));
            }
            changes.push((k.clone(), Some(v.clone())));
        }
    }
    for k in before.keys() {
        if !after.contains_key(k) {
            if reserved(k) {
                return Err(format!(
                    "--transform may not remove header {k:?} (x-* and dlq-* headers are the broker's and dlq's)"
                ));
            }
            changes.push((k.clone(), None));
        }
    }
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RecordId, SourceKind};
    use serde_json::json;

    fn rec(payload: Value, headers: Option<Value>) -> DeadLetter {
        DeadLetter {
            source: SourceKind::Queue,
            location: "q.dlq".into(),
            id: RecordId::Text("m-1".into()),
            task: None,
            motivo: Some("KeyError: 'usuario_id'".into()),
            created_at: None,
            replayed: false,
            framework: None,
            retries: None,
            replay_count: 0,
            payload_text: Some(payload.to_string()),
            payload,
            headers,
            death: None,
            properties: None,
            raw: None,
            unreadable_time: None,
            origin: None,
        }
    }

    #[test]
    fn the_seeds_renamed_field_is_put_back() {
        let t =
            Transform::compile(".payload.usuario_id = .payload.usuario | del(.payload.usuario)")
                .unwrap();
        let e = t
            .apply(&rec(json!({"usuario": 7, "curso": 3}), None))
            .unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&e.payload).unwrap(),
            json!({"curso": 3, "usuario_id": 7})
        );
        assert!(e.changed && e.headers.is_empty());
        assert_eq!(t.sha256().len(), 64);
    }

    #[test]
    fn headers_change_but_reserved_ones_do_not() {
        let h = json!({"tenant": "a", "x-death": [1]});
        let t = Transform::compile(r#".headers.tenant = "b" | .headers.trace = "t1""#).unwrap();
        let e = t.apply(&rec(json!({}), Some(h.clone()))).unwrap();
        assert_eq!(
            e.headers,
            vec![
                ("tenant".into(), Some(json!("b"))),
                ("trace".into(), Some(json!("t1")))
            ]
        );
        let t = Transform::compile(r#".headers["x-death"] = []"#).unwrap();
        assert!(
            t.apply(&rec(json!({}), Some(h.clone())))
                .unwrap_err()
                .contains("x-death")
        );
        let t = Transform::compile(r#"del(.headers["dlq-replay-count"])"#).unwrap();
        let h2 = json!({"dlq-replay-count": 1});
        assert!(
            t.apply(&rec(json!({}), Some(h2)))
                .unwrap_err()
                .contains("dlq-replay-count")
        );
    }

    #[test]
    fn bad_programs_and_bodies_are_refused_per_record() {
        assert!(Transform::compile(".payload |||").is_err());
        let t = Transform::compile(".payload, .payload").unwrap();
        assert!(
            t.apply(&rec(json!({}), None))
                .unwrap_err()
                .contains("2 outputs")
        );
        let t = Transform::compile("empty").unwrap();
        assert!(
            t.apply(&rec(json!({}), None))
                .unwrap_err()
                .contains("0 outputs")
        );
        let t = Transform::compile(".payload").unwrap();
        assert!(
            t.apply(&rec(json!({"a": 1}), None))
                .unwrap_err()
                .contains(".payload")
        );
        let t = Transform::compile(".payload.a").unwrap();
        assert!(
            t.apply(&rec(json!({"a": 1}), None))
                .unwrap_err()
                .contains("object")
        );
        let mut r = rec(json!({"base64": "AAE="}), None);
        r.payload_text = Some("\u{0}\u{1}".into());
        assert!(
            Transform::compile(".")
                .unwrap()
                .apply(&r)
                .unwrap_err()
                .contains("not JSON")
        );
        let t = Transform::compile(".").unwrap();
        assert!(!t.apply(&rec(json!({"a": 1}), None)).unwrap().changed);
    }
}

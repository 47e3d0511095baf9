//! `--where JQ`: a real jq engine (jaq) over the record's JSON.

use crate::model::DeadLetter;
use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data, unwrap_valr};
use jaq_json::{Map, Num, Val};
use serde_json::Value;
use std::rc::Rc;

mod reads;
pub(crate) use reads::Reads;

pub(crate) struct JqFilter {
    source: String,
    filter: jaq_core::Filter<data::JustLut<Val>>,
    reads: Reads,
}

impl std::fmt::Debug for JqFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("JqFilter").field(&self.source).finish()
    }
}

impl JqFilter {
    /// Compiles the expression; the error names what jaq could not parse or resolve.
    pub(crate) fn compile(code: &str) -> Result<JqFilter, String> {
        let defs = jaq_core::defs()
            .chain(jaq_std::defs())
            .chain(jaq_json::defs());
        let funs = jaq_core::funs()
            .chain(jaq_std::funs())
            .chain(jaq_json::funs());
        let loader = Loader::new(defs);
        let arena = Arena::default();
        let program = File { code, path: () };
        let modules = loader
            .load(&arena, program)
            .map_err(|errs| describe_load_errors(code, errs))?;
        let filter = Compiler::default()
            .with_funs(funs)
            .compile(modules)
            .map_err(|errs| {
                let names: Vec<String> = errs
                    .into_iter()
                    .flat_map(|(_, es)| es.into_iter().map(|(name, u)| format!("{u:?} `{name}`")))
                    .collect();
                format!("undefined {}", names.join(", "))
            })?;
        Ok(JqFilter {
            source: code.to_string(),
            filter,
            reads: Reads::of(code),
        })
    }

    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// The record fields the program can read: the others need not be built.
    pub(crate) fn reads(&self) -> &Reads {
        &self.reads
    }

    /// Every output of the program on a record, as JSON values (`--transform`).
    pub(crate) fn record_outputs(&self, r: &DeadLetter) -> Result<Vec<serde_json::Value>, String> {
        let input = record_input(r);
        let ctx = Ctx::<data::JustLut<Val>>::new(&self.filter.lut, Vars::new([]));
        self.filter
            .id
            .run((ctx, input))
            .map(unwrap_valr)
            .map(|v| {
                let v = v.map_err(|e| e.to_string())?;
                serde_json::from_str(&v.to_string()).map_err(|e| format!("output is not JSON: {e}"))
            })
            .collect()
    }

    /// True when the first output is neither `false` nor `null`; no output is false.
    /// A runtime error (e.g. indexing a string) is returned so callers can count it.
    #[cfg(test)]
    pub(crate) fn is_truthy(&self, json: &[u8]) -> Result<bool, String> {
        let input = jaq_json::read::parse_single(json).map_err(|e| format!("{e:?}"))?;
        self.is_truthy_on(input)
    }

    /// Whether the program's first output on a record is neither `false` nor `null` (no
    /// output is false); a runtime error (e.g. indexing a string) is returned so callers
    /// can count it.
    pub(crate) fn record_is_truthy(&self, r: &DeadLetter) -> Result<bool, String> {
        self.is_truthy_on(record_input(r))
    }

    fn is_truthy_on(&self, input: Val) -> Result<bool, String> {
        let ctx = Ctx::<data::JustLut<Val>>::new(&self.filter.lut, Vars::new([]));
        let mut out = self.filter.id.run((ctx, input)).map(unwrap_valr);
        match out.next() {
            None => Ok(false),
            Some(Ok(v)) => Ok(!matches!(v, Val::Null | Val::Bool(false))),
            Some(Err(e)) => Err(e.to_string()),
        }
    }
}

/// The record as jaq reads its JSON text, built directly: writing the JSON and parsing it back
/// took most of a `--where` scan's CPU. The fields and their order are the record's
/// serialization (`DeadLetter`'s `Serialize`); a test compares this with the text route.
pub(crate) fn record_input(r: &DeadLetter) -> Val {
    let small = |v: Value| input(&v);
    let mut m = Map::with_capacity_and_hasher(12, Default::default());
    let mut put = |k: &str, v: Val| {
        m.insert(Val::utf8_str(k.to_owned()), v);
    };
    put(
        "source",
        small(serde_json::to_value(r.source).expect("serializes")),
    );
    put("location", Val::utf8_str(r.location.clone()));
    put(
        "id",
        small(serde_json::to_value(&r.id).expect("serializes")),
    );
    let text = |t: &Option<String>| t.clone().map_or(Val::Null, Val::utf8_str);
    put("task", text(&r.task));
    put("motivo", text(&r.motivo));
    put(
        "created_at",
        text(&r.created_at.as_ref().map(crate::model::rfc3339)),
    );
    put("replayed", Val::Bool(r.replayed));
    put("payload", input(&r.payload));
    for (k, v) in [
        ("headers", &r.headers),
        ("death", &r.death),
        ("properties", &r.properties),
        ("raw", &r.raw),
    ] {
        if let Some(v) = v {
            put(k, input(v));
        }
    }
    Val::obj(m)
}

/// A JSON value as jaq's parser makes it from its text.
fn input(v: &Value) -> Val {
    match v {
        Value::Null => Val::Null,
        Value::Bool(b) => Val::Bool(*b),
        Value::Number(n) => {
            // serde_json keeps a number's text (arbitrary_precision), which is what jaq
            // would read: integer literals as integers (big ones too), the rest as decimals.
            let text = n.as_str();
            let digits = text.strip_prefix('-').unwrap_or(text);
            let int = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
            Val::Num(
                int.then(|| Num::from_str_radix(text, 10))
                    .flatten()
                    .unwrap_or_else(|| Num::Dec(Rc::new(text.to_owned()))),
            )
        }
        Value::String(s) => Val::utf8_str(s.clone()),
        Value::Array(a) => a.iter().map(input).collect(),
        Value::Object(o) => {
            let mut m = Map::with_capacity_and_hasher(o.len(), Default::default());
            for (k, v) in o {
                m.insert(Val::utf8_str(k.clone()), input(v));
            }
            Val::obj(m)
        }
    }
}

fn describe_load_errors<P>(code: &str, errs: jaq_core::load::Errors<&str, P>) -> String {
    use jaq_core::load::Error;
    let mut parts = Vec::new();
    for (_, err) in errs {
        match err {
            Error::Io(v) => parts.extend(v.into_iter().map(|(_, e)| e)),
            Error::Lex(v) => parts.extend(v.into_iter().map(|(expect, at)| {
                format!("expected {} at {}", expect.as_str(), position(code, at))
            })),
            Error::Parse(v) => parts.extend(v.into_iter().map(|(expect, at)| {
                format!("expected {} at {}", expect.as_str(), position(code, at))
            })),
        }
    }
    if parts.is_empty() {
        "invalid jq expression".to_string()
    } else {
        parts.join("; ")
    }
}

/// Where a sub-slice of `code` starts, as a human-readable position.
fn position(code: &str, at: &str) -> String {
    let offset = (at.as_ptr() as usize).saturating_sub(code.as_ptr() as usize);
    if at.is_empty() || offset >= code.len() {
        "end of input".to_string()
    } else {
        format!(
            "column {} (`{}`)",
            offset + 1,
            at.chars().take(12).collect::<String>()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RecordId, SourceKind};
    use serde_json::json;

    fn via_text(r: &DeadLetter) -> Val {
        jaq_json::read::parse_single(&serde_json::to_vec(r).unwrap()).unwrap()
    }

    #[test]
    fn a_record_is_read_as_from_its_json_text() {
        let payload: Value = serde_json::from_str(
            r#"{"n": -7, "big": 123456789012345678901234567890, "u": 18446744073709551615,
                "f": 1.50, "e": 1e300, "z": -0, "x": 3.0, "s": "ação \"q\" \u0000 \n",
                "a": [1, [2, {"b": null}], true, false], "o": {"k": {}, "l": []}}"#,
        )
        .unwrap();
        let queue = DeadLetter {
            source: SourceKind::Queue,
            location: "matriculas.dlq".into(),
            id: RecordId::Text("h:0011223344556677".into()),
            task: Some("tasks.matricular".into()),
            motivo: Some("KeyError: 'usuario_id'".into()),
            created_at: Some("2026-11-30T10:00:00.123456Z".parse().unwrap()),
            replayed: false,
            payload: payload.clone(),
            framework: None,
            retries: None,
            replay_count: 0,
            headers: Some(json!({"x-first-death-queue": "q", "n": 5})),
            death: Some(json!([{"queue": "q", "count": 2, "time": "2026-11-30T10:00:00Z"}])),
            properties: Some(json!({"delivery_mode": 2, "priority": null})),
            raw: Some(
                json!({"exchange": "", "body": "eyJ9", "properties": {"headers": {"h": ["S", "v"]}}}),
            ),
            payload_text: Some("ignored".into()),
            unreadable_time: Some("ignored".into()),
            origin: Some("ignored".into()),
        };
        let table = DeadLetter {
            replayed: true,
            ..DeadLetter::blank(SourceKind::Table, "tasks_falhadas", RecordId::Int(-3))
        };
        for r in [
            &queue,
            &table,
            &DeadLetter {
                payload,
                ..table.clone()
            },
        ] {
            let (direct, text) = (record_input(r), via_text(r));
            // Same keys in the same order, same text of every value.
            assert_eq!(direct.to_string(), text.to_string());
            assert_eq!(direct, text);
        }
        // And the filters decide alike.
        let r = DeadLetter {
            payload: queue.payload.clone(),
            ..table
        };
        let json = serde_json::to_vec(&r).unwrap();
        for code in [
            ".payload.big > 1e20",
            ".payload.f == 1.5",
            ".payload.e | tostring | startswith(\"1e\")",
            ".payload.s | test(\"ação\")",
            "[.payload.a[] | numbers] | length == 1",
        ] {
            let f = JqFilter::compile(code).unwrap();
            assert_eq!(f.record_is_truthy(&r), f.is_truthy(&json), "{code}");
        }
        assert!(
            JqFilter::compile(".payload.big > 1e20 and .payload.f == 1.5")
                .unwrap()
                .record_is_truthy(&r)
                .unwrap()
        );
    }

    #[test]
    fn truthiness() {
        let f =
            JqFilter::compile(r#".payload.valor > 100 and (.motivo | test("Integrity"))"#).unwrap();
        assert!(
            f.is_truthy(br#"{"payload":{"valor":150},"motivo":"IntegrityError"}"#)
                .unwrap()
        );
        assert!(
            !f.is_truthy(br#"{"payload":{"valor":50},"motivo":"IntegrityError"}"#)
                .unwrap()
        );
        let none = JqFilter::compile("empty").unwrap();
        assert!(!none.is_truthy(b"{}").unwrap());
        let null = JqFilter::compile(".missing").unwrap();
        assert!(!null.is_truthy(b"{}").unwrap());
    }

    #[test]
    fn runtime_error_is_reported() {
        let f = JqFilter::compile(".payload.x").unwrap();
        assert!(f.is_truthy(br#"{"payload":[1]}"#).is_err());
    }

    #[test]
    fn bad_expressions_are_rejected_with_a_reason() {
        let e = JqFilter::compile(".payload | (").unwrap_err();
        assert!(e.contains("expected"), "{e}");
        let e = JqFilter::compile("nosuchfn(1)").unwrap_err();
        assert!(e.contains("nosuchfn"), "{e}");
    }
}

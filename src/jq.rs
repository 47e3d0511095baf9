//! `--where JQ`: a real jq engine (jaq) over the record's JSON.

use jaq_core::load::{Arena, File, Loader};
use jaq_core::{Compiler, Ctx, Vars, data, unwrap_valr};
use jaq_json::Val;

pub struct JqFilter {
    source: String,
    filter: jaq_core::Filter<data::JustLut<Val>>,
}

impl std::fmt::Debug for JqFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("JqFilter").field(&self.source).finish()
    }
}

impl JqFilter {
    /// Compiles the expression; the error names what jaq could not parse or resolve.
    pub fn compile(code: &str) -> Result<JqFilter, String> {
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
        })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// Every output of the program on `json`, as JSON values (`--transform`).
    pub fn outputs(&self, json: &[u8]) -> Result<Vec<serde_json::Value>, String> {
        let input = jaq_json::read::parse_single(json).map_err(|e| format!("{e:?}"))?;
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
    pub fn is_truthy(&self, json: &[u8]) -> Result<bool, String> {
        let input = jaq_json::read::parse_single(json).map_err(|e| format!("{e:?}"))?;
        let ctx = Ctx::<data::JustLut<Val>>::new(&self.filter.lut, Vars::new([]));
        let mut out = self.filter.id.run((ctx, input)).map(unwrap_valr);
        match out.next() {
            None => Ok(false),
            Some(Ok(v)) => Ok(!matches!(v, Val::Null | Val::Bool(false))),
            Some(Err(e)) => Err(e.to_string()),
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

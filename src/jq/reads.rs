//! Which fields of the record decide a `--where` program, found from its syntax tree, so
//! that a scan with `--where` builds only those parts of each message: building every part (the id
//! hash, the readable headers and properties, the base64 `raw` copy) was half a `--where`
//! scan's CPU.
//!
//! The answer is conservative: `Reads::All` whenever the program might see the record as a
//! whole (`keys`, `tojson`, `.[]`, `..`, `. == …`, a variable holding it, a function of its
//! own, any builtin but a few known ones applied to it). Otherwise the record only ever
//! flows into `.field` (or `.["field"]`, `{field}`, `has("field")`), `select`, `if`, `,`,
//! `//`, `and`/`or` and pipes, and every field it names is built; a field the program does
//! not name cannot change its result. The program may output the record itself
//! (`select(.payload.x > 1)`): `--where` only asks whether that is true, and an object is.

use jaq_core::load::lex::StrPart;
use jaq_core::load::parse::{BinaryOp, Pattern, Term};
use jaq_core::path::Part;
use std::collections::BTreeSet;

/// The top-level record fields that decide what a `--where` program says of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reads {
    All,
    Fields(BTreeSet<String>),
}

impl Reads {
    /// What `code` reads; `All` when it does not parse as a plain term (modules, errors).
    pub(crate) fn of(code: &str) -> Reads {
        let Some(term) = jaq_core::load::parse(code, |p| p.term()) else {
            return Reads::All;
        };
        let mut walk = Walk::default();
        walk.term(&term);
        if walk.all {
            Reads::All
        } else {
            Reads::Fields(walk.fields)
        }
    }

    pub(crate) fn reads(&self, field: &str) -> bool {
        match self {
            Reads::All => true,
            Reads::Fields(f) => f.contains(field),
        }
    }
}

/// What a term applied to the record may output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Out {
    /// Possibly the record itself.
    Record,
    /// Never the record, nor a value holding it (a part of it is fine).
    Other,
}

impl Out {
    fn or(self, other: Out) -> Out {
        if self == Out::Record || other == Out::Record {
            Out::Record
        } else {
            Out::Other
        }
    }
}

/// Walks the terms whose input is the record. A term whose input is anything else (the
/// right side of `.payload | …`) cannot reach the record: values are immutable and every
/// binding of a variable to the record is refused, so those terms are not walked.
#[derive(Default)]
struct Walk {
    fields: BTreeSet<String>,
    all: bool,
}

impl Walk {
    /// The record may be seen whole: build everything.
    fn whole(&mut self) -> Out {
        self.all = true;
        Out::Other
    }

    /// The record field `key` names; all of them when `key` is not a plain string.
    fn field(&mut self, key: &Term<&str>) {
        match constant(key) {
            Some(field) => {
                self.fields.insert(field);
            }
            None => {
                self.whole();
            }
        }
    }

    /// A term that must not output the record (an operand, an array element, a key).
    fn part(&mut self, t: &Term<&str>) {
        if self.term(t) == Out::Record {
            self.whole();
        }
    }

    fn term(&mut self, t: &Term<&str>) -> Out {
        match t {
            Term::Id => Out::Record,
            Term::Num(_) | Term::Var(_) | Term::Break(_) => Out::Other,
            Term::Recurse | Term::Fold(..) | Term::Def(..) => self.whole(),
            Term::Str(_, parts) => {
                for p in parts {
                    if let StrPart::Term(t) = p {
                        self.part(t);
                    }
                }
                Out::Other
            }
            Term::Arr(t) => {
                if let Some(t) = t {
                    self.part(t);
                }
                Out::Other
            }
            Term::Obj(entries) => {
                for (k, v) in entries {
                    self.entry(k, v.as_ref());
                }
                Out::Other
            }
            Term::Neg(t) => {
                self.part(t);
                Out::Other
            }
            Term::Label(_, t) => self.term(t),
            Term::TryCatch(t, _catch) => {
                // The catch body's input is the error, which never holds the record (every
                // term that could fail on the record as a whole has already made it `All`),
                // so neither can its output: the try body's output is the term's.
                self.term(t)
            }
            Term::IfThenElse(branches, otherwise) => {
                let mut out = Out::Other;
                for (cond, then) in branches {
                    self.term(cond);
                    out = out.or(self.term(then));
                }
                match otherwise {
                    Some(e) => out.or(self.term(e)),
                    None => Out::Record,
                }
            }
            Term::BinOp(l, op, r) => self.binop(l, op, r),
            Term::Call(name, args) => self.call(name, args),
            Term::Path(base, path) => {
                let mut record = self.term(base) == Out::Record;
                for (part, _opt) in &path.0 {
                    // Index terms read the path's own input: the record, here.
                    match part {
                        Part::Index(i) => {
                            if record {
                                self.field(i);
                            }
                            self.part(i);
                        }
                        Part::Range(from, to) => {
                            if record {
                                self.whole();
                            }
                            for i in [from, to].into_iter().flatten() {
                                self.part(i);
                            }
                        }
                    }
                    record = false;
                }
                Out::Other
            }
        }
    }

    fn binop(&mut self, l: &Term<&str>, op: &BinaryOp<&str>, r: &Term<&str>) -> Out {
        match op {
            BinaryOp::Pipe(None) => match self.term(l) {
                Out::Record => self.term(r),
                Out::Other => Out::Other,
            },
            BinaryOp::Pipe(Some(pattern)) => {
                // `l as $x | r`: `$x` must not hold the record; `r` reads the record.
                self.part(l);
                self.pattern(pattern);
                self.term(r)
            }
            BinaryOp::Comma | BinaryOp::Alt => {
                let out = self.term(l);
                out.or(self.term(r))
            }
            // Truthiness alone: the record is truthy whatever it holds.
            BinaryOp::Or | BinaryOp::And => {
                self.term(l);
                self.term(r);
                Out::Other
            }
            BinaryOp::Math(_) | BinaryOp::Cmp(_) => {
                self.part(l);
                self.part(r);
                Out::Other
            }
            // An update outputs the whole record, changed.
            BinaryOp::Assign | BinaryOp::Update | BinaryOp::UpdateMath(_) | BinaryOp::UpdateAlt => {
                self.whole()
            }
        }
    }

    fn pattern(&mut self, p: &Pattern<&str>) {
        match p {
            Pattern::Var(_) => {}
            Pattern::Arr(ps) => ps.iter().for_each(|p| self.pattern(p)),
            Pattern::Obj(entries) => {
                for (k, p) in entries {
                    self.part(k);
                    self.pattern(p);
                }
            }
        }
    }

    /// `{k: v}`, or `{k}` meaning `{k: .k}` (`{$x}` means `{x: $x}`).
    fn entry(&mut self, k: &Term<&str>, v: Option<&Term<&str>>) {
        match (v, k) {
            (Some(v), k) => {
                self.part(k);
                self.part(v);
            }
            (None, Term::Var(_)) => {}
            (None, k) => self.field(k),
        }
    }

    /// The builtins known not to look at the record as a whole; any other call on it
    /// (`keys`, `tojson`, `length`, a user's function …) may.
    fn call(&mut self, name: &str, args: &[Term<&str>]) -> Out {
        match (name, args) {
            ("select", [cond]) => {
                self.term(cond);
                Out::Record
            }
            ("has", [key]) => {
                self.field(key);
                Out::Other
            }
            ("empty" | "true" | "false" | "null" | "not", []) => Out::Other,
            _ => self.whole(),
        }
    }
}

/// The text of a string literal without interpolation (`"a"`, `.a`), else `None`.
fn constant(t: &Term<&str>) -> Option<String> {
    let Term::Str(None, parts) = t else {
        return None;
    };
    let mut s = String::new();
    for p in parts {
        match p {
            StrPart::Str(t) => s.push_str(t),
            StrPart::Char(c) => s.push(*c),
            StrPart::Term(_) => return None,
        }
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(code: &str) -> Vec<String> {
        match Reads::of(code) {
            Reads::All => panic!("{code}: reads all"),
            Reads::Fields(f) => f.into_iter().collect(),
        }
    }

    #[test]
    fn field_paths_name_only_their_fields() {
        for (code, want) in [
            (".payload.curso_id == 7", &["payload"][..]),
            (r#".motivo | test("Integrity")"#, &["motivo"][..]),
            (
                r#".headers["x-exception"] // .death[0].reason"#,
                &["death", "headers"][..],
            ),
            (
                r#"select(.payload.valor > 100) | .id"#,
                &["id", "payload"][..],
            ),
            (
                r#"if .task == "a" then .payload else .raw end | .x"#,
                &["payload", "raw", "task"][..],
            ),
            (r#"{id, m: .motivo}"#, &["id", "motivo"][..]),
            (
                r#"has("headers") and (. | .properties.priority) > 1"#,
                &["headers", "properties"][..],
            ),
            (
                r#".payload as $p | $p.n > 1 and .id != "x""#,
                &["id", "payload"][..],
            ),
            (
                r#""\(.task)-\(.motivo)" | length > 3"#,
                &["motivo", "task"][..],
            ),
            (r#".["raw"].body | @base64d | test("x")"#, &["raw"][..]),
            (".payload | keys | length > 1", &["payload"][..]),
            (".payload | .[] | select(. == 1)", &["payload"][..]),
            ("try .payload.x catch false", &["payload"][..]),
            ("true", &[][..]),
            // Truthy whenever there is an output.
            (".", &[][..]),
            ("select(.task == \"x\")", &["task"][..]),
        ] {
            assert_eq!(fields(code), want, "{code}");
        }
    }

    #[test]
    fn seeing_the_record_whole_reads_all() {
        for code in [
            "keys | length > 3",
            "tojson | test(\"x\")",
            ". == {}",
            ".[] | strings",
            ".. | numbers",
            ". as $r | $r.id",
            "[.] | length",
            "{r: .}",
            "def f: .id; f",
            ".[\"pay\" + \"load\"]",
            "has(\"pay\" + \"load\")",
            "to_entries | length",
            "select(true) | length",
            ".payload = 1",
            "reduce .payload[] as $x (0; . + $x)",
            "if .x then . else 1 end | tostring",
            "\"\\(.)\"",
            "import \"m\" as m; .",
        ] {
            assert_eq!(Reads::of(code), Reads::All, "{code}");
        }
    }
}

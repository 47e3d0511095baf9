//! Python-style reprs of a task's arguments (`argsrepr` / `kwargsrepr`), bounded: for humans
//! reading worker logs and Flower, never parsed back.

use super::*;

/// A string that stops growing at [`MAX_REPR_CHARS`] + 1 characters, so a huge argument never
/// builds a huge repr.
struct Bounded {
    out: String,
    chars: usize,
}

impl Bounded {
    fn new() -> Self {
        Self {
            out: String::new(),
            chars: 0,
        }
    }
    fn full(&self) -> bool {
        self.chars > MAX_REPR_CHARS
    }
    fn push(&mut self, s: &str) {
        for c in s.chars() {
            if self.full() {
                return;
            }
            self.out.push(c);
            self.chars += 1;
        }
    }
    /// Truncated like Celery's saferepr: at most [`MAX_REPR_CHARS`], ending in `...` when cut.
    fn finish(self) -> String {
        if !self.full() {
            return self.out;
        }
        let mut cut: String = self.out.chars().take(MAX_REPR_CHARS - 3).collect();
        cut.push_str("...");
        cut
    }
}

/// Python-style repr of positional args, as a tuple: `(1, 'a')`, `(1,)`, `()`.
pub(super) fn args_repr(args: &Value) -> String {
    let mut b = Bounded::new();
    let items = args.as_array().map(Vec::as_slice).unwrap_or_default();
    b.push("(");
    for (i, item) in items.iter().enumerate() {
        if b.full() {
            break;
        }
        if i > 0 {
            b.push(", ");
        }
        py_repr(item, &mut b);
    }
    if items.len() == 1 {
        b.push(",");
    }
    b.push(")");
    b.finish()
}

pub(super) fn py_repr_bounded(v: &Value) -> String {
    let mut b = Bounded::new();
    py_repr(v, &mut b);
    b.finish()
}

/// Python-style repr of a JSON value (for humans reading logs and Flower; never parsed back).
fn py_repr(v: &Value, b: &mut Bounded) {
    if b.full() {
        return;
    }
    match v {
        Value::Null => b.push("None"),
        Value::Bool(true) => b.push("True"),
        Value::Bool(false) => b.push("False"),
        Value::Number(n) => b.push(n.as_str()),
        Value::String(s) => py_str_repr(s, b),
        Value::Array(items) => {
            b.push("[");
            for (i, item) in items.iter().enumerate() {
                if b.full() {
                    return;
                }
                if i > 0 {
                    b.push(", ");
                }
                py_repr(item, b);
            }
            b.push("]");
        }
        Value::Object(map) => {
            b.push("{");
            for (i, (k, item)) in map.iter().enumerate() {
                if b.full() {
                    return;
                }
                if i > 0 {
                    b.push(", ");
                }
                py_str_repr(k, b);
                b.push(": ");
                py_repr(item, b);
            }
            b.push("}");
        }
    }
}

fn py_str_repr(s: &str, b: &mut Bounded) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut q = [0u8; 4];
    b.push(quote.encode_utf8(&mut q));
    for c in s.chars() {
        if b.full() {
            return;
        }
        match c {
            '\\' => b.push("\\\\"),
            '\n' => b.push("\\n"),
            '\r' => b.push("\\r"),
            '\t' => b.push("\\t"),
            c if c == quote => {
                b.push("\\");
                b.push(c.encode_utf8(&mut q));
            }
            c if c.is_control() => {
                let code = u32::from(c);
                b.push(&if code < 0x100 {
                    format!("\\x{code:02x}")
                } else {
                    format!("\\u{code:04x}")
                });
            }
            c => b.push(c.encode_utf8(&mut q)),
        }
    }
    b.push(quote.encode_utf8(&mut q));
}

//! Reason fingerprints: variable parts masked so that "IntegrityError: null value in
//! column X ..." rows with different ids and values fall into one group.

use regex::Regex;
use std::sync::OnceLock;

struct Masks {
    rules: Vec<(Regex, &'static str)>,
    spaces: Regex,
}

fn masks() -> &'static Masks {
    static M: OnceLock<Masks> = OnceLock::new();
    M.get_or_init(|| {
        let rules = [
            // Timestamps before numbers, or their digits would be masked piecemeal.
            (
                r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}(:?\d{2})?)?",
                "<ts>",
            ),
            (r"\d{4}-\d{2}-\d{2}", "<date>"),
            // ASCII word boundaries (`(?-u:\b)`): a Unicode `\b` keeps the regex engine off
            // its fast DFA (fingerprinting was a fifth of a 100k-row replay plan); the tokens
            // are ASCII anyway, only a non-ASCII letter right against one now counts as a
            // boundary.
            (
                r"(?i)(?-u:\b)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?-u:\b)",
                "<uuid>",
            ),
            (r#""[^"\n]*""#, "\"<…>\""),
            (r"'[^'\n]*'", "'<…>'"),
            (r"(?-u:\b)0x[0-9a-fA-F]+(?-u:\b)", "<hex>"),
            (r"(?-u:\b)[0-9a-fA-F]{16,}(?-u:\b)", "<hex>"),
            (r"-?\d+(\.\d+)?", "<n>"),
        ];
        Masks {
            rules: rules
                .into_iter()
                .map(|(re, rep)| (Regex::new(re).expect("static regex"), rep))
                .collect(),
            spaces: Regex::new(r"\s+").expect("static regex"),
        }
    })
}

/// The line of a reason that names the error: for a Python traceback the last line
/// (the exception), otherwise the first non-empty line.
pub(crate) fn headline(reason: &str) -> &str {
    let mut lines = reason.lines().map(str::trim).filter(|l| !l.is_empty());
    let first = lines.next().unwrap_or("");
    if first.starts_with("Traceback (most recent call last)") {
        reason
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .unwrap_or(first)
    } else {
        first
    }
}

/// The fingerprint of a reason: its headline with ids, numbers, quoted values and
/// timestamps masked, whitespace collapsed, at most 200 characters.
pub(crate) fn fingerprint(reason: &str) -> String {
    let m = masks();
    let mut s = headline(reason).to_string();
    for (re, rep) in &m.rules {
        if re.is_match(&s) {
            s = re.replace_all(&s, *rep).into_owned();
        }
    }
    let s = m.spaces.replace_all(s.trim(), " ");
    s.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_error_different_values_share_a_fingerprint() {
        let a = r#"IntegrityError: null value in column "valor" of relation "pagamentos" violates not-null constraint DETAIL: Failing row contains (17, null, 2026-11-30 10:00:00)."#;
        let b = r#"IntegrityError: null value in column "moeda" of relation "pagamentos" violates not-null constraint DETAIL: Failing row contains (9123, null, 2026-11-29 08:15:02.123)."#;
        assert_eq!(fingerprint(a), fingerprint(b));
        assert!(fingerprint(a).starts_with("IntegrityError: null value in column"));
    }

    #[test]
    fn masks_uuids_and_hex() {
        assert_eq!(
            fingerprint(
                "KeyError: 'usuario_id' for 3f2b8c1e-1111-4a4a-9b9b-0123456789ab at 0xdeadbeef"
            ),
            "KeyError: '<…>' for <uuid> at <hex>"
        );
    }

    #[test]
    fn traceback_uses_the_exception_line() {
        let tb = "Traceback (most recent call last):\n  File \"x.py\", line 3, in f\n    g()\nValueError: bad 42\n";
        assert_eq!(fingerprint(tb), "ValueError: bad <n>");
        assert_eq!(fingerprint(""), "");
    }
}

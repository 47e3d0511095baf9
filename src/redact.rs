//! Credentials never reach output: URLs are shown with their password masked, and every
//! diagnostic passes through `scrub`, which masks every secret registered at start-up.

use std::sync::{OnceLock, RwLock};

const MASK: &str = "***";

/// One registered secret. One that could be a word of the output carries the pattern that
/// finds it where it stands as a secret, compiled once when it is registered rather than at
/// every line `scrub` masks.
struct Secret {
    text: String,
    in_context: Option<regex::Regex>,
}

fn secrets() -> &'static RwLock<Vec<Secret>> {
    static SECRETS: OnceLock<RwLock<Vec<Secret>>> = OnceLock::new();
    SECRETS.get_or_init(|| RwLock::new(Vec::new()))
}

/// Remembers the secret parts of a connection URL (password, password-like query
/// parameters, in raw and percent-decoded form) so that `scrub` masks them anywhere.
pub fn register_url(url: &str) {
    let Ok(parsed) = url::Url::parse(url) else {
        return;
    };
    let mut found = Vec::new();
    if let Some(p) = parsed.password() {
        found.push(p.to_string());
    }
    for (k, v) in parsed.query_pairs() {
        if is_secret_param(&k) {
            found.push(v.into_owned());
        }
    }
    let mut all = secrets().write().unwrap_or_else(|e| e.into_inner());
    for s in found {
        // Masking 1-3 character secrets everywhere would garble every message (a password
        // "p" would eat every p); URLs are still shown with their password masked.
        if s.chars().count() < 4 {
            continue;
        }
        let decoded = percent_decode(&s);
        for candidate in [s, decoded] {
            if !all.iter().any(|known| known.text == candidate) {
                let in_context = could_be_a_word(&candidate).then(|| where_secret(&candidate));
                all.push(Secret {
                    text: candidate,
                    in_context,
                });
            }
        }
    }
    // Longest first so that a secret containing another is masked whole.
    all.sort_by_key(|s| std::cmp::Reverse(s.text.len()));
}

fn is_secret_param(name: &str) -> bool {
    matches!(
        name.to_ascii_lowercase().as_str(),
        "password" | "pass" | "pwd" | "sslpassword" | "secret" | "token"
    )
}

fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| s.to_string())
}

/// Masks every registered secret in a diagnostic text. A secret that could be a word of
/// the output (`work`, `guest`: a queue, vhost or user name may contain it) is masked only
/// where it stands as a secret (URL userinfo, `password=...` and the like), so that a plan the
/// operator confirms shows the real names; any other secret is masked wherever it appears.
pub fn scrub(text: &str) -> String {
    let all = secrets().read().unwrap_or_else(|e| e.into_inner());
    let mut out = text.to_string();
    for s in all.iter() {
        if !out.contains(s.text.as_str()) {
            continue;
        }
        out = match &s.in_context {
            Some(re) => re.replace_all(&out, format!("${{1}}{MASK}")).into_owned(),
            None => out.replace(s.text.as_str(), MASK),
        };
    }
    out
}

/// Letters only, or short and alphanumeric: text that names things could contain it.
fn could_be_a_word(secret: &str) -> bool {
    secret.chars().all(char::is_alphabetic)
        || (secret.chars().count() <= 8 && secret.chars().all(char::is_alphanumeric))
}

/// Finds `secret` where it stands as one: `scheme://user:SECRET@`, or after a password-like
/// key (`password=SECRET`, `password: "SECRET"`, `PASSWORD 'SECRET'`); group 1 is what
/// precedes it.
fn where_secret(secret: &str) -> regex::Regex {
    let pattern = format!(
        r#"(?i)(://[^/\s:@]*:|\b(?:password|passwd|pass|pwd|secret|token)\b["']?\s*[=:]?\s*["']?){}"#,
        regex::escape(secret)
    );
    // The secret is escaped, so the pattern always compiles.
    regex::Regex::new(&pattern).expect("an escaped secret makes a valid pattern")
}

/// A URL fit for display: the password and password-like query parameters masked.
pub fn url(raw: &str) -> String {
    match url::Url::parse(raw) {
        Ok(mut u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some(MASK));
            }
            let pairs: Vec<(String, String)> = u
                .query_pairs()
                .map(|(k, v)| {
                    let v = if is_secret_param(&k) {
                        MASK.to_string()
                    } else {
                        v.into_owned()
                    };
                    (k.into_owned(), v)
                })
                .collect();
            if !pairs.is_empty() {
                u.query_pairs_mut().clear().extend_pairs(pairs);
            }
            u.to_string()
        }
        // Unparsable: show only the scheme-ish prefix, never the rest.
        Err(_) => {
            let prefix: String = raw.chars().take_while(|c| *c != ':').take(16).collect();
            format!("{prefix}:{MASK}")
        }
    }
}

/// A password with `/`, `:` or `@` left as is splits the URL in the wrong place, and the
/// parser then complains about the port: say what to do instead.
pub(crate) fn encoding_hint(e: url::ParseError) -> &'static str {
    match e {
        url::ParseError::InvalidPort => {
            " (if the user name or password contains / : @ # or ?, percent-encode it: / is %2F, : is %3A, @ is %40, # is %23, ? is %3F)"
        }
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_password_in_url() {
        assert_eq!(
            url("postgres://app:s3cr%40t@db:5432/x?sslmode=require&password=zz"),
            "postgres://app:***@db:5432/x?sslmode=require&password=***"
        );
        assert_eq!(url("amqp://guest@h/%2f"), "amqp://guest@h/%2f");
    }

    #[test]
    fn unparsable_url_shows_no_secret() {
        let shown = url("postgres//user:hunter2@@@");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn a_wordlike_password_is_masked_only_where_it_is_a_password() {
        register_url("amqp://guest:work@h/qa.work");
        register_url("amqp://guest:guest@h/%2f");
        assert_eq!(
            scrub("move 3 message(s) from qa.work.dlq to queue work.orders"),
            "move 3 message(s) from qa.work.dlq to queue work.orders"
        );
        assert_eq!(
            scrub("connecting to amqp://guest:work@h/qa.work"),
            "connecting to amqp://guest:***@h/qa.work"
        );
        assert_eq!(scrub("amqp://guest:guest@h/%2f"), "amqp://guest:***@h/%2f");
        assert_eq!(
            scrub("login refused: password 'work' invalid"),
            "login refused: password '***' invalid"
        );
    }

    #[test]
    fn scrub_masks_raw_and_decoded_password() {
        register_url("mysql://u:p%40ssw0rd-unique@h/db");
        assert_eq!(scrub("a p@ssw0rd-unique b"), "a *** b");
        assert_eq!(scrub("a p%40ssw0rd-unique b"), "a *** b");
    }
}

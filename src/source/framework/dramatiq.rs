//! dramatiq: the whole message is a JSON object in the body (`queue_name`, `actor_name`,
//! `args`, `kwargs`, `options`, `message_id`, `message_timestamp`). Its Retries middleware
//! writes `options.retries` and the last failure's `options.traceback` into each retry it
//! enqueues, so a message that died after retrying carries the error of the attempt before.

use super::Facts;
use lapin::types::FieldTable;
use serde_json::Value;

pub(super) fn recognise(_headers: Option<&FieldTable>, body: &[u8]) -> Option<Facts> {
    // Cheap refusal first: most messages are not JSON objects naming an actor.
    if body.first() != Some(&b'{') || !contains(body, b"\"actor_name\"") {
        return None;
    }
    let v: Value = serde_json::from_slice(body).ok()?;
    let o = v.as_object()?;
    let actor = o.get("actor_name")?.as_str()?;
    o.get("queue_name")?.as_str()?;
    let options = o.get("options").and_then(Value::as_object);
    let option = |k: &str| options.and_then(|op| op.get(k));
    Some(Facts {
        framework: "dramatiq",
        id: o
            .get("message_id")
            .and_then(Value::as_str)
            .map(str::to_owned),
        task: Some(actor.to_owned()),
        error: option("traceback")
            .and_then(Value::as_str)
            .and_then(last_line),
        retries: option("retries").and_then(Value::as_u64),
    })
}

/// A Python traceback's last line: the exception and its message (`ValueError: boom`).
fn last_line(traceback: &str) -> Option<String> {
    traceback
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(str::to_owned)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retried_dramatiq_message_names_its_actor_error_and_retries() {
        let body = br#"{"queue_name":"default","actor_name":"charge","args":[1],"kwargs":{},
            "options":{"retries":3,"max_retries":3,"traceback":"Traceback (most recent call last):\n  File \"app.py\", line 9, in charge\n    raise ValueError('card declined')\nValueError: card declined\n"},
            "message_id":"5d1e0c1a-0000-4000-8000-000000000001","message_timestamp":1764669600000}"#;
        let f = recognise(None, body).unwrap();
        assert_eq!(f.framework, "dramatiq");
        assert_eq!(f.task.as_deref(), Some("charge"));
        assert_eq!(
            f.id.as_deref(),
            Some("5d1e0c1a-0000-4000-8000-000000000001")
        );
        assert_eq!(f.error.as_deref(), Some("ValueError: card declined"));
        assert_eq!(f.retries, Some(3));
    }

    #[test]
    fn a_first_failure_has_no_error_and_other_json_is_not_dramatiq() {
        let body = br#"{"queue_name":"q","actor_name":"a","args":[],"kwargs":{},"options":{},"message_id":"m","message_timestamp":1}"#;
        let f = recognise(None, body).unwrap();
        assert_eq!((f.error, f.retries), (None, None));
        assert!(recognise(None, br#"{"actor_name":"a"}"#).is_none());
        assert!(recognise(None, br#"[[],{},{}]"#).is_none());
        assert!(recognise(None, b"{\"actor_name\": not json").is_none());
    }
}

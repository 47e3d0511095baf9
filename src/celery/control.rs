//! Celery's remote control as dlq uses it, on any broker: which methods may be sent, the
//! request body kombu's `Mailbox._publish` sends, and an answer matched to its request.
//!
//! The same mailbox accepts `shutdown`, `pool_restart` and `revoke`: dlq sends only the methods
//! of [`Method`]. The read-only ones are sent for the worker check and `--follow`'s probe; the
//! two that change a worker (`enable_events`, `disable_events`) only under `--enable-events`.

use serde_json::{Value, json};

use super::workers::Mailbox;

/// Every remote-control method dlq ever sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Method {
    /// The task names a worker registers (read-only).
    Registered,
    /// The queues a worker consumes (read-only).
    ActiveQueues,
    /// Makes a worker whose event dispatcher is on send a `worker-heartbeat` now (read-only:
    /// it only proves events can flow).
    Heartbeat,
    /// Adds the `task` group to a worker's events (`--enable-events` only).
    EnableEvents,
    /// Takes it out again, for the workers dlq turned it on for.
    DisableEvents,
}

impl Method {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Method::Registered => "registered",
            Method::ActiveQueues => "active_queues",
            Method::Heartbeat => "heartbeat",
            Method::EnableEvents => "enable_events",
            Method::DisableEvents => "disable_events",
        }
    }

    fn arguments(self) -> Value {
        match self {
            Method::Registered => json!({"taskinfoitems": []}),
            _ => json!({}),
        }
    }
}

/// One request: a method, to every worker or to the named ones.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub(crate) method: Method,
    /// Worker hostnames; `None`: broadcast to all.
    pub(crate) destination: Option<Vec<String>>,
}

impl Call {
    pub(crate) fn all(method: Method) -> Call {
        Call {
            method,
            destination: None,
        }
    }

    pub(crate) fn to(method: Method, workers: &[String]) -> Call {
        Call {
            method,
            destination: Some(workers.to_vec()),
        }
    }
}

/// One worker's answer to one call.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Answer {
    pub(crate) method: Method,
    pub(crate) host: String,
    pub(crate) result: Value,
}

/// A sent call, known by its ticket.
pub(crate) type Ticket = (String, Method);

/// The body kombu's `Mailbox._publish` sends, with a reply, on any broker.
pub(crate) fn request_body(mailbox: &Mailbox, call: &Call, ticket: &str, oid: &str) -> Value {
    json!({
        "method": call.method.name(),
        "arguments": call.method.arguments(),
        "destination": call.destination,
        "pattern": null,
        "matcher": null,
        "ticket": ticket,
        "reply_to": {"exchange": mailbox.reply, "routing_key": oid},
    })
}

/// A reply body, `{"<hostname>": <result>}`, for the call its `ticket` names. None for another
/// ticket (someone else's, or a late answer) and for anything that is not one entry.
pub(crate) fn answer(tickets: &[Ticket], ticket: Option<&str>, body: &[u8]) -> Option<Answer> {
    let &(_, method) = tickets.iter().find(|(t, _)| Some(t.as_str()) == ticket)?;
    let Value::Object(reply) = serde_json::from_slice(body).ok()? else {
        return None;
    };
    // kombu's Node.dispatch always answers with exactly one entry.
    if reply.len() != 1 {
        return None;
    }
    let (host, result) = reply.into_iter().next()?;
    Some(Answer {
        method,
        host,
        result,
    })
}

/// Whether an answer list holds one from each of `hosts` for `method`: a call to named workers
/// is done once they all answered.
pub(crate) fn all_answered(answers: &[Answer], calls: &[Call]) -> bool {
    calls.iter().all(|c| match &c.destination {
        None => false,
        Some(hosts) => hosts
            .iter()
            .all(|h| answers.iter().any(|a| a.method == c.method && &a.host == h)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_match_their_ticket() {
        let tickets = vec![("t1".to_owned(), Method::EnableEvents)];
        let body = br#"{"w@h": {"ok": "task events enabled"}}"#;
        let got = answer(&tickets, Some("t1"), body).unwrap();
        assert_eq!(got.method, Method::EnableEvents);
        assert_eq!(got.host, "w@h");
        assert_eq!(got.result["ok"], "task events enabled");
        assert_eq!(answer(&tickets, Some("t2"), body), None);
        assert_eq!(answer(&tickets, None, body), None);
        assert_eq!(answer(&tickets, Some("t1"), br#"{"a":1,"b":2}"#), None);
        assert_eq!(answer(&tickets, Some("t1"), b"[1]"), None);
    }

    #[test]
    fn a_named_call_is_done_when_each_named_worker_answered() {
        let calls = [Call::to(Method::EnableEvents, &["a".into(), "b".into()])];
        let one = Answer {
            method: Method::EnableEvents,
            host: "a".into(),
            result: Value::Null,
        };
        assert!(!all_answered(std::slice::from_ref(&one), &calls));
        let two = Answer {
            host: "b".into(),
            ..one.clone()
        };
        assert!(all_answered(&[one.clone(), two], &calls));
        assert!(!all_answered(&[one], &[Call::all(Method::Heartbeat)]));
    }

    #[test]
    fn the_body_is_kombus() {
        let mb = Mailbox::new("celery");
        let b = request_body(
            &mb,
            &Call::to(Method::DisableEvents, &["w@h".into()]),
            "t",
            "o",
        );
        assert_eq!(b["method"], "disable_events");
        assert_eq!(b["destination"], json!(["w@h"]));
        assert_eq!(b["reply_to"]["exchange"], "reply.celery.pidbox");
        let b = request_body(&mb, &Call::all(Method::Registered), "t", "o");
        assert_eq!(b["arguments"], json!({"taskinfoitems": []}));
        assert_eq!(b["destination"], Value::Null);
    }
}

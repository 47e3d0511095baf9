//! Asking the live Celery workers what they run (remote control), and deciding from their
//! answers whether stored task names can be replayed.
//!
//! The wire format is kombu's `Mailbox` as Celery configures it (`celery/app/control.py`,
//! `kombu/pidbox.py`): requests go to the fanout exchange `celery.pidbox`; each worker answers
//! `{"<hostname>": <result>}` on the direct exchange `reply.celery.pidbox`, with the routing key
//! the request named and the request's `ticket` header.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::rabbit::Connection;
use anyhow::{Context, Result};
use futures_util::StreamExt;
use lapin::options::{BasicPublishOptions, ExchangeDeclareOptions, QueueDeleteOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Consumer, ExchangeKind};
use serde_json::Value;

use super::control::{self, Answer, Call, Method, Ticket};

use crate::rabbit;
use crate::rabbit::publish::{exchange_exists, scrubbed};

/// Celery's remote-control mailbox for one `control_exchange` (default `celery`; apps sharing
/// a vhost set their own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mailbox {
    /// kombu's `'%s.pidbox' % control_exchange`: the fanout the requests go to.
    pub(crate) request: String,
    /// kombu's `'reply.%s.pidbox' % control_exchange`: the direct exchange of the answers.
    pub(crate) reply: String,
}

impl Mailbox {
    pub(crate) fn new(control_exchange: &str) -> Mailbox {
        Mailbox {
            request: format!("{control_exchange}.pidbox"),
            reply: format!("reply.{control_exchange}.pidbox"),
        }
    }
}
/// Celery's `control_queue_expires` (10 s), which kombu sets as the reply queue's `x-expires`:
/// a backstop should the explicit delete below never reach the broker.
const REPLY_QUEUE_EXPIRES_MS: i32 = 10_000;

/// One live worker as it answered.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct Worker {
    pub(crate) name: String,
    pub(crate) queues: Vec<String>,
    pub(crate) tasks: Vec<String>,
}

/// The worker check's two read-only questions.
pub(crate) fn check_calls() -> [Call; 2] {
    [
        Call::all(Method::Registered),
        Call::all(Method::ActiveQueues),
    ]
}

/// Asks every worker on the connection's vhost, once: one `registered` and one `active_queues`
/// broadcast (both sent at once, both answered into one reply queue), collecting replies until
/// `timeout`. Workers sorted by name, queues and tasks sorted. An empty Vec means no worker answered.
pub(crate) async fn ask_amqp(
    conn: &Connection,
    mailbox: &Mailbox,
    timeout: Duration,
) -> Result<Vec<Worker>> {
    let answers = call_amqp(conn, mailbox, &check_calls(), timeout).await?;
    Ok(workers_from(&answers))
}

/// Sends `calls` at once and collects the answers until `timeout`, or until every named worker
/// answered. Leaves nothing behind on the broker (reply queue auto-deleted / exclusive; channel
/// closed).
pub(crate) async fn call_amqp(
    conn: &Connection,
    mailbox: &Mailbox,
    calls: &[Call],
    timeout: Duration,
) -> Result<Vec<Answer>> {
    // Every worker declares the request exchange when it starts listening: without it no
    // worker ever listened on this vhost, and nothing needs creating to know that.
    if !exchange_exists(conn, &mailbox.request).await? {
        return Ok(Vec::new());
    }
    let ch = conn.create_channel().await.map_err(scrubbed)?;
    let oid = uuid::Uuid::new_v4().to_string();
    let reply_queue = format!("{oid}.{}", mailbox.reply);
    let answers = ask_on(&ch, mailbox, calls, &oid, &reply_queue, timeout).await;
    // Deleted now rather than left to auto-delete / x-expires, so that nothing lingers even
    // when the close is slow; after an error the channel is gone and the exclusive queue with
    // the connection.
    let _ = ch
        .queue_delete(reply_queue.as_str().into(), QueueDeleteOptions::default())
        .await;
    rabbit::close_channel(&ch, "dlq: workers asked").await;
    answers.with_context(|| format!("asking the Celery workers over {}", mailbox.request))
}

/// Opens the reply queue, sends the requests and collects the answers.
async fn ask_on(
    ch: &Channel,
    mailbox: &Mailbox,
    calls: &[Call],
    oid: &str,
    reply_queue: &str,
    timeout: Duration,
) -> Result<Vec<Answer>> {
    // Bound and consumed before the requests go out: a quick worker's answer must find it.
    let replies = open_reply_queue(ch, &mailbox.reply, oid, reply_queue).await?;
    let deadline = tokio::time::Instant::now() + timeout;
    let mut tickets = Vec::new();
    for call in calls {
        tickets.push((request(ch, mailbox, call, oid, timeout).await?, call.method));
    }
    collect(replies, &tickets, calls, deadline).await
}

/// The reply queue, bound to the reply exchange by `oid`, with a consumer on it.
async fn open_reply_queue(
    ch: &Channel,
    reply_exchange: &str,
    oid: &str,
    reply_queue: &str,
) -> Result<Consumer> {
    // kombu's own flags (`Mailbox._get_reply_exchange`): once a worker declared it, any other
    // durable/auto_delete is refused with PRECONDITION_FAILED, and a worker would be on ours.
    let kombu = ExchangeDeclareOptions {
        durable: false,
        auto_delete: false,
        ..Default::default()
    };
    let none = FieldTable::default;
    ch.exchange_declare(reply_exchange.into(), ExchangeKind::Direct, kombu, none())
        .await
        .map_err(scrubbed)?;
    // kombu's is auto-delete with x-expires; exclusive as well, so it dies with our connection.
    let mut args = FieldTable::default();
    args.insert(
        "x-expires".into(),
        AMQPValue::LongInt(REPLY_QUEUE_EXPIRES_MS),
    );
    let bindings = [(reply_exchange, oid)];
    crate::rabbit::private::listen(ch, reply_queue, args, &bindings, "dlq-workers").await
}

/// Answers to our tickets until the deadline (or until every named worker answered).
async fn collect(
    mut replies: Consumer,
    tickets: &[Ticket],
    calls: &[Call],
    deadline: tokio::time::Instant,
) -> Result<Vec<Answer>> {
    let mut answers = Vec::new();
    while !control::all_answered(&answers, calls) {
        let next = tokio::select! {
            d = replies.next() => d,
            _ = tokio::time::sleep_until(deadline) => break,
        };
        // None: the broker cancelled the consumer; keep what came.
        let Some(delivery) = next else { break };
        let delivery = delivery.map_err(scrubbed)?;
        let ticket = header_str(&delivery.properties, "ticket");
        answers.extend(control::answer(tickets, ticket, &delivery.data));
    }
    Ok(answers)
}

/// Publishes one request exactly as kombu's `Mailbox._publish` does; returns its ticket.
async fn request(
    ch: &Channel,
    mailbox: &Mailbox,
    call: &Call,
    oid: &str,
    timeout: Duration,
) -> Result<String> {
    let ticket = uuid::Uuid::new_v4().to_string();
    let body = control::request_body(mailbox, call, &ticket, oid);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut headers = FieldTable::default();
    // A Lamport clock value; workers only take the maximum of it and theirs.
    headers.insert("clock".into(), AMQPValue::LongLongInt(1));
    headers.insert(
        "expires".into(),
        AMQPValue::Double((now + timeout).as_secs_f64()),
    );
    let props = BasicProperties::default()
        .with_content_type("application/json".into())
        .with_content_encoding("utf-8".into())
        .with_delivery_mode(1)
        .with_headers(headers);
    let payload = serde_json::to_vec(&body)?;
    // Fanout: the routing key is ignored, kombu sends it empty.
    ch.basic_publish(
        mailbox.request.as_str().into(),
        "".into(),
        BasicPublishOptions::default(),
        &payload,
        props,
    )
    .await
    .map_err(scrubbed)?;
    Ok(ticket)
}

/// A string header (kombu sends `ticket` as a long string).
fn header_str<'a>(props: &'a BasicProperties, key: &str) -> Option<&'a str> {
    match props.headers().as_ref()?.inner().get(key)? {
        AMQPValue::LongString(s) => std::str::from_utf8(s.as_bytes()).ok(),
        AMQPValue::ShortString(s) => Some(s.as_str()),
        _ => None,
    }
}

/// The worker check's answers, by worker, whichever broker they came over.
pub(crate) fn workers_from(answers: &[Answer]) -> Vec<Worker> {
    let mut workers: BTreeMap<String, Worker> = BTreeMap::new();
    for a in answers {
        let Some(names) = names(a.method, &a.result) else {
            continue;
        };
        let w = workers.entry(a.host.clone()).or_insert_with(|| Worker {
            name: a.host.clone(),
            queues: Vec::new(),
            tasks: Vec::new(),
        });
        match a.method {
            Method::Registered => w.tasks.extend(names),
            _ => w.queues.extend(names),
        }
    }
    workers.into_values().map(tidy).collect()
}

/// The names one answer lists: task names for `registered`, queue names for `active_queues`.
/// None for anything else, including a worker's `{"error": "..."}` when its handler failed.
fn names(method: Method, result: &Value) -> Option<Vec<String>> {
    let items = result.as_array()?;
    let name = |item: &Value| -> Option<String> {
        let name = match method {
            // With no taskinfoitems the worker falls back to exchange, routing_key and
            // rate_limit, and appends those set: `tasks.a [rate_limit=10/m]`.
            Method::Registered => item.as_str()?.split(' ').next()?,
            Method::ActiveQueues => item.get("name")?.as_str()?,
            _ => return None,
        };
        Some(name.trim().to_owned()).filter(|n| !n.is_empty())
    };
    if !matches!(method, Method::Registered | Method::ActiveQueues) {
        return None;
    }
    Some(items.iter().filter_map(name).collect())
}

/// Sorted and deduplicated, whichever broker the answers came over.
fn tidy(mut w: Worker) -> Worker {
    w.queues.sort();
    w.queues.dedup();
    w.tasks.sort();
    w.tasks.dedup();
    w
}

/// Names to send instead of the stored ones: `--task-map OLD=NEW` (repeatable).
#[derive(Debug, Clone, Default)]
pub(crate) struct TaskMap(std::collections::BTreeMap<String, String>);

impl TaskMap {
    /// Errors (a message naming the bad entry): no `=`, an empty side (after trimming), one OLD
    /// mapped to two different NEWs. Same OLD=NEW twice is fine. Names may contain dots, colons,
    /// unicode. Split at the first `=`: task names never contain one, NEW might in theory.
    pub(crate) fn parse(entries: &[String]) -> Result<TaskMap, String> {
        let mut map = std::collections::BTreeMap::new();
        for entry in entries {
            let Some((old, new)) = entry.split_once('=') else {
                return Err(format!("--task-map {entry:?}: expected OLD=NEW"));
            };
            let (old, new) = (old.trim(), new.trim());
            if old.is_empty() || new.is_empty() {
                let side = if old.is_empty() { "OLD" } else { "NEW" };
                return Err(format!(
                    "--task-map {entry:?}: {side} is empty, expected OLD=NEW"
                ));
            }
            match map.get(old) {
                Some(prev) if prev != new => {
                    return Err(format!(
                        "--task-map {entry:?}: {old} is already mapped to {prev}"
                    ));
                }
                _ => map.insert(old.to_owned(), new.to_owned()),
            };
        }
        Ok(TaskMap(map))
    }

    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(crate) fn sent_name<'a>(&'a self, stored: &'a str) -> &'a str {
        self.0.get(stored).map_or(stored, String::as_str)
    }
}

/// What the check decided for one stored task name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub(crate) struct TaskVerdict {
    pub(crate) stored: String,
    pub(crate) sent: String,
    pub(crate) rows: u64,
    /// Workers consuming the queue that register `sent`; empty = refused.
    pub(crate) runners: Vec<String>,
    /// When refused: the human reason (what is wrong, and the `--task-map` that would fix it).
    pub(crate) problem: Option<String>,
}

/// Pure: for every (stored task name -> row count), whether a worker consuming `queue` registers
/// the (mapped) name. Sorted by stored name. Suggestions: registered names (of any worker)
/// closest to the sent name — exact match of the last dotted/colon segment first, then small
/// edit distance (Levenshtein ≤ 1/3 of the length), at most 3, each with its worker(s).
/// `unit` names what is counted: "row" (a table) or "message" (a queue).
pub(crate) fn check(
    workers: &[Worker],
    queue: &str,
    tasks: &BTreeMap<String, u64>,
    map: &TaskMap,
    unit: &str,
) -> Vec<TaskVerdict> {
    tasks
        .iter()
        .map(|(stored, &rows)| {
            let count = count_text(rows, unit);
            verdict(workers, queue, stored, rows, map.sent_name(stored), &count)
        })
        .collect()
}

fn verdict(
    workers: &[Worker],
    queue: &str,
    stored: &str,
    rows: u64,
    sent: &str,
    count: &str,
) -> TaskVerdict {
    let registers = |w: &&Worker| w.tasks.iter().any(|t| t == sent);
    let (consumers, others): (Vec<&Worker>, Vec<&Worker>) =
        workers.iter().partition(|w| consumes(w, queue));
    let runners: Vec<String> = consumers
        .into_iter()
        .filter(registers)
        .map(|w| w.name.clone())
        .collect();
    let problem = runners.is_empty().then(|| {
        let head = match stored == sent {
            true => format!("{stored} ({count})"),
            false => format!("{stored} ({count}, sent as {sent})"),
        };
        let elsewhere: Vec<&Worker> = others.into_iter().filter(registers).collect();
        if elsewhere.is_empty() {
            unknown(&head, workers, queue, stored, sent)
        } else {
            let which: Vec<String> = elsewhere.iter().map(|w| consumes_text(w)).collect();
            format!(
                "{head}: registered only by workers that do not consume {queue:?} ({})",
                which.join("; ")
            )
        }
    });
    TaskVerdict {
        stored: stored.to_owned(),
        sent: sent.to_owned(),
        rows,
        runners,
        problem,
    }
}

/// No consumer of the queue registers it, nor does any other worker: suggest close names.
fn unknown(head: &str, workers: &[Worker], queue: &str, stored: &str, sent: &str) -> String {
    let mut text = format!("{head}: no worker consuming {queue:?} registers it");
    let found = suggestions(workers, queue, sent);
    if let Some((first, _)) = found.first() {
        let listed: Vec<String> = found
            .iter()
            .map(|(name, by)| format!("{name} ({})", by.join(", ")))
            .collect();
        let listed = match listed.split_last() {
            Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
            _ => listed.join(""),
        };
        text.push_str(&format!(
            "; did you mean {listed}? Use --task-map {stored}={first}"
        ));
    }
    text
}

/// At most 3 registered names close to `sent`, each with the workers registering it. Within a
/// tier, names a consumer of the queue registers come first: the hint maps to the first one.
fn suggestions(workers: &[Worker], queue: &str, sent: &str) -> Vec<(String, Vec<String>)> {
    let mut by_name: BTreeMap<&str, (bool, Vec<String>)> = BTreeMap::new();
    for w in workers {
        for t in w.tasks.iter().filter(|t| t.as_str() != sent) {
            let e = by_name.entry(t).or_default();
            e.0 |= consumes(w, queue);
            e.1.push(w.name.clone());
        }
    }
    let mut ranked: Vec<_> = by_name
        .into_iter()
        .filter_map(|(name, (consumed, by))| {
            let (tier, d) = closeness(sent, name)?;
            Some(((tier, !consumed, d, name), by))
        })
        .collect();
    ranked.sort();
    ranked
        .into_iter()
        .take(3)
        .map(|((_, _, _, name), by)| (name.to_owned(), by))
        .collect()
}

/// (0, _) when the last dotted/colon segments are equal (`tasks.x` for `x`), else (1, distance)
/// when the last segments are within a third of the sent one's length. Segments, not whole
/// names: a shared `tasks.` prefix would make `tasks.gone` look close to `tasks.new`.
fn closeness(sent: &str, name: &str) -> Option<(u8, usize)> {
    let (a, b) = (last_segment(sent), last_segment(name));
    if a.is_empty() {
        return None;
    }
    if a == b {
        return Some((0, levenshtein(sent, name)));
    }
    let d = levenshtein(a, b);
    (d * 3 <= a.chars().count()).then_some((1, d))
}

fn last_segment(name: &str) -> &str {
    name.rsplit(['.', ':']).next().unwrap_or(name)
}

/// Edit distance over chars (names may be unicode), two rows.
fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let swap = prev[j] + usize::from(ca != cb);
            cur[j + 1] = swap.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

fn consumes(w: &Worker, queue: &str) -> bool {
    w.queues.iter().any(|q| q == queue)
}

/// `w2@h consumes "other"`, `w2@h consumes "a", "b"`, `w2@h consumes nothing`.
fn consumes_text(w: &Worker) -> String {
    if w.queues.is_empty() {
        return format!("{} consumes nothing", w.name);
    }
    let queues: Vec<String> = w.queues.iter().map(|q| format!("{q:?}")).collect();
    format!("{} consumes {}", w.name, queues.join(", "))
}

fn count_text(n: u64, unit: &str) -> String {
    match n {
        1 => format!("1 {unit}"),
        n => format!("{n} {unit}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(name: &str, queues: &[&str], tasks: &[&str]) -> Worker {
        Worker {
            name: name.to_owned(),
            queues: queues.iter().map(|s| s.to_string()).collect(),
            tasks: tasks.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn entries(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn tasks(list: &[(&str, u64)]) -> BTreeMap<String, u64> {
        list.iter().map(|(n, r)| (n.to_string(), *r)).collect()
    }

    #[test]
    fn task_map_parses_and_trims() {
        let m = TaskMap::parse(&entries(&[
            " liberar = tasks.liberar ",
            "app:old=app.módulo:nova_tarefa",
            "liberar=tasks.liberar",
        ]))
        .unwrap();
        assert!(!m.is_empty());
        assert_eq!(m.sent_name("liberar"), "tasks.liberar");
        assert_eq!(m.sent_name("app:old"), "app.módulo:nova_tarefa");
        assert_eq!(m.sent_name("other"), "other");
        assert!(TaskMap::parse(&[]).unwrap().is_empty());
        assert!(TaskMap::default().is_empty());
    }

    #[test]
    fn task_map_rejects_bad_entries() {
        let err = |list: &[&str]| TaskMap::parse(&entries(list)).unwrap_err();
        assert_eq!(err(&["a"]), r#"--task-map "a": expected OLD=NEW"#);
        assert_eq!(
            err(&["=b"]),
            r#"--task-map "=b": OLD is empty, expected OLD=NEW"#
        );
        assert_eq!(
            err(&["a= "]),
            r#"--task-map "a= ": NEW is empty, expected OLD=NEW"#
        );
        assert!(err(&[" = "]).contains("OLD is empty"));
        assert!(err(&["ok=fine", ""]).contains(r#""""#));
        assert_eq!(
            err(&["a=b", "a=c"]),
            r#"--task-map "a=c": a is already mapped to b"#
        );
    }

    #[test]
    fn check_accepts_a_registered_task() {
        let ws = [
            worker("w1@h", &["celery"], &["tasks.a"]),
            worker("w2@h", &["celery", "other"], &["tasks.a", "tasks.b"]),
        ];
        let v = check(
            &ws,
            "celery",
            &tasks(&[("tasks.a", 2)]),
            &TaskMap::default(),
            "row",
        );
        assert_eq!(
            v,
            [TaskVerdict {
                stored: "tasks.a".into(),
                sent: "tasks.a".into(),
                rows: 2,
                runners: vec!["w1@h".into(), "w2@h".into()],
                problem: None,
            }]
        );
    }

    #[test]
    fn check_suggests_the_dotted_name_with_the_exact_hint() {
        let ws = [worker(
            "celery@host1",
            &["celery"],
            &["tasks.liberar_acesso_curso", "tasks.x"],
        )];
        let v = check(
            &ws,
            "celery",
            &tasks(&[("liberar_acesso_curso", 50)]),
            &TaskMap::default(),
            "row",
        );
        assert!(v[0].runners.is_empty());
        assert_eq!(
            v[0].problem.as_deref(),
            Some(
                "liberar_acesso_curso (50 rows): no worker consuming \"celery\" registers it; \
                 did you mean tasks.liberar_acesso_curso (celery@host1)? \
                 Use --task-map liberar_acesso_curso=tasks.liberar_acesso_curso"
            )
        );
    }

    #[test]
    fn check_ranks_suffix_first_then_edit_distance_at_most_three() {
        let ws = [
            worker(
                "w1@h",
                &["celery"],
                &["tasks.send_mail", "tasks.send_mails"],
            ),
            worker(
                "w2@h",
                &["other"],
                &["mail.send_mail", "tasks.send_mai", "tasks.unrelated"],
            ),
        ];
        let v = check(
            &ws,
            "celery",
            &tasks(&[("send_mail", 1)]),
            &TaskMap::default(),
            "row",
        );
        assert_eq!(
            v[0].problem.as_deref(),
            Some(
                "send_mail (1 row): no worker consuming \"celery\" registers it; did you mean \
                 tasks.send_mail (w1@h), mail.send_mail (w2@h) or tasks.send_mails (w1@h)? \
                 Use --task-map send_mail=tasks.send_mail"
            )
        );
    }

    #[test]
    fn check_reports_workers_not_consuming_the_queue() {
        let ws = [
            worker("w1@h", &["celery"], &["tasks.a"]),
            worker("w2@h", &["other"], &["x"]),
            worker("w3@h", &[], &["x"]),
        ];
        let v = check(
            &ws,
            "celery",
            &tasks(&[("x", 3)]),
            &TaskMap::default(),
            "row",
        );
        assert!(v[0].runners.is_empty());
        assert_eq!(
            v[0].problem.as_deref(),
            Some(
                "x (3 rows): registered only by workers that do not consume \"celery\" \
                 (w2@h consumes \"other\"; w3@h consumes nothing)"
            )
        );
    }

    #[test]
    fn check_uses_mapped_names_sorted_by_stored_name() {
        let ws = [worker("w1@h", &["celery"], &["tasks.new", "tasks.b"])];
        let map = TaskMap::parse(&entries(&["old=tasks.new", "zzz=tasks.gone"])).unwrap();
        let v = check(
            &ws,
            "celery",
            &tasks(&[("zzz", 4), ("old", 7), ("tasks.b", 1)]),
            &map,
            "row",
        );
        let order: Vec<&str> = v.iter().map(|t| t.stored.as_str()).collect();
        assert_eq!(order, ["old", "tasks.b", "zzz"]);
        assert_eq!(v[0].sent, "tasks.new");
        assert_eq!(v[0].runners, ["w1@h"]);
        assert_eq!(v[0].problem, None);
        assert_eq!(v[1].runners, ["w1@h"]);
        assert_eq!(
            v[2].problem.as_deref(),
            Some("zzz (4 rows, sent as tasks.gone): no worker consuming \"celery\" registers it")
        );
    }

    #[test]
    fn check_with_no_workers_refuses_everything_plainly() {
        let v = check(
            &[],
            "q",
            &tasks(&[("a", 1), ("b", 2)]),
            &TaskMap::default(),
            "row",
        );
        assert_eq!(v.len(), 2);
        assert_eq!(
            v[0].problem.as_deref(),
            Some("a (1 row): no worker consuming \"q\" registers it")
        );
        assert_eq!(
            v[1].problem.as_deref(),
            Some("b (2 rows): no worker consuming \"q\" registers it")
        );
    }

    #[test]
    fn closeness_and_distance() {
        assert_eq!(levenshtein("kitten", "sitting"), 3);
        assert_eq!(levenshtein("ação", "acao"), 2);
        assert_eq!(last_segment("proj.app:task"), "task");
        assert_eq!(closeness("x", "tasks.x"), Some((0, 6)));
        assert_eq!(closeness("tasks.liberar", "tasks.liberal"), Some((1, 1)));
        assert_eq!(
            closeness("liberar_acesso_cursos", "tasks.liberar_acesso_curso"),
            Some((1, 1))
        );
        assert_eq!(closeness("tasks.gone", "tasks.new"), None);
        assert_eq!(closeness("abc", "xyz"), None);
        assert_eq!(closeness("tasks.", "x."), None);
    }

    fn parsed(method: Method, body: &[u8]) -> Option<(String, Vec<String>)> {
        let tickets = vec![("t".to_owned(), method)];
        let a = control::answer(&tickets, Some("t"), body)?;
        Some((a.host.clone(), names(a.method, &a.result)?))
    }

    #[test]
    fn parses_registered_replies_as_celery_sends_them() {
        let body = br#"{"w1@vm": ["tasks.add [rate_limit=10/m]", "tasks.liberar_acesso_curso"]}"#;
        assert_eq!(
            parsed(Method::Registered, body),
            Some((
                "w1@vm".into(),
                vec!["tasks.add".into(), "tasks.liberar_acesso_curso".into()]
            ))
        );
        let empty = br#"{"celery@host1": []}"#;
        assert_eq!(
            parsed(Method::Registered, empty),
            Some(("celery@host1".into(), vec![]))
        );
    }

    #[test]
    fn parses_active_queues_replies_as_celery_sends_them() {
        let body = br#"{"w1@vm": [{"name": "somequeue", "exchange": {"name": "somequeue",
            "type": "direct", "arguments": null, "durable": true, "passive": false,
            "auto_delete": false, "delivery_mode": null, "no_declare": false},
            "routing_key": "somequeue", "queue_arguments": null, "binding_arguments": null,
            "consumer_arguments": null, "durable": true, "exclusive": false,
            "auto_delete": false, "no_ack": false, "alias": null, "bindings": [],
            "no_declare": null, "expires": null, "message_ttl": null, "max_length": null,
            "max_length_bytes": null, "max_priority": null}]}"#;
        assert_eq!(
            parsed(Method::ActiveQueues, body),
            Some(("w1@vm".into(), vec!["somequeue".into()]))
        );
    }

    #[test]
    fn ignores_errors_other_methods_and_garbage() {
        let error = br#"{"w1@vm": {"error": "KeyError('x')"}}"#;
        assert_eq!(parsed(Method::Registered, error), None);
        assert_eq!(
            parsed(Method::Heartbeat, br#"{"w1@vm": {"ok": "pong"}}"#),
            None
        );
        assert_eq!(parsed(Method::Registered, br#"{"a": [], "b": []}"#), None);
        assert_eq!(parsed(Method::Registered, b"not json"), None);
        assert_eq!(parsed(Method::Registered, b"[1]"), None);
    }

    #[test]
    fn answers_fold_into_workers() {
        let a = |method, host: &str, result: Value| Answer {
            method,
            host: host.into(),
            result,
        };
        let got = workers_from(&[
            a(Method::Registered, "w2", serde_json::json!(["b", "a", "a"])),
            a(
                Method::ActiveQueues,
                "w2",
                serde_json::json!([{"name": "q"}]),
            ),
            a(Method::Heartbeat, "w1", serde_json::json!({"ok": "pong"})),
        ]);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].tasks, vec!["a", "b"]);
        assert_eq!(got[0].queues, vec!["q"]);
    }
}

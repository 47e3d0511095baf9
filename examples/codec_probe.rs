//! Throwaway probe (not part of CI): checks `dlq::amqp_codec` against what a real RabbitMQ sends.
//!
//! Declares uniquely named queues with a dead-letter exchange, dead-letters one message each by
//! reject(requeue=false), per-message TTL expiry and max-length overflow, reads them back from the
//! DLQ with basic.get, prints what the codec makes of them, then nacks them back (requeue) and
//! deletes everything it declared. Exits non-zero when the codec disagrees with the broker.
//!
//! Run: `cargo run --example codec_probe` (AMQP_ADDR overrides amqp://guest:guest@127.0.0.1:5672/%2f).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use dlq::amqp_codec::{
    parse_deaths, properties_from_typed_json, properties_to_json, properties_to_typed_json,
    reason_text, table_from_typed_json, table_to_json, table_to_typed_json,
};
use lapin::options::{
    BasicGetOptions, BasicNackOptions, BasicPublishOptions, BasicRejectOptions,
    ConfirmSelectOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, DecimalValue, FieldTable, LongString};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
};

fn table(entries: Vec<(&str, AMQPValue)>) -> FieldTable {
    let mut t = FieldTable::default();
    for (k, v) in entries {
        t.insert(k.into(), v);
    }
    t
}

fn text(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

/// Headers the reject message is published with: every type RabbitMQ accepts in a header, so the
/// probe can also show that the typed encoding round-trips what the broker hands back.
fn producer_headers() -> FieldTable {
    table(vec![
        ("x-exception-message", text("KeyError: 'usuario_id'")),
        (
            "x-exception-stacktrace",
            text(
                "Traceback (most recent call last):\n  File \"worker.py\", line 9, in handle\n    \
                 user = payload['usuario_id']\nKeyError: 'usuario_id'\n",
            ),
        ),
        (
            "probe-bytes",
            AMQPValue::LongString(vec![b'o', b'k', 0xff, 0xfe].into()),
        ),
        (
            "probe-types",
            AMQPValue::FieldTable(table(vec![
                ("bool", AMQPValue::Boolean(true)),
                ("i8", AMQPValue::ShortShortInt(-5)),
                ("u8", AMQPValue::ShortShortUInt(250)),
                ("i16", AMQPValue::ShortInt(-30_000)),
                ("u16", AMQPValue::ShortUInt(65_000)),
                ("i32", AMQPValue::LongInt(i32::MIN)),
                ("u32", AMQPValue::LongUInt(u32::MAX)),
                ("i64", AMQPValue::LongLongInt(i64::MAX)),
                ("f32", AMQPValue::Float(0.1)),
                ("f64", AMQPValue::Double(-0.0)),
                // No NaN/inf: RabbitMQ 3.10 cannot parse them (Erlang has no such floats) and
                // kills the connection with INTERNAL_ERROR, as the first run of this probe showed.
                (
                    "decimal",
                    AMQPValue::DecimalValue(DecimalValue {
                        scale: 2,
                        value: 12_340,
                    }),
                ),
                ("timestamp", AMQPValue::Timestamp(1_700_000_000)),
                ("bytes", AMQPValue::ByteArray(vec![0, 1, 2, 255].into())),
                ("void", AMQPValue::Void),
                (
                    "array",
                    AMQPValue::FieldArray(vec![text("a"), AMQPValue::LongLongInt(1)].into()),
                ),
            ])),
        ),
    ])
}

async fn publish(ch: &Channel, queue: &str, id: &str, props: BasicProperties) -> Result<()> {
    let props = props
        .with_message_id(id.into())
        .with_content_type("application/json".into())
        .with_delivery_mode(2)
        .with_timestamp(1_700_000_000);
    let confirm = ch
        .basic_publish(
            "".into(),
            queue.into(),
            BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            },
            br#"{"probe":true}"#,
            props,
        )
        .await?
        .await?;
    // An ack with a returned message means no queue took it.
    match confirm {
        Confirmation::Ack(None) => Ok(()),
        other => bail!("publish of {id} not cleanly acked: {other:?}"),
    }
}

/// Dead lettering is asynchronous: wait for the DLQ depth rather than assume it.
async fn wait_for_depth(ch: &Channel, queue: &str, want: u32) -> Result<()> {
    let start = Instant::now();
    loop {
        let q = ch
            .queue_declare(
                queue.into(),
                QueueDeclareOptions::default().passive(),
                FieldTable::default(),
            )
            .await?;
        if q.message_count() >= want {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(15) {
            bail!(
                "{queue} has {} messages, expected {want}",
                q.message_count()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

struct Expect {
    reason: &'static str,
    queue: String,
    reason_text: &'static str,
}

#[tokio::main]
async fn main() -> Result<()> {
    let addr = std::env::var("AMQP_ADDR")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    let conn = Connection::connect(&addr, ConnectionProperties::default())
        .await
        .context("connect")?;
    let ch = conn.create_channel().await?;
    ch.confirm_select(ConfirmSelectOptions::default()).await?;

    let run = uuid::Uuid::new_v4().simple().to_string()[..8].to_owned();
    let prefix = format!("dlq-codec-probe-{run}");
    let dlx = format!("{prefix}.dlx");
    let dlq = format!("{prefix}.dlq");
    let q_reject = format!("{prefix}.reject");
    let q_ttl = format!("{prefix}.ttl");
    let q_maxlen = format!("{prefix}.maxlen");
    let queues = [&q_reject, &q_ttl, &q_maxlen, &dlq];

    let result = probe(&ch, &dlx, &dlq, &q_reject, &q_ttl, &q_maxlen).await;
    conn.close(200, "probe done".into()).await.ok();

    // Clean up on a fresh connection: a failure above may have closed the first one. The queues
    // hold only probe messages.
    let conn = Connection::connect(&addr, ConnectionProperties::default())
        .await
        .context("reconnect for cleanup")?;
    let ch = conn.create_channel().await?;
    for q in queues {
        if let Err(e) = ch
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await
        {
            eprintln!("cleanup: delete queue {q}: {e}");
        }
    }
    if let Err(e) = ch
        .exchange_delete(dlx.as_str().into(), ExchangeDeleteOptions::default())
        .await
    {
        eprintln!("cleanup: delete exchange {dlx}: {e}");
    }
    conn.close(200, "cleanup done".into()).await.ok();
    result?;
    println!("\nALL CHECKS PASSED");
    Ok(())
}

async fn probe(
    ch: &Channel,
    dlx: &str,
    dlq: &str,
    q_reject: &str,
    q_ttl: &str,
    q_maxlen: &str,
) -> Result<()> {
    ch.exchange_declare(
        dlx.into(),
        ExchangeKind::Fanout,
        ExchangeDeclareOptions::default(),
        FieldTable::default(),
    )
    .await?;
    ch.queue_declare(
        dlq.into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await?;
    ch.queue_bind(
        dlq.into(),
        dlx.into(),
        "".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await?;
    let dl_args = |extra: Vec<(&str, AMQPValue)>| {
        let mut t = table(vec![("x-dead-letter-exchange", text(dlx))]);
        for (k, v) in extra {
            t.insert(k.into(), v);
        }
        t
    };
    for (q, args) in [
        (q_reject, dl_args(vec![])),
        (q_ttl, dl_args(vec![])),
        (
            q_maxlen,
            dl_args(vec![("x-max-length", AMQPValue::LongLongInt(1))]),
        ),
    ] {
        ch.queue_declare(q.into(), QueueDeclareOptions::default(), args)
            .await?;
    }

    // 1. reject(requeue=false)
    let sent_props = BasicProperties::default().with_headers(producer_headers());
    publish(ch, q_reject, "m-rejected", sent_props).await?;
    let got = ch
        .basic_get(q_reject.into(), BasicGetOptions::default())
        .await?
        .context("reject queue is empty")?;
    ensure!(
        got.delivery
            .acker
            .reject(BasicRejectOptions { requeue: false })
            .await?,
        "reject was not sent"
    );
    wait_for_depth(ch, dlq, 1).await?;

    // 2. max-length overflow: the second publish pushes the first out of the head.
    publish(ch, q_maxlen, "m-maxlen", BasicProperties::default()).await?;
    publish(
        ch,
        q_maxlen,
        "m-maxlen-survivor",
        BasicProperties::default(),
    )
    .await?;
    wait_for_depth(ch, dlq, 2).await?;

    // 3. per-message TTL expiry.
    publish(
        ch,
        q_ttl,
        "m-expired",
        BasicProperties::default().with_expiration("1".into()),
    )
    .await?;
    wait_for_depth(ch, dlq, 3).await?;

    let expect = |id: &str| -> Option<Expect> {
        Some(match id {
            "m-rejected" => Expect {
                reason: "rejected",
                queue: q_reject.to_owned(),
                reason_text: "rejected: KeyError: 'usuario_id'",
            },
            "m-expired" => Expect {
                reason: "expired",
                queue: q_ttl.to_owned(),
                reason_text: "expired",
            },
            "m-maxlen" => Expect {
                reason: "maxlen",
                queue: q_maxlen.to_owned(),
                reason_text: "maxlen",
            },
            _ => return None,
        })
    };

    let mut held = Vec::new();
    let mut problems = Vec::new();
    for _ in 0..3 {
        let msg = ch
            .basic_get(dlq.into(), BasicGetOptions::default())
            .await?
            .context("DLQ ran dry")?;
        let d = &msg.delivery;
        let props = &d.properties;
        let headers = props.headers().as_ref();
        let id = props
            .message_id()
            .as_ref()
            .map(|s| s.to_string())
            .unwrap_or_default();
        let deaths = parse_deaths(headers);
        let motivo = reason_text(headers, &deaths, &[]);

        println!(
            "\n===== {id} (exchange {:?}, routing key {:?})",
            d.exchange.as_str(),
            d.routing_key.as_str()
        );
        println!("properties_to_json: {}", properties_to_json(props));
        println!(
            "table_to_json(headers): {}",
            serde_json::to_string_pretty(&headers.map(table_to_json).unwrap_or_default())?
        );
        println!(
            "parse_deaths.to_json: {}",
            serde_json::to_string_pretty(&deaths.to_json())?
        );
        println!("origin_queue: {:?}", deaths.origin_queue());
        println!("total_count: {}", deaths.total_count());
        println!("reason_text: {motivo:?}");
        if let Some(x_death) = headers.and_then(|h| h.inner().get("x-death")) {
            // The broker's own wire types, as the archive would keep them.
            println!(
                "typed x-death: {}",
                dlq::amqp_codec::value_to_typed_json(x_death)
            );
        }

        // The typed encoding must give back exactly what the broker sent.
        let typed = properties_to_typed_json(props);
        let reread: serde_json::Value = serde_json::from_str(&serde_json::to_string(&typed)?)?;
        let back = properties_from_typed_json(&reread)?;
        let wire = |p: &BasicProperties| {
            lapin::protocol::basic::gen_properties(p)(Vec::new().into()).map(|c| c.write)
        };
        if wire(&back)? != wire(props)? {
            problems.push(format!("{id}: typed properties did not round-trip"));
        }
        if let Some(h) = headers {
            let back = table_from_typed_json(&table_to_typed_json(h))?;
            if table_to_typed_json(&back) != table_to_typed_json(h) {
                problems.push(format!("{id}: typed headers did not round-trip"));
            }
        }

        match expect(&id) {
            None => problems.push(format!("unexpected message {id:?} in the DLQ")),
            Some(e) => {
                let first = deaths.deaths.first();
                let checks = [
                    (
                        "x-death[0].reason",
                        first.and_then(|d| d.reason.clone()),
                        Some(e.reason.to_owned()),
                    ),
                    (
                        "x-death[0].queue",
                        first.and_then(|d| d.queue.clone()),
                        Some(e.queue.clone()),
                    ),
                    (
                        "x-death[0].count",
                        first.and_then(|d| d.count).map(|c| c.to_string()),
                        Some("1".to_owned()),
                    ),
                    (
                        "origin_queue",
                        deaths.origin_queue().map(str::to_owned),
                        Some(e.queue.clone()),
                    ),
                    (
                        "first_death_reason",
                        deaths.first_death_reason.clone(),
                        Some(e.reason.to_owned()),
                    ),
                    (
                        "reason_text",
                        motivo.clone(),
                        Some(e.reason_text.to_owned()),
                    ),
                    (
                        "time present",
                        first.map(|d| d.time.is_some().to_string()),
                        Some("true".to_owned()),
                    ),
                    (
                        "warnings",
                        Some(deaths.warnings.join("; ")),
                        Some(String::new()),
                    ),
                ];
                for (what, got, want) in checks {
                    if got != want {
                        problems.push(format!("{id}: {what} is {got:?}, expected {want:?}"));
                    }
                }
                if id == "m-expired" {
                    let oe = first.and_then(|d| d.original_expiration.clone());
                    if oe.as_deref() != Some("1") || props.expiration().is_some() {
                        problems.push(format!(
                            "{id}: original-expiration {oe:?}, expiration {:?}",
                            props.expiration()
                        ));
                    }
                }
                if id == "m-rejected" {
                    // What the producer put in must come back unchanged, types and all.
                    let sent = table_to_typed_json(&producer_headers());
                    let got = headers.map(table_to_typed_json).unwrap_or_default();
                    for (k, v) in sent.as_object().into_iter().flatten() {
                        if got.get(k) != Some(v) {
                            problems.push(format!(
                                "{id}: header {k} changed in transit: sent {v}, got {:?}",
                                got.get(k)
                            ));
                        }
                    }
                }
            }
        }
        held.push(msg);
    }

    // Put everything back where it was: nothing the probe read is lost.
    for msg in &held {
        ensure!(
            msg.delivery
                .acker
                .nack(BasicNackOptions {
                    requeue: true,
                    multiple: false
                })
                .await?,
            "nack was not sent"
        );
    }
    wait_for_depth(ch, dlq, 3).await?;
    println!("\nrequeued {} messages; DLQ depth back to 3", held.len());

    if !problems.is_empty() {
        for p in &problems {
            eprintln!("MISMATCH: {p}");
        }
        bail!("{} mismatches", problems.len());
    }
    Ok(())
}

//! Probe (not part of CI): measures the table-replay change docs/BENCHMARKS.md proposes, with
//! dlq's own message builder and publisher, so the only difference is the database side.
//!
//! BATCH = 1 is today's design: one transaction per row (BEGIN; SELECT ... FOR UPDATE SKIP
//! LOCKED; publish; wait for ITS confirm; UPDATE; COMMIT), `window` transactions at once.
//! BATCH = K claims K rows in one transaction (`id = ANY($1) ... FOR UPDATE SKIP LOCKED`),
//! publishes them pipelined, marks the confirmed ones with ONE `UPDATE ... WHERE id = ANY($1)`
//! and commits once: window / K transactions at once. Published-but-unmarked rows never exceed
//! `window`, the same duplicate window as today; the database work per row drops by ~K.
//!
//! Run (after `bench/run --keep`-style setup, or any table made by `dlq init` and a queue):
//!
//! ```text
//! CARGO_TARGET_DIR=/work/target-bench cargo run --release --example table_replay_probe -- \
//!   postgres://postgres@127.0.0.1/test TABLE amqp://guest:guest@127.0.0.1:5672/%2f QUEUE WINDOW BATCH
//! ```
//!
//! Prints one JSON line: rows replayed, seconds, rows/s.

use anyhow::{Context, Result, bail};
use dlq::broker::{self, Outcome, Outgoing, Publisher};
use dlq::celery::{self, ReplayOrigin};
use sqlx::postgres::PgPoolOptions;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

#[tokio::main]
async fn main() -> Result<()> {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() != 6 {
        bail!("usage: table_replay_probe DB_URL TABLE AMQP_URL QUEUE WINDOW BATCH");
    }
    let (db, table, amqp, queue) = (&a[0], a[1].clone(), &a[2], a[3].clone());
    let window: usize = a[4].parse().context("WINDOW")?;
    let batch: usize = a[5].parse().context("BATCH")?;
    let workers = window.div_ceil(batch).max(1);
    let started = Instant::now();
    let pool = PgPoolOptions::new()
        .max_connections(workers as u32 + 1)
        .connect(db)
        .await?;
    let ids: Vec<i64> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT id FROM \"{table}\" WHERE NOT reprocessada ORDER BY id"
    )))
    .fetch_all(&pool)
    .await?;
    let conn = broker::connect(amqp).await?;
    let publisher = Publisher::start(&conn, window, None).await?;
    let ids = Arc::new(ids);
    let next = Arc::new(AtomicUsize::new(0));
    let replay_id = uuid::Uuid::new_v4().to_string();
    let mut handles = Vec::new();
    for _ in 0..workers {
        let (pool, ids, next, publisher) =
            (pool.clone(), ids.clone(), next.clone(), publisher.clone());
        let (table, queue, replay_id) = (table.clone(), queue.clone(), replay_id.clone());
        handles.push(tokio::spawn(async move {
            let mut replayed = 0usize;
            loop {
                let i = next.fetch_add(batch, Ordering::SeqCst);
                if i >= ids.len() {
                    break;
                }
                let chunk: Vec<i64> = ids[i..(i + batch).min(ids.len())].to_vec();
                let mut tx = pool.begin().await?;
                let rows: Vec<(i64, String, Option<String>)> =
                    sqlx::query_as(sqlx::AssertSqlSafe(format!(
                        "SELECT id::bigint, task_original, args::text FROM \"{table}\" \
                         WHERE id = ANY($1) AND NOT reprocessada ORDER BY id FOR UPDATE SKIP LOCKED"
                    )))
                    .bind(&chunk)
                    .fetch_all(&mut *tx)
                    .await?;
                let sends = rows.iter().map(|(id, task, args)| {
                    let origin = ReplayOrigin {
                        table: table.clone(),
                        row_id: id.to_string(),
                        replay_id: replay_id.clone(),
                        host: "probe".into(),
                    };
                    let msg = celery::build(task, args.as_deref(), &origin);
                    let publisher = publisher.clone();
                    let queue = queue.clone();
                    let id = *id;
                    async move {
                        let msg = msg?;
                        let out = publisher
                            .publish(Outgoing {
                                exchange: String::new(),
                                routing_key: queue,
                                body: msg.body,
                                properties: msg.properties,
                            })
                            .await?;
                        anyhow::Ok((id, out))
                    }
                });
                let mut confirmed = Vec::new();
                for r in futures_util::future::join_all(sends).await {
                    if let (id, Outcome::Confirmed) = r? {
                        confirmed.push(id);
                    }
                }
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE \"{table}\" SET reprocessada = true, reprocessada_em = now() WHERE id = ANY($1)"
                )))
                .bind(&confirmed)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                replayed += confirmed.len();
            }
            anyhow::Ok(replayed)
        }));
    }
    drop(publisher);
    let mut replayed = 0;
    for h in handles {
        replayed += h.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    println!(
        "{}",
        serde_json::json!({"replayed": replayed, "seconds": secs, "rate": replayed as f64 / secs,
                           "window": window, "batch": batch})
    );
    Ok(())
}

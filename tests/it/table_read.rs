//! The failed-task table, read end to end on every database: the seed's scenario 2.

use crate::common::*;
use crate::per_dialect;
use serde_json::Value;

async fn seeded(dialect: Dialect, prefix: &str) -> TestDb {
    TestDb::with_rows(dialect, prefix, &scenario2()).await
}

fn ids(v: &[Value]) -> Vec<i64> {
    v.iter().map(|r| r["id"].as_i64().unwrap()).collect()
}

async fn scenario2_overview(dialect: Dialect) {
    let db = seeded(dialect, "s2_overview").await;
    // list: pending count and the IntegrityError group with 340 rows on top.
    let list = db.dlq(&["list", "-o", "json"]).json();
    let table = &list[0];
    assert_eq!(table["source"], "table");
    assert_eq!(table["pending"], 340 + 120 + 80 + 7);
    assert_eq!(table["total"], 340 + 120 + 80 + 40 + 7);
    assert_eq!(table["oldest"], "2026-10-15T12:00:00Z");
    let top = &table["top_reasons"][0];
    assert_eq!(top["count"], 340);
    assert!(
        top["fingerprint"]
            .as_str()
            .unwrap()
            .starts_with("IntegrityError: null value in column")
    );

    // inspect: default limit 20, only IntegrityError rows, with a hint that more match.
    let run = db.dlq(&["inspect", "--motivo", "IntegrityError", "-o", "json"]);
    let recs: Vec<Value> = run.json().as_array().unwrap().clone();
    assert_eq!(recs.len(), 20);
    assert!(
        recs.iter()
            .all(|r| r["motivo"].as_str().unwrap().contains("IntegrityError"))
    );
    assert!(
        recs.iter()
            .all(|r| r["replayed"] == false && r["source"] == "table")
    );
    assert_eq!(recs[0]["task"], "processar_pagamento");
    assert_eq!(recs[0]["payload"]["pedido_id"], 1000);
    assert!(run.stderr().contains("more match"), "{}", run.stderr());

    // filter --group-by motivo: one group per fingerprint, biggest first.
    let groups = db
        .dlq(&["filter", "--group-by", "motivo", "-o", "json"])
        .json();
    let groups = groups.as_array().unwrap();
    assert_eq!(groups[0]["count"], 340);
    assert_eq!(groups.len(), 4, "{groups:?}");
    let total: u64 = groups.iter().map(|g| g["count"].as_u64().unwrap()).sum();
    assert_eq!(total, 547);

    // The human table renders and names the table.
    let text = db
        .dlq(&["inspect", "--motivo", "IntegrityError", "--limit", "2"])
        .ok();
    assert!(
        text.contains("processar_pagamento") && text.contains(&db.table),
        "{text}"
    );
    db.drop().await;
}
per_dialect!(scenario2_overview);

async fn selection_flags(dialect: Dialect) {
    let db = seeded(dialect, "s2_select").await;
    let count = |args: &[&str]| -> u64 {
        let mut a = vec!["filter", "--count"];
        a.extend_from_slice(args);
        db.dlq(&a).ok().trim().parse().unwrap()
    };
    // --motivo is case-sensitive; -i is not.
    assert_eq!(count(&["--motivo", "IntegrityError"]), 340);
    assert_eq!(count(&["--motivo", "IntegrityError", "-i"]), 347);
    assert_eq!(count(&["--motivo", "integrityerror"]), 7);
    // LIKE wildcards in --motivo are literal text.
    assert_eq!(count(&["--motivo", "%"]), 0);
    assert_eq!(count(&["--motivo", "max_retries"]), 80);
    // SQL-looking text is just text.
    assert_eq!(count(&["--motivo", "' OR 1=1 --"]), 0);
    // --pattern searches reason, task and payload.
    assert_eq!(count(&["-e", r"aluno1\d@example"]), 10);
    assert_eq!(count(&["-e", "^liberar_"]), 80);
    assert_eq!(count(&["-e", r"SMTP timed out after 1[01]s"]), 48);
    // --task
    assert_eq!(count(&["--task", "enviar_email"]), 120);
    assert_eq!(
        count(&["--task", "enviar_email", "--task", "liberar_acesso_curso"]),
        200
    );
    // time window
    assert_eq!(
        count(&["--since", "2026-11-21", "--until", "2026-11-23"]),
        48
    );
    assert_eq!(count(&["--older-than", "2026-11-01T00:00:00Z"]), 80);
    assert_eq!(count(&["--older-than", "1d"]), 547);
    // jq over the record
    assert_eq!(count(&["--where", ".payload.pedido_id? >= 1300"]), 40 + 7);
    assert_eq!(
        count(&[
            "--where",
            r#".task == "enviar_email" and (.payload[0] < 10)"#
        ]),
        10
    );
    // replayed rows
    assert_eq!(count(&["--include-replayed"]), 587);
    assert_eq!(count(&["--only-replayed"]), 40);
    // --limit, combined with a client-side filter
    assert_eq!(count(&["--motivo", "IntegrityError", "--limit", "5"]), 5);
    assert_eq!(count(&["-e", "Integrity", "--limit", "3"]), 3);
    // --id
    let first = db.dlq(&["inspect", "--limit", "2", "-o", "json"]).json();
    let first_ids = ids(first.as_array().unwrap());
    let id0 = first_ids[0].to_string();
    let id1 = first_ids[1].to_string();
    let got = db
        .dlq(&["filter", "--id", &id0, "--id", &id1, "-o", "ndjson"])
        .ndjson();
    assert_eq!(ids(&got), first_ids);
    db.drop().await;
}
per_dialect!(selection_flags);

async fn output_formats(dialect: Dialect) {
    let db = seeded(dialect, "s2_output").await;
    let base = ["filter", "--task", "liberar_acesso_curso", "--limit", "3"];
    let with = |fmt: &str| {
        let mut a = base.to_vec();
        a.extend_from_slice(&["-o", fmt]);
        db.dlq(&a)
    };
    let json = with("json").json();
    assert_eq!(json.as_array().unwrap().len(), 3);
    let rec = &json[0];
    for key in [
        "source",
        "location",
        "id",
        "task",
        "motivo",
        "created_at",
        "replayed",
        "payload",
    ] {
        assert!(rec.get(key).is_some(), "missing {key} in {rec}");
    }
    assert_eq!(rec["location"], db.table.as_str());
    assert_eq!(rec["created_at"], "2026-10-15T12:00:00Z");
    assert_eq!(rec["payload"]["evento_id"], "ev-0");
    assert_eq!(with("ndjson").ndjson(), json.as_array().unwrap().clone());
    let csv = with("csv").ok();
    let lines: Vec<&str> = csv.lines().collect();
    assert_eq!(
        lines[0],
        "source,location,id,task,motivo,created_at,replayed,payload"
    );
    assert_eq!(lines.len(), 4);
    assert!(
        lines[1].contains("\"\"matricula_id\"\": 0") || lines[1].contains("\"\"matricula_id\"\":0"),
        "{csv}"
    );
    let table = with("table").ok();
    assert!(
        table.contains("liberar_acesso_curso") && table.contains("max_retries esgotado"),
        "{table}"
    );
    // Empty selections are fine and exit 0.
    let empty = db
        .dlq(&["filter", "--motivo", "nothing-like-this", "-o", "json"])
        .json();
    assert_eq!(empty, serde_json::json!([]));
    // Group by task and day.
    let by_task = db
        .dlq(&["filter", "--group-by", "task", "-o", "json"])
        .json();
    assert_eq!(by_task[0]["task"], "processar_pagamento");
    assert_eq!(by_task[0]["count"], 347);
    let by_day = db
        .dlq(&[
            "filter",
            "--group-by",
            "day",
            "--task",
            "liberar_acesso_curso",
            "-o",
            "csv",
        ])
        .ok();
    assert!(by_day.contains("2026-10-15,80,"), "{by_day}");
    db.drop().await;
}
per_dialect!(output_formats);

async fn init_is_idempotent_and_indexed(dialect: Dialect) {
    let db = TestDb::new(dialect, "init").await;
    db.dlq(&["init"]).ok();
    db.dlq(&["init"]).ok();
    let sql = db.dlq(&["init", "--dry-run"]).ok();
    assert!(
        sql.contains("CREATE TABLE IF NOT EXISTS") && sql.contains("reprocessada"),
        "{sql}"
    );
    let indexes = match dialect {
        Dialect::Postgres => {
            db.scalar_i64(&format!(
                "SELECT COUNT(*) FROM pg_indexes WHERE tablename = '{}' AND indexdef LIKE '%WHERE (NOT reprocessada)%'",
                db.table
            ))
            .await
        }
        Dialect::MySql => {
            db.scalar_i64(&format!(
                "SELECT COUNT(*) FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = '{}' AND column_name = 'reprocessada'",
                db.table
            ))
            .await
        }
        Dialect::Sqlite => {
            db.scalar_i64(&format!(
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'index' AND tbl_name = '{}' AND sql LIKE '%WHERE reprocessada = 0%'",
                db.table
            ))
            .await
        }
    };
    assert_eq!(indexes, 1);
    db.insert(&[row("t", Some("{}"), "m", "2026-11-30T00:00:00Z", false)])
        .await;
    assert_eq!(db.dlq(&["filter", "--count"]).ok().trim(), "1");
    db.drop().await;
}
per_dialect!(init_is_idempotent_and_indexed);

/// A BLOB or non-UTF-8 value (Python's sqlite3 stores `bytes` as BLOB) is read losslessly,
/// shown escaped; the table stays usable.
#[tokio::test]
async fn blob_and_non_utf8_values_do_not_break_the_table() {
    let db = TestDb::with_rows(
        Dialect::Sqlite,
        "hard_blob",
        &crate::common::tagged_rows(1, "ok"),
    )
    .await;
    db.exec(
        "INSERT INTO {t} (task_original, args, motivo, criada_em, reprocessada) \
         VALUES (X'6c6962657261725f61636573736f5f637572736f', '[1]', X'4b65794572726f72ff', '2026-11-30T10:00:00Z', 0)",
    )
    .await;
    db.dlq(&["list"]).ok();
    let run = db.dlq(&["inspect", "-o", "json"]);
    let v = run.json();
    let records = v.as_array().unwrap();
    assert_eq!(records.len(), 2, "{v}");
    assert!(
        records.iter().any(|r| r["motivo"] == "KeyError\\xff"),
        "{v}"
    );
    assert!(
        records.iter().all(|r| r["task"] == "liberar_acesso_curso"),
        "{v}"
    );
    let run = db.dlq(&["filter", "--motivo", "KeyError", "--count"]);
    assert_eq!(run.ok().trim(), "1");
    db.drop().await;
}

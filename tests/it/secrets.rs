//! Credentials never appear in any output, error, plan, report or archive: every byte a run
//! prints (and every file it writes) is searched for the password.

use crate::celery_worker::*;
use crate::common::*;

const DB_SECRET: &str = "Db-S3cret-7c1f0a";
const MQ_SECRET: &str = "Mq-S3cret-55e2b9";

async fn management(method: reqwest::Method, path: &str, body: Option<serde_json::Value>) {
    let mut req = reqwest::Client::new()
        .request(method, format!("{}/{path}", crate::target::api()))
        .basic_auth("guest", Some("guest"));
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.expect("management API");
    assert!(resp.status().is_success(), "{path}: {}", resp.status());
}

#[tokio::test]
async fn no_run_prints_a_password() {
    // PostgreSQL here trusts local connections, so any password works: a successful run
    // with a password in the URL is possible. RabbitMQ gets a user of its own.
    let user = unique("dlq_secret_user");
    management(
        reqwest::Method::PUT,
        &format!("users/{user}"),
        Some(serde_json::json!({"password": MQ_SECRET, "tags": ""})),
    )
    .await;
    management(
        reqwest::Method::PUT,
        &format!("permissions/%2F/{user}"),
        Some(serde_json::json!({"configure": ".*", "write": ".*", "read": ".*"})),
    )
    .await;
    let db = TestDb::with_rows(Dialect::Postgres, "secrets", &scenario2()[..30]).await;
    let db_url = format!("postgres://postgres:{DB_SECRET}@127.0.0.1:5432/test");
    let mq_url = crate::target::amqp_url_as(&user, MQ_SECRET, "%2f");
    let queue = unique("secrets_q");
    declare_queue(&queue).await;
    let dir = tempfile::tempdir().unwrap();
    let archive = dir.path().join("a.ndjson");
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "database_url = \"{db_url}\"\namqp_url = \"{mq_url}\"\n{}",
            crate::target::config_management_line()
        ),
    )
    .unwrap();

    let runs: Vec<Vec<String>> = vec![
        vec!["list"],
        vec!["-vv", "inspect", "--full"],
        vec!["filter", "--group-by", "motivo", "-o", "json"],
        vec![
            "-vv",
            "replay",
            "--no-worker-check",
            "--to-queue",
            &queue,
            "--dry-run",
        ],
        vec![
            "-vv",
            "replay",
            "--no-worker-check",
            "--to-queue",
            &queue,
            "--limit",
            "5",
            "--yes",
            "-o",
            "json",
        ],
        vec!["archive", "--to", archive.to_str().unwrap()],
        vec![
            "replay",
            "--no-worker-check",
            "--from-file",
            archive.to_str().unwrap(),
            "--to-queue",
            &queue,
            "--limit",
            "2",
            "--yes",
        ],
        // Failures: wrong table, missing queue, unreachable broker/database with the same secrets.
        vec!["--table", "nope", "list"],
        vec![
            "replay",
            "--no-worker-check",
            "--to-queue",
            "no-such-queue-secrets",
            "--yes",
        ],
        vec![
            "--amqp-url",
            &mq_url.replace(&crate::target::amqp_addr(), "127.0.0.1:1"),
            "replay",
            "--no-worker-check",
            "--to-queue",
            &queue,
            "--yes",
        ],
        vec!["--database-url", &db_url.replace("5432", "1"), "list"],
        vec![
            "--database-url",
            &db_url.replace("postgres://", "postgres//"),
            "list",
        ],
        vec![
            "--amqp-url",
            &format!("amqp://{user}:{MQ_SECRET}@"),
            "replay",
            "--no-worker-check",
            "--yes",
        ],
    ]
    .into_iter()
    .map(|v| v.into_iter().map(String::from).collect())
    .collect();
    for (i, args) in runs.iter().enumerate() {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        // Half the runs take the URLs from flags/env, half from the config file.
        let run = if i % 2 == 0 {
            Dlq::new()
                .env("DLQ_DATABASE_URL", &db_url)
                .env("DLQ_AMQP_URL", &mq_url)
        } else {
            // The URLs come from the file alone, not from the target's defaults.
            Dlq::new()
                .env_remove("DLQ_AMQP_URL")
                .env_remove("DLQ_MANAGEMENT_URL")
                .env("DLQ_CONFIG", config.to_str().unwrap())
        }
        .env("DLQ_TABLE", &db.table)
        .args(&args)
        .run();
        let all = format!("{}{}", run.stdout(), run.stderr());
        for secret in [DB_SECRET, MQ_SECRET] {
            assert!(!all.contains(secret), "{args:?} printed a password:\n{all}");
        }
    }
    let archived = std::fs::read_to_string(&archive).unwrap();
    assert!(!archived.contains(DB_SECRET) && !archived.contains(MQ_SECRET));
    // The runs did work (this test must be able to fail): 5 + 2 messages were published.
    assert_eq!(queue_state(&queue).await.unwrap().messages, 7);
    delete_queue(&queue).await;
    management(reqwest::Method::DELETE, &format!("users/{user}"), None).await;
    db.drop().await;
}

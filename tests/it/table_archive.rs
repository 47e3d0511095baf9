//! Archiving the failed-task table and restoring from the archive.

use crate::broker::Broker;
use crate::celery_worker::*;
use crate::common::*;
use crate::per_dialect;
use lapin::types::FieldTable;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

async fn count(db: &TestDb) -> i64 {
    db.scalar_i64("SELECT COUNT(*) FROM {t}").await
}

/// Archive + delete + restore: the archive holds exactly the rows (same ids, tasks, reasons,
/// times, stored args), the rows are gone from the table, and a restore re-dispatches each
/// once (a second restore does nothing).
async fn archive_delete_restore_round_trip(dialect: Dialect) {
    let db = TestDb::with_rows(dialect, "arch", &scenario2()).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("old.ndjson.gz");
    let f = file.to_str().unwrap();
    // Rows exactly as stored, for comparison.
    let before: Vec<Value> = db
        .dlq(&["filter", "--older-than", "2026-11-01", "-o", "ndjson"])
        .ndjson();
    assert_eq!(before.len(), 80);

    db.dlq_root(&[
        "archive",
        "--older-than",
        "2026-11-01",
        "--to",
        f,
        "--dry-run",
    ])
    .ok();
    assert!(!file.exists());
    assert_eq!(count(&db).await, 587);
    // Without a terminal and without --yes, --delete is refused.
    db.dlq_root(&[
        "archive",
        "--older-than",
        "2026-11-01",
        "--to",
        f,
        "--delete",
    ])
    .fails(2, "refusing");
    assert!(!file.exists());

    let run = db.dlq_root(&[
        "archive",
        "--older-than",
        "2026-11-01",
        "--to",
        f,
        "--delete",
        "--yes",
    ]);
    run.ok();
    assert!(
        run.stderr().contains("80 row(s)") && run.stderr().contains("80 deleted"),
        "{}",
        run.stderr()
    );
    assert_eq!(count(&db).await, 587 - 80);
    assert!(!dir.path().join("old.ndjson.gz.partial").exists());

    // The archive content equals the rows as they were.
    let text = {
        use std::io::Read;
        let mut s = String::new();
        flate2::read::GzDecoder::new(std::fs::File::open(&file).unwrap())
            .read_to_string(&mut s)
            .unwrap();
        s
    };
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 82, "header + 80 records + trailer");
    assert_eq!(lines[0]["dlq_archive"], 1);
    assert_eq!(lines[81]["dlq_archive_end"]["count"], 80);
    for (rec, orig) in lines[1..81].iter().zip(&before) {
        for k in ["id", "task", "motivo", "created_at", "replayed", "payload"] {
            assert_eq!(rec[k], orig[k], "{k}");
        }
        assert!(
            rec["raw"]["args"]
                .as_str()
                .unwrap()
                .contains("matricula_id")
        );
    }

    // Restore to a real worker; then again: nothing more runs.
    let queue = unique("celery_restore");
    let worker = CeleryWorker::start(&queue).await;
    db.dlq_root(&["replay", "--from-file", f, "--to-queue", &queue, "--yes"])
        .ok();
    let runs = worker.wait_runs(80).await;
    assert_eq!(runs.len(), 80);
    let mut by_id: BTreeMap<i64, Value> = BTreeMap::new();
    for r in &runs {
        assert_eq!(r["task"], "liberar_acesso_curso");
        by_id.insert(
            r["kwargs"]["matricula_id"].as_i64().unwrap(),
            r["kwargs"].clone(),
        );
    }
    assert_eq!(by_id.len(), 80);
    assert_eq!(by_id[&7]["evento_id"], "ev-7");
    let again = db.dlq_root(&["replay", "--from-file", f, "--to-queue", &queue, "--yes"]);
    again.ok();
    assert!(
        again.stderr().contains("already restored"),
        "{}",
        again.stderr()
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(worker.runs().len(), 80);
    drop(worker);
    db.drop().await;
}
per_dialect!(archive_delete_restore_round_trip);

/// Without --delete the table is untouched; `-` writes the archive to stdout.
async fn archive_without_delete_and_to_stdout(dialect: Dialect) {
    let db = TestDb::with_rows(dialect, "arch_keep", &scenario2()[..50]).await;
    let out = db.dlq_root(&["archive", "--to", "-"]).ok();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 52);
    assert_eq!(count(&db).await, 50);
    db.dlq_root(&["archive", "--to", "-", "--delete", "--yes"])
        .fails(2, "stdout cannot be fsynced");
    assert_eq!(count(&db).await, 50);
    db.drop().await;
}
per_dialect!(archive_without_delete_and_to_stdout);

#[tokio::test]
async fn corrupted_or_truncated_archives_are_refused() {
    let db = TestDb::with_rows(Dialect::Sqlite, "arch_bad", &scenario2()[..20]).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.ndjson");
    db.dlq_root(&["archive", "--to", file.to_str().unwrap()])
        .ok();
    let text = std::fs::read_to_string(&file).unwrap();
    let queue = unique("restore_bad");
    declare_queue(&queue).await;
    let cases = [
        (
            "tampered.ndjson",
            text.replacen("IntegrityError", "IntegrityErrox", 1),
            "checksum mismatch",
        ),
        (
            "truncated.ndjson",
            text.lines().take(10).collect::<Vec<_>>().join("\n") + "\n",
            "end marker is missing",
        ),
        (
            "cut.ndjson",
            text[..text.len() / 2].to_string(),
            "truncated",
        ),
        (
            "garbage.ndjson",
            "hello\n".to_string(),
            "no dlq archive header",
        ),
    ];
    for (name, content, needle) in cases {
        let p = dir.path().join(name);
        std::fs::write(&p, content).unwrap();
        db.dlq_root(&[
            "replay",
            "--no-worker-check",
            "--from-file",
            p.to_str().unwrap(),
            "--to-queue",
            &queue,
            "--yes",
        ])
        .fails(2, needle);
    }
    assert_eq!(
        queue_state(&queue).await.unwrap().messages,
        0,
        "nothing was published"
    );
    delete_queue(&queue).await;
}

/// Seeds a big PostgreSQL table quickly, so an archive run takes long enough to interfere with.
async fn big_table(rows: i64) -> TestDb {
    let db = TestDb::new(Dialect::Postgres, "arch_big").await;
    db.init();
    db.exec(&format!(
        "INSERT INTO {{t}} (task_original, args, motivo, criada_em) \
         SELECT 'processar_pagamento', jsonb_build_object('pedido_id', g, 'pad', repeat('x', 200)), \
         'IntegrityError: row ' || g, now() - interval '40 days' FROM generate_series(1, {rows}) g"
    ))
    .await;
    db
}

fn wait_for_file(p: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !p.exists() || std::fs::metadata(p).map(|m| m.len()).unwrap_or(0) == 0 {
        assert!(Instant::now() < deadline, "{} never appeared", p.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn spawn_archive(db: &TestDb, file: &std::path::Path) -> std::process::Child {
    crate::common::dlq_command()
        .env(
            "XDG_CONFIG_HOME",
            std::env::temp_dir().join("dlq-tests-no-config"),
        )
        .env("DLQ_DATABASE_URL", &db.url)
        .env("DLQ_TABLE", &db.table)
        .args([
            "archive",
            "--older-than",
            "30d",
            "--to",
            file.to_str().unwrap(),
            "--delete",
            "--yes",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

#[tokio::test]
async fn killed_archive_deletes_nothing() {
    let db = big_table(100_000).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.ndjson");
    let mut child = spawn_archive(&db, &file);
    wait_for_file(&dir.path().join("big.ndjson.partial"));
    // kill -9 while the archive is being written
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(count(&db).await, 100_000, "nothing deleted");
    assert!(!file.exists(), "no archive pretends to be complete");
    // A re-run completes (the stale .partial is replaced).
    let out = spawn_archive(&db, &file).wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(count(&db).await, 0);
    db.drop().await;
}

/// Ctrl-C mid table archive: nothing deleted, and no `.partial` file left behind (it can be
/// gigabytes, keeping a disk full). Before, the partial file stayed: nothing listened for the
/// signal, and dlq ended as the signal's default does.
#[tokio::test]
async fn a_signal_mid_table_archive_leaves_no_partial_file() {
    let db = big_table(100_000).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("big.ndjson");
    let partial = dir.path().join("big.ndjson.partial");
    let child = spawn_archive(&db, &file);
    wait_for_file(&partial);
    let (out, err) = signalled(child, "-INT").await;
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert_eq!(count(&db).await, 100_000, "nothing deleted");
    assert!(!file.exists(), "{err}");
    assert!(!partial.exists(), "{err}");
    assert!(err.contains("no file was kept"), "{err}");
    db.drop().await;
}

#[tokio::test]
async fn overlapping_archive_runs_are_locked_out() {
    let db = big_table(100_000).await;
    let dir = tempfile::tempdir().unwrap();
    let first_file = dir.path().join("first.ndjson");
    let first = spawn_archive(&db, &first_file);
    wait_for_file(&dir.path().join("first.ndjson.partial"));
    let second = db.dlq_root(&[
        "archive",
        "--older-than",
        "30d",
        "--to",
        dir.path().join("second.ndjson").to_str().unwrap(),
        "--delete",
        "--yes",
    ]);
    second.fails(1, "holds the lock");
    let out = first.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(count(&db).await, 0);
    let lines = std::fs::read_to_string(&first_file)
        .unwrap()
        .lines()
        .count();
    assert_eq!(lines, 100_002);
    assert!(!dir.path().join("second.ndjson").exists());
    db.drop().await;
}

/// A disk that fills up mid-archive, or at the final flush: the command fails, no row is
/// deleted, and no partial file stays behind.
#[tokio::test]
async fn full_disk_deletes_nothing() {
    let db = big_table(5_000).await;
    // The disk fills mid-write.
    archive_onto_full_disk(&db, "64k", &["--older-than", "30d"], "no partial file left").await;
    // 10 rows fit in the 64 KiB write buffer: the disk fills at the final flush, and the
    // partial file must not stay behind keeping the disk full.
    archive_onto_full_disk(
        &db,
        "4k",
        &["--limit", "10"],
        "no partial file left after a failed final flush",
    )
    .await;
    db.drop().await;
}

/// `archive --delete` of `selection` onto a tmpfs of `size`: it fails for lack of space,
/// deletes nothing, and leaves nothing on the disk.
async fn archive_onto_full_disk(db: &TestDb, size: &str, selection: &[&str], leftover: &str) {
    let mnt = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
        .arg(mnt.path())
        .status()
        .expect("mount is available");
    assert!(status.success(), "mounting a small tmpfs needs root");
    let file = mnt.path().join("a.ndjson");
    let mut args = vec!["archive"];
    args.extend_from_slice(selection);
    args.extend(["--to", file.to_str().unwrap(), "--delete", "--yes"]);
    let run = db.dlq(&args);
    assert_eq!(run.code(), 1, "{}", run.stderr());
    assert!(run.stderr().contains("No space left"), "{}", run.stderr());
    assert_eq!(count(db).await, 5_000, "nothing deleted");
    assert!(
        std::fs::read_dir(mnt.path()).unwrap().next().is_none(),
        "{leftover}"
    );
    let _ = std::process::Command::new("umount")
        .arg(mnt.path())
        .status();
}

/// A restore journal belongs to one archive: the same path written again by a new archive
/// must not make dlq skip its records; a dry run writes no journal.
#[tokio::test]
async fn a_journal_of_another_archive_is_ignored() {
    let b = Broker::new("hard_journal").await;
    b.queue("celery", FieldTable::default()).await;
    let mut db = TestDb::new(Dialect::Sqlite, "hard_journal").await;
    db.amqp_url = b.amqp_url();
    db.init();
    db.insert(&crate::common::tagged_rows(5, "first")).await;
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("a.ndjson");
    let f = f.to_str().unwrap();
    let journal = format!("{f}.journal");
    db.dlq(&["archive", "--to", f, "--yes"]).ok();

    db.dlq(&["replay", "--from-file", f, "--no-worker-check", "--dry-run"])
        .ok();
    assert!(
        !std::path::Path::new(&journal).exists(),
        "a dry run writes no journal"
    );

    db.dlq(&["replay", "--from-file", f, "--no-worker-check", "--yes"])
        .ok();
    assert_eq!(b.depth("celery").await, 5);

    // The archive is deleted and a new one written at the same path.
    std::fs::remove_file(f).unwrap();
    db.insert(&crate::common::tagged_rows(5, "second")).await;
    db.dlq(&["archive", "--to", f, "--yes"]).ok();
    let run = db.dlq(&["replay", "--from-file", f, "--no-worker-check", "--yes"]);
    run.ok();
    assert!(
        run.stderr().contains("belongs to another archive"),
        "{}",
        run.stderr()
    );
    assert_eq!(
        b.depth("celery").await,
        5 + 10,
        "every record of the new archive was sent"
    );
    // And its own journal now resumes it.
    let again = db.dlq(&["replay", "--from-file", f, "--no-worker-check", "--yes"]);
    assert!(
        again.stderr().contains("10 record(s) already restored"),
        "{}",
        again.stderr()
    );
    assert_eq!(b.depth("celery").await, 15);
    db.drop().await;
    b.delete().await;
}

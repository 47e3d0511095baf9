//! `bench/run --smoke`: the benchmarks still run and every outcome check in them passes.
//!
//! The numbers are not judged here (they are too noisy for CI's pass/fail); what fails this
//! test is a broken harness, a scenario that errors, or a run whose result is wrong (a queue
//! that does not hold exactly the replayed messages, rows left unmarked, a wrong count).

use std::process::Command;
use std::time::Instant;

#[test]
fn bench_smoke() {
    let root = crate::common::repo_root();
    let results = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let mut cmd = Command::new(root.join("bench/run"));
    cmd.arg("--smoke")
        .arg("--results-dir")
        .arg(results.path())
        // The binary under test (a debug build is fine at smoke sizes); no cargo build here.
        .env("DLQ_BIN", env!("CARGO_BIN_EXE_dlq"));
    for k in [
        "DLQ_DATABASE_URL",
        "DATABASE_URL",
        "DLQ_AMQP_URL",
        "AMQP_URL",
    ] {
        cmd.env_remove(k);
    }
    if let Ok(pg) = std::env::var("DLQ_TEST_PG_URL") {
        cmd.env("BENCH_PG_URL", pg);
    }
    // The broker generation under test (crate::target), where it is not the benchmarks' default.
    use crate::target as t;
    if t::amqp_port() != t::DEFAULT_AMQP_PORT {
        cmd.env(
            "BENCH_AMQP_URL",
            format!("amqp://guest:guest@{}", t::amqp_addr()),
        );
    }
    if t::api_port() != t::DEFAULT_API_PORT {
        cmd.env("BENCH_MANAGEMENT_URL", format!("http://{}", t::api_addr()));
    }
    if t::redis_port() != t::DEFAULT_REDIS_PORT {
        cmd.env("BENCH_REDIS_URL", t::redis_url());
    }
    let out = cmd.output().expect("run bench/run --smoke");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench/run --smoke failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    eprintln!(
        "bench/run --smoke took {:.1}s",
        started.elapsed().as_secs_f64()
    );

    // One JSON result, with the scenarios that exist today measured and checked.
    let files: Vec<_> = std::fs::read_dir(results.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "one result file expected: {files:?}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(v["mode"], "smoke");
    assert_eq!(v["failures"], serde_json::json!([]), "{stdout}");
    let measured = v["measurements"].as_array().unwrap();
    for (scenario, variant) in [
        ("table_replay", "seed loop"),
        ("table_replay", "dlq replay"),
        ("scan", "dlq filter --count -e"),
        ("scan", "dlq filter --count --where"),
        ("queue_replay", "dynamic shovel"),
        ("queue_replay", "aio-pika mover"),
    ] {
        assert!(
            measured.iter().any(|m| m["scenario"] == scenario
                && m["variant"].as_str().unwrap().starts_with(variant)
                && m["ok"] == true
                && m["wall_s"].as_f64().is_some_and(|s| s > 0.0)),
            "{scenario} / {variant} was not measured and checked:\n{stdout}"
        );
    }
    // Machine facts are recorded with the numbers.
    for fact in [
        "nproc",
        "memory",
        "kernel",
        "rustc",
        "rabbitmq",
        "postgresql",
    ] {
        assert!(!v["machine"][fact].is_null(), "machine fact {fact} missing");
    }
    // The readable table is printed.
    assert!(
        stdout.contains("scenario") && stdout.contains("table_replay"),
        "{stdout}"
    );
}

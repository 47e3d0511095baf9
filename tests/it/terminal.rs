//! dlq on a real terminal (tmux), where what an operator sees differs from what a pipe gets:
//! tables sized to the terminal, a progress bar on stderr.

use crate::broker::Broker;
use crate::common::{Dialect, TestDb, row};
use crate::tmux::Term;
use lapin::BasicProperties;
use std::time::Duration;

/// The command `args` ended well, no line of its screen is wider than `cols`, and each of
/// `wants` stands whole among the screen's words (split at spaces and table borders).
fn assert_fits(screen: &str, cols: usize, args: &[&str], wants: &[&str]) {
    assert!(screen.contains("[dlq exited 0]"), "{args:?}: {screen}");
    for line in screen.lines() {
        let n = line.chars().count();
        assert!(
            n <= cols,
            "{args:?}: a line wider than the terminal ({n} chars):\n{screen}"
        );
    }
    let words: Vec<&str> = screen
        .split(|c: char| c.is_whitespace() || "│┆|".contains(c))
        .collect();
    for want in wants {
        assert!(words.contains(want), "{args:?}: {want:?} cut:\n{screen}");
    }
}

/// #17.9: `NO_COLOR` and `--color never` turn colour off, not the sizing: a table on a
/// terminal still fits it.
#[tokio::test]
async fn tables_fit_the_terminal_without_colour() {
    let db = TestDb::new(Dialect::Sqlite, "term_nocolor").await;
    db.init();
    let long = "MemoryError: could not allocate the buffer for the nightly export of \
                enrolment records while the reporting replica was being rebuilt";
    db.insert(&[
        row(
            "app.tasks.export_enrolments",
            Some(r#"{"escola_id": 17, "periodo": "2026-11"}"#),
            long,
            "2026-11-30T10:00:00Z",
            false,
        ),
        row(
            "app.tasks.notify",
            Some("[1]"),
            "KeyError: 'usuario_id'",
            "2026-11-30T11:00:00Z",
            false,
        ),
    ])
    .await;
    let env = [
        ("DLQ_DATABASE_URL", db.url.as_str()),
        ("DLQ_TABLE", db.table.as_str()),
    ];
    let no_color: Vec<(&str, &str)> = env.iter().copied().chain([("NO_COLOR", "1")]).collect();
    for (env, args) in [
        (no_color.as_slice(), vec!["filter"]),
        (env.as_slice(), vec!["--color", "never", "filter"]),
    ] {
        // Wide enough for every word side by side, too narrow for the table's natural width.
        let t = Term::start(120, env, &args);
        let screen = t.wait_exit();
        // The words are all there, only wrapped, and none is cut (the table path of #17.16).
        let wants = [
            "MemoryError:",
            "app.tasks.export_enrolments",
            db.table.as_str(),
        ];
        assert_fits(&screen, 120, &args, &wants);
        assert!(
            screen.contains('│') || screen.contains('┆'),
            "a table: {screen}"
        );
        assert!(!screen.contains("\u{1b}["), "no colour codes: {screen}");
    }
    db.drop().await;
}

/// #17.16: at 80 columns no word is cut in two (`Memor yError`): columns keep their longest
/// word whole, or, when they cannot all do that side by side, the rows are stacked.
#[tokio::test]
async fn words_stay_whole_at_80_columns() {
    let db = TestDb::new(Dialect::Sqlite, "term_words").await;
    db.init();
    let motivo = "MemoryError: could not allocate the buffer for qa.work.dlq while exporting";
    db.insert(&[row(
        "app.tasks.export_enrolments",
        Some(r#"{"escola_id": 17}"#),
        motivo,
        "2026-11-30T10:00:00Z",
        false,
    )])
    .await;
    let env = [
        ("DLQ_DATABASE_URL", db.url.as_str()),
        ("DLQ_TABLE", db.table.as_str()),
        ("NO_COLOR", "1"),
    ];
    let all = ["MemoryError:", "qa.work.dlq", "app.tasks.export_enrolments"];
    for (args, wants) in [
        (vec!["filter"], all.to_vec()),
        (vec!["filter", "--group-by", "motivo"], vec!["MemoryError:"]),
        (vec!["list"], vec![db.table.as_str()]),
    ] {
        let t = Term::start(80, &env, &args);
        assert_fits(&t.wait_exit(), 80, &args, &wants);
    }
    db.drop().await;
}

/// #17.17: a `--yes` queue replay on a terminal shows a bar with the DLQ's depth as its
/// total and a whole number of messages per second.
#[tokio::test]
async fn a_replay_on_a_terminal_shows_a_bar_with_its_total() {
    let b = Broker::new("term_bar").await;
    b.queue("bar.dlq", Default::default()).await;
    b.queue("bar.dest", Default::default()).await;
    for i in 0..60 {
        let body = format!(r#"{{"n": {i}}}"#);
        b.publish("bar.dlq", body.as_bytes(), BasicProperties::default())
            .await;
    }
    b.wait_depth("bar.dlq", 60).await;
    let url = b.amqp_url();
    let t = Term::start(
        100,
        &[],
        &[
            "--amqp-url",
            &url,
            "replay",
            "-Q",
            "bar.dlq",
            "--to-queue",
            "bar.dest",
            "--yes",
            "--rate",
            "20",
        ],
    );
    let bar = regex::Regex::new(r"replaying \[[=> ]+\] (\d+)/60 (\d+)/s eta").unwrap();
    let screen = t.wait_for(Duration::from_secs(20), |s| {
        bar.captures(s)
            .is_some_and(|c| c[1].parse::<u32>().unwrap() > 0)
    });
    // Raw floats (`19.873/s`) are what #17 complained about.
    assert!(
        !regex::Regex::new(r"\d+\.\d+/s").unwrap().is_match(&screen),
        "{screen}"
    );
    let screen = t.wait_exit();
    assert!(screen.contains("[dlq exited 0]"), "{screen}");
    assert_eq!(b.depth("bar.dest").await, 60);
    assert_eq!(b.depth("bar.dlq").await, 0);
    b.delete().await;
}

/// Below 60 columns a table is unreadable: rows are stacked, wrapped at word boundaries.
#[tokio::test]
async fn narrow_terminals_get_stacked_rows() {
    let db = TestDb::new(Dialect::Sqlite, "hard_narrow").await;
    db.init();
    db.insert(&[row(
        "t",
        Some("[1]"),
        "MemoryError: could not allocate the buffer",
        "2026-11-30T10:00:00Z",
        false,
    )])
    .await;
    let out = crate::common::Dlq::new()
        .env("DLQ_DATABASE_URL", &db.url)
        .env("DLQ_TABLE", &db.table)
        .env("COLUMNS", "40")
        .args(&["inspect"])
        .run()
        .ok();
    assert!(
        out.contains("motivo:     MemoryError: could not\n"),
        "{out}"
    );
    assert!(!out.contains('┆'), "{out}");
    db.drop().await;
}

/// #31.4: while the broker blocks publishing, the bar itself says so (not only a line above
/// it that scrolls away); once the alarm clears the replay finishes, every message moved.
#[tokio::test]
async fn a_blocked_broker_shows_on_the_bar() {
    use lapin::options::QueueDeclareOptions;
    let (node, conn, ch) =
        crate::support::node::with_dead_letters("termblock", "tb.dlq", "tb.dest", 200).await;
    node.memory_alarm(true);
    let (amqp, api) = (node.amqp_url(), node.api_url());
    let t = Term::start(
        160,
        &[("DLQ_MANAGEMENT_URL", &api)],
        &[
            "--amqp-url",
            &amqp,
            "replay",
            "-Q",
            "tb.dlq",
            "--to-queue",
            "tb.dest",
            "--yes",
        ],
    );
    let bar = regex::Regex::new(r"replaying \[BLOCKED by the broker: [^\]]+\] \[").unwrap();
    let screen = t.wait_for(Duration::from_secs(40), |s| bar.is_match(s));
    assert!(screen.contains("the broker blocked publishing"), "{screen}");
    node.memory_alarm(false);
    let screen = t.wait_exit();
    assert!(screen.contains("[dlq exited 0]"), "{screen}");
    assert!(
        screen.contains("the broker unblocked publishing"),
        "{screen}"
    );
    let passive = QueueDeclareOptions {
        passive: true,
        ..Default::default()
    };
    let dest = ch
        .queue_declare("tb.dest".into(), passive, Default::default())
        .await
        .unwrap();
    assert_eq!(dest.message_count(), 200);
    drop(conn);
}

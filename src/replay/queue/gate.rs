//! The gate: what a run says before anything moves, and where it starts in the audit log.
//! A planned run checks its destinations, prints the plan and asks through
//! `crate::bulk::gate`; a streamed run (--yes) only says what it does. Touches the broker
//! read-only (passive declares, the target and length-limit checks) and the audit log; it
//! moves nothing.

use super::Session;
use super::plan::{Plan, Taken};
use super::route::describe_target;
use crate::bulk::release_unmoved;
use crate::error::{Exit, usage};
use crate::rabbit;
use crate::replay::{Target, print_plan_groups};
use anyhow::Result;

/// Destinations checked, the plan printed, then the gate: `Some(exit)` stops here.
pub(crate) async fn plan_gate(
    session: &mut Session<'_>,
    taken: &mut Taken,
) -> Result<Option<Exit>> {
    require_destinations(session, taken).await?;
    let target_note = session.check_target().await?;
    print_plan(session, &taken.plan, target_note);
    warn_length_limits(session, &taken.plan).await;
    warn_planned_timeouts(session, &taken.plan);
    let plan = &taken.plan;
    let hold = &taken.hold;
    let wait = || hold.wait();
    let gate = crate::bulk::Gate {
        safety: session.opts.common.safety,
        planned: plan.count,
        refused: plan.refused.len(),
        nothing: "nothing to replay",
        dry_run: "dry run: nothing was moved",
        prompt: format!("Move {} message(s)?", plan.count),
        audit: Some(&mut session.audit),
        hold: Some(crate::bulk::PromptHold {
            started: hold.started,
            wait: &wait,
            signals_at: session.signals_at,
        }),
    };
    crate::bulk::gate(session.printer, gate).await
}

/// Destinations must exist before anything moves: when one does not, everything taken is
/// given back and the run refused.
async fn require_destinations(session: &Session<'_>, taken: &mut Taken) -> Result<()> {
    let mut missing = Vec::new();
    for d in &taken.plan.destinations {
        if rabbit::passive_declare(&session.conn, d).await?.is_none() {
            missing.push(d.clone());
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let takers = std::mem::take(&mut taken.takers);
    release_unmoved(&session.conn, session.printer, takers, None).await;
    Err(usage(format!(
        "destination queue(s) {} do not exist: nothing was moved (declare them or pass --to-queue)",
        missing.join(", ")
    )))
}

fn print_plan(session: &Session<'_>, plan: &Plan, target_note: Option<String>) {
    let (printer, opts) = (session.printer, session.opts);
    let to = describe_target(&opts.common.target);
    printer.info(format!(
        "Plan: move {} message(s) from {} ({}) {to} on {}",
        plan.count,
        session.queue_names(),
        opts.common.selection.describe(),
        session.endpoints.rabbit.shown.clone()
    ));
    print_plan_groups(printer, &plan.groups);
    printer.info(window_line(session));
    if let Some(n) = target_note {
        printer.info(n);
    }
    for (id, why) in plan.refused.iter().take(10) {
        printer.warn(format!("stays in the DLQ: id {id}: {why}"));
    }
    if let Some(t) = opts.common.transform.as_deref() {
        printer.info(format!(
            "--transform (sha256 {}) changes {} of {} message(s); each goes as a new message (new message_id, dlq-transformed-from)",
            &t.sha256()[..16],
            plan.transformed,
            plan.count
        ));
        for d in &plan.diffs {
            printer.info(format!("  {d}"));
        }
    }
}

/// The duplicate bound the run keeps, for the plan.
fn window_line(session: &Session<'_>) -> String {
    let w = session.window();
    format!(
        "Window: {}; a run that dies leaves at most that many both in their destination and in the DLQ",
        w.describe()
    )
}

/// Warns where the plan would fill a destination queue past its length limit.
async fn warn_length_limits(session: &Session<'_>, plan: &Plan) {
    let full_check: Vec<&String> = match &session.opts.common.target {
        Some(Target::Queue(q)) => vec![q],
        _ => plan.destinations.iter().collect(),
    };
    for d in full_check {
        if let Some(w) =
            rabbit::length_limit_warning(&session.endpoints.rabbit, d, plan.count).await
        {
            session.printer.warn(w);
        }
    }
}

/// Says what the streamed run does and starts it in the audit log: under --yes there is
/// no gate, the run starts here.
pub(crate) async fn announce_stream(session: &mut Session<'_>) -> Result<()> {
    let target_note = session.check_target().await?;
    let to = describe_target(&session.opts.common.target);
    session.printer.info(format!(
        "Moving the messages in {} that match ({}) {to} on {}, as they are read (--yes)",
        session.queue_names(),
        session.opts.common.selection.describe(),
        session.endpoints.rabbit.shown.clone()
    ));
    session.printer.info(window_line(session));
    if let Some(n) = target_note {
        session.printer.info(n);
    }
    warn_streamed_timeouts(session);
    session.audit.start(None)
}

/// Where a DLQ sets its own consumer timeout, or the move at `--rate` outlasts the broker's:
/// the plan holds each message from the moment it was taken until it moves, so the answer
/// and the move must come within it (RabbitMQ gives the messages back, and dlq stops:
/// `take::taken_back_note`).
fn warn_planned_timeouts(session: &Session<'_>, plan: &Plan) {
    let rate = session.opts.common.rate;
    for q in &session.checked {
        let Some((ms, whose)) = session.consumer_timeout(q) else {
            continue;
        };
        let moving = match rate {
            Some(r) if plan.count as f64 / r >= ms as f64 / 1000.0 => format!(
                "; moving {} at --rate {r} alone takes {:.0} s (a higher --rate or --limit fits)",
                plan.count,
                plan.count as f64 / r
            ),
            _ if q.facts.consumer_timeout.is_none() => continue, // the broker's: 30 min by default
            _ => String::new(),
        };
        session.printer.warn(format!(
            "{:?} gives back what a consumer holds after {} ({whose}): the plan holds these messages from now until each moves, so answer within half of that (dlq waits no longer, then gives them back and exits 1), and let the move finish within it{moving}; if it strikes, dlq stops there, says so and exits 1",
            q.name,
            crate::rabbit::topology::duration_text(ms)
        ));
    }
}

/// Under --yes paced by --rate, a message waits between its take and its publish up to
/// what the take holds ahead (`take::most_held`) divided by the rate. The take and the
/// window are fitted to a DLQ's own consumer timeout (`window::paced_ahead`); warned where
/// even the least they may hold reaches it.
fn warn_streamed_timeouts(session: &Session<'_>) {
    let Some(rate) = session.opts.common.rate else {
        return;
    };
    let window = session.window().bound() as u64;
    for q in &session.checked {
        let Some((ms, whose)) = session.consumer_timeout(q) else {
            continue;
        };
        let spec = crate::rabbit::reader::ReadSpec::for_checked(q, None);
        let held = crate::rabbit::take::most_held(&spec, window, session.paced_ahead_of(q));
        let wait = held as f64 / rate;
        if wait < ms as f64 / 1000.0 {
            continue;
        }
        // A quorum DLQ's take holds its consumer's credit, which follows --window.
        let fits = match spec.read_all_to_keep_order() {
            true => "a smaller --window or a higher --rate",
            false => "a higher --rate",
        };
        session.printer.warn(format!(
            "{:?} gives back what a consumer holds after {} ({whose}), and at --rate {rate} a message may wait {wait:.0} s between dlq taking it and moving it ({held} taken ahead): the timeout will stop the replay part-way; {fits} fits within it",
            q.name,
            crate::rabbit::topology::duration_text(ms)
        ));
    }
}

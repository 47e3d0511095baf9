//! A broker connection and what dlq knows of its loss.
//!
//! lapin's own status lags: lapin (4.12.3) marks a connection failed only once its internal
//! task, which runs on dlq's one runtime thread, handles its I/O thread's report, and the
//! caller of a request that failed with "Connection reset by peer" can run first. A channel
//! asked for in that moment is never answered (an archive's give-back hung there, every
//! message back already). So what any user of a connection saw is kept with the connection
//! ([`Liveness`]), and every other user of it asks that before asking more of the broker.

use crate::redact;
use std::ops::Deref;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// A connection to the broker (lapin's, which it derefs to) with its [`Liveness`].
pub(crate) struct Connection {
    lapin: lapin::Connection,
    liveness: Liveness,
    /// Whether the broker blocks this connection (`Flow`), for the process-wide state.
    flow: Arc<Flow>,
    /// What the broker reports of its queues' consumer timeouts (`reported`).
    timeouts: super::reported::ReportedTimeouts,
}

impl Connection {
    /// Wraps a connection just opened and watches its events (flow control, its loss).
    pub(super) fn watched(
        lapin: lapin::Connection,
        timeouts: super::reported::ReportedTimeouts,
    ) -> Connection {
        let liveness = Liveness {
            status: lapin.status().clone(),
            lost: Arc::default(),
        };
        let events = lapin.events_listener();
        let flow = Arc::new(Flow::default());
        tokio::spawn(watch_flow(events, liveness.lost.clone(), flow.clone()));
        Connection {
            lapin,
            liveness,
            flow,
            timeouts,
        }
    }

    /// What the broker reports of its queues' consumer timeouts, asked for while dlq waits
    /// with messages held (`ReadSpec::hold_wait`).
    pub(crate) fn reported_timeouts(&self) -> super::reported::ReportedTimeouts {
        self.timeouts.clone()
    }

    /// What every user of this connection knows of its loss, to keep beside a channel.
    pub(crate) fn liveness(&self) -> Liveness {
        self.liveness.clone()
    }

    /// Whether the connection may still answer: neither lapin nor any of its users saw it lost.
    pub(crate) fn alive(&self) -> bool {
        self.liveness.alive()
    }

    /// lapin's `create_channel`, refused at once on a connection known to be lost. lapin
    /// takes a failed connection as failed only once its internal task, on dlq's one runtime
    /// thread, handles the I/O thread's report; a caller that saw a request fail can run
    /// first, and a channel asked for then is never answered (the internal task stops after
    /// that report, leaving the request queued). Yielding first lets that task run.
    pub(crate) async fn create_channel(&self) -> lapin::Result<lapin::Channel> {
        tokio::task::yield_now().await;
        if !self.liveness.alive() {
            let state = lapin::ConnectionState::Error;
            return Err(lapin::ErrorKind::InvalidConnectionState(state).into());
        }
        self.lapin.create_channel().await
    }

    /// See [`Liveness::note_loss`].
    pub(crate) fn note_loss(&self, e: &anyhow::Error) -> bool {
        self.liveness.note_loss(e)
    }
}

/// A connection dropped while the broker blocked it never hears "unblocked": without this,
/// the process would take the broker as blocking for good (a later run in the browser, a
/// `follow` that reconnected, a signal's notice and exit grace).
impl Drop for Connection {
    fn drop(&mut self) {
        self.flow.gone();
    }
}

impl Deref for Connection {
    type Target = lapin::Connection;

    fn deref(&self) -> &lapin::Connection {
        &self.lapin
    }
}

/// Whether one connection is still alive, as lapin and every user of it saw it.
#[derive(Clone)]
pub(crate) struct Liveness {
    status: lapin::ConnectionStatus,
    lost: Arc<AtomicBool>,
}

impl Liveness {
    pub(crate) fn alive(&self) -> bool {
        self.status.connected() && !self.lost.load(Ordering::Relaxed)
    }

    /// Whether a failed operation's error says this connection is gone; if so the connection
    /// is taken as lost by all its users, and the loss recorded for the run's message. A
    /// caller that saw such an error asks nothing more of the connection.
    pub(crate) fn note_loss(&self, e: &anyhow::Error) -> bool {
        let lost = note_loss(e);
        if lost {
            self.lost.store(true, Ordering::Relaxed);
        }
        lost
    }
}

/// Says at once when the broker blocks this connection's publishing (a memory or disk
/// alarm) and when it lets it go: otherwise a replay just stops moving, silently.
async fn watch_flow(
    events: impl futures_util::Stream<Item = lapin::Event>,
    lost: Arc<AtomicBool>,
    flow: Arc<Flow>,
) {
    use futures_util::StreamExt;
    futures_util::pin_mut!(events);
    while let Some(event) = events.next().await {
        match event {
            lapin::Event::ConnectionBlocked(reason) if flow.blocked(&reason) => {
                crate::output::notice(format!(
                    "the broker blocked publishing ({reason}: a memory or disk alarm); dlq waits until it clears; {}",
                    blocked_stop_hint()
                ));
                crate::output::bar_status(Some(&format!("BLOCKED by the broker: {reason}")));
                if !GUARDING.swap(true, Ordering::SeqCst) {
                    tokio::spawn(stop_while_blocked());
                }
            }
            lapin::Event::ConnectionUnblocked if flow.unblocked() => {
                crate::output::notice("the broker unblocked publishing: going on")
            }
            // lapin reports a channel the broker closed (a 404, say) here too: not a loss.
            lapin::Event::Error(e) if super::soft_error(&e).is_none() => {
                lost.store(true, Ordering::Relaxed);
                let mut cause = LOST.lock().unwrap_or_else(|e| e.into_inner());
                cause.get_or_insert_with(|| redact::scrub(&e.to_string()));
            }
            _ => {}
        }
    }
}

/// How long a stopped run waits for confirms while the broker keeps blocking publishing.
pub(crate) const BLOCKED_STOP_GRACE: Duration = Duration::from_secs(10);

/// Whether `stop_while_blocked` runs.
static GUARDING: AtomicBool = AtomicBool::new(false);

/// While the broker blocks publishing, RabbitMQ reads nothing more from dlq: no confirm, no
/// acknowledgement can come, so nothing dlq waits on ends. A signal during the block ends
/// dlq a grace after it (a run's own stop, which knows more of what it leaves, acts a second
/// sooner), a second one at once. Before, a read or an archive renewing a quorum DLQ under
/// a memory alarm heard no signal at all (`inspect` of 3,000 on 4.0.5: ten minutes and two
/// Ctrl-C later, still waiting). Runs while the block lasts.
async fn stop_while_blocked() {
    let before = crate::signals::count();
    let mut first: Option<std::time::Instant> = None;
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let Some((_, reason)) = blocked() else {
            GUARDING.store(false, Ordering::SeqCst);
            return;
        };
        let during = crate::signals::count().saturating_sub(before);
        if during >= 2 {
            let why = format!(
                "interrupted twice while the broker blocks publishing ({reason}): exited at once"
            );
            exit_blocked(&why);
        }
        let at = match (during, first) {
            (0, _) => continue,
            (_, Some(at)) => at,
            (_, None) => {
                crate::output::notice(format!(
                    "interrupted while the broker blocks publishing ({reason}): if it still does {} s from now, dlq exits and what it holds goes back as the connection closes (on a quorum queue, counted toward its delivery limit); signal again to exit at once",
                    BLOCKED_BACKSTOP.as_secs()
                ));
                *first.insert(std::time::Instant::now())
            }
        };
        let waited = at.elapsed();
        if waited >= BLOCKED_BACKSTOP {
            let why = format!(
                "stopped, and the broker still blocks publishing ({reason}) {} s later: exited without waiting for it",
                waited.as_secs()
            );
            exit_blocked(&why);
        }
    }
}

/// Ends dlq (`stop_while_blocked`), saying `why` and what that leaves.
fn exit_blocked(why: &str) -> ! {
    crate::signals::exit_saying(&format!("{why}: {BLOCKED_LEAVES}"), why)
}

/// What a notice of the block says of Ctrl-C (`stop_while_blocked`).
pub(crate) fn blocked_stop_hint() -> String {
    format!(
        "Ctrl-C stops it (at most {} s later while still blocked)",
        BLOCKED_BACKSTOP.as_secs()
    )
}

/// How long after a signal `stop_while_blocked` ends dlq.
const BLOCKED_BACKSTOP: Duration = Duration::from_secs(BLOCKED_STOP_GRACE.as_secs() + 1);

/// What ending dlq while the broker blocks publishing leaves (`stop_while_blocked`).
const BLOCKED_LEAVES: &str = "what dlq held and had not acknowledged goes back to its queue as the connection closes (on a quorum queue that counts a delivery toward its delivery limit); nothing unconfirmed was acknowledged or marked, and what dlq published and was not confirmed (a replay's window, a renewal's copies) may also have arrived, and what an archive acknowledged may also still be queued";

/// Since when, and why, the broker blocks this process's publishing (`connection.blocked`):
/// set while one of its connections is blocked (`Flow`).
static BLOCKED: std::sync::Mutex<Option<(std::time::Instant, String)>> =
    std::sync::Mutex::new(None);

/// How many of this process's connections the broker blocks now.
static BLOCKED_CONNECTIONS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// One connection's part in the process's blocked state: open, blocked, or gone (dropped,
/// after which its events count no more).
#[derive(Default)]
struct Flow(std::sync::atomic::AtomicU8);

const OPEN: u8 = 0;
const BLOCKED_NOW: u8 = 1;
const GONE: u8 = 2;

impl Flow {
    /// The broker blocked this connection: whether that is news.
    fn blocked(&self, reason: &str) -> bool {
        if !self.moved(OPEN, BLOCKED_NOW) {
            return false;
        }
        BLOCKED_CONNECTIONS.fetch_add(1, Ordering::SeqCst);
        let mut state = blocked_state();
        state.get_or_insert_with(|| (std::time::Instant::now(), reason.to_string()));
        true
    }

    /// The broker let this connection go: whether no connection is blocked any more.
    fn unblocked(&self) -> bool {
        self.moved(BLOCKED_NOW, OPEN) && Self::one_less()
    }

    /// The connection is dropped: it no longer holds the process blocked.
    fn gone(&self) {
        if self.0.swap(GONE, Ordering::SeqCst) == BLOCKED_NOW {
            Self::one_less();
        }
    }

    fn moved(&self, from: u8, to: u8) -> bool {
        let ordering = Ordering::SeqCst;
        self.0
            .compare_exchange(from, to, ordering, ordering)
            .is_ok()
    }

    /// One blocked connection fewer: whether that was the last.
    fn one_less() -> bool {
        let mut state = blocked_state();
        if BLOCKED_CONNECTIONS.fetch_sub(1, Ordering::SeqCst) != 1 {
            return false;
        }
        *state = None;
        crate::output::bar_status(None);
        true
    }
}

fn blocked_state() -> std::sync::MutexGuard<'static, Option<(std::time::Instant, String)>> {
    BLOCKED.lock().unwrap_or_else(|e| e.into_inner())
}

/// The first error a connection of this process reported: its loss (an I/O error, or the
/// broker's own `connection.close`, e.g. a node shutting down).
static LOST: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// How a stopped run names a lost connection, with its cause, instead of what the failed
/// operation saw ("IO error: Connection reset by peer", "invalid channel state").
pub(crate) const CONNECTION_LOST: &str = "the connection to the broker was lost";

/// Why a connection of this process was lost, once one was.
fn lost_cause() -> Option<String> {
    LOST.lock().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Whether a failed operation's error says its connection is gone, recorded as the
/// process's loss (see `lost_connection`) when it does. Not a channel's own failure
/// ("invalid channel state" after a queue's deletion, say): the connection may still serve.
fn note_loss(e: &anyhow::Error) -> bool {
    let text = format!("{e:#}");
    let mut signs = LOSS_SIGNS.iter().filter(|s| **s != "invalid channel state");
    if !signs.any(|s| text.contains(s)) {
        return false;
    }
    // As lapin's own report of the loss words it (`watch_flow`), said once.
    let lapin = e.chain().find_map(|c| c.downcast_ref::<lapin::Error>());
    let why = lapin.map_or(text, ToString::to_string);
    let mut lost = LOST.lock().unwrap_or_else(|e| e.into_inner());
    lost.get_or_insert_with(|| redact::scrub(&why));
    true
}

/// `CONNECTION_LOST` and its cause `why`.
fn lost_because(why: &str) -> String {
    format!("{CONNECTION_LOST} ({why})")
}

/// `CONNECTION_LOST` and its cause, once a connection of this process was lost.
pub(crate) fn lost_connection() -> Option<String> {
    lost_cause().map(|why| lost_because(&why))
}

/// A failed run's message led by the loss of its connection, when one was lost and the
/// message does not name it already; the loss's cause is said once, not again at its end
/// ("lost (IO error: reset): nothing was deleted", not "…: nothing was deleted: IO error: reset").
pub(crate) fn led_by_loss(said: &str) -> Option<String> {
    if said.contains(CONNECTION_LOST) {
        return None;
    }
    lost_cause().map(|why| loss_first(&why, said))
}

fn loss_first(why: &str, said: &str) -> String {
    let lost = lost_because(why);
    let said = without_gone_state(said);
    if said.is_empty() {
        return lost;
    }
    match said
        .strip_suffix(why)
        .map(|s| s.trim_end_matches([':', ' ']))
    {
        Some("") => lost,
        Some(rest) => format!("{lost}: {rest}"),
        None => format!("{lost}: {said}"),
    }
}

/// `said` without lapin's account of an operation tried on a channel or connection that was
/// already gone, at its end (the innermost error): once the loss leads, it says nothing
/// more ("lost (CONNECTION_FORCED ...): reading queue \"q\": invalid channel state: Error
/// (basic.ack)" was how a read said it).
fn without_gone_state(said: &str) -> &str {
    let gone = ["invalid channel state", "invalid connection state"];
    match gone.iter().filter_map(|g| said.find(g)).min() {
        Some(at) => said[..at].trim_end_matches([':', ' ']),
        None => said,
    }
}

/// What lapin says of an operation on a connection that is gone (its I/O failed, or the
/// broker closed it).
const LOSS_SIGNS: &[&str] = &[
    "IO error",
    "invalid channel state",
    "invalid connection state",
    "CONNECTION_FORCED",
    "connection closed",
];

/// `CONNECTION_LOST` and its cause, when an error's `text` (or an earlier error of the
/// connection) says the connection is gone.
pub(crate) fn lost_connection_in(text: &str) -> Option<String> {
    lost_connection().or_else(|| {
        let lost = LOSS_SIGNS.iter().any(|s| text.contains(s));
        lost.then(|| lost_because(text))
    })
}

/// An error's text, or what it says of a lost connection instead.
pub(crate) fn named_loss(text: String) -> String {
    lost_connection_in(&text).unwrap_or(text)
}

/// Why a broker operation failed, for a run's `STOPPED:` line.
pub(crate) fn broker_failure(e: &anyhow::Error) -> String {
    let text = format!("{e:#}");
    lost_connection_in(&text).unwrap_or_else(|| format!("broker: {text}"))
}

/// Since when and why publishing is blocked, if it is.
pub(crate) fn blocked() -> Option<(std::time::Instant, String)> {
    blocked_state().clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::anyhow;

    /// The only test of this process that touches the process-wide blocked state.
    #[test]
    fn the_process_is_blocked_while_one_of_its_open_connections_is() {
        let (a, b) = (Flow::default(), Flow::default());
        assert!(a.blocked("low on memory"));
        assert!(!a.blocked("low on memory"), "a connection counts once");
        assert!(b.blocked("low on memory"));
        a.gone();
        assert!(blocked().is_some(), "b is still blocked");
        assert!(
            !a.blocked("low on memory"),
            "a dropped connection counts no more"
        );
        assert!(!a.unblocked());
        assert!(b.unblocked(), "the last blocked one let go");
        assert!(blocked().is_none());
        b.gone();
        let c = Flow::default();
        assert!(c.blocked("low on disk"));
        assert_eq!(
            blocked().map(|(_, why)| why).as_deref(),
            Some("low on disk")
        );
        // Dropped while blocked: it never hears "unblocked".
        c.gone();
        assert!(blocked().is_none());
        assert_eq!(BLOCKED_CONNECTIONS.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_lost_connection_is_named_as_such() {
        let reset =
            anyhow!("IO error: Connection reset by peer (os error 104)").context("publishing");
        assert_eq!(
            broker_failure(&reset),
            "the connection to the broker was lost (publishing: IO error: Connection reset by peer (os error 104))"
        );
        let full = anyhow!("nacked");
        assert_eq!(broker_failure(&full), "broker: nacked");
    }

    #[test]
    fn a_lost_connection_leads_and_its_cause_is_said_once() {
        let why = "IO error: Connection reset by peer (os error 104)";
        assert_eq!(
            loss_first(why, &format!("nothing was deleted from the queues: {why}")),
            format!("{CONNECTION_LOST} ({why}): nothing was deleted from the queues")
        );
        assert_eq!(loss_first(why, why), format!("{CONNECTION_LOST} ({why})"));
        assert_eq!(
            loss_first(why, "invalid channel state"),
            format!("{CONNECTION_LOST} ({why})")
        );
        assert_eq!(
            loss_first(
                why,
                "reading queue \"q\": invalid channel state: Error (basic.ack)"
            ),
            format!("{CONNECTION_LOST} ({why}): reading queue \"q\"")
        );
    }
}

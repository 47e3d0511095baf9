//! SIGINT, SIGTERM and SIGHUP, watched once for the whole process (from the first `listen`) and
//! handed to every part of dlq listening at that moment. A part that holds messages stops on
//! one and gives them back properly (renewed, or nacked, where a close would count a
//! delivery toward the delivery limit) before dlq exits 130.
//!
//! A signal no part listens for ends dlq at once (exit 130, or 143 for SIGTERM), as the
//! signal's default would have, after the terminal is given back (`on_unheard`) and the
//! audit trail's open runs closed. tokio never gives a signal back to its default once it
//! has watched it: before this hub, a job of `dlq browse` after a replay (an archive)
//! ignored Ctrl-C and SIGTERM.

use std::sync::OnceLock;
use tokio::sync::watch;

/// How many signals came so far, for every listener.
static COUNT: OnceLock<watch::Sender<u64>> = OnceLock::new();
/// What must happen before dlq ends on a signal (the terminal given back).
static ON_UNHEARD: OnceLock<fn()> = OnceLock::new();
/// Files removed when dlq ends on a signal (`discard_on_exit`).
static DISCARDED: std::sync::Mutex<Vec<std::path::PathBuf>> = std::sync::Mutex::new(Vec::new());

/// `path` is removed if dlq ends on a signal: an archive's `.partial` file, never complete,
/// which could keep a disk full (a path renamed away meanwhile is left alone). The watch
/// starts here if nothing listened yet, so that a signal nobody listens for removes it too
/// (`unheard`). Before, Ctrl-C on a table's archive ended dlq by the signal's default, and
/// left it.
pub(crate) fn discard_on_exit(path: &std::path::Path) {
    let mut paths = DISCARDED.lock().unwrap_or_else(|e| e.into_inner());
    paths.push(path.to_path_buf());
    if tokio::runtime::Handle::try_current().is_ok() {
        COUNT.get_or_init(start);
    }
}

/// A part of dlq that stops on the next signal: it sees those that come after `listen`.
pub(crate) struct Listener {
    seen: u64,
    rx: watch::Receiver<u64>,
}

/// Listens from now on; the first call starts the process's watch (on dlq's runtime).
pub(crate) fn listen() -> Listener {
    let tx = COUNT.get_or_init(start);
    let rx = tx.subscribe();
    let seen = *rx.borrow();
    Listener { seen, rx }
}

/// Listens for the signals after the first `seen` (another listener's `seen`): a part of a
/// run that listens only while it waits still hears what came since the run started.
pub(crate) fn listen_since(seen: u64) -> Listener {
    Listener { seen, ..listen() }
}

/// Says once per signal that dlq stops on it (`seen`: the listener's count once it came):
/// giving back can take a while, and a second signal should be a choice.
pub(crate) fn announce(seen: u64) {
    announce_as(seen, GIVES_BACK);
}

/// What dlq says of a signal that stops what holds messages (`announce`).
const GIVES_BACK: &str =
    "interrupted: dlq gives back what it holds, then exits (signal again to exit at once)";

/// `announce`, saying `notice`: the first to announce a signal says it.
fn announce_as(seen: u64, notice: &str) {
    static SAID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    if SAID.fetch_max(seen, std::sync::atomic::Ordering::SeqCst) < seen {
        crate::output::notice(notice);
    }
}

/// Signals during a step that must run to its end once begun (a read's give-back, an
/// archive's removal of what it wrote): the first is announced and lets the step finish,
/// after which the run ends interrupted; another exits at once, saying `twice`. Without it,
/// a signal there ended dlq at once (nothing else listening) or was not acted on.
pub(crate) struct Finishing {
    seen: u64,
    task: tokio::task::JoinHandle<()>,
}

impl Finishing {
    /// Listens for the signals after the first `seen` (one since then is announced at
    /// once); `stopped`: the run already stopped on the last of them, which was announced,
    /// so the next exits at once. `notice`: what the first says (`None`: `announce`'s).
    pub(crate) fn start(
        seen: u64,
        stopped: bool,
        notice: Option<&'static str>,
        twice: &'static str,
    ) -> Finishing {
        let mut signals = listen_since(seen);
        let task = tokio::spawn(async move {
            if !stopped {
                signals.next().await;
                announce_as(signals.seen(), notice.unwrap_or(GIVES_BACK));
            }
            signals.next().await;
            exit_at_once(twice);
        });
        Finishing { seen, task }
    }

    /// Whether a signal came since the step's `seen`.
    pub(crate) fn came(&self) -> bool {
        came_since(self.seen)
    }
}

impl Drop for Finishing {
    /// Never outlives its step: a later step keeps its own first-signal stop.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Ends dlq now with 130, saying `why`: a second signal while dlq gives back after the first.
pub(crate) fn exit_at_once(why: &str) -> ! {
    exit_saying(why, why)
}

/// Ends dlq now with `code`, the audit trail's open runs closed with `why`, and the terminal
/// given back.
pub(crate) fn exit(code: u8, why: &str) -> ! {
    crate::audit::abandon(why, code);
    for path in DISCARDED.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        let _ = std::fs::remove_file(path);
    }
    give_terminal_back();
    std::process::exit(i32::from(code))
}

/// Ends dlq now with 130, saying `said` (on the operator's own screen); the audit trail's end
/// records say `why`.
pub(crate) fn exit_saying(said: &str, why: &str) -> ! {
    give_terminal_back();
    say!("{said}");
    exit(130, why)
}

/// What `on_unheard` registered (the browser's screen left), before dlq says why it ends:
/// said on the browser's screen, it would go with it.
pub(crate) fn give_terminal_back() {
    if let Some(f) = ON_UNHEARD.get() {
        f();
    }
}

/// The signals so far (0 before the watch starts; it needs no runtime).
pub(crate) fn count() -> u64 {
    COUNT.get().map_or(0, |tx| *tx.borrow())
}

/// Whether a signal came after the first `seen` (a `Listener::seen` taken earlier).
pub(crate) fn came_since(seen: u64) -> bool {
    COUNT.get().is_some_and(|tx| *tx.borrow() > seen)
}

/// Registers what a signal nobody listens for does before dlq ends (the browser gives the
/// terminal back). The first registration stands.
pub(crate) fn on_unheard(f: fn()) {
    let _ = ON_UNHEARD.set(f);
}

impl Listener {
    /// The signals this listener has seen (`listen_since`).
    pub(crate) fn seen(&self) -> u64 {
        self.seen
    }

    /// Waits for the next signal after those this listener has seen.
    pub(crate) async fn next(&mut self) {
        let seen = self.seen;
        // The borrow ends here: it must not live across the await below.
        let got = self.rx.wait_for(|n| *n > seen).await.map(|n| *n);
        match got {
            Ok(n) => self.seen = n,
            // The watch is gone (it never is: `COUNT` keeps it): no signal will come.
            Err(_) => std::future::pending().await,
        }
    }

    /// Whether a signal came that this listener has not seen (and marks it seen).
    pub(crate) fn came(&mut self) -> bool {
        let n = *self.rx.borrow();
        let came = n > self.seen;
        self.seen = n;
        came
    }
}

/// The watch: a task that counts signals, or ends dlq on one nobody listens for.
fn start() -> watch::Sender<u64> {
    use tokio::signal::unix::{SignalKind, signal};
    let (tx, _) = watch::channel(0u64);
    let counter = tx.clone();
    // Installed before `listen` returns, not at the task's first poll: a signal in between
    // would end dlq as its default does.
    // SIGHUP too: an SSH session or a terminal window gone. Its default ended dlq at once,
    // and the broker took back what it held (a `filter` of 40,000 quorum dead letters with
    // a limit on 4.0.5: 2,000 counted, 127 renewed copies left beside their originals).
    // Not where it is ignored (`nohup`): watching it would undo that.
    let (Ok(mut int), Ok(mut term), Ok(mut hup)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        match hangup_ignored() {
            false => signal(SignalKind::hangup()).map(Some),
            true => Ok(None),
        },
    ) else {
        return tx;
    };
    tokio::spawn(async move {
        loop {
            let hangup = async {
                match hup.as_mut() {
                    Some(h) => h.recv().await,
                    None => std::future::pending().await,
                }
            };
            let code = tokio::select! {
                _ = int.recv() => 130,
                _ = term.recv() => 143,
                _ = hangup => 129,
            };
            // A hangup comes twice or more (tmux's, then the terminal's as its session
            // leader exits) and never means "exit at once": it counts only as the process's
            // first signal. Counted twice, dlq exited at once, holding what it gave back.
            if code == 129 && *counter.borrow() > 0 {
                continue;
            }
            // No receiver: no part of dlq listens.
            if counter.receiver_count() == 0 {
                unheard(code);
            }
            counter.send_modify(|n| *n += 1);
        }
    });
    tx
}

/// Whether dlq started with SIGHUP ignored (`nohup`), from the kernel's `SigIgn` mask (bit 0
/// is signal 1); where there is no /proc, as if not.
fn hangup_ignored() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mask = status.lines().find_map(|l| l.strip_prefix("SigIgn:"));
    mask.and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .is_some_and(|m| m & 1 == 1)
}

/// A signal with no part of dlq listening: what its default would have done.
fn unheard(code: u8) -> ! {
    exit(code, "interrupted by a signal")
}

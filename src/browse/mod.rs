//! `dlq browse`: the incident browser. Sources → reason groups → records → one record, on
//! one screen; every action leaves the screen for the same plan → confirm → run → report
//! as the commands (`act.rs`), so it leaves the same audit record and asks the same way.
//!
//! ```text
//! mod.rs   the request and the loop: keys and loads in one select
//! state.rs what is on screen (a stack of views) and what each key does
//! load.rs  reading sources, groups and a page of records (never changing a queue)
//! view.rs  drawing          act.rs  replay / archive / export through the engines
//! term.rs  the terminal: raw mode and the alternate screen, restored on every exit
//! ```

mod act;
mod load;
mod state;
mod term;
mod view;

use crate::endpoints::Endpoints;
use crate::error::{Exit, usage};
use crate::output::Printer;
use crate::replay::workers::WorkerCheck;
use crate::select::Selection;
use crate::source::QueueOptions;
use crate::source::overview::OverviewOptions;
use anyhow::Result;
use state::{App, Step};
use std::time::Duration;

/// The browser's request, lowered once from its flags.
pub(crate) struct Request {
    pub(crate) overview: OverviewOptions,
    /// How every queue is read (`names` is filled per source).
    pub(crate) queue: QueueOptions,
    /// Re-read the sources screen this often while it is shown.
    pub(crate) refresh: Option<Duration>,
    pub(crate) read_only: bool,
    pub(crate) workers: WorkerCheck,
    pub(crate) profile: Option<String>,
    /// The prompt's terms as a selection, by the same rules as the selection flags.
    pub(crate) lower: Lower,
}

pub(crate) type Lower = Box<dyn Fn(&[Term]) -> Result<Selection>>;

/// One term typed in the prompt: `:motivo X` is `motivo` = `X`; `/REGEX` is `pattern`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Term {
    pub(crate) key: String,
    pub(crate) value: String,
}

pub(crate) async fn run(endpoints: &Endpoints, printer: &Printer, req: Request) -> Result<Exit> {
    use std::io::IsTerminal as _;
    if !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal()) {
        return Err(usage(
            "dlq browse needs a terminal on stdin and stdout; in scripts use dlq list, filter and inspect",
        ));
    }
    // Loads report through the screen: nothing may write on stderr under it.
    let quiet = Printer {
        quiet: true,
        verbose: 0,
        progress: false,
        ..printer.clone()
    };
    let mut screen = term::Screen::enter()?;
    let mut app = App::new(&req, endpoints, printer, &quiet);
    let result = event_loop(&mut app, &mut screen).await;
    drop(screen);
    result.map(|()| Exit::Ok)
}

/// Keys, the load in flight and the refresh tick in one select: a load never freezes the
/// keys (Esc cancels it), and the screen is drawn after each of them.
async fn event_loop(app: &mut App<'_>, screen: &mut term::Screen) -> Result<()> {
    let mut input = term::Input::start();
    let mut load = app.start(load::Kind::Sources);
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    // Raw mode turns Ctrl-C into a key; a signal from elsewhere (SIGTERM) ends the browser as
    // `q` does, its loads giving back what they hold.
    let mut signals = crate::signals::listen();
    loop {
        // Notices (the broker blocking publishing) show on the status line.
        for n in crate::output::held_notices() {
            app.notice(n);
        }
        screen.draw(|f| view::draw(f, app))?;
        let step = tokio::select! {
            _ = signals.next() => {
                return Err(crate::error::interrupted("interrupted: the browser ended on a signal"));
            }
            ev = input.next() => match ev {
                Some(Ok(ev)) => app.on_event(ev, load.is_some()),
                Some(Err(e)) => return Err(e.into()),
                None => Step::Quit,
            },
            done = async { load.as_mut().expect("guarded").await }, if load.is_some() => {
                load = None;
                app.apply(done);
                Step::Stay
            }
            _ = tick.tick() => app.on_tick(load.is_some()),
        };
        match step {
            Step::Stay => {}
            Step::Quit => return Ok(()),
            Step::Cancel => {
                load = None;
                app.cancelled();
            }
            Step::Load(kind) => load = app.start(kind),
            Step::Act(job) => {
                // A read in flight would hold messages the action must find.
                drop(load.take());
                // Nothing may read the terminal while the action's prompt does.
                input.pause();
                screen.suspend()?;
                act::run(app.endpoints, app.printer, app.req, &job).await;
                crate::source::settle().await;
                screen.resume()?;
                input.resume();
                // A signal during the action was the action's (it stops on one).
                signals = crate::signals::listen();
                load = app.after_action();
            }
        }
    }
}

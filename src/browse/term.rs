//! The terminal as the browser uses it: raw mode on the alternate screen, and the
//! operator's terminal given back exactly on every way out (quit, error, panic) and while
//! an action runs on the ordinary screen.

use anyhow::Result;
use crossterm::{cursor, execute, terminal};
use ratatui::Terminal;
use ratatui::backend::CrosstermBackend;
use std::io::Stdout;

pub(super) struct Screen {
    terminal: Terminal<CrosstermBackend<Stdout>>,
}

impl Screen {
    pub(super) fn enter() -> Result<Screen> {
        install_panic_restore();
        crate::signals::on_unheard(restore);
        take()?;
        let terminal = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
        Ok(Screen { terminal })
    }

    pub(super) fn draw(&mut self, f: impl FnOnce(&mut ratatui::Frame)) -> Result<()> {
        self.terminal.draw(f)?;
        Ok(())
    }

    /// Gives the ordinary screen back for an action's plan, prompt and report.
    pub(super) fn suspend(&mut self) -> Result<()> {
        restore();
        Ok(())
    }

    /// A new terminal rather than `Terminal::clear`, which asks the terminal where its cursor
    /// is and fails when the answer is slow: the first draw repaints everything.
    pub(super) fn resume(&mut self) -> Result<()> {
        take()?;
        self.terminal = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
        Ok(())
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// Whether the browser holds the terminal (`take`, until `restore`).
static TAKEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn take() -> Result<()> {
    TAKEN.store(true, std::sync::atomic::Ordering::SeqCst);
    crate::output::hold_notices(true);
    terminal::enable_raw_mode()?;
    execute!(
        std::io::stdout(),
        terminal::EnterAlternateScreen,
        terminal::Clear(terminal::ClearType::All),
        cursor::Hide
    )?;
    Ok(())
}

/// Idempotent: only a terminal the browser holds is given back. Leaving the alternate screen
/// twice is not harmless: a terminal such as tmux puts the cursor back where it was when the
/// screen was taken, and what dlq says next overwrote what it had just said.
fn restore() {
    if !TAKEN.swap(false, std::sync::atomic::Ordering::SeqCst) {
        return;
    }
    let _ = terminal::disable_raw_mode();
    let _ = execute!(
        std::io::stdout(),
        terminal::LeaveAlternateScreen,
        cursor::Show
    );
    // What the screen did not show yet, on the operator's own screen.
    crate::output::hold_notices(false);
}

/// A panic's message must land on the ordinary screen, after the terminal is given back.
fn install_panic_restore() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
    });
}

/// The keys, read on a thread of their own and handed to the loop: one reader for the whole
/// session that can be paused, so nothing reads the terminal while an action's prompt does.
/// (crossterm's own event stream, dropped and made again around each action, sometimes left
/// the keys typed after it unread.)
pub(super) struct Input {
    rx: tokio::sync::mpsc::UnboundedReceiver<std::io::Result<crossterm::event::Event>>,
    active: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Held by the reader for each short poll: taking it proves the reader is not reading.
    turn: std::sync::Arc<std::sync::Mutex<()>>,
}

impl Input {
    pub(super) fn start() -> Input {
        use std::sync::atomic::Ordering;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let active = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let turn = std::sync::Arc::new(std::sync::Mutex::new(()));
        let (a, t) = (active.clone(), turn.clone());
        std::thread::spawn(move || {
            while !tx.is_closed() {
                if !a.load(Ordering::SeqCst) {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    continue;
                }
                let _turn = t.lock().unwrap_or_else(|e| e.into_inner());
                if !a.load(Ordering::SeqCst) {
                    continue;
                }
                let read = match crossterm::event::poll(std::time::Duration::from_millis(50)) {
                    Ok(true) => crossterm::event::read(),
                    Ok(false) => continue,
                    Err(e) => Err(e),
                };
                if tx.send(read).is_err() {
                    return;
                }
            }
        });
        Input { rx, active, turn }
    }

    pub(super) async fn next(&mut self) -> Option<std::io::Result<crossterm::event::Event>> {
        self.rx.recv().await
    }

    /// Returns once the reader has stopped reading the terminal.
    pub(super) fn pause(&mut self) {
        self.active
            .store(false, std::sync::atomic::Ordering::SeqCst);
        drop(self.turn.lock().unwrap_or_else(|e| e.into_inner()));
        // Keys read before the pause belong to the screen that is going away.
        while self.rx.try_recv().is_ok() {}
    }

    pub(super) fn resume(&mut self) {
        self.active.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

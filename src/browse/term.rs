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

fn take() -> Result<()> {
    terminal::enable_raw_mode()?;
    execute!(
        std::io::stdout(),
        terminal::EnterAlternateScreen,
        terminal::Clear(terminal::ClearType::All),
        cursor::Hide
    )?;
    Ok(())
}

/// Idempotent: leaving raw mode and the alternate screen twice is harmless.
fn restore() {
    let _ = terminal::disable_raw_mode();
    let _ = execute!(
        std::io::stdout(),
        terminal::LeaveAlternateScreen,
        cursor::Show
    );
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

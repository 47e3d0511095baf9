//! A command on a real terminal: its own tmux server (its own socket, so tests run in
//! parallel), keys typed into it and its screen read back.

use crate::common::unique;
use std::process::Command;
use std::time::{Duration, Instant};

/// One command running in its own tmux server (its own socket, so tests run in parallel),
/// in a window `cols` wide. The window stays after the command ends, so its screen can be read.
pub(crate) struct Term {
    socket: String,
}

impl Term {
    pub(crate) fn start(cols: u16, env: &[(&str, &str)], args: &[&str]) -> Term {
        Term::sized(cols, 50, env, args)
    }

    /// A `cols` × `rows` window.
    pub(crate) fn sized(cols: u16, rows: u16, env: &[(&str, &str)], args: &[&str]) -> Term {
        let socket = unique("dlq-term");
        let state = std::env::temp_dir().join("dlq-tests-state");
        let config = std::env::temp_dir().join("dlq-tests-no-config");
        // A clean environment, as a terminal would give it: no COLUMNS (the terminal's width
        // must be found), no inherited URLs but the broker generation's under test.
        let mut line = vec![
            "env".to_string(),
            "-i".into(),
            format!("PATH={}", std::env::var("PATH").unwrap_or_default()),
            "TERM=xterm-256color".into(),
            format!("XDG_STATE_HOME={}", state.display()),
            format!("XDG_CONFIG_HOME={}", config.display()),
        ];
        let target = crate::target::dlq_env();
        line.extend(target.iter().map(|(k, v)| format!("{k}={v}")));
        line.extend(env.iter().map(|(k, v)| format!("{k}={v}")));
        line.push(env!("CARGO_BIN_EXE_dlq").into());
        line.extend(args.iter().map(|a| a.to_string()));
        let script = format!(
            "{}; echo \"[dlq exited $?]\"; sleep 600",
            line.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")
        );
        let status = Command::new("tmux")
            .args(["-L", &socket, "-f", "/dev/null", "new-session", "-d"])
            .args(["-x", &cols.to_string(), "-y", &rows.to_string()])
            // bash, not dash: a Ctrl-C the test types reaches the shell too, and dash exits on it
            // once dlq has handled it and ended, where an operator's bash goes on.
            .args(["bash", "-c", &script])
            .status()
            .expect("tmux runs (bash .ci/run installs it)");
        assert!(status.success(), "tmux new-session failed");
        Term { socket }
    }

    /// The whole screen and history, wrapped lines joined (so a line wider than the
    /// terminal shows as one long line).
    pub(crate) fn screen(&self) -> String {
        self.capture(&["-J", "-S", "-"])
    }

    /// The visible screen only, wrapped lines joined.
    pub(crate) fn visible(&self) -> String {
        self.capture(&["-J"])
    }

    /// What is on the screen now (no history), with its colour and style escapes.
    pub(crate) fn screen_escaped(&self) -> String {
        self.capture(&["-e"])
    }

    fn capture(&self, flags: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "capture-pane", "-p"])
            .args(flags)
            .output()
            .expect("tmux capture-pane");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Waits until the screen (with its history) satisfies `done`; panics with the screen
    /// after `limit`.
    pub(crate) fn wait_for(&self, limit: Duration, done: impl Fn(&str) -> bool) -> String {
        self.wait_until(limit, Term::screen, done)
    }

    /// Waits until the visible screen satisfies `done`; panics with it after `limit`.
    pub(crate) fn wait_visible(&self, limit: Duration, done: impl Fn(&str) -> bool) -> String {
        self.wait_until(limit, Term::visible, done)
    }

    fn wait_until(
        &self,
        limit: Duration,
        read: fn(&Term) -> String,
        done: impl Fn(&str) -> bool,
    ) -> String {
        let start = Instant::now();
        loop {
            let s = read(self);
            if done(&s) {
                return s;
            }
            assert!(start.elapsed() < limit, "timed out; screen:\n{s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub(crate) fn wait_exit(&self) -> String {
        self.wait_for(Duration::from_secs(60), |s| s.contains("[dlq exited "))
    }

    /// The tmux server's socket name (`tmux -L`), for commands the harness has no method for.
    pub(crate) fn socket(&self) -> &str {
        &self.socket
    }

    /// Types `keys` (tmux key names: `Enter`, `Escape`, `C-c`, or literal text with `-l`).
    pub(crate) fn keys(&self, keys: &[&str]) {
        let status = Command::new("tmux")
            .args(["-L", &self.socket, "send-keys"])
            .args(keys)
            .status()
            .expect("tmux send-keys");
        assert!(status.success());
    }

    /// Types `text` literally.
    pub(crate) fn type_text(&self, text: &str) {
        self.keys(&["-l", text]);
    }
}

impl Drop for Term {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .status();
    }
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

//! The audit trail (`--audit-log`): every run that changes something appends NDJSON records,
//! one when it starts (after the gate, before anything changes) and one when it ends; dry
//! runs, declines and refusals at the gate are recorded too. Each record is flushed and
//! fsynced, so a run killed with kill -9 leaves its start record. A start record that cannot
//! be written refuses the run: nothing is changed without a trace.

use crate::error::Exit;
use crate::output::{Printer, Tabled};
use crate::report::Report;
use anyhow::{Context, Result, anyhow};
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// What one run acts on, repeated in each of its records.
pub(crate) struct Subject {
    /// `replay`, `restore` or `archive`.
    pub(crate) action: &'static str,
    /// `table` or `queue`.
    pub(crate) source: &'static str,
    /// Table name, queue names (comma-separated) or archive file.
    pub(crate) location: String,
    /// `Selection::describe()`.
    pub(crate) selection: String,
    /// The replay id stamped on messages and rows; archive: a fresh uuid.
    pub(crate) run_id: String,
}

/// One line of the audit log.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Record {
    pub(crate) at: String,
    pub(crate) user: String,
    pub(crate) host: String,
    pub(crate) argv: Vec<String>,
    pub(crate) action: String,
    pub(crate) source: String,
    pub(crate) location: String,
    pub(crate) selection: String,
    pub(crate) run_id: String,
    /// `start`, `end`, `dry-run`, `refused` or `declined`.
    pub(crate) event: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) planned: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) done: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) failed: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) skipped: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) exit: Option<u8>,
    /// Why the run was refused or stopped, scrubbed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    /// `--follow`: the tasks' outcomes in total (succeeded, failed again, not seen ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) outcomes: Option<serde_json::Value>,
}

/// The audit handle of one run.
pub(crate) struct Audit {
    path: Option<PathBuf>,
    file: Option<File>,
    subject: Subject,
    printer: Printer,
    planned: Option<u64>,
    started: bool,
    ended: bool,
    /// The signals seen when the run started: its end record says whether one stopped it.
    signals_at: u64,
}

impl Audit {
    /// `log`: the audit trail's path (`None` refuses a run that changes something).
    pub(crate) fn new(log: Option<&Path>, printer: &Printer, subject: Subject) -> Audit {
        Audit {
            path: log.map(Path::to_path_buf),
            file: None,
            subject,
            printer: printer.clone(),
            planned: None,
            started: false,
            ended: false,
            signals_at: 0,
        }
    }

    /// The run's id (the replay id it stamps on what it sends).
    pub(crate) fn run_id(&self) -> &str {
        &self.subject.run_id
    }

    /// The run is about to change something. An error refuses it; a second call does nothing
    /// (actions that skip the gate under `--yes` call it themselves).
    pub(crate) fn start(&mut self, planned: Option<u64>) -> Result<()> {
        if self.started {
            return Ok(());
        }
        self.planned = planned;
        let mut r = self.record("start");
        r.planned = planned;
        self.write(&r)
            .context("cannot write the audit log: nothing was changed (pass --audit-log /dev/null to run without one)")?;
        self.started = true;
        self.signals_at = crate::signals::count();
        let mut end = self.record("end");
        end.planned = planned;
        open_runs().push((self.subject.run_id.clone(), self.path.clone(), end));
        Ok(())
    }

    pub(crate) fn dry_run(&mut self, planned: u64) {
        let mut r = self.record("dry-run");
        r.planned = Some(planned);
        self.write_or_warn(&r);
    }

    pub(crate) fn declined(&mut self, planned: u64) {
        let mut r = self.record("declined");
        r.planned = Some(planned);
        self.write_or_warn(&r);
    }

    pub(crate) fn refused(&mut self, why: &anyhow::Error) {
        let mut r = self.record("refused");
        r.reason = Some(crate::redact::scrub(&format!("{why:#}")));
        self.write_or_warn(&r);
    }

    /// The end of a run that is not a bulk action (a renewal): what was done, and why the
    /// rest was not.
    pub(crate) fn finish(&mut self, done: u64, failed: u64, reason: Option<String>) {
        let mut r = self.record("end");
        r.planned = self.planned;
        r.done = Some(done);
        r.failed = Some(failed);
        r.exit = Some(if failed == 0 { Exit::Ok } else { Exit::Failure } as u8);
        r.reason = reason.as_deref().map(crate::redact::scrub);
        self.ended = true;
        self.write_or_warn(&r);
    }

    /// The run's final report and exit code.
    pub(crate) fn end(&mut self, report: &Report, exit: Exit) {
        let mut r = self.record("end");
        let total = report.succeeded + report.failed_count + report.skipped_count;
        r.planned = Some(self.planned.unwrap_or(total));
        r.done = Some(report.succeeded);
        r.failed = Some(report.failed_count);
        r.skipped = Some(report.skipped_count);
        r.exit = Some(exit as u8);
        r.reason = report.stopped.as_deref().map(crate::redact::scrub);
        r.outcomes = report.follow.as_ref().map(|f| f.totals());
        self.ended = true;
        self.close_run();
        self.write_or_warn(&r);
    }

    fn record(&self, event: &str) -> Record {
        let s = &self.subject;
        Record {
            at: crate::model::rfc3339(&chrono::Utc::now()),
            user: user(),
            host: crate::model::hostname(),
            argv: argv(),
            action: s.action.into(),
            source: s.source.into(),
            location: s.location.clone(),
            selection: s.selection.clone(),
            run_id: s.run_id.clone(),
            event: event.into(),
            planned: None,
            done: None,
            failed: None,
            skipped: None,
            exit: None,
            reason: None,
            outcomes: None,
        }
    }

    /// Records after the start cannot undo anything: a failure is a warning.
    fn write_or_warn(&mut self, r: &Record) {
        if let Err(e) = self.write(r) {
            self.printer
                .warn_always(format!("audit log: {e:#} (event {} not recorded)", r.event));
        }
    }

    /// One line, one `write` (O_APPEND keeps concurrent runs' lines whole), then fsync.
    fn write(&mut self, r: &Record) -> Result<()> {
        if self.file.is_none() {
            self.file = Some(open(self.path.as_deref())?);
        }
        let file = self.file.as_mut().expect("opened above");
        let mut line = serde_json::to_vec(r)?;
        line.push(b'\n');
        file.write_all(&line)
            .and_then(|()| file.flush())
            .context("writing the audit log")?;
        match file.sync_data() {
            // /dev/null and other devices cannot be synced: nothing to make durable.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Ok(()),
            other => other.context("fsync of the audit log"),
        }
    }
}

impl Drop for Audit {
    /// A started run that returns an error instead of a report still gets an end record.
    fn drop(&mut self) {
        self.close_run();
        if self.started && !self.ended {
            let mut r = self.record("end");
            r.planned = self.planned;
            // The exit the process ends with: a signal's error exits 130.
            let (exit, why) = match crate::signals::came_since(self.signals_at) {
                true => (
                    Exit::Interrupted,
                    "interrupted by a signal (see its stderr)",
                ),
                false => (
                    Exit::Failure,
                    "the run ended with an error (see its stderr)",
                ),
            };
            r.exit = Some(exit as u8);
            r.reason = Some(why.into());
            self.write_or_warn(&r);
        }
    }
}

/// Started runs without an end record yet (run id, trail, the end record to write), for
/// `abandon`: a process that must exit at once still closes its runs in the trail.
type OpenRun = (String, Option<PathBuf>, Record);
static OPEN_RUNS: std::sync::Mutex<Vec<OpenRun>> = std::sync::Mutex::new(Vec::new());

fn open_runs() -> std::sync::MutexGuard<'static, Vec<OpenRun>> {
    OPEN_RUNS.lock().unwrap_or_else(|e| e.into_inner())
}

impl Audit {
    fn close_run(&self) {
        open_runs().retain(|(id, _, _)| *id != self.subject.run_id);
    }
}

/// Writes the end record of every run still open, with `reason` and exit code `exit`: for an
/// exit that cannot wait for the run to report (a second Ctrl-C, a broker that keeps
/// blocking after a stop). Best effort: the process is about to exit.
pub(crate) fn abandon(reason: &str, exit: u8) {
    for (_, path, mut r) in open_runs().drain(..) {
        r.at = crate::model::rfc3339(&chrono::Utc::now());
        r.exit = Some(exit);
        r.reason = Some(crate::redact::scrub(reason));
        let Ok(mut file) = open(path.as_deref()) else {
            continue;
        };
        if let Ok(mut line) = serde_json::to_vec(&r) {
            line.push(b'\n');
            let _ = file.write_all(&line).and_then(|()| file.sync_data());
        }
    }
}

/// Where reads that rewrite a queue (a quorum queue renewed, see `rabbit::renew`) record
/// themselves: set once per process by the command layer, as reads run deep below it.
static READ_TRAIL: std::sync::OnceLock<(Option<PathBuf>, Printer)> = std::sync::OnceLock::new();

pub(crate) fn set_read_trail(path: Option<PathBuf>, printer: Printer) {
    let _ = READ_TRAIL.set((path, printer));
}

/// The audit handle of a read that renews `queue`: action `renew`, source `queue`.
pub(crate) fn renewal(queue: &str, run_id: String) -> Audit {
    let (path, printer) = READ_TRAIL.get().cloned().unwrap_or_else(|| {
        let printer = Printer {
            format: crate::output::OutputFormat::Table,
            quiet: false,
            verbose: 0,
            color: false,
            progress: false,
            stdout_tty: false,
            interactive: false,
        };
        (None, printer)
    });
    Audit {
        path,
        file: None,
        subject: Subject {
            action: "renew",
            source: "queue",
            location: queue.to_string(),
            selection:
                "every ready message (read by renewal: copies at the tail, originals acknowledged)"
                    .into(),
            run_id,
        },
        printer,
        planned: None,
        started: false,
        ended: false,
        signals_at: 0,
    }
}

fn open(path: Option<&Path>) -> Result<File> {
    let path = path.ok_or_else(|| {
        anyhow!("no audit log path: set --audit-log, DLQ_AUDIT_LOG, XDG_STATE_HOME or HOME")
    })?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut opts = OpenOptions::new();
    opts.append(true).create(true);
    // The log names queues, tables and users: readable by its owner only.
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    opts.open(path)
        .with_context(|| format!("cannot open the audit log {}", path.display()))
}

/// The OS user: $USER or $LOGNAME, else the name of the real uid in /etc/passwd.
fn user() -> String {
    let from_env = ["USER", "LOGNAME"]
        .iter()
        .find_map(|k| std::env::var(k).ok().filter(|v| !v.is_empty()));
    from_env.unwrap_or_else(|| {
        let uid = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Uid:"))
                    .and_then(|l| l.split_whitespace().next().map(str::to_string))
            })
            .unwrap_or_else(|| "?".into());
        std::fs::read_to_string("/etc/passwd")
            .ok()
            .and_then(|p| {
                p.lines().find_map(|l| {
                    let f: Vec<&str> = l.split(':').collect();
                    (f.len() > 2 && f[2] == uid).then(|| f[0].to_string())
                })
            })
            .unwrap_or(format!("uid {uid}"))
    })
}

/// The command line, with every password masked: URL userinfo in any argument, and every
/// secret registered from the settings.
fn argv() -> Vec<String> {
    std::env::args_os()
        .map(|a| scrub_arg(&a.to_string_lossy()))
        .collect()
}

fn scrub_arg(arg: &str) -> String {
    static USERINFO: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    // Greedy to the last `@`: an unescaped `@` in a password is masked whole.
    let re = USERINFO
        .get_or_init(|| regex::Regex::new(r"(://[^/\s:@]*:)[^\s]*@").expect("a valid regex"));
    crate::redact::scrub(&re.replace_all(arg, "${1}***@"))
}

/// The records of the log at `path`, oldest first; lines that are not records (one cut
/// short by a crash) are counted, not fatal. No file yet: no records.
pub(crate) fn read(path: &Path) -> Result<(Vec<Record>, usize)> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => {
            return Err(e).with_context(|| format!("cannot read the audit log {}", path.display()));
        }
    };
    let mut bad = 0;
    let records = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let r = serde_json::from_str::<Record>(l).ok();
            bad += usize::from(r.is_none());
            r
        })
        .collect();
    Ok((records, bad))
}

impl Tabled for Record {
    fn columns() -> &'static [&'static str] {
        &[
            "at", "event", "action", "source", "location", "run", "user", "planned", "done",
            "failed", "skipped", "exit",
        ]
    }

    fn cells(&self) -> Vec<String> {
        let n = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        vec![
            self.at.clone(),
            self.event.clone(),
            self.action.clone(),
            self.source.clone(),
            crate::output::ellipsize(&self.location, 40),
            self.run_id.clone(),
            format!("{}@{}", self.user, self.host),
            n(self.planned),
            n(self.done),
            n(self.failed),
            n(self.skipped),
            self.exit.map(|e| e.to_string()).unwrap_or_default(),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argv_userinfo_is_masked() {
        assert_eq!(scrub_arg("amqp://u:secret@h/%2f"), "amqp://u:***@h/%2f");
        assert_eq!(
            scrub_arg("--amqp-url=amqp://u:p@ss@h"),
            "--amqp-url=amqp://u:***@h"
        );
        assert_eq!(scrub_arg("amqp://guest@h/x"), "amqp://guest@h/x");
        assert_eq!(scrub_arg("--queue"), "--queue");
    }
}

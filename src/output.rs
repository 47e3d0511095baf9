//! The one output layer: data on stdout as table / json / ndjson / csv; diagnostics,
//! plans and progress on stderr (progress only on a terminal).

use crate::model::{DeadLetter, rfc3339};
use crate::redact;
use comfy_table::{Cell, Color, ColumnConstraint, ContentArrangement, Table, Width, presets};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::Value;
use std::io::{self, Write};

pub(crate) mod pipe;
mod records;

/// Where notices that arrive outside a command's own flow go (the broker blocking
/// publishing): the command's printer, set once at start-up.
static NOTICES: std::sync::OnceLock<Printer> = std::sync::OnceLock::new();

pub(crate) fn set_notices(printer: &Printer) {
    let _ = NOTICES.set(printer.clone());
}

/// A warning from outside the command's flow, through the printer when one is set; above
/// the progress bar when one is drawn.
pub(crate) fn notice(msg: impl AsRef<str>) {
    if let Some(held) = held().as_mut() {
        held.push(redact::scrub(msg.as_ref()));
        return;
    }
    let say = || match NOTICES.get() {
        Some(p) => p.warn(msg.as_ref()),
        None => say!("warning: {}", msg.as_ref()),
    };
    match active_bar() {
        Some((bar, _)) => bar.suspend(say),
        None => say(),
    }
}

/// Notices held for a full-screen view (the browser) while it owns the terminal: printed,
/// they landed across its screen, and went with it. `None`: not held.
static HELD: std::sync::Mutex<Option<Vec<String>>> = std::sync::Mutex::new(None);

fn held() -> std::sync::MutexGuard<'static, Option<Vec<String>>> {
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// While `on`, notices wait for `held_notices`; turned off, those not taken are printed.
pub(crate) fn hold_notices(on: bool) {
    let rest = match on {
        true => {
            held().get_or_insert_with(Vec::new);
            return;
        }
        false => held().take(),
    };
    for msg in rest.unwrap_or_default() {
        notice(msg);
    }
}

/// The notices held since the last call (`hold_notices`), oldest first.
pub(crate) fn held_notices() -> Vec<String> {
    held().as_mut().map(std::mem::take).unwrap_or_default()
}

/// The progress bar drawn now and its own message, for notices and `bar_status`.
static ACTIVE_BAR: std::sync::Mutex<Option<(ProgressBar, String)>> = std::sync::Mutex::new(None);

fn active_bar() -> Option<(ProgressBar, String)> {
    let mut active = ACTIVE_BAR.lock().unwrap_or_else(|e| e.into_inner());
    if active.as_ref().is_some_and(|(b, _)| b.is_finished()) {
        *active = None;
    }
    active.clone()
}

/// A state the operator must see on the bar itself (`Some`: e.g. the broker blocking
/// publishing), or the bar's own message again (`None`).
pub(crate) fn bar_status(status: Option<&str>) {
    if let Some((bar, own)) = active_bar() {
        match status {
            Some(s) => bar.set_message(format!("{own} [{s}]")),
            None => bar.set_message(own),
        }
    }
}

/// How data is written on stdout (`-o`, or `output` in the config file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum OutputFormat {
    Table,
    Json,
    Ndjson,
    Csv,
}

/// Reasons longer than this are cut with an ellipsis in tables unless `--full`.
const REASON_WIDTH: usize = 70;
/// Tables are printed in blocks so that memory stays flat for huge selections.
const TABLE_BLOCK: usize = 1000;

#[derive(Debug, Clone)]
pub(crate) struct Printer {
    pub(crate) format: OutputFormat,
    pub(crate) quiet: bool,
    pub(crate) verbose: u8,
    pub(crate) color: bool,
    pub(crate) progress: bool,
    pub(crate) stdout_tty: bool,
    /// A prompt needs a person at a terminal: stdin and stderr both terminals.
    pub(crate) interactive: bool,
}

impl Printer {
    /// A printer that prints nothing but errors, for unit tests.
    #[cfg(test)]
    pub(crate) fn quiet() -> Printer {
        Printer {
            format: OutputFormat::Table,
            quiet: true,
            verbose: 0,
            color: false,
            progress: false,
            stdout_tty: false,
            interactive: false,
        }
    }

    /// Informational line on stderr (suppressed by -q). Always scrubbed of secrets.
    pub(crate) fn info(&self, msg: impl AsRef<str>) {
        if !self.quiet {
            say!("{}", redact::scrub(msg.as_ref()));
        }
    }

    /// One line of data on stdout (a count, a report, SQL). A closed pipe comes back as an
    /// error that `run` turns into a quiet exit, where `println!` would panic.
    pub(crate) fn data_line(&self, line: &str) -> std::io::Result<()> {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        out.write_all(line.as_bytes())?;
        out.write_all(b"\n")?;
        out.flush()
    }

    /// A warning on stderr; `-q` (errors and data only) silences it, so a cron job mails
    /// nobody about a queue without consumers.
    pub(crate) fn warn(&self, msg: impl AsRef<str>) {
        if !self.quiet {
            self.warn_always(msg);
        }
    }

    /// What went wrong with some items of a run (failures in a report): shown even with `-q`,
    /// like errors.
    pub(crate) fn warn_always(&self, msg: impl AsRef<str>) {
        let prefix = if self.color {
            "\x1b[33mwarning:\x1b[0m"
        } else {
            "warning:"
        };
        say!("{prefix} {}", redact::scrub(msg.as_ref()));
    }

    /// Shown with -v (level 1) or -vv (level 2).
    pub(crate) fn debug(&self, level: u8, msg: impl AsRef<str>) {
        if self.verbose >= level {
            say!("{}", redact::scrub(msg.as_ref()));
        }
    }

    /// A progress bar on stderr when it is a terminal and progress is not disabled.
    pub(crate) fn progress(&self, len: Option<u64>, what: &str) -> ProgressBar {
        if !self.progress {
            return ProgressBar::hidden();
        }
        let bar = match len {
            Some(n) => ProgressBar::with_draw_target(Some(n), ProgressDrawTarget::stderr()),
            None => ProgressBar::new_spinner(),
        };
        let template = match len {
            Some(_) => "{msg} [{bar:30}] {pos}/{len} {rate} eta {eta}",
            None => "{spinner} {msg} {pos} {rate}",
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            // A whole number of messages per second, not indicatif's `772.224/s`.
            let style = style.with_key(
                "rate",
                |state: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                    let _ = write!(w, "{:.0}/s", state.per_sec());
                },
            );
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_message(what.to_string());
        *ACTIVE_BAR.lock().unwrap_or_else(|e| e.into_inner()) = Some((bar.clone(), what.into()));
        bar
    }

    /// Asks before a mutating action. `--yes` skips the question; without a terminal and
    /// without `--yes` the action is refused (a cron job must say `--yes` explicitly).
    pub(crate) async fn confirm(&self, question: &str, yes: bool) -> anyhow::Result<bool> {
        if yes {
            return Ok(true);
        }
        if !self.interactive {
            return Err(crate::error::usage(
                "refusing to act without confirmation: no terminal to ask on; pass --yes (or --dry-run to only see the plan)",
            ));
        }
        let q = question.to_string();
        // A thread of its own, not tokio's blocking pool: a question abandoned unanswered (a
        // signal, or a plan that may hold its messages no longer: `bulk::confirm`) must not
        // keep dlq from exiting, as the runtime waits for its blocking tasks at shutdown.
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || tx.send(ask(&q)));
        Ok(rx.await??)
    }

    /// A small table on stderr (plans), so stdout stays data only.
    pub(crate) fn table_to_stderr(&self, columns: &[&str], rows: &[Vec<String>]) {
        if self.quiet {
            return;
        }
        let mut t = self.headed_table(columns);
        for r in rows {
            t.add_row(r.iter().map(Cell::new).collect::<Vec<_>>());
        }
        let mut buf = Vec::new();
        let _ = self.write_table(&mut buf, t);
        let _ = io::stderr()
            .lock()
            .write_all(redact::scrub(&String::from_utf8_lossy(&buf)).as_bytes());
    }

    /// The width tables must fit: `COLUMNS`, else the terminal's; `None` when piped.
    fn width(&self) -> Option<usize> {
        if let Some(w) = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse::<usize>().ok())
        {
            return Some(w);
        }
        self.stdout_tty
            .then(|| Table::new().width().map(usize::from))
            .flatten()
    }

    /// Writes a table with a header: sized to the terminal with every word whole, else (below
    /// 60 columns, or too narrow for whole words) the same rows stacked.
    fn write_table(&self, out: &mut impl Write, mut t: Table) -> io::Result<()> {
        if let Some(width) = self.width().filter(|_| t.header().is_some()) {
            match word_bounds(&t, width).filter(|_| width >= NARROW) {
                Some(bounds) => {
                    t.set_constraints(bounds);
                }
                None => {
                    let (columns, rows) = cell_texts(&t);
                    return write_stacked(out, width, &columns, rows.into_iter());
                }
            }
        }
        writeln!(out, "{t}")
    }

    fn new_table(&self) -> Table {
        let mut t = Table::new();
        t.load_style(presets::UTF8_FULL_CONDENSED);
        t.set_content_arrangement(ContentArrangement::Dynamic);
        if let Some(w) = std::env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse::<u16>().ok())
        {
            t.set_width(w);
        }
        // Width and colour are separate questions: a table on a terminal fits it even with
        // NO_COLOR or --color never (no cell is styled then).
        if self.color {
            t.enforce_styling();
        } else if !self.stdout_tty {
            t.force_no_tty();
        }
        t
    }

    /// A new table with `columns` as its header.
    fn headed_table(&self, columns: &[&str]) -> Table {
        let mut t = self.new_table();
        t.set_header(
            columns
                .iter()
                .map(|c| self.header_cell(c))
                .collect::<Vec<_>>(),
        );
        t
    }

    fn header_cell(&self, name: &str) -> Cell {
        let c = Cell::new(name);
        if self.color { c.fg(Color::Cyan) } else { c }
    }

    /// Prints key/value rows (summaries, groups) in the chosen format.
    pub(crate) fn rows(&self, columns: &[&str], rows: &[Vec<Value>]) -> io::Result<()> {
        let stdout = io::stdout();
        let mut out = io::BufWriter::new(stdout.lock());
        match self.format {
            OutputFormat::Table => {
                let mut t = self.headed_table(columns);
                for r in rows {
                    t.add_row(r.iter().map(|v| Cell::new(plain(v))).collect::<Vec<_>>());
                }
                self.write_table(&mut out, t)?;
            }
            OutputFormat::Json => {
                let arr: Vec<Value> = rows.iter().map(|r| object(columns, r)).collect();
                serde_json::to_writer_pretty(&mut out, &arr)?;
                writeln!(out)?;
            }
            OutputFormat::Ndjson => {
                for r in rows {
                    serde_json::to_writer(&mut out, &object(columns, r))?;
                    writeln!(out)?;
                }
            }
            OutputFormat::Csv => {
                write_csv_line(&mut out, columns.iter().map(|c| c.to_string()))?;
                for r in rows {
                    write_csv_line(&mut out, r.iter().map(plain))?;
                }
            }
        }
        out.flush()
    }

    /// Prints typed rows: the table from their cells, JSON / NDJSON / CSV from their fields
    /// (CSV cells as plain text, nested values as JSON).
    pub(crate) fn typed<T: Tabled>(&self, rows: &[T]) -> io::Result<()> {
        let stdout = io::stdout();
        let mut out = io::BufWriter::new(stdout.lock());
        let objects = || {
            rows.iter()
                .map(|r| serde_json::to_value(r).unwrap_or(Value::Null))
        };
        match self.format {
            OutputFormat::Table => {
                let mut t = self.new_table();
                t.set_header(
                    T::columns()
                        .iter()
                        .map(|c| self.header_cell(c))
                        .collect::<Vec<_>>(),
                );
                for r in rows {
                    t.add_row(r.cells().into_iter().map(Cell::new).collect::<Vec<_>>());
                }
                self.write_table(&mut out, t)?;
            }
            OutputFormat::Json => {
                serde_json::to_writer_pretty(&mut out, &objects().collect::<Vec<_>>())?;
                writeln!(out)?;
            }
            OutputFormat::Ndjson => {
                for v in objects() {
                    serde_json::to_writer(&mut out, &v)?;
                    writeln!(out)?;
                }
            }
            OutputFormat::Csv => {
                let mut header = false;
                for v in objects() {
                    let Value::Object(m) = v else { continue };
                    if !header {
                        write_csv_line(&mut out, m.keys().cloned())?;
                        header = true;
                    }
                    write_csv_line(&mut out, m.values().map(plain))?;
                }
            }
        }
        out.flush()
    }
}

/// Below this many columns side-by-side columns are unreadable: rows are stacked instead.
const NARROW: usize = 60;

/// Bounds that keep every word of a table whole on a terminal `width` wide: each column at
/// least as wide as its longest word, so comfy-table wraps cells at spaces only (without
/// them it cuts words: `Memor yError`, `qa.work.dl q`). `None` when the columns cannot all
/// hold their longest word side by side: the rows are better stacked then.
fn word_bounds(t: &Table, width: usize) -> Option<Vec<ColumnConstraint>> {
    let mut longest: Vec<usize> = Vec::new();
    let rows = t.header().into_iter().chain(t.row_iter());
    for row in rows {
        for (i, cell) in row.cell_iter().enumerate() {
            let w = cell
                .content()
                .split_whitespace()
                .map(|word| word.chars().count())
                .max()
                .unwrap_or(0);
            if longest.len() <= i {
                longest.resize(i + 1, 0);
            }
            longest[i] = longest[i].max(w);
        }
    }
    // Each column: its text, a space of padding either side, and one border line.
    let needed: usize = longest.iter().map(|w| w + 3).sum::<usize>() + 1;
    (needed <= width).then(|| {
        longest
            .iter()
            // comfy-table's bound includes the column's padding (one space either side).
            .map(|w| {
                let with_padding = u16::try_from(w + 2).unwrap_or(u16::MAX);
                ColumnConstraint::LowerBoundary(Width::Fixed(with_padding))
            })
            .collect()
    })
}

fn cell_texts(t: &Table) -> (Vec<String>, Vec<Vec<String>>) {
    let columns = t
        .header()
        .map(|h| h.cell_iter().map(Cell::content).collect())
        .unwrap_or_default();
    let rows = t
        .row_iter()
        .map(|r| r.cell_iter().map(Cell::content).collect())
        .collect();
    (columns, rows)
}

/// Rows as `column: value` lines, one blank line between rows, values wrapped at word
/// boundaries (a word longer than the line is the only thing ever cut).
fn write_stacked(
    out: &mut impl Write,
    width: usize,
    columns: &[String],
    rows: impl Iterator<Item = Vec<String>>,
) -> io::Result<()> {
    let key = columns.iter().map(|c| c.chars().count()).max().unwrap_or(0);
    let room = width.saturating_sub(key + 2).max(10);
    for row in rows {
        for (c, v) in columns.iter().zip(row) {
            let lines = wrap(&v, room);
            for (i, line) in lines.iter().enumerate() {
                let label = if i == 0 {
                    format!("{c}:")
                } else {
                    String::new()
                };
                writeln!(out, "{label:<w$} {line}", w = key + 1)?;
            }
        }
        writeln!(out)?;
    }
    Ok(())
}

/// Greedy word wrap; existing line breaks are kept.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    for para in text.split('\n') {
        let mut line = String::new();
        for word in para.split_whitespace() {
            let mut word = word.to_string();
            while word.chars().count() > width {
                if !line.is_empty() {
                    lines.push(std::mem::take(&mut line));
                }
                let head: String = word.chars().take(width).collect();
                word = word.chars().skip(width).collect();
                lines.push(head);
            }
            if !line.is_empty() && line.chars().count() + 1 + word.chars().count() > width {
                lines.push(std::mem::take(&mut line));
            }
            if !line.is_empty() {
                line.push(' ');
            }
            line.push_str(&word);
        }
        lines.push(line);
    }
    lines
}

/// Asks a yes/no question on stderr and reads one line from the terminal: `y` or `yes` is
/// yes; anything else, and end of input (Ctrl-D), is no. A line prompt needs no raw
/// terminal mode, so end of input is seen at once.
fn ask(question: &str) -> io::Result<bool> {
    let mut err = io::stderr();
    write!(err, "{question} [y/N] ")?;
    err.flush()?;
    let mut line = String::new();
    if io::stdin().read_line(&mut line)? == 0 {
        writeln!(err)?;
        return Ok(false);
    }
    Ok(matches!(
        line.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// A typed output row (in the spirit of rabbitmqadmin-ng's `Tabled` rows): its table
/// columns and cells; JSON, NDJSON and CSV come from its `Serialize` fields.
pub(crate) trait Tabled: serde::Serialize {
    fn columns() -> &'static [&'static str];
    fn cells(&self) -> Vec<String>;
}

/// Streams typed rows (dry-run messages, workers) to stdout in the chosen format: tables
/// in blocks and CSV from their cells, JSON and NDJSON from their fields.
pub(crate) struct RowWriter<T: Tabled> {
    printer: Printer,
    /// Stdout written in place, or through a thread of its own (`pipe`), then with its waiter.
    out: io::BufWriter<Box<dyn Write>>,
    waiter: Option<pipe::Waiter>,
    count: u64,
    block: Vec<Vec<String>>,
    _rows: std::marker::PhantomData<T>,
}

impl Printer {
    pub(crate) fn stream<T: Tabled>(&self) -> RowWriter<T> {
        self.stream_to(Box::new(io::stdout()), None)
    }

    /// For rows written while dlq holds messages (a queue replay's dry run): through a
    /// thread of their own (`pipe`), the caller awaiting `RowWriter::ready` between rows and
    /// ending with `finish_piped`.
    pub(crate) fn stream_piped<T: Tabled>(&self) -> io::Result<RowWriter<T>> {
        let pipe = pipe::Pipe::stdout()?;
        let waiter = pipe.waiter();
        Ok(self.stream_to(Box::new(pipe), Some(waiter)))
    }

    fn stream_to<T: Tabled>(
        &self,
        out: Box<dyn Write>,
        waiter: Option<pipe::Waiter>,
    ) -> RowWriter<T> {
        RowWriter {
            printer: self.clone(),
            out: io::BufWriter::new(out),
            waiter,
            count: 0,
            block: Vec::new(),
            _rows: std::marker::PhantomData,
        }
    }
}

impl<T: Tabled> RowWriter<T> {
    /// Waits while a megabyte of a piped stream's output waits for its reader.
    pub(crate) async fn ready(&self) -> io::Result<()> {
        match &self.waiter {
            Some(w) => w.ready().await,
            None => Ok(()),
        }
    }

    /// `finish`, then waits until a piped stream's output is all written.
    pub(crate) async fn finish_piped(mut self) -> io::Result<u64> {
        let n = self.end()?;
        if let Some(w) = &self.waiter {
            w.drain().await?;
        }
        Ok(n)
    }

    pub(crate) fn write(&mut self, row: T) -> io::Result<()> {
        match self.printer.format {
            OutputFormat::Json => {
                self.out
                    .write_all(if self.count == 0 { b"[\n" } else { b",\n" })?;
                serde_json::to_writer(&mut self.out, &row)?;
            }
            OutputFormat::Ndjson => {
                serde_json::to_writer(&mut self.out, &row)?;
                self.out.write_all(b"\n")?;
            }
            OutputFormat::Csv => {
                if self.count == 0 {
                    write_csv_line(&mut self.out, T::columns().iter().map(|c| c.to_string()))?;
                }
                write_csv_line(&mut self.out, row.cells().into_iter())?;
            }
            OutputFormat::Table => {
                self.block.push(row.cells());
                if self.block.len() >= TABLE_BLOCK {
                    self.flush_block()?;
                }
            }
        }
        self.count += 1;
        Ok(())
    }

    fn flush_block(&mut self) -> io::Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let p = &self.printer;
        let mut t = p.new_table();
        t.set_header(
            T::columns()
                .iter()
                .map(|c| p.header_cell(c))
                .collect::<Vec<_>>(),
        );
        for r in std::mem::take(&mut self.block) {
            t.add_row(r);
        }
        p.write_table(&mut self.out, t)
    }

    pub(crate) fn finish(mut self) -> io::Result<u64> {
        self.end()
    }

    fn end(&mut self) -> io::Result<u64> {
        if self.printer.format == OutputFormat::Table {
            self.flush_block()?;
        }
        end_stream(&mut self.out, self.printer.format, self.count)
    }
}

fn object(columns: &[&str], row: &[Value]) -> Value {
    Value::Object(
        columns
            .iter()
            .map(|c| c.to_string())
            .zip(row.iter().cloned())
            .collect(),
    )
}

/// A value as table/CSV text: strings without quotes, null as empty.
pub(crate) fn plain(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// "3d 4h" style age, for humans.
pub(crate) fn age(t: chrono::DateTime<chrono::Utc>) -> String {
    let d = chrono::Utc::now().signed_duration_since(t);
    let mins = d.num_minutes().max(0);
    match mins {
        m if m < 60 => format!("{m}m ago"),
        m if m < 60 * 48 => format!("{}h {}m ago", m / 60, m % 60),
        m => format!("{}d {}h ago", m / (60 * 24), (m / 60) % 24),
    }
}
pub(crate) fn short_time(t: &chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%d %H:%M:%S").to_string()
}

/// Cuts text to `max` characters with an ellipsis.
pub(crate) fn ellipsize(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// One RFC 4180 line. A cell a spreadsheet would run as a formula (starting with `=`, `+`,
/// `-`, `@`, a tab or a carriage return) gets a leading `'`, as OWASP recommends for CSV
/// injection: dead letters carry whatever a producer or an attacker put in them.
/// Ends a streamed output: closes the JSON array (`[]` when nothing was written), flushes;
/// returns how many items were written.
fn end_stream(out: &mut impl Write, format: OutputFormat, count: u64) -> io::Result<u64> {
    if format == OutputFormat::Json {
        out.write_all(if count == 0 { b"[]\n" } else { b"\n]\n" })?;
    }
    out.flush()?;
    Ok(count)
}

fn write_csv_line(out: &mut impl Write, fields: impl Iterator<Item = String>) -> io::Result<()> {
    let mut first = true;
    for f in fields {
        if !first {
            out.write_all(b",")?;
        }
        first = false;
        let f = if f.starts_with(['=', '+', '-', '@', '\t', '\r']) {
            format!("'{f}")
        } else {
            f
        };
        if f.contains([',', '"', '\n', '\r']) {
            write!(out, "\"{}\"", f.replace('"', "\"\""))?;
        } else {
            out.write_all(f.as_bytes())?;
        }
    }
    out.write_all(b"\r\n")
}

#[cfg(test)]
mod tests;

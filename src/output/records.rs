//! Dead-letter records on stdout: a table in blocks (a few cells each, never the whole
//! record), `--full` key/value tables, or JSON / NDJSON / CSV lines.

use super::*;
use pipe::Pipe;

impl Printer {
    /// A streaming writer for dead-letter records, on stdout through a thread of its own
    /// (`pipe`): a reader who stops reading must not stop dlq's runtime.
    pub(crate) fn records(&self, full: bool) -> io::Result<RecordWriter> {
        let pipe = Pipe::stdout()?;
        Ok(RecordWriter {
            printer: self.clone(),
            full,
            waiter: pipe.waiter(),
            out: io::BufWriter::new(pipe),
            count: 0,
            block: Vec::new(),
        })
    }
}

/// Streams records to stdout; tables are rendered in blocks.
pub(crate) struct RecordWriter {
    printer: Printer,
    full: bool,
    out: io::BufWriter<Pipe>,
    waiter: pipe::Waiter,
    count: u64,
    /// Table rows waiting for their block: the few cells shown, never the whole record
    /// (a 1 MiB payload must not be held until the end).
    block: Vec<Vec<Cell>>,
}

const RECORD_COLUMNS: [&str; 8] = [
    "source",
    "location",
    "id",
    "task",
    "motivo",
    "created_at",
    "replayed",
    "payload",
];

impl RecordWriter {
    /// Writes one record; waits only while a megabyte of output waits for its reader.
    pub(crate) async fn write(&mut self, r: &DeadLetter) -> io::Result<()> {
        self.write_now(r)?;
        self.waiter.ready().await
    }

    fn write_now(&mut self, r: &DeadLetter) -> io::Result<()> {
        match self.printer.format {
            // --full: each record rendered and released as it comes.
            OutputFormat::Table if self.full => self.write_full(r)?,
            OutputFormat::Table => {
                let row = self.row(r);
                self.block.push(row);
                if self.block.len() >= TABLE_BLOCK {
                    self.flush_block()?;
                }
            }
            OutputFormat::Json => {
                self.out
                    .write_all(if self.count == 0 { b"[\n" } else { b",\n" })?;
                serde_json::to_writer(&mut self.out, r)?;
            }
            OutputFormat::Ndjson => {
                serde_json::to_writer(&mut self.out, r)?;
                self.out.write_all(b"\n")?;
            }
            OutputFormat::Csv => {
                if self.count == 0 {
                    write_csv_line(&mut self.out, RECORD_COLUMNS.iter().map(|c| c.to_string()))?;
                }
                let fields = [
                    r.source.as_str().to_string(),
                    r.location.clone(),
                    r.id.to_string(),
                    r.task.clone().unwrap_or_default(),
                    r.motivo.clone().unwrap_or_default(),
                    r.created_at.as_ref().map(rfc3339).unwrap_or_default(),
                    r.replayed.to_string(),
                    r.payload.to_string(),
                ];
                write_csv_line(&mut self.out, fields.into_iter())?;
            }
        }
        self.count += 1;
        Ok(())
    }

    /// The cells of one record's table row.
    fn row(&self, r: &DeadLetter) -> Vec<Cell> {
        let p = &self.printer;
        let replayed = Cell::new(replayed_text(r));
        let replayed = if p.color && r.replayed {
            replayed.fg(Color::Green)
        } else {
            replayed
        };
        vec![
            Cell::new(r.id.to_string()),
            Cell::new(r.task.as_deref().unwrap_or("-")),
            Cell::new(
                r.created_at
                    .as_ref()
                    .map(short_time)
                    .unwrap_or_else(|| "-".into()),
            ),
            Cell::new(ellipsize(
                crate::fingerprint::headline(r.motivo.as_deref().unwrap_or("-")),
                REASON_WIDTH,
            )),
            replayed,
            Cell::new(&r.location),
        ]
    }

    fn flush_block(&mut self) -> io::Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let p = &self.printer;
        let columns = ["id", "task", "created_at", "motivo", "replayed", "location"];
        let mut t = p.new_table();
        t.set_header(columns.iter().map(|c| p.header_cell(c)).collect::<Vec<_>>());
        for row in std::mem::take(&mut self.block) {
            t.add_row(row);
        }
        p.write_table(&mut self.out, t)
    }

    /// `--full`: every field, payload pretty-printed, reason in full.
    fn write_full(&mut self, r: &DeadLetter) -> io::Result<()> {
        let t = self.printer.full_table(r, None);
        // Key and value: no header to stack by; comfy-table wraps the value.
        writeln!(self.out, "{t}")
    }

    /// Ends the output (closing the JSON array) and returns how many records were written,
    /// once they all are.
    pub(crate) async fn finish(mut self) -> io::Result<u64> {
        if self.printer.format == OutputFormat::Table {
            self.flush_block()?;
        }
        let n = end_stream(&mut self.out, self.printer.format, self.count)?;
        self.waiter.drain().await?;
        Ok(n)
    }
}

impl Printer {
    /// One record as `inspect --full` shows it (the browser's detail view too), `width`
    /// columns wide when given.
    pub(crate) fn full_table(&self, r: &DeadLetter, width: Option<u16>) -> Table {
        let p = self;
        let mut t = p.new_table();
        if let Some(w) = width {
            t.set_width(w);
        }
        let key = |k: &str| {
            if p.color {
                Cell::new(k).fg(Color::Cyan)
            } else {
                Cell::new(k)
            }
        };
        t.add_row(vec![
            key("source"),
            Cell::new(format!("{} {}", r.source.as_str(), r.location)),
        ]);
        t.add_row(vec![key("id"), Cell::new(r.id.to_string())]);
        t.add_row(vec![
            key("task"),
            Cell::new(r.task.as_deref().unwrap_or("-")),
        ]);
        t.add_row(vec![
            key("created_at"),
            Cell::new(
                r.created_at
                    .as_ref()
                    .map(rfc3339)
                    .unwrap_or_else(|| "-".into()),
            ),
        ]);
        t.add_row(vec![key("replayed"), Cell::new(replayed_text(r))]);
        if let Some(f) = &r.framework {
            let retries = r
                .retries
                .map(|n| format!(", {n} retries"))
                .unwrap_or_default();
            t.add_row(vec![key("framework"), Cell::new(format!("{f}{retries}"))]);
        }
        t.add_row(vec![
            key("motivo"),
            Cell::new(r.motivo.as_deref().unwrap_or("-")),
        ]);
        t.add_row(vec![key("payload"), Cell::new(payload_text(&r.payload))]);
        if let Some(p) = &r.properties {
            t.add_row(vec![key("properties"), Cell::new(pretty(p))]);
        }
        if let Some(h) = &r.headers {
            // The dead-letter headers are shown decoded under "death"; -o json has them all.
            let shown = match (h, &r.death) {
                (Value::Object(m), Some(_)) => Value::Object(
                    m.iter()
                        .filter(|(k, _)| !is_death_header(k))
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect(),
                ),
                _ => h.clone(),
            };
            t.add_row(vec![key("headers"), Cell::new(pretty(&shown))]);
        }
        if let Some(d) = &r.death {
            t.add_row(vec![key("death"), Cell::new(death_text(d))]);
        }
        t
    }
}

fn is_death_header(k: &str) -> bool {
    k == "x-death" || k.starts_with("x-first-death-") || k.starts_with("x-last-death-")
}

/// Bytes shown in a table cell at most; `-o json` always has all of them.
const BINARY_PREVIEW: usize = 512;

/// The payload for a person: JSON pretty-printed, text as text, other bytes escaped
/// (`\xNN`) so that a terminal never receives raw control bytes.
fn payload_text(payload: &Value) -> String {
    use base64::Engine as _;
    let b64 = match payload {
        Value::Object(m) if m.len() == 1 => m.get("base64").and_then(Value::as_str),
        _ => None,
    };
    let Some(bytes) = b64.and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
    else {
        return pretty(payload);
    };
    match std::str::from_utf8(&bytes) {
        Ok(text)
            if !text
                .chars()
                .any(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t')) =>
        {
            format!("(text, {} bytes)\n{text}", bytes.len())
        }
        _ => {
            let mut out = format!("(binary, {} bytes; exact bytes: -o json)\n", bytes.len());
            for &b in bytes.iter().take(BINARY_PREVIEW) {
                match b {
                    b' '..=b'~' if b != b'\\' => out.push(b as char),
                    b'\n' => out.push_str("\\n"),
                    _ => out.push_str(&format!("\\x{b:02x}")),
                }
            }
            if bytes.len() > BINARY_PREVIEW {
                out.push('…');
            }
            out
        }
    }
}

/// The decoded `x-death` history, one line per queue/reason, newest first.
fn death_text(d: &Value) -> String {
    let mut lines = Vec::new();
    for e in d["deaths"].as_array().into_iter().flatten() {
        let s = |k: &str| e[k].as_str().unwrap_or("?").to_string();
        let keys: Vec<&str> = e["routing_keys"]
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        lines.push(format!(
            "{} in {} ×{} since {} (exchange {:?}, routing keys [{}]{})",
            s("reason"),
            s("queue"),
            e["count"]
                .as_i64()
                .map(|c| c.to_string())
                .unwrap_or("?".into()),
            s("time"),
            e["exchange"].as_str().unwrap_or(""),
            keys.join(", "),
            e["original_expiration"]
                .as_str()
                .map(|x| format!(", original expiration {x} ms"))
                .unwrap_or_default()
        ));
    }
    let first = (
        d["first_death_queue"].as_str(),
        d["first_death_reason"].as_str(),
    );
    if let (Some(q), Some(r)) = first {
        lines.push(format!(
            "first death: {r} in {q} (exchange {:?})",
            d["first_death_exchange"].as_str().unwrap_or("?")
        ));
    }
    for w in d["warnings"].as_array().into_iter().flatten() {
        lines.push(format!("odd header: {}", w.as_str().unwrap_or("")));
    }
    if lines.is_empty() {
        "-".into()
    } else {
        lines.join("\n")
    }
}

fn pretty(v: &Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

/// A table row is replayed or not; a queue message that dlq replayed before and that died
/// again says how many times (it is pending again: it is in the DLQ).
fn replayed_text(r: &DeadLetter) -> String {
    match (r.replayed, r.replay_count) {
        (true, _) => "yes".into(),
        (false, 0) => "no".into(),
        (false, n) => format!("no (replayed {n}x before)"),
    }
}

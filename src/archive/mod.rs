//! Archive files: NDJSON (gzip when the name ends in `.gz`), one standard record per line,
//! between a header line and a trailer line. The trailer holds the record count and the
//! SHA-256 of every line before it, so a truncated or edited archive is refused.
//!
//! ```text
//! {"dlq_archive":1,"created_at":"...","source":"table","location":"tasks_falhadas","selection":"...","host":"..."}
//! {"source":"table","location":"tasks_falhadas","id":7,...,"raw":{"args":"{\"pedido_id\": 7}"}}
//! ...
//! {"dlq_archive_end":{"count":340,"sha256":"<hex>"}}
//! ```

pub(crate) mod queue;
pub(crate) mod table;

use crate::error::usage;
use crate::model::DeadLetter;
use anyhow::{Context, Result, anyhow};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, BufWriter, Read, Write};
use std::path::{Path, PathBuf};

pub(crate) const FORMAT_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Header {
    pub(crate) dlq_archive: u32,
    pub(crate) created_at: String,
    pub(crate) source: String,
    pub(crate) location: String,
    pub(crate) selection: String,
    pub(crate) host: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Trailer {
    pub(crate) count: u64,
    pub(crate) sha256: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct TrailerLine {
    dlq_archive_end: Trailer,
}

/// Where an archive goes: a file (written to `<file>.partial`, fsynced, then renamed) or stdout.
enum Sink {
    File {
        final_path: PathBuf,
        partial: PathBuf,
        out: Box<dyn Write>,
    },
    /// Through a thread of its own (`output::pipe`): a reader who stops reading must not
    /// stop dlq's runtime, which serves the connection holding what is archived.
    Stdout(Box<dyn Write>, crate::output::pipe::Waiter),
}

/// Writes an archive. Nothing counts as archived until `finish` returned Ok: then the file is
/// complete, flushed, fsynced and in place under its final name.
pub(crate) struct ArchiveWriter {
    sink: Option<Sink>,
    hash: Sha256,
    count: u64,
    line: Vec<u8>,
}

impl ArchiveWriter {
    /// `-` writes to stdout. An existing file is never overwritten.
    pub(crate) fn create(path: &Path, header: &Header) -> Result<ArchiveWriter> {
        let gz = path.extension().is_some_and(|e| e == "gz");
        let sink = if path == Path::new("-") {
            let pipe = crate::output::pipe::Pipe::stdout()
                .context("starting the thread that writes the archive to stdout")?;
            let waiter = pipe.waiter();
            let out: Box<dyn Write> = Box::new(BufWriter::new(pipe));
            let out = match gz {
                true => Box::new(flate2::write::GzEncoder::new(
                    out,
                    flate2::Compression::default(),
                )),
                false => out,
            };
            Sink::Stdout(out, waiter)
        } else {
            if path.exists() {
                return Err(usage(format!(
                    "archive file {} already exists: choose another name",
                    path.display()
                )));
            }
            let mut partial = path.as_os_str().to_owned();
            partial.push(".partial");
            let partial = PathBuf::from(partial);
            let file = OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&partial)
                .or_else(|e| {
                    // A .partial left by a crashed run is garbage by definition: never complete.
                    if e.kind() == io::ErrorKind::AlreadyExists {
                        std::fs::remove_file(&partial)?;
                        OpenOptions::new()
                            .write(true)
                            .create_new(true)
                            .open(&partial)
                    } else {
                        Err(e)
                    }
                })
                .with_context(|| format!("cannot create archive file {}", partial.display()))?;
            crate::signals::discard_on_exit(&partial);
            let buf = BufWriter::with_capacity(1 << 16, FileSync(file));
            let out: Box<dyn Write> = if gz {
                Box::new(flate2::write::GzEncoder::new(
                    buf,
                    flate2::Compression::default(),
                ))
            } else {
                Box::new(buf)
            };
            Sink::File {
                final_path: path.to_path_buf(),
                partial,
                out,
            }
        };
        let mut w = ArchiveWriter {
            sink: Some(sink),
            hash: Sha256::new(),
            count: 0,
            line: Vec::new(),
        };
        let header = serde_json::to_vec(header)?;
        w.write_line(&header)?;
        Ok(w)
    }

    fn out(&mut self) -> &mut dyn Write {
        match self.sink.as_mut().expect("writer still open") {
            Sink::File { out, .. } | Sink::Stdout(out, _) => out.as_mut(),
        }
    }

    fn write_line(&mut self, bytes: &[u8]) -> Result<()> {
        self.hash.update(bytes);
        self.hash.update(b"\n");
        let out = self.out();
        out.write_all(bytes)
            .and_then(|_| out.write_all(b"\n"))
            .context("writing the archive")?;
        Ok(())
    }

    pub(crate) fn write(&mut self, rec: &DeadLetter) -> Result<()> {
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        serde_json::to_writer(&mut line, rec)?;
        self.write_line(&line)?;
        self.line = line;
        self.count += 1;
        Ok(())
    }

    /// Waits while a megabyte of an archive to stdout waits for its reader.
    pub(crate) async fn ready(&self) -> Result<()> {
        if let Some(Sink::Stdout(_, waiter)) = &self.sink {
            waiter
                .ready()
                .await
                .context("writing the archive to stdout")?;
        }
        Ok(())
    }

    /// Writes the trailer, flushes, fsyncs the file, renames it into place and fsyncs the
    /// directory; to stdout, waits until every byte is written. Only after this returns Ok
    /// may anything be deleted from the source.
    pub(crate) async fn finish(mut self) -> Result<Trailer> {
        let trailer = Trailer {
            count: self.count,
            sha256: hex::encode(self.hash.clone().finalize()),
        };
        let line = serde_json::to_vec(&TrailerLine {
            dlq_archive_end: trailer.clone(),
        })?;
        {
            let out = self.out();
            out.write_all(&line)
                .and_then(|_| out.write_all(b"\n"))
                .context("writing the archive")?;
        }
        match self.sink.take().expect("writer still open") {
            Sink::Stdout(mut out, waiter) => {
                out.flush().context("writing the archive to stdout")?;
                waiter
                    .drain()
                    .await
                    .context("writing the archive to stdout")?;
                // A gzip stream's last block is written when its encoder is dropped, and the
                // pipe then waits for it (a few bytes, the rest being written).
                drop(out);
                waiter
                    .drain()
                    .await
                    .context("writing the archive to stdout")?;
            }
            Sink::File {
                final_path,
                partial,
                out,
            } => {
                // A failure here (a full disk at the last flush) must not leave the partial
                // file behind, keeping the disk full.
                if let Err(e) = install(&final_path, &partial, out) {
                    let _ = std::fs::remove_file(&partial);
                    return Err(e);
                }
            }
        }
        Ok(trailer)
    }

    /// Abandons the archive: removes the partial file.
    pub(crate) fn abort(mut self) {
        if let Some(Sink::File { partial, out, .. }) = self.sink.take() {
            drop(out);
            let _ = std::fs::remove_file(partial);
        }
    }
}

impl Drop for ArchiveWriter {
    fn drop(&mut self) {
        // Not finished (error path): the partial file must not survive as if it were useful.
        if let Some(Sink::File { partial, out, .. }) = self.sink.take() {
            drop(out);
            let _ = std::fs::remove_file(partial);
        }
    }
}

/// Flushes, fsyncs and renames a finished archive into place, then fsyncs its directory.
fn install(final_path: &Path, partial: &Path, mut out: Box<dyn Write>) -> Result<()> {
    // Dropping the encoder stack runs FileSync's drop-free finish below.
    out.flush().context("flushing the archive")?;
    drop(out);
    let f = File::open(partial).context("reopening the archive to sync it")?;
    f.sync_all().context("fsync of the archive")?;
    if final_path.exists() {
        return Err(usage(format!(
            "archive file {} appeared while writing",
            final_path.display()
        )));
    }
    std::fs::rename(partial, final_path).context("moving the archive into place")?;
    if let Some(dir) = final_path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        File::open(dir)
            .and_then(|d| d.sync_all())
            .context("fsync of the archive's directory")?;
    }
    Ok(())
}

/// A file whose `flush` also reaches the OS; `sync_all` is done separately in `finish`.
struct FileSync(File);

impl Write for FileSync {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

/// Opens an archive for reading (gzip detected from its magic bytes, not its name).
fn open_reader(path: &Path) -> Result<Box<dyn BufRead>> {
    let mut f = File::open(path)
        .map_err(|e| usage(format!("cannot open archive {}: {e}", path.display())))?;
    let mut magic = [0u8; 2];
    let n = f.read(&mut magic)?;
    drop(f);
    let f = File::open(path)?;
    if n == 2 && magic == [0x1f, 0x8b] {
        Ok(Box::new(BufReader::new(flate2::read::MultiGzDecoder::new(
            f,
        ))))
    } else {
        Ok(Box::new(BufReader::new(f)))
    }
}

/// Reads the whole archive once and checks it: header, every record parses, trailer present,
/// count and SHA-256 match. Any problem is a usage error naming it; nothing is replayed from
/// an archive that fails this.
pub(crate) fn verify(path: &Path) -> Result<(Header, Trailer)> {
    let bad = |what: String| usage(format!("archive {} is not usable: {what}", path.display()));
    let mut reader = open_reader(path)?;
    let mut hash = Sha256::new();
    let mut header: Option<Header> = None;
    let mut trailer: Option<Trailer> = None;
    let mut count: u64 = 0;
    let mut line = Vec::new();
    let mut n: u64 = 0;
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|e| bad(format!("cannot read it ({e}); truncated or corrupted?")))?;
        if read == 0 {
            break;
        }
        n += 1;
        if trailer.is_some() {
            return Err(bad(format!("line {n}: data after the end marker")));
        }
        if line.last() != Some(&b'\n') {
            return Err(bad(format!("line {n} is cut short (truncated archive)")));
        }
        let body = &line[..line.len() - 1];
        if n == 1 {
            let h: Header = serde_json::from_slice(body)
                .map_err(|e| bad(format!("no dlq archive header on line 1 ({e})")))?;
            if h.dlq_archive != FORMAT_VERSION {
                return Err(bad(format!(
                    "unsupported archive format version {}",
                    h.dlq_archive
                )));
            }
            header = Some(h);
        } else if let Ok(t) = serde_json::from_slice::<TrailerLine>(body) {
            trailer = Some(t.dlq_archive_end);
            continue;
        } else {
            serde_json::from_slice::<DeadLetter>(body)
                .map_err(|e| bad(format!("line {n} is not a dead-letter record: {e}")))?;
            count += 1;
        }
        hash.update(&line);
    }
    let header = header.ok_or_else(|| bad("it is empty".into()))?;
    let trailer =
        trailer.ok_or_else(|| bad("the end marker is missing (truncated archive)".into()))?;
    if trailer.count != count {
        return Err(bad(format!(
            "it holds {count} records but its end marker says {}",
            trailer.count
        )));
    }
    let actual = hex::encode(hash.finalize());
    if actual != trailer.sha256 {
        return Err(bad(format!(
            "checksum mismatch (expected {}, found {actual}): the file was modified",
            trailer.sha256
        )));
    }
    Ok((header, trailer))
}

/// Iterates the records of an archive that `verify` accepted, with their 1-based record number.
pub(crate) fn records(path: &Path) -> Result<impl Iterator<Item = Result<(u64, DeadLetter)>>> {
    let reader = open_reader(path)?;
    let mut n: u64 = 0;
    Ok(reader.lines().skip(1).filter_map(move |line| {
        let line = match line {
            Ok(l) => l,
            Err(e) => return Some(Err(anyhow!(e))),
        };
        if line.starts_with("{\"dlq_archive_end\"") {
            return None;
        }
        n += 1;
        Some(
            serde_json::from_str::<DeadLetter>(&line)
                .map(|r| (n, r))
                .map_err(|e| anyhow!(e)),
        )
    }))
}

/// Which records of an archive were already restored: `<archive>.journal`, one record number
/// per line, appended (and flushed) right after each confirm, so a re-run resumes.
pub(crate) struct Journal {
    done: std::collections::HashSet<u64>,
    path: PathBuf,
    /// The archive's checksum: a journal belongs to exactly one archive.
    sha256: String,
    /// Opened on the first record, so that a dry run or a refused run writes nothing.
    file: Option<File>,
    /// Set when the journal on disk belongs to another archive (and is not applied).
    pub(crate) foreign: Option<String>,
}

impl Journal {
    pub(crate) fn path_for(archive: &Path) -> PathBuf {
        let mut p = archive.as_os_str().to_owned();
        p.push(".journal");
        PathBuf::from(p)
    }

    /// The records already restored from the archive whose checksum is `sha256`. A journal
    /// left by another archive at the same path (deleted and written again) is ignored with a
    /// warning, never applied: its record numbers mean other records.
    pub(crate) fn open(archive: &Path, sha256: &str) -> Result<Journal> {
        let path = Self::path_for(archive);
        let mut journal = Journal {
            done: Default::default(),
            path: path.clone(),
            sha256: sha256.to_string(),
            file: None,
            foreign: None,
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(journal),
            Err(e) => return Err(anyhow!(e).context(format!("reading {}", path.display()))),
        };
        let mut lines = text.lines();
        match lines.next().and_then(|l| l.strip_prefix("archive ")) {
            Some(owner) if owner.trim() == sha256 => {
                journal.done = lines.filter_map(|l| l.trim().parse().ok()).collect();
            }
            _ => {
                journal.foreign = Some(format!(
                    "the journal {} belongs to another archive (or an older dlq) and is ignored; it is set aside as {}.old when this run restores its first record",
                    path.display(),
                    path.display()
                ));
            }
        }
        Ok(journal)
    }

    pub(crate) fn done(&self) -> &std::collections::HashSet<u64> {
        &self.done
    }

    #[cfg(test)]
    pub(crate) fn is_done(&self, n: u64) -> bool {
        self.done.contains(&n)
    }

    pub(crate) fn done_count(&self) -> usize {
        self.done.len()
    }

    pub(crate) fn record(&mut self, n: u64) -> Result<()> {
        if self.file.is_none() {
            self.file = Some(self.create()?);
        }
        let Some(file) = self.file.as_mut() else {
            unreachable!("opened above")
        };
        writeln!(file, "{n}").context("writing the restore journal")?;
        self.done.insert(n);
        Ok(())
    }

    /// Opens the journal for appending; a foreign one is set aside first.
    fn create(&mut self) -> Result<File> {
        let path = &self.path;
        if self.foreign.is_some() {
            let mut old = path.as_os_str().to_owned();
            old.push(".old");
            std::fs::rename(path, &old)
                .with_context(|| format!("setting aside the foreign journal {}", path.display()))?;
            self.foreign = None;
        }
        let fresh = !path.exists();
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .with_context(|| format!("cannot write the restore journal {}", path.display()))?;
        if fresh {
            writeln!(file, "archive {}", self.sha256).context("writing the restore journal")?;
        }
        Ok(file)
    }

    pub(crate) fn sync(&self) -> Result<()> {
        match &self.file {
            Some(f) => f.sync_data().context("fsync of the restore journal"),
            None => Ok(()),
        }
    }
}

/// What an archive run was asked to do, for its plan line and confirmation.
pub(crate) struct Intent<'a> {
    pub(crate) count: u64,
    /// "row(s) of table t" / "message(s) of q1, q2"
    pub(crate) what: String,
    pub(crate) selection: &'a str,
    pub(crate) to: &'a Path,
    pub(crate) delete: bool,
    pub(crate) safety: crate::bulk::Safety,
}

/// Where an archive goes, for messages.
pub(crate) fn destination(to: &Path) -> String {
    if to.as_os_str() == "-" {
        "stdout".to_string()
    } else {
        to.display().to_string()
    }
}

/// Prints the plan and asks before a `--delete` (unless `--yes`). `Some(exit)` means stop
/// here (dry run, nothing to do, or declined); `None` means go ahead.
pub(crate) async fn confirm(
    printer: &crate::output::Printer,
    i: Intent<'_>,
    audit: Option<&mut crate::audit::Audit>,
) -> Result<Option<crate::error::Exit>> {
    let verb = if i.delete {
        "archive and then delete"
    } else {
        "archive"
    };
    printer.info(format!(
        "Plan: {verb} {} {} ({}) -> {}",
        i.count,
        i.what,
        i.selection,
        destination(i.to)
    ));
    let gate = crate::bulk::Gate {
        safety: i.safety,
        planned: i.count,
        refused: 0,
        nothing: "nothing to archive",
        dry_run: "dry run: nothing was written or deleted",
        prompt: format!("Archive and delete {} {}?", i.count, i.what),
        audit,
        hold: None,
    };
    crate::bulk::gate(printer, gate).await
}

/// The audit trail of an archive run: only `--delete` changes something.
pub(crate) fn audit(
    endpoints: &crate::endpoints::Endpoints,
    printer: &crate::output::Printer,
    delete: bool,
    source: &'static str,
    location: String,
    selection: String,
) -> Option<crate::audit::Audit> {
    let subject = crate::audit::Subject {
        action: "archive",
        source,
        location,
        selection,
        run_id: uuid::Uuid::new_v4().to_string(),
    };
    delete.then(|| crate::audit::Audit::new(endpoints.audit_log.as_deref(), printer, subject))
}

/// The end record of an archive --delete: `deleted` of the archived records removed, the
/// exit dlq ends with, and `why` when the run did not end as planned.
pub(crate) fn audit_end(
    audit: Option<&mut crate::audit::Audit>,
    archived: u64,
    deleted: u64,
    exit: crate::error::Exit,
    why: Option<&str>,
) {
    if let Some(a) = audit {
        let mut report = crate::report::Report::new("archive");
        report.succeeded = deleted;
        report.skipped_count = archived.saturating_sub(deleted);
        report.stopped = why.map(str::to_owned);
        a.end(&report, exit);
    }
}

pub(crate) fn header(source: &str, location: &str, selection: &str) -> Header {
    Header {
        dlq_archive: FORMAT_VERSION,
        created_at: crate::model::rfc3339(&chrono::Utc::now()),
        source: source.to_string(),
        location: location.to_string(),
        selection: selection.to_string(),
        host: crate::model::hostname(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{RecordId, SourceKind};

    fn rec(i: i64) -> DeadLetter {
        DeadLetter {
            task: Some("x".into()),
            motivo: Some("m".into()),
            payload: serde_json::json!({"i": i}),
            raw: Some(serde_json::json!({"args": format!("{{\"i\": {i}}}")})),
            ..DeadLetter::blank(SourceKind::Table, "t", RecordId::Int(i))
        }
    }

    /// A file's `finish` never waits: it completes at its first poll.
    pub(super) fn finished(w: ArchiveWriter) -> Result<Trailer> {
        futures_util::FutureExt::now_or_never(w.finish()).expect("a file's finish never waits")
    }

    fn write(path: &Path, n: i64) {
        let mut w = ArchiveWriter::create(path, &header("table", "t", "all")).unwrap();
        for i in 0..n {
            w.write(&rec(i)).unwrap();
        }
        let t = finished(w).unwrap();
        assert_eq!(t.count, n as u64);
    }

    #[test]
    fn round_trip_plain_and_gzip() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["a.ndjson", "a.ndjson.gz"] {
            let p = dir.path().join(name);
            write(&p, 5);
            let (h, t) = verify(&p).unwrap();
            assert_eq!((h.source.as_str(), t.count), ("table", 5));
            let back: Vec<DeadLetter> = records(&p).unwrap().map(|r| r.unwrap().1).collect();
            assert_eq!(back, (0..5).map(rec).collect::<Vec<_>>());
            assert!(!dir.path().join(format!("{name}.partial")).exists());
        }
    }

    #[test]
    fn refuses_overwrite() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.ndjson");
        write(&p, 1);
        assert!(ArchiveWriter::create(&p, &header("table", "t", "")).is_err());
    }

    #[test]
    fn truncated_and_tampered_archives_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.ndjson");
        write(&p, 3);
        let text = std::fs::read_to_string(&p).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let cut = dir.path().join("cut.ndjson");
        std::fs::write(&cut, lines[..3].join("\n") + "\n").unwrap();
        assert!(format!("{:#}", verify(&cut).unwrap_err()).contains("end marker is missing"));
        let half = dir.path().join("half.ndjson");
        std::fs::write(&half, &text[..text.len() - 10]).unwrap();
        assert!(verify(&half).is_err());
        let edited = dir.path().join("edited.ndjson");
        std::fs::write(&edited, text.replace("\"i\":1", "\"i\":9")).unwrap();
        assert!(format!("{:#}", verify(&edited).unwrap_err()).contains("checksum mismatch"));
        let dropped = dir.path().join("dropped.ndjson");
        let mut l = lines.clone();
        l.remove(2);
        std::fs::write(&dropped, l.join("\n") + "\n").unwrap();
        assert!(format!("{:#}", verify(&dropped).unwrap_err()).contains("end marker says 3"));
    }

    #[test]
    fn abandoned_writer_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.ndjson");
        let mut w = ArchiveWriter::create(&p, &header("table", "t", "")).unwrap();
        w.write(&rec(1)).unwrap();
        drop(w);
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    }

    #[test]
    fn journal_resumes() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.ndjson");
        let j = Journal::open(&p, "sha-a").unwrap();
        drop(j);
        assert!(
            !Journal::path_for(&p).exists(),
            "nothing written before a record"
        );
        let mut j = Journal::open(&p, "sha-a").unwrap();
        j.record(1).unwrap();
        j.record(3).unwrap();
        drop(j);
        let j = Journal::open(&p, "sha-a").unwrap();
        assert!(j.is_done(1) && j.is_done(3) && !j.is_done(2));
        assert!(j.foreign.is_none());
    }

    #[test]
    fn a_journal_of_another_archive_is_never_applied() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.ndjson");
        let mut j = Journal::open(&p, "sha-old").unwrap();
        j.record(1).unwrap();
        drop(j);
        let mut j = Journal::open(&p, "sha-new").unwrap();
        assert!(j.foreign.is_some());
        assert_eq!(j.done_count(), 0);
        j.record(2).unwrap();
        drop(j);
        let j = Journal::open(&p, "sha-new").unwrap();
        assert!(j.is_done(2) && !j.is_done(1));
        let mut old = Journal::path_for(&p).into_os_string();
        old.push(".old");
        assert!(
            std::path::Path::new(&old).exists(),
            "set aside, not deleted"
        );
    }
}

#[cfg(test)]
mod proptests {
    use super::*;
    use crate::model::{RecordId, SourceKind};
    use proptest::prelude::*;
    use tests::finished;

    fn arb_record() -> impl Strategy<Value = DeadLetter> {
        (
            any::<i64>(),
            proptest::option::of(".{0,20}"),
            proptest::option::of("\\PC{0,60}"),
            any::<bool>(),
            proptest::collection::vec(any::<u8>(), 0..40),
        )
            .prop_map(|(id, task, motivo, replayed, bytes)| DeadLetter {
                source: SourceKind::Table,
                location: "t".into(),
                id: RecordId::Int(id),
                task,
                motivo,
                created_at: None,
                replayed,
                payload: crate::model::payload_from_bytes(&bytes),
                framework: None,
                retries: None,
                replay_count: 0,
                headers: None,
                death: None,
                properties: None,
                raw: Some(serde_json::json!({ "args": String::from_utf8_lossy(&bytes) })),
                payload_text: None,
                unreadable_time: None,
                origin: None,
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Whatever is written is read back identically, plain or gzip.
        #[test]
        fn round_trip(recs in proptest::collection::vec(arb_record(), 0..20), gz in any::<bool>()) {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join(if gz { "a.ndjson.gz" } else { "a.ndjson" });
            let mut w = ArchiveWriter::create(&p, &header("table", "t", "")).unwrap();
            for r in &recs {
                w.write(r).unwrap();
            }
            finished(w).unwrap();
            let (_, t) = verify(&p).unwrap();
            prop_assert_eq!(t.count, recs.len() as u64);
            let back: Vec<DeadLetter> = records(&p).unwrap().map(|r| r.unwrap().1).collect();
            prop_assert_eq!(back, recs);
        }

        /// Any single changed byte or any truncation is refused, never read as valid data.
        #[test]
        fn corruption_is_detected(
            recs in proptest::collection::vec(arb_record(), 1..8),
            pos in any::<prop::sample::Index>(),
            flip in 1u8..=255,
            truncate in any::<bool>(),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("a.ndjson");
            let mut w = ArchiveWriter::create(&p, &header("table", "t", "")).unwrap();
            for r in &recs {
                w.write(r).unwrap();
            }
            finished(w).unwrap();
            let mut bytes = std::fs::read(&p).unwrap();
            let i = pos.index(bytes.len());
            if truncate {
                bytes.truncate(i);
            } else {
                bytes[i] ^= flip;
            }
            std::fs::write(&p, &bytes).unwrap();
            prop_assert!(verify(&p).is_err());
        }
    }
}

//! Where `metrics` puts its text besides stdout: a file for node_exporter's textfile
//! collector, written atomically, or `GET /metrics` over a minimal HTTP/1.1 server (one
//! request per connection, then close: all a Prometheus scrape needs, so no HTTP crate).

use crate::output::Printer;
use crate::redact;
use anyhow::{Context, Result};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use std::future::Future;
use std::io::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

/// A request head larger than this is not a scrape.
const MAX_HEAD: usize = 8192;
/// A client that sends no full request head within this time is dropped.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);

/// Writes `text` to `path` so that a reader sees the old file or the new one, never a part:
/// a temporary file in the same directory (not ending in `.prom`, which the collector would
/// read), flushed to disk, renamed over `path`, then the directory entry flushed too.
pub(crate) fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let name = path
        .file_name()
        .with_context(|| format!("--textfile {}: not a file name", path.display()))?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        name.to_string_lossy(),
        std::process::id()
    ));
    let write = || -> std::io::Result<()> {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        std::fs::File::open(dir)?.sync_all()
    };
    write().map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::Error::new(e).context(format!("cannot write {}", path.display()))
    })
}

/// The last exposition text (or refresh error) and when it was made.
struct Cache<F> {
    refresh: F,
    interval: Duration,
    last: Mutex<Option<(Instant, Result<String, String>)>>,
}

impl<F, Fut> Cache<F>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<String>>,
{
    /// The cached text while it is younger than the interval, else a fresh one. Scrapes that
    /// arrive during a refresh wait for it: the sources are asked at most once per interval.
    async fn text(&self, printer: &Printer) -> Result<String, String> {
        let mut last = self.last.lock().await;
        if let Some((at, text)) = &*last
            && at.elapsed() < self.interval
        {
            return text.clone();
        }
        let fresh = (self.refresh)().await.map_err(|e| {
            let msg = redact::scrub(&format!("{e:#}"));
            printer.warn(format!("metrics refresh failed: {msg}"));
            msg
        });
        *last = Some((Instant::now(), fresh.clone()));
        fresh
    }
}

/// Serves `GET /metrics` on `addr` until SIGINT or SIGTERM, refreshing the text with
/// `refresh` at most every `interval`; a failed refresh is a 503 (the target shows down).
pub(crate) async fn listen<F, Fut>(
    addr: &str,
    interval: Duration,
    refresh: F,
    printer: &Printer,
) -> Result<()>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<String>>,
{
    let listener = TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    printer.info(format!(
        "serving metrics on http://{}/metrics (refreshed at most every {} s)",
        listener.local_addr()?,
        interval.as_secs_f64()
    ));
    let cache = Cache {
        refresh,
        interval,
        last: Mutex::new(None),
    };
    let mut signals = crate::signals::listen();
    // Connections are answered concurrently in this task, so they may borrow the cache.
    let mut answering = FuturesUnordered::new();
    loop {
        tokio::select! {
            _ = signals.next() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => answering.push(answer(stream, &cache, printer)),
                Err(e) => printer.warn(format!("accepting a connection failed: {e}")),
            },
            Some(()) = answering.next(), if !answering.is_empty() => {}
        }
    }
    printer.info("metrics server stopped");
    Ok(())
}

/// Answers one request and closes the connection.
async fn answer<F, Fut>(mut stream: TcpStream, cache: &Cache<F>, printer: &Printer)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<String>>,
{
    let Ok(Ok(head)) = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut stream)).await else {
        return;
    };
    let mut words = head.lines().next().unwrap_or_default().split(' ');
    let method = words.next().unwrap_or_default();
    let path = words.next().unwrap_or_default().split('?').next();
    let plain = "text/plain; charset=utf-8";
    let (status, content_type, body) = match (method, path) {
        ("GET" | "HEAD", Some("/metrics")) => match cache.text(printer).await {
            Ok(text) => ("200 OK", super::exposition::CONTENT_TYPE, text),
            Err(e) => ("503 Service Unavailable", plain, format!("dlq: {e}\n")),
        },
        ("GET" | "HEAD", _) => ("404 Not Found", plain, "not found: try /metrics\n".into()),
        _ => (
            "405 Method Not Allowed",
            plain,
            "only GET and HEAD\n".into(),
        ),
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nAllow: GET, HEAD\r\nConnection: close\r\n\r\n",
        body.len()
    );
    if method != "HEAD" {
        response.push_str(&body);
    }
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}

/// Reads up to the blank line that ends a request head (a scrape has no body).
async fn read_head(stream: &mut TcpStream) -> std::io::Result<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || buf.len() + n > MAX_HEAD {
            return Err(std::io::ErrorKind::InvalidData.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

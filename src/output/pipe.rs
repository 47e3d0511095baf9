//! Data for stdout written by a thread of its own, so that a reader who stops reading never
//! stops dlq's runtime.
//!
//! That runtime has one thread (main.rs), which also reads lapin's socket and runs its
//! heartbeats. Blocked in a write to a pipe nobody read (a pager left open on a large
//! `filter -o ndjson`), it missed two heartbeats (20 s) and the connection was lost: the read
//! failed (exit 1) and the broker gave back what it held with a delivery counted. Measured on
//! RabbitMQ 4.0.5: after one such read of 3,000 quorum messages, whose reader waited 35 s,
//! 2,000 of them had `x-delivery-count` 1, a step nearer the delivery limit (20 by default)
//! for a command that only reads. Here a write only queues bytes; the writer awaits its
//! `Waiter`'s `ready` between records, which holds the queue under `HIGH` bytes while the
//! runtime serves the connection, and `drain` at the end.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// Bytes queued before `Waiter::ready` makes the caller wait for the reader.
const HIGH: usize = 1 << 20;

/// A `Write` for stdout that never blocks (see the module's notes). Dropped, it waits until
/// its thread has written what is queued (or failed), as a write to stdout would have: a
/// command that fails mid-output (a read RabbitMQ interrupted) still ends on a whole line.
/// Callers `drain` first, so that only an error path waits there.
pub(crate) struct Pipe {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the writer thread: bytes queued, or the pipe dropped.
    work: Condvar,
    /// Wakes `Waiter::ready` and `drain`: bytes written, or a write failed.
    written: tokio::sync::Notify,
    /// The signals seen when the pipe started: one since then ends a wait (`abandon`).
    signals_at: u64,
}

#[derive(Default)]
struct State {
    queued: VecDeque<Vec<u8>>,
    /// Bytes queued or being written.
    bytes: usize,
    /// The first write error (a closed pipe): every later call returns it.
    failed: Option<(io::ErrorKind, String)>,
    dropped: bool,
    /// A signal came while dlq waited for the reader: the output is given up (`abandon`).
    abandoned: bool,
}

impl State {
    fn error(&self) -> Option<io::Error> {
        // Not `ErrorKind::Interrupted` when abandoned: std's writers retry that kind.
        self.failed
            .as_ref()
            .map(|(kind, msg)| match self.abandoned {
                true => io::Error::other(crate::error::Interrupted(msg.clone())),
                false => io::Error::new(*kind, msg.clone()),
            })
    }
}

impl Pipe {
    /// Starts the writer thread; an error where the system cannot start one.
    pub(crate) fn stdout() -> io::Result<Pipe> {
        Pipe::to(io::stdout())
    }

    fn to(mut out: impl Write + Send + 'static) -> io::Result<Pipe> {
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            work: Condvar::new(),
            written: tokio::sync::Notify::new(),
            signals_at: crate::signals::count(),
        });
        let theirs = shared.clone();
        let thread = std::thread::Builder::new()
            .name("dlq-stdout".into())
            .spawn(move || write_out(&theirs, &mut out))?;
        Ok(Pipe {
            shared,
            thread: Some(thread),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.shared.state()
    }

    /// What the caller awaits, kept beside the pipe it hands to a `BufWriter` (or gzip).
    pub(crate) fn waiter(&self) -> Waiter {
        Waiter(self.shared.clone())
    }
}

/// Waits on a pipe's writer thread (`Pipe::waiter`).
pub(crate) struct Waiter(Arc<Shared>);

impl Waiter {
    /// Returns once fewer than `HIGH` bytes wait (at once, mostly), or with the write error.
    pub(crate) async fn ready(&self) -> io::Result<()> {
        self.0.wait_until(HIGH).await
    }

    /// Returns once everything queued is written, or with the write error.
    pub(crate) async fn drain(&self) -> io::Result<()> {
        self.0.wait_until(1).await
    }
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn wait_until(&self, below: usize) -> io::Result<()> {
        let mut signals = crate::signals::listen_since(self.signals_at);
        loop {
            // Registered before the check, so a write finishing in between still wakes it.
            let written = self.written.notified();
            tokio::pin!(written);
            written.as_mut().enable();
            {
                let st = self.state();
                if let Some(e) = st.error() {
                    return Err(e);
                }
                if st.bytes < below {
                    return Ok(());
                }
            }
            tokio::select! {
                _ = written => {}
                _ = signals.next() => return Err(self.abandon()),
            }
        }
    }

    /// A signal while dlq waits for its output's reader: what waits is dropped, the pipe no
    /// longer waits for its thread when dropped (blocked in a write nobody reads), and every
    /// later write fails: dlq is stopping, and must not wait for a reader who may never come.
    fn abandon(&self) -> io::Error {
        let mut st = self.state();
        st.queued.clear();
        st.abandoned = true;
        let why = "interrupted: dlq stopped writing its output";
        st.failed = Some((io::ErrorKind::Other, why.into()));
        st.error().expect("set above")
    }
}

impl Write for Pipe {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut st = self.state();
        if let Some(e) = st.error() {
            return Err(e);
        }
        st.bytes += buf.len();
        st.queued.push_back(buf.to_vec());
        self.shared.work.notify_one();
        Ok(buf.len())
    }

    /// Nothing to do here: `drain` waits for the writes.
    fn flush(&mut self) -> io::Result<()> {
        match self.state().error() {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        self.state().dropped = true;
        self.shared.work.notify_one();
        // Stopping on a signal (an abandoned pipe is one): the thread may be blocked for good
        // on a reader who stopped reading; the process ends it.
        if crate::signals::came_since(self.shared.signals_at) {
            return;
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The writer thread: writes each queued chunk in order until the pipe is dropped and
/// everything is written, or a write fails (then the rest is discarded).
fn write_out(shared: &Shared, out: &mut impl Write) {
    loop {
        let chunk = {
            let mut st = shared.state();
            while st.queued.is_empty() && !st.dropped {
                st = shared.work.wait(st).unwrap_or_else(|e| e.into_inner());
            }
            match st.queued.pop_front() {
                Some(chunk) => chunk,
                None => return,
            }
        };
        let done = out.write_all(&chunk).and_then(|()| out.flush());
        let failed = done.is_err();
        let mut st = shared.state();
        // `abandon` may have dropped what was queued meanwhile.
        st.bytes = st.bytes.saturating_sub(chunk.len());
        if let Err(e) = done {
            st.failed = Some((e.kind(), e.to_string()));
            st.queued.clear();
            st.bytes = 0;
        }
        drop(st);
        shared.written.notify_waiters();
        if failed {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that stops: the writer thread blocks, the caller does not.
    #[tokio::test]
    async fn writes_never_block_and_ready_waits_for_the_reader() {
        let (mut rx, tx) = std::io::pipe().unwrap();
        let mut pipe = Pipe::to(tx).unwrap();
        let waiter = pipe.waiter();
        // Far more than a pipe's 64 KiB buffer, and nobody reads yet.
        let chunk = vec![b'x'; 64 << 10];
        for _ in 0..(2 * HIGH / chunk.len()) {
            pipe.write_all(&chunk).unwrap();
        }
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(200), waiter.ready());
        assert!(
            waiting.await.is_err(),
            "ready while the reader reads nothing"
        );
        let reader = std::thread::spawn(move || io::copy(&mut rx, &mut io::sink()).unwrap());
        waiter.ready().await.unwrap();
        waiter.drain().await.unwrap();
        drop(pipe);
        assert_eq!(reader.join().unwrap(), 2 * HIGH as u64);
    }

    /// Dropped with bytes queued (a command failing mid-output): they are all written before
    /// the drop returns, to a writer slower than the caller.
    #[test]
    fn a_dropped_pipe_writes_what_is_queued() {
        #[derive(Clone, Default)]
        struct Slow(Arc<Mutex<Vec<u8>>>);
        impl Write for Slow {
            fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
                std::thread::sleep(std::time::Duration::from_millis(20));
                self.0.lock().unwrap().extend_from_slice(buf);
                Ok(buf.len())
            }
            fn flush(&mut self) -> io::Result<()> {
                Ok(())
            }
        }
        let out = Slow::default();
        let mut pipe = Pipe::to(out.clone()).unwrap();
        for i in 0..10u8 {
            pipe.write_all(&[i; 1000]).unwrap();
        }
        drop(pipe);
        assert_eq!(out.0.lock().unwrap().len(), 10_000);
    }

    /// A reader that goes away: the next call says so, as a write to stdout would.
    #[tokio::test]
    async fn a_closed_pipe_comes_back_as_broken_pipe() {
        let (rx, tx) = std::io::pipe().unwrap();
        drop(rx);
        let mut pipe = Pipe::to(tx).unwrap();
        pipe.write_all(b"line\n").unwrap();
        let e = pipe.waiter().drain().await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        assert_eq!(
            pipe.write(b"more").unwrap_err().kind(),
            io::ErrorKind::BrokenPipe
        );
    }
}

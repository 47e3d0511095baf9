//! A take's consumer, watched for RabbitMQ cancelling it.
//!
//! RabbitMQ 4.3 enforces a quorum queue's consumer timeout by cancelling the consumer and
//! putting what it held back in the queue, on a channel it leaves open: acknowledging those
//! messages then does nothing. lapin's `Consumer` stream yields the cancel only behind every
//! delivery it buffered already, up to the consumer's whole credit, so a replay went on
//! publishing messages that were back in the DLQ ("300 replayed", exit 0, 150 of them still
//! in the DLQ). A watched consumer hands its deliveries to a `ConsumerDelegate` instead,
//! which sees the cancel the moment it comes and raises the take's flag.
//!
//! lapin drops a delegate once a cancel starts (`start_cancel`: dlq's own `basic_cancel`, or
//! a channel close dlq asked for), before the frame goes out. So every end a delegate sees
//! without an error before it is RabbitMQ's; the deliveries after dlq's own cancel, and
//! its end, come on lapin's stream, which `Deliveries` reads once the delegate's buffer is
//! empty, in order.
//!
//! Only where RabbitMQ can cancel that way (`topology::timeout_cancels`): the delegate costs
//! a spawned task per delivery (a 60,000-message quorum take used 10% more CPU).

use futures_util::Stream;
use lapin::message::{Delivery, DeliveryResult};
use lapin::{Consumer, ConsumerDelegate};
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};

/// What the delegate received and `Deliveries` has not handed out yet.
#[derive(Default)]
struct Buffer {
    /// In order; `None` is the consumer's end.
    items: VecDeque<Option<lapin::Result<Delivery>>>,
    /// An error came first: the end that follows is the channel's or connection's.
    failed: bool,
    waker: Option<Waker>,
}

#[derive(Clone)]
struct Feed {
    buffer: Arc<Mutex<Buffer>>,
    /// Raised when RabbitMQ ends the consumer (the take's `taken_back`).
    taken_back: Arc<AtomicBool>,
}

impl Feed {
    fn lock(&self) -> MutexGuard<'_, Buffer> {
        self.buffer.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ConsumerDelegate for Feed {
    // Buffered here, not in the spawned future: lapin calls this in delivery order, but
    // the futures it spawns may run in any order.
    fn on_new_delivery(
        &self,
        delivery: DeliveryResult,
    ) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let mut b = self.lock();
        let item = match delivery {
            Ok(Some(d)) => Some(Ok(d)),
            Ok(None) => {
                if !b.failed {
                    self.taken_back.store(true, Ordering::SeqCst);
                }
                None
            }
            Err(e) => {
                b.failed = true;
                Some(Err(e))
            }
        };
        b.items.push_back(item);
        if let Some(w) = b.waker.take() {
            w.wake();
        }
        Box::pin(std::future::ready(()))
    }
}

/// A consumer's deliveries, in order, ending with the consumer (`None`).
pub(crate) struct Deliveries {
    inner: Consumer,
    feed: Option<Feed>,
    /// The delegate's buffer yielded the end: nothing follows it.
    ended: bool,
}

impl Deliveries {
    /// `taken_back`: watch the consumer, and raise this when RabbitMQ ends it.
    pub(crate) fn new(inner: Consumer, taken_back: Option<Arc<AtomicBool>>) -> Deliveries {
        let feed = taken_back.map(|taken_back| Feed {
            buffer: Arc::default(),
            taken_back,
        });
        if let Some(f) = &feed {
            inner.set_delegate(f.clone());
        }
        Deliveries {
            inner,
            feed,
            ended: false,
        }
    }

    pub(crate) fn tag(&self) -> lapin::types::ShortString {
        self.inner.tag()
    }
}

impl Stream for Deliveries {
    type Item = lapin::Result<Delivery>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.ended {
            return Poll::Ready(None);
        }
        if let Some(feed) = &self.feed {
            let mut b = feed.lock();
            if let Some(item) = b.items.pop_front() {
                drop(b);
                self.ended = item.is_none();
                return Poll::Ready(item);
            }
            // Woken by whichever comes: the delegate's next item, or lapin's stream once the
            // delegate is dropped (nothing reaches the buffer after that).
            b.waker = Some(cx.waker().clone());
        }
        Pin::new(&mut self.inner).poll_next(cx)
    }
}

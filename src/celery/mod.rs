//! Celery: the protocol v2 task message (`message`) and how a task is dispatched to the
//! broker its workers read (`dispatch`).

pub mod amqp;
pub mod dispatch;
pub mod message;
pub mod redis;
pub mod sent;
pub mod workers;

pub use message::{ReplayOrigin, TaskMessage, build};

/// The Celery default queue: where table rows go unless told otherwise.
pub const DEFAULT_CELERY_QUEUE: &str = "celery";

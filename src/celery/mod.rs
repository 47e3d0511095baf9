//! Celery: the protocol v2 task message (`message`) and how a task is dispatched to the
//! broker its workers read (`dispatch`).

pub(crate) mod amqp;
pub(crate) mod control;
pub(crate) mod dispatch;
pub(crate) mod events;
pub(crate) mod message;
pub(crate) mod redis;
pub(crate) mod sent;
pub(crate) mod workers;

pub(crate) use message::{ReplayOrigin, TaskMessage, build};

/// The Celery default queue: where table rows go unless told otherwise.
pub(crate) const DEFAULT_CELERY_QUEUE: &str = "celery";

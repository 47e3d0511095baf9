//! Celery (protocol v2): the task and its id travel in the headers; the body is
//! `[args, kwargs, embed]`. The error is not in the message (a worker that rejects a task
//! adds nothing), so RabbitMQ's death reason is all there is.

use super::Facts;
use crate::rabbit::death::{celery_task_name, header_int, string_header};
use lapin::types::FieldTable;

pub(super) fn recognise(headers: Option<&FieldTable>, _body: &[u8]) -> Option<Facts> {
    let task = celery_task_name(headers)?;
    Some(Facts {
        framework: "celery",
        id: string_header(headers, "id"),
        task: Some(task),
        error: None,
        retries: header_int(headers, "retries").and_then(|n| u64::try_from(n).ok()),
    })
}

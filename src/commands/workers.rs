//! `dlq workers`: the live Celery workers, as the replay's worker check sees them.

use crate::celery::dispatch::Dispatcher;
use crate::error::Exit;
use crate::output::Printer;
use crate::settings::Settings;
use anyhow::Result;
use serde_json::{Value, json};
use std::time::Duration;

pub struct Options {
    pub full: bool,
    pub timeout: Duration,
}

pub async fn run(settings: &Settings, printer: &Printer, opts: Options) -> Result<Exit> {
    let dispatcher = Dispatcher::connect(settings).await?;
    let live = dispatcher.workers(opts.timeout).await?;
    if live.is_empty() {
        printer.warn(format!(
            "no Celery worker answered on {} within {:?} (stopped, remote control disabled, or another vhost)",
            dispatcher.describe(),
            opts.timeout
        ));
    }
    let to_row = if opts.full { full_row } else { short_row };
    let mut out = printer.values(&["worker", "queues", "tasks"], to_row);
    for w in live {
        out.write(json!({ "name": w.name, "queues": w.queues, "tasks": w.tasks }))?;
    }
    out.finish()?;
    Ok(Exit::Ok)
}

fn names(v: &Value) -> Vec<&str> {
    v.as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn short_row(v: &Value) -> Vec<String> {
    vec![
        crate::output::plain(&v["name"]),
        names(&v["queues"]).join(", "),
        names(&v["tasks"]).len().to_string(),
    ]
}

fn full_row(v: &Value) -> Vec<String> {
    vec![
        crate::output::plain(&v["name"]),
        names(&v["queues"]).join(", "),
        names(&v["tasks"]).join("\n"),
    ]
}

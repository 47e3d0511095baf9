//! Celery tasks over Redis, exactly as kombu's Redis transport writes them. (Stub: the
//! broker seam is in place; the transport lands in its own change.)

use super::dispatch::Pending;
use super::message::TaskMessage;
use super::workers::Worker;
use crate::error::usage;
use crate::model::Target;
use crate::rabbit::TargetFacts;
use crate::settings::Settings;
use anyhow::Result;
use std::time::Duration;

pub(crate) struct RedisDispatch {
    shown: String,
}

#[derive(Clone)]
pub(crate) struct RedisSender {}

impl RedisDispatch {
    pub(crate) async fn connect(_settings: &Settings, url: &str) -> Result<RedisDispatch> {
        let shown = crate::redact::url(url);
        Err(usage(format!(
            "--broker-url {shown}: Redis is not supported yet"
        )))
    }

    pub(crate) fn describe(&self) -> String {
        self.shown.clone()
    }

    pub(crate) async fn check_target(&self, _target: &Target) -> Result<TargetFacts> {
        unimplemented!()
    }

    pub(crate) async fn workers(&self, _timeout: Duration) -> Result<Vec<Worker>> {
        unimplemented!()
    }

    pub(crate) async fn sender(&self, _window: usize, _rate: Option<f64>) -> Result<RedisSender> {
        unimplemented!()
    }
}

impl RedisSender {
    pub(crate) async fn submit(&self, _msg: TaskMessage, _target: &Target) -> Result<Pending> {
        unimplemented!()
    }
}

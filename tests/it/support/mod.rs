//! The test harness, shared by the feature files: the dlq binary and test databases
//! (`common`), a vhost of its own per test (`broker`), real Celery workers (`celery_worker`),
//! and which broker generation the suite talks to (`target`).

pub mod broker;
pub mod celery_worker;
pub mod cluster;
pub mod common;
pub mod node;
pub mod target;
pub mod tmux;

//! dlq: list, inspect, filter and replay dead letters from RabbitMQ DLQs and a failed-task table.

pub mod celery;

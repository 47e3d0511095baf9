//! How a Celery task reaches the broker its workers read.

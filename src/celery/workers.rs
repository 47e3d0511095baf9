//! Asking the live Celery workers what they run (remote control).

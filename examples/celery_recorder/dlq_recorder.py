"""Record a Celery task in dlq's failed-task table (`tasks_falhadas`) once it has really failed.

Copy this file into your project and make it the base of the tasks you want to be able to replay
with `dlq replay`:

    from dlq_recorder import RecordedTask, configure

    configure(connect=lambda: psycopg.connect(DSN))   # any DB-API connection, see below

    @app.task(base=RecordedTask, autoretry_for=(IntegrityError,), max_retries=5)
    def processar_pagamento(pedido_id): ...

Why `on_failure` and not `except MaxRetriesExceededError`: since Celery 5 `Task.retry(exc=...)`
re-raises the *original* exception once retries run out (and `autoretry_for` always passes
`exc`), so an `except MaxRetriesExceededError` around `self.retry(...)` never runs and nothing is
stored. Celery calls `on_failure` exactly once, when the task finally fails: after the last retry,
or at once for an exception it does not retry. A retry calls `on_retry` instead.

What is stored, as dlq replays it:
- `task_original`: `self.name`, the name the worker registers (what `celery inspect registered`
  shows), so `dlq replay` needs no `--task-map`.
- `args`: JSON. dlq sends a JSON array as positional args and an object as kwargs, so call these
  tasks with positional args only or keyword args only; a task called with both is stored with
  its kwargs (and the positional args in `motivo`), and replayed with the kwargs.
- `motivo`: `ExceptionType: message`, what `dlq replay --motivo ExceptionType` selects.
- `criada_em`: now (UTC); `reprocessada`: false.

The connection: `configure(connect=..., paramstyle=...)` with a function returning a DB-API 2
connection (psycopg / psycopg2: `%s`, the default; sqlite3: `?`; mysqlclient / PyMySQL: `%s`).
A failure to record is logged and never hides the task's own failure.
"""
import datetime
import json
import logging

from celery import Task

log = logging.getLogger(__name__)

_settings = {"connect": None, "paramstyle": "%s", "table": "tasks_falhadas"}


def configure(connect, paramstyle="%s", table="tasks_falhadas"):
    """Where failures go: `connect()` returns a DB-API connection (one per failure)."""
    _settings.update(connect=connect, paramstyle=paramstyle, table=table)


def _args_json(args, kwargs):
    if kwargs:
        return json.dumps(kwargs, default=str)
    return json.dumps(list(args or []), default=str)


def record_failure(task_name, args, kwargs, exc):
    """Inserts one row; returns False (and logs) when it could not."""
    connect = _settings["connect"]
    if connect is None:
        log.error("dlq_recorder: configure(connect=...) was never called; %s not recorded", task_name)
        return False
    motivo = f"{type(exc).__name__}: {exc}"
    if args and kwargs:
        motivo += f" (positional args not replayed: {json.dumps(list(args), default=str)})"
    p = _settings["paramstyle"]
    sql = (
        f"INSERT INTO {_settings['table']} (task_original, args, motivo, criada_em, reprocessada) "
        f"VALUES ({p}, {p}, {p}, {p}, {p})"
    )
    now = datetime.datetime.now(datetime.timezone.utc)
    if p == "?":  # SQLite stores text: dlq reads ISO 8601.
        now = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    try:
        conn = connect()
        try:
            cur = conn.cursor()
            cur.execute(sql, (task_name, _args_json(args, kwargs), motivo[:2000], now, False))
            conn.commit()
        finally:
            conn.close()
        return True
    except Exception:  # never hide the task's own failure
        log.exception("dlq_recorder: could not record the failure of %s", task_name)
        return False


class RecordedTask(Task):
    """A task whose final failure is stored for `dlq replay`."""

    def on_failure(self, exc, task_id, args, kwargs, einfo):
        record_failure(self.name, args, kwargs, exc)
        super().on_failure(exc, task_id, args, kwargs, einfo)

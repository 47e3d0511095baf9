"""How a test task records each execution: one JSON line appended to $DLQ_TEST_RECORD with
the task name, its args and kwargs (datetimes tagged so the test can see they arrived as real
datetimes), and the replay headers dlq stamps.

Kept apart from the task modules on purpose: Celery's `app.task` is shared by default, so a
task module that imported another one's app would register both modules' tasks of the same
name, and which one a worker ran depended on the order of a Python set of functions (their
addresses): once, in CI, `follow_tasks.processar_pagamento` ran `dlq_test_tasks`'s, which
never fails.
"""
import datetime
import decimal
import json
import os
import uuid


def _tag(value):
    """JSON-friendly view that keeps the Python type visible."""
    if isinstance(value, datetime.datetime):
        return {"py": "datetime", "iso": value.isoformat()}
    if isinstance(value, datetime.date):
        return {"py": "date", "iso": value.isoformat()}
    if isinstance(value, decimal.Decimal):
        return {"py": "decimal", "str": str(value)}
    if isinstance(value, uuid.UUID):
        return {"py": "uuid", "str": str(value)}
    if isinstance(value, (list, tuple)):
        return [_tag(v) for v in value]
    if isinstance(value, dict):
        return {k: _tag(v) for k, v in value.items()}
    return value


def _record(task, args, kwargs):
    line = {
        "task": task.name,
        "args": _tag(list(args)),
        "kwargs": _tag(kwargs),
        "task_id": task.request.id,
        "replay_of": task.request.get("dlq-replay-of"),
        "replay_id": task.request.get("dlq-replay-id"),
    }
    with open(os.environ["DLQ_TEST_RECORD"], "a", encoding="utf-8") as f:
        f.write(json.dumps(line, sort_keys=True) + "\n")
        f.flush()

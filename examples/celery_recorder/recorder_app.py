"""An example app using dlq_recorder: two ways of retrying, both recorded once retries run out.

Run a worker:   celery -A recorder_app worker -Q pagamentos
Environment:    DLQ_EXAMPLE_BROKER (default amqp://guest:guest@127.0.0.1:5672//),
                DLQ_EXAMPLE_SQLITE (the SQLite file holding tasks_falhadas, made by `dlq init`),
                DLQ_EXAMPLE_TABLE (default tasks_falhadas), DLQ_EXAMPLE_QUEUE (default celery),
                DLQ_EXAMPLE_FAIL (a file: while it exists every task fails),
                DLQ_TEST_RECORD (optional: each successful run appends a JSON line there).
"""
import json
import os
import sqlite3

from celery import Celery

from dlq_recorder import RecordedTask, configure

app = Celery(
    "recorder_app",
    broker=os.environ.get("DLQ_EXAMPLE_BROKER", "amqp://guest:guest@127.0.0.1:5672//"),
)
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    task_default_queue=os.environ.get("DLQ_EXAMPLE_QUEUE", "celery"),
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)
configure(
    connect=lambda: sqlite3.connect(os.environ["DLQ_EXAMPLE_SQLITE"]),
    paramstyle="?",
    table=os.environ.get("DLQ_EXAMPLE_TABLE", "tasks_falhadas"),
)


class IntegrityError(Exception):
    """Stands for the database error of the seed's scenario 2."""


def _work(name, payload):
    if os.path.exists(os.environ.get("DLQ_EXAMPLE_FAIL", "/nonexistent")):
        raise IntegrityError(f"duplicate key value violates unique constraint ({payload})")
    record = os.environ.get("DLQ_TEST_RECORD")
    if record:
        with open(record, "a", encoding="utf-8") as f:
            f.write(json.dumps({"task": name, "payload": payload}) + "\n")


@app.task(
    base=RecordedTask,
    name="pagamentos.processar_pagamento",
    autoretry_for=(IntegrityError,),
    max_retries=2,
    default_retry_delay=0,
)
def processar_pagamento(pedido_id):
    """Retried by Celery itself (`autoretry_for`)."""
    _work("pagamentos.processar_pagamento", {"pedido_id": pedido_id})


@app.task(base=RecordedTask, bind=True, name="pagamentos.enviar_recibo", max_retries=2)
def enviar_recibo(self, pedido_id, email):
    """Retried by hand (`self.retry`), as the seed's second example does."""
    try:
        _work("pagamentos.enviar_recibo", {"pedido_id": pedido_id, "email": email})
    except IntegrityError as exc:
        raise self.retry(exc=exc, countdown=0)

"""Tasks for dlq's interop tests, run by a stock Celery worker.

Each execution appends one JSON line to $DLQ_TEST_RECORD: the task name, its args and
kwargs (datetimes tagged so the test can see they arrived as real datetimes), and the
replay headers dlq stamps. The broker is $DLQ_TEST_BROKER.
"""
import datetime
import json
import os

from celery import Celery
from celery.exceptions import Reject

from record import _record

app = Celery("dlq_test_tasks", broker=os.environ.get(
    "DLQ_TEST_BROKER",
    f"amqp://guest:guest@127.0.0.1:{os.environ.get('DLQ_TEST_AMQP_PORT') or 5672}//",
))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)
# Apps sharing a vhost keep their remote control apart with their own control_exchange.
if os.environ.get("DLQ_TEST_CONTROL_EXCHANGE"):
    app.conf.control_exchange = os.environ["DLQ_TEST_CONTROL_EXCHANGE"]

# A worker queue that dead-letters (what Celery itself cannot configure as a DLQ): the test
# names the queue and its dead-letter exchange.
if os.environ.get("DLQ_TEST_DLX"):
    from kombu import Exchange, Queue

    _name = os.environ["DLQ_TEST_QUEUE"]
    app.conf.task_queues = [
        Queue(
            _name,
            Exchange(_name, type="direct"),
            routing_key=_name,
            queue_arguments={"x-dead-letter-exchange": os.environ["DLQ_TEST_DLX"]},
        )
    ]


@app.task(bind=True, name="processar_pagamento")
def processar_pagamento(self, *args, **kwargs):
    _record(self, args, kwargs)


@app.task(bind=True, name="enviar_email")
def enviar_email(self, *args, **kwargs):
    _record(self, args, kwargs)


@app.task(bind=True, name="liberar_acesso_curso")
def liberar_acesso_curso(self, *args, **kwargs):
    _record(self, args, kwargs)


@app.task(bind=True, name="agendar_aula")
def agendar_aula(self, *args, **kwargs):
    _record(self, args, kwargs)


@app.task(bind=True, name="rejeitar", acks_late=True)
def rejeitar(self, *args, **kwargs):
    """Records, then dead-letters itself (queue with x-dead-letter-exchange)."""
    _record(self, args, kwargs)
    # Rejects while the flag file exists: the test removes it once "the bug is fixed".
    flag = os.environ.get("DLQ_TEST_REJECT_FILE")
    if flag and os.path.exists(flag):
        raise Reject("rejected by test", requeue=False)


@app.task(bind=True, name="falha_e_registra")
def falha_e_registra(self, *args, **kwargs):
    """Records, then, while the flag file exists, fails the way the seed's apps do: its
    error handler stores the task again in the failed-task table (SQLite here)."""
    _record(self, args, kwargs)
    flag = os.environ.get("DLQ_TEST_FAIL_FILE")
    if flag and os.path.exists(flag):
        import sqlite3

        con = sqlite3.connect(os.environ["DLQ_TEST_SQLITE"], timeout=30)
        with con:
            con.execute(
                f'INSERT INTO "{os.environ["DLQ_TEST_TABLE"]}" '
                "(task_original, args, motivo, criada_em, reprocessada) VALUES (?, ?, ?, ?, 0)",
                (
                    self.name,
                    json.dumps(kwargs if kwargs else list(args)),
                    "IntegrityError: still broken",
                    datetime.datetime.now(datetime.timezone.utc).isoformat(),
                ),
            )
        con.close()

"""The recording tasks of dlq_test_tasks, in an app on a Redis broker with a key prefix.

The broker is $DLQ_TEST_BROKER (redis://...); every key and channel kombu uses carries
$DLQ_TEST_KEYPREFIX (kombu's `global_keyprefix`), so that parallel tests share one Redis
without seeing each other's queues, bindings or remote-control traffic.
"""
import os

from celery import Celery

from record import _record

app = Celery("redis_tasks", broker=os.environ.get(
    "DLQ_TEST_BROKER",
    f"redis://127.0.0.1:{os.environ.get('DLQ_TEST_REDIS_PORT') or 6379}/0",
))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    broker_transport_options={"global_keyprefix": os.environ.get("DLQ_TEST_KEYPREFIX", "")},
)
# Celery's own Redis priority recipe changes kombu's separator (key and binding names).
if os.environ.get("DLQ_TEST_SEP"):
    app.conf.broker_transport_options.update(
        sep=os.environ["DLQ_TEST_SEP"],
        priority_steps=list(range(10)),
        queue_order_strategy="priority",
    )
# Apps sharing a broker keep their remote control apart with their own control_exchange.
if os.environ.get("DLQ_TEST_CONTROL_EXCHANGE"):
    app.conf.control_exchange = os.environ["DLQ_TEST_CONTROL_EXCHANGE"]


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

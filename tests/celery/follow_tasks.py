"""Tasks whose outcome a `dlq replay --follow` test decides from their args, run by a stock
Celery worker on RabbitMQ or Redis ($DLQ_TEST_BROKER; on Redis every key and channel carries
$DLQ_TEST_KEYPREFIX). Each execution is recorded by record.py.
"""
import os
import time

from celery import Celery

from record import _record

app = Celery("follow_tasks", broker=os.environ["DLQ_TEST_BROKER"])
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)
if os.environ["DLQ_TEST_BROKER"].startswith("redis"):
    app.conf.broker_transport_options = {
        "global_keyprefix": os.environ.get("DLQ_TEST_KEYPREFIX", "")
    }


class IntegrityError(Exception):
    """What the seed's scenario 2 failed with."""


@app.task(bind=True, name="processar_pagamento")
def processar_pagamento(self, *args, **kwargs):
    """Succeeds, unless its kwargs say `falhar`: then fails again as the seed's rows did."""
    _record(self, args, kwargs)
    if kwargs.get("falhar"):
        raise IntegrityError(f"duplicate key value pedido_id={kwargs.get('pedido_id')}")
    if kwargs.get("tentar_de_novo") and self.request.retries == 0:
        raise self.retry(countdown=0, max_retries=3, exc=IntegrityError("first try"))
    if kwargs.get("dormir"):
        time.sleep(float(kwargs["dormir"]))

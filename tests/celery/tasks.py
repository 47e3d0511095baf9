"""The seed's shape for dlq's worker-check tests: tasks declared without `name=`, so the
worker registers them as `tasks.<function>` (what `@shared_task` in a tasks.py does), while
the seed's error handler stored the bare function name. Runs are recorded by
record.py: one JSON line per execution in $DLQ_TEST_RECORD.
"""
import os

from celery import Celery

from record import _record

app = Celery("tasks", broker=os.environ.get(
    "DLQ_TEST_BROKER",
    f"amqp://guest:guest@127.0.0.1:{os.environ.get('DLQ_TEST_AMQP_PORT') or 5672}//",
))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
    # A worker whose remote control is off answers no `celery inspect`.
    worker_enable_remote_control=not os.environ.get("DLQ_TEST_NO_REMOTE_CONTROL"),
)
# Apps sharing a vhost keep their remote control apart with their own control_exchange.
if os.environ.get("DLQ_TEST_CONTROL_EXCHANGE"):
    app.conf.control_exchange = os.environ["DLQ_TEST_CONTROL_EXCHANGE"]


@app.task(bind=True)
def liberar_acesso_curso(self, *args, **kwargs):
    _record(self, args, kwargs)


@app.task(bind=True)
def enviar_email(self, *args, **kwargs):
    _record(self, args, kwargs)


@app.task(bind=True, name="matrícula:confirmar")
def confirmar(self, *args, **kwargs):
    """A registered name with a colon and non-ASCII letters."""
    _record(self, args, kwargs)

"""A Celery 5.5+ app as RabbitMQ recommends it today: quorum queues, a topic default exchange,
publisher confirms, so countdown/eta tasks take the broker's native delayed delivery (the
celery_delayed_* TTL hops that dead-letter into the work queues). The broker is
$DLQ_TEST_BROKER; each run appends a JSON line to $DLQ_TEST_RECORD.
"""
import json
import os
import sys

from celery import Celery

app = Celery("quorum_tasks", broker=os.environ["DLQ_TEST_BROKER"])
app.conf.update(
    task_default_queue_type="quorum",
    task_default_exchange_type="topic",
    broker_transport_options={"confirm_publish": True},
    task_serializer="json",
    accept_content=["json"],
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="quorum_tasks.add")
def add(x, y):
    with open(os.environ["DLQ_TEST_RECORD"], "a") as f:
        f.write(json.dumps({"task": "quorum_tasks.add", "args": [x, y]}) + "\n")
    return x + y


if __name__ == "__main__":
    # `python quorum_tasks.py N COUNTDOWN`: sends N tasks (with a countdown when > 0).
    n, countdown = int(sys.argv[1]), int(sys.argv[2])
    for i in range(n):
        add.apply_async((i, i), countdown=countdown or None)

"""The seed's own table replay, written the way the seed writes it (scenario 2 / its outbox
poller): select the pending rows, dispatch each one with Celery `send_task` on a broker with
`confirm_publish`, and mark that one row `reprocessada = true` with its own commit right after
its publish returned (per row, never per batch: the seed's "marcar uma linha por vez").

This is the baseline `dlq replay` is compared with. It is deliberately plain: no threads, no
pipelining, one connection each for the database and the broker, as an operator would write it.

Prints one JSON line on stdout: {"replayed": N, "loop_s": seconds spent in the loop}.
"""

import argparse
import json
import sys
import time

import psycopg
from celery import Celery


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--table", required=True)
    ap.add_argument("--broker", required=True)
    ap.add_argument("--queue", required=True)
    a = ap.parse_args()

    app = Celery("seed_replay", broker=a.broker)
    app.conf.broker_transport_options = {"confirm_publish": True}
    app.conf.task_serializer = "json"

    started = time.perf_counter()
    with psycopg.connect(a.dsn) as conn:
        rows = conn.execute(
            f'SELECT id, task_original, args FROM "{a.table}" WHERE NOT reprocessada ORDER BY id'
        ).fetchall()
        n = 0
        for row_id, task, args in rows:
            if isinstance(args, dict):
                app.send_task(task, kwargs=args, queue=a.queue)
            elif isinstance(args, list):
                app.send_task(task, args=args, queue=a.queue)
            else:
                app.send_task(task, queue=a.queue)
            conn.execute(
                f'UPDATE "{a.table}" SET reprocessada = true WHERE id = %s', (row_id,)
            )
            conn.commit()  # one row at a time, as the seed insists
            n += 1
    loop_s = time.perf_counter() - started
    print(json.dumps({"replayed": n, "loop_s": loop_s}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

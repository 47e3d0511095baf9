"""The hold-and-count consumer: the fifteen-line script an operator writes to count a DLQ
without changing it. pika, prefetch unlimited, manual acknowledgement: every message is held
unacknowledged, counted, and the channel is closed at the end, which gives them all back.

Counts the messages whose `x-exception-message` header matches --pattern (all when empty), stops
after --expect messages (or 30 s without one: the harness's check then fails on the count instead
of waiting for its timeout), and prints one JSON line: {"read": N, "matched": M, "loop_s": seconds
from the first consume to the last delivery}.
"""

import argparse
import json
import re
import time

import pika


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--queue", required=True)
    ap.add_argument("--expect", type=int, required=True)
    ap.add_argument("--pattern", default="")
    a = ap.parse_args()
    pattern = re.compile(a.pattern) if a.pattern else None
    conn = pika.BlockingConnection(pika.URLParameters(a.url))
    ch = conn.channel()
    ch.basic_qos(prefetch_count=0)
    read = matched = 0
    started = last = time.perf_counter()
    for method, props, _body in ch.consume(a.queue, auto_ack=False, inactivity_timeout=30):
        if method is None:  # nothing for 30 s: fewer messages than expected
            break
        read += 1
        if pattern is None:
            matched += 1
        else:
            v = (props.headers or {}).get("x-exception-message", b"")
            if pattern.search(v.decode(errors="replace") if isinstance(v, bytes) else str(v)):
                matched += 1
        last = time.perf_counter()
        if read >= a.expect:
            break
    loop_s = last - started
    ch.close()  # gives every held message back
    conn.close()
    print(json.dumps({"read": read, "matched": matched, "loop_s": loop_s}))


if __name__ == "__main__":
    main()

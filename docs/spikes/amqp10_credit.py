"""Does an AMQP 1.0 receiver on a RabbitMQ 4 quorum queue hold messages without using up
its credit, and settle them without being given more? (docs/QUEUES.md, "Still exposed").

AMQP 0-9-1 cannot do either: a held (unacknowledged) message uses one of the consumer's
prefetch, and each acknowledgement gives one back, so dlq cancels consumers to stop
credit reaching its own copies, and a cancelled consumer's messages are not given back
when its node dies.

Run against a RabbitMQ 4 broker with guest access from localhost:
    pip install python-qpid-proton
    python docs/spikes/amqp10_credit.py [AMQP_PORT [API_PORT]]
"""

import base64
import json
import sys
import time
import urllib.error
import urllib.request

from proton import Message
from proton.handlers import MessagingHandler
from proton.reactor import Container

AMQP = int(sys.argv[1]) if len(sys.argv) > 1 else 5672
API = int(sys.argv[2]) if len(sys.argv) > 2 else 15672
QUEUE = "spike.amqp10.credit"
N = 1000


def api(method, path, body=None):
    req = urllib.request.Request(f"http://127.0.0.1:{API}/api/{path}", method=method)
    req.add_header("Authorization", "Basic " + base64.b64encode(b"guest:guest").decode())
    if body is not None:
        req.add_header("content-type", "application/json")
        req.data = json.dumps(body).encode()
    try:
        with urllib.request.urlopen(req) as r:
            return json.load(r) if r.status == 200 else None
    except urllib.error.HTTPError as err:
        if err.code == 404 and method == "DELETE":
            return None
        raise


class Fill(MessagingHandler):
    """Sends N messages to the queue, each confirmed (accepted)."""

    def __init__(self):
        super().__init__()
        self.sent = self.confirmed = 0

    def on_start(self, e):
        conn = e.container.connect(f"amqp://guest:guest@127.0.0.1:{AMQP}", allowed_mechs="PLAIN")
        e.container.create_sender(conn, f"/queues/{QUEUE}")

    def on_sendable(self, e):
        while e.sender.credit and self.sent < N:
            e.sender.send(Message(body=str(self.sent).encode()))
            self.sent += 1

    def on_accepted(self, e):
        self.confirmed += 1
        if self.confirmed == N:
            e.connection.close()


class Hold(MessagingHandler):
    """Credit 100, then 100 more while the first 100 are held; then settles 150 and grants
    nothing: what arrives at each step."""

    def __init__(self):
        super().__init__(prefetch=0, auto_accept=False)
        self.got = []
        self.step = 0
        self.seen = []

    def on_start(self, e):
        self.conn = e.container.connect(
            f"amqp://guest:guest@127.0.0.1:{AMQP}", allowed_mechs="PLAIN"
        )
        self.rcv = e.container.create_receiver(self.conn, f"/queues/{QUEUE}")
        self.rcv.flow(100)
        e.container.schedule(2.0, self)

    def on_message(self, e):
        self.got.append(e.delivery)

    def on_timer_task(self, e):
        self.step += 1
        self.seen.append(len(self.got))
        if self.step == 1:
            self.rcv.flow(100)
            e.container.schedule(2.0, self)
        elif self.step == 2:
            for d in self.got[:150]:
                self.accept(d)
            e.container.schedule(2.0, self)
        else:
            self.conn.close()


api("DELETE", f"queues/%2f/{QUEUE}")
api("PUT", f"queues/%2f/{QUEUE}", {"durable": True, "arguments": {"x-queue-type": "quorum"}})
Container(Fill()).run()
hold = Hold()
Container(hold).run()
after_credit, after_more, after_settle = hold.seen
print(f"credit 100: {after_credit} delivered")
print(f"100 more credit, the first 100 still held: {after_more} delivered in all")
print(f"150 settled, no credit granted: {after_settle} delivered in all")
time.sleep(6)  # the management API's counts lag by up to 5 s
q = api("GET", f"queues/%2f/{QUEUE}")
print(f"queue: {q['messages_ready']} ready, {q['messages_unacknowledged']} unacknowledged")
api("DELETE", f"queues/%2f/{QUEUE}")

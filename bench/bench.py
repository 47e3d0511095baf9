"""dlq benchmarks: dlq side by side with what operators use today, measured in ONE run and
reported as ratios. Run it through `bench/run` (it prepares bench/.venv and the binary).

Scenarios (numbered as in the benchmark issue):
  1 queue_replay  100k dead letters DLQ -> the queue they died in: dlq vs a dynamic shovel vs an
                  aio-pika mover; plus dlq selective replay of 10%
  2 table_replay  10k and 100k failed-task rows on PostgreSQL: dlq vs the seed's Celery loop
 2b table_replay_redis  10k rows replayed into a Redis-backed Celery ($BENCH_REDIS_URL, default
                  redis://127.0.0.1:6379/0): dlq --broker-url vs the same seed loop on Redis
  3 scan          filter --count with a regex and with a jq expression over a 1M-row table;
    queue_scan    ... and over a 1M-message DLQ (regex, jq, --motivo) vs a hold-and-count consumer
  4 list          dlq list against 200 DLQs

Every run records wall time, peak RSS and CPU (user + system) of the measured process; the queue
scenarios also record the local broker's CPU (beam.smp) over each run.

Every run is checked (queue depths, marked rows, counts); a scenario whose check fails makes the
run exit 1. Scenarios that need dlq features still being written are feature-detected and
skipped with a "not available yet" line; the baselines still run so their numbers are ready.
Everything lives under names with a per-run prefix (PostgreSQL tables `dlqbench_<pid>_...`, a
RabbitMQ vhost `dlqbench-<pid>-...`) and is removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime as dt
import ipaddress
import json
import multiprocessing
import os
import platform
from shlex import quote as shlex_quote
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import aiormq
import psycopg
from pamqp.commands import Basic

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable

PG_URL = os.environ.get("BENCH_PG_URL", "postgres://postgres@127.0.0.1:5432/test")
AMQP_BASE = os.environ.get("BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672").rstrip("/")
MGMT_URL = os.environ.get("BENCH_MANAGEMENT_URL", "http://127.0.0.1:15672").rstrip("/")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")

# Sizes. --smoke keeps every scenario but shrinks it so the whole run takes seconds.
FULL = {
    "replay_sizes": [10_000, 100_000],
    # --window 1 is the serial case (as slow as the seed: both wait for each confirm); it is
    # measured at 10k only, where it costs about as much as the seed loop.
    "windows": {10_000: [1, 16, 64], 100_000: [16, 64]},
    "repeats": {10_000: 3, 100_000: 1},
    "scan_rows": 1_000_000,
    "scan_repeats": 2,
    "queue_msgs": 100_000,
    # 64 is dlq's default; 1000 is the shovel's prefetch: the same duplicate window (what a
    # killed mover can leave in both queues) as the broker's own mover.
    # 0: no --window (dlq's default: adaptive from 64 up to 1024).
    "queue_windows": [0, 16, 64, 1000],
    "mover_prefetch": 100,
    "queue_scan_msgs": 1_000_000,
    "list_dlqs": 200,
    "list_dead_per_dlq": 3,
    "list_repeats": 5,
    # Table replay into a Redis-backed Celery (no worker: the pushed tasks are counted).
    "redis_rows": 10_000,
    "redis_windows": [64, 256],
    "redis_repeats": 3,
    # dlq browse on a terminal (tmux): the first records screen of a big DLQ.
    "browse_msgs": 100_000,
    "browse_repeats": 3,
    "timeout": 3600,
}
SMOKE = {
    "replay_sizes": [300],
    "windows": {300: [16]},
    "repeats": {300: 1},
    "scan_rows": 3_000,
    "scan_repeats": 1,
    "queue_msgs": 300,
    "queue_windows": [16],
    "mover_prefetch": 100,
    "queue_scan_msgs": 2_000,
    "list_dlqs": 5,
    "list_dead_per_dlq": 2,
    "list_repeats": 1,
    "redis_rows": 200,
    "redis_windows": [16],
    "redis_repeats": 1,
    "browse_msgs": 2_000,
    "browse_repeats": 1,
    "timeout": 120,
}
SCENARIOS = ["table_replay", "scan", "queue_replay", "queue_scan", "list", "table_replay_redis", "browse"]

# The selective replay picks the 10% of dead letters whose error is a KeyError.
SELECTIVE_MOTIVO = "KeyError"
# Scans: a regex that matches the KeyError rows/messages only, and a jq expression on the payload.
SCAN_REGEX = r"KeyError: '\w+'"
TABLE_JQ = ".payload.pedido_id % 7 == 0"
QUEUE_JQ = ".payload.curso_id == 7"
# The queue scan's baseline: what an operator writes to count a DLQ without changing it.
HOLD_AND_COUNT = "hold-and-count consumer (pika, prefetch unlimited, manual ack, close)"

MIB = 1024 * 1024


# ---------------------------------------------------------------------------------------------
# Results


@dataclass
class Measurement:
    scenario: str
    case: str  # e.g. "10000 rows"
    variant: str  # e.g. "dlq --window 16", "seed loop"
    size: int
    repeat: int = 0
    wall_s: float | None = None
    # The time the rate is computed from: dlq's whole process; a baseline's own loop (conservative).
    timed_s: float | None = None
    rate: float | None = None
    peak_rss_kib: int | None = None
    ok: bool = False
    check: str = ""
    notes: str = ""
    role: str = "dlq"  # dlq | baseline | reference
    # CPU seconds (user + system) of the measured process (dlq, or a baseline script as a whole,
    # imports included), and of the local broker (beam.smp) over the same run; None = not measured.
    cpu_s: float | None = None
    broker_cpu_s: float | None = None

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Measurement:
        """Older results files lack the newer fields (their defaults apply); keys this version
        does not know are dropped instead of failing the rerender."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


@dataclass
class Skip:
    scenario: str
    what: str
    why: str


@dataclass
class Results:
    mode: str
    started: str
    machine: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    measurements: list[Measurement] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    features: dict[str, Any] = field(default_factory=dict)
    summary: list[dict[str, Any]] = field(default_factory=list)
    targets: list[dict[str, Any]] = field(default_factory=list)

    def add(self, m: Measurement) -> Measurement:
        self.measurements.append(m)
        mark = "ok" if m.ok else "FAILED"
        rate = f"{m.rate:,.0f}/s" if m.rate else "-"
        rss = f"{m.peak_rss_kib / 1024:.1f} MiB" if m.peak_rss_kib else "-"
        wall = f"{m.wall_s:.3f}s" if m.wall_s is not None else "-"
        cpu = f"{m.cpu_s:.2f}s" if m.cpu_s is not None else "-"
        bcpu = f" broker {m.broker_cpu_s:.2f}s" if m.broker_cpu_s is not None else ""
        log(f"  {m.scenario} | {m.case} | {m.variant} #{m.repeat}: {wall} {rate} rss {rss} cpu {cpu}{bcpu} "
            f"[{mark}] {m.check}")
        if not m.ok:
            self.failures.append(f"{m.scenario} / {m.case} / {m.variant}: {m.check}")
        return m

    def skip(self, scenario: str, what: str, why: str) -> None:
        self.skipped.append(Skip(scenario, what, why))
        log(f"  {scenario}: {what}: not available yet ({why})")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Processes: wall time, CPU and peak RSS
#
# CPU (user + system) and peak RSS come from GNU time (`/usr/bin/time -f "%U %S %M"`), not from
# this process's own wait4():
# a child forked from this ~50 MiB Python process starts with the parent's high-water mark, and
# the kernel keeps it across exec, so wait4's ru_maxrss would never report less than the
# parent's size. GNU time is a tiny process that forks the command itself. Without it (bench/run
# installs the Debian package `time` when it can), a small Python helper does the same job and
# the floor is that helper's ~10 MiB.

GNU_TIME = "/usr/bin/time" if os.access("/usr/bin/time", os.X_OK) else None
RSS_HELPER = r"""
import os, sys
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, ru = os.wait4(pid, 0)
open(sys.argv[1], "w").write(f"{ru.ru_utime} {ru.ru_stime} {ru.ru_maxrss}")
sys.exit(os.waitstatus_to_exitcode(status) & 0xFF)
"""
RSS_METHOD = ("GNU time %M (the command's own peak RSS)" if GNU_TIME
              else "python fork+wait4 helper (floor ~10 MiB)")
CPU_METHOD = ("GNU time %U + %S (the command and the children it waited for)" if GNU_TIME
              else "python fork+wait4 helper, ru_utime + ru_stime")


@dataclass
class Proc:
    rc: int
    wall_s: float
    maxrss_kib: int | None
    stdout: str
    stderr: str
    timed_out: bool = False
    cpu_s: float | None = None  # user + system seconds of the command


def run_proc(cmd: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> Proc:
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, \
            tempfile.NamedTemporaryFile("r", suffix=".rss") as rss:
        if GNU_TIME:
            full = [GNU_TIME, "-f", "%U %S %M", "-o", rss.name, *cmd]
        else:
            full = [sys.executable, "-c", RSS_HELPER, rss.name, *cmd]
        t0 = time.perf_counter()
        p = subprocess.Popen(full, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                             start_new_session=True)
        timed_out = False
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(p.pid, 9)
            p.wait()
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
        maxrss = cpu = None
        try:
            # GNU time writes "Command exited with non-zero status N" before its line on failure.
            user, system, kib = Path(rss.name).read_text().strip().splitlines()[-1].split()
            cpu, maxrss = round(float(user) + float(system), 6), int(kib)
        except (ValueError, IndexError, OSError):
            pass
        return Proc(rc=p.returncode, wall_s=wall, maxrss_kib=maxrss, cpu_s=cpu,
                    stdout=out.read().decode(errors="replace"), stderr=stderr, timed_out=timed_out)


def tail(s: str, n: int = 6) -> str:
    lines = [line for line in s.strip().splitlines() if line.strip()]
    return " | ".join(lines[-n:])


def failure(p: Proc) -> str:
    """How a process failed, for a measurement's check."""
    return f"exit {p.rc}{' (timeout)' if p.timed_out else ''}: {tail(p.stderr)}"


def script_loop(m: "Measurement", p: Proc) -> dict[str, Any] | None:
    """A baseline script's run into `m`: the process's figures, and the rate from its own loop
    (`loop_s` in the JSON line it prints last). None, with `m.check` saying why, if it failed."""
    m.wall_s, m.peak_rss_kib, m.cpu_s = p.wall_s, p.maxrss_kib, p.cpu_s
    m.ok = p.rc == 0 and not p.timed_out
    if not m.ok:
        m.check = failure(p)
        return None
    out = json.loads(p.stdout.strip().splitlines()[-1])
    m.timed_s = out["loop_s"]
    m.rate = m.size / m.timed_s
    return out


class Dlq:
    """Runs the dlq binary with a clean environment (no DLQ_* variables, no config file)."""

    def __init__(self, binary: str, timeout: float):
        self.binary = binary
        self.timeout = timeout
        self.confdir = tempfile.mkdtemp(prefix="dlqbench-conf-")
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("DLQ_") and k not in ("DATABASE_URL", "AMQP_URL")}
        env.update(XDG_CONFIG_HOME=self.confdir, NO_COLOR="1", COLUMNS="200")
        # dlq derives the management API from the AMQP host on port 15672: a management URL
        # given to the benchmarks (another broker's port) is given to dlq as well.
        if "BENCH_MANAGEMENT_URL" in os.environ:
            env["DLQ_MANAGEMENT_URL"] = MGMT_URL + "/"
        self.env = env

    def __call__(self, *args: str, timeout: float | None = None) -> Proc:
        return run_proc([self.binary, *args], env=self.env, timeout=timeout or self.timeout)

    def version(self) -> str:
        p = self("--version")
        return p.stdout.strip()


# ---------------------------------------------------------------------------------------------
# RabbitMQ: management API (vhosts, shovels) and AMQP (topology, fill, exact depths)


def amqp_creds() -> tuple[str, str]:
    u = urllib.parse.urlparse(AMQP_BASE)
    return urllib.parse.unquote(u.username or "guest"), urllib.parse.unquote(u.password or "guest")


def amqp_url(vhost: str) -> str:
    return f"{AMQP_BASE}/{urllib.parse.quote(vhost, safe='')}"


def mgmt(method: str, path: str, body: Any = None, timeout: float = 30) -> tuple[int, Any]:
    user, pw = amqp_creds()
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        MGMT_URL + "/api" + path, method=method, data=data,
        headers={"content-type": "application/json",
                 "authorization": "Basic " + base64.b64encode(f"{user}:{pw}".encode()).decode()})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            return r.status, (json.loads(raw) if raw else None)
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def q(vhost: str) -> str:
    return urllib.parse.quote(vhost, safe="")


def create_vhost(vhost: str) -> None:
    code, body = mgmt("PUT", f"/vhosts/{q(vhost)}", {})
    if code not in (201, 204):
        raise RuntimeError(f"cannot create vhost {vhost}: {code} {body}")
    user, _ = amqp_creds()
    code, body = mgmt("PUT", f"/permissions/{q(vhost)}/{q(user)}",
                      {"configure": ".*", "write": ".*", "read": ".*"})
    if code not in (201, 204):
        raise RuntimeError(f"cannot grant {user} on {vhost}: {code} {body}")


def delete_vhost(vhost: str) -> None:
    mgmt("DELETE", f"/vhosts/{q(vhost)}", timeout=120)


# Broker CPU: the broker's work is half of every queue scenario (a shovel is nothing else) and it
# shares the cores with the client, so a client that saves its own CPU by making the broker work
# harder has not saved anything. When RabbitMQ runs on this machine, its CPU time (utime + stime
# of beam.smp, all its threads) is read from /proc just before and after each measured run.

CLK_TCK = os.sysconf("SC_CLK_TCK")


def find_beam_pid() -> tuple[int | None, str]:
    """The local RabbitMQ node's pid (None when it is not local), and how it was found or why not."""
    host = urllib.parse.urlparse(AMQP_BASE).hostname or "localhost"
    try:
        local = ipaddress.ip_address(socket.gethostbyname(host)).is_loopback
    except (OSError, ValueError):
        local = False
    if not local:
        return None, f"not measured: the broker ({host}) is not on this machine"
    pids = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        try:
            if comm.read_text().strip() == "beam.smp":
                pids.append(int(comm.parent.name))
        except (OSError, ValueError):
            continue  # the process ended while scanning
    if len(pids) == 1:
        return pids[0], f"utime + stime of beam.smp (pid {pids[0]}) from /proc/<pid>/stat, around each run"
    if not pids:
        return None, "not measured: no beam.smp process visible (another container or user namespace?)"
    # Two Erlang VMs (a second node, an Elixir app): which one serves the AMQP port is not worth guessing.
    return None, f"not measured: {len(pids)} beam.smp processes ({', '.join(map(str, sorted(pids)))})"


def proc_cpu_s(pid: int | None) -> float | None:
    """utime + stime of a process (fields 14 and 15 of /proc/<pid>/stat), in seconds."""
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 2, the command name, is in parentheses and may contain spaces: count from after it.
    rest = stat[stat.rindex(")") + 2:].split()  # rest[0] is field 3
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


class Broker:
    """One AMQP connection to a vhost, driven from synchronous code.

    Heartbeats are off: this loop only runs between the measured processes, which can take many
    minutes (the seed loop over 100k rows), and the broker would close a connection that missed
    its heartbeats. A closed connection is reopened on the next call anyway."""

    def __init__(self, vhost: str):
        self.vhost = vhost
        self.loop = asyncio.new_event_loop()
        self._connect()

    def _connect(self) -> None:
        self.conn = self.run(aiormq.connect(amqp_url(self.vhost) + "?heartbeat=0"))
        self.ch = self.run(self.conn.channel())

    def run(self, coro):
        return self.loop.run_until_complete(coro)

    def close(self) -> None:
        try:
            self.run(self.conn.close())
        except Exception:
            pass
        self.loop.close()

    def _channel(self):
        if self.conn.is_closed:
            self._connect()
        if self.ch.is_closed:
            self.ch = self.run(self.conn.channel())
        return self.ch

    def depth(self, queue: str) -> int:
        """Exact ready count (passive declare)."""
        r = self.run(self._channel().queue_declare(queue, passive=True))
        return r.message_count

    def purge(self, *queues: str) -> None:
        for name in queues:
            self.run(self._channel().queue_purge(name))

    def declare_queue(self, name: str, arguments: dict | None = None) -> None:
        self.run(self._channel().queue_declare(name, durable=True, arguments=arguments or {}))

    def declare_dead_letter_topology(self, prefix: str) -> tuple[str, str, str]:
        """The seed's topology: PREFIX.processar dead-letters through PREFIX.dlx into PREFIX.dlq."""
        main, dlx, dlq = f"{prefix}.processar", f"{prefix}.dlx", f"{prefix}.dlq"
        ch = self._channel()
        self.run(ch.exchange_declare(dlx, exchange_type="direct", durable=True))
        self.run(ch.queue_declare(dlq, durable=True))
        self.run(ch.queue_bind(dlq, dlx, routing_key=f"{prefix}.falhas"))
        self.run(ch.queue_declare(main, durable=True, arguments={
            "x-dead-letter-exchange": dlx, "x-dead-letter-routing-key": f"{prefix}.falhas"}))
        return main, dlx, dlq

    def wait_depth(self, queue: str, want: int, timeout: float, exact: bool = True) -> int:
        deadline = time.monotonic() + timeout
        n = self.depth(queue)
        while (n != want if exact else n < want) and time.monotonic() < deadline:
            time.sleep(0.05)
            n = self.depth(queue)
        return n

    def drain_count(self, queue: str, predicate: Callable[[dict], bool]) -> tuple[int, int]:
        """Consumes (and acks) everything in `queue`: (messages, messages matching predicate)."""
        self._channel()  # reconnects if needed

        async def go() -> tuple[int, int]:
            ch = await self.conn.channel()
            await ch.basic_qos(prefetch_count=1000)
            total = matched = 0
            while True:
                try:
                    m = await ch.basic_get(queue, no_ack=True, timeout=10)
                except Exception:
                    break
                if isinstance(m.delivery, Basic.GetEmpty):
                    break
                total += 1
                if predicate(m.header.properties.headers or {}):
                    matched += 1
            await ch.close()
            return total, matched
        return self.run(go())


def body_for(i: int) -> bytes:
    """A ~300-byte JSON event like the seed's matricula events."""
    return (
        '{"evento_id":"%08x-5eed-4000-8000-%012x","tipo":"matricula.confirmada",'
        '"matricula_id":%d,"usuario_id":%d,"curso_id":%d,"valor":"%d.%02d","moeda":"BRL",'
        '"origem":"checkout-web","criado_em":"2026-11-%02dT%02d:%02d:%02dZ","tentativas":5,'
        '"observacao":"pagamento aprovado; liberar acesso ao conteudo do curso"}'
        % (i, i * 7919, 100000 + i, 5000 + i % 3000, i % 50, 100 + i % 900, i % 100,
           1 + i % 28, i % 24, i % 60, (i * 7) % 60)
    ).encode()


KEYERROR_TEXT = "KeyError: 'matricula_id'"
TIMEOUT_TEXT = "ServicoConteudoIndisponivel: conteudo-svc GET /cursos/acesso timed out after 30s"


def is_keyerror(i: int) -> bool:
    return i % 10 == 0


def has_keyerror(headers: dict) -> bool:
    v = headers.get("x-exception-message")
    return (v.decode(errors="replace") if isinstance(v, bytes) else v) == KEYERROR_TEXT


async def _fill(url: str, main_queue: str, start: int, stop: int) -> None:
    conn = await aiormq.connect(url)
    ch = await conn.channel(publisher_confirms=True)
    # expiration "0": the broker dead-letters each message at once (reason "expired") through
    # the main queue's x-dead-letter-exchange, writing a genuine x-death history.
    common = dict(expiration="0", delivery_mode=2, content_type="application/json")
    props_key = Basic.Properties(headers={"x-exception-message": KEYERROR_TEXT}, **common)
    props_other = Basic.Properties(headers={"x-exception-message": TIMEOUT_TEXT}, **common)
    pending = []
    for i in range(start, stop):
        pending.append(ch.basic_publish(body_for(i), routing_key=main_queue,
                                        properties=props_key if is_keyerror(i) else props_other))
        if len(pending) >= 2000:
            await asyncio.gather(*pending)
            pending = []
    if pending:
        await asyncio.gather(*pending)
    await conn.close()


def _fill_proc(args: tuple[str, str, int, int]) -> None:
    asyncio.run(_fill(*args))


def fill_dlq(broker: Broker, main_queue: str, dlq: str, n: int, timeout: float) -> float:
    """Puts n genuine dead letters into `dlq` (plus what it holds); returns seconds taken."""
    before = broker.depth(dlq)
    t0 = time.perf_counter()
    procs = 2 if n >= 20_000 else 1
    chunks = [(amqp_url(broker.vhost), main_queue, k * n // procs, (k + 1) * n // procs)
              for k in range(procs)]
    if procs == 1:
        _fill_proc(chunks[0])
    else:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(procs) as pool:
            pool.map(_fill_proc, chunks)
    got = broker.wait_depth(dlq, before + n, timeout)
    if got != before + n:
        raise RuntimeError(f"filling {dlq}: expected {before + n} dead letters, found {got}")
    return time.perf_counter() - t0


# ---------------------------------------------------------------------------------------------
# PostgreSQL


def pg() -> psycopg.Connection:
    return psycopg.connect(PG_URL, autocommit=True)


def pg_scalar(sql: str, params: tuple = ()) -> Any:
    with pg() as c:
        return c.execute(sql, params).fetchone()[0]


def fill_table(table: str, n: int, mix: bool) -> None:
    """n pending rows. mix=False: the seed's scenario 2 (processar_pagamento / IntegrityError);
    mix=True: three tasks and reasons, 10% KeyError (for the scans)."""
    if mix:
        rows = f"""
        SELECT CASE i % 3 WHEN 0 THEN 'processar_pagamento' WHEN 1 THEN 'enviar_email'
                          ELSE 'liberar_acesso_curso' END,
               jsonb_build_object('pedido_id', 100000 + i, 'valor', (10 + i % 990)::text || '.'
                                  || lpad((i % 100)::text, 2, '0'), 'moeda', NULL,
                                  'email', 'aluno' || i || '@example.com'),
               CASE WHEN i % 10 = 0 THEN 'KeyError: ''matricula_id'''
                    WHEN i % 3 = 0 THEN 'IntegrityError: null value in column "moeda" of relation '
                         || '"pagamentos" violates not-null constraint DETAIL: Failing row contains ('
                         || (100000 + i) || ', null).'
                    ELSE 'TimeoutError: SMTP timed out after ' || (10 + i % 5) || 's' END,
               now() - (i || ' seconds')::interval, false
        FROM generate_series(1, {int(n)}) AS i"""
    else:
        rows = f"""
        SELECT 'processar_pagamento',
               jsonb_build_object('pedido_id', 100000 + i, 'valor', (10 + i % 990)::text || '.'
                                  || lpad((i % 100)::text, 2, '0')),
               'IntegrityError: null value in column "moeda" of relation "pagamentos" violates '
               || 'not-null constraint DETAIL: Failing row contains (' || (100000 + i) || ', null).',
               now() - (i || ' seconds')::interval, false
        FROM generate_series(1, {int(n)}) AS i"""
    with pg() as c:
        c.execute(f'TRUNCATE "{table}" RESTART IDENTITY')
        c.execute(f'INSERT INTO "{table}" (task_original, args, motivo, criada_em, reprocessada) {rows}')
        c.execute(f'VACUUM ANALYZE "{table}"')
        c.execute("CHECKPOINT")  # every run starts from the same WAL/buffer state


# ---------------------------------------------------------------------------------------------
# The benchmark


class Bench:
    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.mode = "smoke" if args.smoke else "full"
        self.cfg = dict(SMOKE if args.smoke else FULL)
        if args.replay_sizes:
            self.cfg["replay_sizes"] = [int(x) for x in args.replay_sizes.split(",")]
        if args.windows:
            self.cfg["windows"] = {n: [int(x) for x in args.windows.split(",")] for n in self.cfg["replay_sizes"]}
        if args.queue_windows:
            self.cfg["queue_windows"] = [int(x) for x in args.queue_windows.split(",")]
        for key in ("scan_rows", "queue_msgs", "queue_scan_msgs", "list_dlqs"):
            if getattr(args, key) is not None:
                self.cfg[key] = getattr(args, key)
        if args.repeats is not None:
            self.cfg["repeats"] = {n: args.repeats for n in self.cfg["replay_sizes"]}
            self.cfg["scan_repeats"] = args.repeats
            self.cfg["list_repeats"] = max(args.repeats, 1)
        self.only = set(args.only.split(",")) if args.only else set(SCENARIOS)
        unknown = self.only - set(SCENARIOS)
        if unknown:
            raise SystemExit(f"unknown scenario(s): {', '.join(sorted(unknown))}; known: {', '.join(SCENARIOS)}")
        self.run_id = f"{os.getpid()}_{int(time.time())}"
        self.prefix = f"dlqbench_{self.run_id}"  # PostgreSQL tables
        self.vhost = f"dlqbench-{self.run_id.replace('_', '-')}"
        self.dlq = Dlq(os.environ["DLQ_BIN"], self.cfg["timeout"])
        self.res = Results(mode=self.mode, started=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
        self.res.config = {k: v if not isinstance(v, dict) else {str(a): b for a, b in v.items()}
                           for k, v in self.cfg.items()}
        self.res.config["scenarios"] = [s for s in SCENARIOS if s in self.only]
        self.tables: list[str] = []
        self.broker: Broker | None = None
        self.beam_pid, self.broker_cpu_method = find_beam_pid()

    # -- helpers -------------------------------------------------------------------------------

    def table(self, name: str) -> str:
        t = f"{self.prefix}_{name}"
        p = self.dlq("--database-url", PG_URL, "--table", t, "init")
        if p.rc != 0:
            raise RuntimeError(f"dlq init {t}: exit {p.rc}: {tail(p.stderr)}")
        self.tables.append(t)
        return t

    def db_args(self, table: str) -> list[str]:
        return ["--database-url", PG_URL, "--table", table]

    def amqp_args(self) -> list[str]:
        return ["--amqp-url", amqp_url(self.vhost)]

    def settle_broker(self, max_s: float = 15) -> None:
        """Waits (at most max_s) until the broker is idle, under 10% of a core: a fill, a purge or a
        big give-back leaves it work (message-store writes and compaction) that would otherwise
        land in the next run's broker CPU and time."""
        deadline = time.monotonic() + max_s
        while self.beam_pid is not None and time.monotonic() < deadline:
            c0 = proc_cpu_s(self.beam_pid)
            time.sleep(0.3)
            c1 = proc_cpu_s(self.beam_pid)
            if c0 is None or c1 is None or c1 - c0 < 0.03:
                return

    @contextlib.contextmanager
    def measure_broker(self, m: Measurement):
        """Settles the broker, then sets m.broker_cpu_s to its CPU over the block (when local)."""
        self.settle_broker()
        c0 = proc_cpu_s(self.beam_pid)
        yield
        c1 = proc_cpu_s(self.beam_pid)
        if c0 is not None and c1 is not None:
            m.broker_cpu_s = round(c1 - c0, 6)  # whole clock ticks, without float noise

    # -- machine facts -------------------------------------------------------------------------

    def machine(self) -> dict[str, Any]:
        def cmd(*c: str) -> str:
            try:
                return subprocess.run(c, capture_output=True, text=True, timeout=30).stdout.strip()
            except Exception as e:  # noqa: BLE001
                return f"unknown ({e})"

        mem = cpu = ""
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        _, overview = mgmt("GET", "/overview")
        overview = overview if isinstance(overview, dict) else {}
        commit = cmd("git", "-C", str(ROOT), "rev-parse", "--short", "HEAD")
        dirty = cmd("git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no")
        return {
            "nproc": os.cpu_count(),
            "cpu": cpu,
            "memory": mem,
            "kernel": platform.release(),
            "os": cmd("sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"),
            "rustc": cmd("rustc", "--version"),
            "dlq": self.dlq.version(),
            "dlq_binary": os.environ.get("DLQ_BIN"),
            "dlq_profile": os.environ.get("DLQ_BIN_PROFILE", "as given (DLQ_BIN)"),
            "git_commit": commit + (" (dirty)" if dirty else ""),
            "rabbitmq": overview.get("rabbitmq_version", "unknown"),
            "erlang": overview.get("erlang_version", "unknown"),
            "postgresql": pg_scalar("SHOW server_version"),
            "postgresql_settings": {k: pg_scalar(f"SHOW {k}") for k in
                                    ("synchronous_commit", "fsync", "shared_buffers", "max_connections")},
            "python": platform.python_version(),
            "peak_rss_method": RSS_METHOD,
            "cpu_method": CPU_METHOD,
            "broker_cpu_method": self.broker_cpu_method,
            "loadavg_start": os.getloadavg(),
            "shared_machine_note": "2 cores shared with other developers' builds while measuring: "
                                   "compare ratios measured side by side, not absolute times",
        }

    # -- cleanup -------------------------------------------------------------------------------

    @staticmethod
    def stale(name: str, sep: str) -> bool:
        """dlqbench<sep><pid><sep><ts>...: left by a run whose process is gone."""
        parts = name.split(sep)
        if len(parts) < 3 or not parts[1].isdigit():
            return False
        try:
            os.kill(int(parts[1]), 0)
            return False
        except ProcessLookupError:
            return True
        except PermissionError:
            return False

    def clean_stale(self) -> None:
        with pg() as c:
            names = [r[0] for r in c.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE 'dlqbench\\_%'").fetchall()]
            for t in names:
                if self.stale(t, "_"):
                    c.execute(f'DROP TABLE IF EXISTS "{t}"')
        code, vhosts = mgmt("GET", "/vhosts")
        if code == 200:
            for v in vhosts:
                if v["name"].startswith("dlqbench-") and self.stale(v["name"], "-"):
                    delete_vhost(v["name"])

    def cleanup(self) -> None:
        if self.broker:
            self.broker.close()
        if not self.args.keep:
            with pg() as c:
                for t in self.tables:
                    c.execute(f'DROP TABLE IF EXISTS "{t}"')
            delete_vhost(self.vhost)
        shutil.rmtree(self.dlq.confdir, ignore_errors=True)

    # -- scenario 2: table replay --------------------------------------------------------------

    def table_replay(self) -> None:
        log("\n== 2. table replay (PostgreSQL): dlq replay vs the seed's Celery loop")
        b = self.broker
        queue = f"{self.prefix}.celery"
        b.declare_queue(queue)  # no consumers: replayed tasks wait there and are counted
        for n in self.cfg["replay_sizes"]:
            table = self.table(f"replay_{n}")
            variants: list[tuple[str, Callable[[], Measurement]]] = [
                ("seed loop (Celery send_task + UPDATE/commit per row)",
                 lambda n=n, table=table: self.seed_run(n, table, queue))]
            for w in self.cfg["windows"].get(n, [16]):
                variants.append((f"dlq replay --window {w}",
                                 lambda n=n, table=table, w=w: self.dlq_table_run(n, table, queue, w)))
            # Optional: the batched-claim design docs/BENCHMARKS.md proposes, measured side by side
            # (examples/table_replay_probe.rs; not part of the default run).
            probe = os.environ.get("BENCH_PROBE_BIN")
            if probe:
                for w, k in ((64, 16), (256, 32)):
                    variants.append((f"probe: batched claims --window {w} batch {k}",
                                     lambda n=n, table=table, w=w, k=k: self.probe_run(probe, n, table, queue, w, k)))
            repeats = self.cfg["repeats"].get(n, 1)
            for r in range(repeats):
                # Rotate the order each round so a slow phase of the shared machine does not
                # always hit the same variant.
                order = variants[r % len(variants):] + variants[:r % len(variants)]
                for name, fn in order:
                    fill_table(table, n, mix=False)
                    b.purge(queue)
                    m = fn()
                    m.repeat = r
                    m.variant = name
                    self.res.add(m)
            b.purge(queue)

    def verify_table_replay(self, m: Measurement, n: int, table: str, queue: str) -> None:
        depth = self.broker.depth(queue)
        marked = pg_scalar(f'SELECT count(*) FROM "{table}" WHERE reprocessada')
        m.ok = m.ok and depth == n and marked == n
        m.check = (m.check + "; " if m.check else "") + f"queue holds {depth}/{n}, rows marked {marked}/{n}"

    def seed_run(self, n: int, table: str, queue: str) -> Measurement:
        m = Measurement("table_replay", f"{n} rows", "seed", n, role="baseline")
        p = run_proc([PY, str(HERE / "seed_replay.py"), "--dsn", PG_URL, "--table", table,
                      "--broker", amqp_url(self.vhost), "--queue", queue], timeout=self.cfg["timeout"])
        if script_loop(m, p) is not None:
            m.notes = f"process wall {p.wall_s:.2f}s; rate from its loop ({m.timed_s:.2f}s), imports excluded"
        self.verify_table_replay(m, n, table, queue)
        return m

    def dlq_table_run(self, n: int, table: str, queue: str, window: int) -> Measurement:
        m = self.dlq_replay(Measurement("table_replay", f"{n} rows", "dlq", n), table, queue, window,
                            self.amqp_args())
        self.verify_table_replay(m, n, table, queue)
        return m

    def dlq_replay(self, m: Measurement, table: str, queue: str, window: int,
                   broker_args: list[str]) -> Measurement:
        """`dlq replay --yes` of a whole table into `queue`: timed, and checked by its report."""
        # No worker runs in the benchmark: --no-worker-check (the target check still runs).
        p = self.dlq(*self.db_args(table), *broker_args, "-o", "json", "replay", "--yes", "--no-worker-check",
                     "--to-queue", queue, "--window", str(window))
        m.wall_s = m.timed_s = p.wall_s
        m.peak_rss_kib, m.cpu_s = p.maxrss_kib, p.cpu_s
        m.rate = m.size / p.wall_s
        m.ok = p.rc == 0 and not p.timed_out
        if m.ok:
            rep = json.loads(p.stdout.strip().splitlines()[-1])
            if rep.get("succeeded") != m.size:
                m.ok = False
                m.check = f"report says {rep.get('succeeded')} replayed"
        else:
            m.check = failure(p)
        return m

    def probe_run(self, probe: str, n: int, table: str, queue: str, window: int, batch: int) -> Measurement:
        m = Measurement("table_replay", f"{n} rows", "probe", n, role="probe")
        p = run_proc([probe, PG_URL, table, amqp_url(self.vhost), queue, str(window), str(batch)],
                     timeout=self.cfg["timeout"])
        m.wall_s = m.timed_s = p.wall_s
        m.peak_rss_kib, m.cpu_s = p.maxrss_kib, p.cpu_s
        m.rate = n / p.wall_s
        m.ok = p.rc == 0 and not p.timed_out
        if not m.ok:
            m.check = f"exit {p.rc}: {tail(p.stderr)}"
        self.verify_table_replay(m, n, table, queue)
        return m

    # -- scenario 2b: table replay into a Redis-backed Celery -----------------------------------

    def table_replay_redis(self) -> None:
        log("\n== 2b. table replay (PostgreSQL) to Celery on Redis: dlq replay vs the seed's Celery loop")
        import redis  # bench/.venv: celery[redis]

        r = redis.Redis.from_url(REDIS_URL)
        n = self.cfg["redis_rows"]
        queue = f"{self.prefix}.redis"
        table = self.table(f"replay_redis_{n}")
        variants: list[tuple[str, Callable[[], Measurement]]] = [
            ("seed loop (Celery send_task + UPDATE/commit per row)",
             lambda: self.seed_redis_run(r, n, table, queue))]
        for w in self.cfg["redis_windows"]:
            variants.append((f"dlq replay --broker-url redis:// --window {w}",
                             lambda w=w: self.dlq_redis_run(r, n, table, queue, w)))
        try:
            for rnd in range(self.cfg["redis_repeats"]):
                order = variants[rnd % len(variants):] + variants[:rnd % len(variants)]
                for name, fn in order:
                    fill_table(table, n, mix=False)
                    self.reset_redis_queue(r, queue)
                    m = fn()
                    m.repeat = rnd
                    m.variant = name
                    self.res.add(m)
        finally:
            r.delete(*self.redis_keys(queue))

    @staticmethod
    def redis_keys(queue: str) -> list[str]:
        """kombu's keys for the queue: its priority lists and its binding."""
        return [queue] + [f"{queue}\x06\x16{p}" for p in (3, 6, 9)] + [f"_kombu.binding.{queue}"]

    def reset_redis_queue(self, r: Any, queue: str) -> None:
        """An empty queue, declared as a worker started with -Q would (kombu's binding set)."""
        r.delete(*self.redis_keys(queue))
        r.sadd(f"_kombu.binding.{queue}", f"{queue}\x06\x16\x06\x16{queue}")

    def verify_redis_replay(self, r: Any, m: Measurement, n: int, table: str, queue: str) -> None:
        depth = r.llen(queue)
        marked = pg_scalar(f'SELECT count(*) FROM "{table}" WHERE reprocessada')
        m.ok = m.ok and depth == n and marked == n
        m.check = (m.check + "; " if m.check else "") + f"list holds {depth}/{n}, rows marked {marked}/{n}"

    def seed_redis_run(self, r: Any, n: int, table: str, queue: str) -> Measurement:
        m = Measurement("table_replay_redis", f"{n} rows", "seed", n, role="baseline")
        p = run_proc([PY, str(HERE / "seed_replay.py"), "--dsn", PG_URL, "--table", table,
                      "--broker", REDIS_URL, "--queue", queue], timeout=self.cfg["timeout"])
        if script_loop(m, p) is not None:
            m.notes = f"process wall {p.wall_s:.2f}s; rate from its loop ({m.timed_s:.2f}s), imports excluded"
        self.verify_redis_replay(r, m, n, table, queue)
        return m

    def dlq_redis_run(self, r: Any, n: int, table: str, queue: str, window: int) -> Measurement:
        m = self.dlq_replay(Measurement("table_replay_redis", f"{n} rows", "dlq", n), table, queue, window,
                            ["--broker-url", REDIS_URL])
        self.verify_redis_replay(r, m, n, table, queue)
        return m

    # -- scenario 3: scans over the table ------------------------------------------------------

    def scan(self) -> None:
        n = self.cfg["scan_rows"]
        log(f"\n== 3. scans over a {n:,}-row table: filter --count -e REGEX / --where JQ")
        table = self.table("scan")
        t0 = time.perf_counter()
        fill_table(table, n, mix=True)
        log(f"  filled {n:,} rows in {time.perf_counter() - t0:.1f}s")
        pending = "NOT reprocessada"
        cases = [
            ("regex", ["-e", SCAN_REGEX],
             f'SELECT count(*) FROM "{table}" WHERE {pending} AND (motivo ~ %s OR task_original ~ %s '
             f"OR COALESCE(args::text, '') ~ %s)", (SCAN_REGEX, SCAN_REGEX, SCAN_REGEX)),
            ("jq", ["--where", TABLE_JQ],
             f"SELECT count(*) FROM \"{table}\" WHERE {pending} AND (args->>'pedido_id')::bigint % 7 = 0",
             None),
        ]
        for name, flags, sql, params in cases:
            case = f"{n} rows, {name}"
            # Reference: the same count computed inside PostgreSQL (no rows leave the server).
            ref = Measurement("scan", case, "PostgreSQL count(*) (reference)", n, role="reference")
            with pg() as c:
                t = time.perf_counter()
                expected = c.execute(sql, params).fetchone()[0]
                ref.wall_s = ref.timed_s = time.perf_counter() - t
            ref.rate = n / ref.wall_s
            ref.ok = True
            ref.check = f"count {expected}"
            self.res.add(ref)
            for r in range(self.cfg["scan_repeats"]):
                m = Measurement("scan", case, f"dlq filter --count {' '.join(flags)}", n, repeat=r)
                p = self.dlq(*self.db_args(table), "filter", "--count", *flags)
                m.wall_s = m.timed_s = p.wall_s
                m.rate = n / p.wall_s
                m.peak_rss_kib, m.cpu_s = p.maxrss_kib, p.cpu_s
                got = p.stdout.strip()
                m.ok = p.rc == 0 and got == str(expected)
                m.check = (f"count {got} (expected {expected})" if p.rc == 0
                           else f"exit {p.rc}: {tail(p.stderr)}")
                self.res.add(m)

    # -- feature detection for the queue scenarios ---------------------------------------------

    def detect_queue_features(self) -> dict[str, Any]:
        """Runs the queue commands on a tiny DLQ: a feature is there when they succeed."""
        b = self.broker
        main, _, dlq = b.declare_dead_letter_topology("probe")
        fill_dlq(b, main, dlq, 2, timeout=30)
        feats: dict[str, Any] = {}

        def probe(name: str, args: list[str], good: Callable[[Proc], bool]) -> None:
            p = self.dlq(*self.amqp_args(), *args, timeout=60)
            if p.rc == 0 and good(p):
                feats[name] = {"available": True}
            elif "not available" in p.stderr:
                feats[name] = {"available": False, "why": tail(p.stderr, 1)}
            else:
                feats[name] = {"available": False, "broken": True,
                               "why": f"exit {p.rc}: {tail(p.stderr, 3)} {p.stdout.strip()[:200]}"}
                self.res.failures.append(f"feature probe {name}: {' '.join(args)}: exit {p.rc}: {tail(p.stderr, 3)}")
            after = b.depth(dlq)
            if after != 2:
                feats[name]["available"] = False
                feats[name]["broken"] = True
                self.res.failures.append(f"feature probe {name} changed the DLQ: {after} messages left of 2")

        probe("queue_replay", ["replay", "-Q", dlq, "--dry-run", "--yes"], lambda p: True)
        probe("queue_read", ["filter", "-Q", dlq, "--count"], lambda p: p.stdout.strip() == "2")

        def lists_probe(p: Proc) -> bool:
            try:
                rows = json.loads(p.stdout)
            except json.JSONDecodeError:
                return False
            return any(r.get("source") == "queue" and r.get("location") == dlq for r in rows)

        p = self.dlq(*self.amqp_args(), "-o", "json", "list", timeout=60)
        if p.rc == 0 and lists_probe(p):
            feats["queue_list"] = {"available": True}
        else:
            feats["queue_list"] = {"available": False,
                                   "why": f"`dlq list` exit {p.rc}, lists no DLQ of this vhost"}
        b.purge(dlq)
        self.res.features = feats
        log("  features: " + ", ".join(f"{k}={'yes' if v['available'] else 'no'}" for k, v in feats.items()))
        return feats

    # -- scenario 1: queue replay --------------------------------------------------------------

    def queue_replay(self, feats: dict[str, Any]) -> None:
        n = self.cfg["queue_msgs"]
        log(f"\n== 1. queue replay: {n:,} dead letters DLQ -> the queue they died in")
        b = self.broker
        main, _, dlq = b.declare_dead_letter_topology(f"{self.prefix}.matriculas")
        case = f"{n} messages"
        keyerrors = sum(1 for i in range(n) if is_keyerror(i))

        def fresh() -> None:
            b.purge(main, dlq)
            secs = fill_dlq(b, main, dlq, n, timeout=max(60, n / 500))
            log(f"  filled {dlq} with {n:,} dead letters in {secs:.1f}s")

        def verify(m: Measurement, moved: int) -> None:
            d_main, d_dlq = b.depth(main), b.depth(dlq)
            m.ok = m.ok and d_main == moved and d_dlq == n - moved
            m.check = ((m.check + "; ") if m.check else "") + \
                f"destination holds {d_main}/{moved}, DLQ holds {d_dlq}/{n - moved}"

        # Baseline: the broker's own mover, a dynamic shovel. There is no client: its CPU is all
        # in the broker's.
        fresh()
        m = Measurement("queue_replay", case, "dynamic shovel (on-confirm, src-delete-after queue-length)",
                        n, role="baseline")
        name = "dlqbench-shovel"
        with self.measure_broker(m):
            t0 = time.perf_counter()
            code, body = mgmt("PUT", f"/parameters/shovel/{q(self.vhost)}/{name}", {"value": {
                "src-protocol": "amqp091", "src-uri": f"amqp:///{q(self.vhost)}", "src-queue": dlq,
                "dest-protocol": "amqp091", "dest-uri": f"amqp:///{q(self.vhost)}", "dest-queue": main,
                "ack-mode": "on-confirm", "src-delete-after": "queue-length"}})
            if code in (201, 204):
                got = b.wait_depth(main, n, timeout=self.cfg["timeout"])
                m.wall_s = m.timed_s = time.perf_counter() - t0
        if code not in (201, 204):
            m.check = f"creating the shovel: {code} {body}"
        else:
            m.rate = n / m.wall_s
            m.ok = got == n
            m.notes = "timed from the API call until the destination holds every message"
            # the shovel deletes itself after queue-length messages; make sure it is gone
            for _ in range(100):
                c, shovels = mgmt("GET", f"/shovels/{q(self.vhost)}")
                if c == 200 and not any(s.get("name") == name for s in shovels):
                    break
                time.sleep(0.1)
            mgmt("DELETE", f"/parameters/shovel/{q(self.vhost)}/{name}")
        verify(m, n)
        self.res.add(m)

        # Baseline: the hand-written aio-pika mover (its whole process is the client's CPU).
        fresh()
        pf = self.cfg["mover_prefetch"]
        m = Measurement("queue_replay", case, f"aio-pika mover (prefetch {pf}, confirm then ack)", n,
                        role="baseline")
        with self.measure_broker(m):
            p = run_proc([PY, str(HERE / "aio_pika_mover.py"), "--url", amqp_url(self.vhost), "--dlq", dlq,
                          "--prefetch", str(pf), "--expect", str(n)], timeout=self.cfg["timeout"])
        if script_loop(m, p) is not None:
            m.notes = f"process wall {p.wall_s:.2f}s; rate from its loop ({m.timed_s:.2f}s)"
        verify(m, n)
        self.res.add(m)

        if not feats.get("queue_replay", {}).get("available"):
            self.res.skip("queue_replay", "dlq replay -Q (full move and 10% selective)",
                          feats.get("queue_replay", {}).get("why", "feature not detected"))
            b.purge(main, dlq)
            return

        for w in self.cfg["queue_windows"]:
            fresh()
            label = "dlq replay -Q (default window)" if w == 0 else f"dlq replay -Q --window {w}"
            window = [] if w == 0 else ["--window", str(w)]
            m = Measurement("queue_replay", case, label, n)
            with self.measure_broker(m):
                p = self.dlq(*self.amqp_args(), "-o", "json", "replay", "-Q", dlq, "--yes", *window)
            m.wall_s = m.timed_s = p.wall_s
            m.rate = n / p.wall_s
            m.peak_rss_kib, m.cpu_s = p.maxrss_kib, p.cpu_s
            m.ok = p.rc == 0 and not p.timed_out
            if not m.ok:
                m.check = f"exit {p.rc}: {tail(p.stderr)}"
            verify(m, n)
            self.res.add(m)

        # Selective: only the 10% that died with a KeyError go back; the rest stay.
        fresh()
        m = Measurement("queue_replay", f"{n} messages, 10% selective", f"dlq replay -Q --motivo {SELECTIVE_MOTIVO}",
                        n)
        with self.measure_broker(m):
            p = self.dlq(*self.amqp_args(), "-o", "json", "replay", "-Q", dlq, "--motivo", SELECTIVE_MOTIVO, "--yes")
        m.wall_s = m.timed_s = p.wall_s
        m.rate = n / p.wall_s
        m.peak_rss_kib, m.cpu_s = p.maxrss_kib, p.cpu_s
        m.ok = p.rc == 0 and not p.timed_out
        m.notes = "rate (and CPU per message) = per message examined"
        if not m.ok:
            m.check = f"exit {p.rc}: {tail(p.stderr)}"
        verify(m, keyerrors)
        total, matched = b.drain_count(main, has_keyerror)
        if matched != keyerrors or total != keyerrors:
            m.ok = False
        m.check += f"; moved messages with KeyError {matched}/{total}"
        self.res.add(m)
        b.purge(main, dlq)

    # -- scenario 3b: scans over a DLQ ---------------------------------------------------------

    def queue_scan(self, feats: dict[str, Any]) -> None:
        n = self.cfg["queue_scan_msgs"]
        log(f"\n== 3b. scans over a {n:,}-message DLQ: a hold-and-count consumer vs "
            "dlq filter -Q --count -e REGEX / --where JQ / --motivo TEXT")
        b = self.broker
        main, _, dlq = b.declare_dead_letter_topology(f"{self.prefix}.scan")
        secs = fill_dlq(b, main, dlq, n, timeout=max(120, n / 500))
        log(f"  filled {dlq} with {n:,} dead letters in {secs:.1f}s")
        # Every variant shares one case, so each dlq variant gets its ratio against the baseline
        # (ratios pair a scenario's and case's runs); the selection is in the variant's name and
        # in the count it must print.
        case = f"{n} messages"
        keyerrors = sum(1 for i in range(n) if is_keyerror(i))
        variants: list[tuple[str, Callable[[], Measurement]]] = [
            (HOLD_AND_COUNT, lambda: self.hold_count_run(case, n, dlq, keyerrors))]
        if feats.get("queue_read", {}).get("available"):
            for flags, expected in ((["-e", SCAN_REGEX], keyerrors),
                                    (["--where", QUEUE_JQ], sum(1 for i in range(n) if i % 50 == 7)),
                                    (["--motivo", SELECTIVE_MOTIVO], keyerrors)):
                variants.append((f"dlq filter -Q --count {' '.join(flags)}",
                                 lambda flags=flags, expected=expected:
                                 self.dlq_queue_scan_run(case, n, dlq, flags, expected)))
        else:
            self.res.skip("queue_scan", f"dlq filter -Q over {n:,} messages",
                          feats.get("queue_read", {}).get("why", "feature not detected"))
        for r in range(self.cfg["scan_repeats"]):
            # Rotate the order each round, as in the table replay.
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            for name, fn in order:
                m = fn()
                m.repeat = r
                m.variant = name
                self.res.add(m)
        b.purge(dlq)

    def hold_count_run(self, case: str, n: int, dlq: str, expected: int) -> Measurement:
        m = Measurement("queue_scan", case, "hold-and-count", n, role="baseline")
        with self.measure_broker(m):
            p = run_proc([PY, str(HERE / "hold_count.py"), "--url", amqp_url(self.vhost), "--queue", dlq,
                          "--expect", str(n), "--pattern", SCAN_REGEX], timeout=self.cfg["timeout"])
            # Closing the channel gives every message back, but the broker requeues them after the
            # script has gone: wait for them (inside the broker's CPU: giving back is its work, and
            # dlq waits for it before exiting too). The broker requeues ~20k messages/s here.
            left = self.broker.wait_depth(dlq, n, timeout=max(30, n / 5000))
        out = script_loop(m, p)
        if out is not None:
            m.ok = out["read"] == n and out["matched"] == expected and left == n
            m.check = (f"read {out['read']}/{n}, count {out['matched']} (expected {expected}); "
                       f"DLQ still holds {left}/{n}")
            m.notes = (f"process wall {p.wall_s:.2f}s; rate from its loop ({m.timed_s:.2f}s, first consume to "
                       "last delivery), imports and connecting excluded")
        else:
            m.check += f"; DLQ holds {left}/{n}"
        return m

    def dlq_queue_scan_run(self, case: str, n: int, dlq: str, flags: list[str], expected: int) -> Measurement:
        m = Measurement("queue_scan", case, "dlq", n)
        with self.measure_broker(m):
            p = self.dlq(*self.amqp_args(), "filter", "-Q", dlq, "--count", *flags)
            left = self.broker.depth(dlq)  # dlq waits for what it gives back: exact at once
        m.wall_s = m.timed_s = p.wall_s
        m.rate = n / p.wall_s
        m.peak_rss_kib, m.cpu_s = p.maxrss_kib, p.cpu_s
        got = p.stdout.strip()
        m.ok = p.rc == 0 and not p.timed_out and got == str(expected) and left == n
        m.check = (f"count {got} (expected {expected}); DLQ still holds {left}/{n}"
                   if p.rc == 0 else failure(p))
        return m

    # -- scenario 5: dlq browse ----------------------------------------------------------------

    def browse(self) -> None:
        n = self.cfg["browse_msgs"]
        log(f"\n== 5. dlq browse on a {n:,}-message DLQ (tmux): Enter on a group to its first records screen")
        if not shutil.which("tmux"):
            self.res.skip("browse", f"dlq browse over {n:,} messages", "tmux is not installed")
            return
        b = self.broker
        main, _, dlq = b.declare_dead_letter_topology(f"{self.prefix}.browse")
        secs = fill_dlq(b, main, dlq, n, timeout=max(120, n / 500))
        log(f"  filled {dlq} with {n:,} dead letters in {secs:.1f}s")
        for r in range(self.cfg["browse_repeats"]):
            m = Measurement("browse", f"{n} messages", "dlq browse: first records screen", n, repeat=r)
            self.browse_run(m, dlq, n)
            self.res.add(m)
        b.purge(dlq)

    def browse_run(self, m: Measurement, dlq: str, n: int) -> None:
        """Drives dlq browse in a tmux server of its own: sources, Enter (groups), Enter (records);
        times the last step, which reads one page of the queue's head, and checks the queue after."""
        sock = f"dlq-bench-browse-{os.getpid()}"
        env = " ".join(f"{k}={shlex_quote(v)}" for k, v in self.dlq.env.items()
                       if k in ("PATH", "XDG_CONFIG_HOME", "NO_COLOR", "DLQ_MANAGEMENT_URL"))
        cmd = (f"env -i TERM=xterm-256color {env} {shlex_quote(self.dlq.binary)} "
               f"{' '.join(shlex_quote(a) for a in self.amqp_args())} browse -Q {shlex_quote(dlq)}; sleep 60")
        tmux = ["tmux", "-L", sock, "-f", "/dev/null"]

        def screen() -> str:
            return subprocess.run([*tmux, "capture-pane", "-p"], capture_output=True, text=True).stdout

        def until(text: str, limit: float) -> float | None:
            t0 = time.perf_counter()
            while time.perf_counter() - t0 < limit:
                if text in screen():
                    return time.perf_counter() - t0
                time.sleep(0.01)
            return None

        subprocess.run([*tmux, "new-session", "-d", "-x", "160", "-y", "40", "bash", "-c", cmd], check=True)
        try:
            first = until(" sources · read", 60)
            subprocess.run([*tmux, "send-keys", "Enter"], check=True)
            groups = until("all reasons", 120)
            subprocess.run([*tmux, "send-keys", "Enter"], check=True)
            records = until("first 200 records", 60)
            subprocess.run([*tmux, "send-keys", "q"], check=True)
            time.sleep(0.5)
        finally:
            subprocess.run([*tmux, "kill-server"], capture_output=True)
        left = self.broker.wait_depth(dlq, n, timeout=30)
        m.ok = None not in (first, groups, records) and left == n
        m.timed_s = m.wall_s = records
        secs = lambda t: "never" if t is None else f"{t:.3f}s"  # noqa: E731
        m.check = (f"sources screen after {secs(first)}, groups (first 20,000) after {secs(groups)}, "
                   f"first records screen after {secs(records)}; DLQ still holds {left}/{n}")

    # -- scenario 4: list ----------------------------------------------------------------------

    def list_dlqs(self, feats: dict[str, Any]) -> None:
        k = self.cfg["list_dlqs"]
        per = self.cfg["list_dead_per_dlq"]
        log(f"\n== 4. dlq list against {k} DLQs")
        vhost = f"{self.vhost}-list"
        create_vhost(vhost)
        lb = None
        try:
            lb = Broker(vhost)
            t0 = time.perf_counter()
            names = []
            for i in range(k):
                main, _, dlq = lb.declare_dead_letter_topology(f"svc{i:03d}")
                names.append(dlq)
            # a few dead letters in each, published in one go, then counted
            async def dead_letters() -> None:
                ch = await lb.conn.channel(publisher_confirms=True)
                props = Basic.Properties(expiration="0", delivery_mode=2, content_type="application/json",
                                         headers={"x-exception-message": TIMEOUT_TEXT})
                await asyncio.gather(*(ch.basic_publish(body_for(i * per + j), routing_key=f"svc{i:03d}.processar",
                                                        properties=props)
                                       for i in range(k) for j in range(per)))
                await ch.close()
            lb.run(dead_letters())
            for dlq in names:
                lb.wait_depth(dlq, per, timeout=30)
            log(f"  declared {k} dead-letter topologies with {per} dead letters each in {time.perf_counter() - t0:.1f}s")

            # Reference: what an operator's script starts from, one management API call.
            user, pw = amqp_creds()
            for r in range(self.cfg["list_repeats"]):
                m = Measurement("list", f"{k} DLQs", "GET /api/queues (curl, reference)", k, repeat=r,
                                role="reference")
                p = run_proc(["curl", "-fsS", "-o", "/dev/null", "-u", f"{user}:{pw}",
                              f"{MGMT_URL}/api/queues/{q(vhost)}"], timeout=60)
                m.wall_s = m.timed_s = p.wall_s
                m.peak_rss_kib, m.cpu_s = p.maxrss_kib, p.cpu_s
                m.ok = p.rc == 0
                m.check = "" if m.ok else f"exit {p.rc}: {tail(p.stderr)}"
                self.res.add(m)

            if not feats.get("queue_list", {}).get("available"):
                self.res.skip("list", f"dlq list over {k} DLQs",
                              feats.get("queue_list", {}).get("why", "feature not detected"))
                return
            for r in range(self.cfg["list_repeats"]):
                m = Measurement("list", f"{k} DLQs", "dlq list", k, repeat=r)
                p = self.dlq("--amqp-url", amqp_url(vhost), "-o", "json", "list")
                m.wall_s = m.timed_s = p.wall_s
                m.peak_rss_kib, m.cpu_s = p.maxrss_kib, p.cpu_s
                m.ok = p.rc == 0 and not p.timed_out
                if m.ok:
                    try:
                        rows = [x for x in json.loads(p.stdout) if x.get("source") == "queue"]
                    except json.JSONDecodeError:
                        rows = []
                    listed = {x.get("location"): x.get("pending") for x in rows}
                    wrong = [d for d in names if listed.get(d) != per]
                    m.ok = not wrong
                    m.check = f"{len(rows)} DLQs listed, {k - len(wrong)}/{k} with {per} pending"
                else:
                    m.check = f"exit {p.rc}: {tail(p.stderr)}"
                self.res.add(m)
        finally:
            if lb:
                lb.close()
            if not self.args.keep:
                delete_vhost(vhost)

    # -- summary -------------------------------------------------------------------------------

    def summarize(self) -> None:
        groups: dict[tuple[str, str, str], list[Measurement]] = {}
        for m in self.res.measurements:
            groups.setdefault((m.scenario, m.case, m.variant), []).append(m)
        summary = []
        for (scenario, case, variant), ms in groups.items():
            good = [m for m in ms if m.ok and m.timed_s]
            rates = [m.rate for m in good if m.rate]
            rss = [m.peak_rss_kib for m in ms if m.peak_rss_kib]
            # CPU per message (row, DLQ) of the case: the measured process's, and the broker's.
            client_us = [m.cpu_s * 1e6 / m.size for m in good if m.cpu_s is not None and m.size]
            broker_us = [m.broker_cpu_s * 1e6 / m.size for m in good if m.broker_cpu_s is not None and m.size]
            summary.append({
                "scenario": scenario, "case": case, "variant": variant, "role": ms[0].role,
                "runs": len(ms), "ok": all(m.ok for m in ms),
                "median_s": statistics.median([m.timed_s for m in good]) if good else None,
                "median_wall_s": statistics.median([m.wall_s for m in good if m.wall_s]) if good else None,
                "median_rate": statistics.median(rates) if rates else None,
                "max_peak_rss_mib": max(rss) / 1024 if rss else None,
                "dlq_us_per_msg": statistics.median(client_us) if client_us else None,
                "broker_us_per_msg": statistics.median(broker_us) if broker_us else None,
            })
        # ratios against the baseline of the same scenario/case
        for s in summary:
            base = [b for b in summary if b["scenario"] == s["scenario"] and b["case"] == s["case"]
                    and b["role"] == "baseline" and b["median_rate"]]
            s["ratios"] = {b["variant"]: s["median_rate"] / b["median_rate"]
                           for b in base if s["median_rate"] and b is not s and s["role"] in ("dlq", "probe")}
        # Paired ratios: each dlq/probe measurement against the baseline measured in the same
        # round (minutes apart instead of across the whole run), median over the rounds.
        for s in summary:
            s["paired_ratios"] = {}
            if s["role"] not in ("dlq", "probe"):
                continue
            mine = groups[(s["scenario"], s["case"], s["variant"])]
            for (sc, case, variant), ms in groups.items():
                if sc != s["scenario"] or case != s["case"] or ms[0].role != "baseline":
                    continue
                by_round = {b.repeat: b for b in ms if b.ok and b.rate}
                pairs = [m.rate / by_round[m.repeat].rate for m in mine
                         if m.ok and m.rate and m.repeat in by_round]
                if pairs:
                    s["paired_ratios"][variant] = statistics.median(pairs)
        self.res.summary = summary

        def best(scenario: str, case_prefix: str) -> dict | None:
            c = [s for s in summary if s["scenario"] == scenario and s["case"].startswith(case_prefix)
                 and s["role"] == "dlq" and s["median_rate"]]
            return max(c, key=lambda s: s["median_rate"]) if c else None

        targets = []
        for n in self.cfg["replay_sizes"]:
            if "table_replay" not in self.only:
                break
            b = best("table_replay", f"{n} rows")
            ratio = next((v for k, v in (b or {}).get("ratios", {}).items() if k.startswith("seed")), None)
            targets.append({"target": f"table replay {n:,} rows >= 10x the seed loop",
                            "measured": ratio, "unit": "x", "goal": 10.0, "met": ratio is not None and ratio >= 10,
                            "best": b["variant"] if b else None})
        if "table_replay_redis" in self.only:
            n = self.cfg["redis_rows"]
            b = best("table_replay_redis", f"{n} rows")
            ratio = next((v for k, v in (b or {}).get("ratios", {}).items() if k.startswith("seed")), None)
            targets.append({"target": f"table replay to Redis {n:,} rows >= 10x the seed loop (goal 20x)",
                            "measured": ratio, "unit": "x", "goal": 10.0, "met": ratio is not None and ratio >= 10,
                            "best": b["variant"] if b else None})
        for s in summary:
            if s["scenario"] not in ("scan", "queue_scan") or s["role"] != "dlq":
                continue
            # The queue scan's variants share their case: name the variant.
            what = f"{s['scenario']} {s['case']}" + (f", {s['variant']}" if s["scenario"] == "queue_scan" else "")
            v = s["max_peak_rss_mib"]
            targets.append({"target": f"{what}: peak RSS <= 64 MiB",
                            "measured": v, "unit": "MiB", "goal": 64.0, "met": v is not None and v <= 64})
            if s["scenario"] == "queue_scan":
                v = s.get("dlq_us_per_msg")
                targets.append({"target": f"{what}: dlq CPU per message scanned <= 10 µs",
                                "measured": v, "unit": "µs", "goal": 10.0, "met": v is not None and v <= 10})
                r = next((x for k, x in s["ratios"].items() if k.startswith("hold-and-count")), None)
                targets.append({"target": f"{what}: >= 1.5x the hold-and-count consumer (goal 2x)",
                                "measured": r, "unit": "x", "goal": 1.5, "met": r is not None and r >= 1.5})
        qcase = f"{self.cfg['queue_msgs']} messages"
        qruns = [s for s in summary if s["scenario"] == "queue_replay" and s["case"] == qcase
                 and s["role"] == "dlq" and s["median_rate"]]
        # Judged at the default window (adaptive; `--window 64` in results from before it),
        # and again at the shovel's own duplicate window.
        qdefault = next((s for s in qruns if s["variant"].endswith("(default window)")), None) or \
            next((s for s in qruns if s["variant"].endswith("--window 64")), None)
        qsame = next((s for s in qruns if s["variant"].endswith("--window 1000")), None)
        if "queue_replay" in self.only:
            v = (qdefault or {}).get("dlq_us_per_msg")
            targets.append({"target": f"queue replay {qcase}: dlq CPU per moved message <= 15 µs", "measured": v,
                            "unit": "µs", "goal": 15.0, "met": v is not None and v <= 15,
                            "best": qdefault["variant"] if qdefault else "dlq replay -Q --window 64 not measured"})
            at_1000 = " at the shovel's window (1000)"
            for label, qb, window, base, goal, aim in (
                    ("", qdefault, 64, "dynamic shovel", 0.7, ""),
                    ("", qdefault, 64, "aio-pika", 3.0, ""),
                    (at_1000, qsame, 1000, "dynamic shovel", 0.85, " (goal 1.0x)"),
                    (at_1000, qsame, 1000, "aio-pika", 3.0, "")):
                r = next((x for k, x in (qb or {}).get("ratios", {}).items() if k.startswith(base)), None)
                targets.append({"target": f"queue replay {qcase} >= {goal}x {base}{label}{aim}", "measured": r,
                                "unit": "x", "goal": goal, "met": r is not None and r >= goal,
                                "best": qb["variant"] if qb else f"dlq replay -Q --window {window} not measured"})
        if "queue_scan" in self.only and not any(s["scenario"] == "queue_scan" and s["role"] == "dlq"
                                                 for s in summary):
            for what, unit, goal in (("peak RSS <= 64 MiB", "MiB", 64.0),
                                     ("dlq CPU per message scanned <= 10 µs", "µs", 10.0),
                                     (">= 1.5x the hold-and-count consumer (goal 2x)", "x", 1.5)):
                targets.append({"target": f"queue_scan {self.cfg['queue_scan_msgs']} messages: {what}",
                                "measured": None, "unit": unit, "goal": goal, "met": False,
                                "best": "dlq filter -Q not available yet"})
        for s in summary:
            if s["scenario"] == "browse" and s["role"] == "dlq":
                v = s["median_s"] * 1000 if s["median_s"] else None
                targets.append({"target": f"dlq browse {s['case']}: first records screen <= 1000 ms",
                                "measured": v, "unit": "ms", "goal": 1000.0,
                                "met": v is not None and v <= 1000})
        lists = [s for s in summary if s["scenario"] == "list" and s["role"] == "dlq"]
        for s in lists:
            v = s["median_s"] * 1000 if s["median_s"] else None
            targets.append({"target": f"dlq list, {s['case']} <= 300 ms", "measured": v, "unit": "ms",
                            "goal": 300.0, "met": v is not None and v <= 300})
        if "list" in self.only and not lists:
            targets.append({"target": f"dlq list, {self.cfg['list_dlqs']} DLQs <= 300 ms", "measured": None,
                            "unit": "ms", "goal": 300.0, "met": False, "best": "queue listing not available yet"})
        self.res.targets = targets

    def report(self) -> str:
        lines: list[str] = []
        mach = self.res.machine
        lines.append(f"dlq benchmark ({self.mode}) {self.res.started}")
        lines.append(f"machine: {mach.get('nproc')} cores ({mach.get('cpu')}), {mach.get('memory')}, "
                     f"kernel {mach.get('kernel')}, {mach.get('os')}")
        lines.append(f"         {mach.get('rustc')}; {mach.get('dlq')} ({mach.get('dlq_profile')}) at {mach.get('git_commit')}")
        lines.append(f"         RabbitMQ {mach.get('rabbitmq')} (Erlang {mach.get('erlang')}); "
                     f"PostgreSQL {mach.get('postgresql')}; Python {mach.get('python')}")
        lines.append(f"         load average at start {fmt_load(mach.get('loadavg_start'))}, "
                     f"at end {fmt_load(mach.get('loadavg_end'))} (shared machine: read the ratios)")
        # Columns as wide as the longest scenario, case and variant (up to a point): rows stay aligned.
        sw = max([13] + [len(s["scenario"]) for s in self.res.summary])
        cw = min(max([26] + [len(s["case"]) for s in self.res.summary]), 40)
        vw = min(max([58] + [len(s["variant"]) for s in self.res.summary]), 72)
        header = (f"{'scenario':<{sw}} {'case':<{cw}} {'variant':<{vw}} {'runs':>4} {'time s':>8} {'rate/s':>10} "
                  f"{'RSS MiB':>8} {'client µs':>9} {'broker µs':>9}  ratio (median rates; paired per round)")
        lines.append("")
        lines.append(header)
        lines.append("-" * len(header))
        for s in self.res.summary:
            ratio = ", ".join(f"{v:.2f}x {k.split(' (')[0]}"
                              + (f" ({s['paired_ratios'][k]:.2f}x paired)" if k in s.get("paired_ratios", {}) else "")
                              for k, v in s["ratios"].items())
            mark = "" if s["ok"] else "  FAILED"
            lines.append(
                f"{s['scenario']:<{sw}} {s['case'][:cw]:<{cw}} {s['variant'][:vw]:<{vw}} {s['runs']:>4} "
                f"{fmt(s['median_s'], '.3f'):>8} {fmt(s['median_rate'], ',.0f'):>10} "
                f"{fmt(s['max_peak_rss_mib'], '.1f'):>8} {fmt(s.get('dlq_us_per_msg'), '.1f'):>9} "
                f"{fmt(s.get('broker_us_per_msg'), '.1f'):>9}  {ratio}{mark}")
        for sk in self.res.skipped:
            lines.append(f"{sk.scenario:<13} {sk.what}: not available yet ({sk.why})")
        if self.res.targets:
            lines.append("")
            lines.append("targets (from the benchmark issue; reported, never a pass/fail of the run"
                         + ("; smoke sizes are too small to mean anything" if self.mode == "smoke" else "") + "):")
            for t in self.res.targets:
                v = t["measured"]
                shown = "n/a" if v is None else f"{v:.2f}{'x' if t['unit'] == 'x' else ' ' + t['unit']}"
                state = "n/a    " if v is None else "met    " if t["met"] else "NOT met"
                lines.append(f"  {state}  {t['target']}: {shown}"
                             + (f" (best: {t['best']})" if t.get("best") else ""))
        lines.append("")
        lines.append("time s = median; a baseline's time is its own loop (imports/connect excluded), dlq's is "
                     "the whole process; ratio = dlq rate / baseline rate")
        lines.append("client µs / broker µs = median CPU (user + system) per message or row of the case (per DLQ "
                     "for list): of the measured process (dlq, or a baseline script as a whole), and of the local "
                     "broker (beam.smp) over the same run")
        if self.res.failures:
            lines.append("")
            lines.append("FAILURES:")
            lines.extend(f"  {f}" for f in self.res.failures)
        return "\n".join(lines)

    # -- main ----------------------------------------------------------------------------------

    def run(self) -> int:
        self.res.machine = self.machine()
        self.clean_stale()
        create_vhost(self.vhost)
        self.broker = Broker(self.vhost)
        try:
            steps: list[tuple[str, Callable[[], None]]] = []
            feats: dict[str, Any] = {}
            if self.only & {"queue_replay", "queue_scan", "list"}:
                feats = self.detect_queue_features()
            if "table_replay" in self.only:
                steps.append(("table_replay", self.table_replay))
            if "scan" in self.only:
                steps.append(("scan", self.scan))
            if "queue_replay" in self.only:
                steps.append(("queue_replay", lambda: self.queue_replay(feats)))
            if "queue_scan" in self.only:
                steps.append(("queue_scan", lambda: self.queue_scan(feats)))
            if "list" in self.only:
                steps.append(("list", lambda: self.list_dlqs(feats)))
            if "table_replay_redis" in self.only:
                steps.append(("table_replay_redis", self.table_replay_redis))
            if "browse" in self.only:
                steps.append(("browse", self.browse))
            for name, step in steps:
                try:
                    step()
                except Exception as e:  # a broken scenario fails the run; the others still run
                    traceback.print_exc()
                    self.res.failures.append(f"{name}: {type(e).__name__}: {e}")
        finally:
            self.cleanup()
        self.res.machine["loadavg_end"] = os.getloadavg()
        self.summarize()
        text = self.report()
        print(text)
        out_dir = Path(self.args.results_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        path = out_dir / f"{stamp}-{self.mode}.json"
        data = asdict(self.res)
        data["report"] = text.splitlines()
        path.write_text(json.dumps(data, indent=2, default=str) + "\n")
        print(f"\nresults: {path}")
        return 1 if self.res.failures else 0


def rerender(path: str) -> int:
    """Prints the summary of a results file again (with this version's summary and ratios)."""
    data = json.loads(Path(path).read_text())
    b = Bench.__new__(Bench)
    b.mode = data["mode"]
    b.cfg = dict(data["config"])
    b.cfg["replay_sizes"] = [int(x) for x in b.cfg["replay_sizes"]]
    b.only = set(b.cfg.get("scenarios", SCENARIOS))
    b.res = Results(mode=data["mode"], started=data["started"], machine=data["machine"],
                    config=data["config"], features=data.get("features", {}),
                    failures=data.get("failures", []))
    b.res.measurements = [Measurement.from_json(m) for m in data["measurements"]]
    b.res.skipped = [Skip(**x) for x in data.get("skipped", [])]
    b.summarize()
    print(b.report())
    return 0


def fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def fmt_load(v: Any) -> str:
    return "-" if not v else " ".join(f"{x:.2f}" for x in v)


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench/run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="every scenario at tiny sizes (< 1 min)")
    ap.add_argument("--only", help=f"comma-separated subset of: {', '.join(SCENARIOS)}")
    ap.add_argument("--replay-sizes", help="table replay row counts, e.g. 10000,100000")
    ap.add_argument("--windows", help="dlq --window values for the table replay, e.g. 1,16,64")
    ap.add_argument("--repeats", type=int, help="repeat every measurement this many times")
    ap.add_argument("--scan-rows", type=int, help="rows in the scanned table")
    ap.add_argument("--queue-msgs", type=int, help="dead letters moved by the queue replay")
    ap.add_argument("--queue-windows", help="dlq --window values for the queue replay, e.g. 0,64,1000 (0: no --window, the default)")
    ap.add_argument("--queue-scan-msgs", type=int, help="messages in the scanned DLQ")
    ap.add_argument("--list-dlqs", type=int, help="DLQs for dlq list")
    ap.add_argument("--results-dir", default=str(HERE / "results"))
    ap.add_argument("--keep", action="store_true", help="keep the tables and vhosts (debugging)")
    ap.add_argument("--report", metavar="FILE", help="print the summary of a results JSON file again, run nothing")
    args = ap.parse_args()
    if args.report:
        return rerender(args.report)
    if "DLQ_BIN" not in os.environ:
        ap.error("run through bench/run (it sets DLQ_BIN)")
    return Bench(args).run()


if __name__ == "__main__":
    sys.exit(main())

"""Shared plumbing of the benchmarks: server processes, pod bodies, a minimal HTTP/1.1 client, reporting.

The benchmarks are tooling, not component logic: they read wall clocks (`time.time`,
`time.perf_counter`) freely. Every script runs its servers in their own processes and, on a
machine with at least two cores, pins the server under test to core 0 and the load
generators to the other cores, so that the client never steals the server's core and the
two servers compared in one run get the same conditions.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import math
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, cast

import msgpack
import orjson

from kubemesh.services.mesh.state import free_port
from kubemesh.services.model.kinds import PODS

BENCH_DIR: Final = Path(__file__).resolve().parent
REPO: Final = BENCH_DIR.parent
RESULTS_DIR: Final = BENCH_DIR / "results"
PYTHON: Final = sys.executable

JSON_CT: Final = "application/json"
MSGPACK_CT: Final = "application/vnd.kubemesh.msgpack"
ENCODINGS: Final = ("json", "msgpack")

NAME_SLOT: Final = "@@@@@@@@@@"
"""Fixed-width placeholder for a pod's unique digits (10 characters)."""
SEQ_SLOT: Final = "##########"
"""Fixed-width placeholder for an update's sequence digits (10 characters)."""
SENT_KEY: Final = "bench.kubemesh.io/sent"
SENT_SLOT: Final = "SSSSSSSSSSSSSSSSS"
"""Fixed-width placeholder for a send wall time formatted as `%17.6f` (seconds since the epoch)."""

# The apiserver as shipped (`python -m kubemesh.apiserver`), and the same server built with
# history_deliveries=False (the per-delivery history records off), to show their cost.
APISERVER_NO_DELIVERIES_SNIPPET: Final = """
import asyncio, sys
from kubemesh.apiserver.server import ServerSettings, serve
try:
    import uvloop
    factory = uvloop.new_event_loop
except ImportError:
    factory = asyncio.new_event_loop
settings = ServerSettings(host="127.0.0.1", port=int(sys.argv[1]), history_deliveries=False)
with asyncio.Runner(loop_factory=factory) as runner:
    runner.run(serve(settings))
"""


def content_type(encoding: str) -> str:
    """The media type of an encoding."""
    return MSGPACK_CT if encoding == "msgpack" else JSON_CT


def encode(value: Any, encoding: str) -> bytes:
    """Serialise a JSON-like value."""
    if encoding == "msgpack":
        out: bytes = msgpack.packb(value, use_bin_type=True)
        return out
    return orjson.dumps(value)


def pod_body(name: str, *, seq: str, sent: str | None = None) -> dict[str, Any]:
    """A typical small pod (about 400 bytes as sent; about 1 KiB once the apiserver defaults it)."""
    annotations = {"bench.kubemesh.io/seq": seq}
    if sent is not None:
        annotations[SENT_KEY] = sent
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench", "tier": "web"}, "annotations": annotations},
        "spec": {
            "containers": [{
                "name": "app",
                "image": "nginx:1.25",
                "ports": [{"containerPort": 80}],
                "env": [{"name": "MODE", "value": "benchmark"}],
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                              "limits": {"cpu": "200m", "memory": "128Mi"}},
            }],
        },
    }


def sent_marker(encoding: str) -> bytes:
    """The bytes right before a send time in an encoded object (the key, and the value's string header)."""
    if encoding == "msgpack":
        return msgpack.packb(SENT_KEY) + b"\xb1"  # fixstr of 17 bytes
    return b'"' + SENT_KEY.encode() + b'":"'


def format_sent(t: float) -> bytes:
    """A wall time in the fixed 17-character form the marker expects."""
    return b"%17.6f" % t


# ---------------------------------------------------------------------------------- processes


def server_cores() -> tuple[set[int] | None, set[int] | None]:
    """(cores for the server under test, cores for the load), or (None, None) when not pinning."""
    try:
        cores = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return None, None
    if len(cores) < 2:
        return None, None
    return {cores[0]}, set(cores[1:])


def pin(pid: int, cores: set[int] | None) -> None:
    """Restrict a process to some cores (no-op where unsupported)."""
    if cores:
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setaffinity(pid, cores)


def apply_nice(nice: int) -> bool:
    """Set this process's niceness; every server and client it starts inherits it.

    A negative value (root only) makes the benchmark's processes win the CPU over whatever
    else the machine runs, for cleaner absolute figures; 0 (the default) leaves it alone.
    """
    if not nice:
        return True
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except (AttributeError, OSError) as exc:
        print(f"cannot set niceness {nice}: {exc}", file=sys.stderr)
        return False
    return True


def child_env() -> dict[str, str]:
    """The environment for child Python processes: the repository importable, logs quiet."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


SERVER_KINDS: Final = ("apiserver", "apiserver-nodeliveries", "apiserver-etcd", "bare")


@dataclass
class ServerProcess:
    """A server under test running in its own process."""

    kind: str
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path

    @classmethod
    def start(cls, kind: str, *, cores: set[int] | None, log_dir: Path, watchers: int = 10,
              extra_args: Sequence[str] = (), etcd: str | None = None) -> ServerProcess:
        """Start `apiserver` (given `extra_args`), `apiserver-nodeliveries`, `apiserver-etcd` or `bare` on a free port.

        `apiserver-etcd` is the apiserver with `--storage etcd` on the etcd at `etcd` (its own key
        prefix per start). Awaits /readyz.
        """
        port = free_port()
        if kind == "apiserver":
            cmd = [PYTHON, "-m", "kubemesh.apiserver", "--host", "127.0.0.1", "--port", str(port),
                   "--log-level", "warning", *extra_args]
        elif kind == "apiserver-etcd":
            if not etcd:
                raise ValueError("apiserver-etcd needs an etcd endpoint (--etcd-endpoints)")
            cmd = [PYTHON, "-m", "kubemesh.apiserver", "--host", "127.0.0.1", "--port", str(port),
                   "--log-level", "warning", "--storage", "etcd", "--etcd-endpoints", etcd,
                   "--etcd-prefix", f"/bench-{port}-{time.time_ns()}", *extra_args]
        elif kind == "apiserver-nodeliveries":
            cmd = [PYTHON, "-c", APISERVER_NO_DELIVERIES_SNIPPET, str(port)]
        elif kind == "bare":
            cmd = [PYTHON, str(BENCH_DIR / "bare_server.py"), "--port", str(port)]
        else:
            raise ValueError(f"unknown server kind {kind!r}")
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{kind}-{port}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(cmd, cwd=REPO, env=child_env(), stdout=log, stderr=subprocess.STDOUT)
        pin(proc.pid, cores)
        server = cls(kind=kind, port=port, proc=proc, log_path=log_path)
        server.wait_ready()
        return server

    @property
    def base(self) -> str:
        """http://host:port."""
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Poll /readyz until 200."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.kind} exited with {self.proc.returncode}: {self.log_path.read_text()}")
            with contextlib.suppress(OSError), urllib.request.urlopen(self.base + "/readyz", timeout=1.0) as resp:
                if resp.status == 200:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"{self.kind} not ready after {timeout}s")

    def cpu_seconds(self) -> float:
        """User+system CPU seconds the server has used so far (Linux /proc; 0.0 elsewhere)."""
        return proc_cpu_seconds(self.proc.pid)

    def rss_mb(self) -> float:
        """Resident memory of the server in MiB (Linux /proc; 0.0 elsewhere)."""
        try:
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 5 s."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def proc_cpu_seconds(pid: int) -> float:
    """User+system CPU seconds of a process (Linux /proc; 0.0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def run_loop(coro_fn: Callable[[], Any]) -> Any:
    """Run a coroutine function on uvloop when available."""
    factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
    with contextlib.suppress(ImportError):
        import uvloop  # noqa: PLC0415 - optional (not on Windows): the stock loop works, only slower
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro_fn())


# ---------------------------------------------------------------------------------- raw HTTP


class HttpConnection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection with one request in flight (responses need Content-Length)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._waiter: asyncio.Future[int] | None = None
        self._need: int | None = None
        self._status = 0
        self.lost = False

    @classmethod
    async def open(cls, port: int) -> HttpConnection:
        """Connect to 127.0.0.1:port."""
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_connection(cls, "127.0.0.1", port)
        return proto

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Keep the transport; no Nagle delay."""
        self.transport = cast(asyncio.Transport, transport)  # uvloop's transports are not subclasses
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def connection_lost(self, exc: Exception | None) -> None:
        """Fail the request in flight."""
        self.lost = True
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(ConnectionError("connection lost"))

    def data_received(self, data: bytes) -> None:
        """Parse the response head once, then wait for Content-Length bytes."""
        self._buf += data
        if self._need is None:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self._buf[:end]).decode("latin-1")
            lines = head.split("\r\n")
            self._status = int(lines[0].split(" ", 2)[1])
            length = 0
            for line in lines[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-length":
                    length = int(v.strip())
            del self._buf[:end + 4]
            self._need = length
        if len(self._buf) >= self._need:
            del self._buf[:self._need]
            self._need = None
            if self._waiter is not None and not self._waiter.done():
                self._waiter.set_result(self._status)

    async def request(self, raw: bytes) -> int:
        """Send a complete request; the response status."""
        assert self.transport is not None
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(raw)
        return await self._waiter

    def close(self) -> None:
        """Close the connection."""
        if self.transport is not None:
            self.transport.close()


def build_request(method: str, path: str, body: bytes, encoding: str) -> bytes:
    """A complete HTTP/1.1 request with a body in an encoding, asking for the same encoding back."""
    ct = content_type(encoding)
    head = (f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {ct}\r\nAccept: {ct}\r\n"
            f"User-Agent: kubemesh-bench\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


class WatchStream(asyncio.Protocol):
    """One watch stream read without decoding: counts bytes and occurrences of a marker.

    With `timed`, every occurrence of the marker is followed by a 17-character send time
    (`format_sent`); the send time and the wall time at which the read holding the whole
    value arrived are appended to `sent` and `received`. Chunked-transfer framing never
    splits an event (both servers write whole frames per chunk), and a marker split across
    reads is carried over to the next one.
    """

    def __init__(self, request: bytes, marker: bytes, *, timed: bool) -> None:
        self.request = request
        self.marker = marker
        self.timed = timed
        self.sent = array("d")
        self.received = array("d")
        self.bytes = 0
        self.events = 0
        self.status = 0
        self.ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.closed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._head = bytearray()
        self._tail = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """Send the watch request."""
        self.transport = cast(asyncio.Transport, transport)
        self.transport.write(self.request)

    def connection_lost(self, exc: Exception | None) -> None:
        """Note the end of the stream."""
        if not self.ready.done():
            self.ready.set_exception(ConnectionError("watch closed before its response head"))
        if not self.closed.done():
            self.closed.set_result(None)

    def data_received(self, data: bytes) -> None:
        """Count, and time the marked events."""
        now = time.time()
        if not self.ready.done():
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                return
            self.status = int(bytes(self._head[:end]).split(b" ", 2)[1])
            self.ready.set_result(self.status)
            data = bytes(self._head[end + 4:])
            self._head.clear()
        self.bytes += len(data)
        buf = self._tail + data if self._tail else data
        marker = self.marker
        m = len(marker)
        if not self.timed:
            self.events += buf.count(marker)
            self._tail = buf[-(m - 1):] if len(buf) >= m - 1 else buf
            return
        pos = 0
        keep_from = -1
        while True:
            i = buf.find(marker, pos)
            if i < 0:
                break
            end = i + m + 17
            if end > len(buf):
                keep_from = i
                break
            self.sent.append(float(buf[i + m:end]))
            self.received.append(now)
            self.events += 1
            pos = end
        if keep_from < 0:
            keep_from = max(pos, len(buf) - (m - 1))
        self._tail = buf[keep_from:]


def watch_request(path: str, encoding: str) -> bytes:
    """A GET for a watch stream in an encoding."""
    return (f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: {content_type(encoding)}\r\n"
            "User-Agent: kubemesh-bench-watcher\r\n\r\n").encode()


async def open_watch(port: int, path: str, encoding: str, marker: bytes, *, timed: bool = False) -> WatchStream:
    """Open one watch and wait for its 200 response head."""
    loop = asyncio.get_running_loop()
    _, proto = await loop.create_connection(
        lambda: WatchStream(watch_request(path, encoding), marker, timed=timed), "127.0.0.1", port)
    status = await proto.ready
    if status != 200:
        raise RuntimeError(f"watch answered {status}")
    return proto


# ---------------------------------------------------------------------------------- reporting


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of sorted values, nearest-rank; NaN when empty."""
    if not sorted_values:
        return float("nan")
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


def round_median(values: Sequence[float]) -> float:
    """The median of a few rounds' figures, the upper one of an even count (always a measured value); NaN when empty."""
    s = sorted(values)
    return s[len(s) // 2] if s else float("nan")


def machine() -> dict[str, Any]:
    """What the figures were measured on (with the load average: other work on the machine skews them)."""
    try:
        load = list(os.getloadavg())
    except (AttributeError, OSError):
        load = []
    return {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "pinning": server_cores()[0] is not None, "loadavg": load,
            "nice": os.getpriority(os.PRIO_PROCESS, 0) if hasattr(os, "getpriority") else 0}


def write_results(name: str, data: dict[str, Any], results_dir: Path | None) -> Path:
    """Write `<results_dir>/<name>.json` (benchmarks/results by default)."""
    out_dir = results_dir or RESULTS_DIR
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{name}.json"
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    return path


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A plain text table."""
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) if j else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        if v != v:  # NaN
            return "-"
        return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
    return str(v)


async def closed_loop(port: int, next_request: Callable[[int], tuple[bytes, int]], *, duration: float,
                      connections: int) -> dict[str, Any]:
    """`connections` keep-alive clients sending requests back to back for `duration` wall seconds.

    `next_request(i)` builds the i-th request (numbered across all clients) and the status that
    counts it as done; anything else is an error. Returns ok, errors and the seconds taken.
    """
    counter = itertools.count()
    ok = errors = 0
    stop_at = time.perf_counter() + duration

    async def client() -> None:
        nonlocal ok, errors
        conn = await HttpConnection.open(port)
        try:
            while time.perf_counter() < stop_at:
                raw, want = next_request(next(counter))
                if await conn.request(raw) == want:
                    ok += 1
                else:
                    errors += 1
        finally:
            conn.close()

    t = Timer()
    await asyncio.gather(*(client() for _ in range(connections)))
    return {"ok": ok, "errors": errors, "seconds": t.elapsed()}


@dataclass
class Timer:
    """Wall time of a block."""

    started: float = field(default_factory=time.perf_counter)

    def elapsed(self) -> float:
        """Seconds since creation."""
        return time.perf_counter() - self.started


class PodWatch:
    """A pod watch on one namespace that survives stream ends and notes what it sees.

    Subclasses implement `observe(type, obj, now)` (now: `time.monotonic()` at receipt) and
    return True when something a waiter cares about changed. The watch resumes from the last
    resourceVersion it saw after a stream ends or fails.
    """

    def __init__(self, client: Any, resource_version: str, *, namespace: str) -> None:
        self.client = client
        self.rv = resource_version
        self.namespace = namespace
        self.changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def observe(self, type_: str, obj: dict[str, Any], now: float) -> bool:
        """Record one event; True wakes the waiters."""
        raise NotImplementedError

    def start(self) -> None:
        """Start reading the watch."""
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:

        while True:
            with contextlib.suppress(Exception):
                async for ev in self.client.watch(PODS, namespace=self.namespace, resource_version=self.rv):
                    md = ev.object.get("metadata") or {}
                    if md.get("resourceVersion"):
                        self.rv = md["resourceVersion"]
                    if ev.type in ("ADDED", "MODIFIED") and self.observe(ev.type, ev.object, time.monotonic()):
                        self.changed.set()
            await asyncio.sleep(0.1)

    async def wait_until(self, done: Callable[[], bool], limit: float, *, stall: float | None = None) -> bool:
        """Wait until `done()` (False after `limit` seconds, or after `stall` seconds without change)."""
        deadline = time.monotonic() + limit
        last_change = time.monotonic()
        while not done():
            now = time.monotonic()
            if now > deadline or (stall is not None and now - last_change > stall):
                return False
            self.changed.clear()
            try:
                await asyncio.wait_for(self.changed.wait(), timeout=1.0)
                last_change = time.monotonic()
            except TimeoutError:
                pass
        return True

    async def stop(self) -> None:
        """Stop reading."""
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

"""The reference the apiserver is measured against: the least a pod write server must do.

An aiohttp application on the same uvloop as the apiserver, with:

* `POST /api/v1/namespaces/{ns}/pods` and `PUT /api/v1/namespaces/{ns}/pods/{name}`: decode
  the body (JSON, or msgpack per Content-Type), stamp the next revision into
  `metadata.resourceVersion`, store it in a dict, and encode the stored object back in the
  Accept encoding (201 / 200; 409 on a create of an existing name, 404 on an update of a
  missing one);
* `GET /api/v1/namespaces/{ns}/pods?watch=true`: a watch stream fed the same way as the
  apiserver's (like-for-like): each event is encoded once per encoding, frames are queued on
  a per-watcher deque, and a flusher writes every watcher's backlog as one chunk straight to
  its transport at most once per 5 ms (the stream's task only takes over while the
  connection's buffer is full), as `apiserver.watching.Flusher` does;
* `GET /readyz`.

No validation, defaulting, admission, history, metrics or middleware: the gap between this
and the apiserver is what the apiserver's semantics cost.

Run: `python benchmarks/bare_server.py --port 8080`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import msgpack
import orjson
from aiohttp import web

MSGPACK: Final = "application/vnd.kubemesh.msgpack"
JSON: Final = "application/json"


FLUSH_INTERVAL: Final = 0.005


class Watcher:
    """A watch stream's queue, and its transport for the direct path."""

    def __init__(self, encoding: str) -> None:
        self.encoding = encoding
        self.queue: deque[bytes] = deque()
        self.wake = asyncio.Event()
        self.transport: asyncio.Transport | None = None
        self.direct = False

    def flush(self) -> None:
        """Write the backlog now as one chunk; hand over to the task when the buffer is full."""
        t = self.transport
        if not self.direct or not self.queue or t is None:
            return
        data = b"".join(self.queue)
        self.queue.clear()
        if t.is_closing():
            self.direct = False
            self.wake.set()
            return
        t.write(b"%x\r\n%b\r\n" % (len(data), data))
        if t.get_write_buffer_size() > 64 * 1024:
            self.direct = False
            self.wake.set()


class Event:
    """One write, with its frame cached per encoding."""

    __slots__ = ("_frames", "obj", "type")

    def __init__(self, type_: str, obj: dict[str, Any]) -> None:
        self.type = type_
        self.obj = obj
        self._frames: dict[str, bytes] = {}

    def frame(self, encoding: str) -> bytes:
        """`{"type": ..., "object": ...}` in an encoding, built once."""
        cached = self._frames.get(encoding)
        if cached is None:
            if encoding == "msgpack":
                cached = msgpack.packb({"type": self.type, "object": self.obj}, use_bin_type=True)
            else:
                cached = orjson.dumps({"type": self.type, "object": self.obj}) + b"\n"
            self._frames[encoding] = cached
        return cached


class BareServer:
    """A dict of pods, a revision counter and a list of watchers."""

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, Any]] = {}
        self.revision = 0
        self.watchers: list[Watcher] = []
        self._dirty: dict[Watcher, None] = {}
        self._flush_handle: asyncio.Handle | asyncio.TimerHandle | None = None
        self._ready_at = float("-inf")

    def _mark(self, w: Watcher) -> None:
        self._dirty[w] = None
        if self._flush_handle is None:
            loop = asyncio.get_running_loop()
            delay = self._ready_at - loop.time()
            self._flush_handle = loop.call_later(delay, self._flush) if delay > 0 else loop.call_soon(self._flush)

    def _flush(self) -> None:
        # The apiserver's policy: at the end of the loop iteration, or after a gap as long as the
        # last flush took (at most FLUSH_INTERVAL).
        self._flush_handle = None
        loop = asyncio.get_running_loop()
        started = loop.time()
        dirty, self._dirty = self._dirty, {}
        for w in dirty:
            w.flush()
        ended = loop.time()
        self._ready_at = ended + min(ended - started, FLUSH_INTERVAL)

    @staticmethod
    def _decode(request: web.Request, raw: bytes) -> Any:
        if request.content_type == MSGPACK:
            return msgpack.unpackb(raw, raw=False)
        return orjson.loads(raw)

    @staticmethod
    def _respond(request: web.Request, obj: Any, status: int) -> web.Response:
        if MSGPACK in request.headers.get("Accept", ""):
            return web.Response(body=msgpack.packb(obj, use_bin_type=True), status=status, content_type=MSGPACK)
        return web.Response(body=orjson.dumps(obj), status=status, content_type=JSON)

    def _store(self, key: str, obj: dict[str, Any], type_: str) -> None:
        self.revision += 1
        obj["metadata"]["resourceVersion"] = str(self.revision)
        self.pods[key] = obj
        if self.watchers:
            event = Event(type_, obj)
            for w in self.watchers:
                w.queue.append(event.frame(w.encoding))
                if w.direct:
                    self._mark(w)
                else:
                    w.wake.set()

    async def create(self, request: web.Request) -> web.Response:
        """POST a pod."""
        obj = self._decode(request, await request.read())
        ns = request.match_info["ns"]
        obj["metadata"]["namespace"] = ns
        key = f"{ns}/{obj['metadata']['name']}"
        if key in self.pods:
            return self._respond(request, {"kind": "Status", "code": 409, "reason": "AlreadyExists"}, 409)
        self._store(key, obj, "ADDED")
        return self._respond(request, obj, 201)

    async def update(self, request: web.Request) -> web.Response:
        """PUT a pod (unconditionally)."""
        obj = self._decode(request, await request.read())
        ns, name = request.match_info["ns"], request.match_info["name"]
        key = f"{ns}/{name}"
        if key not in self.pods:
            return self._respond(request, {"kind": "Status", "code": 404, "reason": "NotFound"}, 404)
        obj["metadata"]["namespace"] = ns
        obj["metadata"]["name"] = name
        self._store(key, obj, "MODIFIED")
        return self._respond(request, obj, 200)

    async def watch(self, request: web.Request) -> web.StreamResponse:
        """A watch stream from now (the benchmarks attach before writing)."""
        if request.query.get("watch", "").lower() not in ("1", "true"):
            items = sorted(self.pods.values(), key=lambda o: str(o["metadata"]["name"]))
            return self._respond(request, {"kind": "PodList", "apiVersion": "v1", "items": items,
                                           "metadata": {"resourceVersion": str(self.revision)}}, 200)
        encoding = "msgpack" if MSGPACK in request.headers.get("Accept", "") else "json"
        resp = web.StreamResponse(headers={"Content-Type": MSGPACK if encoding == "msgpack" else JSON})
        resp.enable_chunked_encoding()
        writer = await resp.prepare(request)
        await resp.write(b"")  # the headers go out now: the direct path writes after them
        w = Watcher(encoding)
        w.transport = request.transport
        self.watchers.append(w)
        try:
            while True:
                w.direct = False
                if w.queue:
                    n = min(512, len(w.queue))
                    await resp.write(b"".join(w.queue.popleft() for _ in range(n)))
                    continue
                w.wake.clear()
                if writer is not None:
                    await writer.drain()
                if w.queue:
                    continue
                w.direct = True
                await w.wake.wait()
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self.watchers.remove(w)
        return resp


def build_app() -> web.Application:
    """The bare application."""
    server = BareServer()

    async def ready(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(client_max_size=4 * 1024 * 1024)
    app.add_routes([
        web.post("/api/v1/namespaces/{ns}/pods", server.create),
        web.put("/api/v1/namespaces/{ns}/pods/{name}", server.update),
        web.get("/api/v1/namespaces/{ns}/pods", server.watch),
        web.get("/readyz", ready),
    ])
    return app


def main(argv: list[str] | None = None) -> int:
    """Serve until SIGTERM/SIGINT."""
    p = argparse.ArgumentParser(description="bare aiohttp reference server for the kubemesh benchmarks")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080)
    a = p.parse_args(argv)
    factory: Callable[[], asyncio.AbstractEventLoop] = asyncio.new_event_loop
    with contextlib.suppress(ImportError):
        import uvloop  # noqa: PLC0415 - optional (not on Windows): the stock loop works, only slower
        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(_serve(a.host, a.port))
    return 0


async def _serve(host: str, port: int) -> None:
    runner = web.AppRunner(build_app(), handle_signals=False, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, backlog=4096, reuse_address=True)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    sys.exit(main())

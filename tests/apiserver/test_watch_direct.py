"""The direct write path of watch streams: coalescing, order across the switch, slow clients.

A `Sink` stand-in records what the flusher writes; the stream's task yields what the slow
path writes; both go into one log, which must be the events in revision order, each once.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson

from kubemesh.apiserver.registry import Registry, WriteOptions
from kubemesh.apiserver.storage import Store
from kubemesh.apiserver.watching import Watcher, WatchHub, WatchSettings
from kubemesh.services.machinery.clock import ManualClock
from kubemesh.services.model.kinds import PODS, Obj
from kubemesh.services.model.selectors import parse_label_selector

if TYPE_CHECKING:
    from conftest import StartApiServer

OPTS = WriteOptions()


class FakeSink:
    """A connection whose buffer can be made full, and whose drain the test releases."""

    def __init__(self, log: list[bytes]) -> None:
        self.log = log
        self.full = False
        self.writes = 0
        self.aborted = False
        self.room = asyncio.Event()
        self.room.set()
        self.delay = 0.0
        """Seconds each write blocks the loop (an expensive flush)."""

    def write(self, data: bytes) -> bool:
        if self.delay:
            time.sleep(self.delay)
        self.writes += 1
        self.log.append(data)
        return not self.full

    async def drain(self) -> None:
        await self.room.wait()

    def abort(self) -> None:
        self.aborted = True
        self.room.set()

    def fill(self) -> None:
        self.full = True
        self.room.clear()

    def empty(self) -> None:
        self.full = False
        self.room.set()


def make(*, max_queue: int = 1000, interval: float = 0.0) -> tuple[Registry, WatchHub]:
    clock = ManualClock()
    store = Store()
    hub = WatchHub(store=store, now=clock.now,
                   settings=WatchSettings(max_queue=max_queue, bookmark_interval=3600, flush_interval=interval))
    store.subscribe(hub.publish)
    reg = Registry(store=store, clock=clock, rng=random.Random(1))
    return reg, hub


def pod(name: str) -> Obj:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


def open_watch(hub: WatchHub, reg: Registry) -> Watcher:
    return hub.watch(PODS, namespace=None, labels=None, fields=None, resource_version=str(reg.store.revision),
                     send_initial_events=False, encoding="json", table=False, bookmarks=False, identity=("t", "t"))


def names(log: list[bytes]) -> list[str]:
    out = []
    for chunk in log:
        for line in chunk.splitlines():
            if line:
                out.append(orjson.loads(line)["object"]["metadata"]["name"])
    return out


async def start(w: Watcher, log: list[bytes]) -> asyncio.Task[Any]:
    """Run the stream's task as the server does: what it yields is written, in order."""

    async def pump() -> None:
        async for chunk in w.stream():
            log.append(chunk)

    task = asyncio.create_task(pump(), name=f"watch-{w.id}")
    for _ in range(5):
        await asyncio.sleep(0)
    return task


def is_direct(w: Watcher) -> bool:
    return w.direct


def sink_of(w: Watcher) -> object:
    return w.sink


async def direct_watch(hub: WatchHub, reg: Registry) -> tuple[Watcher, list[bytes], FakeSink, asyncio.Task[Any]]:
    """A watcher with a FakeSink and its stream's task running: (watcher, what was written, sink, task)."""
    w = open_watch(hub, reg)
    log: list[bytes] = []
    sink = FakeSink(log)
    w.sink = sink
    return w, log, sink, await start(w, log)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


async def test_events_written_by_the_flusher_one_chunk_per_flush() -> None:
    reg, hub = make()
    w, log, sink, task = await direct_watch(hub, reg)
    assert w.direct
    for i in range(10):
        reg.create(PODS, "default", pod(f"p{i}"), OPTS)  # one loop iteration: one flush
    await settle()
    assert names(log) == [f"p{i}" for i in range(10)]
    assert sink.writes == 1
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_a_flush_waits_as_long_as_the_last_one_took_at_most_the_interval() -> None:
    reg, hub = make(interval=0.05)
    _, log, sink, task = await direct_watch(hub, reg)
    reg.create(PODS, "default", pod("first"), OPTS)
    await settle()
    assert sink.writes == 1  # idle hub: written at the end of the iteration
    reg.create(PODS, "default", pod("second"), OPTS)
    await settle()
    assert sink.writes == 2  # the last flush took no time: no gap to wait out

    sink.delay = 0.02  # flushes now take 20 ms: the next one waits about as long
    reg.create(PODS, "default", pod("slow"), OPTS)
    await settle()
    assert sink.writes == 3
    for i in range(5):
        reg.create(PODS, "default", pod(f"p{i}"), OPTS)
    await settle()
    assert sink.writes == 3  # inside the gap: waiting, coalesced
    await asyncio.sleep(0.1)
    assert sink.writes == 4

    sink.delay = 0.2  # a very slow flush: the gap is capped at the interval (50 ms)
    reg.create(PODS, "default", pod("slower"), OPTS)
    await settle()
    sink.delay = 0.0
    reg.create(PODS, "default", pod("last"), OPTS)
    await settle()
    assert sink.writes == 5
    await asyncio.sleep(0.15)
    assert sink.writes == 6
    assert names(log) == ["first", "second", "slow", "p0", "p1", "p2", "p3", "p4", "slower", "last"]
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_full_buffer_hands_over_to_the_task_and_back_in_order() -> None:
    reg, hub = make()
    w, log, sink, task = await direct_watch(hub, reg)
    reg.create(PODS, "default", pod("a0"), OPTS)
    sink.fill()
    reg.create(PODS, "default", pod("a1"), OPTS)
    await settle()  # a1 was written, the sink said full: the task now awaits the drain
    assert not w.direct
    for i in range(3):
        reg.create(PODS, "default", pod(f"b{i}"), OPTS)  # queued while congested
    await settle()
    assert names(log) == ["a0", "a1"]
    sink.empty()
    await settle()
    assert names(log) == ["a0", "a1", "b0", "b1", "b2"]  # written once drained, without a later event
    reg.create(PODS, "default", pod("c0"), OPTS)
    await settle()
    assert is_direct(w)  # a function call: mypy narrowed `w.direct` to False above
    assert names(log) == ["a0", "a1", "b0", "b1", "b2", "c0"]
    w.close("done")
    await asyncio.wait_for(task, 1)


async def test_a_client_that_stops_reading_is_cut_off() -> None:
    reg, hub = make(max_queue=5)
    w, _, sink, task = await direct_watch(hub, reg)
    sink.fill()
    reg.create(PODS, "default", pod("x"), OPTS)
    await settle()
    for i in range(6):
        reg.create(PODS, "default", pod(f"y{i}"), OPTS)
    assert w.closed and "too slow" in w.close_reason
    assert sink.aborted
    await asyncio.wait_for(task, 1)
    assert len(w.queue) <= 5


async def test_a_stream_that_fails_to_write_is_cut_off_and_the_others_still_get_their_events() -> None:
    reg, hub = make()
    a, b = open_watch(hub, reg), open_watch(hub, reg)
    log_a: list[bytes] = []
    log_b: list[bytes] = []
    sink_a, sink_b = FakeSink(log_a), FakeSink(log_b)
    a.sink, b.sink = sink_a, sink_b

    def broken(w: Watcher, items: Any) -> None:
        raise RuntimeError("history is broken")

    a.on_deliver = broken
    tasks = [await start(a, log_a), await start(b, log_b)]
    reg.create(PODS, "default", pod("p0"), OPTS)
    await settle()
    assert a.closed and sink_a.aborted
    assert names(log_b) == ["p0"]
    reg.create(PODS, "default", pod("p1"), OPTS)
    await settle()
    assert names(log_b) == ["p0", "p1"]
    b.close("done")
    for task in tasks:
        await asyncio.wait_for(task, 1)


async def test_a_finished_stream_is_never_written_again() -> None:
    reg, hub = make(interval=0.05)
    w, log, sink, task = await direct_watch(hub, reg)
    sink.delay = 0.02  # a slow flush: the next one waits
    reg.create(PODS, "default", pod("first"), OPTS)
    await settle()
    reg.create(PODS, "default", pod("pending"), OPTS)  # waits for the next flush...
    task.cancel()  # ... when timeoutSeconds ends the stream
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await asyncio.sleep(0.08)
    assert names(log) == ["first"]
    assert sink_of(w) is None
    assert not is_direct(w)


async def test_without_a_sink_the_task_writes_everything() -> None:
    reg, hub = make()
    w = open_watch(hub, reg)
    log: list[bytes] = []
    task = await start(w, log)
    for i in range(3):
        reg.create(PODS, "default", pod(f"p{i}"), OPTS)
        await settle()
    assert not w.direct
    assert names(log) == ["p0", "p1", "p2"]
    w.close("done")
    await asyncio.wait_for(task, 1)


# ---- over HTTP, against the real process ----------------------------------------------------


def _open_watches(metrics_text: str) -> int:
    for line in metrics_text.splitlines():
        if line.startswith("apiserver_registered_watchers "):
            return int(float(line.split()[1]))
    raise AssertionError("no apiserver_registered_watchers in /metrics")


async def test_a_watch_client_that_stops_reading_is_disconnected_and_the_server_keeps_serving(
        start_apiserver: StartApiServer) -> None:
    server = await start_apiserver(extra_args=("--watch-queue", "20"))
    host, port = "127.0.0.1", server.port
    # A raw client: sends the watch request, reads the response head, then never reads again.
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"GET /api/v1/namespaces/default/pods?watch=true HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    big = "x" * 200_000  # each event is ~200 KB: the socket buffers fill after a few dozen
    async with aiohttp.ClientSession() as http:
        cut = False
        for i in range(400):
            body = {"metadata": {"name": f"big-{i}", "annotations": {"blob": big}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]}}
            async with http.post(f"{server.url}/api/v1/namespaces/default/pods", json=body) as r:
                assert r.status == 201, await r.text()
            if i % 20 == 19:
                async with http.get(f"{server.url}/metrics") as r:
                    text = await r.text()
                if _open_watches(text) == 0:
                    cut = True
                    break
        assert cut, "the watcher that stopped reading was never cut off"
        async with http.get(f"{server.url}/api/v1/namespaces/default/pods/big-0") as r:
            assert r.status == 200
    # The server dropped the connection: reading drains what was buffered, then ends.
    with contextlib.suppress(ConnectionResetError):
        async with asyncio.timeout(10):
            while await reader.read(1 << 20):
                pass
    writer.close()


async def test_live_events_over_http_arrive_whole_and_in_order(start_apiserver: StartApiServer) -> None:
    server = await start_apiserver()
    async with aiohttp.ClientSession() as http:
        url = f"{server.url}/api/v1/namespaces/default/pods"
        async with http.get(url, params={"watch": "true"}) as stream:
            for i in range(60):
                async with http.post(url, json=pod(f"p{i:02d}")) as r:
                    assert r.status == 201
            got: list[tuple[str, int]] = []
            async with asyncio.timeout(10):
                while len(got) < 60:
                    line = await stream.content.readline()  # the client undoes the chunked framing
                    ev = orjson.loads(line)
                    got.append((ev["object"]["metadata"]["name"], int(ev["object"]["metadata"]["resourceVersion"])))
    assert [n for n, _ in got] == [f"p{i:02d}" for i in range(60)]
    assert [rv for _, rv in got] == sorted(rv for _, rv in got)


async def test_a_timed_out_watch_leaves_its_connection_clean_for_the_next_request(
        start_apiserver: StartApiServer) -> None:
    server = await start_apiserver()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /api/v1/namespaces/default/pods?watch=true&timeoutSeconds=1 HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    stop = asyncio.Event()

    async def churn() -> None:  # writes keep coming while the watch times out
        async with aiohttp.ClientSession() as http:
            i = 0
            while not stop.is_set():
                async with http.post(f"{server.url}/api/v1/namespaces/default/pods", json=pod(f"c{i}")) as r:
                    assert r.status == 201
                i += 1

    churner = asyncio.create_task(churn())
    try:
        async with asyncio.timeout(15):
            head = await reader.readuntil(b"\r\n\r\n")
            assert b"chunked" in head.lower()
            while True:  # read chunks up to the terminating one
                size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                await reader.readexactly(size + 2)
                if size == 0:
                    break
        await asyncio.sleep(0.3)  # time for a stray flush to show up
    finally:
        stop.set()
        await churner
    writer.write(b"GET /version HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    async with asyncio.timeout(5):
        first = await reader.readuntil(b"\r\n")
    assert first.startswith(b"HTTP/1.1 200"), first
    writer.close()


async def test_watchers_flushed_together_share_a_chunk_only_when_their_items_are_the_same() -> None:
    """The flusher builds one chunk per distinct backlog: a selector transition gets its own."""
    reg, hub = make()
    plain_a = hub.watch(PODS, namespace=None, labels=None, fields=None, resource_version=str(reg.store.revision),
                        send_initial_events=False, encoding="json", table=False, bookmarks=False,
                        identity=("t", "a"))
    plain_b = hub.watch(PODS, namespace=None, labels=None, fields=None, resource_version=str(reg.store.revision),
                        send_initial_events=False, encoding="json", table=False, bookmarks=False,
                        identity=("t", "b"))
    selected = hub.watch(PODS, namespace=None, labels=parse_label_selector("app=web"), fields=None,
                         resource_version=str(reg.store.revision), send_initial_events=False, encoding="json",
                         table=False, bookmarks=False, identity=("t", "s"))
    logs: dict[str, list[bytes]] = {}
    tasks = []
    for name, w in (("a", plain_a), ("b", plain_b), ("s", selected)):
        logs[name] = []
        w.sink = FakeSink(logs[name])
        tasks.append(await start(w, logs[name]))
    first = reg.create(PODS, "default", {**pod("p"), "metadata": {"name": "p", "labels": {"app": "web"}}}, OPTS)
    await settle()
    moved = {**first, "metadata": {**first["metadata"], "labels": {"app": "db"}}}
    reg.update(PODS, "default", "p", moved, OPTS)  # leaves the selector: DELETED for `selected` only
    await settle()

    def types(log: list[bytes]) -> list[str]:
        return [orjson.loads(line)["type"] for chunk in log for line in chunk.splitlines() if line]

    assert types(logs["a"]) == types(logs["b"]) == ["ADDED", "MODIFIED"]
    assert types(logs["s"]) == ["ADDED", "DELETED"]
    assert logs["a"] == logs["b"]
    for task in tasks:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_an_http_1_0_watch_streams_until_the_connection_closes(start_apiserver: StartApiServer) -> None:
    """HTTP/1.0 has no chunked encoding: the stream is the body, ended by closing the connection."""
    server = await start_apiserver()
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    writer.write(b"GET /api/v1/namespaces/default/pods?watch=true&timeoutSeconds=2 HTTP/1.0\r\nHost: x\r\n\r\n")
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") and b"Transfer-Encoding" not in head
    async with aiohttp.ClientSession() as http, \
            http.post(f"{server.url}/api/v1/namespaces/default/pods", json=pod("old-http")) as r:
        assert r.status == 201
    body = await asyncio.wait_for(reader.read(), 10)  # until the server closes, after timeoutSeconds
    writer.close()
    events = [orjson.loads(line) for line in body.splitlines() if line]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "old-http")]

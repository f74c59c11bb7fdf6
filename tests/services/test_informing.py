"""Informer against a small fake apiserver: list+watch, resume, relist, order, indexes, freeze."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from kubemesh.services.machinery.client import ApiClient, RetrySettings
from kubemesh.services.machinery.clock import ManualClock
from kubemesh.services.machinery.informing import (
    INDEX_BY_NODE,
    DeletedFinalStateUnknown,
    Informer,
    InformerSettings,
    Store,
    index_pods_by_node,
)
from kubemesh.services.model import codec
from kubemesh.services.model.codec import Encoding
from kubemesh.services.model.kinds import PODS, Obj, key_of, rv_of, uid_of

# ---------------------------------------------------------------------------------------------
# The fake apiserver: one resource (pods), a revision counter, an event log, a compaction point.


@dataclass
class FakeApi:
    rv: int = 0
    objects: dict[str, Obj] = field(default_factory=dict)
    log: list[tuple[int, str, Obj]] = field(default_factory=list)
    compacted: int = 0
    """Watches from a revision below this get 410."""
    gone_mode: Literal["event", "http"] = "event"
    silent: bool = False
    """Writes are not sent to open watches (a stream that silently lost events)."""
    stale_list: tuple[int, list[Obj]] | None = None
    stale_lists: int = 0
    """How many of the next lists are served from `stale_list` (a lagging snapshot)."""
    list_queries: list[dict[str, str]] = field(default_factory=list)
    watch_queries: list[dict[str, str]] = field(default_factory=list)
    watchers: list[asyncio.Queue[Obj | None]] = field(default_factory=list)
    uids: int = 0
    url: str = ""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/api/v1/pods", self.handle)
        return app

    # -- writes --------------------------------------------------------------------------------

    def write(self, etype: str, name: str, *, node: str = "", new_uid: bool = False) -> Obj:
        self.rv += 1
        key = f"default/{name}"
        old = self.objects.get(key)
        if old is None or new_uid:
            self.uids += 1
            uid = f"uid-{self.uids}"
        else:
            uid = uid_of(old)
        if etype == "DELETED":
            assert old is not None
            obj = {**old, "metadata": {**old["metadata"], "resourceVersion": str(self.rv)}}
            del self.objects[key]
        else:
            if old is not None and not node:
                node = old["spec"].get("nodeName", "")
            obj = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": name, "namespace": "default", "uid": uid,
                                "resourceVersion": str(self.rv)},
                   "spec": {"nodeName": node} if node else {}}
            self.objects[key] = obj
        self.log.append((self.rv, etype, obj))
        if not self.silent:
            self.broadcast({"type": etype, "object": obj})
        return obj

    def add(self, name: str, *, node: str = "", new_uid: bool = False) -> Obj:
        return self.write("ADDED", name, node=node, new_uid=new_uid)

    def update(self, name: str, *, node: str = "") -> Obj:
        return self.write("MODIFIED", name, node=node)

    def delete(self, name: str) -> Obj:
        return self.write("DELETED", name)

    # -- stream control ------------------------------------------------------------------------

    def broadcast(self, event: Obj | None) -> None:
        for q in self.watchers:
            q.put_nowait(event)

    def bookmark(self) -> None:
        self.broadcast({"type": "BOOKMARK",
                        "object": {"kind": "Pod", "apiVersion": "v1",
                                   "metadata": {"resourceVersion": str(self.rv)}}})

    def end_watches(self) -> None:
        self.broadcast(None)

    def expire(self) -> None:
        """Compact the history: watches from before now get 410."""
        self.compacted = self.rv

    def send_gone(self) -> None:
        self.broadcast({"type": "ERROR", "object": gone_status(self.compacted)})
        self.broadcast(None)

    # -- serving -------------------------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        enc: Encoding = "msgpack" if codec.MSGPACK in request.headers.get("Accept", "") else "json"
        query = dict(request.query)
        if query.get("watch") != "true":
            self.list_queries.append(query)
            if self.stale_lists and self.stale_list is not None:
                self.stale_lists -= 1
                rv, items = self.stale_list
            else:
                rv, items = self.rv, list(self.objects.values())
            body = {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(rv)},
                    "items": [{k: v for k, v in o.items() if k not in ("kind", "apiVersion")} for o in items]}
            return web.Response(body=codec.encode(body, enc), content_type=codec.content_type(enc))
        self.watch_queries.append(query)
        since = int(query.get("resourceVersion") or 0)
        if since < self.compacted:
            if self.gone_mode == "http":
                return web.Response(status=410, body=codec.encode(gone_status(since), enc),
                                    content_type=codec.content_type(enc))
            resp = web.StreamResponse(headers={"Content-Type": codec.content_type(enc)})
            await resp.prepare(request)
            await resp.write(encode_frame({"type": "ERROR", "object": gone_status(since)}, enc))
            await resp.write_eof()
            return resp
        # IMPORTANT: snapshot the backlog and subscribe with no await in between, or a write
        # could fall in the gap.
        q: asyncio.Queue[Obj | None] = asyncio.Queue()
        for rv, etype, obj in self.log:
            if rv > since:
                q.put_nowait({"type": etype, "object": obj})
        self.watchers.append(q)
        resp = web.StreamResponse(headers={"Content-Type": codec.content_type(enc)})
        try:
            await resp.prepare(request)
            while (event := await q.get()) is not None:
                await resp.write(encode_frame(event, enc))
            await resp.write_eof()
        except ConnectionError:
            pass
        finally:
            self.watchers.remove(q)
        return resp


def gone_status(rv: int) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": f"too old resource version: {rv}", "reason": "Expired", "code": 410}


def encode_frame(event: Obj, enc: Encoding) -> bytes:
    data = codec.encode(event, enc)
    return data if enc == "msgpack" else data + b"\n"


@pytest.fixture
async def api() -> AsyncIterator[FakeApi]:
    fake = FakeApi()
    server = TestServer(fake.app(), shutdown_timeout=1.0)
    await server.start_server()
    fake.url = str(server.make_url("")).rstrip("/")
    yield fake
    fake.end_watches()
    await server.close()


# ---------------------------------------------------------------------------------------------
# Helpers.


@dataclass
class Recorder:
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def on_add(self, obj: Obj, initial: bool) -> None:
        self.calls.append(("add", key_of(obj), rv_of(obj), initial))

    def on_update(self, old: Obj, new: Obj) -> None:
        self.calls.append(("update", key_of(new), rv_of(old), rv_of(new)))

    def on_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        if isinstance(obj, DeletedFinalStateUnknown):
            self.calls.append(("unknown", obj.key, rv_of(obj.obj)))
        else:
            self.calls.append(("delete", key_of(obj), rv_of(obj)))


@dataclass
class Harness:
    api: FakeApi
    clock: ManualClock
    informer: Informer
    rec: Recorder

    async def until(self, cond: Callable[[], bool], *, advance: bool = False) -> None:
        """Let the loop run (and, with `advance`, cluster time pass) until `cond` holds."""
        for _ in range(2000):
            if cond():
                return
            if advance:
                await self.clock.advance(1.0)
            await asyncio.sleep(0.002)
        raise AssertionError("condition never held")

    async def caught_up(self) -> None:
        await self.until(lambda: self.informer.last_resource_version == str(self.api.rv))

    def store_matches(self) -> bool:
        return {key_of(o): rv_of(o) for o in self.informer.list()} == \
            {k: rv_of(o) for k, o in self.api.objects.items()}


@contextlib.asynccontextmanager
async def informing(api: FakeApi, *, encoding: Encoding = "msgpack",
                    settings: InformerSettings | None = None) -> AsyncIterator[Harness]:
    clock = ManualClock()
    client = ApiClient(api.url, component="test", instance="t-1", encoding=encoding,
                       retry=RetrySettings(max_attempts=1))
    informer = Informer(client, PODS, clock=clock, indexers={INDEX_BY_NODE: index_pods_by_node},
                        rng=random.Random(7), settings=settings)
    rec = Recorder()
    informer.add_handlers(on_add=rec.on_add, on_update=rec.on_update, on_delete=rec.on_delete)
    task = asyncio.create_task(informer.run())
    try:
        yield Harness(api, clock, informer, rec)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()


# ---------------------------------------------------------------------------------------------
# List and watch.


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
async def test_lists_then_watches_from_the_lists_resource_version(api: FakeApi, encoding: Encoding) -> None:
    api.add("p1", node="node-1")
    api.add("p2")
    async with informing(api, encoding=encoding) as h:
        assert await h.informer.wait_for_sync(timeout=30)
        assert h.informer.has_synced
        assert sorted(h.rec.calls) == [("add", "default/p1", 1, True), ("add", "default/p2", 2, True)]
        assert h.informer.get("default/p1") == api.objects["default/p1"]  # kind filled in
        await h.until(lambda: len(api.watch_queries) == 1)
        assert "resourceVersion" not in api.list_queries[0]
        assert api.watch_queries[0]["resourceVersion"] == "2"
        assert api.watch_queries[0]["allowWatchBookmarks"] == "true"
        assert 300 <= int(api.watch_queries[0]["timeoutSeconds"]) <= 600

        h.rec.calls.clear()
        api.update("p1")
        api.delete("p2")
        api.add("p3")
        await h.caught_up()
        assert h.rec.calls == [("update", "default/p1", 1, 3), ("delete", "default/p2", 4),
                               ("add", "default/p3", 5, False)]
        assert h.store_matches()
        assert h.informer.last_resource_version == "5"


async def test_resumes_from_the_last_seen_resource_version_after_the_stream_ends(api: FakeApi) -> None:
    api.add("p1")
    async with informing(api) as h:
        await h.informer.wait_for_sync()
        await h.until(lambda: len(api.watch_queries) == 1)
        api.update("p1")
        await h.caught_up()
        api.end_watches()
        await h.until(lambda: len(api.watch_queries) == 2)
        assert api.watch_queries[1]["resourceVersion"] == "2"

        # A bookmark moves the resume point without an event.
        api.rv += 40  # writes to other resources
        api.bookmark()
        await h.until(lambda: h.informer.observed_resource_version == "42")
        api.end_watches()
        await h.until(lambda: len(api.watch_queries) == 3)
        assert api.watch_queries[2]["resourceVersion"] == "42"
        assert len(api.list_queries) == 1  # resumed, never relisted
        api.update("p1")
        await h.caught_up()
        assert h.rec.calls[-1] == ("update", "default/p1", 2, 43)


async def test_a_watch_error_backs_off_and_resumes_without_relisting(api: FakeApi) -> None:
    api.add("p1")
    async with informing(api) as h:
        await h.informer.wait_for_sync()
        await h.until(lambda: len(api.watch_queries) == 1)
        api.update("p1")
        await h.caught_up()
        api.broadcast({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                                   "reason": "InternalError", "code": 500, "message": "x"}})
        api.end_watches()
        await h.until(lambda: len(api.watch_queries) == 2, advance=True)
        assert api.watch_queries[1]["resourceVersion"] == "2"
        assert len(api.list_queries) == 1


@pytest.mark.parametrize("gone_mode", ["event", "http"])
async def test_relists_on_410_and_delivers_what_it_missed(api: FakeApi, gone_mode: Literal["event", "http"]) -> None:
    api.gone_mode = gone_mode
    for name in ("p1", "p2", "p3"):
        api.add(name)
    async with informing(api) as h:
        await h.informer.wait_for_sync()
        await h.until(lambda: len(api.watch_queries) == 1)
        last_known_p2 = api.objects["default/p2"]
        h.rec.calls.clear()
        # The stream loses these events, then the history is compacted past them.
        api.silent = True
        api.update("p1")                 # changed
        api.delete("p2")                 # vanished
        api.delete("p3")
        api.add("p3", new_uid=True)      # replaced under the same key
        api.add("p4")                    # new
        api.expire()
        api.silent = False
        if gone_mode == "event":
            api.send_gone()              # ERROR event with a 410 Status on the open stream
        else:
            api.end_watches()            # the resumed watch is answered 410 at request time
        await h.until(lambda: len(api.list_queries) == 2, advance=True)
        await h.caught_up()
        assert api.list_queries[1]["resourceVersion"] == "3"  # never back in time
        assert h.store_matches()
        calls = sorted(h.rec.calls, key=lambda c: (c[1], c[0] != "unknown"))
        assert calls == [
            ("update", "default/p1", 1, 4),
            ("unknown", "default/p2", rv_of(last_known_p2)),
            ("unknown", "default/p3", 3),
            ("add", "default/p3", 7, False),
            ("add", "default/p4", 8, False),
        ]
        # After the relist the informer watches from the list's revision.
        await h.until(lambda: api.watch_queries[-1]["resourceVersion"] == "8")


async def test_a_missed_delete_carries_the_last_known_state(api: FakeApi) -> None:
    api.add("p1", node="node-1")
    async with informing(api) as h:
        await h.informer.wait_for_sync()
        await h.until(lambda: len(api.watch_queries) == 1)
        api.update("p1", node="node-2")
        await h.caught_up()
        seen: list[Obj | DeletedFinalStateUnknown] = []
        h.informer.add_handlers(on_delete=seen.append)
        api.silent = True
        api.delete("p1")
        api.expire()
        api.silent = False
        api.send_gone()
        await h.until(lambda: bool(seen), advance=True)
        assert len(seen) == 1
        gone = seen[0]
        assert isinstance(gone, DeletedFinalStateUnknown)
        assert gone.key == "default/p1"
        assert gone.obj["spec"]["nodeName"] == "node-2"
        assert rv_of(gone.obj) == 2
        assert h.informer.get("default/p1") is None


async def test_a_relist_never_goes_back_in_time(api: FakeApi) -> None:
    api.add("p1")
    stale = (1, [dict(api.objects["default/p1"])])
    async with informing(api) as h:
        await h.informer.wait_for_sync()
        await h.until(lambda: len(api.watch_queries) == 1)
        api.update("p1")
        api.update("p1")
        await h.caught_up()
        # Two lists come from a lagging snapshot (rv 1), then a fresh one.
        api.stale_list, api.stale_lists = stale, 2
        api.send_gone()
        await h.until(lambda: len(api.list_queries) == 4, advance=True)
        await h.until(lambda: api.stale_lists == 0 and len(api.watch_queries) >= 2, advance=True)
        assert [q.get("resourceVersion") for q in api.list_queries[1:]] == ["3", "3", "3"]
        # The stale lists were discarded: p1 never went back to rv 1.
        assert all(c[0] == "add" for c in h.rec.calls[:1])
        assert [c for c in h.rec.calls if c[0] != "add"] == [("update", "default/p1", 1, 2),
                                                             ("update", "default/p1", 2, 3)]
        assert rv_of(h.informer.get("default/p1") or {}) == 3
        assert api.watch_queries[-1]["resourceVersion"] == "3"


async def test_per_object_order_holds_across_stream_ends_and_relists(api: FakeApi) -> None:
    rng = random.Random(1234)
    names = [f"p{i}" for i in range(6)]
    for name in names[:3]:
        api.add(name)
    async with informing(api) as h:
        await h.informer.wait_for_sync()
        for batch in range(25):
            for _ in range(8):
                name = rng.choice(names)
                if f"default/{name}" not in api.objects:
                    api.add(name, new_uid=True)
                elif rng.random() < 0.2:
                    api.delete(name)
                else:
                    api.update(name, node=rng.choice(["node-1", "node-2", ""]))
            if batch % 5 == 1:
                api.end_watches()
            elif batch % 5 == 3:
                api.silent = True
                api.update(rng.choice(list(api.objects)).split("/")[1])
                api.expire()
                api.silent = False
                api.send_gone()
            await h.until(lambda: h.informer.last_resource_version == str(api.rv)
                          and h.store_matches(), advance=True)
    # Per key, resource versions never go backwards; a missed deletion repeats the last one.
    last: dict[str, int] = {}
    for call in h.rec.calls:
        key = call[1]
        rv = call[3] if call[0] == "update" else call[2]
        if call[0] == "update":
            assert call[2] < call[3]
        if call[0] == "unknown":
            assert rv <= last[key]
        else:
            assert rv > last.get(key, 0), call
        last[key] = max(rv, last.get(key, 0))
    assert len(api.list_queries) > 1


# ---------------------------------------------------------------------------------------------
# Indexes, handlers, sync.


async def test_pods_are_indexed_by_node(api: FakeApi) -> None:
    api.add("a", node="node-1")
    api.add("b", node="node-1")
    api.add("c", node="node-2")
    api.add("pending")
    async with informing(api) as h:
        await h.informer.wait_for_sync()

        def on(node: str) -> list[str]:
            return sorted(key_of(o) for o in h.informer.by_index(INDEX_BY_NODE, node))

        assert on("node-1") == ["default/a", "default/b"]
        assert on("node-2") == ["default/c"]
        assert on("") == ["default/pending"]
        api.update("b", node="node-2")
        api.delete("c")
        await h.caught_up()
        assert on("node-1") == ["default/a"]
        assert on("node-2") == ["default/b"]
        assert on("node-3") == []


def test_store_index_follows_updates_and_removals() -> None:
    store = Store(indexers={"n": index_pods_by_node})
    store.put("ns/a", {"spec": {"nodeName": "x"}})
    store.put("ns/a", {"spec": {"nodeName": "y"}})
    assert store.by_index("n", "x") == []
    assert store.index_values("n") == ["y"]
    store.replace({"ns/b": {"spec": {}}})
    assert store.index_values("n") == [""]
    assert store.remove("ns/b") is not None
    assert store.index_values("n") == []
    assert len(store) == 0


async def test_wait_for_sync_times_out_before_run_and_succeeds_after(api: FakeApi) -> None:
    api.add("p1")
    client = ApiClient(api.url, component="test", instance="t-1")
    informer = Informer(client, PODS, clock=ManualClock(), rng=random.Random(1))
    assert not await informer.wait_for_sync(timeout=0.01)
    task = asyncio.create_task(informer.run())
    try:
        assert await informer.wait_for_sync(timeout=30)
        assert [key_of(o) for o in informer.list()] == ["default/p1"]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.close()


async def test_a_failing_handler_neither_stops_the_informer_nor_other_handlers(api: FakeApi) -> None:
    api.add("p1")
    async with informing(api) as h:
        def explode(obj: Obj, initial: bool) -> None:
            raise RuntimeError("handler bug")

        h.informer.add_handlers(on_add=explode)
        await h.informer.wait_for_sync()
        later = Recorder()
        h.informer.add_handlers(on_add=later.on_add)
        assert later.calls == [("add", "default/p1", 1, True)]  # late handler catches up
        api.add("p2")
        await h.caught_up()
        assert later.calls[-1] == ("add", "default/p2", 2, False)
        assert h.rec.calls[-1] == ("add", "default/p2", 2, False)


async def test_list_errors_back_off_and_retry(api: FakeApi) -> None:
    api.add("p1")
    failures = 2
    original = api.handle

    async def flaky(request: web.Request) -> web.StreamResponse:
        nonlocal failures
        if request.query.get("watch") != "true" and failures:
            failures -= 1
            return web.Response(status=500, text="boom")
        return await original(request)

    api.handle = flaky  # type: ignore[method-assign]
    # The app routes to api.handle at build time, so rebuild the server around the new handler.
    server = TestServer(api.app(), shutdown_timeout=1.0)
    await server.start_server()
    api.url = str(server.make_url("")).rstrip("/")
    try:
        async with informing(api) as h:
            await h.until(lambda: h.informer.has_synced, advance=True)
            assert failures == 0
            assert h.store_matches()
    finally:
        api.end_watches()
        await server.close()


# ---------------------------------------------------------------------------------------------
# Freezing (chaos: a stale cache).


async def test_a_frozen_informer_buffers_and_applies_in_order_on_unfreeze(api: FakeApi) -> None:
    api.add("p1")
    api.add("p2")
    async with informing(api) as h:
        await h.informer.wait_for_sync()
        h.rec.calls.clear()
        h.informer.freeze()
        api.update("p1")
        api.update("p1")
        api.delete("p2")
        api.add("p3")
        await h.until(lambda: h.informer.observed_resource_version == "6")
        # It read the events but applied none of them.
        assert h.rec.calls == []
        assert h.informer.last_resource_version == "2"
        assert rv_of(h.informer.get("default/p1") or {}) == 1
        assert h.informer.get("default/p2") is not None
        h.informer.unfreeze()
        assert h.rec.calls == [("update", "default/p1", 1, 3), ("update", "default/p1", 3, 4),
                               ("delete", "default/p2", 5), ("add", "default/p3", 6, False)]
        assert h.store_matches()
        assert h.informer.last_resource_version == "6"
        assert len(api.list_queries) == 1


async def test_a_frozen_informer_that_overflows_relists_on_unfreeze(api: FakeApi) -> None:
    api.add("p1")
    api.add("p2")
    async with informing(api, settings=InformerSettings(freeze_buffer=2)) as h:
        await h.informer.wait_for_sync()
        await h.until(lambda: len(api.watch_queries) == 1)
        h.rec.calls.clear()
        h.informer.freeze()
        for _ in range(3):
            api.update("p1")
        api.delete("p2")
        api.add("p3")
        await h.until(lambda: h.informer.observed_resource_version == "7")
        assert h.rec.calls == []
        h.informer.unfreeze()
        await h.until(lambda: len(api.list_queries) == 2)
        await h.caught_up()
        assert api.list_queries[1]["resourceVersion"] == "7"
        assert h.store_matches()
        assert sorted(h.rec.calls) == [("add", "default/p3", 7, False), ("unknown", "default/p2", 2),
                                       ("update", "default/p1", 1, 5)]

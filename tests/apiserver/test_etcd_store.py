"""apiserver/etcdstore.py against a real etcd 3.4: Kubernetes' etcd3 storage semantics.

One etcd (`/usr/bin/etcd`, `scripts/etcd-setup`) for the module, on ephemeral loopback ports
with its data in a temporary directory, progress notifications every 300 ms; stopped after.
Each test writes under its own prefix. Without etcd the tests skip, which under CI=true is a
failure (tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from etcdkit import running_etcd

from kubemesh.apiserver.etcdstore import (
    AlreadyExists,
    Compacted,
    Conflict,
    EtcdSettings,
    EtcdStore,
    FutureRevision,
    KeyValue,
    Progress,
    Unavailable,
    Watch,
    WatchEvent,
    channel_target,
    decode_object,
    encode_object,
    object_key,
    resource_prefix,
)


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A single-member etcd on free loopback ports: its client URL (`etcdkit`)."""
    with running_etcd(tmp_path_factory.mktemp("etcd")) as url:
        yield url


@pytest.fixture
async def store(etcd: str) -> AsyncIterator[EtcdStore]:
    async with await EtcdStore.open(settings=EtcdSettings(endpoints=(etcd,), timeout=5.0)) as s:
        yield s


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> bytes:
    """A prefix of this test's own."""
    return resource_prefix(resource=f"t-{request.node.name.replace('[', '-').rstrip(']')}")


async def next_item(watch: Watch, wait: float = 5.0) -> WatchEvent | Progress:
    return await asyncio.wait_for(anext(watch), wait)


async def next_event(watch: Watch, wait: float = 5.0) -> WatchEvent:
    """The next event, past any bookmarks."""
    while True:
        item = await next_item(watch, wait)
        if isinstance(item, WatchEvent):
            return item


def test_keys() -> None:
    assert object_key(resource="pods", namespace="default", name="web-0") == b"/registry/pods/default/web-0"
    assert object_key(resource="nodes", namespace=None, name="n1") == b"/registry/nodes/n1"
    assert object_key(resource="pods", namespace="ns", name="a", prefix="/kubemesh/") == b"/kubemesh/pods/ns/a"
    assert resource_prefix(resource="pods") == b"/registry/pods/"
    assert resource_prefix(resource="pods", namespace="ns") == b"/registry/pods/ns/"
    with pytest.raises(ValueError):
        object_key(resource="pods", namespace="a/b", name="x")
    assert channel_target(["http://127.0.0.1:2379"]) == "127.0.0.1:2379"
    assert channel_target(["http://127.0.0.1:1", "127.0.0.2:2"]) == "ipv4:127.0.0.1:1,127.0.0.2:2"
    with pytest.raises(ValueError):
        channel_target(["https://127.0.0.1:2379"])
    with pytest.raises(ValueError):
        channel_target(["http://a:1", "http://b:2"])


def test_encode_decode_object() -> None:
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "c", "namespace": "ns", "resourceVersion": "17"}, "data": {"k": "v"}}
    raw = encode_object(obj)
    assert b"resourceVersion" not in raw
    assert obj["metadata"]["resourceVersion"] == "17"  # the input is untouched
    kv = KeyValue(key=b"/registry/configmaps/ns/c", value=raw, create_revision=40, mod_revision=42, version=2)
    back = decode_object(kv)
    assert back["metadata"] == {"name": "c", "namespace": "ns", "resourceVersion": "42"}
    assert back["data"] == {"k": "v"}


async def test_create_conflict(store: EtcdStore, prefix: bytes) -> None:
    key = prefix + b"ns/a"
    rev = await store.create(key=key, value=b"one")
    with pytest.raises(AlreadyExists) as info:
        await store.create(key=key, value=b"two")
    assert info.value.current is not None
    assert (info.value.current.value, info.value.current.mod_revision) == (b"one", rev)
    got = await store.get(key=key)
    assert got is not None
    assert (got.value, got.create_revision, got.mod_revision, got.version) == (b"one", rev, rev, 1)


async def test_update_compares_mod_revision(store: EtcdStore, prefix: bytes) -> None:
    key = prefix + b"ns/a"
    rev1 = await store.create(key=key, value=b"v1")
    rev2 = await store.update(key=key, value=b"v2", expected_mod_revision=rev1)
    assert rev2 > rev1
    # A writer that read rev1 loses, and learns the state it lost to (GuaranteedUpdate retries from it).
    with pytest.raises(Conflict) as info:
        await store.update(key=key, value=b"stale", expected_mod_revision=rev1)
    current = info.value.current
    assert current is not None
    assert (current.value, current.mod_revision, current.create_revision, current.version) == (b"v2", rev2, rev1, 2)
    rev3 = await store.update(key=key, value=b"v3", expected_mod_revision=current.mod_revision)
    got = await store.get(key=key)
    assert got is not None and (got.value, got.mod_revision) == (b"v3", rev3)
    # An absent key: Conflict without a current kv (NotFound for the caller); never created by an update.
    with pytest.raises(Conflict) as gone:
        await store.update(key=prefix + b"ns/missing", value=b"x", expected_mod_revision=rev1)
    assert gone.value.current is None
    assert await store.get(key=prefix + b"ns/missing") is None
    with pytest.raises(ValueError):
        await store.update(key=prefix + b"ns/missing", value=b"x", expected_mod_revision=0)


async def test_delete_compares_mod_revision(store: EtcdStore, prefix: bytes) -> None:
    key = prefix + b"ns/a"
    rev1 = await store.create(key=key, value=b"v1")
    rev2 = await store.update(key=key, value=b"v2", expected_mod_revision=rev1)
    with pytest.raises(Conflict) as info:
        await store.delete(key=key, expected_mod_revision=rev1)
    assert info.value.current is not None and info.value.current.mod_revision == rev2
    assert await store.get(key=key) is not None
    rev3, deleted = await store.delete(key=key, expected_mod_revision=rev2)
    assert rev3 > rev2
    assert (deleted.key, deleted.value, deleted.mod_revision) == (key, b"v2", rev2)
    assert await store.get(key=key) is None
    with pytest.raises(Conflict) as gone:
        await store.delete(key=key, expected_mod_revision=rev2)
    assert gone.value.current is None
    # The deleted state stays readable at an older revision, until compacted.
    old = await store.get(key=key, revision=rev2)
    assert old is not None and old.value == b"v2"


async def test_paging(store: EtcdStore, prefix: bytes) -> None:
    names = [f"ns/o{i:02d}".encode() for i in range(7)]
    for name in names:
        await store.create(key=prefix + name, value=name)
    await store.create(key=prefix[:-1] + b"x/other", value=b"not under the prefix")
    whole = await store.list(prefix=prefix)
    assert [kv.key for kv in whole.kvs] == [prefix + n for n in names]
    assert (whole.continue_from, whole.remaining) == (None, 0)
    assert whole.revision == await store.current_revision()
    seen: list[bytes] = []
    page = await store.list(prefix=prefix, limit=3)
    assert (len(page.kvs), page.remaining) == (3, 4)
    revision = page.revision
    pages = 1
    seen += [kv.key for kv in page.kvs]
    while page.continue_from is not None:
        page = await store.list(prefix=prefix, limit=3, revision=revision, continue_from=page.continue_from)
        assert page.revision == revision
        seen += [kv.key for kv in page.kvs]
        pages += 1
    assert pages == 3
    assert seen == [prefix + n for n in names]
    ns_only = await store.list(prefix=prefix + b"ns/", limit=100)
    assert len(ns_only.kvs) == 7
    with pytest.raises(ValueError):
        await store.list(prefix=prefix, continue_from=b"/elsewhere")


async def test_list_at_a_revision_is_a_snapshot_while_writes_go_on(store: EtcdStore, prefix: bytes) -> None:
    revs = {}
    for i in range(20):
        key = prefix + b"ns/o%02d" % i
        revs[key] = await store.create(key=key, value=b"v0")
    first = await store.list(prefix=prefix, limit=4)
    snapshot_revision = first.revision
    stop = asyncio.Event()

    async def writer() -> int:
        # Updates every key, deletes some and creates others, until the paging is done.
        n = 0
        i = 0
        while not stop.is_set():
            key = prefix + b"ns/o%02d" % (i % 20)
            current = await store.get(key=key)
            if current is not None:
                if i % 7 == 3:
                    await store.delete(key=key, expected_mod_revision=current.mod_revision)
                else:
                    await store.update(key=key, value=b"v%d" % (i + 1), expected_mod_revision=current.mod_revision)
            await store.create(key=prefix + b"ns/new%04d" % i, value=b"new")
            n += 2
            i += 1
            await asyncio.sleep(0)
        return n

    task = asyncio.get_running_loop().create_task(writer())
    kvs = list(first.kvs)
    page = first
    while page.continue_from is not None:
        await asyncio.sleep(0.02)  # let writes land between pages
        page = await store.list(prefix=prefix, limit=4, revision=snapshot_revision, continue_from=page.continue_from)
        kvs += page.kvs
    stop.set()
    writes = await task
    assert writes > 0
    assert await store.current_revision() > snapshot_revision
    # Exactly the 20 keys as they were at the snapshot's revision.
    assert {kv.key: (kv.value, kv.mod_revision) for kv in kvs} == {k: (b"v0", r) for k, r in revs.items()}
    now = await store.list(prefix=prefix)
    assert len(now.kvs) > 20 and any(kv.value != b"v0" for kv in now.kvs)


async def test_watch_from_a_revision_delivers_every_later_event_in_order(store: EtcdStore, prefix: bytes) -> None:
    a, b = prefix + b"ns/a", prefix + b"ns/b"
    before = await store.create(key=prefix + b"ns/before", value=b"x")
    r1 = await store.create(key=a, value=b"a1")
    r2 = await store.create(key=b, value=b"b1")
    r3 = await store.update(key=a, value=b"a2", expected_mod_revision=r1)
    async with store.watch(prefix=prefix, start_revision=r1) as watch:
        first = await next_event(watch)
        # Writes while the watch is open come after the history, in order.
        r4, _ = await store.delete(key=b, expected_mod_revision=r2)
        r5 = await store.update(key=a, value=b"a3", expected_mod_revision=r3)
        events = [first] + [await next_event(watch) for _ in range(4)]
        assert watch.resume_revision == r5 + 1
    assert before < r1
    assert [(e.type, e.kv.key, e.revision) for e in events] == [
        ("PUT", a, r1), ("PUT", b, r2), ("PUT", a, r3), ("DELETE", b, r4), ("PUT", a, r5)]
    assert [e.kv.value for e in events] == [b"a1", b"b1", b"a2", b"", b"a3"]
    assert events[0].prev_kv is None and events[1].prev_kv is None
    prevs = [(e.prev_kv.value, e.prev_kv.mod_revision) for e in events[2:] if e.prev_kv is not None]
    assert prevs == [(b"a1", r1), (b"b1", r2), (b"a2", r3)]


async def test_progress_notification_on_an_idle_watch(store: EtcdStore, prefix: bytes) -> None:
    rev = await store.create(key=prefix + b"ns/a", value=b"x")
    async with store.watch(prefix=prefix, start_revision=rev + 1) as watch:
        # etcd runs with --experimental-watch-progress-notify-interval 300ms: nothing happens
        # under the prefix, and a bookmark comes anyway, at or past the last write.
        item = await next_item(watch, wait=10)
        assert isinstance(item, Progress)
        assert item.revision >= rev
        assert watch.resume_revision == item.revision + 1
        # Writes elsewhere move the store's revision; a bookmark asked for follows it.
        other = await store.create(key=prefix[:-1] + b"-elsewhere/x", value=b"x")
        await watch.request_progress()
        while True:
            item = await next_item(watch, wait=10)
            assert isinstance(item, Progress)
            if item.revision >= other:
                break
        # And an event still comes through after the bookmarks.
        r = await store.create(key=prefix + b"ns/b", value=b"y")
        event = await next_event(watch)
        assert (event.type, event.revision) == ("PUT", r)


class CuttableProxy:
    """A TCP proxy to etcd whose connections can all be cut at once (a network failure)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(OSError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def cut(self) -> None:
        for w in self.writers:
            w.transport.abort()
        self.writers.clear()

    async def stop(self) -> None:
        self.cut()
        if self.server is not None:
            self.server.close()


async def test_watch_resumes_exactly_after_a_lost_connection(etcd: str, store: EtcdStore, prefix: bytes) -> None:
    start = await store.create(key=prefix + b"ns/k0", value=b"0")
    proxy = CuttableProxy(int(etcd.rsplit(":", 1)[1]))
    await proxy.start()
    try:
        through = await EtcdStore.open(settings=EtcdSettings(endpoints=(f"http://127.0.0.1:{proxy.port}",)))
        async with through:
            watch = through.watch(prefix=prefix, start_revision=start)
            seen = [await next_event(watch)]
            for i in range(1, 4):
                await store.create(key=prefix + b"ns/k%d" % i, value=b"%d" % i)
            seen.append(await next_event(watch))
            proxy.cut()  # the network drops; events 2 and 3 may or may not have come through
            with pytest.raises(Unavailable):
                while True:
                    item = await next_item(watch)
                    if isinstance(item, WatchEvent):
                        seen.append(item)
            for i in range(4, 6):
                await store.create(key=prefix + b"ns/k%d" % i, value=b"%d" % i)
            # A new watch from resume_revision (through the same store: gRPC reconnects) goes on exactly.
            async with through.watch(prefix=prefix, start_revision=watch.resume_revision) as again:
                while len(seen) < 6:
                    seen.append(await next_event(again))
        assert [e.kv.value for e in seen] == [b"0", b"1", b"2", b"3", b"4", b"5"]
    finally:
        await proxy.stop()

    # A store closed under its watch ends the watch with Unavailable too.
    other = await EtcdStore.open(settings=EtcdSettings(endpoints=(etcd,)))
    watch = other.watch(prefix=prefix, start_revision=start)
    await next_event(watch)
    await other.close()
    with pytest.raises(Unavailable):
        while True:
            await next_item(watch)


async def test_compaction(store: EtcdStore, prefix: bytes) -> None:
    key = prefix + b"ns/a"
    r1 = await store.create(key=key, value=b"v1")
    r2 = await store.update(key=key, value=b"v2", expected_mod_revision=r1)
    before = await store.list(prefix=prefix)
    assert before.revision >= r2
    r3 = await store.update(key=key, value=b"v3", expected_mod_revision=r2)
    await store.compact(revision=r3)
    # Below the compaction: 410 Gone for the apiserver.
    with pytest.raises(Compacted) as listing:
        await store.list(prefix=prefix, revision=before.revision)
    assert listing.value.revision == before.revision
    with pytest.raises(Compacted):
        await store.get(key=key, revision=r1)
    with pytest.raises(Compacted) as watching:
        async with store.watch(prefix=prefix, start_revision=r1) as watch:
            await next_item(watch)
    assert (watching.value.revision, watching.value.compact_revision) == (r1, r3)
    assert watching.value.watch_cache_message() == f"too old resource version: {r1 - 1} ({r3 - 1})"
    # At the compaction revision and after: readable, and the watch delivers.
    at = await store.list(prefix=prefix, revision=r3)
    assert [kv.value for kv in at.kvs] == [b"v3"]
    async with store.watch(prefix=prefix, start_revision=r3) as watch:
        event = await next_event(watch)
        assert (event.revision, event.kv.value) == (r3, b"v3")
    with pytest.raises(Compacted):
        await store.compact(revision=r2)
    now = await store.current_revision()
    with pytest.raises(FutureRevision):
        await store.list(prefix=prefix, revision=now + 1000)
    with pytest.raises(FutureRevision):
        await store.compact(revision=now + 1000)


async def test_two_clients_racing_a_cas_exactly_one_wins(etcd: str, store: EtcdStore, prefix: bytes) -> None:
    """Two apiservers (two connections) updating one key from the same read: one wins, one retries."""
    other = await EtcdStore.open(settings=EtcdSettings(endpoints=(etcd,)))
    try:
        key = prefix + b"ns/contended"
        rev = await store.create(key=key, value=b"start")
        for round_ in range(20):
            results = await asyncio.gather(
                store.update(key=key, value=b"A%d" % round_, expected_mod_revision=rev),
                other.update(key=key, value=b"B%d" % round_, expected_mod_revision=rev),
                return_exceptions=True)
            wins = [r for r in results if isinstance(r, int)]
            losses = [r for r in results if isinstance(r, Conflict)]
            assert (len(wins), len(losses)) == (1, 1), results
            current = losses[0].current
            assert current is not None and current.mod_revision == wins[0]
            rev = wins[0]
        # Creates race the same way.
        created = await asyncio.gather(store.create(key=prefix + b"ns/new", value=b"A"),
                                       other.create(key=prefix + b"ns/new", value=b"B"), return_exceptions=True)
        assert sorted(type(r).__name__ for r in created) == ["AlreadyExists", "int"]
    finally:
        await other.close()


async def test_unreachable_etcd_is_unavailable() -> None:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(Unavailable):
            await EtcdStore.open(settings=EtcdSettings(endpoints=(f"http://127.0.0.1:{port}",), timeout=1.0))


async def test_several_endpoints_fail_over_to_one_that_answers(etcd: str) -> None:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{sock.getsockname()[1]}"
        async with await EtcdStore.open(settings=EtcdSettings(endpoints=(dead, etcd), timeout=5.0)) as s:
            key = b"/registry/t-failover/x"
            rev = await s.create(key=key, value=b"x")
            got = await s.get(key=key)
            assert got is not None and got.mod_revision == rev

"""The store's revision semantics and the watch contract, in-process."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import msgpack
import orjson
import pytest

from kubemesh.apiserver import errors
from kubemesh.apiserver.registry import DeleteOptions, Registry, WriteOptions
from kubemesh.apiserver.storage import LogBackend, Store
from kubemesh.apiserver.watching import Watcher, WatchHub, WatchSettings
from kubemesh.services.machinery.clock import ManualClock
from kubemesh.services.model.kinds import NAMESPACES, NODES, PODS, Obj
from kubemesh.services.model.selectors import parse_field_selector, parse_label_selector


def make(
    *, window: int = 100, max_queue: int = 1000, data_dir: Path | None = None
) -> tuple[Registry, WatchHub]:

    clock = ManualClock()
    store = Store(backend=LogBackend(data_dir, fsync=False) if data_dir else None)
    hub = WatchHub(store=store, now=clock.now,
                   settings=WatchSettings(window=window, max_queue=max_queue, bookmark_interval=3600))
    store.subscribe(hub.publish)
    return Registry(store=store, clock=clock, rng=random.Random(1)), hub


def pod(name: str, *, node: str | None = None, labels: dict[str, str] | None = None) -> Obj:
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
    if node:
        spec["nodeName"] = node
    return {"metadata": {"name": name, "labels": labels or {}}, "spec": spec}


OPTS = WriteOptions()


async def events_of(w: Watcher) -> list[tuple[str, str, str]]:
    """Drain what a watcher has queued right now: (type, name, rv)."""
    w.close("test")
    out = []
    async for chunk in w.stream():
        for line in chunk.splitlines():
            if line:
                ev = orjson.loads(line)
                md = ev["object"]["metadata"]
                out.append((ev["type"], md.get("name", ""), md["resourceVersion"]))
    return out


def watch(hub: WatchHub, rv: str, **kw: Any) -> Watcher:
    params: dict[str, Any] = {"namespace": None, "labels": None, "fields": None, "send_initial_events": False,
                              "encoding": "json", "table": False, "bookmarks": False, "identity": ("t", "t")}
    params.update(kw)
    return hub.watch(PODS, resource_version=rv, **params)


def test_every_write_takes_the_next_global_revision() -> None:
    reg, _ = make()
    start = reg.store.revision
    a = reg.create(PODS, "default", pod("a"), OPTS)
    n = reg.create(NODES, None, {"metadata": {"name": "n1"}}, OPTS)
    b = reg.create(PODS, "default", pod("b"), OPTS)
    assert [int(o["metadata"]["resourceVersion"]) for o in (a, n, b)] == [start + 1, start + 2, start + 3]
    _, rv = reg.list_objects(PODS, namespace="default", labels=None, fields=None)
    assert rv == start + 3


def test_stale_update_conflicts_and_a_noop_is_not_a_write() -> None:
    reg, _ = make()
    a = reg.create(PODS, "default", pod("a"), OPTS)
    stale = orjson.loads(orjson.dumps(a))
    updated = orjson.loads(orjson.dumps(a))
    updated["metadata"]["labels"] = {"x": "1"}
    reg.update(PODS, "default", "a", updated, OPTS)
    stale["metadata"]["labels"] = {"x": "2"}
    with pytest.raises(errors.StatusError) as exc:
        reg.update(PODS, "default", "a", stale, OPTS)
    assert exc.value.code == 409 and exc.value.reason == "Conflict"
    before = reg.store.revision
    same = orjson.loads(orjson.dumps(reg.get(PODS, "default", "a")))
    reg.update(PODS, "default", "a", same, OPTS)
    assert reg.store.revision == before


def test_generation_moves_with_spec_only_and_status_writes_keep_spec() -> None:
    reg, _ = make()
    reg.create(PODS, "default", pod("a"), OPTS)
    p = orjson.loads(orjson.dumps(reg.get(PODS, "default", "a")))
    p["metadata"]["labels"] = {"x": "1"}
    assert reg.update(PODS, "default", "a", p, OPTS)["metadata"]["generation"] == 1
    p = orjson.loads(orjson.dumps(reg.get(PODS, "default", "a")))
    p["spec"]["activeDeadlineSeconds"] = 5
    assert reg.update(PODS, "default", "a", p, OPTS)["metadata"]["generation"] == 2
    s = orjson.loads(orjson.dumps(reg.get(PODS, "default", "a")))
    s["status"] = {"phase": "Running"}
    s["spec"]["activeDeadlineSeconds"] = 99
    out = reg.update(PODS, "default", "a", s, OPTS, subresource="status")
    assert out["status"]["phase"] == "Running" and out["spec"]["activeDeadlineSeconds"] == 5


def test_graceful_pod_deletion_waits_for_the_kubelet() -> None:
    reg, _ = make()
    reg.create(PODS, "default", pod("a", node="n1"), OPTS)
    gone_now = reg.create(PODS, "default", pod("unbound"), OPTS)
    assert gone_now
    reg.delete(PODS, "default", "unbound", DeleteOptions())
    with pytest.raises(errors.StatusError):
        reg.get(PODS, "default", "unbound")
    terminating = reg.delete(PODS, "default", "a", DeleteOptions())
    assert terminating["metadata"]["deletionGracePeriodSeconds"] == 30
    assert reg.get(PODS, "default", "a")["metadata"]["deletionTimestamp"]
    with pytest.raises(errors.StatusError) as exc:
        reg.delete(PODS, "default", "a", DeleteOptions(grace_period_seconds=0, uid="wrong"))
    assert exc.value.code == 409
    reg.delete(PODS, "default", "a", DeleteOptions(grace_period_seconds=0, uid=terminating["metadata"]["uid"]))
    with pytest.raises(errors.StatusError):
        reg.get(PODS, "default", "a")


def test_finalizers_block_removal_until_emptied() -> None:
    reg, _ = make()
    body = {"metadata": {"name": "n1", "finalizers": ["example.com/x"]}}
    reg.create(NODES, None, body, OPTS)
    reg.delete(NODES, None, "n1", DeleteOptions())
    held = orjson.loads(orjson.dumps(reg.get(NODES, None, "n1")))
    assert held["metadata"]["deletionTimestamp"]
    held["metadata"]["finalizers"] = []
    reg.update(NODES, None, "n1", held, OPTS)
    with pytest.raises(errors.StatusError):
        reg.get(NODES, None, "n1")


def test_binding_sets_the_node_once() -> None:
    reg, _ = make()
    reg.create(PODS, "default", pod("a"), OPTS)
    reg.bind("default", "a", {"target": {"kind": "Node", "name": "n1"}}, OPTS)
    got = reg.get(PODS, "default", "a")
    assert got["spec"]["nodeName"] == "n1"
    assert any(c["type"] == "PodScheduled" for c in got["status"]["conditions"])
    with pytest.raises(errors.StatusError) as exc:
        reg.bind("default", "a", {"target": {"kind": "Node", "name": "n2"}}, OPTS)
    assert exc.value.code == 409


def test_missing_namespace_and_duplicates() -> None:
    reg, _ = make()
    with pytest.raises(errors.StatusError) as exc:
        reg.create(PODS, "nope", pod("a"), OPTS)
    assert exc.value.code == 404
    reg.create(PODS, "default", pod("a"), OPTS)
    with pytest.raises(errors.StatusError) as exc:
        reg.create(PODS, "default", pod("a"), OPTS)
    assert exc.value.reason == "AlreadyExists"
    assert reg.store.get(NAMESPACES, "kube-node-lease") is not None


async def test_watch_from_zero_starts_with_synthetic_added_then_live_events() -> None:
    reg, hub = make()
    reg.create(PODS, "default", pod("a"), OPTS)
    w = watch(hub, "0")
    reg.create(PODS, "default", pod("b"), OPTS)
    got = await events_of(w)
    assert [(t, n) for t, n, _ in got] == [("ADDED", "a"), ("ADDED", "b")]


async def test_watch_resumes_inside_the_window_and_expires_outside() -> None:
    reg, hub = make(window=5)
    first = reg.create(PODS, "default", pod("a"), OPTS)
    rv0 = first["metadata"]["resourceVersion"]
    for i in range(3):
        p = orjson.loads(orjson.dumps(reg.get(PODS, "default", "a")))
        p["metadata"]["labels"] = {"i": str(i)}
        reg.update(PODS, "default", "a", p, OPTS)
    got = await events_of(watch(hub, rv0))
    assert [t for t, _, _ in got] == ["MODIFIED"] * 3
    for i in range(10):
        reg.create(PODS, "default", pod(f"x{i}"), OPTS)
    with pytest.raises(ValueError, match="too old"):
        watch(hub, rv0)


async def test_selector_transitions_are_added_and_deleted() -> None:
    reg, hub = make()
    reg.create(PODS, "default", pod("a", labels={"app": "x"}), OPTS)
    w = watch(hub, str(reg.store.revision), labels=parse_label_selector("app=y"))
    p = orjson.loads(orjson.dumps(reg.get(PODS, "default", "a")))
    p["metadata"]["labels"] = {"app": "y"}
    reg.update(PODS, "default", "a", p, OPTS)
    p = orjson.loads(orjson.dumps(reg.get(PODS, "default", "a")))
    p["metadata"]["labels"] = {"app": "z"}
    reg.update(PODS, "default", "a", p, OPTS)
    got = await events_of(w)
    assert [t for t, _, _ in got] == ["ADDED", "DELETED"]
    assert int(got[1][2]) == reg.store.revision


async def test_node_indexed_watchers_see_only_their_node_including_binding() -> None:
    reg, hub = make()
    w1 = watch(hub, str(reg.store.revision), fields=parse_field_selector("spec.nodeName=n1", PODS))
    w2 = watch(hub, str(reg.store.revision), fields=parse_field_selector("spec.nodeName=n2", PODS))
    unscheduled = watch(hub, str(reg.store.revision), fields=parse_field_selector("spec.nodeName=", PODS))
    reg.create(PODS, "default", pod("a"), OPTS)
    reg.bind("default", "a", {"target": {"name": "n1"}}, OPTS)
    assert [t for t, _, _ in await events_of(w1)] == ["ADDED"]
    assert await events_of(w2) == []
    assert [t for t, _, _ in await events_of(unscheduled)] == ["ADDED", "DELETED"]


async def test_per_object_order_is_kept_and_frames_are_shared() -> None:
    reg, hub = make()
    w1 = watch(hub, str(reg.store.revision), encoding="msgpack")
    w2 = watch(hub, str(reg.store.revision), encoding="msgpack")
    for i in range(20):
        reg.create(PODS, "default", pod(f"p{i}"), OPTS)
    event = hub.windows[PODS.resource][-1]
    assert event.frame("ADDED", "msgpack") is event.frame("ADDED", "msgpack")
    chunks1 = [c async for c in _drain(w1)]
    chunks2 = [c async for c in _drain(w2)]
    assert b"".join(chunks1) == b"".join(chunks2)
    unpacker = msgpack.Unpacker(raw=False)
    unpacker.feed(b"".join(chunks1))
    rvs = [int(ev["object"]["metadata"]["resourceVersion"]) for ev in unpacker]
    assert rvs == sorted(rvs) and len(rvs) == 20


async def _drain(w: Watcher) -> Any:
    w.close("test")
    async for c in w.stream():
        yield c


async def test_a_watcher_that_cannot_keep_up_is_closed() -> None:
    reg, hub = make(max_queue=5)
    w = watch(hub, str(reg.store.revision))
    for i in range(10):
        reg.create(PODS, "default", pod(f"p{i}"), OPTS)
    assert w.closed and "too slow" in w.close_reason
    assert len(w.queue) == 5


async def test_send_initial_events_ends_with_an_annotated_bookmark() -> None:
    reg, hub = make()
    reg.create(PODS, "default", pod("a"), OPTS)
    w = watch(hub, "", send_initial_events=True, bookmarks=True)
    w.close("test")
    lines = [orjson.loads(line) for c in [c async for c in w.stream()] for line in c.splitlines() if line]
    assert [e["type"] for e in lines] == ["ADDED", "BOOKMARK"]
    assert lines[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


def test_log_backend_recovers_acknowledged_writes(tmp_path: Path) -> None:
    reg, _ = make(data_dir=tmp_path)
    reg.create(PODS, "default", pod("a"), OPTS)
    reg.create(PODS, "default", pod("b"), OPTS)
    reg.delete(PODS, "default", "a", DeleteOptions())
    last = reg.store.revision
    # A torn final record (the process died mid-append) is dropped on recovery.
    with open(tmp_path / "store.log", "ab") as f:
        f.write(b'0badc0de 999 {"resource": "pods", "key": "default/c", "obj"')
    reg2, _ = make(data_dir=tmp_path)
    assert reg2.store.revision == last
    names = [o["metadata"]["name"] for o in reg2.list_objects(PODS, namespace="default", labels=None, fields=None)[0]]
    assert names == ["b"]
    newer = reg2.create(PODS, "default", pod("c"), OPTS)
    assert int(newer["metadata"]["resourceVersion"]) > last


def test_log_backend_compacts_into_a_snapshot(tmp_path: Path) -> None:
    store = Store(backend=LogBackend(tmp_path, compact_every=3))
    reg = Registry(store=store, clock=ManualClock(), rng=random.Random(2))
    for i in range(5):
        reg.create(PODS, "default", pod(f"p{i}"), OPTS)
    store.compact()
    assert (tmp_path / "store.snapshot").exists()
    reg.create(PODS, "default", pod("after"), OPTS)
    rev = store.revision
    store.close()
    store2 = Store(backend=LogBackend(tmp_path))
    assert store2.revision == rev
    assert store2.count(PODS) == 6


def test_asyncio_is_not_needed_for_writes() -> None:
    # Writes are synchronous: no event loop is running here.
    with pytest.raises(RuntimeError):
        asyncio.get_running_loop()
    reg, _ = make()
    reg.create(PODS, "default", pod("a"), OPTS)

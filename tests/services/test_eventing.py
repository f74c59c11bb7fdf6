"""The event recorder against an in-memory event store, on a manual clock."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator

import pytest

from kubemesh.services.machinery.client import NotFoundError, ServerError
from kubemesh.services.machinery.clock import ManualClock, format_time, parse_time
from kubemesh.services.machinery.eventing import EventRecorder, RecordedEvent
from kubemesh.services.model.kinds import EVENTS, Kind, Obj

pytestmark = pytest.mark.timeout(20)


def _status(code: int, reason: str) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
            "message": reason}


class FakeEvents:
    """The create/patch calls the recorder makes, against a dict of Events."""

    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.calls: list[tuple[str, str]] = []
        self.fail_next = 0
        self.stall: asyncio.Event | None = None

    async def _gate(self) -> None:
        await asyncio.sleep(0)
        if self.stall is not None:
            await self.stall.wait()
        if self.fail_next:
            self.fail_next -= 1
            raise ServerError(_status(500, "InternalError"))

    async def create(self, kind: Kind, body: Obj, *, namespace: str | None = None) -> Obj:
        assert kind is EVENTS
        await self._gate()
        key = f"{namespace}/{body['metadata']['name']}"
        assert key not in self.objects
        self.objects[key] = copy.deepcopy(body)
        self.calls.append(("create", key))
        return body

    async def patch(self, kind: Kind, name: str, patch: Obj, *, namespace: str | None = None) -> Obj:
        assert kind is EVENTS
        await self._gate()
        key = f"{namespace}/{name}"
        if key not in self.objects:
            raise NotFoundError(_status(404, "NotFound"))
        self.objects[key].update(patch)
        self.calls.append(("patch", key))
        return self.objects[key]


def pod(name: str = "web-1", uid: str = "u-1") -> Obj:
    return {"kind": "Pod", "apiVersion": "v1",
            "metadata": {"name": name, "namespace": "shop", "uid": uid, "resourceVersion": "7"}}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def store() -> FakeEvents:
    return FakeEvents()


@pytest.fixture
async def recorder(clock: ManualClock, store: FakeEvents) -> AsyncIterator[EventRecorder]:
    rec = EventRecorder(store, clock=clock, component="default-scheduler", instance="sched-a", max_pending=4)
    task = asyncio.create_task(rec.run())
    yield rec
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_first_event_is_created_with_identity_and_cluster_time(
        recorder: EventRecorder, store: FakeEvents, clock: ManualClock) -> None:
    when = clock.now()
    recorder.record(pod(), type="Warning", reason="FailedScheduling", message="0/3 nodes", action="Scheduling")
    await clock.advance(30)  # written later: the timestamps are still those of record()
    await recorder.join()
    [(op, key)] = store.calls
    assert op == "create" and key.startswith("shop/web-1.")
    ev = store.objects[key]
    assert ev["involvedObject"] == {"kind": "Pod", "apiVersion": "v1", "name": "web-1", "namespace": "shop",
                                    "uid": "u-1", "resourceVersion": "7"}
    assert (ev["type"], ev["reason"], ev["message"], ev["count"]) == ("Warning", "FailedScheduling", "0/3 nodes", 1)
    assert ev["source"] == {"component": "default-scheduler", "host": "sched-a"}
    assert (ev["reportingComponent"], ev["reportingInstance"], ev["action"]) == \
        ("default-scheduler", "sched-a", "Scheduling")
    assert ev["firstTimestamp"] == ev["lastTimestamp"] == format_time(when)
    assert parse_time(ev["eventTime"]) == pytest.approx(when)
    assert recorder.stats() == {"pending": 0, "written": 1, "dropped": 0, "failed": 0}


async def test_repeats_are_aggregated_by_count(recorder: EventRecorder, store: FakeEvents, clock: ManualClock) -> None:
    recorder.warning(pod(), "FailedScheduling", "0/3 nodes")
    await clock.advance(5)
    recorder.warning(pod(), "FailedScheduling", "0/3 nodes")
    await clock.advance(5)
    recorder.warning(pod(), "FailedScheduling", "0/3 nodes")
    recorder.warning(pod(), "FailedScheduling", "0/4 nodes")  # another message: another Event
    recorder.normal(pod("web-2", "u-2"), "FailedScheduling", "0/3 nodes")  # another object
    await recorder.join()
    assert [op for op, _ in store.calls] == ["create", "patch", "patch", "create", "create"]
    first = store.objects[store.calls[0][1]]
    assert first["count"] == 3
    assert parse_time(first["lastTimestamp"]) == pytest.approx(parse_time(first["firstTimestamp"]) + 10)
    assert len(store.objects) == 3


async def test_components_do_not_share_aggregates(recorder: EventRecorder, store: FakeEvents) -> None:
    node: Obj = {"kind": "Node", "metadata": {"name": "node-1", "uid": "n1"}}
    recorder.for_component("node-controller").normal(node, "NodeNotReady", "Node node-1 status is now: NodeNotReady")
    recorder.for_component("other").normal(node, "NodeNotReady", "Node node-1 status is now: NodeNotReady")
    await recorder.join()
    assert [op for op, _ in store.calls] == ["create", "create"]
    evs = list(store.objects.values())
    assert {e["source"]["component"] for e in evs} == {"node-controller", "other"}
    # A cluster-scoped object: the Event lives in "default" and the reference has no namespace.
    assert all(k.startswith("default/node-1.") for k in store.objects)
    assert "namespace" not in evs[0]["involvedObject"]


async def test_a_vanished_event_is_created_again(recorder: EventRecorder, store: FakeEvents) -> None:
    recorder.warning(pod(), "BackOff", "again")
    await recorder.join()
    store.objects.clear()  # expired by the apiserver's TTL
    recorder.warning(pod(), "BackOff", "again")
    await recorder.join()
    assert [op for op, _ in store.calls] == ["create", "create"]
    assert next(iter(store.objects.values()))["count"] == 1


async def test_record_never_blocks_and_drops_when_full(recorder: EventRecorder, store: FakeEvents) -> None:
    store.stall = asyncio.Event()
    for i in range(10):
        recorder.normal(pod(f"p{i}", f"u{i}"), "Created", "created")  # synchronous: returns at once
    await asyncio.sleep(0.01)
    # The queue holds four (all were recorded before the writer took one); the rest were dropped.
    assert recorder.dropped == 6
    assert len(recorder.recorded) == 10
    store.stall.set()
    await recorder.join()
    assert recorder.written == 4


async def test_write_failures_are_counted_not_raised(recorder: EventRecorder, store: FakeEvents) -> None:
    store.fail_next = 1
    recorder.warning(pod(), "Failed", "boom")
    recorder.warning(pod("b", "ub"), "Failed", "boom")
    await recorder.join()
    assert recorder.failed == 1 and recorder.written == 1


async def test_remembered_aggregates_are_bounded(clock: ManualClock, store: FakeEvents) -> None:
    rec = EventRecorder(store, clock=clock, component="c", max_remembered=2)
    task = asyncio.create_task(rec.run())
    try:
        for name in ("a", "b", "c", "a"):  # "a" was forgotten when "c" came
            rec.normal(pod(name, name), "R", "m")
        await rec.join()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert [op for op, _ in store.calls] == ["create", "create", "create", "create"]


async def test_memory_only_recorder_keeps_events(clock: ManualClock) -> None:
    rec = EventRecorder(None, clock=clock, component="kube-controller-manager", keep=2)
    rs: Obj = {"kind": "ReplicaSet", "metadata": {"name": "web", "namespace": "shop", "uid": "r1"}}
    rec.for_component("replicaset-controller").normal(rs, "SuccessfulCreate", "Created pod: web-1")
    rec.for_component("replicaset-controller").warning(rs, "FailedCreate", "quota")
    rec.normal(rs, "Other", "x")
    assert [e.reason for e in rec.recorded] == ["FailedCreate", "Other"]  # only the last `keep`
    [e] = rec.reasons("FailedCreate")
    assert isinstance(e, RecordedEvent)
    assert (e.component, e.type, e.api_version, e.at) == ("replicaset-controller", "Warning", "apps/v1", clock.now())
    assert rec.stats()["pending"] == 0

"""Leader election on a fake lease store, all on a manual clock."""

from __future__ import annotations

import asyncio
import copy
import random
from typing import Any

import pytest

from kubemesh.services.machinery.client import (
    AlreadyExistsError,
    ApiClient,
    ApiConnectionError,
    ConflictError,
    NotFoundError,
)
from kubemesh.services.machinery.clock import ManualClock, parse_time
from kubemesh.services.machinery.electing import LeaderElectionSettings, LeaderElector, LeadershipLost, LeaseClient
from kubemesh.services.model.kinds import Kind, Obj, key_of

pytestmark = pytest.mark.timeout(20)

SETTINGS = LeaderElectionSettings(name="kube-scheduler", lease_duration=15, renew_deadline=10, retry_period=2)


def _status(code: int, reason: str) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason,
            "message": reason}


class LeaseStore:
    """An apiserver's lease storage: resourceVersions and 409 on stale writes."""

    def __init__(self) -> None:
        self.objects: dict[str, Obj] = {}
        self.revision = 0
        self.writes: list[tuple[str, Obj]] = []

    def _stamp(self, obj: Obj) -> Obj:
        self.revision += 1
        obj["metadata"]["resourceVersion"] = str(self.revision)
        return copy.deepcopy(obj)


class FakeClient:
    """The ApiClient methods leader election uses, speaking to one LeaseStore."""

    def __init__(self, store: LeaseStore, who: str) -> None:
        self.store = store
        self.who = who
        self.stalled: asyncio.Event | None = None  # set: requests hang until the event is set
        self.broken = False  # requests fail as if the apiserver were unreachable

    async def _gate(self) -> None:
        await asyncio.sleep(0)
        if self.stalled is not None:
            await self.stalled.wait()
        if self.broken:
            raise ApiConnectionError("partitioned", maybe_applied=False)

    async def get(self, kind: Kind, name: str, *, namespace: str | None = None) -> Obj:
        await self._gate()
        obj = self.store.objects.get(f"{namespace}/{name}")
        if obj is None:
            raise NotFoundError(_status(404, "NotFound"))
        return copy.deepcopy(obj)

    async def create(self, kind: Kind, body: Obj, *, namespace: str | None = None) -> Obj:
        await self._gate()
        body = copy.deepcopy(body)
        key = key_of(body)
        if key in self.store.objects:
            raise AlreadyExistsError(_status(409, "AlreadyExists"))
        self.store.objects[key] = body
        self.store.writes.append((self.who, copy.deepcopy(body["spec"])))
        return self.store._stamp(body)

    async def update(self, kind: Kind, body: Obj) -> Obj:
        await self._gate()
        body = copy.deepcopy(body)
        key = key_of(body)
        current = self.store.objects.get(key)
        if current is None:
            raise NotFoundError(_status(404, "NotFound"))
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ConflictError(_status(409, "Conflict"))
        self.store.objects[key] = body
        self.store.writes.append((self.who, copy.deepcopy(body["spec"])))
        return self.store._stamp(body)


def spec(store: LeaseStore) -> dict[str, Any]:
    return dict(store.objects["kube-system/kube-scheduler"]["spec"])


def leading(e: LeaderElector) -> bool:
    return e.is_leader  # a call, so that mypy does not keep a narrowed property across awaits


async def settle(n: int = 20) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_the_real_client_satisfies_the_protocol() -> None:
    client: LeaseClient = ApiClient("http://127.0.0.1:1", component="test", instance="t")  # noqa: F841
    fake: LeaseClient = FakeClient(LeaseStore(), "x")  # noqa: F841


def test_settings_are_validated() -> None:
    with pytest.raises(ValueError):
        LeaderElectionSettings(name="x", lease_duration=10, renew_deadline=10)
    with pytest.raises(ValueError):
        LeaderElectionSettings(name="x", renew_deadline=2, retry_period=2)


class Worker:
    """Work that runs until cancelled and records whether it is running."""

    def __init__(self) -> None:
        self.running = False
        self.started = 0
        self.cancelled = 0

    async def __call__(self) -> None:
        self.started += 1
        self.running = True
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        finally:
            self.running = False


async def test_a_free_lease_is_created_and_acquired() -> None:
    clock = ManualClock()
    store = LeaseStore()
    started: list[str] = []
    e = LeaderElector(FakeClient(store, "a"), settings=SETTINGS, identity="a", clock=clock,
                      on_started_leading=lambda: started.append("a"))
    work = Worker()
    task = asyncio.create_task(e.run(work))
    await settle()
    assert e.is_leader and work.running and started == ["a"]
    s = spec(store)
    assert s["holderIdentity"] == "a"
    assert s["leaseDurationSeconds"] == 15
    assert s["leaseTransitions"] == 0
    assert parse_time(s["acquireTime"]) == pytest.approx(clock.now(), abs=1e-5)
    assert s["renewTime"].endswith("Z") and "." in s["renewTime"]  # MicroTime
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_the_leader_renews_every_retry_period() -> None:
    clock = ManualClock()
    store = LeaseStore()
    e = LeaderElector(FakeClient(store, "a"), settings=SETTINGS, identity="a", clock=clock)
    task = asyncio.create_task(e.run(Worker()))
    await settle()
    first = parse_time(spec(store)["renewTime"])
    await clock.advance(2)
    assert parse_time(spec(store)["renewTime"]) == pytest.approx(first + 2, abs=1e-5)
    await clock.advance(2)
    assert parse_time(spec(store)["renewTime"]) == pytest.approx(first + 4, abs=1e-5)
    assert parse_time(spec(store)["acquireTime"]) == pytest.approx(first, abs=1e-5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def two_candidates(clock: ManualClock, store: LeaseStore, **kw: Any) -> tuple[
        LeaderElector, LeaderElector, FakeClient, FakeClient, Worker, Worker,
        asyncio.Task[None], asyncio.Task[None]]:
    ca, cb = FakeClient(store, "a"), FakeClient(store, "b")
    ea = LeaderElector(ca, settings=SETTINGS, identity="a", clock=clock, **kw)
    eb = LeaderElector(cb, settings=SETTINGS, identity="b", clock=clock, **kw)
    wa, wb = Worker(), Worker()
    ta = asyncio.create_task(ea.run(wa))
    await settle()
    tb = asyncio.create_task(eb.run(wb))
    await settle()
    return ea, eb, ca, cb, wa, wb, ta, tb


async def test_only_one_of_two_candidates_leads() -> None:
    clock = ManualClock()
    store = LeaseStore()
    ea, eb, _, _, wa, wb, ta, tb = await two_candidates(clock, store)
    for _ in range(30):
        await clock.advance(1)
        assert ea.is_leader and not eb.is_leader
        assert wa.running and not wb.running
    assert eb.leader == "a"
    for t in (ta, tb):
        t.cancel()
    await asyncio.gather(ta, tb, return_exceptions=True)


async def test_racing_candidates_are_serialised_by_conflicts() -> None:
    clock = ManualClock()
    store = LeaseStore()
    electors = [LeaderElector(FakeClient(store, n), settings=SETTINGS, identity=n, clock=clock,
                              rng=random.Random(i)) for i, n in enumerate("abcde")]
    workers = [Worker() for _ in electors]
    tasks = [asyncio.create_task(e.run(w)) for e, w in zip(electors, workers, strict=True)]
    for _ in range(20):
        await clock.advance(1)
        assert sum(w.running for w in workers) == 1
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_stalled_leader_loses_and_the_other_takes_over_after_expiry() -> None:
    clock = ManualClock()
    store = LeaseStore()
    stopped: list[str] = []
    ea, eb, ca, _, wa, wb, ta, tb = await two_candidates(
        clock, store, on_stopped_leading=lambda: stopped.append("x"))
    await clock.advance(4)
    assert ea.is_leader
    ca.stalled = asyncio.Event()  # a's requests hang from now on
    t0 = clock.now()
    # The renew started at the next period stalls; the deadline is 10 s after it.
    while not ta.done():
        await clock.advance(0.5)
    lost_at = clock.now() - t0
    with pytest.raises(LeadershipLost):
        await ta
    assert wa.cancelled == 1 and not wa.running and not leading(ea)
    assert 10 <= lost_at <= 2 + 10 + 0.5
    assert not eb.is_leader  # b must wait for the lease to expire
    while not leading(eb):
        await clock.advance(0.5)
    took_over = clock.now() - t0
    # b saw a's last renewal (at t0) on its next poll, at most one period later; it then
    # waits 15 s from that observation, and takes over on the poll after that.
    assert 15 - 2 <= took_over <= 15 + 2 * 2 + 0.5
    assert took_over > lost_at  # never two leaders at once
    assert wb.running
    s = spec(store)
    assert s["holderIdentity"] == "b" and s["leaseTransitions"] == 1
    tb.cancel()
    await asyncio.gather(tb, return_exceptions=True)
    assert stopped == ["x", "x"]


async def test_a_partitioned_leader_gives_up_by_the_renew_deadline() -> None:
    clock = ManualClock()
    store = LeaseStore()
    _, eb, ca, _, wa, wb, ta, tb = await two_candidates(clock, store)
    ca.broken = True
    while not ta.done():
        await clock.advance(0.5)
    with pytest.raises(LeadershipLost):
        await ta
    assert not wa.running
    while not eb.is_leader:
        await clock.advance(0.5)
    assert wb.running
    tb.cancel()
    await asyncio.gather(tb, return_exceptions=True)


async def test_a_leader_that_sees_another_holder_stops_at_once() -> None:
    clock = ManualClock()
    store = LeaseStore()
    _, _, _, _, wa, _, ta, tb = await two_candidates(clock, store)
    # Someone overwrites the lease (e.g. a skewed candidate): a's fast-path renew conflicts,
    # it reads the record, sees a valid lease of another holder and stops.
    lease = store.objects["kube-system/kube-scheduler"]
    lease["spec"]["holderIdentity"] = "intruder"
    store._stamp(lease)
    await clock.advance(2)
    await settle()
    assert ta.done()
    with pytest.raises(LeadershipLost):
        await ta
    assert not wa.running
    for t in (tb,):
        t.cancel()
    await asyncio.gather(tb, return_exceptions=True)


async def test_release_on_cancel_hands_over_without_waiting_for_expiry() -> None:
    clock = ManualClock()
    store = LeaseStore()
    ea, eb, _, _, wa, wb, ta, tb = await two_candidates(clock, store)
    ta.cancel()
    with pytest.raises(asyncio.CancelledError):
        await ta
    assert spec(store)["holderIdentity"] == ""
    assert not wa.running and not ea.is_leader
    await clock.advance(2 * 2.2)  # at most one jitter-free retry period or two
    assert eb.is_leader and wb.running
    tb.cancel()
    await asyncio.gather(tb, return_exceptions=True)


async def test_work_that_returns_ends_the_run_and_releases() -> None:
    clock = ManualClock()
    store = LeaseStore()
    e = LeaderElector(FakeClient(store, "a"), settings=SETTINGS, identity="a", clock=clock)

    async def work() -> None:
        await clock.sleep(3)

    task = asyncio.create_task(e.run(work))
    await settle()
    await clock.advance(3)
    await asyncio.wait_for(task, 1)
    assert spec(store)["holderIdentity"] == ""
    assert not e.is_leader


async def test_renew_time_expiry_lets_a_skewed_candidate_take_over_early() -> None:
    clock = ManualClock()
    store = LeaseStore()
    settings = LeaderElectionSettings(name="kube-scheduler", lease_duration=15, renew_deadline=10,
                                      retry_period=2, expiry="renew-time")
    skewed = ManualClock(clock.now() + 60)  # b's clock is a minute ahead
    ea = LeaderElector(FakeClient(store, "a"), settings=settings, identity="a", clock=clock)
    eb = LeaderElector(FakeClient(store, "b"), settings=settings, identity="b", clock=skewed)
    ta = asyncio.create_task(ea.run(Worker()))
    await settle()
    tb = asyncio.create_task(eb.run(Worker()))
    await settle()
    assert eb.is_leader  # the skewed candidate thinks a's lease expired long ago
    assert spec(store)["leaseTransitions"] == 1
    for t in (ta, tb):
        t.cancel()
    await asyncio.gather(ta, tb, return_exceptions=True)

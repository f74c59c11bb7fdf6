import asyncio
import copy
import itertools
import random

from fakes_kubelet import FakeApi, conflict, unavailable

from kubemesh.kubelet.heartbeating import (
    LEASE_NAMESPACE,
    LeaseRenewer,
    NodeConditions,
    StatusReporter,
    backoff_schedule,
    jittered,
)
from kubemesh.kubelet.settings import KubeletSettings
from kubemesh.services.machinery.client import ApiError
from kubemesh.services.machinery.clock import ManualClock, parse_time
from kubemesh.services.model.kinds import LEASES, NODES, Obj

START = 1_700_000_000.0


def test_backoff_schedule_matches_upstream() -> None:
    gen = backoff_schedule(initial=0.1, maximum=7.0)
    assert [round(next(gen), 3) for _ in range(8)] == [0.2, 0.4, 0.8, 1.6, 3.2, 6.4, 7.0, 7.0]


def test_jitter_bounds() -> None:
    rng = random.Random(3)
    values = [jittered(10.0, factor=0.04, rng=rng) for _ in range(200)]
    assert all(10.0 <= v <= 10.4 for v in values)


def renewer(clock: ManualClock, api: FakeApi, **kw: object) -> LeaseRenewer:
    return LeaseRenewer(api=api, node="node-1", clock=clock, rng=random.Random(0),
                        settings=KubeletSettings(**kw),  # type: ignore[arg-type]
                        node_uid=lambda: "node-uid")


async def test_lease_created_then_renewed_every_interval() -> None:
    clock = ManualClock(START)
    api = FakeApi(clock)
    r = renewer(clock, api)
    task = asyncio.create_task(r.run())
    await clock.advance(0)
    lease = api.objects[("leases", LEASE_NAMESPACE, "node-1")]
    assert lease["spec"]["holderIdentity"] == "node-1"
    assert lease["spec"]["leaseDurationSeconds"] == 40
    assert lease["metadata"]["ownerReferences"][0]["uid"] == "node-uid"
    assert lease["spec"]["renewTime"].endswith("Z") and "." in lease["spec"]["renewTime"]  # MicroTime
    for _ in range(40):
        await clock.advance(1.0)
    task.cancel()
    renew_times = [c.at for c in api.calls if c.verb == "update"]
    # After the random first phase, every 10 s (+ up to 4 %).
    gaps = [b - a for a, b in itertools.pairwise(renew_times)]
    assert len(renew_times) >= 3
    assert all(10.0 <= g <= 10.4 + 1.0 for g in gaps), gaps
    # renewTime written is the clock's time.
    last = api.objects[("leases", LEASE_NAMESPACE, "node-1")]
    assert abs(parse_time(last["spec"]["renewTime"]) - renew_times[-1]) < 1e-3


async def test_lease_update_retries_five_times_then_gives_up() -> None:
    clock = ManualClock(START)
    api = FakeApi(clock)
    r = renewer(clock, api)
    await r.sync()  # creates
    api.calls.clear()
    api.fail = lambda verb, plural: unavailable() if verb == "update" else None
    await r.sync()
    # 5 attempts on the latest lease, then ensure (GET) and 5 more attempts.
    assert api.count("update", "leases") == 10
    assert api.count("get", "leases") == 1
    assert r.renewals == 1 and r.failures == 10


async def test_lease_conflict_rereads_and_succeeds() -> None:
    clock = ManualClock(START)
    api = FakeApi(clock)
    r = renewer(clock, api)
    await r.sync()
    # Someone else wrote the lease: our latest copy is stale.
    other: Obj = api.objects[("leases", LEASE_NAMESPACE, "node-1")]
    await api.update(LEASES, dict(other))
    api.calls.clear()
    await r.sync()
    verbs = [c.verb for c in api.calls]
    assert verbs == ["update", "get", "update"]
    assert r.renewals == 2


async def test_lease_ensure_backs_off_on_clock() -> None:
    clock = ManualClock(START)
    api = FakeApi(clock)
    failures = {"n": 3}

    def fail(verb: str, plural: str) -> ApiError | None:
        if verb == "get" and failures["n"] > 0:
            failures["n"] -= 1
            return unavailable()
        return None

    api.fail = fail
    r = renewer(clock, api)
    task = asyncio.create_task(r.sync())
    await clock.advance(0)
    await clock.advance(0.2)
    await clock.advance(0.4)
    await clock.advance(0.8)
    await task
    gets = [round(c.at - START, 3) for c in api.calls if c.verb == "get"]
    assert gets == [0.0, 0.2, 0.6, 1.4]
    assert r.renewals == 1


async def test_status_reporter_posts_full_then_conditions() -> None:
    clock = ManualClock(START)
    api = FakeApi(clock)
    await api.create(NODES, {"metadata": {"name": "node-1"}})
    conds = NodeConditions()
    rep = StatusReporter(api=api, node="node-1", clock=clock, rng=random.Random(0), settings=KubeletSettings(),
                         conditions=conds, full_status=lambda: {"capacity": {"cpu": "8"}})
    task = asyncio.create_task(rep.run())
    for _ in range(35):
        await clock.advance(1.0)
    task.cancel()
    patches = [c for c in api.calls if c.verb == "patch"]
    assert patches[0].body["status"]["capacity"] == {"cpu": "8"}
    assert "capacity" not in patches[1].body["status"]
    assert all(c.options["patch_type"] == "strategic" and c.options["subresource"] == "status" for c in patches)
    types = [c["type"] for c in patches[0].body["status"]["conditions"]]
    assert types == ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
    assert len(patches) >= 3  # one every 10 s by default


async def test_status_retries_and_report_frequency() -> None:
    clock = ManualClock(START)
    api = FakeApi(clock)
    await api.create(NODES, {"metadata": {"name": "node-1"}})
    conds = NodeConditions()
    rep = StatusReporter(api=api, node="node-1", clock=clock, rng=random.Random(0),
                         settings=KubeletSettings(node_status_report_frequency=300.0),
                         conditions=conds, full_status=lambda: {})
    assert await rep.sync()
    await clock.advance(10)
    assert not await rep.sync()  # unchanged, report period not passed
    conds.set("MemoryPressure", "True")
    assert await rep.sync()  # changed: posted at once
    await clock.advance(300)
    assert await rep.sync()
    api.fail = lambda verb, plural: conflict()
    await clock.advance(300)
    try:
        await rep.sync()
    except Exception as exc:
        assert "retry count" in str(exc)
    assert rep.failures == 5


async def test_between_reports_the_node_reads_its_node_and_answers_another_writer() -> None:
    # Upstream's tryUpdateNodeStatus: the Node is read every update; an unchanged status is not
    # posted before the report period unless the apiserver shows other conditions than the
    # node's own (the node-lifecycle controller marked it Unknown on a lease it saw late).
    clock = ManualClock(START)
    api = FakeApi(clock)
    await api.create(NODES, {"metadata": {"name": "node-1"}})
    conds = NodeConditions()
    rep = StatusReporter(api=api, node="node-1", clock=clock, rng=random.Random(0),
                         settings=KubeletSettings(node_status_report_frequency=300.0),
                         conditions=conds, full_status=lambda: {})
    assert await rep.sync()
    await clock.advance(10)
    assert not await rep.sync() and rep.reads == 1  # the apiserver shows what the node computed
    stored = api.objects[("nodes", "", "node-1")]["status"]["conditions"]
    next(c for c in stored if c["type"] == "Ready")["status"] = "Unknown"
    await clock.advance(10)
    assert await rep.sync()  # answered within one update period, not one report period
    stored = api.objects[("nodes", "", "node-1")]["status"]["conditions"]
    assert next(c for c in stored if c["type"] == "Ready")["status"] == "True"
    stored.append({"type": "NetworkUnavailable", "status": "True"})  # another writer's own condition
    await clock.advance(10)
    assert not await rep.sync()
    api.fail = lambda verb, plural: unavailable() if verb == "get" else None
    await clock.advance(10)
    assert await rep.sync()  # the Node could not be read: the PATCH tells
    assert rep.posts == 3


async def test_between_reports_the_node_reads_the_process_node_view_without_a_request() -> None:
    # With the kubelet process's node informer (`observed`) the read costs no request: the
    # view's Node decides, an absent one counts as differing.
    clock = ManualClock(START)
    api = FakeApi(clock)
    await api.create(NODES, {"metadata": {"name": "node-1"}})
    view: dict[str, Obj] = {}
    conds = NodeConditions()
    rep = StatusReporter(api=api, node="node-1", clock=clock, rng=random.Random(0),
                         settings=KubeletSettings(node_status_report_frequency=300.0),
                         conditions=conds, full_status=lambda: {}, observed=lambda: view.get("node-1"))
    assert await rep.sync()
    await clock.advance(10)
    assert await rep.sync()  # the view does not hold the Node yet: post
    view["node-1"] = copy.deepcopy(api.objects[("nodes", "", "node-1")])
    await clock.advance(10)
    calls = len(api.calls)
    assert not await rep.sync() and rep.reads == 1 and len(api.calls) == calls  # no GET
    next(c for c in view["node-1"]["status"]["conditions"] if c["type"] == "Ready")["status"] = "Unknown"
    await clock.advance(10)
    assert await rep.sync()


def test_condition_transitions() -> None:
    c = NodeConditions()
    first = {x["type"]: x for x in c.observe(START)}
    assert first["Ready"]["status"] == "True" and first["Ready"]["reason"] == "KubeletReady"
    c.set("MemoryPressure", "True")
    later = {x["type"]: x for x in c.observe(START + 20)}
    assert later["MemoryPressure"]["status"] == "True"
    assert later["MemoryPressure"]["lastTransitionTime"] != first["MemoryPressure"]["lastTransitionTime"]
    assert later["Ready"]["lastTransitionTime"] == first["Ready"]["lastTransitionTime"]
    assert later["Ready"]["lastHeartbeatTime"] != first["Ready"]["lastHeartbeatTime"]
    assert c.statuses()["MemoryPressure"] == "True"
    assert c.clear("MemoryPressure") and not c.clear("MemoryPressure")

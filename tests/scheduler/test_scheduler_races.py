"""The seed races, fed to the scheduler in their racy event orders, with each switch on and off.

Events are delivered by calling the informer handlers by hand, in the order a held or delayed
watch would deliver them; the fake apiserver echoes nothing, so a test decides when (and whether)
the scheduler sees the consequences of its own writes.
"""

from __future__ import annotations

import json

from schedkit import FakeApi, bound, make_scheduler, node, pod, run_until_empty, term, with_status

from kubemesh.scheduler.scheduling import Scheduler
from kubemesh.scheduler.settings import SchedulerSettings
from kubemesh.services.machinery.client import NotFoundError
from kubemesh.services.machinery.clock import ManualClock

GHOST = frozenset({"ghost-node-affinity-error"})


async def test_pods_are_bound_and_confirmed() -> None:
    sched, api, _ = make_scheduler()
    for n in ("n1", "n2"):
        sched.on_node_add(node(n))
    a = pod("a", cpu="1")
    sched.on_pod_add(a)
    await run_until_empty(sched)
    assert len(api.binds) == 1
    key, chosen = api.binds[0]
    assert key == "default/a"
    assert sched.cache.is_assumed("default/a")
    assert api.messages("default/a", "Scheduled") == [f"Successfully assigned default/a to {chosen}"]
    sched.on_pod_update(a, bound(a, chosen))  # the watch confirms the binding
    assert not sched.cache.is_assumed("default/a")
    assert sched.queue.where("default/a") is None


async def test_failed_bind_forgets_and_retries_after_backoff() -> None:
    sched, api, clk = make_scheduler()
    sched.on_node_add(node("n1", cpu="1"))
    api.bind_error = RuntimeError("boom")
    sched.on_pod_add(pod("a", cpu="1"))
    await run_until_empty(sched)
    assert sched.cache.pod_count == 0
    assert api.messages("default/a", "FailedScheduling") == ["Binding rejected: boom"]
    api.bind_error = None
    assert sched.queue.where("default/a") == "backoff"
    await clk.advance(1)
    sched.tick()
    await run_until_empty(sched)
    assert api.binds == [("default/a", "n1")]


async def test_assumed_pod_expires_when_bind_is_never_confirmed() -> None:
    sched, api, clk = make_scheduler(settings=SchedulerSettings(assumed_pod_ttl=30.0))
    sched.on_node_add(node("n1", cpu="1"))
    sched.on_pod_add(pod("a", cpu="1"))
    await run_until_empty(sched)
    sched.on_pod_add(pod("b", cpu="1"))
    await run_until_empty(sched)
    assert [k for k, _ in api.binds] == ["default/a"]  # b does not fit next to assumed a
    await clk.advance(sched.settings.assumed_pod_ttl)
    sched.tick()
    assert sched.cache.expired == 1 and sched.cache.pod_count == 0
    await clk.advance(2)
    sched.tick()
    await run_until_empty(sched)
    assert [k for k, _ in api.binds] == ["default/a", "default/b"]


# ---- ghost-node-affinity-error (kubernetes#50813, fixed by #53647) --------------------------


async def _ghost_setup(bugs: frozenset[str]) -> tuple[Scheduler, FakeApi, ManualClock, dict[str, object]]:
    sched, api, clk = make_scheduler(bugs=bugs)
    for n in ("n1", "n2", "n3"):
        sched.on_node_add(node(n))
    web0 = pod("web-0", labels={"app": "web"}, node_name="n1", anti=[term({"app": "web"})], phase="Running")
    sched.on_pod_add(web0)
    # node-1 is deleted; the DELETE of its pod is held on the scheduler's pod watch.
    sched.on_node_delete(node("n1"))
    sched.on_pod_add(pod("web-1", labels={"app": "web"}, anti=[term({"app": "web"})]))
    await run_until_empty(sched)
    return sched, api, clk, {"web0": web0}


async def test_ghost_bug_on_anti_affinity_pod_fails_with_node_not_found() -> None:
    sched, api, clk, objs = await _ghost_setup(GHOST)
    assert api.binds == []
    assert api.messages("default/web-1", "FailedScheduling") == ['node "n1" not found']
    assert sched.dump()["cache"]["ghosts"] == ["n1"]
    # It stays that way on every retry while the ghost's pod is cached.
    for _ in range(3):
        await clk.advance(20)
        sched.tick()
        await run_until_empty(sched)
    assert api.binds == []
    assert len(api.messages("default/web-1", "FailedScheduling")) == 4
    # A pod without any affinity fails too: existing pods on the ghost have affinity (1.7).
    sched.on_pod_add(pod("plain"))
    await run_until_empty(sched)
    assert api.messages("default/plain", "FailedScheduling") == ['node "n1" not found']
    # Once the held pod DELETE arrives, the ghost goes and the pod is placed.
    sched.on_pod_delete(objs["web0"])
    assert sched.dump()["cache"]["ghosts"] == []
    await clk.advance(20)
    sched.tick()
    await run_until_empty(sched)
    assert {k for k, _ in api.binds} == {"default/web-1", "default/plain"}


async def test_ghost_bug_off_anti_affinity_pod_is_placed() -> None:
    sched, api, _, _ = await _ghost_setup(frozenset())
    assert len(api.binds) == 1
    key, chosen = api.binds[0]
    assert key == "default/web-1" and chosen in {"n2", "n3"}
    assert api.messages("default/web-1", "FailedScheduling") == []
    assert sched.dump()["cache"]["ghosts"] == ["n1"]  # the ghost exists, it is just not seen


# ---- keep-missed-node (kubernetes#56261, fixed by #56622) -----------------------------------


async def test_node_not_found_rereads_node_unless_keep_missed_node() -> None:
    sched, api, _, _ = await _ghost_setup(GHOST)
    assert api.node_gets == ["n1"]  # fixed: re-read; 404 -> dropped (its pods keep the ghost)
    sched2, api2, _, _ = await _ghost_setup(GHOST | {"keep-missed-node"})
    assert api2.node_gets == []
    assert sched.stats["nodesDropped"] == 1 and sched2.stats["nodesDropped"] == 0


def _node_gone(name: str) -> NotFoundError:
    return NotFoundError({"kind": "Status", "code": 404, "reason": "NotFound", "message": f'nodes "{name}" not found',
                          "details": {"kind": "nodes", "name": name}})


async def _missed_delete(bugs: frozenset[str]) -> tuple[Scheduler, FakeApi, ManualClock]:
    sched, api, clk = make_scheduler(bugs=bugs)
    sched.on_node_add(node("n1", cpu="64", memory="256Gi"))  # the best-scoring node ...
    sched.on_node_add(node("n2", cpu="2", memory="2Gi"))
    api.nodes["n2"] = node("n2")
    # ... is deleted, and the scheduler's watch drops the DELETE (#94437): it keeps n1.
    api.bind_errors_by_node["n1"] = _node_gone("n1")
    sched.on_pod_add(pod("a", cpu="500m", memory="100Mi"))
    for _ in range(4):
        await run_until_empty(sched)
        await clk.advance(20)
        sched.tick()
    return sched, api, clk


async def test_missed_node_delete_fixed_drops_node_after_reread() -> None:
    sched, api, _ = await _missed_delete(frozenset())
    assert api.node_gets == ["n1"]
    assert sched.cache.node_info("n1") is None
    assert api.binds == [("default/a", "n2")]


async def test_missed_node_delete_buggy_keeps_failing() -> None:
    sched, api, _ = await _missed_delete(frozenset({"keep-missed-node"}))
    assert api.node_gets == []
    assert sched.cache.node_info("n1") is not None
    assert api.binds == []
    assert len(api.messages("default/a", "FailedScheduling")) == 4


# ---- nominate-after-patch (kubernetes#72124, fixed by #72259) and preemption ----------------


async def _preemption_setup(bugs: frozenset[str]) -> tuple[Scheduler, FakeApi, ManualClock, dict[str, dict]]:  # type: ignore[type-arg]
    sched, api, clk = make_scheduler(bugs=bugs)
    sched.on_node_add(node("n1", cpu="4"))
    objs = {
        "v1": pod("v1", cpu="2", priority=0, node_name="n1", phase="Running"),
        "v2": pod("v2", cpu="2", priority=0, node_name="n1", phase="Running"),
        "P": pod("P", cpu="3", priority=100),
    }
    sched.on_pod_add(objs["v1"])
    sched.on_pod_add(objs["v2"])
    sched.on_pod_add(objs["P"])
    await run_until_empty(sched)
    return sched, api, clk, objs


async def test_preemption_deletes_minimal_victims_and_nominates() -> None:
    sched, api, clk, objs = await _preemption_setup(frozenset())
    assert api.binds == []
    assert sorted(api.deleted) == ["default/v1", "default/v2"]
    patches = [p for k, p in api.patches if k == "default/P"]
    assert patches[0]["status"]["conditions"][0]["reason"] == "Unschedulable"
    assert patches[1] == {"status": {"nominatedNodeName": "n1"}}
    assert api.messages("default/v1", "Preempted") == ["Preempted by pod uid-default-P on node n1"]
    assert api.messages("default/P", "FailedScheduling") == ["0/1 nodes are available: 1 Insufficient cpu."]
    assert sched.nominator.node_of("default/P") == "n1"
    # The victims go; the preemptor lands on the node it was nominated to.
    sched.on_pod_delete(objs["v1"])
    sched.on_pod_delete(objs["v2"])
    await clk.advance(1)
    sched.tick()
    await run_until_empty(sched)
    assert api.binds == [("default/P", "n1")]
    assert sched.nominator.node_of("default/P") is None


async def _steal(bugs: frozenset[str], *, stale_update: bool = False) -> tuple[Scheduler, FakeApi, ManualClock,
                                                                               dict[str, dict]]:  # type: ignore[type-arg]
    sched, api, clk, objs = await _preemption_setup(bugs)
    if stale_update:
        # The echo of the PodScheduled=False patch: neither version carries nominatedNodeName.
        p = objs["P"]
        sched.on_pod_update(p, with_status(p, conditions=[{"type": "PodScheduled", "status": "False"}]))
    # The victims' deletions are seen; the update carrying P's nominatedNodeName is held.
    sched.on_pod_delete(objs["v1"])
    sched.on_pod_delete(objs["v2"])
    # A smaller pod of the same priority arrives while P backs off.
    sched.on_pod_add(pod("S", cpu="2", priority=100))
    await run_until_empty(sched)
    return sched, api, clk, objs


async def test_nominate_after_patch_on_small_pod_steals_the_node() -> None:
    sched, api, clk, objs = await _steal(frozenset({"nominate-after-patch"}))
    assert api.binds == [("default/S", "n1")]
    # The held update finally arrives: P is nominated, but the room is gone for good.
    p = objs["P"]
    sched.on_pod_update(p, with_status(p, nominatedNodeName="n1"))
    sched.on_pod_update(pod("S", cpu="2", priority=100), bound(pod("S", cpu="2", priority=100), "n1"))
    for _ in range(3):
        await clk.advance(20)
        sched.tick()
        await run_until_empty(sched)
    assert [k for k, _ in api.binds] == ["default/S"]
    assert sched.queue.where("default/P") in {"unschedulable", "backoff"}


async def test_nominate_after_patch_off_nomination_counts_at_once() -> None:
    sched, api, clk, _ = await _steal(frozenset())
    assert api.binds == []
    assert api.messages("default/S", "FailedScheduling") == ["0/1 nodes are available: 1 Insufficient cpu."]
    await clk.advance(1)
    sched.tick()
    await run_until_empty(sched)
    assert api.binds == [("default/P", "n1")]


async def test_nomination_patch_failure_removes_in_memory_nomination() -> None:
    sched, _api, _, _ = await _preemption_setup(frozenset())
    assert sched.nominator.node_of("default/P") == "n1"
    sched2, api2, _clk2 = make_scheduler()
    sched2.on_node_add(node("n1", cpu="4"))
    sched2.on_pod_add(pod("v1", cpu="4", priority=0, node_name="n1"))
    api2.patch_error = RuntimeError("conflict")
    sched2.on_pod_add(pod("P", cpu="3", priority=100))
    await run_until_empty(sched2)
    assert sched2.nominator.node_of("default/P") is None
    assert api2.deleted == []


# ---- stale-update-unnominates (kubernetes#74931, fixed by #77990) ---------------------------


async def test_stale_update_on_unnominates_and_small_pod_steals() -> None:
    sched, api, _, _ = await _steal(frozenset({"stale-update-unnominates"}), stale_update=True)
    assert sched.nominator.node_of("default/P") is None
    assert api.binds == [("default/S", "n1")]


async def test_stale_update_off_keeps_nomination() -> None:
    sched, api, clk, _ = await _steal(frozenset(), stale_update=True)
    assert sched.nominator.node_of("default/P") == "n1"
    assert api.binds == []
    await clk.advance(1)
    sched.tick()
    await run_until_empty(sched)
    assert api.binds == [("default/P", "n1")]


# ---- node conditions -------------------------------------------------------------------------


async def test_pressure_nodes_receive_no_pods_or_no_best_effort_pods() -> None:
    sched, api, _ = make_scheduler(bugs=frozenset({"pressure-predicates"}))
    sched.on_node_add(node("disk", conditions={"DiskPressure": "True"}))
    sched.on_node_add(node("mem", conditions={"MemoryPressure": "True"}))
    for i in range(4):
        sched.on_pod_add(pod(f"be-{i}"))
        sched.on_pod_add(pod(f"bu-{i}", cpu="100m"))
    await run_until_empty(sched)
    placed = dict(api.binds)
    assert all(placed[f"default/bu-{i}"] == "mem" for i in range(4))
    assert not any(f"default/be-{i}" in placed for i in range(4))
    msg = api.messages("default/be-0", "FailedScheduling")[0]
    assert msg == "0/2 nodes are available: 1 node(s) had disk pressure, 1 node(s) had memory pressure."


async def test_node_update_with_cured_condition_moves_pods() -> None:
    sched, api, clk = make_scheduler(bugs=frozenset({"pressure-predicates"}))
    sick = node("n1", conditions={"DiskPressure": "True"})
    sched.on_node_add(sick)
    sched.on_pod_add(pod("a"))
    await run_until_empty(sched)
    assert sched.queue.where("default/a") == "unschedulable"
    heartbeat = node("n1", conditions={"DiskPressure": "True"})
    sched.on_node_update(sick, heartbeat)
    assert sched.queue.where("default/a") == "unschedulable"  # nothing changed for filters
    cured = node("n1")
    sched.on_node_update(heartbeat, cured)
    await clk.advance(1)
    sched.tick()
    await run_until_empty(sched)
    assert api.binds == [("default/a", "n1")]


async def test_debug_dump_is_json_ready() -> None:

    sched, _, _, _ = await _ghost_setup(GHOST)
    doc = json.loads(json.dumps(sched.dump()))
    assert doc["bugs"] == ["ghost-node-affinity-error"]
    assert doc["queue"]["backoff"] or doc["queue"]["unschedulable"]
    assert doc["recentFailures"][0]["message"] == 'node "n1" not found'

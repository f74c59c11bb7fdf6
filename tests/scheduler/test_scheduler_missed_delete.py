"""A node DELETE the scheduler's handler missed while its node store applied it (#56261, #94437).

The node informer's store (what `node_lookup` reads) no longer has the victim; the scheduler's
cache still holds it with its Node, because `on_node_delete` never ran. This is the state the
`component.dropHandler` fault produces in a live mesh (scenario `missed-node-delete`). The
1.8-era affinity pass (`ghost-node-affinity-error`) is on in both runs: it is what surfaces the
lookup miss as `node "X" not found`, the error #56622 reacts to.
"""

from __future__ import annotations

from schedkit import FakeApi, bound, make_scheduler, node, pod, run_until_empty, term

from kubemesh.scheduler.scheduling import Scheduler
from kubemesh.services.machinery.clock import ManualClock
from kubemesh.services.model.kinds import Obj

ERA = frozenset({"ghost-node-affinity-error"})
BUGGY = ERA | {"keep-missed-node"}


async def _missed(bugs: frozenset[str]) -> tuple[Scheduler, FakeApi, ManualClock, dict[str, Obj], dict[str, Obj]]:
    store: dict[str, Obj] = {}
    sched, api, clk = make_scheduler(bugs=bugs)
    sched.node_lookup = store.get
    for name in ("victim", "a", "b"):
        store[name] = node(name)
        api.nodes[name] = store[name]
        sched.on_node_add(store[name])
    objs = {"web": pod("web-0", labels={"app": "web"}, node_name="victim", phase="Running")}
    sched.on_pod_add(objs["web"])
    for live in ("a", "b"):  # some load on the live nodes: the empty victim scores best
        objs[f"busy-{live}"] = pod(f"busy-{live}", cpu="1", memory="1Gi", node_name=live, phase="Running")
        sched.on_pod_add(objs[f"busy-{live}"])
    # The victim is deleted: the store applies it, the handler never runs.
    del store["victim"], api.nodes["victim"]
    objs["probe"] = pod("probe-1", labels={"app": "web"}, anti=[term({"app": "web"})])
    sched.on_pod_add(objs["probe"])
    await run_until_empty(sched)
    return sched, api, clk, store, objs


async def _retry(sched: Scheduler, clk: ManualClock, seconds: float = 20) -> None:
    await clk.advance(seconds)
    sched.tick()
    await run_until_empty(sched)


async def test_both_modes_fail_with_node_not_found_while_the_orphan_is_cached() -> None:
    for bugs, gets in ((BUGGY, []), (ERA, ["victim", "victim"])):
        sched, api, clk, _, _ = await _missed(bugs)
        await _retry(sched, clk)
        assert api.binds == []
        assert api.messages("default/probe-1", "FailedScheduling") == ['node "victim" not found'] * 2
        assert api.node_gets == gets
    # fixed (#56622): the re-read answers 404 and the node leaves the cache; only the ghost of
    # its pod (#50813, fixed in 1.9 by #53647) remains until the pod's DELETE arrives.


async def test_fixed_drops_the_node_and_places_the_probe_on_a_live_node_once_the_orphan_goes() -> None:
    sched, api, clk, _, objs = await _missed(ERA)
    assert sched.stats["nodesDropped"] == 1
    assert sched.dump()["cache"]["ghosts"] == ["victim"]
    sched.on_pod_delete(objs["web"])  # PodGC deletes the orphan
    assert sched.cache.node_info("victim") is None
    await _retry(sched, clk)
    assert [(k, n) for k, n in api.binds] in ([("default/probe-1", "a")], [("default/probe-1", "b")])


async def test_buggy_keeps_the_gone_node_and_binds_new_pods_to_it() -> None:
    sched, api, clk, _, objs = await _missed(BUGGY)
    sched.on_pod_delete(objs["web"])  # PodGC deletes the orphan; the victim's NodeInfo stays
    ni = sched.cache.node_info("victim")
    assert ni is not None and not ni.ghost
    await _retry(sched, clk)
    assert api.binds == [("default/probe-1", "victim")]  # #94437: bound to a node that is gone
    # The bound probe now haunts the next affinity pod, and nothing ever repairs the cache.
    sched.on_pod_update(objs["probe"], bound(objs["probe"], "victim"))
    sched.on_pod_add(pod("probe-2", labels={"app": "web"}, anti=[term({"app": "web"})]))
    for _ in range(3):
        await _retry(sched, clk)
    assert api.messages("default/probe-2", "FailedScheduling") == ['node "victim" not found'] * 3
    assert api.node_gets == []

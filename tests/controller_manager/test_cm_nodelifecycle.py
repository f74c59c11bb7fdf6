"""Node health, taints, zones and the legacy eviction path, on a manual clock."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from cm_fakes import FakeApi, FakeStore

from kubemesh.controller_manager.nodelifecycle import NodeLifecycleController, assess_node_health
from kubemesh.controller_manager.objects import PatchType, condition, condition_status
from kubemesh.controller_manager.settings import NodeLifecycleSettings
from kubemesh.controller_manager.zones import ZoneState
from kubemesh.services.machinery.clock import ManualClock, format_micro_time, format_time
from kubemesh.services.machinery.eventing import EventRecorder
from kubemesh.services.model.kinds import DAEMONSETS, LEASES, NODES, PODS, Obj
from kubemesh.services.model.podutil import taints_of
from kubemesh.services.model.wellknown import TAINT_NOT_READY, TAINT_UNREACHABLE

S = NodeLifecycleSettings()  # grace 50 s (current)


def add_node(api: FakeApi, name: str, *, zone: str = "", ready: str = "True") -> Obj:
    now = format_time(api.clock.now())
    labels = {"topology.kubernetes.io/zone": zone} if zone else {}
    api.add(LEASES, {"metadata": {"name": name, "namespace": "kube-node-lease"},
                     "spec": {"holderIdentity": name, "renewTime": format_micro_time(api.clock.now())}})
    return api.add(NODES, {"metadata": {"name": name, "labels": labels}, "spec": {},
                           "status": {"conditions": [
                               {"type": "Ready", "status": ready, "lastHeartbeatTime": now,
                                "lastTransitionTime": now},
                               {"type": "MemoryPressure", "status": "False", "lastHeartbeatTime": now,
                                "lastTransitionTime": now}]}})


def beat(api: FakeApi, name: str, *, lease_only: bool = False) -> None:
    """What a healthy kubelet does: renew the lease (and post status)."""
    now = api.clock.now()
    api.objects["leases"][f"kube-node-lease/{name}"]["spec"]["renewTime"] = format_micro_time(now)
    if not lease_only:
        ready = condition(api.objects["nodes"][name], "Ready")
        assert ready is not None
        ready["lastHeartbeatTime"] = format_time(now)


def add_pod(api: FakeApi, name: str, node: str, *, owner_kind: str | None = None) -> Obj:
    refs = [{"apiVersion": "apps/v1", "kind": owner_kind, "name": "o", "uid": "o-uid", "controller": True}] \
        if owner_kind else []
    return api.add(PODS, {"metadata": {"name": name, "ownerReferences": refs},
                          "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i"}]},
                          "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})


def controller(api: FakeApi, *, legacy: bool = False, settings: NodeLifecycleSettings = S) -> NodeLifecycleController:
    rec = EventRecorder(None, clock=api.clock, component="kube-controller-manager")
    return NodeLifecycleController(api=api, nodes=api.store(NODES), pods=api.store(PODS),
                                   leases=api.store(LEASES), clock=api.clock, settings=settings,
                                   recorder=rec.for_component("node-controller"), legacy=legacy)


def ready_of(api: FakeApi, name: str) -> str | None:
    return condition_status(api.objects["nodes"][name], "Ready")


def noexec(api: FakeApi, name: str) -> set[str]:
    return {t["key"] for t in taints_of(api.objects["nodes"][name]) if t["effect"] == "NoExecute"}


def test_assess_unknown_only_strictly_after_grace() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    node = add_node(api, "n1")
    health, a = assess_node_health(node, None, None, now=clock.now(), settings=S)
    assert a.assumed_now and a.status_update is None
    _, a = assess_node_health(node, None, health, now=clock.now() + 50, settings=S)
    assert a.status_update is None
    _, a = assess_node_health(node, None, health, now=clock.now() + 50.5, settings=S)
    assert a.status_update is not None
    ready = condition(a.status_update, "Ready")
    assert ready is not None and ready["status"] == "Unknown"
    assert ready["reason"] == "NodeStatusUnknown"
    assert ready["message"] == "Kubelet stopped posting node status."
    assert condition_status(a.status_update, "MemoryPressure") == "Unknown"
    assert condition_status(a.status_update, "DiskPressure") == "Unknown"  # never posted: added
    assert a.observed_ready["status"] == "True"


def test_node_without_ready_uses_startup_grace() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    node = api.add(NODES, {"metadata": {"name": "n"}, "status": {}})
    health, a = assess_node_health(node, None, None, now=clock.now(), settings=S)
    assert a.grace_period == 60.0
    _, a = assess_node_health(node, None, health, now=clock.now() + 61, settings=S)
    assert a.status_update is not None
    c = condition(a.status_update, "Ready")
    assert c is not None and c["reason"] == "NodeStatusNeverUpdated"


async def test_lease_renewal_alone_keeps_node_healthy() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    add_node(api, "n1")
    nlc = controller(api)
    for _ in range(30):
        await nlc.monitor_once()
        await clock.advance(5)
        beat(api, "n1", lease_only=True)
    assert ready_of(api, "n1") == "True"


async def test_power_off_unknown_then_tainted_then_healthy_again() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    add_node(api, "n1")
    add_node(api, "n2")
    pod = add_pod(api, "p1", "n1")
    nlc = controller(api)
    await nlc.monitor_once()
    t_off = clock.now()
    # n1 powered off; n2 keeps beating
    while clock.now() + 5 <= t_off + 50:
        await clock.advance(5)
        beat(api, "n2")
        await nlc.monitor_once()
        await nlc.eviction_pass()
    assert ready_of(api, "n1") == "True"  # t_off+50 is not yet after the grace period
    await clock.advance(5)
    beat(api, "n2")
    await nlc.monitor_once()
    assert ready_of(api, "n1") == "Unknown"
    # pods marked NotReady on the transition pass
    assert condition_status(api.objects["pods"]["default/p1"], "Ready") == "False"
    assert pod["metadata"]["uid"] == api.objects["pods"]["default/p1"]["metadata"]["uid"]
    # NoSchedule taint by condition right away; NoExecute needs the next pass (observed Unknown)
    assert {t["key"] for t in taints_of(api.objects["nodes"]["n1"]) if t["effect"] == "NoSchedule"} == {
        TAINT_UNREACHABLE}
    await nlc.eviction_pass()
    assert noexec(api, "n1") == set()
    await clock.advance(5)
    beat(api, "n2")
    await nlc.monitor_once()
    await nlc.eviction_pass()
    assert noexec(api, "n1") == {TAINT_UNREACHABLE}
    assert noexec(api, "n2") == set()
    # the node comes back
    node = api.objects["nodes"]["n1"]
    ready = condition(node, "Ready")
    assert ready is not None
    ready.update(status="True", reason="KubeletReady", lastHeartbeatTime=format_time(clock.now() + 1),
                 lastTransitionTime=format_time(clock.now() + 1))
    await clock.advance(5)
    beat(api, "n1")
    beat(api, "n2")
    await nlc.monitor_once()
    assert noexec(api, "n1") == set()
    assert taints_of(api.objects["nodes"]["n1"]) == []


async def test_ready_false_gets_not_ready_taint_and_swaps_from_unreachable() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    add_node(api, "n1", ready="False")
    add_node(api, "n2")
    nlc = controller(api)
    await nlc.monitor_once()
    await nlc.eviction_pass()
    assert noexec(api, "n1") == {TAINT_NOT_READY}
    # status goes Unknown: the taint is swapped immediately, not through the queue
    node = api.objects["nodes"]["n1"]
    c = condition(node, "Ready")
    assert c is not None
    c["status"] = "Unknown"
    await nlc.monitor_once()
    assert noexec(api, "n1") == {TAINT_UNREACHABLE}


async def test_taints_are_rate_limited_per_zone() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    for i in range(10):
        add_node(api, f"n{i}", ready="False" if i < 2 else "True")
    nlc = controller(api)
    await nlc.monitor_once()
    assert await nlc.eviction_pass() == ["n0"]
    assert await nlc.eviction_pass() == []
    await clock.advance(10)
    for i in range(2, 10):
        beat(api, f"n{i}")
    assert await nlc.eviction_pass() == ["n1"]


async def test_restart_forgets_health_and_assumes_now() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    add_node(api, "n1")
    add_node(api, "n2")
    await controller(api).monitor_once()
    await clock.advance(45)  # n1 silent for 45 s, then the controller-manager restarts
    beat(api, "n2")
    nlc = controller(api)
    await nlc.monitor_once()
    await clock.advance(45)  # 90 s of silence in total, 45 s since the restart
    beat(api, "n2")
    await nlc.monitor_once()
    assert ready_of(api, "n1") == "True"
    await clock.advance(10)
    beat(api, "n2")
    await nlc.monitor_once()
    assert ready_of(api, "n1") == "Unknown"


async def test_legacy_eviction_only_after_probe_plus_eviction_timeout() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    add_node(api, "n1")
    add_node(api, "n2")
    add_pod(api, "p1", "n1")
    add_pod(api, "ds1", "n1", owner_kind="DaemonSet")
    api.add(DAEMONSETS, {"metadata": {"name": "o", "uid": "o-uid"}, "spec": {}})
    nlc = controller(api, legacy=True, settings=NodeLifecycleSettings(node_monitor_grace_period=40.0))
    await nlc.monitor_once()
    t_probe = clock.now()
    # step in monitor periods up to just before probe + pod-eviction-timeout (300 s)
    while clock.now() + 5 <= t_probe + 300:
        await clock.advance(5)
        beat(api, "n2")
        await nlc.monitor_once()
        await nlc.eviction_pass()
        if clock.now() > t_probe + 40:
            assert ready_of(api, "n1") == "Unknown"
        assert "deletionTimestamp" not in api.objects["pods"]["default/p1"]["metadata"]
    assert noexec(api, "n1") == set()  # the legacy path never taints NoExecute
    await clock.advance(5)
    beat(api, "n2")
    await nlc.monitor_once()
    await nlc.eviction_pass()
    assert "deletionTimestamp" in api.objects["pods"]["default/p1"]["metadata"]
    assert api.objects["pods"]["default/p1"]["status"]["reason"] == "NodeLost"
    assert "deletionTimestamp" not in api.objects["pods"]["default/ds1"]["metadata"]  # DaemonSet pod kept
    assert nlc.stats.nodes_evicted == ["n1"]


async def zone_cluster(api: FakeApi, nlc: NodeLifecycleController, zones: dict[str, int]) -> list[str]:
    names = []
    for zone, n in zones.items():
        for i in range(n):
            add_node(api, f"{zone}-{i:02d}", zone=zone)
            names.append(f"{zone}-{i:02d}")
    await nlc.monitor_once()
    return names


async def run_for(api: FakeApi, nlc: NodeLifecycleController, alive: list[str], seconds: float,
                  step: float = 5.0) -> None:
    end = api.clock.now() + seconds
    while api.clock.now() < end:
        await api.clock.advance(step)
        for n in alive:
            beat(api, n)
        await nlc.monitor_once()
        await nlc.eviction_pass()


def tainted(api: FakeApi, names: list[str]) -> list[str]:
    return [n for n in names if noexec(api, n)]


async def test_large_zone_partial_disruption_slows_to_secondary_rate() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    nlc = controller(api)
    names = await zone_cluster(api, nlc, {"a": 60})
    dead, alive = names[:34], names[34:]  # 57 %
    await run_for(api, nlc, alive, 60)
    assert nlc.disruption.states[":\x00:a"] == ZoneState.PARTIAL_DISRUPTION
    assert nlc.disruption.queues[":\x00:a"].qps == 0.01
    before = len(tainted(api, dead))
    await run_for(api, nlc, alive, 200)
    after = len(tainted(api, dead))
    assert 1 <= after - before <= 3  # ~0.01 nodes/s: two or so in 200 s, not twenty


async def test_small_zone_partial_disruption_stops_evictions() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    nlc = controller(api)
    names = await zone_cluster(api, nlc, {"a": 20})
    dead, alive = names[:12], names[12:]  # 60 %
    await run_for(api, nlc, alive, 60)
    assert nlc.disruption.queues[":\x00:a"].qps == 0.0
    n = len(tainted(api, dead))
    await run_for(api, nlc, alive, 300)
    assert len(tainted(api, dead)) == n
    assert n <= 1  # at most the one node tainted before the zone state flipped


async def test_full_zone_evicts_at_normal_rate_other_zone_untouched() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    nlc = controller(api)
    names = await zone_cluster(api, nlc, {"a": 30, "b": 30})
    a, b = names[:30], names[30:]
    await run_for(api, nlc, b, 60)
    assert nlc.disruption.states[":\x00:a"] == ZoneState.FULL_DISRUPTION
    assert nlc.disruption.queues[":\x00:a"].qps == 0.1
    n0 = len(tainted(api, a))
    await run_for(api, nlc, b, 100)
    assert 9 <= len(tainted(api, a)) - n0 <= 11  # 0.1 nodes/s
    assert tainted(api, b) == []


async def test_everything_down_enters_master_disruption_and_removes_taints() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    nlc = controller(api)
    names = await zone_cluster(api, nlc, {"a": 30, "b": 30})
    a, b = names[:30], names[30:]
    await run_for(api, nlc, b, 90)
    assert len(tainted(api, a)) > 0
    await run_for(api, nlc, [], 100)
    assert nlc.disruption.master_disruption
    assert tainted(api, names) == []
    assert all(q.qps == 0.0 for q in nlc.disruption.queues.values())
    # back: b returns; the mode ends and every grace clock restarts
    for n in b:
        c = condition(api.objects["nodes"][n], "Ready")
        assert c is not None
        c.update(status="True", lastTransitionTime=format_time(clock.now()))
    await run_for(api, nlc, b, 5)
    assert nlc.disruption.snapshot()["masterDisruption"] is False
    assert nlc.disruption.queues[":\x00:a"].qps == 0.1


async def test_stale_node_cache_after_own_taint_wastes_no_token() -> None:
    """The informer has not yet delivered the controller's own taint: the next token taints the next node."""
    clock = ManualClock()
    api = FakeApi(clock)
    for i in range(10):
        add_node(api, f"n{i}", ready="False" if i < 3 else "True")
    nlc = controller(api)
    await nlc.monitor_once()
    api_nodes = nlc.nodes
    assert isinstance(api_nodes, FakeStore)
    api_nodes.freeze()  # the cache stops here: it never shows n0's taint
    assert await nlc.eviction_pass() == ["n0"]
    await clock.advance(5)
    await nlc.monitor_once()
    await clock.advance(5)
    assert await nlc.eviction_pass() == ["n1"]
    assert tainted(api, ["n0", "n1", "n2"]) == ["n0", "n1"]
    api_nodes.frozen = None
    await nlc.monitor_once()
    assert nlc._own_writes == {}  # the cache caught up: nothing overlaid any more


class GatedApi(FakeApi):
    """Holds the NoExecute taint write of one node until `gate` is set."""

    def __init__(self, clock: ManualClock, *, node: str) -> None:
        super().__init__(clock)
        self.node = node
        self.gate = asyncio.Event()
        self.held = asyncio.Event()

    async def patch(self, kind: Any, name: str, patch: Obj | list[Obj], *, namespace: str | None = None,
                    patch_type: PatchType = "merge", subresource: str | None = None) -> Obj:
        if name == self.node and isinstance(patch, dict) and any(
                t.get("effect") == "NoExecute" for t in (patch.get("spec") or {}).get("taints") or []):
            self.held.set()
            await self.gate.wait()
        return await super().patch(kind, name, patch, namespace=namespace, patch_type=patch_type,
                                   subresource=subresource)


async def test_master_disruption_removes_a_taint_that_was_in_flight() -> None:
    """Entering master disruption waits for the eviction action in flight and removes its taint too."""
    clock = ManualClock()
    api = GatedApi(clock, node="a-01")
    nlc = controller(api)
    names = await zone_cluster(api, nlc, {"a": 3, "b": 3})
    a, b = names[:3], names[3:]
    await run_for(api, nlc, b, 60)
    assert tainted(api, a) == ["a-00"]  # zone a fully down: first token at once
    await clock.advance(10)
    evicting = asyncio.create_task(nlc.eviction_pass())
    await asyncio.wait_for(api.held.wait(), 1)  # a-01's taint is granted its token and in flight
    await clock.advance(60)  # zone b powered off too
    monitoring = asyncio.create_task(nlc.monitor_once())
    for _ in range(20):
        await asyncio.sleep(0)
    assert nlc.disruption.master_disruption
    api.gate.set()
    await asyncio.wait_for(asyncio.gather(evicting, monitoring), 1)
    assert tainted(api, names) == []
    assert all(q.qps == 0.0 for q in nlc.disruption.queues.values())


async def test_next_eviction_pass_wakes_when_a_token_is_due() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    for i in range(10):
        add_node(api, f"n{i}", ready="False" if i < 2 else "True")
    nlc = controller(api)
    assert nlc.next_pass_delay(0.8) == 0.8  # nothing queued: the polling period
    await nlc.monitor_once()
    assert nlc.next_pass_delay(0.8) == pytest.approx(0.001)  # a token and a node: now
    assert await nlc.eviction_pass() == ["n0"]
    await clock.advance(9.5)
    assert nlc.next_pass_delay(0.8) == pytest.approx(0.501)  # the next token, not the next poll
    await clock.advance(0.501)
    assert await nlc.eviction_pass() == ["n1"]


class GatedStatusApi(FakeApi):
    """Holds one node's status write until `gate` is set (the monitor pass awaits mid-way)."""

    def __init__(self, clock: ManualClock, *, node: str) -> None:
        super().__init__(clock)
        self.node = node
        self.gate = asyncio.Event()
        self.held = asyncio.Event()

    async def update(self, kind: Any, body: Obj, *, subresource: str | None = None) -> Obj:
        if subresource == "status" and body["metadata"]["name"] == self.node:
            self.held.set()
            await self.gate.wait()
        return await super().update(kind, body, subresource=subresource)


async def test_node_tainted_while_the_monitor_pass_awaits_is_not_requeued() -> None:
    """The pass judges each node on its newest copy, not on the list it started from."""
    clock = ManualClock()
    api = GatedStatusApi(clock, node="n1")
    for i in range(10):
        add_node(api, f"n{i}")
    nlc = controller(api)
    alive = [f"n{i}" for i in range(10) if i != 1]  # n1 is powered off from the start
    await nlc.monitor_once()  # n1's grace clock starts now: Unknown once 50 s have passed
    await run_for(api, nlc, alive, 40)
    await clock.advance(5)
    for n in ("n4", "n5"):  # the kubelets of n4 and n5 report NotReady
        c = condition(api.objects["nodes"][n], "Ready")
        assert c is not None
        c.update(status="False", lastTransitionTime=format_time(clock.now()))
    for n in alive:
        beat(api, n)
    await nlc.monitor_once()
    assert await nlc.eviction_pass() == ["n4"]  # n5 waits for the next token, 10 s later
    await run_for(api, nlc, alive, 5)
    await clock.advance(5)
    for n in alive:
        beat(api, n)
    assert ready_of(api, "n1") == "True"
    monitoring = asyncio.create_task(nlc.monitor_once())  # n1 goes Unknown: its write is held
    await asyncio.wait_for(api.held.wait(), 1)
    assert await nlc.eviction_pass() == ["n5"]  # meanwhile n5 is tainted
    api.gate.set()
    await asyncio.wait_for(monitoring, 1)
    assert ready_of(api, "n1") == "Unknown"
    await run_for(api, nlc, alive, 5)  # n1 observed Unknown: queued
    await clock.advance(5)
    assert await nlc.eviction_pass() == ["n1"]  # not a wasted token on n5 again


async def test_release_taint_keys_are_used_for_noexecute_taints() -> None:
    """v1.7-v1.8 (`--profile 1.7`) taint with the alpha keys, and swap between them the same way."""
    clock = ManualClock()
    api = FakeApi(clock)
    add_node(api, "n1", ready="False")
    add_node(api, "n2")
    alpha = NodeLifecycleSettings(not_ready_taint_key="node.alpha.kubernetes.io/notReady",
                                  unreachable_taint_key="node.alpha.kubernetes.io/unreachable")
    nlc = controller(api, settings=alpha)
    await nlc.monitor_once()
    await nlc.eviction_pass()
    assert noexec(api, "n1") == {"node.alpha.kubernetes.io/notReady"}
    c = condition(api.objects["nodes"]["n1"], "Ready")
    assert c is not None
    c["status"] = "Unknown"
    await nlc.monitor_once()
    assert noexec(api, "n1") == {"node.alpha.kubernetes.io/unreachable"}


async def test_kubelet_posted_ready_false_does_not_mark_pods_not_ready() -> None:
    """markAllPodsNotReady runs when the controller itself turns Ready from True (the Unknown path):
    a Ready=False the kubelet posted is already False when a pass reads it (v1.7 compared the
    condition it read with the one it wrote, as today)."""
    clock = ManualClock()
    api = FakeApi(clock)
    add_node(api, "n1")
    add_pod(api, "p1", "n1")
    nlc = controller(api)
    await nlc.monitor_once()
    c = condition(api.objects["nodes"]["n1"], "Ready")
    assert c is not None
    c.update(status="False", lastTransitionTime=format_time(clock.now()))
    for _ in range(3):
        await clock.advance(5)
        beat(api, "n1")
        await nlc.monitor_once()
    assert ready_of(api, "n1") == "False"
    assert condition_status(api.objects["pods"]["default/p1"], "Ready") == "True"
    assert nlc.stats.pods_marked_not_ready == 0

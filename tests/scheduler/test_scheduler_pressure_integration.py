"""Node pressure and the scheduler, with real processes: DiskPressure keeps every pod off a node,
MemoryPressure keeps BestEffort pods off (and, with condition taints, every pod without a toleration).

The conditions are set through the chaos front door (`node.condition`, forwarded to the
kubelet, which posts them in the node's status). Two meshes, one per way the scheduler learns
about pressure:

* `conditions`: apiserver, kubelet and scheduler with the bug switch `pressure-predicates`; the
  scheduler filters on the node conditions themselves (1.7's CheckNodeDiskPressure /
  CheckNodeMemoryPressure): Burstable pods are still placed on the MemoryPressure node.
* `taints`: today's scheduler with the controller-manager, whose node-lifecycle controller turns
  the conditions into `node.kubernetes.io/{disk,memory}-pressure:NoSchedule` taints; a pod without
  a toleration is kept off either node, whatever its QoS class.

Placement is asserted on `spec.nodeName` (bindings), never on a pod staying Running.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest
import pytest_asyncio

from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.mesh.chaos_client import Chaos, FaultContext
from kubemesh.services.mesh.launching import Mesh, MeshSpec
from kubemesh.services.model.kinds import EVENTS, NODES, PODS, Obj

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

T = TypeVar("T")
RATE = 10.0
NS = "default"
DISK = "node-1"
MEMORY = "node-2"
HEALTHY = "node-3"
HOSTNAME = "kubernetes.io/hostname"


@dataclass
class Pressure:
    mode: str
    mesh: Mesh
    client: ApiClient
    chaos: Chaos
    faults: list[FaultContext] = field(default_factory=list)

    async def until(self, check: Callable[[], Awaitable[T | None]], *, within: float, what: str) -> T:
        """Poll until `check` is truthy; `within` is in cluster seconds."""
        deadline = time.monotonic() + within / RATE
        last: T | None = None
        while True:
            last = await check()
            if last:
                return last
            if time.monotonic() > deadline:
                raise AssertionError(f"[{self.mode}] not within {within:.0f} cluster s: {what}; last: {last!r}")
            await asyncio.sleep(0.05)

    async def pod(self, name: str) -> Obj:
        return await self.client.get(PODS, name, namespace=NS)

    async def create(self, name: str, *, best_effort: bool, node: str | None = None) -> None:
        container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.9"}
        if not best_effort:
            container["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
        spec: Obj = {"containers": [container]}
        if node is not None:
            spec["nodeSelector"] = {HOSTNAME: node}
        await self.client.create(PODS, {"apiVersion": "v1", "kind": "Pod",
                                        "metadata": {"name": name, "namespace": NS}, "spec": spec})

    async def bound(self, names: list[str], *, within: float = 60.0) -> dict[str, str]:
        async def all_bound() -> dict[str, str] | None:
            nodes = {n: str((await self.pod(n))["spec"].get("nodeName") or "") for n in names}
            return nodes if all(nodes.values()) else None

        return await self.until(all_bound, within=within, what=f"{names} bound")

    async def failed_scheduling(self, name: str) -> str:
        """The message of the latest FailedScheduling event of a pod ("" if none)."""
        events = (await self.client.list(EVENTS, namespace=NS))["items"]
        mine = [e for e in events if e.get("reason") == "FailedScheduling"
                and (e.get("involvedObject") or e.get("regarding") or {}).get("name") == name]
        return str((mine[-1].get("message") or mine[-1].get("note") or "") if mine else "")


def cond(node: Obj, ctype: str) -> str | None:
    return next((c.get("status") for c in (node.get("status") or {}).get("conditions") or []
                 if c.get("type") == ctype), None)


def taint_keys(node: Obj) -> set[str]:
    return {t.get("key", "") for t in (node.get("spec") or {}).get("taints") or []}


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["conditions", "taints"])
async def pressure(request: pytest.FixtureRequest) -> AsyncIterator[Pressure]:
    mode = str(request.param)
    components = ("apiserver", "kubelet", "scheduler") + (("controller_manager",) if mode == "taints" else ())
    spec = MeshSpec(nodes=3, clock_rate=RATE, components=components, seed=5, start_timeout=120.0,
                    bugs=("pressure-predicates",) if mode == "conditions" else ())
    async with Mesh(spec) as mesh, mesh.client() as client:
        # `Mesh.chaos` raises NameError (Chaos is imported under TYPE_CHECKING only): build it here.
        chaos = mesh.endpoint.chaos()
        env = Pressure(mode=mode, mesh=mesh, client=client, chaos=chaos)
        try:
            for node, ctype in ((DISK, "DiskPressure"), (MEMORY, "MemoryPressure")):
                fault = chaos.node_condition(node, ctype, "True")
                await fault.__aenter__()
                env.faults.append(fault)

            async def reported() -> bool:
                disk, memory = await client.get(NODES, DISK), await client.get(NODES, MEMORY)
                ok = cond(disk, "DiskPressure") == "True" and cond(memory, "MemoryPressure") == "True"
                if mode == "taints":
                    ok = ok and "node.kubernetes.io/disk-pressure" in taint_keys(disk) \
                        and "node.kubernetes.io/memory-pressure" in taint_keys(memory)
                return ok

            await env.until(reported, within=30, what="pressure reported in the node objects")
            await asyncio.sleep(0.3)  # let the scheduler's node informer catch up with what we read
            yield env
        finally:
            for fault in reversed(env.faults):
                await fault.__aexit__(None, None, None)
            await chaos.close()


async def test_unpinned_pods_avoid_pressured_nodes(pressure: Pressure) -> None:
    best_effort = [f"be-{i}" for i in range(5)]
    burstable = [f"bu-{i}" for i in range(5)]
    for name in best_effort:
        await pressure.create(name, best_effort=True)
    for name in burstable:
        await pressure.create(name, best_effort=False)
    placed = await pressure.bound(best_effort + burstable)
    print(f"[{pressure.mode}] placement: {placed}")
    assert all(node != DISK for node in placed.values()), f"pods on the DiskPressure node: {placed}"
    assert all(placed[n] == HEALTHY for n in best_effort), f"BestEffort pods on the MemoryPressure node: {placed}"
    if pressure.mode == "taints":
        assert all(placed[n] == HEALTHY for n in burstable), f"Burstable pods on a tainted node: {placed}"


async def test_pinned_pods_follow_pressure_rules(pressure: Pressure) -> None:
    await pressure.create("pin-be-memory", best_effort=True, node=MEMORY)
    await pressure.create("pin-bu-memory", best_effort=False, node=MEMORY)
    await pressure.create("pin-bu-disk", best_effort=False, node=DISK)
    await pressure.create("pin-be-disk", best_effort=True, node=DISK)
    refused = ["pin-be-memory", "pin-bu-disk", "pin-be-disk"]
    if pressure.mode == "conditions":
        placed = await pressure.bound(["pin-bu-memory"])
        assert placed == {"pin-bu-memory": MEMORY}, "the predicate lets a Burstable pod on a MemoryPressure node"
    else:
        refused.append("pin-bu-memory")  # the memory-pressure taint keeps it off: it has no toleration
    for name in refused:
        async def explained(pod: str = name) -> str:
            return await pressure.failed_scheduling(pod)

        message = await pressure.until(explained, within=30, what=f"FailedScheduling for {name}")
        print(f"[{pressure.mode}] {name}: {message}")
        assert "pressure" in message, f"{name}: {message}"
        assert not (await pressure.pod(name))["spec"].get("nodeName"), f"{name} was bound"
    # Still Pending a while later (the scheduler keeps retrying and keeps refusing).
    await asyncio.sleep(20 / RATE)
    for name in refused:
        pod = await pressure.pod(name)
        assert not pod["spec"].get("nodeName") and pod["status"].get("phase") == "Pending", name


async def test_pending_pods_schedule_once_pressure_clears(pressure: Pressure) -> None:
    names = ["late-be-memory", "late-bu-disk"]
    await pressure.create(names[0], best_effort=True, node=MEMORY)
    await pressure.create(names[1], best_effort=False, node=DISK)

    async def refused() -> bool:
        return all([bool(await pressure.failed_scheduling(n)) for n in names])

    await pressure.until(refused, within=30, what=f"{names} refused first")
    while pressure.faults:
        await pressure.faults.pop().__aexit__(None, None, None)
    placed = await pressure.bound(names, within=60)
    assert placed == {names[0]: MEMORY, names[1]: DISK}

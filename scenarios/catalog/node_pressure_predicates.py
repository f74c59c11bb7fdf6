"""node-pressure-predicates: a Burstable pod placed on a node under memory pressure, then evicted.

Before TaintNodesByCondition the scheduler read a node's pressure conditions itself (1.7's
CheckNodeMemoryPressure predicate): under MemoryPressure only BestEffort pods were kept off; a
Burstable pod was still placed there, where its memory use deepens the pressure and the kubelet's
eviction manager has to evict it again. Today the node-lifecycle controller turns the condition
into the `node.kubernetes.io/memory-pressure:NoSchedule` taint and the scheduler reads taints only:
a pod without a toleration stays off the node, whatever its QoS class. Bug switch
`pressure-predicates` (scheduler) brings the predicates back.

Nothing is injected; the pressure comes from the pods' emulated usage (`kubemesh.io/usage`,
`kubemesh.kubelet.pressure`). The kubelets run with a soft threshold `memory.available<1Gi` and a
grace period of one hour (besides the default hard `memory.available<100Mi`), as a node operator
sets it to see pressure long before evicting:

1. `hog` (Guaranteed, 3500Mi requested and used) on node-1 leaves 596Mi of its 4Gi: the soft
   threshold is met, the kubelet reports MemoryPressure=True (it evicts nothing: the grace period
   has not passed) and the controller-manager taints node-1 memory-pressure:NoSchedule;
2. then `be` (BestEffort) and `bu` (Burstable: requests 64Mi, uses 600Mi) are created, both
   pinned to node-1 by nodeSelector.

Oracle, read from the API and the history after the scheduler decided:

* window: node-1 reported MemoryPressure=True (computed by its kubelet from usage) from before
  the pods were created until the scheduler decided; otherwise inconclusive;
* `be` must stay unbound in both modes (predicate or taint); otherwise inconclusive;
* reproduced: `bu` was bound to node-1 under MemoryPressure (the binding in the history); the
  evidence adds what followed: the kubelet admitted it, its 600Mi pushed memory.available under
  the hard threshold and the eviction manager evicted it (Failed/Evicted, upstream's message);
* prevented: `bu` stayed unbound throughout, refused for the untolerated memory-pressure taint.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import MeshShape, Scenario, ScenarioContext, ScenarioError, Verdict
from kubemesh.scenarios.records import select
from kubemesh.scenarios.workloads import HOSTNAME, pod
from kubemesh.services.machinery.clock import parse_time
from kubemesh.services.model.kinds import PODS
from kubemesh.services.model.wellknown import TAINT_MEMORY_PRESSURE

NODE = "node-1"
DECIDE = 30.0
"""Cluster seconds the scheduler is given to place (or keep refusing) the pods."""
EVICTION = 40.0
"""Cluster seconds given to the eviction manager (one pass per 10 s) once `bu` runs."""


def _status(p: dict[str, Any] | None) -> dict[str, Any]:
    return (p or {}).get("status") or {}


class NodePressurePredicates(Scenario):
    """See the module docstring."""

    name: ClassVar[str] = "node-pressure-predicates"
    summary: ClassVar[str] = ("memory pressure from pods' usage: the 1.7 predicate places a Burstable pod on the "
                              "MemoryPressure node (then evicted); the condition taint keeps it off")
    upstream: ClassVar[tuple[str, ...]] = ("kubernetes v1.7 CheckNodeMemoryPressure predicate",
                                           "TaintNodesByCondition (GA 1.17)", "kubelet eviction manager")
    bugs: ClassVar[tuple[str, ...]] = ("pressure-predicates",)
    profile: ClassVar[str] = "1.7"
    window_needs_faults: ClassVar[bool] = False
    """The window is opened by the workload (usage), not by a fault: faults off changes nothing."""
    shape: ClassVar[MeshShape] = MeshShape(nodes=3, clock_rate=60.0, capacity="cpu=4,memory=4Gi,pods=110",
                                           extra_args={"kubelet": ["--eviction-soft", "memory.available<1Gi",
                                                                   "--eviction-soft-grace-period",
                                                                   "memory.available=1h"]})
    deadline: ClassVar[float] = 300.0

    async def run(self, ctx: ScenarioContext) -> Verdict:
        """Set up, observe, judge (see the module docstring)."""
        pin = {HOSTNAME: NODE}
        ctx.focus("pods", "default/hog", "default/be", "default/bu")
        ctx.focus("nodes", NODE)
        await ctx.client.create(PODS, pod("hog", cpu="100m", memory="3500Mi",
                                          limits={"cpu": "100m", "memory": "3500Mi"}, node_selector=pin),
                                namespace="default")

        async def hog_running() -> bool:
            return oracles.is_running(await ctx.pod("hog"))

        if not await ctx.until(hog_running, within=30):
            raise ScenarioError(f"hog (Guaranteed, 3500Mi) never ran on {NODE}")
        ctx.say(f"hog Running on {NODE}: memory.available 596Mi, under the soft threshold 1Gi")

        async def pressure_seen() -> bool:
            node = await ctx.node(NODE)
            cond = oracles.condition(node, "MemoryPressure") or {}
            return cond.get("status") == "True" and f"{TAINT_MEMORY_PRESSURE}:NoSchedule" in oracles.taint_keys(node)

        if not await ctx.until(pressure_seen, within=60):
            node = await ctx.node(NODE)
            return oracles.inconclusive(
                f"the window did not open: {NODE} never reported MemoryPressure with its taint",
                [f"{NODE} MemoryPressure: {oracles.condition(node, 'MemoryPressure')}",
                 f"{NODE} taints: {sorted(oracles.taint_keys(node))}"])
        ctx.mark(f"{NODE} MemoryPressure (from usage) and tainted", lane=f"node/{NODE}")
        t_create = ctx.now()
        await ctx.client.create(PODS, pod("be", node_selector=pin), namespace="default")
        bu = pod("bu", cpu="100m", memory="64Mi", node_selector=pin)
        bu["metadata"]["annotations"] = {"kubemesh.io/usage": "memory=600Mi"}
        await ctx.client.create(PODS, bu, namespace="default")
        ctx.mark("create be (BestEffort) and bu (Burstable, uses 600Mi), pinned to node-1", lane="scenario",
                 at=t_create)

        async def bu_bound() -> str | None:
            return oracles.node_name(await ctx.pod("bu")) or None

        bound = await oracles.eventually(ctx, f"bu bound to {NODE}", bu_bound, within=DECIDE)
        t_decided = ctx.now()
        evidence = [bound.describe(ctx.t0)]
        be = await ctx.pod("be")
        node = await ctx.node(NODE)
        cond = oracles.condition(node, "MemoryPressure") or {}
        since = parse_time(str(cond["lastTransitionTime"])) if cond.get("lastTransitionTime") else None
        evidence.append(f"{NODE} MemoryPressure {cond.get('status')} ({cond.get('reason')}) since "
                        + (f"t={since - ctx.t0:.1f}s" if since is not None else "-"))
        under_pressure = cond.get("status") == "True" and since is not None and since <= t_create
        if not under_pressure:
            return oracles.inconclusive(
                f"the window did not stay open: {NODE} was not under MemoryPressure from before the pods were "
                "created until the scheduler decided", evidence)
        if oracles.node_name(be):
            return oracles.inconclusive(f"be (BestEffort) was bound to {oracles.node_name(be)} under "
                                        "MemoryPressure: neither the predicate nor the taint held", evidence)
        for name in ("be", "bu"):
            ev = await ctx.events_about(name, reason="FailedScheduling")
            if ev:
                evidence.append(f"{name} FailedScheduling: {ev[-1].get('message')}")

        records = await ctx.records()
        binds = [r for r in select(records, type="request", component="scheduler", after=t_create)
                 if str(r.get("path") or "").endswith("/pods/bu/binding") and int(r.get("code") or 0) < 300]
        if bound.value:
            at = float(binds[0]["time"]) if binds else bound.at or t_decided
            ctx.mark(f"bu bound to {bound.value}", lane="scheduler", at=at)

            async def evicted() -> dict[str, Any] | None:
                p = await ctx.pod("bu")
                st = _status(p)
                return st if st.get("phase") == "Failed" and st.get("reason") == "Evicted" else None

            gone = await oracles.eventually(ctx, "bu evicted by the kubelet", evicted, within=EVICTION)
            if gone.value:
                ctx.mark("bu evicted", lane=f"node/{NODE}", at=gone.at)
                evidence.append(f"bu: Failed/Evicted: {gone.value.get('message')}")
            else:
                evidence.append(f"bu: phase {_status(await ctx.pod('bu')).get('phase')} (not evicted within "
                                f"{EVICTION:.0f} s)")
            evidence.append("binding in the history: " + (f"t={float(binds[0]['time']) - ctx.t0:.1f}s by the scheduler"
                                                          if binds else "not found"))
        refused = not bound.value and any("memory-pressure" in line for line in evidence if line.startswith("bu "))
        return oracles.decide(
            symptom=bool(bound.value == NODE), healthy=refused, evidence=evidence,
            reproduced=(f"reproduced: the scheduler placed the Burstable pod bu on {NODE} while {NODE} reported "
                        "MemoryPressure (1.7's pressure predicate keeps only BestEffort pods off)"
                        + ("; its usage then pushed memory.available under the hard threshold and the kubelet "
                           "evicted it" if any(line.startswith("bu: Failed/Evicted") for line in evidence) else "")),
            prevented=(f"prevented: bu stayed unbound for {DECIDE:.0f} s, refused for the untolerated "
                       f"{TAINT_MEMORY_PRESSURE} taint the controller-manager put on {NODE} (TaintNodesByCondition)"),
            inconclusive="bu was neither bound to node-1 nor refused for the memory-pressure taint")

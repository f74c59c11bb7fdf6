"""node-pressure-predicates: MemoryPressure and DiskPressure, and eviction versus an OOM kill.

There is no historic bug behind this scenario and no bug switch: both modes run the same
mesh (today's behaviour). The two modes contrast two ways a node can lose memory:

* **buggy mode = "oom-kill"**: memory runs out before the kubelet's eviction threshold is
  crossed, so the kernel's OOM killer acts (chaos: the BestEffort hog's container exits
  `OOMKilled`/137). The container is restarted in place by its restartPolicy; the pod keeps its
  place on the node (restartCount grows, phase Running, no eviction). That is the outcome
  reported as "reproduced": the memory hog stays where it is.
* **fixed mode = "kubelet eviction"**: the kubelet reports MemoryPressure and its eviction
  manager evicts, BestEffort first: the hog ends Failed with reason Evicted (its controller
  would place a replacement elsewhere) and the Guaranteed pod on the node is untouched.
  Reported as "prevented".

Both modes also check the scheduling predicates (safety, `never` over 20 cluster seconds):
under MemoryPressure a BestEffort pod is kept off the node while a Burstable pod is admitted;
under DiskPressure every pod is kept off. A violated predicate makes the run inconclusive
(the contrast is then not measured on a healthy control plane).
"""

from __future__ import annotations

from typing import Any, ClassVar

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import MeshShape, Scenario, ScenarioContext, ScenarioError, Verdict
from kubemesh.scenarios.workloads import HOSTNAME, pod
from kubemesh.services.model.kinds import PODS

PREDICATE_WINDOW = 20.0
"""Cluster seconds during which the pressure predicates must hold."""
REACTION = 40.0
"""Cluster seconds given to the node for the eviction or the restart (one eviction per 10 s)."""


def _status(p: dict[str, Any] | None) -> dict[str, Any]:
    return (p or {}).get("status") or {}


def _restarts(p: dict[str, Any] | None) -> int:
    return sum(int(c.get("restartCount") or 0) for c in _status(p).get("containerStatuses") or [])


def _last_reason(p: dict[str, Any] | None) -> str:
    for c in _status(p).get("containerStatuses") or []:
        term = (c.get("lastState") or {}).get("terminated") or {}
        if term.get("reason"):
            return str(term["reason"])
    return ""


class NodePressurePredicates(Scenario):
    """See the module docstring."""

    name: ClassVar[str] = "node-pressure-predicates"
    summary: ClassVar[str] = ("no historic bug: MemoryPressure keeps BestEffort pods off, DiskPressure keeps all "
                              "pods off; buggy mode = an OOM kill (restart in place), fixed mode = kubelet eviction")
    upstream: ClassVar[tuple[str, ...]] = ("no upstream bug: scheduler CheckNodeMemoryPressure/DiskPressure "
                                           "predicates and the kubelet eviction manager",)
    bugs: ClassVar[tuple[str, ...]] = ()
    profile: ClassVar[str] = "1.7"
    shape: ClassVar[MeshShape] = MeshShape(nodes=3, clock_rate=60.0)
    deadline: ClassVar[float] = 300.0

    async def run(self, ctx: ScenarioContext) -> Verdict:
        """Set up, inject, observe (see the module docstring)."""
        sel = {f"node-{i}": {HOSTNAME: f"node-{i}"} for i in (1, 2, 3)}
        await ctx.client.create(PODS, pod("hog", node_selector=sel["node-1"]), namespace="default")
        await ctx.client.create(PODS, pod("steady", cpu="100m", memory="128Mi",
                                          limits={"cpu": "100m", "memory": "128Mi"},
                                          node_selector=sel["node-1"]), namespace="default")
        ctx.focus("pods", "default/hog", "default/steady", "default/be-mem", "default/bu-mem", "default/bu-disk")
        ctx.focus("nodes", "node-1", "node-2", "node-3")

        async def both_running() -> bool:
            pods = [await ctx.pod(n) for n in ("hog", "steady")]
            return all(oracles.is_running(p) for p in pods)

        if not await ctx.until(both_running, within=30):
            raise ScenarioError("hog (BestEffort) and steady (Guaranteed) never ran on node-1")
        ctx.say("hog (BestEffort) and steady (Guaranteed) Running on node-1")

        # -- the predicates (both modes) -----------------------------------------------------
        await ctx.set_condition("node-3", "MemoryPressure", reason="KubeletHasInsufficientMemory")
        await ctx.set_condition("node-2", "DiskPressure", reason="KubeletHasDiskPressure")

        async def conditions_posted() -> bool:
            n2, n3 = await ctx.node("node-2"), await ctx.node("node-3")
            return ((oracles.condition(n3, "MemoryPressure") or {}).get("status") == "True"
                    and (oracles.condition(n2, "DiskPressure") or {}).get("status") == "True")

        if not await ctx.until(conditions_posted, within=30):
            raise ScenarioError("the kubelet never posted the pressure conditions")
        await ctx.client.create(PODS, pod("be-mem", node_selector=sel["node-3"]), namespace="default")
        await ctx.client.create(PODS, pod("bu-mem", cpu="100m", node_selector=sel["node-3"]), namespace="default")
        await ctx.client.create(PODS, pod("bu-disk", cpu="100m", node_selector=sel["node-2"]), namespace="default")
        ctx.mark("create be-mem, bu-mem (node-3) and bu-disk (node-2)", lane="scenario")

        async def bu_mem_running() -> bool:
            return oracles.is_running(await ctx.pod("bu-mem"))

        admitted = await oracles.eventually(ctx, "Burstable bu-mem Running on node-3 (MemoryPressure)",
                                            bu_mem_running, within=PREDICATE_WINDOW)

        async def kept_off_violation() -> str | None:
            for name in ("be-mem", "bu-disk"):
                n = oracles.node_name(await ctx.pod(name))
                if n:
                    return f"{name} was bound to {n}"
            return None

        kept_off = await oracles.never(ctx, "be-mem and bu-disk stay unbound", kept_off_violation,
                                       during=PREDICATE_WINDOW)
        evidence = [admitted.describe(ctx.t0), kept_off.describe(ctx.t0)]
        for name in ("be-mem", "bu-disk"):
            ev = await ctx.events_about(name, reason="FailedScheduling")
            if ev:
                evidence.append(f"{name} FailedScheduling: {ev[-1].get('message')}")
        if not admitted.held or not kept_off.held:
            return oracles.inconclusive(
                "the pressure predicates did not hold ("
                + ("; ".join(d for d, ok in ((admitted.describe(ctx.t0), admitted.held),
                                             (f"{kept_off.value}", kept_off.held)) if not ok))
                + "), so the eviction/OOM contrast is not measured", evidence)
        ctx.say("predicates held: BestEffort kept off MemoryPressure, every pod kept off DiskPressure")

        # -- the contrast on node-1 ----------------------------------------------------------------
        if ctx.mode == "buggy":
            await ctx.node_op("node-1", "containers/fail",
                              {"namespace": "default", "pod": "hog", "exitCode": 137, "reason": "OOMKilled"})
            ctx.mark("OOM kill of hog's container", lane="node/node-1")
            ctx.say("node-1: the OOM killer kills hog's container (no MemoryPressure, no eviction)")
        else:
            await ctx.set_condition("node-1", "MemoryPressure", reason="KubeletHasInsufficientMemory")
            ctx.mark("node-1 MemoryPressure", lane="node/node-1")

        async def reacted() -> str | None:
            hog = await ctx.pod("hog")
            st = _status(hog)
            if st.get("phase") == "Failed" and st.get("reason") == "Evicted":
                return "evicted"
            if _restarts(hog) >= 1 and oracles.is_running(hog):
                return "restarted"
            return None

        outcome = await oracles.eventually(ctx, "hog evicted or restarted", reacted, within=REACTION)
        hog, steady = await ctx.pod("hog"), await ctx.pod("steady")
        evidence += [f"hog: phase {_status(hog).get('phase')}, reason {_status(hog).get('reason')}, node "
                     f"{oracles.node_name(hog) or '-'}, restarts {_restarts(hog)}, last termination "
                     f"{_last_reason(hog) or '-'}",
                     f"steady (Guaranteed): phase {_status(steady).get('phase')}, restarts {_restarts(steady)}"]
        steady_ok = oracles.is_running(steady) and _restarts(steady) == 0
        if outcome.value and outcome.at is not None:
            ctx.mark(f"hog {outcome.value}", lane="node/node-1")
        if ctx.mode == "buggy":
            return oracles.decide(
                symptom=outcome.value == "restarted" and _last_reason(hog) == "OOMKilled" and steady_ok,
                healthy=outcome.value == "evicted", evidence=evidence,
                reproduced=(f"reproduced (contrast 'oom-kill', no historic bug): hog's container was OOM-killed and "
                            f"restarted in place ({_restarts(hog)} restart(s)); the BestEffort pod keeps its place on "
                            "node-1, nothing was evicted; predicates held (BestEffort off MemoryPressure, all off "
                            "DiskPressure)"),
                prevented="",
                inconclusive="the OOM-killed hog was neither restarted in place (with steady untouched) nor evicted")
        return oracles.decide(
            symptom=outcome.value == "restarted", healthy=outcome.value == "evicted" and steady_ok,
            evidence=evidence,
            reproduced="",
            prevented=("prevented (contrast 'kubelet eviction', no historic bug): under MemoryPressure the kubelet "
                       "evicted the BestEffort hog (Failed/Evicted) and left the Guaranteed pod running; predicates "
                       "held (BestEffort off MemoryPressure, all off DiskPressure)"),
            inconclusive="under MemoryPressure the hog was not evicted (or the Guaranteed pod was disturbed)")

"""ready-false-eviction: the seed 001 Ready=False path (a live kubelet that reports NotReady).

node-heartbeat-eviction powers a node off: its heartbeats stop and the node controller turns
Ready to Unknown. The seed's node controller has a second path: the kubelet keeps posting, but
reports `Ready=False` (its container runtime or network is down: "PLEG is not healthy",
"runtime network not ready"). Then:

* the pods are *not* marked not ready: the controller's `markAllPodsNotReady` runs only when a
  pass turns Ready from True itself (the condition it read was True, the one it wrote is not),
  which is the Unknown path; a False the kubelet posted is already False when the controller
  reads it. The pods keep Ready=True (and their endpoints) until they are evicted;
* buggy (`legacy-pod-eviction`, v1.7): no taint; the zone's pod evictor deletes the node's pods
  `--pod-eviction-timeout` (5 m) after `readyTransitionTimestamp` (for Unknown the clock starts
  at the last heartbeat instead; here heartbeats go on), whatever the pods tolerate;
* fixed (the 1.7 profile with TaintBasedEvictions, whose v1.7 taint is the alpha
  `node.alpha.kubernetes.io/notReady`): the node is tainted not-ready NoExecute and each pod is
  evicted when its own toleration runs out (30 s for `fast`, the admission default 300 s for
  `slow`).

The kubelet reports Ready=False through its admin endpoint (the chaos `node.condition` fault
does the same). The oracle takes its times from the objects and the history: the kubelet's
status PATCHes after the transition (heartbeats went on: this is not the Unknown path), the
controller's node write that added the taint, the DELETEs; a controller write of a pod's
status before its eviction would be a `markAllPodsNotReady` this path does not have (the run is
inconclusive if one is seen).
"""

from __future__ import annotations

from typing import ClassVar

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import MeshShape, Scenario, ScenarioContext, ScenarioError, Verdict
from kubemesh.scenarios.workloads import HOSTNAME, pod
from kubemesh.services.machinery.clock import parse_time
from kubemesh.services.model.kinds import PODS
from kubemesh.services.model.profiles import ALPHA_NOT_READY
from kubemesh.services.model.wellknown import TAINT_NOT_READY

PERIOD = 5.0
EVICTION_TIMEOUT = 300.0
FAST_TOLERATION = 30
DEFAULT_TOLERATION = 300
SLACK_BASE = 2.0
SLACK_WALL = 0.05
NOT_READY_KEYS = (TAINT_NOT_READY, ALPHA_NOT_READY)
"""The not-ready taint under either name (alpha in v1.7-v1.8)."""


class ReadyFalseEviction(Scenario):
    """See the module docstring."""

    name: ClassVar[str] = "ready-false-eviction"
    summary: ClassVar[str] = ("the kubelet reports Ready=False and keeps posting: pods evicted after the "
                              "pod-eviction timeout from the transition (buggy) or by not-ready taints and "
                              "tolerations (fixed); no markAllPodsNotReady on this path")
    upstream: ClassVar[tuple[str, ...]] = ("seed 001 (v1.7 node controller, Ready=False)",
                                           "taint-based eviction GA 1.18")
    bugs: ClassVar[tuple[str, ...]] = ("legacy-pod-eviction",)
    profile: ClassVar[str] = "1.7"
    shape: ClassVar[MeshShape] = MeshShape(nodes=3, clock_rate=90.0)
    deadline: ClassVar[float] = 600.0

    async def run(self, ctx: ScenarioContext) -> Verdict:
        """Set up, inject, observe (see the module docstring)."""
        victim = ctx.rng.choice(["node-1", "node-2", "node-3"])
        ctx.focus("nodes", victim)
        ctx.focus("pods", "default/fast", "default/slow")
        tol = [{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": FAST_TOLERATION}
               for key in NOT_READY_KEYS]
        await ctx.client.create(PODS, pod("fast", node_selector={HOSTNAME: victim}, tolerations=tol),
                                namespace="default")
        await ctx.client.create(PODS, pod("slow", node_selector={HOSTNAME: victim}), namespace="default")

        async def both_ready() -> bool:
            pods = [await ctx.pod(n) for n in ("fast", "slow")]
            return all(oracles.is_running(p) and (oracles.condition(p, "Ready") or {}).get("status") == "True"
                       for p in pods)

        if not await ctx.until(both_ready, within=30):
            raise ScenarioError("the pods never became ready")
        slack = SLACK_BASE + SLACK_WALL * ctx.clock.rate
        await ctx.set_condition(victim, "Ready", "False", reason="KubeletNotReady")
        ctx.mark(f"{victim} reports Ready=False", lane="kubelet")

        async def not_ready() -> dict[str, object] | None:
            c = oracles.condition(await ctx.node(victim), "Ready")
            return c if c and c.get("status") == "False" else None

        cond = await ctx.until(not_ready, within=30)
        if cond is None:
            return oracles.inconclusive(f"{victim} never posted Ready=False")
        t_false = parse_time(str(cond.get("lastTransitionTime")))

        async def deleted(name: str) -> float | None:
            for r in await ctx.records():
                if r.get("type") == "request" and r.get("verb") == "delete" \
                        and r.get("component") == "controller_manager" \
                        and str(r.get("key", "")).endswith(f"/pods/{name}") and int(r.get("code") or 0) < 300:
                    return float(r["time"])
            return None

        async def both_deleted() -> bool:
            return await deleted("slow") is not None and await deleted("fast") is not None

        await ctx.until(both_deleted, within=EVICTION_TIMEOUT + 4 * PERIOD + 30, poll=0.05)
        t_fast, t_slow = await deleted("fast"), await deleted("slow")
        records = await ctx.records()
        first_delete = min(t for t in (t_fast, t_slow, float("inf")) if t is not None)
        # A pod status write well before the evictions: markAllPodsNotReady (the eviction itself
        # writes the pod's status a moment before its DELETE).
        marks = sorted(float(r["time"]) for r in records
                       if r.get("type") == "request" and r.get("component") == "controller_manager"
                       and r.get("verb") in ("update", "patch") and int(r.get("code") or 0) < 300
                       and any(str(r.get("key", "")).endswith(f"/pods/{n}/status") for n in ("fast", "slow"))
                       and float(r["time"]) < first_delete - PERIOD)
        taint_writes = sorted(float(r["time"]) for r in records
                              if r.get("type") == "write" and r.get("resource") == "nodes" and r.get("key") == victim
                              and r.get("component") == "controller_manager" and float(r["time"]) > t_false)
        heartbeats = [float(r["time"]) for r in records
                      if r.get("type") == "request" and r.get("component") == "kubelet"
                      and r.get("key") == f"nodes/{victim}/status" and int(r.get("code") or 0) < 300
                      and float(r["time"]) > t_false + 1.0]
        node = await ctx.node(victim)
        ready = oracles.condition(node, "Ready") or {}
        taint = next((t for t in ((node or {}).get("spec") or {}).get("taints") or []
                      if t.get("key") in NOT_READY_KEYS and t.get("effect") == "NoExecute"), None)
        evidence = [f"{victim} Ready=False at t={t_false - ctx.t0:.1f}s (posted by its kubelet)",
                    f"status PATCHes of {victim} after it: {len(heartbeats)} (heartbeats went on); Ready is "
                    f"{ready.get('status')} at the end",
                    f"pod status writes by the controller-manager before the evictions (markAllPodsNotReady, "
                    f"which this path does not run): {len(marks)}"]
        for name, t in (("fast", t_fast), ("slow", t_slow)):
            if t is not None:
                ctx.mark(f"{name} deleted", lane="controller-manager", at=t)
                evidence.append(f"pod {name} deleted at t={t - ctx.t0:.1f}s ({t - t_false:.1f} s after Ready=False)")
            else:
                evidence.append(f"pod {name} was not deleted")
        if taint is not None:
            t_taint = parse_time(str(taint.get("timeAdded"))) if taint.get("timeAdded") else t_false
            ctx.mark(f"{taint.get('key')}:NoExecute", lane="controller-manager", at=t_taint)
            evidence.append(f"taint {taint.get('key')}:NoExecute added at t={t_taint - ctx.t0:.1f}s")
        if len(heartbeats) < 2 or ready.get("status") != "False":
            return oracles.inconclusive("the node did not stay on the Ready=False path (heartbeats stopped or "
                                        "its Ready changed)", evidence)
        if marks:
            return oracles.inconclusive("the controller marked pods not ready on a kubelet-posted Ready=False",
                                        evidence)
        if t_fast is None or t_slow is None:
            return oracles.inconclusive("not every pod was evicted in time", evidence)
        if taint is not None:
            # The taint-eviction controller counts a toleration from when it sees the taint: take
            # the write that carried it (the first at or after `timeAdded`, the controller's
            # decision in whole seconds) rather than `timeAdded` itself.
            t_added = parse_time(str(taint.get("timeAdded"))) if taint.get("timeAdded") else t_false
            t_taint = next((t for t in taint_writes if t >= t_added), t_added)
            if abs(t_fast - (t_taint + FAST_TOLERATION)) <= slack and \
                    abs(t_slow - (t_taint + DEFAULT_TOLERATION)) <= slack:
                return oracles.decide(
                    symptom=False, healthy=True, reproduced="", evidence=evidence,
                    prevented=(f"prevented: {victim} (Ready=False, heartbeats going on) was tainted "
                               f"{taint.get('key')}:NoExecute and each pod was evicted when its own toleration ran "
                               f"out: fast after {t_fast - t_taint:.0f} s, slow after {t_slow - t_taint:.0f} s"))
            return oracles.inconclusive("the node was tainted, but the evictions did not follow the tolerations",
                                        evidence)
        lo, hi = t_false + EVICTION_TIMEOUT - slack, t_false + EVICTION_TIMEOUT + 2 * PERIOD + slack
        # Both at the pod-eviction timeout, fast's 30 s toleration ignored. They come from one
        # eviction pass, one pod after the other: how far apart is load, not evidence.
        if lo <= t_fast <= hi and lo <= t_slow <= hi:
            return oracles.decide(
                symptom=True, healthy=False, prevented="", evidence=evidence,
                reproduced=(f"reproduced: no NoExecute taint; {victim} reported Ready=False with its heartbeats "
                            f"going on, its pods were marked not ready, and the pod evictor deleted both "
                            f"{t_fast - t_false:.0f} s after the transition (pod-eviction-timeout "
                            f"{EVICTION_TIMEOUT:.0f} s from readyTransitionTimestamp), ignoring fast's "
                            f"{FAST_TOLERATION} s toleration"))
        return oracles.inconclusive("pods were deleted without a taint, but not at the pod-eviction timeout", evidence)

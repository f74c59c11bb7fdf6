"""node-heartbeat-eviction: the seed 001 timeline (kubelet heartbeats, NotReady, pod eviction).

A node's kubelet stops posting (its machine is powered off). The node-lifecycle controller marks
the node's Ready condition Unknown once `--node-monitor-grace-period` has passed since the last
heartbeat it saw (checked every `--node-monitor-period`). Then:

* fixed (taint-based eviction, GA 1.18): the node gets `node.kubernetes.io/unreachable:NoExecute`
  and the taint-eviction controller deletes each pod when its toleration runs out: a pod
  tolerating the taint for 30 s goes 30 s after the taint, a pod with the admission default
  (300 s) five minutes after it;
* buggy (`legacy-pod-eviction`, the seed's v1.7 node controller): no taint; the zone's pod
  evictor deletes every pod of the node `--pod-eviction-timeout` (5 m) after the last heartbeat,
  whatever the pods tolerate (the seed's point: the timeout counts from the last probe, not from
  the moment the node was marked NotReady).

The oracle checks each step's time against the flags (grace 40 s, monitor period 5 s, the
heartbeat interval 10 s, eviction timeout 300 s, tolerations 30 s and 300 s), from timestamps
written into the objects and the history's DELETE requests (cluster time, not polling times).
Reproduced: both pods deleted together by the pod-eviction timeout with no NoExecute taint.
Prevented: taint, then each pod deleted when its own toleration expired. A step off its window
makes the run inconclusive, with the step named.

The window, read from the history first: the victim's kubelet wrote no heartbeat (Lease or Node
status) after the power-off, so the node really went silent; a heartbeat after it makes the run
inconclusive (with faults off the node never goes Unknown, which is inconclusive too).
"""

from __future__ import annotations

from typing import ClassVar

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import MeshShape, Scenario, ScenarioContext, ScenarioError, Verdict
from kubemesh.scenarios.workloads import HOSTNAME, pod
from kubemesh.services.machinery.clock import parse_time
from kubemesh.services.model.kinds import PODS
from kubemesh.services.model.profiles import ALPHA_NOT_READY, ALPHA_UNREACHABLE
from kubemesh.services.model.wellknown import TAINT_NOT_READY, TAINT_UNREACHABLE

GRACE = 40.0
PERIOD = 5.0
HEARTBEAT = 10.0
EVICTION_TIMEOUT = 300.0
FAST_TOLERATION = 30
DEFAULT_TOLERATION = 300
SLACK_BASE = 2.0
"""Cluster seconds of slack for second-precision timestamps ..."""
SLACK_WALL = 0.05
"""... plus this many wall seconds of loop and network latency, scaled by the clock rate."""

UNREACHABLE = TAINT_UNREACHABLE
UNREACHABLE_KEYS = (TAINT_UNREACHABLE, ALPHA_UNREACHABLE)
"""The unreachable taint under either name: v1.7's taint-based eviction (fixed mode of the 1.7
profile) uses the alpha key `node.alpha.kubernetes.io/unreachable`, later releases the GA one."""


class NodeHeartbeatEviction(Scenario):
    """See the module docstring."""

    name: ClassVar[str] = "node-heartbeat-eviction"
    summary: ClassVar[str] = ("heartbeats stop: NotReady/Unknown after the grace period, then eviction by NoExecute "
                              "taints and tolerations (fixed) or by the pod-eviction timeout (buggy)")
    upstream: ClassVar[tuple[str, ...]] = ("seed 001 (v1.7 node controller)", "taint-based eviction GA 1.18",
                                           "kubernetes#115840")
    bugs: ClassVar[tuple[str, ...]] = ("legacy-pod-eviction",)
    profile: ClassVar[str] = "1.7"
    shape: ClassVar[MeshShape] = MeshShape(
        nodes=3, clock_rate=90.0,
        extra_args={"controller_manager": ["--node-monitor-grace-period", f"{GRACE:g}s",
                                           "--node-monitor-period", f"{PERIOD:g}s",
                                           "--pod-eviction-timeout", f"{EVICTION_TIMEOUT:g}s"]})
    deadline: ClassVar[float] = 600.0

    async def run(self, ctx: ScenarioContext) -> Verdict:
        """Set up, inject, observe (see the module docstring)."""
        victim = ctx.rng.choice(["node-1", "node-2", "node-3"])
        ctx.focus("nodes", victim)
        ctx.focus("pods", "default/fast", "default/slow")
        tol = [{"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": FAST_TOLERATION}
               for key in (*UNREACHABLE_KEYS, TAINT_NOT_READY, ALPHA_NOT_READY)]
        await ctx.client.create(PODS, pod("fast", node_selector={HOSTNAME: victim}, tolerations=tol),
                                namespace="default")
        await ctx.client.create(PODS, pod("slow", node_selector={HOSTNAME: victim}), namespace="default")
        ctx.say(f"created fast (tolerates unreachable for {FAST_TOLERATION} s) and slow (admission default "
                f"{DEFAULT_TOLERATION} s) on {victim}")

        async def both_running() -> bool:
            pods = [await ctx.pod(n) for n in ("fast", "slow")]
            return all(oracles.is_running(p) for p in pods)

        if not await ctx.until(both_running, within=30):
            raise ScenarioError("the pods never ran")
        slack = SLACK_BASE + SLACK_WALL * ctx.clock.rate
        t_off = ctx.now()
        await ctx.power_off(victim)
        t_done = ctx.now()  # a heartbeat may land while the power-off request is served, not after it
        ctx.mark(f"{victim} heartbeats stop", lane="scenario")

        async def unknown() -> dict[str, object] | None:
            c = oracles.condition(await ctx.node(victim), "Ready")
            return c if c and c.get("status") == "Unknown" else None

        cond = await ctx.until(unknown, within=GRACE + PERIOD + 30)
        late = oracles.heartbeats(await ctx.records(), victim, after=t_done + slack)
        if cond is None and not late:
            return oracles.inconclusive(f"{victim} never became Ready=Unknown within {GRACE + PERIOD + 30:.0f} s")
        if late or cond is None:
            return oracles.inconclusive(
                f"{victim}'s kubelet kept writing heartbeats after the power-off ({len(late)}, the first at "
                f"t={float(late[0]['time']) - ctx.t0:.1f}s): the race window was not opened")
        t_unknown = parse_time(str(cond.get("lastTransitionTime")))
        ctx.mark(f"{victim} Ready=Unknown", lane="controller-manager", at=t_unknown)
        before = oracles.heartbeats(await ctx.records(), victim, before=t_done + slack)
        last = f"t={float(before[-1]['time']) - ctx.t0:.1f}s" if before else "none in the history"
        evidence = [f"heartbeats stopped at t={t_off - ctx.t0:.1f}s (the history's last heartbeat of {victim}: "
                    f"{last}; none after it)",
                    f"Ready=Unknown at t={t_unknown - ctx.t0:.1f}s ({t_unknown - t_off:.1f} s after; "
                    f"window [{GRACE - HEARTBEAT:.0f}, {GRACE + 2 * PERIOD:.0f}] s from grace {GRACE:.0f} s, heartbeat "
                    f"{HEARTBEAT:.0f} s, monitor period {PERIOD:.0f} s: a renewal is noticed at the next pass)"]
        conditions = ((await ctx.node(victim)) or {}).get("status", {}).get("conditions") or []
        others = [f"{c.get('type')}={c.get('status')}" for c in conditions if c.get("type") != "Ready"]
        evidence.append(f"{victim}'s other conditions with Ready=Unknown: {', '.join(others)} (the node controller "
                        "sets every condition the kubelet posts Unknown; under 1.7 OutOfDisk is one of them)")
        if not (t_off + GRACE - HEARTBEAT - slack <= t_unknown <= t_off + GRACE + 2 * PERIOD + slack):
            return oracles.inconclusive(f"Ready=Unknown came {t_unknown - t_off:.1f} s after the heartbeats stopped, "
                                        "outside the window the flags allow", evidence)

        async def deleted(name: str) -> float | None:
            for r in await ctx.records():
                if r.get("type") == "request" and r.get("verb") == "delete" \
                        and r.get("component") == "controller_manager" \
                        and str(r.get("key", "")).endswith(f"/pods/{name}") and int(r.get("code") or 0) < 300:
                    return float(r["time"])
            return None

        until_all = t_off + EVICTION_TIMEOUT + PERIOD + 30 - ctx.now()

        async def both_deleted() -> bool:
            # Both, not just slow: the legacy evictor deletes a node's pods one request after the
            # other, so fast's DELETE may come a moment after slow's.
            return await deleted("slow") is not None and await deleted("fast") is not None

        await ctx.until(both_deleted, within=max(until_all, DEFAULT_TOLERATION + 60), poll=0.05)
        t_fast, t_slow = await deleted("fast"), await deleted("slow")
        node = await ctx.node(victim)
        taint = next((t for t in ((node or {}).get("spec") or {}).get("taints") or []
                      if t.get("key") in UNREACHABLE_KEYS and t.get("effect") == "NoExecute"), None)
        tainted = any(r.get("type") == "write" and r.get("resource") == "nodes" and r.get("key") == victim
                      and r.get("component") == "controller_manager" for r in await ctx.records()) and taint is not None
        for name, t in (("fast", t_fast), ("slow", t_slow)):
            if t is not None:
                ctx.mark(f"{name} deleted", lane="controller-manager", at=t)
                evidence.append(f"pod {name} deleted at t={t - ctx.t0:.1f}s ({t - t_off:.1f} s after heartbeats "
                                f"stopped, {t - t_unknown:.1f} s after Unknown)")
            else:
                evidence.append(f"pod {name} was not deleted")
        if taint is not None:
            t_taint = parse_time(str(taint.get("timeAdded"))) if taint.get("timeAdded") else t_unknown
            ctx.mark(f"{taint.get('key')}:NoExecute", lane="controller-manager", at=t_taint)
            evidence.append(f"taint {taint.get('key')}:NoExecute added at t={t_taint - ctx.t0:.1f}s")
        if t_fast is None or t_slow is None:
            return oracles.inconclusive("not every pod was evicted in time", evidence)
        if tainted and taint is not None:
            # The taint-eviction controller counts a toleration from when it sees the taint: from the
            # controller's node write that carried it (the first at or after `timeAdded`, which
            # is the decision in whole seconds; on a loaded machine the write lags it).
            t_added = parse_time(str(taint.get("timeAdded"))) if taint.get("timeAdded") else t_unknown
            t_taint = next((float(r["time"]) for r in await ctx.records()
                            if r.get("type") == "write" and r.get("resource") == "nodes" and r.get("key") == victim
                            and r.get("component") == "controller_manager" and float(r["time"]) >= t_added),
                           t_added)
            ok_fast = abs(t_fast - (t_taint + FAST_TOLERATION)) <= slack
            ok_slow = abs(t_slow - (t_taint + DEFAULT_TOLERATION)) <= slack
            if ok_fast and ok_slow:
                return oracles.decide(
                    symptom=False, healthy=True, reproduced="", evidence=evidence,
                    prevented=(f"prevented: {victim} was tainted {taint.get('key')}:NoExecute at "
                               f"t={t_taint - ctx.t0:.0f}s "
                               f"and each pod was evicted when its own toleration ran out: fast after "
                               f"{t_fast - t_taint:.0f} s, slow after {t_slow - t_taint:.0f} s"))
            return oracles.inconclusive("the node was tainted, but the evictions did not follow the tolerations "
                                        f"(fast {t_fast - t_taint:.1f} s, slow {t_slow - t_taint:.1f} s after the "
                                        "taint)", evidence)
        lo, hi = t_off - HEARTBEAT + EVICTION_TIMEOUT - slack, t_off + EVICTION_TIMEOUT + 2 * PERIOD + slack
        together = abs(t_fast - t_slow) <= slack
        if lo <= t_fast <= hi and lo <= t_slow <= hi and together:
            return oracles.decide(
                symptom=True, healthy=False, prevented="", evidence=evidence,
                reproduced=(f"reproduced: no NoExecute taint; the node controller's pod evictor deleted both pods "
                            f"{t_fast - t_off:.0f} s after {victim}'s heartbeats stopped (pod-eviction-timeout "
                            f"{EVICTION_TIMEOUT:.0f} s from the last heartbeat), ignoring fast's {FAST_TOLERATION} s "
                            "toleration"))
        return oracles.inconclusive("pods were deleted without a taint, but not at the pod-eviction timeout", evidence)

"""pre-lease-heartbeat: before node leases, a delayed NodeStatus update is a missed heartbeat.

The seed 001 (v1.7.9) describes the heartbeat as the kubelet's status update: every
`--node-status-update-frequency` (10 s) the kubelet PATCHes `nodes/{name}/status`, and the node
controller marks the node Unknown when `--node-monitor-grace-period` (40 s) passes without a new
`lastHeartbeatTime`; 5 minutes later (`--pod-eviction-timeout`) its pods are deleted. The
status update is the largest and slowest request a kubelet makes (the seed: GETs and PATCHes of
Node objects are most of an apiserver's and etcd's load in a large cluster), so a loaded control
plane delays it, and a delayed status is indistinguishable from a dead node. Node leases
(KEP-589, beta and on in 1.14) split the heartbeat off: a small Lease renewed every 10 s.

The scenario runs the 1.7 profile (no leases, pods evicted by the zone's pod evictor) and
delays every status update of one node at the apiserver (chaos `request.stall` on
`nodes/{node}/status` from the kubelets, each held 60 s and then reset): the kubelet is alive,
its pod keeps running, and its status requests keep arriving (the fault's injections count them).

* buggy (`no-node-lease`, v1.7): nothing else carries a heartbeat; the node goes Ready=Unknown
  after the grace period, its pod is marked not ready (`markAllPodsNotReady`: the controller
  turned Ready from True itself), and after the pod-eviction timeout the evictor deletes the pod
  of a healthy node, but not the node's DaemonSet pod (the evictor skips pods a DaemonSet owns:
  it would only come back);
* fixed (the 1.7 profile with the lease backported, `-no-node-lease`): the kubelet renews its
  Lease through the delay; the controller takes each renewal as a heartbeat and the node stays
  Ready with its pod.

The window is open when the fault held the node's status requests (injections counted, no
status PATCH of the node succeeded for longer than the grace period); otherwise the run is
inconclusive. Evidence comes from the history (status PATCHes, Lease renewals, the pod's DELETE)
and the node's and pod's conditions.
"""

from __future__ import annotations

from typing import ClassVar

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import MeshShape, Scenario, ScenarioContext, ScenarioError, Verdict
from kubemesh.scenarios.workloads import HOSTNAME, pod
from kubemesh.services.machinery.clock import parse_time
from kubemesh.services.model.kinds import DAEMONSETS, PODS

GRACE = 40.0
"""The 1.7 profile's `--node-monitor-grace-period`."""
PERIOD = 5.0
EVICTION_TIMEOUT = 300.0
"""The 1.7 profile's `--pod-eviction-timeout`."""
HELD = 60.0
"""Cluster seconds the apiserver holds each status request before resetting it."""
WINDOW = EVICTION_TIMEOUT + 2 * PERIOD + 30.0
"""How long the status updates are delayed: past the pod-eviction timeout, with room."""
AGENT = {"app": "agent"}
DAEMONSET = {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "agent", "namespace": "default"},
             "spec": {"selector": {"matchLabels": AGENT},
                      "template": {"metadata": {"labels": AGENT},
                                   "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]}}}}


class PreLeaseHeartbeat(Scenario):
    """See the module docstring."""

    name: ClassVar[str] = "pre-lease-heartbeat"
    summary: ClassVar[str] = ("delayed node status updates: a false NotReady and the eviction of a healthy node's "
                              "pods without leases (buggy), nothing with the lease as heartbeat (fixed)")
    upstream: ClassVar[tuple[str, ...]] = ("seed 001 (v1.7 heartbeats)", "KEP-589 node leases",
                                           "kubernetes#69241")
    bugs: ClassVar[tuple[str, ...]] = ("no-node-lease",)
    profile: ClassVar[str] = "1.7"
    needs_chaos: ClassVar[bool] = True
    shape: ClassVar[MeshShape] = MeshShape(nodes=3, clock_rate=60.0)
    deadline: ClassVar[float] = WINDOW + 120.0

    async def run(self, ctx: ScenarioContext) -> Verdict:
        """Set up, inject, observe (see the module docstring)."""
        victim = ctx.rng.choice(["node-1", "node-2", "node-3"])
        ctx.focus("nodes", victim)
        ctx.focus("pods", "default/web")
        await ctx.client.create(PODS, pod("web", node_selector={HOSTNAME: victim}), namespace="default")
        await ctx.client.create(DAEMONSETS, DAEMONSET, namespace="default")
        agent = ""

        async def running() -> bool:
            nonlocal agent
            mine = [p for p in await ctx.pods(label_selector="app=agent") if oracles.node_name(p) == victim]
            agent = str(mine[0]["metadata"]["name"]) if mine else ""
            return oracles.is_running(await ctx.pod("web")) and bool(mine) and oracles.is_running(mine[0])

        if not await ctx.until(running, within=30):
            raise ScenarioError("the pod and the DaemonSet's pod never ran")
        ctx.focus("pods", f"default/{agent}")
        fault = f"slow-status-{victim}"
        t_s = ctx.now()
        ctx.open_window(f"{victim} status updates held", lane=f"node/{victim}")
        await ctx.add_fault({"name": fault, "type": "request.stall", "target": {"component": "kubelet"},
                             "match": {"resources": ["nodes/status"], "name": victim},
                             "params": {"timeout": HELD, "then": "reset"}, "duration": None})
        ctx.mark(f"{victim}'s status updates delayed", lane="scenario")
        seen_unknown: float | None = None
        pod_not_ready: float | None = None

        async def evicted_or_done() -> bool:
            nonlocal seen_unknown, pod_not_ready
            ready = oracles.condition(await ctx.node(victim), "Ready")
            if seen_unknown is None and ready is not None and ready.get("status") != "True":
                seen_unknown = parse_time(str(ready.get("lastTransitionTime")))
            p = await ctx.pod("web")
            pr = oracles.condition(p, "Ready")
            if pod_not_ready is None and pr is not None and pr.get("status") == "False" and p is not None \
                    and not oracles.is_terminating(p):
                pod_not_ready = ctx.now()
            return await self._deleted(ctx) is not None

        await ctx.until(evicted_or_done, within=WINDOW, poll=0.05)
        t_end = ctx.now()
        status = await ctx.fault_status(fault) or {}
        injected = int((status.get("status") or {}).get("injected") or 0)
        await ctx.remove_fault(fault)
        ctx.close_window(f"{victim} status updates held")
        records = await ctx.records()
        patches = [float(r["time"]) for r in records
                   if r.get("type") == "request" and r.get("component") == "kubelet"
                   and r.get("key") == f"nodes/{victim}/status" and int(r.get("code") or 0) < 300
                   and t_s + 1.0 < float(r["time"]) <= t_end]
        renewals = [float(r["time"]) for r in records
                    if r.get("type") == "request" and r.get("component") == "kubelet"
                    and r.get("verb") in ("update", "patch") and str(r.get("key", "")).endswith(f"leases/{victim}")
                    and int(r.get("code") or 0) < 300 and t_s < float(r["time"]) <= t_end]
        t_deleted = await self._deleted(ctx)
        t_agent = await self._deleted(ctx, agent)
        evidence = [f"status updates of {victim} delayed from t={t_s - ctx.t0:.1f}s to t={t_end - ctx.t0:.1f}s; "
                    f"the apiserver held {injected} of the kubelet's status requests",
                    f"status PATCHes of {victim} that succeeded meanwhile: {len(patches)}",
                    f"Lease renewals of {victim} meanwhile: {len(renewals)}"]
        if seen_unknown is not None:
            ctx.mark(f"{victim} Ready=Unknown", lane="controller-manager", at=seen_unknown)
            evidence.append(f"{victim} Ready=Unknown at t={seen_unknown - ctx.t0:.1f}s "
                            f"({seen_unknown - t_s:.1f} s into the delay)")
        if pod_not_ready is not None:
            evidence.append(f"pod web marked not ready (markAllPodsNotReady) by t={pod_not_ready - ctx.t0:.1f}s")
        evidence.append(f"DaemonSet pod {agent} on {victim}: "
                        + ("kept" if t_agent is None else f"deleted at t={t_agent - ctx.t0:.1f}s"))
        if t_deleted is not None:
            ctx.mark("web deleted by the pod evictor", lane="controller-manager", at=t_deleted)
            evidence.append(f"pod web deleted by the controller-manager at t={t_deleted - ctx.t0:.1f}s "
                            f"({t_deleted - t_s:.1f} s into the delay)")
        if injected < 2 or patches:
            return oracles.inconclusive("the race window was not opened: the node's status updates were not held "
                                        f"(held {injected}, succeeded {len(patches)})", evidence)
        if t_agent is not None:
            return oracles.inconclusive(f"the node controller deleted the DaemonSet pod {agent}", evidence)
        if seen_unknown is not None and t_deleted is not None and not renewals:
            return oracles.decide(
                symptom=True, healthy=False, prevented="", evidence=evidence,
                reproduced=(f"reproduced: with the status update as the only heartbeat, {victim} went Ready=Unknown "
                            f"{seen_unknown - t_s:.0f} s after its status updates were delayed, and the pod evictor "
                            f"deleted the running pod web {t_deleted - t_s:.0f} s in, though the kubelet was alive "
                            f"and kept posting ({injected} status requests held); the DaemonSet pod {agent} was "
                            "spared, as the evictor spares DaemonSet pods"))
        if seen_unknown is None and t_deleted is None and len(renewals) >= 2 and t_end - t_s >= GRACE + 2 * PERIOD:
            return oracles.decide(
                symptom=False, healthy=True, reproduced="", evidence=evidence,
                prevented=(f"prevented: {victim}'s status updates were delayed for {t_end - t_s:.0f} s "
                           f"({injected} requests held), but its kubelet renewed its Lease {len(renewals)} times; "
                           "the node stayed Ready and pod web kept running"))
        return oracles.inconclusive("neither a false NotReady with eviction nor a node kept Ready by its Lease",
                                    evidence)

    @staticmethod
    async def _deleted(ctx: ScenarioContext, name: str = "web") -> float | None:
        """When the node controller's DELETE of pod `name` succeeded (history), None if it did not."""
        for r in await ctx.records():
            if r.get("type") == "request" and r.get("verb") == "delete" and r.get("component") == "controller_manager" \
                    and str(r.get("key", "")).endswith(f"/pods/{name}") and int(r.get("code") or 0) < 300:
                return float(r["time"])
        return None

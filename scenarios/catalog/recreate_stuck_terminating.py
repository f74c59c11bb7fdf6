"""recreate-stuck-terminating: seed 003 (kubernetes#112452; KEP-2268 non-graceful node shutdown).

A node is powered off (not deleted). After the grace period and the 300 s unreachable
toleration its pods are deleted, but nobody can finish the deletion: they stay Terminating,
phase Running, forever. The ReplicaSet counts only active pods, so a replacement runs elsewhere.
Then the Deployment (strategy Recreate) is updated: the Recreate rollout scales the old
ReplicaSets to zero and waits until no old pod is running, and `oldPodsRunning` counts the
Terminating pod on the dead node, so the new ReplicaSet is never scaled up (seed 003's
`oldPodsRunning` short circuit). That part is the same in both modes.

The operator's way out since 1.28 (KEP-2268) is the `node.kubernetes.io/out-of-service` taint
on the shut-down node: PodGC force-deletes the Terminating pods there, the rollout goes on.

* fixed: after the taint the new pod is created and runs (prevented);
* buggy (`no-out-of-service-gc`, before KEP-2268): the taint changes nothing, the rollout stays
  stuck (reproduced). Then the seed's remedy of that time: the operator force-deletes the pod
  (`kubectl delete pod --grace-period=0 --force`), and the new pod must run within 60 cluster
  seconds (else inconclusive: the stuck rollout was not the pod's doing).

Oracle: liveness, a pod of the new ReplicaSet is Running within 60 cluster seconds of the taint.
The window, read from the history: the victim's kubelet wrote no heartbeat after the power-off
until the verdict (the node was really down, so nothing but PodGC could finish the deletion);
and "prevented" needs the history's DELETE of the old pod by the controller-manager (PodGC)
after the taint. With faults off the pod is never deleted and the run is inconclusive.

Reusable on an attached mesh: its objects live in `ctx.namespace`, and the node comes back
(powered on, the out-of-service taint removed) at cleanup, so the same stack can run it again.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import MeshShape, Scenario, ScenarioContext, ScenarioError, Verdict
from kubemesh.scenarios.workloads import deployment
from kubemesh.services.machinery.client import ConflictError, NotFoundError
from kubemesh.services.model.kinds import DEPLOYMENTS, NODES, PODS, Obj
from kubemesh.services.model.wellknown import TAINT_OUT_OF_SERVICE

OUT_OF_SERVICE = TAINT_OUT_OF_SERVICE
STUCK_FOR = 40.0
"""Cluster seconds the updated Deployment is watched before the taint (it must stay stuck)."""
RESOLVE_WITHIN = 60.0
"""Cluster seconds the new pod has to run in after the taint (PodGC runs every 20 s)."""


def _active(pods: list[Obj]) -> list[Obj]:
    return [p for p in pods if not oracles.is_terminating(p)]


async def remove_out_of_service_taint(ctx: ScenarioContext, node: str) -> None:
    """Take the out-of-service taint off `node` again (an undo of the scenario).

    With optimistic concurrency: the node lifecycle controller edits the same node's taints.
    """
    for _ in range(10):
        obj = await ctx.node(node)
        if obj is None:
            return
        taints = list((obj.get("spec") or {}).get("taints") or [])
        kept = [t for t in taints if t.get("key") != OUT_OF_SERVICE]
        if kept == taints:
            return
        obj.setdefault("spec", {})["taints"] = kept
        try:
            await ctx.client.update(NODES, obj)
        except (ConflictError, NotFoundError):
            continue
        ctx.say(f"removed the {OUT_OF_SERVICE} taint from {node}")
        return
    raise ScenarioError(f"could not remove the {OUT_OF_SERVICE} taint from {node} (conflicts)")


class RecreateStuckTerminating(Scenario):
    """See the module docstring."""

    name: ClassVar[str] = "recreate-stuck-terminating"
    summary: ClassVar[str] = ("node powered off: pods stay Terminating; an updated Recreate Deployment never creates "
                              "its new pod; the out-of-service taint resolves it (fixed) or not (buggy)")
    upstream: ClassVar[tuple[str, ...]] = ("seed 003", "kubernetes#112452", "KEP-2268 (GA 1.28)")
    bugs: ClassVar[tuple[str, ...]] = ("no-out-of-service-gc",)
    profile: ClassVar[str] = "1.15"
    shape: ClassVar[MeshShape] = MeshShape(nodes=3, clock_rate=120.0)
    deadline: ClassVar[float] = 900.0
    reusable: ClassVar[bool] = True

    async def run(self, ctx: ScenarioContext) -> Verdict:
        """Set up, inject, observe (see the module docstring)."""
        ns = ctx.namespace
        await ctx.client.create(DEPLOYMENTS, deployment("cron", strategy="Recreate", env={"VERSION": "1"},
                                                         namespace=ns), namespace=ns)
        ctx.say(f"created Deployment {ns}/cron (Recreate, 1 replica)")

        async def running_pod() -> Obj | None:
            for p in await ctx.pods(namespace=ns, label_selector="app=cron"):
                if oracles.is_running(p) and not oracles.is_terminating(p):
                    return p
            return None

        first = await ctx.until(running_pod, within=120)
        if first is None:
            raise ScenarioError("the Deployment's pod never ran")
        victim = oracles.node_name(first)
        old_name = first["metadata"]["name"]
        ctx.focus("nodes", victim)
        ctx.focus("pods", f"{ns}/{old_name}")
        ctx.focus("deployments", f"{ns}/cron")
        ctx.say(f"pod {old_name} Running on {victim}")
        await ctx.power_off(victim)
        off_at = ctx.now()  # a heartbeat may land while the power-off request is served, not after it
        ctx.mark(f"{victim} powered off", lane="scenario")

        async def terminating() -> Obj | None:
            p = await ctx.pod(old_name, ns)
            return p if oracles.is_terminating(p) else None

        stuck = await ctx.until(terminating, within=50 + 10 + 300 + 40, poll=0.05)
        if stuck is None:
            alive = oracles.heartbeats_after_power_off(await ctx.records(), victim, off_at=off_at,
                                                       clock_rate=ctx.clock.rate)
            if alive:
                return oracles.inconclusive(
                    f"{victim}'s kubelet kept writing heartbeats ({len(alive)} after the power-off) and {old_name} "
                    "was never deleted: the node did not go down, the race window was not opened", ctx.lines)
            raise ScenarioError(f"{old_name} was never deleted (Terminating) after {victim} went down")
        terminating_at = ctx.elapsed()
        ctx.mark(f"{old_name} Terminating", lane="controller-manager")
        ctx.say(f"{old_name} is Terminating (phase {stuck.get('status', {}).get('phase')}) on the dead node")

        async def replacement() -> Obj | None:
            for p in await ctx.pods(namespace=ns, label_selector="app=cron"):
                if p["metadata"]["name"] != old_name and oracles.is_running(p) and not oracles.is_terminating(p):
                    return p
            return None

        rep = await ctx.until(replacement, within=120)
        if rep is None:
            raise ScenarioError("the ReplicaSet did not replace the Terminating pod")
        ctx.focus("pods", f"{ns}/{rep['metadata']['name']}")
        ctx.say(f"replacement {rep['metadata']['name']} Running on {oracles.node_name(rep)}")
        before = {p["metadata"]["name"] for p in await ctx.pods(namespace=ns, label_selector="app=cron")}
        patch: dict[str, Any] = {"spec": {"template": {"spec": {"containers": [
            {"name": "main", "image": "registry.k8s.io/pause:3.9", "env": [{"name": "VERSION", "value": "2"}]}]}}}}
        await ctx.client.patch(DEPLOYMENTS, "cron", patch, namespace=ns, patch_type="strategic")
        ctx.mark("update Deployment cron", lane="scenario")
        ctx.say("updated the Deployment's template (VERSION=2): Recreate must stop the old pods first")

        async def new_pod() -> Obj | None:
            for p in await ctx.pods(namespace=ns, label_selector="app=cron"):
                if p["metadata"]["name"] not in before:
                    return p
            return None

        early = await ctx.until(new_pod, within=STUCK_FOR)
        evidence = [f"{old_name} Terminating on powered-off {victim} since t={terminating_at:.0f}s"]
        if early is not None:
            return oracles.inconclusive(f"the new pod {early['metadata']['name']} was created although "
                                        f"{old_name} was still Terminating (the Recreate rollout did not wait)",
                                        evidence)
        old = await ctx.pod(old_name, ns)
        if old is None:
            return oracles.inconclusive(f"{old_name} went away by itself before the taint", evidence)
        evidence.append(f"no new pod {STUCK_FOR:.0f} s after the update: the Recreate rollout waits for {old_name} "
                        f"(Terminating, phase {(old.get('status') or {}).get('phase')})")
        node = await ctx.node(victim)
        if node is None:
            raise ScenarioError(f"{victim} disappeared")
        taints = list((node.get("spec") or {}).get("taints") or [])
        taints.append({"key": OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"})
        await ctx.client.patch(NODES, victim, {"spec": {"taints": taints}})
        ctx.defer(f"untaint {victim}", lambda: remove_out_of_service_taint(ctx, victim))
        tainted_at = ctx.now()
        ctx.mark(f"taint {victim} out-of-service", lane="scenario")
        ctx.open_window(f"{victim} out-of-service", lane=f"node/{victim}")
        ctx.say(f"tainted {victim} {OUT_OF_SERVICE}=nodeshutdown:NoExecute")

        async def new_running() -> Obj | None:
            p = await new_pod()
            return p if p is not None and oracles.is_running(p) else None

        live = await oracles.eventually(ctx, "a pod of the new ReplicaSet Running", new_running,
                                        within=RESOLVE_WITHIN)
        old = await ctx.pod(old_name, ns)
        records = await ctx.records()
        alive = oracles.heartbeats_after_power_off(records, victim, off_at=off_at, clock_rate=ctx.clock.rate)
        if alive:
            return oracles.inconclusive(
                f"{victim}'s kubelet wrote heartbeats after the power-off ({len(alive)}, the first at "
                f"t={float(alive[0]['time']) - ctx.t0:.1f}s): the node was not down, the race window was not opened",
                evidence)
        gc = [r for r in oracles.select(records, type="request", component="controller_manager", verb="delete",
                                        after=tainted_at)
              if str(r.get("key", "")).endswith(f"/pods/{old_name}") and int(r.get("code") or 0) < 300]
        evidence.append(f"{victim}: no heartbeat in the history after the power-off at t={off_at - ctx.t0:.1f}s")
        evidence.append(f"DELETE of {old_name} by the controller-manager after the taint: "
                        + (f"t={float(gc[0]['time']) - ctx.t0:.1f}s" if gc else "none"))
        if live.held and live.at is not None:
            ctx.focus("pods", f"{ns}/{live.value['metadata']['name']}")
            ctx.mark(f"{live.value['metadata']['name']} Running", lane="kubelet")
            return oracles.decide(
                symptom=False, healthy=old is None and bool(gc), reproduced="", evidence=evidence,
                inconclusive="a new pod runs, but the old pod is still there",
                prevented=(f"prevented: after the out-of-service taint PodGC force-deleted {old_name} and the new "
                           f"pod {live.value['metadata']['name']} was Running {live.at - tainted_at:.0f} s of "
                           f"cluster time later on {oracles.node_name(live.value)}"))
        stuck_now = old is not None and oracles.is_terminating(old)
        if not stuck_now:
            return oracles.decide(symptom=False, healthy=False, prevented="", reproduced="", evidence=evidence,
                                  inconclusive=f"{old_name} went away, but no new pod ran")
        # The seed's remedy before KEP-2268: the operator force-deletes the pod record
        # (`kubectl delete pod --grace-period=0 --force`); the rollout must then go on.
        await ctx.client.delete(PODS, old_name, namespace=ns, grace_period_seconds=0)
        forced_at = ctx.now()
        ctx.mark(f"force DELETE {old_name} (the seed's remedy)", lane="scenario")
        ctx.say(f"remedy: force-deleted {old_name} (--grace-period=0 --force)")
        remedied = await oracles.eventually(ctx, "a pod of the new ReplicaSet Running after the force delete",
                                            new_running, within=RESOLVE_WITHIN)
        if not (remedied.held and remedied.at is not None):
            return oracles.inconclusive(f"{old_name} stayed Terminating after the out-of-service taint, but the "
                                        "seed's remedy (force delete) did not unstick the rollout either", evidence)
        evidence.append(f"remedy: after the force delete of {old_name} the new pod "
                        f"{remedied.value['metadata']['name']} was Running {remedied.at - forced_at:.0f} s later")
        return oracles.decide(
            symptom=True, healthy=False, prevented="", evidence=evidence,
            reproduced=(f"reproduced: Deployment {ns}/cron never created its new pod; {old_name} stayed "
                        f"Terminating on powered-off {victim} {RESOLVE_WITHIN:.0f} s after the out-of-service taint "
                        "(PodGC does not force-delete it), so Recreate's oldPodsRunning stays true; the seed's "
                        f"remedy, a force delete, let the new pod run {remedied.at - forced_at:.0f} s later"))

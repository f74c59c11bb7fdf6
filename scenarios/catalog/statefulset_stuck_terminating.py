"""statefulset-stuck-terminating: seed 003's StatefulSet case, and its other remedy, `kubectl delete node`.

The same outage as recreate-stuck-terminating: a node is powered off, not deleted. After the
grace period and the 300 s unreachable toleration the StatefulSet's pod `db-0` on it is deleted,
but nobody can finish the deletion: it stays Terminating. A StatefulSet pod has an identity, so
the controller cannot create the replacement `db-0` while the old one exists under that name
(the seed: "statefulset is affected the same way"). db-0 is down for as long as the node is.

* fixed (KEP-2268, 1.28): the operator taints the node `node.kubernetes.io/out-of-service`;
  PodGC force-deletes db-0 and the controller creates it again on a live node (prevented);
* buggy (`no-out-of-service-gc`, before KEP-2268): the taint changes nothing (reproduced), and
  the seed's remedy of the time is then applied: `kubectl delete node`. PodGC deletes the pods
  bound to a node that no longer exists, and db-0 must come back (else inconclusive).

Oracle: liveness, a db-0 with a new uid is Running within 60 cluster seconds of the taint (and,
in buggy mode, within 120 of the node's deletion: PodGC's next orphan pass, 20 s apart in 1.15). The
window, read from the history: the victim's kubelet wrote no heartbeat after the power-off; and
"prevented" needs the controller-manager's DELETE of the old db-0 after the taint. With faults
off db-0 is never deleted and the run is inconclusive.

Not reusable on an attached mesh: buggy mode deletes a Node.
"""

from __future__ import annotations

from typing import ClassVar

from kubemesh.scenarios import oracles
from kubemesh.scenarios.catalog.recreate_stuck_terminating import OUT_OF_SERVICE, STUCK_FOR
from kubemesh.scenarios.framework import MeshShape, Scenario, ScenarioContext, ScenarioError, Verdict
from kubemesh.services.model.kinds import NODES, STATEFULSETS, Obj

RESOLVE_WITHIN = 60.0
"""Cluster seconds db-0 has to come back in after the taint (PodGC runs every 20 s)."""
REMEDY_WITHIN = 120.0
"""Cluster seconds db-0 has to come back in after `kubectl delete node` (PodGC passes every 20 s; no
orphan quarantine before 1.17, 40 s after)."""


def statefulset(name: str, *, namespace: str) -> Obj:
    """A StatefulSet of one pause container."""
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": 1, "serviceName": name, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]}}}}


class StatefulSetStuckTerminating(Scenario):
    """See the module docstring."""

    name: ClassVar[str] = "statefulset-stuck-terminating"
    summary: ClassVar[str] = ("node powered off: the StatefulSet's db-0 stays Terminating and is never recreated; "
                              "the out-of-service taint resolves it (fixed), or only `kubectl delete node` (buggy)")
    upstream: ClassVar[tuple[str, ...]] = ("seed 003", "KEP-2268 (GA 1.28)")
    bugs: ClassVar[tuple[str, ...]] = ("no-out-of-service-gc",)
    profile: ClassVar[str] = "1.15"
    shape: ClassVar[MeshShape] = MeshShape(nodes=3, clock_rate=120.0)
    deadline: ClassVar[float] = 1000.0

    async def run(self, ctx: ScenarioContext) -> Verdict:
        """Set up, inject, observe (see the module docstring)."""
        ns = ctx.namespace
        await ctx.client.create(STATEFULSETS, statefulset("db", namespace=ns), namespace=ns)
        ctx.say(f"created StatefulSet {ns}/db (1 replica)")

        async def db0() -> Obj | None:
            p = await ctx.pod("db-0", ns)
            return p if oracles.is_running(p) and not oracles.is_terminating(p) else None

        first = await ctx.until(db0, within=120)
        if first is None:
            raise ScenarioError("db-0 never ran")
        victim, old_uid = oracles.node_name(first), str(first["metadata"]["uid"])
        ctx.focus("nodes", victim)
        ctx.focus("pods", f"{ns}/db-0")
        ctx.say(f"db-0 Running on {victim} (uid {old_uid[:8]})")
        await ctx.power_off(victim)
        off_at = ctx.now()
        ctx.mark(f"{victim} powered off", lane="scenario")

        async def old_terminating() -> Obj | None:
            p = await ctx.pod("db-0", ns)
            return p if p is not None and p["metadata"]["uid"] == old_uid and oracles.is_terminating(p) else None

        stuck = await ctx.until(old_terminating, within=50 + 10 + 300 + 40, poll=0.05)
        if stuck is None:
            alive = oracles.heartbeats_after_power_off(await ctx.records(), victim, off_at=off_at,
                                                       clock_rate=ctx.clock.rate)
            if alive:
                return oracles.inconclusive(
                    f"{victim}'s kubelet kept writing heartbeats ({len(alive)} after the power-off) and db-0 was "
                    "never deleted: the node did not go down, the race window was not opened", ctx.lines)
            raise ScenarioError(f"db-0 was never deleted (Terminating) after {victim} went down")
        ctx.mark("db-0 Terminating", lane="controller-manager")

        async def replaced() -> Obj | None:
            p = await ctx.pod("db-0", ns)
            return p if p is not None and p["metadata"]["uid"] != old_uid and oracles.is_running(p) else None

        early = await ctx.until(replaced, within=STUCK_FOR)
        evidence = [f"db-0 (uid {old_uid[:8]}) Terminating on powered-off {victim}"]
        if early is not None:
            return oracles.inconclusive("db-0 came back although the old one could not have finished terminating",
                                        evidence)
        evidence.append(f"no new db-0 {STUCK_FOR:.0f} s later: the old one holds the name")
        node = await ctx.node(victim)
        if node is None:
            raise ScenarioError(f"{victim} disappeared")
        taints = [*((node.get("spec") or {}).get("taints") or []),
                  {"key": OUT_OF_SERVICE, "value": "nodeshutdown", "effect": "NoExecute"}]
        await ctx.client.patch(NODES, victim, {"spec": {"taints": taints}})
        tainted_at = ctx.now()
        ctx.mark(f"taint {victim} out-of-service", lane="scenario")
        live = await oracles.eventually(ctx, "db-0 back and Running", replaced, within=RESOLVE_WITHIN)
        records = await ctx.records()
        alive = oracles.heartbeats_after_power_off(records, victim, off_at=off_at, clock_rate=ctx.clock.rate)
        if alive:
            return oracles.inconclusive(
                f"{victim}'s kubelet wrote heartbeats after the power-off ({len(alive)}): the node was not down, "
                "the race window was not opened", evidence)
        evidence.append(f"{victim}: no heartbeat in the history after the power-off")
        if live.held and live.at is not None:
            gc = [r for r in oracles.select(records, type="request", component="controller_manager", verb="delete",
                                            after=tainted_at)
                  if str(r.get("key", "")).endswith("/pods/db-0") and int(r.get("code") or 0) < 300]
            evidence.append("DELETE of the old db-0 by the controller-manager after the taint: "
                            + (f"t={float(gc[0]['time']) - ctx.t0:.1f}s" if gc else "none"))
            return oracles.decide(
                symptom=False, healthy=bool(gc), reproduced="", evidence=evidence,
                inconclusive="db-0 came back, but not through the controller-manager's delete after the taint",
                prevented=(f"prevented: after the out-of-service taint PodGC force-deleted the old db-0 and the "
                           f"StatefulSet's new db-0 was Running {live.at - tainted_at:.0f} s later on "
                           f"{oracles.node_name(live.value)}"))
        if await old_terminating() is None:
            return oracles.inconclusive("the old db-0 went away after the taint, but db-0 did not come back",
                                        evidence)
        evidence.append(f"{RESOLVE_WITHIN:.0f} s after the out-of-service taint the old db-0 is still Terminating")
        # The seed's other remedy of the time: delete the Node; PodGC removes its orphaned pods.
        await ctx.client.delete(NODES, victim)
        deleted_at = ctx.now()
        ctx.mark(f"kubectl delete node {victim} (the seed's remedy)", lane="scenario")
        ctx.say(f"remedy: deleted node {victim}")
        remedied = await oracles.eventually(ctx, "db-0 back after the node's deletion", replaced,
                                            within=REMEDY_WITHIN)
        if not (remedied.held and remedied.at is not None):
            return oracles.inconclusive("db-0 stayed down after the out-of-service taint, but the seed's remedy "
                                        "(kubectl delete node) did not bring it back either", evidence)
        evidence.append(f"remedy: {remedied.at - deleted_at:.0f} s after the node's deletion db-0 was Running on "
                        f"{oracles.node_name(remedied.value)}")
        return oracles.decide(
            symptom=True, healthy=False, prevented="", evidence=evidence,
            reproduced=(f"reproduced: the StatefulSet's db-0 stayed Terminating on powered-off {victim} "
                        f"{RESOLVE_WITHIN:.0f} s after the out-of-service taint (PodGC does not force-delete it), so "
                        f"its replacement could not be created; the seed's remedy, kubectl delete node, brought db-0 "
                        f"back {remedied.at - deleted_at:.0f} s later"))

"""force-delete-zombie: a force delete on an unreachable node breaks at-most-one.

`kubectl delete pod --force --grace-period=0` removes the pod from the API without the kubelet's
confirmation ("... can leave those processes running until the node detects the deletion ...
multiple processes running on different machines using the same identification", kubectl
docs). Here the node `db-0` runs on stops answering (powered off; its machine behaves as frozen
or partitioned, so the container survives), the pod is replaced by one of the same name on
another node while the old container still runs on the unreachable node: two copies of db-0 run
at once (the kubelet admin's zombie mode keeps the old container running through the outage;
when the node comes back its kubelet reconciles and stops it).

There is no bug switch; the modes are the two ways an operator can react:

* buggy: force delete (grace 0) of db-0, then create the replacement: two copies (reproduced);
* fixed: graceful delete only; the replacement (same name) can only be created once the node
  came back and its kubelet confirmed the old container's end: never two copies (prevented).

Oracle: safety, never two running copies of default/db-0 (the API's pod, and any container the
kubelets still run for a db-0 that is gone from the API), checked from the kubelets' admin
view from the replacement's creation until 60 cluster seconds after the node came back.
The window, read from the history before either verdict: the node's kubelet wrote no heartbeat
while it was meant to be unreachable (with faults off it does, and the run is inconclusive).
"""

from __future__ import annotations

from typing import Any, ClassVar

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import MeshShape, Scenario, ScenarioContext, ScenarioError, Verdict
from kubemesh.scenarios.workloads import HOSTNAME, pod
from kubemesh.services.machinery.client import AlreadyExistsError, ConflictError
from kubemesh.services.model.kinds import PODS, Obj
from kubemesh.services.model.wellknown import LABEL_HOSTNAME

OBSERVE = 60.0


class ForceDeleteZombie(Scenario):
    """See the module docstring."""

    name: ClassVar[str] = "force-delete-zombie"
    summary: ClassVar[str] = ("a force-deleted pod on an unreachable node whose node comes back: two copies run at "
                              "once (force delete) or never (graceful delete)")
    upstream: ClassVar[tuple[str, ...]] = ("kubectl delete --force docs", "kubernetes#72226", "KEP-2268")
    bugs: ClassVar[tuple[str, ...]] = ()
    profile: ClassVar[str] = "1.15"
    shape: ClassVar[MeshShape] = MeshShape(nodes=3, clock_rate=60.0)
    deadline: ClassVar[float] = 400.0

    async def copies(self, ctx: ScenarioContext, nodes: list[str]) -> list[str]:
        """Where a container of db-0 runs: `node (uid, api|zombie)` per running copy."""
        out: list[str] = []
        for n in nodes:
            try:
                doc: Any = await ctx.node_op(n, "", method="GET")
            except ScenarioError:
                continue
            for key, p in ((doc or {}).get("pods") or {}).items():
                if key == "default/db-0" and p.get("running"):
                    out.append(f"{n} (uid {str(p.get('uid'))[:8]})")
            for uid, z in ((doc or {}).get("zombies") or {}).items():
                if z.get("pod") == "default/db-0" and z.get("running"):
                    out.append(f"{n} (uid {uid[:8]}, gone from the API)")
        return out

    async def run(self, ctx: ScenarioContext) -> Verdict:
        """Set up, inject, observe (see the module docstring)."""
        nodes = ["node-1", "node-2", "node-3"]
        victim = ctx.rng.choice(nodes)
        ctx.focus("nodes", victim)
        ctx.focus("pods", "default/db-0")
        await ctx.client.create(PODS, pod("db-0", labels={"app": "db"}, node_selector={HOSTNAME: victim}),
                                namespace="default")

        async def running() -> Obj | None:
            p = await ctx.pod("db-0")
            return p if oracles.is_running(p) and not oracles.is_terminating(p) else None

        if await ctx.until(running, within=60) is None:
            raise ScenarioError(f"db-0 never ran on {victim}")
        ctx.say(f"db-0 Running on {victim}")
        await ctx.node_op(victim, "zombie", {"enabled": True})
        await ctx.power_off(victim)
        ctx.mark(f"{victim} unreachable", lane="scenario")
        force = ctx.mode == "buggy"
        t_del = t_back = ctx.now()
        await ctx.client.delete(PODS, "db-0", namespace="default", grace_period_seconds=0 if force else None)
        ctx.mark("force DELETE db-0" if force else "DELETE db-0 (graceful)", lane="scenario", at=t_del)
        ctx.say("deleted db-0 with --force --grace-period=0" if force else "deleted db-0 gracefully")
        replacement = pod("db-0", labels={"app": "db"})
        # The operator replaces the pod away from the dead node. Left to itself the scheduler
        # may still pick it: the node is not NotReady until the grace period passes, and a
        # replacement stuck on the powered-off node could never run twice.
        replacement["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": LABEL_HOSTNAME, "operator": "NotIn", "values": [victim]}]}]}}}
        created = False
        came_back = False
        violation: list[str] = []
        end = ctx.now() + 40 + OBSERVE + 120
        power_on_at = ctx.now() + 40
        while ctx.now() < end:
            if not created:
                try:
                    await ctx.client.create(PODS, replacement, namespace="default")
                    created = True
                    ctx.mark("replacement db-0 created", lane="scenario")
                    ctx.say("created the replacement db-0")
                except (AlreadyExistsError, ConflictError):
                    pass
            if not came_back and ctx.now() >= power_on_at:
                t_back = ctx.now()  # the kubelet's first heartbeats after the power-on come after this
                await ctx.power_on(victim)
                # The partition heals: the kubelet reconciles again and stops what the API no longer has.
                await ctx.node_op(victim, "zombie", {"enabled": False})
                ctx.mark(f"{victim} back", lane="scenario")
                came_back = True
                end = min(end, ctx.now() + OBSERVE)
            if came_back or created:
                found = await self.copies(ctx, nodes)
                if len(found) > 1 and not violation:
                    violation = found
                    ctx.mark("two copies of db-0 running", lane="scenario")
                    ctx.say("two copies of db-0 run: " + "; ".join(found))
            if violation and came_back:
                break
            await ctx.sleep(1.0)
        final = await self.copies(ctx, nodes)
        evidence = [f"node {victim} unreachable from t={t_del - ctx.t0:.1f}s, back 40 s later",
                    f"copies at the end: {'; '.join(final) or 'none'}"]
        if not created:
            return oracles.inconclusive("the replacement db-0 could never be created", evidence)
        slack = 2.0 + 0.1 * ctx.clock.rate  # a heartbeat in flight at the power-off
        alive = oracles.heartbeats(await ctx.records(), victim, after=t_del + slack, before=t_back)
        if alive:
            return oracles.inconclusive(
                f"{victim}'s kubelet wrote {len(alive)} heartbeat(s) while it was meant to be unreachable: the node "
                "was never cut off, the race window was not opened", evidence)
        if violation:
            return oracles.decide(
                symptom=True, healthy=False, prevented="", evidence=evidence,
                reproduced=(f"reproduced: at-most-one violated, two copies of default/db-0 ran at once: "
                            f"{'; '.join(violation)} (the force delete did not wait for {victim}'s kubelet)"))
        one = len(final) == 1
        return oracles.decide(
            symptom=False, healthy=one and came_back, reproduced="", evidence=evidence,
            inconclusive="no second copy was seen, but db-0 is not running exactly once at the end",
            prevented=(f"prevented: the graceful delete kept db-0 Terminating until {victim} came back and its "
                       "kubelet stopped the container; the replacement started only then, never two copies"))

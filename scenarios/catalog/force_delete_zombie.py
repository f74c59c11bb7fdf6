"""force-delete-zombie: a force delete while the node is partitioned breaks at-most-one.

`kubectl delete pod --force --grace-period=0` removes the pod from the API without the kubelet's
confirmation ("... can leave those processes running until the node detects the deletion ...
multiple processes running on different machines using the same identification", kubectl
docs). Here the node db-0 runs on is cut off the apiserver by a network partition (chaos
`node.partition`: the machine and its containers run on, its kubelet reaches nothing), the pod
is replaced by one of the same name on another node, and the partition heals 40 cluster seconds
later.

This is an operator hazard, not a code bug: there is no bug switch, and the modes are the two
ways an operator can react.

* buggy: force delete (grace 0) of db-0, then create the replacement: outcome `hazard`;
* fixed: graceful delete only; the replacement (same name) can only be created once the node
  is back and its kubelet confirmed the old container's end: `prevented`.

Oracle, from what the API and the history show (never the kubelet's memory):

* window: the `node.partition` fault was injected (its record in the history) and db-0 was
  deleted while it held; otherwise inconclusive (with faults off the kubelet stops the
  container at once, and no second copy can run);
* hazard: when the partition healed, the node reported that it had still been running the old
  db-0: a `Killing` event ("Stopping container main", source host the node, involvedObject the
  old uid) written after the replacement had started on another node. Both copies ran from
  the replacement's start until that event;
* prevented: the old db-0 left the API (its kubelet's final DELETE, in the history) before the
  replacement was created, and no node reported killing the old uid after the replacement started.
"""

from __future__ import annotations

from typing import ClassVar

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import (
    MeshShape,
    Mode,
    Outcome,
    Scenario,
    ScenarioContext,
    ScenarioError,
    Verdict,
    Window,
)
from kubemesh.scenarios.records import select
from kubemesh.scenarios.workloads import HOSTNAME, pod
from kubemesh.services.machinery.client import AlreadyExistsError, ConflictError
from kubemesh.services.machinery.clock import parse_time
from kubemesh.services.model.kinds import PODS, Obj
from kubemesh.services.model.wellknown import LABEL_HOSTNAME

PARTITION = 40.0
"""Cluster seconds the node stays cut off."""
OBSERVE = 60.0
"""Cluster seconds after the heal given to the node's report and to the replacement."""


class ForceDeleteZombie(Scenario):
    """See the module docstring."""

    name: ClassVar[str] = "force-delete-zombie"
    summary: ClassVar[str] = ("an operator hazard: a pod force-deleted while its node is partitioned runs on there "
                              "while its replacement runs elsewhere (force delete) or never (graceful delete)")
    upstream: ClassVar[tuple[str, ...]] = ("kubectl delete --force docs", "kubernetes#72226", "KEP-2268")
    bugs: ClassVar[tuple[str, ...]] = ()
    profile: ClassVar[str] = "1.15"
    expected: ClassVar[dict[Mode, Outcome]] = {"buggy": "hazard", "fixed": "prevented"}
    needs_chaos: ClassVar[bool] = True
    shape: ClassVar[MeshShape] = MeshShape(nodes=3, clock_rate=60.0)
    deadline: ClassVar[float] = 400.0

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

        first = await ctx.until(running, within=60)
        if first is None:
            raise ScenarioError(f"db-0 never ran on {victim}")
        old_uid = str(first["metadata"]["uid"])
        ctx.say(f"db-0 Running on {victim} (uid {old_uid[:8]})")
        fault = f"scenario-partition-{victim}"
        t_cut = ctx.now()
        await ctx.add_fault({"name": fault, "type": "node.partition", "target": {"node": victim}, "duration": None})
        ctx.mark(f"{victim} partitioned", lane="scenario", at=t_cut)
        force = ctx.mode == "buggy"
        t_del = ctx.now()
        await ctx.client.delete(PODS, "db-0", namespace="default", grace_period_seconds=0 if force else None)
        ctx.mark("force DELETE db-0" if force else "DELETE db-0 (graceful)", lane="scenario", at=t_del)
        ctx.say("deleted db-0 with --force --grace-period=0" if force else "deleted db-0 gracefully")
        replacement = pod("db-0", labels={"app": "db"})
        # The operator replaces the pod away from the unreachable node. Left to itself the
        # scheduler may still pick it: the node is not NotReady until the grace period passes.
        replacement["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": LABEL_HOSTNAME, "operator": "NotIn", "values": [victim]}]}]}}}
        created_at: float | None = None
        healed_at: float | None = None
        new: Obj | None = None
        end = t_cut + PARTITION + OBSERVE
        while ctx.now() < end:
            if created_at is None:
                try:
                    await ctx.client.create(PODS, replacement, namespace="default")
                    created_at = ctx.now()
                    ctx.mark("replacement db-0 created", lane="scenario", at=created_at)
                    ctx.say("created the replacement db-0")
                except (AlreadyExistsError, ConflictError):
                    pass
            if healed_at is None and ctx.now() >= t_cut + PARTITION:
                await ctx.remove_fault(fault)
                healed_at = ctx.now()
                ctx.mark(f"{victim} partition healed", lane="scenario", at=healed_at)
            if healed_at is not None and created_at is not None:
                new = await ctx.pod("db-0")
                reported = await self._kills(ctx, old_uid)
                if oracles.is_running(new) and (reported or not force):
                    break
            await ctx.sleep(1.0)
        return await self._judge(ctx, victim=victim, old_uid=old_uid, t_del=t_del, created_at=created_at,
                                 healed_at=healed_at)

    async def _kills(self, ctx: ScenarioContext, uid: str) -> list[Obj]:
        """The `Killing` events some node wrote about the old db-0 (its uid)."""
        return [e for e in await ctx.events_about("db-0", reason="Killing")
                if (e.get("involvedObject") or {}).get("uid") == uid]

    async def _judge(self, ctx: ScenarioContext, *, victim: str, old_uid: str, t_del: float,
                     created_at: float | None, healed_at: float | None) -> Verdict:
        records = await ctx.records()
        injected = [r for r in select(records, type="fault") if r.get("faultType") == "node.partition"
                    and r.get("op") == "inject" and r.get("outcome") == "ok"]
        ended = [r for r in select(records, type="fault") if r.get("faultType") == "node.partition"
                 and r.get("op") in ("recover", "end", "delete")]
        evidence = [f"node.partition of {victim}: "
                    + (f"injected at t={float(injected[0]['time']) - ctx.t0:.1f}s" if injected else "never injected")
                    + (f", healed at t={float(ended[0]['time']) - ctx.t0:.1f}s" if ended else ""),
                    f"db-0 (uid {old_uid[:8]}) deleted at t={t_del - ctx.t0:.1f}s"]
        gone = [r for r in select(records, type="write", resource="pods", event="DELETED", key="default/db-0")
                if float(r["time"]) >= t_del]
        if gone:
            evidence.append(f"old db-0 left the API at t={float(gone[0]['time']) - ctx.t0:.1f}s "
                            f"(written by {gone[0].get('component')})")
        new = await ctx.pod("db-0")
        new_uid = str(((new or {}).get("metadata") or {}).get("uid") or "")
        started = oracles.started_at(new) if new_uid and new_uid != old_uid else None
        if new_uid and new_uid != old_uid:
            evidence.append(f"replacement db-0 (uid {new_uid[:8]}) on {oracles.node_name(new) or '-'}, created at "
                            f"t={(created_at or 0) - ctx.t0:.1f}s, running since "
                            + (f"t={started - ctx.t0:.1f}s" if started is not None else "-"))
        kills = await self._kills(ctx, old_uid)
        for e in kills:
            evidence.append(f"{(e.get('source') or {}).get('host')} reported Killing of the old db-0 at "
                            f"{e.get('firstTimestamp')}: {e.get('message')}")
        if not injected or healed_at is None:
            return oracles.inconclusive(f"the window did not open: {victim} was never partitioned by the chaos "
                                        "front door while db-0 was deleted", evidence)
        if created_at is None or started is None:
            return oracles.inconclusive("the replacement db-0 never ran", evidence)
        kill_times = [parse_time(str(e.get("firstTimestamp"))) for e in kills
                      if (e.get("source") or {}).get("host") == victim and e.get("firstTimestamp")]
        late = [t for t in kill_times if t >= started]
        if late:
            ctx.mark("two copies of db-0 running", lane="scenario", at=started)
            ctx.windows.append(Window(start=started, end=late[0], lane="scenario",
                                      label=f"two copies of db-0 ({victim} and {oracles.node_name(new)})"))
            return Verdict(outcome="hazard", evidence=tuple(evidence), summary=(
                f"hazard (an operator action, not a code bug): at-most-one violated, two copies of default/db-0 "
                f"ran at once for {late[0] - started:.0f} s: the replacement on {oracles.node_name(new)} from "
                f"t={started - ctx.t0:.1f}s, and the old one (uid {old_uid[:8]}) on the partitioned {victim}, "
                f"which reported stopping it only when the partition healed (t={late[0] - ctx.t0:.1f}s); the force "
                "delete did not wait for its kubelet"))
        old_gone_first = bool(gone) and float(gone[0]["time"]) <= created_at
        return oracles.decide(
            symptom=False, healthy=old_gone_first, reproduced="", evidence=evidence,
            inconclusive="no second copy was reported, but the old db-0 did not leave the API before the "
                         "replacement was created",
            prevented=(f"prevented: the graceful delete kept db-0 Terminating until {victim} was back and its kubelet "
                       "stopped the container and deleted the pod; the replacement was created only then, never "
                       "two copies"))

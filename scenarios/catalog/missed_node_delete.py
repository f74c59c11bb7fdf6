"""missed-node-delete: kubernetes#56261, fixed by #56622 (cherry-picked to 1.8 as #58038); #94437.

"In case scheduler misses a node delete event, or cleaning the node from scheduler cache errors
out, node will stay in scheduler cache forever" (#56261). The scheduler's node lister (the
informer's store) has applied the DELETE, but its own cache, fed by the informer's handler,
never heard of it. In 1.8 the inter-pod affinity pass looked up each existing pod's node in
the lister, got NotFound for the pods on the gone node, and every pod with (anti-)affinity
failed with `node "X" not found; retrying`. Once those pods are gone the node is an empty,
healthy-looking NodeInfo, and the scheduler binds new pods to a node that no longer exists
(#94437's symptom; the apiserver, like upstream's, accepts a binding to any node name), where
they never run and, having affinity-relevant labels, make the next affinity pods fail again.
#56622: on a NotFound error for a node, GET the node from the apiserver and, if it answers 404,
remove it from the cache.

Both modes run the 1.8 affinity pass (`ghost-node-affinity-error`, the scenario's `era_bugs`),
because that is what surfaces the lister miss as the error the fix reacts to; buggy mode adds
`keep-missed-node` (before #56622), fixed mode is 1.8 with #58038. Note what the fix does and
does not do in that release: it drops the Node from the cache, but while the gone node's pods
are cached the NodeInfo stays behind as a ghost that the 1.8 pass still iterates (#50813, fixed
in 1.9 by #53647), so the fixed scheduler places the probe only once PodGC has deleted the
orphan; from then on nothing of the gone node is left.

The fault is `component.dropHandler` on the scheduler's node informer: the store applies the
victim's DELETE, the handler never runs (a `watch.drop` would not do: the node informer's store
would keep the node too, and a relist would eventually repair both).

Workload (3 nodes): web-0 (app=web) on the victim, a busy pod on each live node so that the
empty victim scores best; the victim powered off (web-0 cannot terminate) and its Node deleted
just after a PodGC pass (1.8's PodGC deletes web-0 at its next pass, 20 s later) with the
scheduler's handler dropping the DELETE; the fault is then removed (the damage stays).
Probe-1 (app=web, required anti-affinity app=web) is created; once it is bound anywhere, or
`BOUND_WITHIN` has passed, probe-2 (the same) shows whether the failure persists.

Oracle (three-valued; cluster time):
* the race was set up only if the history shows the fault armed on the scheduler (its `inject`
  record) and the victim's DELETE delivered to it, the scheduler confirmed the drop (its
  handler-drop counters, `/chaos/handler-drops`), and probe-1 failed with `node "<victim>" not found`
  (otherwise inconclusive: with faults off nothing is dropped, the window is not opened);
* symptom: a probe bound to the victim (a deleted node), or probe-1 not bound within
  `BOUND_WITHIN` s of the deletion while the scheduler never re-read the node;
* healthy: the scheduler GET the victim (404), both probes bound to live nodes, none to it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import MeshShape, Scenario, ScenarioContext, ScenarioError, Verdict
from kubemesh.scenarios.workloads import HOSTNAME, pod
from kubemesh.services.model.kinds import NODES, PODS

NODE_NAMES = ("node-1", "node-2", "node-3")
BOUND_WITHIN = 150.0
"""Cluster seconds after the node deletion within which probe-1 must be bound to a live node: the
fix re-reads the node at the first failure, and PodGC deletes the orphan at its next pass (every
20 s; no quarantine in 1.8), which is when the 1.8 ghost lets go."""
SECOND_WITHIN = 30.0
"""Cluster seconds probe-2 has to be bound to a live node once probe-1 is bound."""


class MissedNodeDelete(Scenario):
    """See the module docstring."""

    name: ClassVar[str] = "missed-node-delete"
    summary: ClassVar[str] = ("the scheduler misses a node's DELETE; it keeps failing on the gone node (buggy) "
                              "or re-reads it and recovers (fixed)")
    upstream: ClassVar[tuple[str, ...]] = ("kubernetes#56261", "fixed by kubernetes#56622 (1.8: #58038)",
                                           "kubernetes#94437")
    bugs: ClassVar[tuple[str, ...]] = ("keep-missed-node",)
    profile: ClassVar[str] = "1.8"
    era_bugs: ClassVar[tuple[str, ...]] = ("ghost-node-affinity-error",)
    needs_chaos: ClassVar[bool] = True
    shape: ClassVar[MeshShape] = MeshShape(nodes=3, clock_rate=60.0)
    deadline: ClassVar[float] = 400.0

    async def run(self, ctx: ScenarioContext) -> Verdict:
        """Set up, inject, observe (see the module docstring)."""
        victim = ctx.rng.choice(NODE_NAMES)
        live = [n for n in NODE_NAMES if n != victim]
        ctx.focus("nodes", victim)
        ctx.focus("pods", "default/web-0", "default/probe-1", "default/probe-2")
        await self._stage(ctx, victim, live)

        fault = f"miss-{victim}-delete"
        await ctx.add_fault({"name": fault, "type": "component.dropHandler", "target": {"component": "scheduler"},
                             "match": {"resources": ["nodes"], "eventTypes": ["DELETED"], "name": victim},
                             "params": {"occurrence": 1}, "duration": None})
        status = await ctx.fault_status(fault)
        if status is not None and (status.get("status") or {}).get("phase") != "Active":
            raise ScenarioError(f"fault {fault} is not active: {status.get('status')}")
        # No fault at all (faults off): the workload goes on; the drop check below finds out.
        await ctx.power_off(victim)
        # 1.8's PodGC deletes web-0 at its first pass after the deletion (no quarantine before
        # v1.17): delete the node right after a pass, so that web-0 outlives it for one period.
        if await ctx.after_podgc_pass():
            ctx.say("a PodGC pass just ran: the node is deleted now, so web-0 outlives it for one PodGC period")
        await ctx.client.delete(NODES, victim)
        t_del = ctx.now()
        ctx.mark(f"DELETE node {victim}", lane="scenario", at=t_del)
        ctx.say(f"deleted Node {victim} (its machine is off: web-0 cannot terminate)")
        dropped = await ctx.until(lambda: self._dropped(ctx, fault), within=20, poll=0.02)
        if not dropped:
            return oracles.inconclusive(f"the scheduler's node handler never reported dropping the DELETE of {victim}"
                                        ": the race window was not opened", ctx.lines)
        seen = await ctx.wait_record(within=5, type="delivery", component="scheduler", resource="nodes",
                                     event="DELETED", key=victim)
        armed = oracles.fault_ops(await ctx.records(), fault, op="inject")
        if seen is None or not armed:
            missing = (f"no delivery of the DELETE of {victim} to the scheduler" if seen is None
                       else f"no inject record of {fault} (the drop was never armed on the scheduler)")
            return oracles.inconclusive(f"the history shows {missing}: the race window was not opened", ctx.lines)
        t_seen = float(seen["time"])
        ctx.mark(f"{victim} DELETE reaches scheduler; its handler drops it", lane="scheduler", at=t_seen)
        ctx.say(f"the scheduler's node informer applied the DELETE of {victim}; its handler dropped it ({dropped})")
        await ctx.remove_fault(fault)  # what was dropped stays dropped: nothing will repair the cache
        if await ctx.pod("web-0") is None:
            raise ScenarioError("web-0 is already gone; nothing on the missed node to trip over")

        await ctx.client.create(PODS, _probe("probe-1"), namespace="default")
        t_p1 = ctx.now()
        ctx.mark("create probe-1", lane="scenario")
        ctx.say("created probe-1 (app=web, required anti-affinity app=web)")
        not_found = f'node "{victim}" not found'

        async def failed_not_found() -> bool:
            return any(not_found in str(e.get("message")) for e in await ctx.events_about("probe-1"))

        first_fail = await oracles.eventually(ctx, "probe-1 fails with node not found", failed_not_found,
                                              within=15)
        p1 = await oracles.eventually(ctx, "probe-1 bound", lambda: _bound(ctx, "probe-1"),
                                      within=max(1.0, t_del + BOUND_WITHIN - ctx.now()))
        p2: oracles.Observation | None = None
        t_p2 = None
        if p1.held:
            ctx.mark(f"probe-1 bound to {p1.value}", lane="scheduler")
            ctx.say(f"probe-1 bound to {p1.value}")
            await ctx.client.create(PODS, _probe("probe-2"), namespace="default")
            t_p2 = ctx.now()
            ctx.mark("create probe-2", lane="scenario")
            ctx.say("created probe-2 (app=web, required anti-affinity app=web)")

            p2 = await oracles.eventually(ctx, "probe-2 bound", lambda: _bound(ctx, "probe-2"), within=SECOND_WITHIN)
            if p2.held:
                ctx.mark(f"probe-2 bound to {p2.value}", lane="scheduler")
                ctx.say(f"probe-2 bound to {p2.value}")

        return await self._verdict(ctx, victim=victim, live=live, t_del=t_del, t_seen=t_seen, t_p1=t_p1,
                                   t_p2=t_p2, first_fail=first_fail, p1=p1, p2=p2, not_found=not_found)

    async def _stage(self, ctx: ScenarioContext, victim: str, live: list[str]) -> None:
        """web-0 (app=web) on the victim; a busy pod on each live node (the empty victim scores best)."""
        await ctx.client.create(PODS, pod("web-0", labels={"app": "web"}, node_selector={HOSTNAME: victim}),
                                namespace="default")
        for n in live:
            await ctx.client.create(PODS, pod(f"busy-{n}", cpu="2", memory="8Gi", node_selector={HOSTNAME: n}),
                                    namespace="default")
        names = ["web-0", *(f"busy-{n}" for n in live)]

        async def running() -> bool:
            pods = [await ctx.pod(n) for n in names]
            return all(oracles.is_running(p) for p in pods)

        if not await ctx.until(running, within=30):
            raise ScenarioError(f"the stage never ran (web-0 on {victim}, busy pods on {', '.join(live)})")
        ctx.say(f"web-0 (app=web) Running on {victim}; busy-* (2 cpu, 8Gi) Running on {', '.join(live)}")

    async def _dropped(self, ctx: ScenarioContext, fault: str) -> str | None:
        """The scheduler's word that its node handler dropped the DELETE (None until it did)."""
        doc = await ctx.debug("scheduler", "/chaos/handler-drops")
        for d in (doc or {}).get("drops") or ():
            if d.get("id") == fault and d.get("dropped"):
                return ", ".join(str(k) for k in d.get("droppedKeys") or ()) or "dropped"
        return None

    async def _verdict(self, ctx: ScenarioContext, *, victim: str, live: list[str], t_del: float, t_seen: float,
                       t_p1: float, t_p2: float | None, first_fail: oracles.Observation, p1: oracles.Observation,
                       p2: oracles.Observation | None, not_found: str) -> Verdict:
        def t(x: float | None) -> str:
            return "n/a" if x is None else f"t={x - ctx.t0:.1f}s"

        records = await ctx.records()
        gets = [r for r in oracles.select(records, type="request", component="scheduler", verb="get", after=t_del)
                if str(r.get("path", "")).endswith(f"/nodes/{victim}")]
        rereads = [r for r in gets if r.get("code") == 404]
        if rereads:
            ctx.mark(f"scheduler GET {victim}: 404, drops it", lane="scheduler", at=float(rereads[0]["time"]))
        # When the first FailedScheduling event about probe-1 was stored (the poll saw it later).
        reported = [float(r["time"]) for r in oracles.select(records, type="write", component="scheduler",
                                                             resource="events", event="ADDED", after=t_p1)
                    if str(r.get("key", "")).startswith("default/probe-1.")]
        t_fail = min(reported) if reported else first_fail.at
        gc = oracles.first(records, type="delivery", component="scheduler", resource="pods", event="DELETED",
                           key="default/web-0")
        if gc is not None:
            ctx.mark("web-0 DELETE (PodGC) reaches scheduler", lane="scheduler", at=float(gc["time"]))
        fails1 = [e for e in await ctx.events_about("probe-1", reason="FailedScheduling")
                  if not_found in str(e.get("message"))]
        fails2 = [e for e in await ctx.events_about("probe-2", reason="FailedScheduling")
                  if not_found in str(e.get("message"))]
        count1 = sum(int(e.get("count") or 1) for e in fails1)
        count2 = sum(int(e.get("count") or 1) for e in fails2)
        node1 = str(p1.value) if p1.held else ""
        node2 = str(p2.value) if p2 is not None and p2.held else ""
        on_victim = [name for name, node in (("probe-1", node1), ("probe-2", node2)) if node == victim]
        exercised = first_fail.held
        live1, live2 = node1 in live, node2 in live
        cache = await ctx.debug("scheduler", "/debug/scheduler")
        cached = sorted(str(n.get("name")) for n in ((cache or {}).get("cache") or {}).get("nodes") or ())
        ghosts = list(((cache or {}).get("cache") or {}).get("ghosts") or ())

        evidence = [
            f"victim node: {victim}; DELETE at {t(t_del)}, delivered to the scheduler at {t(t_seen)}, where the "
            "node informer's store applied it and its handler dropped it (component.dropHandler)",
            f"probe-1 created at {t(t_p1)}; first `{not_found}` reported at {t(t_fail)}; "
            f"FailedScheduling with that error: {count1}",
            f"scheduler GETs of {victim} after the deletion: {len(gets)} ({len(rereads)} answered 404), first at "
            f"{t(float(gets[0]['time'])) if gets else 'n/a'}",
            f"web-0's DELETE (PodGC, orphan) reached the scheduler at {t(float(gc['time'])) if gc else 'n/a'}",
            f"probe-1: {'bound to ' + node1 + ' at ' + t(p1.at) if p1.held else 'not bound'}",
        ]
        if t_p2 is not None:
            placed2 = f"bound to {node2} at {t(p2.at if p2 else None)}" if node2 else \
                f"not bound within {SECOND_WITHIN:.0f} s"
            evidence.append(f"probe-2 created at {t(t_p2)}: {placed2}; FailedScheduling with `{not_found}`: {count2}")
        if cache is not None:
            evidence.append(f"scheduler cache at the end: nodes {cached}, ghosts {ghosts} "
                            f"({victim} {'still cached' if victim in cached else 'gone'})")

        if not exercised:
            return oracles.inconclusive(f"probe-1 never failed with `{not_found}`: the scheduler did not trip over "
                                        "the missed node, so the race was not set up", evidence)
        symptom = bool(on_victim) or (not p1.held and not rereads)
        healthy = live1 and live2 and bool(rereads) and not on_victim
        pending = (p1.at if p1.held and p1.at is not None else ctx.now()) - t_p1
        if on_victim:
            first_bad = on_victim[0]
            at = p1.at if first_bad == "probe-1" else (p2.at if p2 else None)
            reread = (f"although the scheduler re-read the node {len(rereads)} times" if rereads
                      else "the scheduler never re-read the node")
            holds = " that the scheduler's cache still holds" if victim in cached else ""
            reproduced = (
                f"reproduced: the scheduler's node handler missed the DELETE of {victim} ({t(t_seen)}); pod "
                f"default/probe-1 failed {count1} times with `{not_found}` for {pending:.0f} s of cluster time and "
                f"{reread}; then default/{first_bad} was bound at {t(at)} to {victim}, a node deleted "
                f"{(at or t_del) - t_del:.0f} s earlier{holds} (#94437)"
                + (f"; probe-2 then failed {count2} times with the same error" if count2 else ""))
        else:
            reproduced = (
                f"reproduced: pod default/probe-1 stayed Pending for {pending:.0f} s of cluster time (over "
                f"{BOUND_WITHIN:.0f} s after {victim}'s deletion), failing {count1} times with `{not_found}`; the "
                f"scheduler's node handler missed the DELETE ({t(t_seen)}) and the scheduler never re-read the node")
        after_gc = (", once PodGC had removed the orphan web-0 (the 1.8 ghost of #50813 held it until then)"
                    if gc is not None and p1.at is not None and float(gc["time"]) <= p1.at else "")
        prevented = (
            f"prevented: pod default/probe-1 failed with `{not_found}` (reported at {t(t_fail)}); the scheduler "
            f"re-read {victim} at {t(float(rereads[0]['time'])) if rereads else 'n/a'} (404) and dropped it from "
            f"its cache; probe-1 was bound to {node1} at {t(p1.at)}{after_gc}, and probe-2 to {node2} "
            f"{((p2.at if p2 and p2.at else 0.0) - (t_p2 or 0.0)):.1f} s after it was created")
        why = ("the scheduler re-read the node but the probes were not both bound to live nodes in time"
               if rereads else "no probe reached a deleted node, yet the scheduler never re-read it")
        return oracles.decide(symptom=symptom, healthy=healthy, reproduced=reproduced, prevented=prevented,
                              inconclusive=why, evidence=evidence)


def _probe(name: str) -> dict[str, Any]:
    return pod(name, labels={"app": "web"}, anti_affinity={"app": "web"})


async def _bound(ctx: ScenarioContext, name: str) -> str | None:
    return oracles.node_name(await ctx.pod(name)) or None

"""nominated-node-race: kubernetes#72124, fixed by #72259.

A high-priority pod P does not fit on the only node; preemption picks the node, the scheduler
patches `status.nominatedNodeName` and deletes the victims. Before #72259 the scheduler recorded
the nomination only when the pod update carrying it came back on its own watch; until then the
freed room looked free to every other pod. The chaos front door holds exactly that echo
(scheduler's pod watch, MODIFIED events of P with `status.nominatedNodeName` set: Sieve's
"before controller receive" pause) until P's binding is written, so the scheduler learns the
nomination only after the race window. A smaller pod S of the same priority (preemptionPolicy
Never) arrives once the victims are gone, while P backs off.

Oracle (60 cluster seconds): buggy, S is bound to the node and P stays Pending (reproduced);
fixed, S is kept off the node by P's in-memory nomination and P is bound there (prevented).

Then the seed's third consequence, once the hold is gone and P's nomination has reached the
scheduler: a small pod T (500m cpu, same priority, preemptionPolicy Never) is created. Buggy,
the node has 1900m free next to S (3900m allocatable), but the scheduler counts the stranded
nomination of P (3 cpu) as if P were there, so T is kept off a node it fits, while P cannot fit
either: both stay Pending (part of "reproduced"). Fixed, P is on the node and T fits beside it
(part of "prevented").
Safety in both modes: P and S (5 cpu) are never both bound to the 4-cpu node (inconclusive if
they are: the scheduler over-committed).

The window, read from the history before either verdict: the hold's `inject` record names the
event of P carrying the nomination (its resourceVersion), and the scheduler's first write of S
(its binding or its failed attempt) comes before that event's delivery to the scheduler. Only
then did the scheduler decide on S without having seen the nomination come back; otherwise
(no hold, as with faults off, or the echo delivered before S was considered) the run is
inconclusive: the race window was not opened.
"""

from __future__ import annotations

from typing import ClassVar

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import ScenarioContext, ScenarioError, Verdict
from kubemesh.scenarios.workloads import PreemptionRace, pod, preemption_victims
from kubemesh.services.model.kinds import PODS


class NominatedNodeRace(PreemptionRace):
    """See the module docstring."""

    name: ClassVar[str] = "nominated-node-race"
    summary: ClassVar[str] = ("the nomination is recorded only when its update comes back on the watch; a smaller "
                              "pod takes the room freed by preemption")
    upstream: ClassVar[tuple[str, ...]] = ("kubernetes#72124", "fixed by kubernetes#72259")
    bugs: ClassVar[tuple[str, ...]] = ("nominate-after-patch",)
    profile: ClassVar[str] = "1.13"
    also_fixed: ClassVar[tuple[str, ...]] = ("stale-update-unnominates",)
    """1.13 has kubernetes#74931 too: without its fix a stale update of p drops the nomination
    that kubernetes#72259 records, and s takes the node all the same (seen in fixed runs)."""

    async def run(self, ctx: ScenarioContext) -> Verdict:
        """Set up, inject, observe (see the module docstring)."""
        await preemption_victims(ctx)
        async with ctx.fault({"name": "hold-nomination-echo", "type": "watch.hold",
                              "target": {"component": "scheduler"},
                              "match": {"resources": ["pods"], "namespace": "default", "name": "p",
                                        "eventTypes": ["MODIFIED"], "fields": ["status.nominatedNodeName"]},
                              # The hold keeps per-object order, so once the nomination echo is held
                              # every later event of p is too, its binding included. Release them when
                              # p's binding is written: otherwise the scheduler's assumed p would expire
                              # (30 s TTL) for want of a confirmation, freeing its room for s in fixed
                              # mode too (that is another race, kubernetes#106361, not this one).
                              "trigger": {"action": "release", "on": "written", "component": "scheduler",
                                          "resources": ["pods"], "namespace": "default", "name": "p",
                                          "fields": ["spec.nodeName"]},
                              "duration": None}):
            ctx.open_window("hold p's nominatedNodeName echo to scheduler", lane="scheduler")
            await ctx.client.create(PODS, pod("p", cpu="3", priority_class="high"), namespace="default")
            ctx.mark("create p (high, 3 cpu)", lane="scenario")
            nominated = await ctx.wait_record(within=30, type="write", component="scheduler", resource="pods",
                                              key="default/p", event="MODIFIED")
            if nominated is None:
                raise ScenarioError("the scheduler never wrote p (no preemption)")

            async def victims_gone() -> bool:
                return await ctx.pod("v1") is None and await ctx.pod("v2") is None

            if not await ctx.until(victims_gone, within=30):
                raise ScenarioError("the victims were not preempted")
            gone = await ctx.wait_record(within=10, type="delivery", component="scheduler", resource="pods",
                                         key="default/v2", event="DELETED")
            p_now = await ctx.pod("p")
            nnn = ((p_now or {}).get("status") or {}).get("nominatedNodeName")
            ctx.say(f"victims preempted; p.status.nominatedNodeName={nnn}")
            if gone is not None:
                ctx.mark("victims' DELETEs reach scheduler", lane="scheduler", at=float(gone["time"]))
            await ctx.client.create(PODS, pod("s", cpu="2", priority_class="high", preemption_policy="Never"),
                                    namespace="default")
            ctx.mark("create s (high, 2 cpu)", lane="scenario")

            async def settled() -> tuple[str, str] | None:
                p, s = await ctx.pod("p"), await ctx.pod("s")
                pn, sn = oracles.node_name(p), oracles.node_name(s)
                return (pn, sn) if pn or sn else None

            first = await ctx.until(settled, within=self.observe)
            await ctx.sleep(self.observe / 2)
            p, s = await ctx.pod("p"), await ctx.pod("s")
            ctx.close_window("hold p's nominatedNodeName echo to scheduler")
        pn, sn = oracles.node_name(p), oracles.node_name(s)
        p_nnn = ((p or {}).get("status") or {}).get("nominatedNodeName")
        window = oracles.held_past(await ctx.records(), fault="hold-nomination-echo", key="default/p",
                                   component="scheduler", acted_on="default/s", t0=ctx.t0)
        evidence = [f"p: node {pn or '-'}, nominatedNodeName {p_nnn}",
                    f"s: node {sn or '-'}", f"first binding seen: {first}", *window.evidence]
        failures = await ctx.events_about("p", reason="FailedScheduling")
        if failures:
            evidence.append(f"p FailedScheduling: {failures[-1].get('message')}")
        if pn and pn == sn:
            # Safety: p (3 cpu) and s (2 cpu) never fit the 4-cpu node together. Both there
            # means the scheduler over-committed the node, which neither mode may do.
            return oracles.inconclusive(
                f"safety violated: p (3 cpu) and s (2 cpu) were both bound to {pn} (4 cpu): the scheduler "
                "over-committed the node, so this run shows neither the race nor its prevention", evidence)
        if not window.opened:
            return oracles.inconclusive(f"{window.why}: the race window was not opened", evidence)
        echo = "never" if window.delivered is None else f"at t={float(window.delivered['time']) - ctx.t0:.1f}s"
        if sn:
            ctx.mark(f"s bound to {sn}", lane="scheduler")
        if pn:
            ctx.mark(f"p bound to {pn}", lane="scheduler")
        symptom, healthy = bool(sn) and not pn, bool(pn) and not sn
        if not (symptom or healthy):
            return oracles.decide(symptom=False, healthy=False, evidence=evidence, reproduced="", prevented="")
        node = sn or pn
        t_node = await self._small_pod(ctx, stranded=symptom, evidence=evidence)
        if symptom and t_node:
            return oracles.inconclusive(f"s took {sn} while p's nomination was in flight, but the small pod t was "
                                        f"then bound to {t_node}: p's stranded nomination did not hold it off",
                                        evidence)
        if healthy and t_node != node:
            return oracles.inconclusive(f"p was bound to {pn} and s kept off, but the small pod t, which fits "
                                        f"beside p, was not bound there (node {t_node or '-'})", evidence)
        return oracles.decide(
            symptom=symptom, healthy=healthy, evidence=evidence,
            reproduced=(f"reproduced: pod default/s took {sn} while p's nomination to it was in flight (its update "
                        f"held on the scheduler's watch); the high-priority pod default/p stays Pending with "
                        f"nominatedNodeName={nnn} and the room it preempted for is gone; and the stranded "
                        f"nomination keeps the 500m pod t off {sn} although 1900m are free there"),
            prevented=(f"prevented: p was nominated in memory before the patch, so s was kept off {pn}; p was "
                       f"bound to {pn} although the update carrying its nomination reached the scheduler only "
                       f"{echo}, after the scheduler had decided on s; the 500m pod t fits beside p and was "
                       f"bound to {pn}"))

    async def _small_pod(self, ctx: ScenarioContext, *, stranded: bool, evidence: list[str]) -> str:
        """The seed's third consequence: create the 500m pod t and return the node it got ("" for none)."""
        if stranded:
            # The hold is gone: p's nomination reaches the scheduler, which now counts p (3 cpu) on
            # the node beside s (2 cpu) for every pod of p's priority or lower.
            async def nomination_seen() -> bool:
                held = oracles.held_past(await ctx.records(), fault="hold-nomination-echo", key="default/p",
                                         component="scheduler", acted_on="default/s", t0=ctx.t0)
                return held.delivered is not None

            if not await ctx.until(nomination_seen, within=10):
                evidence.append("p's nomination never reached the scheduler after the hold ended")
                return ""
        await ctx.client.create(PODS, pod("t", cpu="500m", priority_class="high", preemption_policy="Never"),
                                namespace="default")
        ctx.mark("create t (high, 500m cpu)", lane="scenario")

        async def bound() -> str | None:
            return oracles.node_name(await ctx.pod("t")) or None

        t_node = await ctx.until(bound, within=self.observe / 2) or ""
        if stranded and not t_node:
            failures = await ctx.events_about("t", reason="FailedScheduling")
            p = await ctx.pod("p")
            evidence.append(f"t (500m) unbound after {self.observe / 2:.0f} s; p still "
                            f"{'Pending' if not oracles.node_name(p) else 'bound'}, nominatedNodeName "
                            f"{((p or {}).get('status') or {}).get('nominatedNodeName')}"
                            + (f"; t FailedScheduling: {failures[-1].get('message')}" if failures else ""))
        else:
            evidence.append(f"t (500m): node {t_node or '-'}")
        return t_node

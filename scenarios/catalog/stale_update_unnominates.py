"""stale-update-unnominates: kubernetes#74931, fixed by #77990.

The follow-up race of nominated-node-race. Since #72259 the scheduler records a preemptor's
nomination in memory before it patches `status.nominatedNodeName`. But an update of the pod
that was written *before* the nomination (here: the scheduler's own `PodScheduled=False`
condition patch of the failed attempt) can come back on the watch *after* it. That version
carries no `nominatedNodeName`; before #77990 the nominator replaced the nomination with the
update's (none), un-reserving the node, and a smaller pod could take the room the preemption
freed.

Chaos (two holds on the scheduler's pod watch, Sieve's "before controller receive" pauses):

* `hold-stale-echo` holds P's MODIFIED events without `status.nominatedNodeName` (the condition
  echo) and is released the moment the scheduler *writes* the nomination: the stale update
  arrives right after the in-memory nomination, as in the issue;
* `hold-nomination-echo` (breakObjectOrder, so it does not queue behind the first) holds the
  fresh update that carries the nomination, until P's binding is written.

A smaller pod S of the same priority (preemptionPolicy Never) arrives once the victims are gone.

Oracle (60 cluster seconds): buggy, S is bound to the node and P stays Pending (reproduced);
fixed, the stale update keeps the nomination, S stays off the node and P is bound there
(prevented). Safety in both modes: P and S never both on the 4-cpu node (inconclusive if so);
the stale echo must have reached the scheduler after the nomination was written, and the fresh
update carrying the nomination only after the scheduler's first decision on S (both read from
the history: the trigger and hold records, the deliveries, the scheduler's writes; inconclusive
if not: the race window was not opened).
"""

from __future__ import annotations

from typing import ClassVar

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import ScenarioContext, ScenarioError, Verdict
from kubemesh.scenarios.workloads import PreemptionRace, pod, preemption_victims
from kubemesh.services.model.kinds import PODS


class StaleUpdateUnnominates(PreemptionRace):
    """See the module docstring."""

    name: ClassVar[str] = "stale-update-unnominates"
    summary: ClassVar[str] = ("a stale update of the preemptor without nominatedNodeName, arriving after the "
                              "in-memory nomination, un-reserves the node for a smaller pod")
    upstream: ClassVar[tuple[str, ...]] = ("kubernetes#74931", "fixed by kubernetes#77990")
    bugs: ClassVar[tuple[str, ...]] = ("stale-update-unnominates",)
    profile: ClassVar[str] = "1.14"

    async def run(self, ctx: ScenarioContext) -> Verdict:
        """Set up, inject, observe (see the module docstring)."""
        await preemption_victims(ctx)
        p_sel = {"resources": ["pods"], "namespace": "default", "name": "p"}
        stale = {"name": "hold-stale-echo", "type": "watch.hold", "target": {"component": "scheduler"},
                 "match": {**p_sel, "eventTypes": ["MODIFIED"], "fields": ["!status.nominatedNodeName"]},
                 "trigger": {"action": "release", "on": "written", "component": "scheduler", **p_sel,
                             "fields": ["status.nominatedNodeName"]},
                 "duration": None}
        fresh = {"name": "hold-nomination-echo", "type": "watch.hold", "target": {"component": "scheduler"},
                 "match": {**p_sel, "eventTypes": ["MODIFIED"], "fields": ["status.nominatedNodeName"]},
                 "breakObjectOrder": True,
                 "trigger": {"action": "release", "on": "written", "component": "scheduler", **p_sel,
                             "fields": ["spec.nodeName"]},
                 "duration": None}
        async with ctx.fault(stale), ctx.fault(fresh):
            ctx.open_window("hold p's updates to scheduler", lane="scheduler")
            await ctx.client.create(PODS, pod("p", cpu="3", priority_class="high"), namespace="default")
            t_p = ctx.now()
            ctx.mark("create p (high, 3 cpu)", lane="scenario")
            nominated = await ctx.wait_record(within=30, type="write", component="scheduler", resource="pods",
                                              key="default/p", event="MODIFIED", after=t_p)
            if nominated is None:
                raise ScenarioError("the scheduler never wrote p")

            async def victims_gone() -> bool:
                return await ctx.pod("v1") is None and await ctx.pod("v2") is None

            if not await ctx.until(victims_gone, within=30):
                raise ScenarioError("the victims were not preempted")
            records = await ctx.records()
            nnn_write = next((r for r in oracles.select(records, type="fault", after=t_p)
                              if r.get("fault") == "hold-stale-echo" and r.get("op") == "trigger"), None)
            stale_seen = [] if nnn_write is None else oracles.select(
                records, type="delivery", component="scheduler", resource="pods", key="default/p",
                event="MODIFIED", after=float(nnn_write["time"]))
            p_now = await ctx.pod("p")
            nnn = ((p_now or {}).get("status") or {}).get("nominatedNodeName")
            ctx.say(f"victims preempted; p.status.nominatedNodeName={nnn}; "
                    f"{len(stale_seen)} stale update(s) of p delivered to the scheduler")
            if nnn_write is not None:
                ctx.mark("nomination written: stale echo released", lane="scheduler", at=float(nnn_write["time"]))
            if stale_seen:
                ctx.mark("stale update of p reaches scheduler", lane="scheduler", at=float(stale_seen[0]["time"]))
            await ctx.client.create(PODS, pod("s", cpu="2", priority_class="high", preemption_policy="Never"),
                                    namespace="default")
            ctx.mark("create s (high, 2 cpu)", lane="scenario")

            async def settled() -> tuple[str, str] | None:
                pn, sn = oracles.node_name(await ctx.pod("p")), oracles.node_name(await ctx.pod("s"))
                return (pn, sn) if pn or sn else None

            first = await ctx.until(settled, within=self.observe)
            await ctx.sleep(self.observe / 2)
            p, s = await ctx.pod("p"), await ctx.pod("s")
            ctx.close_window("hold p's updates to scheduler")
        pn, sn = oracles.node_name(p), oracles.node_name(s)
        p_nnn = ((p or {}).get("status") or {}).get("nominatedNodeName")
        evidence = [f"p: node {pn or '-'}, nominatedNodeName {p_nnn}", f"s: node {sn or '-'}",
                    f"first binding seen (p, s): {first}",
                    f"stale updates of p (no nominatedNodeName) delivered to the scheduler after the nomination "
                    f"was written: {len(stale_seen)}"]
        failures = await ctx.events_about("s", reason="FailedScheduling")
        if failures:
            evidence.append(f"s FailedScheduling: {failures[-1].get('message')}")
        if pn and pn == sn:
            return oracles.inconclusive(
                f"safety violated: p (3 cpu) and s (2 cpu) were both bound to {pn} (4 cpu): the scheduler "
                "over-committed the node", evidence)
        if not stale_seen or nnn_write is None:
            return oracles.inconclusive("the stale update of p never reached the scheduler after the nomination "
                                        "was written: the race window was not opened", evidence)
        echo = oracles.held_past(await ctx.records(), fault="hold-nomination-echo", key="default/p",
                                 component="scheduler", acted_on="default/s", t0=ctx.t0)
        evidence += echo.evidence
        if not echo.opened:
            # The fresh update carrying the nomination would restore it: then s met the nomination
            # again whatever the nominator did with the stale one.
            return oracles.inconclusive(f"{echo.why}: the race window was not opened", evidence)
        if sn:
            ctx.mark(f"s bound to {sn}", lane="scheduler")
        if pn:
            ctx.mark(f"p bound to {pn}", lane="scheduler")
        return oracles.decide(
            symptom=bool(sn) and not pn, healthy=bool(pn) and not sn, evidence=evidence,
            reproduced=(f"reproduced: a stale update of default/p without nominatedNodeName reached the scheduler "
                        f"after p was nominated in memory and removed the nomination; default/s took {sn} and the "
                        f"high-priority p stays Pending (nominatedNodeName={p_nnn} in the API only)"),
            prevented=(f"prevented: the stale update of p did not remove its in-memory nomination, so s was kept "
                       f"off {pn} and p was bound there"))

"""ghost-node-affinity: kubernetes#50813, fixed by #53647.

The scheduler's cache is fed by two informers. When a node is deleted before the deletions of
its pods have been observed, the node's NodeInfo stays behind as a ghost (no Node, pods still
attached). Before #53647, inter-pod (anti-)affinity iterated every NodeInfo, looked up the node
of each existing pod, got `node "X" not found`, and failed the whole scheduling attempt: every
pod with (anti-)affinity stayed Pending for as long as the ghost lived.

The window here is the real one: the node's machine is powered off (its pods can never finish
terminating) and its Node object is deleted, as a cloud node controller does; the pod DELETEs
come only from PodGC's orphan pass after its 40 s quarantine. A new pod with required
anti-affinity created in between is the probe.

Oracle: liveness, the new pod is bound within 20 cluster seconds. Buggy: it is not, and the
scheduler reported `node "<victim>" not found` for it (reproduced); the run then keeps watching
until the pod DELETE reaches the scheduler and the pod is finally placed, so the timeline shows
node DELETE, failed attempts, pod DELETE, binding. Fixed: it is bound at once (prevented).

The window, read from the history before either verdict: the victim's DELETE was delivered to
the scheduler, and the scheduler's first decision on web-1 (its first write of the pod: the
binding, or the failed attempt's status) came after it and before web-0's DELETE reached the
scheduler, so the scheduler decided with a ghost in its cache. Otherwise: inconclusive.

Faults: the power-off is the scenario's only injection, and the workload opens the window
without it (`window_needs_faults = False`): the node is deleted by the scenario, and nothing
deletes web-0 before PodGC's orphan pass whether its machine runs or not (a kubelet registers
its Node only when it boots, so a running one does not bring the Node back). With faults off
the verdicts are therefore the same, and `kubemesh scenario verify` expects them to be.
"""

from __future__ import annotations

from typing import ClassVar

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import MeshShape, Scenario, ScenarioContext, ScenarioError, Verdict
from kubemesh.scenarios.workloads import HOSTNAME, pod
from kubemesh.services.model.kinds import NODES, PODS

BOUND_WITHIN = 20.0
"""Cluster seconds the new pod has to be bound in (the fix binds it within about one)."""


class GhostNodeAffinity(Scenario):
    """See the module docstring."""

    name: ClassVar[str] = "ghost-node-affinity"
    summary: ClassVar[str] = ("a deleted node whose pods are still cached stays a ghost; anti-affinity pods fail "
                              "with node not found and stay Pending")
    upstream: ClassVar[tuple[str, ...]] = ("kubernetes#50813", "fixed by kubernetes#53647")
    bugs: ClassVar[tuple[str, ...]] = ("ghost-node-affinity-error",)
    profile: ClassVar[str] = "1.8"
    shape: ClassVar[MeshShape] = MeshShape(nodes=3, clock_rate=60.0)
    deadline: ClassVar[float] = 400.0
    window_needs_faults: ClassVar[bool] = False

    async def run(self, ctx: ScenarioContext) -> Verdict:
        """Set up, inject, observe (see the module docstring)."""
        victim = ctx.rng.choice(["node-1", "node-2", "node-3"])
        ctx.focus("nodes", victim)
        ctx.focus("pods", "default/web-0", "default/web-1")
        await ctx.client.create(PODS, pod("web-0", labels={"app": "web"}, anti_affinity={"app": "web"},
                                          node_selector={HOSTNAME: victim}), namespace="default")
        ctx.say(f"created web-0 (app=web, anti-affinity app=web) pinned to {victim}")

        async def running() -> bool:
            return oracles.is_running(await ctx.pod("web-0"))

        if not await ctx.until(running, within=30):
            raise ScenarioError(f"web-0 never ran on {victim}")
        ctx.say(f"web-0 Running on {victim}")
        await ctx.power_off(victim)
        t_delete = ctx.now()
        await ctx.client.delete(NODES, victim)
        ctx.mark(f"DELETE node {victim}", lane="scenario", at=t_delete)
        ctx.say(f"deleted Node {victim} (its machine is off: web-0 cannot terminate)")
        seen = await ctx.wait_record(within=20, type="delivery", component="scheduler", resource="nodes",
                                     event="DELETED", key=victim)
        if seen is None:
            raise ScenarioError(f"the scheduler never received the DELETE of {victim}")
        ctx.mark(f"{victim} DELETE reaches scheduler", lane="scheduler", at=float(seen["time"]))
        web0 = await ctx.pod("web-0")
        if web0 is None:
            raise ScenarioError("web-0 is already gone; there is no ghost to observe")
        await ctx.client.create(PODS, pod("web-1", labels={"app": "web"}, anti_affinity={"app": "web"}),
                                namespace="default")
        created = ctx.now()
        ctx.mark("create web-1", lane="scenario")
        ctx.say("created web-1 (app=web, required anti-affinity app=web)")

        async def bound() -> str | None:
            return oracles.node_name(await ctx.pod("web-1")) or None

        live = await oracles.eventually(ctx, "web-1 bound", bound, within=BOUND_WITHIN)
        failures = await ctx.events_about("web-1", reason="FailedScheduling")
        not_found = [e for e in failures if "not found" in str(e.get("message"))]
        evidence = [f"victim node: {victim}", live.describe(ctx.t0)]
        if failures:
            last = failures[-1]
            evidence.append(f"scheduler FailedScheduling for web-1 (count {last.get('count', 1)}): "
                            f"{last.get('message')}")
        window = await _window(ctx, seen)
        evidence += window[1]
        if not window[0]:
            return oracles.inconclusive(f"the scheduler did not decide on web-1 between the DELETE of {victim} and "
                                        "the DELETE of web-0 reaching it: the race window was not opened", evidence)
        if live.held:
            ctx.mark(f"web-1 bound to {live.value}", lane="scheduler")
            return oracles.decide(
                symptom=bool(not_found), healthy=True,
                reproduced="", inconclusive="web-1 was bound, but only after node-not-found failures",
                prevented=(f"prevented: web-1 was bound to {live.value} {live.at - created:.1f} s of cluster time "
                           f"after it was created, although {victim} was deleted while its pod web-0 was still "
                           "cached (the ghost NodeInfo is skipped)") if live.at else "",
                evidence=evidence)
        # Buggy path: show the rest of the story (the pod DELETE finally arrives, the ghost goes).
        pending_for = ctx.now() - created
        msg = str(not_found[0].get("message")) if not_found else ""
        gone = await ctx.wait_record(within=120, type="delivery", component="scheduler", resource="pods",
                                     event="DELETED", key="default/web-0")
        if gone is not None:
            ctx.mark("web-0 DELETE reaches scheduler", lane="scheduler", at=float(gone["time"]))
            evidence.append(f"the DELETE of web-0 reached the scheduler {float(gone['time']) - float(seen['time']):.1f}"
                            f" s after the DELETE of {victim}")
            late = await oracles.eventually(ctx, "web-1 bound after the ghost went", bound, within=40)
            if late.held and late.at is not None:
                ctx.mark(f"web-1 bound to {late.value}", lane="scheduler")
                pending_for = late.at - created
                evidence.append(f"web-1 was bound to {late.value} only {pending_for:.1f} s after creation, once "
                                "the ghost's last pod was gone")
        failures = await ctx.events_about("web-1", reason="FailedScheduling")
        if failures:
            evidence.append(f"FailedScheduling events for web-1: count {failures[-1].get('count', 1)}")
        return oracles.decide(
            symptom=bool(not_found), healthy=False,
            reproduced=(f"reproduced: pod default/web-1 stayed Pending for {pending_for:.0f} s of cluster time "
                        f"after {victim} was deleted (a ghost NodeInfo holding web-0); scheduler error: {msg}"),
            prevented="",
            inconclusive=(f"web-1 was not bound within {BOUND_WITHIN:.0f} s, but the scheduler reported no "
                          "node-not-found error"),
            evidence=evidence)


async def _window(ctx: ScenarioContext, node_delete: dict[str, object]) -> tuple[bool, list[str]]:
    """Whether the scheduler decided on web-1 with the ghost cached (see the module docstring)."""
    records = await ctx.records()
    decided = oracles.first(records, type="write", component="scheduler", resource="pods", key="default/web-1")
    gone = oracles.first(records, type="delivery", component="scheduler", resource="pods", event="DELETED",
                         key="default/web-0")

    def at(r: dict[str, object] | None) -> str:
        return "never" if r is None else f"at t={float(str(r['time'])) - ctx.t0:.1f}s (record {r['index']})"

    evidence = [f"history: node DELETE delivered to the scheduler {at(node_delete)}; the scheduler's first write "
                f"of web-1 {at(decided)}; web-0's DELETE delivered to the scheduler {at(gone)}"]
    opened = (decided is not None and int(str(decided["index"])) > int(str(node_delete["index"]))
              and (gone is None or int(str(gone["index"])) > int(str(decided["index"]))))
    return opened, evidence

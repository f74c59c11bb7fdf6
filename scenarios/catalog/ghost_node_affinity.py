"""ghost-node-affinity: kubernetes#50813, fixed by #53647.

The scheduler's cache is fed by two informers. When a node is deleted before the deletions of
its pods have been observed, the node's NodeInfo stays behind as a ghost (no Node, pods still
attached). Before #53647, inter-pod (anti-)affinity iterated every NodeInfo, looked up the node
of each existing pod, got `node "X" not found`, and failed the whole scheduling attempt: every
pod with (anti-)affinity stayed Pending for as long as the ghost lived.

The workload is the seed's reproduction: a ReplicationController of one replica whose pods
require anti-affinity to their own label. The window here is the real one: the node its pod
runs on is powered off (the pod can never finish terminating) and its Node object is deleted,
as a cloud node controller does; the pod's DELETE comes only from PodGC's orphan pass. In 1.8
that pass runs every 20 s and deletes the pods of a missing node at once (the 40 s quarantine
came in v1.17), so a ghost lives up to 20 s: the scenario deletes the node just after a PodGC
pass (read from the controller-manager's debug page), which gives the ghost one whole period
rather than a random part of one. In between the RC is scaled to two: its new pod is the probe.

Oracle: the probe must be bound within `BOUND_WITHIN` cluster seconds. Buggy: every attempt
while the ghost is cached fails with `node "<victim>" not found`; the probe stays Pending until
PodGC deletes the old pod, its DELETE reaches the scheduler, the ghost goes and a retry binds it
(reproduced: the pending time and the error). The seed's "stays Pending" lasts exactly as long
as the old pod object does: with 1.8's PodGC that is one orphan pass; where nothing deletes it,
forever. Fixed: bound at its first attempt, the ghost skipped (prevented).

The window, read from the history before either verdict: the victim's DELETE was delivered to
the scheduler, and the scheduler's first decision on the probe (its first write of the pod: the
binding, or the failed attempt's status) came after it and before the old pod's DELETE reached
the scheduler, so the scheduler decided with a ghost in its cache. Otherwise: inconclusive.

Faults: the power-off is the scenario's only injection, and the workload opens the window
without it (`window_needs_faults = False`): the node is deleted by the scenario, and nothing
deletes the old pod before PodGC's orphan pass whether its machine runs or not (a kubelet registers
its Node only when it boots, so a running one does not bring the Node back). With faults off
the verdicts are therefore the same, and `kubemesh scenario verify` expects them to be.
"""

from __future__ import annotations

from typing import Any, ClassVar

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import MeshShape, Scenario, ScenarioContext, ScenarioError, Verdict
from kubemesh.scenarios.workloads import pod
from kubemesh.services.model.kinds import NODES, REPLICATIONCONTROLLERS

BOUND_WITHIN = 120.0
"""Cluster seconds the new pod has to be bound in: the fix binds it at once; the bug, after PodGC's
next orphan pass (at most 20 s in 1.8, 40-60 s with today's quarantine) and the pod's backoff."""
PODGC_PASS_WITHIN = 30.0
"""Cluster seconds to wait for a PodGC pass before the node is deleted (one pass per 20 s)."""


class GhostNodeAffinity(Scenario):
    """See the module docstring."""

    name: ClassVar[str] = "ghost-node-affinity"
    summary: ClassVar[str] = ("a deleted node whose pods are still cached stays a ghost; anti-affinity pods fail "
                              "with node not found and stay Pending")
    upstream: ClassVar[tuple[str, ...]] = ("kubernetes#50813", "fixed by kubernetes#53647")
    bugs: ClassVar[tuple[str, ...]] = ("ghost-node-affinity-error",)
    profile: ClassVar[str] = "1.8"
    shape: ClassVar[MeshShape] = MeshShape(nodes=3, clock_rate=20.0)
    deadline: ClassVar[float] = 400.0
    window_needs_faults: ClassVar[bool] = False

    async def run(self, ctx: ScenarioContext) -> Verdict:
        """Set up, inject, observe (see the module docstring)."""
        # The seed's reproduction: a ReplicationController of one replica (required anti-affinity on
        # its own label); its pod runs, its node goes away, the RC's next pod is the probe.
        template = pod("web", labels={"app": "web"}, anti_affinity={"app": "web"})
        await ctx.client.create(REPLICATIONCONTROLLERS, {
            "apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": 1, "selector": {"app": "web"},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": template["spec"]}}},
            namespace="default")
        ctx.say("created ReplicationController web (1 replica, app=web, required anti-affinity app=web)")

        async def first_running() -> dict[str, object] | None:
            for p in await ctx.pods(label_selector="app=web"):
                if oracles.is_running(p):
                    return p
            return None

        first_pod = await ctx.until(first_running, within=30)
        if first_pod is None:
            raise ScenarioError("the ReplicationController's pod never ran")
        old = str(first_pod["metadata"]["name"])  # type: ignore[index]
        victim = oracles.node_name(first_pod)
        ctx.focus("nodes", victim)
        ctx.focus("pods", f"default/{old}")
        ctx.say(f"{old} Running on {victim}")
        await ctx.power_off(victim)
        if await ctx.after_podgc_pass(within=PODGC_PASS_WITHIN):
            ctx.say("a PodGC pass just ran: the node is deleted now, so its ghost lives one whole PodGC period")
        t_delete = ctx.now()
        await ctx.client.delete(NODES, victim)
        ctx.mark(f"DELETE node {victim}", lane="scenario", at=t_delete)
        ctx.say(f"deleted Node {victim} (its machine is off: {old} cannot terminate)")
        seen = await ctx.wait_record(within=20, type="delivery", component="scheduler", resource="nodes",
                                     event="DELETED", key=victim)
        if seen is None:
            raise ScenarioError(f"the scheduler never received the DELETE of {victim}")
        ctx.mark(f"{victim} DELETE reaches scheduler", lane="scheduler", at=float(seen["time"]))
        if await ctx.pod(old) is None:
            raise ScenarioError(f"{old} is already gone; there is no ghost to observe")
        await ctx.client.patch(REPLICATIONCONTROLLERS, "web", {"spec": {"replicas": 2}}, namespace="default")
        ctx.mark("scale rc/web to 2", lane="scenario")

        async def new_pod() -> str | None:
            names = [str(p["metadata"]["name"]) for p in await ctx.pods(label_selector="app=web")]
            return next((n for n in names if n != old), None)

        probe = await ctx.until(new_pod, within=20)
        if probe is None:
            raise ScenarioError("the ReplicationController created no second pod")
        created = ctx.now()
        ctx.focus("pods", f"default/{probe}")
        ctx.say(f"scaled rc/web to 2: its new pod {probe} (required anti-affinity app=web) is the probe")

        async def bound() -> str | None:
            return oracles.node_name(await ctx.pod(probe)) or None

        live = await oracles.eventually(ctx, f"{probe} bound", bound, within=BOUND_WITHIN)
        failures = await ctx.events_about(probe, reason="FailedScheduling")
        not_found = [e for e in failures if "not found" in str(e.get("message"))]
        evidence = [f"victim node: {victim}", live.describe(ctx.t0)]
        if failures:
            last = failures[-1]
            evidence.append(f"scheduler FailedScheduling for {probe} (count {last.get('count', 1)}): "
                            f"{last.get('message')}")
        opened, gone, window_evidence = await _window(ctx, seen, old=old, probe=probe)
        evidence += window_evidence
        if not opened:
            return oracles.inconclusive(f"the scheduler did not decide on {probe} between the DELETE of {victim} "
                                        f"and the DELETE of {old} reaching it: the race window was not opened",
                                        evidence)
        if gone is not None:
            ctx.mark(f"{old} DELETE reaches scheduler", lane="scheduler", at=float(gone["time"]))
            evidence.append(f"the DELETE of {old} (PodGC's orphan pass) reached the scheduler "
                            f"{float(gone['time']) - float(seen['time']):.1f} s after the DELETE of {victim}")
        if live.held and live.at is not None:
            ctx.mark(f"{probe} bound to {live.value}", lane="scheduler", at=live.at)
        pending_for = (live.at if live.held and live.at is not None else ctx.now()) - created
        msg = str(not_found[0].get("message")) if not_found else ""
        ended = (f"until the DELETE of {old} reached the scheduler and a retry bound it to {live.value}"
                 if live.held and gone is not None else "and was still Pending")
        return oracles.decide(
            symptom=bool(not_found), healthy=live.held and not failures,
            reproduced=(f"reproduced: the ReplicationController's new pod default/{probe} stayed Pending for "
                        f"{pending_for:.0f} s of cluster time after {victim} was deleted (a ghost NodeInfo holding "
                        f"{old}), {ended}; scheduler error: {msg}"),
            prevented=(f"prevented: the ReplicationController's new pod {probe} was bound to {live.value} "
                       f"{pending_for:.1f} s of cluster time after the scale-up, at its first attempt, although "
                       f"{victim} was deleted while its pod {old} was still cached (the ghost NodeInfo is skipped)"),
            inconclusive=(f"{probe} was not bound within {BOUND_WITHIN:.0f} s, but the scheduler reported no "
                          "node-not-found error" if not live.held else
                          f"{probe} was bound after failed attempts that were not node-not-found errors"),
            evidence=evidence)


async def _window(ctx: ScenarioContext, node_delete: dict[str, object], *, old: str,
                  probe: str) -> tuple[bool, dict[str, Any] | None, list[str]]:
    """Whether the window opened, and what says so.

    Returns whether the scheduler decided on the probe with the ghost cached (see the module
    docstring), the delivery of the old pod's DELETE to the scheduler (None if it never came),
    and the evidence.
    """
    records = await ctx.records()
    decided = oracles.first(records, type="write", component="scheduler", resource="pods", key=f"default/{probe}")
    gone = oracles.first(records, type="delivery", component="scheduler", resource="pods", event="DELETED",
                         key=f"default/{old}")

    def at(r: dict[str, object] | None) -> str:
        return "never" if r is None else f"at t={float(str(r['time'])) - ctx.t0:.1f}s (record {r['index']})"

    evidence = [f"history: node DELETE delivered to the scheduler {at(node_delete)}; the scheduler's first write "
                f"of {probe} {at(decided)}; {old}'s DELETE delivered to the scheduler {at(gone)}"]
    opened = (decided is not None and int(str(decided["index"])) > int(str(node_delete["index"]))
              and (gone is None or int(str(gone["index"])) > int(str(decided["index"]))))
    return opened, gone, evidence

"""large-cluster-threshold: a partially disrupted zone of 51 nodes against one of 50 (the seed 001 rates).

The seed's node controller keeps one rate-limited queue per zone. A zone with more than 2 nodes
not ready and at least `--unhealthy-zone-threshold` (55%) of them is PartialDisruption; its rate
is then `--secondary-node-eviction-rate` (0.01/s, one node per 100 s) if the zone has more than
`--large-cluster-size-threshold` (50) nodes, and 0 otherwise: in a small zone a wide outage is
taken for a network problem and nothing is evicted. A zone seen for the first time starts in
the Initial state until the controller's next pass computes it.

The mesh has the real sizes: `zone-large` with 51 nodes, `zone-small` with 50. Every zone is
watched through the controller-manager's `/debug/controller-manager` document (state, its
transitions from Initial, size, rate, the nodes each queue processed). 29 nodes of the large
zone (57%) and 28 of the small one (56%) are powered off, each running a pod `keep-<node>` that
tolerates the unreachable and not-ready taints forever (under both names: v1.7 used the alpha
`node.alpha.kubernetes.io/*` keys).

Oracle steps, in both modes (a step off makes the run inconclusive, with the step named): both
zones went Initial → Normal; both reached PartialDisruption with rate 0.01 for the large zone
and 0 for the small one; after that, the large zone's queue processed at least one node and no
more than its rate allows, and the small zone's none. Then the keep pods decide:

* buggy (`legacy-pod-eviction`, v1.7): the large zone's pod evictor deleted the keep pods of the
  nodes it processed, though they tolerate the node's condition forever (reproduced);
* fixed (taint-based eviction, the fix of 1.13): the processed nodes were tainted NoExecute and
  no keep pod was deleted (prevented).
"""

from __future__ import annotations

import asyncio
import math
from typing import Any, ClassVar, Final

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import MeshShape, Scenario, ScenarioContext, ScenarioError, Verdict
from kubemesh.scenarios.workloads import HOSTNAME, pod
from kubemesh.services.model.kinds import NODES, PODS, labels_of, name_of
from kubemesh.services.model.profiles import ALPHA_NOT_READY, ALPHA_UNREACHABLE
from kubemesh.services.model.wellknown import LABEL_ZONE, TAINT_NOT_READY, TAINT_UNREACHABLE

LARGE: Final = "zone-large"
SMALL: Final = "zone-small"
SIZES: Final = {LARGE: 51, SMALL: 50}
OFF: Final = {LARGE: 29, SMALL: 28}
"""Powered-off nodes per zone: just over 55% of each."""
THRESHOLD = 50
SECONDARY_QPS = 0.01
GRACE = 40.0
PERIOD = 5.0
EVICTION_TIMEOUT = 300.0
WATCH_AFTER = 130.0
"""Cluster seconds watched after the first evictions are due (room for one more token)."""
CM: Final = "controller-manager"
DEBUG_PATH: Final = "/debug/controller-manager"
NOEXECUTE_KEYS: Final = (TAINT_UNREACHABLE, TAINT_NOT_READY, ALPHA_UNREACHABLE, ALPHA_NOT_READY)


class LargeClusterThreshold(Scenario):
    """See the module docstring."""

    name: ClassVar[str] = "large-cluster-threshold"
    summary: ClassVar[str] = ("a partially disrupted zone of 51 nodes evicts at the secondary rate, one of 50 not at "
                              "all; the legacy evictor deletes pods that tolerate it (buggy), taints spare them "
                              "(fixed)")
    upstream: ClassVar[tuple[str, ...]] = ("seed 001 (v1.7 zone states and rates)", "--large-cluster-size-threshold",
                                           "taint-based eviction GA 1.18")
    bugs: ClassVar[tuple[str, ...]] = ("legacy-pod-eviction",)
    profile: ClassVar[str] = "1.7"
    shape: ClassVar[MeshShape] = MeshShape(nodes=sum(SIZES.values()), zones=(LARGE, SMALL), kubelets=2,
                                           clock_rate=20.0)
    """101 nodes post their status every 10 cluster seconds: at clock rate 20 that is 200 requests
    per wall second, which a loaded two-core machine keeps up with (60 it does not)."""
    deadline: ClassVar[float] = 700.0

    async def run(self, ctx: ScenarioContext) -> Verdict:
        """Set up, inject, observe (see the module docstring)."""
        nodes = (await ctx.client.list(NODES)).get("items") or []
        by_zone: dict[str, list[str]] = {}
        for n in nodes:
            by_zone.setdefault(labels_of(n).get(LABEL_ZONE, ""), []).append(name_of(n))
        if {z: len(v) for z, v in by_zone.items()} != SIZES:
            raise ScenarioError(f"zones {({z: len(v) for z, v in by_zone.items()})}, expected {SIZES}")
        victims = {z: sorted(ctx.rng.sample(sorted(by_zone[z]), OFF[z])) for z in SIZES}
        tol = [{"key": k, "operator": "Exists", "effect": "NoExecute"} for k in NOEXECUTE_KEYS]
        every = [n for z in SIZES for n in victims[z]]
        await asyncio.gather(*(ctx.client.create(PODS, pod(f"keep-{n}", node_selector={HOSTNAME: n}, tolerations=tol),
                                                 namespace="default") for n in every))

        running = 0

        async def all_running() -> bool:
            nonlocal running
            pods = (await ctx.client.list(PODS, namespace="default")).get("items") or []
            running = sum(1 for p in pods if oracles.is_running(p))
            return running >= len(every)

        if not await ctx.until(all_running, within=240, poll=0.2):
            raise ScenarioError(f"only {running} of the {len(every)} keep pods ran")
        evidence: list[str] = []
        doc = await self._zones(ctx)
        for z in SIZES:
            states = [t.get("state") for t in (doc.get(z) or {}).get("transitions") or []]
            evidence.append(f"{z}: {SIZES[z]} nodes; states so far {' -> '.join(map(str, states)) or 'none'}")
            if states[:2] != ["Initial", "Normal"]:
                return oracles.inconclusive(f"{z} did not start Initial -> Normal", evidence)
        t_off = ctx.now()
        await asyncio.gather(*(ctx.power_off(n) for n in every))
        ctx.mark(f"{OFF[LARGE]} + {OFF[SMALL]} nodes powered off", lane="scenario")

        partial_at: dict[str, float] = {}
        processed_at_partial: dict[str, set[str]] = {}

        async def both_partial() -> bool:
            zones = await self._zones(ctx)
            for z in SIZES:
                zd = zones.get(z) or {}
                if z not in partial_at and zd.get("state") == "PartialDisruption":
                    partial_at[z] = ctx.now()
                    processed_at_partial[z] = set(zd.get("processed") or [])
                    evidence.append(f"{z} PartialDisruption at t={ctx.now() - ctx.t0:.1f}s with rate {zd.get('qps')} "
                                    f"({zd.get('notReady')}/{zd.get('size')} not ready)")
                    want = SECONDARY_QPS if SIZES[z] > THRESHOLD else 0.0
                    if abs(float(zd.get("qps") or 0.0) - want) > 1e-9:
                        raise ScenarioError(f"{z} has rate {zd.get('qps')} in PartialDisruption, expected {want}")
            return len(partial_at) == len(SIZES)

        # From the last power-off: a node crosses its grace period within GRACE + one heartbeat,
        # is counted at the next monitor pass; the rest is room for a loaded machine.
        if not await ctx.until(both_partial, within=GRACE + 4 * PERIOD + 90, poll=0.05):
            return oracles.inconclusive("the zones did not both reach PartialDisruption", evidence)
        t_end = t_off + EVICTION_TIMEOUT + WATCH_AFTER
        await ctx.sleep(max(0.0, t_end - ctx.now()))
        zones = await self._zones(ctx)
        new = {z: sorted(set((zones.get(z) or {}).get("processed") or []) - processed_at_partial[z]) for z in SIZES}
        allowed = 1 + math.floor((ctx.now() - partial_at[LARGE]) * SECONDARY_QPS)
        for z in SIZES:
            evidence.append(f"{z}: processed after PartialDisruption: {', '.join(new[z]) or 'none'}")
        if not 1 <= len(new[LARGE]) <= allowed or new[SMALL]:
            return oracles.inconclusive(f"the rates did not follow the threshold: {len(new[LARGE])} nodes of the large "
                                        f"zone (1 to {allowed} allowed), {len(new[SMALL])} of the small one "
                                        "(0 allowed)",
                                        evidence)
        records = await ctx.records()
        deleted = sorted({str(r.get("key", "")).rsplit("/", 1)[-1] for r in records
                          if r.get("type") == "request" and r.get("verb") == "delete"
                          and r.get("component") == "controller_manager" and int(r.get("code") or 0) < 300
                          and "/pods/keep-" in str(r.get("key", ""))})
        tainted = []
        for n in new[LARGE]:
            node = await ctx.node(n)
            if any(t.get("effect") == "NoExecute" and t.get("key") in NOEXECUTE_KEYS
                   for t in ((node or {}).get("spec") or {}).get("taints") or []):
                tainted.append(n)
        evidence.append(f"keep pods deleted by the controller-manager: {', '.join(deleted) or 'none'}")
        evidence.append(f"processed large-zone nodes with a NoExecute taint: {', '.join(tainted) or 'none'}")
        if deleted and {d.removeprefix("keep-") for d in deleted} <= set(new[LARGE]) and not tainted:
            return oracles.decide(
                symptom=True, healthy=False, prevented="", evidence=evidence,
                reproduced=(f"reproduced: {LARGE} ({SIZES[LARGE]} nodes, above the threshold of {THRESHOLD}) kept "
                            f"evicting at {SECONDARY_QPS}/s and its pod evictor deleted {len(deleted)} keep pod(s) "
                            f"that tolerate the node's condition forever; {SMALL} ({SIZES[SMALL]} nodes) evicted "
                            "nothing"))
        if not deleted and set(tainted) == set(new[LARGE]):
            return oracles.decide(
                symptom=False, healthy=True, reproduced="", evidence=evidence,
                prevented=(f"prevented: {LARGE} ({SIZES[LARGE]} nodes) tainted {len(tainted)} node(s) at "
                           f"{SECONDARY_QPS}/s and {SMALL} ({SIZES[SMALL]} nodes) none; the keep pods tolerate the "
                           "taints and stayed"))
        return oracles.inconclusive("neither the legacy evictor's deletions nor taints alone", evidence)

    @staticmethod
    async def _zones(ctx: ScenarioContext) -> dict[str, Any]:
        """The node-lifecycle controller's zones by zone name (the document keys them `region/zone`)."""
        doc = await ctx.debug(CM, DEBUG_PATH)
        nl = doc.get("nodeLifecycle") if isinstance(doc, dict) else None
        if not isinstance(nl, dict):
            raise ScenarioError("the controller-manager's debug document shows no node-lifecycle controller")
        return {str(k).rpartition("/")[2]: v for k, v in (nl.get("zones") or {}).items() if isinstance(v, dict)}

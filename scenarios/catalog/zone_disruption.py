"""zone-disruption: zone states and eviction rates, with NoExecute taints or the legacy pod evictor.

The node-lifecycle controller never processes dead nodes as fast as it finds them. It groups the
nodes by zone (`topology.kubernetes.io/zone`, with the region) and drains each zone's queue of
dead nodes through a token bucket whose rate follows the zone's state (kubernetes#28832,
kubernetes#28897 in 1.4: before, a control plane cut off from its nodes evicted everything):

* Normal: `--node-eviction-rate` (0.1 nodes/s, one node per 10 s);
* PartialDisruption (more than 2 nodes and at least `--unhealthy-zone-threshold`, 55 %, not
  ready): `--secondary-node-eviction-rate` (0.01/s) if the zone has more than
  `--large-cluster-size-threshold` nodes, else 0: evictions stop;
* FullDisruption (no ready node): the normal rate again, so a lost zone's work moves elsewhere;
* every zone FullDisruption: "master disruption", the controller blames its own connectivity,
  stops every queue and removes the NoExecute taints.

A swap of rates keeps upstream's token rule (`SwapLimiter`): the new bucket starts full if the old
one had a token to give, drained otherwise (a rate-0 limiter never has one).

The mesh is small: zone-a with 5 nodes and zone-b with 4, and `--large-cluster-size-threshold 4`,
so zone-a counts as large and zone-b as small. One run walks through the phases that fit one
mesh, in an order where each is measured on its own:

1. two zone-a nodes and three zone-b nodes power off. zone-a stays Normal (2 of 5): its two
   nodes are processed 10 s apart. zone-b becomes PartialDisruption (3 of 4) and, being small,
   stops (rate 0).
2. the last zone-b node powers off: zone-b is FullDisruption while zone-a is not, and zone-b's
   backlog drains at 0.1/s, the first one interval after the swap (the 0 limiter had no token).
3. two more zone-a nodes (4 of 5): PartialDisruption of a large zone. The first goes at once (the
   healthy limiter's token survives the swap), the second 100 s later (0.01/s).
4. the last zone-a node: every zone is fully disrupted, so master disruption. Nothing is
   processed for 30 s (zone-a FullDisruption alone would process it 10 s later) and, with
   taints, every NoExecute taint is removed.

The phases are serialized on purpose. If a node is tainted while a monitor pass that writes (a
node crossing its grace period) still holds an untainted copy of it, the pass forgets and
re-queues the node, and a later token is spent on a no-op (upstream's `markNodeForTainting` has
the same window). The oracle counts such re-queues from the controller's debug document, and
keeping crossings away from a draining backlog makes them rare.

What "processing a node" means is the difference between the modes, and the bug:

* fixed (taint-based eviction, kubernetes#41133; the only path since kubernetes#115840): the
  zone queue adds `node.kubernetes.io/unreachable:NoExecute`, and each pod leaves when its own
  toleration ends;
* buggy (`legacy-pod-eviction`, the seed's v1.7 node controller): once `--pod-eviction-timeout`
  has passed since the last heartbeat, the zone's pod evictor deletes every pod of the node.

Every node runs two pods: `fast-<node>` tolerates the unreachable and not-ready taints for 30 s
(it wants a quick failover), and `keep-<node>` tolerates them forever (it would rather wait for
its node, as a pod with local data does). The operator set `--pod-eviction-timeout` to 30 s for
fast failover, as clusters did before taints: one cluster-wide timeout for every pod.

Oracle, in cluster time. A node watch plus the apiserver's history give each node's versions and
the times of the controller's writes: the crossing (Ready→Unknown), the NoExecute taint and its
removal; the history's DELETE requests give pod deletions. Where the controller stamps its own
clock, that stamp is what gets compared, because at a fast clock a write's latency is seconds of
cluster time: the taint's `timeAdded`, the Ready condition's `lastTransitionTime` (both in whole
seconds) and the legacy evictor's `DeletingAllPods` event. Zone states, rates and queues come from
the controller's `/debug/controller-manager` document, polled throughout.

* Zone states: every state and rate the document showed must be the one the rule gives for the
  crossings written before the controller entered it (its `stateSince`), and every
  state/rate pair of the phases must be seen.
* Rates: each processing time must follow the token bucket. A node goes when it is queued if a
  token is there. Queued means at the earliest one monitor period after its crossing, and at
  the latest one period after the end of the pass that wrote it: a pass writes node after node,
  and on a busy machine spans seconds. Otherwise the node goes when the next token is due
  (1/qps after the previous one), never earlier. Lateness is allowed for the eviction pass
  period and the controller's loop.

A phase off its flags makes the run inconclusive, with the phase named. Then the keep pods decide:

* reproduced: keep pods of processed nodes deleted by the node controller's evictor (no NoExecute
  taint on the node), at the zone's rate, though they tolerate the node's condition forever;
* prevented: every processed node tainted at the zone's rate, every fast pod deleted 30 s after
  its node's taint (or spared when master disruption removed the taint first), no keep pod
  deleted.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import MeshShape, Scenario, ScenarioContext, ScenarioError, Verdict
from kubemesh.scenarios.workloads import pod
from kubemesh.services.machinery.client import ApiError
from kubemesh.services.machinery.clock import time_or_none
from kubemesh.services.model.kinds import EVENTS, NODES, PODS, Obj, labels_of, name_of, rv_of
from kubemesh.services.model.profiles import ALPHA_NOT_READY, ALPHA_UNREACHABLE
from kubemesh.services.model.wellknown import LABEL_ZONE, TAINT_NOT_READY, TAINT_UNREACHABLE

ZONE_A: Final = "zone-a"
"""5 nodes: more than the large-cluster threshold."""
ZONE_B: Final = "zone-b"
"""4 nodes: not more than the threshold."""
SIZES: Final[Mapping[str, int]] = {ZONE_A: 5, ZONE_B: 4}

GRACE = 40.0
PERIOD = 5.0
EVICTION_TIMEOUT = 30.0
HEALTHY_QPS = 0.1
SECONDARY_QPS = 0.01
LARGE_CLUSTER = 4
UNHEALTHY = 0.55
FAST_TOLERATION = 30
MASTER_WATCH = 30.0
"""Cluster seconds of master disruption watched for evictions (a FullDisruption zone would take 10)."""

CM: Final = "controller-manager"
DEBUG_PATH: Final = "/debug/controller-manager"
ZONE_LABEL: Final = LABEL_ZONE
UNREACHABLE: Final = TAINT_UNREACHABLE
NOT_READY: Final = TAINT_NOT_READY
NOEXECUTE_KEYS: Final = (UNREACHABLE, NOT_READY, ALPHA_UNREACHABLE, ALPHA_NOT_READY)
"""Both names of each taint: v1.7's taint-based eviction (fixed mode of the 1.7 profile) used alpha keys."""
NORMAL, PARTIAL, FULL = "Normal", "PartialDisruption", "FullDisruption"
POLL_WALL = 0.03
"""Wall seconds between two polls of the debug document (tooling, not cluster behaviour)."""
STALL = 2 * PERIOD
"""Cluster seconds without an answer from the mesh that count as a stall (two monitor periods)."""


def _tolerations(seconds: int | None) -> list[dict[str, Any]]:
    extra = {} if seconds is None else {"tolerationSeconds": seconds}
    return [{"key": k, "operator": "Exists", "effect": "NoExecute", **extra} for k in NOEXECUTE_KEYS]


def _has_noexecute(node: Obj) -> bool:
    return any(t.get("effect") == "NoExecute" and t.get("key") in NOEXECUTE_KEYS
               for t in ((node.get("spec") or {}).get("taints") or ()))


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _ready(node: Obj) -> str | None:
    c = oracles.condition(node, "Ready")
    return None if c is None else str(c.get("status"))


def expected_state(not_ready: int, size: int) -> str:
    """Upstream's ComputeZoneState, restated: the oracle's own model of a zone."""
    if not_ready == size and size > 0:
        return FULL
    if not_ready > 2 and not_ready / size >= UNHEALTHY:
        return PARTIAL
    return NORMAL


def expected_qps(state: str, size: int) -> float:
    """Upstream's setLimiterInZone, restated."""
    if state == PARTIAL:
        return SECONDARY_QPS if size > LARGE_CLUSTER else 0.0
    return HEALTHY_QPS


# -- what the run observed --------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ZoneView:
    """One zone in one debug sample."""

    state: str
    qps: float
    queue: tuple[str, ...]
    added: tuple[float, ...] = field(default=(), compare=False)
    """Each queued node's `addedAt` (not compared: a re-add alone is not a change)."""
    since: float | None = field(default=None, compare=False)
    """When the controller put the zone in this state (its clock), if the document says."""


@dataclass(frozen=True, kw_only=True)
class Sample:
    """One debug document: the controller-manager's cluster time, master disruption, its zones."""

    time: float
    master: bool
    zones: Mapping[str, ZoneView]
    master_since: float | None = None


@dataclass(kw_only=True)
class NodeFacts:
    """A node's history as the oracle reconstructs it (cluster times of the controller's writes)."""

    name: str
    zone: str
    crossed: float | None = None
    """Ready became Unknown: the history's time of the controller's status write."""
    crossed_from: float | None = None
    """... and the condition's `lastTransitionTime`: the controller's clock when it decided,
    in whole seconds (the decision came at or after it, and before the write)."""
    tainted: float | None = None
    """A NoExecute unreachable/not-ready taint first written (history time)."""
    taint_added: float | None = None
    """That taint's `timeAdded`: the controller's clock when it decided, in whole seconds."""
    evicted: float | None = None
    """The legacy evictor's `DeletingAllPods` event time (its clock when it took the node)."""
    untainted: float | None = None
    """That taint removed again."""
    deletes: dict[str, float] = field(default_factory=dict)
    """Pod name → the controller's first successful DELETE of it."""
    queued: float | None = None
    """When the node joined its zone queue at the earliest: the first `addedAt` the debug
    document showed, else one monitor period after the crossing."""
    queued_by: float | None = None
    """... and at the latest: that `addedAt`, else the end of the next monitor pass's writes (on a
    busy machine one pass can span many seconds of cluster time, see `Observer.pass_end`)."""

    @property
    def processed(self) -> float | None:
        """When the zone queue took the node, on the controller's clock where it says.

        Taint path: the decision lies in [timeAdded, timeAdded + 1) and not after the write:
        the middle of that interval (off by at most 0.5 s, whatever the write's latency).
        Legacy path: the `DeletingAllPods` event; without it the first pod DELETE.
        """
        if self.tainted is not None:
            if self.taint_added is None:
                return self.tainted
            return (self.taint_added + min(self.tainted, self.taint_added + 1.0)) / 2
        if self.evicted is not None:
            return self.evicted
        return min(self.deletes.values()) if self.deletes else None

    @property
    def how(self) -> str:
        """How the node was processed, in words."""
        if self.processed is None:
            return "-"
        return "NoExecute taint" if self.tainted is not None else "pods deleted by the evictor"


class Observer:
    """The node watch and the debug poll, running in the background of the scenario."""

    def __init__(self, ctx: ScenarioContext, zones: Mapping[str, Sequence[str]]) -> None:
        self.ctx = ctx
        self.zone_of = {n: z for z, ns in zones.items() for n in ns}
        self.versions: dict[str, list[Obj]] = {n: [] for n in self.zone_of}
        self.samples: list[Sample] = []
        self.errors: list[str] = []
        self.stalls: list[tuple[float, float]] = []
        """(from, to) cluster times with no answer from the apiserver and the controller-manager
        for more than `STALL`: the mesh (or the machine) stood still while the clock ran on."""
        self._indexed = 0
        self._writes: dict[tuple[str, int], dict[str, Any]] = {}
        self._deletes: dict[str, dict[str, float]] = {n: {} for n in self.zone_of}
        self._cm_writes: list[float] = []

    async def run(self) -> None:
        """Until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._watch())
            tg.create_task(self._poll())

    def _keep(self, node: Obj) -> None:
        vs = self.versions.get(name_of(node))
        if vs is not None and (not vs or rv_of(node) > rv_of(vs[-1])):
            vs.append(node)

    async def _watch(self) -> None:
        while True:
            try:
                lst = await self.ctx.client.list(NODES)
                for n in lst.get("items") or ():
                    self._keep(n)
                rv = str((lst.get("metadata") or {}).get("resourceVersion") or "0")
                async with contextlib.aclosing(self.ctx.client.watch(NODES, resource_version=rv)) as events:
                    async for ev in events:
                        if ev.type in ("ADDED", "MODIFIED"):
                            self._keep(ev.object)
                        elif ev.type == "ERROR":
                            break
            except ApiError as exc:  # 410 Gone, a broken stream, a 5xx: relist and watch again
                self.errors.append(f"node watch restarted: {type(exc).__name__}")
            await asyncio.sleep(POLL_WALL)

    async def _poll(self) -> None:
        last_beat: float | None = None
        while True:
            # The apiserver's clock endpoint answers (unrecorded, cheap): a heartbeat of the mesh.
            with contextlib.suppress(Exception):
                await self.ctx.client.get_clock()
            doc = await self.ctx.debug(CM, DEBUG_PATH)
            now = self.ctx.now()
            if doc is not None:
                if last_beat is not None and now - last_beat > STALL:
                    self.stalls.append((last_beat, now))
                last_beat = now
            nl = doc.get("nodeLifecycle") if isinstance(doc, dict) else None
            if isinstance(nl, dict) and isinstance(doc, dict):
                zones = {}
                for display, z in (nl.get("zones") or {}).items():
                    entries = list(z.get("queue") or ())
                    zones[str(display).rpartition("/")[2]] = ZoneView(
                        state=str(z.get("state")), qps=float(z.get("qps") or 0.0),
                        queue=tuple(str(e.get("node")) for e in entries),
                        added=tuple(float(e.get("addedAt") or 0.0) for e in entries),
                        since=_float(z.get("stateSince")))
                s = Sample(time=float(doc.get("now") or self.ctx.now()), master=bool(nl.get("masterDisruption")),
                           zones=zones, master_since=_float(nl.get("masterDisruptionSince")))
                last = self.samples[-1] if self.samples else None
                if last is None or (last.master, last.zones) != (s.master, s.zones):
                    self.samples.append(s)
            await asyncio.sleep(POLL_WALL)

    def stalled(self, start: float, end: float) -> float:
        """Cluster seconds of (start, end) during which the mesh stood still."""
        return sum(max(0.0, min(end, hi) - max(start, lo)) for lo, hi in self.stalls)

    def entered(self, zone: str, state: str, *, master: bool = False) -> float | None:
        """When the controller says it put `zone` in `state` (or entered master disruption)."""
        s = self.seen(zone, state, master=master)
        if s is None:
            return None
        return s.master_since if master else s.zones[zone].since

    def seen(self, zone: str, state: str, *, master: bool = False) -> Sample | None:
        """The first sample showing `zone` in `state` (and master disruption as asked)."""
        for s in self.samples:
            z = s.zones.get(zone)
            if z is not None and z.state == state and s.master == master:
                return s
        return None

    def _index(self, records: Sequence[dict[str, Any]]) -> None:
        """Index the history's node writes and the controller's pod DELETEs (incrementally)."""
        for r in records[self._indexed:]:
            if r.get("type") == "write" and r.get("resource") == "nodes":
                self._writes[(str(r.get("key")), int(r.get("rv") or 0))] = r
            if r.get("type") == "write" and r.get("resource") in ("nodes", "pods") \
                    and r.get("component") == "controller_manager":
                self._cm_writes.append(float(r["time"]))
            elif (r.get("type") == "request" and r.get("verb") == "delete"
                  and r.get("component") == "controller_manager" and int(r.get("code") or 0) < 300):
                pod_name = str(r.get("key", "")).rpartition("/pods/")[2]
                for prefix in ("keep-", "fast-"):
                    node = pod_name.removeprefix(prefix) if pod_name.startswith(prefix) else ""
                    if node in self._deletes:
                        self._deletes[node].setdefault(pod_name, float(r["time"]))
        self._indexed = len(records)

    def facts(self, records: Sequence[dict[str, Any]], events: Sequence[Obj] = ()) -> dict[str, NodeFacts]:
        """Every node's crossing, taint, untaint and pod-deletion times (see `NodeFacts`).

        `records` is the history so far (`ScenarioContext.records`, which only grows); `events`
        the Events, for the legacy evictor's decision times.
        """
        self._index(records)
        out: dict[str, NodeFacts] = {}
        for n, zone in self.zone_of.items():
            f = NodeFacts(name=n, zone=zone, deletes=dict(self._deletes[n]))
            prev: Obj | None = None
            for v in self.versions[n]:
                w = self._writes.get((n, rv_of(v)))
                if w is not None and w.get("component") == "controller_manager":
                    t = float(w["time"])
                    if f.crossed is None and _ready(v) == "Unknown" and (prev is None or _ready(prev) != "Unknown"):
                        f.crossed = t
                        f.crossed_from = time_or_none((oracles.condition(v, "Ready") or {}).get("lastTransitionTime"))
                    if f.tainted is None and _has_noexecute(v):
                        f.tainted = t
                        f.taint_added = min((x for tt in (v.get("spec") or {}).get("taints") or ()
                                             if tt.get("effect") == "NoExecute"
                                             and (x := time_or_none(tt.get("timeAdded"))) is not None), default=None)
                    elif f.tainted is not None and f.untainted is None and not _has_noexecute(v):
                        f.untainted = t
                prev = v
            out[n] = f
        for e in events:
            inv = e.get("involvedObject") or {}
            if e.get("reason") == "DeletingAllPods" and inv.get("kind") == "Node" and inv.get("name") in out:
                f = out[str(inv["name"])]
                t_ev = time_or_none(e.get("eventTime")) or time_or_none(e.get("firstTimestamp"))
                if t_ev is not None and (f.evicted is None or t_ev < f.evicted):
                    f.evicted = t_ev
        # A monitor pass writes one node after the other (each crossing: its status, its pods'
        # Ready conditions, its NoSchedule taint). The next pass starts one period after it
        # ended and queues the crossed node at its turn, after that pass's writes for the nodes
        # before it: so the node is queued by the end of the next pass's writes at the latest.
        for f in out.values():
            if f.crossed is None:
                continue
            seen = self.first_added(f)
            f.queued = (f.crossed_from or f.crossed) + PERIOD if seen is None else seen
            f.queued_by = self.pass_end(self.pass_end(f.crossed) + PERIOD) if seen is None else seen
        return out

    def pass_end(self, start: float) -> float:
        """The end of the controller's writes chained from `start` with gaps under a monitor period.

        An upper bound for the end of a monitor pass that wrote at `start` (or started then):
        other controllers' writes can only lengthen the chain, and a stall of the mesh in a gap
        does not end it (nothing ran).
        """
        writes = self._cm_writes  # in history order, which is time order
        end = start
        for t_write in writes[bisect.bisect_left(writes, start):]:
            if t_write >= end + 0.9 * PERIOD + self.stalled(end, t_write):
                break
            end = t_write
        return end

    def first_added(self, f: NodeFacts) -> float | None:
        """The earliest `addedAt` of `f`'s node the debug document showed before it was processed.

        Only the first add counts (a node processed at once may never be seen queued: None);
        re-adds every monitor pass, or after master disruption, come later.
        """
        best: float | None = None
        for s in self.samples:
            if f.processed is not None and s.time > f.processed:
                break
            for z in s.zones.values():
                for n, added in zip(z.queue, z.added, strict=False):
                    if n == f.name and added and (f.crossed is None or added >= f.crossed) and (
                            best is None or added < best):
                        best = added
        return best


# -- the oracle's arithmetic ------------------------------------------------------------------


@dataclass(kw_only=True)
class Judge:
    """Phase checks: each appends a line of evidence; a failed one also a problem."""

    t0: float
    early: float
    """How much earlier than the bucket allows a write may appear (request-latency jitter)."""
    late: float
    """How much later it may appear: one eviction-pass period plus loop and network latency."""
    step: float
    """How much later each further token of a backlog may come (the bucket refills from the
    moment a token was taken, and the eviction pass picks a due token up one period late)."""
    evidence: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def t(self, x: float | None) -> str:
        """A cluster time relative to the start."""
        return "never" if x is None else f"t={x - self.t0:.1f}s"

    def check(self, phase: str, ok: bool, line: str) -> bool:
        """Record one check."""
        self.evidence.append(f"{phase}: {line}{'' if ok else '  <-- OFF'}")
        if not ok:
            self.problems.append(f"{phase}: {line}")
        return ok

    def at(self, phase: str, what: str, actual: float | None, expected: float, *, by: float | None = None,
           late: float | None = None) -> bool:
        """`actual` in [expected - early, (by or expected) + late]."""
        lo, hi = expected - self.early, max(expected, by or expected) + (self.late if late is None else late)
        ok = actual is not None and lo <= actual <= hi
        want = self.t(expected) if by is None or by <= expected else f"{self.t(expected)} to {self.t(by)}"
        return self.check(phase, ok, f"{what} at {self.t(actual)} (expected {want}, window "
                                     f"[{lo - self.t0:.1f}, {hi - self.t0:.1f}])")


_NO_ZONE: Final = ZoneView(state="", qps=0.0, queue=())


def wasted_between(samples: Sequence[Sample], zone: str, facts: Mapping[str, NodeFacts], start: float,
                   end: float) -> list[str]:
    """Nodes seen back in `zone`'s queue in (start, end) after they had been processed.

    Each spends one token on a no-op (see the module docstring).
    """
    out: list[str] = []
    for s in samples:
        if not start < s.time < end:
            continue
        z = s.zones.get(zone, _NO_ZONE)
        for n, added in zip(z.queue, z.added, strict=False):
            f = facts.get(n)
            if f is None or f.processed is None:
                continue
            # A fresh entry, added after the node was surely processed: after the taint's
            # write, or the evictor's last DELETE. Until then an untainted node is re-added
            # every monitor pass, and the entry being processed stays queued until the
            # action (several writes on the legacy path) returns.
            done = f.tainted if f.tainted is not None else max((f.processed, *f.deletes.values()))
            if added > done and n not in out:
                out.append(n)
    return out


def model_at(facts: Mapping[str, NodeFacts], t: float) -> tuple[bool, dict[str, tuple[str, float]]]:
    """(master disruption, zone → (state, qps)) the flags call for at cluster time `t`."""
    states: dict[str, tuple[str, float]] = {}
    for zone, size in SIZES.items():
        down = sum(1 for f in facts.values() if f.zone == zone and f.crossed is not None and f.crossed <= t)
        st = expected_state(down, size)
        states[zone] = (st, expected_qps(st, size))
    master = all(st == FULL for st, _ in states.values())
    if master:
        states = {z: (FULL, 0.0) for z in states}
    return master, states


# -- the scenario -----------------------------------------------------------------------------


class ZoneDisruption(Scenario):
    """See the module docstring."""

    name: ClassVar[str] = "zone-disruption"
    summary: ClassVar[str] = ("zone states and eviction rates (normal, partial small and large, full, master "
                              "disruption): the zone queue taints (fixed) or deletes every pod, tolerations "
                              "ignored (buggy)")
    upstream: ClassVar[tuple[str, ...]] = ("kubernetes#28832", "kubernetes#28897", "kubernetes#41133",
                                           "kubernetes#115840")
    bugs: ClassVar[tuple[str, ...]] = ("legacy-pod-eviction",)
    profile: ClassVar[str] = "1.7"
    shape: ClassVar[MeshShape] = MeshShape(
        nodes=9, zones=(ZONE_A, ZONE_B), kubelets=2, clock_rate=100.0,
        extra_args={"controller_manager": [
            "--node-monitor-grace-period", f"{GRACE:g}s", "--node-monitor-period", f"{PERIOD:g}s",
            "--pod-eviction-timeout", f"{EVICTION_TIMEOUT:g}s",
            "--node-eviction-rate", f"{HEALTHY_QPS:g}", "--secondary-node-eviction-rate", f"{SECONDARY_QPS:g}",
            "--unhealthy-zone-threshold", f"{UNHEALTHY:g}", "--large-cluster-size-threshold", str(LARGE_CLUSTER)]})
    deadline: ClassVar[float] = 800.0

    async def run(self, ctx: ScenarioContext) -> Verdict:
        """Set up, walk through the phases, judge (see the module docstring)."""
        zones = await self._zones(ctx)
        a = ctx.rng.sample(zones[ZONE_A], k=len(zones[ZONE_A]))
        b = ctx.rng.sample(zones[ZONE_B], k=len(zones[ZONE_B]))
        a_normal, a_partial, a_last = a[:2], a[2:4], a[4]
        b_partial, b_full = b[:3], b[3]
        ctx.focus("nodes", *a, *b)
        ctx.focus("pods", f"default/keep-{a_normal[0]}", f"default/fast-{a_normal[0]}", f"default/keep-{b_full}")
        await self._pods(ctx, [*a, *b])
        obs = Observer(ctx, zones)
        task = asyncio.create_task(obs.run(), name="zone-disruption:observer")
        try:
            if not await ctx.until(lambda: _async(all(obs.seen(z, NORMAL) for z in SIZES)), within=30):
                raise ScenarioError("the controller-manager's debug document never showed both zones Normal")
            trouble = await self._phases(ctx, obs, a_normal=a_normal, a_partial=a_partial, a_last=a_last,
                                         b_partial=b_partial, b_full=b_full)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        records = await ctx.records()
        events = list((await ctx.client.list(EVENTS, namespace="default")).get("items") or ())
        facts = obs.facts(records, events)
        return self._judge(ctx, obs, facts, events, trouble=trouble, a_normal=a_normal, a_partial=a_partial,
                           a_last=a_last, b_partial=b_partial, b_full=b_full)

    async def _zones(self, ctx: ScenarioContext) -> dict[str, list[str]]:
        zones: dict[str, list[str]] = {z: [] for z in SIZES}
        for n in (await ctx.client.list(NODES)).get("items") or ():
            z = labels_of(n).get(ZONE_LABEL, "")
            if z in zones:
                zones[z].append(name_of(n))
        if {z: len(ns) for z, ns in zones.items()} != dict(SIZES):
            raise ScenarioError(f"expected zones {dict(SIZES)}, found {zones}")
        return {z: sorted(ns) for z, ns in zones.items()}

    async def _pods(self, ctx: ScenarioContext, nodes: list[str]) -> None:
        await asyncio.gather(*(
            ctx.client.create(PODS, pod(f"{kind}-{n}", node_name=n, tolerations=_tolerations(seconds)),
                              namespace="default")
            for n in nodes for kind, seconds in (("keep", None), ("fast", FAST_TOLERATION))))
        ctx.say(f"created keep-<node> (tolerates unreachable/not-ready forever) and fast-<node> (for "
                f"{FAST_TOLERATION} s) on each of the {len(nodes)} nodes")

        async def running() -> bool:
            pods = await ctx.pods()
            return len(pods) == 2 * len(nodes) and all(oracles.is_running(p) for p in pods)

        if not await ctx.until(running, within=60, poll=0.05):
            raise ScenarioError("the pods never all ran")

    async def _power_off(self, ctx: ScenarioContext, nodes: Sequence[str], label: str) -> None:
        t = ctx.now()
        await asyncio.gather(*(ctx.power_off(n) for n in nodes))
        ctx.mark(label, lane="scenario", at=t)

    async def _wait(self, ctx: ScenarioContext, obs: Observer, what: str, within: float,
                    cond: Callable[[dict[str, NodeFacts]], object]) -> str | None:
        """Wait for `cond(facts)`; a problem line when it did not hold in time."""

        async def probe() -> bool:
            return bool(cond(obs.facts(await ctx.records())))

        if await ctx.until(probe, within=within, poll=0.05):
            ctx.say(what)
            return None
        return f"{what}: not within {within:.0f} s"

    async def _phases(self, ctx: ScenarioContext, obs: Observer, *, a_normal: list[str], a_partial: list[str],
                      a_last: str, b_partial: list[str], b_full: str) -> str | None:
        """Drive the four phases; the first wait that fails ends the run (its line is returned)."""
        crossing = GRACE + 3 * PERIOD + 10
        await self._power_off(ctx, [*a_normal, *b_partial], "phase 1: 2/5 of zone-a, 3/4 of zone-b off")
        trouble = await self._wait(
            ctx, obs, "phase 1: zone-b PartialDisruption, zone-a's two nodes processed",
            crossing + 2 / HEALTHY_QPS + 30,
            lambda f: obs.seen(ZONE_B, PARTIAL) and all(f[n].processed for n in a_normal))
        if trouble:
            return trouble
        await self._power_off(ctx, [b_full], "phase 2: the last zone-b node off")
        trouble = await self._wait(
            ctx, obs, "phase 2: zone-b FullDisruption, all its nodes processed",
            crossing + 6 / HEALTHY_QPS + 30,
            lambda f: obs.seen(ZONE_B, FULL) and all(f[n].processed for n in [*b_partial, b_full]))
        if trouble:
            return trouble
        await self._power_off(ctx, a_partial, "phase 3: 4/5 of zone-a off")
        trouble = await self._wait(
            ctx, obs, "phase 3: zone-a PartialDisruption, both new nodes processed",
            crossing + 2 / SECONDARY_QPS + 30,
            lambda f: obs.seen(ZONE_A, PARTIAL) and all(f[n].processed for n in a_partial))
        if trouble:
            return trouble
        await self._power_off(ctx, [a_last], "phase 4: the last zone-a node off")
        trouble = await self._wait(ctx, obs, "phase 4: master disruption", crossing,
                                   lambda f: obs.seen(ZONE_A, FULL, master=True) is not None)
        if trouble:
            return trouble
        await ctx.sleep(MASTER_WATCH)
        ctx.say(f"watched master disruption for {MASTER_WATCH:.0f} s")
        return None

    # -- the verdict ----------------------------------------------------------------------------

    def _judge(self, ctx: ScenarioContext, obs: Observer, facts: dict[str, NodeFacts], events: Sequence[Obj], *,
               trouble: str | None, a_normal: list[str], a_partial: list[str], a_last: str, b_partial: list[str],
               b_full: str) -> Verdict:
        rate = ctx.clock.rate
        eviction_pass = max(0.1, 0.02 * rate)
        # Processing times are the controller's own clock (within 0.5 s); queue and swap times
        # are bounded below by its clock too. Late: the eviction pass picks a due token up one
        # pass late, and the controller's loop may lag (~30 ms of wall time, seconds of cluster
        # time at a fast clock). Times of writes (taint removals, pod deletions) add their
        # latency, hence `step` per write in a chain.
        j = Judge(t0=ctx.t0, early=1.0 + 0.005 * rate, late=eviction_pass + 1.0 + 0.03 * rate,
                  step=eviction_pass + 0.01 * rate)
        j.evidence.append(f"roles: zone-a normal {a_normal}, partial {a_partial}, last {a_last}; zone-b partial "
                          f"{b_partial}, full {b_full}; slack -{j.early:.1f}/+{j.late:.1f} s at clock rate {rate:g}")
        for f in sorted(facts.values(), key=lambda f: (f.crossed or 1e18, f.name)):
            if f.crossed is not None:
                ctx.mark(f"{f.name} Unknown", lane="controller-manager", at=f.crossed)
            if f.processed is not None:
                ctx.mark(f"{f.name} {'tainted' if f.tainted is not None else 'pods deleted'}",
                         lane="controller-manager", at=f.processed)
            deletes = ", ".join(f"{p} {j.t(t)}" for p, t in sorted(f.deletes.items())) or "none"
            j.evidence.append(f"{f.name} ({f.zone}): Unknown {j.t(f.crossed)}, processed {j.t(f.processed)} ({f.how}), "
                              f"taint removed {j.t(f.untainted)}; controller DELETEs: {deletes}")
        for err in obs.errors[:5]:
            j.evidence.append(err)
        for lo, hi in obs.stalls:
            j.evidence.append(f"no answer from the mesh from {j.t(lo)} to {j.t(hi)} ({hi - lo:.1f} s of cluster time, "
                              f"{(hi - lo) / rate * 1000:.0f} ms of wall time)")
        if trouble is not None:
            return oracles.inconclusive(f"the run did not get through its phases: {trouble}", j.evidence)
        missing = [n for n in [*a_normal, *a_partial, a_last, *b_partial, b_full] if facts[n].crossed is None]
        if missing:
            return oracles.inconclusive(f"no Ready=Unknown write by the controller found for {missing}", j.evidence)
        self._check_states(ctx, obs, facts, j, end=ctx.now())
        self._check_normal(facts, obs, j, a_normal)
        _, f_b = self._check_partial_small(facts, obs, j, b_partial, b_full)
        self._check_full(facts, obs, j, b_partial, b_full, f_b)
        self._check_partial_large(facts, obs, j, a_partial)
        self._check_master(facts, obs, j, a_last, end=ctx.now(), tainting=ctx.mode == "fixed" or any(
            f.tainted is not None for f in facts.values()))
        if j.problems:
            stalled = _stalled(obs, j, rate)
            return dataclasses.replace(
                oracles.inconclusive(f"a phase was off its flags: {j.problems[0]}{stalled}", j.evidence),
                machine_stall=bool(stalled))
        verdict = self._verdict(facts, events, j, a_last, note=_stalled(obs, j, rate))
        if verdict.outcome == "inconclusive" and obs.stalls:
            return dataclasses.replace(verdict, machine_stall=True)
        return verdict

    def _check_states(self, ctx: ScenarioContext, obs: Observer, facts: Mapping[str, NodeFacts], j: Judge, *,
                      end: float) -> None:
        """Every state and rate the controller showed is the one the model calls for.

        Two checks. Entering: when the debug document says since when a zone is in its state
        (the controller's clock at the end of the monitor pass that decided it, after that
        pass's crossing writes), the model evaluated right then must agree: no slack. Holding:
        a sample, kept only when something changed, holds until the next one (the last until
        the end of the run); away from transitions (a crossing's write until the end of the
        pass that wrote it, plus the lateness allowed) it must agree with the model too, so a
        state entered correctly but left too late is caught.
        """
        windows = []
        for f in facts.values():
            if f.crossed is not None:
                lo, hi = f.crossed - j.early, max(f.crossed, (f.queued_by or f.crossed + PERIOD) - PERIOD) + j.late
                windows.append((lo, hi + obs.stalled(lo, hi)))  # a stall inside delays the flip as long

        def quiet(t: float) -> bool:
            return not any(lo <= t <= hi for lo, hi in windows)

        start = next((s.time for s in obs.samples if all(
            (v := s.zones.get(z)) is not None and v.state == NORMAL for z in SIZES)), None)
        seen: set[tuple[str, str, float]] = set()
        bad: list[str] = []
        shown: dict[str, tuple[str, float, bool]] = {}
        exact = 0
        for i, s in enumerate(obs.samples):
            for z, v in s.zones.items():
                if z in SIZES and shown.get(z) != (v.state, v.qps, s.master):
                    shown[z] = (v.state, v.qps, s.master)
                    ctx.mark(f"{z} {'master disruption' if s.master else v.state} qps {v.qps:g}",
                             lane="controller-manager", at=(s.master_since if s.master else v.since) or s.time)
            if start is None or s.time < start:
                continue
            until = obs.samples[i + 1].time if i + 1 < len(obs.samples) else end
            held = [t for t in (s.time, *(hi + 0.01 for _, hi in windows), until - 0.01)
                    if s.time <= t < until and quiet(t)]
            for z, v in s.zones.items():
                if z not in SIZES:
                    continue
                since = s.master_since if s.master else v.since
                entered = [since + 0.001] if since is not None else []
                exact += bool(entered)
                for t in (*entered, *held):
                    master, want = model_at(facts, t)
                    if (v.state, v.qps) != want[z] or s.master != master:
                        bad.append(f"{z} {'(master disruption) ' if s.master else ''}{v.state} qps {v.qps:g} "
                                   f"at {j.t(t)}: the flags call for {'(master disruption) ' if master else ''}"
                                   f"{want[z][0]} qps {want[z][1]:g}")
                        break
                    seen.add((z, "master" if s.master else v.state, v.qps))
        how = ("from the moment the controller entered each state, and while it held" if exact
               else "away from transitions")
        j.check("zone states", not bad, bad[0] if bad else
                f"{len(obs.samples)} debug samples agree with the zone rule and the flags ({how})")
        wanted = [(ZONE_A, NORMAL, HEALTHY_QPS), (ZONE_B, NORMAL, HEALTHY_QPS), (ZONE_B, PARTIAL, 0.0),
                  (ZONE_B, FULL, HEALTHY_QPS), (ZONE_A, PARTIAL, SECONDARY_QPS), (ZONE_A, "master", 0.0),
                  (ZONE_B, "master", 0.0)]
        absent = [w for w in wanted if w not in seen]
        j.check("zone states", not absent, f"never seen: {absent}" if absent else
                "seen: " + ", ".join(f"{z} {st} qps {q:g}" for z, st, q in wanted))

    def _check_normal(self, facts: Mapping[str, NodeFacts], obs: Observer, j: Judge, a_normal: list[str]) -> None:
        phase = "phase 1, zone-a Normal (rate 0.1)"
        first, second = sorted((facts[n] for n in a_normal), key=lambda f: f.processed or 1e18)
        if first.processed is None or second.processed is None or first.queued is None or second.queued is None:
            j.check(phase, False, "a node was never processed")
            return
        j.at(phase, f"{first.name} (queued, a token available) processed", first.processed, first.queued,
             by=first.queued_by)
        w = wasted_between(obs.samples, ZONE_A, facts, first.processed, second.processed)
        token = first.processed + (1 + len(w)) / HEALTHY_QPS
        j.at(phase, f"{second.name} (queued {j.t(second.queued)}; next token {1 / HEALTHY_QPS:.0f} s after "
                    f"{first.name}{f', {len(w)} spent on re-queued {w}' if w else ''}) processed "
                    f"{second.processed - first.processed:.1f} s after {first.name}", second.processed,
             max(second.queued, token), by=max(second.queued_by or second.queued, token))

    def _check_partial_small(self, facts: Mapping[str, NodeFacts], obs: Observer, j: Judge, b_partial: list[str],
                             b_full: str) -> tuple[float, float]:
        phase = "phase 1-2, zone-b PartialDisruption, small zone (rate 0)"
        third = sorted((facts[n] for n in b_partial), key=lambda f: f.crossed or 0.0)[2]
        p_b, f_b = float(third.crossed or 0.0), float(facts[b_full].crossed or 0.0)
        # The limiter is swapped at the end of the pass that wrote the third crossing.
        swap = obs.entered(ZONE_B, PARTIAL) or float(third.queued_by or p_b + PERIOD) - PERIOD
        j.check(phase, f_b - swap >= 2 / HEALTHY_QPS,
                f"PartialDisruption from {j.t(p_b)} (limiter swapped by {j.t(swap)}) to {j.t(f_b)} "
                f"({f_b - swap:.0f} s, room for {int((f_b - swap) * HEALTHY_QPS)} nodes at the normal rate)")
        early = sorted((f for n in b_partial if (f := facts[n]).processed is not None
                        and f.processed <= swap + j.late), key=lambda f: f.processed or 0.0)
        waiting = [n for n in b_partial if n not in {f.name for f in early}]
        j.check(phase, bool(waiting), f"queued while the zone was partially disrupted: {waiting}; processed "
                                      f"before (zone Normal): {[f.name for f in early]}")
        prev: float | None = None
        for f in early:
            ok = f.queued is not None and f.processed is not None and f.processed >= f.queued - j.early and (
                prev is None or f.processed - prev >= 1 / HEALTHY_QPS - j.early)
            j.check(phase, ok, f"{f.name} processed at {j.t(f.processed)} while zone-b was still Normal "
                               f"(queued {j.t(f.queued)})")
            prev = f.processed
        during = [n for n in [*b_partial, b_full] if (p := facts[n].processed) is not None
                  and swap + j.late < p < f_b + 1 / HEALTHY_QPS - j.early]
        j.check(phase, not during, f"processed during PartialDisruption: {during or 'none'}")
        return p_b, f_b

    def _check_full(self, facts: Mapping[str, NodeFacts], obs: Observer, j: Judge, b_partial: list[str],
                    b_full: str, f_b: float) -> None:
        phase = "phase 2, zone-b FullDisruption (rate 0.1, zone-a not fully disrupted)"
        zone_b = [*b_partial, b_full]
        backlog = [n for n in zone_b if (p := facts[n].processed) is None or p > f_b]
        swap = obs.entered(ZONE_B, FULL) or float(facts[b_full].queued_by or f_b + PERIOD) - PERIOD
        j.check(phase, all(facts[n].processed is not None for n in zone_b),
                f"zone-b fully disrupted from {j.t(f_b)} (limiter swapped by {j.t(swap)}) with {len(backlog)} nodes "
                f"to process: {backlog}")
        # The queue as the first token finds it: the monitor pass after the swap re-adds every
        # untainted node (upstream's markNodeForTainting), so its order is that pass's order.
        due = [s.zones[ZONE_B].queue for s in obs.samples
               if f_b < s.time < f_b + 1 / HEALTHY_QPS - j.early and b_full in s.zones.get(ZONE_B, _NO_ZONE).queue]
        queue = list(due[-1]) if due else backlog
        wasted = [n for n in queue if (p := facts[n].processed) is not None and p < f_b]
        if wasted:
            j.evidence.append(f"{phase}: queue at the first token {queue}; {wasted} already processed (re-queued): "
                              "each takes a token")
            order = queue
        else:
            order = sorted(backlog, key=lambda n: facts[n].processed or 1e18)
        for k, n in enumerate(order, start=1):
            if n in wasted:
                continue
            # Drained at the swap (the rate-0 limiter had no token): the k-th token comes k
            # intervals later, each picked up at most one eviction pass late (lateness adds up).
            j.at(phase, f"{n}, token {k} after the swap, processed", facts[n].processed, f_b + k / HEALTHY_QPS,
                 by=swap + k / HEALTHY_QPS, late=j.late + (k - 1) * j.step)

    def _check_partial_large(self, facts: Mapping[str, NodeFacts], obs: Observer, j: Judge,
                             a_partial: list[str]) -> None:
        phase = "phase 3, zone-a PartialDisruption, large zone (rate 0.01)"
        p_a = min(float(facts[n].crossed or 0.0) for n in a_partial)
        first, second = sorted((facts[n] for n in a_partial), key=lambda f: f.processed or 1e18)
        if first.processed is None or second.processed is None or first.queued is None or second.queued is None:
            j.check(phase, False, "a node was never processed")
            return
        w0 = wasted_between(obs.samples, ZONE_A, facts, p_a, first.processed)
        # The healthy limiter had a token (its last one went long ago): the swap keeps it.
        j.at(phase, f"{first.name} (queued {j.t(first.queued)}; zone partially disrupted from {j.t(p_a)}, the "
                    f"token kept through the swap{f', then {len(w0)} spent on {w0}' if w0 else ''}) processed",
             first.processed, max(first.queued, p_a + len(w0) / SECONDARY_QPS),
             by=max(first.queued_by or first.queued, p_a + len(w0) / SECONDARY_QPS))
        w = wasted_between(obs.samples, ZONE_A, facts, first.processed, second.processed)
        token = first.processed + (1 + len(w)) / SECONDARY_QPS
        j.at(phase, f"{second.name} processed {second.processed - first.processed:.1f} s after {first.name} (one "
                    f"token per {1 / SECONDARY_QPS:.0f} s{f', {len(w)} spent on {w}' if w else ''})",
             second.processed, max(second.queued, token), by=max(second.queued_by or second.queued, token))

    def _check_master(self, facts: Mapping[str, NodeFacts], obs: Observer, j: Judge, a_last: str, *, end: float,
                      tainting: bool) -> None:
        phase = "phase 4, master disruption (rate 0 everywhere)"
        m = float(facts[a_last].crossed or 0.0)
        flip = obs.entered(ZONE_A, FULL, master=True) or float(facts[a_last].queued_by or m + PERIOD) - PERIOD
        j.check(phase, end - flip >= MASTER_WATCH - j.early,
                f"every zone fully disrupted from {j.t(m)} (master disruption by {j.t(flip)}); watched until "
                f"{j.t(end)}")
        after = [f"{f.name} at {j.t(f.processed)}" for f in facts.values()
                 if f.processed is not None and f.processed > flip + j.late]
        j.check(phase, not after, f"processed after master disruption began: {after or 'none'} (zone-a alone "
                                  f"fully disrupted would have processed {a_last} about {1 / HEALTHY_QPS:.0f} s later)")
        if tainting:
            kept = [f.name for f in facts.values() if f.tainted is not None and f.untainted is None]
            j.check(phase, not kept, f"NoExecute taints left after master disruption: {kept or 'none'}")
            removed = sorted((f for f in facts.values() if f.untainted is not None), key=lambda f: f.untainted or 0.0)
            for k, f in enumerate(removed):
                # One patch after the other: each may come one write later than the one before.
                j.at(phase, f"{f.name}'s NoExecute taint removed", f.untainted, m, by=flip, late=j.late + k * j.step)

    def _verdict(self, facts: Mapping[str, NodeFacts], events: Sequence[Obj], j: Judge, a_last: str, *,
                 note: str) -> Verdict:
        processed = sorted((f for f in facts.values() if f.processed is not None), key=lambda f: f.processed or 0.0)
        keep_deleted = {f.name: f.deletes[f"keep-{f.name}"] for f in processed if f"keep-{f.name}" in f.deletes}
        stray = [f.name for f in facts.values() if f.processed is None and f.deletes]
        reasons: dict[str, int] = {}
        for e in events:
            if str((e.get("involvedObject") or {}).get("name", "")).startswith("keep-"):
                reasons[str(e.get("reason"))] = reasons.get(str(e.get("reason")), 0) + int(e.get("count") or 1)
        j.evidence.append(f"events on keep pods: {reasons or 'none'}")
        # Buggy mechanism: the node controller's evictor took the node (DeletingAllPods) and
        # deleted keep with the rest, the node never tainted.
        legacy = [f for f in processed if f.tainted is None and f.evicted is not None and f.name in keep_deleted
                  and keep_deleted[f.name] - f.evicted <= j.late + 2 * j.step]
        symptom = bool(keep_deleted)
        healthy = not keep_deleted and not stray and all(f.tainted is not None for f in processed)
        spared = 0
        for f in processed:
            if f.tainted is None:
                continue
            fast = f.deletes.get(f"fast-{f.name}")
            due = f.tainted + FAST_TOLERATION
            if f.untainted is not None and f.untainted < due - j.early:
                ok = fast is None
                spared += ok
                j.check("tolerations", ok, f"fast-{f.name}: taint removed at {j.t(f.untainted)} before its "
                                           f"{FAST_TOLERATION} s ran out: {'spared' if ok else f'deleted {j.t(fast)}'}")
            elif f.untainted is None or f.untainted > due + j.late:
                ok = j.at("tolerations", f"fast-{f.name} deleted ({FAST_TOLERATION} s after its node's taint)", fast,
                          due)
            else:
                ok = True
                j.evidence.append(f"tolerations: fast-{f.name} due {j.t(due)}, taint removed {j.t(f.untainted)}: "
                                  f"too close to call, {'deleted' if fast else 'spared'}")
            healthy = healthy and ok
        if j.problems:
            return oracles.inconclusive(f"the taint path was off: {j.problems[0]}{note}", j.evidence)
        if symptom and len(legacy) != len(keep_deleted):
            return oracles.inconclusive(
                f"keep pods were deleted ({sorted(keep_deleted)}), but not all by the legacy evictor (no taint, "
                f"together with fast): {[f.name for f in legacy]}", j.evidence)
        zones_hit = sorted({facts[n].zone for n in keep_deleted})
        first = processed[0] if processed else None
        return oracles.decide(
            symptom=symptom, healthy=healthy, evidence=j.evidence,
            reproduced=(
                f"reproduced: the zone queues ran at the rates the flags set (0.1/s Normal and FullDisruption, 0 in "
                f"the small PartialDisruption zone, 0.01/s in the large one, 0 in master disruption), but each "
                f"processed node had all its pods deleted by the node controller's evictor, without a taint: "
                f"{len(keep_deleted)} keep pods in {', '.join(zones_hit)} that tolerate unreachable forever were "
                f"deleted together with the fast ones, because one cluster-wide --pod-eviction-timeout "
                f"({EVICTION_TIMEOUT:.0f} s) had passed since their node's last heartbeat; the first, "
                f"keep-{first.name if first else '?'}, at {j.t(first.processed if first else None)}"),
            prevented=(
                f"prevented: the zone queues ran at the rates the flags set (0.1/s Normal and FullDisruption, 0 in "
                f"the small PartialDisruption zone, 0.01/s in the large one, 0 in master disruption, which removed "
                f"every NoExecute taint), and processing a node meant tainting it: {len(processed)} nodes tainted, "
                f"each fast pod deleted when its own {FAST_TOLERATION} s toleration ran out"
                f"{f' ({spared} spared: master disruption removed the taint first)' if spared else ''}, no keep pod "
                f"deleted, {a_last} never tainted"),
            inconclusive=("neither keep pods deleted by the legacy evictor nor the taint path's outcome "
                          "(a processed node without a taint, a pod deleted off its toleration, or a stray deletion: "
                          f"{stray})"))


def _stalled(obs: Observer, j: Judge, rate: float) -> str:
    """A note for an inconclusive summary when the mesh stood still during the run."""
    if not obs.stalls:
        return ""
    lo, hi = max(obs.stalls, key=lambda s: s[1] - s[0])
    return (f" (the mesh did not answer for {hi - lo:.0f} s of cluster time from {j.t(lo)}, "
            f"{(hi - lo) / rate * 1000:.0f} ms of wall time: the machine was too busy for clock rate {rate:g}; "
            "rerun, or lower --clock-rate)")


async def _async(value: bool) -> bool:
    return value

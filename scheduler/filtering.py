"""Filters: which nodes can run a pod, and why the others cannot.

One `PodFilter` is built per pod per cycle. It holds only the checks that concern the pod and the
precomputed inter-pod affinity state, so that checking a node is a handful of attribute reads.
The filters, in upstream's order and with upstream's reasons:

* **NodeName**: `spec.nodeName`, if set, must be the node.
* **NodeUnschedulable**: `spec.unschedulable` keeps pods off unless they tolerate the
  `node.kubernetes.io/unschedulable` taint.
* **NodeConditions**, only with the bug switch `pressure-predicates` (the scheduler before
  TaintNodesByCondition, 1.7's CheckNodeMemoryPressure / CheckNodeDiskPressure and 1.10's
  CheckNodePIDPressure, and CheckNodeCondition's OutOfDisk): OutOfDisk, DiskPressure and
  PIDPressure keep every pod off; MemoryPressure keeps BestEffort pods off and lets Burstable and
  Guaranteed pods on. Condition taints did not exist then, so under the switch the
  `node.kubernetes.io/{memory,disk,pid}-pressure` and `out-of-disk` taints are not consulted either.
* **TaintToleration**: a NoSchedule/NoExecute taint the pod does not tolerate keeps it off. Today
  the scheduler reads no condition: the controller-manager expresses the pressure conditions as
  `node.kubernetes.io/*-pressure` taints (TaintNodesByCondition), which keep off every pod
  without a toleration, whatever its QoS class (the toleration that the PodTolerationRestriction
  admission plugin gives non-BestEffort pods is not added: that plugin is off by default).
* **NodeAffinity**: `nodeSelector` and required node affinity.
* **NodeResourcesFit**: cpu, memory and pod count against allocatable, counting the pods
  nominated to the node with a priority at least the pod's (they will come back for the room).
* **InterPodAffinity**: required affinity and anti-affinity of the pod, and the required
  anti-affinity of pods already placed, over any topology key (hostname, zone, ...).

Inter-pod affinity needs a pass over existing pods before any node is checked (upstream's
PreFilter). Today that pass reads the cache's `AffinityIndex` (`affinity_state_from_index`):
placed pods counted per node by (namespace, labels) group and by distinct required anti-affinity
term, kept incrementally on assume, bind, update and delete, so each group and term is matched
once per cycle instead of each pod; nodes are resolved against the cycle's NodeInfos, which
leaves ghosts out. It counts exactly what a scan of every placed pod of the snapshot counts
(`compute_affinity_state`, kept as the reference and for the switch below). With switch
`ghost-node-affinity-error` it iterates every NodeInfo of the cache, ghosts included, and reads
each existing pod's node from the node informer's store, as 1.7-1.8 did: a pod on a deleted node
raises `NodeNotFoundError` and the whole cycle fails with `node "X" not found` (kubernetes#50813).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubemesh.scheduler.caching import AffinityIndex, NodeInfo
from kubemesh.scheduler.podinfo import PodInfo
from kubemesh.scheduler.queueing import Nominator
from kubemesh.services.model.podutil import tolerates
from kubemesh.services.model.wellknown import (
    TAINT_DISK_PRESSURE,
    TAINT_MEMORY_PRESSURE,
    TAINT_OUT_OF_DISK,
    TAINT_PID_PRESSURE,
    TAINT_UNSCHEDULABLE,
)

Pair = tuple[str, str]
NodeLookup = Callable[[str], Mapping[str, Any] | None]
"""Reads a node by name from the node informer's store (None when absent)."""


class NodeNotFoundError(Exception):
    """A node the scheduler needed is not in its node store (1.7's GetNodeInfo error)."""

    def __init__(self, name: str) -> None:
        super().__init__(f'node "{name}" not found')
        self.name = name


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a node cannot run the pod: the filter, its reasons, and whether preemption can help."""

    plugin: str
    reasons: tuple[str, ...]
    unresolvable: bool = False


F_NODE_NAME = Failure("NodeName", ("node(s) didn't match the requested node name",), True)
F_UNSCHEDULABLE = Failure("NodeUnschedulable", ("node(s) were unschedulable",), True)
F_DISK_PRESSURE = Failure("NodeConditions", ("node(s) had disk pressure",), True)
F_MEMORY_PRESSURE = Failure("NodeConditions", ("node(s) had memory pressure",), True)
F_PID_PRESSURE = Failure("NodeConditions", ("node(s) had pid pressure",), True)
F_OUT_OF_DISK = Failure("NodeConditions", ("node(s) were out of disk space",), True)
PRESSURE_TAINTS = frozenset({TAINT_MEMORY_PRESSURE, TAINT_DISK_PRESSURE, TAINT_PID_PRESSURE, TAINT_OUT_OF_DISK})
F_NODE_AFFINITY = Failure("NodeAffinity", ("node(s) didn't match Pod's node affinity/selector",), True)
F_EXISTING_ANTI = Failure("InterPodAffinity", ("node(s) didn't satisfy existing pods anti-affinity rules",))
F_ANTI = Failure("InterPodAffinity", ("node(s) didn't match pod anti-affinity rules",))
F_AFFINITY = Failure("InterPodAffinity", ("node(s) didn't match pod affinity rules",), True)
F_GHOST = Failure("NodeName", ("node(s) were deleted",), True)


def _taint_failure(taint: Mapping[str, Any]) -> Failure:
    value = taint.get("value") or ""
    shown = f"{{{taint.get('key', '')}: {value}}}" if value else f"{{{taint.get('key', '')}}}"
    return Failure("TaintToleration", (f"node(s) had untolerated taint {shown}",), True)


class AffinityState:
    """Topology pair counts of the inter-pod affinity pre-pass (upstream's preFilterState)."""

    __slots__ = ("_blocked", "affinity", "anti", "existing_anti", "pod")

    def __init__(self, pod: PodInfo) -> None:
        self.pod = pod
        self._blocked: tuple[tuple[tuple[str, frozenset[str]], ...], tuple[tuple[str, frozenset[str]], ...]] | None
        self._blocked = None
        """`existing_anti` and `anti` as (topology key, values with a count) per key, built on the
        first check and dropped by `update`: a node is then checked with one lookup per key."""
        self.existing_anti: dict[Pair, int] = {}
        """Pairs where a placed pod's required anti-affinity term matches the incoming pod."""
        self.anti: dict[Pair, int] = {}
        """Pairs holding placed pods that the incoming pod's anti-affinity terms select."""
        self.affinity: dict[Pair, int] = {}
        """Pairs holding placed pods that match all of the incoming pod's affinity terms."""

    def copy(self) -> AffinityState:
        """An independent copy (preemption's what-if removes pods from it)."""
        c = AffinityState(self.pod)
        c.existing_anti = dict(self.existing_anti)
        c.anti = dict(self.anti)
        c.affinity = dict(self.affinity)
        return c

    @property
    def empty(self) -> bool:
        """Whether no check can fail because of other pods."""
        return not (self.existing_anti or self.anti or self.pod.has_required_affinity)

    def update(self, existing: PodInfo, labels: Mapping[str, str], delta: int) -> None:
        """Count (delta=1) or uncount (delta=-1) one placed pod on a node with `labels`."""
        self._blocked = None
        pod = self.pod
        for term in existing.anti_affinity_terms:
            value = labels.get(term.topology_key)
            if value is not None and term.matches(pod):
                _bump(self.existing_anti, (term.topology_key, value), delta)
        for term in pod.anti_affinity_terms:
            value = labels.get(term.topology_key)
            if value is not None and term.matches(existing):
                _bump(self.anti, (term.topology_key, value), delta)
        if pod.affinity_terms and all(t.matches(existing) for t in pod.affinity_terms):
            for term in pod.affinity_terms:
                value = labels.get(term.topology_key)
                if value is not None:
                    _bump(self.affinity, (term.topology_key, value), delta)

    def anti_only(self) -> tuple[tuple[str, frozenset[str], Failure], ...] | None:
        """`check` as (topology key, blocked values, failure) triples, in its order, or None.

        None when the incoming pod has required affinity terms; without them nothing else can fail.
        """
        if self.pod.affinity_terms:
            return None
        blocked = self._blocked
        if blocked is None:
            blocked = self._blocked = (_by_key(self.existing_anti), _by_key(self.anti))
        existing_anti, anti = blocked
        return (*((key, values, F_EXISTING_ANTI) for key, values in existing_anti),
                *((key, values, F_ANTI) for key, values in anti))

    def check(self, labels: Mapping[str, str]) -> Failure | None:
        """The InterPodAffinity filter for a node with these labels."""
        blocked = self._blocked
        if blocked is None:
            blocked = self._blocked = (_by_key(self.existing_anti), _by_key(self.anti))
        existing_anti, anti = blocked
        for key, values in existing_anti:
            value = labels.get(key)
            if value is not None and value in values:
                return F_EXISTING_ANTI
        for key, values in anti:
            # Only the incoming pod's own terms put pairs here, so every key is one of its terms'.
            value = labels.get(key)
            if value is not None and value in values:
                return F_ANTI
        pod = self.pod
        if pod.affinity_terms:
            pods_exist = True
            for term in pod.affinity_terms:
                value = labels.get(term.topology_key)
                if value is None:
                    return F_AFFINITY
                if self.affinity.get((term.topology_key, value), 0) <= 0:
                    pods_exist = False
            # The first pod of a group that selects itself may go anywhere its topology keys
            # exist; otherwise a self-affine group could never start.
            if not pods_exist and (self.affinity or not all(t.matches(pod) for t in pod.affinity_terms)):
                return F_AFFINITY
        return None


def _by_key(counts: Mapping[Pair, int]) -> tuple[tuple[str, frozenset[str]], ...]:
    keys: dict[str, set[str]] = {}
    for (key, value), n in counts.items():
        if n > 0:
            keys.setdefault(key, set()).add(value)
    return tuple((key, frozenset(values)) for key, values in keys.items())


def _bump(counts: dict[Pair, int], pair: Pair, delta: int) -> None:
    n = counts.get(pair, 0) + delta
    if n > 0:
        counts[pair] = n
    else:
        counts.pop(pair, None)


def compute_affinity_state(pod: PodInfo, nodes: Sequence[NodeInfo], *, any_required_anti: bool,
                           ghost_bug: bool = False, all_nodes: Sequence[NodeInfo] = (),
                           node_lookup: NodeLookup | None = None) -> AffinityState | None:
    """The inter-pod affinity pre-pass; None when nothing can fail for this pod.

    `nodes` is the cycle's snapshot. With `ghost_bug`, the pass iterates `all_nodes` (the cache's
    NodeInfos, ghosts included) and reads each considered pod's node from `node_lookup`, raising
    `NodeNotFoundError` when it is missing, as 1.7-1.8's affinity metadata did. Pods are considered
    as 1.7's priority function did: every pod when the incoming pod has (anti-)affinity, otherwise
    the pods that have some.
    """
    if ghost_bug:
        lookup = node_lookup or (lambda _name: None)
        state = AffinityState(pod)
        for ni in all_nodes:
            pods = ni.pods if pod.has_affinity else ni.pods_with_affinity
            for existing in list(pods.values()):
                node = lookup(existing.node_name)
                if node is None:
                    raise NodeNotFoundError(existing.node_name)
                labels = (node.get("metadata") or {}).get("labels") or {}
                state.update(existing, labels, 1)
        return None if state.empty else state
    if not pod.has_required_affinity and not any_required_anti:
        return None
    state = AffinityState(pod)
    for ni in nodes:
        labels = ni.labels
        if pod.has_required_affinity:
            for existing in ni.pods.values():
                state.update(existing, labels, 1)
        else:
            for existing in ni.pods_with_required_anti_affinity.values():
                state.update(existing, labels, 1)
    return None if state.empty else state


def affinity_state_from_index(pod: PodInfo, index: AffinityIndex, nodes: Mapping[str, NodeInfo], *,
                              any_required_anti: bool) -> AffinityState | None:
    """The inter-pod affinity pre-pass from the cache's incremental index; None when nothing can fail.

    Counts exactly what `compute_affinity_state` counts over the snapshot `nodes` (by name; a node
    absent from it, or a ghost, contributes nothing), but matches each distinct anti-affinity term
    of placed pods and each (namespace, labels) group of placed pods once, not each pod: the work
    is proportional to the distinct terms and groups and the nodes holding matching pods.
    """
    if not pod.has_required_affinity and not any_required_anti:
        return None
    state = AffinityState(pod)
    get_node = nodes.get
    existing_anti = state.existing_anti
    for term, per_node in index.anti_terms.items():
        if not term.matches(pod):
            continue
        key = term.topology_key
        for name, n in per_node.items():
            ni = get_node(name)
            if ni is None or ni.node is None:
                continue
            value = ni.labels.get(key)
            if value is not None:
                pair = (key, value)
                existing_anti[pair] = existing_anti.get(pair, 0) + n
    if pod.has_required_affinity:
        anti, affinity = state.anti, state.affinity
        anti_terms, affinity_terms = pod.anti_affinity_terms, pod.affinity_terms
        for member, per_node in index.groups.values():
            anti_keys = [t.topology_key for t in anti_terms if t.matches(member)]
            affinity_keys = ([t.topology_key for t in affinity_terms]
                             if affinity_terms and all(t.matches(member) for t in affinity_terms) else [])
            if not anti_keys and not affinity_keys:
                continue
            for name, n in per_node.items():
                ni = get_node(name)
                if ni is None or ni.node is None:
                    continue
                labels = ni.labels
                for key in anti_keys:
                    value = labels.get(key)
                    if value is not None:
                        pair = (key, value)
                        anti[pair] = anti.get(pair, 0) + n
                for key in affinity_keys:
                    value = labels.get(key)
                    if value is not None:
                        pair = (key, value)
                        affinity[pair] = affinity.get(pair, 0) + n
    return None if state.empty else state


class PodFilter:
    """Every filter for one pod in one cycle (see the module docstring)."""

    __slots__ = ("affinity", "nominator", "pod", "pressure_predicates")

    def __init__(self, pod: PodInfo, *, affinity: AffinityState | None = None,
                 nominator: Nominator | None = None, pressure_predicates: bool = False) -> None:
        self.pod = pod
        self.affinity = affinity
        self.nominator = nominator if nominator is not None and len(nominator) else None
        self.pressure_predicates = pressure_predicates
        """The bug switch `pressure-predicates`: conditions, not condition taints (module docstring)."""

    def _taints(self, ni: NodeInfo) -> Failure | None:
        pod = self.pod
        for taint in ni.taints:
            if tolerates(pod.tolerations, taint):
                continue
            if self.pressure_predicates and taint.get("key") in PRESSURE_TAINTS:
                continue
            return _taint_failure(taint)
        return None

    def check(self, ni: NodeInfo, *, affinity: AffinityState | None = None) -> Failure | None:
        """None if the pod fits the node, else the first filter that rejects it."""
        pod = self.pod
        if ni.node is None:
            return F_GHOST
        if pod.node_name and pod.node_name != ni.name:
            return F_NODE_NAME
        if ni.unschedulable and not tolerates(
                pod.tolerations, {"key": TAINT_UNSCHEDULABLE, "effect": "NoSchedule"}):
            return F_UNSCHEDULABLE
        if self.pressure_predicates:
            if ni.out_of_disk:
                return F_OUT_OF_DISK
            if ni.disk_pressure:
                return F_DISK_PRESSURE
            if ni.pid_pressure:
                return F_PID_PRESSURE
            if ni.memory_pressure and pod.best_effort:
                return F_MEMORY_PRESSURE
        if ni.taints:
            f = self._taints(ni)
            if f is not None:
                return f
        if pod.has_node_constraints and not pod.matches_node_selector(ni.name, ni.labels):
            return F_NODE_AFFINITY
        f = self._resources(ni)
        if f is not None:
            return f
        state = affinity if affinity is not None else self.affinity
        if state is not None:
            return state.check(ni.labels)
        return None

    def _resources(self, ni: NodeInfo) -> Failure | None:
        pod = self.pod
        cpu = ni.req_cpu + pod.cpu
        mem = ni.req_mem + pod.mem
        count = len(ni.pods) + 1
        if self.nominator is not None and self.nominator.has_nominations(ni.name):
            # Pods nominated here with at least our priority will come back for the room that
            # preemption freed for them: count them as if they were already placed.
            for other in self.nominator.pods_for_node(ni.name):
                if other.key != pod.key and other.priority >= pod.priority and other.key not in ni.pods:
                    cpu += other.cpu
                    mem += other.mem
                    count += 1
        if count <= ni.alloc_pods and (cpu <= ni.alloc_cpu or pod.cpu == 0) and (
                mem <= ni.alloc_mem or pod.mem == 0):
            return None
        reasons: list[str] = []
        if count > ni.alloc_pods:
            reasons.append("Too many pods")
        if pod.cpu and cpu > ni.alloc_cpu:
            reasons.append("Insufficient cpu")
        if pod.mem and mem > ni.alloc_mem:
            reasons.append("Insufficient memory")
        return Failure("NodeResourcesFit", tuple(reasons))


def num_feasible_nodes_to_find(num_nodes: int, *, percentage: int = 0, minimum: int = 100) -> int:
    """How many feasible nodes to find before scoring (upstream's numFeasibleNodesToFind).

    Small clusters are searched entirely; otherwise `percentage` of the nodes (adaptive when 0:
    50% minus 1% per 125 nodes, at least 5%), but never fewer than `minimum`.
    """
    if num_nodes < minimum or percentage >= 100:
        return num_nodes
    adaptive = percentage
    if adaptive <= 0:
        adaptive = max(50 - num_nodes // 125, 5)
    n = num_nodes * adaptive // 100
    return max(n, minimum)


@dataclass(slots=True)
class FilterResult:
    """The outcome of one filtering pass."""

    feasible: list[NodeInfo]
    failures: dict[str, Failure]
    processed: int


def find_feasible(pod_filter: PodFilter, nodes: Sequence[NodeInfo], *, want: int,
                  start: int = 0) -> FilterResult:
    """Check nodes round-robin from `start` until `want` feasible ones are found or all are checked."""
    feasible: list[NodeInfo] = []
    failures: dict[str, Failure] = {}
    total = len(nodes)
    check = pod_filter.check
    processed = 0
    pod = pod_filter.pod
    # The fast path: for a pod without a nodeName or node constraints, with no nomination in the
    # cycle and without the pressure-predicates switch, a node that is neither a ghost nor
    # unschedulable nor tainted reaches `check`'s last two filters only (resources, then inter-pod
    # affinity); those are done here without the calls, and anything else goes through `check`,
    # so every answer is `check`'s. This loop is most of a cycle's CPU at 1,000 nodes.
    fast = (not pod.node_name and not pod.has_node_constraints and pod_filter.nominator is None
            and not pod_filter.pressure_predicates)
    pod_cpu, pod_mem = pod.cpu, pod.mem
    state = pod_filter.affinity
    affinity_check = state.check if state is not None else None
    # Required anti-affinity only (the benchmark's and the common case): the pairs inline.
    blocked = state.anti_only() if state is not None else ()
    if blocked is not None:
        affinity_check = None
    for i in range(total):
        ni = nodes[(start + i) % total]
        processed += 1
        if fast and ni.node is not None and not ni.unschedulable and not ni.taints:
            if ((len(ni.pods) < ni.alloc_pods) and (ni.req_cpu + pod_cpu <= ni.alloc_cpu or pod_cpu == 0)
                    and (ni.req_mem + pod_mem <= ni.alloc_mem or pod_mem == 0)):
                f = None
                if affinity_check is not None:
                    f = affinity_check(ni.labels)
                elif blocked:
                    labels = ni.labels
                    for key, values, failure in blocked:
                        value = labels.get(key)
                        if value is not None and value in values:
                            f = failure
                            break
            else:
                f = pod_filter._resources(ni)
        else:
            f = check(ni)
        if f is None:
            feasible.append(ni)
            if len(feasible) >= want:
                break
        else:
            failures[ni.name] = f
    return FilterResult(feasible, failures, processed)


class FitError(Exception):
    """No node can run the pod; carries each node's failure (upstream's FitError)."""

    def __init__(self, pod: PodInfo, *, num_nodes: int, failures: Mapping[str, Failure]) -> None:
        self.pod = pod
        self.num_nodes = num_nodes
        self.failures = dict(failures)
        super().__init__(self.message())

    def plugins(self) -> set[str]:
        """The filters that rejected the pod somewhere."""
        return {f.plugin for f in self.failures.values()}

    def message(self) -> str:
        """`0/N nodes are available: <count> <reason>, ...`, reasons sorted as upstream does."""
        counts: dict[str, int] = {}
        for f in self.failures.values():
            for r in f.reasons:
                counts[r] = counts.get(r, 0) + 1
        reasons = sorted(f"{n} {r}" for r, n in counts.items())
        return f"0/{self.num_nodes} nodes are available: {', '.join(reasons)}."

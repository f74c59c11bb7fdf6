"""The scheduler cache: NodeInfos with their pods, assumed pods, ghosts, and per-cycle views.

The cache is fed by two informers that share no order (nodes and pods) and by the scheduler's own
decisions (assume on bind). Its guarantees follow upstream's `pkg/scheduler/backend/cache`:

* **NodeInfo.** One per node name, holding the Node (or None), the pods bound to it and their
  summed requests (`req_*` for fitting, `nz_*` for scoring), kept incrementally: adding or removing
  a pod is O(1), never a rescan. Pods with (anti-)affinity are also kept in their own maps, so that
  affinity math can skip nodes without any, and every accounted pod is counted in the cache's
  `AffinityIndex` (by label group and by required anti-affinity term, per node), which the
  inter-pod affinity pre-pass reads instead of scanning every pod.
* **Ghosts.** A node DELETE keeps the NodeInfo, with `node=None`, while pods are still attached.
  Pod events travel on another watch than node events and can arrive later, even for deletions
  that happened before the node's; dropping the NodeInfo would lose the pods' accounting if the
  node came back, and the pod DELETE that arrives later must find its pod. A ghost disappears
  when its last pod is removed. Today (switch `ghost-node-affinity-error` off) ghosts are left out
  of every per-cycle view; with the switch on, the affinity pass of a cycle iterates them as
  1.7-1.8 did (see `scheduler.filtering`).
* **Assumed pods.** The scheduling cycle assumes a pod on its node (`assume_pod`) before the
  binding is sent, so that the next cycle already counts it. `finish_binding` starts the expiry
  countdown; the pod's ADD/UPDATE on the watch confirms it (`add_pod`); `forget_pod` undoes a
  failed binding; `cleanup_assumed_pods` expires a pod whose confirmation never came, releasing
  its resources (upstream's guard against a lost watch event).
* **A pod is accounted on exactly one NodeInfo**: the node of its current state in the cache
  (`pod_states`), whatever node a later event claims; removal uses the cached node.
* **Views.** `nodes()` is the per-cycle snapshot of schedulable NodeInfos (ghosts excluded), in a
  stable order; the list is rebuilt only when the node set changes. The cycle reads NodeInfos
  directly instead of cloning them: every scheduling cycle runs from snapshot to assume without
  awaiting, and cache mutations run on the same event loop, so nothing can change under it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubemesh.scheduler.podinfo import AffinityTerm, PodInfo, bytes_of, milli_cpu
from kubemesh.services.model.kinds import Obj, labels_of, name_of


class CacheError(Exception):
    """An operation the cache's state machine does not allow (e.g. assuming a pod twice)."""


class NodeInfo:
    """A node and the pods the scheduler believes are on it."""

    __slots__ = (
        "alloc_cpu", "alloc_mem", "alloc_pods", "disk_pressure", "generation", "labels",
        "memory_pressure", "name", "node", "nz_cpu", "nz_mem", "out_of_disk", "pid_pressure", "pods",
        "pods_with_affinity", "pods_with_required_anti_affinity", "prefer_taints", "ready",
        "req_cpu", "req_mem", "taints", "unschedulable",
    )

    def __init__(self, name: str, node: Obj | None = None) -> None:
        self.name = name
        self.node: Obj | None = None
        self.pods: dict[str, PodInfo] = {}
        self.pods_with_affinity: dict[str, PodInfo] = {}
        self.pods_with_required_anti_affinity: dict[str, PodInfo] = {}
        self.req_cpu = self.req_mem = self.nz_cpu = self.nz_mem = 0
        self.generation = 0
        self.labels: Mapping[str, str] = {}
        self.alloc_cpu = self.alloc_mem = self.alloc_pods = 0
        self.taints: tuple[Mapping[str, Any], ...] = ()
        self.prefer_taints: tuple[Mapping[str, Any], ...] = ()
        self.unschedulable = False
        self.memory_pressure = self.disk_pressure = self.pid_pressure = self.out_of_disk = False
        self.ready = True
        if node is not None:
            self.set_node(node)

    @property
    def ghost(self) -> bool:
        """Whether the node was deleted while pods are still attached."""
        return self.node is None

    def set_node(self, node: Obj) -> None:
        """Record a node version and precompute what the filters read."""
        self.node = node
        self.generation += 1
        self.labels = labels_of(node)
        status = node.get("status") or {}
        alloc = status.get("allocatable") or status.get("capacity") or {}
        self.alloc_cpu = milli_cpu(alloc.get("cpu", 0))
        self.alloc_mem = bytes_of(alloc.get("memory", 0))
        self.alloc_pods = bytes_of(alloc.get("pods", 110)) if alloc else 110
        spec = node.get("spec") or {}
        self.unschedulable = bool(spec.get("unschedulable"))
        taints = [t for t in spec.get("taints") or [] if isinstance(t, dict)]
        self.taints = tuple(t for t in taints if t.get("effect") in ("NoSchedule", "NoExecute"))
        self.prefer_taints = tuple(t for t in taints if t.get("effect") == "PreferNoSchedule")
        conds = {c.get("type"): c.get("status")
                 for c in status.get("conditions") or [] if isinstance(c, dict)}
        self.memory_pressure = conds.get("MemoryPressure") == "True"
        self.disk_pressure = conds.get("DiskPressure") == "True"
        self.pid_pressure = conds.get("PIDPressure") == "True"
        self.out_of_disk = conds.get("OutOfDisk") == "True"
        self.ready = conds.get("Ready", "True") == "True"

    def remove_node(self) -> None:
        """Forget the Node object; the pods stay (the NodeInfo becomes a ghost if it has any)."""
        self.node = None
        self.generation += 1

    def add_pod(self, pi: PodInfo) -> None:
        """Account a pod on this node (the caller guarantees it is not here yet)."""
        self.pods[pi.key] = pi
        if pi.has_affinity:
            self.pods_with_affinity[pi.key] = pi
        if pi.anti_affinity_terms:
            self.pods_with_required_anti_affinity[pi.key] = pi
        self.req_cpu += pi.cpu
        self.req_mem += pi.mem
        self.nz_cpu += pi.nz_cpu
        self.nz_mem += pi.nz_mem
        self.generation += 1

    def remove_pod(self, key: str) -> PodInfo | None:
        """Stop accounting a pod; returns it, or None if it was not here."""
        pi = self.pods.pop(key, None)
        if pi is None:
            return None
        self.pods_with_affinity.pop(key, None)
        self.pods_with_required_anti_affinity.pop(key, None)
        self.req_cpu -= pi.cpu
        self.req_mem -= pi.mem
        self.nz_cpu -= pi.nz_cpu
        self.nz_mem -= pi.nz_mem
        self.generation += 1
        return pi

    def clone(self, *, without: Iterable[str] = ()) -> NodeInfo:
        """A private copy (for preemption's what-if), optionally without some pods."""
        skip = set(without)
        c = NodeInfo.__new__(NodeInfo)
        for slot in NodeInfo.__slots__:
            setattr(c, slot, getattr(self, slot))
        c.pods, c.pods_with_affinity, c.pods_with_required_anti_affinity = {}, {}, {}
        c.req_cpu = c.req_mem = c.nz_cpu = c.nz_mem = 0
        for key, pi in self.pods.items():
            if key not in skip:
                c.add_pod(pi)
        return c

    def dump(self) -> dict[str, Any]:
        """The NodeInfo as the debug endpoint shows it."""
        return {
            "name": self.name, "ghost": self.ghost, "generation": self.generation,
            "requested": {"cpu": f"{self.req_cpu}m", "memory": self.req_mem, "pods": len(self.pods)},
            "allocatable": {"cpu": f"{self.alloc_cpu}m", "memory": self.alloc_mem, "pods": self.alloc_pods},
            "unschedulable": self.unschedulable,
            "conditions": {"MemoryPressure": self.memory_pressure, "DiskPressure": self.disk_pressure,
                           "OutOfDisk": self.out_of_disk, "Ready": self.ready},
            "taints": [dict(t) for t in self.taints + self.prefer_taints],
            "pods": sorted(self.pods),
        }


LabelGroup = tuple[str, frozenset[tuple[str, str]]]
"""A namespace and a label set: every pod with both is selected by exactly the same terms."""


class AffinityIndex:
    """Placed pods counted per node, grouped so that inter-pod affinity matches a group once.

    Upstream's InterPodAffinity PreFilter walks every placed pod (and every placed pod with
    required anti-affinity) on every cycle. Here the cache keeps, incrementally on each pod it
    accounts or releases:

    * `groups`: per (namespace, labels) of placed pods, how many sit on each node, with one
      member of the group to match terms against (every member has the same namespace and labels,
      which is all `AffinityTerm.matches` reads). A term of the incoming pod is matched once per
      group instead of once per pod; replicas of one workload share one group.
    * `anti_terms`: per distinct required anti-affinity term of placed pods, how many pods carrying
      it sit on each node. A term is matched against the incoming pod once, however many replicas
      carry it.

    Counts are per node *name*, not per topology value, so that a node whose labels change (or a
    node deleted while pods remain, a ghost) is resolved when a cycle reads the index, against the
    NodeInfos of that cycle.
    """

    __slots__ = ("anti_terms", "groups")

    def __init__(self) -> None:
        self.groups: dict[LabelGroup, tuple[PodInfo, dict[str, int]]] = {}
        self.anti_terms: dict[AffinityTerm, dict[str, int]] = {}

    def add(self, pi: PodInfo, node: str) -> None:
        """Count a pod accounted on `node`."""
        self._bump(pi, node, 1)

    def remove(self, pi: PodInfo, node: str) -> None:
        """Uncount a pod released from `node` (it must have been counted there)."""
        self._bump(pi, node, -1)

    def _bump(self, pi: PodInfo, node: str, delta: int) -> None:
        group = pi.label_group
        entry = self.groups.get(group)
        if entry is None:
            entry = (pi, {})
            self.groups[group] = entry
        _bump_count(entry[1], node, delta)
        if not entry[1]:
            del self.groups[group]
        # A pod repeating a term counts once per occurrence, as the scan over its terms did.
        for term in pi.anti_affinity_terms:
            per_node = self.anti_terms.get(term)
            if per_node is None:
                per_node = self.anti_terms[term] = {}
            _bump_count(per_node, node, delta)
            if not per_node:
                del self.anti_terms[term]


def _bump_count(counts: dict[str, int], key: str, delta: int) -> None:
    n = counts.get(key, 0) + delta
    if n > 0:
        counts[key] = n
    else:
        counts.pop(key, None)


@dataclass(slots=True)
class _PodState:
    info: PodInfo
    assumed: bool = False
    binding_finished: bool = False
    deadline: float | None = None


class SchedulerCache:
    """Nodes, pods and assumed pods, with upstream's state machine (see the module docstring)."""

    def __init__(self, *, assumed_pod_ttl: float = 30.0) -> None:
        self.ttl = assumed_pod_ttl
        self._nodes: dict[str, NodeInfo] = {}
        self._pod_states: dict[str, _PodState] = {}
        self._assumed: set[str] = set()
        self._view: list[NodeInfo] | None = None
        self.affinity_index = AffinityIndex()
        """Placed pods grouped for the inter-pod affinity pre-pass (see `AffinityIndex`)."""
        self.required_anti_pods = 0
        """Pods with required anti-affinity in the cache (lets a cycle skip the affinity pass)."""
        self.affinity_pods = 0
        """Pods with any (anti-)affinity in the cache."""
        self.scoring_affinity_pods = 0
        """Pods whose terms score other pods (required affinity, preferred (anti-)affinity): the
        scoring pre-pass skips placed pods that have required anti-affinity only."""
        self.expired: int = 0
        """How many assumed pods expired (for metrics and reports)."""

    # ---- nodes ---------------------------------------------------------------------------

    def add_node(self, node: Obj) -> NodeInfo:
        """A node appeared (or came back: a ghost with the same name gets its Node again)."""
        name = name_of(node)
        ni = self._nodes.get(name)
        if ni is None:
            ni = NodeInfo(name)
            self._nodes[name] = ni
        if ni.node is None:
            self._view = None
        ni.set_node(node)
        return ni

    def update_node(self, node: Obj) -> NodeInfo:
        """A node changed; same as `add_node` (an update may be the first event we see)."""
        return self.add_node(node)

    def remove_node(self, name: str) -> None:
        """A node was deleted. Its NodeInfo stays as a ghost while pods remain (module docstring)."""
        ni = self._nodes.get(name)
        if ni is None:
            return
        ni.remove_node()
        if not ni.pods:
            del self._nodes[name]
        self._view = None

    # ---- pods ----------------------------------------------------------------------------

    def _node_for(self, name: str) -> NodeInfo:
        ni = self._nodes.get(name)
        if ni is None:
            # A pod can arrive before its node (the two watches share no order): account it
            # on a NodeInfo without Node, which becomes a real one when the node arrives.
            ni = NodeInfo(name)
            self._nodes[name] = ni
        return ni

    def _add_to_node(self, pi: PodInfo) -> None:
        self._node_for(pi.node_name).add_pod(pi)
        self.affinity_index.add(pi, pi.node_name)
        if pi.anti_affinity_terms:
            self.required_anti_pods += 1
        if pi.has_affinity:
            self.affinity_pods += 1
        if pi.scores_others:
            self.scoring_affinity_pods += 1

    def _remove_from_node(self, pi: PodInfo) -> None:
        ni = self._nodes.get(pi.node_name)
        if ni is None:
            return
        removed = ni.remove_pod(pi.key)
        if removed is not None:
            # The pod as it was accounted (the caller's copy may be a later version of it).
            self.affinity_index.remove(removed, pi.node_name)
            if removed.anti_affinity_terms:
                self.required_anti_pods -= 1
            if removed.has_affinity:
                self.affinity_pods -= 1
            if removed.scores_others:
                self.scoring_affinity_pods -= 1
        if ni.node is None and not ni.pods:
            # The last pod of a ghost (or of a node never seen) is gone: the ghost goes with it.
            del self._nodes[pi.node_name]

    def assume_pod(self, pi: PodInfo) -> None:
        """Account a pod on the node the cycle chose (`pi.node_name`) before it is bound."""
        if not pi.node_name:
            raise CacheError(f"pod {pi.key} assumed without a node")
        if pi.key in self._pod_states:
            raise CacheError(f"pod {pi.key} is in the cache, so can't be assumed")
        self._add_to_node(pi)
        self._pod_states[pi.key] = _PodState(pi, assumed=True)
        self._assumed.add(pi.key)

    def finish_binding(self, key: str, *, now: float) -> None:
        """The binding call returned: start the countdown to expiry of the assumed pod."""
        st = self._pod_states.get(key)
        if st is not None and st.assumed:
            st.binding_finished = True
            st.deadline = now + self.ttl if self.ttl > 0 else None

    def forget_pod(self, key: str) -> None:
        """Undo an assumption (the binding failed)."""
        st = self._pod_states.get(key)
        if st is None or not st.assumed:
            return
        self._remove_from_node(st.info)
        del self._pod_states[key]
        self._assumed.discard(key)

    def add_pod(self, pi: PodInfo) -> None:
        """An assigned pod arrived on the watch: confirm an assumed pod or add a new one."""
        st = self._pod_states.get(pi.key)
        if st is None:
            # New, or assumed earlier and already expired: account it now.
            self._add_to_node(pi)
            self._pod_states[pi.key] = _PodState(pi)
            return
        if st.assumed:
            # Confirmation. The watch is the truth: if it says another node, move the pod.
            self._remove_from_node(st.info)
            self._add_to_node(pi)
            self._pod_states[pi.key] = _PodState(pi)
            self._assumed.discard(pi.key)
            return
        # Already added (e.g. a relist's ADD of a pod we have): treat as an update.
        self.update_pod(pi)

    def update_pod(self, pi: PodInfo) -> None:
        """An assigned pod changed."""
        st = self._pod_states.get(pi.key)
        if st is None:
            self.add_pod(pi)
            return
        if st.assumed:
            # An update of an assumed pod means the watch has caught up: confirm it.
            self.add_pod(pi)
            return
        self._remove_from_node(st.info)
        self._add_to_node(pi)
        st.info = pi

    def remove_pod(self, key: str) -> None:
        """A pod was deleted (or finished): release it from the node it is accounted on."""
        st = self._pod_states.pop(key, None)
        if st is None:
            return
        self._assumed.discard(key)
        self._remove_from_node(st.info)

    def cleanup_assumed_pods(self, *, now: float) -> list[str]:
        """Expire assumed pods whose binding finished and whose confirmation is overdue."""
        expired: list[str] = []
        for key in list(self._assumed):
            st = self._pod_states[key]
            if st.binding_finished and st.deadline is not None and now >= st.deadline:
                self._remove_from_node(st.info)
                del self._pod_states[key]
                self._assumed.discard(key)
                expired.append(key)
        self.expired += len(expired)
        return expired

    # ---- reads ---------------------------------------------------------------------------

    def is_assumed(self, key: str) -> bool:
        """Whether the pod is assumed and not yet confirmed by the watch."""
        return key in self._assumed

    def get_pod(self, key: str) -> PodInfo | None:
        """The pod as the cache accounts it."""
        st = self._pod_states.get(key)
        return None if st is None else st.info

    def node_info(self, name: str) -> NodeInfo | None:
        """The NodeInfo of a name (ghosts included)."""
        return self._nodes.get(name)

    def node_infos_by_name(self) -> Mapping[str, NodeInfo]:
        """Every NodeInfo by name, ghosts included (a read-only view: do not mutate)."""
        return self._nodes

    def all_node_infos(self) -> list[NodeInfo]:
        """Every NodeInfo, ghosts included (what 1.7-1.8's affinity code iterated)."""
        return list(self._nodes.values())

    def nodes(self) -> list[NodeInfo]:
        """The per-cycle snapshot: NodeInfos with a Node, in a stable order (ghosts left out).

        The list is cached and rebuilt only when the set of nodes changes; do not mutate it.
        """
        if self._view is None:
            self._view = [ni for ni in self._nodes.values() if ni.node is not None]
        return self._view

    @property
    def pod_count(self) -> int:
        """Pods the cache accounts (assumed included)."""
        return len(self._pod_states)

    @property
    def assumed_count(self) -> int:
        """Assumed pods awaiting confirmation."""
        return len(self._assumed)

    def dump(self) -> dict[str, Any]:
        """The cache as the debug endpoint shows it."""
        return {
            "nodes": [ni.dump() for ni in self._nodes.values()],
            "ghosts": sorted(ni.name for ni in self._nodes.values() if ni.node is None),
            "assumedPods": [
                {"pod": k, "node": self._pod_states[k].info.node_name,
                 "bindingFinished": self._pod_states[k].binding_finished,
                 "deadline": self._pod_states[k].deadline}
                for k in sorted(self._assumed)
            ],
            "podCount": len(self._pod_states),
            "expiredAssumedPods": self.expired,
        }

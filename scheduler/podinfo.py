"""What the scheduler needs to know about a pod, parsed once per pod event.

A `PodInfo` is built from the wire object when an informer event arrives and is then shared by
the cache, the queue, the nominator, the filters and the scorers: requests are summed, affinity
terms compiled (label selectors from `kubemesh.services.model.selectors`) and tolerations read once, so that the
hot loop of a scheduling cycle (every pod x hundreds of nodes) touches only precomputed fields.

Guarantees:

* A `PodInfo` never changes after construction (a new pod version gets a new `PodInfo`); the
  wire object it wraps is treated as read-only.
* Resource requests follow Kubernetes: the sum over containers, at least the largest init
  container, plus `spec.overhead`; a container with limits but no requests requests its limits
  (the apiserver's defaulting, repeated here so that a bare object behaves the same).
* `nz_cpu`/`nz_mem` are the requests used for scoring: a container that requests no cpu counts as
  100m and one that requests no memory as 200 MiB, as upstream's non-zero requests, so that
  BestEffort pods still spread.
* Invalid selectors in affinity terms match nothing (the apiserver's validation is the place to
  reject them; the scheduler must not crash on them).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

from kubemesh.services.machinery.clock import parse_time
from kubemesh.services.model.kinds import Obj, key_of, labels_of, name_of, namespace_of, uid_of
from kubemesh.services.model.quantities import int_value, milli_value, parse_quantity
from kubemesh.services.model.selectors import LabelSelector, SelectorError, label_selector_from_dict
from kubemesh.services.model.wellknown import LABEL_HOSTNAME, LABEL_ZONE

DEFAULT_SCHEDULER: Final = "default-scheduler"
HOSTNAME_LABEL: Final = LABEL_HOSTNAME
ZONE_LABEL: Final = LABEL_ZONE

DEFAULT_MILLI_CPU_REQUEST: Final = 100
"""Scoring treats a container without a cpu request as requesting 100m (upstream's non-zero value)."""
DEFAULT_MEMORY_REQUEST: Final = 200 * 1024 * 1024
"""Scoring treats a container without a memory request as requesting 200 MiB."""

def _quantity(value: Any) -> Fraction:
    """A resource.Quantity (`kubemesh.services.model.quantities`); invalid values are 0 (never a crash)."""
    if isinstance(value, bool):
        return Fraction(0)
    try:
        return parse_quantity(value if isinstance(value, str | int | float) else str(value))
    except ValueError:
        return Fraction(0)


def milli_cpu(value: Any) -> int:
    """A cpu quantity in millicores, rounded up as Kubernetes does (`MilliValue`); invalid is 0."""
    return milli_value(_quantity(value))


def bytes_of(value: Any) -> int:
    """A memory (or count) quantity as an integer, rounded up (`Value`); invalid is 0."""
    return int_value(_quantity(value))


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A compiled `PodAffinityTerm`: which pods (selector, namespaces) and over which topology."""

    selector: LabelSelector
    namespaces: frozenset[str] | None
    """The namespaces whose pods the term selects; None = every namespace (`namespaceSelector: {}`)."""
    topology_key: str

    def matches(self, pod: PodInfo) -> bool:
        """Whether `pod` is selected by this term."""
        if self.namespaces is not None and pod.namespace not in self.namespaces:
            return False
        return self.selector.matches(pod.labels)


@dataclass(frozen=True, slots=True)
class WeightedTerm:
    """A preferred affinity term and its weight (1..100)."""

    weight: int
    term: AffinityTerm


@dataclass(frozen=True, slots=True)
class NodeSelectorRequirement:
    """One `matchExpressions` entry of a node selector term (In, NotIn, Exists, DoesNotExist, Gt, Lt)."""

    key: str
    operator: str
    values: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether a node's labels satisfy this requirement."""
        op = self.operator
        if op == "In":
            return labels.get(self.key) in self.values
        if op == "NotIn":
            return labels.get(self.key) not in self.values
        if op == "Exists":
            return self.key in labels
        if op == "DoesNotExist":
            return self.key not in labels
        if op in ("Gt", "Lt") and self.key in labels and len(self.values) == 1:
            try:
                have = int(labels[self.key])
                want = int(next(iter(self.values)))
            except ValueError:
                return False
            return have > want if op == "Gt" else have < want
        return False


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """A node selector term: its requirements are ANDed (`matchFields` on metadata.name included)."""

    requirements: tuple[NodeSelectorRequirement, ...]
    field_names: frozenset[str] | None
    """`matchFields` on `metadata.name` with In: the node names allowed; None when absent."""
    valid: bool = True
    excluded_names: frozenset[str] = frozenset()
    """`matchFields` on `metadata.name` with NotIn: the node names refused."""

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        """Whether the node satisfies every requirement of the term."""
        if not self.valid:
            return False
        if self.field_names is not None and name not in self.field_names:
            return False
        if name in self.excluded_names:
            return False
        return all(r.matches(labels) for r in self.requirements)


def _compile_node_term(term: Any) -> NodeSelectorTerm:
    if not isinstance(term, dict):
        return NodeSelectorTerm((), None, valid=False)
    reqs: list[NodeSelectorRequirement] = []
    for expr in term.get("matchExpressions") or []:
        if not isinstance(expr, dict):
            return NodeSelectorTerm((), None, valid=False)
        reqs.append(NodeSelectorRequirement(
            str(expr.get("key", "")), str(expr.get("operator", "")),
            frozenset(str(v) for v in expr.get("values") or [])))
    names: frozenset[str] | None = None
    excluded: frozenset[str] = frozenset()
    for expr in term.get("matchFields") or []:
        if not isinstance(expr, dict) or expr.get("key") != "metadata.name":
            return NodeSelectorTerm((), None, valid=False)
        values = frozenset(str(v) for v in expr.get("values") or [])
        if expr.get("operator") == "In":
            names = values if names is None else names & values
        elif expr.get("operator") == "NotIn":
            excluded = excluded | values
        else:
            return NodeSelectorTerm((), None, valid=False)
    if not reqs and names is None and not excluded:
        # An empty term matches no node (upstream: "a null or empty term matches no objects").
        return NodeSelectorTerm((), None, valid=False)
    return NodeSelectorTerm(tuple(reqs), names, excluded_names=excluded)


def _compile_affinity_term(term: Any, own_namespace: str) -> AffinityTerm | None:
    if not isinstance(term, dict):
        return None
    try:
        selector = label_selector_from_dict(term.get("labelSelector"))
    except SelectorError:
        selector = label_selector_from_dict(None)
    namespaces: frozenset[str] | None = frozenset(str(n) for n in term.get("namespaces") or [])
    ns_selector = term.get("namespaceSelector")
    if ns_selector is not None and isinstance(ns_selector, dict) and not ns_selector:
        # `namespaceSelector: {}` selects every namespace. A non-empty namespaceSelector would need
        # namespace labels, which the scheduler does not watch: only the listed namespaces count.
        namespaces = None
    elif not namespaces:
        namespaces = frozenset((own_namespace,))
    return AffinityTerm(selector, namespaces, str(term.get("topologyKey") or ""))


def _compile_terms(raw: Any, own_namespace: str) -> tuple[AffinityTerm, ...]:
    out: list[AffinityTerm] = []
    for t in raw or []:
        c = _compile_affinity_term(t, own_namespace)
        if c is not None:
            out.append(c)
    return tuple(out)


def _compile_weighted(raw: Any, own_namespace: str) -> tuple[WeightedTerm, ...]:
    out: list[WeightedTerm] = []
    for w in raw or []:
        if not isinstance(w, dict):
            continue
        c = _compile_affinity_term(w.get("podAffinityTerm"), own_namespace)
        if c is not None:
            out.append(WeightedTerm(int(w.get("weight") or 0), c))
    return tuple(out)


def _requests(container: Mapping[str, Any]) -> tuple[int, int, bool, bool]:
    """(milli cpu, memory bytes, has cpu request, has memory request) of one container."""
    res = container.get("resources") or {}
    req = res.get("requests") or {}
    lim = res.get("limits") or {}
    cpu_q = req.get("cpu", lim.get("cpu"))
    mem_q = req.get("memory", lim.get("memory"))
    cpu = milli_cpu(cpu_q) if cpu_q is not None else 0
    mem = bytes_of(mem_q) if mem_q is not None else 0
    return cpu, mem, cpu_q is not None, mem_q is not None


def _qos_best_effort(spec: Mapping[str, Any]) -> bool:
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        res = c.get("resources") or {}
        for part in ("requests", "limits"):
            values = res.get(part) or {}
            for name in ("cpu", "memory"):
                if name in values and _quantity(values[name]) != 0:
                    return False
    return True


def _frozen_labels(labels: Mapping[str, str]) -> frozenset[tuple[str, str]]:
    try:
        return frozenset(labels.items())
    except TypeError:
        # A value that is not a string (never valid, but never a crash): compared by its repr.
        return frozenset((str(k), repr(v)) for k, v in labels.items())


class PodInfo:
    """A pod as the scheduler sees it: the wire object plus everything precomputed from it."""

    __slots__ = (
        "_node_selector", "affinity_terms", "anti_affinity_terms", "best_effort", "cpu", "has_affinity",
        "has_required_affinity", "key", "label_group", "labels", "mem", "name", "namespace", "node_name",
        "nominated_node", "nz_cpu", "nz_mem", "pod", "preemption_policy", "preferred_affinity",
        "preferred_anti_affinity", "preferred_node_terms", "priority", "priority_class",
        "required_node_terms", "resource_version", "scheduler_name", "scores_others", "start_time",
        "terminating", "tolerations", "uid",
    )

    def __init__(self, pod: Obj, *, priority: int | None = None) -> None:
        """Parse `pod`; `priority` stands in when the pod carries no `spec.priority`."""
        self.pod = pod
        self.key = key_of(pod)
        self.uid = uid_of(pod)
        self.name = name_of(pod)
        self.namespace = namespace_of(pod)
        self.labels: Mapping[str, str] = labels_of(pod)
        meta = pod.get("metadata") or {}
        self.resource_version = str(meta.get("resourceVersion") or "")
        self.terminating = bool(meta.get("deletionTimestamp"))
        spec: Mapping[str, Any] = pod.get("spec") or {}
        status: Mapping[str, Any] = pod.get("status") or {}
        self.node_name = str(spec.get("nodeName") or "")
        self.nominated_node = str(status.get("nominatedNodeName") or "")
        self.scheduler_name = str(spec.get("schedulerName") or DEFAULT_SCHEDULER)
        prio = spec.get("priority")
        if isinstance(prio, int) and not isinstance(prio, bool):
            self.priority: int = prio
        else:
            self.priority = priority if priority is not None else 0
        self.priority_class = str(spec.get("priorityClassName") or "")
        self.preemption_policy = str(spec.get("preemptionPolicy") or "PreemptLowerPriority")
        start = status.get("startTime") or meta.get("creationTimestamp")
        try:
            self.start_time = parse_time(start) if isinstance(start, str) and start else 0.0
        except ValueError:
            self.start_time = 0.0

        cpu = mem = nz_cpu = nz_mem = 0
        for c in spec.get("containers") or []:
            c_cpu, c_mem, has_cpu, has_mem = _requests(c)
            cpu += c_cpu
            mem += c_mem
            nz_cpu += c_cpu if has_cpu else DEFAULT_MILLI_CPU_REQUEST
            nz_mem += c_mem if has_mem else DEFAULT_MEMORY_REQUEST
        for c in spec.get("initContainers") or []:
            c_cpu, c_mem, _, _ = _requests(c)
            cpu = max(cpu, c_cpu)
            mem = max(mem, c_mem)
            nz_cpu = max(nz_cpu, c_cpu)
            nz_mem = max(nz_mem, c_mem)
        overhead = spec.get("overhead") or {}
        if overhead:
            o_cpu = milli_cpu(overhead["cpu"]) if "cpu" in overhead else 0
            o_mem = bytes_of(overhead["memory"]) if "memory" in overhead else 0
            cpu += o_cpu
            mem += o_mem
            nz_cpu += o_cpu
            nz_mem += o_mem
        self.cpu, self.mem, self.nz_cpu, self.nz_mem = cpu, mem, nz_cpu, nz_mem
        self.best_effort = _qos_best_effort(spec)

        self.tolerations: tuple[Mapping[str, Any], ...] = tuple(
            t for t in spec.get("tolerations") or [] if isinstance(t, dict))

        affinity = spec.get("affinity") or {}
        node_aff = affinity.get("nodeAffinity") or {}
        required = node_aff.get("requiredDuringSchedulingIgnoredDuringExecution") or None
        terms = None if required is None else tuple(
            _compile_node_term(t) for t in (required.get("nodeSelectorTerms") or []))
        selector = spec.get("nodeSelector") or {}
        self.required_node_terms: tuple[NodeSelectorTerm, ...] | None = terms
        self._node_selector: NodeSelectorTerm | None = None
        if selector:
            # nodeSelector is ANDed with the terms: fold it into a requirement list of its own.
            sel_term = NodeSelectorTerm(tuple(
                NodeSelectorRequirement(str(k), "In", frozenset((str(v),)))
                for k, v in selector.items()), None)
            self._node_selector = sel_term
        self.preferred_node_terms: tuple[tuple[int, NodeSelectorTerm], ...] = tuple(
            (int(p.get("weight") or 0), _compile_node_term(p.get("preference")))
            for p in node_aff.get("preferredDuringSchedulingIgnoredDuringExecution") or []
            if isinstance(p, dict))

        pod_aff = affinity.get("podAffinity") or {}
        anti = affinity.get("podAntiAffinity") or {}
        ns = self.namespace
        required_key = "requiredDuringSchedulingIgnoredDuringExecution"
        self.affinity_terms = _compile_terms(pod_aff.get(required_key), ns)
        self.anti_affinity_terms = _compile_terms(anti.get(required_key), ns)
        self.preferred_affinity = _compile_weighted(
            pod_aff.get("preferredDuringSchedulingIgnoredDuringExecution"), ns)
        self.preferred_anti_affinity = _compile_weighted(
            anti.get("preferredDuringSchedulingIgnoredDuringExecution"), ns)
        self.has_required_affinity = bool(self.affinity_terms or self.anti_affinity_terms)
        self.has_affinity = bool(self.has_required_affinity or self.preferred_affinity
                                 or self.preferred_anti_affinity)
        self.scores_others = bool(self.affinity_terms or self.preferred_affinity or self.preferred_anti_affinity)
        """Whether, once placed, the pod's terms add to other pods' InterPodAffinity scores
        (required anti-affinity filters but never scores)."""
        self.label_group: tuple[str, frozenset[tuple[str, str]]] = (ns, _frozen_labels(self.labels))
        """What every term matches on: pods with equal groups are selected by the same terms."""

    @property
    def has_node_constraints(self) -> bool:
        """Whether the pod restricts nodes by nodeSelector or required node affinity."""
        return self._node_selector is not None or self.required_node_terms is not None

    def matches_node_selector(self, name: str, labels: Mapping[str, str]) -> bool:
        """Check `nodeSelector` AND (any required node affinity term), as the NodeAffinity filter checks."""
        sel = self._node_selector
        if sel is not None and not sel.matches(name, labels):
            return False
        terms = self.required_node_terms
        if terms is None:
            return True
        return any(t.matches(name, labels) for t in terms)

    def with_node(self, node: str) -> PodInfo:
        """A copy of the pod bound to `node` (what the cache assumes), sharing everything else."""
        c = PodInfo.__new__(PodInfo)
        for slot in PodInfo.__slots__:
            setattr(c, slot, getattr(self, slot))
        c.node_name = node
        c.pod = {**self.pod, "spec": {**(self.pod.get("spec") or {}), "nodeName": node}}
        return c

    def __repr__(self) -> str:
        return f"PodInfo({self.key}, prio={self.priority}, node={self.node_name!r})"


def pod_ref(pod: Obj) -> Obj:
    """An ObjectReference to a pod, as events and logs carry it."""
    meta = pod.get("metadata") or {}
    return {"kind": "Pod", "apiVersion": "v1", "namespace": meta.get("namespace", ""),
            "name": meta.get("name", ""), "uid": meta.get("uid", ""),
            "resourceVersion": meta.get("resourceVersion", "")}

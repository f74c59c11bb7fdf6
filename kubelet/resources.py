"""Resource arithmetic of the kubelet: quantities, pod requests, QoS class, admission fit.

Guarantees:

* Quantities are parsed by `kubemesh.services.model.quantities` (exact, `ValueError` on anything invalid).
* A pod's effective request is upstream's: the larger of the sum over app containers and the
  largest init container, plus `spec.overhead`; a container's request defaults to its limit.
* `admit` answers what the kubelet's admission answers: the first resource that does not fit
  (pods count first, then cpu, memory, ephemeral-storage, then extended resources in name
  order), with reason `OutOf<resource>` and upstream's message.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kubemesh.services.model.kinds import Obj
from kubemesh.services.model.quantities import format_bytes, format_cpu, int_value, milli_value, parse_quantity

_ORDER: Final = ("pods", "cpu", "memory", "ephemeral-storage")


@dataclass(frozen=True, slots=True)
class Resources:
    """Amounts per resource name: cpu in millicores, pods as a count, others in base units."""

    amounts: Mapping[str, int]

    def get(self, name: str) -> int:
        """The amount of `name` (0 when absent)."""
        return self.amounts.get(name, 0)

    def __add__(self, other: Resources) -> Resources:
        out = dict(self.amounts)
        for k, v in other.amounts.items():
            out[k] = out.get(k, 0) + v
        return Resources(out)

    def __sub__(self, other: Resources) -> Resources:
        out = dict(self.amounts)
        for k, v in other.amounts.items():
            out[k] = out.get(k, 0) - v
        return Resources(out)

    def names(self) -> list[str]:
        """Resource names in admission order: pods, cpu, memory, storage, then the rest sorted."""
        known = [n for n in _ORDER if n in self.amounts]
        return known + sorted(n for n in self.amounts if n not in _ORDER)

    @classmethod
    def from_quantities(cls, quantities: Mapping[str, Any]) -> Resources:
        """Parse a `{name: quantity}` map (cpu becomes millicores)."""
        out: dict[str, int] = {}
        for name, q in quantities.items():
            value = parse_quantity(q if isinstance(q, str | int | float) else str(q))
            out[name] = milli_value(value) if name == "cpu" else int_value(value)
        return cls(out)

    def to_quantities(self) -> dict[str, str]:
        """The amounts as Kubernetes quantity strings."""
        out: dict[str, str] = {}
        for name in self.names():
            v = self.get(name)
            if name == "cpu":
                out[name] = format_cpu(v)
            elif name in ("memory", "ephemeral-storage") or name.startswith("hugepages-"):
                out[name] = format_bytes(v)
            else:
                out[name] = str(v)
        return out


def _container_requests(container: Mapping[str, Any]) -> Resources:
    res = container.get("resources") or {}
    limits = res.get("limits") or {}
    requests = {**limits, **(res.get("requests") or {})}
    return Resources.from_quantities(requests)


def _max(a: Resources, b: Resources) -> Resources:
    names = set(a.amounts) | set(b.amounts)
    return Resources({n: max(a.get(n), b.get(n)) for n in names})


def pod_requests(pod: Obj) -> Resources:
    """The pod's effective requests, plus one `pods` slot."""
    spec = pod.get("spec") or {}
    total = Resources({})
    for c in spec.get("containers") or []:
        total = total + _container_requests(c)
    for c in spec.get("initContainers") or []:
        total = _max(total, _container_requests(c))
    overhead = spec.get("overhead")
    if isinstance(overhead, dict):
        total = total + Resources.from_quantities(overhead)
    return total + Resources({"pods": 1})


def qos_class(pod: Obj) -> str:
    """Guaranteed, Burstable or BestEffort, by upstream's rules (cpu and memory only)."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        limits = {k: v for k, v in (res.get("limits") or {}).items() if k in ("cpu", "memory")}
        requests = {k: v for k, v in (res.get("requests") or {}).items() if k in ("cpu", "memory")}
        if limits or any(parse_quantity(v) != 0 for v in requests.values()):
            any_set = True
        effective = {**limits, **requests}
        if set(limits) != {"cpu", "memory"} or any(
                parse_quantity(effective[k]) != parse_quantity(limits[k]) for k in limits):
            guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


@dataclass(frozen=True, slots=True)
class Rejection:
    """Why admission refused a pod: written as the pod's Failed status."""

    reason: str
    message: str


def admit(pod: Obj, *, allocatable: Resources, admitted: Iterable[Obj]) -> Rejection | None:
    """Whether `pod` fits beside the already `admitted` pods; None if it does."""
    want = pod_requests(pod)
    used = Resources({})
    for other in admitted:
        used = used + pod_requests(other)
    for name in want.names():
        need = want.get(name)
        if need == 0:
            continue
        cap = allocatable.get(name)
        if name not in allocatable.amounts and name not in _ORDER:
            cap = 0  # an extended resource the node does not have
        if used.get(name) + need > cap:
            return Rejection(
                reason=f"OutOf{name}",
                message=(f"Pod was rejected: Node didn't have enough resource: {name}, "
                         f"requested: {need}, used: {used.get(name)}, capacity: {cap}"),
            )
    return None


def allocatable_of(*, capacity: Mapping[str, str], reserved: Mapping[str, str]) -> Resources:
    """Capacity minus reserved, never negative."""
    diff = Resources.from_quantities(capacity) - Resources.from_quantities(
        {k: v for k, v in reserved.items() if k in capacity})
    return Resources({k: max(0, v) for k, v in diff.amounts.items()})

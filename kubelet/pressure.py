"""Node pressure: which pod the eviction manager evicts, and what admission refuses.

Guarantees:

* `rank_for_memory_eviction` orders pods as upstream's eviction manager ranks them under
  memory pressure: first the pods whose usage exceeds their memory requests, then by priority
  (lowest first), then by how far usage exceeds requests (largest first). A BestEffort pod
  requests nothing, so any usage exceeds it: BestEffort pods always come first, then
  Burstable pods above their requests, and Guaranteed pods (usage = requests) last.
* Emulated usage: the annotation `kubemesh.io/memory-usage` (a quantity) when present;
  otherwise each container uses its memory request, or a default amount when it has none.
* `pressure_rejection` answers the eviction manager's admission: under MemoryPressure only
  BestEffort pods are refused (unless they tolerate the memory-pressure taint); under
  DiskPressure or PIDPressure every pod is refused. Critical pods (priority ≥ 2e9) always pass.

An eviction is not an OOM kill: an evicted pod ends Failed with reason Evicted and is not
restarted on this node; an OOM-killed container is restarted in place by its restartPolicy.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from kubemesh.kubelet.resources import Rejection, qos_class
from kubemesh.services.model.kinds import Obj
from kubemesh.services.model.podutil import tolerates, tolerations_of
from kubemesh.services.model.quantities import parse_quantity
from kubemesh.services.model.wellknown import TAINT_MEMORY_PRESSURE

USAGE_ANNOTATION: Final = "kubemesh.io/memory-usage"
CRITICAL_PRIORITY: Final = 2_000_000_000
PRESSURE_CONDITIONS: Final = ("MemoryPressure", "DiskPressure", "PIDPressure")


def memory_request(pod: Obj) -> int:
    """Sum of the app containers' memory requests (limits when requests are unset), in bytes."""
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        q = (res.get("requests") or {}).get("memory", (res.get("limits") or {}).get("memory"))
        if q is not None:
            total += math.ceil(parse_quantity(str(q)))
    return total


def memory_usage(pod: Obj, *, default_container_usage: int) -> int:
    """The emulated memory usage of a pod, in bytes."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    if USAGE_ANNOTATION in annotations:
        return math.ceil(parse_quantity(str(annotations[USAGE_ANNOTATION])))
    total = 0
    for c in (pod.get("spec") or {}).get("containers") or []:
        res = c.get("resources") or {}
        q = (res.get("requests") or {}).get("memory", (res.get("limits") or {}).get("memory"))
        total += math.ceil(parse_quantity(str(q))) if q is not None else default_container_usage
    return total


def priority_of(pod: Obj) -> int:
    """spec.priority (0 when unset, as the apiserver resolves no class)."""
    p = (pod.get("spec") or {}).get("priority")
    return int(p) if isinstance(p, int) else 0


@dataclass(frozen=True, slots=True)
class _Rank:
    within_requests: bool
    priority: int
    negative_excess: int


def rank_for_memory_eviction(pods: Iterable[Obj], *, default_container_usage: int) -> list[Obj]:
    """The pods in eviction order (the first is evicted first); stable for ties."""

    def key(pod: Obj) -> tuple[bool, int, int]:
        usage = memory_usage(pod, default_container_usage=default_container_usage)
        request = memory_request(pod)
        return (usage <= request, priority_of(pod), -(usage - request))

    return sorted(pods, key=key)


MEMORY_PRESSURE_TAINT: Final = {"key": TAINT_MEMORY_PRESSURE, "effect": "NoSchedule"}


def _tolerates_memory_pressure(pod: Obj) -> bool:
    return tolerates(tolerations_of(pod), MEMORY_PRESSURE_TAINT)


def pressure_rejection(pod: Obj, *, conditions: Mapping[str, str]) -> Rejection | None:
    """Why the eviction manager's admission refuses `pod`, or None when it admits it.

    `conditions` are the node's condition statuses, `{type: status}`.
    """
    active = [c for c in PRESSURE_CONDITIONS if conditions.get(c) == "True"]
    if not active or priority_of(pod) >= CRITICAL_PRIORITY:
        return None
    if active == ["MemoryPressure"] and (qos_class(pod) != "BestEffort" or _tolerates_memory_pressure(pod)):
        return None
    return Rejection(reason="Evicted", message=f"The node had condition: [{', '.join(active)}]. ")


def eviction_message(*, resource: str = "memory") -> str:
    """The message of an evicted pod's status."""
    return f"The node was low on resource: {resource}. "

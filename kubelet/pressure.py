"""Node pressure: emulated resource usage, eviction signals and thresholds, ranking, admission.

Emulated usage (what a pod's containers consume; nothing real is measured):

* `kubemesh.io/usage: memory=300Mi,disk=1Gi,pids=50` on a pod states the whole pod's usage of
  the resources it names; `kubemesh.io/usage.<container>: memory=...` states one container's.
  A pod-level value wins over the container-level ones for that resource. The old annotation
  `kubemesh.io/memory-usage: 300Mi` still means `memory=300Mi` for the pod.
* Unstated, a container uses its memory request (its limit when it has no request, else the
  kubelet's `default_container_memory_usage`, 64Mi), no disk and one PID.

Signals (`observe`), as the eviction manager's summary gives them: `memory.available` = memory
capacity minus the usage of the pods the node runs; `nodefs.available` = ephemeral-storage
capacity minus their disk usage; `pid.available` = the node's PID limit (`max_pids`) minus
their PIDs. Other upstream signals (`imagefs.available`, `nodefs.inodesFree`, ...) are accepted
in thresholds but never observed, so they are never met.

Thresholds (`parse_thresholds`, `parse_grace_periods`): upstream's flag syntax,
`memory.available<100Mi,nodefs.available<10%` (a quantity or a percentage of capacity) and
`memory.available=1m30s`. `EvictionManager.synchronize` is upstream's `synchronize` without the
summary API:

* a threshold is *met* when its signal's available value is below it; the time it was first
  met is remembered until it is no longer met;
* the node conditions (MemoryPressure for memory.available, DiskPressure for nodefs/imagefs,
  PIDPressure for pid.available) are True while a threshold of theirs is met, *whether or not*
  its grace period has passed, and stay True for `--eviction-pressure-transition-period` (5 m)
  after the last time one was met, so a node does not flap;
* a hard threshold acts at once, a soft one once it has been met for its grace period; then
  one pod is evicted per pass (every `eviction_monitoring_interval`, 10 s), the first of the
  ranking of the threshold's resource.

Ranking (`rank_for_eviction`): memory and disk as upstream's `rankMemoryPressure` /
`rankDiskPressure`: first the pods whose usage exceeds their requests, then by priority (lowest
first), then by usage above requests (largest first). BestEffort pods request nothing, so they
exceed their requests with any usage. PIDs: by priority, then by usage (largest first).

An evicted pod ends Failed with reason Evicted and upstream's message, e.g. "The node was low
on resource: memory. Threshold quantity: 100Mi, available: 68Ki. Container hog was using
32700Mi, request is 0, has larger consumption of memory. " (`eviction_message`). An eviction is
not an OOM kill: an OOM-killed container is restarted in place by its restartPolicy.

`pressure_rejection` is the eviction manager's admission: under MemoryPressure only BestEffort
pods are refused (unless they tolerate the memory-pressure taint); under DiskPressure or
PIDPressure every pod is. Critical pods (priority >= 2e9) always pass.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final, Literal

from kubemesh.kubelet.resources import Rejection, qos_class
from kubemesh.services.model.kinds import Obj
from kubemesh.services.model.podutil import tolerates, tolerations_of
from kubemesh.services.model.quantities import parse_quantity
from kubemesh.services.model.wellknown import TAINT_MEMORY_PRESSURE

USAGE_ANNOTATION: Final = "kubemesh.io/usage"
CONTAINER_USAGE_PREFIX: Final = "kubemesh.io/usage."
LEGACY_MEMORY_ANNOTATION: Final = "kubemesh.io/memory-usage"
CRITICAL_PRIORITY: Final = 2_000_000_000
PRESSURE_CONDITIONS: Final = ("MemoryPressure", "DiskPressure", "PIDPressure")

UsageResource = Literal["memory", "disk", "pids"]
USAGE_RESOURCES: Final[tuple[UsageResource, ...]] = ("memory", "disk", "pids")

SIGNALS: Final[Mapping[str, UsageResource | None]] = {
    "memory.available": "memory", "nodefs.available": "disk", "pid.available": "pids",
    "allocatableMemory.available": None, "imagefs.available": None, "imagefs.inodesFree": None,
    "nodefs.inodesFree": None, "containerfs.available": None, "containerfs.inodesFree": None,
}
"""Every signal upstream accepts; the value is the emulated resource it is observed from
(None: accepted, never observed)."""

CONDITION_OF_SIGNAL: Final[Mapping[str, str]] = {
    "memory.available": "MemoryPressure", "allocatableMemory.available": "MemoryPressure",
    "nodefs.available": "DiskPressure", "nodefs.inodesFree": "DiskPressure", "imagefs.available": "DiskPressure",
    "imagefs.inodesFree": "DiskPressure", "containerfs.available": "DiskPressure",
    "containerfs.inodesFree": "DiskPressure", "pid.available": "PIDPressure",
}
RESOURCE_NAME: Final[Mapping[UsageResource, str]] = {"memory": "memory", "disk": "ephemeral-storage", "pids": "pids"}
"""How the eviction message names each resource."""

DEFAULT_EVICTION_HARD: Final = "memory.available<100Mi,nodefs.available<10%,imagefs.available<15%,nodefs.inodesFree<5%"
"""Upstream's Linux default of `--eviction-hard`."""


# ---------------------------------------------------------------------------------------------
# Usage.


def _parse_usage(text: str) -> dict[UsageResource, int]:
    out: dict[UsageResource, int] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in USAGE_RESOURCES:
            raise ValueError(f"usage item {item!r} is not memory|disk|pids=quantity")
        out[name] = math.ceil(parse_quantity(value.strip()))
    return out


def _annotations(pod: Obj) -> Mapping[str, str]:
    return (pod.get("metadata") or {}).get("annotations") or {}


def _containers(pod: Obj) -> list[Obj]:
    return list((pod.get("spec") or {}).get("containers") or [])


def _container_memory_request(c: Obj) -> int | None:
    res = c.get("resources") or {}
    q = (res.get("requests") or {}).get("memory", (res.get("limits") or {}).get("memory"))
    return math.ceil(parse_quantity(str(q))) if q is not None else None


def _container_request(c: Obj, resource: UsageResource) -> int:
    if resource == "memory":
        return _container_memory_request(c) or 0
    if resource == "disk":
        res = c.get("resources") or {}
        q = (res.get("requests") or {}).get("ephemeral-storage",
                                            (res.get("limits") or {}).get("ephemeral-storage"))
        return math.ceil(parse_quantity(str(q))) if q is not None else 0
    return 0


def container_usage(pod: Obj, *, default_container_memory: int) -> dict[str, dict[UsageResource, int]]:
    """Each app container's emulated usage `{container: {resource: amount}}` (see the module docstring).

    A pod-level value is attributed to the first container (the others count zero of it).
    Malformed annotations count as absent.
    """
    notes = _annotations(pod)
    containers = _containers(pod)
    out: dict[str, dict[UsageResource, int]] = {}
    for c in containers:
        name = str(c.get("name") or "")
        mem = _container_memory_request(c)
        usage: dict[UsageResource, int] = {"memory": mem if mem is not None else default_container_memory,
                                           "disk": 0, "pids": 1}
        with contextlib.suppress(ValueError):
            usage.update(_parse_usage(notes.get(CONTAINER_USAGE_PREFIX + name, "")))
        out[name] = usage
    pod_level: dict[UsageResource, int] = {}
    if LEGACY_MEMORY_ANNOTATION in notes:
        with contextlib.suppress(ValueError):
            pod_level["memory"] = math.ceil(parse_quantity(str(notes[LEGACY_MEMORY_ANNOTATION])))
    with contextlib.suppress(ValueError):
        pod_level.update(_parse_usage(notes.get(USAGE_ANNOTATION, "")))
    if pod_level and out:
        first = next(iter(out))
        for resource, amount in pod_level.items():
            for name, usage in out.items():
                usage[resource] = amount if name == first else 0
    return out


def pod_usage(pod: Obj, resource: UsageResource, *, default_container_memory: int) -> int:
    """The pod's emulated usage of `resource` (bytes, or a PID count)."""
    return sum(u[resource] for u in container_usage(pod, default_container_memory=default_container_memory).values())


def pod_request(pod: Obj, resource: UsageResource) -> int:
    """The app containers' requests of `resource` (limits when requests are unset; PIDs: 0)."""
    return sum(_container_request(c, resource) for c in _containers(pod))


def memory_request(pod: Obj) -> int:
    """Sum of the app containers' memory requests (limits when requests are unset), in bytes."""
    return pod_request(pod, "memory")


def memory_usage(pod: Obj, *, default_container_usage: int) -> int:
    """The emulated memory usage of a pod, in bytes."""
    return pod_usage(pod, "memory", default_container_memory=default_container_usage)


def priority_of(pod: Obj) -> int:
    """spec.priority (0 when unset, as the apiserver resolves no class)."""
    p = (pod.get("spec") or {}).get("priority")
    return int(p) if isinstance(p, int) else 0


# ---------------------------------------------------------------------------------------------
# Ranking.


def rank_for_eviction(pods: Iterable[Obj], resource: UsageResource, *, default_container_memory: int) -> list[Obj]:
    """The pods in eviction order for pressure on `resource` (the first goes first); stable for ties."""

    def key(pod: Obj) -> tuple[bool, int, int]:
        usage = pod_usage(pod, resource, default_container_memory=default_container_memory)
        if resource == "pids":
            return (False, priority_of(pod), -usage)
        request = pod_request(pod, resource)
        return (usage <= request, priority_of(pod), -(usage - request))

    return sorted(pods, key=key)


def rank_for_memory_eviction(pods: Iterable[Obj], *, default_container_usage: int) -> list[Obj]:
    """`rank_for_eviction` under memory pressure."""
    return rank_for_eviction(pods, "memory", default_container_memory=default_container_usage)


# ---------------------------------------------------------------------------------------------
# Thresholds.


@dataclass(frozen=True, slots=True)
class Threshold:
    """One eviction threshold: `signal < quantity` or `signal < percentage of capacity`."""

    signal: str
    quantity: int | None = None
    percentage: Fraction | None = None
    text: str = ""
    """The value as written (the eviction message quotes quantities as written)."""
    grace_period: float = 0.0
    """Cluster seconds the threshold must be met before it acts (0: a hard threshold)."""
    hard: bool = True

    def value(self, capacity: int) -> int:
        """The threshold in the signal's unit, for a node with this capacity."""
        if self.quantity is not None:
            return self.quantity
        assert self.percentage is not None
        return math.ceil(self.percentage * capacity)

    def shown(self, capacity: int) -> str:
        """The threshold quantity as the eviction message shows it."""
        return self.text if self.quantity is not None else str(self.value(capacity))


_DURATION_PART: Final = re.compile(r"(\d+(?:\.\d+)?)(h|ms|m|s)")


def parse_duration(text: str) -> float:
    """A Go duration (`1m30s`, `90s`, `5m`, `1h`) or a bare number of seconds, in seconds."""
    s = text.strip()
    try:
        return float(s)
    except ValueError:
        pass
    pos, total = 0, 0.0
    scale = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    while pos < len(s):
        m = _DURATION_PART.match(s, pos)
        if m is None:
            raise ValueError(f"invalid duration {text!r}")
        total += float(m.group(1)) * scale[m.group(2)]
        pos = m.end()
    if not s:
        raise ValueError("empty duration")
    return total


def _items(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def parse_thresholds(text: str, *, hard: bool, grace_periods: Mapping[str, float] | None = None) -> list[Threshold]:
    """`memory.available<100Mi,nodefs.available<10%` (upstream's `--eviction-hard` syntax).

    Soft thresholds (`hard=False`) need a grace period for each signal, as upstream requires.
    """
    out: list[Threshold] = []
    seen: set[str] = set()
    for item in _items(text):
        signal, sep, value = item.partition("<")
        signal, value = signal.strip(), value.strip()
        if not sep or signal not in SIGNALS:
            raise ValueError(f"eviction threshold {item!r} is not <signal><<quantity|percentage>; signals: "
                             + ", ".join(sorted(SIGNALS)))
        if signal in seen:
            raise ValueError(f"eviction threshold for {signal} given twice")
        seen.add(signal)
        grace = 0.0
        if not hard:
            if grace_periods is None or signal not in grace_periods:
                raise ValueError(f"soft eviction threshold {signal} has no grace period "
                                 "(--eviction-soft-grace-period)")
            grace = grace_periods[signal]
        if value.endswith("%"):
            pct = Fraction(value[:-1]) / 100
            if not 0 <= pct <= 1:
                raise ValueError(f"eviction threshold {item!r}: percentage out of range")
            out.append(Threshold(signal, percentage=pct, text=value, grace_period=grace, hard=hard))
        else:
            q = math.ceil(parse_quantity(value))
            if q < 0:
                raise ValueError(f"eviction threshold {item!r}: negative quantity")
            out.append(Threshold(signal, quantity=q, text=value, grace_period=grace, hard=hard))
    return out


def parse_grace_periods(text: str) -> dict[str, float]:
    """`memory.available=1m30s,...` (upstream's `--eviction-soft-grace-period` syntax), in seconds."""
    out: dict[str, float] = {}
    for item in _items(text):
        signal, sep, value = item.partition("=")
        signal = signal.strip()
        if not sep or signal not in SIGNALS:
            raise ValueError(f"grace period {item!r} is not <signal>=<duration>")
        seconds = parse_duration(value)
        if seconds < 0:
            raise ValueError(f"grace period {item!r} is negative")
        out[signal] = seconds
    return out


# ---------------------------------------------------------------------------------------------
# The eviction manager.


@dataclass(frozen=True, slots=True)
class Observation:
    """One signal's value: what is available out of the capacity."""

    available: int
    capacity: int


def observe(pods: Iterable[Obj], *, capacity: Mapping[UsageResource, int],
            default_container_memory: int) -> dict[str, Observation]:
    """The observed signals for a node running `pods` (see the module docstring)."""
    used: dict[UsageResource, int] = {"memory": 0, "disk": 0, "pids": 0}
    for pod in pods:
        for usage in container_usage(pod, default_container_memory=default_container_memory).values():
            for r in USAGE_RESOURCES:
                used[r] += usage[r]
    return {signal: Observation(available=capacity[r] - used[r], capacity=capacity[r])
            for signal, r in SIGNALS.items() if r is not None}


@dataclass(frozen=True, slots=True)
class Decision:
    """What one pass of the eviction manager concluded."""

    conditions: frozenset[str]
    """The pressure conditions that are True now."""
    met: tuple[Threshold, ...]
    """Thresholds met now (grace periods not considered)."""
    act_on: Threshold | None
    """The threshold to evict for now (met for its grace period), or None."""


_SIGNAL_ORDER: Final = {"memory.available": 0, "allocatableMemory.available": 0, "nodefs.available": 1,
                        "pid.available": 2}


@dataclass(slots=True)
class EvictionManager:
    """Upstream's eviction manager state machine over emulated signals (see the module docstring)."""

    thresholds: Sequence[Threshold]
    transition_period: float = 300.0
    first_observed: dict[Threshold, float] = field(default_factory=dict)
    condition_last_observed: dict[str, float] = field(default_factory=dict)

    def synchronize(self, *, now: float, observations: Mapping[str, Observation]) -> Decision:
        """One pass: which thresholds are met, the conditions, and what to evict for."""
        met: list[Threshold] = []
        for t in self.thresholds:
            obs = observations.get(t.signal)
            if obs is not None and obs.available < t.value(obs.capacity):
                met.append(t)
        for t in [t for t in self.first_observed if t not in met]:
            del self.first_observed[t]
        for t in met:
            self.first_observed.setdefault(t, now)
        for t in met:
            self.condition_last_observed[CONDITION_OF_SIGNAL[t.signal]] = now
        conditions = frozenset(c for c, at in self.condition_last_observed.items()
                               if now - at < self.transition_period or at == now)
        ready = [t for t in met if now - self.first_observed[t] >= t.grace_period]
        # Hard thresholds before soft ones, memory before disk before PIDs (upstream acts on one
        # threshold per pass, memory first).
        ready.sort(key=lambda t: (not t.hard, _SIGNAL_ORDER.get(t.signal, 9)))
        return Decision(conditions=conditions, met=tuple(met), act_on=ready[0] if ready else None)


# ---------------------------------------------------------------------------------------------
# Admission and messages.


MEMORY_PRESSURE_TAINT: Final = {"key": TAINT_MEMORY_PRESSURE, "effect": "NoSchedule"}


def _tolerates_memory_pressure(pod: Obj) -> bool:
    return tolerates(tolerations_of(pod), MEMORY_PRESSURE_TAINT)


def pressure_rejection(pod: Obj, *, conditions: Mapping[str, str]) -> Rejection | None:
    """Why the eviction manager's admission refuses `pod`, or None when it admits it.

    `conditions` are the node's condition statuses, `{type: status}`.
    """
    if conditions.get("OutOfDisk") == "True":
        # v1.7's kubelet admission (the disk-space manager, `--low-diskspace-threshold-mb`).
        return Rejection(reason="OutOfDisk", message="cannot be started due to lack of disk space.")
    active = [c for c in PRESSURE_CONDITIONS if conditions.get(c) == "True"]
    if not active or priority_of(pod) >= CRITICAL_PRIORITY:
        return None
    if active == ["MemoryPressure"] and (qos_class(pod) != "BestEffort" or _tolerates_memory_pressure(pod)):
        return None
    return Rejection(reason="Evicted", message=f"The node had condition: [{', '.join(active)}]. ")


def _amount(resource: UsageResource, value: int) -> str:
    if resource == "pids":
        return str(value)
    if value % (1024 * 1024) == 0:
        return f"{value // (1024 * 1024)}Mi"
    return f"{math.ceil(value / 1024)}Ki"


def eviction_message(*, resource: str = "memory", threshold: Threshold | None = None,
                     observation: Observation | None = None, pod: Obj | None = None,
                     default_container_memory: int = 64 * 1024 * 1024) -> str:
    """The message of an evicted pod's status, in upstream's words.

    With only `resource` (an override's eviction): "The node was low on resource: memory. ".
    With the threshold, the observation and the pod: the threshold quantity, what was
    available, and the container that used the most above its request.
    """
    r: UsageResource = next((k for k, v in RESOURCE_NAME.items() if v == resource), "memory")
    msg = f"The node was low on resource: {RESOURCE_NAME[r]}. "
    if threshold is None or observation is None:
        return msg
    msg += (f"Threshold quantity: {threshold.shown(observation.capacity)}, "
            f"available: {_amount(r, max(observation.available, 0))}. ")
    if pod is None or r == "pids":
        return msg
    containers = {c.get("name"): c for c in _containers(pod)}
    usages = container_usage(pod, default_container_memory=default_container_memory)
    for name, usage in usages.items():
        request = _container_request(containers.get(name) or {}, r)
        if usage[r] > request:
            shown_request = _amount(r, request) if request else "0"
            msg += (f"Container {name} was using {_amount(r, usage[r])}, request is {shown_request}, "
                    f"has larger consumption of {RESOURCE_NAME[r]}. ")
    return msg

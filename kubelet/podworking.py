"""The pod worker of one node: from the pods bound to it to containers and pod status.

Each node sees its pods through a `PodView` (its own informer with the field selector
`spec.nodeName=<node>`, or its slice of a process-wide watch) and keeps one `PodMachine` per
pod uid. Every change of a pod, and every deadline of its machine (a container start, exit or
stop), puts the pod's key on the node's work queue; `sync` then does what a kubelet does, level
based, from the cached pod and the local machine:

1. a pod it has not seen before is admitted or rejected (pressure first, then resource fit:
   `OutOfcpu`, `OutOfmemory`, `OutOfpods`), a pod that is already terminal is left alone;
2. a pod with `deletionTimestamp` has its containers stopped within its grace period;
3. the status (phase, conditions, containerStatuses, IPs) is patched when it changed, with the
   pod's uid in the patch (the apiserver refuses it if the name now belongs to another pod);
4. a terminating pod whose containers have all exited is finished with a DELETE carrying
   `gracePeriodSeconds=0` and the uid as precondition, so that a new pod of the same name is
   never deleted by mistake.

Races and invariants:

* The pod seen here may be stale; nothing is assumed beyond what the cache shows. A pod that
  vanished from the cache (deleted, force-deleted while the node was off or partitioned, or
  recreated with a new uid) has its containers killed at once; for each container that was
  still running the kubelet posts a `Killing` event ("Stopping container NAME", source host the
  node, involvedObject the pod's old uid). After a network partition (`EmulatedNode.partition`)
  that event is how the node reports that it ran a pod the API had already given up: the
  at-most-one violation `kubectl delete --force` warns about.
* Writes go through the node's pod client, never the heartbeat client: a slow status write
  does not delay a heartbeat.
* One worker per node: a node's pods are synced one at a time (upstream's status manager also
  writes one status at a time), and a key is never synced twice at once (WorkQueue).
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from kubemesh.kubelet.containerlogs import ContainerLog
from kubemesh.kubelet.lifecycle import PodMachine
from kubemesh.kubelet.pressure import (
    RESOURCE_NAME,
    SIGNALS,
    Observation,
    Threshold,
    eviction_message,
    pressure_rejection,
    rank_for_eviction,
)
from kubemesh.kubelet.processes import PodProcesses, ProcessRuntime
from kubemesh.kubelet.resources import Resources, admit, pod_requests
from kubemesh.kubelet.settings import KubeletSettings
from kubemesh.services.machinery.client import ApiError, ConflictError, ForbiddenError, NotFoundError, PatchType
from kubemesh.services.machinery.clock import Clock, format_time
from kubemesh.services.machinery.queueing import Result, WorkQueue
from kubemesh.services.model.kinds import EVENTS, PODS, Kind, Obj, name_of, namespace_of, uid_of
from kubemesh.services.model.quantities import parse_quantity

log = structlog.get_logger("kubelet.podworking")

TERMINAL = ("Succeeded", "Failed")


class PodView(Protocol):
    """What the worker reads the node's pods from (an Informer fits)."""

    def get(self, key: str) -> Obj | None:
        """The cached pod under `key`."""
        ...

    def keys(self) -> list[str]:
        """Every cached key."""
        ...


class PodApi(Protocol):
    """The part of `kubemesh.services.machinery.client.ApiClient` the pod worker uses."""

    async def patch(self, kind: Kind, name: str, patch: Obj | list[Obj], *, namespace: str | None = None,
                    patch_type: PatchType = "merge", subresource: str | None = None) -> Obj:
        """PATCH an object."""
        ...

    async def create(self, kind: Kind, body: Obj, *, namespace: str | None = None) -> Obj:
        """POST an object (the kubelet's events)."""
        ...

    async def delete(self, kind: Kind, name: str, *, namespace: str | None = None,
                     grace_period_seconds: int | None = None, propagation_policy: str | None = None,
                     preconditions: Obj | None = None) -> Obj | None:
        """DELETE an object."""
        ...


class IpAllocator:
    """Pod IPs from a node's /24 (`.2` to `.254`), never two live pods with one address."""

    def __init__(self, cidr: str) -> None:
        self._prefix = cidr.rsplit(".", 1)[0]
        self._used: set[int] = set()
        self._next = 2

    def allocate(self) -> str:
        """A free address (addresses are reused round-robin once released)."""
        for _ in range(253):
            host = self._next
            self._next = 2 if self._next >= 254 else self._next + 1
            if host not in self._used:
                self._used.add(host)
                return f"{self._prefix}.{host}"
        raise RuntimeError("pod CIDR exhausted")

    def release(self, ip: str | None) -> None:
        """Give an address back."""
        if ip and ip.startswith(self._prefix + "."):
            self._used.discard(int(ip.rsplit(".", 1)[1]))


def grace_of(pod: Obj) -> float:
    """The grace period of a deletion (deletionGracePeriodSeconds, else the spec's, else 30)."""
    md = pod.get("metadata") or {}
    g = md.get("deletionGracePeriodSeconds")
    if g is None:
        g = (pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return float(g) if isinstance(g, int | float) else 30.0


@dataclass(slots=True)
class _Entry:
    machine: PodMachine
    pod: Obj
    written: Obj | None = None
    delete_sent: bool = False
    processes: PodProcesses | None = None
    """The pod's real processes (process runtime), else None."""


@dataclass(slots=True)
class Faults:
    """Chaos on a node's containers (admin endpoint)."""

    start_delay: float = 0.0
    """Added to every container start (slow image pulls)."""
    stop_delay: float | None = None
    """Replaces the containers' SIGTERM exit time (containers that ignore SIGTERM)."""


@dataclass(slots=True)
class PodWorker:
    """The pods of one node: machines, admission, status writes, final deletes."""

    node: str
    host_ip: str
    cidr: str
    api: PodApi
    clock: Clock
    rng: random.Random
    settings: KubeletSettings
    allocatable: Resources
    pressure: Callable[[], dict[str, str]]
    """The node's condition statuses `{type: status}` (admission under pressure)."""
    view: PodView | None = None
    faults: Faults = field(default_factory=Faults)
    entries: dict[str, _Entry] = field(default_factory=dict)
    queue: WorkQueue[str] | None = None
    ips: IpAllocator = field(init=False)
    rebooted: bool = False
    """Set on power-on: containers seen in the API status were lost with the machine."""
    writes: int = 0
    log_streams: int = 0
    """Log requests being answered now (a `follow` stream lasts until its run ends or its client leaves)."""
    processes: ProcessRuntime | None = None
    """The process runtime (`--runtime process` or `opt-in`): pods it `wants` run as real processes."""

    def __post_init__(self) -> None:
        self.ips = IpAllocator(self.cidr)

    # -- events -------------------------------------------------------------------------------

    def enqueue(self, key: str) -> None:
        """Ask for `key` to be synced (no-op while the node is off)."""
        if self.queue is not None:
            self.queue.add(key)

    def on_add(self, obj: Obj, initial: bool = False) -> None:
        """Informer handler."""
        self.enqueue(f"{namespace_of(obj)}/{name_of(obj)}")

    def on_update(self, old: Obj, new: Obj) -> None:
        """Informer handler."""
        self.enqueue(f"{namespace_of(new)}/{name_of(new)}")

    def on_delete(self, obj: Any) -> None:
        """Informer handler (also for `DeletedFinalStateUnknown`)."""
        key = getattr(obj, "key", None)
        self.enqueue(key if isinstance(key, str) else f"{namespace_of(obj)}/{name_of(obj)}")

    def resync_all(self) -> None:
        """Enqueue every pod the view shows and every pod this node still runs."""
        for key in {*(self.view.keys() if self.view is not None else []), *self.entries}:
            self.enqueue(key)

    # -- sync ---------------------------------------------------------------------------------

    async def sync(self, key: str) -> Result | None:
        """Bring one pod one step closer to what the API asks; see the module docstring."""
        now = self.clock.now()
        pod = self.view.get(key) if self.view is not None else None
        entry = self.entries.get(key)
        if entry is not None and (pod is None or uid_of(pod) != entry.machine.uid):
            killed = list(entry.machine.running_containers)
            self._forget(key, entry, now)
            if killed:
                await self._container_events(entry.pod, killed, reason="Killing", now=now)
            entry = None
        if pod is None:
            return None
        md = pod.get("metadata") or {}
        deleting = bool(md.get("deletionTimestamp"))
        if entry is None:
            if (pod.get("status") or {}).get("phase") in TERMINAL:
                # Finished before this kubelet (re)started: nothing runs; finish a deletion.
                if deleting:
                    await self._final_delete(pod)
                return None
            entry = self._admit(pod, now)
            self.entries[key] = entry
        entry.pod = pod
        m = entry.machine
        if entry.processes is not None:
            entry.processes.pod = pod
            entry.processes.pod_ip = m.pod_ip
        if self.faults.stop_delay is not None:
            m.stop_delay = self.faults.stop_delay
        if deleting:
            m.terminate(now=now, grace=grace_of(pod))
        before = set(m.running_containers)
        m.collect(now)
        m.advance(now)
        started = [c for c in m.running_containers if c not in before]
        if m.terminal and not m.terminating:
            self.ips.release(m.pod_ip)
        status = m.status(now=now)
        if status != entry.written:
            await self._write_status(pod, status)
            entry.written = status
        if started:
            await self._container_events(pod, started, reason="Started", now=now)
        finished = m.wants_delete or (m.terminal and not m.running_containers)
        if deleting and finished and not entry.delete_sent:
            self.ips.release(m.pod_ip)
            await self._final_delete(pod)
            entry.delete_sent = True
        due = m.next_deadline()
        if due is None:
            return None
        return Result(requeue_after=max(0.0, due - self.clock.now()))

    def _admit(self, pod: Obj, now: float) -> _Entry:
        m = PodMachine.for_pod(pod, host_ip=self.host_ip, rng=self.rng,
                               start_delay=self.settings.pod_start_delay,
                               stop_delay=self.settings.container_stop_delay
                               if self.faults.stop_delay is None else self.faults.stop_delay,
                               crash_loop_base=self.settings.crash_loop_base,
                               crash_loop_max=self.settings.crash_loop_max, rebooted=self.rebooted,
                               default_run_seconds=self.settings.default_run_seconds)
        processes = None
        if self.processes is not None and self.processes.wants(pod):
            key = f"{namespace_of(pod)}/{name_of(pod)}"
            processes = self.processes.for_pod(pod, notify=lambda: self.enqueue(key), host_ip=self.host_ip)
            m.use_processes(processes, pod)
        deleting = bool((pod.get("metadata") or {}).get("deletionTimestamp"))
        rejection = None if deleting else pressure_rejection(pod, conditions=self.pressure())
        if rejection is None and not deleting:
            rejection = admit(pod, allocatable=self.allocatable, admitted=self.admitted_pods())
        if rejection is not None:
            log.info("pod rejected", node=self.node, pod=f"{namespace_of(pod)}/{name_of(pod)}",
                     reason=rejection.reason)
            m.reject(rejection, now=now)
        else:
            m.start(now=now, pod_ip=self.ips.allocate(), extra_delay=self.faults.start_delay)
            if processes is not None:
                processes.pod_ip = m.pod_ip
        return _Entry(machine=m, pod=pod, processes=processes)

    def admitted_pods(self) -> list[Obj]:
        """Pods holding resources on this node (admitted and not terminal)."""
        return [e.pod for e in self.entries.values() if e.machine.admitted_at is not None
                and not e.machine.terminal]

    def _forget(self, key: str, entry: _Entry, now: float) -> None:
        m = entry.machine
        del self.entries[key]
        if m.running_containers:
            log.bind(node=self.node).info("pod gone from the API; stopping its containers", pod=key, uid=m.uid,
                                          containers=m.running_containers)
        m.kill_all(now=now)
        if entry.processes is not None:
            entry.processes.remove()
        self.ips.release(m.pod_ip)

    async def _write_status(self, pod: Obj, status: Obj) -> None:
        body = {"metadata": {"uid": uid_of(pod)}, "status": status}
        try:
            await self.api.patch(PODS, name_of(pod), body, namespace=namespace_of(pod),
                                 patch_type="strategic", subresource="status")
            self.writes += 1
        except (NotFoundError, ConflictError, ForbiddenError) as exc:
            # Gone, or the name now belongs to another uid, or (NodeRestriction) it is bound to
            # another node now: the informer will tell.
            log.bind(node=self.node).info("pod status not written", pod=f"{namespace_of(pod)}/{name_of(pod)}",
                           error=str(exc))

    async def _container_events(self, pod: Obj, containers: list[str], *, reason: str, now: float) -> None:
        """A `Started` or `Killing` event per container, as the kubelet's event recorder writes them."""
        ns, name = namespace_of(pod), name_of(pod)
        verb, tag = ("Started", "s") if reason == "Started" else ("Stopping", "")
        for i, container in enumerate(containers):
            event: Obj = {
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"name": f"{name}.{int(now * 1e9):x}{tag}{i:02x}", "namespace": ns},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name,
                                   "uid": uid_of(pod), "fieldPath": f"spec.containers{{{container}}}"},
                "reason": reason, "message": f"{verb} container {container}", "type": "Normal",
                "source": {"component": "kubelet", "host": self.node},
                "reportingComponent": "kubelet", "reportingInstance": self.node,
                "firstTimestamp": format_time(now), "lastTimestamp": format_time(now), "count": 1,
            }
            try:
                await self.api.create(EVENTS, event, namespace=ns)
            except ApiError as exc:  # an event is never worth failing a sync for
                log.bind(node=self.node).debug("event not written", pod=f"{ns}/{name}", error=str(exc))

    async def _final_delete(self, pod: Obj) -> None:
        # NotFound: already gone. Conflict: the name now belongs to another pod, not ours to delete.
        with contextlib.suppress(NotFoundError, ConflictError, ForbiddenError):
            await self.api.delete(PODS, name_of(pod), namespace=namespace_of(pod), grace_period_seconds=0,
                                  preconditions={"uid": uid_of(pod)})

    # -- chaos and pressure -------------------------------------------------------------------

    def usage_pods(self) -> list[Obj]:
        """The pods whose containers use the node's resources now (admitted, not terminal)."""
        return [e.pod for e in self.entries.values() if e.machine.admitted_at is not None
                and not e.machine.terminal and e.machine.running_containers]

    def evict_for(self, *, now: float, threshold: Threshold, observation: Observation) -> str | None:
        """Evict the pod upstream's ranking for `threshold`'s resource puts first; its key, or None."""
        resource = SIGNALS.get(threshold.signal) or "memory"
        candidates = {id(e.pod): k for k, e in self.entries.items()
                      if e.machine.admitted_at is not None and not e.machine.terminal
                      and not e.machine.terminating and e.machine.running_containers}
        pods = [self.entries[k].pod for k in candidates.values()]
        default_memory = int(parse_quantity(self.settings.default_container_memory_usage))
        ranked = rank_for_eviction(pods, resource, default_container_memory=default_memory)
        if not ranked:
            return None
        key = candidates[id(ranked[0])]
        m = self.entries[key].machine
        m.evict(now=now, message=eviction_message(resource=RESOURCE_NAME[resource], threshold=threshold,
                                                  observation=observation, pod=ranked[0],
                                                  default_container_memory=default_memory))
        self.ips.release(m.pod_ip)
        log.bind(node=self.node).info("pod evicted", pod=key, signal=threshold.signal,
                                      available=observation.available)
        self.enqueue(key)
        return key

    def fail_containers(self, *, now: float, pods: Iterable[str] | None, container: str | None,
                        exit_code: int, reason: str) -> dict[str, list[str]]:
        """Make containers exit (`OOMKilled`/137 for an OOM kill); `{pod key: [names]}`."""
        hit: dict[str, list[str]] = {}
        keys = list(self.entries) if pods is None else [k for k in pods if k in self.entries]
        for key in keys:
            names = self.entries[key].machine.fail_container(now=now, name=container, exit_code=exit_code,
                                                             reason=reason)
            if names:
                hit[key] = names
                self.enqueue(key)
        return hit

    def power_lost(self) -> None:
        """The machine went down: every container died with it."""
        for entry in self.entries.values():
            self.ips.release(entry.machine.pod_ip)
            if entry.processes is not None:
                entry.processes.kill_all()
        self.entries.clear()
        self.rebooted = True

    def container_log(self, key: str, container: str, *, previous: bool) -> tuple[ContainerLog, Callable[[], bool]]:
        """The log `GET .../log` shows for `container` of the pod `key`, and whether that pod still runs here.

        Raises KeyError when this node runs no such pod, `LogUnavailable` when the container's
        state has no log to show (see `PodMachine.container_log`).
        """
        entry = self.entries[key]
        run = entry.machine.container_log(container, pod=name_of(entry.pod), previous=previous)
        return run, lambda: self.entries.get(key) is entry

    def describe(self) -> dict[str, Any]:
        """The node's pods and containers as the runtime sees them."""
        return {
            "pods": {k: {"uid": e.machine.uid, "phase": e.machine.phase, "podIP": e.machine.pod_ip,
                         "running": e.machine.running_containers, "terminating": e.machine.terminating}
                     for k, e in sorted(self.entries.items())},
            "logStreams": self.log_streams,
            "allocatable": self.allocatable.to_quantities(),
            "used": sum_requests(self.admitted_pods()).to_quantities(),
        }


def sum_requests(pods: Iterable[Obj]) -> Resources:
    """Total requests of `pods`."""
    total = Resources({})
    for p in pods:
        total = total + pod_requests(p)
    return total

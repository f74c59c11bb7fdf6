"""The scheduling queue (active, backoff, unschedulable) and the nominator.

Upstream's `PriorityQueue` semantics, on the injected clock:

* **activeQ** pops the highest priority first, then the pod that entered the queue earliest.
* **backoffQ** holds pods that failed and whose backoff has not elapsed. The backoff grows per
  pod with its attempts: `initial * 2^(attempts-1)`, capped (1 s to 10 s by default), counted from
  the moment the pod last failed. `flush_backoff_completed` moves the ripe ones to activeQ.
* **unschedulable** holds pods that failed; a cluster event that can make them schedulable
  (`move_pods_on_event`) moves them to activeQ, or to backoffQ if their backoff is still running.
  A pod that failed in a cycle during which such an event arrived goes to backoffQ instead (the
  event may have been the one it needed: `move_request_cycle`). Pods unschedulable for longer
  than `max_unschedulable_duration` are retried anyway (`flush_unschedulable_leftover`).
* **in flight**: a popped pod is in no queue; updates to it are remembered and handed back when
  the cycle requeues it (`requeue`), a delete marks it gone.
* A pod key is in at most one of these places at a time.

The **nominator** remembers which node each preemptor was nominated to; the filters count
nominated pods of higher or equal priority as if they were already on their node. Two historic
races live here (switches in `scheduler.settings`' sibling `bugs`):

* `nominate-after-patch` (kubernetes#72124): the scheduler learns a nomination only from the pod
  update carrying `status.nominatedNodeName`. Until that update arrives, another pod can take the
  node. Fixed (#72259): the preemption path calls `add(..., node=...)` before sending the patch.
  That switch is applied by the caller (`scheduler.scheduling`); the nominator itself offers both.
* `stale-update-unnominates` (kubernetes#74931): a pod update in which neither the old nor the new
  object carries `nominatedNodeName`, arriving after the in-memory nomination, replaces the
  nomination by the (absent) one in the object. Fixed (#77990): such an update keeps the
  in-memory nomination.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from kubemesh.scheduler.podinfo import PodInfo
from kubemesh.services.machinery.clock import Clock


class ClusterEvent(Enum):
    """Cluster events that can make an unschedulable pod schedulable."""

    NODE_ADD = "NodeAdd"
    NODE_UPDATE = "NodeUpdate"
    ASSIGNED_POD_ADD = "AssignedPodAdd"
    ASSIGNED_POD_UPDATE = "AssignedPodUpdate"
    ASSIGNED_POD_DELETE = "AssignedPodDelete"
    UNSCHEDULABLE_TIMEOUT = "UnschedulableTimeout"
    FORCE = "ForceActivate"


# Which events can cure a failure of which filter (upstream's EventsToRegister, simplified).
_CURES: dict[str, frozenset[ClusterEvent]] = {
    "NodeName": frozenset({ClusterEvent.NODE_ADD}),
    "NodeUnschedulable": frozenset({ClusterEvent.NODE_ADD, ClusterEvent.NODE_UPDATE}),
    "NodeConditions": frozenset({ClusterEvent.NODE_ADD, ClusterEvent.NODE_UPDATE}),
    "TaintToleration": frozenset({ClusterEvent.NODE_ADD, ClusterEvent.NODE_UPDATE}),
    "NodeAffinity": frozenset({ClusterEvent.NODE_ADD, ClusterEvent.NODE_UPDATE}),
    "NodeResourcesFit": frozenset({ClusterEvent.NODE_ADD, ClusterEvent.NODE_UPDATE,
                                   ClusterEvent.ASSIGNED_POD_DELETE, ClusterEvent.ASSIGNED_POD_UPDATE}),
    "InterPodAffinity": frozenset({ClusterEvent.NODE_ADD, ClusterEvent.NODE_UPDATE,
                                   ClusterEvent.ASSIGNED_POD_ADD, ClusterEvent.ASSIGNED_POD_UPDATE,
                                   ClusterEvent.ASSIGNED_POD_DELETE}),
}


class QueueClosedError(Exception):
    """The queue was closed while waiting for a pod."""


@dataclass(slots=True)
class QueuedPodInfo:
    """A pod in the scheduling queue, with its attempt history."""

    info: PodInfo
    timestamp: float
    """When the pod last entered a queue (activeQ order; backoff is counted from it)."""
    initial_timestamp: float
    attempts: int = 0
    unschedulable_plugins: frozenset[str] = frozenset()
    """The filters that rejected the pod in its last attempt; empty = any event may help."""
    seq: int = 0

    @property
    def key(self) -> str:
        """The pod's cache key."""
        return self.info.key


class Nominator:
    """Pods nominated to nodes by preemption, by node (see the module docstring)."""

    def __init__(self, *, stale_update_unnominates: bool = False) -> None:
        self.stale_update_unnominates = stale_update_unnominates
        self._by_node: dict[str, dict[str, PodInfo]] = {}
        self._node_of: dict[str, str] = {}

    def add(self, pi: PodInfo, *, node: str | None = None) -> None:
        """Nominate a pod: to `node` if given, else to the node its `status.nominatedNodeName` names.

        Always drops any previous nomination first, so a pod is nominated to one node at most.
        """
        self.delete(pi.key)
        target = node if node is not None else pi.nominated_node
        if not target or pi.node_name:
            return
        self._by_node.setdefault(target, {})[pi.key] = pi
        self._node_of[pi.key] = target

    def delete(self, key: str) -> None:
        """Forget a pod's nomination."""
        node = self._node_of.pop(key, None)
        if node is None:
            return
        pods = self._by_node.get(node)
        if pods is not None:
            pods.pop(key, None)
            if not pods:
                del self._by_node[node]

    def update(self, old: PodInfo, new: PodInfo) -> None:
        """A pod update arrived from the informer.

        If neither version carries `nominatedNodeName`, the update says nothing about the
        nomination: today's code (#77990) keeps the in-memory one; with
        `stale_update_unnominates` the nomination is replaced by the new object's (none).
        """
        override: str | None = None
        if not self.stale_update_unnominates and not old.nominated_node and not new.nominated_node:
            override = self._node_of.get(old.key)
        self.add(new, node=override)

    def node_of(self, key: str) -> str | None:
        """The node a pod is nominated to (in memory), if any."""
        return self._node_of.get(key)

    def pods_for_node(self, node: str) -> list[PodInfo]:
        """Pods nominated to a node, in nomination order."""
        pods = self._by_node.get(node)
        return list(pods.values()) if pods else []

    def has_nominations(self, node: str) -> bool:
        """Whether any pod is nominated to this node (cheap check for the hot loop)."""
        return node in self._by_node

    def __len__(self) -> int:
        return len(self._node_of)

    def dump(self) -> dict[str, list[str]]:
        """Nominations by node, for the debug endpoint."""
        return {node: sorted(pods) for node, pods in sorted(self._by_node.items())}


class SchedulingQueue:
    """Active, backoff and unschedulable pods (see the module docstring)."""

    def __init__(self, *, clock: Clock, nominator: Nominator, initial_backoff: float = 1.0,
                 max_backoff: float = 10.0, max_unschedulable_duration: float = 300.0) -> None:
        self.clock = clock
        self.nominator = nominator
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_unschedulable_duration = max_unschedulable_duration
        self._seq = itertools.count()
        self._active: dict[str, QueuedPodInfo] = {}
        self._active_heap: list[tuple[int, float, int, QueuedPodInfo]] = []
        self._backoff: dict[str, QueuedPodInfo] = {}
        self._backoff_heap: list[tuple[float, int, QueuedPodInfo]] = []
        self._unschedulable: dict[str, QueuedPodInfo] = {}
        self._in_flight: dict[str, QueuedPodInfo | None] = {}
        """Popped pods: their latest info (None once deleted)."""
        self.scheduling_cycle = 0
        self.move_request_cycle = -1
        self._wakeup = asyncio.Event()
        self._closed = False

    # ---- internal placement --------------------------------------------------------------

    def _push_active(self, qpi: QueuedPodInfo) -> None:
        qpi.seq = next(self._seq)
        self._active[qpi.key] = qpi
        heapq.heappush(self._active_heap, (-qpi.info.priority, qpi.timestamp, qpi.seq, qpi))
        self._wakeup.set()

    def _push_backoff(self, qpi: QueuedPodInfo) -> None:
        qpi.seq = next(self._seq)
        self._backoff[qpi.key] = qpi
        heapq.heappush(self._backoff_heap, (self.backoff_expiry(qpi), qpi.seq, qpi))

    def _remove(self, key: str) -> QueuedPodInfo | None:
        # Heap entries are dropped lazily: an entry whose object is no longer the current one
        # for its key is skipped when it surfaces.
        for where in (self._active, self._backoff, self._unschedulable):
            qpi = where.pop(key, None)
            if qpi is not None:
                return qpi
        return None

    def backoff_duration(self, qpi: QueuedPodInfo) -> float:
        """Backoff of a pod: initial * 2^(attempts-1), capped at max (0 before the first attempt)."""
        if qpi.attempts <= 0:
            return 0.0
        d: float = self.initial_backoff * float(2 ** min(qpi.attempts - 1, 30))
        return min(d, self.max_backoff)

    def backoff_expiry(self, qpi: QueuedPodInfo) -> float:
        """When the pod's backoff ends."""
        return qpi.timestamp + self.backoff_duration(qpi)

    def _backing_off(self, qpi: QueuedPodInfo, now: float) -> bool:
        return self.backoff_expiry(qpi) > now

    def _move(self, qpi: QueuedPodInfo, now: float) -> None:
        """Move a pod that may now be schedulable to activeQ, or backoffQ if still backing off."""
        if self._backing_off(qpi, now):
            self._push_backoff(qpi)
        else:
            self._push_active(qpi)

    # ---- producers -----------------------------------------------------------------------

    def add(self, pi: PodInfo) -> None:
        """A new unscheduled pod (informer ADD): to activeQ; its nomination is read from it."""
        now = self.clock.now()
        if pi.key in self._in_flight:
            self._in_flight[pi.key] = QueuedPodInfo(pi, now, now)
            return
        old = self._remove(pi.key)
        qpi = old if old is not None else QueuedPodInfo(pi, now, now)
        qpi.info = pi
        qpi.timestamp = now
        self._push_active(qpi)
        self.nominator.add(pi)

    def update(self, old: PodInfo, new: PodInfo) -> None:
        """An unscheduled pod changed (informer UPDATE)."""
        self.nominator.update(old, new)
        if new.key in self._in_flight:
            prev = self._in_flight[new.key]
            if prev is not None:
                prev.info = new
            return
        now = self.clock.now()
        if new.key in self._active:
            self._active[new.key].info = new
            return
        if new.key in self._backoff:
            self._backoff[new.key].info = new
            return
        qpi = self._unschedulable.get(new.key)
        if qpi is not None:
            spec_changed = (old.pod.get("spec") != new.pod.get("spec")
                            or old.labels != new.labels)
            qpi.info = new
            if spec_changed:
                # The pod itself changed (e.g. a toleration added): it may fit now.
                del self._unschedulable[new.key]
                self._move(qpi, now)
            return
        self._push_active(QueuedPodInfo(new, now, now))

    def delete(self, key: str) -> None:
        """A pod was deleted, or got assigned by someone: forget it everywhere."""
        self._remove(key)
        if key in self._in_flight:
            self._in_flight[key] = None
        self.nominator.delete(key)

    def activate(self, key: str) -> bool:
        """Move one waiting pod straight to activeQ (tests, debugging)."""
        qpi = self._backoff.pop(key, None) or self._unschedulable.pop(key, None)
        if qpi is None:
            return False
        self._push_active(qpi)
        return True

    # ---- consumer ------------------------------------------------------------------------

    def pop_nowait(self) -> QueuedPodInfo | None:
        """The next pod to schedule, or None when activeQ is empty."""
        while self._active_heap:
            _, _, _, qpi = heapq.heappop(self._active_heap)
            if self._active.get(qpi.key) is not qpi:
                continue
            del self._active[qpi.key]
            qpi.attempts += 1
            self.scheduling_cycle += 1
            self._in_flight[qpi.key] = qpi
            return qpi
        self._wakeup.clear()
        return None

    async def pop(self) -> QueuedPodInfo:
        """Wait for the next pod to schedule."""
        while True:
            if self._closed:
                raise QueueClosedError
            qpi = self.pop_nowait()
            if qpi is not None:
                return qpi
            await self._wakeup.wait()

    def done(self, key: str) -> None:
        """The cycle of a popped pod ended with the pod bound (or dropped)."""
        self._in_flight.pop(key, None)

    def in_flight_info(self, key: str) -> PodInfo | None:
        """The latest version of a popped pod, None if it was deleted meanwhile."""
        qpi = self._in_flight.get(key)
        return None if qpi is None else qpi.info

    def requeue(self, qpi: QueuedPodInfo, *, cycle: int, plugins: Iterable[str] = (),
                error: bool = False) -> None:
        """A popped pod failed: to unschedulable, or to backoffQ if a move request came meanwhile.

        A pod that failed with an error rather than a fit failure (`error`) goes to backoffQ: it
        is retried after its backoff, whatever happens in the cluster. Uses the latest version
        of the pod seen while it was in flight; a pod deleted meanwhile
        is dropped. Upstream's AddUnschedulableIfNotPresent.
        """
        if qpi.key in self._in_flight:
            latest = self._in_flight.pop(qpi.key)
            if latest is None:
                return
            qpi.info = latest.info
        if qpi.key in self._active or qpi.key in self._backoff or qpi.key in self._unschedulable:
            return
        qpi.timestamp = self.clock.now()
        qpi.unschedulable_plugins = frozenset(plugins)
        if error or self.move_request_cycle >= cycle:
            self._push_backoff(qpi)
        else:
            self._unschedulable[qpi.key] = qpi

    def move_pods_on_event(self, event: ClusterEvent, *,
                           only: Iterable[str] | None = None) -> int:
        """A cluster event: move the unschedulable pods it may help (optionally only `only`)."""
        now = self.clock.now()
        self.move_request_cycle = self.scheduling_cycle
        keys = list(self._unschedulable) if only is None else [k for k in only if k in self._unschedulable]
        moved = 0
        for key in keys:
            qpi = self._unschedulable[key]
            if event is not ClusterEvent.FORCE and qpi.unschedulable_plugins and not any(
                    event in _CURES.get(p, frozenset()) for p in qpi.unschedulable_plugins):
                continue
            del self._unschedulable[key]
            self._move(qpi, now)
            moved += 1
        return moved

    def unschedulable_with_affinity_to(self, assigned: PodInfo) -> list[str]:
        """Unschedulable pods with a required affinity term the newly assigned pod satisfies."""
        out: list[str] = []
        for key, qpi in self._unschedulable.items():
            if any(t.matches(assigned) for t in qpi.info.affinity_terms):
                out.append(key)
        return out

    def flush_backoff_completed(self) -> int:
        """Move pods whose backoff has elapsed to activeQ."""
        now = self.clock.now()
        moved = 0
        while self._backoff_heap and self._backoff_heap[0][0] <= now:
            _, _, qpi = heapq.heappop(self._backoff_heap)
            if self._backoff.get(qpi.key) is not qpi:
                continue
            del self._backoff[qpi.key]
            self._push_active(qpi)
            moved += 1
        return moved

    def flush_unschedulable_leftover(self) -> int:
        """Retry pods that have been unschedulable for longer than the maximum duration."""
        now = self.clock.now()
        stale = [k for k, q in self._unschedulable.items()
                 if now - q.timestamp >= self.max_unschedulable_duration]
        for key in stale:
            qpi = self._unschedulable.pop(key)
            self._move(qpi, now)
        return len(stale)

    def close(self) -> None:
        """Wake every waiter with QueueClosedError."""
        self._closed = True
        self._wakeup.set()

    # ---- reads ---------------------------------------------------------------------------

    def where(self, key: str) -> str | None:
        """Which part of the queue holds a pod: active, backoff, unschedulable, in-flight, or None."""
        if key in self._active:
            return "active"
        if key in self._backoff:
            return "backoff"
        if key in self._unschedulable:
            return "unschedulable"
        if key in self._in_flight:
            return "in-flight"
        return None

    def lengths(self) -> dict[str, int]:
        """Sizes of the parts, for metrics."""
        return {"active": len(self._active), "backoff": len(self._backoff),
                "unschedulable": len(self._unschedulable), "inFlight": len(self._in_flight)}

    def __len__(self) -> int:
        return len(self._active) + len(self._backoff) + len(self._unschedulable)

    def dump(self) -> dict[str, Any]:
        """The queue as the debug endpoint shows it."""
        def row(q: QueuedPodInfo) -> dict[str, Any]:
            return {"pod": q.key, "priority": q.info.priority, "attempts": q.attempts,
                    "timestamp": q.timestamp, "backoffUntil": self.backoff_expiry(q),
                    "unschedulablePlugins": sorted(q.unschedulable_plugins)}
        active = sorted(self._active.values(), key=lambda q: (-q.info.priority, q.timestamp, q.seq))
        return {
            "schedulingCycle": self.scheduling_cycle,
            "moveRequestCycle": self.move_request_cycle,
            "active": [row(q) for q in active],
            "backoff": [row(q) for q in sorted(self._backoff.values(), key=self.backoff_expiry)],
            "unschedulable": [row(q) for q in self._unschedulable.values()],
            "inFlight": sorted(self._in_flight),
            "nominated": self.nominator.dump(),
        }


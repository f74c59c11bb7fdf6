"""The node-lifecycle controller: node health from heartbeats, taints, zones and evictions.

Every `--node-monitor-period` (5 s) `monitor_once` evaluates every node in the cache:

* **Health** (`assess_node_health`, upstream `tryUpdateNodeHealth`). The controller keeps, in
  memory only, each node's `probeTimestamp` (last time it saw a heartbeat: a new
  `lastHeartbeatTime` on the Ready condition or a newer Lease `renewTime`) and
  `readyTransitionTimestamp`. When `now > probeTimestamp + grace` (grace is
  `--node-monitor-grace-period`, or `--node-startup-grace-period` for a node that never posted
  Ready), Ready, MemoryPressure, DiskPressure and PIDPressure become Unknown with reason
  NodeStatusUnknown, "Kubelet stopped posting node status." (and OutOfDisk, when the node
  reports it: only a 1.7 kubelet does, and v1.7's controller listed it with the others). After a restart there is no
  memory: the first pass logs "Missing timestamp ... Assuming now" and the grace clock
  starts again (k3s #4168), exactly as upstream.
* **Pods NotReady**: on a Ready → not-Ready transition observed in this pass, every pod on the
  node gets its Ready condition set to False (status write) and a NodeNotReady event.
* **Taints** (fixed path): a node whose *observed* Ready is False/Unknown is queued on its
  zone's rate-limited tainter; the tainting pass adds `not-ready`/`unreachable` NoExecute
  (swapping the opposite one at once if present). Ready=True removes them and forgets the
  node. The taint-eviction controller then deletes the pods. NoSchedule taints follow the
  conditions directly, without rate limiting.
* **Legacy eviction** (`legacy-pod-eviction` on: the seed's v1.7 path): no NoExecute taints; a
  node Unknown for `probeTimestamp + --pod-eviction-timeout` (False: `readyTransitionTimestamp
  + timeout`) is queued on its zone's pod evictor, whose pass deletes the node's pods, except
  DaemonSet pods and pods already being deleted, at the zone's rate.
* **Zones** (`zones.Disruption`): states and rates per zone; master disruption mode when every
  zone is fully disrupted (all NoExecute taints removed, evictions stopped).

Guarantees: at most one API write per node per decision; a write conflict is retried from a
fresh GET; the controller acts on its (possibly stale) informer caches, as upstream does, so
the lease-informer-lag race (#132831) reproduces with a frozen lease informer. The one
exception is the controller's own node writes: a node it wrote is judged on the newest of the
informer's copy and the copy its write returned (`latest`), so a monitor pass that runs before
the watch delivers a taint does not re-queue the node and waste a zone's token (at a fast
cluster clock that window is seconds of cluster time). Entering master disruption mode waits
for an eviction write in flight (`_evict_lock`) and removes taints judged on those newest
copies, so no NoExecute taint survives the mode. The eviction loop wakes up when a zone's next
token is due, so gaps between evictions stay 1/rate at any clock rate.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from kubemesh.controller_manager.controllers import ControllerContext, ControllerSpec, InformerNeed, Started
from kubemesh.controller_manager.objects import (
    NO_EXECUTE,
    NO_SCHEDULE,
    Api,
    IndexedStore,
    Store,
    condition,
    controller_ref,
    creation_time,
    index_by_node,
    is_terminating,
    node_name_of,
    now_str,
    ts,
)
from kubemesh.controller_manager.settings import NodeLifecycleSettings
from kubemesh.controller_manager.zones import Disruption, TimedValue, excluded_from_disruption, zone_key
from kubemesh.services.machinery.client import ConflictError, NotFoundError
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.machinery.eventing import ComponentRecorder
from kubemesh.services.model.kinds import LEASES, NODES, PODS, Obj, name_of, namespace_of, rv_of, uid_of
from kubemesh.services.model.podutil import taints_of
from kubemesh.services.model.wellknown import (
    TAINT_DISK_PRESSURE,
    TAINT_MEMORY_PRESSURE,
    TAINT_NETWORK_UNAVAILABLE,
    TAINT_NOT_READY,
    TAINT_OUT_OF_DISK,
    TAINT_PID_PRESSURE,
    TAINT_UNREACHABLE,
    TAINT_UNSCHEDULABLE,
)
from kubemesh.services.process.chaospoints import ChaosPoints

_log = structlog.get_logger("controller_manager.nodelifecycle")

NODE_LEASE_NAMESPACE = "kube-node-lease"
WATCHED_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
REPORTED_ONLY_CONDITIONS = ("OutOfDisk",)
"""Set Unknown with the others only when the node has them (never added as NodeStatusNeverUpdated)."""
UPDATE_RETRIES = 5
MIN_PASS_DELAY = 0.001
"""Cluster seconds: the shortest sleep between two eviction passes."""

NOSCHEDULE_BY_CONDITION: dict[tuple[str, str], str] = {
    ("Ready", "False"): TAINT_NOT_READY,
    ("Ready", "Unknown"): TAINT_UNREACHABLE,
    ("MemoryPressure", "True"): TAINT_MEMORY_PRESSURE,
    ("DiskPressure", "True"): TAINT_DISK_PRESSURE,
    ("PIDPressure", "True"): TAINT_PID_PRESSURE,
    ("OutOfDisk", "True"): TAINT_OUT_OF_DISK,
    ("NetworkUnavailable", "True"): TAINT_NETWORK_UNAVAILABLE,
}
NOSCHEDULE_KEYS = frozenset({*NOSCHEDULE_BY_CONDITION.values(), TAINT_UNSCHEDULABLE})


@dataclass(slots=True)
class NodeHealth:
    """What the controller remembers of a node between passes (in memory only)."""

    probe_timestamp: float
    ready_transition_timestamp: float
    ready: dict[str, Any] | None = None
    """A copy of the Ready condition last seen (its heartbeat and transition times matter)."""
    lease_renew: float | None = None


@dataclass(slots=True)
class Assessment:
    """The result of one health evaluation of one node."""

    grace_period: float
    observed_ready: dict[str, Any]
    """The Ready condition as the node carried it before this pass (fake Unknown if absent)."""
    current_ready: dict[str, Any] | None
    """The Ready condition after this pass (Unknown if the grace period has passed)."""
    status_update: Obj | None = None
    """The node with updated conditions, to write with UpdateStatus, if anything changed."""
    assumed_now: bool = False
    """True when the controller had no memory of the node and started its grace clock now."""


def assess_node_health(node: Obj, lease: Obj | None, health: NodeHealth | None, *, now: float,
                       settings: NodeLifecycleSettings) -> tuple[NodeHealth, Assessment]:
    """Upstream `tryUpdateNodeHealth` without the write: the new health and what to write.

    `node` (usually the informer's cached object) is never modified: it is copied only when its
    conditions must change, which a healthy node's pass never needs (with a thousand nodes, a copy
    on every pass was a third of the controller-manager's CPU).
    """
    created = creation_time(node) or now
    ready = condition(node, "Ready")
    current = dict(ready) if ready is not None else None
    if current is None:
        observed: dict[str, Any] = {"type": "Ready", "status": "Unknown",
                                    "lastHeartbeatTime": now_str(created), "lastTransitionTime": now_str(created)}
        grace = settings.node_startup_grace_period
        if health is None:
            health = NodeHealth(probe_timestamp=created, ready_transition_timestamp=created)
    else:
        observed = dict(current)
        grace = settings.node_monitor_grace_period
    saved = health.ready if health is not None else None
    assumed = False
    if health is None:
        # After a restart: no memory of the node; start its grace clock now, as upstream.
        health = NodeHealth(probe_timestamp=now, ready_transition_timestamp=now)
        assumed = True
    elif (saved is None and current is not None) or (saved is not None and current is None):
        health = NodeHealth(probe_timestamp=now, ready_transition_timestamp=now, lease_renew=health.lease_renew)
    elif saved is not None and current is not None and saved.get("lastHeartbeatTime") != current.get(
            "lastHeartbeatTime"):
        transition = (now if saved.get("lastTransitionTime") != current.get("lastTransitionTime")
                      else health.ready_transition_timestamp)
        health = NodeHealth(probe_timestamp=now, ready_transition_timestamp=transition,
                            lease_renew=health.lease_renew)
    health.ready = dict(current) if current is not None else None
    # A renewed Lease is a heartbeat too (PR #69241).
    if lease is not None:
        renew = ts((lease.get("spec") or {}).get("renewTime"))
        if renew is not None and (health.lease_renew is None or health.lease_renew < renew):
            health.lease_renew = renew
            health.probe_timestamp = now
    assessment = Assessment(grace_period=grace, observed_ready=observed, current_ready=current,
                            assumed_now=assumed)
    if now > health.probe_timestamp + grace:
        node = copy.deepcopy(node)
        conds = node.setdefault("status", {}).setdefault("conditions", [])
        for ctype in (*WATCHED_CONDITIONS, *REPORTED_ONLY_CONDITIONS):
            c = condition(node, ctype)
            if c is None:
                if ctype in REPORTED_ONLY_CONDITIONS:
                    continue
                conds.append({"type": ctype, "status": "Unknown", "reason": "NodeStatusNeverUpdated",
                              "message": "Kubelet never posted node status.",
                              "lastHeartbeatTime": now_str(created), "lastTransitionTime": now_str(now)})
            elif c.get("status") != "Unknown":
                c["status"] = "Unknown"
                c["reason"] = "NodeStatusUnknown"
                c["message"] = "Kubelet stopped posting node status."
                c["lastTransitionTime"] = now_str(now)
        new_ready = condition(node, "Ready")
        assessment.current_ready = new_ready
        if new_ready != observed:
            assessment.status_update = node
            health.ready = dict(new_ready) if new_ready is not None else None
            health.ready_transition_timestamp = now
    return health, assessment


def desired_noschedule_taints(node: Obj) -> list[str]:
    """The NoSchedule taint keys the node's conditions call for (TaintNodesByCondition)."""
    keys = []
    for c in (node.get("status") or {}).get("conditions") or []:
        key = NOSCHEDULE_BY_CONDITION.get((str(c.get("type")), str(c.get("status"))))
        if key:
            keys.append(key)
    if (node.get("spec") or {}).get("unschedulable"):
        keys.append(TAINT_UNSCHEDULABLE)
    return sorted(set(keys))


def is_daemonset_pod(pod: Obj) -> bool:
    """Pods controlled by a DaemonSet are never evicted by the node controller."""
    ref = controller_ref(pod)
    return ref is not None and ref.get("kind") == "DaemonSet"


@dataclass(slots=True)
class NodeLifecycleStats:
    """Counters for the debug endpoint and tests."""

    taints_added: int = 0
    taints_removed: int = 0
    pods_marked_not_ready: int = 0
    pods_evicted: int = 0
    status_updates: int = 0
    nodes_evicted: list[str] = field(default_factory=list)


class NodeLifecycleController:
    """Upstream's node lifecycle controller, taint-based (default) or legacy (`legacy-pod-eviction`)."""

    def __init__(self, *, api: Api, nodes: Store, pods: IndexedStore, leases: Store, clock: Clock,
                 settings: NodeLifecycleSettings, recorder: ComponentRecorder, legacy: bool = False,
                 pod_recorder: ComponentRecorder | None = None, points: ChaosPoints | None = None) -> None:
        self.api = api
        self.points = points or ChaosPoints()
        self.points.declare("nodelifecycle.mark_pods_not_ready")
        self.nodes = nodes
        self.pods = pods
        self.leases = leases
        self.clock = clock
        self.settings = settings
        self.recorder = recorder
        self.pod_recorder = pod_recorder or recorder
        self.legacy = legacy
        self.not_ready = settings.not_ready_taint_key
        """The NoExecute taint keys of this release (alpha names before 1.9)."""
        self.unreachable = settings.unreachable_taint_key
        self.health: dict[str, NodeHealth] = {}
        self.known: dict[str, str] = {}
        self.disruption = Disruption(
            clock=clock, healthy_qps=settings.node_eviction_rate,
            secondary_qps=settings.secondary_node_eviction_rate,
            large_cluster_threshold=settings.large_cluster_size_threshold,
            unhealthy_threshold=settings.unhealthy_zone_threshold)
        self.stats = NodeLifecycleStats()
        self.on_change: Callable[[], None] | None = None
        self._own_writes: dict[str, Obj] = {}
        """The node each of this controller's own writes returned, until the informer catches up."""
        self._evict_lock = asyncio.Lock()
        """Held by an eviction pass and by the taint removal of entering master disruption mode."""

    def latest(self, node: Obj) -> Obj:
        """The newest copy of `node` this controller has: the one given, the informer's or its own write's.

        Read-your-own-writes over the informer cache, by resourceVersion (one global revision
        counter, so the larger is the newer). Without it a monitor pass that runs between this
        controller's taint write and the watch event carrying it sees the node untainted,
        forgets and re-queues it, and the zone's next token is spent on a no-op: a doubled gap
        between two evictions (200 s instead of 100 s at the secondary rate). Upstream has the
        same window, but its informer lags by milliseconds against a 5 s monitor period; at a
        fast cluster clock the same wall-time lag spans seconds of cluster time. Only the
        controller's own writes are overlaid, so a stale cache still hides everyone else's
        changes (a frozen lease informer still reproduces kubernetes#132831).
        """
        name = name_of(node)
        best = node
        cached = self.nodes.get(name)
        if cached is not None and rv_of(cached) > rv_of(best):
            best = cached
        own = self._own_writes.get(name)
        if own is not None:
            if rv_of(own) > rv_of(best):
                best = own
            elif cached is not None and rv_of(cached) >= rv_of(own):
                del self._own_writes[name]  # the informer has caught up
        return best

    def _wrote(self, node: Obj | None) -> None:
        if node is not None and node.get("metadata") and rv_of(node):
            self._own_writes[name_of(node)] = node

    # -- the monitor pass ---------------------------------------------------------------------

    async def monitor_once(self) -> None:
        """One `monitorNodeHealth` pass over every node in the cache."""
        nodes = sorted((self.latest(n) for n in self.nodes.list()), key=name_of)
        names = {name_of(n) for n in nodes}
        for node in nodes:
            name = name_of(node)
            if name not in self.known:
                self.known[name] = zone_key(node)
                self.recorder.normal(node, "RegisteredNode", f"Node {name} event: Registered Node {name} in Controller")
                if self.disruption.ensure_zone(zone_key(node)):
                    _log.info("initializing eviction metric for zone", zone=zone_key(node))
                # A node (re)appearing starts healthy as far as the queues are concerned.
                self.disruption.queue(zone_key(node)).remove(name)
        for name in [n for n in self.known if n not in names]:
            zone = self.known.pop(name)
            self.health.pop(name, None)
            self._own_writes.pop(name, None)
            self.disruption.queue(zone).remove(name)
            self.recorder.normal({"kind": "Node", "metadata": {"name": name}}, "RemovingNode",
                                 f"Node {name} event: Removing Node {name} from Controller")

        zone_conditions: dict[str, list[str | None]] = {}
        for listed in nodes:
            # The pass awaits writes, and the eviction pass may taint a node meanwhile: judge
            # each node on its newest copy, not on the list taken when the pass started.
            cached = self.latest(listed)
            try:
                node, a = await self._update_health(cached)
            except NotFoundError:
                continue
            except Exception as exc:
                _log.warning("update of node health failed; no pods will be evicted", node=name_of(cached),
                             error=repr(exc))
                continue
            if not excluded_from_disruption(node):
                cur = a.current_ready
                zone_conditions.setdefault(zone_key(node), []).append(
                    None if cur is None else str(cur.get("status")))
            if a.current_ready is None:
                continue
            if self.legacy:
                self._process_legacy_eviction(node, a)
            else:
                await self._process_taint_eviction(node, a)
            if a.current_ready.get("status") != "True" and a.observed_ready.get("status") == "True":
                self.recorder.normal(node, "NodeNotReady", f"Node {name_of(node)} status is now: NodeNotReady")
                await self.mark_pods_not_ready(name_of(node))
            await self._reconcile_noschedule(node)
        await self._handle_disruption(zone_conditions, nodes)
        if self.on_change is not None:
            self.on_change()

    async def _update_health(self, node: Obj) -> tuple[Obj, Assessment]:
        """Evaluate and, if needed, write the node's conditions; retry conflicts from a fresh GET."""
        for attempt in range(UPDATE_RETRIES):
            name = name_of(node)
            lease = self.leases.get(f"{NODE_LEASE_NAMESPACE}/{name}")
            new_health, a = assess_node_health(node, lease, self.health.get(name), now=self.clock.now(),
                                               settings=self.settings)
            if a.assumed_now:
                _log.info("missing timestamp for node; assuming now", node=name)
            if a.status_update is None:
                self.health[name] = new_health
                return node, a
            try:
                written = await self.api.update(NODES, a.status_update, subresource="status")
            except ConflictError:
                if attempt + 1 == UPDATE_RETRIES:
                    raise
                node = await self.api.get(NODES, name)
                continue
            self.stats.status_updates += 1
            self._wrote(written)
            self.health[name] = new_health
            return (written if written.get("metadata") else a.status_update), a
        raise RuntimeError("unreachable")

    # -- taint-based eviction -----------------------------------------------------------------

    async def _process_taint_eviction(self, node: Obj, a: Assessment) -> None:
        status = a.observed_ready.get("status")
        name = name_of(node)
        queue = self.disruption.queue(zone_key(node))
        if status == "False":
            if _has(node, self.unreachable):
                await self.swap_taints(name, add=self.not_ready, remove=self.unreachable)
            else:
                if not _has(node, self.not_ready):
                    queue.remove(name)
                queue.add(name, uid_of(node))
        elif status == "Unknown":
            if _has(node, self.not_ready):
                await self.swap_taints(name, add=self.unreachable, remove=self.not_ready)
            else:
                if not _has(node, self.unreachable):
                    queue.remove(name)
                queue.add(name, uid_of(node))
        elif status == "True":
            await self.mark_reachable(node)

    async def mark_reachable(self, node: Obj) -> bool:
        """Remove the NoExecute taints and forget the node in its zone queue."""
        name = name_of(node)
        if _has(node, self.unreachable) or _has(node, self.not_ready):
            await self.swap_taints(name, add=None, remove=self.unreachable, remove2=self.not_ready)
        return self.disruption.queue(zone_key(node)).remove(name)

    async def _taint_one(self, value: TimedValue) -> tuple[bool, float]:
        node = self.nodes.get(value.value)
        if node is None:
            return True, 0.0
        node = self.latest(node)
        c = condition(node, "Ready")
        if c is None:
            return True, 0.0
        if c.get("status") == "False":
            add, opposite = self.not_ready, self.unreachable
        elif c.get("status") == "Unknown":
            add, opposite = self.unreachable, self.not_ready
        else:
            return True, 0.0  # ready again: nothing to taint
        try:
            await self.swap_taints(value.value, add=add, remove=opposite)
        except NotFoundError:
            return True, 0.0
        except Exception as exc:
            _log.warning("tainting failed", node=value.value, error=repr(exc))
            return False, 0.05
        return True, 0.0

    async def swap_taints(self, node_name: str, *, add: str | None, remove: str | None,
                          remove2: str | None = None) -> None:
        """Add one controller NoExecute taint and remove others, with a conflict-retried patch."""
        drop = {k for k in (remove, remove2) if k}
        await self._patch_taints(node_name, lambda taints: _swap(taints, add=add, drop=drop, now=self.clock.now()))

    async def _patch_taints(self, node_name: str, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]] | None],
                            ) -> None:
        node = self.nodes.get(node_name)
        if node is not None:
            node = self.latest(node)
        for attempt in range(UPDATE_RETRIES):
            if node is None or attempt > 0:
                node = await self.api.get(NODES, node_name)
            old = taints_of(node)
            new = change(copy.deepcopy(old))
            if new is None:
                return
            old_set = {(t.get("key"), t.get("effect")) for t in old}
            new_set = {(t.get("key"), t.get("effect")) for t in new}
            added, removed = len(new_set - old_set), len(old_set - new_set)
            try:
                written = await self.api.patch(NODES, node_name, {"metadata": {"resourceVersion": str(rv_of(node))},
                                                                  "spec": {"taints": new}})
            except ConflictError:
                continue
            self._wrote(written)
            self.stats.taints_added += added
            self.stats.taints_removed += removed
            return
        raise ConflictError({"code": 409, "reason": "Conflict", "message": f"taints of node {node_name}"})

    async def _reconcile_noschedule(self, node: Obj) -> None:
        want = set(desired_noschedule_taints(node))
        have = {str(t.get("key")) for t in taints_of(node)
                if t.get("effect") == NO_SCHEDULE and t.get("key") in NOSCHEDULE_KEYS}
        if want == have:
            return

        def change(taints: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
            kept = [t for t in taints if not (t.get("effect") == NO_SCHEDULE and t.get("key") in NOSCHEDULE_KEYS)]
            new = kept + [{"key": k, "effect": NO_SCHEDULE} for k in sorted(want)]
            return None if _same(new, taints) else new

        with contextlib.suppress(NotFoundError):
            await self._patch_taints(name_of(node), change)

    async def reconcile_node(self, name: str) -> None:
        """Event-driven part: NoSchedule taints by condition, as the node's status changes."""
        node = self.nodes.get(name)
        if node is not None:
            await self._reconcile_noschedule(node)

    # -- legacy (v1.7) pod eviction -----------------------------------------------------------

    def _process_legacy_eviction(self, node: Obj, a: Assessment) -> None:
        name = name_of(node)
        h = self.health.get(name)
        if h is None:
            return
        now = self.clock.now()
        status = a.observed_ready.get("status")
        queue = self.disruption.queue(zone_key(node))
        # Note the seed's point: the timeout counts from the last probe (the last heartbeat
        # seen), not from the moment the controller marked the node Unknown.
        timeout = self.settings.pod_eviction_timeout
        if (status == "False" and now > h.ready_transition_timestamp + timeout) or (
                status == "Unknown" and now > h.probe_timestamp + timeout):
            queue.add(name, uid_of(node))
        elif status == "True":
            queue.remove(name)

    async def _evict_one(self, value: TimedValue) -> tuple[bool, float]:
        try:
            await self.delete_pods(value.value, value.uid)
        except Exception as exc:
            _log.warning("unable to evict node", node=value.value, error=repr(exc))
            return False, 0.0
        self.stats.nodes_evicted.append(value.value)
        return True, 0.0

    async def delete_pods(self, node_name: str, node_uid: str) -> bool:
        """Delete the node's pods except DaemonSet pods (upstream `DeletePods`); True if any remain."""
        pods = [p for p in self.pods.by_index("node", node_name) if node_name_of(p) == node_name]
        remaining = False
        if pods:
            self.recorder.normal({"kind": "Node", "metadata": {"name": node_name, "uid": node_uid}},
                                 "DeletingAllPods", f"Deleting all Pods from Node {node_name}.")
        for pod in pods:
            if is_terminating(pod):
                remaining = True
                continue
            if is_daemonset_pod(pod):
                continue
            try:
                await self._set_termination_reason(pod, node_name)
            except ConflictError:
                continue
            except NotFoundError:
                continue
            self.pod_recorder.normal(pod, "NodeControllerEviction",
                                     f"Marking for deletion Pod {name_of(pod)} from Node {node_name}")
            try:
                await self.api.delete(PODS, name_of(pod), namespace=namespace_of(pod))
            except NotFoundError:
                continue
            self.stats.pods_evicted += 1
            remaining = True
        return remaining

    async def _set_termination_reason(self, pod: Obj, node_name: str) -> None:
        if (pod.get("status") or {}).get("reason") == "NodeLost":
            return
        body = copy.deepcopy(pod)
        st = body.setdefault("status", {})
        st["reason"] = "NodeLost"
        st["message"] = f"Node {node_name} which was running pod {name_of(pod)} is unresponsive"
        await self.api.update(PODS, body, subresource="status")

    # -- shared -------------------------------------------------------------------------------

    async def eviction_pass(self) -> list[str]:
        """Drain every zone queue at its rate: taint (default) or delete pods (legacy)."""
        done: list[str] = []
        action = self._evict_one if self.legacy else self._taint_one
        async with self._evict_lock:
            for zone in list(self.disruption.queues):
                done += await self.disruption.queues[zone].atry_process(action)
        if done and self.on_change is not None:
            self.on_change()
        return done

    def next_pass_delay(self, period: float) -> float:
        """Cluster seconds until the next eviction pass: `period`, or sooner when a token is due then.

        Waking exactly when a zone's token becomes available keeps the gaps between evictions at
        1/rate (plus the write's latency) at any clock rate; a pass that finds the token not quite
        there yet (float rounding) retries after `MIN_PASS_DELAY`.
        """
        now = self.clock.now()
        due = [d for d in (q.next_due() for q in self.disruption.queues.values()) if d is not None]
        if not due:
            return period
        return min(period, max(MIN_PASS_DELAY, min(due) - now + MIN_PASS_DELAY))

    async def mark_pods_not_ready(self, node_name: str) -> None:
        """Set Ready=False on every pod of the node (upstream `MarkPodsNotReady`)."""
        now = now_str(self.clock.now())
        for pod in self.pods.by_index("node", node_name):
            if node_name_of(pod) != node_name:
                continue
            conds = (pod.get("status") or {}).get("conditions") or []
            if not any(c.get("type") == "Ready" and c.get("status") != "False" for c in conds):
                continue
            body = copy.deepcopy(pod)
            for c in body["status"]["conditions"]:
                if c.get("type") == "Ready" and c.get("status") != "False":
                    c["status"] = "False"
                    c["lastTransitionTime"] = now
            try:
                # Between two pods' writes: a crash here is kubernetes#135205's intermediate
                # state (some pods of the node marked NotReady, the rest never).
                await self.points.hit("nodelifecycle.mark_pods_not_ready")
                await self.api.update(PODS, body, subresource="status")
            except (NotFoundError, ConflictError) as exc:
                _log.debug("could not mark pod not ready", pod=name_of(pod), error=repr(exc))
                continue
            self.stats.pods_marked_not_ready += 1
            self.pod_recorder.warning(pod, "NodeNotReady", "Node is not ready")

    async def _handle_disruption(self, zone_conditions: dict[str, list[str | None]], nodes: list[Obj]) -> None:
        result = self.disruption.update(zone_conditions)
        if result.entered_master_disruption:
            _log.info("controller detected that all nodes are not-Ready; entering master disruption mode")
            # The limiters are stopped already; wait for an eviction action still in flight
            # (a taint granted its token before the stop), then judge every node on its newest
            # copy: `nodes` was listed at the start of this pass, and a taint added since then
            # would otherwise be skipped by the "no taint, no call" short cut and stay forever
            # (this removal happens once, on entering the mode).
            async with self._evict_lock:
                for node in nodes:
                    try:
                        if self.legacy:
                            self.disruption.queue(zone_key(node)).remove(name_of(node))
                        else:
                            await self.mark_reachable(self.latest(node))
                    except Exception as exc:
                        _log.warning("failed to remove taints from node", node=name_of(node), error=repr(exc))
        elif result.exited_master_disruption:
            _log.info("controller detected that some nodes are Ready; exiting master disruption mode")
            now = self.clock.now()
            for node in nodes:
                h = self.health.get(name_of(node))
                if h is not None:
                    h.probe_timestamp = now
                    h.ready_transition_timestamp = now
        for zone, state in result.changed.items():
            _log.info("zone is now in a new state", zone=zone, state=str(state))

    async def run(self, *, stop: asyncio.Event | None = None) -> None:
        """Run the monitor loop and the eviction pass until cancelled."""

        async def monitor() -> None:
            while True:
                try:
                    await self.monitor_once()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    _log.error("error monitoring node health", error=repr(exc))
                await self.clock.sleep(self.settings.node_monitor_period)

        async def evict() -> None:
            # Never poll faster than every 20 ms of wall time, whatever the clock rate, but wake
            # up when a zone's next token is due (`next_pass_delay`).
            period = max(self.settings.eviction_pass_period, self.clock.rate * 0.02)
            while True:
                delay = period
                try:
                    await self.eviction_pass()
                    delay = self.next_pass_delay(period)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    _log.error("error in eviction pass", error=repr(exc))
                await self.clock.sleep(delay)

        async with asyncio.TaskGroup() as tg:
            tg.create_task(monitor(), name="nodelifecycle:monitor")
            tg.create_task(evict(), name="nodelifecycle:evict")

    def snapshot(self) -> dict[str, Any]:
        """Zones, queues, limiter rates and per-node health, for the debug endpoint."""
        return {
            "mode": "legacy-pod-eviction" if self.legacy else "taint-based",
            **self.disruption.snapshot(),
            "nodes": {n: {"probeTimestamp": h.probe_timestamp, "readyTransitionTimestamp": h.ready_transition_timestamp,
                          "ready": (h.ready or {}).get("status"), "leaseRenew": h.lease_renew}
                      for n, h in sorted(self.health.items())},
            "stats": {"taintsAdded": self.stats.taints_added, "taintsRemoved": self.stats.taints_removed,
                      "podsMarkedNotReady": self.stats.pods_marked_not_ready, "podsEvicted": self.stats.pods_evicted,
                      "statusUpdates": self.stats.status_updates},
        }


def _has(node: Obj, key: str) -> bool:
    return any(t.get("key") == key and t.get("effect") == NO_EXECUTE for t in taints_of(node))


def _same(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    return sorted((str(t.get("key")), str(t.get("effect"))) for t in a) == sorted(
        (str(t.get("key")), str(t.get("effect"))) for t in b)


def _swap(taints: list[dict[str, Any]], *, add: str | None, drop: set[str], now: float) -> list[dict[str, Any]] | None:
    new = [t for t in taints if not (t.get("effect") == NO_EXECUTE and t.get("key") in drop)]
    if add and not any(t.get("key") == add and t.get("effect") == NO_EXECUTE for t in new):
        new.append({"key": add, "effect": NO_EXECUTE, "timeAdded": now_str(now)})
    return None if _same(new, taints) else new


def _start(ctx: ControllerContext) -> Started:
    c = NodeLifecycleController(
        api=ctx.api, nodes=ctx.informer(_NODES), pods=ctx.informer(_PODS), leases=ctx.informer(_LEASES),
        clock=ctx.clock, settings=ctx.settings.node_lifecycle, recorder=ctx.recorder.for_component("node-controller"),
        legacy="legacy-pod-eviction" in ctx.bugs, points=ctx.points)
    return Started(run=c.run(), controller=c, snapshot=c.snapshot)


_NODES = InformerNeed(kind=NODES)
_PODS = InformerNeed(kind=PODS, indexers={"node": index_by_node})
# All namespaces, not only kube-node-lease: the garbage collector watches every lease, and one
# shared cache is cheaper than two watches of the busiest resource at scale.
_LEASES = InformerNeed(kind=LEASES)
CONTROLLER = ControllerSpec(name="node-lifecycle", informers=(_NODES, _PODS, _LEASES), start=_start,
                            debug_key="nodeLifecycle")

"""The scheduling cycle: event handlers feeding cache and queue, and the loop that places pods.

`Scheduler` owns the cache, the queue and the nominator and talks to the apiserver only through
the `SchedulerApi` protocol (`scheduler.binding.ClientApi` in production, fakes in tests), so the
whole cycle, including the historic races, runs in unit tests on a `ManualClock`.

One cycle (`schedule_one`):

1. Pop the most important pod; skip it if it was deleted, bound or assumed meanwhile.
2. `schedule_pod` (synchronous, never awaits: see `scheduler.caching` on why the cycle may read
   live NodeInfos): the nominated node first if the pod has one; else the inter-pod affinity
   pre-pass, filtering round-robin until enough feasible nodes are found (adaptive share), scoring
   and choosing.
3. Success: assume the pod on the node, drop its nomination, and start the binding cycle as its
   own task (binds run concurrently). A bind error forgets the assumed pod and requeues it.
4. Failure: requeue the pod at once (so its updates find it), record `FailedScheduling`, patch
   `PodScheduled=False` into its status, and for a fit error try preemption: nominate the pod to
   the chosen node, patch `status.nominatedNodeName`, delete the victims (`Preempted` events).

The switches, in this module:

* `nominate-after-patch` on: step 4 does not nominate in memory; the nominator learns the node
  from the pod update that carries it, so a pod scheduled in between can take the room.
  Off (#72259): the nomination is recorded before the patch and removed if the patch fails.
* `keep-missed-node` off (#56622): a `node "X" not found` error (from the affinity pass or from a
  binding) makes the scheduler GET the node, and drop it from its cache when the apiserver
  answers 404. On: nothing is done and the node stays (#56261).
* `ghost-node-affinity-error` is applied by the affinity pre-pass (`scheduler.filtering`).
* `stale-update-unnominates` is applied by the nominator (`scheduler.queueing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from kubemesh.scheduler.caching import NodeInfo, SchedulerCache
from kubemesh.scheduler.filtering import (
    AffinityState,
    FitError,
    NodeLookup,
    NodeNotFoundError,
    PodFilter,
    affinity_state_from_index,
    compute_affinity_state,
    find_feasible,
    num_feasible_nodes_to_find,
)
from kubemesh.scheduler.podinfo import PodInfo
from kubemesh.scheduler.preempting import Candidate, eligible_to_preempt, find_candidate
from kubemesh.scheduler.queueing import ClusterEvent, Nominator, QueueClosedError, QueuedPodInfo, SchedulingQueue
from kubemesh.scheduler.scoring import compute_inter_pod_scores, score_nodes, select_host
from kubemesh.scheduler.settings import SchedulerSettings
from kubemesh.services.machinery.clock import Clock, format_time
from kubemesh.services.model.kinds import Obj, key_of, name_of
from kubemesh.services.process.chaospoints import ChaosPoints

BUG_GHOST = "ghost-node-affinity-error"
BUG_KEEP_MISSED_NODE = "keep-missed-node"
BUG_NOMINATE_AFTER_PATCH = "nominate-after-patch"
BUG_STALE_UPDATE = "stale-update-unnominates"
BUG_PRESSURE_PREDICATES = "pressure-predicates"


class SchedulerApi(Protocol):
    """What the scheduler asks of the apiserver."""

    async def bind(self, pod: PodInfo, node: str) -> None:
        """POST the pod's binding to `node`."""

    async def patch_pod_status(self, pod: PodInfo, patch: Obj) -> None:
        """Merge-patch the pod's status subresource."""

    async def delete_pod(self, pod: PodInfo) -> None:
        """Delete a victim (with a uid precondition)."""

    async def get_node(self, name: str) -> Obj | None:
        """GET a node; None when the apiserver says 404."""

    def record_event(self, pod: Obj, *, type: str, reason: str, message: str) -> None:
        """Record an event about a pod without waiting."""


def not_found_node(exc: BaseException) -> str | None:
    """The node name if `exc` says a node was not found, else None."""
    if isinstance(exc, NodeNotFoundError):
        return exc.name
    status = getattr(exc, "status", None)
    if getattr(exc, "code", None) == 404 and isinstance(status, dict):
        details = status.get("details") or {}
        if isinstance(details, dict) and details.get("kind") in ("node", "nodes"):
            return str(details.get("name") or "") or None
    return None


def _terminal(pod: Obj) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def _node_facts(node: Obj) -> tuple[Any, ...]:
    """What of a node can change a filter's answer (heartbeat timestamps excluded)."""
    meta = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    conds = tuple(sorted((str(c.get("type")), str(c.get("status")))
                         for c in status.get("conditions") or [] if isinstance(c, dict)))
    return (meta.get("labels"), spec.get("unschedulable"), spec.get("taints"),
            status.get("allocatable"), conds)


class Scheduler:
    """Cache, queue, nominator and the scheduling loop (see the module docstring)."""

    def __init__(self, *, api: SchedulerApi, clock: Clock, rng: random.Random,
                 settings: SchedulerSettings | None = None, bugs: frozenset[str] = frozenset(),
                 node_lookup: NodeLookup | None = None,
                 priority_of_class: Callable[[str], int | None] | None = None,
                 log: Any = None, points: ChaosPoints | None = None) -> None:
        self.api = api
        self.points = points or ChaosPoints()
        self.points.declare("scheduler.before_bind", "scheduler.after_bind")
        self.clock = clock
        self.rng = rng
        self.settings = settings or SchedulerSettings()
        self.bugs = bugs
        self.log = log
        s = self.settings
        self.cache = SchedulerCache(assumed_pod_ttl=s.assumed_pod_ttl)
        self.nominator = Nominator(stale_update_unnominates=BUG_STALE_UPDATE in bugs)
        self.queue = SchedulingQueue(clock=clock, nominator=self.nominator,
                                     initial_backoff=s.pod_initial_backoff, max_backoff=s.pod_max_backoff,
                                     max_unschedulable_duration=s.max_unschedulable_duration)
        self._nodes_seen: dict[str, Obj] = {}
        self.node_lookup: NodeLookup = node_lookup or self._nodes_seen.get
        self.priority_of_class = priority_of_class
        self._pods: dict[str, PodInfo] = {}
        """The latest PodInfo per pod key, so an update parses only the new version."""
        self._next_start = 0
        self._bind_sem = asyncio.Semaphore(max(1, s.parallel_binds))
        self._tasks: set[asyncio.Task[None]] = set()
        self.stats: dict[str, int] = {
            "attempts": 0, "scheduled": 0, "unschedulable": 0, "errors": 0, "bindErrors": 0,
            "preemptions": 0, "victims": 0, "nodeNotFound": 0, "nodesDropped": 0,
        }
        self.recent_failures: deque[dict[str, Any]] = deque(maxlen=50)

    # ---- informer handlers (synchronous, never block) --------------------------------------

    def on_node_add(self, node: Obj, _initial: bool = False) -> None:
        """Node ADDED."""
        self._nodes_seen[name_of(node)] = node
        self.cache.add_node(node)
        self.queue.move_pods_on_event(ClusterEvent.NODE_ADD)

    def on_node_update(self, old: Obj, new: Obj) -> None:
        """Node MODIFIED: move pods only when something a filter reads changed."""
        self._nodes_seen[name_of(new)] = new
        self.cache.update_node(new)
        if _node_facts(old) != _node_facts(new):
            self.queue.move_pods_on_event(ClusterEvent.NODE_UPDATE)

    def on_node_delete(self, node: Any) -> None:
        """Node DELETED (or a DeletedFinalStateUnknown tombstone)."""
        obj = getattr(node, "obj", node)
        name = name_of(obj) if isinstance(obj, dict) else str(getattr(node, "key", ""))
        self._nodes_seen.pop(name, None)
        self.cache.remove_node(name)

    def _pod_info(self, pod: Obj) -> PodInfo:
        prio: int | None = None
        spec = pod.get("spec") or {}
        if "priority" not in spec and self.priority_of_class is not None:
            prio = self.priority_of_class(str(spec.get("priorityClassName") or ""))
        pi = PodInfo(pod, priority=prio)
        self._pods[pi.key] = pi
        return pi

    def _responsible(self, pi: PodInfo) -> bool:
        return pi.scheduler_name == self.settings.scheduler_name

    def on_pod_add(self, pod: Obj, _initial: bool = False) -> None:
        """Pod ADDED: an assigned pod goes to the cache, an unassigned one to the queue."""
        pi = self._pod_info(pod)
        if pi.node_name:
            if _terminal(pod):
                return
            self.cache.add_pod(pi)
            self.queue.delete(pi.key)
            self._pod_assigned(pi)
        elif self._responsible(pi) and not _terminal(pod):
            self.queue.add(pi)

    def _pod_assigned(self, pi: PodInfo) -> None:
        keys = self.queue.unschedulable_with_affinity_to(pi)
        if keys:
            self.queue.move_pods_on_event(ClusterEvent.ASSIGNED_POD_ADD, only=keys)

    def on_pod_update(self, old: Obj, new: Obj) -> None:
        """Pod MODIFIED."""
        old_pi = self._pods.get(key_of(new))
        old_rv = str((old.get("metadata") or {}).get("resourceVersion") or "")
        if old_pi is None or old_pi.resource_version != old_rv:
            old_pi = PodInfo(old)
        pi = self._pod_info(new)
        if pi.node_name:
            if not old_pi.node_name:
                # Bound (by us or anyone): the watch confirms an assumed pod.
                self.queue.delete(pi.key)
                if not _terminal(new):
                    self.cache.add_pod(pi)
                    self._pod_assigned(pi)
                return
            if _terminal(new):
                self.cache.remove_pod(pi.key)
                self.queue.move_pods_on_event(ClusterEvent.ASSIGNED_POD_DELETE)
                return
            self.cache.update_pod(pi)
            # Only changes that can free room or satisfy affinity move waiting pods (kubelet
            # status updates are frequent and change nothing for them).
            freed = pi.cpu < old_pi.cpu or pi.mem < old_pi.mem or pi.terminating != old_pi.terminating
            if freed or old_pi.labels != pi.labels:
                self.queue.move_pods_on_event(ClusterEvent.ASSIGNED_POD_UPDATE)
            return
        if self._responsible(pi) and not _terminal(new):
            self.queue.update(old_pi, pi)
        else:
            self.queue.delete(pi.key)

    def on_pod_delete(self, pod: Any) -> None:
        """Pod DELETED (or a DeletedFinalStateUnknown tombstone)."""
        obj = getattr(pod, "obj", pod)
        key = str(getattr(pod, "key", "")) if not isinstance(pod, dict) else ""
        if isinstance(obj, dict):
            meta = obj.get("metadata") or {}
            key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        self._pods.pop(key, None)
        self.queue.delete(key)
        if self.cache.get_pod(key) is not None:
            self.cache.remove_pod(key)
            self.queue.move_pods_on_event(ClusterEvent.ASSIGNED_POD_DELETE)

    # ---- the synchronous core ----------------------------------------------------------

    def schedule_pod(self, pi: PodInfo) -> NodeInfo:
        """Choose a node for the pod (never awaits). Raises FitError or NodeNotFoundError."""
        cache = self.cache
        nodes = cache.nodes()
        ghost_bug = BUG_GHOST in self.bugs
        state = self._affinity_state(pi, nodes, ghost_bug=ghost_bug)
        pod_filter = PodFilter(pi, affinity=state, nominator=self.nominator,
                               pressure_predicates=BUG_PRESSURE_PREDICATES in self.bugs)
        if not nodes:
            raise FitError(pi, num_nodes=0, failures={})
        nominated = pi.nominated_node or self.nominator.node_of(pi.key)
        if nominated:
            # A preemptor goes back to the node it was nominated to if it fits there now.
            ni = cache.node_info(nominated)
            if ni is not None and ni.node is not None and pod_filter.check(ni) is None:
                return ni
        s = self.settings
        want = num_feasible_nodes_to_find(len(nodes), percentage=s.percentage_of_nodes_to_score,
                                          minimum=s.min_feasible_nodes)
        start = self._next_start % len(nodes)
        result = find_feasible(pod_filter, nodes, want=want, start=start)
        self._next_start = (start + result.processed) % len(nodes)
        if not result.feasible:
            raise FitError(pi, num_nodes=len(nodes), failures=result.failures)
        if len(result.feasible) == 1:
            return result.feasible[0]
        inter = compute_inter_pod_scores(pi, nodes, any_affinity_pods=cache.scoring_affinity_pods > 0,
                                         hard_weight=s.hard_pod_affinity_weight)
        scores = score_nodes(pi, result.feasible, inter_pod=inter)
        return select_host(result.feasible, scores, self.rng)

    def _affinity_state(self, pi: PodInfo, nodes: Sequence[NodeInfo], *,
                        ghost_bug: bool = False) -> AffinityState | None:
        """The inter-pod affinity pre-pass of a cycle over the cache's snapshot `nodes`."""
        cache = self.cache
        if ghost_bug:
            # 1.7-1.8's pass walks every pod of every NodeInfo, ghosts included (and fails on them).
            return compute_affinity_state(
                pi, nodes, any_required_anti=cache.required_anti_pods > 0, ghost_bug=True,
                all_nodes=cache.all_node_infos(), node_lookup=self.node_lookup)
        return affinity_state_from_index(pi, cache.affinity_index, cache.node_infos_by_name(),
                                         any_required_anti=cache.required_anti_pods > 0)

    def preemption_candidate(self, pi: PodInfo, err: FitError) -> tuple[Candidate | None, str]:
        """Decide preemption for a pod that fits nowhere (never awaits)."""
        cache = self.cache
        nodes = cache.nodes()
        infos = {ni.name: ni for ni in nodes}
        ok, why = eligible_to_preempt(pi, nominated_node=pi.nominated_node or self.nominator.node_of(pi.key),
                                      node_infos=infos)
        if not ok:
            return None, why
        state = self._affinity_state(pi, nodes)
        pod_filter = PodFilter(pi, affinity=state, nominator=self.nominator,
                               pressure_predicates=BUG_PRESSURE_PREDICATES in self.bugs)
        # Recheck every node: the cycle may have stopped filtering early, and time has passed.
        failures = {}
        for ni in nodes:
            f = pod_filter.check(ni)
            if f is None:
                return None, "the pod fits a node now."
            failures[ni.name] = f
        s = self.settings
        cand = find_candidate(pod_filter, nodes, failures, state=state, rng=self.rng,
                              min_percentage=s.min_candidate_nodes_percentage,
                              min_absolute=s.min_candidate_nodes_absolute)
        if cand is None:
            return None, "No preemption victims found for incoming pod."
        return cand, ""

    # ---- the asynchronous cycle ----------------------------------------------------------

    def _skip(self, pi: PodInfo | None) -> bool:
        if pi is None or pi.terminating or pi.node_name:
            return True
        return self.cache.is_assumed(pi.key) or not self._responsible(pi)

    async def schedule_one(self) -> None:
        """Pop one pod and run its scheduling cycle."""
        qpi = await self.queue.pop()
        await self.schedule_popped(qpi)

    async def schedule_popped(self, qpi: QueuedPodInfo) -> None:
        """Run the scheduling cycle of a popped pod."""
        pi = self.queue.in_flight_info(qpi.key)
        if self._skip(pi):
            self.queue.done(qpi.key)
            return
        assert pi is not None
        qpi.info = pi
        cycle = self.queue.scheduling_cycle
        self.stats["attempts"] += 1
        try:
            ni = self.schedule_pod(pi)
        except FitError as err:
            await self._handle_failure(qpi, pi, err, cycle)
            return
        except NodeNotFoundError as err:
            await self._handle_failure(qpi, pi, err, cycle)
            return
        assumed = pi.with_node(ni.name)
        self.cache.assume_pod(assumed)
        self.nominator.delete(pi.key)
        self.spawn(self._bind(qpi, assumed, cycle), name=f"bind {pi.key}")

    def spawn(self, coro: Any, *, name: str) -> None:
        """Run a coroutine as a task the scheduler keeps a reference to."""
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait_idle(self) -> None:
        """Wait for every binding and preemption task started so far (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _bind(self, qpi: QueuedPodInfo, assumed: PodInfo, cycle: int) -> None:
        async with self._bind_sem:
            try:
                # Chaos points: a crash here leaves an assumed pod that was never bound, or
                # (after) a binding the restarted scheduler must learn from its watch.
                await self.points.hit("scheduler.before_bind")
                await self.api.bind(assumed, assumed.node_name)
                await self.points.hit("scheduler.after_bind")
            except Exception as exc:
                self.stats["bindErrors"] += 1
                self.cache.finish_binding(assumed.key, now=self.clock.now())
                self.cache.forget_pod(assumed.key)
                self.queue.requeue(qpi, cycle=cycle, error=True)
                self.queue.move_pods_on_event(ClusterEvent.ASSIGNED_POD_DELETE)
                message = f"Binding rejected: {exc}"
                self._note_failure(qpi.info, message)
                self.api.record_event(qpi.info.pod, type="Warning", reason="FailedScheduling", message=message)
                node = not_found_node(exc)
                if node:
                    await self._node_not_found(node)
                return
        self.cache.finish_binding(assumed.key, now=self.clock.now())
        self.queue.done(assumed.key)
        self.stats["scheduled"] += 1
        self.api.record_event(
            assumed.pod, type="Normal", reason="Scheduled",
            message=f"Successfully assigned {assumed.namespace}/{assumed.name} to {assumed.node_name}")

    def _note_failure(self, pi: PodInfo, message: str) -> None:
        self.recent_failures.append({"pod": pi.key, "time": self.clock.now(), "message": message})
        if self.log is not None:
            self.log.info("failed scheduling", pod=pi.key, message=message)

    async def _handle_failure(self, qpi: QueuedPodInfo, pi: PodInfo, err: Exception, cycle: int) -> None:
        fit = err if isinstance(err, FitError) else None
        # Requeue before any await, so that updates arriving meanwhile find the pod queued.
        self.queue.requeue(qpi, cycle=cycle, plugins=fit.plugins() if fit is not None else (),
                           error=fit is None)
        message = str(err)
        if fit is not None:
            self.stats["unschedulable"] += 1
        else:
            self.stats["errors"] += 1
        self._note_failure(pi, message)
        self.api.record_event(pi.pod, type="Warning", reason="FailedScheduling", message=message)
        node = not_found_node(err)
        if node:
            await self._node_not_found(node)
        if self.settings.update_pod_condition:
            await self._patch_condition(pi, message, reason="Unschedulable" if fit else "SchedulerError")
        if fit is not None:
            latest = self._pods.get(pi.key)
            if latest is None or latest.node_name or latest.uid != pi.uid:
                return
            cand, _why = self.preemption_candidate(latest, fit)
            if cand is not None:
                await self._preempt(latest, cand)

    async def _patch_condition(self, pi: PodInfo, message: str, *, reason: str) -> None:
        conditions = [c for c in (pi.pod.get("status") or {}).get("conditions") or [] if isinstance(c, dict)]
        for c in conditions:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") == reason:
                return
        cond = {"type": "PodScheduled", "status": "False", "reason": reason, "message": message,
                "lastProbeTime": None, "lastTransitionTime": format_time(self.clock.now())}
        new = [c for c in conditions if c.get("type") != "PodScheduled"] + [cond]
        try:
            await self.api.patch_pod_status(pi, {"status": {"conditions": new}})
        except Exception as exc:
            if self.log is not None:
                self.log.warning("condition patch failed", pod=pi.key, error=str(exc))

    async def _preempt(self, pi: PodInfo, cand: Candidate) -> None:
        """Carry out a preemption decision (the order is the race of kubernetes#72124)."""
        fixed = BUG_NOMINATE_AFTER_PATCH not in self.bugs
        if fixed:
            # Without this, the next cycle could hand the freed room to another pod before the
            # update carrying nominatedNodeName comes back on the watch.
            self.nominator.add(pi, node=cand.node)
        try:
            await self.api.patch_pod_status(pi, {"status": {"nominatedNodeName": cand.node}})
        except Exception as exc:
            if fixed:
                self.nominator.delete(pi.key)
            if self.log is not None:
                self.log.warning("nomination patch failed", pod=pi.key, error=str(exc))
            return
        self.stats["preemptions"] += 1
        for victim in cand.victims:
            self.stats["victims"] += 1
            self.api.record_event(victim.pod, type="Normal", reason="Preempted",
                                  message=f"Preempted by pod {pi.uid} on node {cand.node}")
            try:
                await self.api.delete_pod(victim)
            except Exception as exc:
                if self.log is not None:
                    self.log.warning("victim delete failed", pod=victim.key, error=str(exc))
        # Lower-priority pods nominated to this node lose their nomination: the room is taken.
        for other in self.nominator.pods_for_node(cand.node):
            if other.priority < pi.priority:
                with contextlib.suppress(Exception):
                    await self.api.patch_pod_status(other, {"status": {"nominatedNodeName": None}})

    async def _node_not_found(self, name: str) -> None:
        self.stats["nodeNotFound"] += 1
        if BUG_KEEP_MISSED_NODE in self.bugs:
            return
        try:
            node = await self.api.get_node(name)
        except Exception:
            return
        if node is None:
            self.stats["nodesDropped"] += 1
            self.cache.remove_node(name)
            self._nodes_seen.pop(name, None)

    # ---- long-running loops --------------------------------------------------------------

    async def run(self) -> None:
        """Schedule pods until cancelled or the queue is closed."""
        try:
            while True:
                await self.schedule_one()
                # A cycle with a pod ready does not suspend: yield so that bindings, informer
                # events and /readyz run between cycles instead of after the whole backlog.
                await asyncio.sleep(0)
        except QueueClosedError:
            return

    async def housekeeping(self) -> None:
        """Flush backoff and unschedulable pods and expire assumed pods, on the clock."""
        s = self.settings
        tick = min(s.backoff_flush_period, s.cache_cleanup_period)
        last_leftover = self.clock.now()
        while True:
            await self.clock.sleep(tick)
            self.tick(last_leftover_flush=last_leftover)
            if self.clock.now() - last_leftover >= s.unschedulable_flush_period:
                last_leftover = self.clock.now()

    def tick(self, *, last_leftover_flush: float | None = None) -> None:
        """One housekeeping step (also callable from tests)."""
        now = self.clock.now()
        expired = self.cache.cleanup_assumed_pods(now=now)
        if expired:
            self.queue.move_pods_on_event(ClusterEvent.ASSIGNED_POD_DELETE)
        self.queue.flush_backoff_completed()
        if last_leftover_flush is None or now - last_leftover_flush >= self.settings.unschedulable_flush_period:
            self.queue.flush_unschedulable_leftover()

    def dump(self) -> Mapping[str, Any]:
        """Everything the scheduler believes, for `/debug/scheduler`."""
        return {
            "time": self.clock.now(),
            "bugs": sorted(self.bugs),
            "stats": dict(self.stats),
            "cache": self.cache.dump(),
            "queue": self.queue.dump(),
            "recentFailures": list(self.recent_failures),
        }



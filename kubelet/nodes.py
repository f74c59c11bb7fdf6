"""One emulated node: its identity, its power state, and the tasks that make it a kubelet.

An `EmulatedNode` owns, while powered on, up to five tasks: `boot` (registration, then starts
the others), `lease` (Lease renewals), `status` (NodeStatus posts), `pods` (its pod informer
and worker) and `evict` (the eviction manager: signals from the pods'
emulated usage, pressure conditions, evictions; `kubemesh.kubelet.pressure`). Every switch of the admin
endpoint maps onto starting or cancelling some of them:

| operation          | effect                                                                |
|--------------------|-----------------------------------------------------------------------|
| power off          | cancel every task (in-flight requests are abandoned, watches close);  |
|                    | the pods stay as they were in the API; the containers die with the    |
|                    | machine                                                               |
| power on           | boot again, as a restarted kubelet: adopt the Node, resume the Lease, |
|                    | relist its pods (force-deleted ones are gone; containers of surviving |
|                    | pods restart with restartCount + 1)                                   |
| lease stop/resume  | cancel / restart only the Lease loop                                  |
| status stop/resume | cancel / restart only the NodeStatus loop                             |
| set/clear condition| override a condition; the status loop restarts to post it at once    |
| partition / heal   | the machine runs on but cannot reach the apiserver: the Lease, status |
|                    | and pod loops stop (nothing is written, no watch), the containers     |
|                    | and the eviction manager run on; healing restarts the loops, whose    |
|                    | relist finds what changed meanwhile (a pod deleted from the API has   |
|                    | its containers stopped then, with a `Killing` event)                  |

Guarantees: operations on one node never touch another node's tasks; every operation is
idempotent (stopping a stopped loop does nothing) and undone by its opposite; a stopped loop
stays stopped across power-off/power-on until resumed.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog

from kubemesh.kubelet.heartbeating import HeartbeatApi, LeaseRenewer, NodeConditions, StatusReporter
from kubemesh.kubelet.podworking import PodApi, PodView, PodWorker
from kubemesh.kubelet.pressure import EvictionManager, UsageResource, observe
from kubemesh.kubelet.registering import full_status, node_ip, node_labels, node_object, pod_cidr, register
from kubemesh.kubelet.resources import Resources, allocatable_of
from kubemesh.kubelet.settings import KubeletSettings
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.machinery.queueing import WorkQueue, run_workers
from kubemesh.services.model.kinds import Obj, uid_of
from kubemesh.services.model.quantities import parse_quantity

log = structlog.get_logger("kubelet.nodes")


class PodSource:
    """How a node gets its pods: builds the view, runs it, and tells when it has synced."""

    def attach(self, worker: PodWorker) -> PodView:
        """Return the node's view and route its events to `worker`."""
        raise NotImplementedError

    async def run(self, worker: PodWorker) -> None:
        """Keep the view up to date until cancelled (a per-node watch runs here).

        Once the view has synced, call `worker.resync_all()`.
        """
        raise NotImplementedError

    def detach(self, worker: PodWorker) -> None:
        """Stop routing events to `worker`."""

    async def wait_synced(self, *, within: float) -> bool:
        """Wait until the view has listed once (False after `within` cluster seconds)."""
        return True


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeIdentity:
    """Who a node is."""

    name: str
    index: int
    instance: str
    admin_port: int


class EmulatedNode:
    """A kubelet for one node, inside a process that hosts many."""

    def __init__(self, *, identity: NodeIdentity, settings: KubeletSettings, clock: Clock,
                 rng: random.Random, heartbeat_api: HeartbeatApi, pod_api: PodApi,
                 pods: PodSource, register_gate: asyncio.Semaphore | None = None,
                 observed: Callable[[], Obj | None] | None = None) -> None:
        self.identity = identity
        self.observed = observed
        """The Node as the kubelet process's node informer holds it (None: the status loop GETs it)."""
        self.name = identity.name
        self.settings = settings
        self.clock = clock
        self.rng = rng
        self.heartbeat_api = heartbeat_api
        self.pod_api = pod_api
        self.pod_source = pods
        self._gate = register_gate
        self.capacity = Resources.from_quantities(settings.node_capacity())
        self.allocatable = allocatable_of(capacity=settings.node_capacity(), reserved=settings.reserved)
        self.conditions = NodeConditions()
        if settings.low_diskspace_threshold_mb > 0:
            self.conditions.set_out_of_disk(False)  # reported from the first post on
        self.eviction = EvictionManager(thresholds=settings.eviction_thresholds(),
                                        transition_period=settings.eviction_pressure_transition_period)
        self._usage_capacity: dict[UsageResource, int] = {
            "memory": self.capacity.get("memory"), "disk": self.capacity.get("ephemeral-storage"),
            "pids": settings.max_pids}
        self._default_memory = int(parse_quantity(settings.default_container_memory_usage))
        self._quiet_pods: list[Obj] | None = None
        self.powered = False
        self.partitioned = False
        """The network between this machine and the apiserver is cut (`partition`)."""
        self._boot_pending = False
        self.lease_stopped = settings.no_node_lease
        self.status_stopped = False
        self.uid: str | None = None
        self.boots = 0
        self.registered = False
        self.lease: LeaseRenewer | None = None
        self.status: StatusReporter | None = None
        self.pods = PodWorker(node=self.name, host_ip=node_ip(identity.index), cidr=pod_cidr(identity.index),
                              api=pod_api, clock=clock, rng=rng, settings=settings,
                              allocatable=self.allocatable, pressure=self.conditions.statuses)
        self._tasks: dict[str, asyncio.Task[Any]] = {}
        self._log = log.bind(node=self.name)

    # -- tasks --------------------------------------------------------------------------------

    def _start(self, name: str, coro: Coroutine[Any, Any, Any]) -> None:
        old = self._tasks.get(name)
        if old is not None and not old.done():
            coro.close()
            return
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.name}:{name}")
        self._tasks[name] = task
        task.add_done_callback(self._task_done)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        if not task.cancelled() and task.exception() is not None:
            self._log.error("node task failed", task=task.get_name(), error=repr(task.exception()))

    def _cancel(self, *names: str) -> None:
        for name in names or tuple(self._tasks):
            task = self._tasks.pop(name, None)
            if task is not None and not task.done():
                task.cancel()

    def running_tasks(self) -> list[str]:
        """Names of this node's live tasks."""
        return sorted(n for n, t in self._tasks.items() if not t.done())

    async def wait_stopped(self) -> None:
        """Wait until every cancelled task has finished."""
        tasks = [t for t in self._tasks.values() if not t.done()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    # -- power --------------------------------------------------------------------------------

    def power_on(self) -> bool:
        """Boot the node (a kubelet start); False if it was on already."""
        if self.powered:
            return False
        self.powered = True
        if self.partitioned:
            self._boot_pending = True  # it boots, but reaches the apiserver only when the partition heals
        else:
            self._start("boot", self._boot())
        return True

    def power_off(self) -> bool:
        """Cut the power: every loop stops at once; False if it was off already."""
        if not self.powered:
            return False
        self.powered = False
        self._boot_pending = False
        self._cancel()
        self.pod_source.detach(self.pods)
        self.pods.queue = None
        self.pods.power_lost()
        self._log.info("node powered off")
        return True

    async def _boot(self) -> None:
        self.boots += 1
        status = full_status(name=self.name, index=self.identity.index, capacity=self.capacity,
                             allocatable=self.allocatable, admin_port=self.identity.admin_port,
                             kubelet_version=self.settings.kubelet_version, boot=str(self.boots))
        labels = node_labels(name=self.name, zone=self.settings.zone, region=self.settings.region)
        body = node_object(name=self.name, index=self.identity.index, labels=labels,
                           status=status, instance=self.identity.instance,
                           conditions=self.conditions.observe(self.clock.now()))
        # The whole boot happens inside the gate: registration, the first renewal, the first
        # status post and the pod view's first list. Ten thousand nodes powered on together would
        # otherwise fire their first requests (and, per node, a new TLS connection for the pod
        # watch) all at once: a herd that overflows the apiserver's accept queue and outlasts the
        # heartbeat client's timeout, so that requests time out, their connections are dropped
        # and re-handshaked, and registration slows to a crawl. Inside the gate at most
        # `register_concurrency` nodes are booting; once booted, each loop spreads itself over
        # its period.
        async with self._gate if self._gate is not None else contextlib.nullcontext():
            node = await register(self.heartbeat_api, body, clock=self.clock)
            self.uid = uid_of(node) or None
            self.registered = True
            self.lease = LeaseRenewer(api=self.heartbeat_api, node=self.name, clock=self.clock, rng=self.rng,
                                      settings=self.settings, node_uid=lambda: self.uid)
            self.status = StatusReporter(api=self.heartbeat_api, node=self.name, clock=self.clock, rng=self.rng,
                                         settings=self.settings, conditions=self.conditions,
                                         full_status=lambda: status, observed=self.observed)
            if not self.lease_stopped:
                await self.lease.sync()
            if not self.status_stopped:
                await self.status.sync_logged()
            self._start("pods", self._run_pods())
            await self.pod_source.wait_synced(within=self.settings.node_status_update_frequency)
        if not self.status_stopped:
            self._start("status", self.status.run(synced=True))
        if not self.lease_stopped:
            self._start("lease", self.lease.run(synced=True))
        self._start("evict", self._evict_loop())

    async def _run_pods(self) -> None:
        queue: WorkQueue[str] = WorkQueue(clock=self.clock, name=f"pods:{self.name}")
        self.pods.queue = queue
        self.pods.view = self.pod_source.attach(self.pods)
        try:
            async with asyncio.TaskGroup() as tg:
                tg.create_task(self.pod_source.run(self.pods), name=f"{self.name}:pod-view")
                # No resync here: the source resyncs once its view has synced (`PodSource.run`).
                # Before that, a pod this node still runs is merely unlisted, not deleted: after
                # a partition heals, syncing it against an empty view would kill it.
                tg.create_task(run_workers(queue, self.pods.sync, workers=1, name=f"kubelet:{self.name}"),
                               name=f"{self.name}:pod-worker")
        finally:
            queue.shutdown(drain=False)

    # -- network partition ----------------------------------------------------------------------

    def partition(self) -> bool:
        """Cut the machine off the apiserver; its containers run on. False if it was cut already.

        The Lease, NodeStatus and pod loops stop (in-flight requests are abandoned, the pod
        watch closes); the pod worker keeps its containers and the eviction manager keeps
        observing them. The node controller sees a node that stopped heartbeating, as after a
        power-off, but nothing died.
        """
        if self.partitioned:
            return False
        self.partitioned = True
        if self.powered:
            if "boot" in self.running_tasks():
                self._cancel("boot")
                self._boot_pending = True
            self._cancel("status", "lease", "pods")
            self.pod_source.detach(self.pods)
            self.pods.queue = None
        self._log.info("node partitioned from the apiserver")
        return True

    def heal(self) -> bool:
        """Reconnect: the loops start again (the pod informer relists). False if it was not cut."""
        if not self.partitioned:
            return False
        self.partitioned = False
        self._log.info("node partition healed")
        if not self.powered:
            return True
        if self._boot_pending or not self.registered:
            self._boot_pending = False
            self._start("boot", self._boot())
            return True
        if not self.status_stopped and self.status is not None:
            self._start("status", self.status.run())
        if not self.lease_stopped and self.lease is not None:
            self._start("lease", self.lease.run())
        self._start("pods", self._run_pods())
        return True

    # -- loops --------------------------------------------------------------------------------

    def stop_lease(self) -> bool:
        """Stop renewing the Lease (the rest of the node works on)."""
        changed = not self.lease_stopped
        self.lease_stopped = True
        self._cancel("lease")
        return changed

    def resume_lease(self) -> bool:
        """Renew again (at once)."""
        changed = self.lease_stopped
        self.lease_stopped = False
        if self.powered and not self.partitioned and self.lease is not None:
            self._start("lease", self.lease.run())
        return changed

    def stop_status(self) -> bool:
        """Stop posting NodeStatus."""
        changed = not self.status_stopped
        self.status_stopped = True
        self._cancel("status")
        return changed

    def resume_status(self) -> bool:
        """Post NodeStatus again (at once)."""
        changed = self.status_stopped
        self.status_stopped = False
        self._restart_status()
        return changed

    def _restart_status(self) -> None:
        if self.powered and not self.partitioned and self.status is not None and not self.status_stopped:
            self._cancel("status")
            self._start("status", self.status.run())

    def set_condition(self, ctype: str, status: str, *, reason: str | None = None,
                      message: str | None = None) -> None:
        """Override a node condition and post it at once."""
        self.conditions.set(ctype, status, reason=reason, message=message)
        self._restart_status()

    def clear_condition(self, ctype: str) -> bool:
        """Undo `set_condition`."""
        changed = self.conditions.clear(ctype)
        self._restart_status()
        return changed

    async def _evict_loop(self) -> None:
        # Upstream's eviction manager: every monitoring interval it observes its signals, sets
        # the pressure conditions, and evicts at most one pod while a threshold acts. It is
        # local to the machine: it runs on while the node cannot reach the apiserver.
        while True:
            self.eviction_pass()
            await self.clock.sleep(self.settings.eviction_monitoring_interval)

    def eviction_pass(self) -> str | None:
        """One pass of the eviction manager; the key of the pod evicted, if any."""
        now = self.clock.now()
        pods = self.pods.usage_pods()
        # Thresholds and capacity never change: while nothing is met and no condition lingers,
        # the same pods (the same objects, held here so their ids stay theirs) give the same
        # answer. Ten thousand idle nodes then cost a list comparison each per pass.
        if self._quiet_pods is not None and len(pods) == len(self._quiet_pods) and all(
                a is b for a, b in zip(pods, self._quiet_pods, strict=True)):
            return None
        observations = observe(pods, capacity=self._usage_capacity, default_container_memory=self._default_memory)
        decision = self.eviction.synchronize(now=now, observations=observations)
        self._quiet_pods = None if decision.met or decision.conditions else pods
        if self.conditions.set_pressure(decision.conditions):
            self._log.info("pressure conditions", active=sorted(decision.conditions),
                           met=[t.signal for t in decision.met])
        if self.settings.low_diskspace_threshold_mb > 0:
            # v1.7's disk-space manager: a fixed floor of free disk, apart from the eviction
            # thresholds; it refuses new pods and evicts nothing.
            floor = self.settings.low_diskspace_threshold_mb * 1024 * 1024
            if self.conditions.set_out_of_disk(observations["nodefs.available"].available < floor):
                self._log.info("OutOfDisk", out_of_disk=self.conditions.out_of_disk)
        if decision.act_on is None:
            return None
        return self.pods.evict_for(now=now, threshold=decision.act_on,
                                   observation=observations[decision.act_on.signal])

    # -- introspection ------------------------------------------------------------------------

    def describe(self, *, pods: bool = False) -> dict[str, Any]:
        """The node's state for `GET /nodes`."""
        out: dict[str, Any] = {
            "name": self.name, "index": self.identity.index, "uid": self.uid,
            "powered": self.powered, "partitioned": self.partitioned, "registered": self.registered,
            "boots": self.boots,
            "lease": {"stopped": self.lease_stopped,
                      "renewals": self.lease.renewals if self.lease else 0,
                      "failures": self.lease.failures if self.lease else 0,
                      "lastRenew": self.lease.last_renew if self.lease else None},
            "status": {"stopped": self.status_stopped,
                       "posts": self.status.posts if self.status else 0,
                       "reads": self.status.reads if self.status else 0,
                       "failures": self.status.failures if self.status else 0,
                       "lastPost": self.status.last_post if self.status else None},
            "conditions": self.conditions.statuses(),
            "overrides": sorted(self.conditions.overrides),
            "faults": {"startDelay": self.pods.faults.start_delay, "stopDelay": self.pods.faults.stop_delay},
            "tasks": self.running_tasks(),
        }
        if pods:
            out.update(self.pods.describe())
        return out

"""Wiring: shared informers, work queues, controllers, events, leader election, debug document.

One informer per kind, shared by every controller of the process (as upstream's
SharedInformerFactory); handlers only enqueue keys; workers reconcile from the caches. The
informers start before leader election (warm caches); the controllers run only while this
instance leads (`--leader-elect`, `kubemesh.services.machinery.electing` on `kube-system/kube-controller-manager`),
so a second controller-manager waits and takes over when the first dies or stalls past the
lease duration. A leader that cannot renew in time stops its controllers and `lead` raises
`LeadershipLost`: the process then exits non-zero, as kube-controller-manager does, and its
supervisor restarts it. Node health is in memory only: a new leader starts every node's grace
clock afresh ("assuming now"), as upstream.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import structlog

from kubemesh.controller_manager.daemonset import DaemonSetController
from kubemesh.controller_manager.deployment import DeploymentController
from kubemesh.controller_manager.garbagecollector import GarbageCollector
from kubemesh.controller_manager.nodelifecycle import NODE_LEASE_NAMESPACE, NodeLifecycleController
from kubemesh.controller_manager.objects import index_by_namespace, index_by_node, index_by_owner, index_by_uid
from kubemesh.controller_manager.podgc import PodGC
from kubemesh.controller_manager.replicaset import ReplicaSetController
from kubemesh.controller_manager.settings import ControllerManagerSettings
from kubemesh.controller_manager.tainteviction import TaintEvictionController
from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.machinery.electing import LeaderElectionSettings, LeaderElector, LeadershipLost, process_identity
from kubemesh.services.machinery.eventing import EventRecorder
from kubemesh.services.machinery.informing import DeletedFinalStateUnknown, Informer
from kubemesh.services.machinery.queueing import WorkQueue, run_workers
from kubemesh.services.model.kinds import DAEMONSETS, DEPLOYMENTS, LEASES, NODES, PODS, REPLICASETS, Kind, Obj, key_of
from kubemesh.services.process.chaospoints import ChaosPoints

_log = structlog.get_logger("controller_manager")

COMPONENT = "kube-controller-manager"
"""The default reporting component of events (each controller reports as itself)."""
LEASE_NAME = "kube-controller-manager"

WORKLOAD_INDEXES = {"namespace": index_by_namespace, "owner": index_by_owner, "uid": index_by_uid}


AddFn = Callable[[Obj, bool], None]
UpdateFn = Callable[[Obj, Obj], None]
DeleteFn = Callable[[Obj | DeletedFinalStateUnknown], None]


def _obj(o: Obj | DeletedFinalStateUnknown) -> Obj:
    return o.obj if isinstance(o, DeletedFinalStateUnknown) else o


@dataclass
class ControllerManager:
    """Everything one controller-manager process runs."""

    client: ApiClient
    clock: Clock
    rng: random.Random
    settings: ControllerManagerSettings
    bugs: frozenset[str]
    instance: str
    points: ChaosPoints = field(default_factory=ChaosPoints)
    """The process's chaos points, handed to the controllers that declare some."""
    informers: dict[str, Informer] = field(default_factory=dict)
    queues: dict[str, WorkQueue[Any]] = field(default_factory=dict)
    recorder: EventRecorder | None = None
    nodelifecycle: NodeLifecycleController | None = None
    tainteviction: TaintEvictionController | None = None
    podgc: PodGC | None = None
    elector: LeaderElector | None = None
    started: float = 0.0
    _handlers: dict[str, list[tuple[AddFn | None, UpdateFn | None, DeleteFn | None]]] = field(default_factory=dict)

    def build(self) -> None:
        """Create the informers, controllers and queues (no I/O)."""
        c, clock = self.client, self.clock
        self.informers = {
            "pods": Informer(c, PODS, clock=clock, rng=self.rng, name="kcm/pods",
                             indexers={"node": index_by_node, **WORKLOAD_INDEXES}),
            "nodes": Informer(c, NODES, clock=clock, rng=self.rng, name="kcm/nodes",
                              indexers={"uid": index_by_uid, "owner": index_by_owner}),
            "leases": Informer(c, LEASES, clock=clock, rng=self.rng, namespace=NODE_LEASE_NAMESPACE,
                               name="kcm/leases"),
            "replicasets": Informer(c, REPLICASETS, clock=clock, rng=self.rng, name="kcm/replicasets",
                                    indexers=WORKLOAD_INDEXES),
            "deployments": Informer(c, DEPLOYMENTS, clock=clock, rng=self.rng, name="kcm/deployments",
                                    indexers=WORKLOAD_INDEXES),
            "daemonsets": Informer(c, DAEMONSETS, clock=clock, rng=self.rng, name="kcm/daemonsets",
                                   indexers=WORKLOAD_INDEXES),
        }
        self.recorder = EventRecorder(c, clock=clock, component=COMPONENT, instance=self.instance)
        # One dispatcher per informer, registered once: each leadership term installs fresh
        # controllers' handlers in `_handlers` (informers have no way to remove handlers).
        for name, informer in self.informers.items():
            informer.add_handlers(on_add=self._dispatch_add(name), on_update=self._dispatch_update(name),
                                  on_delete=self._dispatch_delete(name))

    def _dispatch_add(self, name: str) -> Callable[[Obj, bool], None]:
        def handler(o: Obj, initial: bool) -> None:
            for h in self._handlers.get(name, []):
                if h[0] is not None:
                    h[0](o, initial)
        return handler

    def _dispatch_update(self, name: str) -> Callable[[Obj, Obj], None]:
        def handler(old: Obj, new: Obj) -> None:
            for h in self._handlers.get(name, []):
                if h[1] is not None:
                    h[1](old, new)
        return handler

    def _dispatch_delete(self, name: str) -> Callable[[Obj | DeletedFinalStateUnknown], None]:
        def handler(o: Obj | DeletedFinalStateUnknown) -> None:
            for h in self._handlers.get(name, []):
                if h[2] is not None:
                    h[2](o)
        return handler

    def _on(self, name: str, *, on_add: AddFn | None = None, on_update: UpdateFn | None = None,
            on_delete: DeleteFn | None = None) -> None:
        """Install a handler set for this term; replay the cache to `on_add` as a late registration."""
        self._handlers.setdefault(name, []).append((on_add, on_update, on_delete))
        if on_add is not None:
            for o in self.informers[name].list():
                on_add(o, True)

    def synced(self) -> bool:
        """Whether every informer has synced (the readiness check)."""
        return all(i.has_synced for i in self.informers.values())

    async def lead(self) -> None:
        """Wait for the caches, then run the controllers (while leading, with `--leader-elect`).

        Raises:
            LeadershipLost: the lease could not be renewed in time; the controllers were stopped.
        """
        self.started = self.clock.now()
        for inf in self.informers.values():
            await inf.wait_for_sync()
        if not self.settings.leader_elect:
            await self._controllers()
            return
        self.elector = LeaderElector(self.client, settings=LeaderElectionSettings(name=LEASE_NAME),
                                     identity=process_identity(self.instance), clock=self.clock,
                                     rng=random.Random(self.rng.getrandbits(64)))
        try:
            await self.elector.run(self._controllers)
        except LeadershipLost:
            _log.error("leader election lost; exiting so that the process is restarted", identity=self.instance)
            raise

    async def _controllers(self) -> None:
        """Build fresh controllers (no memory from a previous term) and run them."""
        s = self.settings
        inf = self.informers
        assert self.recorder is not None
        rec = self.recorder
        tasks: list[Coroutine[Any, Any, None]] = []
        self.queues = {}
        self._handlers = {}

        def queue(name: str) -> WorkQueue[Any]:
            q: WorkQueue[Any] = WorkQueue(clock=self.clock, name=name)
            self.queues[name] = q
            return q

        if s.enabled("node-lifecycle"):
            self.nodelifecycle = NodeLifecycleController(
                api=self.client, nodes=inf["nodes"], pods=inf["pods"], leases=inf["leases"], clock=self.clock,
                settings=s.node_lifecycle, recorder=rec.for_component("node-controller"),
                legacy="legacy-pod-eviction" in self.bugs, points=self.points)
            tasks.append(self.nodelifecycle.run())

        if s.enabled("taint-eviction"):
            te = TaintEvictionController(api=self.client, nodes=inf["nodes"], pods=inf["pods"], clock=self.clock,
                                         recorder=rec.for_component("taint-eviction-controller"))
            self.tainteviction = te
            tq = queue("taint-eviction")
            self._on("nodes",
                on_add=lambda o, _i: tq.add(("node", key_of(o))),
                on_update=lambda old, new: _when(_taints_changed(old, new), tq.add, ("node", key_of(new))))
            self._on("pods",
                on_add=lambda o, _i: tq.add(("pod", key_of(o))),
                on_update=lambda old, new: tq.add(("pod", key_of(new))),
                on_delete=lambda o: tq.add(("pod", key_of(_obj(o)))))
            tasks.append(run_workers(tq, te.reconcile, workers=8, name="taint-eviction"))

        if s.enabled("replicaset"):
            rsc = ReplicaSetController(api=self.client, replicasets=inf["replicasets"], pods=inf["pods"],
                                       clock=self.clock, rng=self.rng,
                                       recorder=rec.for_component("replicaset-controller"),
                                       burst_replicas=s.workloads.burst_replicas,
                                       expectations_ttl=s.workloads.expectations_ttl, points=self.points)
            rq = queue("replicaset")
            rsc.enqueue = rq.add
            self._on("replicasets", on_add=lambda o, _i: rq.add(key_of(o)),
                                            on_update=lambda old, new: rq.add(key_of(new)),
                                            on_delete=lambda o: rq.add(key_of(_obj(o))))
            self._on("pods", on_add=rsc.on_pod_add, on_update=rsc.on_pod_update,
                                     on_delete=lambda o: rsc.on_pod_delete(_obj(o)))
            tasks.append(run_workers(rq, rsc.reconcile, workers=s.workloads.replicaset_workers, name="replicaset"))

        if s.enabled("deployment"):
            dc = DeploymentController(api=self.client, deployments=inf["deployments"], replicasets=inf["replicasets"],
                                      pods=inf["pods"], clock=self.clock, rng=self.rng,
                                      recorder=rec.for_component("deployment-controller"))
            dq = queue("deployment")
            dc.enqueue = dq.add
            self._on("deployments", on_add=lambda o, _i: dq.add(key_of(o)),
                                            on_update=lambda old, new: dq.add(key_of(new)),
                                            on_delete=lambda o: dq.add(key_of(_obj(o))))
            self._on("replicasets", on_add=lambda o, _i: dc.on_rs(o), on_update=lambda old, new: dc.on_rs(new),
                                            on_delete=lambda o: dc.on_rs(_obj(o)))
            self._on("pods", on_update=lambda old, new: dc.on_pod(new), on_delete=lambda o: dc.on_pod(_obj(o)))
            tasks.append(run_workers(dq, dc.reconcile, workers=s.workloads.deployment_workers, name="deployment"))

        if s.enabled("daemonset"):
            dsc = DaemonSetController(api=self.client, daemonsets=inf["daemonsets"], nodes=inf["nodes"],
                                      pods=inf["pods"], clock=self.clock, rng=self.rng,
                                      recorder=rec.for_component("daemonset-controller"),
                                      expectations_ttl=s.workloads.expectations_ttl)
            sq = queue("daemonset")
            dsc.enqueue = sq.add
            self._on("daemonsets", on_add=lambda o, _i: sq.add(key_of(o)),
                                           on_update=lambda old, new: sq.add(key_of(new)),
                                           on_delete=lambda o: sq.add(key_of(_obj(o))))
            self._on("pods", on_add=dsc.on_pod_add, on_update=dsc.on_pod_update,
                                     on_delete=lambda o: dsc.on_pod_delete(_obj(o)))
            self._on("nodes", on_add=lambda o, _i: dsc.on_node(o),
                                      on_update=lambda old, new: _when(_node_changed(old, new), dsc.on_node, new),
                                      on_delete=lambda o: dsc.on_node(_obj(o)))
            tasks.append(run_workers(sq, dsc.reconcile, workers=s.workloads.daemonset_workers, name="daemonset"))

        if s.enabled("garbage-collector"):
            kinds: dict[Kind, Informer] = {PODS: inf["pods"], REPLICASETS: inf["replicasets"],
                                           DEPLOYMENTS: inf["deployments"], DAEMONSETS: inf["daemonsets"],
                                           NODES: inf["nodes"]}
            gc = GarbageCollector(api=self.client, stores=kinds)
            gq = queue("garbage-collector")
            gc.enqueue = gq.add
            names = {PODS: "pods", REPLICASETS: "replicasets", DEPLOYMENTS: "deployments",
                     DAEMONSETS: "daemonsets", NODES: "nodes"}
            for kind in kinds:
                self._on(names[kind], on_add=_bind_add(gc.on_change, kind), on_update=_bind_update(gc.on_change, kind),
                                      on_delete=_bind_delete(gc.on_delete, kind))
            tasks.append(run_workers(gq, gc.reconcile, workers=s.workloads.gc_workers, name="garbage-collector"))

        if s.enabled("podgc"):
            self.podgc = PodGC(api=self.client, pods=inf["pods"], nodes=inf["nodes"], clock=self.clock,
                               settings=s.podgc, out_of_service_gc="no-out-of-service-gc" not in self.bugs)
            tasks.append(self.podgc.run())

        _log.info("controllers started", controllers=list(s.controllers), bugs=sorted(self.bugs),
                  profile=s.profile, grace=s.node_lifecycle.node_monitor_grace_period)
        try:
            async with asyncio.TaskGroup() as tg:
                for t in tasks:
                    tg.create_task(t)
        finally:
            for q in self.queues.values():
                q.shutdown(drain=False)

    def debug(self) -> dict[str, Any]:
        """The `/debug/controller-manager` document."""
        return {
            "instance": self.instance,
            "now": self.clock.now(),
            "profile": self.settings.profile,
            "bugs": sorted(self.bugs),
            "controllers": list(self.settings.controllers),
            "leader": self.elector.is_leader if self.elector is not None else (not self.settings.leader_elect),
            "settings": {"nodeMonitorGracePeriod": self.settings.node_lifecycle.node_monitor_grace_period,
                         "nodeMonitorPeriod": self.settings.node_lifecycle.node_monitor_period,
                         "podEvictionTimeout": self.settings.node_lifecycle.pod_eviction_timeout,
                         "nodeEvictionRate": self.settings.node_lifecycle.node_eviction_rate,
                         "secondaryNodeEvictionRate": self.settings.node_lifecycle.secondary_node_eviction_rate},
            "informers": {n: {"synced": i.has_synced} for n, i in self.informers.items()},
            "queues": {n: {"depth": len(q), "processing": q.processing, "waiting": q.waiting}
                       for n, q in self.queues.items()},
            "nodeLifecycle": self.nodelifecycle.snapshot() if self.nodelifecycle is not None else None,
            "taintEviction": self.tainteviction.snapshot() if self.tainteviction is not None else None,
            "podGC": self.podgc.snapshot() if self.podgc is not None else None,
            "eventsDropped": self.recorder.dropped if self.recorder is not None else 0,
        }


def _when(cond: bool, fn: Callable[[Any], None], arg: Any) -> None:
    if cond:
        fn(arg)


def _taints_changed(old: Obj, new: Obj) -> bool:
    return bool((old.get("spec") or {}).get("taints") != (new.get("spec") or {}).get("taints"))


def _node_changed(old: Obj, new: Obj) -> bool:
    return bool(old.get("spec") != new.get("spec") or (old.get("metadata") or {}).get("labels")
                != (new.get("metadata") or {}).get("labels"))


def _bind_add(fn: Callable[[Kind, Obj], None], kind: Kind) -> Callable[[Obj, bool], None]:
    return lambda o, _i: fn(kind, o)


def _bind_update(fn: Callable[[Kind, Obj], None], kind: Kind) -> Callable[[Obj, Obj], None]:
    return lambda _old, new: fn(kind, new)


def _bind_delete(fn: Callable[[Kind, Obj], None], kind: Kind) -> Callable[[Obj | DeletedFinalStateUnknown], None]:
    return lambda o: fn(kind, _obj(o))

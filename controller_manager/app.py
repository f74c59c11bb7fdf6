"""Wiring: shared informers, the catalogue's controllers, events, leader election, debug document.

One informer per resource, shared by every controller of the process (as upstream's
SharedInformerFactory, `kubemesh.services.machinery.sharedinformers`). The informers every
enabled controller declares start before leader election (warm caches); the controllers run
only while this instance leads (`--leader-elect`, `kubemesh.services.machinery.electing` on
`kube-system/kube-controller-manager`), so a second controller-manager waits and takes over
when the first dies or stalls past the lease duration. Each term starts fresh controllers
from their specs (`kubemesh.controller_manager.catalogue`), with no memory of an earlier
term. A leader that cannot renew in time stops its controllers and `lead` raises
`LeadershipLost`: the process then exits non-zero, as kube-controller-manager does, and its
supervisor restarts it. Node health is in memory only: a new leader starts every node's grace
clock afresh ("assuming now"), as upstream.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from dataclasses import dataclass, field
from typing import Any

import structlog

from kubemesh.controller_manager.catalogue import CONTROLLERS
from kubemesh.controller_manager.controllers import ControllerContext, ControllerSpec, Started
from kubemesh.controller_manager.settings import ControllerManagerSettings
from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.machinery.electing import LeaderElectionSettings, LeaderElector, LeadershipLost, process_identity
from kubemesh.services.machinery.eventing import EventRecorder
from kubemesh.services.machinery.queueing import WorkQueue
from kubemesh.services.machinery.sharedinformers import SharedInformers
from kubemesh.services.process.chaospoints import ChaosPoints

_log = structlog.get_logger("controller_manager")

COMPONENT = "kube-controller-manager"
"""The default reporting component of events (each controller reports as itself)."""
LEASE_NAME = "kube-controller-manager"


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
    informers: SharedInformers | None = None
    specs: tuple[ControllerSpec, ...] = ()
    """The enabled controllers, in catalogue order."""
    running: dict[str, Started] = field(default_factory=dict)
    """The controllers of the current term by name."""
    queues: dict[str, WorkQueue[Any]] = field(default_factory=dict)
    recorder: EventRecorder | None = None
    elector: LeaderElector | None = None
    started: float = 0.0

    def build(self, *, registry: dict[str, Any] | None = None) -> None:
        """Declare the informers of every enabled controller and the event recorder (no I/O).

        `registry` receives the informers by name (the component's chaos-visible informers).
        """
        self.informers = SharedInformers(self.client, clock=self.clock, rng=self.rng, prefix="kcm", registry=registry)
        self.specs = tuple(spec for spec in CONTROLLERS if self.settings.enabled(spec.name))
        for spec in self.specs:
            for need in spec.informers:
                self.informers.informer(need.kind, namespace=need.namespace, indexers=need.indexers)
        self.recorder = EventRecorder(self.client, clock=self.clock, component=COMPONENT, instance=self.instance)

    def synced(self) -> bool:
        """Whether every informer has synced (the readiness check)."""
        return self.informers is not None and self.informers.synced()

    async def lead(self) -> None:
        """Wait for the caches, then run the controllers (while leading, with `--leader-elect`).

        Raises:
            LeadershipLost: the lease could not be renewed in time; the controllers were stopped.
        """
        assert self.informers is not None
        self.started = self.clock.now()
        await self.informers.wait_for_sync()
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
        """Start fresh controllers (no memory from a previous term) and run them."""
        assert self.informers is not None and self.recorder is not None
        self.informers.new_term()
        self.queues = {}
        ctx = ControllerContext(api=self.client, clock=self.clock, rng=self.rng, settings=self.settings,
                                bugs=self.bugs, points=self.points, recorder=self.recorder,
                                informers=self.informers, queues=self.queues)
        # Each controller writes as itself (its own ServiceAccount, when the apiserver maps
        # identities); the shared informers read as the controller-manager.
        self.running = {spec.name: spec.start(dataclasses.replace(ctx, api=self.client.acting_for(spec.name)))
                        for spec in self.specs}
        _log.info("controllers started", controllers=list(self.running), bugs=sorted(self.bugs),
                  profile=self.settings.profile, grace=self.settings.node_lifecycle.node_monitor_grace_period)
        try:
            async with asyncio.TaskGroup() as tg:
                for name, started in self.running.items():
                    tg.create_task(started.run, name=f"controller:{name}")
        finally:
            for q in self.queues.values():
                q.shutdown(drain=False)

    def debug(self) -> dict[str, Any]:
        """The `/debug/controller-manager` document."""
        nl = self.settings.node_lifecycle
        doc: dict[str, Any] = {
            "instance": self.instance,
            "now": self.clock.now(),
            "profile": self.settings.profile,
            "bugs": sorted(self.bugs),
            "controllers": [spec.name for spec in self.specs],
            "leader": self.elector.is_leader if self.elector is not None else (not self.settings.leader_elect),
            "settings": {"nodeMonitorGracePeriod": nl.node_monitor_grace_period,
                         "nodeMonitorPeriod": nl.node_monitor_period,
                         "podEvictionTimeout": nl.pod_eviction_timeout,
                         "nodeEvictionRate": nl.node_eviction_rate,
                         "secondaryNodeEvictionRate": nl.secondary_node_eviction_rate},
            "informers": {n: {"synced": i.has_synced}
                          for n, i in (self.informers.informers() if self.informers else {}).items()},
            "queues": {n: {"depth": len(q), "processing": q.processing, "waiting": q.waiting}
                       for n, q in self.queues.items()},
            "eventsDropped": self.recorder.dropped if self.recorder is not None else 0,
        }
        for spec in CONTROLLERS:
            if spec.debug_key is not None:
                started = self.running.get(spec.name)
                doc[spec.debug_key] = started.snapshot() if started is not None and started.snapshot else None
        return doc

"""How a controller is declared and started: `ControllerSpec` and the `ControllerContext` it gets.

A controller module ends with one `CONTROLLER = ControllerSpec(...)`, and
`kubemesh.controller_manager.catalogue` lists them: adding a controller is one module and one
entry there. A spec says

* which informers it reads (`informers`), so that their caches are warm before the
  controllers start, and started before leader election (as upstream, a standby
  controller-manager keeps warm caches);
* how to start it for one leadership term (`start(ctx)`): build a fresh controller (no memory
  from an earlier term), install its handlers with `ctx.on`, and return the coroutine that runs
  it, with an optional `snapshot` for `/debug/controller-manager`.

Handlers only enqueue keys; workers reconcile from the caches (`ctx.queue` and
`kubemesh.services.machinery.queueing.run_workers`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubemesh.controller_manager.settings import ControllerManagerSettings
from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.machinery.eventing import EventRecorder
from kubemesh.services.machinery.informing import IndexFunc, Informer
from kubemesh.services.machinery.queueing import WorkQueue
from kubemesh.services.machinery.sharedinformers import AddFn, DeleteFn, SharedInformers, UpdateFn
from kubemesh.services.model.kinds import Kind
from kubemesh.services.process.chaospoints import ChaosPoints


@dataclass(frozen=True, slots=True, kw_only=True)
class InformerNeed:
    """One informer a controller reads: a kind, optionally one namespace, and its indexes."""

    kind: Kind
    namespace: str | None = None
    indexers: Mapping[str, IndexFunc] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class Started:
    """A controller started for one term."""

    run: Coroutine[Any, Any, None]
    """Runs the controller until cancelled."""
    controller: object
    """The controller object (tests and the debug document read it)."""
    snapshot: Callable[[], Any] | None = None
    """Its part of `/debug/controller-manager`, under the spec's `debug_key`."""


@dataclass(slots=True, kw_only=True)
class ControllerContext:
    """What a controller is started with: the process's client, clock, caches and switches."""

    api: ApiClient
    clock: Clock
    rng: random.Random
    settings: ControllerManagerSettings
    bugs: frozenset[str]
    points: ChaosPoints
    recorder: EventRecorder
    informers: SharedInformers
    queues: dict[str, WorkQueue[Any]]
    """The work queues of this term by name (the debug document and `/metrics` read them)."""

    def informer(self, need: InformerNeed) -> Informer:
        """The shared informer for `need`."""
        return self.informers.informer(need.kind, namespace=need.namespace, indexers=need.indexers)

    def on(self, kind: Kind, *, namespace: str | None = None, on_add: AddFn | None = None,
           on_update: UpdateFn | None = None, on_delete: DeleteFn | None = None) -> None:
        """Install event handlers for this term (the cache is replayed to `on_add`)."""
        self.informers.on(kind, namespace=namespace, on_add=on_add, on_update=on_update, on_delete=on_delete)

    def queue(self, name: str) -> WorkQueue[Any]:
        """A fresh work queue for this term."""
        q: WorkQueue[Any] = WorkQueue(clock=self.clock, name=name)
        self.queues[name] = q
        return q


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerSpec:
    """One controller of the controller-manager, by its `--controllers` name."""

    name: str
    """As in `--controllers` (upstream's names where upstream has the controller)."""
    informers: tuple[InformerNeed, ...]
    """The caches it reads (started before leader election, synced before `start`)."""
    start: Callable[[ControllerContext], Started]
    """Build a fresh controller for a term, install its handlers, return how it runs."""
    debug_key: str | None = None
    """Key of its snapshot in `/debug/controller-manager`."""

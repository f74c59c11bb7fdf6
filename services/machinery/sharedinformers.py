"""One informer per resource, shared by every controller of a process (client-go's SharedInformerFactory).

Guarantees:

* **One cache per (resource, namespace).** `informer(kind, indexers=...)` returns the existing
  informer when there is one and adds the indexers it lacks (the store files every cached
  object in a new index at once), so controllers never pay for two watches of one resource.
* **Warm before use.** Informers asked for before `start` start together and callers wait on
  `synced()`; an informer asked for later (a kind discovered at run time, such as a custom
  resource) starts at once on the same spawner.
* **Handlers per term.** Each informer gets one dispatcher; `on(kind, ...)` installs a
  controller's handlers for the current *term* (a leadership term of the controller-manager)
  and replays the cache to `on_add` as a late registration; `new_term()` drops every
  installed handler, so a new term's fresh controllers see no events meant for the old ones.
* **Stoppable.** `stop(kind)` cancels the informers of a resource that stopped being served
  (its custom resource definition was deleted) and forgets them; asking again starts afresh.

Informers are published by name in `registry` (the component's chaos-visible informers: a
fault can freeze one to make its cache stale): the plural for the built-in resources, the
plural and group (`widgets.example.com`) when two resources share a plural.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Coroutine, Mapping, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.machinery.informing import DeletedFinalStateUnknown, IndexFunc, Informer
from kubemesh.services.model.kinds import Kind, Obj

AddFn = Callable[[Obj, bool], None]
UpdateFn = Callable[[Obj, Obj], None]
DeleteFn = Callable[[Obj | DeletedFinalStateUnknown], None]


class Cancellable(Protocol):
    """What a spawner returns for a started task."""

    def cancel(self) -> None:
        """Cancel the task."""
        ...


Spawn = Callable[[Coroutine[Any, Any, None], str], Cancellable]
"""Start a named long-lived task (a component's supervised `spawn`)."""


@dataclass(slots=True)
class _Entry:
    informer: Informer
    name: str
    handlers: list[tuple[AddFn | None, UpdateFn | None, DeleteFn | None]] = field(default_factory=list)
    task: Cancellable | None = None


class SharedInformers:
    """The informers of one process, by resource and namespace."""

    def __init__(self, client: ApiClient, *, clock: Clock, rng: random.Random, prefix: str,
                 registry: MutableMapping[str, Any] | None = None) -> None:
        """A factory with no informers yet.

        Args:
            client: The process's API client.
            clock: Cluster clock (informer backoff).
            rng: Seeds each informer's own RNG (jitter, watch timeouts), in creation order.
            prefix: Names informers in logs (`kcm/pods`).
            registry: Where informers are published by name for chaos (the component's `informers`).
        """
        self._client = client
        self._clock = clock
        self._rng = rng
        self._prefix = prefix
        self._entries: dict[tuple[str, str | None], _Entry] = {}
        self.registry: MutableMapping[str, Any] = registry if registry is not None else {}
        self._spawn: Spawn | None = None

    # -- informers -----------------------------------------------------------------------------

    def informer(self, kind: Kind, *, namespace: str | None = None,
                 indexers: Mapping[str, IndexFunc] | None = None) -> Informer:
        """The shared informer of `kind` (in one namespace, or all), created on first ask."""
        key = (kind.resource, namespace)
        entry = self._entries.get(key)
        if entry is None:
            name = self._name_for(kind)
            informer = Informer(self._client, kind, clock=self._clock, namespace=namespace,
                                indexers=indexers, name=f"{self._prefix}/{name}",
                                rng=random.Random(self._rng.getrandbits(64)))
            entry = _Entry(informer=informer, name=name)
            self._entries[key] = entry
            informer.add_handlers(on_add=self._dispatch_add(entry), on_update=self._dispatch_update(entry),
                                  on_delete=self._dispatch_delete(entry))
            self.registry[name] = informer
            if self._spawn is not None:
                entry.task = self._spawn(informer.run(), f"informer:{name}")
        elif indexers:
            entry.informer.store.add_indexers(indexers)
        return entry.informer

    def _name_for(self, kind: Kind) -> str:
        taken = {e.name for e in self._entries.values()}
        return kind.plural if kind.plural not in taken else kind.resource

    def informers(self) -> dict[str, Informer]:
        """Every informer by its published name."""
        return {e.name: e.informer for e in self._entries.values()}

    def has(self, kind: Kind, *, namespace: str | None = None) -> bool:
        """Whether an informer of `kind` exists."""
        return (kind.resource, namespace) in self._entries

    def synced(self) -> bool:
        """Whether every informer has listed once."""
        return all(e.informer.has_synced for e in self._entries.values())

    async def wait_for_sync(self) -> None:
        """Wait until every informer that exists now has synced."""
        for e in list(self._entries.values()):
            await e.informer.wait_for_sync()

    def start(self, spawn: Spawn) -> None:
        """Run every informer on `spawn`, and every informer created from now on."""
        self._spawn = spawn
        for e in self._entries.values():
            if e.task is None:
                e.task = spawn(e.informer.run(), f"informer:{e.name}")

    def stop(self, kind: Kind) -> None:
        """Stop and forget the informers of `kind`'s resource (it is no longer served)."""
        for key in [k for k in self._entries if k[0] == kind.resource]:
            entry = self._entries.pop(key)
            if entry.task is not None:
                entry.task.cancel()
            self.registry.pop(entry.name, None)

    # -- handlers ------------------------------------------------------------------------------

    def on(self, kind: Kind, *, namespace: str | None = None, on_add: AddFn | None = None,
           on_update: UpdateFn | None = None, on_delete: DeleteFn | None = None) -> None:
        """Install handlers for this term; a synced cache is replayed to `on_add(obj, True)`."""
        entry = self._entries.get((kind.resource, namespace))
        if entry is None:
            self.informer(kind, namespace=namespace)
            entry = self._entries[(kind.resource, namespace)]
        entry.handlers.append((on_add, on_update, on_delete))
        if on_add is not None and entry.informer.has_synced:
            for o in entry.informer.list():
                on_add(o, True)

    def new_term(self) -> None:
        """Forget every installed handler (the informers and their caches stay)."""
        for e in self._entries.values():
            e.handlers = []

    @staticmethod
    def _dispatch_add(entry: _Entry) -> AddFn:
        def handler(o: Obj, initial: bool) -> None:
            for h in entry.handlers:
                if h[0] is not None:
                    h[0](o, initial)
        return handler

    @staticmethod
    def _dispatch_update(entry: _Entry) -> UpdateFn:
        def handler(old: Obj, new: Obj) -> None:
            for h in entry.handlers:
                if h[1] is not None:
                    h[1](old, new)
        return handler

    @staticmethod
    def _dispatch_delete(entry: _Entry) -> DeleteFn:
        def handler(o: Obj | DeletedFinalStateUnknown) -> None:
            for h in entry.handlers:
                if h[2] is not None:
                    h[2](o)
        return handler

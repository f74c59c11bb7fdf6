"""Where a node's pods come from: its own watch, or its slice of one process-wide watch.

* `NodePodWatch` (the default, `--pod-watch per-node`): the node lists and watches pods with
  the field selector `spec.nodeName=<node>` on its own pod client, exactly as a real kubelet
  does. Power-off closes the watch; power-on relists, so pods force-deleted meanwhile are
  simply absent (the worker then resyncs every pod it still runs and finds them gone).
* `SharedPodWatch` (`--pod-watch shared`): one informer for all pods of the cluster, indexed
  by node, dispatching each event to the node it names. The apiserver then serves one watcher
  instead of thousands; each node's view is its index slice. While a node is off, its events
  are not delivered; on power-on it resyncs from the (current) slice, which is what a relist
  would have shown.

Both keep the informer's promises: per-pod order, every deletion delivered (perhaps as
`DeletedFinalStateUnknown`).
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

from kubemesh.kubelet.nodes import PodSource
from kubemesh.kubelet.podworking import PodView, PodWorker
from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.machinery.informing import INDEX_BY_NODE, Informer, InformerSettings, index_pods_by_node
from kubemesh.services.model.kinds import PODS, Obj, key_of


class NodePodWatch(PodSource):
    """One node's own pod informer (field selector `spec.nodeName`)."""

    def __init__(self, *, client: ApiClient, node: str, clock: Clock, rng: random.Random,
                 settings: InformerSettings | None = None) -> None:
        self._client = client
        self._node = node
        self._clock = clock
        self._rng = rng
        self._settings = settings
        self.informer: Informer | None = None

    def attach(self, worker: PodWorker) -> PodView:
        """A fresh informer (a restarted kubelet relists) routed to `worker`."""
        self.informer = Informer(self._client, PODS, clock=self._clock,
                                 field_selector=f"spec.nodeName={self._node}",
                                 name=f"pods@{self._node}", rng=self._rng, settings=self._settings)
        self.informer.add_handlers(on_add=worker.on_add, on_update=worker.on_update,
                                   on_delete=worker.on_delete)
        return self.informer

    async def run(self, worker: PodWorker) -> None:
        """Run the informer; once synced, resync every pod the worker still runs."""
        informer = self.informer
        assert informer is not None, "attach() first"
        async def resync_when_synced() -> None:
            await informer.wait_for_sync()
            worker.resync_all()

        async with asyncio.TaskGroup() as tg:
            tg.create_task(informer.run(), name=f"{self._node}:pod-informer")
            tg.create_task(resync_when_synced(), name=f"{self._node}:pod-resync")

    def detach(self, worker: PodWorker) -> None:
        """Forget the informer (its task is cancelled with the node's tasks)."""
        self.informer = None

    async def wait_synced(self, *, within: float) -> bool:
        """Wait for the node's own informer to list once."""
        informer = self.informer
        return True if informer is None else await informer.wait_for_sync(within)


class _Slice:
    """One node's view of the shared informer."""

    def __init__(self, informer: Informer, node: str) -> None:
        self._informer = informer
        self._node = node

    def get(self, key: str) -> Obj | None:
        obj = self._informer.get(key)
        if obj is None or (obj.get("spec") or {}).get("nodeName") != self._node:
            return None
        return obj

    def keys(self) -> list[str]:
        return [key_of(o) for o in self._informer.by_index(INDEX_BY_NODE, self._node)]


class SharedPodWatch:
    """One pod informer for the whole process, dispatching by `spec.nodeName`."""

    def __init__(self, *, client: ApiClient, clock: Clock, rng: random.Random,
                 settings: InformerSettings | None = None) -> None:
        self.informer = Informer(client, PODS, clock=clock, indexers={INDEX_BY_NODE: index_pods_by_node},
                                 name="pods@kubelet", rng=rng, settings=settings)
        self.workers: dict[str, PodWorker] = {}
        self.informer.add_handlers(on_add=self._on_add, on_update=self._on_update, on_delete=self._on_delete)

    def _target(self, obj: Any) -> PodWorker | None:
        inner = getattr(obj, "obj", obj)
        node = (inner.get("spec") or {}).get("nodeName") if isinstance(inner, dict) else None
        return self.workers.get(node) if isinstance(node, str) else None

    def _on_add(self, obj: Obj, initial: bool) -> None:
        w = self._target(obj)
        if w is not None:
            w.on_add(obj, initial)

    def _on_update(self, old: Obj, new: Obj) -> None:
        w = self._target(new)
        if w is not None:
            w.on_update(old, new)

    def _on_delete(self, obj: Any) -> None:
        w = self._target(obj)
        if w is not None:
            w.on_delete(obj)

    async def run(self) -> None:
        """Run the shared informer (one task per process)."""
        await self.informer.run()

    def for_node(self, node: str) -> PodSource:
        """The `PodSource` of one node."""
        return _SharedSource(self, node)


class _SharedSource(PodSource):
    def __init__(self, shared: SharedPodWatch, node: str) -> None:
        self._shared = shared
        self._node = node

    def attach(self, worker: PodWorker) -> PodView:
        self._shared.workers[self._node] = worker
        return _Slice(self._shared.informer, self._node)

    async def run(self, worker: PodWorker) -> None:
        await self._shared.informer.wait_for_sync()
        worker.resync_all()

        await asyncio.Event().wait()  # the shared informer runs elsewhere; live until cancelled

    def detach(self, worker: PodWorker) -> None:
        self._shared.workers.pop(self._node, None)

    async def wait_synced(self, *, within: float) -> bool:
        return await self._shared.informer.wait_for_sync(within)

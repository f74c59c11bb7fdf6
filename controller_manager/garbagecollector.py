"""The garbage collector: ownerReferences with background, foreground and orphan propagation.

A level-based version of upstream's graph: the owner → dependents edges are the informers'
`owner` indexes (owner uid → objects), so the graph is the caches. For each object:

* **as a dependent** (`classify_owners`): an owner is *solid* if it exists (cache, then a GET
  by name that must return the same uid, because the cache may lag: #88097 is a GC acting on a
  wrongly absent owner), *dangling* if it is gone, *waiting* if it is being deleted in the
  foreground. With a solid owner left, dangling and waiting references are removed; with none
  left, the dependent is deleted (Foreground when a waiting owner blocks on it and it has
  dependents of its own, else Background), with a uid precondition. Owners of kinds this
  controller does not know are treated as solid (never delete on a guess).
* **as an owner being deleted**: with the `orphan` finalizer, its references are removed from
  every dependent, then the finalizer; with `foregroundDeletion`, its dependents are deleted
  and the finalizer is removed once no dependent blocks (`blockOwnerDeletion`) any more.

The apiserver puts those finalizers on a DELETE with `propagationPolicy` Orphan/Foreground and
removes an object once its finalizers are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import structlog

from kubemesh.controller_manager.controllers import ControllerContext, ControllerSpec, InformerNeed, Started
from kubemesh.controller_manager.objects import Api, IndexedStore, index_by_owner, index_by_uid, owner_refs
from kubemesh.services.machinery.client import ApiError, ConflictError, NotFoundError
from kubemesh.services.machinery.clock import wait_event
from kubemesh.services.machinery.discovering import discover
from kubemesh.services.machinery.informing import IndexFunc, final_state
from kubemesh.services.machinery.queueing import Result, run_workers
from kubemesh.services.model.kinds import (
    CUSTOMRESOURCEDEFINITIONS,
    KINDS,
    Kind,
    Obj,
    key_of,
    meta,
    name_of,
    namespace_of,
    uid_of,
)

_log = structlog.get_logger("controller_manager.garbagecollector")

ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"

Key = tuple[str, str]
"""(resource, cache key): `("pods", "default/web-1")`, `("widgets.example.com", "ns/w")`."""


@dataclass(slots=True)
class Owners:
    """A dependent's owners by state."""

    solid: list[dict[str, Any]] = field(default_factory=list)
    dangling: list[dict[str, Any]] = field(default_factory=list)
    waiting: list[dict[str, Any]] = field(default_factory=list)


def finalizers(obj: Obj) -> list[str]:
    """metadata.finalizers (never None)."""
    f = meta(obj).get("finalizers")
    return f if isinstance(f, list) else []


def waiting_for_dependents(obj: Obj) -> bool:
    """Being deleted in the foreground."""
    return bool(meta(obj).get("deletionTimestamp")) and FOREGROUND in finalizers(obj)


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with one dependent."""

    action: str
    """"none", "remove-refs" or "delete"."""
    refs_to_remove: tuple[str, ...] = ()
    policy: str = "Background"


def decide_dependent(obj: Obj, owners: Owners, *, has_dependents: bool) -> Decision:
    """The pure decision for a dependent whose owners have been classified."""
    if not owners.dangling and not owners.waiting:
        return Decision("none")
    if owners.solid:
        return Decision("remove-refs", tuple(str(r.get("uid")) for r in owners.dangling + owners.waiting))
    if meta(obj).get("deletionTimestamp"):
        return Decision("none")
    if owners.waiting and has_dependents:
        return Decision("delete", policy="Foreground")
    if ORPHAN in finalizers(obj):
        return Decision("delete", policy="Orphan")
    if FOREGROUND in finalizers(obj):
        return Decision("delete", policy="Foreground")
    return Decision("delete", policy="Background")


def _group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


class GarbageCollector:
    """Garbage collection over the kinds it monitors (`add_kind`): their caches are the graph."""

    def __init__(self, *, api: Api, stores: Mapping[Kind, IndexedStore]) -> None:
        self.api = api
        self.stores: dict[Kind, IndexedStore] = {}
        self._by_type: dict[tuple[str, str], Kind] = {}
        self._by_resource: dict[str, Kind] = {}
        for kind, store in stores.items():
            self.add_kind(kind, store)
        self.enqueue: Callable[[Key], None] = lambda key: None
        self.deleted: list[str] = []

    def add_kind(self, kind: Kind, store: IndexedStore) -> None:
        """Monitor one more resource (its cache must index objects by `uid` and by `owner`).

        Owner references name a kind by apiVersion and kind; any served version of a resource
        names the same objects, so references are resolved by group and kind.
        """
        self.stores[kind] = store
        self._by_type[(kind.group, kind.kind)] = kind
        self._by_resource[kind.resource] = kind

    def remove_kind(self, kind: Kind) -> None:
        """Stop monitoring a resource that is no longer served."""
        self.stores.pop(kind, None)
        self._by_type.pop((kind.group, kind.kind), None)
        self._by_resource.pop(kind.resource, None)

    def monitors(self, kind: Kind) -> bool:
        """Whether `kind`'s resource is monitored."""
        return kind.resource in self._by_resource

    # -- handlers -----------------------------------------------------------------------------

    def on_change(self, kind: Kind, obj: Obj) -> None:
        """An object was added or updated."""
        if owner_refs(obj):
            self.enqueue((kind.resource, key_of(obj)))
        if meta(obj).get("deletionTimestamp") and (ORPHAN in finalizers(obj) or FOREGROUND in finalizers(obj)):
            self.enqueue((kind.resource, key_of(obj)))
            self._enqueue_dependents(obj)

    def on_delete(self, kind: Kind, obj: Obj) -> None:
        """An object is gone: its dependents may now be garbage."""
        self._enqueue_dependents(obj)

    def _enqueue_dependents(self, owner: Obj) -> None:
        for kind, dep in self.dependents(owner):
            self.enqueue((kind.resource, key_of(dep)))

    def dependents(self, owner: Obj) -> list[tuple[Kind, Obj]]:
        """Every cached object that references `owner`'s uid."""
        uid = uid_of(owner)
        return [(k, o) for k, s in self.stores.items() for o in s.by_index("owner", uid)] if uid else []

    # -- reconcile ----------------------------------------------------------------------------

    async def classify_owners(self, obj: Obj) -> Owners:
        """Solid, dangling and waiting owners of `obj`, confirming absences with a GET."""
        out = Owners()
        for ref in owner_refs(obj):
            kind = self._by_type.get((_group_of(str(ref.get("apiVersion"))), str(ref.get("kind"))))
            if kind is None:
                out.solid.append(ref)  # unknown kind: never delete on a guess
                continue
            owner = next(iter(self.stores[kind].by_index("uid", str(ref.get("uid")))), None)
            if owner is None:
                try:
                    owner = await self.api.get(kind, str(ref.get("name")),
                                               namespace=namespace_of(obj) if kind.namespaced else None)
                except NotFoundError:
                    owner = None
                if owner is not None and uid_of(owner) != ref.get("uid"):
                    owner = None
            if owner is None:
                out.dangling.append(ref)
            elif waiting_for_dependents(owner):
                out.waiting.append(ref)
            else:
                out.solid.append(ref)
        return out

    async def reconcile(self, key: Key) -> Result | None:
        """Process one object as an owner being deleted and as a dependent."""
        resource, obj_key = key
        kind = self._by_resource.get(resource)
        if kind is None:
            return None  # no longer served
        obj = self.stores[kind].get(obj_key)
        if obj is None:
            return None
        if meta(obj).get("deletionTimestamp"):
            again = await self._process_deleting_owner(kind, obj)
            if again:
                return Result(requeue_after=1.0)
        if owner_refs(obj):
            owners = await self.classify_owners(obj)
            d = decide_dependent(obj, owners, has_dependents=bool(self.dependents(obj)))
            await self._apply(kind, obj, d)
        return None

    async def _apply(self, kind: Kind, obj: Obj, d: Decision) -> None:
        if d.action == "remove-refs":
            refs = [r for r in owner_refs(obj) if str(r.get("uid")) not in d.refs_to_remove]
            await self._patch_refs(kind, obj, refs)
        elif d.action == "delete":
            try:
                await self.api.delete(kind, name_of(obj), namespace=namespace_of(obj) or None,
                                      propagation_policy=d.policy, preconditions={"uid": uid_of(obj)})
            except (NotFoundError, ConflictError):
                return
            self.deleted.append(f"{kind.plural}/{key_of(obj)}")
            _log.info("garbage collected", kind=kind.kind, object=key_of(obj), policy=d.policy)

    async def _process_deleting_owner(self, kind: Kind, owner: Obj) -> bool:
        """Orphan or foreground handling; True when it must be looked at again."""
        fins = finalizers(owner)
        deps = self.dependents(owner)
        if ORPHAN in fins:
            for dkind, dep in deps:
                refs = [r for r in owner_refs(dep) if r.get("uid") != uid_of(owner)]
                await self._patch_refs(dkind, dep, refs)
            await self._remove_finalizer(kind, owner, ORPHAN)
            return False
        if FOREGROUND in fins:
            blocking = [(dk, d) for dk, d in deps
                        if any(r.get("uid") == uid_of(owner) and r.get("blockOwnerDeletion") for r in owner_refs(d))]
            for dkind, dep in deps:
                if not meta(dep).get("deletionTimestamp"):
                    others = [r for r in owner_refs(dep) if r.get("uid") != uid_of(owner)]
                    if others:
                        continue  # handled as a dependent: solid owners keep it, the ref goes
                    try:
                        await self.api.delete(dkind, name_of(dep), namespace=namespace_of(dep) or None,
                                              propagation_policy="Foreground" if self.dependents(dep) else "Background",
                                              preconditions={"uid": uid_of(dep)})
                    except (NotFoundError, ConflictError):
                        continue
                    self.deleted.append(f"{dkind.plural}/{key_of(dep)}")
            if not blocking:
                await self._remove_finalizer(kind, owner, FOREGROUND)
                return False
            return True
        return False

    async def _patch_refs(self, kind: Kind, obj: Obj, refs: list[dict[str, Any]]) -> None:
        with contextlib.suppress(NotFoundError):
            await self.api.patch(kind, name_of(obj), {"metadata": {"ownerReferences": refs or None}},
                                 namespace=namespace_of(obj) or None)

    async def _remove_finalizer(self, kind: Kind, obj: Obj, finalizer: str) -> None:
        rest = [f for f in finalizers(obj) if f != finalizer]
        patch = {"metadata": {"finalizers": rest or None, "resourceVersion": meta(obj).get("resourceVersion")}}
        with contextlib.suppress(NotFoundError):
            await self.api.patch(kind, name_of(obj), patch, namespace=namespace_of(obj) or None)


# ---------------------------------------------------------------------------------------------
# Monitors: which resources the collector watches, kept in step with what the server serves.

IGNORED_RESOURCES: Final = frozenset({"events", "events.events.k8s.io"})
"""Never collected (upstream's default ignored resources): events are too many to watch."""

GC_INDEXES: Final[Mapping[str, IndexFunc]] = {"uid": index_by_uid, "owner": index_by_owner}

RESYNC_PERIOD: Final = 30.0
"""Cluster seconds between two discoveries (upstream resyncs its monitors every 30 s); a
change of any CustomResourceDefinition triggers one at once."""


def monitorable(kind: Kind) -> bool:
    """Whether the collector watches a resource: it can be listed, watched and deleted."""
    return ({"list", "watch", "delete"} <= set(kind.verbs) and kind.resource not in IGNORED_RESOURCES
            and kind.storage)


class Monitors:
    """Adds and removes the collector's resources as discovery finds them served or gone."""

    def __init__(self, ctx: ControllerContext, gc: GarbageCollector) -> None:
        self.ctx = ctx
        self.gc = gc
        self.changed = asyncio.Event()

    def watch(self, kind: Kind) -> None:
        """Monitor `kind` now (its informer is already synced, or the GC reads through to GETs)."""
        store = self.ctx.informer(InformerNeed(kind=kind, indexers=GC_INDEXES))
        self.gc.add_kind(kind, store)
        self.ctx.on(kind, on_add=lambda o, _i: self.gc.on_change(kind, o),
                    on_update=lambda _old, new: self.gc.on_change(kind, new),
                    on_delete=lambda o: self.gc.on_delete(kind, final_state(o)))

    async def run(self) -> None:
        """Rediscover every `RESYNC_PERIOD` and whenever a CustomResourceDefinition changes."""
        while True:
            try:
                served = [k for k in await discover(self.ctx.api) if monitorable(k)]
            except ApiError as exc:
                _log.warning("discovery failed; keeping the monitored resources", error=str(exc))
            else:
                await self._sync(served)
            await wait_event(self.ctx.clock, self.changed, at_most=RESYNC_PERIOD)
            self.changed.clear()

    async def _sync(self, served: list[Kind]) -> None:
        resources = {k.resource for k in served}
        for kind in list(self.gc.stores):
            if kind.resource not in resources and kind not in KINDS_SET:
                self.gc.remove_kind(kind)
                self.ctx.informers.stop(kind)
                _log.info("garbage collector stopped monitoring", resource=kind.resource)
        for kind in served:
            if self.gc.monitors(kind):
                continue
            informer = self.ctx.informer(InformerNeed(kind=kind, indexers=GC_INDEXES))
            # Dependents are read from the caches: wait for this one to list before a
            # foreground deletion could conclude that nothing of this kind blocks it.
            await informer.wait_for_sync()
            self.watch(kind)
            _log.info("garbage collector monitoring", resource=kind.resource)


KINDS_SET: Final = frozenset(KINDS)


def _start(ctx: ControllerContext) -> Started:
    gc = GarbageCollector(api=ctx.api, stores={})
    q = ctx.queue("garbage-collector")
    gc.enqueue = q.add
    monitors = Monitors(ctx, gc)
    for need in _BUILTIN:
        monitors.watch(need.kind)
    ctx.on(CUSTOMRESOURCEDEFINITIONS, on_add=lambda _o, initial: None if initial else monitors.changed.set(),
           on_update=lambda _old, _new: monitors.changed.set(), on_delete=lambda _o: monitors.changed.set())

    async def run() -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(run_workers(q, gc.reconcile, workers=ctx.settings.workloads.gc_workers,
                                       name="garbage-collector"), name="garbage-collector:workers")
            tg.create_task(monitors.run(), name="garbage-collector:monitors")

    return Started(run=run(), controller=gc)


_BUILTIN: Final = tuple(InformerNeed(kind=k, indexers=GC_INDEXES) for k in KINDS if k.storage and monitorable(k))
CONTROLLER = ControllerSpec(name="garbage-collector",
                            informers=(*_BUILTIN, InformerNeed(kind=CUSTOMRESOURCEDEFINITIONS)), start=_start)

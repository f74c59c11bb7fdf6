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

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from kubemesh.controller_manager.objects import Api, IndexedStore, owner_refs
from kubemesh.services.machinery.client import ConflictError, NotFoundError
from kubemesh.services.machinery.queueing import Result
from kubemesh.services.model.kinds import Kind, Obj, key_of, meta, name_of, namespace_of, uid_of

_log = structlog.get_logger("controller_manager.garbagecollector")

ORPHAN = "orphan"
FOREGROUND = "foregroundDeletion"

Key = tuple[str, str]
"""(plural, cache key)."""


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


class GarbageCollector:
    """Garbage collection over the kinds whose informers this process runs."""

    def __init__(self, *, api: Api, stores: Mapping[Kind, IndexedStore]) -> None:
        self.api = api
        self.stores = dict(stores)
        self._by_type = {(k.api_version, k.kind): k for k in self.stores}
        self._by_plural = {k.plural: k for k in self.stores}
        self.enqueue: Callable[[Key], None] = lambda key: None
        self.deleted: list[str] = []

    # -- handlers -----------------------------------------------------------------------------

    def on_change(self, kind: Kind, obj: Obj) -> None:
        """An object was added or updated."""
        if owner_refs(obj):
            self.enqueue((kind.plural, key_of(obj)))
        if meta(obj).get("deletionTimestamp") and (ORPHAN in finalizers(obj) or FOREGROUND in finalizers(obj)):
            self.enqueue((kind.plural, key_of(obj)))
            self._enqueue_dependents(obj)

    def on_delete(self, kind: Kind, obj: Obj) -> None:
        """An object is gone: its dependents may now be garbage."""
        self._enqueue_dependents(obj)

    def _enqueue_dependents(self, owner: Obj) -> None:
        for kind, dep in self.dependents(owner):
            self.enqueue((kind.plural, key_of(dep)))

    def dependents(self, owner: Obj) -> list[tuple[Kind, Obj]]:
        """Every cached object that references `owner`'s uid."""
        uid = uid_of(owner)
        return [(k, o) for k, s in self.stores.items() for o in s.by_index("owner", uid)] if uid else []

    # -- reconcile ----------------------------------------------------------------------------

    async def classify_owners(self, obj: Obj) -> Owners:
        """Solid, dangling and waiting owners of `obj`, confirming absences with a GET."""
        out = Owners()
        for ref in owner_refs(obj):
            kind = self._by_type.get((str(ref.get("apiVersion")), str(ref.get("kind"))))
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
        plural, obj_key = key
        kind = self._by_plural[plural]
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

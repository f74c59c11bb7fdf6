"""An in-memory apiserver double and zero-lag caches for the controller unit tests.

`FakeApi` implements the part of `ApiClient` the controllers use (get, create, update, patch
with JSON merge patch, delete with graceful deletion of bound pods, finalizers and
`propagationPolicy`), with uids, resourceVersions, generations and optimistic concurrency.
`FakeApi.store(kind)` is a cache view with the indexes the controllers ask for.
"""

from __future__ import annotations

import builtins
import copy
import itertools
from typing import Any

from kubemesh.controller_manager.objects import (
    PatchType,
    index_by_namespace,
    index_by_node,
    index_by_owner,
    index_by_uid,
)
from kubemesh.services.machinery.client import AlreadyExistsError, ConflictError, NotFoundError
from kubemesh.services.machinery.clock import ManualClock, format_time
from kubemesh.services.model.kinds import Kind, Obj, key_of

INDEXES = {"namespace": index_by_namespace, "node": index_by_node, "owner": index_by_owner, "uid": index_by_uid}


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


class FakeStore:
    """A cache view of one kind in the fake apiserver (always up to date)."""

    def __init__(self, api: FakeApi, kind: Kind) -> None:
        self.api = api
        self.kind = kind
        self.frozen: dict[str, Obj] | None = None

    def _objs(self) -> dict[str, Obj]:
        if self.frozen is not None:
            return self.frozen
        return self.api.objects.setdefault(self.kind.plural, {})

    def freeze(self) -> None:
        self.frozen = copy.deepcopy(self.api.objects.setdefault(self.kind.plural, {}))

    def get(self, key: str) -> Obj | None:
        return self._objs().get(key)

    def list(self) -> builtins.list[Obj]:
        return builtins.list(self._objs().values())

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        fn = INDEXES[index]
        return [o for o in self._objs().values() if value in fn(o)]


class FakeApi:
    """An in-memory apiserver for unit tests."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.objects: dict[str, dict[str, Obj]] = {}
        self.rv = itertools.count(1)
        self.uids = itertools.count(1)
        self.calls: list[tuple[str, str, str]] = []
        self.fail_next: dict[str, Exception] = {}

    def store(self, kind: Kind) -> FakeStore:
        return FakeStore(self, kind)

    def _key(self, kind: Kind, name: str, namespace: str | None) -> str:
        return f"{namespace}/{name}" if kind.namespaced and namespace else name

    def _bump(self, obj: Obj) -> Obj:
        obj["metadata"]["resourceVersion"] = str(next(self.rv))
        return obj

    def _get(self, kind: Kind, name: str, namespace: str | None) -> Obj:
        obj = self.objects.setdefault(kind.plural, {}).get(self._key(kind, name, namespace))
        if obj is None:
            raise NotFoundError({"code": 404, "reason": "NotFound", "message": f"{kind.plural} {name!r} not found"})
        return obj

    def _check(self, verb: str) -> None:
        exc = self.fail_next.pop(verb, None)
        if exc is not None:
            raise exc

    def add(self, kind: Kind, body: Obj) -> Obj:
        """Create an object directly (test setup)."""
        obj = copy.deepcopy(body)
        md = obj.setdefault("metadata", {})
        md.setdefault("uid", f"uid-{next(self.uids)}")
        md.setdefault("creationTimestamp", format_time(self.clock.now()))
        md.setdefault("generation", 1)
        if kind.namespaced:
            md.setdefault("namespace", "default")
        obj.setdefault("kind", kind.kind)
        obj.setdefault("apiVersion", kind.api_version)
        self._bump(obj)
        self.objects.setdefault(kind.plural, {})[key_of(obj)] = obj
        return obj

    async def get(self, kind: Any, name: str, *, namespace: str | None = None,
                  subresource: str | None = None) -> Obj:
        self.calls.append(("get", kind.plural, name))
        self._check("get")
        return copy.deepcopy(self._get(kind, name, namespace))

    async def create(self, kind: Any, body: Obj, *, namespace: str | None = None) -> Obj:
        self._check("create")
        body = copy.deepcopy(body)
        md = body.setdefault("metadata", {})
        if namespace:
            md["namespace"] = namespace
        if not md.get("name") and md.get("generateName"):
            md["name"] = f"{md['generateName']}{next(self.uids):05d}"
        self.calls.append(("create", kind.plural, str(md.get("name"))))
        if self._key(kind, md["name"], md.get("namespace")) in self.objects.setdefault(kind.plural, {}):
            raise AlreadyExistsError({"code": 409, "reason": "AlreadyExists", "message": "exists"})
        return copy.deepcopy(self.add(kind, body))

    async def update(self, kind: Any, body: Obj, *, subresource: str | None = None) -> Obj:
        md = body["metadata"]
        self.calls.append(("update" + (f"/{subresource}" if subresource else ""), kind.plural, md["name"]))
        self._check("update")
        cur = self._get(kind, md["name"], md.get("namespace"))
        if md.get("resourceVersion") and md["resourceVersion"] != cur["metadata"]["resourceVersion"]:
            raise ConflictError({"code": 409, "reason": "Conflict", "message": "stale"})
        new = copy.deepcopy(body)
        if subresource == "status":
            new = {**copy.deepcopy(cur), "status": new.get("status")}
        elif kind.has_status:
            new["status"] = copy.deepcopy(cur.get("status"))
        new["metadata"] = {**cur["metadata"], **{k: v for k, v in new["metadata"].items()
                                                 if k in ("labels", "annotations", "ownerReferences", "finalizers")}}
        if subresource is None and new.get("spec") != cur.get("spec"):
            new["metadata"]["generation"] = cur["metadata"].get("generation", 1) + 1
        self._bump(new)
        self.objects[kind.plural][key_of(new)] = new
        self._maybe_finalize(kind, new)
        return copy.deepcopy(new)

    async def patch(self, kind: Any, name: str, patch: Obj | builtins.list[Obj], *,
                    namespace: str | None = None, patch_type: PatchType = "merge",
                    subresource: str | None = None) -> Obj:
        self.calls.append(("patch" + (f"/{subresource}" if subresource else ""), kind.plural, name))
        self._check("patch")
        assert isinstance(patch, dict)
        cur = self._get(kind, name, namespace)
        want_rv = (patch.get("metadata") or {}).get("resourceVersion")
        if want_rv and want_rv != cur["metadata"]["resourceVersion"]:
            raise ConflictError({"code": 409, "reason": "Conflict", "message": "stale"})
        new = _merge(copy.deepcopy(cur), patch)
        if subresource is None and kind.has_status:
            new["status"] = copy.deepcopy(cur.get("status"))
        if subresource is None and new.get("spec") != cur.get("spec"):
            new["metadata"]["generation"] = cur["metadata"].get("generation", 1) + 1
        self._bump(new)
        self.objects[kind.plural][key_of(new)] = new
        self._maybe_finalize(kind, new)
        return copy.deepcopy(new)

    def _maybe_finalize(self, kind: Kind, obj: Obj) -> None:
        md = obj["metadata"]
        if md.get("deletionTimestamp") and not md.get("finalizers") and kind.plural != "pods":
            self.objects[kind.plural].pop(key_of(obj), None)

    async def delete(self, kind: Any, name: str, *, namespace: str | None = None,
                     grace_period_seconds: int | None = None, propagation_policy: str | None = None,
                     preconditions: Obj | None = None) -> Obj | None:
        self.calls.append(("delete", kind.plural, name))
        self._check("delete")
        cur = self._get(kind, name, namespace)
        md = cur["metadata"]
        if preconditions and preconditions.get("uid") and preconditions["uid"] != md.get("uid"):
            raise ConflictError({"code": 409, "reason": "Conflict", "message": "uid precondition"})
        if propagation_policy in ("Foreground", "Orphan") and not md.get("deletionTimestamp"):
            fin = "foregroundDeletion" if propagation_policy == "Foreground" else "orphan"
            md.setdefault("finalizers", []).append(fin)
        bound = kind.plural == "pods" and (cur.get("spec") or {}).get("nodeName")
        graceful = bound and grace_period_seconds != 0
        if graceful or md.get("finalizers"):
            if not md.get("deletionTimestamp"):
                md["deletionTimestamp"] = format_time(self.clock.now())
                md["deletionGracePeriodSeconds"] = 30 if grace_period_seconds is None else grace_period_seconds
                self._bump(cur)
            if not graceful and not md.get("finalizers"):
                self.objects[kind.plural].pop(key_of(cur), None)
            return copy.deepcopy(cur)
        self.objects[kind.plural].pop(key_of(cur), None)
        return copy.deepcopy(cur)

    def names(self, kind: Kind) -> builtins.list[str]:
        return sorted(self.objects.get(kind.plural, {}))

    def count(self, verb: str, plural: str) -> int:
        return sum(1 for v, p, _ in self.calls if v == verb and p == plural)

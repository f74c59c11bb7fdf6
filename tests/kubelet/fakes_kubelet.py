"""In-memory stand-ins for the apiserver, for the kubelet's unit tests (no network)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kubemesh.services.machinery.client import (
    AlreadyExistsError,
    ApiConnectionError,
    ApiError,
    ConflictError,
    NotFoundError,
    PatchType,
)
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.model.kinds import Kind, Obj


def conflict() -> ApiError:
    return ConflictError({"code": 409, "reason": "Conflict", "message": "stale"})


def not_found() -> ApiError:
    return NotFoundError({"code": 404, "reason": "NotFound", "message": "gone"})


def unavailable() -> ApiError:
    return ApiConnectionError("timeout", maybe_applied=True)


@dataclass
class Call:
    verb: str
    kind: str
    name: str
    at: float
    body: Any = None
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class FakeApi:
    """Stores objects by (plural, namespace, name); fails calls on demand."""

    clock: Clock
    objects: dict[tuple[str, str, str], Obj] = field(default_factory=dict)
    calls: list[Call] = field(default_factory=list)
    fail: Callable[[str, str], ApiError | None] = lambda verb, plural: None
    rv: int = 0

    def _check(self, verb: str, kind: Kind, name: str, body: Any = None, **options: Any) -> None:
        self.calls.append(Call(verb, kind.plural, name, self.clock.now(), copy.deepcopy(body), options))
        err = self.fail(verb, kind.plural)
        if err is not None:
            raise err

    def _bump(self, obj: Obj) -> Obj:
        self.rv += 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.rv)
        obj["metadata"].setdefault("uid", f"uid-{obj['metadata'].get('name')}")
        return obj

    def count(self, verb: str, plural: str) -> int:
        return sum(1 for c in self.calls if c.verb == verb and c.kind == plural)

    async def get(self, kind: Kind, name: str, *, namespace: str | None = None,
                  subresource: str | None = None) -> Obj:
        self._check("get", kind, name)
        obj = self.objects.get((kind.plural, namespace or "", name))
        if obj is None:
            raise not_found()
        return copy.deepcopy(obj)

    async def create(self, kind: Kind, body: Obj, *, namespace: str | None = None) -> Obj:
        name = body["metadata"]["name"]
        self._check("create", kind, name, body)
        key = (kind.plural, namespace or body["metadata"].get("namespace", "") or "", name)
        if key in self.objects:

            raise AlreadyExistsError({"code": 409, "reason": "AlreadyExists"})
        self.objects[key] = self._bump(copy.deepcopy(body))
        return copy.deepcopy(self.objects[key])

    async def update(self, kind: Kind, body: Obj, *, subresource: str | None = None) -> Obj:
        md = body["metadata"]
        self._check("update", kind, md["name"], body)
        key = (kind.plural, md.get("namespace", "") or "", md["name"])
        cur = self.objects.get(key)
        if cur is None:
            raise not_found()
        if md.get("resourceVersion") != cur["metadata"]["resourceVersion"]:
            raise conflict()
        self.objects[key] = self._bump(copy.deepcopy(body))
        return copy.deepcopy(self.objects[key])

    async def patch(self, kind: Kind, name: str, patch: Obj | list[Obj], *, namespace: str | None = None,
                    patch_type: PatchType = "merge", subresource: str | None = None) -> Obj:
        self._check("patch", kind, name, patch, patch_type=patch_type, subresource=subresource)
        key = (kind.plural, namespace or "", name)
        cur = self.objects.get(key)
        if cur is None:
            raise not_found()
        assert isinstance(patch, dict)
        for part, value in patch.items():
            if part == "metadata":
                continue
            if isinstance(value, dict):
                cur.setdefault(part, {}).update(copy.deepcopy(value))
        return copy.deepcopy(self._bump(cur))

    async def delete(self, kind: Kind, name: str, *, namespace: str | None = None,
                     grace_period_seconds: int | None = None, propagation_policy: str | None = None,
                     preconditions: Obj | None = None) -> Obj | None:
        self._check("delete", kind, name, None, grace_period_seconds=grace_period_seconds,
                    preconditions=preconditions)
        key = (kind.plural, namespace or "", name)
        if key not in self.objects:
            raise not_found()
        del self.objects[key]
        return None

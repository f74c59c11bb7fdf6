"""Reading and building the object fields the controllers reason about (pure helpers).

Conditions, taint keys, owner references, pod phases and readiness (taint and toleration
matching is `kubemesh.services.model.podutil`), and the protocols (`Api`, `Store`) the controllers are
written against: `kubemesh.services.machinery.client.ApiClient` and
`kubemesh.services.machinery.informing.Informer` satisfy them,
and the unit tests pass in-memory fakes.
"""

from __future__ import annotations

import builtins
from typing import Any, Final, Literal, Protocol

from kubemesh.services.machinery.clock import format_time, time_or_none
from kubemesh.services.model.kinds import Obj, meta, uid_of
from kubemesh.services.model.podutil import taints_of

PatchType = Literal["merge", "strategic", "json", "apply"]

NO_EXECUTE: Final = "NoExecute"
NO_SCHEDULE: Final = "NoSchedule"


class Api(Protocol):
    """The part of `kubemesh.services.machinery.client.ApiClient` the controllers use."""

    async def get(self, kind: Any, name: str, *, namespace: str | None = None,
                  subresource: str | None = None) -> Obj:
        """GET one object."""
        ...

    async def create(self, kind: Any, body: Obj, *, namespace: str | None = None) -> Obj:
        """POST an object."""
        ...

    async def update(self, kind: Any, body: Obj, *, subresource: str | None = None) -> Obj:
        """PUT an object (optimistic on its resourceVersion)."""
        ...

    async def patch(self, kind: Any, name: str, patch: Obj | builtins.list[Obj], *,
                    namespace: str | None = None, patch_type: PatchType = "merge",
                    subresource: str | None = None) -> Obj:
        """PATCH an object."""
        ...

    async def delete(self, kind: Any, name: str, *, namespace: str | None = None,
                     grace_period_seconds: int | None = None, propagation_policy: str | None = None,
                     preconditions: Obj | None = None) -> Obj | None:
        """DELETE an object."""
        ...


class Store(Protocol):
    """The part of an informer's cache the controllers read."""

    def get(self, key: str) -> Obj | None:
        """The cached object for a key."""
        ...

    def list(self) -> builtins.list[Obj]:
        """Every cached object."""
        ...


class IndexedStore(Store, Protocol):
    """A cache with indexes (pods by node, objects by owner uid)."""

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        """The cached objects whose index function yields `value`."""
        ...


# -- time -------------------------------------------------------------------------------------


def ts(value: Any) -> float | None:
    """A Kubernetes timestamp as seconds, None if absent or unparsable."""
    return time_or_none(value)


def now_str(now: float) -> str:
    """metav1.Time for `now`."""
    return format_time(now)


# -- conditions -------------------------------------------------------------------------------


def conditions(obj: Obj) -> list[dict[str, Any]]:
    """status.conditions (never None)."""
    conds = (obj.get("status") or {}).get("conditions")
    return conds if isinstance(conds, list) else []


def condition(obj: Obj, ctype: str) -> dict[str, Any] | None:
    """The condition of type `ctype`, or None."""
    for c in conditions(obj):
        if c.get("type") == ctype:
            return c
    return None


def condition_status(obj: Obj, ctype: str) -> str | None:
    """"True", "False", "Unknown", or None when the condition is absent."""
    c = condition(obj, ctype)
    return None if c is None else str(c.get("status"))


# -- taints and tolerations -------------------------------------------------------------------


def has_taint(node: Obj, key: str, effect: str | None = None) -> bool:
    """Whether the node carries a taint with this key (and effect)."""
    return any(t.get("key") == key and (effect is None or t.get("effect") == effect) for t in taints_of(node))


# -- pods -------------------------------------------------------------------------------------


def phase(pod: Obj) -> str:
    """status.phase ("Pending" when absent)."""
    return str((pod.get("status") or {}).get("phase") or "Pending")


def is_terminal(pod: Obj) -> bool:
    """Failed or Succeeded."""
    return phase(pod) in ("Failed", "Succeeded")


def is_terminating(obj: Obj) -> bool:
    """Whether metadata.deletionTimestamp is set."""
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def is_active(pod: Obj) -> bool:
    """Counted as a replica: not terminal and not being deleted (upstream `IsPodActive`)."""
    return not is_terminal(pod) and not is_terminating(pod)


def is_ready(pod: Obj) -> bool:
    """The pod's Ready condition is True."""
    return condition_status(pod, "Ready") == "True"


def is_available(pod: Obj, *, min_ready_seconds: float, now: float) -> bool:
    """Ready for at least `min_ready_seconds` (upstream `IsPodAvailable`)."""
    c = condition(pod, "Ready")
    if c is None or c.get("status") != "True":
        return False
    if min_ready_seconds <= 0:
        return True
    since = ts(c.get("lastTransitionTime"))
    return since is not None and since + min_ready_seconds <= now


def node_name_of(pod: Obj) -> str:
    """spec.nodeName, or ""."""
    return str((pod.get("spec") or {}).get("nodeName") or "")


def creation_time(obj: Obj) -> float:
    """metadata.creationTimestamp in seconds (0 when absent)."""
    return ts((obj.get("metadata") or {}).get("creationTimestamp")) or 0.0


# -- owners -----------------------------------------------------------------------------------


def owner_refs(obj: Obj) -> list[dict[str, Any]]:
    """metadata.ownerReferences (never None)."""
    refs = (obj.get("metadata") or {}).get("ownerReferences")
    return refs if isinstance(refs, list) else []


def controller_ref(obj: Obj) -> dict[str, Any] | None:
    """The owner reference with controller=true, if any."""
    for r in owner_refs(obj):
        if r.get("controller"):
            return r
    return None


def owner_ref_to(owner: Obj, *, api_version: str, kind: str, block: bool = True) -> dict[str, Any]:
    """A controller owner reference pointing at `owner`."""
    return {"apiVersion": api_version, "kind": kind, "name": meta(owner).get("name"), "uid": uid_of(owner),
            "controller": True, "blockOwnerDeletion": block}


def index_by_owner(obj: Obj) -> list[str]:
    """Index function: the uids of every owner."""
    return [str(r.get("uid")) for r in owner_refs(obj) if r.get("uid")]


def index_by_uid(obj: Obj) -> list[str]:
    """Index function: the object's own uid."""
    uid = uid_of(obj)
    return [uid] if uid else []


def index_by_node(obj: Obj) -> list[str]:
    """Index function: spec.nodeName of a pod (unscheduled pods under "")."""
    return [node_name_of(obj)]


def index_by_namespace(obj: Obj) -> list[str]:
    """Index function: metadata.namespace."""
    return [str((obj.get("metadata") or {}).get("namespace") or "")]


def int_or_percent(value: Any, total: int, *, round_up: bool) -> int:
    """Resolve an IntOrString (`3`, `"25%"`) against `total`, as upstream's GetScaledValueFromIntOrPercent."""
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    s = str(value).strip()
    if s.endswith("%"):
        pct = int(s[:-1])
        exact = pct * total
        return -(-exact // 100) if round_up else exact // 100
    return int(s)

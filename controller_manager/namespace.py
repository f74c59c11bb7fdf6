"""The namespace controller: empties a terminating namespace, then lets it go.

A DELETE of a namespace only marks it (`deletionTimestamp`, phase Terminating, the `kubernetes`
finalizer still in `spec.finalizers`). For each such namespace this controller, as upstream's
namespaced-resources deleter:

1. discovers every namespaced resource the server serves, custom resources included
   (`kubemesh.services.machinery.discovering`), and deletes each one's collection in the
   namespace: every object as its own DELETE would be, so pods terminate gracefully on
   their kubelets and objects with finalizers wait for them;
2. lists what is left and writes the namespace's conditions (`NamespaceContentRemaining`,
   `NamespaceFinalizersRemaining`, and the three failure conditions False), worded as upstream;
3. looks again after the longest remaining grace period (at least a second), and once nothing
   is left removes `kubernetes` through `namespaces/{name}/finalize`, after which the
   apiserver removes the namespace.

So a namespace with a pod on a powered-off node stays Terminating (the pod's kubelet never
confirms it), and so does one holding an object whose finalizer nobody removes, as upstream.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Final

import structlog

from kubemesh.controller_manager.controllers import ControllerContext, ControllerSpec, InformerNeed, Started
from kubemesh.controller_manager.objects import Api, Store, ts
from kubemesh.services.machinery.client import ApiClient, ApiError, ConflictError, NotFoundError
from kubemesh.services.machinery.clock import Clock, format_time
from kubemesh.services.machinery.discovering import discover
from kubemesh.services.machinery.queueing import Result, run_workers
from kubemesh.services.model.kinds import NAMESPACES, PODS, Kind, Obj, key_of, meta

_log = structlog.get_logger("controller_manager.namespace")

FINALIZER: Final = "kubernetes"
"""The namespace controller's finalizer in `spec.finalizers`."""
MIN_REQUEUE: Final = 1.0
"""Cluster seconds before looking again at a namespace with content left."""


def _deletable(kind: Kind) -> bool:
    return kind.namespaced and "list" in kind.verbs and ("deletecollection" in kind.verbs or "delete" in kind.verbs)


def _resource_text(kind: Kind) -> str:
    """As upstream prints a GroupResource: `pods.` for the core group, `widgets.example.com` otherwise."""
    return f"{kind.plural}.{kind.group}"


@dataclass(slots=True)
class Content:
    """What is left in a namespace after a deletion pass."""

    remaining: Counter[str] = field(default_factory=Counter)
    """Objects left by resource."""
    finalizers: Counter[str] = field(default_factory=Counter)
    """Objects left by finalizer they wait for."""
    wait: float = 0.0
    """Cluster seconds until the last graceful deletion is due."""
    failures: list[str] = field(default_factory=list)


class NamespaceController:
    """Deletes the content of terminating namespaces and finalizes them."""

    def __init__(self, *, api: Api, client: ApiClient, namespaces: Store, clock: Clock) -> None:
        self.api = api
        self.client = client
        self.namespaces = namespaces
        self.clock = clock
        self.finalized: list[str] = []

    async def reconcile(self, name: str) -> Result | None:
        """One pass over a namespace: delete, count, report, finalize when empty."""
        ns = self.namespaces.get(name)
        if ns is None or not meta(ns).get("deletionTimestamp"):
            return None
        if FINALIZER not in ((ns.get("spec") or {}).get("finalizers") or []):
            return None
        try:
            kinds = [k for k in await discover(self.client) if _deletable(k)]
        except ApiError as exc:
            _log.warning("discovery failed; retrying", namespace=name, error=str(exc))
            await self._report(ns, Content(failures=[f"discovery: {exc}"]), discovery_failed=True)
            return Result(requeue_after=MIN_REQUEUE)
        content = await self._delete_content(name, kinds)
        await self._report(ns, content, discovery_failed=False)
        if content.remaining or content.failures:
            return Result(requeue_after=max(MIN_REQUEUE, content.wait))
        await self._finalize(ns)
        return None

    async def _delete_content(self, name: str, kinds: list[Kind]) -> Content:
        content = Content()
        now = self.clock.now()
        for kind in kinds:
            try:
                if "deletecollection" in kind.verbs:
                    await self.client.delete_collection(kind, namespace=name)
                else:
                    for obj in (await self.client.list(kind, namespace=name)).get("items") or []:
                        with contextlib.suppress(NotFoundError):
                            await self.api.delete(kind, str(meta(obj).get("name")), namespace=name)
                left = (await self.client.list(kind, namespace=name)).get("items") or []
            except NotFoundError:
                continue  # the resource went away meanwhile (its CRD was deleted)
            except ApiError as exc:
                content.failures.append(f"{_resource_text(kind)}: {exc}")
                continue
            for obj in left:
                content.remaining[_resource_text(kind)] += 1
                for f in meta(obj).get("finalizers") or []:
                    content.finalizers[str(f)] += 1
                if kind is PODS:
                    due = ts(meta(obj).get("deletionTimestamp"))
                    if due is not None:
                        content.wait = max(content.wait, due - now)
        return content

    async def _report(self, ns: Obj, content: Content, *, discovery_failed: bool) -> None:
        """Write the namespace's deletion conditions (only when they change)."""
        now = format_time(self.clock.now())
        old = {c.get("type"): c for c in (ns.get("status") or {}).get("conditions") or []}

        def cond(ctype: str, status: str, reason: str, message: str) -> Obj:
            prev = old.get(ctype)
            since = prev.get("lastTransitionTime") if prev and prev.get("status") == status else now
            return {"type": ctype, "status": status, "lastTransitionTime": since, "reason": reason,
                    "message": message}

        remaining = ", ".join(f"{r} has {n} resource instances" for r, n in sorted(content.remaining.items()))
        finalizers = ", ".join(f"{f} in {n} resource instances" for f, n in sorted(content.finalizers.items()))
        conditions = [
            cond("NamespaceDeletionDiscoveryFailure", "True", "DiscoveryFailed", "; ".join(content.failures))
            if discovery_failed else
            cond("NamespaceDeletionDiscoveryFailure", "False", "ResourcesDiscovered",
                 "All resources successfully discovered"),
            cond("NamespaceDeletionGroupVersionParsingFailure", "False", "ParsedGroupVersions",
                 "All legacy kube types successfully parsed"),
            cond("NamespaceDeletionContentFailure", "True", "ContentDeletionFailed", "; ".join(content.failures))
            if content.failures and not discovery_failed else
            cond("NamespaceDeletionContentFailure", "False", "ContentDeleted",
                 "All content successfully deleted, may be waiting on finalization"),
            cond("NamespaceContentRemaining", "True", "SomeResourcesRemain",
                 f"Some resources are remaining: {remaining}") if remaining else
            cond("NamespaceContentRemaining", "False", "ContentRemoved", "All content successfully removed"),
            cond("NamespaceFinalizersRemaining", "True", "SomeFinalizersRemain",
                 f"Some content in the namespace has finalizers remaining: {finalizers}") if finalizers else
            cond("NamespaceFinalizersRemaining", "False", "ContentHasNoFinalizers",
                 "All content-preserving finalizers finished"),
        ]
        if [old.get(c["type"]) for c in conditions] == conditions:
            return
        status: dict[str, Any] = {**(ns.get("status") or {}), "conditions": conditions}
        body = {**ns, "status": status}
        with contextlib.suppress(NotFoundError, ConflictError):
            await self.api.update(NAMESPACES, body, subresource="status")

    async def _finalize(self, ns: Obj) -> None:
        spec = ns.get("spec") or {}
        rest = [f for f in spec.get("finalizers") or [] if f != FINALIZER]
        body = {**ns, "spec": {**spec, "finalizers": rest}}
        body["metadata"] = {k: v for k, v in meta(ns).items() if k != "resourceVersion"}
        try:
            await self.api.update(NAMESPACES, body, subresource="finalize")
        except NotFoundError:
            return
        self.finalized.append(str(meta(ns).get("name")))
        _log.info("namespace finalized", namespace=meta(ns).get("name"))


def _start(ctx: ControllerContext) -> Started:
    c = NamespaceController(api=ctx.api, client=ctx.api, namespaces=ctx.informer(_NAMESPACES), clock=ctx.clock)
    q = ctx.queue("namespace")

    def changed(ns: Obj) -> None:
        if meta(ns).get("deletionTimestamp"):
            q.add(key_of(ns))

    ctx.on(NAMESPACES, on_add=lambda o, _i: changed(o), on_update=lambda _old, new: changed(new))
    return Started(run=run_workers(q, c.reconcile, workers=ctx.settings.workloads.namespace_workers,
                                   name="namespace"), controller=c)


_NAMESPACES = InformerNeed(kind=NAMESPACES)
CONTROLLER = ControllerSpec(name="namespace", informers=(_NAMESPACES,), start=_start)

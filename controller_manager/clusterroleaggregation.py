"""The ClusterRole aggregation controller: write an aggregated ClusterRole's rules into it.

A ClusterRole with an `aggregationRule` holds the rules of every other ClusterRole whose labels
one of its `clusterRoleSelectors` matches (that is how `admin`, `edit` and `view` grow when a
CRD's author labels a ClusterRole `rbac.authorization.k8s.io/aggregate-to-edit: "true"`). As
upstream's controller does, this one writes the union into the aggregated role's `rules`, so
`kubectl get clusterrole admin -o yaml` shows what the role grants. The source roles are taken
in name order, each rule once; the role is written only when its rules differ from the union.

The apiserver's authorizer computes the same union itself, at once: a grant does not wait for
this controller, and a user reading the role sees it after one reconcile. Any ClusterRole
change requeues every aggregated role (a label change can add or remove a source; upstream
does the same).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from typing import Any

import structlog

from kubemesh.controller_manager.controllers import ControllerContext, ControllerSpec, InformerNeed, Started
from kubemesh.controller_manager.objects import Api, Store
from kubemesh.services.machinery.client import ConflictError, NotFoundError
from kubemesh.services.machinery.queueing import Result, run_workers
from kubemesh.services.model.kinds import CLUSTERROLES, Obj, name_of
from kubemesh.services.model.selectors import label_selector_from_dict

_log = structlog.get_logger("controller_manager.clusterroleaggregation")


def _matches(selectors: Iterable[Any], labels: dict[str, str]) -> bool:
    for sel in selectors:
        if not isinstance(sel, dict):
            continue
        try:
            if label_selector_from_dict(sel).matches(labels):
                return True
        except ValueError:  # an invalid selector selects nothing
            continue
    return False


def aggregated_rules(role: Obj, roles: Iterable[Obj]) -> list[Obj]:
    """The rules `role`'s aggregationRule gathers from `roles` (name order, each rule once)."""
    agg = role.get("aggregationRule") or {}
    selectors = agg.get("clusterRoleSelectors") or []
    out: list[Obj] = []
    for other in sorted(roles, key=name_of):
        if name_of(other) == name_of(role):
            continue
        if not _matches(selectors, (other.get("metadata") or {}).get("labels") or {}):
            continue
        for rule in other.get("rules") or []:
            if rule not in out:
                out.append(rule)
    return out


class ClusterRoleAggregationController:
    """Keeps every aggregated ClusterRole's rules equal to the union it selects."""

    def __init__(self, *, api: Api, roles: Store) -> None:
        self.api = api
        self.roles = roles
        self.enqueue: Callable[[str], None] = lambda key: None

    def on_change(self) -> None:
        """Some ClusterRole changed: every aggregated one may have to change."""
        for role in self.roles.list():
            if isinstance(role.get("aggregationRule"), dict):
                self.enqueue(name_of(role))

    async def reconcile(self, key: str) -> Result | None:
        """Write the union into the role if its rules differ."""
        role = self.roles.get(key)
        if role is None or not isinstance(role.get("aggregationRule"), dict):
            return None
        want = aggregated_rules(role, self.roles.list())
        if (role.get("rules") or []) == want:
            return None
        _log.info("aggregating cluster role", role=key, rules=len(want))
        with contextlib.suppress(NotFoundError):
            try:
                await self.api.update(CLUSTERROLES, {**role, "rules": want})
            except ConflictError:
                return Result(requeue_after=1.0)  # the cache was behind; its update event comes too
        return None


def _start(ctx: ControllerContext) -> Started:
    c = ClusterRoleAggregationController(api=ctx.api, roles=ctx.informer(_CLUSTERROLES))
    q = ctx.queue("clusterrole-aggregation")
    c.enqueue = q.add
    ctx.on(CLUSTERROLES, on_add=lambda _o, _i: c.on_change(), on_update=lambda _old, _new: c.on_change(),
           on_delete=lambda _o: c.on_change())
    return Started(run=run_workers(q, c.reconcile, workers=1, name="clusterrole-aggregation"), controller=c)


_CLUSTERROLES = InformerNeed(kind=CLUSTERROLES)
CONTROLLER = ControllerSpec(name="clusterrole-aggregation", informers=(_CLUSTERROLES,), start=_start)

"""PodGC: terminated pods over a threshold, orphans of deleted nodes, out-of-service nodes.

Every `gc_check_period` (20 s) `gc_once` runs upstream's passes:

* **gcTerminated**: when more than `--terminated-pod-gc-threshold` (12,500) pods are Failed or
  Succeeded, the oldest surplus is deleted.
* **gcTerminating** (KEP-2268, non-graceful node shutdown, off with `no-out-of-service-gc`):
  pods being deleted on a node that is not Ready *and* tainted
  `node.kubernetes.io/out-of-service` get phase Failed and are force-deleted (grace 0). This
  is how an operator frees the pods stuck Terminating on a powered-off node (§2.3).
* **gcOrphaned**: pods bound to a node missing from the cache are quarantined: only when the
  node has been missing for `quarantine_time` (40 s, `--podgc-orphan-quarantine`) *and* a GET
  confirms it is gone (the cache may lag) are they marked Failed (DisruptionTarget/
  DeletionByPodGC) and force-deleted. Before v1.17 there was no quarantine (the 1.7-1.15
  profiles set 0): the first pass that finds the node missing deletes its pods.
* **gcUnscheduledTerminating**: pods being deleted that were never scheduled are force-deleted.

`plan` is the pure decision over the caches and the quarantine memory; `PodGC` does the writes.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import Any

import structlog

from kubemesh.controller_manager.controllers import ControllerContext, ControllerSpec, InformerNeed, Started
from kubemesh.controller_manager.objects import (
    Api,
    Store,
    condition_status,
    creation_time,
    has_taint,
    is_terminal,
    is_terminating,
    node_name_of,
    now_str,
)
from kubemesh.controller_manager.settings import PodGCSettings
from kubemesh.services.machinery.client import NotFoundError
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.model.kinds import NODES, PODS, Obj, key_of, meta, name_of, namespace_of
from kubemesh.services.model.wellknown import ANNOTATION_MIRROR, TAINT_OUT_OF_SERVICE

_log = structlog.get_logger("controller_manager.podgc")


@dataclass(slots=True)
class Plan:
    """What one PodGC pass will do."""

    terminated: list[Obj] = field(default_factory=list)
    out_of_service: list[Obj] = field(default_factory=list)
    unscheduled_terminating: list[Obj] = field(default_factory=list)
    nodes_to_check: list[str] = field(default_factory=list)
    """Nodes missing for the whole quarantine: confirm with a GET, then delete their pods."""


def plan(pods: list[Obj], nodes: Store, *, now: float, missing_since: dict[str, float],
         settings: PodGCSettings, out_of_service_gc: bool) -> Plan:
    """Decide one pass; updates `missing_since` (node name → first time seen missing)."""
    p = Plan()
    terminated = [pod for pod in pods if is_terminal(pod)]
    threshold = settings.terminated_pod_gc_threshold
    if threshold > 0 and len(terminated) > threshold:
        terminated.sort(key=lambda pod: (creation_time(pod), key_of(pod)))
        p.terminated = terminated[: len(terminated) - threshold]
    missing_now: set[str] = set()
    for pod in pods:
        node_name = node_name_of(pod)
        if not node_name:
            if is_terminating(pod):
                p.unscheduled_terminating.append(pod)
            continue
        node = nodes.get(node_name)
        if node is None:
            # The control plane's mirror pods name a host that has no Node object in kubemesh
            # (kubemesh.apiserver.controlplane); upstream their node always exists.
            if ANNOTATION_MIRROR not in (meta(pod).get("annotations") or {}):
                missing_now.add(node_name)
            continue
        if (out_of_service_gc and is_terminating(pod) and condition_status(node, "Ready") != "True"
                and has_taint(node, TAINT_OUT_OF_SERVICE)):
            p.out_of_service.append(pod)
    for name in list(missing_since):
        if name not in missing_now:
            del missing_since[name]  # the node came back (or its pods went away)
    for name in sorted(missing_now):
        first = missing_since.setdefault(name, now)
        if now - first >= settings.quarantine_time:
            p.nodes_to_check.append(name)
    return p


class PodGC:
    """Runs the passes and performs the writes."""

    def __init__(self, *, api: Api, pods: Store, nodes: Store, clock: Clock, settings: PodGCSettings,
                 out_of_service_gc: bool = True) -> None:
        self.api = api
        self.pods = pods
        self.nodes = nodes
        self.clock = clock
        self.settings = settings
        self.out_of_service_gc = out_of_service_gc
        self.missing_since: dict[str, float] = {}
        self.force_deleted: list[str] = []
        self.force_delete_errors = 0
        self.passes = 0
        self.last_pass: float | None = None

    async def gc_once(self) -> Plan:
        """One pass of every PodGC check."""
        pods = self.pods.list()
        now = self.clock.now()
        p = plan(pods, self.nodes, now=now, missing_since=self.missing_since,
                 settings=self.settings, out_of_service_gc=self.out_of_service_gc)
        self.passes += 1
        self.last_pass = now
        for pod in p.terminated:
            await self._force_delete(pod, mark_failed=False)
        for pod in p.out_of_service:
            await self._force_delete(pod, mark_failed=True, reason="DeletionByPodGC",
                                     message="PodGC: node is out of service")
        for node_name in p.nodes_to_check:
            try:
                await self.api.get(NODES, node_name)
            except NotFoundError:
                pass
            else:
                self.missing_since.pop(node_name, None)  # the cache lagged: the node exists
                continue
            for pod in pods:
                if node_name_of(pod) == node_name and not is_terminal(pod):
                    await self._force_delete(pod, mark_failed=True, reason="DeletionByPodGC",
                                             message="PodGC: node no longer exists")
            self.missing_since.pop(node_name, None)
        for pod in p.unscheduled_terminating:
            await self._force_delete(pod, mark_failed=False)
        return p

    async def _force_delete(self, pod: Obj, *, mark_failed: bool, reason: str = "", message: str = "") -> None:
        if mark_failed and (pod.get("status") or {}).get("phase") != "Failed":
            body = copy.deepcopy(pod)
            st = body.setdefault("status", {})
            st["phase"] = "Failed"
            conds: list[dict[str, Any]] = st.setdefault("conditions", [])
            if not any(c.get("type") == "DisruptionTarget" for c in conds):
                conds.append({"type": "DisruptionTarget", "status": "True", "reason": reason, "message": message,
                              "lastTransitionTime": now_str(self.clock.now())})
            try:
                await self.api.update(PODS, body, subresource="status")
            except NotFoundError:
                return
            except Exception as exc:
                _log.warning("could not mark pod failed", pod=key_of(pod), error=repr(exc))
        try:
            await self.api.delete(PODS, name_of(pod), namespace=namespace_of(pod), grace_period_seconds=0)
        except NotFoundError:
            return
        except Exception as exc:
            self.force_delete_errors += 1
            _log.warning("force delete failed", pod=key_of(pod), error=repr(exc))
            return
        self.force_deleted.append(key_of(pod))
        _log.info("PodGC force-deleted pod", pod=key_of(pod), node=node_name_of(pod), reason=reason or "terminated")

    async def run(self) -> None:
        """Run every gc_check_period until cancelled."""
        while True:
            try:
                await self.gc_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                _log.error("PodGC pass failed", error=repr(exc))
            await self.clock.sleep(self.settings.gc_check_period)

    def snapshot(self) -> dict[str, Any]:
        """Quarantined nodes and counters, for the debug endpoint."""
        return {"quarantine": dict(sorted(self.missing_since.items())), "forceDeleted": len(self.force_deleted),
                "forceDeleteErrors": self.force_delete_errors, "outOfServiceGC": self.out_of_service_gc,
                "passes": self.passes, "lastPass": self.last_pass,
                "quarantineSeconds": self.settings.quarantine_time}


def _start(ctx: ControllerContext) -> Started:
    c = PodGC(api=ctx.api, pods=ctx.informer(_PODS), nodes=ctx.informer(_NODES), clock=ctx.clock,
              settings=ctx.settings.podgc, out_of_service_gc="no-out-of-service-gc" not in ctx.bugs)
    return Started(run=c.run(), controller=c, snapshot=c.snapshot)


_PODS = InformerNeed(kind=PODS)
_NODES = InformerNeed(kind=NODES)
CONTROLLER = ControllerSpec(name="podgc", informers=(_PODS, _NODES), start=_start, debug_key="podGC")

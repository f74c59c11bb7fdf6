"""The DaemonSet controller: one pod per eligible node.

A node is eligible when it matches the template's `nodeSelector` and every NoSchedule and
NoExecute taint is tolerated by the template's tolerations plus the ones every DaemonSet pod
gets (upstream `AddOrUpdateDaemonPodTolerations`: not-ready and unreachable NoExecute without
tolerationSeconds, so DaemonSet pods are never evicted by node failure; disk-, memory- and
pid-pressure and unschedulable NoSchedule). Pods are created already bound to their node
(`spec.nodeName`, the pre-1.12 behaviour, robust without a scheduler) and also carry the
`metadata.name` node affinity that upstream sets for the scheduler. A node that is not eligible
only because of a NoSchedule taint keeps the daemon pod it runs (upstream
`NodeShouldRunDaemonPod`'s shouldContinueRunning: only an untolerated NoExecute taint, a
selector mismatch or a gone node removes it), so a NotReady node's `unreachable:NoSchedule`
taint does not delete its daemon pod. Surplus pods (second pod on a node, pod on a node where it
may not continue, Failed pod) are deleted. Expectations as ReplicaSet.
Status: desiredNumberScheduled, currentNumberScheduled, numberMisscheduled, numberReady,
numberAvailable, updatedNumberScheduled, observedGeneration. Template updates use OnDelete
semantics (no rolling replacement yet).
"""

from __future__ import annotations

import contextlib
import copy
import random
from collections.abc import Callable
from typing import Any

import structlog

from kubemesh.controller_manager.controllers import ControllerContext, ControllerSpec, InformerNeed, Started
from kubemesh.controller_manager.expectations import Expectations
from kubemesh.controller_manager.objects import (
    NO_EXECUTE,
    NO_SCHEDULE,
    Api,
    IndexedStore,
    Store,
    controller_ref,
    creation_time,
    index_by_namespace,
    is_active,
    is_ready,
    node_name_of,
    phase,
)
from kubemesh.controller_manager.replicaset import pod_from_template, random_suffix, selector_of
from kubemesh.services.machinery.client import NotFoundError
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.machinery.eventing import ComponentRecorder
from kubemesh.services.machinery.informing import final_state
from kubemesh.services.machinery.queueing import Result, run_workers
from kubemesh.services.model.kinds import (
    DAEMONSETS,
    NODES,
    PODS,
    Obj,
    key_of,
    labels_of,
    meta,
    name_of,
    namespace_of,
    uid_of,
)
from kubemesh.services.model.podutil import taints_of, tolerates_all
from kubemesh.services.model.wellknown import (
    TAINT_DISK_PRESSURE,
    TAINT_MEMORY_PRESSURE,
    TAINT_NOT_READY,
    TAINT_PID_PRESSURE,
    TAINT_UNREACHABLE,
    TAINT_UNSCHEDULABLE,
)

_log = structlog.get_logger("controller_manager.daemonset")

DAEMON_TOLERATIONS: list[dict[str, Any]] = [
    {"key": TAINT_NOT_READY, "operator": "Exists", "effect": NO_EXECUTE},
    {"key": TAINT_UNREACHABLE, "operator": "Exists", "effect": NO_EXECUTE},
    {"key": TAINT_DISK_PRESSURE, "operator": "Exists", "effect": NO_SCHEDULE},
    {"key": TAINT_MEMORY_PRESSURE, "operator": "Exists", "effect": NO_SCHEDULE},
    {"key": TAINT_PID_PRESSURE, "operator": "Exists", "effect": NO_SCHEDULE},
    {"key": TAINT_UNSCHEDULABLE, "operator": "Exists", "effect": NO_SCHEDULE},
]


NoExecuteKeys = tuple[str, str]
CURRENT_KEYS: NoExecuteKeys = (TAINT_NOT_READY, TAINT_UNREACHABLE)
"""The not-ready and unreachable NoExecute taint keys (a version profile's: alpha before 1.9)."""


def daemon_tolerations(ds: Obj, keys: NoExecuteKeys = CURRENT_KEYS) -> list[dict[str, Any]]:
    """The template's tolerations plus the DaemonSet defaults (the release's NoExecute keys)."""
    tmpl_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    tols = list(tmpl_spec.get("tolerations") or [])
    defaults = [{"key": k, "operator": "Exists", "effect": NO_EXECUTE} for k in keys] + [
        t for t in DAEMON_TOLERATIONS if t["effect"] == NO_SCHEDULE]
    for t in defaults:
        if not any(x.get("key") == t["key"] and x.get("effect") == t["effect"] for x in tols):
            tols.append(t)
    return tols


def node_should_run(ds: Obj, node: Obj, keys: NoExecuteKeys = CURRENT_KEYS) -> bool:
    """Whether a daemon pod belongs on this node (nodeSelector and taints)."""
    tmpl_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    sel = tmpl_spec.get("nodeSelector") or {}
    if any(labels_of(node).get(k) != v for k, v in sel.items()):
        return False
    taints = [t for t in taints_of(node) if t.get("effect") in (NO_SCHEDULE, NO_EXECUTE)]
    return tolerates_all(daemon_tolerations(ds, keys), taints)


def node_should_continue_running(ds: Obj, node: Obj, keys: NoExecuteKeys = CURRENT_KEYS) -> bool:
    """Whether a daemon pod already on this node stays there.

    It does while the selector matches and every NoExecute taint is tolerated: an untolerated
    NoSchedule taint only keeps new daemon pods off.
    """
    tmpl_spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    sel = tmpl_spec.get("nodeSelector") or {}
    if any(labels_of(node).get(k) != v for k, v in sel.items()):
        return False
    return tolerates_all(daemon_tolerations(ds, keys),
                         [t for t in taints_of(node) if t.get("effect") == NO_EXECUTE])


def plan(ds: Obj, nodes: list[Obj], pods: list[Obj],
         keys: NoExecuteKeys = CURRENT_KEYS) -> tuple[list[str], list[Obj]]:
    """(node names needing a pod, pods to delete) for one DaemonSet."""
    by_node: dict[str, list[Obj]] = {}
    for p in pods:
        by_node.setdefault(node_name_of(p), []).append(p)
    create: list[str] = []
    delete: list[Obj] = []
    for node in nodes:
        name = name_of(node)
        mine = [p for p in by_node.pop(name, []) if not meta(p).get("deletionTimestamp")]
        failed = [p for p in mine if phase(p) == "Failed"]
        delete += failed
        alive = [p for p in mine if phase(p) != "Failed"]
        if node_should_run(ds, node, keys):
            if not alive and not failed:
                create.append(name)
            alive.sort(key=lambda p: (creation_time(p), name_of(p)))
            delete += alive[1:]
        elif node_should_continue_running(ds, node, keys):
            alive.sort(key=lambda p: (creation_time(p), name_of(p)))
            delete += alive[1:]
        else:
            delete += alive
    for rest in by_node.values():  # pods on nodes that no longer exist (PodGC's job) or unbound
        delete += [p for p in rest if not meta(p).get("deletionTimestamp") and node_name_of(p) == ""]
    return sorted(create), delete


class DaemonSetController:
    """Level-based DaemonSet reconciler."""

    def __init__(self, *, api: Api, daemonsets: Store, nodes: Store, pods: IndexedStore, clock: Clock,
                 rng: random.Random, recorder: ComponentRecorder, expectations_ttl: float = 300.0,
                 keys: NoExecuteKeys = CURRENT_KEYS) -> None:
        self.api = api
        self.keys = keys
        """The NoExecute keys daemon pods tolerate (the node-lifecycle controller's, by release)."""
        self.daemonsets = daemonsets
        self.nodes = nodes
        self.pods = pods
        self.clock = clock
        self.rng = rng
        self.recorder = recorder
        self.expectations = Expectations(clock=clock, ttl=expectations_ttl)
        self.enqueue: Callable[[str], None] = lambda key: None

    def owner_key(self, pod: Obj) -> str | None:
        """The DaemonSet controlling `pod`, if any."""
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") != "DaemonSet":
            return None
        return f"{namespace_of(pod)}/{ref.get('name')}"

    def on_pod_add(self, pod: Obj, _initial: bool = False) -> None:
        """Lower the creation expectation."""
        key = self.owner_key(pod)
        if key is not None:
            self.expectations.creation_observed(key)
            self.enqueue(key)

    def on_pod_update(self, old: Obj, new: Obj) -> None:
        """Any change of a daemon pod resyncs its DaemonSet."""
        if meta(new).get("deletionTimestamp") and not meta(old).get("deletionTimestamp"):
            self.on_pod_delete(new)
            return
        key = self.owner_key(new)
        if key is not None:
            self.enqueue(key)

    def on_pod_delete(self, pod: Obj) -> None:
        """Lower the deletion expectation."""
        key = self.owner_key(pod)
        if key is not None:
            self.expectations.deletion_observed(key, key_of(pod))
            self.enqueue(key)

    def on_node(self, _node: Obj) -> None:
        """A node changed: every DaemonSet may gain or lose a pod."""
        for ds in self.daemonsets.list():
            self.enqueue(key_of(ds))

    async def reconcile(self, key: str) -> Result | None:
        """Sync one DaemonSet."""
        ds = self.daemonsets.get(key)
        if ds is None:
            self.expectations.delete(key)
            return None
        selector = selector_of(ds)
        pods = [p for p in self.pods.by_index("namespace", namespace_of(ds))
                if (ref := controller_ref(p)) is not None and ref.get("uid") == uid_of(ds)
                and selector.matches(labels_of(p))]
        nodes = self.nodes.list()
        if self.expectations.satisfied(key) and not meta(ds).get("deletionTimestamp"):
            create, delete = plan(ds, nodes, pods, self.keys)
            await self._apply(ds, create, delete)
        await self._status(ds, nodes, pods)
        return None

    async def _apply(self, ds: Obj, create: list[str], delete: list[Obj]) -> None:
        key = key_of(ds)
        if create:
            self.expectations.expect_creations(key, len(create))
            for node_name in create:
                pod = pod_from_template(ds, api_version="apps/v1", kind="DaemonSet",
                                        name=f"{name_of(ds)}-{random_suffix(self.rng)}")
                spec = pod["spec"]
                spec["nodeName"] = node_name
                spec["tolerations"] = daemon_tolerations(ds, self.keys)
                spec.setdefault("affinity", {})["nodeAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                            "values": [node_name]}]}]}}
                try:
                    await self.api.create(PODS, pod, namespace=namespace_of(ds))
                except Exception as exc:
                    self.expectations.creation_observed(key)
                    self.recorder.warning(ds, "FailedCreate", f"Error creating: {exc}")
                    continue
                self.recorder.normal(ds, "SuccessfulCreate", f"Created pod: {name_of(pod)}")
        elif delete:
            self.expectations.expect_deletions(key, [key_of(p) for p in delete])
            for pod in delete:
                try:
                    await self.api.delete(PODS, name_of(pod), namespace=namespace_of(pod))
                except NotFoundError:
                    self.expectations.deletion_observed(key, key_of(pod))
                    continue
                self.recorder.normal(ds, "SuccessfulDelete", f"Deleted pod: {name_of(pod)}")

    async def _status(self, ds: Obj, nodes: list[Obj], pods: list[Obj]) -> None:
        eligible = {name_of(n) for n in nodes if node_should_run(ds, n, self.keys)}
        active = [p for p in pods if is_active(p)]
        scheduled = {node_name_of(p) for p in active}
        st = copy.deepcopy(ds.get("status") or {})
        st.update(desiredNumberScheduled=len(eligible), currentNumberScheduled=len(scheduled & eligible),
                  numberMisscheduled=len(scheduled - eligible),
                  numberReady=len({node_name_of(p) for p in active if is_ready(p)} & eligible),
                  numberAvailable=len({node_name_of(p) for p in active if is_ready(p)} & eligible),
                  updatedNumberScheduled=len(scheduled & eligible),
                  observedGeneration=meta(ds).get("generation", 1))
        st["numberUnavailable"] = max(0, st["desiredNumberScheduled"] - st["numberAvailable"])
        if st == (ds.get("status") or {}):
            return
        body = copy.deepcopy(ds)
        body["status"] = st
        with contextlib.suppress(NotFoundError):
            await self.api.update(DAEMONSETS, body, subresource="status")


def _node_changed(old: Obj, new: Obj) -> bool:
    return bool(old.get("spec") != new.get("spec") or labels_of(old) != labels_of(new))


def _start(ctx: ControllerContext) -> Started:
    w = ctx.settings.workloads
    c = DaemonSetController(api=ctx.api, daemonsets=ctx.informer(_DAEMONSETS), nodes=ctx.informer(_NODES),
                            pods=ctx.informer(_PODS), clock=ctx.clock, rng=ctx.rng,
                            recorder=ctx.recorder.for_component("daemonset-controller"),
                            expectations_ttl=w.expectations_ttl,
                            keys=(ctx.settings.node_lifecycle.not_ready_taint_key,
                                  ctx.settings.node_lifecycle.unreachable_taint_key))
    q = ctx.queue("daemonset")
    c.enqueue = q.add
    ctx.on(DAEMONSETS, on_add=lambda o, _i: q.add(key_of(o)), on_update=lambda _old, new: q.add(key_of(new)),
           on_delete=lambda o: q.add(key_of(final_state(o))))
    ctx.on(PODS, on_add=c.on_pod_add, on_update=c.on_pod_update, on_delete=lambda o: c.on_pod_delete(final_state(o)))
    ctx.on(NODES, on_add=lambda o, _i: c.on_node(o),
           on_update=lambda old, new: c.on_node(new) if _node_changed(old, new) else None,
           on_delete=lambda o: c.on_node(final_state(o)))
    return Started(run=run_workers(q, c.reconcile, workers=w.daemonset_workers, name="daemonset"), controller=c)


_DAEMONSETS = InformerNeed(kind=DAEMONSETS, indexers={"namespace": index_by_namespace})
_NODES = InformerNeed(kind=NODES)
_PODS = InformerNeed(kind=PODS, indexers={"namespace": index_by_namespace})
CONTROLLER = ControllerSpec(name="daemonset", informers=(_DAEMONSETS, _NODES, _PODS), start=_start)

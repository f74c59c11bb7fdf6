"""Builders for nodes and pods, and a fake apiserver for the scheduler's unit tests."""

from __future__ import annotations

import itertools
import random
from typing import Any

from kubemesh.scheduler.podinfo import PodInfo
from kubemesh.scheduler.scheduling import Scheduler
from kubemesh.scheduler.settings import SchedulerSettings
from kubemesh.services.machinery.clock import ManualClock
from kubemesh.services.model.kinds import Obj

_rv = itertools.count(1)


def node(name: str, *, cpu: str = "4", memory: str = "8Gi", pods: int = 110, zone: str | None = None,
         labels: dict[str, str] | None = None, taints: list[Obj] | None = None,
         conditions: dict[str, str] | None = None, unschedulable: bool = False) -> Obj:
    lbl = {"kubernetes.io/hostname": name, **(labels or {})}
    if zone is not None:
        lbl["topology.kubernetes.io/zone"] = zone
    conds = {"Ready": "True", **(conditions or {})}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": lbl, "resourceVersion": str(next(_rv)), "uid": f"uid-{name}"},
        "spec": {"unschedulable": unschedulable, "taints": taints or []},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": str(pods)},
                   "capacity": {"cpu": cpu, "memory": memory, "pods": str(pods)},
                   "conditions": [{"type": t, "status": s} for t, s in conds.items()]},
    }


def term(labels: dict[str, str], topology: str = "kubernetes.io/hostname") -> Obj:
    return {"labelSelector": {"matchLabels": labels}, "topologyKey": topology}


def pod(name: str, *, ns: str = "default", cpu: str | None = None, memory: str | None = None,
        priority: int | None = None, labels: dict[str, str] | None = None, node_name: str | None = None,
        anti: list[Obj] | None = None, affinity: list[Obj] | None = None,
        preferred_anti: list[tuple[int, Obj]] | None = None, preferred: list[tuple[int, Obj]] | None = None,
        tolerations: list[Obj] | None = None, node_selector: dict[str, str] | None = None,
        nominated: str | None = None, policy: str | None = None, terminating: bool = False,
        rv: int | None = None, phase: str = "Pending") -> Obj:
    requests: dict[str, str] = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    spec: Obj = {"containers": [{"name": "c", "image": "x", "resources": {"requests": requests} if requests else {}}],
                 "schedulerName": "default-scheduler"}
    if priority is not None:
        spec["priority"] = priority
    if node_name:
        spec["nodeName"] = node_name
    if policy:
        spec["preemptionPolicy"] = policy
    aff: Obj = {}
    if anti or preferred_anti:
        aff["podAntiAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": anti or [],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": w, "podAffinityTerm": t} for w, t in preferred_anti or []],
        }
    if affinity or preferred:
        aff["podAffinity"] = {
            "requiredDuringSchedulingIgnoredDuringExecution": affinity or [],
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": w, "podAffinityTerm": t} for w, t in preferred or []],
        }
    if aff:
        spec["affinity"] = aff
    if tolerations:
        spec["tolerations"] = tolerations
    if node_selector:
        spec["nodeSelector"] = node_selector
    meta: Obj = {"name": name, "namespace": ns, "uid": f"uid-{ns}-{name}", "labels": labels or {},
                 "resourceVersion": str(rv if rv is not None else next(_rv)),
                 "creationTimestamp": "2026-01-01T00:00:00Z"}
    if terminating:
        meta["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    status: Obj = {"phase": phase}
    if nominated:
        status["nominatedNodeName"] = nominated
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": status}


def info(obj: Obj) -> PodInfo:
    return PodInfo(obj)


def with_status(obj: Obj, **status: Any) -> Obj:
    """A new version of the pod with status fields changed and a new resourceVersion."""
    new = {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(next(_rv))},
           "status": {**obj.get("status", {}), **status}}
    return new


def bound(obj: Obj, node_name: str) -> Obj:
    """The pod as the watch shows it after its binding."""
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(next(_rv))},
            "spec": {**obj["spec"], "nodeName": node_name}}


class FakeApi:
    """Records what the scheduler asks of the apiserver; echoes nothing back by itself."""

    def __init__(self) -> None:
        self.binds: list[tuple[str, str]] = []
        self.patches: list[tuple[str, Obj]] = []
        self.deleted: list[str] = []
        self.events: list[tuple[str, str, str]] = []
        self.nodes: dict[str, Obj] = {}
        self.node_gets: list[str] = []
        self.bind_error: Exception | None = None
        self.bind_errors_by_node: dict[str, Exception] = {}
        self.patch_error: Exception | None = None

    async def bind(self, pod: PodInfo, node: str) -> None:
        if self.bind_error is not None:
            raise self.bind_error
        if node in self.bind_errors_by_node:
            raise self.bind_errors_by_node[node]
        self.binds.append((pod.key, node))

    async def patch_pod_status(self, pod: PodInfo, patch: Obj) -> None:
        if self.patch_error is not None:
            raise self.patch_error
        self.patches.append((pod.key, patch))

    async def delete_pod(self, pod: PodInfo) -> None:
        self.deleted.append(pod.key)

    async def get_node(self, name: str) -> Obj | None:
        self.node_gets.append(name)
        return self.nodes.get(name)

    def record_event(self, pod: Obj, *, type: str, reason: str, message: str) -> None:
        self.events.append((f"{pod['metadata']['namespace']}/{pod['metadata']['name']}", reason, message))

    def reasons(self, key: str) -> list[str]:
        return [r for k, r, _ in self.events if k == key]

    def messages(self, key: str, reason: str) -> list[str]:
        return [m for k, r, m in self.events if k == key and r == reason]


def make_scheduler(*, bugs: frozenset[str] = frozenset(), settings: SchedulerSettings | None = None,
                   clock: ManualClock | None = None) -> tuple[Scheduler, FakeApi, ManualClock]:

    api = FakeApi()
    clk = clock or ManualClock()
    sched = Scheduler(api=api, clock=clk, rng=random.Random(7), settings=settings, bugs=bugs)
    return sched, api, clk


async def run_until_empty(sched: Scheduler, limit: int = 100) -> int:
    """Run cycles while activeQ has pods; wait for binding tasks; returns the number of cycles."""
    n = 0
    while n < limit:
        qpi = sched.queue.pop_nowait()
        if qpi is None:
            break
        await sched.schedule_popped(qpi)
        await sched.wait_idle()
        n += 1
    return n

"""Builders of the objects scenarios create (plain dicts, as on the wire)."""

from __future__ import annotations

from typing import Any, ClassVar

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import MeshShape, Scenario, ScenarioContext, ScenarioError
from kubemesh.services.model.kinds import PODS, PRIORITYCLASSES, Obj
from kubemesh.services.model.wellknown import LABEL_HOSTNAME

HOSTNAME = LABEL_HOSTNAME


def pod(name: str, *, labels: dict[str, str] | None = None, node_selector: dict[str, str] | None = None,
        node_name: str | None = None, cpu: str | None = None, memory: str | None = None,
        limits: dict[str, str] | None = None, anti_affinity: dict[str, str] | None = None,
        priority_class: str | None = None, preemption_policy: str | None = None,
        tolerations: list[dict[str, Any]] | None = None, grace: int | None = None,
        namespace: str = "default") -> Obj:
    """A one-container pod; `anti_affinity` is a required podAntiAffinity term per hostname."""
    requests: dict[str, str] = {}
    if cpu:
        requests["cpu"] = cpu
    if memory:
        requests["memory"] = memory
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.9"}
    if requests or limits:
        container["resources"] = {k: v for k, v in (("requests", requests), ("limits", limits)) if v}
    spec: dict[str, Any] = {"containers": [container]}
    if node_selector:
        spec["nodeSelector"] = node_selector
    if node_name:
        spec["nodeName"] = node_name
    if anti_affinity:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": dict(anti_affinity)}, "topologyKey": HOSTNAME}]}}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if preemption_policy:
        spec["preemptionPolicy"] = preemption_policy
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels or {})}, "spec": spec}


def deployment(name: str, *, replicas: int = 1, strategy: str = "RollingUpdate", labels: dict[str, str] | None = None,
               env: dict[str, str] | None = None, node_selector: dict[str, str] | None = None,
               namespace: str = "default") -> Obj:
    """A Deployment of one pause container."""
    lbl = dict(labels or {"app": name})
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.9"}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    tmpl_spec: dict[str, Any] = {"containers": [container]}
    if node_selector:
        tmpl_spec["nodeSelector"] = node_selector
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": lbl},
            "spec": {"replicas": replicas, "selector": {"matchLabels": lbl}, "strategy": {"type": strategy},
                     "template": {"metadata": {"labels": lbl}, "spec": tmpl_spec}}}


def priority_class(name: str, value: int) -> Obj:
    """A PriorityClass."""
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name},
            "value": value}


class PreemptionRace(Scenario):
    """What the nomination races share: one 4-cpu node, a slow retry, chaos on the scheduler's watch.

    The stage is `preemption_victims`; the scheduler's backoff is long enough (20 s, 40 s at
    most) that a pod retried by backoff cannot pass for one moved by an event.
    """

    needs_chaos: ClassVar[bool] = True
    shape: ClassVar[MeshShape] = MeshShape(
        nodes=1, clock_rate=60.0, capacity="cpu=4,memory=16Gi,pods=110",
        extra_args={"scheduler": ["--pod-initial-backoff-seconds", "20", "--pod-max-backoff-seconds", "40"]})
    deadline: ClassVar[float] = 300.0
    observe: ClassVar[float] = 60.0
    """Cluster seconds the outcome is watched for once the race was set up."""


async def preemption_victims(ctx: ScenarioContext) -> None:
    """Set the preemption races' stage: two low-priority victims Running on node-1.

    Priority classes high (1000) and low (0); v1 and v2 of 1500m each on the single 4-cpu
    node, so that a 3-cpu high-priority preemptor `p` must evict both and a 2-cpu `s` fits
    only in the freed room.
    """
    await ctx.client.create(PRIORITYCLASSES, priority_class("high", 1000))
    await ctx.client.create(PRIORITYCLASSES, priority_class("low", 0))
    for v in ("v1", "v2"):
        await ctx.client.create(PODS, pod(v, cpu="1500m", priority_class="low"), namespace="default")
    ctx.focus("pods", "default/v1", "default/v2", "default/p", "default/s")

    async def victims_running() -> bool:
        pods = [await ctx.pod(v) for v in ("v1", "v2")]
        return all(oracles.is_running(p) for p in pods)

    if not await ctx.until(victims_running, within=60):
        raise ScenarioError("the victims never ran")
    ctx.say("v1 and v2 (low priority, 1500m each) Running on node-1")

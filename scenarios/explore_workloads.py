"""The workloads `kubemesh explore` runs: small, deterministic programs that create objects and wait.

A workload is `async def workload(ctx)` over a `ScenarioContext` (in practice an
`explore.ExploreContext`, which adds `ctx.kubeconfig`). It creates its objects, waits for the
cluster to converge with deadlines in cluster time (`ctx.until(..., within=...)`), and raises
`Stuck` with the reason in words when something did not happen in time: that is the liveness
oracle of an explored run. It injects no faults: explore does.

Built-in workloads (`WORKLOADS`, listed by `kubemesh explore workloads`) name the component they
are meant for (`Workload.target`) and the mesh they need. A user's workload is a `module:function`
or a file defining `workload(ctx)`; it runs on `DEFAULT_SHAPE`.

Names are fixed and placements pinned where the workload's point needs one (the node deleted
is chosen by nodeSelector, not by the scheduler's scores), so that the reference runs agree and
a plan naming an object finds the same object in every run.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kubemesh.scenarios import oracles
from kubemesh.scenarios.framework import MeshShape, ScenarioContext, ScenarioError
from kubemesh.scenarios.workloads import HOSTNAME, deployment, pod
from kubemesh.services.model.kinds import DEPLOYMENTS, NODES, PODS

WorkloadFn = Callable[[ScenarioContext], Awaitable[None]]


DEFAULT_SHAPE: Final = MeshShape(nodes=3, clock_rate=20.0)
"""The mesh of a user's workload (and of the built-in ones): 3 nodes, 20 cluster seconds per wall second."""


class Stuck(ScenarioError):
    """The workload did not converge within its deadline (cluster time): the liveness oracle failed."""


@dataclass(frozen=True, kw_only=True)
class Workload:
    """A workload and what it needs."""

    name: str
    summary: str
    run: WorkloadFn
    target: str | None = None
    """The component it is meant to explore (None: any; `--target` must say)."""
    shape: MeshShape = DEFAULT_SHAPE
    deadline: float = 240.0
    """Cluster seconds after which the run is abandoned (the workload's own waits are shorter)."""


async def _wait(ctx: ScenarioContext, what: str, probe: Callable[[], Awaitable[Any]], *, within: float) -> Any:
    value = await ctx.until(probe, within=within)
    if not value:
        raise Stuck(f"{what} did not happen within {within:.0f} s of cluster time")
    ctx.say(f"{what} (t={ctx.elapsed():.1f}s)")
    return value


async def node_drain(ctx: ScenarioContext) -> None:
    """Drain and delete node-2 under anti-affinity pods, then schedule one more (the ghost-node workload).

    web-1 (pinned to node-2) and web-2 (pinned to node-3) require anti-affinity to app=web. web-1
    is deleted (grace 0), then its node; the probe web-3 (same anti-affinity, unpinned) has one
    node it may go to, node-1, and must be bound there within `BIND_WITHIN` cluster seconds.
    A scheduler that saw the node's DELETE before web-1's keeps a ghost of node-2 holding web-1;
    the 1.8 affinity code (`ghost-node-affinity-error`) then fails every attempt on the probe.
    """
    for name, node in (("web-1", "node-2"), ("web-2", "node-3")):
        await ctx.client.create(PODS, pod(name, labels={"app": "web"}, anti_affinity={"app": "web"},
                                          node_selector={HOSTNAME: node}), namespace="default")
    ctx.focus("pods", "default/web-1", "default/web-2", "default/web-3")
    ctx.focus("nodes", "node-2")

    async def running() -> bool:
        pods = [await ctx.pod(n) for n in ("web-1", "web-2")]
        return all(oracles.is_running(p) for p in pods)

    await _wait(ctx, "web-1 and web-2 Running", running, within=60)
    await ctx.client.delete(PODS, "web-1", namespace="default", grace_period_seconds=0)
    await _wait(ctx, "web-1 deleted", lambda: _gone(ctx, PODS, "web-1", "default"), within=30)
    await ctx.client.delete(NODES, "node-2")
    await _wait(ctx, "node-2 deleted", lambda: _gone(ctx, NODES, "node-2", None), within=30)
    await ctx.client.create(PODS, pod("web-3", labels={"app": "web"}, anti_affinity={"app": "web"}),
                            namespace="default")

    async def bound() -> str | None:
        return oracles.node_name(await ctx.pod("web-3")) or None

    where = await _wait(ctx, "web-3 bound", bound, within=BIND_WITHIN)
    if where != "node-1":
        raise Stuck(f"web-3 was bound to {where}, not node-1 (the only live node free of app=web)")


BIND_WITHIN: Final = 30.0
"""Cluster seconds the probe has to be bound in (the fault-free runs bind it in about one)."""


async def rollout(ctx: ScenarioContext) -> None:
    """A Deployment of 3 replicas rolled out, then rolled to a new template (the controller-manager workload)."""
    await ctx.client.create(DEPLOYMENTS, deployment("web", replicas=3), namespace="default")
    ctx.focus("deployments", "default/web")

    async def rolled(generation_env: str | None) -> bool:
        d = await ctx.get(DEPLOYMENTS, "web", namespace="default")
        if d is None:
            return False
        st = d.get("status") or {}
        gen = (d.get("metadata") or {}).get("generation")
        if st.get("observedGeneration") != gen or st.get("updatedReplicas") != 3 or st.get("replicas") != 3:
            return False
        pods = [p for p in await ctx.pods(label_selector="app=web") if not oracles.is_terminating(p)]
        if len(pods) != 3 or not all(oracles.is_running(p) for p in pods):
            return False
        envs = {str(((p["spec"]["containers"][0].get("env") or [{}])[0]).get("value")) for p in pods}
        return envs == {str(generation_env)}

    # Generous: a crash-restart of the controller-manager costs it tens of cluster seconds (its
    # start, its informers' lists, its leader lease), which is not a liveness failure.
    await _wait(ctx, "deployment web: 3 replicas Running", lambda: rolled(None), within=150)
    await ctx.client.patch(DEPLOYMENTS, "web", {"spec": {"template": {"spec": {"containers": [
        {"name": "main", "image": "registry.k8s.io/pause:3.9", "env": [{"name": "V", "value": "2"}]}]}}}},
        namespace="default")
    await _wait(ctx, "deployment web rolled out to V=2", lambda: rolled("2"), within=150)


async def _gone(ctx: ScenarioContext, kind: Any, name: str, namespace: str | None) -> bool:
    return await ctx.get(kind, name, namespace=namespace) is None


WORKLOADS: Final[dict[str, Workload]] = {w.name: w for w in (
    Workload(name="node-drain", summary="pods with anti-affinity; one deleted, then its node; one more scheduled",
             run=node_drain, target="scheduler"),
    Workload(name="rollout", summary="a Deployment of 3 replicas on 3 nodes, rolled to a new template",
             run=rollout, target="controller_manager", deadline=400.0),
)}
"""The built-in workloads by name."""

DEFAULT_FOR: Final[dict[str, str]] = {"scheduler": "node-drain", "controller_manager": "rollout"}
"""The workload a built-in target uses when none is given."""


def resolve(spec: str) -> Workload:
    """A workload by built-in name, `module:function`, or `FILE.py` (its `workload` function)."""
    if spec in WORKLOADS:
        return WORKLOADS[spec]
    if spec.endswith(".py"):
        path = Path(spec)
        if not path.is_file():
            raise ValueError(f"workload file {spec} does not exist")
        loader = importlib.util.spec_from_file_location(f"kubemesh_workload_{path.stem}", path)
        if loader is None or loader.loader is None:
            raise ValueError(f"cannot load {spec}")
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
        fn = getattr(module, "workload", None)
        name = path.stem
    elif ":" in spec:
        mod, _, attr = spec.partition(":")
        fn = getattr(importlib.import_module(mod), attr, None)
        name = spec
    else:
        raise ValueError(f"unknown workload {spec!r}: one of {', '.join(WORKLOADS)}, module:function or FILE.py")
    if not callable(fn):
        raise ValueError(f"workload {spec} defines no callable workload function")
    return Workload(name=name, summary=f"user workload {spec}", run=fn, shape=DEFAULT_SHAPE)

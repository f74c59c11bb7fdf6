"""A small real mesh for the batch and StatefulSet integration tests, with kubectl and cluster-clock waits.

Every deadline is in cluster seconds: `until` reads the apiserver's clock (`GET /clock`), and
`timeout` turns a budget in cluster seconds into the wall-clock `--timeout` kubectl wants,
through the clock rate. Nothing asserts on wall time.
"""

from __future__ import annotations

import asyncio
import json
import math
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest

from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.mesh.kubectl import Kubectl
from kubemesh.services.mesh.launching import Mesh, MeshSpec

T = TypeVar("T")


@dataclass
class MeshEnv:
    mesh: Mesh
    client: ApiClient
    kubectl: Kubectl
    rate: float

    async def now(self) -> float:
        """The cluster time, as the apiserver tells it."""
        return float((await self.client.get_clock())["now"])

    def timeout(self, cluster_seconds: float) -> str:
        """A kubectl `--timeout` lasting `cluster_seconds` of cluster time."""
        return f"{math.ceil(cluster_seconds / self.rate)}s"

    def wall(self, cluster_seconds: float) -> float:
        """Wall seconds for a process timeout covering `cluster_seconds` (plus process start-up)."""
        return cluster_seconds / self.rate + 30.0

    async def run(self, *args: str, within: float = 60.0, input: str | None = None) -> str:
        """kubectl `args`; its stdout (raises KubectlError on a non-zero exit)."""
        return await self.kubectl(*args, input=input, timeout=self.wall(within))

    async def json(self, *args: str) -> Any:
        return json.loads(await self.run(*args, "-o", "json"))

    async def until(self, check: Callable[[], Awaitable[T | None]], *, within: float, what: str) -> T:
        """Poll `check` until it returns something truthy; fail after `within` cluster seconds."""
        deadline = await self.now() + within
        while True:
            last = await check()
            if last:
                return last
            if await self.now() > deadline:
                raise AssertionError(f"not within {within:.0f} cluster s: {what}; last: {last!r}")
            await asyncio.sleep(max(0.05, min(0.5, 2.0 / self.rate)))


async def start_mesh(*, nodes: int = 2, rate: float = 10.0, seed: int = 7) -> AsyncIterator[MeshEnv]:
    """A mesh of every component with `nodes` nodes at `rate`; skips when kubectl is missing."""
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed")
    spec = MeshSpec(nodes=nodes, clock_rate=rate, seed=seed, start_timeout=120.0)
    async with Mesh(spec) as mesh, mesh.client() as client:
        env = MeshEnv(mesh=mesh, client=client, kubectl=Kubectl(mesh.kubeconfig_path), rate=rate)
        yield env
        assert not mesh.crashed(), f"components crashed: {mesh.crashed()}"

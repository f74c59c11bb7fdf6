"""The plugin's opt-in compose mode (`@pytest.mark.kubemesh(compose=True)` or `--kubemesh-compose`).

Skipped when Docker, compose v2 or the kubemesh image is missing (`scripts/docker-setup`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from kubemesh import Kubectl, KubemeshCluster
from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.model.kinds import PODS

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


async def eventually(probe: Callable[[], Awaitable[bool]], *, timeout: float) -> None:  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    while True:
        if await probe():
            return
        assert time.monotonic() < deadline, f"{probe.__name__} did not hold within {timeout} s"
        await asyncio.sleep(0.2)


@pytest.mark.kubemesh(nodes=2, clock_rate=60, compose=True)
async def test_plugin_fixtures_in_compose_mode(kubemesh_mesh: KubemeshCluster, kubemesh_client: ApiClient,
                                               kubemesh_kubectl: Kubectl) -> None:
    """The plugin's opt-in compose mode gives what the local mode gives (the README's example)."""
    assert kubemesh_mesh.mode == "compose"
    await kubemesh_kubectl("create", "deployment", "web", "--image=nginx", "--replicas=4")

    async def pods_on(node: str) -> list[dict[str, Any]]:
        pods = await kubemesh_client.list(PODS, namespace="default", field_selector=f"spec.nodeName={node}")
        items: list[dict[str, Any]] = pods["items"]
        return items

    async def running() -> bool:
        return any(p["status"].get("phase") == "Running" for p in await pods_on("node-1"))

    await eventually(running, timeout=60)
    victims = {p["metadata"]["name"] for p in await pods_on("node-1")}
    await kubemesh_mesh.power_off("node-1")
    async def terminating() -> bool:
        return all(p["metadata"].get("deletionTimestamp") for p in await pods_on("node-1")
                   if p["metadata"]["name"] in victims)

    await eventually(terminating, timeout=90)
    out = await kubemesh_kubectl("get", "pods", "--field-selector", "spec.nodeName=node-1", "--no-headers")
    assert {line.split()[0]: line.split()[2] for line in out.splitlines()} == dict.fromkeys(victims, "Terminating")

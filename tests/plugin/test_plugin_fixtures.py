from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from kubemesh import History, Kubectl, KubemeshCluster
from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.model.kinds import NODES


@pytest.mark.kubemesh(nodes=2, clock_rate=10)
async def test_fixtures_give_one_mesh(kubemesh_mesh: KubemeshCluster, kubemesh_client: ApiClient,
                                      kubemesh_history: History, kubemesh_kubectl: Kubectl) -> None:
    assert kubemesh_mesh.mode == "local"
    nodes = await kubemesh_client.list(NODES)
    assert sorted(n["metadata"]["name"] for n in nodes["items"]) == ["node-1", "node-2"]
    out = await kubemesh_kubectl("get", "nodes", "--no-headers")
    assert [line.split()[:2] for line in out.splitlines()] == [["node-1", "Ready"], ["node-2", "Ready"]]
    records = await kubemesh_history()
    assert records


@pytest.mark.kubemesh(nodes=1)
async def test_service_account_fixture_writes_a_kubeconfig_that_runs_as_it(
        kubemesh_service_account: Callable[..., Awaitable[Path]], kubemesh_kubectl: Kubectl) -> None:
    path = await kubemesh_service_account("ops", "my-operator")
    env = {**os.environ, "KUBECONFIG": str(path)}
    done = await asyncio.to_thread(subprocess.run, [kubemesh_kubectl.binary, "auth", "can-i", "list", "pods",
                                                    "-n", "ops"], env=env, capture_output=True, text=True,
                                   check=False)
    assert done.stdout.strip() == "no", done.stderr  # a fresh ServiceAccount holds no role
    out = await kubemesh_kubectl("auth", "can-i", "create", "serviceaccounts/token", "-n", "ops")
    assert out.strip() == "yes"  # the fixture's own kubectl is the admin

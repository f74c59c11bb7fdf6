from __future__ import annotations

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

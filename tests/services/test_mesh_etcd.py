"""`kubemesh up --store etcd [--apiservers N]`: a mesh over an etcd of its own, with several apiservers.

Real processes throughout: the mesh's own `/usr/bin/etcd` (installed by scripts/setup; without
it these tests skip, which fails under CI=true), the apiservers over it, kubelets, the
controller-manager and the scheduler, each pinned to one apiserver. Checked through each
apiserver's HTTP API: they serve one cluster (objects, clock, service-account tokens, the
component registry), and nothing is left running afterwards.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from kubemesh.services.mesh.endpoint import MeshEndpoint
from kubemesh.services.mesh.launching import ETCD, Mesh, MeshSpec, etcd_binary
from kubemesh.services.mesh.state import pid_alive
from kubemesh.services.model.kinds import CONFIGMAPS, DEPLOYMENTS, PODS

pytestmark = pytest.mark.slow


def _need_etcd() -> None:
    if etcd_binary() is None:
        pytest.skip("etcd is not installed (scripts/setup installs it)")


def test_spec_needs_etcd_for_several_apiservers() -> None:
    with pytest.raises(ValueError, match="several apiservers need a store they share"):
        MeshSpec(apiservers=2)
    with pytest.raises(ValueError, match="etcd_endpoints need store='etcd'"):
        MeshSpec(etcd_endpoints=("http://127.0.0.1:2379",))
    with pytest.raises(ValueError, match="store must be one of"):
        MeshSpec(store="sqlite")
    out = subprocess.run([sys.executable, "-m", "kubemesh", "up", "--apiservers", "2"],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2
    assert "several apiservers need a store they share" in out.stderr


async def _get(endpoint: MeshEndpoint, path: str, *, token: str | None = None) -> tuple[int, Any]:
    target = endpoint if token is None else dataclasses.replace(endpoint, token=token)
    async with target.session() as session, session.get(
            target.url + path, headers=target.headers(component="test")) as resp:
        return resp.status, await resp.json(content_type=None)


async def _until(check: Any) -> Any:
    """Poll `check()` (a coroutine function) until it returns something truthy (30 s at most)."""
    async with asyncio.timeout(30):
        while True:
            got = await check()
            if got:
                return got
            await asyncio.sleep(0.1)


async def test_three_apiservers_over_the_mesh_s_own_etcd_serve_one_cluster(tmp_path: Path) -> None:
    _need_etcd()
    spec = MeshSpec(nodes=4, kubelets=2, store="etcd", apiservers=3, state_dir=tmp_path / "mesh", clock_rate=10)
    mesh = Mesh(spec)
    assert any("objects stored in etcd: an etcd of the mesh's own" in c for c in mesh.choices())
    assert any("kubelet-1 -> apiserver-1" in c and "controller-manager -> apiserver-2" in c for c in mesh.choices())
    async with mesh:
        names = [p.name for p in mesh.processes]
        assert names[:4] == [ETCD, "apiserver", "apiserver-1", "apiserver-2"]
        state = json.loads(mesh.state_path.read_text())
        assert state["etcd"] == list(mesh.etcd_endpoints) and len(state["apiservers"]) == 3
        pinned = {p["name"]: p.get("apiserver") for p in state["processes"]}
        assert pinned["kubelet-0"] == "apiserver" and pinned["kubelet-1"] == "apiserver-1"
        argv = {p.name: p.argv for p in mesh.processes}
        assert "--storage" in argv["apiserver-2"] and mesh.apiserver_urls[1] in argv["kubelet-1"]
        endpoints = [dataclasses.replace(mesh.endpoint, url=url) for url in mesh.apiserver_urls]

        # One registry: every apiserver knows every component, and which apiserver it talks to.
        for endpoint in endpoints:
            async def registered(endpoint: MeshEndpoint = endpoint) -> dict[str, Any] | None:
                _, doc = await _get(endpoint, "/kubemesh/v1/components")
                entries = {e["instance"]: e for e in doc["items"]}
                wanted = {"kubelet-0", "kubelet-1", "controller-manager", "scheduler"}
                return entries if wanted <= set(entries) else None
            entries = await _until(registered)
            assert entries["kubelet-1"]["apiserver"].endswith(f"-{mesh.apiserver_urls[1].rsplit(':', 1)[1]}")
            assert entries["kubelet-1"]["nodes"] == ["node-3", "node-4"]

        # One clock.
        clocks = [(await _get(e, "/clock"))[1] for e in endpoints]
        assert all(c["epochWall"] == clocks[0]["epochWall"] and c["rate"] == 10 for c in clocks)

        # One set of objects: written through one apiserver, read through another.
        async with endpoints[2].client("test") as third, endpoints[0].client("test") as first:
            await third.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                            "metadata": {"name": "shared", "namespace": "default"},
                                            "data": {"k": "v"}})

            async def seen() -> Any:
                try:
                    return await first.get(CONFIGMAPS, "shared", namespace="default")
                except Exception:  # not there yet
                    return None
            assert (await _until(seen))["data"] == {"k": "v"}

            # The whole control plane across apiservers: a Deployment created through the first
            # runs on nodes of both kubelets; the scheduler and the controller-manager talk to others.
            await first.create(DEPLOYMENTS, {
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
                "spec": {"replicas": 4, "selector": {"matchLabels": {"app": "web"}},
                         "template": {"metadata": {"labels": {"app": "web"}},
                                      "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})

            async def running() -> list[Any] | None:
                pods = (await first.list(PODS, namespace="default", label_selector="app=web"))["items"]
                up = [p for p in pods if p.get("status", {}).get("phase") == "Running"]
                return up if len(up) == 4 else None
            pods = await _until(running)
            assert {p["spec"]["nodeName"] for p in pods} & {"node-1", "node-2"}
            assert {p["spec"]["nodeName"] for p in pods} & {"node-3", "node-4"}

        # One signing key: a service-account token issued by the first apiserver works at the others.
        sa = await mesh.endpoint.service_account("default", "robot")
        assert sa.token is not None
        for endpoint in endpoints[1:]:
            status, doc = await _get(endpoint, "/api/v1/namespaces/default/configmaps", token=sa.token)
            assert status == 403, doc  # authenticated as the service account, which RBAC does not allow
            assert "system:serviceaccount:default:robot" in doc["message"]

        # An apiserver restarts over the same etcd with everything there; its kubelet stays Ready.
        await mesh.restart("apiserver-1")
        status, doc = await _get(endpoints[1], "/api/v1/namespaces/default/configmaps/shared")
        assert status == 200 and doc["data"] == {"k": "v"}
        await mesh.wait_nodes_ready(4, timeout=30)
        pids = [p.pid for p in mesh.processes if p.pid is not None]
    assert pids and not any(pid_alive(pid) for pid in pids)
    assert not (tmp_path / "mesh" / "mesh.json").exists()


async def test_an_apiserver_with_another_clock_rate_refuses_to_join(tmp_path: Path) -> None:
    _need_etcd()
    async with Mesh(MeshSpec(nodes=1, store="etcd", state_dir=tmp_path / "mesh", clock_rate=10,
                             components=("apiserver",))) as mesh:
        out = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "kubemesh.apiserver", "--port", "0", "--storage", "etcd",
             "--etcd-endpoints", mesh.etcd_endpoints[0], "--clock-rate", "1"],
            capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode != 0
    assert "runs at rate 10" in out.stderr + out.stdout
    assert "--clock-rate 1" in out.stderr + out.stdout

"""The kubelet against the real apiserver, both as processes on loopback (no wall-clock asserts)."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import aiohttp
import pytest

from kubemesh.services.machinery.certs import client_context
from kubemesh.services.machinery.client import ApiClient, NotFoundError
from kubemesh.services.machinery.clock import parse_time
from kubemesh.services.mesh.launching import Mesh, MeshSpec
from kubemesh.services.model.kinds import LEASES, NODES, PODS, Obj

pytestmark = pytest.mark.slow

RATE = 20.0
T = TypeVar("T")


@pytest.fixture
async def mesh(request: pytest.FixtureRequest) -> AsyncIterator[Mesh]:
    # kubectl sends no bearer token over plain http, so its test runs without authentication.
    token_free = request.node.get_closest_marker("kubectl") is not None
    spec = MeshSpec(nodes=3, clock_rate=RATE, components=("apiserver", "kubelet"), seed=7, start_timeout=60.0,
                    extra_args={"kubelet": ["--pod-start-delay", "2"]})
    if token_free:
        spec = dataclasses.replace(spec, token=None)
    async with Mesh(spec) as m:
        yield m


@pytest.fixture
async def client(mesh: Mesh) -> AsyncIterator[ApiClient]:
    async with mesh.client() as c:
        yield c


async def eventually(check: Callable[[], Awaitable[T | None]], *, limit: float = 30.0, what: str = "") -> T:
    """Poll `check` until it returns something truthy (wall-clock deadline only bounds the test)."""
    deadline = time.monotonic() + limit
    last: T | None = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}; last: {last!r}")


async def admin(mesh: Mesh, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    # The apiserver serves TLS under the mesh's CA when the mesh has a token.
    connector = aiohttp.TCPConnector(ssl=client_context(mesh.ca_path) if mesh.ca_path else True)
    async with aiohttp.ClientSession(headers=mesh.endpoint.headers(component="test"), connector=connector) as s:
        comps = await mesh.endpoint.components()
        assert comps, "kubelet not registered"
        url = next(c["adminURL"] for c in comps.values() if c.get("component") == "kubelet")
        async with s.request(method, url + path, json=body) as resp:
            assert resp.status == 200, await resp.text()
            return await resp.json()


def renew_times(leases: Obj) -> dict[str, float]:
    return {item["metadata"]["name"]: parse_time(item["spec"]["renewTime"]) for item in leases["items"]}


def conditions(node: Obj) -> dict[str, str]:
    return {c["type"]: c["status"] for c in node["status"]["conditions"]}


async def test_nodes_register_and_stay_ready(mesh: Mesh, client: ApiClient) -> None:
    nodes = await client.list(NODES)
    names = sorted(n["metadata"]["name"] for n in nodes["items"])
    assert names == ["node-1", "node-2", "node-3"]
    node = await client.get(NODES, "node-1")
    labels = node["metadata"]["labels"]
    for key in ("kubernetes.io/hostname", "topology.kubernetes.io/zone", "topology.kubernetes.io/region",
                "kubernetes.io/os", "kubernetes.io/arch"):
        assert key in labels
    assert node["status"]["capacity"]["pods"] == "110"
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] > 0
    # A node turns Ready from its status; its lease is created by the same loop right after, so
    # under load the last one may still be on its way.
    async def all_leases() -> dict[str, float] | None:
        got = renew_times(await client.list(LEASES, namespace="kube-node-lease"))
        return got if set(got) == {"node-1", "node-2", "node-3"} else None

    first = await eventually(all_leases, what="every node's lease exists")

    # Two renewal periods of cluster time later every lease moved and every node is still Ready.
    async def all_renewed() -> dict[str, float] | None:
        now = renew_times(await client.list(LEASES, namespace="kube-node-lease"))
        return now if all(now[n] >= first[n] + 15 for n in first) else None

    await eventually(all_renewed, what="every lease renewed twice")
    for n in (await client.list(NODES))["items"]:
        assert conditions(n)["Ready"] == "True"


async def test_power_off_stops_one_node_only(mesh: Mesh, client: ApiClient) -> None:
    # Let every node renew at least once first.
    await asyncio.sleep(15 / RATE)
    out = await admin(mesh, "POST", "/nodes/node-2/power-off")
    assert out["changed"] is True and out["node"]["powered"] is False
    before = renew_times(await client.list(LEASES, namespace="kube-node-lease"))
    hb_before = (await client.get(NODES, "node-2"))["status"]["conditions"]

    async def neighbours_renewed() -> bool:
        now = renew_times(await client.list(LEASES, namespace="kube-node-lease"))
        return now["node-1"] >= before["node-1"] + 25 and now["node-3"] >= before["node-3"] + 25

    await eventually(neighbours_renewed, what="node-1 and node-3 renewing")
    after = renew_times(await client.list(LEASES, namespace="kube-node-lease"))
    assert after["node-2"] == before["node-2"]
    assert (await client.get(NODES, "node-2"))["status"]["conditions"] == hb_before
    listing = await admin(mesh, "GET", "/nodes")
    states = {n["name"]: n["powered"] for n in listing["nodes"]}
    assert states == {"node-1": True, "node-2": False, "node-3": True}

    # Power on: the node renews again.
    await admin(mesh, "POST", "/nodes/node-2/power-on")

    async def renewed_again() -> bool:
        now = renew_times(await client.list(LEASES, namespace="kube-node-lease"))
        return now["node-2"] > before["node-2"]

    await eventually(renewed_again, what="node-2 renewing after power-on")


def pod_body(name: str, node: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 30,
                     "containers": [{"name": "app", "image": "nginx:1.25"}]}}


async def test_pod_runs_and_graceful_delete_completes(mesh: Mesh, client: ApiClient) -> None:
    created = await client.create(PODS, pod_body("web", "node-1"))
    uid = created["metadata"]["uid"]

    async def running() -> Obj | None:
        p = await client.get(PODS, "web", namespace="default")
        return p if (p.get("status") or {}).get("phase") == "Running" else None

    pod = await eventually(running, what="pod Running")
    st = pod["status"]
    assert st["podIP"].startswith("10.0.1.") and st["hostIP"]
    for cs in st["containerStatuses"]:
        assert {"name", "ready", "restartCount", "image", "imageID"} <= set(cs)
        assert cs["ready"] is True
    assert {c["type"]: c["status"] for c in st["conditions"]}["Ready"] == "True"

    deleted = await client.delete(PODS, "web", namespace="default")
    assert deleted is None or deleted["metadata"].get("deletionTimestamp")

    async def gone() -> bool:
        try:
            p = await client.get(PODS, "web", namespace="default")
        except NotFoundError:
            return True
        return bool(p["metadata"]["uid"] != uid)

    await eventually(gone, what="graceful deletion finished by the kubelet")


@pytest.mark.kubectl
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
async def test_kubectl_drain_completes(mesh: Mesh, client: ApiClient) -> None:
    for i in range(2):
        await client.create(PODS, pod_body(f"drainme-{i}", "node-3"))

    async def both_running() -> bool:
        pods = await client.list(PODS, namespace="default", field_selector="spec.nodeName=node-3")
        items: list[Obj] = pods["items"]
        return len(items) == 2 and all(p["status"].get("phase") == "Running" for p in items)

    await eventually(both_running, what="pods Running on node-3")
    proc = await asyncio.create_subprocess_exec(
        "kubectl", "--kubeconfig", str(mesh.kubeconfig_path), "drain", "node-3", "--force",
        "--ignore-daemonsets", "--timeout=60s",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=90)
    assert proc.returncode == 0, out.decode()
    pods = await client.list(PODS, namespace="default", field_selector="spec.nodeName=node-3")
    assert pods["items"] == []
    assert (await client.get(NODES, "node-3"))["spec"].get("unschedulable") is True

"""The scheduler as a real process against a real apiserver and kubelet, over loopback HTTP."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from kubemesh.scheduler.podinfo import milli_cpu
from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.model.kinds import EVENTS, NODES, PODS, PRIORITYCLASSES, Obj

pytestmark = pytest.mark.slow


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    def __init__(self, url: str, client: ApiClient) -> None:
        self.url = url
        self.client = client

    async def pods(self) -> dict[str, Obj]:
        lst = await self.client.list(PODS, namespace="default")
        return {p["metadata"]["name"]: p for p in lst["items"]}

    async def wait(self, cond: Any, within: float = 30.0) -> dict[str, Obj]:
        loop = asyncio.get_running_loop()
        end = loop.time() + within
        while True:
            pods = await self.pods()
            if cond(pods):
                return pods
            if loop.time() > end:
                raise AssertionError(f"timed out; pods: {_summary(pods)}")
            await asyncio.sleep(0.1)


def _summary(pods: dict[str, Obj]) -> list[tuple[str, Any, Any]]:
    return [(n, p["spec"].get("nodeName"), p.get("status", {}).get("phase")) for n, p in sorted(pods.items())]


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    port = _port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "KUBEMESH_BUGS": ""}
    procs: list[subprocess.Popen[bytes]] = []

    def start(*argv: str, log: str) -> None:
        procs.append(subprocess.Popen([sys.executable, "-m", *argv], env=env,
                                      stdout=(tmp_path / log).open("wb"), stderr=subprocess.STDOUT))

    start("apiserver", "--host", "127.0.0.1", "--port", str(port), "--clock-rate", "10", log="apiserver.log")
    client = ApiClient(url, component="test", instance="test", encoding="json")
    try:
        for _ in range(100):
            try:
                await client.request("GET", "/readyz")
                break
            except Exception:
                await asyncio.sleep(0.1)
        start("kubelet", "--apiserver", url, "--nodes", "3", "--capacity", "cpu=4,memory=8Gi,pods=110",
              log="kubelet.log")
        start("scheduler", "--apiserver", url, "--seed", "1", log="scheduler.log")
        for _ in range(600):
            nodes = (await client.list(NODES))["items"]
            if len([n for n in nodes if (n.get("status") or {}).get("allocatable")]) >= 3:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError("the kubelet did not register 3 nodes")
        yield Cluster(url, client)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
        await client.close()


def _pod(name: str, *, cpu: str = "100m", labels: dict[str, str] | None = None, priority_class: str | None = None,
         anti: str | None = None) -> Obj:
    spec: Obj = {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": cpu}}}]}
    if anti:
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": anti}}, "topologyKey": "kubernetes.io/hostname"}]}}
    if priority_class:
        spec["priorityClassName"] = priority_class
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}}, "spec": spec}


async def test_pods_are_scheduled_bound_and_run(cluster: Cluster) -> None:
    for i in range(6):
        await cluster.client.create(PODS, _pod(f"p-{i}"), namespace="default")
    pods = await cluster.wait(lambda ps: len(ps) == 6 and all(
        p.get("status", {}).get("phase") == "Running" for p in ps.values()))
    assert all(p["spec"].get("nodeName") for p in pods.values())


async def test_required_anti_affinity_spreads_replicas(cluster: Cluster) -> None:
    for i in range(4):
        await cluster.client.create(PODS, _pod(f"web-{i}", labels={"app": "web"}, anti="web"), namespace="default")
    pods = await cluster.wait(lambda ps: sum(1 for p in ps.values() if p["spec"].get("nodeName")) >= 3)
    await asyncio.sleep(1.0)
    pods = await cluster.pods()
    nodes = [p["spec"].get("nodeName") for p in pods.values() if p["spec"].get("nodeName")]
    assert len(nodes) == 3 and len(set(nodes)) == 3  # three nodes, one replica each; the 4th waits


async def test_high_priority_pod_preempts_and_lands_on_nominated_node(cluster: Cluster) -> None:
    for name, value in (("low", 0), ("high", 1000)):
        await cluster.client.create(PRIORITYCLASSES, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                                      "metadata": {"name": name}, "value": value})
    nodes = (await cluster.client.list(NODES))["items"]
    alloc = min(milli_cpu(n["status"]["allocatable"]["cpu"]) for n in nodes)
    for i in range(6):  # two low pods fill each of the 3 nodes
        await cluster.client.create(PODS, _pod(f"low-{i}", cpu=f"{alloc // 2}m", priority_class="low"),
                                    namespace="default")
    await cluster.wait(lambda ps: all(p["spec"].get("nodeName") for p in ps.values()) and len(ps) == 6)
    await cluster.client.create(PODS, _pod("vip", cpu=f"{alloc * 3 // 4}m", priority_class="high"),
                                namespace="default")
    pods = await cluster.wait(lambda ps: "vip" in ps and ps["vip"]["spec"].get("nodeName"), within=60)
    vip = pods["vip"]
    assert vip["status"].get("nominatedNodeName") in (None, vip["spec"]["nodeName"])
    events = (await cluster.client.list(EVENTS, namespace="default"))["items"]
    assert any(e.get("reason") == "Preempted" for e in events)

"""The compose stack over etcd with three apiservers (`compose.yaml` + `compose.etcd.yaml`), in Docker.

One stack for the module: etcd from the kubemesh image, `apiserver` (published, writes the
state folder) and `apiserver-2`, `apiserver-3` over it, the scheduler on apiserver-2, the
controller-manager on apiserver-3, kubelet n on the ((n-1) mod 3)-th apiserver. Skips without
Docker, fails under CI=true (tests/composekit.py).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from composekit import ensure_image, unavailable

from kubemesh.services.mesh.compose import ComposeStack
from kubemesh.services.mesh.endpoint import node_is_ready
from kubemesh.services.mesh.kubectl import Kubectl
from kubemesh.services.tools.testing import ComposeCluster

REPO = Path(__file__).resolve().parent.parent.parent
COMPOSE_FILE = REPO / "compose.yaml"
ETCD_OVERRIDE = REPO / "compose.etcd.yaml"
NODES_PER_KUBELET = 2
KUBELETS = 2
APISERVERS = ("apiserver", "apiserver-2", "apiserver-3")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# Which apiserver each component registered with (`apiserver_identity`: the container's host name).
PINNED = {"scheduler": "apiserver-apiserver-2-6443", "controller-manager": "apiserver-apiserver-3-6443",
          "kubelet-1": "apiserver-apiserver-6443", "kubelet-2": "apiserver-apiserver-2-6443"}

# The keys etcd holds under the objects' prefix, read through etcd's JSON gateway inside its container.
ETCD_KEYS = """
import base64, json, urllib.request
b64 = lambda s: base64.b64encode(s.encode()).decode()
req = urllib.request.Request("http://127.0.0.1:2379/v3/kv/range", method="POST", data=json.dumps(
    {"key": b64("/registry/"), "range_end": b64("/registry0"), "keys_only": True}).encode())
print(json.dumps([base64.b64decode(kv["key"]).decode() for kv in json.load(urllib.request.urlopen(req))["kvs"]]))
"""


@pytest.fixture(scope="session")
def docker_image() -> str:
    return ensure_image()


@pytest.fixture(scope="module")
def stack(docker_image: str) -> Iterator[ComposeStack]:
    """The stack over etcd: 2 kubelet containers of 2 nodes each, real-time clock."""
    s = ComposeStack(compose_file=COMPOSE_FILE, overrides=[ETCD_OVERRIDE], image=docker_image,
                     nodes_per_kubelet=NODES_PER_KUBELET, kubelets=KUBELETS, clock_rate=1.0)
    try:
        s.start()
        yield s
    finally:
        s.stop()


@pytest.fixture
def kubectl(stack: ComposeStack, tmp_path: Path) -> Kubectl:
    binary = shutil.which("kubectl")
    if binary is None:
        unavailable("kubectl is not installed")
    assert binary is not None
    return Kubectl(stack.kubeconfig_path, binary=binary, cache_dir=tmp_path / "kubectl-cache")


def components_seen_by(stack: ComposeStack, apiserver: str) -> dict[str, dict[str, Any]]:
    """`GET /kubemesh/v1/components` on one apiserver, from inside its container (only `apiserver` is published)."""
    out = stack.exec(apiserver, "kubemesh-entrypoint", "admin", "GET", "/kubemesh/v1/components")
    return {c["instance"]: c for c in json.loads(out)["items"]}


def etcd_keys(stack: ComposeStack) -> list[str]:
    keys: list[str] = json.loads(stack.exec("etcd", "python3", "-c", ETCD_KEYS))
    return keys


async def wait_ready_nodes(kubectl: Kubectl, count: int, *, timeout: float = 90.0) -> list[str]:  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    while True:
        items = (await kubectl.json("get", "nodes"))["items"]
        if len(items) == count and all(node_is_ready(n) for n in items):
            return sorted((n["metadata"]["name"] for n in items), key=lambda s: int(s.rsplit("-", 1)[1]))
        assert time.monotonic() < deadline, f"expected {count} Ready nodes, kubectl shows {items}"
        await asyncio.sleep(0.5)


async def running_pods(kubectl: Kubectl, namespace: str, count: int, *,
                       timeout: float = 90.0) -> dict[str, str]:  # noqa: ASYNC109
    """Wait until `count` pods of `namespace` are Running; their names and uids."""
    deadline = time.monotonic() + timeout
    while True:
        items = (await kubectl.json("-n", namespace, "get", "pods"))["items"]
        running = {p["metadata"]["name"]: p["metadata"]["uid"] for p in items
                   if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")}
        if len(running) == count:
            return running
        assert time.monotonic() < deadline, f"expected {count} Running pods in {namespace}, got {items}"
        await asyncio.sleep(0.5)


async def test_three_apiservers_over_etcd_each_list_every_component(stack: ComposeStack, kubectl: Kubectl) -> None:
    services = {c["Service"]: c["State"] for c in stack.containers()}
    assert services == dict.fromkeys(("etcd", *APISERVERS, "controller-manager", "scheduler", "kubelet"),
                                     "running"), services
    assert await wait_ready_nodes(kubectl, KUBELETS * NODES_PER_KUBELET) == ["node-1", "node-2", "node-3", "node-4"]
    # The host's kubeconfig names the first apiserver, the only one published (on loopback).
    assert f"server: https://127.0.0.1:{stack.port}" in stack.kubeconfig_path.read_text()
    published = {c["Service"]: [p for p in c.get("Publishers") or [] if p.get("PublishedPort")]
                 for c in stack.containers()}
    assert [(p["URL"], p["TargetPort"]) for p in published.pop("apiserver")] == [("127.0.0.1", 6443)]
    assert not any(published.values()), published
    # Every apiserver knows every component, whichever apiserver it registered with (the
    # registry is shared through etcd), and each component talks to the apiserver it was given.
    for apiserver in APISERVERS:
        deadline = time.monotonic() + 60
        while True:
            seen = {name: c.get("apiserver") for name, c in components_seen_by(stack, apiserver).items()}
            if seen == PINNED:
                break
            assert time.monotonic() < deadline, f"{apiserver} lists {seen}, expected {PINNED}"
            await asyncio.sleep(0.5)


def node_powered(stack: ComposeStack, node: str, *, kubelet: int) -> bool:
    doc = json.loads(stack.exec("kubelet", "kubemesh-entrypoint", "admin", "GET", f"/nodes/{node}", index=kubelet))
    powered: bool = doc["powered"]
    return powered


def test_a_node_fault_made_on_the_first_apiserver_reaches_a_kubelet_of_another(stack: ComposeStack) -> None:
    """kubelet-2 registered with apiserver-2; the chaos front door of `apiserver` finds it all the same."""
    victim = f"node-{NODES_PER_KUBELET + 1}"  # the first node of kubelet-2
    cli = [sys.executable, "-m", "kubemesh", "chaos"]
    r = subprocess.run([*cli, "add", "node.powerOff", "--node", victim, "--name", "off", "--duration", "600",
                        "--state-dir", str(stack.state_dir), "-o", "json"],
                       capture_output=True, text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["status"]["injected"] == 1, r.stdout
    assert node_powered(stack, victim, kubelet=2) is False
    r = subprocess.run([*cli, "reset", "--state-dir", str(stack.state_dir)], capture_output=True, text=True,
                       timeout=120, check=False)
    assert r.returncode == 0 and json.loads(r.stdout)["healed"] == ["off"], r.stdout + r.stderr
    assert node_powered(stack, victim, kubelet=2) is True


async def test_a_deployment_runs_and_its_objects_outlive_an_apiserver_restart(stack: ComposeStack,
                                                                              kubectl: Kubectl) -> None:
    await kubectl("create", "namespace", "keep")
    await kubectl("-n", "keep", "create", "deployment", "web", "--image=nginx", "--replicas=3")
    pods = await running_pods(kubectl, "keep", 3)
    # The objects are in etcd, under kube-apiserver's key layout.
    keys = etcd_keys(stack)
    assert "/registry/namespaces/keep" in keys, keys
    assert any(k.startswith("/registry/") and k.endswith("/keep/web") and "deployments" in k for k in keys), keys
    assert {n for n in pods if f"/registry/pods/keep/{n}" in keys} == set(pods), keys

    async def snapshot() -> dict[tuple[str, str, str], str]:
        out: dict[tuple[str, str, str], str] = {}
        for kind in ("namespaces", "nodes", "pods", "deployments", "replicasets", "leases"):
            for item in (await kubectl.json("get", kind, "--all-namespaces"))["items"]:
                meta = item["metadata"]
                out[(kind, meta.get("namespace", ""), meta["name"])] = meta["uid"]
        return out

    before = await snapshot()
    # `apiserver` keeps no data of its own here (no volume): what it serves after the restart
    # comes from etcd. ComposeCluster.restart waits until every service is healthy again.
    await ComposeCluster(stack).restart("apiserver")
    after = await snapshot()
    lost = {k: v for k, v in before.items() if after.get(k) != v}
    assert not lost, f"objects lost or replaced across the apiserver restart: {sorted(lost)}"
    assert await running_pods(kubectl, "keep", 3) == pods
    # The cluster goes on: the restarted apiserver takes writes, the controllers (on the
    # other apiservers) act on them, every node stays Ready.
    await kubectl("-n", "keep", "scale", "deployment", "web", "--replicas=4")
    await running_pods(kubectl, "keep", 4)
    await wait_ready_nodes(kubectl, KUBELETS * NODES_PER_KUBELET)


def test_down_leaves_no_container_network_or_volume(stack: ComposeStack) -> None:
    """Last: bring the stack down (etcd's volume with it) and look for anything of it left."""
    assert stack.leftovers()["volumes"], "etcd's volume should exist before the stack is brought down"
    stack.stop()
    left = stack.leftovers()
    assert left == {"containers": [], "networks": [], "volumes": []}, left
    out = subprocess.run(["docker", "ps", "-a", "--format", "{{json .Names}}"], capture_output=True, text=True,
                         check=True).stdout
    assert stack.project not in out
    assert not stack.state_dir.exists()


def test_the_etcd_in_the_image_is_the_pinned_one(docker_image: str) -> None:
    """The image carries the etcd the Dockerfile pins (ETCD_VERSION), whichever way it was installed."""
    pinned = next(line.split("=", 1)[1] for line in (REPO / "Dockerfile").read_text().splitlines()
                  if line.startswith("ARG ETCD_VERSION="))
    r = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "etcd", docker_image,
                        "--version"], capture_output=True, text=True, timeout=60, check=True)
    assert f"etcd Version: {pinned}\n" in r.stdout, r.stdout

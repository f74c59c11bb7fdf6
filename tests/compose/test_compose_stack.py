"""The compose stack in Docker, driven through testcontainers (`kubemesh.services.mesh.compose.ComposeStack`).

Without a Docker engine with compose v2 these tests skip, except under `CI=true`, where they
fail: `.ci/run` sets Docker up first (`scripts/docker-setup`), so in CI they really run. The
session fixture runs `scripts/docker-setup` too, which rebuilds the image only when its
sources changed.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from composekit import ensure_image

from kubemesh.scenarios.attached import ExistingMesh
from kubemesh.scenarios.catalog.recreate_stuck_terminating import RecreateStuckTerminating
from kubemesh.scenarios.running import run_scenario
from kubemesh.services.mesh.compose import ComposeStack
from kubemesh.services.mesh.endpoint import node_is_ready
from kubemesh.services.mesh.kubectl import Kubectl
from kubemesh.services.model.kinds import PODS
from kubemesh.services.tools.testing import ComposeCluster, MeshRequest, astart_cluster

REPO = Path(__file__).resolve().parent.parent.parent
COMPOSE_FILE = REPO / "compose.yaml"
IMAGE = os.environ.get("KUBEMESH_IMAGE", "kubemesh:latest")
NODES_PER_KUBELET = 2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def unavailable(why: str) -> None:
    """Skip, except under CI=true: there a compose test that cannot run is a failure."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{why} (CI=true: the compose tests must run)", pytrace=False)
    pytest.skip(why)


@pytest.fixture(scope="session")
def docker_image() -> str:
    """Docker and compose answer and the image is built from the current sources, else skip."""
    return ensure_image()


@pytest.fixture(scope="module")
def stack(docker_image: str) -> Iterator[ComposeStack]:
    """One stack for the module: 1 kubelet container with 2 nodes, real-time clock."""
    s = ComposeStack(compose_file=COMPOSE_FILE, image=docker_image, nodes_per_kubelet=NODES_PER_KUBELET,
                     kubelets=1, clock_rate=1.0)
    try:
        s.start()
        yield s
    finally:
        s.stop()


@pytest.fixture
def cluster(stack: ComposeStack) -> ComposeCluster:
    return ComposeCluster(stack)


@pytest.fixture
def kubectl(stack: ComposeStack, tmp_path: Path) -> Kubectl:
    binary = shutil.which("kubectl")
    if binary is None:
        unavailable("kubectl is not installed")
    assert binary is not None
    return Kubectl(stack.kubeconfig_path, binary=binary, cache_dir=tmp_path / "kubectl-cache")


async def ready_nodes(kubectl: Kubectl, count: int, *, timeout: float = 60.0) -> list[str]:  # noqa: ASYNC109
    """Wait until kubectl sees exactly `count` nodes, all Ready; their names."""
    deadline = time.monotonic() + timeout
    names: list[str] = []
    while True:
        doc = await kubectl.json("get", "nodes")
        items = doc["items"]
        names = sorted((n["metadata"]["name"] for n in items), key=lambda s: int(s.rsplit("-", 1)[1]))
        if len(items) == count and all(node_is_ready(n) for n in items):
            return names
        assert time.monotonic() < deadline, f"expected {count} Ready nodes, kubectl shows {doc['items']}"
        await asyncio.sleep(0.5)


def restart_count(stack: ComposeStack, service: str, index: int = 1) -> int:
    info = stack.inspect(f"{stack.project}-{service}-{index}")
    count: int = info["RestartCount"]
    return count


def health(stack: ComposeStack, service: str, index: int = 1) -> str:
    info = stack.inspect(f"{stack.project}-{service}-{index}")
    status: str = info["State"].get("Health", {}).get("Status", "")
    return status


async def test_every_node_ready_through_kubectl(stack: ComposeStack, kubectl: Kubectl) -> None:
    assert await ready_nodes(kubectl, NODES_PER_KUBELET) == ["node-1", "node-2"]
    kubeconfig = stack.kubeconfig_path.read_text()
    assert f"server: https://127.0.0.1:{stack.port}" in kubeconfig
    # Only the apiserver is published, and only on loopback.
    published = {c["Service"]: c.get("Publishers") or [] for c in stack.containers()}
    assert [(p["URL"], p["TargetPort"]) for p in published["apiserver"] if p.get("PublishedPort")] \
        == [("127.0.0.1", 6443)]
    assert all(not p.get("PublishedPort") for svc, ps in published.items() if svc != "apiserver" for p in ps)


async def test_scale_kubelets_from_1_to_3_keeps_names_unique_and_stable(stack: ComposeStack,
                                                                        kubectl: Kubectl) -> None:
    await asyncio.to_thread(stack.scale_kubelets, 3)
    expected = [f"node-{i}" for i in range(1, 3 * NODES_PER_KUBELET + 1)]
    assert await ready_nodes(kubectl, len(expected)) == expected
    # A restarted kubelet container comes back with the same replica number, hence the same nodes.
    before = {n["metadata"]["name"]: n["metadata"]["uid"] for n in (await kubectl.json("get", "nodes"))["items"]}
    await asyncio.to_thread(subprocess.run, ["docker", "restart", "-t", "3", f"{stack.project}-kubelet-2"],
                            check=True, capture_output=True)
    assert await ready_nodes(kubectl, len(expected)) == expected
    after = {n["metadata"]["name"]: n["metadata"]["uid"] for n in (await kubectl.json("get", "nodes"))["items"]}
    assert after == before


def kubemesh_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The `kubemesh` command as a user runs it, from this checkout's virtualenv."""
    return subprocess.run([sys.executable, "-m", "kubemesh", *args], capture_output=True, text=True, timeout=120,
                          check=False)


async def test_chaos_cli_powers_off_a_node_of_the_third_kubelet_and_fails_loudly_when_it_cannot(
        stack: ComposeStack, kubectl: Kubectl) -> None:
    """Every kubelet container listens on the same port: node faults are routed by the nodes each registered."""
    await asyncio.to_thread(stack.scale_kubelets, 3)
    await ready_nodes(kubectl, 3 * NODES_PER_KUBELET)
    state = str(stack.state_dir)
    victim = f"node-{2 * NODES_PER_KUBELET + 1}"  # the first node of kubelet-3
    r = kubemesh_cli("chaos", "add", "node.powerOff", "--node", victim, "--name", "off", "--duration", "600",
                     "--state-dir", state, "-o", "json")
    assert r.returncode == 0, r.stderr
    fault = json.loads(r.stdout)
    assert fault["status"]["phase"] == "Active" and fault["status"]["injected"] == 1, fault
    hosted = json.loads(await asyncio.to_thread(stack.exec, "kubelet", "kubemesh-entrypoint", "admin", "GET",
                                                f"/nodes/{victim}", index=3))
    assert hosted["powered"] is False, hosted
    r = kubemesh_cli("chaos", "list", "--kubeconfig", str(stack.kubeconfig_path), "-o", "json")
    assert r.returncode == 0 and [f["name"] for f in json.loads(r.stdout)] == ["off"], r.stdout + r.stderr
    r = kubemesh_cli("chaos", "reset", "--state-dir", state)
    assert r.returncode == 0 and json.loads(r.stdout)["healed"] == ["off"], r.stdout + r.stderr
    hosted = json.loads(await asyncio.to_thread(stack.exec, "kubelet", "kubemesh-entrypoint", "admin", "GET",
                                                f"/nodes/{victim}", index=3))
    assert hosted["powered"] is True, hosted
    # A node nobody has: refused with the reason, nothing created.
    r = kubemesh_cli("chaos", "add", "node.powerOff", "--node", "node-99", "--forever", "--state-dir", state)
    assert r.returncode == 1 and 'node "node-99" not found' in r.stderr, r.stderr

    # Scaled down, kubelet-3 is gone but its nodes stay in the API: a fault on one of them cannot
    # be applied, and the CLI says so and exits non-zero (the fault stays listed as Failed).
    before = {n["metadata"]["name"]: n["metadata"]["uid"] for n in (await kubectl.json("get", "nodes"))["items"]}
    await asyncio.to_thread(stack.scale_kubelets, 1)
    r = kubemesh_cli("chaos", "add", "node.powerOff", "--node", victim, "--name", "orphan", "--forever",
                     "--state-dir", state)
    assert r.returncode == 1 and "could not be applied" in r.stderr, r.stdout + r.stderr
    assert kubemesh_cli("chaos", "reset", "--state-dir", state).returncode == 0
    # Scaled up again, the same kubelets bring back the same nodes: names and uids.
    await asyncio.to_thread(stack.scale_kubelets, 3)
    await ready_nodes(kubectl, 3 * NODES_PER_KUBELET)
    after = {n["metadata"]["name"]: n["metadata"]["uid"] for n in (await kubectl.json("get", "nodes"))["items"]}
    assert after == before


async def test_apiserver_restart_with_its_volume_loses_nothing(stack: ComposeStack, cluster: ComposeCluster,
                                                               kubectl: Kubectl) -> None:
    await kubectl("create", "namespace", "keep")
    await kubectl("-n", "keep", "create", "deployment", "web", "--image=nginx", "--replicas=3")
    await kubectl("-n", "keep", "create", "configmap", "settings", "--from-literal=a=1")

    async def snapshot() -> dict[tuple[str, str, str], str]:
        out: dict[tuple[str, str, str], str] = {}
        for kind in ("namespaces", "nodes", "pods", "deployments", "replicasets", "configmaps", "leases"):
            for item in (await kubectl.json("get", kind, "--all-namespaces"))["items"]:
                meta = item["metadata"]
                out[(kind, meta.get("namespace", ""), meta["name"])] = meta["uid"]
        return out

    deadline = time.monotonic() + 60
    while len([k for k in await snapshot() if k[0] == "pods" and k[1] == "keep"]) < 3:
        assert time.monotonic() < deadline, "the Deployment's pods were never created"
        await asyncio.sleep(0.5)
    before = await snapshot()
    await cluster.restart("apiserver")
    assert health(stack, "apiserver") == "healthy"
    after = await snapshot()
    lost = {k: v for k, v in before.items() if after.get(k) != v}
    assert not lost, f"objects lost or replaced across the apiserver restart: {sorted(lost)}"
    # And the cluster goes on: writes work, every node is still Ready.
    await kubectl("-n", "keep", "scale", "deployment", "web", "--replicas=4")
    await cluster.wait_nodes_ready(stack.kubelets * NODES_PER_KUBELET, timeout=60)


async def wait_restarted(stack: ComposeStack, service: str, before: int, *, timeout: float = 90.0) -> None:  # noqa: ASYNC109
    deadline = time.monotonic() + timeout
    while not (restart_count(stack, service) > before and health(stack, service) == "healthy"):
        assert time.monotonic() < deadline, (
            f"{service} was not restarted by its restart policy (restarts {restart_count(stack, service)}, "
            f"health {health(stack, service)!r})\n{stack.tail_logs(20)}")
        await asyncio.sleep(0.5)


async def test_a_crashed_component_is_restarted_by_the_restart_policy(stack: ComposeStack,
                                                                      cluster: ComposeCluster) -> None:
    before = restart_count(stack, "scheduler")
    await cluster.crash("scheduler")  # SIGKILL inside the container: exit 137, as a real crash
    await wait_restarted(stack, "scheduler", before)
    # The restarted scheduler schedules again.
    async with cluster.client() as client:
        await client.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "after-crash"},
                                   "spec": {"containers": [{"name": "c", "image": "pause"}]}}, namespace="default")
        deadline = time.monotonic() + 60
        while not (await client.get(PODS, "after-crash", namespace="default")).get("spec", {}).get("nodeName"):
            assert time.monotonic() < deadline, "the restarted scheduler did not bind the pod"
            await asyncio.sleep(0.3)


async def test_chaos_component_crash_is_recovered_by_the_restart_policy(stack: ComposeStack,
                                                                        cluster: ComposeCluster) -> None:
    before = restart_count(stack, "controller-manager")
    async with cluster.client("chaos") as client, cluster.chaos() as chaos:
        # The fault is forwarded to the component's admin endpoint, which the component
        # registers with the apiserver after start-up (and again every few seconds).
        deadline = time.monotonic() + 60
        while True:
            registered = await client.request("GET", "/kubemesh/v1/components")
            if any(c.get("component") == "controller_manager" for c in registered.get("items", [])):
                break
            assert time.monotonic() < deadline, f"the controller-manager never registered: {registered}"
            await asyncio.sleep(0.5)
        fault = await chaos.add({"type": "component.crash", "target": {"component": "controller_manager"},
                                 "duration": None})
        try:
            await wait_restarted(stack, "controller-manager", before)
        finally:
            await chaos.remove(fault["name"], missing_ok=True)


def test_down_leaves_no_container_network_or_volume(stack: ComposeStack) -> None:
    """Last of the tests on the module's stack: bring it down and look for anything of it left."""
    assert stack.leftovers()["containers"], "the stack should be running before it is brought down"
    stack.stop()
    left = stack.leftovers()
    assert left == {"containers": [], "networks": [], "volumes": []}, left
    assert not stack.state_dir.exists()
    out = subprocess.run(["docker", "ps", "-a", "--format", "{{json .}}"], capture_output=True, text=True,
                         check=True).stdout
    assert stack.project not in out
    assert json.dumps(stack.project) not in subprocess.run(["docker", "volume", "ls", "--format", "{{json .Name}}"],
                                                           capture_output=True, text=True, check=True).stdout


async def test_recreate_stuck_terminating_reproduces_on_the_stack_in_buggy_mode(docker_image: str,
                                                                                 tmp_path: Path) -> None:
    """`kubemesh scenario run recreate-stuck-terminating --mode buggy --attach KUBECONFIG` on the stack.

    The stack has the scenario's shape and its compose environment sets the scenario's bug
    switch (`KUBEMESH_BUGS=no-out-of-service-gc`); the runner attaches through the kubeconfig the
    stack writes for the host and uses only the published apiserver (node power through the
    chaos front door's `node.powerOff`). The run cleans up after itself: a second run on the
    same stack, through the CLI, reproduces too; fixed mode is refused, with the reason.

    After the module's stack is down (the machine has two cores), and at half the scenario's
    clock rate: a slower clock is allowed (the same cluster-time behaviour, in more wall time)
    and leaves the containers' start-up of the replacement pod room on a loaded machine.
    """
    scenario = RecreateStuckTerminating()
    shape = scenario.mesh_shape("buggy")
    request = MeshRequest(nodes=shape.nodes, clock_rate=shape.clock_rate / 2, bugs=scenario.bugs_for("buggy"),
                          seed=1, compose=True)
    async with astart_cluster(request, compose=True, compose_file=COMPOSE_FILE, image=docker_image,
                              state_dir=tmp_path / "state") as compose:
        assert isinstance(compose, ComposeCluster)
        env = compose.stack.env_file.read_text()
        assert "KUBEMESH_BUGS=no-out-of-service-gc\n" in env, env
        target = ExistingMesh.from_kubeconfig(compose.kubeconfig_path)
        assert target.endpoint.url == f"https://127.0.0.1:{compose.stack.port}"

        [first] = await run_scenario(scenario, modes=("buggy",), seed=1, report_dir=tmp_path / "reports",
                                     target=target, log=print)
        verdict = (Path(first.report) / "verdict.txt").read_text()
        assert first.outcome == "reproduced", verdict
        assert "node power operations go through the chaos front door" in verdict, verdict

        # Again on the same stack, as a user would: the CLI, attached through the kubeconfig.
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys; from kubemesh.services.tools.cli import main; sys.exit(main())",
            "scenario", "run", scenario.name, "--mode", "buggy", "--attach", str(compose.kubeconfig_path),
            "--seed", "2", "--json", "--report-dir", str(tmp_path / "cli-reports"), cwd=REPO,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        assert proc.returncode == 0, f"{out.decode()}\n{err.decode()}"
        [line] = out.decode().splitlines()
        second = json.loads(line)
        assert second["outcome"] == "reproduced", (Path(second["report"]) / "verdict.txt").read_text()

        # A mesh runs in one mode: fixed mode on this stack is refused before anything changes.
        [fixed] = await run_scenario(scenario, modes=("fixed",), seed=3, report_dir=tmp_path / "reports",
                                     target=target)
        assert fixed.outcome == "inconclusive"
        assert fixed.summary.startswith(f"target mesh {compose.kubeconfig_path}: "), fixed.summary
        assert "no-out-of-service-gc" in fixed.summary, fixed.summary

        # Nothing was torn down: every container still runs and every node is Ready again.
        assert {c["Service"]: c["State"] for c in compose.stack.containers()} == dict.fromkeys(
            ("apiserver", "controller-manager", "scheduler", "kubelet"), "running")
        await compose.wait_nodes_ready(shape.nodes, timeout=60)

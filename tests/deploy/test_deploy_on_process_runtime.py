"""deploy/overlays/small applied to kubemesh itself: a mesh whose pods run as local processes.

The outer mesh runs the process runtime with the image `kubemesh:latest` mapped to this checkout's
entrypoint (`scripts/docker-entrypoint`), so the inner control plane comes up as real processes:
etcd, an apiserver over it, the scheduler, the controller-manager and a kubelet host of 100 nodes.

What the overlay cannot do there, a test overlay on top of it patches, and nothing else:
* the process runtime's pods share this machine's network and have no cluster DNS: every
  listener gets a free port (`KUBEMESH_APISERVER_PORT`, `KUBEMESH_ADMIN_PORT`, etcd's URLs), and
  the components reach each other at 127.0.0.1;
* its pods get no ServiceAccount token, which the bootstrap Job needs to call the outer API: the
  test publishes the Secret `kubemesh-cluster` itself (with `publish-secret`'s own code) and the
  Job is left out;
* etcd's data directory is taken relative to the container's root (its emptyDir), not
  /var/lib/etcd of this machine.

Checked: the inner apiserver answers with the published token and CA, its 100 nodes are Ready;
the kubelet host's pod is deleted and its StatefulSet brings back a new pod hosting the same nodes
(same names, Leases renewed after the deletion, no other node); `kubectl delete -k` removes
everything, and no process is left in the runtime's directory.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import importlib.machinery
import importlib.util
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
import yaml

from kubemesh.services.machinery.client import ApiClient, ApiError
from kubemesh.services.mesh.endpoint import node_is_ready
from kubemesh.services.mesh.launching import Mesh, MeshSpec
from kubemesh.services.mesh.state import free_port
from kubemesh.services.model.kinds import LEASES, NODES, PODS

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.asyncio(loop_scope="module"),
              pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parent.parent.parent
ENTRYPOINT = REPO / "scripts" / "docker-entrypoint"
INNER_NODES = 100  # the small overlay's kubelet host
PORTS = {name: free_port() for name in ("etcd", "peer", "apiserver", "kubelet", "scheduler", "controller-manager")}


def kubectl_binary() -> str:
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("no kubectl on PATH")
    return found


def secret_body(tmp: Path) -> dict[str, Any]:
    loader = importlib.machinery.SourceFileLoader("kubemesh_entrypoint", str(ENTRYPOINT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    body: dict[str, Any] = module.secret_body(
        "kubemesh-cluster", namespace="default", server=f"https://127.0.0.1:{PORTS['apiserver']}",
        token="inner-token", hosts=("kubemesh-apiserver",), workdir=tmp)
    return body


def env_patch(kind: str, name: str, container: str, env: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name},
            "spec": {"template": {"spec": {"containers": [
                {"name": container, "env": [{"name": k, "value": v} for k, v in env.items()]}]}}}}


def port_patch(kind: str, name: str, port: int, *, probe_port: bool = False) -> dict[str, Any]:
    ops: list[dict[str, Any]] = [{"op": "replace", "path": "/spec/template/spec/containers/0/ports/0/containerPort",
                                  "value": port}]
    if probe_port:
        ops.append({"op": "replace", "path": "/spec/template/spec/containers/0/readinessProbe/httpGet/port",
                    "value": port})
    return {"target": {"kind": kind, "name": name}, "patch": json.dumps(ops)}


def write_overlay(root: Path) -> Path:
    """deploy/overlays/small, patched for pods that are processes of this machine."""
    overlay = root / "overlay"
    overlay.mkdir()
    inner = f"https://127.0.0.1:{PORTS['apiserver']}"
    etcd_client, etcd_peer = f"http://127.0.0.1:{PORTS['etcd']}", f"http://127.0.0.1:{PORTS['peer']}"
    patches = [
        env_patch("StatefulSet", "kubemesh-etcd", "etcd", {
            "ETCD_DATA_DIR": "var/lib/etcd", "ETCD_LISTEN_CLIENT_URLS": etcd_client,
            "ETCD_ADVERTISE_CLIENT_URLS": etcd_client, "ETCD_LISTEN_PEER_URLS": etcd_peer,
            "ETCD_INITIAL_ADVERTISE_PEER_URLS": etcd_peer, "ETCD_INITIAL_CLUSTER": f"kubemesh-etcd-0={etcd_peer}"}),
        env_patch("Deployment", "kubemesh-apiserver", "apiserver", {
            "KUBEMESH_ETCD_ENDPOINTS": etcd_client, "KUBEMESH_APISERVER_PORT": str(PORTS["apiserver"])}),
        env_patch("StatefulSet", "kubemesh-kubelet", "kubelet", {
            "KUBEMESH_APISERVER": inner, "KUBEMESH_ADMIN_PORT": str(PORTS["kubelet"])}),
        env_patch("Deployment", "kubemesh-scheduler", "scheduler", {
            "KUBEMESH_APISERVER": inner, "KUBEMESH_ADMIN_PORT": str(PORTS["scheduler"])}),
        env_patch("Deployment", "kubemesh-controller-manager", "controller-manager", {
            "KUBEMESH_APISERVER": inner, "KUBEMESH_ADMIN_PORT": str(PORTS["controller-manager"])}),
    ]
    files = []
    for i, patch in enumerate(patches):
        (overlay / f"env-{i}.yaml").write_text(yaml.safe_dump(patch))
        files.append({"path": f"env-{i}.yaml"})
    (overlay / "no-job.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "kubemesh-bootstrap"}, "$patch": "delete"}))
    files.append({"path": "no-job.yaml"})
    files += [port_patch("StatefulSet", "kubemesh-etcd", PORTS["etcd"], probe_port=True),
              port_patch("Deployment", "kubemesh-apiserver", PORTS["apiserver"]),
              port_patch("StatefulSet", "kubemesh-kubelet", PORTS["kubelet"]),
              port_patch("Deployment", "kubemesh-scheduler", PORTS["scheduler"]),
              port_patch("Deployment", "kubemesh-controller-manager", PORTS["controller-manager"])]
    small = os.path.relpath(REPO / "deploy" / "overlays" / "small", overlay)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", "resources": [small],
         "patches": files}))
    return overlay


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mesh(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Mesh]:
    # The process runtime gives a container PATH, HOSTNAME and its env only: the entrypoint gets
    # this checkout on its PYTHONPATH through `env`.
    command = f"env PYTHONPATH={REPO} {sys.executable} {ENTRYPOINT}"
    spec = MeshSpec(nodes=1, runtime="process", seed=27, start_timeout=120.0, capacity="cpu=32,memory=128Gi,pods=110",
                    state_dir=tmp_path_factory.mktemp("outer"),
                    extra_args={"kubelet": ["--image-command", f"kubemesh:latest={command}"]})
    async with Mesh(spec) as started:
        yield started


def kubectl(mesh: Mesh, *args: str, input: str | None = None, timeout: float = 120) -> str:
    assert mesh.state_dir is not None
    env = {**os.environ, "KUBECONFIG": str(mesh.state_dir / "kubeconfig"), "HOME": str(mesh.state_dir)}
    out = subprocess.run([kubectl_binary(), *args], env=env, input=input, capture_output=True, text=True,
                         timeout=timeout, check=False)
    assert out.returncode == 0, f"kubectl {' '.join(args)}: {out.stderr}"
    return out.stdout


async def until(what: str, check: Any, *, within: float) -> Any:
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = await check()
            if last:
                return last
        except (ApiError, OSError) as exc:
            last = exc
        await asyncio.sleep(1.0)
    raise AssertionError(f"{what} within {within:.0f} s; last: {last!r}")


def processes_under(root: Path) -> list[str]:
    """Processes whose working directory is inside `root` (the process runtime's pods)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cwd = Path(os.readlink(proc / "cwd"))
            cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cwd.is_relative_to(root.resolve()):
            found.append(f"{proc.name}: {cmd[:200]}")
    return found


async def test_small_overlay_runs_as_processes_of_a_process_runtime_mesh(mesh: Mesh, tmp_path: Path) -> None:
    overlay = write_overlay(tmp_path)
    secret = secret_body(tmp_path / "pki")
    kubectl(mesh, "apply", "-f", "-", input=json.dumps(secret))
    kubectl(mesh, "apply", "-k", str(overlay))

    ca = tmp_path / "inner-ca.crt"
    ca.write_bytes(base64.b64decode(secret["data"]["ca.crt"]))
    inner = ApiClient(f"https://127.0.0.1:{PORTS['apiserver']}", component="test", instance="deploy-test",
                      token="inner-token", ssl_context=ssl.create_default_context(cafile=str(ca)))
    names = {f"node-{i}" for i in range(1, INNER_NODES + 1)}

    async def ready_nodes() -> set[str] | None:
        items = (await inner.list(NODES)).get("items") or []
        ready = {str(n["metadata"]["name"]) for n in items if node_is_ready(n)}
        return ready if ready == names and len(items) == INNER_NODES else None

    async with inner, mesh.client("test") as outer:
        await until("the inner cluster's 100 nodes Ready", ready_nodes, within=180)

        # Kill the kubelet host: its StatefulSet brings back a pod hosting the same nodes.
        before = json.loads(kubectl(mesh, "get", "pod", "kubemesh-kubelet-0", "-o", "json"))
        killed_at = dt.datetime.now(dt.UTC)
        kubectl(mesh, "delete", "pod", "kubemesh-kubelet-0", "--wait=true")

        async def replaced() -> bool:
            pods = (await outer.list(PODS, namespace="default",
                                     label_selector="app.kubernetes.io/component=kubelet"))["items"]
            return any(p["metadata"]["uid"] != before["metadata"]["uid"]
                       and (p.get("status") or {}).get("phase") == "Running" for p in pods)

        await until("a new kubelet host pod Running", replaced, within=120)

        async def renewed_after_kill() -> bool:
            leases = (await inner.list(LEASES, namespace="kube-node-lease")).get("items") or []
            renewed = {str(lease["metadata"]["name"]) for lease in leases
                       if dt.datetime.fromisoformat(str(lease["spec"]["renewTime"]).replace("Z", "+00:00")) > killed_at}
            return renewed == names

        await until("every node's Lease renewed by the new host", renewed_after_kill, within=120)
        assert await ready_nodes() == names, "the same nodes, and no other"

    # Delete everything: no process is left.
    kubectl(mesh, "delete", "-k", str(overlay), "--wait=true", timeout=180)
    kubectl(mesh, "delete", "secret", "kubemesh-cluster")
    assert mesh.state_dir is not None
    root = mesh.state_dir / "pods"

    async with mesh.client("test") as outer:
        async def no_pods() -> bool:
            return not (await outer.list(PODS, namespace="default"))["items"]

        await until("every pod gone", no_pods, within=120)
    async def no_process() -> bool:
        return not processes_under(root)

    await until("no process left", no_process, within=30)

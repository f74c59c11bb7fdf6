"""deploy/: the kustomize base and its overlays, as kubectl renders them and as kubemesh accepts them.

* `kubectl kustomize` (the real binary, the kustomize built into it) renders each overlay; every
  object deserializes into the official Python client's typed model of its kind, and the model
  serializes back to the very same object: no field the model does not know (the typed models drop
  unknown fields silently; kube-apiserver's strict decoding refuses them), no value of the wrong
  type, no required field missing (the models check those when built).
* Each overlay's `plan/` is what `kubemesh plan --nodes N --kustomize DIR` writes from the
  measured unit costs (replicas, nodes per kubelet host, requests and limits), and its kubelet
  hosts host at least N nodes.
* The wiring the components rely on: each Service selects the pods of its workload, every pod that
  mounts the credentials mounts the Secret the bootstrap Job publishes, each kubelet host derives
  its slice of nodes from its pod name, etcd lists as many initial members as it has replicas.
* `kubectl apply -k deploy/overlays/<overlay> --dry-run=server`, with the oldest and the newest
  installed kubectl, against a mesh with `kubemesh up`'s defaults (every component, HTTPS, a
  token): every object is accepted, and nothing is created.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import kubernetes.client as _k8s
import pytest
import pytest_asyncio
import yaml

from kubemesh.services.mesh.launching import Mesh, MeshSpec
from kubemesh.services.tools import cli

if TYPE_CHECKING:
    from conftest import RunKubectl

pytestmark = [pytest.mark.kubectl, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

k8s: Any = _k8s  # the client package is only partly annotated

REPO = Path(__file__).resolve().parent.parent.parent
OVERLAYS = ("small", "large")
PLANNED_NODES = {"small": 100, "large": 10_000}
"""The node count each overlay's plan/ was planned for."""
SECRET = "kubemesh-cluster"
CREDENTIAL_KEYS = {"token", "ca.crt", "apiserver.crt", "apiserver.key", "kubeconfig"}


def _kubectl() -> str:
    """The `kubectl` on PATH (its built-in kustomize renders `apply -k`)."""
    found = shutil.which("kubectl")
    if found is None:
        pytest.skip("no kubectl on PATH")
    return found


def render(overlay: str) -> list[dict[str, Any]]:
    """`kubectl kustomize deploy/overlays/<overlay>`: the objects `kubectl apply -k` would send."""
    out = subprocess.run([_kubectl(), "kustomize", str(REPO / "deploy" / "overlays" / overlay)],
                         capture_output=True, text=True, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def model_name(obj: dict[str, Any]) -> str:
    """The typed model of an object: `apps/v1` `StatefulSet` is `V1StatefulSet`."""
    version = str(obj["apiVersion"]).rsplit("/", 1)[-1]
    return f"{version[0].upper()}{version[1:]}{obj['kind']}"


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    return list(workload["spec"]["template"]["spec"]["containers"])


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env") or []}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_object_is_a_valid_typed_model(overlay: str) -> None:
    objects = render(overlay)
    kinds = {o["kind"] for o in objects}
    assert {"StatefulSet", "Deployment", "Service", "Job", "ServiceAccount", "Role", "RoleBinding"} <= kinds
    with k8s.ApiClient() as client:
        for obj in objects:
            name = f"{obj['kind']}/{obj['metadata']['name']}"
            model = client.deserialize(json.dumps(obj), model_name(obj), "application/json")
            assert type(model).__name__ == model_name(obj), name
            assert client.sanitize_for_serialization(model) == obj, f"{name} does not survive its typed model"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_parts_are_wired_together(overlay: str) -> None:
    objects = render(overlay)
    services = by_kind(objects, "Service")
    workloads = {**by_kind(objects, "Deployment"), **by_kind(objects, "StatefulSet")}
    for name in ("kubemesh-etcd", "kubemesh-apiserver", "kubemesh-kubelet"):
        selector = services[name]["spec"]["selector"]
        labels = workloads[name]["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), f"Service {name} selects no pod of its workload"
    for name in ("kubemesh-etcd", "kubemesh-kubelet"):
        assert workloads[name]["spec"]["serviceName"] == name

    # Every component mounts the Secret the Job publishes, through keys the Job writes.
    job = by_kind(objects, "Job")["kubemesh-bootstrap"]
    assert containers(job)[0]["args"] == ["publish-secret", SECRET]
    role = by_kind(objects, "Role")["kubemesh-bootstrap"]
    assert any(SECRET in (rule.get("resourceNames") or []) for rule in role["rules"])
    for name, workload in workloads.items():
        if name == "kubemesh-etcd":
            continue
        volumes = [v for v in workload["spec"]["template"]["spec"]["volumes"] if "secret" in v]
        assert [v["secret"]["secretName"] for v in volumes] == [SECRET], name
        assert {i["key"] for i in volumes[0]["secret"]["items"]} <= CREDENTIAL_KEYS, name
        env = env_of(containers(workload)[0])
        assert env["KUBEMESH_STATE_PROVIDED"] == "true", name
        assert env["KUBEMESH_POD_NAME"] == {"fieldRef": {"fieldPath": "metadata.name"}}, name
        if name != "kubemesh-apiserver":
            assert env["KUBEMESH_APISERVER"] == "https://kubemesh-apiserver:6443", name
    for name in ("kubemesh-scheduler", "kubemesh-controller-manager"):
        assert "--leader-elect" in containers(workloads[name])[0]["args"], name
    kubelets = workloads["kubemesh-kubelet"]
    per_host = int(env_of(containers(kubelets)[0])["KUBEMESH_NODES"])
    assert per_host * kubelets["spec"]["replicas"] >= PLANNED_NODES[overlay]

    # etcd's initial cluster names exactly its members, each at its pod's DNS name.
    etcd = workloads["kubemesh-etcd"]
    members = env_of(containers(etcd)[0])["ETCD_INITIAL_CLUSTER"].split(",")
    assert members == [f"kubemesh-etcd-{i}=http://kubemesh-etcd-{i}.kubemesh-etcd:2380"
                       for i in range(etcd["spec"]["replicas"])]
    assert env_of(containers(workloads["kubemesh-apiserver"])[0])["KUBEMESH_ETCD_ENDPOINTS"] == \
        "http://kubemesh-etcd:2379"

    # Every container asks for what it uses, and may not grow without bound.
    for name, workload in {**workloads, "kubemesh-bootstrap": job}.items():
        for container in containers(workload):
            resources = container["resources"]
            assert {"cpu", "memory"} <= set(resources["requests"]), name
            assert "memory" in resources["limits"], name


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_overlay_is_the_plan_for_its_size(overlay: str, tmp_path: Path) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert cli.main(["plan", "--nodes", str(PLANNED_NODES[overlay]), "--kustomize", str(tmp_path)]) == 0
    committed = REPO / "deploy" / "overlays" / overlay / "plan"
    assert sorted(p.name for p in committed.iterdir()) == sorted(p.name for p in tmp_path.iterdir())
    for planned in tmp_path.iterdir():
        assert (committed / planned.name).read_text() == planned.read_text(), \
            f"write deploy/overlays/{overlay}/plan/ again with `kubemesh plan --kustomize`"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mesh() -> AsyncIterator[Mesh]:
    async with Mesh(MeshSpec(seed=27, start_timeout=120.0)) as started:
        assert started.tls and started.token, "`kubemesh up` serves HTTPS with a token"
        yield started


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("overlay", OVERLAYS)
async def test_server_dry_run_accepts_every_object(mesh: Mesh, kubectl: RunKubectl, edge_kubectl_version: str,
                                                   overlay: str) -> None:
    assert mesh.token is not None
    expected = render(overlay)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return kubectl(edge_kubectl_version, *args, server=mesh.apiserver_url, token=mesh.token, ca=mesh.ca_path)

    out = await asyncio.to_thread(run, "apply", "-k", str(REPO / "deploy" / "overlays" / overlay),
                                  "--dry-run=server")
    assert out.returncode == 0, out.stderr
    accepted = re.findall(r"^(\S+) (?:created|configured) \(server dry run\)$", out.stdout, re.M)
    assert len(accepted) == len(expected), out.stdout
    # A dry run leaves nothing behind.
    left = await asyncio.to_thread(run, "get", "statefulsets,deployments,jobs,services,roles", "-o", "name",
                                   "-l", "app.kubernetes.io/part-of=kubemesh")
    assert left.returncode == 0, left.stderr
    assert left.stdout.strip() == ""

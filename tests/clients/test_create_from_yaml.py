"""`kubernetes.utils.create_from_yaml` (the official Python client) on a multi-document file.

Against a mesh with the defaults of `kubemesh up` (every component, HTTPS and a token; the
client loads the mesh's kubeconfig), a file holding a Deployment, a Service and a
ReplicationController is created; applied a second time, every object already exists, and the
`FailToCreateError` text is what the client builds from kube-apiserver's bodies: one
`Error from server (Conflict): <body>` per object, the body the 409 AlreadyExists Status as
kube-apiserver writes it (field order, `details` without a core group, `kind` the resource,
a trailing newline).

The sync client blocks: it runs in a worker thread.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kubernetes.client as _k8s
import kubernetes.config as _k8s_config
import kubernetes.utils as _k8s_utils
import pytest
import pytest_asyncio

from kubemesh.services.mesh.launching import Mesh, MeshSpec

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

# The client package is only partly annotated: use it untyped.
k8s: Any = _k8s
k8s_config: Any = _k8s_config
k8s_utils: Any = _k8s_utils

MANIFEST = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 2
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: nginx:1.27
        ports:
        - containerPort: 80
---
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector: {app: web}
  ports:
  - port: 80
    targetPort: 80
---
apiVersion: v1
kind: ReplicationController
metadata:
  name: legacy
spec:
  replicas: 1
  selector: {app: legacy}
  template:
    metadata:
      labels: {app: legacy}
    spec:
      containers:
      - name: legacy
        image: nginx:1.27
"""


@pytest_asyncio.fixture
async def mesh() -> AsyncIterator[Mesh]:
    async with Mesh(MeshSpec(seed=5, start_timeout=120.0)) as started:
        assert started.tls and started.token, "`kubemesh up` serves HTTPS with a token"
        yield started
        assert not started.crashed(), f"mesh processes crashed: {started.crashed()}"


def already_exists(resource: str, group: str, name: str) -> str:
    """The body kube-apiserver writes for a create of an object that exists (409 AlreadyExists)."""
    details: dict[str, str] = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = resource
    qualified = f"{resource}.{group}" if group else resource
    return json.dumps({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": f'{qualified} "{name}" already exists', "reason": "AlreadyExists",
                       "details": details, "code": 409}, separators=(",", ":")) + "\n"


def create_twice(kubeconfig: Path, manifest: Path) -> tuple[list[Any], str]:
    """Create the file's objects, then again: (what the first call made, the second call's error text)."""
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    with k8s.ApiClient(configuration) as api_client:
        made = k8s_utils.create_from_yaml(api_client, str(manifest), namespace="default")
        with pytest.raises(k8s_utils.FailToCreateError) as failure:
            k8s_utils.create_from_yaml(api_client, str(manifest), namespace="default")
        apps = k8s.AppsV1Api(api_client)
        core = k8s.CoreV1Api(api_client)
        assert apps.read_namespaced_deployment("web", "default").spec.replicas == 2
        assert core.read_namespaced_service("web", "default").status.load_balancer is not None
        assert core.read_namespaced_replication_controller("legacy", "default").spec.selector == {"app": "legacy"}
    return made, str(failure.value)


async def test_create_from_yaml_then_again_fails_with_kube_apiservers_bodies(mesh: Mesh, tmp_path: Path) -> None:
    manifest = tmp_path / "app.yaml"
    manifest.write_text(MANIFEST)
    made, text = await asyncio.to_thread(create_twice, mesh.kubeconfig_path, manifest)

    # One list of created objects per document, each of the client's typed model.
    kinds = [type(objs[0]).__name__ for objs in made]
    assert kinds == ["V1Deployment", "V1Service", "V1ReplicationController"], kinds
    expected = "".join(f"Error from server (Conflict): {body}" for body in (
        already_exists("deployments", "apps", "web"),
        already_exists("services", "", "web"),
        already_exists("replicationcontrollers", "", "legacy"),
    ))
    assert text == expected

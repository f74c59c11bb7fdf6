"""`kubectl rollout undo` scales the revision-1 ReplicaSet back up, as upstream, instead of making a third.

Undo copies the old ReplicaSet's template into the Deployment with `creationTimestamp: null` in its
metadata; the apiserver's typed decode drops the null (tests/apiserver/test_typed_decoding.py), so
the template hashes as it did at revision 1 and the Deployment controller finds its ReplicaSet.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from cm_mesh import MeshEnv, start_mesh

from kubemesh.services.mesh.kubectl import Kubectl

pytestmark = pytest.mark.kubectl


def versioned(minor: str) -> str:
    """The path of kubectl 1.<minor> beside the kubectl on PATH (skips when it is not there)."""
    on_path = shutil.which("kubectl")
    binary = Path(on_path).resolve().parent / f"kubectl.1.{minor}" if on_path else None
    if binary is None or not binary.exists():
        pytest.skip(f"kubectl.1.{minor} is not installed")
    return str(binary)


MANIFEST = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, labels: {app: web}}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: nginx, image: "nginx:1.25"}]
"""


@pytest.mark.parametrize("minor", ["27", "33"])
async def test_rollout_undo_scales_the_old_replica_set_back_up(minor: str) -> None:
    binary = versioned(minor)
    async for env in start_mesh(nodes=1, rate=10.0):
        env.kubectl = Kubectl(env.mesh.kubeconfig_path, binary=binary)
        await undo_story(env)


async def undo_story(env: MeshEnv) -> None:
    # From a manifest, as most users create one: its template has no creationTimestamp at all
    # (`kubectl create deployment` sends a null one, which would hide the difference).
    await env.run("apply", "-f", "-", input=MANIFEST)

    async def settled(count: int, image: str) -> list[dict[str, Any]] | None:
        sets: list[dict[str, Any]] = (await env.json("get", "replicasets", "-l", "app=web"))["items"]
        live = [r for r in sets if r["spec"].get("replicas")]
        if len(sets) == count and len(live) == 1 and \
                live[0]["spec"]["template"]["spec"]["containers"][0]["image"] == image:
            return sets
        return None

    first = await env.until(lambda: settled(1, "nginx:1.25"), within=60, what="the first ReplicaSet")
    await env.run("set", "image", "deployment/web", "nginx=nginx:1.26")
    await env.until(lambda: settled(2, "nginx:1.26"), within=60, what="the second ReplicaSet")
    await env.run("rollout", "undo", "deployment/web")
    back = await env.until(lambda: settled(2, "nginx:1.25"), within=60,
                           what="undo scaling the first ReplicaSet back up (and no third one)")
    live = next(r for r in back if r["spec"].get("replicas"))
    assert live["metadata"]["name"] == first[0]["metadata"]["name"]

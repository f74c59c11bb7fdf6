"""kubemesh's components under their own identities (`--component-identities`) and upstream's bootstrap roles.

A mesh of two nodes whose apiserver maps each component's admin-token requests to its own user
(system:kube-scheduler, system:kube-controller-manager and its controllers' ServiceAccounts,
system:node:<name>): nodes register and
turn Ready, a Deployment's pods are created, scheduled and run, and no request of a component
was refused; a ServiceAccount's token is still its own identity beside them.
"""

from __future__ import annotations

import asyncio
import time

from kubemesh.services.mesh.launching import Mesh, MeshSpec


async def test_components_run_under_their_own_identities() -> None:
    spec = MeshSpec(nodes=2, seed=5, start_timeout=120.0)  # component identities are the default
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
        # each controller writes as its own ServiceAccount (upstream's --use-service-account-credentials)
        assert {"system:serviceaccount:kube-system:deployment-controller",
                "system:serviceaccount:kube-system:replicaset-controller"} <= users, users
        assert any(str(u).startswith("system:node:") for u in users), users

        # The controller-manager, as itself, writes the aggregated ClusterRoles' rules back (upstream's
        # clusterrole-aggregation controller): a CRD author's role labelled aggregate-to-view shows up in view.
        rbac = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
        status, doc = await ep.request_json("POST", rbac, {
            "metadata": {"name": "widgets-view", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
            "rules": [{"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list"]}]})
        assert status == 201, doc
        want = {"apiGroups": ["example.com"], "resources": ["widgets"], "verbs": ["get", "list"]}
        rules: list[object] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            _, view = await ep.request_json("GET", f"{rbac}/view")
            rules = view.get("rules") or []
            if want in rules:
                break
            await asyncio.sleep(0.2)
        assert want in rules, rules
        _, admin_role = await ep.request_json("GET", f"{rbac}/admin")
        assert admin_role.get("rules"), admin_role  # admin aggregates edit's and view's sources too

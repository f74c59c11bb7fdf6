"""The issue's check: an operator one rule short gets upstream's 403, the report names the rule, its role fixes it.

A real mesh (HTTPS, admin token). `kubemesh kubeconfig --service-account ops/my-operator`
writes the operator's kubeconfig; the operator (`lease_operator.py`, kubernetes_asyncio in
its own process) runs under a ClusterRole that lacks `list` on leases. It is refused with
kube-apiserver's wording; `kubemesh rbac report` lists the denied request and the rule it
needed, and writes the minimal Role. With that Role bound instead of the ClusterRole, the same
operator runs cleanly and the report of the second run lists nothing denied.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import yaml
from clientkit import HERE, kubeconfig_env, start_mesh

from kubemesh.services.mesh.launching import Mesh

NS = "ops"
USER = f"system:serviceaccount:{NS}:my-operator"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
SHORT_ROLE = {"metadata": {"name": "my-operator"}, "rules": [
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "create"]},
]}


def kubemesh(mesh: Mesh, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kubemesh", *args, "--state-dir", str(mesh.state_dir)],
                          capture_output=True, text=True, timeout=60, check=False)


def operator(kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(HERE / "lease_operator.py"), NS], env=kubeconfig_env(kubeconfig),
                          capture_output=True, text=True, timeout=60, check=False)


async def admin(mesh: Mesh, method: str, path: str, body: object = None) -> object:
    status, doc = await mesh.endpoint.request_json(method, path, body)
    assert status in (200, 201), (path, status, doc)
    return doc


async def test_operator_short_of_list_leases_then_runs_with_the_generated_role(tmp_path: Path) -> None:
    async with start_mesh() as mesh:
        kc = tmp_path / "operator.kubeconfig"
        made = await asyncio.to_thread(kubemesh, mesh, "kubeconfig", "--service-account", f"{NS}/my-operator",
                                       "-o", str(kc))
        assert made.returncode == 0, made.stderr
        await admin(mesh, "POST", f"{RBAC}/clusterroles", SHORT_ROLE)
        await admin(mesh, "POST", f"{RBAC}/clusterrolebindings", {
            "metadata": {"name": "my-operator"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "my-operator"},
            "subjects": [{"kind": "ServiceAccount", "name": "my-operator", "namespace": NS}]})

        first = await asyncio.to_thread(operator, kc)
        assert first.returncode == 3, first.stdout + first.stderr
        assert first.stderr.strip() == (
            f'list leases: leases.coordination.k8s.io is forbidden: User "{USER}" cannot list resource "leases" '
            f'in API group "coordination.k8s.io" in the namespace "{NS}"')

        role_yaml = tmp_path / "role.yaml"
        report = await asyncio.to_thread(kubemesh, mesh, "rbac", "report", "--user", USER, "--role-yaml",
                                         str(role_yaml))
        assert report.returncode == 0, report.stderr
        text = report.stdout
        denied = text.split("denied (the rule each needed):\n", 1)[1].split("\n\n", 1)[0]
        assert denied.strip() == "{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [list]}", text
        assert "DENIED   list" in text
        role, binding = list(yaml.safe_load_all(role_yaml.read_text()))
        assert (role["kind"], role["metadata"]) == ("Role", {"name": "my-operator-least-privilege", "namespace": NS})
        assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "list"]} \
            in role["rules"], role
        assert {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"],
                "resourceNames": ["my-operator"]} in role["rules"], role
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "my-operator", "namespace": NS}]

        # the generated Role instead of the short ClusterRole
        await admin(mesh, "DELETE", f"{RBAC}/clusterrolebindings/my-operator")
        await admin(mesh, "POST", f"{RBAC}/namespaces/{NS}/roles", role)
        await admin(mesh, "POST", f"{RBAC}/namespaces/{NS}/rolebindings", binding)
        since = await mesh.endpoint.history_last_index()
        second = await asyncio.to_thread(operator, kc)
        assert (second.returncode, second.stderr) == (0, ""), second.stdout + second.stderr
        again = await asyncio.to_thread(kubemesh, mesh, "rbac", "report", "--user", USER, "--since", str(since))
        assert again.returncode == 0, again.stderr
        assert "denied (the rule each needed):\n  (none)" in again.stdout, again.stdout
        assert "DENIED" not in again.stdout

"""Namespace deletion as kube-apiserver does it, without a controller-manager: Terminating until finalized.

The namespace controller's part (deleting the content, then removing the `kubernetes`
finalizer) is played here by the test through `namespaces/{name}/finalize`; the
controller-manager's own tests run the real one (tests/controller_manager/test_cm_namespaces.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from restkit import Rest

if TYPE_CHECKING:
    from conftest import ApiServer, RunKubectl

NS = "/api/v1/namespaces"


@pytest.mark.parametrize("name", ["default", "kube-system", "kube-public", "kube-node-lease"])
async def test_system_namespaces_cannot_be_deleted(rest: Rest, name: str) -> None:
    status, doc = await rest.call("DELETE", f"{NS}/{name}")
    assert status == 403 and doc["reason"] == "Forbidden", doc
    assert doc["message"] == f'namespaces "{name}" is forbidden: this namespace may not be deleted'
    assert (await rest.ok("GET", f"{NS}/{name}"))["status"]["phase"] == "Active"


async def test_deleted_namespace_is_terminating_until_finalized(rest: Rest) -> None:
    created = await rest.ok("POST", NS, {"metadata": {"name": "team"}})
    assert created["spec"]["finalizers"] == ["kubernetes"] and created["status"]["phase"] == "Active"
    await rest.ok("POST", f"{NS}/team/configmaps", {"metadata": {"name": "c"}, "data": {"a": "b"}})
    deleted = await rest.ok("DELETE", f"{NS}/team")
    assert deleted["status"]["phase"] == "Terminating" and deleted["metadata"]["deletionTimestamp"]
    # Nothing deletes the content here: the namespace and its configmap stay.
    assert (await rest.ok("GET", f"{NS}/team"))["status"]["phase"] == "Terminating"
    assert (await rest.ok("GET", f"{NS}/team/configmaps/c"))["data"] == {"a": "b"}
    status, doc = await rest.call("POST", f"{NS}/team/configmaps", {"metadata": {"name": "late"}})
    assert status == 403, doc
    assert doc["message"] == ('configmaps "late" is forbidden: unable to create new content in namespace team '
                              "because it is being terminated")
    assert doc["details"]["causes"] == [{"reason": "NamespaceTerminating", "field": "metadata.namespace",
                                         "message": "namespace team is being terminated"}]
    # A second delete changes nothing; status writes do not end it either.
    again = await rest.ok("DELETE", f"{NS}/team")
    assert again["metadata"]["deletionTimestamp"] == deleted["metadata"]["deletionTimestamp"]
    ns = await rest.ok("GET", f"{NS}/team")
    await rest.ok("PUT", f"{NS}/team/status", {**ns, "status": {**ns["status"], "conditions": [
        {"type": "NamespaceContentRemaining", "status": "True", "reason": "SomeResourcesRemain",
         "message": "Some resources are remaining: configmaps. has 1 resource instances",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
    assert await rest.status_of("GET", f"{NS}/team") == 200
    # The namespace controller's last step: the finalizer goes, and so does the namespace.
    ns = await rest.ok("GET", f"{NS}/team")
    await rest.ok("PUT", f"{NS}/team/finalize", {**ns, "spec": {"finalizers": []}})
    assert await rest.status_of("GET", f"{NS}/team") == 404


async def test_every_new_namespace_gets_the_kubernetes_finalizer(rest: Rest) -> None:
    for name, spec in (("bare", {}), ("empty", {"finalizers": []}), ("mine", {"finalizers": ["example.com/x"]})):
        created = await rest.ok("POST", NS, {"metadata": {"name": name}, "spec": spec})
        assert "kubernetes" in created["spec"]["finalizers"], created
    assert (await rest.ok("GET", f"{NS}/mine"))["spec"]["finalizers"] == ["example.com/x", "kubernetes"]
    await rest.ok("DELETE", f"{NS}/bare")
    assert (await rest.ok("GET", f"{NS}/bare"))["status"]["phase"] == "Terminating"


async def test_kubectl_delete_default_namespace_is_forbidden(apiserver: ApiServer, kubectl: RunKubectl,
                                                             edge_kubectl_version: str) -> None:
    out = kubectl(edge_kubectl_version, "delete", "namespace", "default", server=apiserver.url)
    assert out.returncode != 0
    assert 'namespaces "default" is forbidden: this namespace may not be deleted' in out.stderr, out.stderr
    can = kubectl(edge_kubectl_version, "auth", "can-i", "create", "pods", server=apiserver.url)
    assert can.returncode == 0 and can.stdout.strip() == "yes", (can.stdout, can.stderr)

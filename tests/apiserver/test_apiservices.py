"""APIServices for the group versions the apiserver serves, as kube-aggregator registers them (real apiserver).

Every served group version has its `<version>.<group>` APIService, Available with reason Local;
a CRD's group version gets one while it is served and loses it after; a deleted automanaged one
comes back. `kubectl get apiservices` prints them as on a cluster, and the official client's
typed model reads the list. RBAC objects' names are path segments (`system:...`), not DNS names.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import kubernetes
import pytest
from restkit import Json, Rest

from kubemesh.services.model.kinds import KindTable

if TYPE_CHECKING:  # conftest is never imported at run time (see tests/conftest.py)
    from conftest import ApiServer, RunKubectl

APISERVICES = "/apis/apiregistration.k8s.io/v1/apiservices"
CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
AUTOMANAGED = "kube-aggregator.kubernetes.io/automanaged"


def served_names() -> set[str]:
    return {f"{v}.{g}" for g, versions in KindTable().group_versions().items() for v in versions}


async def names(rest: Rest) -> dict[str, Json]:
    return {o["metadata"]["name"]: o for o in (await rest.ok("GET", APISERVICES))["items"]}


async def test_every_served_group_version_has_a_local_available_api_service(rest: Rest) -> None:
    found = await names(rest)
    assert served_names() <= set(found), served_names() - set(found)
    core = found["v1."]
    assert core["spec"] == {"group": "", "version": "v1", "groupPriorityMinimum": 18000, "versionPriority": 1}
    assert core["metadata"]["labels"] == {AUTOMANAGED: "onstart"}
    (available,) = core["status"]["conditions"]
    assert {k: available[k] for k in ("type", "status", "reason", "message")} == {
        "type": "Available", "status": "True", "reason": "Local",
        "message": "Local APIServices are always available"}
    assert found["v1.apps"]["spec"]["groupPriorityMinimum"] > found["v1.batch"]["spec"]["groupPriorityMinimum"]


async def test_a_crd_group_version_is_registered_while_served(rest: Rest) -> None:
    crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
           "metadata": {"name": "gizmos.toys.example.com"},
           "spec": {"group": "toys.example.com", "scope": "Namespaced",
                    "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
                    "versions": [{"name": "v1alpha1", "served": True, "storage": True, "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}}
    await rest.ok("POST", CRDS, crd)
    registered = (await names(rest))["v1alpha1.toys.example.com"]
    assert registered["metadata"]["labels"] == {AUTOMANAGED: "true"}
    assert registered["spec"] == {"group": "toys.example.com", "version": "v1alpha1",
                                  "groupPriorityMinimum": 1000, "versionPriority": 100}
    await rest.ok("DELETE", f"{CRDS}/gizmos.toys.example.com")
    for _ in range(100):
        if "v1alpha1.toys.example.com" not in await names(rest):
            break
        await asyncio.sleep(0.05)
    assert "v1alpha1.toys.example.com" not in await names(rest)


async def test_a_deleted_automanaged_api_service_comes_back_and_a_users_stays_as_given(rest: Rest) -> None:
    await rest.ok("DELETE", f"{APISERVICES}/v1.apps")
    again = await rest.ok("GET", f"{APISERVICES}/v1.apps")
    assert again["status"]["conditions"][0]["status"] == "True"
    mine = {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
            "metadata": {"name": "v1beta1.metrics.example.com"},
            "spec": {"group": "metrics.example.com", "version": "v1beta1", "groupPriorityMinimum": 100,
                     "versionPriority": 100, "service": {"namespace": "kube-system", "name": "metrics"}}}
    await rest.ok("POST", APISERVICES, mine)
    await rest.ok("DELETE", f"{APISERVICES}/v1beta1.metrics.example.com")
    assert await rest.status_of("GET", f"{APISERVICES}/v1beta1.metrics.example.com") == 404
    status, bad = await rest.call("POST", APISERVICES, {**mine, "metadata": {"name": "nodots"}})
    assert status == 422
    assert 'metadata.name: Invalid value: "nodots": must be in the form: <version>.<group>' in bad["message"]


async def test_rbac_names_are_path_segments(rest: Rest) -> None:
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "system:aggregate-to-gizmo-edit"}, "rules": []}
    await rest.ok("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    status, dots = await rest.call("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles",
                                   {**role, "metadata": {"name": ".."}})
    assert status == 422
    assert "metadata.name: Invalid value: \"..\": may not be '..'" in dots["message"]


async def test_the_official_client_reads_api_services_typed(apiserver: ApiServer) -> None:
    def read() -> list[Any]:
        config = kubernetes.client.Configuration()
        config.host = apiserver.url
        config.client_side_validation = True
        with kubernetes.client.ApiClient(config) as api:
            return list(kubernetes.client.ApiregistrationV1Api(api).list_api_service().items)

    items = await asyncio.to_thread(read)
    by_name = {i.metadata.name: i for i in items}
    assert by_name["v1.apps"].status.conditions[0].reason == "Local"


@pytest.mark.kubectl
async def test_kubectl_get_apiservices(apiserver: ApiServer, edge_kubectl_version: str, kubectl: RunKubectl) -> None:
    res = await asyncio.to_thread(kubectl, edge_kubectl_version, "get", "apiservices", server=apiserver.url)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split() == ["NAME", "SERVICE", "AVAILABLE", "AGE"]
    rows = {ln.split()[0]: ln.split()[1:3] for ln in lines[1:]}
    assert rows["v1."] == ["Local", "True"] and rows["v1.apps"] == ["Local", "True"]

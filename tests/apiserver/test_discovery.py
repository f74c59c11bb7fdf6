from __future__ import annotations

from typing import Any

import orjson
import pytest
from documents import (
    aggregated_discovery,
    api_group,
    api_group_list,
    api_resource_list,
    api_versions,
    served_group_versions,
)

from kubemesh.apiserver.discovery import (
    AGGREGATED_V2,
    AGGREGATED_V2BETA1,
    GIT_VERSION,
    aggregated_media_type,
    parse_accept,
    version_info,
)
from kubemesh.services.model.kinds import KINDS, Obj

KUBECTL_130_ACCEPT = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
)
KUBECTL_127_ACCEPT = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"


def _by_name(resource_list: Obj | None) -> dict[str, Obj]:
    assert resource_list is not None
    return {r["name"]: r for r in resource_list["resources"]}


# -- /version ----------------------------------------------------------------------------------


def test_version_info_is_a_kubernetes_version() -> None:
    info = version_info()
    assert info["major"] == "1"
    assert info["minor"] == "30"
    assert info["gitVersion"] == GIT_VERSION == "v1.30.0-kubemesh"
    assert info["platform"] == "linux/amd64"
    for key in ("gitCommit", "gitTreeState", "buildDate", "goVersion", "compiler"):
        assert isinstance(info[key], str) and info[key]


def test_version_minor_keeps_kubectl_127_to_133_within_three_minors() -> None:
    minor = int(version_info()["minor"])
    assert max(abs(client - minor) for client in range(27, 34)) == 3


# -- legacy discovery --------------------------------------------------------------------------


def test_api_versions() -> None:
    doc = api_versions(server_address="127.0.0.1:6443")
    assert doc == {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}],
    }
    assert api_versions(server_address="10.0.0.1:443")["serverAddressByClientCIDRs"][0]["serverAddress"] == (
        "10.0.0.1:443"
    )


def test_api_group_list() -> None:
    doc = api_group_list()
    assert doc["kind"] == "APIGroupList"
    assert doc["apiVersion"] == "v1"
    groups = {g["name"]: g for g in doc["groups"]}
    assert {"apps", "coordination.k8s.io", "scheduling.k8s.io", "policy"} <= set(groups)
    assert "" not in groups
    assert groups["apps"]["versions"] == [{"groupVersion": "apps/v1", "version": "v1"}]
    assert groups["apps"]["preferredVersion"] == {"groupVersion": "apps/v1", "version": "v1"}


def test_groups_without_resources_are_not_advertised() -> None:
    # client-go fails legacy discovery on an empty APIResourceList ("received empty response").
    # autoscaling serves v2 (preferred) and v1 (the HorizontalPodAutoscaler kubectl < 1.32 creates,
    # stored at v2); its v2beta versions and the retired groups are absent.
    assert served_group_versions()["autoscaling"] == ("v2", "v1")
    autoscaling = next(g for g in api_group_list()["groups"] if g["name"] == "autoscaling")
    assert autoscaling["preferredVersion"] == {"groupVersion": "autoscaling/v2", "version": "v2"}
    assert api_resource_list("autoscaling", "v2beta2") is None
    assert "extensions" not in {g["name"] for g in api_group_list()["groups"]}
    for group, versions in served_group_versions().items():
        for version in versions:
            doc = api_resource_list(group, version)
            assert doc is not None and doc["resources"]


def test_api_group() -> None:
    doc = api_group("policy")
    assert doc is not None
    assert doc["kind"] == "APIGroup"
    assert doc["name"] == "policy"
    assert doc["preferredVersion"] == {"groupVersion": "policy/v1", "version": "v1"}
    assert api_group("") is None
    assert api_group("nope.example.com") is None


def test_core_resource_list() -> None:
    doc = api_resource_list("", "v1")
    assert doc is not None
    assert doc["kind"] == "APIResourceList"
    assert doc["groupVersion"] == "v1"
    res = _by_name(doc)
    assert res["pods"] == {
        "name": "pods",
        "singularName": "pod",
        "namespaced": True,
        "kind": "Pod",
        "verbs": ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"],
        "shortNames": ["po"],
        "categories": ["all"],
    }
    assert res["pods/eviction"] == {
        "name": "pods/eviction",
        "singularName": "",
        "namespaced": True,
        "group": "policy",
        "version": "v1",
        "kind": "Eviction",
        "verbs": ["create"],
    }
    assert res["pods/binding"] == {
        "name": "pods/binding",
        "singularName": "",
        "namespaced": True,
        "kind": "Binding",
        "verbs": ["create"],
    }
    assert res["pods/status"]["verbs"] == ["get", "patch", "update"]
    assert res["pods/log"] == {"name": "pods/log", "singularName": "", "namespaced": True, "kind": "Pod",
                               "verbs": ["get"]}
    for sub, kind in (("exec", "PodExecOptions"), ("attach", "PodAttachOptions"),
                      ("portforward", "PodPortForwardOptions")):
        assert res[f"pods/{sub}"]["kind"] == kind and res[f"pods/{sub}"]["verbs"] == ["create", "get"]
    assert "group" not in res["pods/status"]
    assert res["nodes"]["namespaced"] is False
    assert res["nodes"]["shortNames"] == ["no"]
    assert "categories" not in res["nodes"]
    assert res["namespaces"]["shortNames"] == ["ns"]
    assert res["events"]["shortNames"] == ["ev"]
    assert res["bindings"]["verbs"] == ["create"]
    names = [r["name"] for r in doc["resources"]]
    assert names == sorted(names)


def test_apps_resource_list() -> None:
    res = _by_name(api_resource_list("apps", "v1"))
    assert res["deployments"]["shortNames"] == ["deploy"]
    assert res["deployments"]["categories"] == ["all"]
    assert res["deployments/scale"] == {
        "name": "deployments/scale",
        "singularName": "",
        "namespaced": True,
        "group": "autoscaling",
        "version": "v1",
        "kind": "Scale",
        "verbs": ["get", "patch", "update"],
    }
    assert res["replicasets"]["shortNames"] == ["rs"]
    assert res["daemonsets"]["shortNames"] == ["ds"]
    assert res["deployments/status"]["kind"] == "Deployment"


def test_unknown_group_versions() -> None:
    assert api_resource_list("apps", "v2") is None
    assert api_resource_list("", "v2") is None
    assert api_resource_list("nope", "v1") is None


def test_every_registered_kind_and_subresource_is_discoverable() -> None:
    for kind in KINDS:
        res = _by_name(api_resource_list(kind.group, kind.version))
        entry = res[kind.plural]
        assert entry["kind"] == kind.kind
        assert entry["namespaced"] == kind.namespaced
        assert entry.get("shortNames", []) == list(kind.short_names)
        assert entry.get("categories", []) == list(kind.categories)
        assert sorted(entry["verbs"]) == sorted(kind.verbs)
        for sub in kind.subresources:
            sub_entry = res[f"{kind.plural}/{sub.name}"]
            assert sub_entry["kind"] == sub.kind
            assert sub_entry.get("group") == sub.group


def test_documents_are_cached_and_json() -> None:
    assert api_group_list() is api_group_list()
    assert api_resource_list("", "v1") is api_resource_list("", "v1")
    assert version_info() is version_info()
    for doc in (
        api_group_list(),
        api_resource_list("", "v1"),
        aggregated_discovery(core=False, media_type=AGGREGATED_V2),
    ):
        assert orjson.loads(orjson.dumps(doc)) == doc


# -- Accept negotiation ------------------------------------------------------------------------


def test_parse_accept_orders_by_q_then_client_order() -> None:
    ranges = parse_accept("text/plain;q=0.5, application/json;as=Table;v=v1;g=meta.k8s.io, */*;q=0")
    assert [r.mime for r in ranges] == ["application/json", "text/plain"]
    assert ranges[0].params == {"as": "Table", "v": "v1", "g": "meta.k8s.io"}
    assert parse_accept(None) == []
    assert parse_accept("garbage") == []


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (KUBECTL_130_ACCEPT, AGGREGATED_V2),
        (KUBECTL_127_ACCEPT, AGGREGATED_V2BETA1),
        ("application/json", None),
        ("application/json, */*", None),
        (None, None),
        ("", None),
        # A client preferring plain JSON gets legacy discovery.
        ("application/json," + KUBECTL_130_ACCEPT, None),
        # Protobuf aggregated discovery is not served: the next choice wins.
        (
            "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
            + KUBECTL_130_ACCEPT,
            AGGREGATED_V2,
        ),
        # Parameter order, spacing and q values.
        ("application/json; as=APIGroupDiscoveryList; v=v2beta1; g=apidiscovery.k8s.io", AGGREGATED_V2BETA1),
        (
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList;q=0.5,"
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList",
            AGGREGATED_V2BETA1,
        ),
        ("application/json;g=apidiscovery.k8s.io;v=v3;as=APIGroupDiscoveryList", None),
    ],
)
def test_aggregated_media_type(accept: str | None, expected: str | None) -> None:
    assert aggregated_media_type(accept) == expected


def test_aggregated_content_types_are_exact() -> None:
    assert AGGREGATED_V2 == "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    assert AGGREGATED_V2BETA1 == "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"


# -- aggregated discovery ----------------------------------------------------------------------


def _agg_resources(doc: Obj, group: str, version: str = "v1") -> dict[str, Obj]:
    for item in doc["items"]:
        if item["metadata"]["name"] == group:
            for v in item["versions"]:
                if v["version"] == version:
                    return {r["resource"]: r for r in v["resources"]}
    raise AssertionError(f"{group}/{version} missing")


def test_aggregated_core() -> None:
    doc = aggregated_discovery(core=True, media_type=AGGREGATED_V2)
    assert doc["kind"] == "APIGroupDiscoveryList"
    assert doc["apiVersion"] == "apidiscovery.k8s.io/v2"
    assert doc["metadata"] == {}
    assert [i["metadata"]["name"] for i in doc["items"]] == [""]
    assert doc["items"][0]["versions"][0]["freshness"] == "Current"
    pods = _agg_resources(doc, "")["pods"]
    assert pods["responseKind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert pods["scope"] == "Namespaced"
    assert pods["singularResource"] == "pod"
    assert pods["shortNames"] == ["po"]
    assert pods["categories"] == ["all"]
    subs = {s["subresource"]: s for s in pods["subresources"]}
    assert subs["eviction"] == {
        "subresource": "eviction",
        "responseKind": {"group": "policy", "version": "v1", "kind": "Eviction"},
        "verbs": ["create"],
    }
    assert subs["binding"]["responseKind"] == {"group": "", "version": "v1", "kind": "Binding"}
    assert subs["status"]["responseKind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert _agg_resources(doc, "")["nodes"]["scope"] == "Cluster"


def test_aggregated_groups_v2beta1() -> None:
    v2 = aggregated_discovery(core=False, media_type=AGGREGATED_V2)
    beta = aggregated_discovery(core=False, media_type=AGGREGATED_V2BETA1)
    assert beta["apiVersion"] == "apidiscovery.k8s.io/v2beta1"
    assert {**beta, "apiVersion": v2["apiVersion"]} == v2
    assert "" not in [i["metadata"]["name"] for i in v2["items"]]
    deployments = _agg_resources(v2, "apps")["deployments"]
    scale = next(s for s in deployments["subresources"] if s["subresource"] == "scale")
    assert scale["responseKind"] == {"group": "autoscaling", "version": "v1", "kind": "Scale"}


def test_aggregated_rejects_other_media_types() -> None:
    with pytest.raises(ValueError, match="aggregated"):
        aggregated_discovery(core=True, media_type="application/json")


def test_aggregated_and_legacy_agree() -> None:
    for core in (True, False):
        doc = aggregated_discovery(core=core, media_type=AGGREGATED_V2)
        for item in doc["items"]:
            group = item["metadata"]["name"]
            for v in item["versions"]:
                legacy = _by_name(api_resource_list(group, v["version"]))
                names: set[str] = set()
                for r in v["resources"]:
                    names.add(r["resource"])
                    legacy_entry: dict[str, Any] = legacy[r["resource"]]
                    assert r["verbs"] == legacy_entry["verbs"]
                    names.update(f"{r['resource']}/{s['subresource']}" for s in r.get("subresources", []))
                assert names == set(legacy)

"""CustomResourceDefinitions against a real apiserver process, over HTTP, as kube-apiserver serves them.

A CRD is checked (422 with every field), established (conditions, accepted names, stored
versions), served at once at every served version with every verb, watch, selectors,
subresources and patch type, and cleaned up on delete (its objects go first, finalizers
honoured, watches end). Its objects are pruned, defaulted and validated by its schema, and
nothing a refused write carried reaches the store. CRDs and their objects survive a restart.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from restkit import Json, Rest

if TYPE_CHECKING:
    from conftest import StartApiServer

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
WIDGETS = "/apis/example.com/v1/namespaces/default/widgets"


def widget_crd(*, versions: list[Json] | None = None, name: str = "widgets.example.com",
               plural: str = "widgets", group: str = "example.com", kind: str = "Widget") -> Json:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "required": ["size"],
                "properties": {
                    "size": {"type": "integer", "minimum": 1, "maximum": 10},
                    "color": {"type": "string", "enum": ["red", "green", "blue"], "default": "red"},
                    "replicas": {"type": "integer", "default": 1},
                    "tags": {"type": "array", "items": {"type": "string"}},
                },
            },
            "status": {
                "type": "object",
                "properties": {"replicas": {"type": "integer"}, "phase": {"type": "string"},
                               "selector": {"type": "string"}},
            },
        },
    }
    version = {
        "name": "v1", "served": True, "storage": True,
        "schema": {"openAPIV3Schema": schema},
        "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas",
                                                 "statusReplicasPath": ".status.replicas",
                                                 "labelSelectorPath": ".status.selector"}},
        "additionalPrinterColumns": [
            {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
            {"name": "Color", "type": "string", "jsonPath": ".spec.color"},
            {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
        ],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "shortNames": ["wd"],
                      "categories": ["all"]},
            "versions": versions if versions is not None else [version],
        },
    }


def widget(name: str, **spec: Any) -> Json:
    return {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"size": 3, **spec}}


async def established(rest: Rest, crd: Json) -> Json:
    await rest.ok("POST", CRDS, crd)
    doc = await rest.ok("GET", f"{CRDS}/{crd['metadata']['name']}")
    conditions = {c["type"]: c for c in doc["status"]["conditions"]}
    assert conditions["Established"]["status"] == "True", doc["status"]
    return doc


# -- establishing ------------------------------------------------------------------------------


async def test_crd_is_established_and_served_at_once(rest: Rest) -> None:
    doc = await established(rest, widget_crd())
    conditions = {c["type"]: c for c in doc["status"]["conditions"]}
    assert conditions["NamesAccepted"] == {**conditions["NamesAccepted"], "status": "True", "reason": "NoConflicts"}
    assert doc["status"]["acceptedNames"]["kind"] == "Widget"
    assert doc["status"]["acceptedNames"]["listKind"] == "WidgetList"  # defaulted
    assert doc["status"]["storedVersions"] == ["v1"]
    assert doc["spec"]["conversion"] == {"strategy": "None"}

    resources = await rest.ok("GET", "/apis/example.com/v1")
    names = {r["name"]: r for r in resources["resources"]}
    assert set(names) == {"widgets", "widgets/status", "widgets/scale"}
    assert names["widgets"]["shortNames"] == ["wd"] and names["widgets"]["categories"] == ["all"]
    assert names["widgets/scale"]["group"] == "autoscaling"
    groups = await rest.ok("GET", "/apis")
    assert any(g["name"] == "example.com" for g in groups["groups"])
    aggregated = await rest.ok("GET", "/apis", accept="application/json;g=apidiscovery.k8s.io;v=v2;"
                                                      "as=APIGroupDiscoveryList")
    entry = next(g for g in aggregated["items"] if g["metadata"]["name"] == "example.com")
    assert entry["versions"][0]["resources"][0]["resource"] == "widgets"
    index = await rest.ok("GET", "/openapi/v3")
    assert "apis/example.com/v1" in index["paths"]
    v3 = await rest.ok("GET", "/openapi/v3/apis/example.com/v1")
    schema = v3["components"]["schemas"]["com.example.v1.Widget"]
    assert schema["x-kubernetes-group-version-kind"] == [{"group": "example.com", "version": "v1", "kind": "Widget"}]
    assert schema["properties"]["spec"]["properties"]["size"]["maximum"] == 10


async def test_custom_objects_every_verb(rest: Rest) -> None:
    await established(rest, widget_crd())
    created = await rest.ok("POST", WIDGETS, {**widget("w1"), "spec": {"size": 3, "bogus": 1}})
    assert created["spec"] == {"size": 3, "color": "red", "replicas": 1}  # pruned, defaulted
    assert 'unknown field "spec.bogus"' in " ".join(rest.last_warnings)
    assert created["metadata"]["generation"] == 1 and created["apiVersion"] == "example.com/v1"
    await rest.ok("POST", WIDGETS, widget("w2", color="blue"))
    listed = await rest.ok("GET", WIDGETS, params={"labelSelector": "app=w2"})
    assert listed["kind"] == "WidgetList" and [i["metadata"]["name"] for i in listed["items"]] == ["w2"]
    by_name = await rest.ok("GET", WIDGETS, params={"fieldSelector": "metadata.name=w1"})
    assert [i["metadata"]["name"] for i in by_name["items"]] == ["w1"]
    all_ns = await rest.ok("GET", "/apis/example.com/v1/widgets")
    assert len(all_ns["items"]) == 2

    merged = await rest.ok("PATCH", f"{WIDGETS}/w1", {"spec": {"size": 4}}, ctype="application/merge-patch+json")
    assert merged["spec"]["size"] == 4 and merged["metadata"]["generation"] == 2
    jsonp = await rest.ok("PATCH", f"{WIDGETS}/w1", [{"op": "replace", "path": "/spec/color", "value": "green"}],
                          ctype="application/json-patch+json")
    assert jsonp["spec"]["color"] == "green" and jsonp["metadata"]["generation"] == 3
    status, doc = await rest.call("PATCH", f"{WIDGETS}/w1", {"spec": {"size": 5}},
                                  ctype="application/strategic-merge-patch+json")
    assert status == 415 and doc["reason"] == "UnsupportedMediaType", doc
    applied = await rest.ok("PATCH", f"{WIDGETS}/w3", {**widget("w3"), "spec": {"size": 2}},
                            ctype="application/apply-patch+yaml", params={"fieldManager": "test"})
    assert applied["spec"]["size"] == 2

    # status: only through the subresource; it leaves spec and generation alone
    with_status = await rest.ok("PUT", f"{WIDGETS}/w1/status",
                                {**jsonp, "status": {"replicas": 2, "phase": "Ready"}, "spec": {"size": 9}})
    assert with_status["status"]["phase"] == "Ready" and with_status["spec"]["size"] == 4
    assert with_status["metadata"]["generation"] == 3
    ignored = await rest.ok("PATCH", f"{WIDGETS}/w1", {"status": {"phase": "Lost"}},
                            ctype="application/merge-patch+json")
    assert ignored["status"]["phase"] == "Ready"

    await rest.ok("DELETE", f"{WIDGETS}/w2")
    assert await rest.status_of("GET", f"{WIDGETS}/w2") == 404


async def test_scale_subresource(rest: Rest) -> None:
    await established(rest, widget_crd())
    await rest.ok("POST", WIDGETS, widget("w1"))
    scale = await rest.ok("GET", f"{WIDGETS}/w1/scale")
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1"
    assert scale["spec"]["replicas"] == 1
    scale["spec"]["replicas"] = 5
    await rest.ok("PUT", f"{WIDGETS}/w1/scale", scale)
    assert (await rest.ok("GET", f"{WIDGETS}/w1"))["spec"]["replicas"] == 5
    await rest.ok("PATCH", f"{WIDGETS}/w1/scale", {"spec": {"replicas": 2}}, ctype="application/merge-patch+json")
    assert (await rest.ok("GET", f"{WIDGETS}/w1"))["spec"]["replicas"] == 2


async def test_invalid_objects_leave_the_store_unchanged(rest: Rest) -> None:
    await established(rest, widget_crd())
    status, doc = await rest.call("POST", WIDGETS, widget("bad", size=20, color="pink"))
    assert status == 422 and doc["reason"] == "Invalid", doc
    fields = {c["field"] for c in doc["details"]["causes"]}
    assert {"spec.size", "spec.color"} <= fields, doc
    assert doc["message"].startswith('Widget.example.com "bad" is invalid: ['), doc["message"]
    assert await rest.status_of("GET", f"{WIDGETS}/bad") == 404
    status, doc = await rest.call("POST", WIDGETS, {**widget("missing"), "spec": {}})
    assert status == 422 and any(c["field"] == "spec.size" and c["reason"] == "FieldValueRequired"
                                 for c in doc["details"]["causes"]), doc

    good = await rest.ok("POST", WIDGETS, widget("good"))
    status, doc = await rest.call("PATCH", f"{WIDGETS}/good", {"spec": {"size": "big"}},
                                  ctype="application/merge-patch+json")
    assert status == 422, doc
    assert await rest.ok("GET", f"{WIDGETS}/good") == good

    status, doc = await rest.call("POST", WIDGETS, {**widget("strict"), "spec": {"size": 1, "nope": True}},
                                  params={"fieldValidation": "Strict"})
    assert status == 400 and 'unknown field "spec.nope"' in doc["message"], doc
    assert await rest.status_of("GET", f"{WIDGETS}/strict") == 404


async def test_watch_sees_custom_objects_and_ends_when_the_crd_goes(rest: Rest) -> None:
    await established(rest, widget_crd())
    watch = asyncio.create_task(rest.watch_lines(WIDGETS, until=10, within=20))
    await asyncio.sleep(0.3)
    await rest.ok("POST", WIDGETS, widget("w1"))
    await rest.ok("PATCH", f"{WIDGETS}/w1", {"spec": {"size": 2}}, ctype="application/merge-patch+json")
    await rest.ok("DELETE", f"{CRDS}/widgets.example.com")
    events = await watch  # ends when the CRD is gone, well before 10 events
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"], events
    assert await rest.status_of("GET", f"{CRDS}/widgets.example.com") == 404
    assert await rest.status_of("GET", WIDGETS) == 404
    assert "example.com" not in {g["name"] for g in (await rest.ok("GET", "/apis"))["groups"]}


async def test_crd_deletion_waits_for_object_finalizers(rest: Rest) -> None:
    await established(rest, widget_crd())
    held = widget("held")
    held["metadata"]["finalizers"] = ["example.com/keep"]
    await rest.ok("POST", WIDGETS, held)
    await rest.ok("POST", WIDGETS, widget("free"))
    await rest.ok("DELETE", f"{CRDS}/widgets.example.com")
    crd = await rest.ok("GET", f"{CRDS}/widgets.example.com")
    assert crd["metadata"]["deletionTimestamp"]
    assert "customresourcecleanup.apiextensions.k8s.io" in crd["metadata"]["finalizers"]
    terminating = next(c for c in crd["status"]["conditions"] if c["type"] == "Terminating")
    assert terminating["status"] == "True" and terminating["reason"] == "InstanceDeletionInProgress"
    assert await rest.status_of("GET", f"{WIDGETS}/free") == 404
    obj = await rest.ok("GET", f"{WIDGETS}/held")
    assert obj["metadata"]["deletionTimestamp"]
    status, doc = await rest.call("POST", WIDGETS, widget("late"))
    assert status == 405 and "terminating" in doc["message"], doc
    await rest.ok("PATCH", f"{WIDGETS}/held", {"metadata": {"finalizers": None}}, ctype="application/merge-patch+json")
    assert await rest.status_of("GET", f"{CRDS}/widgets.example.com") == 404


async def test_several_versions_share_storage(rest: Rest) -> None:
    base = widget_crd()["spec"]["versions"][0]
    v1beta1 = {**copy.deepcopy(base), "name": "v1beta1", "storage": False, "deprecated": True}
    await established(rest, widget_crd(versions=[base, v1beta1]))
    beta = "/apis/example.com/v1beta1/namespaces/default/widgets"
    created = await rest.ok("POST", beta, {**widget("w1"), "apiVersion": "example.com/v1beta1"})
    assert created["apiVersion"] == "example.com/v1beta1"
    assert any("deprecated" in w for w in rest.last_warnings), rest.last_warnings
    assert (await rest.ok("GET", f"{WIDGETS}/w1"))["apiVersion"] == "example.com/v1"
    listed = await rest.ok("GET", beta)
    assert [i["apiVersion"] for i in listed["items"]] == ["example.com/v1beta1"]
    group = await rest.ok("GET", "/apis/example.com")
    assert group["preferredVersion"]["version"] == "v1"
    assert [v["version"] for v in group["versions"]] == ["v1", "v1beta1"]


async def test_crds_and_objects_survive_a_restart(start_apiserver: StartApiServer, tmp_path: Any) -> None:
    data = tmp_path / "data"
    first = await start_apiserver(data_dir=data)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        rest = Rest(session, first)
        await established(rest, widget_crd())
        await rest.ok("POST", WIDGETS, widget("kept"))
    await first.stop()
    second = await start_apiserver(data_dir=data)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        rest = Rest(session, second)
        assert (await rest.ok("GET", f"{WIDGETS}/kept"))["spec"]["size"] == 3
        await rest.ok("POST", WIDGETS, widget("after"))
        status, _ = await rest.call("POST", WIDGETS, widget("bad", size=99))
        assert status == 422  # the schema is back too


# -- refused definitions -----------------------------------------------------------------------


def _broken(change: Any) -> Json:
    crd = widget_crd()
    change(crd)
    return crd


BAD_CRDS = {
    "name": (lambda c: c["metadata"].update(name="gadgets.example.com"), "metadata.name"),
    "group without a dot": (lambda c: (c["spec"].update(group="example"),
                                       c["metadata"].update(name="widgets.example")), "spec.group"),
    "scope": (lambda c: c["spec"].update(scope="Global"), "spec.scope"),
    "no storage version": (lambda c: c["spec"]["versions"][0].update(storage=False), "spec.versions"),
    "duplicate versions": (lambda c: c["spec"]["versions"].append(
        {**copy.deepcopy(c["spec"]["versions"][0]), "storage": False}), "spec.versions[1].name"),
    "duplicate short names": (lambda c: c["spec"]["names"].update(shortNames=["wd", "wd"]),
                              "spec.names.shortNames[1]"),
    "non-structural schema": (lambda c: c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "spec"]["properties"].update(loose={"properties": {"a": {"type": "string"}}}),
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[loose].type"),
    "no schema": (lambda c: c["spec"]["versions"][0].pop("schema"), "spec.versions[0].schema.openAPIV3Schema"),
    "printer column": (lambda c: c["spec"]["versions"][0]["additionalPrinterColumns"][0].update(type="float"),
                       "spec.versions[0].additionalPrinterColumns[0].type"),
    "scale path": (lambda c: c["spec"]["versions"][0]["subresources"]["scale"].update(
        specReplicasPath=".status.replicas"), "spec.versions[0].subresources.scale.specReplicasPath"),
    "protected group": (lambda c: (c["spec"].update(group="things.k8s.io"),
                                   c["metadata"].update(name="widgets.things.k8s.io")),
                        "metadata.annotations[api-approved.kubernetes.io]"),
    "built-in plural": (lambda c: (c["spec"].update(group="coordination.k8s.io"),
                                   c["spec"]["names"].update(plural="leases"),
                                   c["metadata"].update(name="leases.coordination.k8s.io",
                                                        annotations={"api-approved.kubernetes.io": "unapproved"})),
                        "spec.names.plural"),
}


@pytest.mark.parametrize("case", list(BAD_CRDS))
async def test_invalid_crds_are_refused_with_the_field(rest: Rest, case: str) -> None:
    change, field = BAD_CRDS[case]
    crd = _broken(change)
    status, doc = await rest.call("POST", CRDS, crd)
    assert status == 422, (case, doc)
    assert field in {c["field"] for c in doc["details"]["causes"]}, (case, doc["details"]["causes"])
    assert doc["message"].startswith(f'CustomResourceDefinition.apiextensions.k8s.io "{crd["metadata"]["name"]}" '
                                     "is invalid"), doc["message"]
    assert await rest.status_of("GET", f"{CRDS}/{crd['metadata']['name']}") == 404


async def test_names_conflict_is_reported_in_status(rest: Rest) -> None:
    await established(rest, widget_crd())
    other = widget_crd(name="gizmos.example.com", plural="gizmos", kind="Widget")
    other["spec"]["names"].update(singular="gizmo", shortNames=["gz"])
    await rest.ok("POST", CRDS, other)
    doc = await rest.ok("GET", f"{CRDS}/gizmos.example.com")
    conditions = {c["type"]: c for c in doc["status"]["conditions"]}
    assert conditions["NamesAccepted"]["status"] == "False" and conditions["NamesAccepted"]["reason"] == "KindConflict"
    assert conditions["Established"]["status"] == "False"
    assert await rest.status_of("GET", "/apis/example.com/v1/namespaces/default/gizmos") == 404


async def test_immutable_fields_of_an_established_crd(rest: Rest) -> None:
    doc = await established(rest, widget_crd())
    doc["spec"]["scope"] = "Cluster"
    status, body = await rest.call("PUT", f"{CRDS}/widgets.example.com", doc)
    assert status == 422 and any(c["field"] == "spec.scope" for c in body["details"]["causes"]), body


# -- cluster scope and namespaces ----------------------------------------------------------------


async def test_cluster_scoped_custom_resource(rest: Rest) -> None:
    crd = widget_crd(name="globes.example.com", plural="globes", kind="Globe")
    crd["spec"]["scope"] = "Cluster"
    crd["spec"]["names"]["shortNames"] = ["gl"]
    await established(rest, crd)
    body = {"apiVersion": "example.com/v1", "kind": "Globe", "metadata": {"name": "earth"}, "spec": {"size": 1}}
    created = await rest.ok("POST", "/apis/example.com/v1/globes", body)
    assert "namespace" not in created["metadata"]
    assert (await rest.ok("GET", "/apis/example.com/v1/globes/earth"))["spec"]["size"] == 1


def _nested(depth: int, leaf: str, wrap: str) -> str:
    """JSON text nested `depth` levels (deeper than JSON encoders go): `@` in `wrap` is the inner text."""
    text = leaf
    for _ in range(depth):
        text = wrap.replace("@", text)
    return text


async def test_a_schema_nested_too_deeply_is_refused_and_the_server_serves_on(rest: Rest) -> None:
    crd = widget_crd()
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["deep"] = "@@DEEP@@"
    deep = _nested(700, '{"type":"string"}', '{"type":"object","properties":{"a":@}}')
    raw = json.dumps(crd).replace('"@@DEEP@@"', deep).encode()
    status, doc = await rest.call("POST", CRDS, raw=raw)
    assert status in (400, 422), doc
    assert await rest.status_of("GET", f"{CRDS}/widgets.example.com") == 404
    await established(rest, widget_crd())
    body = {**widget("deep"), "spec": {"size": 1, "tags": "@@DEEP@@"}}
    raw = json.dumps(body).replace('"@@DEEP@@"', _nested(900, "{}", '{"x":@}')).encode()
    status, doc = await rest.call("POST", WIDGETS, raw=raw)
    assert status in (400, 422), doc
    assert (await rest.ok("GET", WIDGETS))["items"] == []

"""kubernetes_asyncio against CustomResourceDefinitions on a real mesh (HTTPS, token, kubeconfig).

The official asyncio client as an operator uses it, loaded from the mesh's kubeconfig:

* `ApiextensionsV1Api` creates (from typed models and from a dict), reads, lists, replaces
  (read-modify-write of the typed object) and deletes CRDs, every answer deserialised into its
  typed models (`V1CustomResourceDefinition`, its status, accepted names and conditions, the
  server's defaults, the schema as `V1JSONSchemaProps`);
* `CustomObjectsApi` on namespaced objects: create (defaults applied), get, list (label and
  field selectors, and across namespaces), merge patch, JSON patch (with a `test` op), replace
  (and 409 with a stale resourceVersion), 422 naming the field, the `status` subresource (get,
  patch, replace; main and status writes each keep the other's part), the `scale` subresource
  (get, patch, replace, through specReplicasPath / statusReplicasPath / labelSelectorPath),
  delete, deletecollection, 404 after;
* on cluster-scoped objects: create, get, list, merge patch, replace, delete;
* `watch.Watch().stream(list_namespaced_custom_object, ...)` from a list's resourceVersion gets
  ADDED, MODIFIED and DELETED with the resourceVersions the writes returned; from "" it starts
  with the existing objects.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from clientkit import ApiException, Json, ak8s, gone, k8s_api, start_mesh
from kubernetes_asyncio import watch as _ak8s_watch
from waits import eventually

ak8s_watch: Any = _ak8s_watch

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::DeprecationWarning")]

GROUP = "clients.kubemesh.io"
VERSION = "v1"
NS = "default"
MERGE = "application/merge-patch+json"


def gadget_crd() -> Any:
    """A namespaced CRD as a typed `V1CustomResourceDefinition`: status and scale subresources, columns."""
    schema = ak8s.V1JSONSchemaProps(
        type="object",
        properties={
            "spec": ak8s.V1JSONSchemaProps(
                type="object", required=["size"],
                properties={
                    "size": ak8s.V1JSONSchemaProps(type="integer", minimum=1, maximum=100),
                    "color": ak8s.V1JSONSchemaProps(type="string", enum=["red", "green", "blue"], default="red"),
                    "replicas": ak8s.V1JSONSchemaProps(type="integer", default=1),
                }),
            "status": ak8s.V1JSONSchemaProps(
                type="object",
                properties={"phase": ak8s.V1JSONSchemaProps(type="string"),
                            "replicas": ak8s.V1JSONSchemaProps(type="integer"),
                            "selector": ak8s.V1JSONSchemaProps(type="string")}),
        })
    version = ak8s.V1CustomResourceDefinitionVersion(
        name=VERSION, served=True, storage=True,
        schema=ak8s.V1CustomResourceValidation(open_apiv3_schema=schema),
        subresources=ak8s.V1CustomResourceSubresources(
            status={},
            scale=ak8s.V1CustomResourceSubresourceScale(spec_replicas_path=".spec.replicas",
                                                        status_replicas_path=".status.replicas",
                                                        label_selector_path=".status.selector")),
        additional_printer_columns=[ak8s.V1CustomResourceColumnDefinition(name="Size", type="integer",
                                                                          json_path=".spec.size")])
    return ak8s.V1CustomResourceDefinition(
        api_version="apiextensions.k8s.io/v1", kind="CustomResourceDefinition",
        metadata=ak8s.V1ObjectMeta(name=f"gadgets.{GROUP}"),
        spec=ak8s.V1CustomResourceDefinitionSpec(
            group=GROUP, scope="Namespaced",
            names=ak8s.V1CustomResourceDefinitionNames(plural="gadgets", singular="gadget", kind="Gadget",
                                                       short_names=["gdg"]),
            versions=[version]))


def gizmo_crd() -> Json:
    """A cluster-scoped CRD, as a plain dict (the client accepts either)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"gizmos.{GROUP}"},
        "spec": {"group": GROUP, "scope": "Cluster",
                 "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo"},
                 "versions": [{"name": VERSION, "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {
                                   "type": "object",
                                   "properties": {"spec": {"type": "object",
                                                           "properties": {"level": {"type": "integer"},
                                                                          "note": {"type": "string"}}}}}}}]},
    }


def gadget(name: str, size: int = 3, **labels: str) -> Json:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Gadget",
            "metadata": {"name": name, "labels": labels or {"app": name}}, "spec": {"size": size}}


async def established(ext: Any, name: str) -> Any:
    """The typed CRD once its Established condition is True (None before)."""
    crd = await ext.read_custom_resource_definition(name)
    conditions = (crd.status and crd.status.conditions) or []
    return crd if any(c.type == "Established" and c.status == "True" for c in conditions) else None


@pytest.fixture
async def api() -> AsyncIterator[Any]:
    """An ApiClient on a fresh apiserver-only mesh, loaded from the mesh's kubeconfig."""
    async with start_mesh() as mesh, k8s_api(mesh.kubeconfig_path) as api_client:
        yield api_client


@pytest.fixture
async def gadgets(api: Any) -> Any:
    """The Gadget CRD, created and Established; a CustomObjectsApi."""
    ext = ak8s.ApiextensionsV1Api(api)
    await ext.create_custom_resource_definition(gadget_crd())
    await eventually(lambda: established(ext, f"gadgets.{GROUP}"), within=30, what="gadgets Established")
    return ak8s.CustomObjectsApi(api)


async def test_apiextensions_crd_lifecycle_in_typed_models(api: Any) -> None:
    ext = ak8s.ApiextensionsV1Api(api)
    created = await ext.create_custom_resource_definition(gadget_crd())
    assert isinstance(created, ak8s.V1CustomResourceDefinition)
    assert created.metadata.name == f"gadgets.{GROUP}" and created.metadata.uid
    assert created.spec.names.short_names == ["gdg"]
    assert created.spec.versions[0].subresources.scale.spec_replicas_path == ".spec.replicas"

    crd = await eventually(lambda: established(ext, f"gadgets.{GROUP}"), within=30, what="Established")
    assert isinstance(crd, ak8s.V1CustomResourceDefinition)
    assert isinstance(crd.status, ak8s.V1CustomResourceDefinitionStatus)
    assert crd.status.accepted_names.kind == "Gadget" and crd.status.accepted_names.plural == "gadgets"
    assert crd.status.stored_versions == [VERSION]
    conditions = {c.type: c for c in crd.status.conditions}
    assert isinstance(conditions["Established"], ak8s.V1CustomResourceDefinitionCondition)
    assert conditions["NamesAccepted"].status == "True"
    # Defaults filled in by the server deserialise too.
    assert crd.spec.names.list_kind == "GadgetList"
    assert crd.spec.conversion.strategy == "None"
    props = crd.spec.versions[0].schema.open_apiv3_schema.properties
    assert isinstance(props["spec"], ak8s.V1JSONSchemaProps)
    assert props["spec"].properties["color"].enum == ["red", "green", "blue"]

    listed = await ext.list_custom_resource_definition()
    assert isinstance(listed, ak8s.V1CustomResourceDefinitionList)
    assert [c.metadata.name for c in listed.items] == [f"gadgets.{GROUP}"]

    # Read-modify-replace of the typed object: a second printer column.
    crd.spec.versions[0].additional_printer_columns.append(
        ak8s.V1CustomResourceColumnDefinition(name="Color", type="string", json_path=".spec.color"))
    replaced = await ext.replace_custom_resource_definition(crd.metadata.name, crd)
    assert [c.name for c in replaced.spec.versions[0].additional_printer_columns] == ["Size", "Color"]
    assert replaced.metadata.resource_version != crd.metadata.resource_version

    # The cluster-scoped CRD from a plain dict, then both deleted.
    await ext.create_custom_resource_definition(gizmo_crd())
    await eventually(lambda: established(ext, f"gizmos.{GROUP}"), within=30, what="gizmos Established")
    for name in (f"gadgets.{GROUP}", f"gizmos.{GROUP}"):
        await ext.delete_custom_resource_definition(name)
        await eventually(lambda n=name: gone(lambda: ext.read_custom_resource_definition(n)),  # type: ignore[misc]
                         within=30, what=f"{name} deleted")
    assert (await ext.list_custom_resource_definition()).items == []


async def test_namespaced_custom_objects_every_verb(gadgets: Any) -> None:
    co = gadgets
    created = await co.create_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", gadget("g1", 3, tier="a"))
    assert created["metadata"]["uid"] and created["spec"] == {"size": 3, "color": "red", "replicas": 1}, created
    await co.create_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", gadget("g2", 4, tier="b"))

    got = await co.get_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", "g1")
    assert got["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]

    listed = await co.list_namespaced_custom_object(GROUP, VERSION, NS, "gadgets")
    assert listed["kind"] == "GadgetList" and listed["metadata"]["resourceVersion"]
    assert sorted(i["metadata"]["name"] for i in listed["items"]) == ["g1", "g2"]
    selected = await co.list_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", label_selector="tier=b")
    assert [i["metadata"]["name"] for i in selected["items"]] == ["g2"]
    everywhere = await co.list_cluster_custom_object(GROUP, VERSION, "gadgets")
    assert len(everywhere["items"]) == 2

    patched = await co.patch_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", "g1",
                                                      {"spec": {"size": 7, "color": "blue"}}, _content_type=MERGE)
    assert patched["spec"] == {"size": 7, "color": "blue", "replicas": 1}

    # Replace with the current resourceVersion, then with the stale one (409).
    patched["spec"]["size"] = 8
    replaced = await co.replace_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", "g1", patched)
    assert replaced["spec"]["size"] == 8
    with pytest.raises(ApiException) as stale:
        await co.replace_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", "g1", patched)
    assert stale.value.status == 409

    # A value the schema refuses: 422, nothing stored.
    with pytest.raises(ApiException) as invalid:
        await co.patch_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", "g1", {"spec": {"size": 1000}},
                                                _content_type=MERGE)
    assert invalid.value.status == 422 and "spec.size" in invalid.value.body

    # The status subresource: a main write keeps status, a status write keeps spec.
    status = await co.patch_namespaced_custom_object_status(
        GROUP, VERSION, NS, "gadgets", "g1",
        {"status": {"phase": "Ready", "replicas": 1, "selector": "app=g1"}, "spec": {"size": 9}}, _content_type=MERGE)
    assert status["status"] == {"phase": "Ready", "replicas": 1, "selector": "app=g1"} and status["spec"]["size"] == 8
    got = await co.get_namespaced_custom_object_status(GROUP, VERSION, NS, "gadgets", "g1")
    assert got["status"]["phase"] == "Ready"
    main = await co.patch_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", "g1", {"status": {"phase": "X"}},
                                                   _content_type=MERGE)
    assert main["status"]["phase"] == "Ready"

    # The scale subresource through specReplicasPath / statusReplicasPath / labelSelectorPath.
    scale = await co.get_namespaced_custom_object_scale(GROUP, VERSION, NS, "gadgets", "g1")
    assert scale["kind"] == "Scale" and scale["apiVersion"] == "autoscaling/v1", scale
    assert scale["spec"] == {"replicas": 1} and scale["status"] == {"replicas": 1, "selector": "app=g1"}, scale
    scaled = await co.patch_namespaced_custom_object_scale(GROUP, VERSION, NS, "gadgets", "g1",
                                                           {"spec": {"replicas": 5}}, _content_type=MERGE)
    assert scaled["spec"]["replicas"] == 5
    got = await co.get_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", "g1")
    assert got["spec"]["replicas"] == 5

    # replace through the subresources, a JSON patch, a field selector.
    current = await co.get_namespaced_custom_object_status(GROUP, VERSION, NS, "gadgets", "g1")
    current["status"]["phase"] = "Degraded"
    replaced = await co.replace_namespaced_custom_object_status(GROUP, VERSION, NS, "gadgets", "g1", current)
    assert replaced["status"]["phase"] == "Degraded"
    scale = await co.get_namespaced_custom_object_scale(GROUP, VERSION, NS, "gadgets", "g1")
    scale["spec"]["replicas"] = 2
    scaled = await co.replace_namespaced_custom_object_scale(GROUP, VERSION, NS, "gadgets", "g1", scale)
    assert scaled["spec"]["replicas"] == 2
    patched = await co.patch_namespaced_custom_object(
        GROUP, VERSION, NS, "gadgets", "g1",
        [{"op": "test", "path": "/spec/replicas", "value": 2}, {"op": "replace", "path": "/spec/size", "value": 6}])
    assert patched["spec"]["size"] == 6 and patched["spec"]["replicas"] == 2
    by_name = await co.list_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", field_selector="metadata.name=g2")
    assert [i["metadata"]["name"] for i in by_name["items"]] == ["g2"]
    await co.delete_collection_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", label_selector="tier=b")
    assert await gone(lambda: co.get_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", "g2"))

    deleted = await co.delete_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", "g1")
    assert deleted["metadata"]["name"] == "g1" or deleted.get("status") == "Success", deleted
    assert await gone(lambda: co.get_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", "g1"))
    with pytest.raises(ApiException) as missing:
        await co.delete_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", "g1")
    assert missing.value.status == 404


async def test_cluster_custom_objects_every_verb(api: Any) -> None:
    ext = ak8s.ApiextensionsV1Api(api)
    await ext.create_custom_resource_definition(gizmo_crd())
    await eventually(lambda: established(ext, f"gizmos.{GROUP}"), within=30, what="gizmos Established")
    co = ak8s.CustomObjectsApi(api)
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Gizmo", "metadata": {"name": "z1"},
            "spec": {"level": 1, "note": "first"}}
    created = await co.create_cluster_custom_object(GROUP, VERSION, "gizmos", body)
    assert "namespace" not in created["metadata"] and created["spec"]["level"] == 1
    got = await co.get_cluster_custom_object(GROUP, VERSION, "gizmos", "z1")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    listed = await co.list_cluster_custom_object(GROUP, VERSION, "gizmos")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["z1"]
    patched = await co.patch_cluster_custom_object(GROUP, VERSION, "gizmos", "z1", {"spec": {"level": 2}},
                                                   _content_type=MERGE)
    assert patched["spec"] == {"level": 2, "note": "first"}
    patched["spec"] = {"level": 3}
    replaced = await co.replace_cluster_custom_object(GROUP, VERSION, "gizmos", "z1", patched)
    assert replaced["spec"] == {"level": 3}
    await co.delete_cluster_custom_object(GROUP, VERSION, "gizmos", "z1")
    assert await gone(lambda: co.get_cluster_custom_object(GROUP, VERSION, "gizmos", "z1"))


async def test_watch_stream_of_custom_objects(gadgets: Any) -> None:
    co = gadgets
    await co.create_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", gadget("before", 2))
    rv = (await co.list_namespaced_custom_object(GROUP, VERSION, NS, "gadgets"))["metadata"]["resourceVersion"]
    events: list[tuple[str, str, int, str]] = []
    watching = asyncio.Event()

    async def watch_until_deleted() -> None:
        w = ak8s_watch.Watch()
        async with w.stream(co.list_namespaced_custom_object, GROUP, VERSION, NS, "gadgets",
                            resource_version=rv, timeout_seconds=60) as stream:
            watching.set()
            async for event in stream:
                obj = event["object"]
                assert isinstance(obj, dict), f"a custom object arrives as a dict, not {type(obj)}"
                events.append((event["type"], obj["metadata"]["name"], obj["spec"]["size"],
                               obj["metadata"]["resourceVersion"]))
                if event["type"] == "DELETED" and obj["metadata"]["name"] == "w1":
                    w.stop()

    task = asyncio.create_task(watch_until_deleted())
    await watching.wait()
    created = await co.create_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", gadget("w1", 3))
    patched = await co.patch_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", "w1", {"spec": {"size": 4}},
                                                      _content_type=MERGE)
    await co.delete_namespaced_custom_object(GROUP, VERSION, NS, "gadgets", "w1")
    async with asyncio.timeout(30):
        await task
    assert [(t, n, s) for t, n, s, _ in events] == [("ADDED", "w1", 3), ("MODIFIED", "w1", 4), ("DELETED", "w1", 4)]
    assert events[0][3] == created["metadata"]["resourceVersion"]
    assert events[1][3] == patched["metadata"]["resourceVersion"]
    assert int(events[2][3]) > int(events[1][3])

    # A watch from "" lists first: the object made before arrives as ADDED.
    w = ak8s_watch.Watch()
    first: list[tuple[str, str]] = []
    async with w.stream(co.list_namespaced_custom_object, GROUP, VERSION, NS, "gadgets",
                        timeout_seconds=5) as stream:
        async for event in stream:
            first.append((event["type"], event["object"]["metadata"]["name"]))
            w.stop()
    assert first == [("ADDED", "before")]

"""Server-side apply with field ownership: managedFields, conflicts, force, and fields a manager drops.

Against a real apiserver process: the JSON client of the tests, the official Python client's
typed models, and kubectl (`apply --server-side`, `--force-conflicts`, `diff --server-side`).
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import pytest
from restkit import Rest

if TYPE_CHECKING:
    from conftest import ApiServer, RunKubectl

CMS = "/api/v1/namespaces/default/configmaps"
DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"
APPLY = "application/apply-patch+yaml"


async def apply(rest: Rest, path: str, body: dict[str, Any], manager: str, *, force: bool = False,
                status: int = 200) -> dict[str, Any]:
    params = {"fieldManager": manager}
    if force:
        params["force"] = "true"
    got, doc = await rest.call("PATCH", path, body, ctype=APPLY, params=params)
    assert got == status, (got, doc)
    return doc


def cm(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def owners(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {f'{e["manager"]}/{e["operation"]}': e["fieldsV1"] for e in obj["metadata"]["managedFields"]}


async def test_a_second_manager_conflicts_unless_it_forces(rest: Rest) -> None:
    first = await apply(rest, f"{CMS}/c", cm("c", {"a": "1", "b": "2"}), "alice", status=201)
    assert owners(first) == {"alice/Apply": {"f:data": {"f:a": {}, "f:b": {}}}}
    entry = first["metadata"]["managedFields"][0]
    assert entry["apiVersion"] == "v1" and entry["fieldsType"] == "FieldsV1" and entry["time"]

    doc = await apply(rest, f"{CMS}/c", cm("c", {"a": "9"}), "bob", status=409)
    assert doc["reason"] == "Conflict"
    assert doc["message"] == 'Apply failed with 1 conflict: conflict with "alice" using v1: .data.a'
    assert doc["details"]["causes"] == [{"reason": "FieldManagerConflict", "message": 'conflict with "alice" using v1',
                                         "field": ".data.a"}]
    assert (await rest.ok("GET", f"{CMS}/c"))["data"] == {"a": "1", "b": "2"}

    # The same value is no conflict: both own the field.
    shared = await apply(rest, f"{CMS}/c", cm("c", {"b": "2"}), "bob")
    assert owners(shared)["bob/Apply"] == {"f:data": {"f:b": {}}}
    assert owners(shared)["alice/Apply"] == {"f:data": {"f:a": {}, "f:b": {}}}

    forced = await apply(rest, f"{CMS}/c", cm("c", {"a": "9", "b": "2"}), "bob", force=True)
    assert forced["data"] == {"a": "9", "b": "2"}
    assert owners(forced) == {"alice/Apply": {"f:data": {"f:b": {}}}, "bob/Apply": {"f:data": {"f:a": {}, "f:b": {}}}}


async def test_fields_a_manager_stops_applying_go_unless_someone_else_owns_them(rest: Rest) -> None:
    await apply(rest, f"{CMS}/d", cm("d", {"a": "1", "b": "2", "c": "3"}), "alice", status=201)
    await apply(rest, f"{CMS}/d", cm("d", {"c": "3"}), "bob")
    after = await apply(rest, f"{CMS}/d", cm("d", {"a": "1"}), "alice")
    # b was alice's alone: removed; c is bob's too: kept.
    assert after["data"] == {"a": "1", "c": "3"}
    assert owners(after) == {"alice/Apply": {"f:data": {"f:a": {}}}, "bob/Apply": {"f:data": {"f:c": {}}}}
    # Applying the same configuration again changes nothing at all.
    again = await apply(rest, f"{CMS}/d", cm("d", {"a": "1"}), "alice")
    assert again["metadata"]["resourceVersion"] == after["metadata"]["resourceVersion"]


async def test_an_update_takes_fields_and_an_apply_then_conflicts_with_it(rest: Rest) -> None:
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"app": "web"}},
              "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                       "template": {"metadata": {"labels": {"app": "web"}},
                                    "spec": {"containers": [{"name": "nginx", "image": "nginx:1.25"}]}}}}
    created = await apply(rest, f"{DEPLOYS}/web", deploy, "deployer", status=201)
    fields = owners(created)["deployer/Apply"]
    containers = fields["f:spec"]["f:template"]["f:spec"]["f:containers"]
    assert containers == {'k:{"name":"nginx"}': {".": {}, "f:image": {}}}
    # Another client scales with a merge patch: it takes spec.replicas.
    scaled = await rest.ok("PATCH", f"{DEPLOYS}/web", {"spec": {"replicas": 5}},
                           ctype="application/merge-patch+json", params={"fieldManager": "scaler"})
    assert owners(scaled)["scaler/Update"] == {"f:spec": {"f:replicas": {}}}
    assert "f:replicas" not in owners(scaled)["deployer/Apply"]["f:spec"]
    doc = await apply(rest, f"{DEPLOYS}/web", deploy, "deployer", status=409)
    assert doc["message"] == 'Apply failed with 1 conflict: conflict with "scaler" using apps/v1: .spec.replicas'
    # A new container in the keyed list is the applier's; the other element keeps its owner.
    two = json.loads(json.dumps(deploy))
    del two["spec"]["replicas"]
    two["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
    out = await apply(rest, f"{DEPLOYS}/web", two, "deployer")
    assert [c["name"] for c in out["spec"]["template"]["spec"]["containers"]] == ["nginx", "sidecar"]
    assert out["spec"]["replicas"] == 5


async def test_writes_that_name_no_manager_track_nothing_new_and_apply_needs_a_manager(rest: Rest) -> None:
    plain = await rest.ok("POST", CMS, cm("plain", {"a": "1"}))
    assert "managedFields" not in plain["metadata"]
    updated = await rest.ok("PUT", f"{CMS}/plain", {**plain, "data": {"a": "2"}})
    assert "managedFields" not in updated["metadata"]
    status, doc = await rest.call("PATCH", f"{CMS}/plain", cm("plain", {"a": "3"}), ctype=APPLY)
    assert status == 422 and "fieldManager: Required value: is required for apply patch" in doc["message"], doc
    # Once tracked, a write without a manager is its User-Agent's.
    await apply(rest, f"{CMS}/plain", cm("plain", {"a": "3"}), "alice")
    rest.headers["User-Agent"] = "my-operator/v0.1 (linux/amd64)"
    later = await rest.ok("PATCH", f"{CMS}/plain", {"data": {"b": "x"}}, ctype="application/merge-patch+json")
    assert owners(later)["my-operator/Update"] == {"f:data": {"f:b": {}}}
    # kubectl-style create with a field manager is tracked from the start.
    made = await rest.ok("POST", CMS, cm("made", {"k": "v"}), params={"fieldManager": "kubectl-create"})
    assert owners(made) == {"kubectl-create/Update": {"f:data": {"f:k": {}}}}


async def test_managed_fields_deserialize_into_the_official_client(apiserver: ApiServer, rest: Rest) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    await apply(rest, f"{CMS}/typed", cm("typed", {"a": "1"}), "alice", status=201)
    conf = kubernetes.client.Configuration()
    conf.host = apiserver.url
    if apiserver.token:
        conf.api_key = {"authorization": f"Bearer {apiserver.token}"}
    api = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(conf))
    got = await asyncio.to_thread(api.read_namespaced_config_map, "typed", "default")
    entry = got.metadata.managed_fields[0]
    assert (entry.manager, entry.operation, entry.fields_type) == ("alice", "Apply", "FieldsV1")
    assert entry.fields_v1 == {"f:data": {"f:a": {}}}


@pytest.mark.kubectl
async def test_kubectl_server_side_apply_conflicts_forces_and_diffs(apiserver: ApiServer, kubectl: RunKubectl,
                                                                   edge_kubectl_version: str) -> None:
    def run(*args: str, input: str | None = None, ok: bool = True) -> tuple[int, str]:
        done = kubectl(edge_kubectl_version, *args, server=apiserver.url, token=apiserver.token, input=input)
        if ok:
            assert done.returncode == 0, done.stderr
        return done.returncode, done.stdout + done.stderr

    manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ssa}\ndata: {a: '1', b: '2'}\n"
    await asyncio.to_thread(run, "apply", "--server-side", "-f", "-", input=manifest)
    other = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ssa}\ndata: {a: '9'}\n"
    code, out = await asyncio.to_thread(run, "apply", "--server-side", "--field-manager=other", "-f", "-",
                                        input=other, ok=False)
    assert code != 0 and 'conflict with "kubectl"' in out and ".data.a" in out, out
    code, out = await asyncio.to_thread(run, "diff", "--server-side", "--force-conflicts",
                                        "--field-manager=other", "-f", "-", input=other, ok=False)
    assert code == 1 and "-  a: \"1\"" in out and "+  a: \"9\"" in out, out
    await asyncio.to_thread(run, "apply", "--server-side", "--force-conflicts", "--field-manager=other", "-f", "-",
                            input=other)
    _, got = await asyncio.to_thread(run, "get", "configmap", "ssa", "-o", "json", "--show-managed-fields")
    doc = json.loads(got)
    assert doc["data"] == {"a": "9", "b": "2"}
    assert {e["manager"] for e in doc["metadata"]["managedFields"]} == {"kubectl", "other"}

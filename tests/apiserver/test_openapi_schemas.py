"""Component schemas for every built-in kind: `kubectl explain` to depth 3, apply patches that agree.

The schemas come from `schema.json` (the official client's models), with the server's own
strategic-merge rules as patch extensions; kubectl 1.27, 1.30 and 1.33 explain a field three levels
deep on every built-in kind, and kubectl 1.33's client-side apply (which computes its patch
from the v3 schema) removes a container from a Deployment as upstream does.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import pytest
from restkit import Rest

from kubemesh.apiserver.discovery import Discovery
from kubemesh.apiserver.openapi import OpenApi, schema_name
from kubemesh.apiserver.validation import model_types
from kubemesh.services.model.kinds import KindTable

if TYPE_CHECKING:
    from conftest import ApiServer, RunKubectl


def _inner(spelled: str) -> str:
    for prefix in ("List[", "list[", "Dict[str, ", "dict(str, "):
        if spelled.startswith(prefix):
            return spelled[len(prefix):-1]
    return spelled


def key(kind: Any) -> str:
    """The kind's entry in schema.json: its name at the storage version, `<apiVersion>/<Kind>` else."""
    return str(kind.kind) if kind.storage else f"{kind.api_version}/{kind.kind}"


def depth3_path(kind: Any) -> list[str]:
    """A field path three levels deep in a kind (under spec when it has one)."""
    kinds, models = model_types()
    root = models[kinds[key(kind)]]
    for first in sorted(root, key=lambda f: (f != "spec", f)):
        m1 = _inner(root[first])
        if m1 not in models:
            continue
        for second in sorted(models[m1]):
            m2 = _inner(models[m1][second])
            if models.get(m2):
                return [first, second, sorted(models[m2])[0]]
    raise AssertionError(f"{kind.kind} has no field three levels deep")


def built_in_kinds() -> list[Any]:
    kinds, _ = model_types()
    return [k for k in KindTable().all() if k.custom is None and key(k) in kinds and "get" in k.verbs]


def test_every_built_in_kind_has_its_schema_with_the_gvk_in_its_group_version() -> None:
    table = KindTable()
    api = OpenApi(Discovery(table, server_address="127.0.0.1:6443"))
    kinds, _ = model_types()
    for kind in built_in_kinds():
        path = f"api/{kind.version}" if not kind.group else f"apis/{kind.group}/{kind.version}"
        doc = api.v3_document(path)
        assert doc is not None, path
        schema = doc["components"]["schemas"][schema_name(kinds[key(kind)])]
        assert schema["x-kubernetes-group-version-kind"] == [
            {"group": kind.group, "version": kind.version, "kind": kind.kind}]
        # Every reference resolves inside the document.
        text = json.dumps(doc)
        for ref in {part.split('"')[0] for part in text.split('"$ref": "#/components/schemas/')[1:]}:
            assert ref in doc["components"]["schemas"], (path, ref)


def test_lists_carry_the_servers_merge_rules() -> None:
    doc = OpenApi(Discovery(KindTable(), server_address="127.0.0.1:6443")).v3_document("apis/apps/v1")
    assert doc is not None
    schemas = doc["components"]["schemas"]
    pod_spec = schemas[schema_name("V1PodSpec")]["properties"]
    assert pod_spec["containers"]["x-kubernetes-patch-merge-key"] == "name"
    assert pod_spec["containers"]["x-kubernetes-patch-strategy"] == "merge"
    assert pod_spec["volumes"]["x-kubernetes-patch-strategy"] == "merge,retainKeys"
    assert "x-kubernetes-patch-merge-key" not in pod_spec["tolerations"]  # atomic, as the server merges it
    meta = schemas[schema_name("V1ObjectMeta")]["properties"]
    assert meta["finalizers"]["x-kubernetes-patch-strategy"] == "merge"


@pytest.mark.kubectl
@pytest.mark.slow
@pytest.mark.parametrize("version", ["1.27", "1.30", "1.33"])
async def test_kubectl_explains_every_built_in_kind_three_levels_deep(apiserver: ApiServer, kubectl: RunKubectl,
                                                                      version: str) -> None:
    failures = []
    for kind in built_in_kinds():
        path = depth3_path(kind)
        target = ".".join([kind.plural, *path])
        done = await asyncio.to_thread(kubectl, version, "explain", target,
                                       f"--api-version={kind.api_version}", server=apiserver.url,
                                       token=apiserver.token)
        if done.returncode != 0 or f"FIELD: {path[-1]} <" not in done.stdout:
            failures.append(f"{target}: {done.returncode} {done.stderr.strip()[:200]} {done.stdout[:200]!r}")
    assert not failures, "\n".join(failures)


@pytest.mark.kubectl
async def test_client_side_apply_from_the_v3_schema_removes_a_container(apiserver: ApiServer, rest: Rest,
                                                                       kubectl: RunKubectl) -> None:
    def manifest(*names: str) -> str:
        containers = ", ".join(f"{{name: {n}, image: 'busybox'}}" for n in names)
        return ("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: two}\nspec:\n  replicas: 1\n"
                "  selector: {matchLabels: {app: two}}\n  template:\n    metadata: {labels: {app: two}}\n"
                f"    spec:\n      containers: [{containers}]\n")

    for names in (("main", "sidecar"), ("main",)):
        done = await asyncio.to_thread(kubectl, "1.33", "apply", "-f", "-", server=apiserver.url,
                                       token=apiserver.token, input=manifest(*names))
        assert done.returncode == 0, done.stderr
    got = await rest.ok("GET", "/apis/apps/v1/namespaces/default/deployments/two")
    assert [c["name"] for c in got["spec"]["template"]["spec"]["containers"]] == ["main"]

"""End-to-end helpers on top of `cm_mesh`: a versioned kubectl, custom resources, the history.

For the namespace, garbage-collector and manifest tests (test_cm_namespaces.py,
test_cm_gc_custom.py, test_cm_manifests.py), which drive a real mesh as a user would:

* `Story`: a `MeshEnv` whose kubectl is one of the versioned binaries (`kubectl.1.33` ...),
  plus `holds` (a condition stays true for a span of cluster time), raw API calls and the
  apiserver's history;
* `crd_manifest` / `custom_kind` / `custom_object`: a small permissive CRD and its objects;
* `namespace_conditions`, `deletions_by`: what the namespace controller and the kubelets did.

Every span is in cluster seconds (`MeshEnv.until`, `Story.holds` read the apiserver's clock);
kubectl's wall-clock `--timeout` comes from `MeshEnv.timeout`. Nothing asserts on wall time.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pytest
from cm_mesh import MeshEnv, start_mesh

from kubemesh.services.machinery.client import NotFoundError
from kubemesh.services.mesh.kubectl import Kubectl, KubectlError, versions
from kubemesh.services.model.kinds import NAMESPACES, Kind, Obj

NEWEST_KUBECTL = "1.33"
"""The kubectl the namespace and GC tests drive (the manifests test runs the oldest and the newest)."""


def kubectl_binary(version: str) -> str:
    """The path of `kubectl.<version>`; skips the test when it is not installed."""
    binary = versions().get(version)
    if binary is None:
        pytest.skip(f"kubectl.{version} is not installed beside the kubectl on PATH")
    return binary


@dataclass
class Story:
    """A mesh driven with one kubectl version."""

    env: MeshEnv
    version: str

    def __post_init__(self) -> None:
        self.kubectl = Kubectl(self.env.mesh.kubeconfig_path, binary=kubectl_binary(self.version))

    @property
    def rate(self) -> float:
        return self.env.rate

    def timeout(self, cluster_seconds: float) -> str:
        return self.env.timeout(cluster_seconds)

    async def run(self, *args: str, within: float = 60.0, input: str | None = None) -> str:
        """kubectl `args` with this story's binary; stdout (raises KubectlError on a non-zero exit)."""
        return await self.kubectl(*args, input=input, timeout=self.env.wall(within))

    async def fails(self, *args: str, input: str | None = None) -> KubectlError:
        """kubectl `args`, which must exit non-zero; the error (its stderr is the message)."""
        try:
            out = await self.run(*args, input=input)
        except KubectlError as exc:
            return exc
        raise AssertionError(f"kubectl {' '.join(args)} succeeded: {out!r}")

    async def json(self, *args: str) -> Any:
        return json.loads(await self.run(*args, "-o", "json"))

    async def apply(self, *docs: Obj) -> str:
        """`kubectl apply -f -` of the documents (as a JSON List)."""
        return await self.run("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                     "items": list(docs)}))

    async def until(self, check: Callable[[], Awaitable[Any]], *, within: float, what: str) -> Any:
        return await self.env.until(check, within=within, what=what)

    async def holds(self, check: Callable[[], Awaitable[Any]], *, during: float, what: str) -> None:
        """Assert that `check` stays truthy for `during` cluster seconds."""
        end = await self.env.now() + during
        while True:
            value = await check()
            assert value, f"no longer true: {what}; got {value!r}"
            if await self.env.now() >= end:
                return
            await asyncio.sleep(max(0.05, min(0.5, 2.0 / self.rate)))

    async def get(self, kind: Kind, name: str, namespace: str | None = None) -> Obj | None:
        """The object, or None when it does not exist."""
        try:
            return await self.env.client.get(kind, name, namespace=namespace)
        except NotFoundError:
            return None

    async def items(self, kind: Kind, namespace: str | None = None, *, labels: str | None = None) -> list[Obj]:
        return list((await self.env.client.list(kind, namespace=namespace, label_selector=labels))["items"])

    async def namespace(self, name: str) -> Obj | None:
        return await self.get(NAMESPACES, name)

    async def history_index(self) -> int:
        return await self.env.mesh.endpoint.history_last_index()

    async def writes(self, *, since: int, resource: str, keys: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """The apiserver's write records of `resource` after index `since` (of `keys` only, if given)."""
        wanted = set(keys) if keys is not None else None
        records = await self.env.mesh.endpoint.history(since=since, types=("write",))
        return [r for r in records if r.get("resource") == resource and (wanted is None or r.get("key") in wanted)]


async def start_story(*, nodes: int, rate: float, version: str = NEWEST_KUBECTL) -> AsyncIterator[Story]:
    """A mesh (`cm_mesh.start_mesh`) driven with `kubectl.<version>`."""
    kubectl_binary(version)
    async for env in start_mesh(nodes=nodes, rate=rate):
        yield Story(env, version)


# ------------------------------------------------------------------------------ custom resources


def crd_manifest(*, group: str, kind: str, plural: str, scope: str = "Namespaced") -> Obj:
    """A CRD served at `v1` whose objects take any `spec`."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group, "scope": scope,
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [{
                "name": "v1", "served": True, "storage": True,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}},
            }],
        },
    }


def custom_kind(*, group: str, kind: str, plural: str, namespaced: bool = True) -> Kind:
    """A `Kind` for the API client to reach a CRD's objects at `v1`."""
    return Kind(group=group, version="v1", kind=kind, plural=plural, singular=kind.lower(), namespaced=namespaced,
                has_status=False)


def owner_ref(owner: Obj, *, block: bool = True, controller: bool = True) -> Obj:
    """An ownerReference to `owner` (as the server returned it)."""
    md = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": md["name"], "uid": md["uid"],
            "blockOwnerDeletion": block, "controller": controller}


def custom_object(kind: Kind, name: str, namespace: str | None, *, spec: Obj | None = None,
                  finalizers: Iterable[str] = (), owners: Iterable[Obj] = ()) -> Obj:
    md: Obj = {"name": name}
    if namespace is not None:
        md["namespace"] = namespace
    if finalizers:
        md["finalizers"] = list(finalizers)
    if owners:
        md["ownerReferences"] = list(owners)
    return {"apiVersion": kind.api_version, "kind": kind.kind, "metadata": md, "spec": spec or {"size": 1}}


def pod_manifest(name: str, namespace: str, *, node: str | None = None, stop_seconds: float | None = None,
                 owners: Iterable[Obj] = (), labels: dict[str, str] | None = None) -> Obj:
    """A long-running pod (on `node` when given, else scheduled)."""
    md: Obj = {"name": name, "namespace": namespace, "labels": labels or {"app": name}}
    if stop_seconds is not None:
        md["annotations"] = {"kubemesh.io/stop-seconds": str(stop_seconds)}
    if owners:
        md["ownerReferences"] = list(owners)
    spec: Obj = {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9"}]}
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec}


# ------------------------------------------------------------------------------ reading state


def namespace_conditions(ns: Obj | None) -> dict[str, dict[str, Any]]:
    """A namespace's status conditions by type (empty when it is gone or has none)."""
    return {c["type"]: c for c in ((ns or {}).get("status") or {}).get("conditions") or []}


def phase(obj: Obj | None) -> str | None:
    return ((obj or {}).get("status") or {}).get("phase")


def terminating(obj: Obj | None) -> bool:
    return bool(obj is not None and obj["metadata"].get("deletionTimestamp"))


def running(pod: Obj) -> bool:
    return phase(pod) == "Running" and not terminating(pod)


def node_of(pod: Obj) -> str:
    return str(pod["spec"].get("nodeName") or "")


def deletions_by(records: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """For each key whose DELETED write is in `records`: (component, instance) that removed it."""
    return {str(r["key"]): (str(r.get("component")), str(r.get("instance")))
            for r in records if r.get("event") == "DELETED"}


def forbidden_in_terminating(resource: str, name: str, namespace: str) -> str:
    """kube-apiserver's NamespaceLifecycle message for a create in a terminating namespace.

    `resource` is the qualified resource (`configmaps`, `deployments.apps`, `widgets.example.com`),
    as `apierrors.NewForbidden` prints a GroupResource.
    """
    return (f'{resource} "{name}" is forbidden: unable to create new content in namespace {namespace} '
            "because it is being terminated")

"""Namespace deletion end to end on a real mesh, driven with kubectl 1.33, as upstream does it.

One mesh of three nodes at clock rate 20 is shared by the module (the test that powers a node
off runs last and powers it on again). What the tests prove:

* `kubectl delete namespace` of a namespace holding a Deployment and its pods, ConfigMaps,
  Secrets, a ServiceAccount and custom objects: the namespace turns Terminating with
  upstream's five deletion conditions (`NamespaceContentRemaining` naming the pods still
  terminating), every pod is deleted gracefully (its 30 s grace period, and the final removal
  is its own kubelet's), kubectl returns once the namespace is gone, and nothing is left.
* A custom object whose finalizer nobody removes keeps the namespace Terminating, with
  `NamespaceFinalizersRemaining` True naming the finalizer; removing it lets the namespace go.
* Creating in a terminating namespace is a 403 worded as kube-apiserver's NamespaceLifecycle
  admission (the qualified resource and the `NamespaceTerminating` cause).
* Pods on a powered-off node never finish terminating, so their namespace stays Terminating
  (`pods. has N resource instances`), as upstream; power back on and it goes.
* `kubectl delete ns default` (and the other system namespaces) is refused.
* A namespace created the way kubectl 1.27-1.31 create it (`spec: {}`) still gets the
  `kubernetes` finalizer, so deleting it empties it instead of orphaning its content.

Every deadline is in cluster seconds (through `MeshEnv.until` and `Story.holds`).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from cm_e2e import (
    Story,
    crd_manifest,
    custom_kind,
    custom_object,
    deletions_by,
    forbidden_in_terminating,
    namespace_conditions,
    node_of,
    phase,
    pod_manifest,
    running,
    start_story,
    terminating,
)

from kubemesh.services.machinery.client import ForbiddenError
from kubemesh.services.model.kinds import (
    CONFIGMAPS,
    DEPLOYMENTS,
    NAMESPACES,
    PODS,
    REPLICASETS,
    SECRETS,
    SERVICEACCOUNTS,
    Obj,
)

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.asyncio(loop_scope="module")]

RATE = 20.0
NODES = 3
GRACE = 30
"""The pods' default terminationGracePeriodSeconds."""
STOP = 20
"""Cluster seconds the test pods' containers take to exit after SIGTERM (within the grace)."""
SLACK = 30.0
"""Cluster seconds of tolerance on deadlines: the machine is shared and the processes lag."""

GROUP = "lifecycle.example.com"
GIZMOS = custom_kind(group=GROUP, kind="Gizmo", plural="gizmos")
HOLD = f"{GROUP}/hold"
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def story() -> AsyncIterator[Story]:
    async for s in start_story(nodes=NODES, rate=RATE):
        await s.apply(crd_manifest(group=GROUP, kind="Gizmo", plural="gizmos"))
        await s.run("wait", "--for=condition=established", f"crd/gizmos.{GROUP}", f"--timeout={s.timeout(30)}")
        yield s


def namespace(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def deployment(name: str, ns: str, *, replicas: int, stop_seconds: float = STOP) -> Obj:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "namespace": ns},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels,
                                               "annotations": {"kubemesh.io/stop-seconds": str(stop_seconds)}},
                                  "spec": {"containers": [{"name": "main", "image": "nginx:1.27"}]}}}}


def configmap(name: str, ns: str) -> Obj:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": ns},
            "data": {"key": name}}


async def running_pods(s: Story, ns: str, count: int) -> list[Obj]:
    async def ready() -> list[Obj] | None:
        pods = await s.items(PODS, ns)
        return pods if len(pods) == count and all(running(p) for p in pods) else None

    pods: list[Obj] = await s.until(ready, within=60 + SLACK, what=f"{count} pods Running in {ns}")
    return pods


async def gone(s: Story, ns: str, *, within: float) -> None:
    async def absent() -> bool:
        return await s.namespace(ns) is None

    await s.until(absent, within=within, what=f"namespace {ns} gone")


# ------------------------------------------------------------------------------------- the tests


async def test_kubectl_delete_namespace_removes_everything_gracefully(story: Story) -> None:
    s, ns = story, "team"
    out = await s.apply(
        namespace(ns), deployment("web", ns, replicas=3),
        pod_manifest("solo", ns, stop_seconds=STOP),
        configmap("settings", ns), configmap("flags", ns),
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": ns},
         "stringData": {"password": "hunter2"}},
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls", "namespace": ns},
         "data": {"tls.crt": "Y2VydA=="}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot", "namespace": ns}},
        custom_object(GIZMOS, "g1", ns), custom_object(GIZMOS, "g2", ns, spec={"size": 2}),
    )
    assert out.count(" created") == 10, out
    created = await s.namespace(ns)
    assert created is not None and created["spec"]["finalizers"] == ["kubernetes"], created
    await s.run("-n", ns, "wait", "--for=condition=Available", "deployment/web", f"--timeout={s.timeout(90)}")
    pods = await running_pods(s, ns, 4)
    nodes = {p["metadata"]["name"]: node_of(p) for p in pods}
    since = await s.history_index()

    deleting = asyncio.create_task(s.run("delete", "namespace", ns, f"--timeout={s.timeout(300)}", within=300))
    seen_terminating: dict[str, Obj] = {}
    try:
        async def terminating_with_pods_left() -> Obj | None:
            for p in await s.items(PODS, ns):
                if terminating(p):
                    seen_terminating.setdefault(p["metadata"]["name"], p)
            got = await s.namespace(ns)
            cond = namespace_conditions(got).get("NamespaceContentRemaining")
            return got if cond is not None and cond["status"] == "True" else None

        ns_obj: Obj = await s.until(terminating_with_pods_left, within=30,
                                    what=f"{ns} Terminating with NamespaceContentRemaining True")
        md = ns_obj["metadata"]
        assert phase(ns_obj) == "Terminating" and md.get("deletionTimestamp"), ns_obj
        assert ns_obj["spec"]["finalizers"] == ["kubernetes"], "the namespace controller has not finalized it yet"
        conds = namespace_conditions(ns_obj)
        expected = {
            "NamespaceDeletionDiscoveryFailure": ("False", "ResourcesDiscovered"),
            "NamespaceDeletionGroupVersionParsingFailure": ("False", "ParsedGroupVersions"),
            "NamespaceDeletionContentFailure": ("False", "ContentDeleted"),
            "NamespaceContentRemaining": ("True", "SomeResourcesRemain"),
            "NamespaceFinalizersRemaining": ("False", "ContentHasNoFinalizers"),
        }
        assert {t: (c["status"], c["reason"]) for t, c in conds.items()} == expected, conds
        remaining = conds["NamespaceContentRemaining"]["message"]
        assert remaining.startswith("Some resources are remaining: ") and "pods. has " in remaining, remaining
        table = await s.run("get", "namespace", ns, "--no-headers")
        assert table.split()[:2] == [ns, "Terminating"], table

        # Every pod is deleted with its grace period, and stays until its kubelet confirms.
        async def every_pod_seen_terminating() -> bool:
            for p in await s.items(PODS, ns):
                if terminating(p):
                    seen_terminating.setdefault(p["metadata"]["name"], p)
            return set(nodes) <= set(seen_terminating)

        await s.until(every_pod_seen_terminating, within=30, what="every pod of the namespace seen Terminating")
        for name, p in seen_terminating.items():
            assert p["metadata"].get("deletionGracePeriodSeconds") == GRACE, (name, p["metadata"])
        stdout = await deleting
    finally:
        if not deleting.done():
            deleting.cancel()
    assert f'namespace "{ns}" deleted' in stdout, stdout

    assert await s.namespace(ns) is None
    for kind in (PODS, DEPLOYMENTS, REPLICASETS, CONFIGMAPS, SECRETS, SERVICEACCOUNTS, GIZMOS):
        assert await s.items(kind, ns) == [], f"{kind.resource} left in the deleted namespace"
    removed = deletions_by(await s.writes(since=since, resource="pods", keys=[f"{ns}/{n}" for n in nodes]))
    assert removed == {f"{ns}/{n}": ("kubelet", node) for n, node in nodes.items()}, (
        "each pod is removed by its own kubelet once its containers stopped (never force-deleted)")


async def test_finalizer_nobody_removes_keeps_the_namespace_terminating(story: Story) -> None:
    s, ns = story, "held"
    await s.apply(namespace(ns), configmap("settings", ns), custom_object(GIZMOS, "kept", ns, finalizers=[HOLD]),
                  custom_object(GIZMOS, "free", ns))
    out = await s.run("delete", "namespace", ns, "--wait=false")
    assert f'namespace "{ns}" deleted' in out, out

    async def reported() -> Obj | None:
        got = await s.namespace(ns)
        cond = namespace_conditions(got).get("NamespaceFinalizersRemaining")
        return got if cond is not None and cond["status"] == "True" else None

    ns_obj: Obj = await s.until(reported, within=30, what=f"{ns}: NamespaceFinalizersRemaining True")
    conds = namespace_conditions(ns_obj)
    fin = conds["NamespaceFinalizersRemaining"]
    assert fin["reason"] == "SomeFinalizersRemain", fin
    assert fin["message"] == f"Some content in the namespace has finalizers remaining: {HOLD} in 1 resource instances"
    content = conds["NamespaceContentRemaining"]
    assert (content["status"], content["reason"]) == ("True", "SomeResourcesRemain"), content
    assert content["message"] == f"Some resources are remaining: gizmos.{GROUP} has 1 resource instances"

    async def still_held() -> bool:
        got, kept = await s.namespace(ns), await s.get(GIZMOS, "kept", ns)
        return phase(got) == "Terminating" and terminating(kept)

    await s.holds(still_held, during=60, what=f"{ns} Terminating while {HOLD} stays")
    assert await s.get(GIZMOS, "free", ns) is None and await s.items(CONFIGMAPS, ns) == []

    await s.run("-n", ns, "patch", f"gizmos.{GROUP}", "kept", "--type=merge", "-p",
                '{"metadata": {"finalizers": null}}')
    await s.run("wait", "--for=delete", f"namespace/{ns}", f"--timeout={s.timeout(30 + SLACK)}", within=30 + SLACK)
    assert await s.namespace(ns) is None


async def _terminating_namespace(s: Story, ns: str) -> None:
    """`ns`, Terminating for as long as the test wants: a gizmo keeps it (finalizer `HOLD`)."""
    await s.apply(namespace(ns), custom_object(GIZMOS, "anchor", ns, finalizers=[HOLD]))
    await s.run("delete", "namespace", ns, "--wait=false")

    async def anchored() -> bool:
        return terminating(await s.get(GIZMOS, "anchor", ns))

    await s.until(anchored, within=30, what=f"{ns} Terminating with its anchor being deleted")


async def _release(s: Story, ns: str) -> None:
    await s.env.client.patch(GIZMOS, "anchor", {"metadata": {"finalizers": None}}, namespace=ns)
    await gone(s, ns, within=30 + SLACK)


async def test_creating_in_a_terminating_namespace_is_forbidden(story: Story) -> None:
    s, ns = story, "closing"
    await _terminating_namespace(s, ns)
    problems: list[str] = []
    try:
        for doc, resource in ((configmap("late", ns), "configmaps"),
                              (deployment("late", ns, replicas=1), "deployments.apps"),
                              (custom_object(GIZMOS, "late", ns), f"gizmos.{GROUP}")):
            err = await s.fails("create", "-f", "-", input=_json(doc))
            want = f'Error from server (Forbidden): error when creating "STDIN": ' \
                   f"{forbidden_in_terminating(resource, 'late', ns)}"
            if want not in err.stderr:
                problems.append(f"kubectl create -f of {doc['kind']}: want {want!r}, got {err.stderr.strip()!r}")

        # The Status as client-go's controllers read it (`HasStatusCause(err, NamespaceTerminatingCause)`).
        with pytest.raises(ForbiddenError) as caught:
            await s.env.client.create(CONFIGMAPS, configmap("late", ns))
        status = caught.value.status
        assert status["reason"] == "Forbidden" and status["code"] == 403, status
        assert status["message"] == forbidden_in_terminating("configmaps", "late", ns)
        details = status.get("details") or {}
        # The core group is left out of details, as kube-apiserver writes them.
        assert details.get("name") == "late" and details.get("kind") == "configmaps", details
        assert "group" not in details, details
        causes = [{"reason": "NamespaceTerminating", "field": "metadata.namespace",
                   "message": f"namespace {ns} is being terminated"}]
        if details.get("causes") != causes:
            problems.append(f"details.causes: want {causes}, got {details.get('causes')}")
        assert await s.items(CONFIGMAPS, ns) == []
        assert await s.items(DEPLOYMENTS, ns) == [] and await s.get(GIZMOS, "late", ns) is None
    finally:
        await _release(s, ns)
    assert not problems, "\n".join(problems)


async def test_kubectl_create_commands_in_a_terminating_namespace_are_forbidden(story: Story) -> None:
    """`kubectl create configmap|deployment` of kubectl 1.32+ send protobuf bodies, as to any kube-apiserver."""
    s, ns = story, "closing-typed"
    await _terminating_namespace(s, ns)
    try:
        err = await s.fails("-n", ns, "create", "configmap", "late", "--from-literal=a=b")
        assert forbidden_in_terminating("configmaps", "late", ns) in err.stderr, err.stderr
        err = await s.fails("-n", ns, "create", "deployment", "late", "--image=nginx")
        assert forbidden_in_terminating("deployments.apps", "late", ns) in err.stderr, err.stderr
    finally:
        await _release(s, ns)


async def test_system_namespaces_cannot_be_deleted(story: Story) -> None:
    s = story
    for name in SYSTEM_NAMESPACES:
        err = await s.fails("delete", "namespace", name)
        assert (f'Error from server (Forbidden): namespaces "{name}" is forbidden: this namespace may not be '
                "deleted") in err.stderr, err.stderr
        ns = await s.namespace(name)
        assert ns is not None and phase(ns) == "Active" and not terminating(ns), ns
    # `default` keeps working.
    await s.apply(configmap("still-here", "default"))
    await s.run("delete", "configmap", "still-here", "-n", "default")


async def test_namespace_created_with_an_empty_spec_is_emptied_on_delete(story: Story) -> None:
    """kubectl 1.27-1.31 `create namespace` POSTs `spec: {}`; kube-apiserver adds `kubernetes` anyway."""
    s, ns = story, "bare-spec"
    created = await s.env.client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace",
                                                     "metadata": {"name": ns}, "spec": {}})
    await s.apply(configmap("settings", ns))
    await s.run("delete", "namespace", ns, f"--timeout={s.timeout(60)}", within=60)
    assert await s.namespace(ns) is None
    leftovers = [c["metadata"]["name"] for c in await s.items(CONFIGMAPS, ns)]
    assert created["spec"].get("finalizers") == ["kubernetes"] and not leftovers, (
        f"spec on create: {created['spec']}; left in the deleted namespace: {leftovers}")


async def test_pods_on_a_powered_off_node_keep_the_namespace_terminating(story: Story) -> None:
    s, ns = story, "dark"
    await s.apply(namespace(ns), deployment("web", ns, replicas=NODES, stop_seconds=5))
    await s.run("-n", ns, "wait", "--for=condition=Available", "deployment/web", f"--timeout={s.timeout(90)}")
    pods = await running_pods(s, ns, NODES)
    victim = node_of(pods[0])
    stuck = {p["metadata"]["name"] for p in pods if node_of(p) == victim}
    since = await s.history_index()

    async with s.env.mesh.chaos.power_off(victim):
        await s.run("delete", "namespace", ns, "--wait=false")

        async def only_the_stuck_pods_left() -> Obj | None:
            left = await s.items(PODS, ns)
            if {p["metadata"]["name"] for p in left} != stuck or not all(terminating(p) for p in left):
                return None
            got = await s.namespace(ns)
            cond = namespace_conditions(got).get("NamespaceContentRemaining")
            return got if cond is not None and cond["message"].endswith(f"pods. has {len(stuck)} resource "
                                                                        "instances") else None

        ns_obj: Obj = await s.until(only_the_stuck_pods_left, within=GRACE + SLACK,
                                    what=f"only the pods of powered-off {victim} left, Terminating")
        conds = namespace_conditions(ns_obj)
        assert conds["NamespaceContentRemaining"]["message"] == (
            f"Some resources are remaining: pods. has {len(stuck)} resource instances"), conds
        assert conds["NamespaceFinalizersRemaining"]["status"] == "False", conds

        async def stuck_terminating() -> bool:
            got = await s.namespace(ns)
            left = await s.items(PODS, ns)
            return (phase(got) == "Terminating" and {p["metadata"]["name"] for p in left} == stuck
                    and all(terminating(p) and phase(p) == "Running" for p in left))

        # Well past the grace period: nobody can confirm the pods' end on a node without power.
        await s.holds(stuck_terminating, during=GRACE + 60, what=f"{ns} Terminating, its pods on {victim} stuck")
        err = await s.fails("create", "-f", "-", input=_json(configmap("late", ns)))
        assert forbidden_in_terminating("configmaps", "late", ns) in err.stderr, err.stderr
        table = await s.run("get", "pods", "-n", ns, "--no-headers")
        assert {line.split()[0]: line.split()[2] for line in table.splitlines()} == dict.fromkeys(stuck,
                                                                                                  "Terminating")

    # Power is back: the kubelet finishes the deletions, and the namespace goes.
    await gone(s, ns, within=60 + SLACK)
    removed = deletions_by(await s.writes(since=since, resource="pods", keys=[f"{ns}/{n}" for n in stuck]))
    assert removed == {f"{ns}/{n}": ("kubelet", victim) for n in stuck}, removed


def _json(doc: Obj) -> str:
    return json.dumps(doc)

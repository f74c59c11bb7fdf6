"""The garbage collector across custom resources and any built-in kind, end to end on a real mesh (kubectl 1.33).

One mesh of two nodes at clock rate 20 is shared by the module. Every CRD here is created
after the controller-manager started, so each test also proves that the collector picked the
new kind up by discovery; the last one creates a CRD and uses it at once, both ways round,
and checks that no process was restarted. What the tests prove:

* a custom object owning pods: `kubectl delete` with background propagation removes the owner
  at once and the collector deletes the pods (gracefully: their kubelets remove them);
* with foreground propagation the owner stays (`foregroundDeletion`, deletionTimestamp) until
  every pod blocking it is gone, and only then goes;
* with orphan propagation the pods stay, running, with the owner reference removed;
* a pod owning a custom object: deleting the pod collects the custom object;
* a CRD created after the controller-manager started: a custom object owned by a ConfigMap
  and a ConfigMap owned by a custom object of the new kind are both collected;
* built-in owners too: a ConfigMap and a Service owned by a deleted Deployment are collected, and
  a ConfigMap owner deleted in the foreground goes after its child, in orphan mode without it.

Every deadline is in cluster seconds (`MeshEnv.until`, `Story.holds`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from cm_e2e import (
    Story,
    crd_manifest,
    custom_kind,
    custom_object,
    deletions_by,
    owner_ref,
    pod_manifest,
    running,
    start_story,
    terminating,
)

from kubemesh.services.model.kinds import CONFIGMAPS, DEPLOYMENTS, PODS, SERVICES, Kind, Obj

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.asyncio(loop_scope="module")]

RATE = 20.0
NS = "default"
STOP = 20
"""Cluster seconds the dependents' containers take to exit after SIGTERM."""
SLACK = 30.0
GROUP = "gc.example.com"
FLEETS = custom_kind(group=GROUP, kind="Fleet", plural="fleets")
TICKETS = custom_kind(group=GROUP, kind="Ticket", plural="tickets")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def story() -> AsyncIterator[Story]:
    async for s in start_story(nodes=2, rate=RATE):
        await s.apply(crd_manifest(group=GROUP, kind="Fleet", plural="fleets"),
                      crd_manifest(group=GROUP, kind="Ticket", plural="tickets"))
        await s.run("wait", "--for=condition=established", f"crd/fleets.{GROUP}", f"crd/tickets.{GROUP}",
                    f"--timeout={s.timeout(30)}")
        yield s


async def fleet_with_pods(s: Story, name: str, count: int = 2) -> tuple[Obj, list[str]]:
    """Fleet `name` and `count` Running pods it owns (blockOwnerDeletion, controller)."""
    await s.apply(custom_object(FLEETS, name, NS))
    fleet = await s.get(FLEETS, name, NS)
    assert fleet is not None
    pods = [f"{name}-{i}" for i in range(count)]
    await s.apply(*(pod_manifest(p, NS, stop_seconds=STOP, owners=[owner_ref(fleet)], labels={"fleet": name})
                    for p in pods))

    async def all_running() -> bool:
        got = await s.items(PODS, NS, labels=f"fleet={name}")
        return len(got) == count and all(running(p) for p in got)

    await s.until(all_running, within=60 + SLACK, what=f"the pods of fleet {name} Running")
    return fleet, pods


async def absent(s: Story, kind: Kind, name: str) -> bool:
    return await s.get(kind, name, NS) is None


async def test_background_deletion_of_a_custom_owner_removes_its_pods(story: Story) -> None:
    s = story
    _, pods = await fleet_with_pods(s, "bg")
    since = await s.history_index()
    out = await s.run("delete", f"fleets.{GROUP}", "bg", "--cascade=background")
    assert f'fleet.{GROUP} "bg" deleted' in out, out
    assert await absent(s, FLEETS, "bg"), "background: the owner goes at once"

    async def pods_gone() -> bool:
        return not await s.items(PODS, NS, labels="fleet=bg")

    await s.until(pods_gone, within=STOP + 30 + SLACK, what="the garbage collector deleted the fleet's pods")
    removed = deletions_by(await s.writes(since=since, resource="pods", keys=[f"{NS}/{p}" for p in pods]))
    assert {k: comp for k, (comp, _node) in removed.items()} == dict.fromkeys((f"{NS}/{p}" for p in pods),
                                                                              "kubelet"), removed


async def test_foreground_deletion_waits_for_the_pods(story: Story) -> None:
    s = story
    _, pods = await fleet_with_pods(s, "fg")
    since = await s.history_index()
    await s.run("delete", f"fleets.{GROUP}", "fg", "--cascade=foreground", "--wait=false")

    async def owner_waiting() -> Obj | None:
        got = await s.get(FLEETS, "fg", NS)
        return got if terminating(got) else None

    fleet: Obj = await s.until(owner_waiting, within=10, what="fleet fg marked for foreground deletion")
    assert "foregroundDeletion" in (fleet["metadata"].get("finalizers") or []), fleet["metadata"]

    async def owner_and_terminating_pods() -> bool:
        got = await s.items(PODS, NS, labels="fleet=fg")
        return bool(got) and all(terminating(p) for p in got) and terminating(await s.get(FLEETS, "fg", NS))

    await s.until(owner_and_terminating_pods, within=10 + SLACK,
                  what="the pods Terminating while the fleet waits for them")
    await s.run("wait", "--for=delete", f"fleets.{GROUP}/fg", f"--timeout={s.timeout(STOP + 30 + SLACK)}",
                within=STOP + 30 + SLACK)
    assert not await s.items(PODS, NS, labels="fleet=fg"), "the owner went before its blocking dependents"
    pod_writes = await s.writes(since=since, resource="pods", keys=[f"{NS}/{p}" for p in pods])
    fleet_writes = await s.writes(since=since, resource=FLEETS.plural, keys=[f"{NS}/fg"])
    pods_removed = [r["rv"] for r in pod_writes if r["event"] == "DELETED"]
    fleet_removed = [r["rv"] for r in fleet_writes if r["event"] == "DELETED"]
    assert len(pods_removed) == len(pods) and len(fleet_removed) == 1, (pod_writes, fleet_writes)
    assert max(pods_removed) < fleet_removed[0], (pod_writes, fleet_writes)


async def test_orphan_deletion_keeps_the_pods(story: Story) -> None:
    s = story
    _, pods = await fleet_with_pods(s, "orphans")
    await s.run("delete", f"fleets.{GROUP}", "orphans", "--cascade=orphan",
                f"--timeout={s.timeout(30 + SLACK)}", within=30 + SLACK)
    assert await absent(s, FLEETS, "orphans")

    async def released() -> bool:
        got = await s.items(PODS, NS, labels="fleet=orphans")
        return len(got) == len(pods) and not any(p["metadata"].get("ownerReferences") for p in got)

    await s.until(released, within=30, what="the owner reference removed from the orphans")

    async def kept() -> bool:
        got = await s.items(PODS, NS, labels="fleet=orphans")
        return len(got) == len(pods) and all(running(p) for p in got)

    await s.holds(kept, during=60, what="the orphaned pods keep running")
    await s.run("delete", "pods", "-l", "fleet=orphans", f"--timeout={s.timeout(STOP + 30 + SLACK)}",
                within=STOP + 30 + SLACK)


async def test_deleting_a_pod_collects_the_custom_object_it_owns(story: Story) -> None:
    s = story
    await s.apply(pod_manifest("holder", NS))
    pod = await s.get(PODS, "holder", NS)
    assert pod is not None
    await s.apply(custom_object(TICKETS, "holder-ticket", NS, owners=[owner_ref(pod, controller=False)]))
    await s.holds(lambda: _present(s, TICKETS, "holder-ticket"), during=20,
                  what="the ticket stays while its owner pod exists")
    await s.run("delete", "pod", "holder", f"--timeout={s.timeout(60)}", within=60)

    await s.until(lambda: absent(s, TICKETS, "holder-ticket"), within=30 + SLACK,
                  what="the garbage collector deleted the pod's ticket")


async def _present(s: Story, kind: Kind, name: str) -> bool:
    return await s.get(kind, name, NS) is not None


async def test_a_crd_created_after_the_controller_manager_started_is_collected(story: Story) -> None:
    s = story
    kcm_before = {p.name: p.pid for p in s.env.mesh.processes}
    late = custom_kind(group=GROUP, kind="Latecomer", plural="latecomers")
    await s.apply(crd_manifest(group=GROUP, kind="Latecomer", plural="latecomers"))
    # Used at once, before any resync: an owner ConfigMap and a dependent of the new kind...
    await s.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "anchor", "namespace": NS}})
    anchor = await s.get(CONFIGMAPS, "anchor", NS)
    assert anchor is not None
    await s.apply(custom_object(late, "dependent", NS, owners=[owner_ref(anchor)]))
    # ... and an owner of the new kind with a ConfigMap dependent.
    await s.apply(custom_object(late, "parent", NS))
    parent = await s.get(late, "parent", NS)
    assert parent is not None
    await s.apply({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "child", "namespace": NS, "ownerReferences": [owner_ref(parent)]}})

    await s.run("delete", "configmap", "anchor")
    await s.run("delete", f"latecomers.{GROUP}", "parent")
    await s.until(lambda: absent(s, late, "dependent"), within=30 + SLACK,
                  what="the Latecomer owned by a deleted ConfigMap collected")
    await s.until(lambda: absent(s, CONFIGMAPS, "child"), within=30 + SLACK,
                  what="the ConfigMap owned by a deleted Latecomer collected")

    assert {p.name: p.pid for p in s.env.mesh.processes} == kcm_before, "no process was restarted"
    assert not s.env.mesh.crashed()


# ------------------------------------------------------------------------------ built-in owners


async def test_a_config_map_and_a_service_owned_by_a_deployment_are_collected(story: Story) -> None:
    s = story
    await s.run("create", "deployment", "owner-web", "--image=nginx", "--replicas=1")
    deploy = await s.get(DEPLOYMENTS, "owner-web", NS)
    assert deploy is not None
    owners = [owner_ref(deploy)]
    await s.apply({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "owner-web-config", "namespace": NS, "ownerReferences": owners},
                   "data": {"k": "v"}},
                  {"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "owner-web-svc", "namespace": NS, "ownerReferences": owners},
                   "spec": {"selector": {"app": "owner-web"}, "ports": [{"port": 80}]}})
    await s.run("delete", "deployment", "owner-web")

    async def both_gone() -> bool:
        return await absent(s, CONFIGMAPS, "owner-web-config") and await absent(s, SERVICES, "owner-web-svc")

    await s.until(both_gone, within=30 + SLACK, what="the Deployment's ConfigMap and Service collected")


async def test_foreground_and_orphan_deletion_of_a_config_map_owner(story: Story) -> None:
    s = story

    async def parent_and_child(prefix: str) -> None:
        await s.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{prefix}-parent",
                                                                              "namespace": NS}})
        parent = await s.get(CONFIGMAPS, f"{prefix}-parent", NS)
        assert parent is not None
        await s.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": f"{prefix}-child", "namespace": NS, "ownerReferences": [owner_ref(parent)]}})

    # Foreground: the owner is marked (foregroundDeletion) and goes only after its blocking child.
    await parent_and_child("fgc")
    since = await s.history_index()
    await s.run("delete", "configmap", "fgc-parent", "--cascade=foreground",
                f"--timeout={s.timeout(30 + SLACK)}", within=30 + SLACK)
    assert await absent(s, CONFIGMAPS, "fgc-parent") and await absent(s, CONFIGMAPS, "fgc-child")
    records = await s.writes(since=since, resource="configmaps", keys=[f"{NS}/fgc-parent", f"{NS}/fgc-child"])
    parent_events = [r["event"] for r in records if r["key"] == f"{NS}/fgc-parent"]
    assert parent_events[0] == "MODIFIED" and parent_events[-1] == "DELETED", records  # marked, then removed
    deleted = {r["key"]: r["rv"] for r in records if r["event"] == "DELETED"}
    assert deleted[f"{NS}/fgc-child"] < deleted[f"{NS}/fgc-parent"], records

    # Orphan: the owner goes, the child stays without its owner reference.
    await parent_and_child("orc")
    await s.run("delete", "configmap", "orc-parent", "--cascade=orphan",
                f"--timeout={s.timeout(30 + SLACK)}", within=30 + SLACK)
    assert await absent(s, CONFIGMAPS, "orc-parent")

    async def released() -> Obj | None:
        child = await s.get(CONFIGMAPS, "orc-child", NS)
        return child if child is not None and not child["metadata"].get("ownerReferences") else None

    await s.until(released, within=30, what="the orphaned ConfigMap released")
    await s.holds(lambda: _present(s, CONFIGMAPS, "orc-child"), during=20, what="the orphaned ConfigMap stays")

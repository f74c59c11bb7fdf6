"""ReplicaSet, Deployment, taint eviction, PodGC, GC and DaemonSet decisions on a manual clock."""

from __future__ import annotations

import random
from typing import Any

import pytest
from cm_fakes import FakeApi

from kubemesh.controller_manager.daemonset import DaemonSetController
from kubemesh.controller_manager.deployment import (
    DeploymentController,
    calculate_status,
    old_pods_running,
    plan_old_scale_down,
    resolve_fenceposts,
)
from kubemesh.controller_manager.expectations import Expectations
from kubemesh.controller_manager.garbagecollector import GarbageCollector, Owners, decide_dependent
from kubemesh.controller_manager.objects import is_active
from kubemesh.controller_manager.podgc import PodGC
from kubemesh.controller_manager.replicaset import ReplicaSetController, compute_status, pods_to_delete
from kubemesh.controller_manager.settings import PodGCSettings
from kubemesh.controller_manager.tainteviction import TaintEvictionController, min_toleration_seconds, plan_pod
from kubemesh.services.machinery.clock import ManualClock, format_time
from kubemesh.services.machinery.eventing import EventRecorder
from kubemesh.services.model.kinds import DAEMONSETS, DEPLOYMENTS, NODES, PODS, REPLICASETS, Obj


def pod(name: str, phase: str = "Running", *, deleting: bool = False, node: str = "n1", ready: bool = True,
        owner_uid: str | None = None, labels: dict[str, str] | None = None) -> Obj:
    md: dict[str, Any] = {"name": name, "namespace": "default", "uid": f"uid-{name}", "labels": labels or {}}
    if deleting:
        md["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if owner_uid:
        md["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": owner_uid,
                                  "controller": True}]
    return {"metadata": md, "spec": {"nodeName": node},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def rs(uid: str, replicas: int = 0, status_replicas: int = 0, available: int = 0, created: float = 0) -> Obj:
    return {"metadata": {"name": f"rs-{uid}", "uid": uid, "creationTimestamp": format_time(1_700_000_000 + created)},
            "spec": {"replicas": replicas},
            "status": {"replicas": status_replicas, "availableReplicas": available}}


# -- Recreate's oldPodsRunning: the seed's trap ------------------------------------------------


@pytest.mark.parametrize(("pods", "running"), [
    ([pod("a", "Running")], True),
    ([pod("a", "Running", deleting=True)], True),   # Terminating on a dead node: still counts
    ([pod("a", "Pending")], True),
    ([pod("a", "Unknown")], True),
    ([pod("a", "Failed")], False),
    ([pod("a", "Succeeded")], False),
    ([pod("a", "Failed"), pod("b", "Succeeded", deleting=True)], False),
    ([], False),
])
def test_old_pods_running(pods: list[Obj], running: bool) -> None:
    new = rs("new")
    old = rs("old")
    assert old_pods_running(new, [old], {"old": pods, "new": [pod("x")]}) is running


def test_old_pods_running_counts_reported_replicas() -> None:
    assert old_pods_running(None, [rs("old", status_replicas=1)], {})


def test_terminating_pod_is_not_an_active_replica() -> None:
    assert not is_active(pod("a", deleting=True))
    assert not is_active(pod("a", "Failed"))
    assert is_active(pod("a", "Pending"))


# -- rolling update arithmetic -----------------------------------------------------------------


def dep(replicas: int, surge: Any = "25%", unavailable: Any = "25%", strategy: str = "RollingUpdate") -> Obj:
    return {"metadata": {"name": "d", "namespace": "default", "generation": 1},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "a"}},
                     "strategy": {"type": strategy,
                                  "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
                     "progressDeadlineSeconds": 600,
                     "template": {"metadata": {"labels": {"app": "a"}},
                                  "spec": {"containers": [{"name": "c", "image": "v1"}]}}}}


def test_fenceposts_round_surge_up_and_unavailable_down() -> None:
    assert resolve_fenceposts(dep(10)) == (3, 2)
    assert resolve_fenceposts(dep(3, 0, 0)) == (0, 1)
    assert resolve_fenceposts(dep(4, 1, 0)) == (1, 0)


def test_old_scale_down_keeps_min_available() -> None:
    d = dep(4, 1, 1)
    old = rs("old", replicas=4, status_replicas=4, available=4)
    new = rs("new", replicas=1, status_replicas=1, available=0, created=10)
    plan = plan_old_scale_down(d, [old, new], [old], new)
    # all=5, minAvailable=3, new unavailable=1 → may scale down 1
    assert plan == {"old": 3}
    assert plan_old_scale_down(d, [old, new], [], new) == {}


def test_deployment_status_conditions() -> None:
    d = dep(2)
    new = rs("new", replicas=2, status_replicas=2, available=2)
    new["status"]["readyReplicas"] = 2
    st = calculate_status(d, [new], new, now=1_700_000_000)
    assert st["updatedReplicas"] == 2 and st["availableReplicas"] == 2
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Available"]["status"] == "True"
    assert conds["Progressing"]["reason"] == "NewReplicaSetAvailable"


def test_progress_deadline_exceeded() -> None:
    d = dep(2)
    d["status"] = {"replicas": 1, "updatedReplicas": 1, "conditions": [
        {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
                                   "lastUpdateTime": format_time(1_700_000_000),
                                   "lastTransitionTime": format_time(1_700_000_000)}]}
    new = rs("new", replicas=2, status_replicas=1, available=0)
    st = calculate_status(d, [new], new, now=1_700_000_000 + 601)
    prog = next(c for c in st["conditions"] if c["type"] == "Progressing")
    assert (prog["status"], prog["reason"]) == ("False", "ProgressDeadlineExceeded")


# -- controllers against the fake apiserver ----------------------------------------------------


def recorder(clock: ManualClock) -> EventRecorder:
    return EventRecorder(None, clock=clock, component="kube-controller-manager")


def rs_controller(api: FakeApi, rec: EventRecorder) -> ReplicaSetController:
    c = ReplicaSetController(api=api, replicasets=api.store(REPLICASETS), pods=api.store(PODS), clock=api.clock,
                             rng=random.Random(1), recorder=rec.for_component("replicaset-controller"))
    return c


def set_running(api: FakeApi, ready: bool = True) -> None:
    for p in api.objects.get("pods", {}).values():
        if not p["metadata"].get("deletionTimestamp") and (p.get("status") or {}).get("phase") not in (
                "Failed", "Succeeded"):
            p["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                                              "lastTransitionTime": format_time(api.clock.now())}]}


async def test_replicaset_creates_with_expectations_and_reports_status() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    rec = recorder(clock)
    c = rs_controller(api, rec)
    api.add(REPLICASETS, {"metadata": {"name": "web"}, "spec": {
        "replicas": 3, "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
    await c.reconcile("default/web")
    assert len(api.names(PODS)) == 3
    assert len(rec.reasons("SuccessfulCreate")) == 3
    # expectations not yet observed: a second sync does nothing
    await c.reconcile("default/web")
    assert len(api.names(PODS)) == 3
    for p in api.objects["pods"].values():
        c.on_pod_add(p)
    set_running(api)
    await c.reconcile("default/web")
    st = api.objects["replicasets"]["default/web"]["status"]
    assert st == {"replicas": 3, "fullyLabeledReplicas": 3, "readyReplicas": 3, "availableReplicas": 3,
                  "observedGeneration": 1}
    # a pod being deleted is not a replica: a replacement is created
    victim = api.names(PODS)[0]
    api.objects["pods"][victim]["metadata"]["deletionTimestamp"] = format_time(clock.now())
    await c.reconcile("default/web")
    assert len(api.names(PODS)) == 4
    # scale down deletes the surplus, not-ready pods first
    for p in api.objects["pods"].values():
        c.on_pod_add(p)
    api.objects["replicasets"]["default/web"]["spec"]["replicas"] = 1
    await c.reconcile("default/web")
    assert len(rec.reasons("SuccessfulDelete")) == 2


async def test_replicaset_adopts_orphans_and_releases_non_matching() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    c = rs_controller(api, recorder(clock))
    r = api.add(REPLICASETS, {"metadata": {"name": "web"}, "spec": {
        "replicas": 1, "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {}}}})
    api.add(PODS, {"metadata": {"name": "orphan", "labels": {"app": "web"}}, "spec": {},
                   "status": {"phase": "Running"}})
    await c.reconcile("default/web")
    assert api.objects["pods"]["default/orphan"]["metadata"]["ownerReferences"][0]["uid"] == r["metadata"]["uid"]
    assert api.names(PODS) == ["default/orphan"]
    api.objects["pods"]["default/orphan"]["metadata"]["labels"] = {"app": "other"}
    await c.reconcile("default/web")
    assert "ownerReferences" not in api.objects["pods"]["default/orphan"]["metadata"]


def test_deletion_rank_prefers_unscheduled_pending_not_ready() -> None:
    a = pod("a", node="")
    b = pod("b", "Pending")
    c = pod("c", ready=False)
    d = pod("d")
    assert [p["metadata"]["name"] for p in pods_to_delete([d, c, b, a], 3)] == ["a", "b", "c"]


def test_rs_status_available_needs_min_ready_seconds() -> None:
    r = {"metadata": {"generation": 2},
         "spec": {"minReadySeconds": 10, "template": {"metadata": {"labels": {"x": "1"}}}}}
    p = pod("a", labels={"x": "1"})
    p["status"]["conditions"][0]["lastTransitionTime"] = format_time(1000)
    assert compute_status(r, [p], now=1005)["availableReplicas"] == 0
    assert compute_status(r, [p], now=1010)["availableReplicas"] == 1


async def test_expectations_expire_after_ttl() -> None:
    clock = ManualClock()
    e = Expectations(clock=clock, ttl=300)
    e.expect_creations("k", 2)
    assert not e.satisfied("k")
    await clock.advance(301)
    assert e.satisfied("k")  # the #129795 escape hatch


class Mesh:
    """Deployment + ReplicaSet controllers and a kubelet stand-in that runs pods on live nodes."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.api = FakeApi(self.clock)
        self.rec = recorder(self.clock)
        self.rsc = rs_controller(self.api, self.rec)
        self.dc = DeploymentController(api=self.api, deployments=self.api.store(DEPLOYMENTS),
                                       replicasets=self.api.store(REPLICASETS), pods=self.api.store(PODS),
                                       clock=self.clock, rng=random.Random(2),
                                       recorder=self.rec.for_component("deployment-controller"))
        self.dead: set[str] = set()

    async def settle(self, rounds: int = 12) -> None:
        for _ in range(rounds):
            await self.dc.reconcile("default/d")
            for key in list(self.api.objects.get("replicasets", {})):
                for p in self.api.objects.get("pods", {}).values():
                    self.rsc.on_pod_add(p)
                await self.rsc.reconcile(key)
            self.kubelet()
            await self.clock.advance(1)

    def kubelet(self) -> None:
        pods = self.api.objects.get("pods", {})
        for key, p in list(pods.items()):
            node = p["spec"].get("nodeName") or "alive"
            p["spec"]["nodeName"] = node
            if node in self.dead:
                continue
            if p["metadata"].get("deletionTimestamp"):
                del pods[key]
            elif (p.get("status") or {}).get("phase") != "Running":
                p["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}

    def template_image(self, image: str) -> None:
        d = self.api.objects["deployments"]["default/d"]
        d["spec"]["template"]["spec"]["containers"][0]["image"] = image
        d["metadata"]["generation"] += 1

    def pods_by_image(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for p in self.api.objects.get("pods", {}).values():
            if not p["metadata"].get("deletionTimestamp"):
                img = p["spec"]["containers"][0]["image"]
                out[img] = out.get(img, 0) + 1
        return out


async def test_rolling_update_rolls_through() -> None:
    m = Mesh()
    m.api.add(DEPLOYMENTS, dep(4, 1, 1))
    await m.settle()
    assert m.pods_by_image() == {"v1": 4}
    d = m.api.objects["deployments"]["default/d"]
    assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    m.template_image("v2")
    await m.settle(20)
    assert m.pods_by_image() == {"v2": 4}
    d = m.api.objects["deployments"]["default/d"]
    assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"
    st = d["status"]
    assert (st["replicas"], st["updatedReplicas"], st["availableReplicas"]) == (4, 4, 4)
    assert st["observedGeneration"] == d["metadata"]["generation"]
    assert any(e.reason == "ScalingReplicaSet" and "down" in e.message for e in m.rec.recorded)


async def test_recreate_waits_forever_on_terminating_pod_of_dead_node() -> None:
    m = Mesh()
    m.api.add(DEPLOYMENTS, dep(1, strategy="Recreate"))
    await m.settle()
    (key,) = m.api.names(PODS)
    # the pod's node dies; the taint manager deletes it: Terminating forever
    m.api.objects["pods"][key]["spec"]["nodeName"] = "dead"
    m.dead.add("dead")
    m.api.objects["pods"][key]["metadata"]["deletionTimestamp"] = format_time(m.clock.now())
    await m.settle()
    assert m.pods_by_image() == {"v1": 1}  # the ReplicaSet replaced it elsewhere
    m.template_image("v2")
    await m.settle(20)
    assert m.pods_by_image() == {}  # old replacement gone, new never created
    assert key in m.api.objects["pods"]
    # PodGC-style force delete resolves it
    del m.api.objects["pods"][key]
    await m.settle()
    assert m.pods_by_image() == {"v2": 1}


# -- taint eviction ----------------------------------------------------------------------------


UNREACH = {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}


def test_min_toleration_seconds() -> None:
    assert min_toleration_seconds([]) == 0
    assert min_toleration_seconds([{"tolerationSeconds": 300}, {"tolerationSeconds": 30}]) == 30
    assert min_toleration_seconds([{"key": "x"}]) is None
    assert min_toleration_seconds([{"tolerationSeconds": -5}]) == 0


def test_plan_pod() -> None:
    node = {"metadata": {"name": "n1"}, "spec": {"taints": [UNREACH]}}
    p = pod("a")
    assert plan_pod(p, node, now=100, scheduled_at=None, scheduled_created=None).action == "delete"
    p["spec"]["tolerations"] = [{"key": UNREACH["key"], "operator": "Exists", "effect": "NoExecute",
                                 "tolerationSeconds": 300}]
    d = plan_pod(p, node, now=100, scheduled_at=None, scheduled_created=None)
    assert (d.action, d.at) == ("schedule", 400)
    assert plan_pod(p, node, now=200, scheduled_at=400, scheduled_created=100).action == "keep"
    untainted = {"metadata": {"name": "n1"}}
    assert plan_pod(p, untainted, now=200, scheduled_at=400, scheduled_created=100).action == "cancel"
    del p["spec"]["tolerations"][0]["tolerationSeconds"]
    assert plan_pod(p, node, now=100, scheduled_at=None, scheduled_created=None).action == "cancel"


async def test_taint_eviction_deletes_after_toleration_seconds() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    api.add(NODES, {"metadata": {"name": "n1"}, "spec": {"taints": [UNREACH]}})
    p = pod("a")
    p["spec"]["tolerations"] = [{"key": UNREACH["key"], "operator": "Exists", "effect": "NoExecute",
                                 "tolerationSeconds": 300}]
    api.add(PODS, p)
    api.add(PODS, pod("b"))
    tc = TaintEvictionController(api=api, nodes=api.store(NODES), pods=api.store(PODS), clock=clock,
                                 recorder=recorder(clock).for_component("taint-eviction-controller"))
    res = await tc.reconcile(("node", "n1"))
    assert tc.deleted == ["default/b"]
    assert res is not None and res.requeue_after == 300
    await clock.advance(299)
    await tc.reconcile(("pod", "default/a"))
    assert "deletionTimestamp" not in api.objects["pods"]["default/a"]["metadata"]
    await clock.advance(1)
    await tc.reconcile(("pod", "default/a"))
    md = api.objects["pods"]["default/a"]["metadata"]
    assert "deletionTimestamp" in md  # graceful: stays Terminating until a kubelet confirms
    conds = {c["type"]: c for c in api.objects["pods"]["default/a"]["status"]["conditions"]}
    assert conds["DisruptionTarget"]["reason"] == "DeletionByTaintManager"


# -- PodGC -------------------------------------------------------------------------------------


def podgc(api: FakeApi, *, oos: bool = True, threshold: int = 12500) -> PodGC:
    return PodGC(api=api, pods=api.store(PODS), nodes=api.store(NODES), clock=api.clock,
                 settings=PodGCSettings(terminated_pod_gc_threshold=threshold), out_of_service_gc=oos)


def dead_node(api: FakeApi, *, out_of_service: bool) -> None:
    taints = [UNREACH] + ([{"key": "node.kubernetes.io/out-of-service", "value": "nodeshutdown",
                            "effect": "NoExecute"}] if out_of_service else [])
    api.add(NODES, {"metadata": {"name": "n1"}, "spec": {"taints": taints},
                    "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})


@pytest.mark.parametrize(("oos_taint", "gc_enabled", "deleted"), [
    (True, True, True), (True, False, False), (False, True, False)])
async def test_out_of_service_force_deletes_terminating_pods(oos_taint: bool, gc_enabled: bool,
                                                             deleted: bool) -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    dead_node(api, out_of_service=oos_taint)
    api.add(PODS, pod("stuck", deleting=True))
    api.add(PODS, pod("running"))
    gc = podgc(api, oos=gc_enabled)
    await gc.gc_once()
    assert ("default/stuck" not in api.objects["pods"]) is deleted
    assert "default/running" in api.objects["pods"]  # not terminating: left to the taint manager
    if deleted:
        assert gc.force_deleted == ["default/stuck"]


async def test_orphaned_pods_after_quarantine_and_recheck() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    api.add(PODS, pod("orphan", node="gone"))
    gc = podgc(api)
    await gc.gc_once()
    await clock.advance(39)
    await gc.gc_once()
    assert "default/orphan" in api.objects["pods"]
    await clock.advance(1)
    plan = await gc.gc_once()
    assert plan.nodes_to_check == ["gone"]
    assert "default/orphan" not in api.objects["pods"]
    assert ("get", "nodes", "gone") in api.calls


async def test_orphan_recheck_finds_node_when_cache_lags() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    nodes = api.store(NODES)
    nodes.freeze()  # the node informer has not seen n1 yet
    api.add(NODES, {"metadata": {"name": "n1"}})
    api.add(PODS, pod("p", node="n1"))
    gc = PodGC(api=api, pods=api.store(PODS), nodes=nodes, clock=clock, settings=PodGCSettings())
    await gc.gc_once()
    await clock.advance(41)
    await gc.gc_once()
    assert "default/p" in api.objects["pods"]


async def test_terminated_pods_over_threshold() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    for i in range(5):
        api.add(PODS, pod(f"t{i}", "Succeeded"))
        await clock.advance(1)
    await podgc(api, threshold=3).gc_once()
    assert api.names(PODS) == ["default/t2", "default/t3", "default/t4"]


# -- garbage collector -------------------------------------------------------------------------


def test_gc_decisions() -> None:
    ref = {"uid": "o1", "blockOwnerDeletion": True}
    assert decide_dependent({"metadata": {}}, Owners(solid=[ref]), has_dependents=False).action == "none"
    d = decide_dependent({"metadata": {}}, Owners(dangling=[ref]), has_dependents=False)
    assert (d.action, d.policy) == ("delete", "Background")
    d = decide_dependent({"metadata": {}}, Owners(waiting=[ref]), has_dependents=True)
    assert (d.action, d.policy) == ("delete", "Foreground")
    d = decide_dependent({"metadata": {}}, Owners(solid=[{"uid": "o2"}], dangling=[ref]), has_dependents=False)
    assert (d.action, d.refs_to_remove) == ("remove-refs", ("o1",))


def gc_for(api: FakeApi) -> GarbageCollector:
    return GarbageCollector(api=api, stores={k: api.store(k) for k in (DEPLOYMENTS, REPLICASETS, PODS)})


async def test_gc_background_foreground_orphan() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    gc = gc_for(api)
    r = api.add(REPLICASETS, {"metadata": {"name": "rs"}, "spec": {}})
    api.add(PODS, pod("p1", owner_uid=r["metadata"]["uid"]))
    # orphan: the ref goes, the pod stays, the finalizer is removed and the RS disappears
    await api.delete(REPLICASETS, "rs", namespace="default", propagation_policy="Orphan")
    await gc.reconcile(("replicasets.apps", "default/rs"))
    assert "ownerReferences" not in api.objects["pods"]["default/p1"]["metadata"]
    assert "default/rs" not in api.objects.get("replicasets", {})
    # background: owner gone → dependent deleted (after the GET confirms)
    r = api.add(REPLICASETS, {"metadata": {"name": "rs2"}, "spec": {}})
    api.add(PODS, pod("p2", owner_uid=r["metadata"]["uid"], node=""))
    await api.delete(REPLICASETS, "rs2", namespace="default")
    await gc.reconcile(("pods", "default/p2"))
    assert "default/p2" not in api.objects["pods"]
    # foreground: the owner waits until its blocking dependents are gone
    r = api.add(REPLICASETS, {"metadata": {"name": "rs3"}, "spec": {}})
    p3 = pod("p3", owner_uid=r["metadata"]["uid"], node="")
    p3["metadata"]["ownerReferences"][0]["blockOwnerDeletion"] = True
    api.add(PODS, p3)
    await api.delete(REPLICASETS, "rs3", namespace="default", propagation_policy="Foreground")
    assert "default/rs3" in api.objects["replicasets"]
    res = await gc.reconcile(("replicasets.apps", "default/rs3"))
    assert "default/p3" not in api.objects["pods"]
    assert res is not None  # look again: the dependent was still cached when we checked
    await gc.reconcile(("replicasets.apps", "default/rs3"))
    assert "default/rs3" not in api.objects["replicasets"]


# -- DaemonSet ---------------------------------------------------------------------------------


async def test_daemonset_one_pod_per_eligible_node() -> None:
    clock = ManualClock()
    api = FakeApi(clock)
    api.add(NODES, {"metadata": {"name": "n1", "labels": {"os": "linux"}}, "spec": {}})
    api.add(NODES, {"metadata": {"name": "n2", "labels": {"os": "linux"}}, "spec": {"taints": [UNREACH]}})
    api.add(NODES, {"metadata": {"name": "n3", "labels": {"os": "linux"}},
                    "spec": {"taints": [{"key": "dedicated", "effect": "NoSchedule"}]}})
    api.add(NODES, {"metadata": {"name": "n4", "labels": {"os": "windows"}}, "spec": {}})
    api.add(DAEMONSETS, {"metadata": {"name": "agent"}, "spec": {
        "selector": {"matchLabels": {"app": "agent"}},
        "template": {"metadata": {"labels": {"app": "agent"}},
                     "spec": {"nodeSelector": {"os": "linux"}, "containers": [{"name": "c", "image": "i"}]}}}})
    dc = DaemonSetController(api=api, daemonsets=api.store(DAEMONSETS), nodes=api.store(NODES),
                             pods=api.store(PODS), clock=clock, rng=random.Random(3),
                             recorder=recorder(clock).for_component("daemonset-controller"))
    await dc.reconcile("default/agent")
    nodes = sorted(p["spec"]["nodeName"] for p in api.objects["pods"].values())
    assert nodes == ["n1", "n2"]  # unreachable is tolerated by daemon pods; dedicated and windows are not
    for p in api.objects["pods"].values():
        dc.on_pod_add(p)
    await dc.reconcile("default/agent")
    assert len(api.objects["pods"]) == 2
    st = api.objects["daemonsets"]["default/agent"]["status"]
    assert st["desiredNumberScheduled"] == 2 and st["currentNumberScheduled"] == 2



async def test_daemonset_pod_stays_on_a_node_that_gets_a_noschedule_taint() -> None:
    """Upstream's shouldContinueRunning: a NotReady node's `not-ready:NoSchedule` taint keeps new
    daemon pods off (they tolerate only the NoExecute one) but does not delete the one it runs;
    an untolerated NoExecute taint does."""
    clock = ManualClock()
    api = FakeApi(clock)
    api.add(NODES, {"metadata": {"name": "n1"}, "spec": {}})
    api.add(DAEMONSETS, {"metadata": {"name": "agent"}, "spec": {
        "selector": {"matchLabels": {"app": "agent"}},
        "template": {"metadata": {"labels": {"app": "agent"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}})
    dc = DaemonSetController(api=api, daemonsets=api.store(DAEMONSETS), nodes=api.store(NODES),
                             pods=api.store(PODS), clock=clock, rng=random.Random(3),
                             recorder=recorder(clock).for_component("daemonset-controller"))
    await dc.reconcile("default/agent")
    assert len(api.objects["pods"]) == 1
    for p in api.objects["pods"].values():
        dc.on_pod_add(p)
    api.objects["nodes"]["n1"]["spec"]["taints"] = [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]
    await dc.reconcile("default/agent")
    assert len(api.objects["pods"]) == 1 and not any(
        "deletionTimestamp" in p["metadata"] for p in api.objects["pods"].values())
    api.objects["nodes"]["n1"]["spec"]["taints"] = [{"key": "dedicated", "effect": "NoExecute"}]
    await dc.reconcile("default/agent")
    assert not [p for p in api.objects["pods"].values() if "deletionTimestamp" not in p["metadata"]]

"""The StatefulSet controller: unit tests on a manual clock, then on a real mesh.

`TestStatefulSetOnAMesh` applies a StatefulSet with kubectl and follows it with
`kubectl rollout status statefulset/web`, `kubectl scale statefulset` and `kubectl set image`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest
import pytest_asyncio
from cm_fakes import FakeApi
from cm_mesh import MeshEnv, start_mesh

from kubemesh.controller_manager.statefulset import (
    HASH_LABEL,
    POD_INDEX_LABEL,
    POD_NAME_LABEL,
    REVISION_LABEL,
    StatefulSetController,
    ordinal_of,
)
from kubemesh.services.machinery.clock import ManualClock, format_time
from kubemesh.services.machinery.eventing import EventRecorder
from kubemesh.services.model.kinds import CONTROLLERREVISIONS, PERSISTENTVOLUMECLAIMS, PODS, STATEFULSETS, Obj

KEY = "default/web"


class Harness:
    def __init__(self) -> None:
        self.clock = ManualClock()
        self.api = FakeApi(self.clock)
        self.rec = EventRecorder(None, clock=self.clock, component="kube-controller-manager")
        self.c = StatefulSetController(api=self.api, statefulsets=self.api.store(STATEFULSETS),
                                       pods=self.api.store(PODS), revisions=self.api.store(CONTROLLERREVISIONS),
                                       claims=self.api.store(PERSISTENTVOLUMECLAIMS), clock=self.clock,
                                       recorder=self.rec.for_component("statefulset-controller"))
        self.hold: set[str] = set()
        """Pods the kubelet stand-in keeps Pending."""

    def add(self, replicas: int = 3, **spec: Any) -> Obj:
        body: Obj = {"metadata": {"name": "web"}, "spec": {
            "replicas": replicas, "serviceName": "web-svc", "podManagementPolicy": "OrderedReady",
            "revisionHistoryLimit": 10, "selector": {"matchLabels": {"app": "web"}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "c", "image": "v1"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"},
                                      "spec": {"accessModes": ["ReadWriteOnce"],
                                               "resources": {"requests": {"storage": "1Gi"}}}}]}}
        body["spec"].update(spec)
        sts = self.api.add(STATEFULSETS, body)
        sts["status"] = {}
        return sts

    def sts(self) -> Obj:
        return self.api.objects["statefulsets"][KEY]

    def status(self) -> dict[str, Any]:
        return dict(self.sts().get("status") or {})

    def pods(self) -> dict[str, Obj]:
        return {p["metadata"]["name"]: p for p in self.api.objects.get("pods", {}).values()}

    def names(self) -> list[str]:
        return sorted(self.pods(), key=lambda n: ordinal_of("web", n) or 0)

    def revision_of(self, name: str) -> str:
        return str(self.pods()[name]["metadata"]["labels"][REVISION_LABEL])

    def kubelet(self) -> None:
        pods = self.api.objects.get("pods", {})
        for key, p in list(pods.items()):
            if p["metadata"].get("deletionTimestamp"):
                del pods[key]
            elif p["metadata"]["name"] not in self.hold and (p.get("status") or {}).get("phase") != "Running":
                p["spec"]["nodeName"] = "n1"
                p["status"] = {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": format_time(self.clock.now())}]}
                self.api._bump(p)

    def set_template(self, image: str) -> None:
        self.sts()["spec"]["template"]["spec"]["containers"][0]["image"] = image
        self.sts()["metadata"]["generation"] += 1

    async def settle(self, rounds: int = 10) -> None:
        for _ in range(rounds):
            await self.c.reconcile(KEY)
            self.kubelet()
            await self.clock.advance(1)
        await self.c.reconcile(KEY)


async def test_ordered_ready_creates_in_order_with_identity_and_claims() -> None:
    h = Harness()
    sts = h.add(3)
    await h.c.reconcile(KEY)
    assert h.names() == ["web-0"]
    await h.c.reconcile(KEY)
    assert h.names() == ["web-0"], "web-1 waits for web-0 to be Running and Ready"
    h.hold.add("web-1")
    await h.settle(3)
    assert h.names() == ["web-0", "web-1"]
    h.hold.clear()
    await h.settle(4)
    assert h.names() == ["web-0", "web-1", "web-2"]
    p = h.pods()["web-1"]
    labels = p["metadata"]["labels"]
    assert labels[POD_NAME_LABEL] == "web-1" and labels[POD_INDEX_LABEL] == "1" and labels["app"] == "web"
    assert labels[REVISION_LABEL] == h.status()["updateRevision"]
    assert p["spec"]["hostname"] == "web-1" and p["spec"]["subdomain"] == "web-svc"
    assert p["spec"]["volumes"] == [{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}}]
    assert p["metadata"]["ownerReferences"][0]["uid"] == sts["metadata"]["uid"]
    claims = h.api.objects["persistentvolumeclaims"]
    assert sorted(claims) == ["default/data-web-0", "default/data-web-1", "default/data-web-2"]
    claim = claims["default/data-web-0"]
    assert claim["metadata"]["labels"] == {"app": "web"} and "ownerReferences" not in claim["metadata"]
    assert claim["spec"]["resources"] == {"requests": {"storage": "1Gi"}}
    st = h.status()
    assert (st["replicas"], st["readyReplicas"], st["availableReplicas"], st["currentReplicas"],
            st["updatedReplicas"]) == (3, 3, 3, 3, 3)
    assert st["currentRevision"] == st["updateRevision"] and st["observedGeneration"] == 1
    assert st["collisionCount"] == 0
    (rev,) = h.api.objects["controllerrevisions"].values()
    assert rev["metadata"]["name"] == st["updateRevision"] and rev["revision"] == 1
    assert rev["metadata"]["labels"][HASH_LABEL] and rev["metadata"]["labels"]["app"] == "web"


async def test_ordered_scale_down_goes_from_the_highest_ordinal_one_at_a_time() -> None:
    h = Harness()
    h.add(3)
    await h.settle(8)
    h.sts()["spec"]["replicas"] = 1
    await h.c.reconcile(KEY)
    pods = h.pods()
    assert pods["web-2"]["metadata"].get("deletionTimestamp") and not pods["web-1"]["metadata"].get(
        "deletionTimestamp")
    await h.c.reconcile(KEY)
    assert not h.pods()["web-1"]["metadata"].get("deletionTimestamp"), "waits for web-2 to go"
    await h.settle(4)
    assert h.names() == ["web-0"]
    assert len(h.api.objects["persistentvolumeclaims"]) == 3, "Retain keeps the claims"


async def test_parallel_creates_and_deletes_at_once() -> None:
    h = Harness()
    h.add(3, podManagementPolicy="Parallel")
    h.hold.update({"web-0", "web-1", "web-2"})
    await h.c.reconcile(KEY)
    assert h.names() == ["web-0", "web-1", "web-2"]
    h.hold.clear()
    await h.settle(2)
    h.sts()["spec"]["replicas"] = 0
    await h.c.reconcile(KEY)
    assert all(p["metadata"].get("deletionTimestamp") for p in h.pods().values())


async def test_ordinals_start() -> None:
    h = Harness()
    h.add(2, ordinals={"start": 5})
    await h.settle(6)
    assert h.names() == ["web-5", "web-6"]
    assert h.pods()["web-5"]["metadata"]["labels"][POD_INDEX_LABEL] == "5"


async def test_failed_pod_is_recreated() -> None:
    h = Harness()
    h.add(1)
    await h.settle(3)
    uid = h.pods()["web-0"]["metadata"]["uid"]
    h.pods()["web-0"]["status"]["phase"] = "Failed"
    await h.settle(3)
    assert h.pods()["web-0"]["metadata"]["uid"] != uid
    assert len(h.rec.reasons("RecreatingFailedPod")) == 1


async def test_rolling_update_in_reverse_order_with_partition() -> None:
    h = Harness()
    h.add(3)
    await h.settle(8)
    old = h.status()["currentRevision"]
    h.sts()["spec"]["updateStrategy"]["rollingUpdate"]["partition"] = 1
    h.set_template("v2")
    await h.c.reconcile(KEY)
    st = h.status()
    new = st["updateRevision"]
    assert new != old and st["currentRevision"] == old
    assert h.pods()["web-2"]["metadata"].get("deletionTimestamp"), "the highest ordinal goes first"
    assert not h.pods()["web-1"]["metadata"].get("deletionTimestamp")
    await h.settle(10)
    assert [h.revision_of(n) for n in h.names()] == [old, new, new]
    assert h.pods()["web-2"]["spec"]["containers"][0]["image"] == "v2"
    st = h.status()
    assert st["updatedReplicas"] == 2 and st["currentRevision"] == old, "partitioned: not complete"
    # a partitioned pod that is recreated keeps the current revision
    h.pods()["web-0"]["status"]["phase"] = "Failed"
    await h.settle(4)
    assert h.revision_of("web-0") == old and h.pods()["web-0"]["spec"]["containers"][0]["image"] == "v1"
    h.sts()["spec"]["updateStrategy"]["rollingUpdate"]["partition"] = 0
    await h.settle(6)
    st = h.status()
    assert [h.revision_of(n) for n in h.names()] == [new, new, new]
    assert st["currentRevision"] == st["updateRevision"] == new and st["currentReplicas"] == 3
    assert st["observedGeneration"] == h.sts()["metadata"]["generation"]


async def test_on_delete_uses_the_new_revision_only_for_deleted_pods() -> None:
    h = Harness()
    h.add(2, updateStrategy={"type": "OnDelete"})
    await h.settle(6)
    old = h.status()["currentRevision"]
    h.set_template("v2")
    await h.settle(4)
    new = h.status()["updateRevision"]
    assert [h.revision_of(n) for n in h.names()] == [old, old]
    del h.api.objects["pods"]["default/web-1"]
    await h.settle(4)
    assert [h.revision_of(n) for n in h.names()] == [old, new]


async def test_rollback_renumbers_the_old_revision_and_history_is_truncated() -> None:
    h = Harness()
    h.add(1, revisionHistoryLimit=1)
    await h.settle(3)
    first = h.status()["updateRevision"]
    for image in ("v2", "v3"):
        h.set_template(image)
        await h.settle(6)
    h.set_template("v1")
    await h.settle(6)
    revs = {r["metadata"]["name"]: r["revision"] for r in h.api.objects["controllerrevisions"].values()}
    assert h.status()["updateRevision"] == first
    assert revs[first] == 4, "the rollback renumbers the equal revision"
    assert len(revs) == 2, "one live revision plus the history limit"


async def test_claim_retention_policies_set_owner_references() -> None:
    h = Harness()
    sts = h.add(2, persistentVolumeClaimRetentionPolicy={"whenDeleted": "Delete", "whenScaled": "Delete"})
    await h.settle(6)
    claims = h.api.objects["persistentvolumeclaims"]
    assert [r["uid"] for r in claims["default/data-web-1"]["metadata"]["ownerReferences"]] == [sts["metadata"]["uid"]]
    pod_uid = h.pods()["web-1"]["metadata"]["uid"]
    h.sts()["spec"]["replicas"] = 1
    await h.c.reconcile(KEY)
    refs = claims["default/data-web-1"]["metadata"]["ownerReferences"]
    assert [(r["kind"], r["uid"]) for r in refs] == [("Pod", pod_uid)], "the scaled-down pod owns its claim"
    assert h.pods()["web-1"]["metadata"].get("deletionTimestamp")
    assert [r["kind"] for r in claims["default/data-web-0"]["metadata"]["ownerReferences"]] == ["StatefulSet"]


async def test_existing_pod_that_exists_already_waits_for_the_cache() -> None:
    h = Harness()
    h.add(2)
    stale = h.api.store(PODS)
    stale.freeze()  # no pods yet in this view
    h.c.pods = stale
    await h.c.reconcile(KEY)
    await h.c.reconcile(KEY)
    assert h.names() == ["web-0"], "the name is the guard: AlreadyExists, nothing more"


# -- on a real mesh ------------------------------------------------------------------------------

STS_RATE = 10.0


@pytest_asyncio.fixture(scope="class", loop_scope="module")
async def sts_mesh() -> AsyncIterator[MeshEnv]:
    async for env in start_mesh(nodes=2, rate=STS_RATE):
        yield env


def manifests(replicas: int) -> str:
    labels = {"app": "web"}
    svc = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
           "spec": {"clusterIP": "None", "selector": labels, "ports": [{"port": 80}]}}
    sts = {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "web", "namespace": "default"},
           "spec": {"replicas": replicas, "serviceName": "web", "selector": {"matchLabels": labels},
                    "template": {"metadata": {"labels": labels},
                                 "spec": {"containers": [{"name": "main", "image": "nginx:1.25"}]}},
                    "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}]}}
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": [svc, sts]})


def ts(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@pytest.mark.slow
@pytest.mark.kubectl
@pytest.mark.asyncio(loop_scope="module")
class TestStatefulSetOnAMesh:
    async def test_rollout_status_scale_and_update(self, sts_mesh: MeshEnv) -> None:
        env = sts_mesh
        await env.run("apply", "-f", "-", input=manifests(3))
        out = await env.run("rollout", "status", "statefulset/web", f"--timeout={env.timeout(180)}", within=180)
        assert "roll out complete" in out or "rolling update complete" in out, out
        pods = {p["metadata"]["name"]: p for p in (await env.json("get", "pods", "-l", "app=web"))["items"]}
        assert sorted(pods) == ["web-0", "web-1", "web-2"]
        for i in range(3):
            p = pods[f"web-{i}"]
            assert p["status"]["phase"] == "Running"
            assert p["spec"]["hostname"] == f"web-{i}" and p["spec"]["subdomain"] == "web"
            assert p["metadata"]["labels"]["apps.kubernetes.io/pod-index"] == str(i)
        # OrderedReady: each pod was created once the one before it was Ready.
        for i in (1, 2):
            prev_ready = next(c for c in pods[f"web-{i - 1}"]["status"]["conditions"] if c["type"] == "Ready")
            assert ts(pods[f"web-{i}"]["metadata"]["creationTimestamp"]) >= ts(prev_ready["lastTransitionTime"])
        claims = {c["metadata"]["name"]: c for c in (await env.json("get", "pvc"))["items"]}
        assert sorted(claims) == ["data-web-0", "data-web-1", "data-web-2"]
        assert all(c["status"]["phase"] == "Pending" for c in claims.values()), "no provisioner: Pending"

        out = await env.run("scale", "statefulset/web", "--replicas=1")
        assert "scaled" in out

        async def one_left() -> bool:
            names = [p["metadata"]["name"] for p in (await env.json("get", "pods", "-l", "app=web"))["items"]]
            return names == ["web-0"]

        await env.until(one_left, within=120, what="scaled down to web-0")
        assert len((await env.json("get", "pvc"))["items"]) == 3, "claims are retained"

        before = (await env.json("get", "statefulset", "web"))["status"]["currentRevision"]
        await env.run("set", "image", "statefulset/web", "main=nginx:1.26")
        await env.run("scale", "statefulset/web", "--replicas=2")
        out = await env.run("rollout", "status", "statefulset/web", f"--timeout={env.timeout(180)}", within=180)
        assert "complete" in out, out
        sts = await env.json("get", "statefulset", "web")
        st = sts["status"]
        assert st["currentRevision"] == st["updateRevision"] != before
        assert (st["replicas"], st["readyReplicas"], st["updatedReplicas"]) == (2, 2, 2)
        assert st["observedGeneration"] == sts["metadata"]["generation"]
        pods = (await env.json("get", "pods", "-l", "app=web"))["items"]
        assert sorted(p["metadata"]["name"] for p in pods) == ["web-0", "web-1"]
        assert all(p["spec"]["containers"][0]["image"] == "nginx:1.26" for p in pods)
        assert all(p["metadata"]["labels"]["controller-revision-hash"] == st["updateRevision"] for p in pods)
        revisions = (await env.json("get", "controllerrevisions"))["items"]
        assert {r["metadata"]["name"] for r in revisions} >= {before, st["updateRevision"]}

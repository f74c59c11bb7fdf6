"""The Job and TTL-after-finished controllers: unit tests on a manual clock, then a real mesh.

`Harness` plays the informers (it replays every change of the fake store to the controller's
handlers, in order) and a kubelet stand-in (pods run, finish when told, and a deleted pod goes
Failed and then away once no finalizer holds it). `TestJobsOnAMesh` drives real processes
with the real kubectl (`kubectl create job`, `kubectl wait --for=condition=complete`).
"""

from __future__ import annotations

import builtins
import copy
import json
import random
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from cm_fakes import FakeApi
from cm_mesh import MeshEnv, start_mesh

from kubemesh.controller_manager.job import (
    COMPLETION_INDEX,
    LABEL_CONTROLLER_UID,
    LABEL_JOB_NAME,
    TRACKING_FINALIZER,
    JobController,
    format_indexes,
    parse_indexes,
)
from kubemesh.controller_manager.objects import PatchType
from kubemesh.controller_manager.settings import BatchSettings
from kubemesh.controller_manager.ttlafterfinished import TTLAfterFinishedController
from kubemesh.services.machinery.clock import ManualClock, format_time
from kubemesh.services.machinery.eventing import EventRecorder
from kubemesh.services.model.kinds import JOBS, PODS, Kind, Obj

KEY = "default/pi"


class BatchFakeApi(FakeApi):
    """FakeApi plus the strategic-merge directive the Job controller uses to drop its finalizer."""

    async def patch(self, kind: Any, name: str, patch: Obj | builtins.list[Obj], *,
                    namespace: str | None = None, patch_type: PatchType = "merge",
                    subresource: str | None = None) -> Obj:
        if patch_type == "strategic" and isinstance(patch, dict):
            patch = copy.deepcopy(patch)
            md = patch.setdefault("metadata", {})
            drop = md.pop("$deleteFromPrimitiveList/finalizers", None)
            if drop is not None:
                cur = self._get(kind, name, namespace)
                md["finalizers"] = [f for f in cur["metadata"].get("finalizers") or [] if f not in drop] or None
        out = await super().patch(kind, name, patch, namespace=namespace, patch_type="merge",
                                  subresource=subresource)
        self._reap(kind, name, namespace)
        return out

    def _reap(self, kind: Kind, name: str, namespace: str | None) -> None:
        """A terminal pod being deleted goes once its last finalizer does (the kubelet already said so)."""
        if kind is not PODS:
            return
        pod = self.objects.get("pods", {}).get(f"{namespace}/{name}")
        if pod is not None and pod["metadata"].get("deletionTimestamp") and not pod["metadata"].get("finalizers") \
                and (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            del self.objects["pods"][f"{namespace}/{name}"]


class Informed:
    """Replays the fake store's changes of one kind to handlers, as an informer would."""

    def __init__(self, api: FakeApi, kind: Kind, *, add: Callable[[Obj, bool], None],
                 update: Callable[[Obj, Obj], None], delete: Callable[[Obj], None]) -> None:
        self.api, self.kind = api, kind
        self.add, self.update, self.delete = add, update, delete
        self.seen: dict[str, Obj] = {}

    def pump(self) -> None:
        cur = self.api.objects.get(self.kind.plural, {})
        for k, o in list(cur.items()):
            old = self.seen.get(k)
            if old is None:
                self.add(copy.deepcopy(o), False)
            elif old["metadata"].get("resourceVersion") != o["metadata"].get("resourceVersion"):
                self.update(old, copy.deepcopy(o))
        for k in set(self.seen) - set(cur):
            self.delete(self.seen[k])
        self.seen = {k: copy.deepcopy(o) for k, o in cur.items()}


class Harness:
    def __init__(self, **settings: Any) -> None:
        self.clock = ManualClock()
        self.api = BatchFakeApi(self.clock)
        self.rec = EventRecorder(None, clock=self.clock, component="kube-controller-manager")
        self.c = JobController(api=self.api, jobs=self.api.store(JOBS), pods=self.api.store(PODS), clock=self.clock,
                               rng=random.Random(3), recorder=self.rec.for_component("job-controller"),
                               settings=BatchSettings(**settings))
        self.orphans: list[str] = []
        self.c.enqueue_orphan = self.orphans.append
        self.pod_events = Informed(self.api, PODS, add=self.c.on_pod_add, update=self.c.on_pod_update,
                                   delete=self.c.on_pod_delete)
        self.job_events = Informed(self.api, JOBS, add=self.c.on_job_add, update=self.c.on_job_update,
                                   delete=self.c.on_job_delete)
        self.outcomes: dict[str, str] = {}

    def pump(self) -> None:
        self.job_events.pump()
        self.pod_events.pump()

    def add_job(self, name: str = "pi", **spec: Any) -> Obj:
        body: Obj = {"metadata": {"name": name}, "spec": {
            "completions": 1, "parallelism": 1, "backoffLimit": 6, "completionMode": "NonIndexed", "suspend": False,
            "template": {"metadata": {}, "spec": {"restartPolicy": "Never",
                                                  "containers": [{"name": "c", "image": "busybox"}]}}}}
        for k, v in spec.items():
            if v is None:
                body["spec"].pop(k, None)
            else:
                body["spec"][k] = v
        job = self.api.add(JOBS, body)
        job["status"] = {}
        return job

    def job(self, key: str = KEY) -> Obj:
        return self.api.objects["jobs"][key]

    def status(self, key: str = KEY) -> dict[str, Any]:
        return dict(self.job(key).get("status") or {})

    def pods(self) -> list[Obj]:
        return sorted(self.api.objects.get("pods", {}).values(), key=lambda p: p["metadata"]["name"])

    def live(self) -> list[Obj]:
        return [p for p in self.pods() if not p["metadata"].get("deletionTimestamp")
                and p["status"].get("phase") not in ("Succeeded", "Failed")]

    def kubelet(self) -> None:
        pods = self.api.objects.get("pods", {})
        for key, p in list(pods.items()):
            md, st = p["metadata"], p.setdefault("status", {})
            p["spec"].setdefault("nodeName", "n1")
            if md.get("deletionTimestamp"):
                if st.get("phase") not in ("Succeeded", "Failed"):
                    p["status"] = {"phase": "Failed", "conditions": [
                        {"type": "Ready", "status": "False", "lastTransitionTime": format_time(self.clock.now())}]}
                    self.api._bump(p)
                if not md.get("finalizers"):
                    del pods[key]
                continue
            outcome = self.outcomes.pop(md["name"], None)
            if outcome is not None:
                p["status"] = {"phase": outcome, "conditions": [
                    {"type": "Ready", "status": "False", "lastTransitionTime": format_time(self.clock.now())}]}
                self.api._bump(p)
            elif st.get("phase") in (None, "Pending"):
                p["status"] = {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": format_time(self.clock.now())}]}
                self.api._bump(p)

    def finish(self, outcome: str, n: int | None = None) -> list[str]:
        names = [p["metadata"]["name"] for p in self.live()][:n]
        for name in names:
            self.outcomes[name] = outcome
        return names

    async def sync(self, key: str = KEY) -> Any:
        self.pump()
        result = await self.c.reconcile(key)
        self.pump()
        return result

    async def settle(self, rounds: int = 6, key: str = KEY, step: float = 1.0) -> None:
        for _ in range(rounds):
            await self.sync(key)
            self.kubelet()
            self.pump()
            for pod_key in list(self.orphans):
                self.orphans.remove(pod_key)
                await self.c.reconcile_orphan(pod_key)
            await self.clock.advance(step)


def cond(status: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    return next((c for c in status.get("conditions") or [] if c["type"] == ctype), None)


# -- pods ---------------------------------------------------------------------------------------


async def test_pods_carry_labels_finalizer_and_owner() -> None:
    h = Harness()
    job = h.add_job(parallelism=2, completions=4)
    await h.sync()
    pods = h.pods()
    assert len(pods) == 2
    uid = job["metadata"]["uid"]
    for p in pods:
        md = p["metadata"]
        assert md["name"].startswith("pi-")
        assert md["labels"][LABEL_CONTROLLER_UID] == uid and md["labels"]["controller-uid"] == uid
        assert md["labels"][LABEL_JOB_NAME] == "pi" and md["labels"]["job-name"] == "pi"
        assert md["finalizers"] == [TRACKING_FINALIZER]
        assert md["ownerReferences"] == [{"apiVersion": "batch/v1", "kind": "Job", "name": "pi", "uid": uid,
                                          "controller": True, "blockOwnerDeletion": True}]
    st = h.status()
    assert st["active"] == 2 and st["ready"] == 0 and st["startTime"] == format_time(h.clock.now())
    assert st["uncountedTerminatedPods"] == {}
    assert len(h.rec.reasons("SuccessfulCreate")) == 2


async def test_job_without_generated_selector_matches_on_controller_uid() -> None:
    h = Harness()
    job = h.add_job()
    assert "selector" not in job["spec"]
    h.api.add(PODS, {"metadata": {"name": "stray", "labels": {LABEL_CONTROLLER_UID: job["metadata"]["uid"]}},
                     "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}})
    await h.sync()
    stray = h.api.objects["pods"]["default/stray"]
    assert stray["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert TRACKING_FINALIZER in stray["metadata"]["finalizers"]
    assert len(h.pods()) == 1  # the adopted pod is the one active pod


# -- completion ----------------------------------------------------------------------------------


async def test_runs_to_completion_with_success_criteria_met_first() -> None:
    h = Harness()
    h.add_job(parallelism=2, completions=3)
    await h.settle(2)
    assert len(h.live()) == 2
    h.finish("Succeeded")
    await h.settle(3)
    st = h.status()
    assert st["succeeded"] == 2 and st["active"] == 1
    h.finish("Succeeded")
    await h.settle(3)
    st = h.status()
    assert st["succeeded"] == 3 and "active" not in st and st["uncountedTerminatedPods"] == {}
    types = [c["type"] for c in st["conditions"]]
    assert types == ["SuccessCriteriaMet", "Complete"]
    complete = cond(st, "Complete")
    assert complete is not None and complete["reason"] == "CompletionsReached"
    assert st["completionTime"] == complete["lastTransitionTime"]
    assert len(h.pods()) == 3 and all(not p["metadata"].get("finalizers") for p in h.pods())
    assert len(h.rec.reasons("Completed")) == 1
    await h.settle(3)
    assert len(h.pods()) == 3, "a finished Job creates nothing"


async def test_uids_are_written_before_finalizers_are_removed() -> None:
    h = Harness()
    h.add_job()
    await h.settle(2)
    (name,) = h.finish("Succeeded")
    h.kubelet()
    h.api.calls.clear()
    await h.sync()
    verbs = [(v, p) for v, p, n in h.api.calls if (p, n) in (("jobs", "pi"), ("pods", name))]
    assert verbs.index(("update/status", "jobs")) < verbs.index(("patch", "pods"))
    assert h.status()["succeeded"] == 1


async def test_a_crash_between_the_uid_write_and_the_finalizer_removal_counts_once() -> None:
    h = Harness()
    h.add_job(parallelism=2, completions=2)
    await h.settle(2)
    first, second = h.finish("Succeeded")
    h.kubelet()
    h.pump()
    h.api.fail_next["patch"] = RuntimeError("connection reset")
    await h.c.reconcile(KEY)
    st = h.status()
    # The uids were recorded; one removal failed, so that pod is not counted yet.
    assert len(st["uncountedTerminatedPods"]["succeeded"]) == 1
    assert st.get("succeeded", 0) == 1
    # A new controller (no memory) picks up where the status says, and counts each pod once.
    h.c = JobController(api=h.api, jobs=h.api.store(JOBS), pods=h.api.store(PODS), clock=h.clock,
                        rng=random.Random(4), recorder=h.rec.for_component("job-controller"))
    h.pod_events.add, h.pod_events.update, h.pod_events.delete = h.c.on_pod_add, h.c.on_pod_update, h.c.on_pod_delete
    h.job_events.add, h.job_events.update, h.job_events.delete = h.c.on_job_add, h.c.on_job_update, h.c.on_job_delete
    h.c.enqueue_orphan = h.orphans.append
    await h.settle(3)
    st = h.status()
    assert st["succeeded"] == 2 and st["uncountedTerminatedPods"] == {}
    assert cond(st, "Complete") is not None
    assert {p["metadata"]["name"] for p in h.pods()} == {first, second}


async def test_a_pod_deleted_after_its_uid_was_recorded_is_counted_once() -> None:
    h = Harness()
    h.add_job(parallelism=2, completions=2)
    await h.settle(2)
    (gone,) = h.finish("Succeeded", 1)
    h.kubelet()
    h.pump()
    h.api.fail_next["patch"] = RuntimeError("timeout")
    await h.c.reconcile(KEY)
    assert len(h.status()["uncountedTerminatedPods"]["succeeded"]) == 1
    del h.api.objects["pods"][f"default/{gone}"]  # force-deleted with its finalizer
    await h.settle(2)
    st = h.status()
    assert st["succeeded"] == 1 and st["uncountedTerminatedPods"] == {}
    assert len(h.live()) == 1, "one more pod for the missing completion, not two"


async def test_a_failed_creation_still_counts_finished_pods_and_is_retried() -> None:
    h = Harness()
    h.add_job(parallelism=1, completions=2)
    await h.settle(2)
    h.finish("Succeeded")
    h.kubelet()
    h.pump()
    h.api.fail_next["create"] = RuntimeError("quota exceeded")
    with pytest.raises(RuntimeError):
        await h.c.reconcile(KEY)
    assert h.status()["succeeded"] == 1, "the success was counted although the replacement failed"
    assert len(h.rec.reasons("FailedCreate")) == 1
    await h.settle(2)
    assert len(h.live()) == 1


async def test_a_lagging_pod_cache_never_creates_extra_pods() -> None:
    h = Harness()
    h.add_job(parallelism=3, completions=3)
    await h.c.reconcile(KEY)
    assert len(h.pods()) == 3
    # The cache has not shown the creations: expectations hold the next syncs back.
    for _ in range(3):
        await h.c.reconcile(KEY)
    assert len(h.pods()) == 3
    h.pump()  # the ADDED events arrive
    await h.c.reconcile(KEY)
    assert len(h.pods()) == 3


async def test_a_lagging_job_cache_is_not_acted_on() -> None:
    h = Harness()
    h.add_job()
    await h.settle(2)
    stale = h.api.store(JOBS)
    stale.freeze()  # the Job as it was before the success was written
    h.finish("Succeeded")
    await h.settle(2)
    assert cond(h.status(), "Complete") is not None
    c = h.c
    c.jobs = stale
    before = len(h.pods())
    assert await c.reconcile(KEY) is not None  # waits for the cache
    assert len(h.pods()) == before


# -- failure -----------------------------------------------------------------------------------


async def test_backoff_limit_exceeded_with_pod_failure_backoff() -> None:
    h = Harness()
    h.add_job(backoffLimit=1)
    await h.settle(2)
    h.finish("Failed")
    h.kubelet()
    result = await h.sync()
    st = h.status()
    assert st["failed"] == 1 and "active" not in st
    assert result is not None and result.requeue_after == pytest.approx(10.0, abs=1.0), "10 s backoff"
    assert len(h.pods()) == 1
    await h.clock.advance(11)
    await h.settle(2)
    assert len(h.live()) == 1
    h.finish("Failed")
    await h.settle(4)
    st = h.status()
    assert st["failed"] == 2
    types = [c["type"] for c in st["conditions"]]
    assert types == ["FailureTarget", "Failed"]
    failed = cond(st, "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded"
    assert "completionTime" not in st
    assert len(h.rec.reasons("BackoffLimitExceeded")) == 1


async def test_on_failure_restarts_count_toward_the_backoff_limit() -> None:
    h = Harness()
    h.add_job(backoffLimit=2, template={"spec": {"restartPolicy": "OnFailure",
                                                 "containers": [{"name": "c", "image": "busybox"}]}})
    await h.settle(2)
    (p,) = h.live()
    p["status"]["containerStatuses"] = [{"name": "c", "restartCount": 2}]
    h.api._bump(p)
    await h.settle(4)
    st = h.status()
    failed = cond(st, "Failed")
    assert failed is not None and failed["reason"] == "BackoffLimitExceeded"
    assert not h.live(), "the restarting pod is deleted"


async def test_active_deadline_waits_for_terminating_pods() -> None:
    h = Harness()
    h.add_job(parallelism=2, completions=2, activeDeadlineSeconds=30)
    await h.settle(2)
    result = await h.sync()
    assert result is not None and result.requeue_after == pytest.approx(28, abs=1)
    await h.clock.advance(30)
    await h.sync()
    st = h.status()
    target = cond(st, "FailureTarget")
    assert target is not None and target["reason"] == "DeadlineExceeded"
    assert cond(st, "Failed") is None, "pods are still terminating"
    assert st["terminating"] == 2 and st["failed"] == 2
    await h.settle(3)
    st = h.status()
    failed = cond(st, "Failed")
    assert failed is not None and failed["reason"] == "DeadlineExceeded"
    assert st["terminating"] == 0 and not h.pods()


# -- suspend ------------------------------------------------------------------------------------


async def test_suspend_deletes_active_pods_and_resume_restarts_the_clock() -> None:
    h = Harness()
    h.add_job(suspend=True)
    await h.settle(2)
    st = h.status()
    assert not h.pods() and "startTime" not in st
    suspended = cond(st, "Suspended")
    assert suspended is not None and suspended["status"] == "True" and suspended["reason"] == "JobSuspended"
    h.job()["spec"]["suspend"] = False
    await h.settle(2)
    st = h.status()
    resumed = cond(st, "Suspended")
    assert resumed is not None and resumed["status"] == "False" and resumed["reason"] == "JobResumed"
    assert len(h.live()) == 1 and "startTime" in st
    h.job()["spec"]["suspend"] = True
    await h.settle(3)
    assert not h.pods(), "suspending deletes the running pod (its finalizer first)"
    assert h.status().get("failed", 0) == 0


# -- indexed -------------------------------------------------------------------------------------


def test_indexes_round_trip() -> None:
    assert format_indexes({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert parse_indexes("0-2,5,7-8", 8) == {0, 1, 2, 5, 7}
    assert format_indexes(set()) == ""


async def test_indexed_job_pods_hostnames_and_completed_indexes() -> None:
    h = Harness()
    h.add_job(parallelism=2, completions=3, completionMode="Indexed")
    await h.settle(2)
    pods = h.live()
    assert sorted(p["metadata"]["annotations"][COMPLETION_INDEX] for p in pods) == ["0", "1"]
    for p in pods:
        ix = p["metadata"]["annotations"][COMPLETION_INDEX]
        assert p["metadata"]["labels"][COMPLETION_INDEX] == ix
        assert p["metadata"]["name"].startswith(f"pi-{ix}-")
        assert p["spec"]["hostname"] == f"pi-{ix}"
        env = p["spec"]["containers"][0]["env"]
        assert env == [{"name": "JOB_COMPLETION_INDEX", "valueFrom": {"fieldRef": {
            "fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}}]
    one = next(p for p in pods if p["metadata"]["annotations"][COMPLETION_INDEX] == "1")
    h.outcomes[one["metadata"]["name"]] = "Succeeded"
    await h.settle(3)
    st = h.status()
    assert st["completedIndexes"] == "1" and st["succeeded"] == 1
    assert sorted(p["metadata"]["annotations"][COMPLETION_INDEX] for p in h.live()) == ["0", "2"]
    h.finish("Succeeded")
    await h.settle(4)
    st = h.status()
    assert st["completedIndexes"] == "0-2" and st["succeeded"] == 3
    assert cond(st, "Complete") is not None


async def test_indexed_job_deletes_a_duplicated_index() -> None:
    h = Harness()
    job = h.add_job(parallelism=1, completions=1, completionMode="Indexed")
    await h.settle(2)
    (p,) = h.live()
    dup = copy.deepcopy(p)
    dup["metadata"] = {**dup["metadata"], "name": "pi-0-dup", "uid": "dup"}
    dup["status"] = {"phase": "Pending"}
    h.api.objects["pods"]["default/pi-0-dup"] = dup
    h.api._bump(dup)
    await h.settle(2)
    assert [q["metadata"]["name"] for q in h.live()] == [p["metadata"]["name"]]
    assert job["metadata"]["uid"]


# -- orphans -----------------------------------------------------------------------------------


async def test_deleted_job_releases_its_pods_finalizers() -> None:
    h = Harness()
    h.add_job(parallelism=2, completions=2)
    await h.settle(2)
    del h.api.objects["jobs"][KEY]
    for p in h.pods():  # the garbage collector's background deletion
        await h.api.delete(PODS, p["metadata"]["name"], namespace="default")
    await h.settle(3)
    assert not h.pods()


async def test_orphan_pass_keeps_the_finalizer_of_a_job_the_cache_has_not_seen() -> None:
    h = Harness()
    h.add_job()
    await h.settle(2)
    (p,) = h.pods()
    h.c.jobs = type("Empty", (), {"get": lambda self, k: None, "list": lambda self: []})()
    await h.c.reconcile_orphan(f"default/{p['metadata']['name']}")
    assert p["metadata"]["finalizers"] == [TRACKING_FINALIZER], "a live read found the Job"


# -- ttl-after-finished --------------------------------------------------------------------------


async def test_ttl_after_finished_deletes_on_the_cluster_clock() -> None:
    h = Harness()
    h.add_job(ttlSecondsAfterFinished=100)
    await h.settle(2)
    h.finish("Succeeded")
    await h.settle(3)
    assert cond(h.status(), "Complete") is not None
    ttl = TTLAfterFinishedController(api=h.api, jobs=h.api.store(JOBS), clock=h.clock,
                                     recorder=h.rec.for_component("ttl-after-finished-controller"))
    queued: list[str] = []
    ttl.enqueue = queued.append
    ttl.on_job(h.job())
    assert queued == [KEY]
    result = await ttl.reconcile(KEY)
    assert result is not None and 90 < (result.requeue_after or 0) <= 100
    await h.clock.advance(result.requeue_after or 0)
    h.api.calls.clear()
    assert await ttl.reconcile(KEY) is None
    assert KEY not in h.api.objects["jobs"]
    assert ("get", "jobs", "pi") in h.api.calls, "decided on a fresh read"


async def test_ttl_after_finished_ignores_running_and_ttl_less_jobs() -> None:
    h = Harness()
    h.add_job(ttlSecondsAfterFinished=0)
    h.add_job(name="keep")
    ttl = TTLAfterFinishedController(api=h.api, jobs=h.api.store(JOBS), clock=h.clock,
                                     recorder=h.rec.for_component("ttl-after-finished-controller"))
    assert await ttl.reconcile(KEY) is None
    assert KEY in h.api.objects["jobs"]
    h.job("default/keep")["status"] = {"conditions": [{"type": "Complete", "status": "True",
                                                       "lastTransitionTime": format_time(h.clock.now())}]}
    assert await ttl.reconcile("default/keep") is None
    assert "default/keep" in h.api.objects["jobs"]


# -- on a real mesh ------------------------------------------------------------------------------

JOB_RATE = 10.0


@pytest_asyncio.fixture(scope="class", loop_scope="module")
async def job_mesh() -> AsyncIterator[MeshEnv]:
    async for env in start_mesh(nodes=2, rate=JOB_RATE):
        yield env


def job_manifest(name: str, *, annotations: dict[str, str] | None = None, **spec: Any) -> str:
    template: Obj = {"metadata": {"annotations": annotations or {}},
                     "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}}
    return json.dumps({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
                       "spec": {"template": template, **spec}})


@pytest.mark.slow
@pytest.mark.kubectl
@pytest.mark.asyncio(loop_scope="module")
class TestJobsOnAMesh:
    async def test_kubectl_create_job_completes(self, job_mesh: MeshEnv) -> None:
        env = job_mesh
        await env.run("create", "job", "hello", "--image=busybox")
        out = await env.run("wait", "--for=condition=complete", "job/hello", f"--timeout={env.timeout(120)}",
                            within=120)
        assert "condition met" in out
        job = await env.json("get", "job", "hello")
        st = job["status"]
        assert st["succeeded"] == 1 and st.get("failed", 0) == 0 and st["uncountedTerminatedPods"] == {}
        assert [c["type"] for c in st["conditions"]] == ["SuccessCriteriaMet", "Complete"]
        assert st["completionTime"] >= st["startTime"]
        pods = (await env.json("get", "pods", "-l", "job-name=hello"))["items"]
        assert len(pods) == 1
        (pod,) = pods
        assert pod["status"]["phase"] == "Succeeded" and not pod["metadata"].get("finalizers")
        assert pod["metadata"]["labels"][LABEL_CONTROLLER_UID] == job["metadata"]["uid"]

    async def test_failing_job_reaches_backoff_limit_exceeded(self, job_mesh: MeshEnv) -> None:
        env = job_mesh
        await env.run("apply", "-f", "-", input=job_manifest("fail", annotations={"kubemesh.io/exit-code": "1"},
                                                          backoffLimit=1))
        out = await env.run("wait", "--for=condition=failed", "job/fail", f"--timeout={env.timeout(300)}",
                            within=300)
        assert "condition met" in out
        st = (await env.json("get", "job", "fail"))["status"]
        assert st["failed"] == 2 and st.get("succeeded", 0) == 0
        assert [(c["type"], c["reason"]) for c in st["conditions"]] == [
            ("FailureTarget", "BackoffLimitExceeded"), ("Failed", "BackoffLimitExceeded")]
        pods = (await env.json("get", "pods", "-l", "job-name=fail"))["items"]
        assert len(pods) == 2 and all(p["status"]["phase"] == "Failed" for p in pods)

    async def test_indexed_job_completes_every_index(self, job_mesh: MeshEnv) -> None:
        env = job_mesh
        await env.run("apply", "-f", "-", input=job_manifest("idx", completions=3, parallelism=3,
                                                          completionMode="Indexed"))
        await env.run("wait", "--for=condition=complete", "job/idx", f"--timeout={env.timeout(120)}", within=120)
        st = (await env.json("get", "job", "idx"))["status"]
        assert st["completedIndexes"] == "0-2" and st["succeeded"] == 3
        pods = (await env.json("get", "pods", "-l", "job-name=idx"))["items"]
        assert sorted(p["spec"]["hostname"] for p in pods) == ["idx-0", "idx-1", "idx-2"]

    async def test_ttl_after_finished_deletes_the_job_and_its_pods(self, job_mesh: MeshEnv) -> None:
        env = job_mesh
        await env.run("apply", "-f", "-", input=job_manifest("brief", ttlSecondsAfterFinished=20))
        await env.run("wait", "--for=condition=complete", "job/brief", f"--timeout={env.timeout(120)}", within=120)
        done = await env.now()

        async def gone() -> bool:
            jobs = (await env.json("get", "jobs"))["items"]
            pods = (await env.json("get", "pods", "-l", "job-name=brief"))["items"]
            return not any(j["metadata"]["name"] == "brief" for j in jobs) and not pods

        await env.until(gone, within=20 + 60, what="job brief and its pods deleted after its TTL")
        assert await env.now() - done >= 20 - 2, "not before its TTL (cluster seconds)"

"""The Job controller: run pods to completion, counted exactly once through the tracking finalizer.

`reconcile(key)` follows upstream's `syncJob` (Kubernetes 1.31 and later):

1. **Claim** the pods of the namespace: pods that match the selector and have no controller
   are adopted (owner reference and the tracking finalizer); pods that stop matching are
   released (reference and finalizer removed). The selector is `spec.selector`; a Job without
   one (an apiserver that did not generate it) selects `batch.kubernetes.io/controller-uid:
   <uid>`, and its pods carry that label and the job name, current and legacy forms.
2. **Count.** Every pod the controller creates carries `batch.kubernetes.io/job-tracking`. A
   terminated pod (Succeeded; Failed; or, unless `podReplacementPolicy: Failed`, deleted
   before succeeding) that still has the finalizer is counted in three steps, each step
   written before the next one starts, so a pod is never lost or counted twice, whatever
   crashes or lags: its uid is written into `status.uncountedTerminatedPods`; its finalizer is
   removed; its uid moves from the uncounted list into `succeeded`/`failed` (a uid whose pod
   is gone or lost its finalizer is counted). Removals the cache has not shown yet are
   expected by uid (`finalizer expectations`), and a Job whose cached copy is older than the
   last status this controller wrote is not synced until the cache catches up.
3. **Finish.** `failed > backoffLimit` (or, for `restartPolicy: OnFailure`, container
   restarts reaching it) adds `FailureTarget` (reason `BackoffLimitExceeded`), running past
   `activeDeadlineSeconds` adds `FailureTarget` (`DeadlineExceeded`); the active pods are then
   deleted and, once every pod is counted and none is terminating, `Failed` follows with the
   same reason. Enough successes (`completions`, or with no `completions` any success and no
   active pod) add `SuccessCriteriaMet` (`CompletionsReached`) and then `Complete` with
   `completionTime`. Events: Completed, BackoffLimitExceeded, DeadlineExceeded.
4. **Manage** (only when the creation/deletion expectations are met, as the ReplicaSet
   controller): keep `min(parallelism, completions - succeeded)` pods active (all of
   `parallelism` until the first success when `completions` is unset); delete surplus pods,
   preferring the least advanced; create the difference in slow-start batches, at most 500
   per sync, after the pod-failure backoff (10 s doubling per consecutive failure, 600 s
   cap). With `podReplacementPolicy: Failed`, terminating pods are waited for before their
   replacement. `Indexed` Jobs create the lowest pending completion indexes, with the
   `batch.kubernetes.io/job-completion-index` annotation and label, hostname `<job>-<index>`
   and the `JOB_COMPLETION_INDEX` variable; duplicated or out-of-range indexes are deleted and
   `status.completedIndexes` lists the succeeded ones (`0-2,5`).
5. **Suspend**: a suspended Job's active pods are deleted and the `Suspended` condition is
   True (`JobSuspended`); resuming sets it False (`JobResumed`) and restarts `startTime`.

Status: `active`, `ready`, `terminating`, `succeeded`, `failed`, `startTime`,
`completionTime`, `conditions`, `uncountedTerminatedPods`, `completedIndexes`. Pods whose
Job is gone or finished lose their tracking finalizer (the orphan queue), but only after a
live read confirms it: a lagging Job cache never strips a live Job's pod.

Left out (documented in the report): `podFailurePolicy` rules, `backoffLimitPerIndex`,
`successPolicy`, `managedBy`, elastic indexed Jobs' index scale-down subtleties.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import structlog

from kubemesh.controller_manager.controllers import ControllerContext, ControllerSpec, InformerNeed, Started
from kubemesh.controller_manager.expectations import Expectations
from kubemesh.controller_manager.objects import (
    Api,
    IndexedStore,
    Store,
    condition,
    controller_ref,
    index_by_namespace,
    is_active,
    is_ready,
    is_terminal,
    is_terminating,
    owner_refs,
    phase,
    ts,
)
from kubemesh.controller_manager.replicaset import pod_from_template, pods_to_delete, random_suffix, slow_start_sizes
from kubemesh.controller_manager.settings import BatchSettings
from kubemesh.services.machinery.client import AlreadyExistsError, ConflictError, NotFoundError
from kubemesh.services.machinery.clock import Clock, format_time
from kubemesh.services.machinery.eventing import ComponentRecorder
from kubemesh.services.machinery.informing import final_state
from kubemesh.services.machinery.queueing import Result, run_workers
from kubemesh.services.model.kinds import JOBS, PODS, Obj, key_of, labels_of, meta, name_of, namespace_of, uid_of
from kubemesh.services.model.selectors import LabelSelector, label_selector_from_dict

_log = structlog.get_logger("controller_manager.job")

TRACKING_FINALIZER: Final = "batch.kubernetes.io/job-tracking"
LABEL_CONTROLLER_UID: Final = "batch.kubernetes.io/controller-uid"
LABEL_JOB_NAME: Final = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID: Final = "controller-uid"
LEGACY_JOB_NAME: Final = "job-name"
COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
INDEX_ENV: Final = "JOB_COMPLETION_INDEX"

COMPLETE: Final = "Complete"
FAILED: Final = "Failed"
FAILURE_TARGET: Final = "FailureTarget"
SUCCESS_CRITERIA_MET: Final = "SuccessCriteriaMet"
SUSPENDED: Final = "Suspended"


# -- reading a Job ----------------------------------------------------------------------------


def job_spec(job: Obj) -> dict[str, Any]:
    """The Job's spec (never None)."""
    return job.get("spec") or {}


def job_selector(job: Obj) -> LabelSelector:
    """`spec.selector`, or the generated one (`controller-uid: <uid>`) when the Job has none."""
    sel = job_spec(job).get("selector")
    if sel:
        return label_selector_from_dict(sel)
    return label_selector_from_dict({"matchLabels": {LABEL_CONTROLLER_UID: uid_of(job)}})


def finished_condition(job: Obj) -> str | None:
    """`Complete` or `Failed` when that condition is True, else None."""
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in (COMPLETE, FAILED) and c.get("status") == "True":
            return str(c["type"])
    return None


def is_finished(job: Obj) -> bool:
    """Whether the Job has its terminal condition (Complete or Failed True)."""
    return finished_condition(job) is not None


def is_suspended(job: Obj) -> bool:
    """spec.suspend."""
    return bool(job_spec(job).get("suspend"))


def is_indexed(job: Obj) -> bool:
    """Whether the completion mode is Indexed."""
    return job_spec(job).get("completionMode") == "Indexed"


def completions_of(job: Obj) -> int | None:
    """spec.completions (None: any success completes the Job)."""
    value = job_spec(job).get("completions")
    return None if value is None else int(value)


def only_replace_failed(job: Obj) -> bool:
    """Replacement pods wait for terminating pods (`podReplacementPolicy: Failed` or a failure policy)."""
    spec = job_spec(job)
    return spec.get("podReplacementPolicy") == "Failed" or spec.get("podFailurePolicy") is not None


def has_tracking_finalizer(pod: Obj) -> bool:
    """The pod carries `batch.kubernetes.io/job-tracking`."""
    return TRACKING_FINALIZER in (meta(pod).get("finalizers") or [])


def completion_index(pod: Obj) -> int | None:
    """The pod's completion index (annotation, else label), None when absent or invalid."""
    md = meta(pod)
    raw = (md.get("annotations") or {}).get(COMPLETION_INDEX)
    if raw is None:
        raw = (md.get("labels") or {}).get(COMPLETION_INDEX)
    try:
        value = int(str(raw))
    except (TypeError, ValueError):
        return None
    return value if value >= 0 and str(value) == str(raw) else None


def valid_index(job: Obj, pod: Obj) -> bool:
    """An Indexed Job's pod with an index below completions."""
    ix = completion_index(pod)
    completions = completions_of(job)
    return ix is not None and completions is not None and ix < completions


def is_pod_failed(pod: Obj, job: Obj) -> bool:
    """Counted as a failure: Failed, or deleted before succeeding (unless only failed pods are replaced)."""
    if phase(pod) == "Failed":
        return True
    if only_replace_failed(job):
        return False
    return is_terminating(pod) and phase(pod) != "Succeeded"


def is_pod_terminating(pod: Obj) -> bool:
    """Being deleted and not terminal yet (upstream `IsPodTerminating`)."""
    return is_terminating(pod) and not is_terminal(pod)


def finish_time(pod: Obj) -> float:
    """When the pod finished: its containers' last finish, Ready=False, the deletion, its creation."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    latest: float | None = None
    for cs in statuses:
        at = ts(((cs.get("state") or {}).get("terminated") or {}).get("finishedAt"))
        if at is None:
            latest = None
            break
        latest = at if latest is None else max(latest, at)
    if latest is not None:
        return latest
    ready = condition(pod, "Ready")
    if ready is not None and ready.get("status") == "False" and ts(ready.get("lastTransitionTime")) is not None:
        return ts(ready.get("lastTransitionTime")) or 0.0
    md = meta(pod)
    deleted = ts(md.get("deletionTimestamp"))
    if deleted is not None:
        return deleted - float(md.get("deletionGracePeriodSeconds") or 0)
    return ts(md.get("creationTimestamp")) or 0.0


# -- completed indexes ------------------------------------------------------------------------


def parse_indexes(text: str | None, completions: int) -> set[int]:
    """`0-2,5` into {0, 1, 2, 5}, keeping indexes below `completions` (invalid parts skipped)."""
    out: set[int] = set()
    for part in (text or "").split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            first = int(lo)
            last = int(hi) if hi else first
        except ValueError:
            continue
        out.update(i for i in range(max(0, first), min(last, completions - 1) + 1))
    return out


def format_indexes(indexes: set[int]) -> str:
    """{0, 1, 2, 5} as `0-2,5` (upstream's interval notation)."""
    parts: list[str] = []
    run: list[int] = []
    for i in sorted(indexes):
        if run and i == run[-1] + 1:
            run.append(i)
            continue
        if run:
            parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
        run = [i]
    if run:
        parts.append(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}")
    return ",".join(parts)


# -- conditions -------------------------------------------------------------------------------


def new_condition(ctype: str, status: str, reason: str, message: str, now: float) -> dict[str, Any]:
    """A JobCondition probed and transitioned now."""
    at = format_time(now)
    return {"type": ctype, "status": status, "lastProbeTime": at, "lastTransitionTime": at,
            "reason": reason, "message": message}


def ensure_condition(conds: list[dict[str, Any]], ctype: str, status: str, reason: str, message: str,
                     now: float) -> bool:
    """Set a condition in place (a False one is never added); whether the list changed."""
    for i, c in enumerate(conds):
        if c.get("type") == ctype:
            if c.get("status") != status or c.get("reason") != reason or c.get("message") != message:
                conds[i] = new_condition(ctype, status, reason, message, now)
                return True
            return False
    if status != "False":
        conds.append(new_condition(ctype, status, reason, message, now))
        return True
    return False


def _find(conds: list[dict[str, Any]], ctype: str) -> dict[str, Any] | None:
    return next((c for c in conds if c.get("type") == ctype and c.get("status") == "True"), None)


# -- the controller ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Backoff:
    failures_after_last_success: int = 0
    last_failure: float | None = None


@dataclass(slots=True)
class _Sync:
    """What one sync of one Job knows and has decided."""

    job: Obj
    status: dict[str, Any]
    pods: list[Obj]
    active_pods: list[Obj]
    ready: int
    terminating: int
    expected_rm: set[str]
    uncounted_succeeded: set[str]
    uncounted_failed: set[str]
    succeeded: int = 0
    failed: int = 0
    finished: dict[str, Any] | None = None
    prev_indexes: set[int] | None = None
    succeeded_indexes: set[int] | None = None
    backoff: _Backoff | None = None


class JobController:
    """Level-based Job reconciler over the shared Job and pod caches."""

    def __init__(self, *, api: Api, jobs: Store, pods: IndexedStore, clock: Clock, rng: random.Random,
                 recorder: ComponentRecorder, settings: BatchSettings | None = None,
                 expectations_ttl: float = 300.0) -> None:
        self.api = api
        self.jobs = jobs
        self.pods = pods
        self.clock = clock
        self.rng = rng
        self.recorder = recorder
        self.settings = settings or BatchSettings()
        self.expectations = Expectations(clock=clock, ttl=expectations_ttl)
        self.finalizer_expectations: dict[str, set[str]] = {}
        """Per Job key: pod uids whose finalizer removal this controller wrote but the cache has not shown."""
        self.backoffs: dict[str, _Backoff] = {}
        self.written: dict[str, tuple[str, int]] = {}
        """Per Job key: (uid, resourceVersion) of the last status this controller wrote."""
        self.enqueue: Callable[[str], None] = lambda key: None
        self.enqueue_after: Callable[[str, float], None] = lambda key, delay: None
        self.enqueue_orphan: Callable[[str], None] = lambda key: None

    # -- event handlers -----------------------------------------------------------------------

    def _resolve(self, namespace: str, ref: dict[str, Any]) -> Obj | None:
        if ref.get("kind") != "Job":
            return None
        job = self.jobs.get(f"{namespace}/{ref.get('name')}")
        if job is None or uid_of(job) != ref.get("uid"):
            return None
        return job

    def _matching_jobs(self, pod: Obj) -> list[Obj]:
        return [j for j in self.jobs.list()
                if namespace_of(j) == namespace_of(pod) and job_selector(j).matches(labels_of(pod))]

    def _batched(self, job: Obj) -> None:
        self.enqueue_after(key_of(job), self.settings.job_sync_batch_period)

    def on_job_add(self, job: Obj, _initial: bool = False) -> None:
        """A Job appeared: sync it now."""
        self.enqueue(key_of(job))

    def on_job_update(self, old: Obj, new: Obj) -> None:
        """Spec changes sync at once, status changes batched; finished Jobs release their pods."""
        if meta(new).get("generation") != meta(old).get("generation"):
            self.enqueue(key_of(new))
        else:
            self._batched(new)
        if is_finished(new):
            self.cleanup_pod_finalizers(new)
        start = ts((new.get("status") or {}).get("startTime"))
        ads = job_spec(new).get("activeDeadlineSeconds")
        if start is not None and ads is not None and ads != job_spec(old).get("activeDeadlineSeconds"):
            self.enqueue_after(key_of(new), max(0.0, start + float(ads) - self.clock.now()))

    def on_job_delete(self, job: Obj) -> None:
        """A Job is gone: its pods lose their tracking finalizers."""
        self.enqueue(key_of(job))
        self.cleanup_pod_finalizers(job)

    def cleanup_pod_finalizers(self, job: Obj) -> None:
        """Queue every pod of `job` that still has the tracking finalizer for the orphan pass."""
        for pod in self.pods.by_index("namespace", namespace_of(job)):
            ref = controller_ref(pod)
            if ref is not None and ref.get("uid") == uid_of(job) and has_tracking_finalizer(pod):
                self.enqueue_orphan(key_of(pod))

    def on_pod_add(self, pod: Obj, _initial: bool = False) -> None:
        """A pod appeared: observe our creation, or find an adopter for an orphan."""
        if is_terminating(pod):
            self.on_pod_delete(pod, final=False)
            return
        ref = controller_ref(pod)
        if ref is not None:
            job = self._resolve(namespace_of(pod), ref)
            if job is not None:
                self.expectations.creation_observed(key_of(job))
                self._batched(job)
            return
        if has_tracking_finalizer(pod):
            self.enqueue_orphan(key_of(pod))
        for job in self._matching_jobs(pod):
            self._batched(job)

    def on_pod_update(self, old: Obj, new: Obj) -> None:
        """A pod changed: deletions and finalizer removals are observed; owners are synced."""
        if meta(new).get("resourceVersion") == meta(old).get("resourceVersion"):
            return
        if is_terminating(new):
            self.on_pod_delete(new, final=False)
            return
        removed = not has_tracking_finalizer(new)
        new_ref, old_ref = controller_ref(new), controller_ref(old)
        if old_ref is not None and old_ref != new_ref:
            job = self._resolve(namespace_of(old), old_ref)
            if job is not None:
                if removed:
                    self.finalizer_removal_observed(key_of(job), uid_of(new))
                self._batched(job)
        if new_ref is not None:
            job = self._resolve(namespace_of(new), new_ref)
            if job is not None:
                if removed:
                    self.finalizer_removal_observed(key_of(job), uid_of(new))
                self._batched(job)
            return
        if has_tracking_finalizer(new):
            self.enqueue_orphan(key_of(new))
        if labels_of(new) != labels_of(old) or old_ref != new_ref:
            for job in self._matching_jobs(new):
                self._batched(job)

    def on_pod_delete(self, pod: Obj, *, final: bool = True) -> None:
        """A pod is gone (or being deleted): observe the deletion and the finalizer's removal."""
        ref = controller_ref(pod)
        finalizer = has_tracking_finalizer(pod)
        if ref is None:
            if finalizer:
                self.enqueue_orphan(key_of(pod))
            return
        job = self._resolve(namespace_of(pod), ref)
        if job is None or is_finished(job):
            if finalizer:
                self.enqueue_orphan(key_of(pod))
            return
        key = key_of(job)
        self.expectations.deletion_observed(key, key_of(pod))
        if final or not finalizer:
            self.finalizer_removal_observed(key, uid_of(pod))
        self._batched(job)

    def finalizer_removal_observed(self, key: str, uid: str) -> None:
        """The cache shows a pod of `key` without its finalizer (or gone)."""
        expected = self.finalizer_expectations.get(key)
        if expected is not None:
            expected.discard(uid)
            if not expected:
                del self.finalizer_expectations[key]

    # -- orphan pods --------------------------------------------------------------------------

    async def reconcile_orphan(self, pod_key: str) -> Result | None:
        """Remove the tracking finalizer of a pod whose Job is gone or finished."""
        pod = self.pods.get(pod_key)
        if pod is None or not has_tracking_finalizer(pod):
            return None
        ref = controller_ref(pod)
        if ref is not None:
            if ref.get("kind") != "Job" or not str(ref.get("apiVersion", "")).startswith("batch/"):
                return None
            job = self._resolve(namespace_of(pod), ref)
            if job is None:
                # The cache may lag behind a new Job: only a live read may declare it gone.
                try:
                    live = await self.api.get(JOBS, str(ref.get("name")), namespace=namespace_of(pod))
                except NotFoundError:
                    live = None
                if live is not None and uid_of(live) == ref.get("uid"):
                    job = live
            if job is not None and not is_finished(job):
                return None  # adopted or still running: its Job counts it
        with contextlib.suppress(NotFoundError):
            await self._remove_finalizer(pod)
        return None

    async def _remove_finalizer(self, pod: Obj) -> None:
        """Patch the tracking finalizer out of `pod` (other finalizers and concurrent changes kept)."""
        patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": [TRACKING_FINALIZER]}}
        await self.api.patch(PODS, name_of(pod), patch, namespace=namespace_of(pod), patch_type="strategic")

    # -- reconcile ----------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        """Sync one Job."""
        cached = self.jobs.get(key)
        if cached is None:
            self.expectations.delete(key)
            self.finalizer_expectations.pop(key, None)
            self.backoffs.pop(key, None)
            self.written.pop(key, None)
            return None
        written = self.written.get(key)
        if written is not None and written[0] == uid_of(cached) and _rv(cached) < written[1]:
            # Our own last status write is not in the cache yet: counting from this copy
            # could recount pods or create extra ones. Its update event syncs us again.
            return Result(requeue_after=self.settings.job_sync_batch_period)
        if is_finished(cached):
            self.backoffs.pop(key, None)
            return None
        mode = job_spec(cached).get("completionMode") or "NonIndexed"
        if mode not in ("NonIndexed", "Indexed"):
            self.recorder.warning(cached, "UnknownCompletionMode",
                                  "Skipped Job sync because completion mode is unknown")
            return None
        job = copy.deepcopy(cached)
        status: dict[str, Any] = job.setdefault("status", {})
        uncounted = status.get("uncountedTerminatedPods") or {}
        # Expectations are read before the pods: a pod created after this point is seen
        # by the next sync, never half-counted by this one.
        satisfied = self.expectations.satisfied(key)
        pods = await self._claim(job)
        now = self.clock.now()
        active_pods = [p for p in pods if is_active(p)]
        s = _Sync(job=job, status=status, pods=pods, active_pods=active_pods,
                  ready=sum(1 for p in active_pods if is_ready(p)),
                  terminating=sum(1 for p in pods if is_pod_terminating(p)),
                  expected_rm=set(self.finalizer_expectations.get(key, set())),
                  uncounted_succeeded={str(u) for u in uncounted.get("succeeded") or []},
                  uncounted_failed={str(u) for u in uncounted.get("failed") or []})
        new_succeeded = self._new_finished(s, s.uncounted_succeeded, lambda p: phase(p) == "Succeeded")
        new_failed = self._new_finished(s, s.uncounted_failed, lambda p: is_pod_failed(p, job))
        s.succeeded = int(status.get("succeeded") or 0) + len(new_succeeded) + len(s.uncounted_succeeded)
        s.failed = int(status.get("failed") or 0) + len(new_failed) + len(s.uncounted_failed)
        if status.get("startTime") is None and not is_suspended(job):
            status["startTime"] = format_time(now)
        s.backoff = self._next_backoff(key, new_succeeded, new_failed)
        requeue: float | None = None
        conds: list[dict[str, Any]] = status.setdefault("conditions", [])
        spec = job_spec(job)
        met = _find(conds, SUCCESS_CRITERIA_MET)
        if met is not None:
            s.finished = met
        else:
            target = _find(conds, FAILURE_TARGET)
            if target is not None:
                s.finished = new_condition(FAILED, "True", str(target.get("reason", "")),
                                           str(target.get("message", "")), now)
        if s.finished is None:
            if s.failed > int(spec.get("backoffLimit", 6)) or past_backoff_limit_on_failure(job, pods):
                s.finished = new_condition(FAILURE_TARGET, "True", "BackoffLimitExceeded",
                                           "Job has reached the specified backoff limit", now)
            elif self._past_active_deadline(job, now):
                s.finished = new_condition(FAILURE_TARGET, "True", "DeadlineExceeded",
                                           "Job was active longer than specified deadline", now)
            elif spec.get("activeDeadlineSeconds") is not None and not is_suspended(job):
                start = ts(status.get("startTime")) or now
                requeue = max(0.0, start + float(spec["activeDeadlineSeconds"]) - now)
        if is_indexed(job):
            s.prev_indexes, s.succeeded_indexes = self._succeeded_indexes(job, pods)
            s.succeeded = len(s.succeeded_indexes)
        active = len(active_pods)
        manage_error: BaseException | None = None
        if s.finished is not None:
            deleted_ready, deleted = await self._delete_active(job, active_pods)
            if deleted != active or not satisfied:
                # Pods may remain that the cache has not shown yet: not finished yet.
                s.finished = None
            active -= deleted
            s.terminating += deleted
            s.ready -= deleted_ready
        else:
            managed = False
            if satisfied and not is_terminating(job):
                active, backoff_wait, manage_error = await self._manage(s)
                managed = True
                if backoff_wait is not None:
                    requeue = backoff_wait if requeue is None else min(requeue, backoff_wait)
            completions = completions_of(job)
            if completions is None:
                complete = s.succeeded > 0 and active == 0
            else:
                complete = s.succeeded >= completions and active == 0
            if complete:
                s.finished = new_condition(SUCCESS_CRITERIA_MET, "True", "CompletionsReached",
                                           "Reached expected number of succeeded pods", now)
            elif managed:
                if is_suspended(job):
                    if ensure_condition(conds, SUSPENDED, "True", "JobSuspended", "Job suspended", now):
                        self.recorder.normal(job, "Suspended", "Job suspended")
                elif ensure_condition(conds, SUSPENDED, "False", "JobResumed", "Job resumed", now):
                    self.recorder.normal(job, "Resumed", "Job resumed")
                    # activeDeadlineSeconds counts time continuously active: it restarts.
                    status["startTime"] = format_time(now)
        status["active"] = active
        status["ready"] = s.ready
        status["terminating"] = s.terminating
        await self._track(s, cached)
        if manage_error is not None:
            # Counting went on regardless; the failed creations or deletions are retried.
            raise manage_error
        return Result(requeue_after=requeue) if requeue is not None else None

    def _new_finished(self, s: _Sync, uncounted: set[str], accept: Callable[[Obj], bool]) -> list[Obj]:
        out = []
        for p in s.pods:
            uid = uid_of(p)
            if not has_tracking_finalizer(p) or uid in uncounted or uid in s.expected_rm:
                continue
            if is_indexed(s.job) and not valid_index(s.job, p):
                continue
            if accept(p):
                out.append(p)
        return out

    def _succeeded_indexes(self, job: Obj, pods: list[Obj]) -> tuple[set[int], set[int]]:
        completions = completions_of(job) or 0
        prev = parse_indexes((job.get("status") or {}).get("completedIndexes"), completions)
        now_done = {completion_index(p) for p in pods
                    if phase(p) == "Succeeded" and valid_index(job, p) and has_tracking_finalizer(p)}
        return prev, prev | {i for i in now_done if i is not None}

    def _past_active_deadline(self, job: Obj, now: float) -> bool:
        ads = job_spec(job).get("activeDeadlineSeconds")
        start = ts((job.get("status") or {}).get("startTime"))
        if ads is None or start is None or is_suspended(job):
            return False
        return now - start >= float(ads)

    def _next_backoff(self, key: str, succeeded: list[Obj], failed: list[Obj]) -> _Backoff:
        old = self.backoffs.get(key) or _Backoff()
        record = _Backoff(old.failures_after_last_success, old.last_failure)
        failed_times = sorted(finish_time(p) for p in failed)
        if not succeeded:
            if failed_times:
                record.failures_after_last_success += len(failed_times)
                record.last_failure = failed_times[-1]
            return record
        last_success = max(finish_time(p) for p in succeeded)
        later = [t for t in failed_times if t > last_success]
        return _Backoff(len(later), later[-1] if later else None)

    def _backoff_remaining(self, record: _Backoff, now: float) -> float:
        if record.failures_after_last_success == 0 or record.last_failure is None:
            return 0.0
        delay = self.settings.pod_failure_backoff
        for _ in range(1, record.failures_after_last_success):
            delay *= 2
            if delay >= self.settings.max_pod_failure_backoff:
                delay = self.settings.max_pod_failure_backoff
                break
        return max(0.0, delay - (now - record.last_failure))

    # -- claiming -----------------------------------------------------------------------------

    async def _claim(self, job: Obj) -> list[Obj]:
        selector = job_selector(job)
        uid = uid_of(job)
        deleting = is_terminating(job)
        owned: list[Obj] = []
        for pod in self.pods.by_index("namespace", namespace_of(job)):
            ref = controller_ref(pod)
            matches = selector.matches(labels_of(pod))
            if ref is not None:
                if ref.get("uid") != uid:
                    continue
                if matches or deleting or is_terminating(pod):
                    owned.append(pod)
                else:
                    await self._release(job, pod)
                continue
            if matches and not deleting and not is_terminating(pod) and not is_finished(job):
                adopted = await self._adopt(job, pod)
                if adopted is not None:
                    owned.append(adopted)
        return owned

    async def _adopt(self, job: Obj, pod: Obj) -> Obj | None:
        refs = [*owner_refs(pod), {"apiVersion": "batch/v1", "kind": "Job", "name": name_of(job),
                                   "uid": uid_of(job), "controller": True, "blockOwnerDeletion": True}]
        finalizers = list(meta(pod).get("finalizers") or [])
        if TRACKING_FINALIZER not in finalizers:
            finalizers.append(TRACKING_FINALIZER)
        patch = {"metadata": {"ownerReferences": refs, "finalizers": finalizers,
                              "resourceVersion": meta(pod).get("resourceVersion")}}
        try:
            return await self.api.patch(PODS, name_of(pod), patch, namespace=namespace_of(pod))
        except (NotFoundError, ConflictError):
            return None

    async def _release(self, job: Obj, pod: Obj) -> None:
        refs = [r for r in owner_refs(pod) if r.get("uid") != uid_of(job)]
        finalizers = [f for f in meta(pod).get("finalizers") or [] if f != TRACKING_FINALIZER]
        patch = {"metadata": {"ownerReferences": refs or None, "finalizers": finalizers or None,
                              "resourceVersion": meta(pod).get("resourceVersion")}}
        with contextlib.suppress(NotFoundError, ConflictError):
            await self.api.patch(PODS, name_of(pod), patch, namespace=namespace_of(pod))

    # -- managing pods ------------------------------------------------------------------------

    async def _manage(self, s: _Sync) -> tuple[int, float | None, BaseException | None]:
        """Create or delete pods toward the wanted active count; (active, backoff wait, first error)."""
        job, key = s.job, key_of(s.job)
        active = len(s.active_pods)
        spec = job_spec(job)
        limit = self.settings.max_pod_create_delete_per_sync
        if is_suspended(job):
            victims = self._for_removal(job, s.active_pods, active)
            if victims:
                self.expectations.expect_deletions(key, [key_of(p) for p in victims])
            removed_ready, removed, error = await self._delete_pods(job, victims)
            s.terminating += removed
            s.ready -= removed_ready
            return active - removed, None, error
        parallelism = int(spec.get("parallelism", 1))
        completions = completions_of(job)
        if completions is None:
            want = active if s.succeeded > 0 else parallelism
        else:
            want = max(0, min(completions - s.succeeded, parallelism))
        victims = self._for_removal(job, s.active_pods, max(0, active - want))[:limit]
        if victims:
            # Deletion takes precedence: one kind of change per sync.
            self.expectations.expect_deletions(key, [key_of(p) for p in victims])
            removed_ready, removed, error = await self._delete_pods(job, victims)
            s.terminating += removed
            s.ready -= removed_ready
            return active - removed, None, error
        waiting = s.terminating if only_replace_failed(job) else 0
        diff = want - waiting - active
        if diff <= 0:
            return active, None, None
        remaining = self._backoff_remaining(s.backoff or _Backoff(), self.clock.now())
        if remaining > 0:
            return active, max(remaining, self.settings.job_sync_batch_period), None
        diff = min(diff, limit)
        indexes: list[int | None] = [None] * diff
        if is_indexed(job):
            indexes = list(self._pending_indexes(s, diff))
            diff = len(indexes)
            if diff == 0:
                return active, None, None
        self.expectations.expect_creations(key, diff)
        created = 0
        error = None
        queue = list(indexes)
        for size in slow_start_sizes(diff):
            batch, queue = queue[:size], queue[size:]
            results = await asyncio.gather(*(self._create_pod(job, ix) for ix in batch), return_exceptions=True)
            ok = sum(1 for r in results if r is True)
            created += ok
            for _ in range(size - ok):
                self.expectations.creation_observed(key)
            if ok < size:
                # The skipped batches will never be observed either.
                for _ in queue:
                    self.expectations.creation_observed(key)
                error = next((r for r in results if isinstance(r, BaseException)), None)
                break
        return active + created, None, error

    def _pending_indexes(self, s: _Sync, count: int) -> list[int]:
        completions = completions_of(s.job) or 0
        taken = set(s.succeeded_indexes or set())
        for p in s.active_pods:
            ix = completion_index(p)
            if ix is not None:
                taken.add(ix)
        if only_replace_failed(s.job):
            for p in s.pods:
                ix = completion_index(p)
                if ix is not None and is_pod_terminating(p):
                    taken.add(ix)
        return [i for i in range(completions) if i not in taken][:count]

    def _for_removal(self, job: Obj, active_pods: list[Obj], at_least: int) -> list[Obj]:
        """Duplicated and out-of-range indexes first (Indexed), then the least advanced pods."""
        remove: list[Obj] = []
        left = list(active_pods)
        if is_indexed(job):
            by_index: dict[int, list[Obj]] = {}
            left = []
            for p in active_pods:
                if not valid_index(job, p):
                    remove.append(p)
                    continue
                by_index.setdefault(completion_index(p) or 0, []).append(p)
            for group in by_index.values():
                ranked = pods_to_delete(group, len(group))
                remove += ranked[:-1]  # keep the most advanced pod of each index
                left.append(ranked[-1])
        if len(remove) < at_least:
            remove += pods_to_delete(left, at_least - len(remove))
        return remove

    async def _create_pod(self, job: Obj, index: int | None) -> bool:
        for _ in range(3):
            suffix = random_suffix(self.rng)
            name = f"{name_of(job)}-{suffix}" if index is None else f"{name_of(job)}-{index}-{suffix}"
            pod = self.pod_for(job, name=name, index=index)
            try:
                await self.api.create(PODS, pod, namespace=namespace_of(job))
            except AlreadyExistsError:
                continue
            except Exception as exc:
                self.recorder.warning(job, "FailedCreate", f"Error creating: {exc}")
                raise
            self.recorder.normal(job, "SuccessfulCreate", f"Created pod: {name}")
            return True
        return False

    def pod_for(self, job: Obj, *, name: str, index: int | None) -> Obj:
        """The pod `job` creates: its template, labels, tracking finalizer, owner and index."""
        pod = pod_from_template(job, api_version="batch/v1", kind="Job", name=name)
        md = pod["metadata"]
        labels: dict[str, str] = md["labels"]
        if not job_spec(job).get("manualSelector"):
            for k, v in ((LABEL_CONTROLLER_UID, uid_of(job)), (LABEL_JOB_NAME, name_of(job)),
                         (LEGACY_CONTROLLER_UID, uid_of(job)), (LEGACY_JOB_NAME, name_of(job))):
                labels.setdefault(k, v)
        finalizers = list(md.get("finalizers") or [])
        if TRACKING_FINALIZER not in finalizers:
            finalizers.append(TRACKING_FINALIZER)
        md["finalizers"] = finalizers
        if index is not None:
            md.setdefault("annotations", {})[COMPLETION_INDEX] = str(index)
            labels[COMPLETION_INDEX] = str(index)
            spec = pod["spec"]
            spec["hostname"] = f"{name_of(job)}-{index}"
            env_var = {"name": INDEX_ENV, "valueFrom": {"fieldRef": {
                "fieldPath": f"metadata.annotations['{COMPLETION_INDEX}']"}}}
            for field in ("initContainers", "containers"):
                for c in spec.get(field) or []:
                    env = c.setdefault("env", [])
                    if not any(e.get("name") == INDEX_ENV for e in env):
                        env.append(copy.deepcopy(env_var))
        return pod

    async def _delete_pods(self, job: Obj, pods: list[Obj]) -> tuple[int, int, BaseException | None]:
        """Remove the finalizer, then delete (surplus or suspended pods); (ready removed, removed, first error)."""
        key = key_of(job)

        async def one(pod: Obj) -> bool:
            try:
                if has_tracking_finalizer(pod):
                    await self._remove_finalizer(pod)
                await self.api.delete(PODS, name_of(pod), namespace=namespace_of(pod),
                                      preconditions={"uid": uid_of(pod)})
            except NotFoundError:
                self.expectations.deletion_observed(key, key_of(pod))
                return True
            except Exception:
                self.expectations.deletion_observed(key, key_of(pod))
                raise
            self.recorder.normal(job, "SuccessfulDelete", f"Deleted pod: {name_of(pod)}")
            return True

        results = await asyncio.gather(*(one(p) for p in pods), return_exceptions=True)
        removed = [p for p, r in zip(pods, results, strict=True) if r is True]
        error = next((r for r in results if isinstance(r, BaseException)), None)
        return sum(1 for p in removed if is_ready(p)), len(removed), error

    async def _delete_active(self, job: Obj, pods: list[Obj]) -> tuple[int, int]:
        """Delete the active pods of a finishing Job, keeping their finalizers (they are counted)."""

        async def one(pod: Obj) -> bool:
            with contextlib.suppress(NotFoundError):
                await self.api.delete(PODS, name_of(pod), namespace=namespace_of(pod),
                                      preconditions={"uid": uid_of(pod)})
            return True

        results = await asyncio.gather(*(one(p) for p in pods), return_exceptions=True)
        removed = [p for p, r in zip(pods, results, strict=True) if r is True]
        return sum(1 for p in removed if is_ready(p)), len(removed)

    # -- status and finalizers ----------------------------------------------------------------

    async def _track(self, s: _Sync, cached: Obj) -> None:
        """Count terminated pods (uids first, then finalizers, then counters) and finish the Job."""
        job, status = s.job, s.status
        indexed = is_indexed(job)
        pods = sorted(s.pods, key=lambda p: completion_index(p) or 0) if indexed else s.pods
        with_finalizer = {uid_of(p) for p in pods if has_tracking_finalizer(p) and uid_of(p) not in s.expected_rm}
        unc_s = [str(u) for u in (status.get("uncountedTerminatedPods") or {}).get("succeeded") or []]
        unc_f = [str(u) for u in (status.get("uncountedTerminatedPods") or {}).get("failed") or []]
        _move_counted(status, unc_s, unc_f, with_finalizer)
        unc_s, unc_f = _uncounted(status)
        to_remove: list[Obj] = []
        new_indexes: list[int] = []
        reached_max = False
        for pod in pods:
            uid = uid_of(pod)
            if not has_tracking_finalizer(pod) or uid in s.expected_rm:
                continue  # counted by an earlier sync
            failed = is_pod_failed(pod, job)
            if not (is_terminating(job) or s.finished is not None or phase(pod) == "Succeeded" or failed):
                continue
            to_remove.append(pod)
            if phase(pod) == "Succeeded" and uid not in s.uncounted_failed:
                if indexed:
                    ix = completion_index(pod)
                    if ix is not None and valid_index(job, pod) and ix not in (s.prev_indexes or set()):
                        new_indexes.append(ix)
                elif uid not in unc_s:
                    unc_s.append(uid)
            elif ((failed or (s.finished is not None and s.finished.get("type") != SUCCESS_CRITERIA_MET))
                  and uid not in unc_f and (not indexed or valid_index(job, pod))):
                # A failing Job counts every pod it still tracks as failed.
                unc_f.append(uid)
            if len(new_indexes) + len(unc_s) + len(unc_f) >= self.settings.max_uncounted_pods:
                reached_max = True
                break
        _set_uncounted(status, unc_s, unc_f)
        if indexed:
            s.succeeded_indexes = (s.succeeded_indexes or set()) | set(new_indexes)
            status["completedIndexes"] = format_indexes(s.succeeded_indexes)
            status["succeeded"] = len(s.succeeded_indexes)
        conds: list[dict[str, Any]] = status.setdefault("conditions", [])
        now = self.clock.now()
        if s.finished is not None and s.finished.get("type") == FAILURE_TARGET:
            if _find(conds, FAILURE_TARGET) is None:
                conds.append(s.finished)
            s.finished = new_condition(FAILED, "True", str(s.finished.get("reason", "")),
                                       str(s.finished.get("message", "")), now)
        elif s.finished is not None and s.finished.get("type") == SUCCESS_CRITERIA_MET:
            if _find(conds, SUCCESS_CRITERIA_MET) is None:
                conds.append(s.finished)
            s.finished = new_condition(COMPLETE, "True", str(s.finished.get("reason", "")),
                                       str(s.finished.get("message", "")), now)
        # 1. The uids (and interim conditions) are written before any finalizer goes.
        current = await self._flush(job, cached)
        if s.backoff is not None:
            self.backoffs[key_of(job)] = s.backoff
        # 2. Finalizers.
        if to_remove:
            removed = await self._remove_finalizers(key_of(job), to_remove)
            with_finalizer -= removed
        # 3. Counters: every uncounted uid whose finalizer is gone.
        unc_s, unc_f = _uncounted(status)
        _move_counted(status, unc_s, unc_f, with_finalizer)
        finished_now = False
        if not reached_max and s.finished is not None:
            unc_s, unc_f = _uncounted(status)
            if not unc_s and not unc_f and s.terminating == 0:
                ensure_condition(conds, str(s.finished["type"]), "True", str(s.finished.get("reason", "")),
                                 str(s.finished.get("message", "")), now)
                if s.finished["type"] == COMPLETE:
                    status["completionTime"] = next(
                        c["lastTransitionTime"] for c in conds if c.get("type") == COMPLETE)
                finished_now = True
        await self._flush(job, current)
        if finished_now:
            if s.finished is not None and s.finished["type"] == COMPLETE:
                completions = completions_of(job)
                if completions is not None and int(status.get("succeeded") or 0) > completions:
                    self.recorder.warning(job, "TooManySucceededPods",
                                          "Too many succeeded pods running after completion count reached")
                self.recorder.normal(job, "Completed", "Job completed")
            elif s.finished is not None:
                self.recorder.warning(job, str(s.finished.get("reason", "")), str(s.finished.get("message", "")))

    async def _flush(self, job: Obj, against: Obj) -> Obj:
        """Write `job`'s status unless `against` (the copy last read or written) already has it.

        Optimistic on `against`'s resourceVersion: a ConflictError (the Job changed meanwhile)
        fails the sync, which is retried from the cache. Returns the copy now stored.
        """
        status = _canonical(job["status"])
        if status == _canonical(against.get("status") or {}):
            return against
        body = copy.deepcopy(against)
        body["status"] = status
        try:
            written = await self.api.update(JOBS, body, subresource="status")
        except NotFoundError:
            return against
        self.written[key_of(job)] = (uid_of(written), _rv(written))
        return written

    async def _remove_finalizers(self, key: str, pods: list[Obj]) -> set[str]:
        """Remove the tracking finalizer; the uids whose finalizer is gone (or whose pod is)."""
        uids = [uid_of(p) for p in pods]
        self.finalizer_expectations.setdefault(key, set()).update(uids)

        async def one(pod: Obj) -> bool:
            try:
                await self._remove_finalizer(pod)
            except NotFoundError:
                return True
            except Exception:
                self.finalizer_removal_observed(key, uid_of(pod))
                raise
            return True

        results = await asyncio.gather(*(one(p) for p in pods), return_exceptions=True)
        done = {uid_of(p) for p, r in zip(pods, results, strict=True) if r is True}
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            _log.warning("removing tracking finalizers failed", job=key, error=repr(errors[0]))
        return done


def past_backoff_limit_on_failure(job: Obj, pods: list[Obj]) -> bool:
    """With restartPolicy OnFailure: whether container restarts of live pods reach backoffLimit."""
    tmpl_spec = (job_spec(job).get("template") or {}).get("spec") or {}
    if tmpl_spec.get("restartPolicy") != "OnFailure":
        return False
    restarts = 0
    for p in pods:
        if phase(p) in ("Running", "Pending"):
            st = p.get("status") or {}
            for cs in [*(st.get("initContainerStatuses") or []), *(st.get("containerStatuses") or [])]:
                restarts += int(cs.get("restartCount") or 0)
    limit = int(job_spec(job).get("backoffLimit", 6))
    return restarts > 0 if limit == 0 else restarts >= limit


def _uncounted(status: dict[str, Any]) -> tuple[list[str], list[str]]:
    u = status.get("uncountedTerminatedPods") or {}
    return [str(x) for x in u.get("succeeded") or []], [str(x) for x in u.get("failed") or []]


def _set_uncounted(status: dict[str, Any], succeeded: list[str], failed: list[str]) -> None:
    u: dict[str, Any] = {}
    if succeeded:
        u["succeeded"] = succeeded
    if failed:
        u["failed"] = failed
    status["uncountedTerminatedPods"] = u


def _move_counted(status: dict[str, Any], succeeded: list[str], failed: list[str], with_finalizer: set[str]) -> None:
    """Count the uncounted uids whose pod no longer has its finalizer (or is gone)."""
    keep_s = [u for u in succeeded if u in with_finalizer]
    keep_f = [u for u in failed if u in with_finalizer]
    status["succeeded"] = int(status.get("succeeded") or 0) + len(succeeded) - len(keep_s)
    status["failed"] = int(status.get("failed") or 0) + len(failed) - len(keep_f)
    _set_uncounted(status, keep_s, keep_f)


def _canonical(status: dict[str, Any]) -> dict[str, Any]:
    """The status as the API stores it: zero counters omitted (Go's omitempty)."""
    out = {k: v for k, v in status.items() if v is not None}
    for k in ("active", "succeeded", "failed"):
        if not out.get(k):
            out.pop(k, None)
    if not out.get("conditions"):
        out.pop("conditions", None)
    return out


def _rv(obj: Obj) -> int:
    try:
        return int(str(meta(obj).get("resourceVersion") or 0))
    except ValueError:
        return 0


def _start(ctx: ControllerContext) -> Started:
    b = ctx.settings.batch
    c = JobController(api=ctx.api, jobs=ctx.informer(_JOBS), pods=ctx.informer(_PODS), clock=ctx.clock, rng=ctx.rng,
                      recorder=ctx.recorder.for_component("job-controller"), settings=b,
                      expectations_ttl=ctx.settings.workloads.expectations_ttl)
    q = ctx.queue("job")
    orphans = ctx.queue("job-orphan-pod")
    c.enqueue = q.add
    c.enqueue_after = q.add_after
    c.enqueue_orphan = orphans.add
    ctx.on(JOBS, on_add=c.on_job_add, on_update=c.on_job_update, on_delete=lambda o: c.on_job_delete(final_state(o)))
    ctx.on(PODS, on_add=c.on_pod_add, on_update=c.on_pod_update, on_delete=lambda o: c.on_pod_delete(final_state(o)))

    async def run() -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(run_workers(q, c.reconcile, workers=b.job_workers, name="job"), name="job:workers")
            tg.create_task(run_workers(orphans, c.reconcile_orphan, workers=1, name="job-orphan-pod"),
                           name="job:orphans")

    return Started(run=run(), controller=c)


_JOBS = InformerNeed(kind=JOBS, indexers={"namespace": index_by_namespace})
_PODS = InformerNeed(kind=PODS, indexers={"namespace": index_by_namespace})
CONTROLLER = ControllerSpec(name="job", informers=(_JOBS, _PODS), start=_start)

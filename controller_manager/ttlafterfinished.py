"""The TTL-after-finished controller: delete finished Jobs `ttlSecondsAfterFinished` after they finish.

A Job is due when it has `spec.ttlSecondsAfterFinished`, is finished (its `Complete` or
`Failed` condition is True) and the cluster clock has reached the finish time (that
condition's `lastTransitionTime`) plus the TTL. Before that the key is requeued for the
remaining time. A due Job is read again from the apiserver (the cache may lag behind a
change of the TTL, or behind a Job recreated under the same name) and deleted only if the
fresh copy is still due, with its uid and resourceVersion as preconditions and background
propagation: the garbage collector then deletes its pods (and the Job controller removes
their tracking finalizers). A finish time in the future (a skewed clock) waits for it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import structlog

from kubemesh.controller_manager.controllers import ControllerContext, ControllerSpec, InformerNeed, Started
from kubemesh.controller_manager.objects import Api, Store, conditions, is_terminating, ts
from kubemesh.services.machinery.client import ConflictError, NotFoundError
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.machinery.eventing import ComponentRecorder
from kubemesh.services.machinery.queueing import Result, run_workers
from kubemesh.services.model.kinds import JOBS, Obj, key_of, meta, name_of, namespace_of, uid_of

_log = structlog.get_logger("controller_manager.ttlafterfinished")


def finish_time(job: Obj) -> float | None:
    """When the Job finished (its True Complete/Failed condition's transition), None if it has not."""
    for c in conditions(job):
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return ts(c.get("lastTransitionTime"))
    return None


def needs_cleanup(job: Obj) -> bool:
    """Has a TTL and is finished."""
    return (job.get("spec") or {}).get("ttlSecondsAfterFinished") is not None and finish_time(job) is not None


def time_left(job: Obj, *, now: float) -> float | None:
    """Cluster seconds until `job` expires (<= 0: due), None when it needs no cleanup."""
    finished = finish_time(job)
    ttl = (job.get("spec") or {}).get("ttlSecondsAfterFinished")
    if finished is None or ttl is None:
        return None
    return finished + float(ttl) - now


class TTLAfterFinishedController:
    """Deletes finished Jobs whose TTL has run out, on the cluster clock."""

    def __init__(self, *, api: Api, jobs: Store, clock: Clock, recorder: ComponentRecorder) -> None:
        self.api = api
        self.jobs = jobs
        self.clock = clock
        self.recorder = recorder
        self.enqueue: Callable[[str], None] = lambda key: None

    def on_job(self, job: Obj) -> None:
        """A Job was added or changed: queue it when it may need cleaning up."""
        if not is_terminating(job) and needs_cleanup(job):
            self.enqueue(key_of(job))

    async def reconcile(self, key: str) -> Result | None:
        """Delete the Job if its TTL has expired, else come back when it will have."""
        job = self.jobs.get(key)
        if job is None or is_terminating(job) or not needs_cleanup(job):
            return None
        left = time_left(job, now=self.clock.now())
        if left is not None and left > 0:
            return Result(requeue_after=left)
        # The cache may be stale (TTL changed, Job recreated): decide on a fresh read.
        try:
            fresh = await self.api.get(JOBS, name_of(job), namespace=namespace_of(job))
        except NotFoundError:
            return None
        if is_terminating(fresh) or not needs_cleanup(fresh):
            return None
        left = time_left(fresh, now=self.clock.now())
        if left is not None and left > 0:
            return Result(requeue_after=left)
        _log.info("deleting expired job", job=key, uid=uid_of(fresh))
        with contextlib.suppress(NotFoundError, ConflictError):
            # A conflict means the Job changed since the fresh read: its update event requeues it.
            await self.api.delete(JOBS, name_of(fresh), namespace=namespace_of(fresh), propagation_policy="Background",
                                  preconditions={"uid": uid_of(fresh),
                                                 "resourceVersion": meta(fresh).get("resourceVersion")})
        return None


def _start(ctx: ControllerContext) -> Started:
    c = TTLAfterFinishedController(api=ctx.api, jobs=ctx.informer(_JOBS), clock=ctx.clock,
                                   recorder=ctx.recorder.for_component("ttl-after-finished-controller"))
    q = ctx.queue("ttl-after-finished")
    c.enqueue = q.add
    ctx.on(JOBS, on_add=lambda o, _i: c.on_job(o), on_update=lambda _old, new: c.on_job(new))
    return Started(run=run_workers(q, c.reconcile, workers=ctx.settings.batch.ttl_after_finished_workers,
                                   name="ttl-after-finished"), controller=c)


_JOBS = InformerNeed(kind=JOBS)
CONTROLLER = ControllerSpec(name="ttl-after-finished", informers=(_JOBS,), start=_start)

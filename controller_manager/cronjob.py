"""The CronJob controller: create a Job at each scheduled time of the cluster clock.

`reconcile(key)` follows upstream's `ControllerV2.syncCronJob`:

1. **Active list.** Jobs the CronJob controls that are finished leave `status.active`
   (event SawCompletedJob) and a Complete one advances `status.lastSuccessfulTime`; an
   active reference whose Job is in neither the cache nor the apiserver (a live GET decides)
   leaves it too (MissingJob); an unfinished Job that is not listed is reported
   (UnexpectedJob).
2. **Schedule** (`kubemesh.controller_manager.schedules`: five fields, macros, `CRON_TZ=`,
   `spec.timeZone`), evaluated on the cluster clock, never wall time: the most recent
   scheduled time after `status.lastScheduleTime` (else the creation time), and after
   `now - startingDeadlineSeconds` when that is set, that is not after now. More than 100
   missed times give a TooManyMissedTimes warning, and still only the most recent one runs.
   A time older than `startingDeadlineSeconds` is missed (MissSchedule). A suspended CronJob,
   an unparseable schedule (UnparseableSchedule) or an unknown zone (UnknownTimeZone)
   starts nothing.
3. **Concurrency**: `Forbid` skips the time while a Job is active (JobAlreadyActive);
   `Replace` deletes the active Jobs first (background propagation); `Allow` runs them side
   by side.
4. **Create** the Job `<cronjob>-<scheduled time in minutes since the epoch>` from
   `spec.jobTemplate` (its labels and annotations, plus
   `batch.kubernetes.io/cronjob-scheduled-timestamp`, RFC 3339 in the CronJob's zone), owned
   by the CronJob. The deterministic name is the lock: a Job that already exists for the
   time (a crash between the create and the status write) is not created twice, only
   added to the active list. Then `status.active` and `status.lastScheduleTime` are written.
5. **History**: finished Jobs beyond `successfulJobsHistoryLimit` / `failedJobsHistoryLimit`
   are deleted, oldest start first.

The key is requeued for the next scheduled time (plus 100 ms, as upstream). Changing the
schedule or the time zone requeues for the new next time.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from datetime import UTC, datetime, tzinfo
from typing import Any, Final

import structlog

from kubemesh.controller_manager.controllers import ControllerContext, ControllerSpec, InformerNeed, Started
from kubemesh.controller_manager.objects import Api, IndexedStore, Store, controller_ref, index_by_namespace, ts
from kubemesh.controller_manager.schedules import Schedule, ScheduleError, load_zone, parse_schedule
from kubemesh.services.machinery.client import AlreadyExistsError, NotFoundError
from kubemesh.services.machinery.clock import Clock, format_time
from kubemesh.services.machinery.eventing import ComponentRecorder
from kubemesh.services.machinery.informing import final_state
from kubemesh.services.machinery.queueing import Result, run_workers
from kubemesh.services.model.kinds import CRONJOBS, JOBS, Obj, key_of, meta, name_of, namespace_of, uid_of

_log = structlog.get_logger("controller_manager.cronjob")

SCHEDULED_TIMESTAMP: Final = "batch.kubernetes.io/cronjob-scheduled-timestamp"
NEXT_SCHEDULE_DELTA: Final = 0.1
"""Requeue this long after the next scheduled time (upstream `nextScheduleDelta`)."""
TOO_MANY_MISSED: Final = 100


# -- reading ----------------------------------------------------------------------------------


def job_finished_type(job: Obj) -> str | None:
    """`Complete` or `Failed` when that condition is True."""
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") in ("Complete", "Failed") and c.get("status") == "True":
            return str(c["type"])
    return None


def job_name(cronjob: Obj, scheduled: float) -> str:
    """`<cronjob>-<minutes since the epoch>`: one name per scheduled time."""
    return f"{name_of(cronjob)}-{int(scheduled // 60)}"


def format_schedule(cronjob: Obj) -> tuple[str, str | None]:
    """The schedule text and the zone it is read in (`spec.timeZone` unless the text names one)."""
    spec = cronjob.get("spec") or {}
    text = str(spec.get("schedule") or "")
    if "TZ" in text:
        return text, None
    return text, spec.get("timeZone")


def most_recent_schedule_time(cronjob: Obj, now: float, schedule: Schedule, *,
                              with_deadline: bool) -> tuple[float, float | None, int]:
    """(earliest time considered, most recent scheduled time not after `now` or None, times missed).

    Raises:
        ScheduleError: two consecutive activations less than a second apart (an impossible schedule).
    """
    status = cronjob.get("status") or {}
    earliest = ts(status.get("lastScheduleTime")) or ts(meta(cronjob).get("creationTimestamp")) or now
    deadline = (cronjob.get("spec") or {}).get("startingDeadlineSeconds")
    if with_deadline and deadline is not None:
        earliest = max(earliest, now - float(deadline))
    t1 = schedule.next_after(earliest)
    if t1 is None or now < t1:
        return earliest, None, 0
    t2 = schedule.next_after(t1)
    if t2 is None or now < t2:
        return earliest, t1, 1
    between = round(t2 - t1)
    if between < 1:
        raise ScheduleError("time difference between two schedules is less than 1 second")
    missed = int((now - t1) // between) + 1
    # Jump close to now (by whole periods), then walk: exact for regular and `@every`
    # schedules, and for irregular ones (`30 6-16/4 * * 1-5`) the walk corrects the guess.
    t: float | None = schedule.next_after(t1 + (missed - 2) * between)
    most_recent: float | None = None
    while t is not None and t <= now:
        most_recent = t
        t = schedule.next_after(t)
    return earliest, most_recent, missed


def next_schedule_delay(cronjob: Obj, now: float, schedule: Schedule) -> float | None:
    """Cluster seconds until the next scheduled time (plus the delta), None if there is none."""
    try:
        earliest, most_recent, missed = most_recent_schedule_time(cronjob, now, schedule, with_deadline=False)
    except ScheduleError:
        most_recent = now
    else:
        if most_recent is None:
            most_recent = earliest if missed == 0 else now
    nxt = schedule.next_after(most_recent)
    return None if nxt is None else max(0.0, nxt + NEXT_SCHEDULE_DELTA - now)


def rfc3339_in(t: float, zone: tzinfo) -> str:
    """`t` as RFC 3339 in `zone` (`Z` for UTC, as Go formats it)."""
    local = datetime.fromtimestamp(int(t), zone)
    if local.utcoffset() == UTC.utcoffset(None):
        return local.strftime("%Y-%m-%dT%H:%M:%SZ")
    return local.isoformat()


def rfc1123z(t: float) -> str:
    """`t` in UTC as Go's RFC1123Z (`Mon, 02 Jan 2006 15:04:05 +0000`)."""
    return datetime.fromtimestamp(int(t), UTC).strftime("%a, %d %b %Y %H:%M:%S +0000")


def job_reference(job: Obj) -> dict[str, Any]:
    """An ObjectReference to `job` (an entry of `status.active`)."""
    return {"kind": "Job", "namespace": namespace_of(job), "name": name_of(job), "uid": uid_of(job),
            "apiVersion": "batch/v1", "resourceVersion": meta(job).get("resourceVersion")}


def job_from_template(cronjob: Obj, scheduled: float, zone: tzinfo) -> Obj:
    """The Job for one scheduled time: the template's metadata and spec, owned by the CronJob."""
    template = (cronjob.get("spec") or {}).get("jobTemplate") or {}
    tmeta = template.get("metadata") or {}
    annotations = dict(tmeta.get("annotations") or {})
    annotations[SCHEDULED_TIMESTAMP] = rfc3339_in(scheduled, zone)
    md: dict[str, Any] = {
        "name": job_name(cronjob, scheduled), "namespace": namespace_of(cronjob),
        "annotations": annotations,
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob", "name": name_of(cronjob),
                             "uid": uid_of(cronjob), "controller": True, "blockOwnerDeletion": True}]}
    if tmeta.get("labels"):
        md["labels"] = dict(tmeta["labels"])
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": md,
            "spec": copy.deepcopy(template.get("spec") or {})}


def _start_key(job: Obj) -> tuple[int, float, str]:
    start = ts((job.get("status") or {}).get("startTime"))
    return (1, 0.0, name_of(job)) if start is None else (0, start, name_of(job))


# -- the controller ---------------------------------------------------------------------------


class CronJobController:
    """Level-based CronJob reconciler over the shared CronJob and Job caches."""

    def __init__(self, *, api: Api, cronjobs: Store, jobs: IndexedStore, clock: Clock,
                 recorder: ComponentRecorder) -> None:
        self.api = api
        self.cronjobs = cronjobs
        self.jobs = jobs
        self.clock = clock
        self.recorder = recorder
        self.enqueue: Callable[[str], None] = lambda key: None
        self.enqueue_after: Callable[[str, float], None] = lambda key, delay: None

    # -- event handlers -----------------------------------------------------------------------

    def _owner_key(self, job: Obj) -> str | None:
        ref = controller_ref(job)
        if ref is None or ref.get("kind") != "CronJob":
            return None
        key = f"{namespace_of(job)}/{ref.get('name')}"
        cj = self.cronjobs.get(key)
        return key if cj is not None and uid_of(cj) == ref.get("uid") else None

    def on_job(self, job: Obj) -> None:
        """A Job changed: sync the CronJob that controls it."""
        key = self._owner_key(job)
        if key is not None:
            self.enqueue(key)

    def on_job_update(self, old: Obj, new: Obj) -> None:
        """A Job changed: sync its old and new controllers."""
        if meta(old).get("resourceVersion") == meta(new).get("resourceVersion"):
            return
        old_key, new_key = self._owner_key(old), self._owner_key(new)
        for k in {old_key, new_key}:
            if k is not None:
                self.enqueue(k)

    def on_cronjob_update(self, old: Obj, new: Obj) -> None:
        """A new schedule or zone requeues for its next time; anything else syncs now."""
        old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
        if old_spec.get("schedule") == new_spec.get("schedule") and old_spec.get("timeZone") == new_spec.get(
                "timeZone"):
            self.enqueue(key_of(new))
            return
        text, zone = format_schedule(new)
        try:
            schedule = parse_schedule(text, time_zone=zone)
        except ScheduleError:
            self.recorder.warning(new, "UnParseableCronJobSchedule", f"unparseable schedule for cronjob: {text}")
            return
        delay = next_schedule_delay(new, self.clock.now(), schedule)
        if delay is not None:
            self.enqueue_after(key_of(new), delay)

    # -- reconcile ----------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        """Sync one CronJob: its active list, the next Job, its history, its status."""
        cached = self.cronjobs.get(key)
        if cached is None:
            return None
        jobs = [j for j in self.jobs.by_index("namespace", namespace_of(cached))
                if (ref := controller_ref(j)) is not None and ref.get("kind") == "CronJob"
                and ref.get("uid") == uid_of(cached)]
        cj = copy.deepcopy(cached)
        cj.setdefault("status", {})
        requeue, changed = await self.sync(cj, jobs)
        if not meta(cj).get("deletionTimestamp") and await self.cleanup_finished_jobs(cj, jobs):
            changed = True
        if changed:
            # Optimistic on the copy read (the cache's, or a fresh one): a conflict retries the sync.
            body = copy.deepcopy(cj)
            body["status"] = _canonical(cj["status"])
            with contextlib.suppress(NotFoundError):
                await self.api.update(CRONJOBS, body, subresource="status")
        return Result(requeue_after=requeue) if requeue is not None else None

    async def sync(self, cj: Obj, jobs: list[Obj]) -> tuple[float | None, bool]:
        """Upstream `syncCronJob` on a copy: (requeue after, whether the status changed)."""
        now = self.clock.now()
        status: dict[str, Any] = cj["status"]
        changed = False
        children = {uid_of(j) for j in jobs}
        for j in jobs:
            listed = _in_active(status, uid_of(j))
            done = job_finished_type(j)
            if not listed and done is None:
                try:
                    fresh = await self.api.get(CRONJOBS, name_of(cj), namespace=namespace_of(cj))
                except NotFoundError:
                    return None, changed
                if _in_active(fresh.get("status") or {}, uid_of(j)):
                    # Our own status write is not in the cache yet: go on from the fresh copy.
                    cj.clear()
                    cj.update(fresh)
                    status = cj.setdefault("status", {})
                    continue
                self.recorder.warning(cj, "UnexpectedJob", f"Saw a job that the controller did not create or "
                                                           f"forgot: {name_of(j)}")
            elif listed and done is not None:
                _remove_active(status, uid_of(j))
                self.recorder.normal(cj, "SawCompletedJob", f"Saw completed job: {name_of(j)}, status: {done}")
                changed = True
                changed = self._note_success(status, j) or changed
            elif done == "Complete":
                changed = self._note_success(status, j) or changed
        for ref in list(status.get("active") or []):
            if ref.get("uid") in children:
                continue
            # The cache may not show a Job we just created: only the apiserver may say it is gone.
            try:
                await self.api.get(JOBS, str(ref.get("name")), namespace=str(ref.get("namespace")
                                                                              or namespace_of(cj)))
            except NotFoundError:
                self.recorder.normal(cj, "MissingJob", f"Active job went missing: {ref.get('name')}")
                _remove_active(status, str(ref.get("uid")))
                changed = True
        if meta(cj).get("deletionTimestamp"):
            return None, changed
        spec = cj.get("spec") or {}
        if spec.get("timeZone") is not None:
            try:
                load_zone(str(spec["timeZone"]))
            except ScheduleError as exc:
                self.recorder.warning(cj, "UnknownTimeZone", f"invalid timeZone: {spec['timeZone']!r}: {exc}")
                return None, changed
        if spec.get("suspend"):
            return None, changed
        text, zone_name = format_schedule(cj)
        if "TZ" in text:
            self.recorder.warning(cj, "UnsupportedSchedule", f"CRON_TZ or TZ used in schedule {text!r} is not "
                                                             f"officially supported")
        try:
            schedule = parse_schedule(text, time_zone=zone_name)
        except ScheduleError as exc:
            self.recorder.warning(cj, "UnparseableSchedule", f"unparseable schedule: {text!r} : {exc}")
            return None, changed
        try:
            _, scheduled, missed = most_recent_schedule_time(cj, now, schedule, with_deadline=True)
        except ScheduleError as exc:
            self.recorder.warning(cj, "InvalidSchedule", f"invalid schedule: {text} : {exc}")
            return None, changed
        if scheduled is None:
            return next_schedule_delay(cj, now, schedule), changed
        if missed > TOO_MANY_MISSED:
            self.recorder.warning(cj, "TooManyMissedTimes", "too many missed start times. Set or decrease "
                                                            ".spec.startingDeadlineSeconds or check clock skew")
        deadline = spec.get("startingDeadlineSeconds")
        if deadline is not None and scheduled + float(deadline) < now:
            self.recorder.warning(cj, "MissSchedule", f"Missed scheduled time to start a job: {rfc1123z(scheduled)}")
            return next_schedule_delay(cj, now, schedule), changed
        name = job_name(cj, scheduled)
        if (any(r.get("name") == name for r in status.get("active") or [])
                or ts(status.get("lastScheduleTime")) == scheduled):
            return next_schedule_delay(cj, now, schedule), changed
        policy = spec.get("concurrencyPolicy") or "Allow"
        if policy == "Forbid" and status.get("active"):
            self.recorder.normal(cj, "JobAlreadyActive",
                                 "Not starting job because prior execution is running and concurrency policy is "
                                 "Forbid")
            return next_schedule_delay(cj, now, schedule), changed
        if policy == "Replace":
            for ref in list(status.get("active") or []):
                try:
                    job = await self.api.get(JOBS, str(ref.get("name")), namespace=namespace_of(cj))
                except NotFoundError:
                    _remove_active(status, str(ref.get("uid")))
                    changed = True
                    continue
                await self._delete_job(cj, job)
                changed = True
        zone = schedule.zone
        body = job_from_template(cj, scheduled, zone)
        try:
            created = await self.api.create(JOBS, body, namespace=namespace_of(cj))
        except AlreadyExistsError:
            existing = await self.api.get(JOBS, name, namespace=namespace_of(cj))
            ref = controller_ref(existing)
            if ref is None or ref.get("uid") != uid_of(cj):
                return None, changed  # another actor's Job: assume it keeps the status
            if _in_active(status, uid_of(existing)):
                return None, changed
            _log.info("job already exists", cronjob=key_of(cj), job=name)
            created = existing
        except Exception as exc:
            self.recorder.warning(cj, "FailedCreate", f"Error creating job: {exc}")
            raise
        else:
            self.recorder.normal(cj, "SuccessfulCreate", f"Created job {name_of(created)}")
        status.setdefault("active", []).append(job_reference(created))
        status["lastScheduleTime"] = format_time(scheduled)
        return next_schedule_delay(cj, now, schedule), True

    def _note_success(self, status: dict[str, Any], job: Obj) -> bool:
        done_at = ts((job.get("status") or {}).get("completionTime"))
        last = ts(status.get("lastSuccessfulTime"))
        if done_at is not None and (last is None or done_at > last):
            status["lastSuccessfulTime"] = (job.get("status") or {}).get("completionTime")
            return True
        return False

    async def cleanup_finished_jobs(self, cj: Obj, jobs: list[Obj]) -> bool:
        """Delete finished Jobs beyond the history limits, oldest start first; whether the status changed."""
        spec = cj.get("spec") or {}
        changed = False
        for kind, limit in (("Complete", spec.get("successfulJobsHistoryLimit")),
                            ("Failed", spec.get("failedJobsHistoryLimit"))):
            if limit is None:
                continue
            done = sorted((j for j in jobs if job_finished_type(j) == kind and not meta(j).get("deletionTimestamp")),
                          key=_start_key)
            for job in done[:max(0, len(done) - int(limit))]:
                if await self._delete_job(cj, job):
                    changed = True
        return changed

    async def _delete_job(self, cj: Obj, job: Obj) -> bool:
        try:
            await self.api.delete(JOBS, name_of(job), namespace=namespace_of(job), propagation_policy="Background")
        except NotFoundError:
            pass
        except Exception as exc:
            self.recorder.warning(cj, "FailedDelete", f"Deleted job: {exc}")
            return False
        _remove_active(cj["status"], uid_of(job))
        self.recorder.normal(cj, "SuccessfulDelete", f"Deleted job {name_of(job)}")
        return True


def _in_active(status: dict[str, Any], uid: str) -> bool:
    return any(r.get("uid") == uid for r in status.get("active") or [])


def _remove_active(status: dict[str, Any], uid: str) -> None:
    status["active"] = [r for r in status.get("active") or [] if r.get("uid") != uid]


def _canonical(status: dict[str, Any]) -> dict[str, Any]:
    """The status as stored: an empty active list omitted (Go's omitempty)."""
    out = {k: v for k, v in status.items() if v is not None}
    if not out.get("active"):
        out.pop("active", None)
    return out


def _start(ctx: ControllerContext) -> Started:
    c = CronJobController(api=ctx.api, cronjobs=ctx.informer(_CRONJOBS), jobs=ctx.informer(_JOBS), clock=ctx.clock,
                          recorder=ctx.recorder.for_component("cronjob-controller"))
    q = ctx.queue("cronjob")
    c.enqueue = q.add
    c.enqueue_after = q.add_after
    ctx.on(CRONJOBS, on_add=lambda o, _i: q.add(key_of(o)), on_update=c.on_cronjob_update,
           on_delete=lambda o: q.add(key_of(final_state(o))))
    ctx.on(JOBS, on_add=lambda o, _i: c.on_job(o), on_update=c.on_job_update,
           on_delete=lambda o: c.on_job(final_state(o)))
    return Started(run=run_workers(q, c.reconcile, workers=ctx.settings.batch.cronjob_workers, name="cronjob"),
                   controller=c)


_CRONJOBS = InformerNeed(kind=CRONJOBS)
_JOBS = InformerNeed(kind=JOBS, indexers={"namespace": index_by_namespace})
CONTROLLER = ControllerSpec(name="cronjob", informers=(_CRONJOBS, _JOBS), start=_start)

"""The cron schedule parser and the CronJob controller: on a manual clock, then on a real mesh.

`TestCronJobOnAMesh` creates a CronJob with kubectl and watches it fire on the cluster clock
(at clock rate 20 an every-minute schedule fires every 3 s of wall time).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
import pytest_asyncio
from cm_fakes import FakeApi
from cm_mesh import MeshEnv, start_mesh

from kubemesh.controller_manager.cronjob import (
    SCHEDULED_TIMESTAMP,
    CronJobController,
    job_name,
    most_recent_schedule_time,
)
from kubemesh.controller_manager.schedules import ScheduleError, parse_schedule
from kubemesh.services.machinery.clock import ManualClock, format_time
from kubemesh.services.machinery.eventing import EventRecorder
from kubemesh.services.model.kinds import CRONJOBS, JOBS, Obj

KEY = "default/tick"


def at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def iso(t: float | None) -> str | None:
    return None if t is None else datetime.fromtimestamp(t, UTC).isoformat()


# -- the parser ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "zone", "after", "expected"), [
    ("*/5 * * * *", None, "2024-01-01T00:00:00+00:00", "2024-01-01T00:05:00+00:00"),
    ("*/5 * * * *", None, "2024-01-01T00:04:59.5+00:00", "2024-01-01T00:05:00+00:00"),
    ("0,30 9-17 * * mon-fri", None, "2024-01-05T17:30:00+00:00", "2024-01-08T09:00:00+00:00"),
    ("15 10 * JAN,jul *", None, "2024-02-01T00:00:00+00:00", "2024-07-01T10:15:00+00:00"),
    ("0 0 1 * mon", None, "2024-01-01T00:00:00+00:00", "2024-01-08T00:00:00+00:00"),   # dom OR dow
    ("0 0 */10 * *", None, "2024-01-01T00:00:00+00:00", "2024-01-11T00:00:00+00:00"),  # step keeps AND off
    ("5/20 * * * *", None, "2024-01-01T00:06:00+00:00", "2024-01-01T00:25:00+00:00"),  # N/step = N-max/step
    ("@hourly", None, "2024-01-01T00:30:00+00:00", "2024-01-01T01:00:00+00:00"),
    ("@daily", None, "2024-01-01T00:30:00+00:00", "2024-01-02T00:00:00+00:00"),
    ("@weekly", None, "2024-01-01T00:00:00+00:00", "2024-01-07T00:00:00+00:00"),
    ("@monthly", None, "2024-01-15T00:00:00+00:00", "2024-02-01T00:00:00+00:00"),
    ("@yearly", None, "2024-01-15T00:00:00+00:00", "2025-01-01T00:00:00+00:00"),
    ("@every 90s", None, "2024-01-01T00:00:00.7+00:00", "2024-01-01T00:01:30+00:00"),
    ("@every 1h30m", None, "2024-01-01T00:00:00+00:00", "2024-01-01T01:30:00+00:00"),
    ("0 9 * * *", "Asia/Tokyo", "2024-01-01T00:00:00+00:00", "2024-01-02T00:00:00+00:00"),
    ("CRON_TZ=America/New_York 0 9 * * *", "Asia/Tokyo", "2024-01-01T00:00:00+00:00", "2024-01-01T14:00:00+00:00"),
    ("TZ=Europe/Berlin 0 0 * * *", None, "2024-07-01T12:00:00+00:00", "2024-07-01T22:00:00+00:00"),
    ("30 2 * * *", "America/New_York", "2024-03-10T05:00:00+00:00", "2024-03-10T07:30:00+00:00"),  # DST gap
    ("0 0 30 2 *", None, "2024-01-01T00:00:00+00:00", None),
])
def test_next_activation(spec: str, zone: str | None, after: str, expected: str | None) -> None:
    assert iso(parse_schedule(spec, time_zone=zone).next_after(at(after))) == expected


@pytest.mark.parametrize("spec", [
    "* * * *", "60 * * * *", "* 24 * * *", "* * 0 * *", "* * * 13 *", "* * * * 7", "*/0 * * * *",
    "5-1 * * * *", "a * * * *", "@fortnightly", "CRON_TZ=Mars/Olympus 0 * * * *", "", "1-2-3 * * * *",
])
def test_rejected(spec: str) -> None:
    with pytest.raises(ScheduleError):
        parse_schedule(spec)


def test_unknown_time_zone_is_rejected() -> None:
    with pytest.raises(ScheduleError, match="unknown time zone"):
        parse_schedule("* * * * *", time_zone="Nowhere/Special")


def cronjob_obj(created: float, *, last: float | None = None, deadline: int | None = None) -> Obj:
    cj: Obj = {"metadata": {"name": "tick", "creationTimestamp": format_time(created)},
               "spec": {"schedule": "*/5 * * * *"}, "status": {}}
    if last is not None:
        cj["status"]["lastScheduleTime"] = format_time(last)
    if deadline is not None:
        cj["spec"]["startingDeadlineSeconds"] = deadline
    return cj


def test_most_recent_schedule_time_counts_missed_times() -> None:
    s = parse_schedule("*/5 * * * *")
    t0 = at("2024-01-01T00:00:00+00:00")
    assert most_recent_schedule_time(cronjob_obj(t0), t0 + 299, s, with_deadline=True)[1:] == (None, 0)
    assert most_recent_schedule_time(cronjob_obj(t0), t0 + 300, s, with_deadline=True)[1:] == (t0 + 300, 1)
    _, recent, missed = most_recent_schedule_time(cronjob_obj(t0), t0 + 3600 * 24, s, with_deadline=True)
    assert recent == t0 + 3600 * 24 and missed == 288
    # the deadline bounds how far back we look
    _, recent, missed = most_recent_schedule_time(cronjob_obj(t0, deadline=200), t0 + 3600 * 24 + 100, s,
                                                  with_deadline=True)
    assert recent == t0 + 3600 * 24 and missed == 1


# -- the controller ------------------------------------------------------------------------------


class Harness:
    def __init__(self, start: str = "2024-01-01T00:00:00+00:00") -> None:
        self.clock = ManualClock(at(start))
        self.api = FakeApi(self.clock)
        self.rec = EventRecorder(None, clock=self.clock, component="kube-controller-manager")
        self.c = CronJobController(api=self.api, cronjobs=self.api.store(CRONJOBS), jobs=self.api.store(JOBS),
                                   clock=self.clock, recorder=self.rec.for_component("cronjob-controller"))

    def add(self, **spec: Any) -> Obj:
        body: Obj = {"metadata": {"name": "tick"}, "spec": {
            "schedule": "*/5 * * * *", "concurrencyPolicy": "Allow", "suspend": False,
            "successfulJobsHistoryLimit": 3, "failedJobsHistoryLimit": 1,
            "jobTemplate": {"metadata": {"labels": {"app": "tick"}, "annotations": {"a": "b"}},
                            "spec": {"template": {"spec": {"restartPolicy": "Never",
                                                           "containers": [{"name": "c", "image": "busybox"}]}}}}}}
        body["spec"].update(spec)
        cj = self.api.add(CRONJOBS, body)
        cj["status"] = {}
        return cj

    def cj(self) -> Obj:
        return self.api.objects["cronjobs"][KEY]

    def jobs(self) -> list[Obj]:
        return sorted(self.api.objects.get("jobs", {}).values(), key=lambda j: j["metadata"]["name"])

    def finish(self, name: str, ctype: str = "Complete") -> None:
        job = self.api.objects["jobs"][f"default/{name}"]
        now = format_time(self.clock.now())
        job["status"] = {"startTime": job["metadata"]["creationTimestamp"],
                         "conditions": [{"type": ctype, "status": "True", "lastTransitionTime": now}]}
        if ctype == "Complete":
            job["status"]["completionTime"] = now
        self.api._bump(job)

    async def at(self, seconds_after_start: float, start: str = "2024-01-01T00:00:00+00:00") -> Any:
        target = at(start) + seconds_after_start
        await self.clock.advance(target - self.clock.now())
        return await self.c.reconcile(KEY)


async def test_creates_a_job_per_scheduled_time_on_the_cluster_clock() -> None:
    h = Harness()
    cj = h.add()
    result = await h.at(10)
    assert not h.jobs()
    assert result is not None and result.requeue_after == pytest.approx(290.1)
    result = await h.at(300)
    (job,) = h.jobs()
    scheduled = at("2024-01-01T00:05:00+00:00")
    assert job["metadata"]["name"] == f"tick-{int(scheduled // 60)}" == job_name(cj, scheduled)
    assert job["metadata"]["annotations"] == {"a": "b", SCHEDULED_TIMESTAMP: "2024-01-01T00:05:00Z"}
    assert job["metadata"]["labels"] == {"app": "tick"}
    assert job["metadata"]["ownerReferences"][0]["uid"] == cj["metadata"]["uid"]
    assert job["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox"
    st = h.cj()["status"]
    assert st["lastScheduleTime"] == format_time(scheduled)
    assert [r["name"] for r in st["active"]] == [job["metadata"]["name"]]
    assert result is not None and result.requeue_after == pytest.approx(300.1)
    assert len(h.rec.reasons("SuccessfulCreate")) == 1
    # a second sync at the same time creates nothing
    await h.c.reconcile(KEY)
    assert len(h.jobs()) == 1
    # the Job completes: it leaves the active list, lastSuccessfulTime follows
    h.finish(job["metadata"]["name"])
    await h.at(320)
    st = h.cj()["status"]
    assert "active" not in st
    assert st["lastSuccessfulTime"] == h.api.objects["jobs"][f"default/{job['metadata']['name']}"]["status"][
        "completionTime"]
    assert len(h.rec.reasons("SawCompletedJob")) == 1


async def test_time_zone_is_used_for_the_schedule_and_the_annotation() -> None:
    h = Harness()
    h.add(schedule="0 9 * * *", timeZone="Asia/Tokyo")
    await h.at(0)  # 09:00 JST exactly: created at this instant, so not due
    assert not h.jobs()
    await h.at(86400)
    (job,) = h.jobs()
    assert job["metadata"]["annotations"][SCHEDULED_TIMESTAMP] == "2024-01-02T09:00:00+09:00"


async def test_forbid_skips_while_a_job_runs_and_replace_replaces_it() -> None:
    h = Harness()
    h.add(concurrencyPolicy="Forbid")
    await h.at(300)
    await h.at(600)
    assert len(h.jobs()) == 1
    assert len(h.rec.reasons("JobAlreadyActive")) == 1
    h.cj()["spec"]["concurrencyPolicy"] = "Replace"
    await h.at(900)
    names = [j["metadata"]["name"] for j in h.jobs()]
    assert names == [f"tick-{int(at('2024-01-01T00:15:00+00:00') // 60)}"]
    assert [r["name"] for r in h.cj()["status"]["active"]] == names
    assert len(h.rec.reasons("SuccessfulDelete")) == 1


async def test_allow_runs_jobs_side_by_side() -> None:
    h = Harness()
    h.add()
    for t in (300, 600, 900):
        await h.at(t)
    assert len(h.jobs()) == 3 and len(h.cj()["status"]["active"]) == 3


async def test_starting_deadline_misses_a_late_time() -> None:
    h = Harness()
    h.add(startingDeadlineSeconds=20)
    result = await h.at(330)
    assert not h.jobs()
    assert len(h.rec.reasons("MissSchedule")) == 0, "out of the deadline window: nothing is even considered"
    assert result is not None and result.requeue_after == pytest.approx(270.1)
    await h.at(610)
    assert len(h.jobs()) == 1, "10 s late, within the 20 s deadline"


async def test_too_many_missed_start_times_runs_only_the_latest() -> None:
    h = Harness()
    h.add()
    await h.at(86400 * 2 + 1)
    (job,) = h.jobs()
    assert job["metadata"]["name"] == f"tick-{int((at('2024-01-01T00:00:00+00:00') + 86400 * 2) // 60)}"
    assert len(h.rec.reasons("TooManyMissedTimes")) == 1


async def test_suspend_and_unparseable_schedule_start_nothing() -> None:
    h = Harness()
    h.add(suspend=True)
    assert await h.at(600) is None
    assert not h.jobs()
    h.cj()["spec"]["suspend"] = False
    h.cj()["spec"]["schedule"] = "*/5 * * *"
    assert await h.at(900) is None
    assert not h.jobs() and len(h.rec.reasons("UnparseableSchedule")) == 1


async def test_history_limits_delete_the_oldest_finished_jobs() -> None:
    h = Harness()
    h.add(successfulJobsHistoryLimit=2, failedJobsHistoryLimit=1)
    for i in range(1, 6):
        await h.at(300 * i)
        newest = h.jobs()[-1]["metadata"]["name"]
        h.finish(newest, "Complete" if i != 3 else "Failed")
        await h.at(300 * i + 10)
    names = [j["metadata"]["name"] for j in h.jobs()]
    minutes = [int((at("2024-01-01T00:00:00+00:00") + 300 * i) // 60) for i in (3, 4, 5)]
    assert names == [f"tick-{m}" for m in minutes]


async def test_a_job_created_before_a_crash_is_not_created_twice() -> None:
    h = Harness()
    h.add()
    h.api.fail_next["update"] = RuntimeError("status write lost")
    with pytest.raises(RuntimeError):
        await h.at(300)
    assert len(h.jobs()) == 1 and not h.cj()["status"].get("active")
    await h.c.reconcile(KEY)
    assert len(h.jobs()) == 1
    assert [r["name"] for r in h.cj()["status"]["active"]] == [h.jobs()[0]["metadata"]["name"]]
    assert len(h.rec.reasons("UnexpectedJob")) == 1


async def test_a_missing_active_job_leaves_the_list() -> None:
    h = Harness()
    h.add()
    await h.at(300)
    h.api.objects["jobs"].clear()
    await h.at(310)
    assert "active" not in h.cj()["status"] and len(h.rec.reasons("MissingJob")) == 1


# -- on a real mesh ------------------------------------------------------------------------------

CRON_RATE = 20.0


@pytest_asyncio.fixture(scope="class", loop_scope="module")
async def cron_mesh() -> AsyncIterator[MeshEnv]:
    async for env in start_mesh(nodes=1, rate=CRON_RATE):
        yield env


@pytest.mark.slow
@pytest.mark.kubectl
@pytest.mark.asyncio(loop_scope="module")
class TestCronJobOnAMesh:
    async def test_cronjob_fires_every_minute_of_the_cluster_clock(self, cron_mesh: MeshEnv) -> None:
        env = cron_mesh
        await env.run("create", "cronjob", "tick", "--image=busybox", "--schedule=*/1 * * * *")

        async def two_done() -> list[Any] | None:
            jobs = [j for j in (await env.json("get", "jobs"))["items"] if j["metadata"]["name"].startswith("tick-")]
            done = [j for j in jobs if any(c["type"] == "Complete" and c["status"] == "True"
                                           for c in (j.get("status") or {}).get("conditions") or [])]
            return jobs if len(done) >= 2 else None

        jobs = await env.until(two_done, within=3 * 60 + 60, what="two jobs of cronjob tick completed")
        minutes = []
        for job in jobs:
            md = job["metadata"]
            scheduled = datetime.fromisoformat(md["annotations"][SCHEDULED_TIMESTAMP].replace("Z", "+00:00"))
            assert scheduled.second == 0
            minutes.append(int(scheduled.timestamp()) // 60)
            assert md["name"] == f"tick-{minutes[-1]}"
            created = datetime.fromisoformat(md["creationTimestamp"].replace("Z", "+00:00")).timestamp()
            assert 0 <= created - scheduled.timestamp() < 30, "created at its scheduled cluster time"
            assert md["ownerReferences"][0]["kind"] == "CronJob"
        assert len(set(minutes)) == len(minutes)
        cj = await env.json("get", "cronjob", "tick")
        st = cj["status"]
        assert st["lastScheduleTime"] and st["lastSuccessfulTime"]
        await env.run("patch", "cronjob", "tick", "-p", '{"spec": {"suspend": true}}')
        count = len((await env.json("get", "jobs"))["items"])
        start = await env.now()

        async def a_minute_passed() -> bool:
            return await env.now() - start > 90

        await env.until(a_minute_passed, within=120, what="90 cluster seconds")
        assert len((await env.json("get", "jobs"))["items"]) == count, "a suspended CronJob starts nothing"

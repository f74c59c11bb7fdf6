"""The emulated containers' logs (`kubemesh.kubelet.containerlogs`) as a `PodMachine` writes them.

Pure: the machine moves on explicit cluster times; the follow test drives a `ManualClock`.
"""

from __future__ import annotations

import asyncio
import random
import re
from typing import Any

import pytest

from kubemesh.kubelet.containerlogs import MAX_LINES, ContainerLog, LogOptions, timestamp
from kubemesh.kubelet.lifecycle import LogUnavailable, PodMachine
from kubemesh.services.machinery.clock import ManualClock
from kubemesh.services.model.kinds import Obj

T0 = 1_800_000_000.0


def pod(*, restart: str = "Always", annotations: dict[str, str] | None = None,
        names: tuple[str, ...] = ("main",)) -> Obj:
    return {"metadata": {"name": "web", "namespace": "default", "uid": "u1", "annotations": annotations or {}},
            "spec": {"restartPolicy": restart, "nodeName": "node-1",
                     "containers": [{"name": n, "image": "busybox:1.36"} for n in names]}}


def machine(p: Obj, **kw: Any) -> PodMachine:
    m = PodMachine.for_pod(p, host_ip="172.16.0.1", rng=random.Random(1), start_delay=2.0, stop_delay=1.0, **kw)
    m.start(now=T0, pod_ip="10.0.1.2")
    return m


def text(run: ContainerLog, now: float, **opts: Any) -> list[str]:
    return [ln.text for ln in run.select(now, LogOptions(**opts))]


def state_of(m: PodMachine) -> tuple[str, str | None]:
    return m.containers[0].state, m.containers[0].reason  # a call: mypy would narrow the field across asserts


def started_id(line: str) -> str:
    found = re.search(r"id ([0-9a-f]{12}), restart (\d+)\)$", line)
    assert found, line
    return found.group(1)


def test_a_run_logs_its_start_its_printed_lines_and_its_exit() -> None:
    m = machine(pod(annotations={"kubemesh.io/run-seconds": "10", "kubemesh.io/exit-code": "3",
                                 "kubemesh.io/log": "hello\nworld", "kubemesh.io/log-interval": "2"}))
    with pytest.raises(LogUnavailable, match=r'^container "main" in pod "web" is waiting to start: ContainerCreating$'):
        m.container_log("main", pod="web", previous=False)
    m.advance(T0 + 2)
    run = m.container_log("main", pod="web", previous=False)
    lines = text(run, T0 + 2)
    assert lines[0].startswith('[kubemesh] container "main" started (image busybox:1.36, id ')
    assert started_id(lines[0]) == m.containers[0].container_id.removeprefix("containerd://")[:12]
    assert lines[1:] == ["hello"]
    assert text(run, T0 + 4)[1:] == ["hello", "world"]  # printed one per interval, visible as time passes
    m.advance(T0 + 12)
    assert text(run, T0 + 12)[-1] == "[kubemesh] exited with code 3 (Error)"
    assert run.ended == T0 + 12


def test_previous_is_the_run_last_state_names() -> None:
    m = machine(pod(annotations={"kubemesh.io/run-seconds": "5", "kubemesh.io/exit-code": "1"}))
    m.advance(T0 + 2)
    with pytest.raises(LogUnavailable, match=r'^previous terminated container "main" in pod "web" not found$'):
        m.container_log("main", pod="web", previous=True)
    first = m.containers[0].container_id
    m.advance(T0 + 7)  # exits, restarted at once (restart 1)
    second = m.containers[0].container_id
    assert second != first and state_of(m) == ("running", None)
    prev = m.container_log("main", pod="web", previous=True)
    assert prev.container_id == first and text(prev, T0 + 7)[-1] == "[kubemesh] exited with code 1 (Error)"
    assert m.container_log("main", pod="web", previous=False).container_id == second
    m.advance(T0 + 12)  # exits again: CrashLoopBackOff, waiting; the log shown is the run that just ended
    assert state_of(m) == ("waiting", "CrashLoopBackOff")
    assert m.container_log("main", pod="web", previous=False).container_id == second
    assert m.container_log("main", pod="web", previous=True).container_id == second
    m.advance(T0 + 22)  # the back-off is over: restart 2 runs
    third = m.containers[0].container_id
    assert set(m.containers[0].runs) == {second, third}  # the current run and the last terminated one
    assert m.container_log("main", pod="web", previous=True).container_id == second


def test_sigterm_then_exit_and_unknown_containers() -> None:
    m = machine(pod(names=("a", "b")))
    m.advance(T0 + 2)
    m.terminate(now=T0 + 3, grace=30)
    m.advance(T0 + 4)
    assert text(m.container_log("b", pod="web", previous=False), T0 + 4)[-2:] == [
        "[kubemesh] received SIGTERM", "[kubemesh] exited with code 0 (Completed)"]
    with pytest.raises(LogUnavailable, match=r'^container "x" in pod "web" is not available$'):
        m.container_log("x", pod="web", previous=False)


def test_a_container_terminated_before_it_ran_has_no_log() -> None:
    m = machine(pod())
    m.terminate(now=T0 + 1, grace=30)
    with pytest.raises(LogUnavailable, match=r'^container "main" in pod "web" is terminated$'):
        m.container_log("main", pod="web", previous=False)


def test_options_since_tail_and_the_bound() -> None:
    run = ContainerLog(container_id="c")
    for i in range(MAX_LINES + 5):
        run.write(T0 + i, f"line {i}")
    assert len(run.lines) == MAX_LINES and run.lines[0].text == "line 5"
    now = T0 + MAX_LINES + 10
    assert text(run, now, tail_lines=2) == [f"line {MAX_LINES + 3}", f"line {MAX_LINES + 4}"]
    assert text(run, now, tail_lines=0) == []
    assert text(run, now, since=T0 + MAX_LINES + 3) == [f"line {MAX_LINES + 3}", f"line {MAX_LINES + 4}"]
    assert timestamp(T0 + 0.5) == "2027-01-15T08:00:00.500000000Z"


async def collect(run: ContainerLog, clock: ManualClock, opts: LogOptions) -> bytes:
    out = b""
    async for chunk in run.follow(clock=clock, opts=opts, alive=lambda: True, poll=0.01):
        out += chunk
    return out


async def test_follow_streams_until_the_run_ends_and_options_shape_the_bytes() -> None:
    clock = ManualClock(T0)
    run = ContainerLog(container_id="c")
    run.write(T0, "one")
    run.write(T0 + 5, "later")  # printed on an interval: not yet visible
    assert await collect(run, clock, LogOptions(timestamps=True)) == f"{timestamp(T0)} one\n".encode()
    assert await collect(run, clock, LogOptions(limit_bytes=2)) == b"on"
    follower = asyncio.ensure_future(collect(run, clock, LogOptions(follow=True)))
    await asyncio.sleep(0.05)
    assert not follower.done()
    await clock.advance(6)
    await asyncio.sleep(0.05)
    assert not follower.done()  # the run goes on
    run.end(T0 + 6, "bye")
    assert await asyncio.wait_for(follower, 5) == b"one\nlater\nbye\n"
    ended = ContainerLog(container_id="d")
    ended.write(T0, "x")
    ended.end(T0 + 1, "y")
    assert await collect(ended, clock, LogOptions(follow=True, tail_lines=1)) == b"y\n"

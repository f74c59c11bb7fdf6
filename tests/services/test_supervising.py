"""Supervised tasks and the staged shutdown."""

from __future__ import annotations

import asyncio
import os
import signal

import pytest

from kubemesh.services.machinery.clock import ManualClock
from kubemesh.services.machinery.queueing import WorkQueue, run_workers
from kubemesh.services.process.supervising import ShutdownSettings, Supervisor, install_signal_handlers

pytestmark = pytest.mark.timeout(20)

FAST = ShutdownSettings(drain_timeout=0.2, cancel_timeout=0.2, hook_timeout=0.1)


async def forever() -> None:
    await asyncio.Event().wait()


async def test_stop_leads_to_an_orderly_shutdown() -> None:
    order: list[str] = []
    queue: WorkQueue[str] = WorkQueue(clock=ManualClock(), name="q")
    done: list[str] = []

    async def reconcile(key: str) -> None:
        await asyncio.sleep(0)
        done.append(key)

    async def component(stop: asyncio.Event) -> None:
        await stop.wait()
        order.append("component saw stop")

    async with Supervisor(settings=FAST) as sup:
        sup.on_stop(lambda: order.append("hook"))
        sup.on_stop(queue.shutdown, name="drain queue")
        sup.spawn(run_workers(queue, reconcile, workers=2, name="ctl"), name="workers")
        sup.spawn(component(sup.stop), name="component")
        for k in "abc":
            queue.add(k)
        sup.request_stop("test")
        report = await sup.wait()
    assert report.clean and report.exit_code == 0
    assert report.reason == "test"
    assert report.cancelled == () and report.stuck == ()
    assert order == ["component saw stop", "hook"] or order == ["hook", "component saw stop"]
    assert sorted(done) == ["a", "b", "c"]  # the queue drained
    assert sup.task_names == []


async def test_sigterm_starts_the_shutdown() -> None:
    sup = Supervisor(settings=FAST)
    uninstall = install_signal_handlers(sup)
    try:
        sup.spawn(forever(), name="informer")
        os.kill(os.getpid(), signal.SIGTERM)
        report = await asyncio.wait_for(sup.wait(), 5)
    finally:
        uninstall()
    assert report.reason == "signal SIGTERM"
    assert report.cancelled == ("informer",)  # did not watch `stop`: cancelled after the drain
    assert report.clean


async def test_a_second_signal_skips_the_drain() -> None:
    sup = Supervisor(settings=ShutdownSettings(drain_timeout=60, cancel_timeout=0.2))
    uninstall = install_signal_handlers(sup)
    try:
        sup.spawn(forever(), name="slow")
        os.kill(os.getpid(), signal.SIGINT)
        await asyncio.sleep(0)
        waiting = asyncio.create_task(sup.wait())
        await asyncio.sleep(0.01)
        os.kill(os.getpid(), signal.SIGINT)
        report = await asyncio.wait_for(waiting, 5)
    finally:
        uninstall()
    assert report.cancelled == ("slow",)


async def test_a_crashing_named_task_is_reported_and_stops_everything(caplog: pytest.LogCaptureFixture) -> None:
    async def crash() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("boom")

    async with Supervisor(settings=FAST) as sup:
        sup.spawn(forever(), name="heartbeat")
        sup.spawn(crash(), name="nodelifecycle")
        report = await sup.wait()
    assert report.failed == ("nodelifecycle",)
    assert isinstance(report.errors["nodelifecycle"], RuntimeError)
    assert "nodelifecycle" in report.reason
    assert report.cancelled == ("heartbeat",)
    assert report.exit_code == 1


async def test_an_unexpected_exit_is_reported() -> None:
    async def quits() -> None:
        await asyncio.sleep(0)

    async with Supervisor(settings=FAST) as sup:
        sup.spawn(quits(), name="watcher")
        report = await sup.wait()
    assert report.exited == ("watcher",)
    assert report.exit_code == 1


async def test_a_finishable_task_may_return() -> None:
    async def once() -> int:
        return 42

    async with Supervisor(settings=FAST) as sup:
        task = sup.spawn(once(), name="migration", finishable=True)
        assert await task.task == 42
        assert not sup.stop.is_set()
        sup.request_stop()
    assert sup.report is not None and sup.report.clean


async def test_stop_when_done_ends_the_process() -> None:
    async def main() -> None:
        await asyncio.sleep(0)

    async with Supervisor(settings=FAST) as sup:
        sup.spawn(main(), name="run", finishable=True, stop_when_done=True)
        sup.spawn(forever(), name="informer")
        report = await asyncio.wait_for(sup.wait(), 5)
    assert report.reason == "task run finished" and report.clean


async def test_a_task_ignoring_cancellation_is_named_as_stuck() -> None:
    release = asyncio.Event()

    async def stubborn() -> None:
        while not release.is_set():
            try:
                await release.wait()
            except asyncio.CancelledError:
                continue  # ignores cancellation: exactly what must be reported

    sup = Supervisor(settings=ShutdownSettings(drain_timeout=0.01, cancel_timeout=0.05))
    sup.spawn(stubborn(), name="stubborn")
    sup.request_stop()
    report = await sup.wait()
    assert report.stuck == ("stubborn",)
    assert report.exit_code == 1
    release.set()  # let it end so the test leaks nothing
    await asyncio.sleep(0.01)


async def test_leaving_the_block_with_an_error_stops_the_tasks() -> None:
    sup = Supervisor(settings=FAST)
    with pytest.raises(KeyError):
        async with sup:
            sup.spawn(forever(), name="informer")
            raise KeyError("x")
    assert sup.report is not None
    assert sup.report.failed == ("<body>",) and sup.report.cancelled == ("informer",)


async def test_a_failing_stop_hook_does_not_block_shutdown() -> None:
    def bad() -> None:
        raise RuntimeError("hook broke")

    async def slow() -> None:
        await asyncio.Event().wait()

    async with Supervisor(settings=FAST) as sup:
        sup.on_stop(bad)
        sup.on_stop(slow)
        sup.request_stop()
        report = await sup.wait()
    assert report.clean

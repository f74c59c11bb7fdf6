"""The work queue's client-go promises, on a manual clock."""

from __future__ import annotations

import asyncio

import pytest

from kubemesh.services.machinery.clock import ManualClock
from kubemesh.services.machinery.queueing import (
    ExponentialRateLimiter,
    Result,
    ShutDown,
    TerminalError,
    WorkQueue,
    run_workers,
)

pytestmark = pytest.mark.timeout(10)


async def settle(n: int = 10) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def make(clock: ManualClock | None = None) -> WorkQueue[str]:
    return WorkQueue(clock=clock or ManualClock(), name="test")


async def test_a_key_added_many_times_is_handed_out_once() -> None:
    q = make()
    for _ in range(5):
        q.add("a")
    q.add("b")
    assert len(q) == 2
    assert await q.get() == "a"
    assert await q.get() == "b"
    assert len(q) == 0
    assert q.adds == 6


async def test_keys_come_out_in_fifo_order() -> None:
    q = make()
    for k in "cab":
        q.add(k)
    assert [await q.get() for _ in range(3)] == ["c", "a", "b"]


async def test_a_processing_key_is_not_handed_to_another_worker() -> None:
    q = make()
    q.add("a")
    assert await q.get() == "a"
    q.add("a")  # re-added while processing
    assert len(q) == 0
    second = asyncio.create_task(q.get())
    await settle()
    assert not second.done()
    q.done("a")
    assert await second == "a"  # processed once more after done


async def test_re_adds_during_processing_collapse_into_one_more_run() -> None:
    q = make()
    q.add("a")
    await q.get()
    q.add("a")
    q.add("a")
    q.done("a")
    assert len(q) == 1
    assert await q.get() == "a"
    q.done("a")
    assert len(q) == 0


async def test_done_without_re_add_does_not_requeue() -> None:
    q = make()
    q.add("a")
    await q.get()
    q.done("a")
    assert len(q) == 0
    assert q.processing == 0


async def test_get_blocks_until_an_add() -> None:
    q = make()
    getter = asyncio.create_task(q.get())
    await settle()
    assert not getter.done()
    q.add("x")
    assert await getter == "x"


async def test_a_cancelled_getter_does_not_swallow_a_wake_up() -> None:
    q = make()
    g1 = asyncio.create_task(q.get())
    g2 = asyncio.create_task(q.get())
    await settle()
    q.add("x")  # wakes g1 ...
    g1.cancel()  # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await g1
    assert await asyncio.wait_for(g2, 1) == "x"


async def test_add_after_waits_on_the_cluster_clock() -> None:
    clock = ManualClock()
    q = make(clock)
    q.add_after("a", 10)
    assert len(q) == 0 and q.waiting == 1
    await clock.advance(9.9)
    assert len(q) == 0
    await clock.advance(0.1)
    assert len(q) == 1 and q.waiting == 0
    assert await q.get() == "a"


async def test_add_after_keeps_the_earliest_deadline() -> None:
    clock = ManualClock()
    q = make(clock)
    q.add_after("a", 10)
    q.add_after("a", 3)
    q.add_after("a", 20)
    await clock.advance(3)
    assert len(q) == 1
    await q.get()
    q.done("a")
    await clock.advance(30)
    assert len(q) == 0  # the later deadlines were folded into the first


async def test_add_after_with_no_delay_adds_now() -> None:
    q = make()
    q.add_after("a", 0)
    assert len(q) == 1


async def test_delayed_keys_become_ready_in_deadline_order() -> None:
    clock = ManualClock()
    q = make(clock)
    q.add_after("late", 5)
    q.add_after("early", 1)
    q.add_after("mid", 3)
    await clock.advance(5)
    assert [await q.get() for _ in range(3)] == ["early", "mid", "late"]


async def test_rate_limited_backoff_doubles_and_forget_resets() -> None:
    clock = ManualClock(0.0)  # small numbers: exact float steps
    q = make(clock)
    delays = []
    for _ in range(4):
        start = clock.now()
        q.add_rate_limited("a")
        while len(q) == 0:
            await clock.advance(0.001)
        delays.append(round(clock.now() - start, 3))
        await q.get()
        q.done("a")
    assert delays == [0.005, 0.01, 0.02, 0.04]
    assert q.num_requeues("a") == 4
    assert q.retries == 4
    q.forget("a")
    assert q.num_requeues("a") == 0


def test_exponential_backoff_is_capped() -> None:
    limiter: ExponentialRateLimiter[str] = ExponentialRateLimiter(base=0.005, maximum=1000.0)
    delays = [limiter.when("k") for _ in range(2000)]
    assert delays[0] == 0.005
    assert max(delays) == 1000.0
    assert delays[-1] == 1000.0
    assert limiter.when("other") == 0.005  # per key


async def test_shutdown_with_drain_hands_out_queued_keys_then_raises() -> None:
    q = make()
    q.add("a")
    q.add("b")
    assert await q.get() == "a"
    q.shutdown(drain=True)
    q.add("c")  # ignored
    assert await q.get() == "b"
    with pytest.raises(ShutDown):
        await q.get()
    drained = asyncio.create_task(q.drained())
    await settle()
    assert not drained.done()  # "a" and "b" are still in flight
    q.done("a")
    q.done("b")
    await asyncio.wait_for(drained, 1)


async def test_shutdown_wakes_blocked_getters() -> None:
    q = make()
    getters = [asyncio.create_task(q.get()) for _ in range(3)]
    await settle()
    q.shutdown()
    for g in getters:
        with pytest.raises(ShutDown):
            await g


async def test_shutdown_without_drain_drops_queued_keys() -> None:
    q = make()
    q.add("a")
    q.add("b")
    assert await q.get() == "a"
    q.add("a")
    q.shutdown(drain=False)
    assert len(q) == 0
    with pytest.raises(ShutDown):
        await q.get()
    q.done("a")  # the re-add is not handed out any more
    assert len(q) == 0
    await asyncio.wait_for(q.drained(), 1)


async def test_shutdown_drops_pending_delays() -> None:
    clock = ManualClock()
    q = make(clock)
    q.add_after("a", 1)
    q.shutdown()
    await clock.advance(2)
    assert len(q) == 0 and q.waiting == 0
    assert clock.sleepers == 0


async def test_stats_snapshot() -> None:
    clock = ManualClock()
    q = make(clock)
    q.add("a")
    q.add("b")
    q.add_after("c", 1)
    await q.get()
    s = q.stats()
    assert (s.depth, s.processing, s.waiting, s.adds, s.retries) == (1, 1, 1, 2, 0)
    q.shutdown()


async def test_workers_never_process_a_key_concurrently() -> None:
    q = make()
    running: set[str] = set()
    overlaps = 0
    runs: dict[str, int] = {}

    async def reconcile(key: str) -> None:
        nonlocal overlaps
        if key in running:
            overlaps += 1
        running.add(key)
        runs[key] = runs.get(key, 0) + 1
        for _ in range(3):
            await asyncio.sleep(0)
            q.add(key) if runs[key] < 3 else None  # re-add while processing
        running.discard(key)

    for k in ("a", "b"):
        q.add(k)
    workers = asyncio.create_task(run_workers(q, reconcile, workers=4, name="t"))
    await settle(100)
    q.shutdown()
    await asyncio.wait_for(workers, 1)
    assert overlaps == 0
    assert runs == {"a": 3, "b": 3}


async def test_run_workers_retries_failures_with_backoff_and_forgets_on_success() -> None:
    clock = ManualClock()
    q = make(clock)
    attempts: list[float] = []

    async def reconcile(key: str) -> None:
        attempts.append(clock.now())
        if len(attempts) < 3:
            raise RuntimeError("boom")

    q.add("a")
    workers = asyncio.create_task(run_workers(q, reconcile, workers=1, name="t"))
    await settle()
    assert len(attempts) == 1 and q.num_requeues("a") == 1
    await clock.advance(0.005)
    assert len(attempts) == 2 and q.num_requeues("a") == 2
    await clock.advance(0.01)
    assert len(attempts) == 3
    assert q.num_requeues("a") == 0  # success forgets
    q.shutdown()
    await asyncio.wait_for(workers, 1)


async def test_run_workers_honours_requeue_after() -> None:
    clock = ManualClock()
    q = make(clock)
    seen: list[float] = []

    async def reconcile(key: str) -> Result:
        seen.append(clock.now())
        return Result(requeue_after=30)

    q.add("a")
    workers = asyncio.create_task(run_workers(q, reconcile, workers=2, name="t"))
    await settle()
    await clock.advance(30)
    await clock.advance(30)
    assert [t - seen[0] for t in seen] == [0, 30, 60]
    q.shutdown()
    await asyncio.wait_for(workers, 1)


async def test_terminal_errors_are_not_retried() -> None:
    clock = ManualClock()
    q = make(clock)
    calls = 0

    async def reconcile(key: str) -> None:
        nonlocal calls
        calls += 1
        raise TerminalError("bad spec")

    q.add("a")
    workers = asyncio.create_task(run_workers(q, reconcile, workers=1, name="t"))
    await settle()
    await clock.advance(100)
    assert calls == 1 and q.waiting == 0 and q.num_requeues("a") == 0
    q.shutdown()
    await asyncio.wait_for(workers, 1)


async def test_draining_shutdown_lets_the_key_in_flight_finish() -> None:
    q = make()
    release = asyncio.Event()
    finished: list[str] = []

    async def reconcile(key: str) -> None:
        await release.wait()
        finished.append(key)

    q.add("a")
    workers = asyncio.create_task(run_workers(q, reconcile, workers=1, name="t"))
    await settle()
    q.shutdown(drain=True)
    await settle()
    assert not workers.done()
    release.set()
    await asyncio.wait_for(workers, 1)
    assert finished == ["a"]
    assert q.processing == 0


async def test_cancelling_workers_marks_keys_done() -> None:
    q = make()

    async def reconcile(key: str) -> None:
        await asyncio.Event().wait()

    q.add("a")
    workers = asyncio.create_task(run_workers(q, reconcile, workers=1, name="t"))
    await settle()
    assert q.processing == 1
    workers.cancel()
    with pytest.raises(asyncio.CancelledError):
        await workers
    assert q.processing == 0

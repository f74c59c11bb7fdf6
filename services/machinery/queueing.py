"""Work queues with client-go's promises, on the injected cluster clock.

A controller's informer handlers only enqueue keys; workers take keys from a `WorkQueue`
and reconcile them from the cache. The queue makes level-based reconciling safe:

* **Dedupe.** A key added many times before a worker takes it is handed out once.
* **Exclusive processing.** A key handed out by `get()` is *processing* until its worker
  calls `done(key)`; no other worker gets the same key meanwhile, so no key is ever
  reconciled by two workers at once.
* **Re-add during processing.** A key added while it is processing is remembered (it is
  *dirty*) and handed out once more after `done(key)`: a change that arrived while the
  worker was busy is never lost.
* **FIFO among ready keys.** Keys are handed out in the order they became ready.
* **Delays on the cluster clock.** `add_after(key, delay)` adds the key once `delay` cluster
  seconds have passed (`Clock.sleep`), so it works on `ClusterClock` at any rate and on
  `ManualClock` in tests. A key waiting for several deadlines keeps the earliest.
* **Per-key exponential backoff.** `add_rate_limited(key)` waits `base_delay * 2**n`
  (5 ms, 10 ms, ... capped at 1000 s by default) where `n` counts the key's requeues since
  its last `forget(key)`.
* **Shutdown.** After `shutdown()` new adds are ignored and pending delays are dropped.
  With `drain=True` (the default) workers still get the keys already queued, and keys in
  flight finish normally; `get()` raises `ShutDown` once nothing is left to hand out. With
  `drain=False`, queued keys are dropped and `get()` raises `ShutDown` at once. `drained()`
  waits until no key is processing.

Ordering across keys is not promised beyond FIFO-when-ready; a key's backoff is not a
promise about when another key runs. The queue is single-threaded asyncio state: every
method except `get()` and `drained()` is synchronous and safe to call from informer
handlers.

`run_workers` is the controller loop on top: N workers, `forget` on success, rate-limited
requeue on failure, `Result.requeue_after` honoured, `TerminalError` neither retried nor
counted.
"""

from __future__ import annotations

import asyncio
import collections
import heapq
import itertools
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import structlog

from kubemesh.services.machinery.clock import Clock

K = TypeVar("K", bound=Hashable)
K_contra = TypeVar("K_contra", bound=Hashable, contravariant=True)

_log = structlog.get_logger("kubemesh.services.machinery.queueing")


class ShutDown(Exception):
    """The queue is shut down and has nothing more to hand out."""


class TerminalError(Exception):
    """A reconcile failure that retrying cannot fix: the key is forgotten, not requeued."""


@dataclass(frozen=True, slots=True)
class Result:
    """What a reconcile asks of the queue when it succeeds."""

    requeue_after: float | None = None
    """Reconcile the key again after this many cluster seconds (None: only on the next event)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueStats:
    """A snapshot of a queue's counters, for metrics."""

    name: str
    depth: int
    """Keys ready and waiting for a worker."""
    processing: int
    """Keys handed out and not yet done."""
    waiting: int
    """Keys waiting for a delay (`add_after`, `add_rate_limited`)."""
    adds: int
    """Total `add` calls that were accepted (including those deduplicated)."""
    retries: int
    """Total `add_rate_limited` calls."""


class RateLimiter(Protocol[K_contra]):
    """How long a key waits before its next retry."""

    def when(self, key: K_contra) -> float:
        """The delay for the key's next retry, counting this one."""
        ...

    def forget(self, key: K_contra) -> None:
        """Reset the key's history."""
        ...

    def num_requeues(self, key: K_contra) -> int:
        """How many retries the key has had since it was last forgotten."""
        ...


class ExponentialRateLimiter(Generic[K]):
    """Per-key exponential backoff: `base * 2**n`, capped at `maximum`."""

    def __init__(self, *, base: float = 0.005, maximum: float = 1000.0) -> None:
        if base <= 0 or maximum < base:
            raise ValueError("need 0 < base <= maximum")
        self._base = base
        self._max = maximum
        self._failures: dict[K, int] = {}

    def when(self, key: K) -> float:
        """The delay for this retry; counts it."""
        n = self._failures.get(key, 0)
        self._failures[key] = n + 1
        if n > 1023:  # 2.0**1024 overflows; the cap is reached long before
            return self._max
        return min(self._base * 2.0**n, self._max)

    def forget(self, key: K) -> None:
        """Reset the key's backoff."""
        self._failures.pop(key, None)

    def num_requeues(self, key: K) -> int:
        """Retries since the key was last forgotten."""
        return self._failures.get(key, 0)


class WorkQueue(Generic[K]):
    """A deduplicating, exclusive-processing, delaying, rate-limited queue of keys."""

    def __init__(self, *, clock: Clock, name: str, base_delay: float = 0.005, max_delay: float = 1000.0,
                 rate_limiter: RateLimiter[K] | None = None) -> None:
        self.name = name
        self._clock = clock
        self._limiter: RateLimiter[K] = rate_limiter or ExponentialRateLimiter(base=base_delay,
                                                                                maximum=max_delay)
        self._queue: collections.deque[K] = collections.deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._getters: collections.deque[asyncio.Future[None]] = collections.deque()
        self._idle_waiters: list[asyncio.Future[None]] = []
        # Delayed keys: the earliest deadline per key and the timer task that will add it.
        self._waiting: dict[K, tuple[float, int, asyncio.Task[None]]] = {}
        self._deadlines: list[tuple[float, int, K]] = []  # heap; stale entries skipped lazily
        self._tokens = itertools.count()
        self._shutting_down = False
        self._drain = True
        self.adds = 0
        self.retries = 0

    # -- adding -------------------------------------------------------------------------------

    def add(self, key: K) -> None:
        """Mark the key as needing processing (ignored after shutdown)."""
        if self._shutting_down:
            return
        self.adds += 1
        if key in self._dirty:
            return  # already queued, or queued to run again after `done`
        self._dirty.add(key)
        if key in self._processing:
            return  # `done` will queue it
        self._queue.append(key)
        self._wake_getter()

    def add_after(self, key: K, delay: float) -> None:
        """Add the key after `delay` cluster seconds; a key already waiting keeps the earlier time."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        ready_at = self._clock.now() + delay
        current = self._waiting.get(key)
        if current is not None:
            if current[0] <= ready_at:
                return
            current[2].cancel()
        token = next(self._tokens)
        task = asyncio.get_running_loop().create_task(self._fire(key, ready_at, token),
                                                      name=f"workqueue:{self.name}:delay")
        self._waiting[key] = (ready_at, token, task)
        heapq.heappush(self._deadlines, (ready_at, token, key))

    async def _fire(self, key: K, ready_at: float, token: int) -> None:
        # The deadline is fixed at `add_after` time, not when this task first runs.
        await self._clock.sleep(ready_at - self._clock.now())
        current = self._waiting.get(key)
        if current is None or current[1] != token:
            return
        # Release every key due by now in deadline order, not in the order timer tasks
        # happen to wake (two timers can wake in the same loop iteration).
        limit = max(ready_at, self._clock.now())
        me = asyncio.current_task()
        while self._deadlines and self._deadlines[0][0] <= limit:
            _, tok, due = heapq.heappop(self._deadlines)
            entry = self._waiting.get(due)
            if entry is None or entry[1] != tok:
                continue  # superseded by an earlier deadline, or dropped
            del self._waiting[due]
            if entry[2] is not me:
                entry[2].cancel()
            self.add(due)

    def add_rate_limited(self, key: K) -> None:
        """Add the key after its backoff delay, and count one more requeue for it."""
        if self._shutting_down:
            return
        self.retries += 1
        self.add_after(key, self._limiter.when(key))

    def forget(self, key: K) -> None:
        """Reset the key's backoff (it does not remove the key from the queue)."""
        self._limiter.forget(key)

    def num_requeues(self, key: K) -> int:
        """How many rate-limited requeues the key has had since it was last forgotten."""
        return self._limiter.num_requeues(key)

    # -- processing ---------------------------------------------------------------------------

    async def get(self) -> K:
        """The next ready key, now processing until `done(key)`.

        Raises:
            ShutDown: the queue is shut down and has nothing more to hand out.
        """
        while not self._queue or (self._shutting_down and not self._drain):
            if self._shutting_down:
                raise ShutDown(self.name)
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._getters.append(fut)
            try:
                await fut
            except asyncio.CancelledError:
                # A wake-up meant for this getter must not be lost: pass it on.
                if fut.done() and not fut.cancelled():
                    self._wake_getter()
                raise
            finally:
                if fut in self._getters:
                    self._getters.remove(fut)
        key = self._queue.popleft()
        self._processing.add(key)
        self._dirty.discard(key)
        return key

    def done(self, key: K) -> None:
        """Finish processing the key; if it was re-added meanwhile, queue it again."""
        self._processing.discard(key)
        if key in self._dirty and not (self._shutting_down and not self._drain):
            self._queue.append(key)
            self._wake_getter()
        self._notify_idle()

    def _notify_idle(self) -> None:
        # Waiters re-check their condition; waking them too often is harmless.
        for fut in self._idle_waiters:
            if not fut.done():
                fut.set_result(None)
        self._idle_waiters.clear()

    def _wake_getter(self) -> None:
        while self._getters:
            fut = self._getters.popleft()
            if not fut.done():
                fut.set_result(None)
                return

    def _wake_all(self) -> None:
        while self._getters:
            fut = self._getters.popleft()
            if not fut.done():
                fut.set_result(None)

    # -- shutdown -----------------------------------------------------------------------------

    def shutdown(self, *, drain: bool = True) -> None:
        """Stop accepting keys; see the module docstring for what `drain` keeps."""
        self._shutting_down = True
        self._drain = self._drain and drain
        for _, _, task in self._waiting.values():
            task.cancel()
        self._waiting.clear()
        self._deadlines.clear()
        if not self._drain:
            self._queue.clear()
            self._dirty.clear()
        self._wake_all()
        self._notify_idle()

    @property
    def shutting_down(self) -> bool:
        """Whether `shutdown()` has been called."""
        return self._shutting_down

    async def drained(self) -> None:
        """Wait until no key is processing (and, when draining, none is queued)."""
        while self._processing or (self._drain and self._queue):
            fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._idle_waiters.append(fut)
            try:
                await fut
            finally:
                if fut in self._idle_waiters:
                    self._idle_waiters.remove(fut)

    # -- introspection ------------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys ready and waiting for a worker (client-go's depth)."""
        return len(self._queue)

    @property
    def processing(self) -> int:
        """Keys handed out and not yet done."""
        return len(self._processing)

    @property
    def waiting(self) -> int:
        """Keys waiting for a delay to pass."""
        return len(self._waiting)

    def stats(self) -> QueueStats:
        """A snapshot of the counters."""
        return QueueStats(name=self.name, depth=len(self._queue), processing=len(self._processing),
                          waiting=len(self._waiting), adds=self.adds, retries=self.retries)


Reconcile = Callable[[K], Awaitable[Result | None]]


async def run_workers(queue: WorkQueue[K], reconcile: Reconcile[K], *, workers: int, name: str) -> None:
    """Run `workers` workers on the queue until it is shut down (and drained) or cancelled.

    Each worker takes a key, awaits `reconcile(key)` and then:

    * on success, `forget`s the key and, if the result asks, `add_after(requeue_after)`;
    * on `TerminalError`, logs and `forget`s it (no retry);
    * on any other exception, logs and `add_rate_limited`s it.

    `done(key)` is always called, also when the worker is cancelled mid-reconcile.
    """
    if workers < 1:
        raise ValueError("need at least one worker")
    log = _log.bind(queue=queue.name, controller=name)

    async def worker() -> None:
        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            try:
                result = await reconcile(key)
            except TerminalError as exc:
                log.error("reconcile failed terminally", key=str(key), error=str(exc))
                queue.forget(key)
            except Exception as exc:
                log.warning("reconcile failed; requeueing with backoff", key=str(key), error=repr(exc),
                            requeues=queue.num_requeues(key) + 1)
                queue.add_rate_limited(key)
            else:
                queue.forget(key)
                if result is not None and result.requeue_after is not None:
                    queue.add_after(key, result.requeue_after)
            finally:
                queue.done(key)

    async with asyncio.TaskGroup() as tg:
        for i in range(workers):
            tg.create_task(worker(), name=f"{name}:worker-{i}")

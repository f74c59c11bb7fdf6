"""The cluster clock: one scalable time for the whole mesh, and the seeded RNG.

The apiserver owns the clock. It publishes a rate and an epoch pair (`GET /clock`):

    cluster_now = epoch_cluster + (wall_now - epoch_wall) * rate + skew

Every component builds a `ClusterClock` from that document and runs all its logic on it:
timestamps written into objects, grace periods, backoffs and sleeps are all cluster time.
At rate 60 the 40 s node-monitor grace period passes in 0.67 s of wall time. `skew` is per
component (chaos can skew or jump one component's clock); it moves `now()` but never wakes
a sleeper early, as a real wall-clock jump does not shorten a monotonic timer.

Component code receives a `Clock` and a `random.Random` as parameters and never calls
`time.time()` or the module-level `random` functions, so time can be scaled and skewed and
runs can be repeated. This module is the one place that reads the machine's clocks.

`ManualClock` is the test double: time moves only when a test calls `advance()`.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import heapq
import itertools
import random
import time
from datetime import UTC, datetime
from typing import Any, Protocol


class Clock(Protocol):
    """What component logic may ask of time."""

    @property
    def rate(self) -> float:
        """How many cluster seconds pass per wall second."""
        ...

    def now(self) -> float:
        """Cluster time, in seconds since the Unix epoch."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep for `seconds` of cluster time."""
        ...

    def to_wall(self, seconds: float) -> float:
        """The wall-clock duration of `seconds` of cluster time (for socket timeouts)."""
        ...


async def wait_event(clock: Clock, event: asyncio.Event, *, at_most: float) -> bool:
    """Wait until `event` is set or `at_most` cluster seconds pass; whether it was set."""
    if event.is_set():
        return True
    waiter = asyncio.ensure_future(event.wait())
    timer = asyncio.ensure_future(clock.sleep(at_most))
    try:
        await asyncio.wait({waiter, timer}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        timer.cancel()
    return event.is_set()


class ClusterClock:
    """Cluster time derived from the apiserver's rate and epoch, plus this process's skew."""

    def __init__(self, *, rate: float = 1.0, epoch_wall: float | None = None,
                 epoch_cluster: float | None = None, skew: float = 0.0) -> None:
        if rate <= 0:
            raise ValueError("clock rate must be positive")
        # Anchor the wall clock once and advance it monotonically, so that a jump of the
        # machine's clock does not move cluster time: only chaos moves it.
        self._wall0 = time.time()
        self._mono0 = time.monotonic()
        self._rate = float(rate)
        self.epoch_wall = self._wall0 if epoch_wall is None else float(epoch_wall)
        self.epoch_cluster = self.epoch_wall if epoch_cluster is None else float(epoch_cluster)
        self.skew = float(skew)

    @property
    def rate(self) -> float:
        """Cluster seconds per wall second."""
        return self._rate

    def wall_now(self) -> float:
        """The machine's wall time, advanced monotonically from the anchor."""
        return self._wall0 + (time.monotonic() - self._mono0)

    def now(self) -> float:
        """Cluster time now, including this process's skew."""
        return self.epoch_cluster + (self.wall_now() - self.epoch_wall) * self._rate + self.skew

    async def sleep(self, seconds: float) -> None:
        """Sleep for cluster seconds (at least one loop iteration)."""
        await asyncio.sleep(max(0.0, seconds) / self._rate)

    def to_wall(self, seconds: float) -> float:
        """Wall seconds for a cluster duration."""
        return seconds / self._rate

    def jump(self, seconds: float) -> None:
        """Move this process's clock by `seconds` (chaos: a wall-clock jump)."""
        self.skew += seconds

    def document(self) -> dict[str, Any]:
        """The clock as the apiserver publishes it (without skew, which is per process)."""
        return {"rate": self._rate, "epochWall": self.epoch_wall, "epochCluster": self.epoch_cluster,
                "now": self.now() - self.skew}

    @classmethod
    def from_document(cls, doc: dict[str, Any], *, skew: float = 0.0) -> ClusterClock:
        """Rebuild the apiserver's clock in another process."""
        return cls(rate=float(doc["rate"]), epoch_wall=float(doc["epochWall"]),
                   epoch_cluster=float(doc["epochCluster"]), skew=skew)


class ManualClock:
    """A clock for tests: time stands still until `advance()` moves it.

    Sleepers wake in deadline order when `advance()` passes their deadline; `advance()`
    then yields to the loop so that woken tasks run before it returns.
    """

    def __init__(self, start: float = 1_700_000_000.0, *, rate: float = 1.0) -> None:
        self._now = start
        self._rate = rate
        self._seq = itertools.count()
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []

    @property
    def rate(self) -> float:
        """Nominal rate (only used for wall-time conversions)."""
        return self._rate

    def now(self) -> float:
        """The current manual time."""
        return self._now

    def to_wall(self, seconds: float) -> float:
        """Wall seconds for a cluster duration."""
        return seconds / self._rate

    async def sleep(self, seconds: float) -> None:
        """Wait until `advance()` has moved time past now + seconds."""
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (self._now + seconds, next(self._seq), fut))
        await fut

    async def advance(self, seconds: float) -> None:
        """Move time forward, waking every sleeper whose deadline has passed, in order."""
        target = self._now + seconds
        while self._sleepers and self._sleepers[0][0] <= target:
            deadline, _, fut = heapq.heappop(self._sleepers)
            self._now = max(self._now, deadline)
            if not fut.done():
                fut.set_result(None)
            for _ in range(5):
                await asyncio.sleep(0)
        self._now = target
        for _ in range(5):
            await asyncio.sleep(0)

    @property
    def sleepers(self) -> int:
        """How many tasks are sleeping on this clock."""
        return sum(1 for _, _, f in self._sleepers if not f.done())


def component_rng(seed: int | None, *, component: str, instance: str = "") -> random.Random:
    """A deterministic RNG for one component instance, derived from the run's seed.

    With `seed=None` the RNG is seeded from the OS, for runs that need not repeat.
    """
    if seed is None:
        return random.Random()
    digest = hashlib.sha256(f"{seed}/{component}/{instance}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


# ---------------------------------------------------------------------------------------------
# Timestamps as Kubernetes writes them.


def format_time(t: float) -> str:
    """metav1.Time: RFC 3339 in UTC at second precision, `2026-11-21T12:00:00Z`."""
    return _format_second(int(t))


@functools.lru_cache(maxsize=256)
def _format_second(s: int) -> str:
    # Every create and status post formats "now": the same few seconds, over and over.
    return datetime.fromtimestamp(s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(t: float) -> str:
    """metav1.MicroTime: RFC 3339 in UTC with microseconds, `2026-11-21T12:00:00.123456Z`."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: str) -> float:
    """Parse an RFC 3339 timestamp leniently (`Z`, offsets, fractions, naive = UTC)."""
    s = value.strip()
    if s.endswith(("Z", "z")):
        s = s[:-1] + "+00:00"
    dt = datetime.fromisoformat(s)
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def time_or_none(value: Any) -> float | None:
    """Seconds since the epoch of a timestamp field as read from an object: None if absent or malformed."""
    if not isinstance(value, str) or not value:
        return None
    try:
        return parse_time(value)
    except ValueError:
        return None


def normalize_time(value: Any, *, micro: bool = False) -> Any:
    """Rewrite a client's timestamp in the canonical form; leave non-timestamps alone."""
    if not isinstance(value, str) or not value:
        return value
    try:
        t = parse_time(value)
    except ValueError:
        return value
    return format_micro_time(t) if micro else format_time(t)

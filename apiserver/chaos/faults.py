"""Live faults and the cluster-clock timers that end, arm and release them.

A `Fault` is a validated `FaultSpec` plus its state: phase (`Pending` until an arm trigger
fires, `Active`, then `Recovered` or `Failed`), counters, the targets chosen for it, and
the per-fault RNG (derived from the engine's seed and the fault's name, so a run repeats).

`Timers` runs callbacks at cluster times on one background task: TTLs, trigger delays,
watch-event delays and reorder windows all go through it, so that a fast cluster clock makes
them fast and a `ManualClock` makes them deterministic.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import heapq
import itertools
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from kubemesh.apiserver import errors
from kubemesh.apiserver.chaos.spec import FaultSpec
from kubemesh.services.machinery.clock import Clock

log = structlog.get_logger("apiserver.chaos")

PHASES = ("Pending", "Active", "Recovered", "Failed")


def fault_rng(seed: int, name: str) -> random.Random:
    """The RNG of one fault: the same seed and name give the same draws."""
    digest = hashlib.sha256(f"{seed}/{name}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


@dataclass(eq=False)
class Fault:
    """One fault and its status."""

    spec: FaultSpec
    rng: random.Random
    created_at: float
    phase: str = "Pending"
    injected: int = 0
    recovered: int = 0
    last_error: str | None = None
    activated_at: float | None = None
    ends_at: float | None = None
    ended_at: float | None = None
    targets: list[str] | None = None
    """Chosen targets ("component/instance" or node names); None: matched live by the spec."""
    waiting_for: str | None = None
    """For a client fault: the identity no client has shown yet (it takes effect when one connects)."""
    trigger_counts: list[int] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when the fault ends (stalled requests wait on it)."""
    timer: Timer | None = None

    @property
    def name(self) -> str:
        """The fault's name."""
        return self.spec.name

    @property
    def active(self) -> bool:
        """Whether the fault is in effect."""
        return self.phase == "Active"

    @property
    def live(self) -> bool:
        """Pending or Active (not ended)."""
        return self.phase in ("Pending", "Active")

    def fires(self) -> bool:
        """One draw of the fault's probability."""
        p = self.spec.probability
        return p >= 1.0 or self.rng.random() < p

    def hits(self, component: str, instance: str) -> bool:
        """Whether a client (component, instance) is a target of this fault."""
        if self.targets is not None:
            return f"{component}/{instance}" in self.targets
        return self.spec_hits(component, instance)

    def spec_hits(self, component: str, instance: str) -> bool:
        """Whether the spec's target (ignoring any chosen subset) names a client."""
        t = self.spec.target
        if t.component not in (None, "*", component):
            return False
        if t.instances and instance not in t.instances:
            return False
        return not t.nodes or (component == "kubelet" and instance in t.nodes)

    def to_dict(self) -> dict[str, Any]:
        """Spec and status, as the API shows it."""
        out = self.spec.to_dict()
        status: dict[str, Any] = {"phase": self.phase, "injected": self.injected, "recovered": self.recovered,
                                  "lastError": self.last_error, "createdAt": self.created_at,
                                  "activatedAt": self.activated_at, "endsAt": self.ends_at,
                                  "endedAt": self.ended_at}
        if self.waiting_for is not None:
            status["note"] = (f"no client {self.waiting_for} has connected yet: the fault takes effect "
                              "the moment one does")
        if self.targets is not None:
            status["targets"] = list(self.targets)
        if self.spec.triggers:
            status["triggerCounts"] = list(self.trigger_counts)
        out["status"] = status
        return out


@dataclass(eq=False)
class Timer:
    """A scheduled callback; `cancel()` makes it a no-op."""

    when: float
    fn: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        """Do not run it."""
        self.cancelled = True


class Timers:
    """Callbacks at cluster times, run in time order by one task (`run`)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._heap: list[tuple[float, int, Timer]] = []
        self._seq = itertools.count()
        self._wake = asyncio.Event()

    def __len__(self) -> int:
        return sum(1 for _, _, t in self._heap if not t.cancelled)

    def call_at(self, when: float, fn: Callable[[], None]) -> Timer:
        """Run `fn` once cluster time reaches `when`."""
        timer = Timer(when, fn)
        heapq.heappush(self._heap, (when, next(self._seq), timer))
        self._wake.set()
        return timer

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer:
        """Run `fn` after `delay` cluster seconds."""
        return self.call_at(self.clock.now() + max(0.0, delay), fn)

    def clear(self) -> None:
        """Cancel every timer."""
        for _, _, t in self._heap:
            t.cancel()
        self._heap.clear()

    def run_due(self) -> None:
        """Run every timer that is due (in time order)."""
        now = self.clock.now()
        while self._heap and self._heap[0][0] <= now:
            _, _, timer = heapq.heappop(self._heap)
            if timer.cancelled:
                continue
            timer.cancelled = True
            try:
                timer.fn()
            except Exception:
                log.exception("chaos timer failed")

    async def run(self) -> None:
        """Until cancelled."""
        while True:
            self.run_due()
            while self._heap and self._heap[0][2].cancelled:
                heapq.heappop(self._heap)
            self._wake.clear()
            waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(self._wake.wait())}
            if self._heap:
                waits.add(asyncio.ensure_future(self.clock.sleep(self._heap[0][0] - self.clock.now())))
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    if not w.done():
                        w.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await w


def invalid(causes: list[dict[str, str]], name: str = "") -> errors.StatusError:
    """The 422 of a fault spec, naming every field at fault."""
    text = "; ".join(f"{c['field']}: {c['message']}" for c in causes)
    return errors.StatusError(422, "Invalid", f'Fault "{name}" is invalid: {text}' if name else
                              f"Fault is invalid: {text}",
                              details={"name": name, "group": "chaos.kubemesh.io", "kind": "Fault", "causes": causes})


def fault_not_found(name: str) -> errors.StatusError:
    """The 404 of a fault that does not exist."""
    return errors.StatusError(404, "NotFound", f'faults "{name}" not found',
                              details={"name": name, "group": "chaos.kubemesh.io", "kind": "faults"})

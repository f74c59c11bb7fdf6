"""Bounded garbage-collector pauses for long-lived processes with large heaps.

CPython's cyclic collector pauses the whole process while it walks a generation. An
apiserver holding tens of thousands of objects (and a history ring) paid for it in the watch
latency tail: with the collector's defaults a full collection walked every stored object,
and one older-generation collection measured 94 ms and a full one 117 ms under a
1,000-writes/s load, holding back every watch delivery behind them.

Yet the request path creates no cyclic garbage at all (the test suite checks that a write, its
watch fan-out and its history records leave nothing for the collector): what the process
keeps is acyclic trees that reference counting frees. So `SurvivorFreezer`:

* freezes every `freeze_interval` seconds (`gc.freeze()`, constant time): whatever is alive
  then moves to the permanent generation, which collections never walk. Automatic collections
  only ever see the objects allocated since the last freeze, so their pauses stay small
  whatever the heap size. Reference counting still frees frozen objects the moment they are
  unreferenced.
* every `full_interval` seconds unfreezes everything and runs one full collection (then freezes
  again): cycles that became garbage after they were frozen (a closed connection's objects,
  say) are reclaimed then, so what the freezing can hold back is bounded by what one interval
  produces. That collection is the one long pause left, once per interval.

The timers run on the event loop's wall clock: this is process housekeeping, not component
logic, and it must not speed up or slow down with the cluster clock.
"""

from __future__ import annotations

import asyncio
import gc
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class GcSettings:
    """How a process tames collector pauses (see the module docstring)."""

    freeze_interval: float = 0.1
    """Wall seconds between freezes of the survivors; 0 disables the policy."""
    full_interval: float = 300.0
    """Wall seconds between full collections of everything (unfrozen first)."""
    young_threshold: int = 20_000
    """Allocations between young-generation collections (CPython's default is 700; a
    larger value makes them rarer; each walks only what was allocated since)."""


class SurvivorFreezer:
    """Runs the freeze and full-collection timers of one process (start once, stop at shutdown)."""

    def __init__(self, *, settings: GcSettings) -> None:
        self.settings = settings
        self.freezes = 0
        self.full_collections = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._freeze_handle: asyncio.TimerHandle | None = None
        self._full_handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """Collect what start-up left, freeze it, and arm the timers (on the running loop)."""
        s = self.settings
        gc.collect()
        gc.freeze()
        gc.set_threshold(s.young_threshold, 10, 10)
        if s.freeze_interval <= 0:
            return
        self._loop = asyncio.get_running_loop()
        self._freeze_handle = self._loop.call_later(s.freeze_interval, self._freeze)
        if s.full_interval > 0:
            self._full_handle = self._loop.call_later(s.full_interval, self._full)

    def stop(self) -> None:
        """Cancel the timers and hand every object back to the collector."""
        for handle in (self._freeze_handle, self._full_handle):
            if handle is not None:
                handle.cancel()
        self._freeze_handle = self._full_handle = None
        gc.unfreeze()

    def _freeze(self) -> None:
        gc.freeze()
        self.freezes += 1
        assert self._loop is not None
        self._freeze_handle = self._loop.call_later(self.settings.freeze_interval, self._freeze)

    def _full(self) -> None:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        self.full_collections += 1
        assert self._loop is not None
        self._full_handle = self._loop.call_later(self.settings.full_interval, self._full)

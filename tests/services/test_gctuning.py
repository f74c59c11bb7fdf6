"""The survivor freezer: frozen objects are out of the collector's walks until the full collection."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Callable

from kubemesh.services.process.gctuning import GcSettings, SurvivorFreezer


class Node:
    """Something that can be put in a reference cycle and watched with a weakref."""

    def __init__(self) -> None:
        self.other: Node | None = None


async def soon(done: Callable[[], bool], *, limit: float = 5.0) -> bool:
    """Poll `done` on the loop (the freezer's timers run in between) until it holds or time is up."""
    for _ in range(int(limit / 0.005)):
        if done():
            return True
        await asyncio.sleep(0.005)
    return done()


async def test_a_frozen_cycle_waits_for_the_full_collection() -> None:
    freezer = SurvivorFreezer(settings=GcSettings(freeze_interval=0.01, full_interval=0.5))
    freezer.start()
    try:
        a, b = Node(), Node()
        a.other, b.other = b, a
        gone = weakref.ref(a)
        start = freezer.freezes
        assert await soon(lambda: freezer.freezes > start)
        assert gc.get_freeze_count() > 0
        del a, b  # now cyclic garbage, but frozen: an ordinary collection leaves it alone
        gc.collect()
        assert gone() is not None
        full = freezer.full_collections
        assert await soon(lambda: freezer.full_collections > full)
        assert gone() is None  # the periodic full collection reclaimed it
    finally:
        freezer.stop()
    assert gc.get_freeze_count() == 0


async def test_a_zero_interval_only_freezes_start_up() -> None:
    freezer = SurvivorFreezer(settings=GcSettings(freeze_interval=0))
    freezer.start()
    await asyncio.sleep(0.05)
    assert freezer.freezes == 0
    freezer.stop()
    assert gc.get_freeze_count() == 0
    gc.set_threshold(700, 10, 10)  # the interpreter's defaults, for the rest of the suite

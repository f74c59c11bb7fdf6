"""Bounded polling for tests: wait until a condition holds, bounded in wall seconds, never timed.

`eventually(check, within=..., what=...)` awaits `check()` every `interval` seconds until it
returns something truthy and returns that; after `within` wall seconds it fails the test with
`what` and the last value seen. The bound is a limit for a stuck mesh, not an expectation.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(check: Callable[[], Awaitable[T | None]], *, what: str, within: float = 30.0,
                     interval: float = 0.1) -> T:
    """Poll `check` until it returns something truthy; fail after `within` wall seconds."""
    last: T | None = None
    try:
        async with asyncio.timeout(within):
            while True:
                last = await check()
                if last:
                    return last
                await asyncio.sleep(interval)
    except TimeoutError:
        raise AssertionError(f"not within {within:.0f} s: {what}; last: {last!r}") from None

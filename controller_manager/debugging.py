"""The `/debug/controller-manager` admin route: zone states, queues, limiter rates, timers.

Read-only JSON for people watching a race unfold: per zone its state, size, not-ready count,
limiter QPS, available tokens and queued nodes; master disruption mode; per node the
controller's in-memory probe and transition timestamps; pending taint-eviction timers; PodGC's
quarantine; work-queue depths; leadership.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
from aiohttp import web

PATH = "/debug/controller-manager"


def routes(snapshot: Callable[[], dict[str, Any]]) -> list[web.RouteDef]:
    """The debug routes, given a function producing the current snapshot."""

    async def handler(_request: web.Request) -> web.Response:
        return web.json_response(snapshot(), dumps=_dumps)

    return [web.get(PATH, handler)]


def _dumps(value: Any) -> str:

    return orjson.dumps(value, default=str).decode()

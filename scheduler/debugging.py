"""`GET /debug/scheduler`: what the scheduler believes, as JSON.

The document shows the cache (every NodeInfo with its pods and requests, ghosts flagged and
listed, assumed pods with their expiry deadlines), the queue (active, backoff with the time each
pod's backoff ends, unschedulable with the filters that rejected each pod, in-flight pods), the
nominations, counters, the bug switches in force and the latest failures with their messages.
A report can quote it to show, for example, that node-1 was still a ghost holding two pods when
`node "node-1" not found` was emitted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

PATH = "/debug/scheduler"


def routes(document: Callable[[], Mapping[str, Any] | None]) -> list[web.RouteDef]:
    """The debug routes; `document` returns the current dump (None before the scheduler runs)."""

    async def handler(request: web.Request) -> web.Response:
        doc = document()
        if doc is None:
            return web.json_response({"message": "scheduler not started"}, status=503)
        section = request.query.get("section")
        if section:
            if section not in doc:
                return web.json_response({"message": f"no section {section!r}"}, status=404)
            return web.json_response(doc[section])
        return web.json_response(dict(doc))

    return [web.get(PATH, handler)]

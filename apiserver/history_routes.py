"""The history over HTTP: `GET /kubemesh/v1/history` (and the chaos front door's `/chaos/v1/history`).

Query parameters (both routes): `since` (records after this index, default 0), `type`
(comma-separated record types), `fault` (only a fault's records), `limit`, `follow=true` (the
records so far, then live ones, as a stream of JSON lines until the client goes away).

`/kubemesh/v1/history` answers JSON lines; `/chaos/v1/history` answers `{"items", "lastIndex"}`
(JSON or msgpack) unless asked for JSON lines (`format=jsonl` or `Accept: application/jsonl`).
"""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
from aiohttp import web

from kubemesh.apiserver import errors
from kubemesh.apiserver.history import History
from kubemesh.apiserver.serving import render

JSONL = "application/jsonl"


async def history_response(request: web.Request, history: History, *, lines: bool) -> web.StreamResponse:
    """The history records a request asks for; JSON lines when `lines` or when the request asks for them."""
    q = request.query
    try:
        since = int(q.get("since", "0"))
        limit = int(q["limit"]) if q.get("limit") else None
    except ValueError as exc:
        raise errors.bad_request("since and limit must be integers") from exc
    types = [t for t in q.get("type", "").split(",") if t] or None
    fault = q.get("fault")

    def keep(rec: dict[str, Any]) -> bool:
        return fault is None or rec.get("fault") == fault

    if q.get("follow", "").lower() in ("1", "true"):
        resp = web.StreamResponse(headers={"Content-Type": JSONL})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        with contextlib.suppress(ConnectionResetError):
            async for rec in history.follow(since, types=types):
                if keep(rec):
                    await resp.write(orjson.dumps(rec) + b"\n")
        return resp
    if fault is None:
        records = history.since(since, types=types, limit=limit)
    else:
        records = [r for r in history.since(since, types=types) if keep(r)][:limit]
    if lines or q.get("format") == "jsonl" or JSONL in request.headers.get("Accept", ""):
        return web.Response(body=b"".join(orjson.dumps(r) + b"\n" for r in records), headers={"Content-Type": JSONL})
    return render(request, {"items": records, "lastIndex": history.last_index})


def routes(history: History) -> list[web.RouteDef]:
    """`GET /kubemesh/v1/history`."""

    async def handler(request: web.Request) -> web.StreamResponse:
        return await history_response(request, history, lines=True)

    return [web.get("/kubemesh/v1/history", handler)]

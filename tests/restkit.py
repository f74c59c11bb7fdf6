"""A minimal JSON client for tests that talk to a real apiserver process beside kubectl or other clients."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Protocol

import aiohttp
import orjson

Json = dict[str, Any]


class Server(Protocol):
    """What Rest needs of the `ApiServer` fixture."""

    url: str

    @property
    def headers(self) -> dict[str, str]:
        """Authorization headers."""
        ...


def warning_text(header: str) -> str:
    """The text of a `299 - "text"` Warning header, unquoted as client-go does."""
    code, _, rest = header.partition(" - ")
    assert code == "299" and rest.startswith('"') and rest.endswith('"'), header
    out, escaped = [], False
    for ch in rest[1:-1]:
        if escaped or ch != "\\":
            assert escaped or ch != '"', f"an unescaped quote inside {header!r}"
            out.append(ch)
            escaped = False
        else:
            escaped = True
    return "".join(out)


class Rest:
    """Send JSON, get (status, JSON document, headers) back; `ok` asserts a 2xx."""

    def __init__(self, session: aiohttp.ClientSession, server: Server) -> None:
        self.session = session
        self.base = server.url
        self.headers = {"Content-Type": "application/json", **server.headers}
        self.last_headers: dict[str, str] = {}
        self.last_warnings: list[str] = []

    async def call(self, method: str, path: str, body: Any = None, *, ctype: str | None = None,
                   params: dict[str, str] | None = None, accept: str | None = None,
                   raw: bytes | None = None) -> tuple[int, Json]:
        """One request; `raw` sends those bytes instead of `body` as JSON (deeper than encoders go)."""
        headers = dict(self.headers)
        if ctype:
            headers["Content-Type"] = ctype
        if accept:
            headers["Accept"] = accept
        data = raw if raw is not None else (orjson.dumps(body) if body is not None else None)
        async with self.session.request(method, self.base + path, data=data, headers=headers,
                                        params=params) as resp:
            self.last_headers = dict(resp.headers)
            self.last_warnings = [warning_text(h) for h in resp.headers.getall("Warning", [])]
            doc: Json = await resp.json(content_type=None)
            return resp.status, doc

    async def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Json:
        status, doc = await self.call(method, path, body, **kw)
        assert status in (200, 201), (method, path, status, doc)
        return doc

    async def status_of(self, method: str, path: str, body: Any = None, **kw: Any) -> int:
        status, _ = await self.call(method, path, body, **kw)
        return status

    async def watch_lines(self, path: str, *, params: dict[str, str] | None = None,
                          until: int, within: float = 20.0) -> list[Json]:
        """Read `until` events of a watch (or fewer, if the server ends the stream first)."""
        events: list[Json] = []
        query = {"watch": "true", **(params or {})}

        async def read() -> None:
            async with self.session.get(self.base + path, headers=self.headers, params=query) as resp:
                assert resp.status == 200, await resp.text()
                async for line in resp.content:
                    if line.strip():
                        events.append(json.loads(line))
                        if len(events) >= until:
                            return

        await asyncio.wait_for(read(), within)
        return events

"""Taking over an aiohttp server connection after a `101 Switching Protocols` (SPDY, or any raw upgrade).

aiohttp serves websockets itself but no other upgrade. `take_over(request, headers=...)` answers
101 with `headers`, stops HTTP parsing on the connection (a stand-in parser hands every byte the
client sends to a queue, as aiohttp's own websocket parser is handed them), and returns
`read()` (the next chunk, b"" once the client closed) and `write(data)` over the raw connection.
The connection is not kept alive afterwards: it is closed when the handler returns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web


class RawFeed:
    """Stands in for aiohttp's payload parser on an upgraded connection: the raw bytes, to a queue."""

    def __init__(self, queue: asyncio.Queue[bytes | None]) -> None:
        self.queue = queue

    def feed_data(self, data: bytes) -> tuple[bool, bytes]:
        """Take what arrived from the client."""
        self.queue.put_nowait(bytes(data))
        return False, b""

    def feed_eof(self) -> None:
        """The client closed its side."""
        self.queue.put_nowait(None)


Reader = Callable[[], Awaitable[bytes]]
Writer = Callable[[bytes], Awaitable[None]]


def raw_io(request: web.Request) -> tuple[Reader, Writer]:
    """Read and write the raw connection of `request` (after a 101 was sent)."""
    queue: asyncio.Queue[bytes | None] = asyncio.Queue()
    request.protocol.set_parser(RawFeed(queue))  # type: ignore[arg-type]  # any object with feed_data/feed_eof
    request.protocol.keep_alive(False)
    transport = request.transport
    ended = False

    async def read() -> bytes:
        nonlocal ended
        if ended:
            return b""
        data = await queue.get()
        if data is None:
            ended = True
            return b""
        return data

    async def write(data: bytes) -> None:
        if transport is None or transport.is_closing():
            raise ConnectionResetError("the client left")
        transport.write(data)

    return read, write


async def take_over(request: web.Request, *, headers: Mapping[str, str]) -> tuple[web.StreamResponse, Reader, Writer]:
    """Answer 101 with `headers` and return the response and the raw connection's reader and writer."""
    resp = web.StreamResponse(status=101, headers=dict(headers))
    resp.force_close()
    await resp.prepare(request)
    read, write = raw_io(request)
    return resp, read, write

"""SPDY/3.1 framing, the server side kubectl's streams need (exec, attach, port-forward).

Written from the SPDY/3 draft: every frame starts with 8 bytes. A control frame has its high
bit set, then the version (3, 15 bits), the type (16 bits), the flags (8) and the length of
its data (24); a data frame has the high bit clear, then the stream id (31 bits), the flags and
the length. Flags: FIN (0x01: the sender's last frame on the stream) and, on SYN_STREAM,
UNIDIRECTIONAL (0x02).

Control frames handled: SYN_STREAM (the client opens a stream: stream id, associated id,
priority, slot, then a header block), SYN_REPLY (our answer: stream id, header block),
RST_STREAM (stream id, status: the stream ends at once), SETTINGS (read and ignored), PING
(echoed, as the spec asks of a receiver of a peer-initiated ping), GOAWAY (the session ends),
HEADERS (ignored) and WINDOW_UPDATE (ignored: this side never blocks on a send window; a
WINDOW_UPDATE is sent back for every data frame received, so a client that honours flow
control never stalls).

Header blocks are zlib streams, one per direction per session, primed with the spec's
dictionary (`DICTIONARY`) and flushed with Z_SYNC_FLUSH after each block; a block is a 32-bit
count of pairs, then per pair a 32-bit length and the name, a 32-bit length and the value
(several values joined by NUL).

`Session` runs over any byte transport (an upgraded HTTP connection, or a websocket that
tunnels the SPDY bytes: kubectl 1.30+'s `SPDY/3.1+portforward.k8s.io`): `read()` returns the
next chunk (b"" at the end) and `write(data)` sends bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import zlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

VERSION: Final = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, SETTINGS, PING, GOAWAY, HEADERS, WINDOW_UPDATE = 1, 2, 3, 4, 6, 7, 8, 9
FLAG_FIN: Final = 0x01
CANCEL: Final = 5
"""RST_STREAM status CANCEL."""

_WORDS: Final = (
    "options", "head", "post", "put", "delete", "trace", "accept", "accept-charset", "accept-encoding",
    "accept-language", "accept-ranges", "age", "allow", "authorization", "cache-control", "connection",
    "content-base", "content-encoding", "content-language", "content-length", "content-location",
    "content-md5", "content-range", "content-type", "date", "etag", "expect", "expires", "from", "host",
    "if-match", "if-modified-since", "if-none-match", "if-range", "if-unmodified-since", "last-modified",
    "location", "max-forwards", "pragma", "proxy-authenticate", "proxy-authorization", "range", "referer",
    "retry-after", "server", "te", "trailer", "transfer-encoding", "upgrade", "user-agent", "vary", "via",
    "warning", "www-authenticate", "method", "get", "status", "200 OK", "version", "HTTP/1.1", "url", "public",
    "set-cookie", "keep-alive", "origin",
)
_TAIL: Final = (
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505"
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized"
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable"
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT"
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,"
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0.")
DICTIONARY: Final = b"".join(struct.pack(">I", len(w)) + w.encode() for w in _WORDS) + _TAIL.encode()
"""The SPDY/3 header compression dictionary: length-prefixed header words, then a run of common values."""


class ProtocolError(Exception):
    """The peer broke the framing."""


@dataclass(eq=False)
class Stream:
    """One stream the client opened."""

    id: int
    headers: dict[str, str]
    data: asyncio.Queue[bytes | None] = field(default_factory=asyncio.Queue)
    """What the client sent on it; None once it finished (FIN) or was reset."""
    remote_closed: bool = False
    local_closed: bool = False

    def header(self, name: str) -> str:
        """A header of its SYN_STREAM ("" when absent)."""
        return self.headers.get(name.lower(), "")


def encode_headers(headers: dict[str, str]) -> bytes:
    """An uncompressed header block."""
    out = [struct.pack(">I", len(headers))]
    for name, value in headers.items():
        n, v = name.lower().encode(), value.encode()
        out += [struct.pack(">I", len(n)), n, struct.pack(">I", len(v)), v]
    return b"".join(out)


def decode_headers(block: bytes) -> dict[str, str]:
    """An uncompressed header block as a dict (several values of one name joined by NUL are kept as is)."""
    try:
        (count,), pos = struct.unpack_from(">I", block, 0), 4
        out: dict[str, str] = {}
        for _ in range(count):
            (n,) = struct.unpack_from(">I", block, pos)
            name = block[pos + 4:pos + 4 + n].decode("latin-1")
            pos += 4 + n
            (v,) = struct.unpack_from(">I", block, pos)
            out[name.lower()] = block[pos + 4:pos + 4 + v].decode("latin-1")
            pos += 4 + v
        return out
    except struct.error as exc:
        raise ProtocolError(f"malformed header block: {exc}") from None


class Session:
    """The server end of one SPDY session (see the module docstring)."""

    def __init__(self, *, read: Callable[[], Awaitable[bytes]], write: Callable[[bytes], Awaitable[None]]) -> None:
        self._read = read
        self._write = write
        self._buf = bytearray()
        self._inflate = zlib.decompressobj(zdict=DICTIONARY)
        self._deflate = zlib.compressobj(zdict=DICTIONARY)
        self._lock = asyncio.Lock()
        self.streams: dict[int, Stream] = {}
        self.opened: asyncio.Queue[Stream | None] = asyncio.Queue()
        """Streams as the client opens them; None when the session ended."""
        self.closed = False

    # -- reading ------------------------------------------------------------------------------

    async def _exactly(self, n: int) -> bytes | None:
        while len(self._buf) < n:
            chunk = await self._read()
            if not chunk:
                return None
            self._buf += chunk
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def run(self) -> None:
        """Read frames until the connection ends or a GOAWAY; streams end with it."""
        try:
            while not self.closed:
                head = await self._exactly(8)
                if head is None:
                    break
                first, second = struct.unpack(">II", head)
                flags, length = second >> 24, second & 0xFFFFFF
                body = await self._exactly(length) if length else b""
                if body is None:
                    break
                if first & 0x80000000:
                    if not await self._control((first >> 16) & 0x7FFF, first & 0xFFFF, flags, body):
                        break
                else:
                    await self._data(first & 0x7FFFFFFF, flags, body)
        except (ProtocolError, zlib.error, ConnectionError):
            pass
        finally:
            self.closed = True
            for s in self.streams.values():
                s.remote_closed = True
                s.data.put_nowait(None)
            self.opened.put_nowait(None)

    async def _control(self, version: int, kind: int, flags: int, body: bytes) -> bool:
        if version != VERSION:
            raise ProtocolError(f"unsupported SPDY version {version}")
        if kind == SYN_STREAM:
            sid = struct.unpack_from(">I", body, 0)[0] & 0x7FFFFFFF
            headers = decode_headers(self._inflate.decompress(body[10:]))
            stream = Stream(id=sid, headers=headers)
            self.streams[sid] = stream
            if flags & FLAG_FIN:
                stream.remote_closed = True
                stream.data.put_nowait(None)
            self.opened.put_nowait(stream)
        elif kind == RST_STREAM:
            sid = struct.unpack_from(">I", body, 0)[0] & 0x7FFFFFFF
            stream_or_none = self.streams.get(sid)
            if stream_or_none is not None and not stream_or_none.remote_closed:
                stream_or_none.remote_closed = stream_or_none.local_closed = True
                stream_or_none.data.put_nowait(None)
        elif kind == PING:
            await self._send_control(PING, 0, body[:4])
        elif kind == GOAWAY:
            return False
        elif kind in (SYN_REPLY, HEADERS):
            # Headers we have no use for; their block still advances the shared zlib stream.
            self._inflate.decompress(body[4:])
        return True  # SETTINGS, WINDOW_UPDATE and unknown types: nothing to do

    async def _data(self, sid: int, flags: int, body: bytes) -> None:
        stream = self.streams.get(sid)
        if stream is None or stream.remote_closed:
            return
        if body:
            stream.data.put_nowait(body)
            await self._send_control(WINDOW_UPDATE, 0, struct.pack(">II", sid, len(body)))
        if flags & FLAG_FIN:
            stream.remote_closed = True
            stream.data.put_nowait(None)

    # -- writing ------------------------------------------------------------------------------

    async def _send(self, frame: bytes) -> None:
        async with self._lock:
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self._write(frame)

    async def _send_control(self, kind: int, flags: int, body: bytes) -> None:
        await self._send(struct.pack(">HHI", 0x8000 | VERSION, kind, (flags << 24) | len(body)) + body)

    async def reply(self, stream: Stream, headers: dict[str, str] | None = None) -> None:
        """Accept a stream (SYN_REPLY)."""
        async with self._lock:
            block = self._deflate.compress(encode_headers(headers or {})) + self._deflate.flush(zlib.Z_SYNC_FLUSH)
            body = struct.pack(">I", stream.id) + block
            with contextlib.suppress(ConnectionError, RuntimeError):
                await self._write(struct.pack(">HHI", 0x8000 | VERSION, SYN_REPLY, len(body)) + body)

    async def send(self, stream: Stream, data: bytes, *, fin: bool = False) -> None:
        """Data on a stream (in frames of at most 32 KiB); `fin` ends our side of it."""
        if stream.local_closed:
            return
        for i in range(0, len(data), 32768):
            chunk = data[i:i + 32768]
            last = fin and i + 32768 >= len(data)
            await self._send(struct.pack(">II", stream.id, ((FLAG_FIN if last else 0) << 24) | len(chunk)) + chunk)
        if fin:
            if not data:
                await self._send(struct.pack(">II", stream.id, FLAG_FIN << 24))
            stream.local_closed = True

    async def close_stream(self, stream: Stream) -> None:
        """End our side of a stream (an empty data frame with FIN)."""
        await self.send(stream, b"", fin=True)

    async def reset(self, stream: Stream, status: int = CANCEL) -> None:
        """RST_STREAM."""
        stream.local_closed = True
        await self._send_control(RST_STREAM, 0, struct.pack(">II", stream.id, status))

    async def goaway(self) -> None:
        """GOAWAY: no new streams; the session is over."""
        last = max(self.streams, default=0)
        await self._send_control(GOAWAY, 0, struct.pack(">II", last, 0))

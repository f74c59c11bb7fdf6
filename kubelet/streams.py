"""exec and attach of the process runtime's containers, over the websocket channel protocols.

The kubelet's admin endpoint serves `/nodes/{node}/exec/{ns}/{pod}/{container}` and
`/nodes/{node}/attach/{ns}/{pod}/{container}` (the apiserver proxies the clients' upgraded
connections here, `kubemesh.apiserver.podstreams`). The query is upstream's
`PodExecOptions`/`PodAttachOptions`: `command` (repeated), `stdin`, `stdout`, `stderr`, `tty`.

The websocket subprotocols `v5.channel.k8s.io` and `v4.channel.k8s.io` (the client's first
offer that is one of them wins): every message is one channel byte then the data. Channel 0 is
stdin (client to process), 1 stdout, 2 stderr, 3 the error channel, 4 resize (`{"Width": w,
"Height": h}`, applied to the terminal of a `tty` session). v5 adds the close signal: the message
`[255, 0]` closes the process's stdin (a client at the end of its input). Text messages are
taken as well as binary ones (the official Python client sends text for `str` data).

When the exec'd command exits (attach: when the container's process exits), the rest of its
output is sent, then one message on the error channel, a `metav1.Status` as the kubelet writes
it: `{"status": "Success"}` for exit code 0, else `Failure` with reason `NonZeroExitCode` and
the code as the message of its `ExitCode` cause (what `returncode` and kubectl read), and the
connection is closed. A command that cannot start ends the same way with a `Failure` naming
why (`InternalError`). A client that leaves kills the exec'd command's process group.

Without the process runtime (an emulated pod) the routes answer 400 with the same words the
apiserver uses when no kubelet runs processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
from typing import Any, Final

from aiohttp import WSMsgType, web

from kubemesh.kubelet import spdy
from kubemesh.kubelet.processes import ContainerRun, ProcessRuntime, RunningProcess, resize
from kubemesh.services.machinery.upgrading import take_over

PROTOCOLS: Final = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255
SPDY_EXEC: Final = "v4.channel.k8s.io"
"""The one stream protocol offered over SPDY for exec and attach (kubectl up to 1.29 offers it first)."""
PORT_FORWARD: Final = "portforward.k8s.io"
SPDY_OVER_WEBSOCKET: Final = "SPDY/3.1+portforward.k8s.io"
"""kubectl 1.30+ tunnels the SPDY port-forward session in a websocket of this subprotocol."""
STREAM_WAIT: Final = 30.0
"""Wall seconds a client has to open the streams it asked for."""
_STREAM_NAMES: Final = {STDIN: "stdin", STDOUT: "stdout", STDERR: "stderr", ERROR: "error", RESIZE: "resize"}


def is_spdy(request: web.Request) -> bool:
    """Whether `request` asks for an upgrade to SPDY/3.1."""
    return request.headers.get("Upgrade", "").lower().startswith("spdy/3.1")


def offered(request: web.Request, header: str) -> list[str]:
    """The comma-separated values of every `header` line."""
    return [v.strip() for line in request.headers.getall(header, []) for v in line.split(",") if v.strip()]


def flag(value: str | None) -> bool:
    """A query flag as the apiserver passes it."""
    return (value or "").lower() in ("1", "true", "t", "yes")


def exit_status(code: int | None, *, command: list[str], error: str | None = None) -> dict[str, Any]:
    """The error channel's Status for how a command ended."""
    if error is not None:
        return {"metadata": {}, "status": "Failure", "message": error, "reason": "InternalError",
                "details": {"causes": [{"message": error}]}, "code": 500}
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    what = " ".join(command)
    return {"metadata": {}, "status": "Failure",
            "message": f"command terminated with non-zero exit code: command '{what}' exited with {code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


async def serve(request: web.Request, *, runtime: ProcessRuntime, run: ContainerRun,
                attach: bool) -> web.StreamResponse:
    """One exec or attach session over a websocket."""
    q = request.query
    command = q.getall("command", [])
    want_stdin, tty = flag(q.get("stdin")), flag(q.get("tty"))
    want = {STDOUT: flag(q.get("stdout", "true")), STDERR: flag(q.get("stderr", "true")) and not tty}
    if is_spdy(request):
        return await _serve_spdy(request, runtime=runtime, run=run, attach=attach, command=command,
                                 want_stdin=want_stdin, tty=tty, want=want)
    ws = web.WebSocketResponse(protocols=PROTOCOLS, max_msg_size=0, autoclose=False)
    await ws.prepare(request)
    v5 = ws.ws_protocol == PROTOCOLS[0]
    rp: RunningProcess | None
    if attach:
        rp = run.process
        tty = tty and rp is not None and rp.master is not None
    else:
        try:
            if not command:
                raise OSError("no command given")
            rp = await runtime.spawn(command, env=run.env, cwd=run.cwd, stdin=want_stdin, tty=tty)
        except OSError as exc:
            await _send(ws, ERROR, json.dumps(exit_status(None, command=command, error=str(exc))).encode())
            await ws.close()
            return ws
    if rp is None or rp.exit is not None:
        await _send(ws, ERROR, json.dumps(exit_status(None, command=command,
                                                      error="the container is not running")).encode())
        await ws.close()
        return ws
    proc = rp
    stdin_once = bool(run.spec.get("stdinOnce"))
    queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
    proc.subscribers.add(queue)

    async def output() -> None:
        while (item := await queue.get()) is not None:
            channel, data = item
            if tty:
                channel = STDOUT
            if want.get(channel):
                await _send(ws, channel, data)

    async def inputs() -> None:
        async for msg in ws:
            if msg.type not in (WSMsgType.BINARY, WSMsgType.TEXT):
                continue
            data = msg.data if isinstance(msg.data, bytes) else str(msg.data).encode()
            if not data:
                continue
            channel, payload = data[0], data[1:]
            if channel == STDIN and want_stdin:
                _write_stdin(proc, payload)
            elif channel == RESIZE and proc.master is not None:
                with contextlib.suppress(ValueError, TypeError, KeyError):
                    size = json.loads(payload)
                    resize(proc.master, width=int(size["Width"]), height=int(size["Height"]))
            elif channel == CLOSE and v5 and payload[:1] == bytes([STDIN]) and (not attach or stdin_once):
                _close_stdin(proc)  # an attached client's end of input closes the container's only with stdinOnce

    pumping = asyncio.ensure_future(output())
    reading = asyncio.ensure_future(inputs())
    try:
        await asyncio.wait({pumping, reading}, return_when=asyncio.FIRST_COMPLETED)
        if pumping.done():  # the process ended and every byte it wrote went out
            code = proc.exit[0] if proc.exit is not None else None
            await _send(ws, ERROR, json.dumps(exit_status(code, command=command or [run.name])).encode())
    except (ConnectionResetError, RuntimeError):
        pass  # the client left
    finally:
        rp.subscribers.discard(queue)
        reading.cancel()
        pumping.cancel()
        if not attach and proc.exit is None:
            proc.signal(signal.SIGKILL)  # the client left: its command goes with it
        with contextlib.suppress(Exception):
            await ws.close()
    return ws


async def _send(ws: web.WebSocketResponse, channel: int, data: bytes) -> None:
    await ws.send_bytes(bytes([channel]) + data)


def _write_stdin(rp: RunningProcess, data: bytes) -> None:
    if rp.master is not None:
        with contextlib.suppress(OSError):
            os.write(rp.master, data)
    elif rp.proc.stdin is not None and not rp.proc.stdin.is_closing():
        rp.proc.stdin.write(data)


def _close_stdin(rp: RunningProcess) -> None:
    if rp.master is not None:
        with contextlib.suppress(OSError):
            os.write(rp.master, b"\x04")  # end of input on a terminal
    elif rp.proc.stdin is not None:
        rp.proc.stdin.close()


async def _start(runtime: ProcessRuntime, run: ContainerRun, *, attach: bool, command: list[str], stdin: bool,
                 tty: bool) -> tuple[RunningProcess | None, str | None]:
    """The process a session talks to (exec: a new one), or why there is none."""
    if attach:
        rp = run.process
        return (rp, None) if rp is not None and rp.exit is None else (None, "the container is not running")
    if not command:
        return None, "no command given"
    try:
        return await runtime.spawn(command, env=run.env, cwd=run.cwd, stdin=stdin, tty=tty), None
    except OSError as exc:
        return None, str(exc)


async def _serve_spdy(request: web.Request, *, runtime: ProcessRuntime, run: ContainerRun, attach: bool,
                      command: list[str], want_stdin: bool, tty: bool, want: dict[int, bool]) -> web.StreamResponse:
    """Serve exec or attach over SPDY/3.1: the client opens one stream per channel (header `streamType`)."""
    versions = offered(request, "X-Stream-Protocol-Version")
    if SPDY_EXEC not in versions:
        raise web.HTTPForbidden(text=f"unable to upgrade: unable to negotiate protocol: client supports {versions}, "
                                     f"server supports [{SPDY_EXEC}]")
    resp, read, write = await take_over(request, headers={"Connection": "Upgrade", "Upgrade": "SPDY/3.1",
                                                          "X-Stream-Protocol-Version": SPDY_EXEC})
    session = spdy.Session(read=read, write=write)
    reading = asyncio.ensure_future(session.run())
    expected = {"error"} | {_STREAM_NAMES[c] for c, on in want.items() if on}
    expected |= {"stdin"} if want_stdin else set()
    expected |= {"resize"} if tty else set()
    streams: dict[str, spdy.Stream] = {}
    try:
        async with asyncio.timeout(STREAM_WAIT):
            while not expected <= streams.keys():
                stream = await session.opened.get()
                if stream is None:
                    return resp
                await session.reply(stream)
                streams[stream.header("streamtype")] = stream
    except TimeoutError:
        reading.cancel()
        return resp
    rp, error = await _start(runtime, run, attach=attach, command=command, stdin=want_stdin, tty=tty)
    if rp is None:
        await _finish_spdy(session, streams, exit_status(None, command=command, error=error))
        reading.cancel()
        return resp
    proc = rp
    queue: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
    proc.subscribers.add(queue)

    async def output() -> None:
        while (item := await queue.get()) is not None:
            channel = STDOUT if tty else item[0]
            target = streams.get(_STREAM_NAMES[channel]) if want.get(channel) else None
            if target is not None:
                await session.send(target, item[1])

    async def stdin() -> None:
        source = streams.get("stdin")
        if source is None:
            return
        while (data := await source.data.get()) is not None:
            _write_stdin(proc, data)
        if not attach or run.spec.get("stdinOnce"):
            _close_stdin(proc)

    async def resizes() -> None:
        source = streams.get("resize")
        if source is None or proc.master is None:
            return
        pending, decoder = "", json.JSONDecoder()
        while (data := await source.data.get()) is not None:
            pending += data.decode("utf-8", "replace")
            while pending.strip():
                try:
                    size, end = decoder.raw_decode(pending.lstrip())
                except ValueError:
                    break
                pending = pending.lstrip()[end:]
                with contextlib.suppress(KeyError, TypeError, ValueError):
                    resize(proc.master, width=int(size["Width"]), height=int(size["Height"]))

    pumping = asyncio.ensure_future(output())
    helpers = [asyncio.ensure_future(stdin()), asyncio.ensure_future(resizes())]
    try:
        await asyncio.wait({pumping, reading}, return_when=asyncio.FIRST_COMPLETED)
        if pumping.done():
            code = proc.exit[0] if proc.exit is not None else None
            await _finish_spdy(session, streams, exit_status(code, command=command or [run.name]))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reading), timeout=5.0)  # the client hangs up
    finally:
        proc.subscribers.discard(queue)
        for task in (pumping, reading, *helpers):
            task.cancel()
        if not attach and proc.exit is None:
            proc.signal(signal.SIGKILL)
    return resp


async def _finish_spdy(session: spdy.Session, streams: dict[str, spdy.Stream], status: dict[str, Any]) -> None:
    """The status on the error stream, then every stream of ours ends."""
    error = streams.get("error")
    if error is not None:
        await session.send(error, json.dumps(status).encode())
    for stream in streams.values():
        await session.close_stream(stream)


# -- port-forward --------------------------------------------------------------------------------


async def serve_portforward(request: web.Request, *, pod: str, uid: str) -> web.StreamResponse:
    """Port-forward to 127.0.0.1 (every process pod shares the machine's network), over SPDY.

    The SPDY session runs over the upgraded connection (`Upgrade: SPDY/3.1`, stream protocol
    `portforward.k8s.io`) or inside a websocket of subprotocol `SPDY/3.1+portforward.k8s.io`.
    For each forwarded connection the client opens an `error` and a `data` stream with the same
    `requestID` and a `port` header; the data stream is spliced to a TCP connection to that port.
    """
    if request.headers.get("Upgrade", "").lower() == "websocket":
        if SPDY_OVER_WEBSOCKET not in offered(request, "Sec-WebSocket-Protocol"):
            return await _portforward_channels(request, pod=pod, uid=uid)
        ws = web.WebSocketResponse(protocols=(SPDY_OVER_WEBSOCKET,), max_msg_size=0, autoclose=False)
        await ws.prepare(request)

        async def ws_read() -> bytes:
            while True:
                msg = await ws.receive()
                if msg.type in (WSMsgType.BINARY, WSMsgType.TEXT) and msg.data:  # b"" would read as the end
                    return bytes(msg.data) if isinstance(msg.data, bytes) else str(msg.data).encode()
                if msg.type in (WSMsgType.CLOSE, WSMsgType.CLOSING, WSMsgType.CLOSED, WSMsgType.ERROR):
                    return b""

        async def ws_write(data: bytes) -> None:
            await ws.send_bytes(data)

        await _portforward(spdy.Session(read=ws_read, write=ws_write), pod=pod, uid=uid)
        with contextlib.suppress(Exception):
            await ws.close()
        return ws
    if not is_spdy(request):
        raise web.HTTPBadRequest(text="Upgrade request required")
    versions = offered(request, "X-Stream-Protocol-Version")
    if PORT_FORWARD not in versions:
        raise web.HTTPForbidden(text=f"unable to upgrade: unable to negotiate protocol: client supports {versions}, "
                                     f"server supports [{PORT_FORWARD}]")
    resp, read, write = await take_over(request, headers={"Connection": "Upgrade", "Upgrade": "SPDY/3.1",
                                                          "X-Stream-Protocol-Version": PORT_FORWARD})
    await _portforward(spdy.Session(read=read, write=write), pod=pod, uid=uid)
    return resp


async def _portforward_channels(request: web.Request, *, pod: str, uid: str) -> web.StreamResponse:
    """Port-forward over the websocket channel protocol (the official Python client's `portforward`).

    The query names the ports (`ports=8080,9090`); port number i has data channel 2i and error
    channel 2i+1, and each channel's first message is the port number (two bytes, little endian).
    Each port is one TCP connection to 127.0.0.1 for the session; the session ends when every
    connection ended or the client leaves.
    """
    try:
        ports = [int(p) for raw in request.query.getall("ports", []) for p in raw.split(",") if p.strip()]
    except ValueError:
        raise web.HTTPBadRequest(text="ports must be port numbers") from None
    if not ports:
        raise web.HTTPBadRequest(text="at least one port must be specified")
    ws = web.WebSocketResponse(protocols=(*PROTOCOLS, PORT_FORWARD, "channel.k8s.io"), max_msg_size=0,
                               autoclose=False)
    await ws.prepare(request)
    writers: dict[int, asyncio.StreamWriter] = {}
    for i, port in enumerate(ports):
        for channel in (2 * i, 2 * i + 1):
            await ws.send_bytes(bytes([channel]) + port.to_bytes(2, "little"))

    async def pump(i: int, port: int) -> None:
        try:
            reader, writers[i] = await asyncio.open_connection("127.0.0.1", port)
        except OSError as exc:
            await ws.send_bytes(bytes([2 * i + 1]) + (f"error forwarding port {port} to pod {pod}, uid {uid}: "
                                                      f"failed to connect to localhost:{port}: {exc}").encode())
            return
        while chunk := await reader.read(65536):
            await ws.send_bytes(bytes([2 * i]) + chunk)

    async def inbound() -> None:
        async for msg in ws:
            data = msg.data if isinstance(msg.data, bytes) else str(msg.data).encode()
            if msg.type in (WSMsgType.BINARY, WSMsgType.TEXT) and len(data) > 1 and data[0] % 2 == 0:
                writer = writers.get(data[0] // 2)
                if writer is not None:
                    writer.write(data[1:])
                    await writer.drain()

    async def every_port() -> None:
        await asyncio.gather(*(pump(i, p) for i, p in enumerate(ports)), return_exceptions=True)

    pumps = asyncio.ensure_future(every_port())
    reading = asyncio.ensure_future(inbound())
    try:
        await asyncio.wait({pumps, reading}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        reading.cancel()
        pumps.cancel()
        for writer in writers.values():
            writer.close()
        with contextlib.suppress(Exception):
            await ws.close()
    return ws


async def _portforward(session: spdy.Session, *, pod: str, uid: str) -> None:
    reading = asyncio.ensure_future(session.run())
    errors: dict[str, spdy.Stream] = {}
    tasks: set[asyncio.Task[None]] = set()
    try:
        while (stream := await session.opened.get()) is not None:
            await session.reply(stream)
            request_id = stream.header("requestid")
            if stream.header("streamtype") == "error":
                errors[request_id] = stream
            elif stream.header("streamtype") == "data":
                task = asyncio.ensure_future(_forward(session, stream, errors, request_id, pod=pod, uid=uid))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
    finally:
        reading.cancel()
        for task in list(tasks):
            task.cancel()


async def _forward(session: spdy.Session, data: spdy.Stream, errors: dict[str, spdy.Stream], request_id: str, *,
                   pod: str, uid: str) -> None:
    port_text = data.header("port")
    try:
        port = int(port_text)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except (ValueError, OSError) as exc:
        error = errors.get(request_id)
        if error is not None:
            message = (f"error forwarding port {port_text} to pod {pod}, uid {uid}: failed to connect to "
                       f"localhost:{port_text}: {exc}")
            await session.send(error, message.encode(), fin=True)
        await session.close_stream(data)
        return

    async def up() -> None:
        while (chunk := await data.data.get()) is not None:
            writer.write(chunk)
            await writer.drain()
        with contextlib.suppress(OSError):
            writer.write_eof()

    uploading = asyncio.ensure_future(up())
    try:
        while chunk := await reader.read(65536):
            await session.send(data, chunk)
        await session.close_stream(data)
        error = errors.get(request_id)
        if error is not None:
            await session.close_stream(error)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(uploading), timeout=5.0)
    except OSError:
        await session.reset(data)
    finally:
        uploading.cancel()
        writer.close()

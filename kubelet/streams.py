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

from kubemesh.kubelet.processes import ContainerRun, ProcessRuntime, RunningProcess, resize

PROTOCOLS: Final = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255


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
            elif channel == CLOSE and v5 and payload[:1] == bytes([STDIN]):
                _close_stdin(proc)

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

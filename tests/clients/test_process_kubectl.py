"""kubectl against pods of the process runtime: `exec -it`, `logs -f`, `port-forward`, `attach`.

The oldest and the newest installed kubectl (`edge_kubectl_version`: 1.27 speaks SPDY/3.1 over
an HTTP upgrade for exec, attach and port-forward; 1.33 websockets for exec and attach and SPDY
tunnelled in a websocket for port-forward) against one mesh with `MeshSpec(runtime="process")`.
`exec -it` runs under a pseudo-terminal, as a user types it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import re
import select
import signal
import socket
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
import pytest_asyncio

from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.mesh.launching import Mesh, MeshSpec
from kubemesh.services.model.kinds import PODS, Obj

if TYPE_CHECKING:
    from conftest import KubectlCommand

pytestmark = [pytest.mark.slow, pytest.mark.kubectl, pytest.mark.asyncio(loop_scope="module"),
              pytest.mark.timeout(120)]

NS = "default"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


WEB_PORT = _free_port()


def _pod(name: str, command: list[str], **container: Any) -> Obj:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": NS},
            "spec": {"terminationGracePeriodSeconds": 2,
                     "containers": [{"name": "main", "image": "busybox:1.36", "command": command, **container}]}}


PODS_TO_RUN = [
    _pod("loop", ["sh", "-c", "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.2; done"]),
    _pod("web", ["python3", "-m", "http.server", str(WEB_PORT), "--bind", "127.0.0.1"]),
    _pod("att", ["sh", "-c", "while read l; do echo got $l; done"], stdin=True),
    _pod("shell", ["sleep", "3600"]),
]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def mesh() -> AsyncIterator[Mesh]:
    spec = MeshSpec(nodes=1, components=("apiserver", "scheduler", "kubelet"), runtime="process", seed=33,
                    start_timeout=90.0)
    async with Mesh(spec) as started:
        api = started.client("test")
        try:
            for body in PODS_TO_RUN:
                await api.create(PODS, body, namespace=NS)
            await _all_running(api)
        finally:
            await api.close()
        yield started


async def _all_running(api: ApiClient) -> None:
    async with asyncio.timeout(60):
        while True:
            pods = [await api.get(PODS, str(p["metadata"]["name"]), namespace=NS) for p in PODS_TO_RUN]
            if all((p.get("status") or {}).get("phase") == "Running" for p in pods):
                return
            await asyncio.sleep(0.2)


@contextlib.contextmanager
def _kubectl(mesh: Mesh, command: KubectlCommand, version: str,
             *args: str) -> Iterator[tuple[list[str], dict[str, str]]]:
    assert mesh.token is not None
    with command(version, *args, server=mesh.apiserver_url, token=mesh.token, ca=mesh.ca_path) as (argv, env):
        yield argv, env


async def _start(argv: list[str], env: dict[str, str], *, stdin: bool = False) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *argv, env=env, stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)


async def _lines(proc: asyncio.subprocess.Process, *, until: str, within: float = 20.0) -> str:
    """What `proc` printed until it matched `until` (or fails)."""
    assert proc.stdout is not None
    seen = b""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(within):
            while chunk := await proc.stdout.read(65536):
                seen += chunk
                if re.search(until, seen.decode("utf-8", "replace")):
                    return seen.decode("utf-8", "replace")
    raise AssertionError(f"no {until!r} within {within:.0f} s; printed: {seen!r}")


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), timeout=5)
        except TimeoutError:
            proc.kill()
            await proc.wait()


async def test_exec_it_runs_a_shell_on_a_terminal(mesh: Mesh, kubectl_command: KubectlCommand,
                                                  edge_kubectl_version: str) -> None:
    with _kubectl(mesh, kubectl_command, edge_kubectl_version, "exec", "-it", "shell") as (flags, env):
        argv = [*flags, "--", "sh"]  # the helper's own flags go before the command

        def run() -> tuple[bytes, int]:
            pid, fd = pty.fork()
            if pid == 0:  # pragma: no cover - the child
                os.execve(argv[0], argv, env)
            out = b""
            deadline = time.monotonic() + 30
            sent = False
            while time.monotonic() < deadline:
                ready, _, _ = select.select([fd], [], [], 0.2)
                if ready:
                    try:
                        out += os.read(fd, 4096)
                    except OSError:
                        break
                if not sent and (b"#" in out or time.monotonic() > deadline - 25):
                    os.write(fd, b"echo $((6*7)); exit 4\r")
                    sent = True
            _, status = os.waitpid(pid, 0)
            os.close(fd)
            return out, os.waitstatus_to_exitcode(status)

        out, code = await asyncio.to_thread(run)
    assert b"\r\n42\r\n" in out, out
    assert b"job control turned off" not in out, out  # the terminal is the shell's controlling one
    assert code == 4, out


async def test_logs_follow_a_shell_loop(mesh: Mesh, kubectl_command: KubectlCommand,
                                        edge_kubectl_version: str) -> None:
    with _kubectl(mesh, kubectl_command, edge_kubectl_version, "logs", "-f", "loop", "--tail", "1") as (argv, env):
        proc = await _start(argv, env)
        try:
            text = await _lines(proc, until=r"(line \d+\n.*){3}")
        finally:
            await _stop(proc)
    numbers = [int(n) for n in re.findall(r"line (\d+)", text)]
    assert numbers[:3] == list(range(numbers[0], numbers[0] + 3)), text


async def test_port_forward_reaches_an_http_server(mesh: Mesh, kubectl_command: KubectlCommand,
                                                   edge_kubectl_version: str) -> None:
    local = _free_port()
    with _kubectl(mesh, kubectl_command, edge_kubectl_version, "port-forward", "pod/web",
                  f"{local}:{WEB_PORT}") as (argv, env):
        proc = await _start(argv, env)
        try:
            await _lines(proc, until=r"Forwarding from 127\.0\.0\.1")
            async with aiohttp.ClientSession() as http:
                for _ in range(2):  # two connections over one forwarding session
                    async with http.get(f"http://127.0.0.1:{local}/", timeout=aiohttp.ClientTimeout(total=15)) as r:
                        assert r.status == 200
                        assert "Directory listing" in await r.text()
        finally:
            await _stop(proc)


async def test_attach_sends_stdin_and_shows_output(mesh: Mesh, kubectl_command: KubectlCommand,
                                                   edge_kubectl_version: str) -> None:
    with _kubectl(mesh, kubectl_command, edge_kubectl_version, "attach", "-i", "att") as (argv, env):
        proc = await _start(argv, env, stdin=True)
        try:
            assert proc.stdin is not None
            await asyncio.sleep(1.0)  # the session is up before the line is typed
            proc.stdin.write(f"hello {edge_kubectl_version}\n".encode())
            await proc.stdin.drain()
            await _lines(proc, until=f"got hello {re.escape(edge_kubectl_version)}")
        finally:
            await _stop(proc)

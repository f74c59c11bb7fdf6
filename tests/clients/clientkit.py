"""Helpers of the client tests: the clients' own environments, meshes for a test, waits, child processes.

* `client_tools()`: runs `scripts/clients-setup` once per session (idempotent: quick when
  nothing changed) and says where kopf and Node.js are. A failing set-up fails the test: the
  locks are the project's own, so a set-up that cannot run is a broken project, not a missing
  tool.
* `start_mesh(...)`: a real local mesh (`kubemesh.Mesh`) with TLS and a token, as a user runs
  one; clients get `mesh.kubeconfig_path`.
* `k8s_api(kubeconfig)`: a `kubernetes_asyncio` ApiClient configured from a kubeconfig, as an
  operator would load it.
* waits: `eventually` is in `tests/waits.py`, shared with the other test directories.
* `Child`: a child process whose stdout lines are collected as they come (and kept in a log
  file for the failure message).

No `conftest.py` here: mypy would see a second module named `conftest` (see tests/conftest.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kubernetes_asyncio import client as _ak8s
from kubernetes_asyncio import config as _ak8s_config

from kubemesh.services.mesh.launching import Mesh, MeshSpec

T = TypeVar("T")
Json = dict[str, Any]

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SETUP = REPO / "scripts" / "clients-setup"
SETUP_TIMEOUT = 1200.0
"""Wall seconds for a cold `scripts/clients-setup` (a virtualenv and an `npm ci`)."""

# kubernetes_asyncio is only partly annotated: use it untyped.
ak8s: Any = _ak8s
ak8s_config: Any = _ak8s_config
ApiException: Any = ak8s.ApiException


# ---------------------------------------------------------------------------------- the clients' environments


@dataclass(frozen=True)
class ClientTools:
    """Where `scripts/clients-setup` put the clients."""

    kopf: Path
    """`.venv-kopf/bin/kopf`: kopf in its own virtualenv."""
    kopf_python: Path
    node: Path
    """The Node.js that @kubernetes/client-node runs on (`.node-clients/node_modules/.bin/node`)."""
    js_dir: Path
    """`.node-clients`: node_modules and a copy of the scripts of tests/clients/js."""


@functools.cache
def _setup() -> ClientTools | str:
    """Run the set-up once per process; the tools, or what went wrong."""
    try:
        proc = subprocess.run([str(SETUP)], cwd=REPO, capture_output=True, text=True, timeout=SETUP_TIMEOUT,
                              check=False, env={**os.environ, "PYTHON": os.environ.get("PYTHON", "python3")})
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"scripts/clients-setup could not run: {exc}"
    if proc.returncode != 0:
        return f"scripts/clients-setup exited {proc.returncode}:\n{proc.stdout}{proc.stderr}"
    tools = ClientTools(kopf=REPO / ".venv-kopf" / "bin" / "kopf", kopf_python=REPO / ".venv-kopf" / "bin" / "python",
                        node=REPO / ".node-clients" / "node_modules" / ".bin" / "node",
                        js_dir=REPO / ".node-clients")
    missing = [str(p) for p in (tools.kopf, tools.kopf_python, tools.node) if not p.exists()]
    if missing:
        return f"scripts/clients-setup succeeded but did not install {', '.join(missing)}"
    return tools


def client_tools() -> ClientTools:
    """The clients' environments, set up if needed; fails the test when the set-up fails."""
    tools = _setup()
    if isinstance(tools, str):
        pytest.fail(tools, pytrace=False)
    return tools


# ---------------------------------------------------------------------------------- meshes


@contextlib.asynccontextmanager
async def start_mesh(*, components: tuple[str, ...] = ("apiserver",), nodes: int = 0,
                     clock_rate: float = 1.0) -> AsyncIterator[Mesh]:
    """A real mesh on loopback (HTTPS and a bearer token, as `kubemesh up`); stopped on exit.

    Only the components a test needs: the apiserver alone serves CRDs; the garbage collector
    is the controller-manager's.
    """
    spec = MeshSpec(nodes=nodes, components=components, clock_rate=clock_rate, seed=11, start_timeout=120.0)
    async with Mesh(spec) as mesh:
        assert mesh.tls and mesh.token, "the client tests run against an HTTPS mesh with a token"
        yield mesh
        assert not mesh.crashed(), f"mesh processes crashed: {mesh.crashed()}"


@contextlib.asynccontextmanager
async def k8s_api(kubeconfig: Path) -> AsyncIterator[Any]:
    """A kubernetes_asyncio ApiClient loaded from `kubeconfig` (its CA, its token)."""
    configuration = ak8s.Configuration()
    await ak8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with ak8s.ApiClient(configuration=configuration) as api_client:
        yield api_client




async def gone(read: Callable[[], Awaitable[Any]]) -> bool:
    """Whether `read()` answers 404 (True) or anything (False)."""
    try:
        await read()
    except ApiException as exc:
        if exc.status == 404:
            return True
        raise
    return False


# ---------------------------------------------------------------------------------- child processes


@dataclass
class Child:
    """A child process; its stdout lines are collected in `lines`, everything it writes in `log_path`."""

    argv: Sequence[str]
    log_path: Path
    env: Mapping[str, str] | None = None
    cwd: Path | None = None
    lines: list[str] = field(default_factory=list)
    proc: asyncio.subprocess.Process | None = None
    _reader: asyncio.Task[None] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, env=dict(self.env) if self.env is not None else None,
            cwd=self.cwd, start_new_session=True)
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with self.log_path.open("w") as log:
            while line := await self.proc.stdout.readline():
                text = line.decode(errors="replace").rstrip("\n")
                self.lines.append(text)
                log.write(text + "\n")
                log.flush()
                self._changed.set()
        self._changed.set()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def output(self, tail: int = 80) -> str:
        """The last `tail` lines, for failure messages."""
        return "\n".join(self.lines[-tail:])

    async def send(self, line: str) -> None:
        """Write one line to the child's stdin."""
        assert self.proc is not None and self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()

    async def wait_line(self, match: Callable[[str], bool], *, within: float, what: str, start: int = 0) -> int:
        """Wait for a line (from index `start` on) that `match`es; its index. Fails if the child exits first."""
        try:
            async with asyncio.timeout(within):
                while True:
                    for i in range(start, len(self.lines)):
                        if match(self.lines[i]):
                            return i
                    if not self.running and (self._reader is None or self._reader.done()):
                        raise AssertionError(f"{what}: the process exited ({self.proc and self.proc.returncode}) "
                                             f"first; its output ends with:\n{self.output()}")
                    self._changed.clear()
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(0.5):
                            await self._changed.wait()
        except TimeoutError:
            raise AssertionError(f"not within {within:.0f} s: {what}; output ends with:\n{self.output()}") from None

    async def exited(self, *, within: float) -> int:
        """Wait for the child to exit by itself; its exit code. Fails after `within` seconds."""
        assert self.proc is not None
        try:
            async with asyncio.timeout(within):
                code = await self.proc.wait()
        except TimeoutError:
            raise AssertionError(f"the process did not exit within {within:.0f} s; its output ends with:\n"
                                 f"{self.output()}") from None
        if self._reader is not None:
            await self._reader
        return code

    async def stop(self, sig: signal.Signals = signal.SIGTERM, grace: float = 20.0) -> int | None:
        """Signal the child (and its process group), wait `grace` seconds, then SIGKILL; its exit code."""
        if self.proc is None:
            return None
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            try:
                async with asyncio.timeout(grace):
                    await self.proc.wait()
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                await self.proc.wait()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        return self.proc.returncode


def kubeconfig_env(kubeconfig: Path, **extra: str) -> dict[str, str]:
    """This process's environment with KUBECONFIG set (and no in-cluster variables)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_") and k != "VIRTUAL_ENV"}
    env["KUBECONFIG"] = str(kubeconfig)
    env.update(extra)
    return env


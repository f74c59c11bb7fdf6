"""Shared fixtures for the whole test tree: free ports, a real apiserver process, versioned kubectl.

* `free_port()`: a loopback port that was free a moment ago.
* `start_apiserver(**opts)`: an async factory that starts `python -m kubemesh.apiserver` as a real
  subprocess on a free port and waits for `/readyz`; every server it started is stopped on
  teardown (SIGTERM, then SIGKILL after 5 s). `tls=True` serves HTTPS with a fresh CA.
* `apiserver`: one server with the defaults.
* `run_kubectl(version, *args, server=...)`: one of the `kubectl.1.XX` binaries that sit beside
  the `kubectl` on PATH, with no kubeconfig (or one carrying a token) and a fresh cache dir.
  `KUBECTL_VERSIONS` lists the minor versions found ("1.27" ...); empty when none are.

Under `CI=true` no test may skip: a test whose real part cannot start (Docker, kubectl, wrk...)
is a failure there, never a green run that tested nothing (`pytest_runtest_makereport`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Generator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import aiohttp
import pytest
from restkit import Rest

from kubemesh.services.machinery.certs import ensure_certs
from kubemesh.services.mesh.state import free_port

REPO_ROOT = Path(__file__).resolve().parent.parent
READY_DEADLINE = 30.0
STOP_GRACE = 5.0


# ---------------------------------------------------------------------------------- apiserver


@dataclass
class ApiServer:
    """A running `python -m kubemesh.apiserver` process."""

    url: str
    port: int
    token: str | None
    data_dir: Path | None
    proc: subprocess.Popen[bytes]
    log_path: Path
    args: list[str] = field(default_factory=list)
    ca: Path | None = None
    """The CA that signed the serving certificate (HTTPS servers only)."""

    def ssl_context(self) -> ssl.SSLContext | None:
        """A client context trusting this server's CA (None for plain HTTP)."""
        return ssl.create_default_context(cafile=str(self.ca)) if self.ca is not None else None

    @property
    def headers(self) -> dict[str, str]:
        """The Authorization header to send (empty without a token)."""
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def log(self) -> str:
        """What the process wrote so far (stdout and stderr)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self) -> None:
        """SIGKILL (the `kill -9` of a crash) and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def terminate(self) -> None:
        """SIGTERM; SIGKILL if still running after 5 s (blocking)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_GRACE)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait()

    async def stop(self) -> None:
        """`terminate()` without blocking the event loop."""
        await asyncio.to_thread(self.terminate)


class StartApiServer(Protocol):
    """The signature of the `start_apiserver` factory."""

    def __call__(self, *, token: str | None = ..., data_dir: Path | str | None = ..., port: int | None = ...,
                 clock_rate: float | None = ..., seed: int | None = ..., tls: bool = ...,
                 extra_args: tuple[str, ...] = ...) -> Awaitable[ApiServer]: ...


def _wait_ready(server: ApiServer, deadline: float) -> bool:
    """Poll /readyz until 200; False if the process died or the deadline passed."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if server.proc.poll() is not None:
            return False
        with contextlib.suppress(OSError, urllib.error.URLError), \
                urllib.request.urlopen(f"{server.url}/readyz", timeout=2, context=server.ssl_context()) as resp:
            if resp.status == 200:
                return True
        time.sleep(0.05)
    return False


def launch_apiserver(workdir: Path, *, token: str | None = None, data_dir: Path | str | None = None,
                     port: int | None = None, clock_rate: float | None = None, seed: int | None = None,
                     tls: bool = False, extra_args: tuple[str, ...] = ()) -> ApiServer:
    """Start `python -m kubemesh.apiserver` and wait for /readyz (blocking); the caller stops it.

    For fixtures of a wider scope than a function; tests use the `start_apiserver` factory.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{next(_launches)}"
    ca: Path | None = None
    tls_args: list[str] = []
    if tls:
        certs = ensure_certs(workdir / f"tls-{tag}")
        ca = certs.ca
        tls_args = ["--tls-cert-file", str(certs.cert), "--tls-private-key-file", str(certs.key)]
    env = {k: v for k, v in os.environ.items() if k not in ("KUBEMESH_TOKEN", "KUBEMESH_BUGS")}
    args: list[str] = []
    server: ApiServer | None = None
    for attempt in range(1 if port is not None else 3):
        p = port if port is not None else free_port()
        args = [sys.executable, "-m", "kubemesh.apiserver", "--host", "127.0.0.1", "--port", str(p)]
        if data_dir is not None:
            args += ["--data-dir", str(data_dir)]
        elif (etcd := os.environ.get("KUBEMESH_TEST_ETCD")) and "--storage" not in extra_args:
            # The suites again over etcd (`--storage etcd`), each apiserver under a prefix of its own.
            args += ["--storage", "etcd", "--etcd-endpoints", etcd, "--etcd-prefix", f"/t-{tag}-{attempt}"]
        if token is not None:
            token_file = workdir / f"token-{tag}"
            token_file.write_text(token + "\n")
            args += ["--token-file", str(token_file)]
        if clock_rate is not None:
            args += ["--clock-rate", str(clock_rate)]
        if seed is not None:
            args += ["--seed", str(seed)]
        args += tls_args + list(extra_args)
        log_path = workdir / f"apiserver-{tag}-{attempt}.log"
        with log_path.open("wb") as log_file:
            proc = subprocess.Popen(args, stdout=log_file, stderr=subprocess.STDOUT, cwd=REPO_ROOT, env=env)
        server = ApiServer(url=f"{'https' if tls else 'http'}://127.0.0.1:{p}", port=p, token=token,
                           data_dir=Path(data_dir) if data_dir is not None else None, proc=proc,
                           log_path=log_path, args=args, ca=ca)
        if _wait_ready(server, READY_DEADLINE):
            return server
        server.terminate()
        if "address already in use" not in server.log().lower():
            break
    log = server.log()[-4000:] if server is not None else ""
    raise RuntimeError(f"apiserver did not become ready: {' '.join(args)}\n{log}")


_launches = itertools.count()


@pytest.fixture
async def start_apiserver(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[StartApiServer]:
    """Factory: start real apiserver processes; all of them are stopped on teardown."""
    started: list[ApiServer] = []
    workdir = tmp_path_factory.mktemp("apiserver")

    async def start(*, token: str | None = None, data_dir: Path | str | None = None, port: int | None = None,
                    clock_rate: float | None = None, seed: int | None = None, tls: bool = False,
                    extra_args: tuple[str, ...] = ()) -> ApiServer:
        server = await asyncio.to_thread(launch_apiserver, workdir, token=token, data_dir=data_dir, port=port,
                                         clock_rate=clock_rate, seed=seed, tls=tls, extra_args=extra_args)
        started.append(server)
        return server

    yield start
    await asyncio.gather(*(s.stop() for s in started))


@pytest.fixture
async def apiserver(start_apiserver: StartApiServer) -> ApiServer:
    """One apiserver process with the default settings."""
    return await start_apiserver()


@pytest.fixture
async def rest(apiserver: ApiServer) -> AsyncIterator[Rest]:
    """A JSON client of the test's apiserver process (`restkit.Rest`)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield Rest(session, apiserver)


# ---------------------------------------------------------------------------------- kubectl


def _kubectl_dir() -> Path | None:
    found = shutil.which("kubectl")
    return Path(os.path.realpath(found)).parent if found else None


def _discover_kubectl() -> dict[str, Path]:
    base = _kubectl_dir()
    if base is None:
        return {}
    found: dict[str, Path] = {}
    for path in base.glob("kubectl.1.*"):
        version = path.name.removeprefix("kubectl.")
        if path.is_file() and os.access(path, os.X_OK) and version.replace(".", "").isdigit():
            found[version] = path
    return dict(sorted(found.items(), key=lambda kv: tuple(int(x) for x in kv[0].split("."))))


KUBECTL_BINARIES: dict[str, Path] = _discover_kubectl()
KUBECTL_VERSIONS: list[str] = list(KUBECTL_BINARIES)
"""Minor versions of kubectl installed beside the one on PATH, oldest first ("1.27", ...)."""


def kubectl_binary(version: str) -> Path:
    """The binary of one minor version; skips the test if it is not installed."""
    binary = KUBECTL_BINARIES.get(version)
    if binary is None:
        pytest.skip(f"kubectl.{version} is not installed")
    return binary


def kubeconfig_text(server: str, token: str, ca: Path | None = None) -> str:
    """A kubeconfig that points at `server` with a bearer token.

    client-go sends credentials only over TLS: against an `http://` server kubectl drops the
    token. An `https://` server is verified against `ca` when given, not verified otherwise.
    """
    tls = ""
    if server.startswith("https://"):
        tls = (f"    certificate-authority-data: {base64.b64encode(ca.read_bytes()).decode()}\n" if ca is not None
               else "    insecure-skip-tls-verify: true\n")
    return (
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: kubemesh\n  cluster:\n    server: {server}\n{tls}"
        f"users:\n- name: tester\n  user:\n    token: {token}\n"
        "contexts:\n- name: kubemesh\n  context:\n    cluster: kubemesh\n    user: tester\n    namespace: default\n"
        "current-context: kubemesh\n"
    )


@contextlib.contextmanager
def kubectl_invocation(version: str, *args: str, server: str, token: str | None = None,
                       ca: Path | None = None) -> Iterator[tuple[list[str], dict[str, str]]]:
    """(argv, env) for one kubectl run; the fresh cache dir and kubeconfig live for the block."""
    binary = kubectl_binary(version)
    scratch = Path(tempfile.mkdtemp(prefix="kubectl-"))
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
        env["HOME"] = str(scratch)
        if token is None:
            env["KUBECONFIG"] = "/dev/null"
        else:
            cfg = scratch / "kubeconfig"
            cfg.write_text(kubeconfig_text(server, token, ca))
            env["KUBECONFIG"] = str(cfg)
        argv = [str(binary), *args, "--server", server, "--cache-dir", str(scratch / "cache")]
        yield argv, env
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_kubectl(version: str, *args: str, server: str, token: str | None = None, input: str | None = None,
                timeout: float = 60, ca: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run kubectl 1.XX against `server`; never raises on a non-zero exit (check `returncode`).

    With `token`, kubectl gets a kubeconfig carrying it (and `ca` for an https server).
    """
    with kubectl_invocation(version, *args, server=server, token=token, ca=ca) as (argv, env):
        return subprocess.run(argv, env=env, input=input, capture_output=True, text=True, timeout=timeout,
                              check=False)



# ---------------------------------------------------------------------------------- fixtures for the helpers
#
# Test modules must not `from conftest import ...` at run time: with more than one conftest.py
# in the tree (tests/plugin/ has one), "conftest" in sys.modules is whichever was imported
# last. They get the helpers through these fixtures and import only types, under
# TYPE_CHECKING.


class RunKubectl(Protocol):
    """The signature of `run_kubectl`."""

    def __call__(self, version: str, *args: str, server: str, token: str | None = ..., input: str | None = ...,
                 timeout: float = ..., ca: Path | None = ...) -> subprocess.CompletedProcess[str]: ...


class KubectlCommand(Protocol):
    """The signature of `kubectl_invocation`."""

    def __call__(self, version: str, *args: str, server: str, token: str | None = ...,
                 ca: Path | None = ...) -> contextlib.AbstractContextManager[tuple[list[str], dict[str, str]]]: ...


class LaunchApiServer(Protocol):
    """The signature of `launch_apiserver`."""

    def __call__(self, workdir: Path, *, token: str | None = ..., data_dir: Path | str | None = ...,
                 port: int | None = ..., clock_rate: float | None = ..., seed: int | None = ..., tls: bool = ...,
                 extra_args: tuple[str, ...] = ...) -> ApiServer: ...


def _edge_versions() -> list[str]:
    if not KUBECTL_VERSIONS:
        return []
    return sorted({KUBECTL_VERSIONS[0], KUBECTL_VERSIONS[-1]}, key=KUBECTL_VERSIONS.index)


_NO_KUBECTL: list[str | None] = [None]


@pytest.fixture(params=KUBECTL_VERSIONS or _NO_KUBECTL)
def kubectl_version(request: pytest.FixtureRequest) -> str:
    """Every installed kubectl minor version ("1.27" ... "1.33"); skips when there is none."""
    if request.param is None:
        pytest.skip("no versioned kubectl binaries (kubectl.1.XX) beside the kubectl on PATH")
    version: str = request.param
    return version


@pytest.fixture(params=_edge_versions() or _NO_KUBECTL)
def edge_kubectl_version(request: pytest.FixtureRequest) -> str:
    """The oldest and the newest installed kubectl; skips when there is none."""
    if request.param is None:
        pytest.skip("no versioned kubectl binaries (kubectl.1.XX) beside the kubectl on PATH")
    version: str = request.param
    return version


@pytest.fixture
def kubectl() -> RunKubectl:
    """`run_kubectl`."""
    return run_kubectl


@pytest.fixture
def kubectl_command() -> KubectlCommand:
    """`kubectl_invocation`: (argv, env) for running kubectl yourself (watches)."""
    return kubectl_invocation


@pytest.fixture(scope="session")
def apiserver_launcher() -> LaunchApiServer:
    """`launch_apiserver`, for fixtures wider than a function (the caller terminates the server)."""
    return launch_apiserver


# Test files that run in `scripts/test`'s second pass, alone, after the parallel pass
# (pytest-xdist): those that use the Docker engine, its published port 6443 or the image build
# (two compose stacks must never race for the port or the image), and those whose timing a
# busy machine distorts (60 emulated nodes at a fast clock lose heartbeats, and the seed races'
# timing shifts, when three test workers share two cores).
# Marked `serial`: `pytest -m "not serial"` and `pytest -m serial`.
SERIAL_FILES: frozenset[str] = frozenset({
    "tests/compose/test_compose_stack.py",
    "tests/compose/test_compose_etcd.py",
    "tests/docs/test_documented_commands.py",
    "tests/packaging/test_wheel.py",
    "tests/plugin/test_plugin_compose_mode.py",
    "tests/plugin/test_plugin_examples.py",
    "tests/plugin/test_plugin_scopes.py",
    "tests/kubelet/test_kubelet_lifecycle.py",
    "tests/controller_manager/test_cm_zone_scale.py",
    "tests/scenarios/test_scenarios.py",
})


BESIDE_THE_DOCKER_TESTS: frozenset[str] = frozenset({
    "tests/kubelet/test_kubelet_lifecycle.py",
    "tests/controller_manager/test_cm_zone_scale.py",
    "tests/scenarios/test_scenarios.py",
    "tests/plugin/test_plugin_scopes.py",
})
"""Serial files without Docker: they run on the serial pass's second worker, with the main job."""


def _is_main_job(item: pytest.Item) -> bool:
    """The documented block that runs the main job (`scripts/main`, every scenario and its verify)."""
    block = getattr(getattr(item, "callspec", None), "params", {}).get("block")
    return str(getattr(block, "body", "")).lstrip().startswith("scripts/main")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the tests of SERIAL_FILES `serial`, in two xdist groups for the serial pass's two workers.

    The second group is what needs no Docker: the main job's documented block (five minutes
    of scenario runs, one mesh at a time, about one core) and BESIDE_THE_DOCKER_TESTS. The first
    is everything else serial: the Docker tests among them must never overlap (one port 6443,
    one image). Each group runs one test at a time, so `scripts/test`'s serial pass has at most
    two tests running and nothing else.
    """
    for item in items:
        path = item.path.relative_to(REPO_ROOT).as_posix()
        if path in SERIAL_FILES:
            item.add_marker(pytest.mark.serial)
            second = path in BESIDE_THE_DOCKER_TESTS or _is_main_job(item)
            item.add_marker(pytest.mark.xdist_group("no-docker" if second else "serial"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Under CI=true a skip is a failure: CI must not pass because a real part was missing."""
    report = yield
    if report.skipped and os.environ.get("CI", "").lower() == "true" and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"skipped under CI=true (a test whose real part cannot run must fail there): {reason}"
    return report

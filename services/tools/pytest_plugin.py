"""kubemesh's pytest plugin: a mesh for a test, with its client, chaos API, history and kubectl.

Installed with kubemesh and registered through the `pytest11` entry point, so a user's tests
get these fixtures without any import (`pip install 'kubemesh[pytest]'` brings pytest-asyncio,
which the async fixtures need)::

    import pytest
    from kubemesh import PODS

    @pytest.mark.kubemesh(nodes=2, clock_rate=60)
    async def test_power_off(kubemesh_mesh, kubemesh_client):
        await kubemesh_mesh.power_off("node-1")
        ...

Fixtures:

* `kubemesh_mesh`: a running `kubemesh.KubemeshCluster` (see `kubemesh.services.tools.testing`).
  Local processes by default; with `--kubemesh-compose` (or `@pytest.mark.kubemesh(compose=True)`)
  the compose stack in Docker (`pip install 'kubemesh[compose]'` and the kubemesh image). For
  the test's duration `KUBECONFIG` names the mesh's kubeconfig (and is restored after), so a
  controller under test that calls `load_kube_config()` with no path talks to the mesh, never
  to the cluster of `~/.kube/config`. Clients that read `KUBECONFIG` once, when they are
  imported (the official Python clients do), read it during collection: the plugin then points
  it at a file of its own (`kubemesh-kubeconfig` in a folder of the session), which is the
  user's own kubeconfig outside kubemesh tests and the mesh's during them.
* `kubemesh_client`: an `ApiClient` of the mesh (msgpack, identified as `test`).
* `kubemesh_chaos`: the chaos front door (`kubemesh.Chaos`); every fault is reset after the test.
* `kubemesh_history`: `await kubemesh_history()` (every record so far), `.since(n, types=...)`, `.write(path)`.
* `kubemesh_kubectl`: `await kubemesh_kubectl("get", "nodes")` (stdout; raises `KubectlError`
  on a non-zero exit), `await kubemesh_kubectl.json("get", "pods")`.
* `kubemesh_service_account`: `await kubemesh_service_account("ops", "my-operator")` writes a
  kubeconfig (in the test's `tmp_path`) under which a client runs as that ServiceAccount
  (created if missing; its token from the TokenRequest API) and returns its path.

The marker `@pytest.mark.kubemesh(...)` shapes the mesh: `nodes` (3), `kubelets` (1),
`clock_rate` (1.0), `bugs` (()), `seed`, `zones`, `persist` (False), `compose` (None: the
command line decides), `start_timeout` (60 s), `extra_args` per component (local only), and
`runtime` (None: `--kubemesh-runtime`, default "emulated"; "process" runs the containers as
local processes), `scope`: "function" (default: a fresh mesh per test), "module" or "session" (one mesh shared
by every test of the module, or of the session, that asks for the same mesh). A shared mesh is
reset after each test (`KubemeshCluster.reset`: faults healed, nodes powered on and Ready,
the test's namespaces and everything in `default` deleted). Put the marker on a module
(`pytestmark = pytest.mark.kubemesh(nodes=3, scope="module")`) to share one mesh there.

When a test using a mesh fails, its history (`kubemesh-history.jsonl`) and the components'
logs (`kubemesh-logs/`) are saved in the test's `tmp_path`, and the report names them.

Command-line options: `--kubemesh-compose`, `--kubemesh-compose-file=PATH` (default: the
compose file shipped with kubemesh; write it with `=`: pytest picks its rootdir before
plugins load and would take a separate PATH argument for a test path), `--kubemesh-image NAME`
(default `$KUBEMESH_IMAGE` or `kubemesh:latest`),
`--kubemesh-runtime emulated|process|opt-in`. Under `CI=true` a compose mesh that cannot
start fails the test instead of skipping it.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Iterator
from pathlib import Path
from typing import Any, Final, TypeVar, cast

import pytest

from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.mesh.chaos_client import Chaos
from kubemesh.services.mesh.endpoint import History, run_blocking
from kubemesh.services.mesh.kubectl import Kubectl
from kubemesh.services.tools.testing import (
    ClusterUnavailable,
    KubemeshCluster,
    MeshPool,
    MeshRequest,
    start_cluster,
)

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

MARKER: Final = "kubemesh"
FIXTURES: Final = frozenset({"kubemesh_mesh", "kubemesh_client", "kubemesh_chaos", "kubemesh_history",
                             "kubemesh_kubectl", "kubemesh_service_account"})
_ASYNC_FIXTURES: Final = frozenset({"kubemesh_client", "kubemesh_chaos"})
_COMPOSE_FILE_OPTION: Final = "--kubemesh-compose-file"

try:  # pytest-asyncio runs the async fixtures; without it pytest must still start, and say what is missing.
    import pytest_asyncio

    HAVE_ASYNCIO_PLUGIN = True
except ImportError:  # pragma: no cover - depends on the user's environment
    HAVE_ASYNCIO_PLUGIN = False

_MISSING_ASYNCIO: Final = ("kubemesh's async fixtures (kubemesh_client, kubemesh_chaos) and async tests need "
                           "pytest-asyncio: pip install 'kubemesh[pytest]'")


def _async_fixture(fn: F) -> F:
    """`pytest_asyncio.fixture` when pytest-asyncio is installed (else `pytest_runtest_setup` fails the test)."""
    return cast(F, pytest_asyncio.fixture(fn) if HAVE_ASYNCIO_PLUGIN else pytest.fixture(fn))


# ---------------------------------------------------------------------------------------------
# pytest hooks


def pytest_addoption(parser: pytest.Parser) -> None:
    """The plugin's command-line options."""
    g = parser.getgroup("kubemesh", "kubemesh fixtures")
    g.addoption("--kubemesh-compose", action="store_true", default=False,
                help="run the kubemesh_mesh fixture as the compose stack in Docker instead of local processes")
    g.addoption(_COMPOSE_FILE_OPTION, default=None, metavar="PATH",
                help="the compose file (default: the one shipped with kubemesh); write --kubemesh-compose-file=PATH")
    g.addoption("--kubemesh-runtime", default="emulated", choices=("emulated", "process", "opt-in"),
                help="the container runtime of local meshes (the marker's runtime= wins): emulated (default), "
                     "process (containers run as local processes) or opt-in")
    g.addoption("--kubemesh-image", default=None,
                help="the kubemesh image for compose mode (default: $KUBEMESH_IMAGE or kubemesh:latest)")


class KubeconfigSwitch:
    """One kubeconfig path for the whole session, switched between the user's and a mesh's.

    It is a symbolic link: the user's kubeconfig (`$KUBECONFIG`'s first file, else
    `~/.kube/config`) outside kubemesh tests, the mesh's during one. Clients that captured the
    path at import time follow it; `KUBECONFIG` itself names it only during collection and
    kubemesh tests, and is the user's again otherwise.
    """

    def __init__(self) -> None:
        self.original = os.environ.get("KUBECONFIG")
        first = (self.original or "").split(os.pathsep)[0]
        self.users = Path(first or "~/.kube/config").expanduser()
        self.folder = Path(tempfile.mkdtemp(prefix="kubemesh-pytest-"))
        self.path = self.folder / "kubemesh-kubeconfig"
        self.point_at(self.users)

    def point_at(self, target: Path) -> None:
        """Make the session's kubeconfig `target` (atomically: readers see the old or the new one)."""
        tmp = self.folder / ".kubeconfig.tmp"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target)
        os.replace(tmp, self.path)

    def set_env(self) -> None:
        """`KUBECONFIG` names the session's kubeconfig."""
        os.environ["KUBECONFIG"] = str(self.path)

    def restore_env(self) -> None:
        """`KUBECONFIG` is the user's again."""
        if self.original is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = self.original

    def close(self) -> None:
        """Restore `KUBECONFIG` and remove the session's folder."""
        self.restore_env()
        shutil.rmtree(self.folder, ignore_errors=True)


_KUBECONFIG: Final = pytest.StashKey[KubeconfigSwitch]()


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker; `KUBECONFIG` names the session's switch while collecting.

    Refuses `--kubemesh-compose-file PATH`: pytest took PATH for its rootdir.
    """
    config.addinivalue_line(
        "markers",
        f"{MARKER}(nodes=3, kubelets=1, clock_rate=1.0, bugs=(), seed=None, zones=(), persist=False, "
        "compose=None, start_timeout=60.0, extra_args=None, runtime=None, scope='function'): "
        "the shape of the kubemesh_mesh "
        "fixture's mesh, and which tests share it")
    switch = KubeconfigSwitch()
    config.stash[_KUBECONFIG] = switch
    switch.set_env()  # modules imported while collecting capture the session's path
    args = list(config.invocation_params.args)
    if _COMPOSE_FILE_OPTION in args:
        raise pytest.UsageError(f"write {_COMPOSE_FILE_OPTION}=PATH: pytest chooses its rootdir before it loads "
                                f"plugins and took the separate PATH argument for a test path (rootdir now "
                                f"{config.rootpath})")


def pytest_collection_finish(session: pytest.Session) -> None:
    """After collection, `KUBECONFIG` is the user's again, except during kubemesh tests."""
    session.config.stash[_KUBECONFIG].restore_env()


def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave `KUBECONFIG` as it was and remove the session's folder."""
    switch = config.stash.get(_KUBECONFIG, None)
    if switch is not None:
        switch.close()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Without pytest-asyncio, a test that needs it and uses kubemesh fails with what to install."""
    if HAVE_ASYNCIO_PLUGIN:
        return
    used = set(getattr(item, "fixturenames", ()))
    is_async = inspect.iscoroutinefunction(getattr(item, "obj", None))
    if _ASYNC_FIXTURES & used or (is_async and FIXTURES & used):
        pytest.fail(_MISSING_ASYNCIO, pytrace=False)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item,
                              call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Remember each phase's report on the item (the mesh fixture saves evidence on failure)."""
    report = yield
    setattr(item, f"_kubemesh_rep_{call.when}", report)
    return report


# ---------------------------------------------------------------------------------------------
# Fixtures


def _request(node: pytest.Item) -> MeshRequest:
    marker = node.get_closest_marker(MARKER)
    if marker is None:
        return MeshRequest()
    if marker.args:
        raise pytest.UsageError(f"@pytest.mark.{MARKER} takes keyword arguments only")
    try:
        return MeshRequest.from_kwargs(marker.kwargs)
    except (TypeError, ValueError) as exc:
        raise pytest.UsageError(f"@pytest.mark.{MARKER}: {exc}") from exc


@contextlib.contextmanager
def _start(wanted: MeshRequest, config: pytest.Config) -> Iterator[KubemeshCluster]:
    compose = wanted.compose if wanted.compose is not None else bool(config.getoption("--kubemesh-compose"))
    compose_file = config.getoption(_COMPOSE_FILE_OPTION)
    try:
        with start_cluster(wanted, compose=compose, compose_file=Path(compose_file) if compose_file else None,
                           image=config.getoption("--kubemesh-image"),
                           runtime=config.getoption("--kubemesh-runtime")) as cluster:
            yield cluster
    except ClusterUnavailable as exc:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{exc} (CI=true: a mesh that cannot start is a failure, not a skip)", pytrace=False)
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def _kubemesh_session_pool() -> Iterator[MeshPool]:
    pool = MeshPool()
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="module")
def _kubemesh_module_pool() -> Iterator[MeshPool]:
    pool = MeshPool()
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def kubemesh_mesh(request: pytest.FixtureRequest, tmp_path: Path, _kubemesh_session_pool: MeshPool,
                  _kubemesh_module_pool: MeshPool) -> Iterator[KubemeshCluster]:
    """A kubemesh for this test (see the module docstring); stopped, or reset, after it."""
    wanted = _request(request.node)
    with contextlib.ExitStack() as stack:
        if wanted.scope == "function":
            cluster = stack.enter_context(_start(wanted, request.config))
        else:
            pool = _kubemesh_session_pool if wanted.scope == "session" else _kubemesh_module_pool
            cluster, _ = pool.get(wanted, lambda: _start(wanted, request.config))
        switch = request.config.stash[_KUBECONFIG]
        switch.point_at(cluster.kubeconfig_path)
        switch.set_env()
        try:
            yield cluster
        finally:
            switch.restore_env()
            switch.point_at(switch.users)
            rep = getattr(request.node, "_kubemesh_rep_call", None)
            if rep is not None and rep.failed:
                _save_evidence(cluster, tmp_path, rep)
            if wanted.scope != "function":
                run_blocking(cluster.reset(nodes=wanted.nodes))


def _save_evidence(cluster: KubemeshCluster, folder: Path, rep: pytest.TestReport) -> None:
    try:
        paths = run_blocking(cluster.save_evidence(folder))
    except Exception as exc:  # the test failed already: report why the evidence is missing, never mask it
        rep.sections.append(("kubemesh", f"could not save the mesh's history and logs: {exc!r}"))
        return
    rep.sections.append(("kubemesh", "\n".join(f"saved: {p}" for p in paths) + f"\nlogs live: {cluster.logs()}"))




@_async_fixture
async def kubemesh_client(kubemesh_mesh: KubemeshCluster) -> AsyncIterator[ApiClient]:
    """An `ApiClient` of the test's mesh."""
    async with kubemesh_mesh.client("test") as client:
        yield client


@_async_fixture
async def kubemesh_chaos(kubemesh_mesh: KubemeshCluster) -> AsyncIterator[Chaos]:
    """The chaos front door of the test's mesh; every fault is reset after the test."""
    async with kubemesh_mesh.chaos() as chaos:
        try:
            yield chaos
        finally:
            with contextlib.suppress(Exception):
                await chaos.reset()


@pytest.fixture
def kubemesh_service_account(kubemesh_mesh: KubemeshCluster,
                             tmp_path: Path) -> Callable[..., Coroutine[Any, Any, Path]]:
    """A factory of kubeconfigs that run as a ServiceAccount (created if missing), written in `tmp_path`."""

    async def make(namespace: str, name: str, *, seconds: int = 3600) -> Path:
        path = tmp_path / f"kubeconfig-{namespace}-{name}"
        return await kubemesh_mesh.endpoint.service_account_kubeconfig(namespace, name, path, seconds=seconds)

    return make


@pytest.fixture
def kubemesh_history(kubemesh_mesh: KubemeshCluster) -> History:
    """The apiserver's history of the test's mesh."""
    return kubemesh_mesh.history()


@pytest.fixture
def kubemesh_kubectl(kubemesh_mesh: KubemeshCluster, tmp_path: Path) -> Kubectl:
    """A kubectl runner for the test's mesh (fails under CI, else skips, when kubectl is not installed)."""
    binary = shutil.which("kubectl")
    if binary is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("kubectl is not installed (CI=true)", pytrace=False)
        pytest.skip("kubectl is not installed")
    return kubemesh_mesh.kubectl(binary=binary, cache_dir=tmp_path / "kubectl-cache")

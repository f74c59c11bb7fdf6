"""kubemesh's pytest plugin: a mesh for a test, with its client, chaos API, history and kubectl.

Installed with kubemesh and registered through the `pytest11` entry point, so a user's tests
get these fixtures without any import (they need pytest-asyncio, as every async test does)::

    import pytest
    from services.kinds import PODS

    @pytest.mark.kubemesh(nodes=2, clock_rate=60)
    async def test_power_off(kubemesh_mesh, kubemesh_client):
        await kubemesh_mesh.power_off("node-1")
        ...

Fixtures (each for one test):

* `kubemesh_mesh`: a running `KubemeshCluster`. By default the components run as local
  processes (`services.launching.Mesh`) on loopback; with `--kubemesh-compose` (or
  `@pytest.mark.kubemesh(compose=True)`) the same cluster runs as the compose stack in Docker
  (`compose.yaml`, driven through testcontainers; the test is skipped when Docker or
  testcontainers is missing). Both give `apiserver_url`, `token`, `kubeconfig_path`,
  `ca_path`, `client()`, `wait_nodes_ready()`, `power_off()`/`power_on()`, `restart()`,
  `crash()` and `history()`.
* `kubemesh_client`: a `services.client.ApiClient` of the mesh (msgpack, identified as `test`).
* `kubemesh_chaos`: the chaos front door (`services.chaos_client.Chaos`):
  `async with kubemesh_chaos.power_off("node-1"): ...`.
* `kubemesh_history`: `await kubemesh_history()` (every record so far), `.since(n, types=...)`,
  `.write(path)`.
* `kubemesh_kubectl`: `await kubemesh_kubectl("get", "nodes")` (stdout; raises
  `KubectlError` on a non-zero exit), `await kubemesh_kubectl.json("get", "pods")`.

The marker `@pytest.mark.kubemesh(...)` shapes the mesh: `nodes` (3), `kubelets` (1),
`clock_rate` (1.0), `bugs` (()), `seed`, `zones`, `persist` (False), `compose` (None: the
command line decides), `start_timeout` (60 s), and `extra_args` per component (local only).

When a test using a mesh fails, the apiserver's history is written to
`<tmp_path>/kubemesh-history.jsonl` and the report names it (and, locally, the process logs).

Command-line options: `--kubemesh-compose`, `--kubemesh-compose-file PATH` (default: the
`compose.yaml` of the kubemesh source tree), `--kubemesh-image NAME` (default
`$KUBEMESH_IMAGE` or `kubemesh:latest`; build it with `scripts/docker-setup`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import aiohttp
import pytest

if TYPE_CHECKING:
    from services.chaos_client import Chaos
    from services.client import ApiClient
    from services.launching import Mesh

MARKER: Final = "kubemesh"
DEFAULT_IMAGE: Final = "kubemesh:latest"
_SOURCE_ROOT: Final = Path(__file__).resolve().parent.parent

if TYPE_CHECKING:
    from pytest_asyncio import fixture as _fixture

    HAVE_ASYNCIO_PLUGIN = True
else:
    try:  # pytest-asyncio runs the async fixtures; without it they cannot run, but pytest must still start.
        from pytest_asyncio import fixture as _fixture

        HAVE_ASYNCIO_PLUGIN = True
    except ImportError:  # pragma: no cover - depends on the user's environment
        _fixture = pytest.fixture
        HAVE_ASYNCIO_PLUGIN = False


# ---------------------------------------------------------------------------------------------
# pytest hooks


def pytest_addoption(parser: pytest.Parser) -> None:
    """The plugin's command-line options."""
    g = parser.getgroup("kubemesh", "kubemesh fixtures")
    g.addoption("--kubemesh-compose", action="store_true", default=False,
                help="run the kubemesh_mesh fixture as the compose stack in Docker instead of local processes")
    g.addoption("--kubemesh-compose-file", default=None,
                help="the compose file (default: compose.yaml of the kubemesh source tree)")
    g.addoption("--kubemesh-image", default=None,
                help=f"the kubemesh image for compose mode (default: $KUBEMESH_IMAGE or {DEFAULT_IMAGE})")


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker."""
    config.addinivalue_line(
        "markers",
        f"{MARKER}(nodes=3, kubelets=1, clock_rate=1.0, bugs=(), seed=None, zones=(), persist=False, "
        "compose=None, start_timeout=60.0, extra_args=None): the shape of the kubemesh_mesh fixture's mesh")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Remember each phase's report on the item (the mesh fixture saves evidence on failure)."""
    report = yield
    setattr(item, f"_kubemesh_rep_{call.when}", report)
    return report


# ---------------------------------------------------------------------------------------------
# What a test asks for


@dataclass(frozen=True, kw_only=True)
class MeshRequest:
    """The mesh a test asked for with `@pytest.mark.kubemesh(...)`."""

    nodes: int = 3
    kubelets: int = 1
    clock_rate: float = 1.0
    bugs: tuple[str, ...] = ()
    seed: int | None = None
    zones: tuple[str, ...] = ()
    persist: bool = False
    compose: bool | None = None
    start_timeout: float = 60.0
    extra_args: Mapping[str, Sequence[str]] = field(default_factory=dict)

    @classmethod
    def from_marker(cls, marker: pytest.Mark | None) -> MeshRequest:
        """Read the marker's keyword arguments (unknown ones are an error)."""
        if marker is None:
            return cls()
        if marker.args:
            raise pytest.UsageError(f"@pytest.mark.{MARKER} takes keyword arguments only")
        kw = dict(marker.kwargs)
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(kw) - known)
        if unknown:
            raise pytest.UsageError(f"@pytest.mark.{MARKER}: unknown arguments {', '.join(unknown)}; "
                                    f"known: {', '.join(sorted(known))}")
        for key in ("bugs", "zones"):
            if key in kw:
                value = kw[key]
                kw[key] = (value,) if isinstance(value, str) else tuple(value)
        return cls(**kw)


# ---------------------------------------------------------------------------------------------
# The cluster a test gets


class KubectlError(RuntimeError):
    """kubectl exited with a non-zero status; the message carries its stderr."""

    def __init__(self, argv: Sequence[str], returncode: int, stdout: str, stderr: str) -> None:
        super().__init__(f"kubectl {' '.join(argv)} exited {returncode}: {stderr.strip() or stdout.strip()}")
        self.argv = tuple(argv)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr


class KubemeshCluster:
    """A running kubemesh, local or in Docker: what the fixtures build on.

    Subclasses: `LocalCluster` (processes on loopback) and `ComposeCluster` (compose stack).
    """

    mode: str = ""
    apiserver_url: str
    token: str | None
    kubeconfig_path: Path
    ca_path: Path | None

    def __init__(self) -> None:
        self._connector: aiohttp.TCPConnector | None = None

    def ssl_context(self) -> ssl.SSLContext | bool:
        """The TLS settings that trust the mesh's CA (True: the system store)."""
        return ssl.create_default_context(cafile=str(self.ca_path)) if self.ca_path is not None else True

    def client(self, component: str = "test", *, instance: str | None = None) -> ApiClient:
        """A new `ApiClient` for this mesh (msgpack), identified as `component`; close it after use."""
        from services.client import ApiClient

        if self._connector is None or self._connector.closed:
            self._connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ssl=self.ssl_context())
        return ApiClient(self.apiserver_url, component=component, instance=instance or component,
                         token=self.token, connector=self._connector)

    def headers(self) -> dict[str, str]:
        """Headers for raw HTTP requests to the apiserver."""
        h = {"Accept": "application/json", "User-Agent": "kubemesh-pytest",
             "X-Kubemesh-Component": "test", "X-Kubemesh-Instance": "pytest"}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        return h

    async def get_json(self, path: str, *, params: Mapping[str, str] | None = None) -> Any:
        """GET a JSON document from the apiserver."""
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.ssl_context()),
                                         timeout=aiohttp.ClientTimeout(total=15)) as session, \
                session.get(self.apiserver_url + path, params=params, headers=self.headers()) as resp:
            resp.raise_for_status()
            return await resp.json(content_type=None)

    async def history(self, *, since: int = 0, types: Sequence[str] = ()) -> list[dict[str, Any]]:
        """The apiserver's history records after `since` (`GET /kubemesh/v1/history`)."""
        params = {"since": str(since)}
        if types:
            params["type"] = ",".join(types)
        headers = {**self.headers(), "Accept": "application/jsonl"}
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=self.ssl_context()),
                                         timeout=aiohttp.ClientTimeout(total=30)) as session, \
                session.get(f"{self.apiserver_url}/kubemesh/v1/history", params=params, headers=headers) as resp:
            resp.raise_for_status()
            text = await resp.text()
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    async def nodes(self) -> list[dict[str, Any]]:
        """Every Node object."""
        doc = await self.get_json("/api/v1/nodes")
        return [n for n in (doc.get("items") or []) if isinstance(n, dict)]

    async def wait_nodes_ready(self, count: int, *,
                               timeout: float = 60.0) -> list[dict[str, Any]]:  # noqa: ASYNC109 - a deadline
        """Wait until at least `count` nodes are Ready; return the nodes."""
        from services.launching import node_is_ready

        deadline = time.monotonic() + timeout
        last: list[dict[str, Any]] = []
        while True:
            with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
                last = await self.nodes()
            if sum(1 for n in last if node_is_ready(n)) >= count:
                return last
            if time.monotonic() > deadline:
                states = ", ".join(f"{n['metadata']['name']}={'Ready' if node_is_ready(n) else 'NotReady'}"
                                   for n in last)
                raise TimeoutError(f"{count} nodes not Ready within {timeout:.0f} s: {states or 'no nodes'}")
            await asyncio.sleep(0.1)

    async def chaos_available(self) -> bool:
        """Whether the apiserver serves the chaos front door (`/chaos/v1`)."""
        try:
            await self.get_json("/chaos/v1/faults")
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            return False
        return True

    async def power_off(self, node: str) -> Any:
        """Power a node off (heartbeats, lease, status and pod work stop; pods stay in the API)."""
        return await self.node_op(node, "power-off")

    async def power_on(self, node: str) -> Any:
        """Boot a powered-off node again."""
        return await self.node_op(node, "power-on")

    async def node_op(self, node: str, op: str, body: Any = None) -> Any:
        """A kubelet admin operation on one node (`POST /nodes/{node}/{op}`); answers its JSON."""
        raise NotImplementedError

    async def restart(self, component: str) -> None:
        """Stop and start a component (`apiserver`, `scheduler`, `kubelet`, ...) and wait for it."""
        raise NotImplementedError

    async def crash(self, component: str) -> None:
        """Kill a component's process with SIGKILL, as a crash would."""
        raise NotImplementedError

    def logs(self) -> str:
        """Where to look for the components' logs (a path or a command)."""
        return ""

    async def aclose(self) -> None:
        """Release the clients' connections (the mesh itself is stopped by its owner)."""
        if self._connector is not None:
            await self._connector.close()
            self._connector = None


class LocalCluster(KubemeshCluster):
    """A mesh of local processes (`services.launching.Mesh`)."""

    mode = "local"

    def __init__(self, mesh: Mesh) -> None:
        super().__init__()
        self.mesh = mesh
        self.apiserver_url = mesh.apiserver_url
        self.token = mesh.token
        self.kubeconfig_path = mesh.kubeconfig_path
        self.ca_path = mesh.ca_path

    async def _admin_urls(self) -> dict[str, str]:
        doc = await self.get_json("/kubemesh/v1/components")
        items = doc.get("items", []) if isinstance(doc, dict) else []
        return {str(i["instance"]): str(i["adminURL"]) for i in items if isinstance(i, dict) and i.get("adminURL")}

    async def node_op(self, node: str, op: str, body: Any = None) -> Any:
        """See `KubemeshCluster.node_op`: straight to the kubelet process's admin endpoint."""
        headers = self.headers()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
            for instance, url in sorted((await self._admin_urls()).items()):
                if not instance.startswith("kubelet"):
                    continue
                async with session.post(f"{url}/nodes/{node}/{op}", json=body or {}, headers=headers) as resp:
                    if resp.status == 404:
                        continue
                    text = await resp.text()
                    if resp.status >= 400:
                        raise RuntimeError(f"{op} {node}: {resp.status} {text[:300]}")
                    return json.loads(text) if text.strip() else None
        raise LookupError(f"no kubelet hosts node {node!r}")

    async def restart(self, component: str) -> None:
        """See `KubemeshCluster.restart` (`Mesh.restart`)."""
        await self.mesh.restart(_local_name(component))

    async def crash(self, component: str) -> None:
        """See `KubemeshCluster.crash` (`Mesh.kill`: the local launcher does not restart it)."""
        await self.mesh.kill(_local_name(component))

    def logs(self) -> str:
        """The folder of the process logs."""
        return str(self.mesh.log_dir)


def _local_name(component: str) -> str:
    return {"controller-manager": "controller_manager"}.get(component, component)


# ---------------------------------------------------------------------------------------------
# Docker compose


def docker_available() -> str | None:
    """None when `docker compose` can run containers here, else why not."""
    if shutil.which("docker") is None:
        return "no docker CLI"
    try:
        info = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True,
                              text=True, timeout=20, check=False)
        if info.returncode != 0:
            return f"no Docker engine ({info.stderr.strip()[:200]})"
        comp = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, timeout=20,
                              check=False)
        if comp.returncode != 0:
            return "no `docker compose` (compose v2)"
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"docker does not answer: {exc}"
    return None


def image_exists(image: str) -> bool:
    """Whether the engine has `image` locally."""
    r = subprocess.run(["docker", "image", "inspect", image], capture_output=True, timeout=30, check=False)
    return r.returncode == 0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ComposeStack:
    """The compose stack of `compose.yaml` as one throwaway project, driven by testcontainers.

    Every stack has its own project name, published port (on 127.0.0.1), state folder and
    volumes, so stacks of parallel tests do not meet; `stop()` removes its containers, network
    and volumes (`down --volumes`). Blocking (subprocess) calls; `ComposeCluster` runs them
    in a thread.
    """

    def __init__(self, *, compose_file: Path, image: str = DEFAULT_IMAGE, nodes_per_kubelet: int = 3,
                 kubelets: int = 1, clock_rate: float = 1.0, bugs: Sequence[str] = (), seed: int | None = None,
                 token: str | None = None, project: str | None = None, state_dir: Path | None = None,
                 env: Mapping[str, str] | None = None) -> None:
        from testcontainers.compose import DockerCompose

        self.compose_file = compose_file.resolve()
        self.project = project or f"kubemesh-{secrets.token_hex(4)}"
        self._own_state = state_dir is None
        self.state_dir = (state_dir or Path(tempfile.mkdtemp(prefix=f"{self.project}-"))).resolve()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        self.kubelets = kubelets
        self.token = token or secrets.token_urlsafe(32)
        values: dict[str, str] = {
            "COMPOSE_PROJECT_NAME": self.project,
            "KUBEMESH_IMAGE": image,
            "KUBEMESH_PORT": str(self.port),
            "KUBEMESH_STATE_DIR": str(self.state_dir),
            "KUBEMESH_NODES": str(nodes_per_kubelet),
            "KUBEMESH_CLOCK_RATE": repr(float(clock_rate)),
            "KUBEMESH_BUGS": ",".join(bugs),
            "KUBEMESH_SEED": "" if seed is None else str(seed),
            "KUBEMESH_TOKEN": self.token,
            **(env or {}),
        }
        self.env_file = self.state_dir.parent / f".{self.project}.env"
        self.env_file.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
        self.compose = DockerCompose(context=str(self.compose_file.parent),
                                     compose_file_name=self.compose_file.name, env_file=str(self.env_file),
                                     wait=True, keep_volumes=False)
        self.started = False

    @property
    def apiserver_url(self) -> str:
        """`https://127.0.0.1:<published port>`."""
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig_path(self) -> Path:
        """The kubeconfig the apiserver container wrote for the host."""
        return self.state_dir / "kubeconfig"

    @property
    def ca_path(self) -> Path:
        """The stack's CA certificate."""
        return self.state_dir / "pki" / "ca.crt"

    def command(self) -> list[str]:
        """`docker compose -f FILE --env-file FILE` for this stack."""
        return list(self.compose.compose_command_property)

    def run(self, *args: str, check: bool = True, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
        """Run `docker compose ARGS` for this project; raise with its output on failure."""
        r = subprocess.run([*self.command(), *args], capture_output=True, text=True, timeout=timeout,
                           cwd=self.compose_file.parent, check=False)
        if check and r.returncode != 0:
            raise RuntimeError(f"docker compose {' '.join(args)} exited {r.returncode}:\n{r.stdout[-2000:]}"
                               f"\n{r.stderr[-4000:]}")
        return r

    def start(self) -> None:
        """`up --wait` (every service healthy), with `kubelets` kubelet containers."""
        self.started = True
        try:
            self.compose.start()  # testcontainers: `up --wait`
            if self.kubelets != 1:
                self.scale_kubelets(self.kubelets)
        except (RuntimeError, subprocess.CalledProcessError) as exc:
            out = exc.stderr.decode(errors="replace") if isinstance(exc, subprocess.CalledProcessError) else ""
            raise RuntimeError(f"the compose stack did not come up: {exc}\n{out[-3000:]}\n--- logs ---\n"
                               f"{self.tail_logs()}") from exc

    def scale_kubelets(self, count: int) -> None:
        """`up --scale kubelet=N --wait`."""
        self.run("up", "--detach", "--wait", "--no-build", "--scale", f"kubelet={count}")
        self.kubelets = count

    def restart(self, service: str) -> None:
        """`docker compose restart SERVICE`."""
        self.run("restart", service)

    def exec(self, service: str, *command: str, index: int = 1, check: bool = True) -> str:
        """Run a command in a service's container (replica `index`); its stdout."""
        r = self.run("exec", "-T", "--index", str(index), service, *command, check=check, timeout=60)
        return r.stdout

    def containers(self, *, all_: bool = True) -> list[dict[str, Any]]:
        """`docker compose ps --format json` as a list of containers."""
        out = self.run("ps", "--format", "json", *(["--all"] if all_ else [])).stdout
        text = out.strip()
        if not text:
            return []
        if text.startswith("["):
            doc = json.loads(text)
            return [c for c in doc if isinstance(c, dict)]
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def inspect(self, container: str) -> dict[str, Any]:
        """`docker inspect` of one container."""
        r = subprocess.run(["docker", "inspect", container], capture_output=True, text=True, timeout=30, check=True)
        doc: list[dict[str, Any]] = json.loads(r.stdout)
        return doc[0]

    def tail_logs(self, lines: int = 40) -> str:
        """The last log lines of every service."""
        return self.run("logs", "--no-color", "--tail", str(lines), check=False).stdout[-12000:]

    def stop(self) -> None:
        """`down --volumes --remove-orphans`: no container, network or volume of the project remains."""
        try:
            if self.started:
                self.compose.stop(down=True)  # testcontainers: `down --volumes`
                self.started = False
        finally:
            self.env_file.unlink(missing_ok=True)
            if self._own_state:
                shutil.rmtree(self.state_dir, ignore_errors=True)

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, networks and volumes still labelled with this project (empty after `stop`)."""
        label = f"label=com.docker.compose.project={self.project}"
        out: dict[str, list[str]] = {}
        for kind, cmd in (("containers", ["docker", "ps", "-aq", "--filter", label]),
                          ("networks", ["docker", "network", "ls", "-q", "--filter", label]),
                          ("volumes", ["docker", "volume", "ls", "-q", "--filter", label])):
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=True)
            out[kind] = r.stdout.split()
        return out


class ComposeCluster(KubemeshCluster):
    """A mesh running as a compose stack (`ComposeStack`)."""

    mode = "compose"

    def __init__(self, stack: ComposeStack) -> None:
        super().__init__()
        self.stack = stack
        self.apiserver_url = stack.apiserver_url
        self.token = stack.token
        self.kubeconfig_path = stack.kubeconfig_path
        self.ca_path = stack.ca_path
        self._node_replica: dict[str, int] = {}

    async def _exec(self, service: str, *command: str, index: int = 1, check: bool = True) -> str:
        return await asyncio.to_thread(self.stack.exec, service, *command, index=index, check=check)

    async def replica_of(self, node: str) -> int:
        """The kubelet replica that hosts `node` (asked from each kubelet's admin endpoint)."""
        if node in self._node_replica:
            return self._node_replica[node]
        for index in range(1, self.stack.kubelets + 1):
            out = await self._exec("kubelet", "kubemesh-entrypoint", "admin", "GET", "/nodes", index=index,
                                   check=False)
            with contextlib.suppress(ValueError):
                doc = json.loads(out)
                items = doc.get("items", doc.get("nodes", [])) if isinstance(doc, dict) else doc
                for item in items if isinstance(items, list) else []:
                    name = item.get("name") if isinstance(item, dict) else item
                    if isinstance(name, str):
                        self._node_replica[name] = index
        if node not in self._node_replica:
            raise LookupError(f"no kubelet container hosts node {node!r}")
        return self._node_replica[node]

    async def node_op(self, node: str, op: str, body: Any = None) -> Any:
        """See `KubemeshCluster.node_op`: `docker compose exec` into the node's kubelet container.

        The kubelets' admin ports are not published.
        """
        index = await self.replica_of(node)
        out = await self._exec("kubelet", "kubemesh-entrypoint", "admin", "POST", f"/nodes/{node}/{op}",
                               json.dumps(body or {}), index=index)
        return json.loads(out) if out.strip() else None

    async def restart(self, component: str) -> None:
        """See `KubemeshCluster.restart` (`docker compose restart`, then wait until healthy)."""
        await asyncio.to_thread(self.stack.restart, component.replace("_", "-"))
        await asyncio.to_thread(self.stack.run, "up", "--detach", "--wait", "--no-build", "--scale",
                                f"kubelet={self.stack.kubelets}")

    async def crash(self, component: str, *, index: int = 1) -> None:
        """See `KubemeshCluster.crash`: SIGKILL the component inside its container.

        The container's restart policy brings it back.
        """
        # The exec session dies with the container (exit 137): that is the crash, not an error.
        await self._exec(component.replace("_", "-"), "kubemesh-entrypoint", "crash", index=index, check=False)

    def logs(self) -> str:
        """The command that shows the stack's logs."""
        return " ".join([*self.stack.command(), "logs"])


# ---------------------------------------------------------------------------------------------
# Helpers given to tests


class History:
    """The apiserver's history of a mesh: `await history()` is every record so far."""

    def __init__(self, cluster: KubemeshCluster) -> None:
        self.cluster = cluster

    async def __call__(self, *, types: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Every record (of the given types)."""
        return await self.cluster.history(types=types)

    async def since(self, since: int, *, types: Sequence[str] = ()) -> list[dict[str, Any]]:
        """The records after sequence number `since`."""
        return await self.cluster.history(since=since, types=types)

    async def write(self, path: Path) -> Path:
        """Write every record to `path` as JSON lines; returns the path."""
        records = await self.cluster.history()
        text = "".join(json.dumps(r, default=str) + "\n" for r in records)
        await asyncio.to_thread(_write_text, path, text)
        return path


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


class Kubectl:
    """kubectl against the mesh: `await kubectl("get", "nodes")` returns stdout."""

    def __init__(self, cluster: KubemeshCluster, *, binary: str = "kubectl", cache_dir: Path | None = None) -> None:
        self.cluster = cluster
        self.binary = binary
        self.cache_dir = cache_dir or Path(tempfile.mkdtemp(prefix="kubemesh-kubectl-"))

    def argv(self, *args: str) -> list[str]:
        """The full command line."""
        return [self.binary, "--kubeconfig", str(self.cluster.kubeconfig_path), "--cache-dir", str(self.cache_dir),
                *args]

    async def __call__(self, *args: str, input: str | None = None,
                       check: bool = True, timeout: float = 60.0) -> str:  # noqa: ASYNC109 - a deadline
        """Run kubectl; its stdout. Raises `KubectlError` on a non-zero exit when `check`."""
        env = {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig_path)}
        proc = await asyncio.create_subprocess_exec(
            *self.argv(*args), stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
        try:
            async with asyncio.timeout(timeout):
                out, err = await proc.communicate(input.encode() if input is not None else None)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        stdout, stderr = out.decode(), err.decode()
        if check and proc.returncode != 0:
            raise KubectlError(args, proc.returncode or 0, stdout, stderr)
        return stdout

    async def json(self, *args: str) -> Any:
        """Run kubectl with `-o json` and parse its output."""
        return json.loads(await self(*args, "-o", "json"))


# ---------------------------------------------------------------------------------------------
# Fixtures


def _compose_file(config: pytest.Config) -> Path:
    opt = config.getoption("--kubemesh-compose-file")
    if opt:
        return Path(str(opt))
    for candidate in (Path(str(config.rootpath)) / "compose.yaml", _SOURCE_ROOT / "compose.yaml"):
        if candidate.is_file():
            return candidate
    raise pytest.UsageError("kubemesh compose mode: no compose.yaml found; pass --kubemesh-compose-file PATH")


@contextlib.asynccontextmanager
async def start_cluster(request: MeshRequest, *, compose: bool, config: pytest.Config | None = None,
                        compose_file: Path | None = None, image: str | None = None,
                        state_dir: Path | None = None) -> AsyncIterator[KubemeshCluster]:
    """Start the cluster a test asked for; stop it (and everything it started) on exit."""
    if not compose:
        from services.launching import Mesh, MeshSpec

        spec = MeshSpec(nodes=request.nodes, kubelets=request.kubelets, zones=request.zones,
                        clock_rate=request.clock_rate, bugs=request.bugs, seed=request.seed,
                        persist=request.persist, start_timeout=request.start_timeout, state_dir=state_dir,
                        extra_args=dict(request.extra_args), stop_grace=3.0)
        async with Mesh(spec) as mesh:
            local = LocalCluster(mesh)
            try:
                yield local
            finally:
                await local.aclose()
        return
    why = docker_available()
    if why is not None:
        pytest.skip(f"kubemesh compose mode: {why} (scripts/docker-setup sets Docker up)")
    try:
        import testcontainers.compose  # noqa: F401
    except ImportError:
        pytest.skip("kubemesh compose mode needs testcontainers (pip install testcontainers)")
    image = image or (config.getoption("--kubemesh-image") if config else None) \
        or os.environ.get("KUBEMESH_IMAGE") or DEFAULT_IMAGE
    if not image_exists(image):
        pytest.skip(f"kubemesh compose mode: no image {image} (build it with scripts/docker-setup)")
    if compose_file is None:
        if config is None:
            raise ValueError("compose mode needs compose_file or config")
        compose_file = _compose_file(config)
    kubelets = max(1, request.kubelets)
    if request.nodes % kubelets:
        raise pytest.UsageError(f"compose mode: nodes ({request.nodes}) must be a multiple of kubelets ({kubelets})")
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    stack = ComposeStack(compose_file=compose_file, image=image, nodes_per_kubelet=request.nodes // kubelets,
                         kubelets=kubelets, clock_rate=request.clock_rate, bugs=request.bugs, seed=request.seed,
                         state_dir=state_dir)
    try:
        await asyncio.to_thread(stack.start)
        cluster = ComposeCluster(stack)
        try:
            await cluster.wait_nodes_ready(request.nodes, timeout=request.start_timeout)
            yield cluster
        finally:
            await cluster.aclose()
    finally:
        await asyncio.to_thread(stack.stop)


@_fixture
async def kubemesh_mesh(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KubemeshCluster]:
    """A kubemesh started for this test (see the module docstring); stopped after it."""
    if not HAVE_ASYNCIO_PLUGIN:  # pragma: no cover
        pytest.skip("the kubemesh fixtures need pytest-asyncio")
    wanted = MeshRequest.from_marker(request.node.get_closest_marker(MARKER))
    compose = wanted.compose if wanted.compose is not None else bool(request.config.getoption("--kubemesh-compose"))
    async with start_cluster(wanted, compose=compose, config=request.config) as cluster:
        yield cluster
        rep = getattr(request.node, "_kubemesh_rep_call", None)
        if rep is not None and rep.failed:
            with contextlib.suppress(Exception):
                path = await History(cluster).write(tmp_path / "kubemesh-history.jsonl")
                rep.sections.append(("kubemesh", f"history: {path}\nlogs: {cluster.logs()}"))


@_fixture
async def kubemesh_client(kubemesh_mesh: KubemeshCluster) -> AsyncIterator[ApiClient]:
    """An `ApiClient` of the test's mesh."""
    async with kubemesh_mesh.client("test") as client:
        yield client


@_fixture
async def kubemesh_chaos(kubemesh_mesh: KubemeshCluster) -> AsyncIterator[Chaos]:
    """The chaos front door of the test's mesh (`services.chaos_client.Chaos`).

    Every fault is reset after the test.
    """
    from services.chaos_client import Chaos

    async with kubemesh_mesh.client("chaos", instance="pytest-chaos") as client:
        chaos = Chaos(client, kubemesh_mesh.token)
        try:
            yield chaos
        finally:
            with contextlib.suppress(Exception):
                await chaos.reset()
            await chaos.close()


@pytest.fixture
def kubemesh_history(kubemesh_mesh: KubemeshCluster) -> History:
    """The apiserver's history of the test's mesh."""
    return History(kubemesh_mesh)


@pytest.fixture
def kubemesh_kubectl(kubemesh_mesh: KubemeshCluster, tmp_path: Path) -> Kubectl:
    """A kubectl runner for the test's mesh (skips the test when kubectl is not installed)."""
    binary = shutil.which("kubectl")
    if binary is None:
        pytest.skip("kubectl is not installed")
    return Kubectl(kubemesh_mesh, binary=binary, cache_dir=tmp_path / "kubectl-cache")


__all__ = [
    "ComposeCluster",
    "ComposeStack",
    "History",
    "Kubectl",
    "KubectlError",
    "KubemeshCluster",
    "LocalCluster",
    "MeshRequest",
    "docker_available",
    "kubemesh_chaos",
    "kubemesh_client",
    "kubemesh_history",
    "kubemesh_kubectl",
    "kubemesh_mesh",
    "start_cluster",
]


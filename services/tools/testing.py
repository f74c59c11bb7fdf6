"""Test utilities for a user's own tests, with or without pytest: a mesh for a test, and its handles.

The pytest plugin (`kubemesh.services.tools.pytest_plugin`) is hooks and fixtures over this
module; anything else (unittest, a script, another runner) uses it directly:

    request = MeshRequest(nodes=2, clock_rate=60)
    with start_cluster(request) as cluster:            # local processes; compose=True for Docker
        async def body() -> None:
            async with cluster.client() as client:
                ...
            await cluster.power_off("node-1")
        asyncio.run(body())

What it promises:

* **A mesh not tied to the test's event loop.** A local mesh runs in a thread of its own
  (`MeshThread`): its processes are started, restarted and stopped by that thread's loop, and
  everything a test touches (`client()`, `chaos()`, `history()`, `power_off()`, `restart()`)
  works from any loop or from plain synchronous code. That is what lets one mesh serve a
  whole module or session of tests whatever the tests' own loop scope.
* **Nothing left behind.** `start_cluster` stops what it started on every exit path (a local
  mesh's processes get SIGTERM, then SIGKILL; the compose project is taken down with its
  volumes); children also die with the test process (see `kubemesh.services.mesh.launching`).
* **A documented reset** (`KubemeshCluster.reset`) for meshes shared between tests: every
  fault healed, every node powered on and Ready, every namespace a test made deleted, and
  every object in `default` deleted (the `kubernetes` Service and the `kube-root-ca.crt`
  ConfigMap excepted). Cluster-scoped objects a test made (PriorityClasses, extra Nodes) stay.
* **Evidence.** `save_evidence(dir)` writes the history (`kubemesh-history.jsonl`) and the
  components' logs (`kubemesh-logs/`) where a failed test's report points.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import shutil
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

from kubemesh.services.machinery.client import ApiClient, NotFoundError
from kubemesh.services.mesh.chaos_client import Chaos
from kubemesh.services.mesh.compose import (
    DEFAULT_IMAGE,
    ComposeStack,
    default_compose_file,
    docker_available,
    image_exists,
    testcontainers_missing,
)
from kubemesh.services.mesh.endpoint import History, MeshEndpoint, MeshError, run_blocking
from kubemesh.services.mesh.kubectl import Kubectl
from kubemesh.services.mesh.launching import Mesh, MeshSpec
from kubemesh.services.model.kinds import KINDS, NAMESPACES, PODS, Kind

T = TypeVar("T")
Scope = Literal["function", "module", "session"]
SCOPES: Final[tuple[Scope, ...]] = ("function", "module", "session")

SYSTEM_NAMESPACES: Final = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
"""Namespaces `reset` keeps (it empties `default`)."""
_KEPT_IN_DEFAULT: Final = frozenset({("services", "kubernetes"), ("endpoints", "kubernetes"),
                                    ("endpointslices", "kubernetes"), ("configmaps", "kube-root-ca.crt")})


class ClusterUnavailable(RuntimeError):
    """The kind of mesh asked for cannot run here (no Docker, no image, no testcontainers); says why."""


@dataclass(frozen=True, kw_only=True)
class MeshRequest:
    """The mesh a test asks for (the keyword arguments of `@pytest.mark.kubemesh(...)`)."""

    nodes: int = 3
    kubelets: int = 1
    clock_rate: float = 1.0
    bugs: tuple[str, ...] = ()
    seed: int | None = None
    zones: tuple[str, ...] = ()
    persist: bool = False
    compose: bool | None = None
    """Run as the compose stack in Docker (None: the command line decides)."""
    start_timeout: float = 60.0
    extra_args: Mapping[str, Sequence[str]] = field(default_factory=dict)
    runtime: str | None = None
    """The kubelets' container runtime (`MeshSpec.runtime`); None: the command line decides
    (`--kubemesh-runtime`, default `emulated`)."""
    scope: Scope = "function"
    """Who shares the mesh: one test ("function"), every test of a module asking for the same
    mesh ("module"), or of the whole session ("session"); shared meshes are `reset` between tests."""

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> MeshRequest:
        """Validate keyword arguments (unknown ones are a `ValueError` that names the known ones)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise ValueError(f"unknown arguments {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        kw = dict(kwargs)
        for key in ("bugs", "zones"):
            if key in kw:
                value = kw[key]
                kw[key] = (value,) if isinstance(value, str) else tuple(value)
        if kw.get("scope", "function") not in SCOPES:
            raise ValueError(f"scope must be one of {', '.join(SCOPES)}, not {kw['scope']!r}")
        if "extra_args" in kw:
            kw["extra_args"] = {k: tuple(v) for k, v in dict(kw["extra_args"] or {}).items()}
        return cls(**kw)

    def key(self) -> tuple[Any, ...]:
        """What two requests must share to share a mesh."""
        return (self.nodes, self.kubelets, self.clock_rate, self.bugs, self.seed, self.zones, self.persist,
                self.compose, self.runtime, tuple(sorted((k, tuple(v)) for k, v in self.extra_args.items())))


# ---------------------------------------------------------------------------------------------
# A local mesh in a thread of its own


class MeshThread:
    """A `Mesh` whose processes are driven by an event loop in a thread of its own.

    `start()` and `stop()` block; `call(fn)` runs `fn(mesh)` on the mesh's loop and blocks for
    its result, `acall(fn)` awaits it from any other loop. The thread lives exactly as long as
    the mesh: it is the parent of the mesh's processes (Linux kills them with their parent
    thread), so it is never left before `stop()`.
    """

    def __init__(self, spec: MeshSpec) -> None:
        self.mesh = Mesh(spec)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def start(self) -> Mesh:
        """Start the thread, then the mesh; block until every node is Ready (raises `MeshError`)."""
        self._thread = threading.Thread(target=self._run, name=f"kubemesh-{self.mesh.state_dir.name}", daemon=True)
        self._thread.start()
        self._ready.wait()
        try:
            self.call(lambda mesh: mesh.start())
        except BaseException:
            self.stop()
            raise
        return self.mesh

    def _submit(self, fn: Callable[[Mesh], Awaitable[T]]) -> concurrent.futures.Future[T]:
        if self._loop is None or not self._loop.is_running():
            raise MeshError("the mesh's thread is not running")

        async def run() -> T:
            return await fn(self.mesh)

        return asyncio.run_coroutine_threadsafe(run(), self._loop)

    def call(self, fn: Callable[[Mesh], Awaitable[T]]) -> T:
        """Run `fn(mesh)` on the mesh's loop; block for its result."""
        return self._submit(fn).result()

    async def acall(self, fn: Callable[[Mesh], Awaitable[T]]) -> T:
        """Run `fn(mesh)` on the mesh's loop; await its result from the caller's loop."""
        return await asyncio.wrap_future(self._submit(fn))

    def stop(self) -> None:
        """Stop the mesh (every process), then the thread; idempotent."""
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if loop.is_running():
            with contextlib.suppress(concurrent.futures.CancelledError):
                self.call(lambda mesh: mesh.stop())
            loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        self._loop = self._thread = None


# ---------------------------------------------------------------------------------------------
# The cluster a test gets


class KubemeshCluster:
    """A running kubemesh, local or in Docker: what the fixtures hand out (see the module docstring)."""

    mode: str = ""

    def __init__(self, endpoint: MeshEndpoint) -> None:
        self.endpoint = endpoint
        self._powered_off: set[str] = set()

    @property
    def apiserver_url(self) -> str:
        """The apiserver's URL."""
        return self.endpoint.url

    @property
    def token(self) -> str | None:
        """The bearer token."""
        return self.endpoint.token

    @property
    def kubeconfig_path(self) -> Path:
        """A kubeconfig for kubectl and the official clients."""
        if self.endpoint.kubeconfig is None:
            raise MeshError("this mesh has no kubeconfig")
        return self.endpoint.kubeconfig

    @property
    def ca_path(self) -> Path | None:
        """The CA certificate of the apiserver (None without TLS)."""
        return None

    def client(self, component: str = "test", *, instance: str | None = None) -> ApiClient:
        """A new `ApiClient` (msgpack) identified as `component`; close it after use (`async with`)."""
        return self.endpoint.client(component, instance=instance)

    def chaos(self) -> Chaos:
        """A client of the chaos front door (`async with cluster.chaos() as chaos`)."""
        return self.endpoint.chaos(instance="pytest-chaos")

    def history(self) -> History:
        """The apiserver's history."""
        return History(self.endpoint)

    def kubectl(self, *, binary: str = "kubectl", cache_dir: Path | None = None) -> Kubectl:
        """A kubectl runner for this mesh."""
        return Kubectl(self.kubeconfig_path, binary=binary, cache_dir=cache_dir)

    async def nodes(self) -> list[dict[str, Any]]:
        """Every Node object."""
        return await self.endpoint.nodes()

    async def wait_nodes_ready(self, count: int, *,
                               timeout: float = 60.0) -> list[dict[str, Any]]:  # noqa: ASYNC109 - a deadline
        """Wait until at least `count` nodes are Ready; return the nodes (raises `MeshError`)."""
        return await self.endpoint.wait_nodes_ready(count, timeout=timeout)

    async def power_off(self, node: str) -> Any:
        """Power a node off (heartbeats, lease, status and pod work stop; pods stay in the API).

        Raises `MeshError` when no kubelet hosts the node or it refused.
        """
        out = await self.node_op(node, "power-off")
        self._powered_off.add(node)
        return out

    async def power_on(self, node: str) -> Any:
        """Boot a powered-off node again."""
        out = await self.node_op(node, "power-on")
        self._powered_off.discard(node)
        return out

    async def node_op(self, node: str, op: str, body: Any = None) -> Any:
        """A kubelet admin operation on one node (`POST /nodes/{node}/{op}`); its JSON answer."""
        return await self.endpoint.node_op(node, op, body)

    async def restart(self, component: str) -> None:
        """Stop and start a component (`apiserver`, `scheduler`, `kubelet`, ...) and wait for it."""
        raise NotImplementedError

    async def crash(self, component: str) -> None:
        """Kill a component's process with SIGKILL, as a crash would."""
        raise NotImplementedError

    def logs(self) -> str:
        """Where to look for the components' logs (a path or a command)."""
        return ""

    def save_logs(self, folder: Path) -> Path | None:
        """Copy the components' logs into `folder`; None when there are none to copy."""
        return None

    async def save_evidence(self, folder: Path) -> list[Path]:
        """The history and the logs of the mesh, written into `folder` (what a failed test's report names)."""
        out = [await self.history().write(folder / "kubemesh-history.jsonl")]
        logs = await asyncio.to_thread(self.save_logs, folder / "kubemesh-logs")
        if logs is not None:
            out.append(logs)
        return out

    async def reset(self, *, nodes: int, timeout: float = 60.0) -> None:  # noqa: ASYNC109 - a deadline
        """Bring a shared mesh back to its state after start (see the module docstring)."""
        async with self.chaos() as chaos:
            await chaos.reset()
        for node in sorted(self._powered_off):
            await self.power_on(node)
        async with self.client("kubemesh-reset") as client:
            doomed = [ns["metadata"]["name"] for ns in (await client.list(NAMESPACES)).get("items") or []
                      if ns["metadata"]["name"] not in SYSTEM_NAMESPACES]
            for name in doomed:
                with contextlib.suppress(NotFoundError):
                    await client.delete(NAMESPACES, name)
                # The namespace controller deletes the content; pods go at once (a reset is no
                # graceful shutdown), so that the namespace is gone before the next test.
                for pod in (await client.list(PODS, namespace=name)).get("items") or []:
                    with contextlib.suppress(NotFoundError):
                        await client.delete(PODS, pod["metadata"]["name"], namespace=name, grace_period_seconds=0)
            for kind in _resettable_kinds():
                for obj in (await client.list(kind, namespace="default")).get("items") or []:
                    name = obj["metadata"]["name"]
                    if (kind.plural, name) in _KEPT_IN_DEFAULT:
                        continue
                    with contextlib.suppress(NotFoundError):
                        await client.delete(kind, name, namespace="default",
                                            grace_period_seconds=0 if kind is PODS else None)
            async with asyncio.timeout(timeout):
                while (await client.list(PODS, namespace="default")).get("items"):  # noqa: ASYNC110 - polls the API
                    await asyncio.sleep(0.05)
                names = {ns["metadata"]["name"] for ns in (await client.list(NAMESPACES)).get("items") or []}
                while names & set(doomed):
                    await asyncio.sleep(0.05)
                    names = {ns["metadata"]["name"] for ns in (await client.list(NAMESPACES)).get("items") or []}
        await self.wait_nodes_ready(nodes, timeout=timeout)


def _resettable_kinds() -> list[Kind]:
    """Namespaced kinds a test can create and delete, owners first (pods last: controllers stop first)."""
    kinds = [k for k in KINDS if k.namespaced and k.storage and {"list", "delete"} <= set(k.verbs) and k is not PODS]
    return [*kinds, PODS]


class LocalCluster(KubemeshCluster):
    """A mesh of local processes, in a thread of its own (`MeshThread`)."""

    mode = "local"

    def __init__(self, runner: MeshThread) -> None:
        super().__init__(runner.mesh.endpoint)
        self.runner = runner

    @property
    def mesh(self) -> Mesh:
        """The launcher (drive it through `runner.call`/`acall`: it lives on the mesh's own loop)."""
        return self.runner.mesh

    @property
    def ca_path(self) -> Path | None:
        """See `KubemeshCluster.ca_path`."""
        return self.mesh.ca_path

    async def restart(self, component: str) -> None:
        """See `KubemeshCluster.restart` (`Mesh.restart`)."""
        name = _local_name(component)
        await self.runner.acall(lambda mesh: mesh.restart(name))

    async def crash(self, component: str) -> None:
        """See `KubemeshCluster.crash` (`Mesh.kill`: the local launcher does not restart it)."""
        name = _local_name(component)
        await self.runner.acall(lambda mesh: mesh.kill(name))

    def logs(self) -> str:
        """The folder of the process logs."""
        return str(self.mesh.log_dir)

    def save_logs(self, folder: Path) -> Path | None:
        """Copy `<state_dir>/logs` (one file per process)."""
        if not self.mesh.log_dir.is_dir():
            return None
        shutil.copytree(self.mesh.log_dir, folder, dirs_exist_ok=True)
        return folder


def _local_name(component: str) -> str:
    return {"controller-manager": "controller_manager"}.get(component, component)


class ComposeCluster(KubemeshCluster):
    """A mesh running as a compose stack (`ComposeStack`)."""

    mode = "compose"

    def __init__(self, stack: ComposeStack) -> None:
        super().__init__(stack.endpoint)
        self.stack = stack

    @property
    def ca_path(self) -> Path | None:
        """See `KubemeshCluster.ca_path`."""
        return self.stack.ca_path

    async def node_op(self, node: str, op: str, body: Any = None) -> Any:
        """See `KubemeshCluster.node_op`: inside the kubelet container that registered the node."""
        return await asyncio.to_thread(self.stack.node_op, node, op, body)

    async def restart(self, component: str) -> None:
        """See `KubemeshCluster.restart` (`docker compose restart`, then wait until healthy)."""
        await asyncio.to_thread(self.stack.restart, component.replace("_", "-"))
        await asyncio.to_thread(self.stack.scale_kubelets, self.stack.kubelets)

    async def crash(self, component: str, *, index: int = 1) -> None:
        """See `KubemeshCluster.crash`: SIGKILL inside the container; its restart policy brings it back."""
        await asyncio.to_thread(self.stack.crash, component.replace("_", "-"), index=index)

    def logs(self) -> str:
        """The command that shows the stack's logs."""
        return " ".join([*self.stack.command(), "logs"])

    def save_logs(self, folder: Path) -> Path | None:
        """`docker compose logs` of every service, one file."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "compose.log"
        path.write_text(self.stack.run("logs", "--no-color", "--timestamps", check=False).stdout)
        return path


# ---------------------------------------------------------------------------------------------
# Starting one


def compose_unavailable(image: str) -> str | None:
    """None when compose mode can run here with `image`, else why not (and what to do)."""
    why = docker_available() or testcontainers_missing()
    if why is not None:
        return why
    if not image_exists(image):
        return f"no image {image}: build it from a kubemesh checkout with scripts/docker-setup"
    return None


@contextlib.contextmanager
def start_cluster(request: MeshRequest, *, compose: bool = False, compose_file: Path | None = None,
                  image: str | None = None, state_dir: Path | None = None,
                  runtime: str | None = None) -> Iterator[KubemeshCluster]:
    """Start the cluster a test asked for; stop it (and everything it started) on exit.

    Raises `ClusterUnavailable` (compose mode without Docker, testcontainers or the image) and
    `MeshError` (the mesh did not come up; the message carries the logs' tails).
    """
    if not compose:
        spec = MeshSpec(nodes=request.nodes, kubelets=request.kubelets, zones=request.zones,
                        clock_rate=request.clock_rate, bugs=request.bugs, seed=request.seed,
                        persist=request.persist, start_timeout=request.start_timeout, state_dir=state_dir,
                        extra_args=dict(request.extra_args), stop_grace=3.0,
                        runtime=request.runtime or runtime or "emulated")
        runner = MeshThread(spec)
        runner.start()
        try:
            yield LocalCluster(runner)
        finally:
            runner.stop()
        return
    image = image or os.environ.get("KUBEMESH_IMAGE") or DEFAULT_IMAGE
    why = compose_unavailable(image)
    if why is not None:
        raise ClusterUnavailable(f"kubemesh compose mode: {why}")
    kubelets = max(1, request.kubelets)
    if request.nodes % kubelets:
        raise ValueError(f"compose mode: nodes ({request.nodes}) must be a multiple of kubelets ({kubelets})")
    stack = ComposeStack(compose_file=compose_file or default_compose_file(), image=image,
                         nodes_per_kubelet=request.nodes // kubelets, kubelets=kubelets,
                         clock_rate=request.clock_rate, bugs=request.bugs, seed=request.seed, state_dir=state_dir)
    try:
        stack.start()
        cluster = ComposeCluster(stack)
        run_blocking(cluster.wait_nodes_ready(request.nodes, timeout=request.start_timeout))
        yield cluster
    finally:
        stack.stop()


@contextlib.asynccontextmanager
async def astart_cluster(request: MeshRequest, **options: Any) -> AsyncIterator[KubemeshCluster]:
    """`start_cluster` for async code: the blocking start and stop run in a worker thread."""
    manager = start_cluster(request, **options)
    cluster = await asyncio.to_thread(manager.__enter__)
    try:
        yield cluster
    finally:
        await asyncio.to_thread(manager.__exit__, None, None, None)


class MeshPool:
    """Meshes shared by the tests of one module or session, by what they asked for; stopped together."""

    def __init__(self) -> None:
        self._meshes: dict[tuple[Any, ...], tuple[KubemeshCluster, contextlib.ExitStack]] = {}

    def get(self, request: MeshRequest, start: Callable[[], contextlib.AbstractContextManager[KubemeshCluster]],
            ) -> tuple[KubemeshCluster, bool]:
        """The pool's mesh for `request` (started with `start()` when there is none); whether it is new."""
        key = request.key()
        if key in self._meshes:
            return self._meshes[key][0], False
        stack = contextlib.ExitStack()
        cluster = stack.enter_context(start())
        self._meshes[key] = (cluster, stack)
        return cluster, True

    def close(self) -> None:
        """Stop every mesh of the pool."""
        while self._meshes:
            _, (_, stack) = self._meshes.popitem()
            stack.close()

"""The mesh launcher: start, watch over and stop a whole kubemesh on loopback.

`Mesh` runs every component as its own process, exactly as a user would run them by hand
(`python -m kubemesh.apiserver ...`, `python -m kubemesh.kubelet ...`), and is what `kubemesh up`, the tests and
the pytest plugin build on:

    async with Mesh(MeshSpec(nodes=3, clock_rate=60)) as mesh:
        async with mesh.client() as client:
            nodes = await client.list(NODES)

What it promises:

* **Start order.** The apiserver first (on a free loopback port, until `GET /readyz` answers
  200), then the kubelets (with `MeshSpec.eager`, together with the apiserver), then, once every
  node is Ready, the other components (`MeshSpec.stagger`; without it, with the kubelets);
  `start()` returns when every kubelet's nodes are Ready, every process is spawned and every
  component has registered its admin endpoint with the apiserver (`MeshSpec.wait_registered`). When
  something does not come up within `MeshSpec.start_timeout`, `MeshError` says what (which
  process, which nodes) and carries the tail of the log of any process that crashed.
* **Nothing is left behind.** `stop()` sends SIGTERM (the components first, the apiserver
  last), waits `MeshSpec.stop_grace` seconds and then SIGKILLs; it runs on every exit path of
  `start()` and of `async with`, including errors and cancellation. Children also get
  SIGTERM from the kernel if the launching thread dies (Linux `PR_SET_PDEATHSIG`), and an
  `atexit` hook kills whatever a never-stopped mesh still runs.
* **State on disk.** `<state_dir>/kubeconfig` (a real kubeconfig for kubectl and the official
  clients), `<state_dir>/token` (the bearer token, mode 0600), `<state_dir>/logs/<name>.log`
  (stdout and stderr of every process) and `<state_dir>/mesh.json` (pids, ports, URLs), which
  `kubemesh status` and `kubemesh down` read from another terminal (`read_state`).

This is tooling: it runs on wall time (asyncio sleeps and timeouts), never on the cluster clock.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import importlib.util
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from kubemesh.services.machinery.certs import ensure_certs
from kubemesh.services.mesh.state import (
    KUBECONFIG_FILE,
    LOG_DIR,
    STATE_FILE,
    TOKEN_FILE,
    MeshError,
    describe_nodes,
    free_port,
    log_tail,
    node_is_ready,
    pid_alive,
    process_start_ticks,
    read_state,
    render_kubeconfig,
    state_pids,
    write_private,
    write_state,
)
from kubemesh.services.model import bugs as bug_switches
from kubemesh.services.model import profiles
from kubemesh.services.process import groups
from kubemesh.services.process.runs import LAST_EXIT_ENV, exit_code_of

if TYPE_CHECKING:
    import aiohttp

    from kubemesh.services.machinery.client import ApiClient
    from kubemesh.services.mesh.chaos_client import Chaos
    from kubemesh.services.mesh.endpoint import MeshEndpoint

APISERVER: Final = "apiserver"
ETCD: Final = "etcd"
"""The name of the etcd process a mesh with `store="etcd"` and no endpoints starts itself."""
STORES: Final = ("memory", "etcd")
"""`MeshSpec.store` values."""
ETCD_DIR: Final = "etcd"
"""`<state_dir>/etcd`: the data of the mesh's own etcd."""
KUBELET: Final = "kubelet"
RUNTIMES: Final = ("emulated", "process", "opt-in")
"""The kubelets' container runtimes (`MeshSpec.runtime`)."""
PODS_DIR: Final = "pods"
"""`<state_dir>/pods`: the process runtime's directory."""
CONTROLLER_MANAGER: Final = "controller_manager"
SCHEDULER: Final = "scheduler"

COMPONENTS: Final[tuple[str, ...]] = (APISERVER, KUBELET, CONTROLLER_MANAGER, SCHEDULER)
"""Every component package, in start order (the apiserver alone first, the rest together)."""

_POLL_INTERVAL: Final = 0.02


def _http_errors() -> tuple[type[BaseException], ...]:
    """What a failed HTTP call to a component raises (the launcher retries on these)."""
    # aiohttp (and the client and endpoint modules built on it) are imported only once the
    # first processes are spawned: about 0.3 s of imports that would otherwise delay every
    # process of a cold start, while the cores that run the components' imports sit idle.
    import aiohttp  # noqa: PLC0415 - see above

    return (aiohttp.ClientError, OSError, TimeoutError)


def _new_token() -> str:
    return secrets.token_urlsafe(32)


POD_WATCH_MODES: Final = ("auto", "per-node", "shared")
"""`MeshSpec.pod_watch` values."""
NODES_PER_KUBELET_AUTO: Final = 5_000
"""With `kubelets=0`, one kubelet process per this many nodes (at real cadence about half a core)."""
SHARED_POD_WATCH_ABOVE: Final = 1_000
"""With `pod_watch="auto"`, a kubelet process hosting more nodes than this shares one pod watch."""


@dataclass(frozen=True, kw_only=True)
class MeshSpec:
    """What mesh to run. Every field has a default that gives a small working cluster."""

    nodes: int = 3
    """How many emulated nodes in total."""
    kubelets: int = 1
    """How many kubelet processes host them (raised to one per zone; never more than nodes).
    0: chosen for the node count, one process per `NODES_PER_KUBELET_AUTO` nodes (a process
    hosting ten thousand nodes needs more than one core at real cadence)."""
    zones: tuple[str, ...] = ()
    """Zone names; nodes are spread evenly over them, each zone has its own kubelet processes.
    Empty: no `--zone` flag, the kubelet's default zone."""
    node_prefix: str | None = None
    """`--node-prefix` for every kubelet (None: the kubelet's default)."""
    capacity: str | None = None
    """`--capacity` for every kubelet, e.g. `cpu=8,memory=32Gi,pods=110` (None: default)."""
    clock_rate: float = 1.0
    """Cluster seconds per wall second (`--clock-rate` of the apiserver)."""
    bugs: tuple[str, ...] = ()
    """Bug switches to turn on (`-NAME`: off, though the profile turns it on); each goes to the
    component it belongs to (`--bugs`)."""
    profile: str = "current"
    """The version profile every component runs (`--profile`; `kubemesh.services.model.profiles`):
    the defaults and bug switches of that Kubernetes release."""
    seed: int | None = None
    """`--seed` for every component (None: unseeded)."""
    state_dir: Path | None = None
    """Where the kubeconfig, token, logs and mesh.json go. None: a temporary directory that
    `stop()` removes."""
    log_dir: Path | None = None
    """Where the process logs go (None: `<state_dir>/logs`)."""
    token: str | None = field(default_factory=_new_token)
    """The bearer token for the apiserver, the chaos API and the admin endpoints; generated by
    default. None runs the mesh without authentication."""
    tls: bool | None = None
    """Serve the apiserver over HTTPS with a throwaway CA in `<state_dir>/pki` (the kubeconfig
    carries the CA). None: TLS exactly when there is a token, because kubectl (client-go)
    sends no credentials to a plain http server."""
    components: tuple[str, ...] | None = None
    """Which components to run. None: every component whose package has a `__main__` module
    (a component not written yet is skipped). The apiserver is always needed."""
    extra_args: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """More command-line arguments per component, e.g. `{"controller_manager": ["--profile",
    "1.13"]}`."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment for every process (on top of this process's environment)."""
    modules: Mapping[str, str] = field(default_factory=dict)
    """Run another module for a component (`{"apiserver": "my_fake_apiserver"}`): for tests
    of the launcher itself, or to try a replacement component."""
    persist: bool = False
    """Give the apiserver `--data-dir <state_dir>/data`, so that a restarted apiserver keeps
    its objects."""
    apiserver_port: int = 0
    """The apiserver's port (0: a free loopback port)."""
    log_level: str | None = None
    """`--log-level` for every component except the apiserver (None: their default)."""
    eager: bool = True
    """Start the kubelets (and, without `stagger`, the other components) together with the
    apiserver instead of after its /readyz (they retry `GET /clock` until it answers): the
    interpreters start up in parallel, which roughly halves a cold start. False starts them only
    once the apiserver is ready."""
    stagger: bool = True
    """Start the components that the nodes' readiness does not wait for (the controller-manager,
    the scheduler) only once every node is Ready, instead of with the kubelets: a cold start is
    CPU-bound (every process's imports on a machine that may have two cores), and their imports
    would take a share of it from the apiserver and the kubelets. `start()` still returns only
    once they are spawned (and registered, with `wait_registered`). False starts them with the
    kubelets."""
    wait_registered: bool = True
    """Whether `start()` also waits until every component has registered its admin endpoint
    with the apiserver (chaos needs it). Skipped anyway if the apiserver keeps no registry."""
    start_timeout: float = 60.0
    """Wall seconds `start()` waits for the apiserver, the nodes and the registrations."""
    stop_grace: float = 5.0
    """Wall seconds between SIGTERM and SIGKILL."""
    runtime: str = "emulated"
    """The kubelets' container runtime: `emulated` (no process runs), `process` (every pod's
    containers run as local processes unless annotated `kubemesh.io/runtime: emulated`) or
    `opt-in` (only pods annotated `kubemesh.io/runtime: process`); see
    `kubemesh.kubelet.processes`. The processes' files and group records live in
    `<state_dir>/pods`, and `stop()` kills whatever is recorded there."""
    pod_watch: str = "auto"
    """How each kubelet process's nodes watch their pods: `per-node` (each node its own watch
    and connection, as real kubelets), `shared` (one watch per process, dispatched by
    `spec.nodeName`), or `auto`: per-node for a process hosting at most
    `SHARED_POD_WATCH_ABOVE` nodes, shared above (ten thousand per-node watches are ten
    thousand TLS connections the apiserver must accept and keep; see `KubeletPlan.pod_watch`)."""
    store: str = "memory"
    """Where the apiserver keeps the objects: `memory` (its own process; durable with `persist`)
    or `etcd` (`--storage etcd`: in etcd, the apiserver keeping a watch cache). With `etcd` and no
    `etcd_endpoints` the mesh starts an etcd of its own (`/usr/bin/etcd`, which `scripts/setup`
    installs), its data in `<state_dir>/etcd` (kept across runs only with `persist`)."""
    etcd_endpoints: tuple[str, ...] = ()
    """Client URLs of an etcd to use instead of starting one (`store="etcd"` only)."""
    apiservers: int = 1
    """How many apiserver processes serve the cluster (more than one needs `store="etcd"`, which
    they share, as a highly available control plane). Every other component is pinned to one of
    them, round robin in start order, as kubelets and controllers each talk to one apiserver of
    a real HA control plane; the kubeconfig, `client()` and the chaos front door use the first.
    They share the cluster clock, the token signing key and the component registry through etcd
    (`kubemesh.apiserver.sharedstate`); chaos faults act on the requests of the apiserver they
    were created on."""
    python: str = sys.executable
    """The interpreter that runs the components."""
    die_with_parent: bool = True
    """Have the kernel SIGTERM every component when the launching thread dies (Linux)."""

    def __post_init__(self) -> None:
        if self.nodes < 0:
            raise ValueError("nodes must be >= 0")
        if self.kubelets < 0:
            raise ValueError("kubelets must be >= 1, or 0 to choose by the node count")
        if self.clock_rate <= 0:
            raise ValueError("clock_rate must be positive")
        if self.store not in STORES:
            raise ValueError(f"store must be one of {', '.join(STORES)}, not {self.store!r}")
        if self.etcd_endpoints and self.store != "etcd":
            raise ValueError("etcd_endpoints need store='etcd'")
        if self.apiservers < 1:
            raise ValueError("apiservers must be >= 1")
        if self.apiservers > 1 and self.store != "etcd":
            raise ValueError("several apiservers need a store they share: store='etcd' (`--store etcd`)")
        if self.apiservers > 1 and self.apiserver_port:
            raise ValueError("apiserver_port chooses the port of one apiserver; leave it 0 with several")
        if self.pod_watch not in POD_WATCH_MODES:
            raise ValueError(f"pod_watch must be one of {', '.join(POD_WATCH_MODES)}, not {self.pod_watch!r}")
        if self.runtime not in RUNTIMES:
            raise ValueError(f"runtime must be one of {', '.join(RUNTIMES)}, not {self.runtime!r}")
        if len(set(self.zones)) != len(self.zones) or any(not z for z in self.zones):
            raise ValueError(f"zone names must be distinct and non-empty: {self.zones!r}")
        for name in self.bugs:
            if not bug_switches.is_known(name):
                raise bug_switches.UnknownBugError(
                    f"unknown bug switch {name!r}; `kubemesh bugs` lists them")
        if self.profile not in profiles.PROFILES:
            raise profiles.UnknownProfileError(
                f"unknown profile {self.profile!r}; profiles: {', '.join(profiles.PROFILES)}")
        for comp in (*(self.components or ()), *self.extra_args, *self.modules):
            if comp not in COMPONENTS:
                raise ValueError(f"unknown component {comp!r}; components: {', '.join(COMPONENTS)}")


@dataclass(frozen=True, kw_only=True)
class KubeletPlan:
    """One kubelet process and the nodes it hosts: `nodes` nodes from `node_offset` on."""

    instance: str
    zone: str | None
    node_offset: int
    nodes: int
    pod_watch: str = "per-node"
    """`--pod-watch` of this process (`MeshSpec.pod_watch` resolved for its node count)."""


def auto_kubelets(nodes: int) -> int:
    """Kubelet processes for `nodes` nodes when the count is left to the launcher."""
    return max(1, -(-nodes // NODES_PER_KUBELET_AUTO))


def plan_kubelets(spec: MeshSpec) -> list[KubeletPlan]:
    """Split the nodes over zones and kubelet processes (disjoint, contiguous offset ranges).

    Nodes are spread evenly over the zones; every zone that has nodes gets at least one
    kubelet process, the remaining processes are dealt round-robin over the zones, and no
    process is started without nodes.
    """
    zones: list[str | None] = list(spec.zones) or [None]
    nz = len(zones)
    procs = max(auto_kubelets(spec.nodes) if spec.kubelets == 0 else spec.kubelets, nz)
    plans: list[KubeletPlan] = []
    offset = 0
    for i, zone in enumerate(zones):
        zone_nodes = spec.nodes // nz + (1 if i < spec.nodes % nz else 0)
        zone_procs = min(procs // nz + (1 if i < procs % nz else 0), zone_nodes)
        for j in range(zone_procs):
            count = zone_nodes // zone_procs + (1 if j < zone_nodes % zone_procs else 0)
            watch = spec.pod_watch if spec.pod_watch != "auto" else \
                "shared" if count > SHARED_POD_WATCH_ABOVE else "per-node"
            plans.append(KubeletPlan(instance=f"kubelet-{len(plans)}", zone=zone,
                                     node_offset=offset, nodes=count, pod_watch=watch))
            offset += count
    return plans


def available_components() -> tuple[str, ...]:
    """The components whose package has a `__main__` module, in start order."""
    return tuple(c for c in COMPONENTS if _has_module(f"kubemesh.{c}.__main__"))


def _has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True, kw_only=True)
class ProcessInfo:
    """A snapshot of one process of the mesh."""

    name: str
    """The instance name (`apiserver`, `scheduler`, `controller-manager`, `kubelet-0`, ...)."""
    component: str
    pid: int | None
    """None before the first start."""
    port: int | None
    """The apiserver's port, or the admin endpoint's port once the process registered it."""
    url: str | None
    """The apiserver URL, or the admin URL once registered."""
    log_path: Path
    argv: tuple[str, ...]
    running: bool
    returncode: int | None
    """None while running; negative: killed by that signal."""
    nodes: int = 0
    """For kubelets: how many nodes the process hosts."""
    node_offset: int = 0
    zone: str | None = None


class _Proc:
    """A process of the mesh and the handle on its current incarnation."""

    def __init__(self, *, name: str, component: str, argv: list[str], log_path: Path,
                 plan: KubeletPlan | None = None) -> None:
        self.name = name
        self.component = component
        self.argv = argv
        self.log_path = log_path
        self.plan = plan
        self.proc: asyncio.subprocess.Process | None = None
        self.start_ticks: int | None = None
        self.port: int | None = None
        self.url: str | None = None
        self.apiserver: _Proc | None = None
        """For a component: the apiserver process it talks to (None for the apiserver and etcd)."""
        self.expected_exit = False
        """Set when the mesh itself stopped or killed the process (not a crash)."""

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.returncode is None

    def info(self) -> ProcessInfo:
        rc = self.proc.returncode if self.proc is not None else None
        return ProcessInfo(
            name=self.name, component=self.component,
            pid=self.proc.pid if self.proc is not None else None, port=self.port, url=self.url,
            log_path=self.log_path, argv=tuple(self.argv), running=self.running, returncode=rc,
            nodes=self.plan.nodes if self.plan else 0,
            node_offset=self.plan.node_offset if self.plan else 0,
            zone=self.plan.zone if self.plan else None)

    def describe(self) -> str:
        if self.proc is None:
            return f"{self.name} (not started)"
        rc = self.proc.returncode
        state = "running" if rc is None else (f"killed by signal {-rc}" if rc < 0 else f"exited {rc}")
        return f"{self.name} (pid {self.proc.pid}, {state})"


# ---------------------------------------------------------------------------------------------
# Killing children even when the launcher is gone.

_LIVE_MESHES: weakref.WeakSet[Mesh] = weakref.WeakSet()


@atexit.register
def _kill_leftovers() -> None:  # pragma: no cover - runs at interpreter exit
    for mesh in list(_LIVE_MESHES):
        mesh._kill_now()


def _pdeathsig_preexec() -> Any:
    """A preexec_fn that asks the kernel to SIGTERM the child when its parent thread dies."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    sigterm = int(signal.SIGTERM)

    def preexec() -> None:
        prctl(pr_set_pdeathsig, sigterm, 0, 0, 0)

    return preexec


_PREEXEC: Final = _pdeathsig_preexec()


# ---------------------------------------------------------------------------------------------


class Mesh:
    """A running kubemesh: its processes, its URLs and the files that describe it."""

    def __init__(self, spec: MeshSpec | None = None) -> None:
        self.spec = spec or MeshSpec()
        self._own_state_dir = self.spec.state_dir is None
        self.state_dir = (Path(tempfile.mkdtemp(prefix="kubemesh-")) if self.spec.state_dir is None
                          else Path(self.spec.state_dir)).resolve()
        self.log_dir = (self.spec.log_dir or self.state_dir / LOG_DIR).resolve()
        self.components: tuple[str, ...] = self._choose_components()
        self.kubelet_plans: list[KubeletPlan] = plan_kubelets(self.spec) if KUBELET in self.components else []
        self._procs: list[_Proc] = []
        """Every process, in start order: etcd (when the mesh runs its own), the apiservers, the rest."""
        self._port = 0
        """The first apiserver's port (that of the kubeconfig, `client()` and the chaos front door)."""
        self._etcd_urls: tuple[str, ...] = self.spec.etcd_endpoints
        self.tls: bool = self.spec.tls if self.spec.tls is not None else self.spec.token is not None
        """Whether the apiserver serves HTTPS."""
        self._endpoint: MeshEndpoint | None = None
        self._session: aiohttp.ClientSession | None = None
        self._client_connector: aiohttp.TCPConnector | None = None
        self._started = False
        self._stopped = False
        self.ready_seconds: float | None = None
        """Wall seconds `start()` took, once it returned."""
        self._chaos: Chaos | None = None

    # -- public properties ------------------------------------------------------------------

    @property
    def token(self) -> str | None:
        """The bearer token (None when the mesh runs without authentication)."""
        return self.spec.token

    @property
    def apiserver_url(self) -> str:
        """`https://127.0.0.1:PORT` (`http` without TLS; valid once `start()` chose the port)."""
        if not self._port:
            raise MeshError("the mesh is not started")
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self._port}"

    @property
    def apiserver_urls(self) -> list[str]:
        """Every apiserver's URL, the first one's (`apiserver_url`) first."""
        return [p.url for p in self._procs if p.component == APISERVER and p.url is not None]

    @property
    def etcd_endpoints(self) -> tuple[str, ...]:
        """The etcd the apiservers use (the mesh's own once started, or `MeshSpec.etcd_endpoints`); () without etcd."""
        return self._etcd_urls if self.spec.store == "etcd" else ()

    @property
    def ca_path(self) -> Path | None:
        """The CA certificate that signed the apiserver's serving certificate (None without TLS)."""
        return self.state_dir / "pki" / "ca.crt" if self.tls else None

    @property
    def kubeconfig_path(self) -> Path:
        """`<state_dir>/kubeconfig`."""
        return self.state_dir / KUBECONFIG_FILE

    @property
    def token_path(self) -> Path:
        """`<state_dir>/token`."""
        return self.state_dir / TOKEN_FILE

    @property
    def state_path(self) -> Path:
        """`<state_dir>/mesh.json`."""
        return self.state_dir / STATE_FILE

    @property
    def processes(self) -> list[ProcessInfo]:
        """Every process of the mesh, in start order."""
        return [p.info() for p in self._procs]

    @property
    def endpoint(self) -> MeshEndpoint:
        """How to reach this mesh (valid once `start()` chose the port and wrote the CA)."""
        if self._endpoint is None:
            from kubemesh.services.mesh.endpoint import MeshEndpoint  # noqa: PLC0415 - see _http_errors

            ca = self.ca_path.read_bytes() if self.ca_path is not None else None
            self._endpoint = MeshEndpoint(url=self.apiserver_url, token=self.token, ca_pem=ca,
                                          kubeconfig=self.kubeconfig_path, source=str(self.state_dir))
        return self._endpoint

    async def service_account_kubeconfig(self, namespace: str, name: str, path: Path | None = None, *,
                                         seconds: int = 3600) -> Path:
        """A kubeconfig under which a client runs as ServiceAccount `namespace/name` (created if missing).

        Written to `path` (default `<state_dir>/kubeconfig-<namespace>-<name>`); the token comes
        from the TokenRequest API and expires after `seconds` of cluster time.
        """
        target = path if path is not None else self.state_dir / f"kubeconfig-{namespace}-{name}"
        return await self.endpoint.service_account_kubeconfig(namespace, name, target, seconds=seconds)

    @property
    def chaos(self) -> Chaos:
        """The chaos front door of this mesh (`async with mesh.chaos.fault(...)`, `power_off`...)."""
        if self._chaos is None:
            from kubemesh.services.mesh.chaos_client import Chaos  # noqa: PLC0415 - see _http_errors

            self._chaos = Chaos(self.endpoint.client("chaos", instance="chaos-client", encoding="json",
                                                     connector=self._shared_connector()), owned=True)
        return self._chaos

    def client(self, component: str = "test", *, instance: str | None = None) -> ApiClient:
        """An `ApiClient` for this mesh, identifying itself as `component` (msgpack encoding).

        Every client of a `Mesh` shares one connector that `stop()` closes; use it on the loop
        the mesh was started on (`MeshEndpoint.client` makes clients for any other loop).
        """
        return self.endpoint.client(component, instance=instance, connector=self._shared_connector())

    def _shared_connector(self) -> aiohttp.TCPConnector:
        if self._client_connector is None or self._client_connector.closed:
            self._client_connector = self.endpoint.connector()
        return self._client_connector

    def crashed(self) -> list[ProcessInfo]:
        """Processes that exited although the mesh did not stop or kill them."""
        return [p.info() for p in self._procs
                if p.proc is not None and p.proc.returncode is not None and not p.expected_exit]

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> Mesh:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Start the apiserver, then the other components; return when the nodes are Ready.

        On any failure (or cancellation) every process already started is stopped before the
        error propagates.
        """
        if self._started:
            raise MeshError("a Mesh can be started once; create a new one")
        self._started = True
        t0 = time.monotonic()
        _LIVE_MESHES.add(self)
        try:
            self._prepare_state_dir()
            deadline = t0 + self.spec.start_timeout
            if self.spec.store == "etcd" and not self.spec.etcd_endpoints:
                await self._start_etcd(deadline)
            # Several apiservers: the first one alone until it is ready, so that the others find
            # the start-up objects (RBAC defaults, the `kubernetes` Service) committed and the
            # clock stored, as a restarted apiserver does (kubemesh.apiserver.sharedstate).
            await self._start_apiserver(deadline, wait=not self.spec.eager or self.spec.apiservers > 1)
            for index in range(1, self.spec.apiservers):
                extra = self._new_apiserver(index)
                self._procs.append(extra)
                await self._spawn(extra)
            self._write_client_files()
            apiservers = [p for p in self._procs if p.component == APISERVER]
            pins = dict(self._pins())
            others = [self._make_proc(c, plan, apiserver=apiservers[pins[instance]])
                      for c, plan, instance in self._others()]
            self._procs.extend(others)
            first = [p for p in others if p.component == KUBELET] if self.spec.stagger else others
            later = [p for p in others if p not in first]
            await asyncio.gather(*(self._spawn(p) for p in first))
            self._write_state()
            for p in apiservers:
                await self._wait_apiserver_ready(p, deadline)
            if later:  # MeshSpec.stagger: listed from the start (not started yet), spawned once the nodes are Ready
                await self._wait_nodes(deadline)
                await asyncio.gather(*(self._spawn(p) for p in later))
                self._write_state()
            await self._wait_started(deadline)
            self._write_state()
        except BaseException:
            await self.stop()
            raise
        self.ready_seconds = time.monotonic() - t0

    async def stop(self) -> None:
        """Stop every process (components first, the apiserver last); idempotent.

        SIGTERM, then SIGKILL after `spec.stop_grace`; cancellation while waiting SIGKILLs at once.
        """
        if self._stopped:
            return
        self._stopped = True
        if self._chaos is not None:
            await self._chaos.close()
            self._chaos = None
        try:
            await self._terminate([p for p in self._procs if p.component not in (APISERVER, ETCD)])
            await self._terminate([p for p in self._procs if p.component == APISERVER])
            await self._terminate([p for p in self._procs if p.component == ETCD])
        finally:
            self._kill_now()
            # A kubelet killed before it stopped its containers leaves them recorded here.
            groups.reap(self.state_dir / PODS_DIR)
            _LIVE_MESHES.discard(self)
            if self._session is not None:
                await self._session.close()
                self._session = None
            if self._client_connector is not None:
                await self._client_connector.close()
                self._client_connector = None
            with contextlib.suppress(OSError):
                self.state_path.unlink()
            if self._own_state_dir:
                shutil.rmtree(self.state_dir, ignore_errors=True)

    async def kill(self, name: str) -> list[ProcessInfo]:
        """SIGKILL the processes of a component (`kubelet`) or one instance (`kubelet-1`).

        Waits until they are reaped (no zombie); returns what was killed.
        """
        procs = self._select(name)
        for p in procs:
            p.expected_exit = True
            self._signal(p, signal.SIGKILL)
        await asyncio.gather(*(p.proc.wait() for p in procs if p.proc is not None))
        self._write_state()
        return [p.info() for p in procs]

    async def restart(self, name: str, *,
                      timeout: float | None = None) -> list[ProcessInfo]:  # noqa: ASYNC109 - a deadline
        """Stop (SIGTERM, grace, SIGKILL) and start again the processes named by `name`.

        The apiserver comes back on the same port (with `MeshSpec.persist` or etcd, with its
        objects); the call waits for its /readyz. The mesh's own etcd comes back on its ports with
        its data, and the call waits for its /health. A restarted component is waited for until it has
        registered again (when the apiserver keeps a registry), a restarted kubelet also until
        every node is Ready.
        """
        procs = self._select(name)
        deadline = time.monotonic() + (self.spec.start_timeout if timeout is None else timeout)
        before = await self._registry_or_none()
        await self._terminate([p for p in procs if p.component not in (APISERVER, ETCD)])
        await self._terminate([p for p in procs if p.component == APISERVER])
        await self._terminate([p for p in procs if p.component == ETCD])
        for p in procs:
            if p.component == ETCD:
                await self._spawn(p, append=True)
                await self._wait_etcd_ready(p, deadline)
        for p in procs:
            if p.component == APISERVER:
                await self._spawn(p, append=True)
                await self._wait_apiserver_ready(p, deadline)
        others = [p for p in procs if p.component not in (APISERVER, ETCD)]
        await asyncio.gather(*(self._spawn(p, append=True) for p in others))
        self._write_state()
        if others and self.spec.wait_registered:
            await self._wait_registered(others, deadline, before=before)
        if any(p.component == KUBELET for p in procs):
            await self._wait_nodes(deadline)
        self._write_state()
        return [p.info() for p in procs]

    async def wait_nodes_ready(self, count: int, *,
                               timeout: float) -> list[dict[str, Any]]:  # noqa: ASYNC109 - a deadline
        """Wait until at least `count` nodes are Ready; return the nodes. Raises MeshError."""
        return await self.endpoint.wait_nodes_ready(count, timeout=timeout)

    async def wait_exit(self) -> ProcessInfo:
        """Wait until any process exits without the mesh stopping it (a crash); return it."""
        while True:
            waits = {asyncio.ensure_future(p.proc.wait()): p for p in self._procs
                     if p.proc is not None and p.running}
            if not waits:
                await asyncio.sleep(3600)
                continue
            try:
                done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for fut in waits:
                    fut.cancel()
            for fut in done:
                p = waits[fut]
                if not p.expected_exit:
                    return p.info()
            await asyncio.sleep(0)

    # -- internals ----------------------------------------------------------------------------

    def choices(self) -> list[str]:
        """What the launcher chose for the node count, in words (`kubemesh up` prints them)."""
        out: list[str] = []
        if self.spec.store == "etcd":
            own = (f"an etcd of the mesh's own, data in {self.state_dir / ETCD_DIR}" if not self.spec.etcd_endpoints
                   else ", ".join(self.spec.etcd_endpoints))
            out.append(f"objects stored in etcd: {own}")
        if self.spec.apiservers > 1:
            pins = ", ".join(f"{instance} -> {_apiserver_name(index)}" for instance, index in self._pins())
            out.append(f"{self.spec.apiservers} apiservers over one etcd; each other process talks to one: {pins}")
        if self.spec.kubelets == 0 and len(self.kubelet_plans) > 1:
            out.append(f"{len(self.kubelet_plans)} kubelet processes for {self.spec.nodes:,} nodes (one per "
                       f"{NODES_PER_KUBELET_AUTO:,} nodes or zone; --kubelets N chooses)")
        if self.spec.pod_watch == "auto":
            shared = [p.instance for p in self.kubelet_plans if p.pod_watch == "shared"]
            if shared:
                who = f"{shared[0]} hosts" if len(shared) == 1 else f"{', '.join(shared)} host"
                out.append(f"{who} more than {SHARED_POD_WATCH_ABOVE:,} nodes: one pod watch per kubelet process, "
                           f"not one per node (--pod-watch per-node keeps one per node)")
        return out

    def _others(self) -> list[tuple[str, KubeletPlan | None, str]]:
        """(component, kubelet plan, instance) of every process but etcd and the apiservers, in start order."""
        return [(c, plan, plan.instance if plan is not None else c.replace("_", "-"))
                for c in self.components if c != APISERVER
                for plan in (self.kubelet_plans if c == KUBELET else [None])]

    def _pins(self) -> list[tuple[str, int]]:
        """Which apiserver (by index) each other process talks to: round robin in start order."""
        return [(instance, i % self.spec.apiservers) for i, (_, _, instance) in enumerate(self._others())]

    def _choose_components(self) -> tuple[str, ...]:
        wanted = self.spec.components
        if wanted is None:
            found = tuple(c for c in COMPONENTS if _has_module(self._module(c)))
        else:
            missing = [c for c in wanted if not _has_module(self._module(c))]
            if missing:
                raise MeshError(f"no `python -m` entry point for: {', '.join(missing)}")
            found = tuple(c for c in COMPONENTS if c in wanted)
        if APISERVER not in found:
            raise MeshError(f"the mesh needs the apiserver, but `{self._module(APISERVER)}` has no "
                            "__main__ module")
        return found

    def _module(self, component: str) -> str:
        mod = self.spec.modules.get(component)
        return mod if mod else f"kubemesh.{component}.__main__"

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            import aiohttp  # noqa: PLC0415 - see _http_errors

            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5.0),
                                                  connector=self.endpoint.connector())
        return self._session

    def _prepare_state_dir(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        prior = read_state(self.state_dir)
        if prior is not None:
            alive = [p for p in state_pids(prior) if pid_alive(p[0], p[1])]
            if alive:
                raise MeshError(f"a mesh is already running from {self.state_dir} (pids "
                                f"{', '.join(str(p[0]) for p in alive)}); run `kubemesh down "
                                f"--state-dir {self.state_dir}` first")
            self.state_path.unlink(missing_ok=True)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.pop("KUBEMESH_TOKEN", None)
        env["KUBEMESH_BUGS"] = ",".join(self.spec.bugs)
        env[profiles.ENV_VAR] = self.spec.profile
        env["PYTHONUNBUFFERED"] = "1"
        if self.ca_path is not None:
            # Components' HTTP clients trust the mesh CA: Python's default SSL context reads
            # SSL_CERT_FILE; KUBEMESH_CA_FILE names it for components that load it themselves.
            env["SSL_CERT_FILE"] = env["KUBEMESH_CA_FILE"] = str(self.ca_path)
        env.update(self.spec.env)
        return env

    def _common_args(self, component: str, instance: str, *, apiserver: str) -> list[str]:
        args = ["--apiserver", apiserver, "--instance", instance, "--admin-port", "0"]
        if self.token is not None:
            args += ["--token-file", str(self.token_path)]
        own = [b for b in self.spec.bugs if bug_switches.BY_NAME[b.removeprefix("-")].component == component]
        if own:  # `--bugs=` form: a value may start with "-" (a switch turned off)
            args += [f"--bugs={','.join(own)}"]
        if self.spec.profile != profiles.DEFAULT_PROFILE:
            args += ["--profile", self.spec.profile]
        if self.spec.seed is not None:
            args += ["--seed", str(self.spec.seed)]
        if self.spec.log_level:
            args += ["--log-level", self.spec.log_level]
        return args

    def _launch_prefix(self, component: str) -> list[str]:
        mod = self._module(component)
        mod = mod.removesuffix(".__main__")
        return [self.spec.python, "-m", mod]

    def _make_proc(self, component: str, plan: KubeletPlan | None, *, apiserver: _Proc) -> _Proc:
        instance = plan.instance if plan is not None else component.replace("_", "-")  # as _others
        assert apiserver.url is not None
        argv = [*self._launch_prefix(component), *self._common_args(component, instance, apiserver=apiserver.url)]
        if plan is not None:
            argv += ["--nodes", str(plan.nodes), "--node-offset", str(plan.node_offset)]
            if plan.zone is not None:
                argv += ["--zone", plan.zone]
            if plan.pod_watch != "per-node":
                argv += ["--pod-watch", plan.pod_watch]
            if self.spec.node_prefix is not None:
                argv += ["--node-prefix", self.spec.node_prefix]
            if self.spec.capacity is not None:
                argv += ["--capacity", self.spec.capacity]
            if self.spec.runtime != "emulated":
                argv += ["--runtime", self.spec.runtime, "--runtime-dir", str(self.state_dir / PODS_DIR)]
        argv += list(self.spec.extra_args.get(component, ()))
        proc = _Proc(name=instance, component=component, argv=argv,
                     log_path=self.log_dir / f"{instance}.log", plan=plan)
        proc.apiserver = apiserver
        return proc

    def _url_of(self, port: int) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{port}"

    def _new_apiserver(self, index: int, *, port: int = 0) -> _Proc:
        """Apiserver number `index` (`apiserver`, `apiserver-1`, ...) on `port` (0: a free one)."""
        name = _apiserver_name(index)
        p = _Proc(name=name, component=APISERVER, argv=[], log_path=self.log_dir / f"{name}.log")
        p.port = port or free_port()
        p.url = self._url_of(p.port)
        p.argv = self._apiserver_argv(p)
        return p

    def _apiserver_argv(self, p: _Proc) -> list[str]:
        argv = [*self._launch_prefix(APISERVER), "--host", "127.0.0.1", "--port", str(p.port),
                "--clock-rate", repr(self.spec.clock_rate)]
        if self.spec.store == "etcd":
            argv += ["--storage", "etcd", "--etcd-endpoints", ",".join(self._etcd_urls)]
        if self.token is not None:
            argv += ["--token-file", str(self.token_path)]
        if self.tls:
            pki = self.state_dir / "pki"
            argv += ["--tls-cert-file", str(pki / "apiserver.crt"),
                     "--tls-private-key-file", str(pki / "apiserver.key")]
        if self.spec.persist and self.spec.store == "memory":
            argv += ["--data-dir", str(self.state_dir / "data")]
        if self.spec.seed is not None:
            argv += ["--seed", str(self.spec.seed)]
        own = [b for b in self.spec.bugs if bug_switches.BY_NAME[b.removeprefix("-")].component == APISERVER]
        if own:
            argv += [f"--bugs={','.join(own)}"]
        if self.spec.profile != profiles.DEFAULT_PROFILE:
            argv += ["--profile", self.spec.profile]
        argv += list(self.spec.extra_args.get(APISERVER, ()))
        return argv

    async def _start_apiserver(self, deadline: float, *, wait: bool = True) -> None:
        if self.token is not None:
            write_private(self.token_path, self.token + "\n")
        if self.tls:
            ensure_certs(self.state_dir / "pki")
        attempts = 1 if self.spec.apiserver_port or not wait else 3
        for attempt in range(attempts):
            p = self._new_apiserver(0, port=self.spec.apiserver_port)
            self._port = p.port or 0
            self._endpoint = None
            self._procs = [q for q in self._procs if q.component != APISERVER] + [p]
            await self._spawn(p, append=attempt > 0)
            if not wait:
                return
            try:
                await self._wait_apiserver_ready(p, deadline)
                return
            except MeshError:
                # Another process may have taken the free port between our probe and its bind.
                if attempt + 1 < attempts and not p.running and _address_in_use(log_tail(p.log_path)):
                    continue
                raise

    async def _start_etcd(self, deadline: float) -> None:
        """Start the mesh's own etcd (`MeshSpec.store` etcd without endpoints) and wait for its /health."""
        binary = etcd_binary()
        if binary is None:
            raise MeshError("`--store etcd` without endpoints runs an etcd of the mesh's own, and etcd is not "
                            "installed: scripts/setup (or scripts/etcd-setup) installs it, or give --etcd-endpoints")
        data = self.state_dir / ETCD_DIR
        if not self.spec.persist:
            shutil.rmtree(data, ignore_errors=True)
        data.mkdir(parents=True, exist_ok=True)
        port, peer = free_port(), free_port()
        url, peer_url = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{peer}"
        argv = [binary, "--name", "kubemesh", "--data-dir", str(data / "member-data"),
                "--listen-client-urls", url, "--advertise-client-urls", url,
                "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
                "--initial-cluster", f"kubemesh={peer_url}",
                # Bookmarks for the watch cache (kubemesh.apiserver.etcdcache), as kube-apiserver needs.
                "--experimental-watch-progress-notify-interval", "1s",
                "--log-level", "warn", "--logger", "zap"]
        p = _Proc(name=ETCD, component=ETCD, argv=argv, log_path=self.log_dir / "etcd.log")
        p.port, p.url = port, url
        self._etcd_urls = (url,)
        self._procs.insert(0, p)
        await self._spawn(p)
        await self._wait_etcd_ready(p, deadline)

    async def _wait_etcd_ready(self, p: _Proc, deadline: float) -> None:
        import aiohttp  # noqa: PLC0415 - see _http_errors

        errors = _http_errors()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1.0)) as session:
            while True:
                if not p.running:
                    raise self._crash_error(p, "etcd exited before it was ready")
                with contextlib.suppress(*errors):
                    async with session.get(f"{p.url}/health") as resp:
                        if resp.status == 200:
                            return
                if time.monotonic() >= deadline:
                    raise MeshError(f"{p.describe()} did not answer {p.url}/health with 200 within "
                                    f"{self.spec.start_timeout:.1f} s\n--- {p.log_path} (tail) ---\n"
                                    f"{log_tail(p.log_path)}")
                await asyncio.sleep(_POLL_INTERVAL * 5)

    async def _spawn(self, p: _Proc, *, append: bool = False) -> None:
        if p.component == APISERVER:
            p.argv = self._apiserver_argv(p)
        p.expected_exit = False
        if p.component not in (APISERVER, ETCD):  # learnt again from its registration
            p.url = p.port = None
        env = self._env()
        if p.proc is not None and p.proc.returncode is not None:  # a restart: the new run reports the old one's end
            env[LAST_EXIT_ENV] = str(exit_code_of(p.proc.returncode))
        log = p.log_path.open("ab" if append else "wb")
        try:
            if append:
                log.write(f"\n----- kubemesh: restarting {p.name} -----\n".encode())
                log.flush()
            p.proc = await asyncio.create_subprocess_exec(
                *p.argv, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=asyncio.subprocess.STDOUT,
                env=env, cwd=str(self.state_dir), start_new_session=True,
                preexec_fn=_PREEXEC if self.spec.die_with_parent else None)
        finally:
            log.close()
        p.start_ticks = process_start_ticks(p.proc.pid)

    async def _wait_apiserver_ready(self, p: _Proc, deadline: float) -> None:
        import aiohttp  # noqa: PLC0415 - see _http_errors

        url = f"{p.url}/readyz"
        errors = _http_errors()
        while True:
            if not p.running:
                who = "the apiserver" if p.name == APISERVER else p.name
                raise self._crash_error(p, f"{who} exited before it was ready")
            try:
                async with self._http().get(url, headers=self.endpoint.headers(component="launcher"),
                                            timeout=aiohttp.ClientTimeout(total=1.0)) as resp:
                    if resp.status == 200:
                        return
            except errors:
                pass
            if time.monotonic() >= deadline:
                raise MeshError(f"{p.describe()} did not answer {url} with 200 within "
                                f"{self.spec.start_timeout:.1f} s\n--- {p.log_path} (tail) ---\n"
                                f"{log_tail(p.log_path)}")
            await asyncio.sleep(_POLL_INTERVAL)

    async def _wait_started(self, deadline: float) -> None:
        others = [p for p in self._procs if p.component not in (APISERVER, ETCD)]
        if not self.spec.wait_registered:
            others = []
        await asyncio.gather(self._wait_nodes(deadline), self._wait_registered(others, deadline))

    def _check_alive(self) -> None:
        for p in self._procs:
            if p.proc is not None and not p.running and not p.expected_exit:
                raise self._crash_error(p, f"{p.name} exited during start-up")

    async def _wait_nodes(self, deadline: float) -> None:
        total = sum(plan.nodes for plan in self.kubelet_plans)
        last: list[dict[str, Any]] = []
        last_error = ""
        errors = _http_errors()
        while True:
            self._check_alive()
            try:
                last = await self.endpoint.nodes(session=self._http())
                last_error = ""
            except errors as exc:
                last_error = f"{type(exc).__name__}: {exc}"
            if sum(1 for n in last if node_is_ready(n)) >= total:
                return
            if time.monotonic() >= deadline:
                kubelets = "; ".join(
                    f"{p.describe()} hosting {p.plan.nodes} nodes from offset {p.plan.node_offset}"
                    + (f" in zone {p.plan.zone}" if p.plan.zone else "")
                    for p in self._procs if p.plan is not None)
                tails = "".join(f"\n--- {p.log_path} (tail) ---\n{log_tail(p.log_path, 15)}"
                                for p in self._procs if p.plan is not None)
                raise MeshError(
                    f"not every node became Ready within {self.spec.start_timeout:.1f} s: expected "
                    f"{total}, {describe_nodes(last, expected=total)}"
                    f"{'; last error: ' + last_error if last_error else ''}; kubelets: {kubelets}{tails}")
            await asyncio.sleep(_POLL_INTERVAL * 2)

    async def _registry_or_none(self) -> dict[str, dict[str, Any]] | None:
        try:
            return await self.endpoint.components(session=self._http())
        except _http_errors():
            return None

    async def _wait_registered(self, procs: list[_Proc], deadline: float, *,
                               before: dict[str, dict[str, Any]] | None = None) -> None:
        """Wait until every process in `procs` is in the apiserver's component registry.

        With `before`, an entry counts only once its admin URL differs from the one it had
        (a restarted process registers a new endpoint). Skipped if the apiserver has no registry.
        """
        pending = {p.name: p for p in procs}
        errors = _http_errors()
        while pending:
            self._check_alive()
            try:
                registry = await self.endpoint.components(session=self._http())
            except errors:
                registry = {}
            if registry is None:
                return
            for name, entry in registry.items():
                p = pending.get(name)
                url = entry.get("adminURL") or entry.get("adminUrl") or entry.get("url")
                old = (before or {}).get(name, {})
                if p is None or (before is not None and url == (old.get("adminURL") or old.get("url"))):
                    continue
                p.url = str(url) if url else None
                p.port = _port_of(p.url)
                del pending[name]
            if not pending:
                return
            if time.monotonic() >= deadline:
                raise MeshError("not registered with the apiserver (PUT /kubemesh/v1/components/...) "
                                f"within {self.spec.start_timeout:.1f} s: "
                                + ", ".join(p.describe() for p in pending.values())
                                + "".join(f"\n--- {p.log_path} (tail) ---\n{log_tail(p.log_path, 15)}"
                                          for p in pending.values()))
            await asyncio.sleep(_POLL_INTERVAL * 2)

    def _crash_error(self, p: _Proc, what: str) -> MeshError:
        return MeshError(f"{what}: {p.describe()}\n--- {p.log_path} (tail) ---\n{log_tail(p.log_path)}")

    def _select(self, name: str) -> list[_Proc]:
        procs = [p for p in self._procs if name in (p.name, p.component)]
        if not procs:
            names = sorted({p.name for p in self._procs} | {p.component for p in self._procs})
            raise MeshError(f"no process or component named {name!r}; known: {', '.join(names)}")
        return procs

    @staticmethod
    def _signal(p: _Proc, sig: signal.Signals) -> None:
        if p.proc is None or p.proc.returncode is not None:
            return
        # The child leads its own process group (start_new_session): signal the group, so that
        # anything it spawned goes too. Never `Process.send_signal`: Popen polls (reaps) the
        # child there, behind the back of asyncio's child watcher, which then loses the exit
        # status. The pid cannot have been reused: the watcher has not reaped it yet.
        try:
            os.killpg(p.proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.proc.pid, sig)

    async def _terminate(self, procs: list[_Proc]) -> None:
        """SIGTERM, wait for the grace period, SIGKILL; always reaps."""
        live = [p for p in procs if p.running]
        for p in procs:
            p.expected_exit = True
        if not live:
            return
        for p in live:
            self._signal(p, signal.SIGTERM)
        waits = [p.proc.wait() for p in live if p.proc is not None]
        try:
            async with asyncio.timeout(self.spec.stop_grace):
                await asyncio.gather(*waits)
        except TimeoutError:
            pass
        except BaseException:
            for p in live:
                self._signal(p, signal.SIGKILL)
            raise
        for p in live:
            self._signal(p, signal.SIGKILL)
        await asyncio.gather(*(p.proc.wait() for p in live if p.proc is not None))

    def _kill_now(self) -> None:
        """SIGKILL every live process without waiting (last resort, also from atexit)."""
        for p in self._procs:
            p.expected_exit = True
            self._signal(p, signal.SIGKILL)

    def _write_client_files(self) -> None:
        ca = self.ca_path.read_bytes() if self.ca_path is not None else None
        write_private(self.kubeconfig_path,
                       render_kubeconfig(server=self.apiserver_url, token=self.token, ca_pem=ca))

    def _write_state(self) -> None:
        spec = asdict(replace(self.spec, token=None))
        spec = {k: (str(v) if isinstance(v, Path) else v) for k, v in spec.items()}
        doc = {
            "apiVersion": "kubemesh/v1",
            "kind": "Mesh",
            "launcher": {"pid": os.getpid(), "startTicks": process_start_ticks(os.getpid())},
            "apiserver": self.apiserver_url,
            "apiservers": self.apiserver_urls,
            "etcd": list(self.etcd_endpoints),
            "stateDir": str(self.state_dir),
            "kubeconfig": str(self.kubeconfig_path),
            "tokenFile": str(self.token_path) if self.token is not None else None,
            "caFile": str(self.ca_path) if self.ca_path is not None else None,
            "spec": spec,
            "processes": [
                {"name": p.name, "component": p.component,
                 "pid": p.proc.pid if p.proc is not None else None,
                 "startTicks": p.start_ticks, "running": p.running, "port": p.port, "url": p.url,
                 "log": str(p.log_path), "argv": p.argv,
                 **({"apiserver": p.apiserver.name} if p.apiserver is not None else {}),
                 **({"nodes": p.plan.nodes, "nodeOffset": p.plan.node_offset, "zone": p.plan.zone}
                    if p.plan else {})}
                for p in self._procs
            ],
        }
        write_state(self.state_dir, doc)


def _apiserver_name(index: int) -> str:
    """The process name of apiserver number `index`: `apiserver`, `apiserver-1`, `apiserver-2`, ..."""
    return APISERVER if index == 0 else f"{APISERVER}-{index}"


def etcd_binary() -> str | None:
    """The etcd server a mesh starts for `store="etcd"` (Debian's, which `scripts/etcd-setup` installs), or None."""
    found = shutil.which("etcd")
    if found:
        return found
    return "/usr/bin/etcd" if Path("/usr/bin/etcd").exists() else None


def _port_of(url: str | None) -> int | None:
    if not url:
        return None
    try:
        return urlsplit(url).port
    except ValueError:
        return None


def _address_in_use(text: str) -> bool:
    low = text.lower()
    return "address already in use" in low or "errno 98" in low or "eaddrinuse" in low

"""What a scenario is, and the context it runs in.

A `Scenario` names a historic race (upstream issues, the bug switches of its buggy mode), says
what mesh it needs (`MeshShape`) and implements `async def run(ctx) -> Verdict`. It talks to
the cluster only through public surfaces: the Kubernetes API (`ctx.client`), the kubelets'
admin endpoints (`ctx.power_off(node)`, `ctx.set_condition(...)`), the chaos front door
(`ctx.fault(spec)`) and the components' read-only debug routes.

Time: every deadline a scenario states is in cluster seconds (`ctx.until(..., within=40)`);
the mesh's clock runs `MeshShape.clock_rate` times faster than wall time, so the five-minute
eviction timelines of the seed documents take seconds. `ctx.now()` is cluster time as the
apiserver publishes it, the same time base as the history's records.

Verdicts are three-valued: `reproduced` (the bug's symptom was observed, with the evidence that
it came from the bug's mechanism), `prevented` (the healthy outcome was observed in time), and
`inconclusive` (neither could be established; never a guess).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final, Literal, TypeVar

import aiohttp

from services.clock import ClusterClock
from services.kinds import EVENTS, NODES, PODS, Obj

if TYPE_CHECKING:
    from services.client import ApiClient
    from services.launching import Mesh

Outcome = Literal["reproduced", "prevented", "inconclusive"]
Mode = Literal["buggy", "fixed"]
MODES: Final[tuple[Mode, ...]] = ("buggy", "fixed")
EXPECTED: Final[Mapping[Mode, Outcome]] = {"buggy": "reproduced", "fixed": "prevented"}
"""The outcome each mode must have: the old code shows the race, the fix prevents it."""

T = TypeVar("T")


class ScenarioError(RuntimeError):
    """The scenario could not set up what it needs (the run is inconclusive, with this reason)."""


@dataclass(frozen=True, kw_only=True)
class MeshShape:
    """The mesh a scenario needs (turned into a `services.launching.MeshSpec` by the runner)."""

    nodes: int = 3
    zones: tuple[str, ...] = ()
    kubelets: int = 1
    capacity: str | None = None
    clock_rate: float = 60.0
    """Cluster seconds per wall second; the CLI's `--clock-rate` overrides it."""
    extra_args: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """More flags per component, e.g. `{"controller_manager": ["--node-monitor-grace-period", "40s"]}`."""


@dataclass(frozen=True, kw_only=True)
class Moment:
    """A key moment of a run, annotated on the timeline (cluster time)."""

    time: float
    label: str
    lane: str | None = None


@dataclass(kw_only=True)
class Window:
    """A fault window (cluster time; `end` None = still open when the run ended)."""

    start: float
    label: str
    end: float | None = None
    lane: str | None = None


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """What a run showed: the outcome, in words, with the evidence."""

    outcome: Outcome
    summary: str
    """One or two sentences: what happened, to which object, when, and the component's error."""
    evidence: tuple[str, ...] = ()
    """Supporting facts, one per line."""


class Scenario(ABC):
    """One historic race (see the module docstring)."""

    name: ClassVar[str]
    """The fixed scenario name (`kubemesh scenario run NAME`)."""
    summary: ClassVar[str]
    """One line for `kubemesh scenario list`."""
    upstream: ClassVar[tuple[str, ...]] = ()
    """Upstream issues and fixes, e.g. `("kubernetes#50813", "kubernetes#53647")`."""
    bugs: ClassVar[tuple[str, ...]] = ()
    """Bug switches turned on in buggy mode (fixed mode runs with none)."""
    needs_chaos: ClassVar[bool] = False
    """Whether the scenario needs the chaos front door (`/chaos/v1/faults`)."""
    shape: ClassVar[MeshShape] = MeshShape()
    deadline: ClassVar[float] = 600.0
    """Cluster seconds after which the runner gives up on `run` (inconclusive)."""

    def mesh_shape(self, mode: Mode) -> MeshShape:
        """The mesh for a mode (the same for both unless a scenario says otherwise)."""
        return self.shape

    @abstractmethod
    async def run(self, ctx: ScenarioContext) -> Verdict:
        """Set up, inject, observe; return the verdict."""


# ---------------------------------------------------------------------------------------------


class ScenarioContext:
    """Everything a running scenario uses: the mesh, a client, time, node operations, faults.

    It also collects what the report shows besides the history: key moments (`mark`), fault
    windows (node operations and faults made through it) and the objects the timeline should
    focus on (`focus`).
    """

    def __init__(self, *, mesh: Mesh, client: ApiClient, clock: ClusterClock, mode: Mode, seed: int,
                 session: aiohttp.ClientSession, log: Callable[[str], None] | None = None) -> None:
        self.mesh = mesh
        self.client = client
        self.clock = clock
        self.mode = mode
        self.seed = seed
        self.rng = random.Random(seed)
        self.session = session
        self.t0 = clock.now()
        self.moments: list[Moment] = []
        self.windows: list[Window] = []
        self.focus_keys: set[tuple[str, str]] = set()
        """(resource, key) pairs the timeline shows."""
        self.lines: list[str] = []
        """A log of what the scenario did (cluster time relative to the start)."""
        self._log = log
        self._admin: dict[str, str] | None = None
        self._records: list[dict[str, Any]] = []
        self._node_admin: dict[str, str] = {}

    # -- time ---------------------------------------------------------------------------------

    def now(self) -> float:
        """Cluster time (absolute, as the history's `time`)."""
        return self.clock.now()

    def elapsed(self) -> float:
        """Cluster seconds since the scenario started."""
        return self.clock.now() - self.t0

    async def sleep(self, seconds: float) -> None:
        """Sleep for cluster seconds."""
        await self.clock.sleep(seconds)

    async def until(self, probe: Callable[[], Awaitable[T | None]], *, within: float,
                    poll: float = 0.02) -> T | None:
        """Call `probe` until it returns something truthy; None after `within` cluster seconds.

        `poll` is in wall seconds (polling is tooling, not cluster behaviour). The probe is
        always called at least once, and once more at the deadline.
        """
        deadline = self.now() + within
        while True:
            value = await probe()
            if value:
                return value
            if self.now() >= deadline:
                return None
            await asyncio.sleep(min(poll, max(0.0, self.clock.to_wall(deadline - self.now()))))

    # -- the report's annotations ------------------------------------------------------------------

    def say(self, text: str) -> None:
        """Log one step of the scenario (kept in the report)."""
        line = f"[t={self.elapsed():8.1f}s] {text}"
        self.lines.append(line)
        if self._log is not None:
            self._log(line)

    def mark(self, label: str, *, lane: str | None = None, at: float | None = None) -> Moment:
        """Annotate a key moment on the timeline (now, or at cluster time `at`)."""
        m = Moment(time=self.now() if at is None else at, label=label, lane=lane)
        self.moments.append(m)
        return m

    def open_window(self, label: str, *, lane: str | None = None) -> Window:
        """Start a shaded fault window (close it with `close_window`)."""
        w = Window(start=self.now(), label=label, lane=lane)
        self.windows.append(w)
        return w

    def close_window(self, label: str) -> None:
        """Close the newest open window with this label."""
        for w in reversed(self.windows):
            if w.label == label and w.end is None:
                w.end = self.now()
                return

    def focus(self, resource: str, *keys: str) -> None:
        """Show these objects (`pods`, `default/web-0`) on the timeline."""
        for k in keys:
            self.focus_keys.add((resource, k))

    # -- the API ---------------------------------------------------------------------------------

    async def get(self, kind: Any, name: str, *, namespace: str | None = None) -> Obj | None:
        """GET an object, None when it does not exist."""
        from services.client import NotFoundError

        try:
            return await self.client.get(kind, name, namespace=namespace)
        except NotFoundError:
            return None

    async def pod(self, name: str, namespace: str = "default") -> Obj | None:
        """The pod, or None."""
        return await self.get(PODS, name, namespace=namespace)

    async def pods(self, *, namespace: str | None = "default", label_selector: str | None = None,
                   field_selector: str | None = None) -> list[Obj]:
        """Pods matching the selectors."""
        lst = await self.client.list(PODS, namespace=namespace, label_selector=label_selector,
                                     field_selector=field_selector)
        return list(lst.get("items") or [])

    async def node(self, name: str) -> Obj | None:
        """The node, or None."""
        return await self.get(NODES, name)

    async def events_about(self, name: str, *, namespace: str = "default", reason: str | None = None) -> list[Obj]:
        """Events whose involvedObject is `name` (optionally of one reason), oldest first."""
        lst = await self.client.list(EVENTS, namespace=namespace)
        out = [e for e in lst.get("items") or []
               if (e.get("involvedObject") or {}).get("name") == name
               and (reason is None or e.get("reason") == reason)]
        return sorted(out, key=lambda e: str(e.get("firstTimestamp") or e.get("eventTime") or ""))

    async def history(self, *, since: int = 0, types: Sequence[str] = ()) -> list[dict[str, Any]]:
        """The apiserver's history so far (records after index `since`)."""
        return await fetch_history(self.session, self.mesh.apiserver_url, self.mesh.token, since=since, types=types)

    async def records(self) -> list[dict[str, Any]]:
        """The history so far (fetched incrementally; the list is shared, do not modify it)."""
        last = self._records[-1]["index"] if self._records else 0
        self._records.extend(await self.history(since=int(last)))
        return self._records

    async def wait_record(self, *, within: float, **match: Any) -> dict[str, Any] | None:
        """The first history record matching (see `scenarios.oracles.select`), waiting up to `within`."""
        from scenarios.oracles import first

        async def probe() -> dict[str, Any] | None:
            return first(await self.records(), **match)

        return await self.until(probe, within=within, poll=0.03)

    # -- admin endpoints ---------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        h = {"Accept": "application/json", "X-Kubemesh-Component": "scenario", "X-Kubemesh-Instance": "scenario",
             "User-Agent": "kubemesh-scenario"}
        if self.mesh.token:
            h["Authorization"] = f"Bearer {self.mesh.token}"
        return h

    async def admin_urls(self, *, refresh: bool = False) -> dict[str, str]:
        """Admin URL per component instance, from the apiserver's component registry."""
        if self._admin is None or refresh:
            doc = await self.client.request("GET", "/kubemesh/v1/components")
            items = doc.get("items", []) if isinstance(doc, dict) else []
            self._admin = {str(i["instance"]): str(i["adminURL"]) for i in items
                           if isinstance(i, dict) and i.get("adminURL")}
        return self._admin

    async def admin_request(self, instance: str, method: str, path: str, body: Any = None) -> Any:
        """A JSON request to a component's admin endpoint."""
        urls = await self.admin_urls()
        if instance not in urls:
            urls = await self.admin_urls(refresh=True)
        if instance not in urls:
            raise ScenarioError(f"no admin endpoint registered for {instance!r} (known: {', '.join(urls)})")
        async with self.session.request(method, urls[instance] + path, json=body, headers=self._headers(),
                                        timeout=aiohttp.ClientTimeout(total=10)) as resp:
            text = await resp.text()
            if resp.status >= 400:
                raise ScenarioError(f"{method} {instance}{path}: {resp.status} {text.strip()[:300]}")
            import json

            return json.loads(text) if text.strip() else None

    async def debug(self, instance: str, path: str) -> Any:
        """A component's debug document (`scheduler`, `/debug/scheduler`), None if unavailable."""
        try:
            return await self.admin_request(instance, "GET", path)
        except (ScenarioError, aiohttp.ClientError, OSError, TimeoutError, ValueError):
            return None

    async def kubelet_of(self, node: str) -> str:
        """The kubelet admin base URL hosting `node` (its port is on the Node object)."""
        if node in self._node_admin:
            return self._node_admin[node]
        obj = await self.node(node)
        port = (((obj or {}).get("status") or {}).get("daemonEndpoints") or {}).get("kubeletEndpoint", {}).get("Port")
        for url in (await self.admin_urls(refresh=True)).values():
            if port and url.rstrip("/").endswith(f":{port}"):
                self._node_admin[node] = url
                return url
        raise ScenarioError(f"cannot find the kubelet hosting {node} (kubelet port {port})")

    async def node_op(self, node: str, op: str, body: Any = None, *, method: str = "POST") -> Any:
        """One kubelet admin operation on a node (`power-off`, `conditions`, `zombie`, ...)."""
        base = await self.kubelet_of(node)
        async with self.session.request(method, f"{base}/nodes/{node}/{op}".rstrip("/"), json=body,
                                        headers=self._headers(), timeout=aiohttp.ClientTimeout(total=10)) as resp:
            text = await resp.text()
            if resp.status >= 400:
                raise ScenarioError(f"{method} {node}/{op}: {resp.status} {text.strip()[:300]}")
            import json

            return json.loads(text) if text.strip() else None

    async def power_off(self, node: str) -> None:
        """Power a node off: heartbeats, lease, status and pod work stop; pods stay in the API."""
        await self.node_op(node, "power-off")
        self.say(f"{node} powered off")
        self.open_window(f"{node} powered off", lane=f"node/{node}")

    async def power_on(self, node: str) -> None:
        """Boot a powered-off node again."""
        await self.node_op(node, "power-on")
        self.close_window(f"{node} powered off")
        self.say(f"{node} powered on")

    async def set_condition(self, node: str, type_: str, status: str = "True", *, reason: str | None = None) -> None:
        """Have the kubelet report a node condition (MemoryPressure, DiskPressure, ...)."""
        body: dict[str, Any] = {"type": type_, "status": status}
        if reason:
            body["reason"] = reason
        await self.node_op(node, "conditions", body)
        self.say(f"{node} reports {type_}={status}")
        self.open_window(f"{node} {type_}", lane=f"node/{node}")

    async def clear_condition(self, node: str, type_: str) -> None:
        """Stop overriding a condition."""
        await self.node_op(node, f"conditions/{type_}", method="DELETE")
        self.close_window(f"{node} {type_}")
        self.say(f"{node} {type_} override cleared")

    # -- chaos -------------------------------------------------------------------------------------

    async def chaos_available(self) -> bool:
        """Whether the apiserver serves the chaos front door."""
        try:
            async with self.session.get(f"{self.mesh.apiserver_url}/chaos/v1/faults", headers=self._headers(),
                                        timeout=aiohttp.ClientTimeout(total=5)) as resp:
                return resp.status == 200
        except (aiohttp.ClientError, OSError, TimeoutError):
            return False

    async def add_fault(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Create a fault (`POST /chaos/v1/faults`, the spec of `apiserver.chaos_spec`)."""
        body = dict(spec)
        body.setdefault("duration", None)
        async with self.session.post(f"{self.mesh.apiserver_url}/chaos/v1/faults", json=body,
                                     headers=self._headers(), timeout=aiohttp.ClientTimeout(total=10)) as resp:
            text = await resp.text()
            if resp.status >= 300:
                raise ScenarioError(f"chaos fault {body.get('name')!r} refused: {resp.status} {text.strip()[:400]}")
        import json

        created: dict[str, Any] = json.loads(text) if text.strip() else {}
        self.say(f"fault {created.get('name', body.get('name'))} ({body.get('type')}) created")
        return created

    async def remove_fault(self, name: str) -> None:
        """Remove (and recover) a fault; a fault already gone is fine."""
        async with self.session.delete(f"{self.mesh.apiserver_url}/chaos/v1/faults/{name}", headers=self._headers(),
                                       timeout=aiohttp.ClientTimeout(total=10)) as resp:
            if resp.status >= 300 and resp.status != 404:
                raise ScenarioError(f"removing fault {name!r}: {resp.status} {(await resp.text())[:300]}")
        self.say(f"fault {name} removed")

    async def fault_status(self, name: str) -> dict[str, Any] | None:
        """A fault with its status, None when it does not exist."""
        async with self.session.get(f"{self.mesh.apiserver_url}/chaos/v1/faults/{name}", headers=self._headers(),
                                    timeout=aiohttp.ClientTimeout(total=10)) as resp:
            if resp.status == 404:
                return None
            doc: dict[str, Any] = await resp.json(content_type=None)
            return doc

    @contextlib.asynccontextmanager
    async def fault(self, spec: Mapping[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """A fault for the duration of the block (removed on every exit path)."""
        created = await self.add_fault(spec)
        name = str(created.get("name") or spec.get("name"))
        try:
            yield created
        finally:
            with contextlib.suppress(Exception):
                await self.remove_fault(name)


def wall() -> float:
    """Monotonic wall seconds (for measuring runs)."""
    return time.monotonic()


async def fetch_history(session: aiohttp.ClientSession, base_url: str, token: str | None, *, since: int = 0,
                        types: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The apiserver's history (`GET /kubemesh/v1/history`) as a list of records."""
    import json

    params = {"since": str(since)}
    if types:
        params["type"] = ",".join(types)
    headers = {"Accept": "application/jsonl", "X-Kubemesh-Component": "scenario",
               "X-Kubemesh-Instance": "scenario-history"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    async with session.get(f"{base_url}/kubemesh/v1/history", params=params, headers=headers,
                           timeout=aiohttp.ClientTimeout(total=60)) as resp:
        resp.raise_for_status()
        text = await resp.text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]

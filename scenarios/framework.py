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

Attached runs (`scenarios.attached`): a scenario can also run against a mesh that is already
running (the compose stack). Then nothing is started or torn down; a `reusable` scenario keeps
its objects in `ctx.namespace` and registers an undo (`ctx.defer`) for every change outside
it, which the runner plays back (`ctx.cleanup()`), so that it can run again on the same mesh.
Node power goes through the kubelet's admin endpoint or, where that is not reachable (the
stack publishes only the apiserver), through the chaos front door (`node_access`).

Faults off (`ScenarioContext(faults=False)`, what `kubemesh scenario verify` runs besides the
normal runs): every injection made through the context (`add_fault`/`fault`, `power_off`/
`power_on`, `set_condition`/`clear_condition`, and every kubelet admin operation other than a
GET, such as a container kill) is recorded in `ctx.skipped` and in the steps,
and does nothing; the scenario still runs its workload and its oracle. An oracle that reads its
evidence from the history then finds that the race window never opened and says inconclusive;
no scenario needs code of its own for this.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Literal, TypeVar

import aiohttp

from kubemesh.scenarios.records import first
from kubemesh.services.machinery.client import ApiClient, ApiError, NotFoundError
from kubemesh.services.machinery.clock import ClusterClock
from kubemesh.services.mesh.chaos_client import Chaos
from kubemesh.services.mesh.endpoint import MeshEndpoint, MeshError
from kubemesh.services.model.kinds import EVENTS, NODES, PODS, Obj

Outcome = Literal["reproduced", "prevented", "inconclusive", "hazard"]
"""`hazard`: the run showed an operator hazard (e.g. a force delete while the node is
partitioned), not a code bug; a scenario that shows one says so in `Scenario.expected`."""
Mode = Literal["buggy", "fixed"]
MODES: Final[tuple[Mode, ...]] = ("buggy", "fixed")
EXPECTED: Final[Mapping[Mode, Outcome]] = {"buggy": "reproduced", "fixed": "prevented"}
"""The outcome each mode must have: the old code shows the race, the fix prevents it."""

T = TypeVar("T")

NodeAccess = Literal["admin", "chaos", "auto"]
"""How a context powers nodes off and on: the kubelet's admin endpoint, the chaos front door's
`node.powerOff` fault, or the admin endpoint when it answers and chaos otherwise."""


class ScenarioError(RuntimeError):
    """The scenario could not set up what it needs (the run is inconclusive, with this reason)."""


@dataclass(frozen=True, kw_only=True)
class MeshShape:
    """The mesh a scenario needs (turned into a `kubemesh.services.mesh.launching.MeshSpec` by the runner)."""

    nodes: int = 3
    zones: tuple[str, ...] = ()
    kubelets: int = 1
    capacity: str | None = None
    clock_rate: float = 60.0
    """Cluster seconds per wall second; the CLI's `--clock-rate` overrides it."""
    extra_args: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """More flags per component, e.g. `{"controller_manager": ["--node-monitor-grace-period", "40s"]}`."""
    store: str = "memory"
    """`MeshSpec.store`: `etcd` for a race of a control plane over etcd."""
    apiservers: int = 1
    """`MeshSpec.apiservers` (needs `store="etcd"`): each other process talks to one, round robin."""


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
    machine_stall: bool = False
    """The run is inconclusive because the mesh stood still (the machine too busy for the clock rate):
    it says nothing about the race, and the runner runs it once more (`running.run_once`)."""


class Scenario(ABC):
    """One historic race (see the module docstring)."""

    name: ClassVar[str]
    """The fixed scenario name (`kubemesh scenario run NAME`)."""
    summary: ClassVar[str]
    """One line for `kubemesh scenario list`."""
    upstream: ClassVar[tuple[str, ...]] = ()
    """Upstream issues and fixes, e.g. `("kubernetes#50813", "kubernetes#53647")`."""
    bugs: ClassVar[tuple[str, ...]] = ()
    """Bug switches turned on in buggy mode (fixed mode runs without them)."""
    era_bugs: ClassVar[tuple[str, ...]] = ()
    """Switches on in both modes: the release the race is shown in (e.g. the 1.8 affinity code that
    surfaces the error the fix under test reacts to). Empty: fixed mode is today's code."""
    window_needs_faults: ClassVar[bool] = True
    """Whether the race window opens only with the scenario's faults (chaos, power-offs,
    condition overrides). False for a scenario whose workload alone opens it: then a run with
    faults off must give the same outcome as with faults on (`kubemesh scenario verify`);
    the scenario's docstring says why."""
    needs_chaos: ClassVar[bool] = False
    """Whether the scenario needs the chaos front door (`/chaos/v1/faults`)."""
    expected: ClassVar[Mapping[Mode, Outcome]] = EXPECTED
    """The outcome each mode must have (`EXPECTED`, or `hazard` for the mode that shows an
    operator hazard instead of a bug)."""
    shape: ClassVar[MeshShape] = MeshShape()
    deadline: ClassVar[float] = 600.0
    """Cluster seconds after which the runner gives up on `run` (inconclusive)."""
    reusable: ClassVar[bool] = False
    """Whether the scenario leaves an attached mesh as it found it: its objects live in
    `ctx.namespace` (deleted after the run) and every change outside it has an undo
    (`ctx.defer`, or the context's own node and fault operations). A scenario that is not
    reusable consumes an attached mesh: the runner refuses later runs on it."""
    profile: ClassVar[str] = "current"
    """The release a fresh mesh runs as (`kubemesh profiles`; its seed's): its defaults and bug
    switches in both modes, with the scenario's own `bugs` turned off in fixed mode (the fix
    backported). `kubemesh scenario run NAME --profile current` runs it as today's release."""
    also_fixed: ClassVar[tuple[str, ...]] = ()
    """Switches of the release that fixed mode turns off besides `bugs`: fixes the one under test
    needs in that release (nominated-node-race under 1.13 needs kubernetes#77990 as well)."""

    def bugs_for(self, mode: Mode) -> tuple[str, ...]:
        """The switches a mode runs with: `era_bugs`, plus `bugs` in buggy mode."""
        extra = self.bugs if mode == "buggy" else ()
        return tuple(dict.fromkeys((*self.era_bugs, *extra)))

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

    def __init__(self, *, mesh: MeshEndpoint, client: ApiClient, chaos: Chaos, clock: ClusterClock, mode: Mode,
                 seed: int, log: Callable[[str], None] | None = None, namespace: str = "default",
                 history_since: int = 0, node_access: NodeAccess = "admin", faults: bool = True) -> None:
        self.mesh = mesh
        """How to reach the mesh (its history, its components' admin endpoints, its kubelets)."""
        self.client = client
        self.chaos = chaos
        """The chaos front door (faults made through `add_fault`/`fault` are undone at cleanup)."""
        self.clock = clock
        self.mode = mode
        self.seed = seed
        self.rng = random.Random(seed)
        self.t0 = clock.now()
        self.moments: list[Moment] = []
        self.windows: list[Window] = []
        self.focus_keys: set[tuple[str, str]] = set()
        """(resource, key) pairs the timeline shows."""
        self.lines: list[str] = []
        """A log of what the scenario did (cluster time relative to the start)."""
        self._log = log
        self._records: list[dict[str, Any]] = []
        self.namespace = namespace
        """Where a reusable scenario creates its objects ("default" on a fresh mesh)."""
        self.history_since = history_since
        """The history index the run started after (`records` and the report start there)."""
        self.node_access: NodeAccess = node_access
        """How nodes are powered off and on (resolved on first use when "auto")."""
        self._undo: dict[str, Callable[[], Awaitable[object]]] = {}
        self._power_faults: dict[str, str] = {}
        self.faults = faults
        """Whether injections happen (False: they are recorded in `skipped` and do nothing)."""
        self.skipped: list[str] = []
        """The injections not made because faults are off, in words, in order."""
        self._skipped_faults: set[str] = set()
        self._skipped_power: set[str] = set()
        self._chaos_at: dict[str, Chaos] = {}
        """Chaos front doors of other apiservers (`add_fault(apiserver=URL)`), closed at `cleanup`."""

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

    def skip(self, what: str) -> None:
        """Record an injection not made because faults are off (kept in the report's steps)."""
        self.skipped.append(what)
        self.say(f"faults off: skipped {what}")
        self.mark(f"skipped: {what}", lane="scenario")

    # -- the API ---------------------------------------------------------------------------------

    async def get(self, kind: Any, name: str, *, namespace: str | None = None) -> Obj | None:
        """GET an object, None when it does not exist."""
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
        return await self.mesh.history(since=since, types=types, component="scenario")

    async def records(self) -> list[dict[str, Any]]:
        """The history so far (fetched incrementally; the list is shared, do not modify it)."""
        last = self._records[-1]["index"] if self._records else self.history_since
        self._records.extend(await self.history(since=int(last)))
        return self._records

    async def wait_record(self, *, within: float, **match: Any) -> dict[str, Any] | None:
        """The first history record matching (see `kubemesh.scenarios.records.select`), waiting up to `within`."""
        async def probe() -> dict[str, Any] | None:
            return first(await self.records(), **match)

        return await self.until(probe, within=within, poll=0.03)

    # -- admin endpoints ---------------------------------------------------------------------------

    async def admin_request(self, instance: str, method: str, path: str, body: Any = None) -> Any:
        """A JSON request to a registered component's admin endpoint (raises `ScenarioError`)."""
        try:
            return await self.mesh.component_request(instance, method, path, body)
        except MeshError as exc:
            raise ScenarioError(str(exc)) from exc

    async def debug(self, instance: str, path: str) -> Any:
        """A component's debug document (`scheduler`, `/debug/scheduler`), None if unavailable."""
        try:
            return await self.admin_request(instance, "GET", path)
        except (ScenarioError, aiohttp.ClientError, OSError, TimeoutError, ValueError):
            return None

    async def after_podgc_pass(self, *, within: float = 30.0) -> bool:
        """Wait until PodGC has just run a pass (its pass counter on the controller-manager's debug page moves).

        Before v1.17 PodGC deleted the pods of a missing node at its first pass (one every 20
        s); a scenario that deletes a node and needs its pods to outlive the deletion for a
        while deletes it right after a pass, which gives it one whole period rather than a
        random part of one. False when the page cannot be read (the caller goes on at once).
        """

        async def passes() -> int | None:
            doc = await self.debug("controller-manager", "/debug/controller-manager")
            part = doc.get("podGC") if isinstance(doc, dict) else None
            n = part.get("passes") if isinstance(part, dict) else None
            return n if isinstance(n, int) else None

        first = await passes()
        if first is None:
            return False

        async def moved() -> bool | None:
            n = await passes()
            return True if n is not None and n > first else None

        return bool(await self.until(moved, within=within, poll=0.005))

    async def node_op(self, node: str, op: str, body: Any = None, *, method: str = "POST") -> Any:
        """One kubelet admin operation on a node (`power-off`, `conditions`, `partition`, ...).

        It goes to the kubelet that registered the node; raises `ScenarioError`. With faults off,
        every operation but a GET is an injection: recorded as skipped, not sent (returns None).
        """
        if not self.faults and method != "GET":
            self.skip(f"kubelet operation {method} {op or '/'} on {node}")
            return None
        try:
            return await self.mesh.node_op(node, op, body, method=method)
        except MeshError as exc:
            raise ScenarioError(str(exc)) from exc

    async def power_off(self, node: str) -> None:
        """Power a node off: heartbeats, lease, status and pod work stop; pods stay in the API.

        Through the kubelet's admin endpoint, or the chaos front door's `node.powerOff` fault
        (`node_access`); the same effect either way. Powering the node on again is registered
        as an undo (`cleanup`) until `power_on`. With faults off it is recorded as skipped.
        """
        if not self.faults:
            self._skipped_power.add(node)
            self.skip(f"power-off of {node}")
            return
        if await self._node_power_access() == "chaos":
            created = await self.add_fault({"name": f"scenario-power-off-{node}", "type": "node.powerOff",
                                            "target": {"node": node}, "duration": None})
            name = str(created.get("name") or f"scenario-power-off-{node}")
            self._power_faults[node] = name
            status = created.get("status") or {}
            if status.get("phase") not in (None, "Active") or status.get("injected") == 0:
                raise ScenarioError(f"chaos could not power {node} off (fault {name} is {status.get('phase')}: "
                                    f"{status.get('lastError') or 'no error given'})")
        else:
            await self.node_op(node, "power-off")
        self.defer(f"power-on {node}", lambda: self.power_on(node))
        self.say(f"{node} powered off")
        self.open_window(f"{node} powered off", lane=f"node/{node}")

    async def power_on(self, node: str) -> None:
        """Boot a powered-off node again."""
        if node in self._skipped_power:
            self._skipped_power.discard(node)
            self.skip(f"power-on of {node} (it was never powered off)")
            return
        fault = self._power_faults.pop(node, None)
        if fault is not None:
            await self.remove_fault(fault)  # healing the fault powers the node on
        else:
            await self.node_op(node, "power-on")
        self.settle(f"power-on {node}")
        self.close_window(f"{node} powered off")
        self.say(f"{node} powered on")

    async def _node_power_access(self) -> Literal["admin", "chaos"]:
        """Resolve `node_access` ("auto": the admin endpoints if they answer from here, else chaos)."""
        if self.node_access != "auto":
            return self.node_access
        reachable = False
        with contextlib.suppress(MeshError, aiohttp.ClientError, OSError, TimeoutError):
            kubelets = [u for i, u in (await self.mesh.admin_urls()).items() if i.startswith("kubelet")]
            if kubelets:
                await self.mesh.admin_request(kubelets[0], "GET", "/healthz")
                reachable = True
        if reachable:
            self.node_access = "admin"
        elif await self.chaos_available():
            self.node_access = "chaos"
        else:
            raise ScenarioError("the kubelets' admin endpoints do not answer from here and the apiserver serves no "
                                "chaos front door: nodes cannot be powered off")
        via = "the kubelets' admin endpoints" if reachable else "the chaos front door (node.powerOff)"
        self.say(f"node power operations go through {via}")
        return self.node_access

    # -- undo (attached meshes) -------------------------------------------------------------------

    def defer(self, label: str, undo: Callable[[], Awaitable[object]]) -> None:
        """Register how to undo a change made outside `namespace` (a taint, a powered-off node).

        `cleanup` plays the undos back, newest first. A later `defer` with the same label
        replaces the earlier one; `settle(label)` drops it once the scenario undid the change.
        """
        self._undo.pop(label, None)
        self._undo[label] = undo

    def settle(self, label: str) -> None:
        """The change behind `label` was undone already: nothing left to do at cleanup."""
        self._undo.pop(label, None)

    async def cleanup(self) -> list[str]:
        """Play back every registered undo, newest first; what failed, in words (never raises).

        The runner calls it after an attached run (a fresh mesh is simply stopped).
        """
        failures: list[str] = []
        while self._undo:
            label, undo = self._undo.popitem()
            try:
                await undo()
            except Exception as exc:  # every undo gets its chance; the failures are reported
                failures.append(f"{label}: {type(exc).__name__}: {exc}")
        await self.close_clients()
        return failures

    async def close_clients(self) -> None:
        """Close the chaos clients of other apiservers (`add_fault(apiserver=...)` opens them again if needed)."""
        for chaos in self._chaos_at.values():
            with contextlib.suppress(Exception):
                await chaos.close()
        self._chaos_at.clear()

    async def apiservers(self) -> list[dict[str, Any]]:
        """Every apiserver of the mesh (`{"name", "url"}`; one unless it runs several over etcd)."""
        doc = await self.mesh.get_json("/kubemesh/v1/apiservers", component="scenario")
        return [a for a in doc.get("items") or [] if isinstance(a, dict)]

    async def registration(self, instance: str) -> dict[str, Any] | None:
        """A component instance's entry in the registry (its admin URL, and `apiserver`: the one it talks to)."""
        return (await self.mesh.components() or {}).get(instance)

    def _chaos_for(self, apiserver: str | None) -> Chaos:
        if apiserver is None or apiserver.rstrip("/") == self.mesh.url.rstrip("/"):
            return self.chaos
        chaos = self._chaos_at.get(apiserver)
        if chaos is None:
            chaos = self._chaos_at[apiserver] = MeshEndpoint(
                url=apiserver, token=self.mesh.token, ca_pem=self.mesh.ca_pem, insecure=self.mesh.insecure,
                kubeconfig=None, source=f"{apiserver} of {self.mesh.source}").chaos(instance="scenario")
        return chaos

    async def set_condition(self, node: str, type_: str, status: str = "True", *, reason: str | None = None) -> None:
        """Have the kubelet report a node condition (MemoryPressure, DiskPressure, ...)."""
        if not self.faults:
            self.skip(f"condition override {type_}={status} on {node}")
            return
        body: dict[str, Any] = {"type": type_, "status": status}
        if reason:
            body["reason"] = reason
        await self.node_op(node, "conditions", body)
        self.defer(f"clear {node} {type_}", lambda: self.clear_condition(node, type_))
        self.say(f"{node} reports {type_}={status}")
        self.open_window(f"{node} {type_}", lane=f"node/{node}")

    async def clear_condition(self, node: str, type_: str) -> None:
        """Stop overriding a condition."""
        if not self.faults:
            self.skip(f"clearing the {type_} override on {node} (none was made)")
            return
        await self.node_op(node, f"conditions/{type_}", method="DELETE")
        self.settle(f"clear {node} {type_}")
        self.close_window(f"{node} {type_}")
        self.say(f"{node} {type_} override cleared")

    # -- chaos -------------------------------------------------------------------------------------

    async def chaos_available(self) -> bool:
        """Whether the apiserver serves the chaos front door."""
        return await self.mesh.chaos_available()

    async def add_fault(self, spec: Mapping[str, Any], *, apiserver: str | None = None) -> dict[str, Any]:
        """Create a fault (`POST /chaos/v1/faults`); its removal is registered as an undo.

        `apiserver`: the URL of the apiserver to create it on (one of `apiservers()`; default the
        mesh's own): where `apiserver.*` faults act, and whose clients request faults hit.

        With faults off nothing is created: the answer is the spec with `status.phase`
        "Skipped" and nothing injected, as no fault the front door made would say.
        """
        body = dict(spec)
        body.setdefault("duration", None)
        if not self.faults:
            name = str(body.get("name"))
            self._skipped_faults.add(name)
            self.skip(f"fault {name} ({body.get('type')})")
            return {**body, "status": {"phase": "Skipped", "injected": 0}}
        try:
            created = await self._chaos_for(apiserver).add(body, check=False)
        except ApiError as exc:
            raise ScenarioError(f"chaos fault {body.get('name')!r} refused: {exc}") from exc
        name = str(created.get("name") or body.get("name"))
        self.defer(f"remove fault {name}", lambda: self.remove_fault(name, apiserver=apiserver))
        self.say(f"fault {name} ({body.get('type')}) created")
        return created

    async def remove_fault(self, name: str, *, apiserver: str | None = None) -> None:
        """Remove (and recover) a fault; a fault already gone is fine."""
        if name in self._skipped_faults:
            self._skipped_faults.discard(name)
            return
        try:
            await self._chaos_for(apiserver).remove(name, missing_ok=True)
        except ApiError as exc:
            raise ScenarioError(f"removing fault {name!r}: {exc}") from exc
        self.settle(f"remove fault {name}")
        self.say(f"fault {name} removed")

    async def fault_status(self, name: str, *, apiserver: str | None = None) -> dict[str, Any] | None:
        """A fault with its status (on the apiserver at URL `apiserver`), None when it does not exist."""
        try:
            return await self._chaos_for(apiserver).get(name)
        except NotFoundError:
            return None

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

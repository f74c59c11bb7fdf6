"""Scenario runs against a mesh that is already running (the compose stack, `kubemesh up`).

    kubemesh scenario run recreate-stuck-terminating --mode buggy --attach .kubemesh/compose/kubeconfig

    target = ExistingMesh.from_kubeconfig(Path(".kubemesh/compose/kubeconfig"))
    [result] = await run_scenario(scenario, modes=("buggy",), target=target)

The target is named by a kubeconfig (what the compose stack writes for the host), the state
folder of `kubemesh up` or the stack (its `kubeconfig` is used), or the apiserver's URL with a
token and a CA. Only what is reachable from here is used: the apiserver, its chaos front door
and its history; kubelets' admin endpoints only where they answer (`node_access`).

What an attached run promises:

* **Nothing is started, restarted or torn down.** The mesh is left running; the run changes
  only what the scenario changes, and undoes it afterwards when the scenario is `reusable`.
* **Checks before anything is changed.** The run is `inconclusive`, with a summary that starts
  "target mesh ..." and says why, and the mesh is not touched, unless:
  - the apiserver answers with the token (`GET /clock`);
  - the mesh is not consumed (see the ledger below);
  - the mesh's bug switches are the mode's: every component that has switches (kubelet,
    scheduler, controller-manager) has registered and published the switches it runs with
    (`bugs` in `GET /kubemesh/v1/components`), and together they are exactly the mode's
    (`Scenario.bugs_for`: the scenario's `era_bugs`, plus its `bugs` in buggy mode);
  - its shape fits the scenario's `MeshShape`: exactly `nodes` nodes, all Ready, schedulable
    and without NoSchedule/NoExecute taints (waited for up to `ExistingMesh.ready_timeout`,
    so that the nodes of a previous run can come back), the zones and the capacity the shape
    names, no component flags the shape asks for (they cannot be checked from outside), a
    cluster clock no faster than the shape's (slower only takes longer), and the chaos front
    door when the scenario needs it.
* **The history is the apiserver's**, from the run's start: the runner looks up the history's
  last index before the scenario starts; `ctx.records()` and the report begin after it.
* **Cleanup.** A `reusable` scenario runs in a namespace of its own (`ctx.namespace`, created
  for the run and deleted after it, with everything in it) and the context plays back every
  undo the run registered (nodes powered on, faults removed, taints taken off). Cleanup runs on
  every exit path of the scenario, after the history and the Events were collected.
* **The ledger.** Every run is recorded in the ConfigMap `kube-system/kubemesh-scenario-runs`
  (one key per run: scenario, mode, seed, state, outcome). A run is `running` while it runs,
  then `clean` (a reusable scenario whose cleanup succeeded) or `consumed` (a scenario that is
  not reusable, or a failed cleanup). A mesh with a `running` or `consumed` run is consumed:
  later runs are refused (inconclusive) until the mesh is replaced (`docker compose down -v`).

This is tooling: the preflight waits are wall seconds; every time a scenario states is cluster time.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, get_args

import aiohttp

from kubemesh.scenarios.framework import Mode, NodeAccess, Scenario, ScenarioContext, Verdict
from kubemesh.scenarios.reporting import RunResult, guarded_run, write_report
from kubemesh.services.machinery.client import AlreadyExistsError, ApiClient, ApiError, ConflictError, NotFoundError
from kubemesh.services.machinery.clock import ClusterClock
from kubemesh.services.mesh.endpoint import EndpointError, MeshEndpoint
from kubemesh.services.model.bugs import BUGS
from kubemesh.services.model.kinds import CONFIGMAPS, EVENTS, NAMESPACES, NODES, PODS, Obj
from kubemesh.services.model.quantities import parse_quantity
from kubemesh.services.model.wellknown import LABEL_ZONE

LEDGER_NAMESPACE: Final = "kube-system"
LEDGER_NAME: Final = "kubemesh-scenario-runs"
"""The ConfigMap that records the runs made on a mesh (see the module docstring)."""

SWITCHED_COMPONENTS: Final[tuple[str, ...]] = tuple(sorted({b.component for b in BUGS}))
"""The components that have bug switches: each must publish its switches before a run."""

ZONE_LABEL: Final = LABEL_ZONE
_POLL: Final = 0.25


TargetError = EndpointError
"""The target cannot be used as given (a missing file, a kubeconfig without a server...)."""


@dataclass(frozen=True, kw_only=True)
class ExistingMesh:
    """A running mesh to attach a scenario run to (see the module docstring)."""

    endpoint: MeshEndpoint
    """How to reach it (`MeshEndpoint.resolve` turns a kubeconfig, a state folder or a URL into one)."""
    node_access: NodeAccess = "auto"
    """How nodes are powered off: "auto" uses the kubelets' admin endpoints when they answer
    from here and the chaos front door otherwise (the compose stack publishes only the apiserver)."""
    ready_timeout: float = 60.0
    """Wall seconds the preflight waits for the components' registrations and the nodes."""

    def __post_init__(self) -> None:
        if self.node_access not in get_args(NodeAccess):
            raise TargetError(f"node_access must be one of {', '.join(get_args(NodeAccess))}")

    @property
    def name(self) -> str:
        """How messages name the target."""
        return self.endpoint.name

    @classmethod
    def from_kubeconfig(cls, path: Path, *, context: str | None = None, token: str | None = None,
                        node_access: NodeAccess = "auto", ready_timeout: float = 60.0) -> ExistingMesh:
        """The mesh of a kubeconfig's current context (or `context`), see `MeshEndpoint.from_kubeconfig`."""
        return cls(endpoint=MeshEndpoint.from_kubeconfig(path, context=context, token=token), node_access=node_access,
                   ready_timeout=ready_timeout)

    @classmethod
    def from_target(cls, target: str, *, context: str | None = None, token: str | None = None,
                    token_file: Path | None = None, ca_file: Path | None = None, node_access: NodeAccess = "auto",
                    ready_timeout: float = 60.0) -> ExistingMesh:
        """A kubeconfig path, a state folder (its `mesh.json` or `kubeconfig`), or an apiserver URL.

        For a URL the token is `token`, else the contents of `token_file`, else
        `$KUBEMESH_TOKEN`; `ca_file` is the apiserver's CA (default: the system trust store).
        """
        endpoint = MeshEndpoint.resolve(url=target, token=token, token_file=token_file, ca_file=ca_file,
                                        context=context)
        return cls(endpoint=endpoint, node_access=node_access, ready_timeout=ready_timeout)


def expected_bugs(scenario: Scenario, mode: Mode) -> frozenset[str]:
    """The switches a mesh must run with, exactly, for `scenario` in `mode`.

    What a fresh mesh of the runner gets (`Scenario.bugs_for`): the scenario's `era_bugs` in
    both modes, plus its `bugs` in buggy mode.
    """
    return frozenset(scenario.bugs_for(mode))


# ---------------------------------------------------------------------------------------------
# Preflight


class NotReady(Exception):
    """A preflight condition that may still come true (waited for until the deadline)."""


class Refused(Exception):
    """A preflight condition that will not come true: the run is inconclusive, nothing changed."""


def _components(doc: Any) -> list[dict[str, Any]]:
    items = doc.get("items", []) if isinstance(doc, dict) else []
    return [i for i in items if isinstance(i, dict)]


def check_switches(registry: Sequence[Mapping[str, Any]], *, scenario: Scenario, mode: Mode) -> str:
    """What the registry says about the mesh's bug switches, in words; raises when they are wrong.

    Raises `Refused` when a registered component runs with other switches than the mode's,
    `NotReady` when a component with switches has not registered (or published them) yet.
    """
    want = expected_bugs(scenario, mode)
    owners = {b.name: b.component for b in BUGS}
    for name in sorted(want):
        if owners.get(name) not in SWITCHED_COMPONENTS:
            raise Refused(f"bug switch {name} belongs to no component that publishes its switches")
    seen: dict[str, list[str]] = {}
    for comp in SWITCHED_COMPONENTS:
        entries = [e for e in registry if e.get("component") == comp]
        if not entries:
            raise NotReady(f"no {comp} has registered with the apiserver (GET /kubemesh/v1/components)")
        wanted_here = sorted(b for b in want if owners[b] == comp)
        for e in entries:
            bugs = e.get("bugs")
            if not isinstance(bugs, list):
                raise NotReady(f"{e.get('instance')} ({comp}) does not publish its bug switches (a kubemesh "
                               "older than attached runs?)")
            have = sorted(str(b) for b in bugs)
            if have != wanted_here:
                raise Refused(f"{e.get('instance')} ({comp}) runs with bug switches {', '.join(have) or 'none'}, "
                              f"but {mode} mode of {scenario.name} needs {', '.join(wanted_here) or 'none'} there")
            seen.setdefault(comp, []).append(str(e.get("instance")))
    return (f"bug switches as {mode} mode needs ({', '.join(sorted(want)) or 'none'}), published by "
            + ", ".join(f"{c} ({', '.join(sorted(i))})" for c, i in sorted(seen.items())))


def _parse_capacity(text: str) -> dict[str, str]:
    out = {}
    for item in text.split(","):
        if item.strip():
            name, _, value = item.partition("=")
            out[name.strip()] = value.strip()
    return out


def _ready(node: Obj) -> bool:
    for cond in (node.get("status") or {}).get("conditions") or ():
        if isinstance(cond, dict) and cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def check_nodes(nodes: Sequence[Obj], *, scenario: Scenario, mode: Mode) -> str:
    """What the nodes say about the mesh's shape, in words; raises when it does not fit.

    Raises `Refused` for what will not change by waiting (too many nodes, other zones or
    capacity), `NotReady` for what may (too few nodes yet, a node not Ready, cordoned or tainted).
    """
    shape = scenario.mesh_shape(mode)
    names = sorted(str((n.get("metadata") or {}).get("name")) for n in nodes)
    if len(nodes) > shape.nodes:
        raise Refused(f"{len(nodes)} nodes ({', '.join(names)}), but {scenario.name} is made for exactly "
                      f"{shape.nodes} (where its pods can go decides its verdict)")
    if len(nodes) < shape.nodes:
        raise NotReady(f"{len(nodes)} nodes ({', '.join(names) or 'none'}), but {scenario.name} needs {shape.nodes}")
    if shape.zones:
        zones = {str(((n.get("metadata") or {}).get("labels") or {}).get(ZONE_LABEL, "")) for n in nodes}
        if zones != set(shape.zones):
            raise Refused(f"nodes in zones {', '.join(sorted(zones))}, but {scenario.name} needs "
                          f"{', '.join(shape.zones)}")
    if shape.capacity:
        for res, qty in _parse_capacity(shape.capacity).items():
            for n in nodes:
                have = ((n.get("status") or {}).get("capacity") or {}).get(res)
                if have is None or parse_quantity(str(have)) != parse_quantity(qty):
                    raise Refused(f"node {n['metadata']['name']} has {res} capacity {have}, but {scenario.name} "
                                  f"needs {qty} on every node")
    for n in nodes:
        name = n["metadata"]["name"]
        if not _ready(n):
            raise NotReady(f"node {name} is not Ready")
        if (n.get("spec") or {}).get("unschedulable"):
            raise NotReady(f"node {name} is cordoned (spec.unschedulable)")
        taints = [t for t in (n.get("spec") or {}).get("taints") or []
                  if isinstance(t, dict) and t.get("effect") in ("NoSchedule", "NoExecute")]
        if taints:
            shown = ", ".join(f"{t.get('key')}:{t.get('effect')}" for t in taints)
            raise NotReady(f"node {name} has taints {shown}")
    return f"{len(nodes)} nodes Ready and untainted ({', '.join(names)})"


def check_static(scenario: Scenario, mode: Mode, *, rate: float) -> list[str]:
    """The checks that need no waiting (flags, clock); raises `Refused`; notes in words."""
    shape = scenario.mesh_shape(mode)
    if shape.extra_args:
        flags = "; ".join(f"{c}: {' '.join(a)}" for c, a in shape.extra_args.items())
        raise Refused(f"the component flags {scenario.name} needs ({flags}) cannot be checked on a running "
                      "mesh; run it on a fresh one")
    if rate > shape.clock_rate * 1.0001:
        raise Refused(f"its clock runs at rate {rate:g}, faster than the {shape.clock_rate:g} {scenario.name} "
                      "is made for (its timing would not hold)")
    notes = [f"cluster clock rate {rate:g}"]
    if rate < shape.clock_rate * 0.9999:
        notes[0] += f" (the scenario is made for {shape.clock_rate:g}: same behaviour, more wall time)"
    return notes


# ---------------------------------------------------------------------------------------------
# The ledger


def _ledger_entries(cm: Obj | None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for key, value in ((cm or {}).get("data") or {}).items():
        with contextlib.suppress(ValueError, TypeError):
            doc = json.loads(value)
            if isinstance(doc, dict):
                out[str(key)] = doc
    return out


def consumed_by(cm: Obj | None, *, own: str | None = None) -> list[str]:
    """The recorded runs that consumed the mesh, in words (empty: the mesh can be used)."""
    out = []
    for key, e in sorted(_ledger_entries(cm).items()):
        if key == own or e.get("state") not in ("running", "consumed"):
            continue
        why = {"running": "is running or ended without cleaning up",
               "consumed": e.get("note") or "consumed it"}[str(e.get("state"))]
        out.append(f"run {key} ({e.get('scenario')} {e.get('mode')} seed {e.get('seed')}) {why}")
    return out


def _already_used(used: Sequence[str]) -> Refused:
    return Refused("already used: " + "; ".join(used) + f" (ledger: ConfigMap {LEDGER_NAMESPACE}/{LEDGER_NAME}); "
                   "start a fresh mesh (docker compose down -v && docker compose up -d --wait)")


async def _read_ledger(client: ApiClient) -> Obj | None:
    try:
        return await client.get(CONFIGMAPS, LEDGER_NAME, namespace=LEDGER_NAMESPACE)
    except NotFoundError:
        return None


async def record_run(client: ApiClient, run_id: str, entry: Mapping[str, Any], *, claim: bool = False) -> None:
    """Write one run's entry into the ledger (optimistic concurrency, retried on conflicts).

    With `claim`, refuses (`Refused`) when the ledger says the mesh is consumed, in the same
    read-modify-write as the entry, so that two runners cannot both claim a mesh.
    """
    for _ in range(20):
        cm = await _read_ledger(client)
        if claim:
            used = consumed_by(cm, own=run_id)
            if used:
                raise _already_used(used)
        value = json.dumps(dict(entry), sort_keys=True)
        try:
            if cm is None:
                await client.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                                 "metadata": {"name": LEDGER_NAME, "namespace": LEDGER_NAMESPACE},
                                                 "data": {run_id: value}}, namespace=LEDGER_NAMESPACE)
            else:
                cm.setdefault("data", {})[run_id] = value
                await client.update(CONFIGMAPS, cm)
            return
        except (ConflictError, AlreadyExistsError):
            await asyncio.sleep(0.05)
    raise Refused(f"could not write the ledger ConfigMap {LEDGER_NAMESPACE}/{LEDGER_NAME} (conflicts)")


# ---------------------------------------------------------------------------------------------
# The run


@dataclass(kw_only=True)
class _Preflight:
    notes: list[str] = field(default_factory=list)
    clock: ClusterClock | None = None


def _run_namespace(scenario: Scenario, mode: Mode, seed: int) -> str:
    stem = scenario.name[:36].strip("-")
    return f"scn-{stem}-{mode}-{seed % 100000}-{secrets.token_hex(2)}"


async def _preflight(scenario: Scenario, *, mode: Mode, target: ExistingMesh, client: ApiClient,
                     log: Callable[[str], None] | None) -> _Preflight:
    """Every check of the module docstring, before anything is changed; raises `Refused`."""
    pre = _Preflight()
    try:
        pre.clock = ClusterClock.from_document(await client.get_clock())
    except (ApiError, aiohttp.ClientError, OSError, TimeoutError, ValueError, KeyError) as exc:
        raise Refused(f"the apiserver does not answer GET /clock: {type(exc).__name__}: {exc}") from exc
    pre.notes += check_static(scenario, mode, rate=pre.clock.rate)
    used = consumed_by(await _read_ledger(client))
    if used:
        raise _already_used(used)
    if (scenario.needs_chaos or target.node_access == "chaos") and not await target.endpoint.chaos_available():
        raise Refused("the apiserver serves no chaos front door (/chaos/v1/faults), which this run needs")
    deadline = time.monotonic() + target.ready_timeout
    waiting = ""
    for what, check in (("bug switches", _switches_probe(scenario, mode, client)),
                        ("nodes", _nodes_probe(scenario, mode, client))):
        while True:
            try:
                pre.notes.append(await check())
                break
            except NotReady as exc:
                if time.monotonic() >= deadline:
                    raise Refused(f"{exc} (after waiting {target.ready_timeout:g} s)") from None
                if str(exc) != waiting and log is not None:
                    log(f"waiting for the target mesh's {what}: {exc}")
                waiting = str(exc)
                await asyncio.sleep(_POLL)
    return pre


def _switches_probe(scenario: Scenario, mode: Mode, client: ApiClient) -> Callable[[], Awaitable[str]]:
    async def probe() -> str:
        doc = await client.request("GET", "/kubemesh/v1/components")
        return check_switches(_components(doc), scenario=scenario, mode=mode)
    return probe


def _nodes_probe(scenario: Scenario, mode: Mode, client: ApiClient) -> Callable[[], Awaitable[str]]:
    async def probe() -> str:
        items = (await client.list(NODES)).get("items") or []
        return check_nodes([n for n in items if isinstance(n, dict)], scenario=scenario, mode=mode)
    return probe


async def run_attached(scenario: Scenario, *, target: ExistingMesh, mode: Mode, seed: int, report_dir: Path,
                       log: Callable[[str], None] | None = None) -> RunResult:
    """One run on an existing mesh: preflight, ledger, scenario, history, cleanup, report.

    Never raises for what the mesh does: a refused preflight, a crash or a deadline is an
    `inconclusive` result with the reason (see the module docstring).
    """
    out = report_dir / scenario.name / f"{mode}-seed{seed}"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    started = time.monotonic()
    run_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{scenario.name}-{mode}-seed{seed}-{secrets.token_hex(2)}"
    namespace = _run_namespace(scenario, mode, seed) if scenario.reusable else "default"
    entry: dict[str, Any] = {"scenario": scenario.name, "mode": mode, "seed": seed, "reusable": scenario.reusable,
                             "state": "running", "namespace": namespace}
    verdict = Verdict(outcome="inconclusive", summary=f"target mesh {target.name}: the run was interrupted")
    ctx: ScenarioContext | None = None
    history: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    notes: list[str] = []
    cleanup_failures: list[str] = []
    t0 = t_end = cluster_s = 0.0
    rate = scenario.mesh_shape(mode).clock_rate
    claimed = False
    endpoint = target.endpoint
    client = endpoint.client("scenario")
    chaos = endpoint.chaos(instance="scenario")

    def not_prepared(exc: BaseException) -> Verdict:
        return Verdict(outcome="inconclusive", evidence=tuple(notes),
                       summary=f"target mesh {target.name}: the run could not be prepared: {type(exc).__name__}: {exc}")

    try:
        try:
            pre = await _preflight(scenario, mode=mode, target=target, client=client, log=log)
            assert pre.clock is not None
            rate, notes = pre.clock.rate, pre.notes
            entry["startedAt"] = pre.clock.now()
            await record_run(client, run_id, entry, claim=True)
            claimed = True
        except Refused as exc:
            verdict = Verdict(outcome="inconclusive", summary=f"target mesh {target.name}: {exc}",
                              evidence=tuple(notes))
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            verdict = not_prepared(exc)
        else:
            ctx = ScenarioContext(mesh=endpoint, client=client, chaos=chaos, clock=pre.clock, mode=mode, seed=seed,
                                  log=log, namespace=namespace, node_access=target.node_access)
            try:
                if namespace != "default":
                    await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {
                        "name": namespace, "labels": {"kubemesh.io/scenario": scenario.name,
                                                      "kubemesh.io/mode": mode}}})
                ctx.history_since = await endpoint.history_last_index()
                ctx.say(f"attached to {target.name} (namespace {namespace}): " + "; ".join(notes))
                t0 = ctx.t0
                verdict = await guarded_run(scenario, ctx)
                t_end = ctx.now()
                cluster_s = t_end - t0
                with contextlib.suppress(Exception):
                    history = await endpoint.history(since=ctx.history_since, component="scenario")
                with contextlib.suppress(Exception):
                    events = list((await client.list(EVENTS)).get("items") or [])
            except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
                verdict = not_prepared(exc)
            finally:
                cleanup_failures = await _cleanup(ctx, client, namespace)
    finally:
        if claimed:
            entry["state"] = "clean" if scenario.reusable and not cleanup_failures else "consumed"
            if not scenario.reusable:
                entry["note"] = f"consumed it ({scenario.name} is not reusable: it leaves the mesh changed)"
            elif cleanup_failures:
                entry["note"] = "consumed it (its cleanup failed: " + "; ".join(cleanup_failures) + ")"
            entry["outcome"] = verdict.outcome
            with contextlib.suppress(Exception):
                await record_run(client, run_id, entry)
        await chaos.close()
        await client.close()
    if cleanup_failures:
        verdict = Verdict(outcome=verdict.outcome, summary=verdict.summary,
                          evidence=(*verdict.evidence, *(f"cleanup failed: {f}" for f in cleanup_failures)))
    result = RunResult(scenario=scenario.name, mode=mode, seed=seed, outcome=verdict.outcome,
                       wall_s=time.monotonic() - started, cluster_s=cluster_s, report=str(out.resolve()),
                       summary=verdict.summary, expected=scenario.expected[mode], startup_s=None,
                       evidence=list(verdict.evidence), bugs=list(scenario.bugs_for(mode)))
    write_report(out, scenario=scenario, result=result, verdict=verdict, ctx=ctx, history=history, events=events,
                 t0=t0, t_end=t_end, clock_rate=rate)
    _note_attachment(out, target=target, run_id=run_id if claimed else None, entry=entry if claimed else None,
                     notes=notes, cleanup_failures=cleanup_failures)
    return result


NAMESPACE_GONE_WITHIN: Final = 120.0
"""Cluster seconds a deleted run namespace may stay Terminating before its pods are force-deleted."""


async def _cleanup(ctx: ScenarioContext, client: ApiClient, namespace: str) -> list[str]:
    """Delete the run's namespace, play back the context's undos, and see the namespace go; what failed, in words.

    A namespace goes as upstream's do: Terminating until the namespace controller has deleted its
    content. The undos run first (a powered-off node comes back, so its pods can finish); pods
    still there after `NAMESPACE_GONE_WITHIN` (a node the scenario left off) are force-deleted,
    as `kubectl delete --force` would, so that the mesh is clean for the next run.
    """
    failures: list[str] = []
    if namespace != "default":
        try:
            await client.delete(NAMESPACES, namespace)
            ctx.say(f"deleting namespace {namespace} and everything in it")
        except NotFoundError:
            namespace = "default"
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            failures.append(f"delete namespace {namespace}: {type(exc).__name__}: {exc}")
    failures += await ctx.cleanup()
    if namespace != "default" and not failures:
        try:
            if not await _namespace_gone(ctx, client, namespace):
                for pod in (await client.list(PODS, namespace=namespace)).get("items") or []:
                    with contextlib.suppress(NotFoundError):
                        await client.delete(PODS, pod["metadata"]["name"], namespace=namespace,
                                            grace_period_seconds=0)
                if not await _namespace_gone(ctx, client, namespace):
                    failures.append(f"namespace {namespace} is still Terminating")
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            failures.append(f"wait for namespace {namespace} to go: {type(exc).__name__}: {exc}")
    return failures


async def _namespace_gone(ctx: ScenarioContext, client: ApiClient, namespace: str) -> bool:
    async def gone() -> bool:
        try:
            await client.get(NAMESPACES, namespace)
        except NotFoundError:
            return True
        return False

    return bool(await ctx.until(gone, within=NAMESPACE_GONE_WITHIN, poll=0.1))


def _note_attachment(out: Path, *, target: ExistingMesh, run_id: str | None, entry: Mapping[str, Any] | None,
                     notes: Sequence[str], cleanup_failures: Sequence[str]) -> None:
    """Say in the report that the run was attached (no mesh of its own, no process logs here)."""
    lines = ["", f"Attached to the existing mesh {target.name} ({target.endpoint.url}): not started, not stopped; "
                 "its processes' logs are where it runs."]
    if run_id is not None and entry is not None:
        lines.append(f"Ledger {LEDGER_NAMESPACE}/{LEDGER_NAME}: run {run_id}, state {entry.get('state')}"
                     f"{', namespace ' + str(entry.get('namespace')) if entry.get('namespace') else ''}.")
    lines += [f"Preflight: {n}" for n in notes]
    lines += [f"Cleanup failed: {f}" for f in cleanup_failures]
    with (out / "verdict.txt").open("a") as f:
        f.write("\n".join(lines) + "\n")
    run_json = out / "run.json"
    doc = json.loads(run_json.read_text())
    doc["target"] = {"source": target.name, "apiserver": target.endpoint.url, "run": run_id,
                     "ledgerState": entry.get("state") if entry else None,
                     "namespace": entry.get("namespace") if entry else None, "preflight": list(notes),
                     "cleanupFailures": list(cleanup_failures)}
    run_json.write_text(json.dumps(doc, indent=2, default=str) + "\n")

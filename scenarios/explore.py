"""`kubemesh explore`: perturb what one component observes, compare with fault-free runs, report what breaks.

The search (Sieve's, at mesh speed), for one target component and one workload
(`kubemesh.scenarios.explore_workloads`):

1. **Reference.** The workload runs twice without faults on fresh meshes (same seed, same bug
   switches). Each run yields the target's deliveries and writes (history `delivery` and
   `write` records whose component is the target) and the end state of the objects of every
   resource the workload or the target wrote. What differs between the two end states (per
   object group and field path) is learned as the mask; uids, resourceVersions, timestamps and
   generated name suffixes are masked always (`normalize`).
2. **Plans** (`derive_plans`), from the deliveries and writes both reference runs share:
   * `unobserved`: `watch.hold` of one (resource, event type, object) the target received,
     released `HOLD_DELAY` cluster seconds after the target receives the next event of another
     object that the target did not write itself (or after `HOLD_MAX`): the target sees the two
     in the other order, and the first one late;
   * `intermediate`: `component.crash` with restart, fired right after the target's first write
     of one (resource, event type);
   * `stale`: `component.freezeInformer` of one of the target's informers for `FREEZE_FOR`
     cluster seconds, armed on the delivery just before one (resource, event type, object), so
     the target acts on a view without it.
   Pruned to one plan per (resource, event type, family); ordered by family in turn, DELETED
   before ADDED before MODIFIED, ties broken by a `random.Random(seed)`; capped by the budget.
3. **Runs.** Each plan runs on a fresh mesh with the same workload and seed. Oracles: liveness
   (the workload converged: it raises `Stuck` when a wait of its own passed its deadline in
   cluster time) and the differential end state against the reference (masked). A failing plan
   is a finding: `finding.json` (the plan as a JSON fault list, the seed, the verdict in words,
   the diff, and the reference it was judged against) and the run's `history.jsonl`.
4. **Replay** (`replay`): a finding re-run `times` times on fresh meshes, each judged against the
   finding's own reference; below `FLAKY_BELOW` it is flaky, with its rate.

What still varies between runs with the same seed: the operating system's scheduling of the
mesh's processes (which of two events a watcher receives first when they are close), so a
plan's trigger can fire at slightly different points; the replay rate measures that.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

from kubemesh.scenarios import timeline
from kubemesh.scenarios.explore_workloads import Stuck, Workload, resolve
from kubemesh.scenarios.framework import ScenarioContext, ScenarioError
from kubemesh.scenarios.running import COMPONENT_ARGS, scrub_state
from kubemesh.services.machinery.clock import ClusterClock
from kubemesh.services.mesh.endpoint import MeshEndpoint, MeshError
from kubemesh.services.mesh.launching import Mesh, MeshSpec
from kubemesh.services.model.kinds import KINDS, Kind

Family = Literal["unobserved", "intermediate", "stale"]
FAMILIES: Final[tuple[Family, ...]] = ("unobserved", "intermediate", "stale")
WORKLOAD_COMPONENT: Final = "explore-workload"
"""The component name the workload's client sends (its writes in the history)."""
NOISE: Final = frozenset({"events", "leases", "endpointslices", "endpoints", "componentstatuses", "clusterroles",
                          "clusterrolebindings", "roles", "rolebindings", "serviceaccounts"})
"""Resources never perturbed and never compared: bookkeeping, not the workload's state."""
EVENT_ORDER: Final = {"DELETED": 0, "ADDED": 1, "MODIFIED": 2}
HOLD_DELAY: Final = 30.0
"""Cluster seconds a held event stays held after the release trigger's event reached the target."""
HOLD_MAX: Final = 60.0
"""Cluster seconds a hold lasts at most from the run's start: its release event may never come in a
perturbed run (it may be a consequence of the held one); then the target gets the event late, not never."""
FREEZE_FOR: Final = 20.0
"""Cluster seconds a frozen informer stays frozen."""
FLAKY_BELOW: Final = 0.9
"""A finding that reproduces in fewer than this share of its replays is flaky."""
_TIMESTAMP: Final = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}")
_DROPPED_META: Final = frozenset({"uid", "resourceVersion", "creationTimestamp", "managedFields", "selfLink",
                                  "deletionTimestamp", "generateName"})


# ---------------------------------------------------------------------------------------------
# end state: normalize, learn what varies, compare

State = dict[str, dict[str, str]]
"""Object group (`resource/namespace/name`, generated suffix as `*`) -> field path -> value (JSON)."""


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(value, list):
        # Conditions, containers, env: keyed by their type or name, so that an entry missing in
        # one run shows as that entry, not as every later index shifted by one.
        for k in ("type", "name"):
            if value and all(isinstance(v, dict) and isinstance(v.get(k), str) for v in value):
                for v in value:
                    _flatten(v, f"{prefix}[{v[k]}]", out)
                return
        for i, v in enumerate(value):
            _flatten(v, f"{prefix}[{i}]", out)
    elif not ((isinstance(value, str) and _TIMESTAMP.match(value))
              or prefix.endswith((".uid", "IP", ".ip", "containerID", "imageID"))):
        out[prefix] = value


def normalize(objects: Mapping[str, Iterable[Mapping[str, Any]]]) -> State:
    """The comparable end state of objects by resource (see `State`)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for resource, items in objects.items():
        if resource in NOISE:
            continue
        for obj in items:
            md = dict(obj.get("metadata") or {})
            name = str(md.get("name", ""))
            gen = md.get("generateName")
            owners = [str(o.get("name")) for o in md.get("ownerReferences") or [] if isinstance(o, dict)]
            if gen and name.startswith(str(gen)):
                name = f"{gen}*"
            elif any(name.startswith(f"{o}-") for o in owners):
                # A controller's child named after its owner: the suffix is the controller's choice.
                name = f"{next(o for o in owners if name.startswith(f'{o}-'))}-*"
            group = f"{resource}/{md.get('namespace') or ''}/{name}"
            flat: dict[str, Any] = {}
            body = {k: v for k, v in obj.items() if k != "metadata"}
            body["metadata"] = {k: v for k, v in md.items() if k not in _DROPPED_META and k != "name"}
            _flatten(body, "", flat)
            groups.setdefault(group, []).append(flat)
    state: State = {}
    for group, flats in groups.items():
        paths = sorted({p for f in flats for p in f})
        # Objects sharing a group (generated names) are compared as a multiset, per field.
        state[group] = {p: " | ".join(sorted(json.dumps(f.get(p), sort_keys=True) for f in flats)) for p in paths}
        state[group]["#count"] = str(len(flats))
    return state


def learn_mask(a: State, b: State) -> set[str]:
    """What varies between two fault-free end states: `group` (present in one only) or `group|path`."""
    mask: set[str] = set()
    for group in a.keys() | b.keys():
        if group not in a or group not in b:
            mask.add(group)
            continue
        for path in a[group].keys() | b[group].keys():
            if a[group].get(path) != b[group].get(path):
                mask.add(f"{group}|{path}")
    return mask


def diff(reference: State, observed: State, mask: set[str], *, limit: int = 20) -> list[str]:
    """The differences that are not masked, in words (`+` only in the run, `-` only in the reference)."""
    out: list[str] = []
    for group in sorted(reference.keys() | observed.keys()):
        if group in mask:
            continue
        if group not in observed:
            out.append(f"- {group}: exists in the fault-free runs, not in this one")
            continue
        if group not in reference:
            out.append(f"+ {group}: exists in this run, not in the fault-free runs")
            continue
        for path in sorted(reference[group].keys() | observed[group].keys()):
            if f"{group}|{path}" in mask:
                continue
            ref, got = reference[group].get(path), observed[group].get(path)
            if ref != got:
                out.append(f"~ {group} {path}: {ref} in the fault-free runs, {got} in this one")
    return out[:limit] + ([f"... {len(out) - limit} more"] if len(out) > limit else [])


# ---------------------------------------------------------------------------------------------
# one run


@dataclass(kw_only=True)
class Run:
    """What one run of the workload showed."""

    stuck: str | None
    """Why the workload did not converge (None: it did)."""
    cluster_s: float
    wall_s: float
    state: State
    deliveries: list[tuple[str, str, str]]
    """(resource, event, key) of each delivery to the target, in order."""
    writes: list[tuple[str, str, str]]
    """(resource, event, key) of each write by the target, in order."""
    history: list[dict[str, Any]] = field(default_factory=list)


class ExploreContext(ScenarioContext):
    """A `ScenarioContext` that also knows the mesh's kubeconfig (`ctx.kubeconfig`)."""

    kubeconfig: Path


def same_component(a: str, b: str) -> bool:
    """Whether two spellings name one component (`controller_manager` is `controller-manager`)."""
    return a.replace("_", "-") == b.replace("_", "-")


def _kind(resource: str) -> Kind | None:
    return next((k for k in KINDS if k.plural == resource and k.storage), None)


async def run_workload(workload: Workload, *, target: str, bugs: Sequence[str], profile: str, seed: int,
                       faults: Sequence[Mapping[str, Any]], out: Path,
                       log: Callable[[str], None] | None = None) -> Run:
    """Run the workload once on a fresh mesh with `faults` created first (see the module docstring)."""
    _fresh(out)
    shape = workload.shape
    extra: dict[str, list[str]] = {c: list(a) for c, a in COMPONENT_ARGS.items()}
    for comp, args in shape.extra_args.items():
        extra.setdefault(comp, []).extend(args)
    spec = MeshSpec(nodes=shape.nodes, zones=shape.zones, kubelets=shape.kubelets, capacity=shape.capacity,
                    clock_rate=shape.clock_rate, bugs=tuple(bugs), profile=profile, seed=seed,
                    state_dir=out / "mesh", extra_args=extra, start_timeout=30.0, stop_grace=2.0)
    started = time.monotonic()
    mesh = Mesh(spec)
    stuck: str | None = None
    history: list[dict[str, Any]] = []
    objects: dict[str, list[dict[str, Any]]] = {}
    cluster_s = 0.0
    ctx: ExploreContext | None = None
    try:
        try:
            await mesh.start()
        except MeshError as exc:
            raise ScenarioError(f"the mesh did not start: {str(exc).splitlines()[0]}") from exc
        endpoint: MeshEndpoint = mesh.endpoint
        async with mesh.client(WORKLOAD_COMPONENT) as client, endpoint.chaos(instance="explore") as chaos:
            clock = ClusterClock.from_document(await client.get_clock())
            ctx = ExploreContext(mesh=endpoint, client=client, chaos=chaos, clock=clock, mode="fixed", seed=seed,
                                 log=log)
            ctx.kubeconfig = out / "mesh" / "kubeconfig"
            for f in faults:
                await ctx.add_fault(dict(f))
            try:
                async with _deadline(workload.deadline / shape.clock_rate):
                    await workload.run(ctx)
            except Stuck as exc:
                stuck = str(exc)
            except TimeoutError:
                stuck = f"the workload did not finish within {workload.deadline:.0f} s of cluster time"
            cluster_s = ctx.elapsed()
            history = await endpoint.history(component=WORKLOAD_COMPONENT)
            written = {str(r.get("resource")) for r in history if r.get("type") == "write" and (
                r.get("component") == WORKLOAD_COMPONENT or same_component(str(r.get("component")), target))}
            for resource in sorted(written - NOISE):
                kind = _kind(resource)
                if kind is not None:
                    objects[resource] = list((await client.list(kind)).get("items") or [])
    finally:
        with contextlib.suppress(Exception):
            await mesh.stop()
        scrub_state(out / "mesh")
    _write_history(out, history, ctx=ctx, title=f"explore {target} with {workload.name}, seed {seed}",
                   verdict=stuck or "converged")

    def of(kind: str) -> list[tuple[str, str, str]]:
        return [(str(r.get("resource")), str(r.get("event")), str(r.get("key"))) for r in history
                if r.get("type") == kind and same_component(str(r.get("component")), target)
                and r.get("resource") not in NOISE]

    return Run(stuck=stuck, cluster_s=cluster_s, wall_s=time.monotonic() - started, state=normalize(objects),
               deliveries=of("delivery"), writes=of("write"), history=history)


def _deadline(wall_s: float) -> asyncio.Timeout:
    return asyncio.timeout(wall_s)


def _write_history(out: Path, history: Sequence[dict[str, Any]], *, ctx: ScenarioContext | None, title: str,
                   verdict: str) -> None:
    """`history.jsonl` and `timeline.html` (the scenarios' page) of one run."""
    with (out / "history.jsonl").open("w") as fh:
        for r in history:
            fh.write(json.dumps(r, sort_keys=True) + "\n")
    if ctx is not None:
        page = timeline.render(history=history, title=title, verdict=verdict, t0=ctx.t0,
                               t_end=float(history[-1]["time"]) if history else None, moments=ctx.moments,
                               windows=ctx.windows, focus=set(ctx.focus_keys))
        (out / "timeline.html").write_text(page)


def _fresh(out: Path) -> None:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)


# ---------------------------------------------------------------------------------------------
# plans


@dataclass(frozen=True, kw_only=True)
class Plan:
    """One perturbation: a family, a label in words and the faults (chaos specs) that make it."""

    family: Family
    label: str
    faults: tuple[dict[str, Any], ...]


def _selector(resource: str, key: str) -> dict[str, Any]:
    ns, _, name = key.rpartition("/")
    out: dict[str, Any] = {"name": name}
    if ns:
        out["namespace"] = ns
    return out


def derive_plans(refs: Sequence[Run], *, target: str, seed: int, touched: set[str] | None = None) -> list[Plan]:
    """Every plan the references suggest, pruned and ordered (see the module docstring).

    `touched`: keys the workload wrote; among the objects of one (resource, event type) those
    are perturbed first.
    """
    rng = random.Random(seed)
    common_d = set(refs[0].deliveries).intersection(*(r.deliveries for r in refs[1:]))
    common_w = set(refs[0].writes).intersection(*(r.writes for r in refs[1:]))
    seq = [d for d in refs[0].deliveries if d in common_d and not (d[0] == "nodes" and d[1] == "MODIFIED")]
    touched = touched or set()
    chosen: dict[tuple[str, str], tuple[int, tuple[str, str, str]]] = {}
    for i, d in enumerate(seq):
        res, ev, key = d
        prev = chosen.get((res, ev))
        if prev is None or (key in touched and prev[1][2] not in touched):
            chosen[(res, ev)] = (i, d)
    by_family: dict[Family, list[tuple[tuple[int, float], Plan]]] = {f: [] for f in FAMILIES}
    for (res, ev), (i, (_, _, key)) in chosen.items():
        order = (EVENT_ORDER.get(ev, 3), rng.random())
        # The release is an event of another object that the target did not write itself (its own
        # echo may wait on the held event: a hold released by it would never end before HOLD_MAX).
        nxt = next((d for d in seq[i + 1:] if d[2] != key and d not in common_w), None)
        hold: dict[str, Any] = {"name": "explore-hold", "type": "watch.hold", "target": {"component": target},
                                "match": {"resources": [res], "eventTypes": [ev], **_selector(res, key)},
                                "duration": HOLD_MAX}
        label = f"hold {res} {ev} {key} from {target}"
        if nxt is not None:
            hold["trigger"] = {"action": "release", "on": "delivered", "component": target, "resource": nxt[0],
                               "eventTypes": [nxt[1]], **_selector(nxt[0], nxt[2]), "delay": HOLD_DELAY}
            label += f" until {HOLD_DELAY:.0f} s after it receives {nxt[0]} {nxt[1]} {nxt[2]}"
        by_family["unobserved"].append((order, Plan(family="unobserved", label=label, faults=(hold,))))
        before = next((d for d in reversed(seq[:i]) if d[0] == res and d[2] != key), None)
        if before is not None:
            freeze: dict[str, Any] = {"name": "explore-freeze", "type": "component.freezeInformer",
                                      "target": {"component": target}, "params": {"informer": res},
                                      "duration": FREEZE_FOR,
                                      "trigger": {"action": "arm", "on": "delivered", "component": target,
                                                  "resource": before[0], "eventTypes": [before[1]],
                                                  **_selector(before[0], before[2])}}
            by_family["stale"].append((order, Plan(
                family="stale", faults=(freeze,),
                label=f"freeze {target}'s {res} informer for {FREEZE_FOR:.0f} s from its receipt of {before[1]} "
                      f"{before[2]}, so it misses {ev} {key}")))
    seen_w: set[tuple[str, str]] = set()
    for res, ev, key in refs[0].writes:
        if (res, ev, key) not in common_w or (res, ev) in seen_w:
            continue
        seen_w.add((res, ev))
        crash = {"name": "explore-crash", "type": "component.crash", "target": {"component": target},
                 "params": {"restart": True}, "duration": None,
                 "trigger": {"action": "fire", "on": "written", "component": target, "resource": res,
                             "eventTypes": [ev], "occurrence": 1}}
        by_family["intermediate"].append(((EVENT_ORDER.get(ev, 3), rng.random()), Plan(
            family="intermediate", faults=(crash,),
            label=f"crash {target} and restart it right after its first {ev} write of {res} (e.g. {key})")))
    ordered = {f: [p for _, p in sorted(v, key=lambda t: t[0])] for f, v in by_family.items()}
    out: list[Plan] = []
    while any(ordered.values()):
        for f in FAMILIES:
            if ordered[f]:
                out.append(ordered[f].pop(0))
    return out


# ---------------------------------------------------------------------------------------------
# judging, findings, the search


@dataclass(kw_only=True)
class Reference:
    """What a run is judged against: the masked end state and how long the fault-free runs took."""

    state: State
    mask: set[str]
    converged_s: float

    def judge(self, run: Run) -> tuple[bool, str, list[str]]:
        """(failed, the verdict in words, the diff)."""
        d = diff(self.state, run.state, self.mask)
        if run.stuck is not None:
            return True, (f"liveness: {run.stuck}; in the fault-free runs the workload converged after "
                          f"{self.converged_s:.1f} s of cluster time"), d
        if d:
            return True, f"end state: {len(d)} difference(s) from the fault-free runs, first: {d[0]}", d
        return False, f"converged after {run.cluster_s:.1f} s of cluster time, end state as in the fault-free runs", d

    def public(self) -> dict[str, Any]:
        """JSON form (kept in a finding, so that replay judges against the same reference)."""
        return {"state": self.state, "mask": sorted(self.mask), "converged_s": self.converged_s}

    @classmethod
    def from_public(cls, doc: Mapping[str, Any]) -> Reference:
        """Inverse of `public`."""
        return cls(state=dict(doc["state"]), mask=set(doc["mask"]), converged_s=float(doc["converged_s"]))


@dataclass(kw_only=True)
class Finding:
    """A plan whose run failed an oracle."""

    family: str
    plan: list[dict[str, Any]]
    label: str
    seed: int
    verdict: str
    diff: list[str]
    replay_rate: float
    """Share of the runs of the plan that failed: 1.0 (the one run) until replayed."""
    report: str
    replays: int = 0

    def public(self) -> dict[str, Any]:
        """The contract's JSON form."""
        return {"family": self.family, "plan": self.plan, "label": self.label, "seed": self.seed,
                "verdict": self.verdict, "diff": self.diff, "replay_rate": self.replay_rate, "replays": self.replays,
                "report": self.report}


@dataclass(kw_only=True)
class Summary:
    """What one exploration did (`kubemesh explore run --json` prints `public()`)."""

    target: str
    workload: str
    seed: int
    bugs: list[str]
    plans_generated: int = 0
    plans_pruned: int = 0
    plans_run: int = 0
    findings: list[Finding] = field(default_factory=list)
    wall_s: float = 0.0
    runs: int = 0
    report_dir: str = ""
    reference_error: str | None = None

    @property
    def runs_per_minute(self) -> float:
        """Mesh runs (references included) per wall minute."""
        return 60.0 * self.runs / self.wall_s if self.wall_s else 0.0

    def by_family(self) -> dict[str, int]:
        """Findings per family."""
        return {f: sum(1 for x in self.findings if x.family == f) for f in FAMILIES}

    def public(self) -> dict[str, Any]:
        """The contract's JSON form, plus the rest of the summary."""
        return {"plans_generated": self.plans_generated, "plans_pruned": self.plans_pruned,
                "plans_run": self.plans_run, "findings": [f.public() for f in self.findings],
                "findings_by_family": self.by_family(), "wall_s": round(self.wall_s, 1), "runs": self.runs,
                "runs_per_minute": round(self.runs_per_minute, 2), "target": self.target, "workload": self.workload,
                "seed": self.seed, "bugs": self.bugs, "report_dir": self.report_dir,
                "reference_error": self.reference_error}

    def lines(self) -> list[str]:
        """The summary in words."""
        fam = ", ".join(f"{f} {n}" for f, n in self.by_family().items())
        return [f"explore {self.target} with {self.workload}, seed {self.seed}, bugs {','.join(self.bugs) or '-'}",
                f"plans: {self.plans_generated} generated, {self.plans_pruned} pruned, {self.plans_run} run",
                f"findings: {len(self.findings)} ({fam})",
                f"wall {self.wall_s:.1f} s, {self.runs} runs, {self.runs_per_minute:.1f} runs per minute",
                f"reports: {self.report_dir}"]


def _distinct_events(refs: Sequence[Run]) -> int:
    return len({d for r in refs for d in r.deliveries} | {w for r in refs for w in r.writes})


async def explore(workload: Workload, *, target: str, budget: int, seed: int, report_dir: Path,
                  bugs: Sequence[str] = (), profile: str = "current", replays: int = 0,
                  families: Sequence[Family] = FAMILIES, log: Callable[[str], None] | None = None) -> Summary:
    """Reference runs, plans, perturbed runs, findings (see the module docstring)."""
    say = log or (lambda _line: None)
    started = time.monotonic()
    summary = Summary(target=target, workload=workload.name, seed=seed, bugs=list(bugs),
                      report_dir=str(report_dir))
    refs: list[Run] = []
    for i in (1, 2):
        run = await run_workload(workload, target=target, bugs=bugs, profile=profile, seed=seed, faults=(),
                                 out=report_dir / f"reference-{i}")
        summary.runs += 1
        say(f"reference {i}: {'stuck: ' + run.stuck if run.stuck else 'converged'} in {run.cluster_s:.1f} s of "
            f"cluster time ({run.wall_s:.1f} s wall); the target received {len(run.deliveries)} events and made "
            f"{len(run.writes)} writes")
        refs.append(run)
    if any(r.stuck for r in refs) or not refs[0].deliveries:
        summary.reference_error = next((r.stuck for r in refs if r.stuck),
                                       f"the target {target} received nothing: is it the component's name?")
        say(f"the fault-free runs do not give a reference: {summary.reference_error}")
        summary.wall_s = time.monotonic() - started
        return summary
    reference = Reference(state=refs[0].state, mask=learn_mask(refs[0].state, refs[1].state),
                          converged_s=max(r.cluster_s for r in refs))
    touched = {str(r.get("key")) for r in refs[0].history
               if r.get("type") == "write" and r.get("component") == WORKLOAD_COMPONENT}
    plans = [p for p in derive_plans(refs, target=target, seed=seed, touched=touched) if p.family in families]
    summary.plans_generated = _distinct_events(refs) * len(families)
    summary.plans_pruned = summary.plans_generated - len(plans)
    say(f"{len(reference.mask)} masked field(s); {summary.plans_generated} candidate plans, "
        f"{len(plans)} after pruning, budget {budget}")
    for n, plan in enumerate(plans[:budget], 1):
        out = report_dir / f"plan-{n:02d}-{plan.family}"
        run = await run_workload(workload, target=target, bugs=bugs, profile=profile, seed=seed,
                                 faults=plan.faults, out=out)
        summary.runs += 1
        summary.plans_run += 1
        failed, verdict, d = reference.judge(run)
        left = max(0, min(budget, len(plans)) - n)
        say(f"[{n}/{min(budget, len(plans))}] {plan.family}: {plan.label}: "
            f"{'FINDING ' if failed else 'ok '}{verdict} ({run.wall_s:.1f} s wall; "
            f"{len(summary.findings) + failed} finding(s) so far, {left} plan(s) left)")
        if not failed:
            continue
        finding = Finding(family=plan.family, plan=[dict(f) for f in plan.faults], label=plan.label, seed=seed,
                          verdict=verdict, diff=d, replay_rate=1.0, report=str((out / "finding.json").resolve()))
        doc = {**finding.public(), "target": target, "workload": workload.name, "bugs": list(bugs),
               "profile": profile, "reference": reference.public()}
        (out / "finding.json").write_text(json.dumps(doc, indent=1))
        (out / "verdict.txt").write_text(f"{verdict}\n\nplan ({plan.family}): {plan.label}\n"
                                         + "".join(f"  {x}\n" for x in d))
        if replays:
            rate, _ = await replay(out / "finding.json", times=replays, workload=workload)
            summary.runs += replays
            finding.replay_rate = rate
            finding.replays = replays
            say(f"    replayed {replays} times: reproduced {rate:.0%}{' (flaky)' if rate < FLAKY_BELOW else ''}")
        summary.findings.append(finding)
    summary.wall_s = time.monotonic() - started
    (report_dir / "summary.json").write_text(json.dumps(summary.public(), indent=1))
    return summary


async def replay(finding: Path, *, times: int, workload: Workload | None = None, bugs: Sequence[str] | None = None,
                 log: Callable[[str], None] | None = None) -> tuple[float, list[str]]:
    """Re-run a finding `times` times; (the share of runs that failed its oracles, their verdicts).

    `bugs` replaces the finding's bug switches (`()`: the fixed code under the same plan).
    """
    doc = _load(finding)
    wl = workload or resolve(str(doc["workload"]))
    reference = Reference.from_public(doc["reference"])
    verdicts: list[str] = []
    failed = 0
    for i in range(1, times + 1):
        switches = list(doc.get("bugs") or []) if bugs is None else list(bugs)
        run = await run_workload(wl, target=str(doc["target"]), bugs=switches,
                                 profile=str(doc.get("profile") or "current"), seed=int(doc["seed"]),
                                 faults=list(doc["plan"]), out=finding.parent / f"replay-{i:02d}")
        bad, verdict, _ = reference.judge(run)
        failed += bad
        verdicts.append(verdict)
        if log is not None:
            log(f"replay {i}/{times}: {'reproduced' if bad else 'not reproduced'}: {verdict}")
    return (failed / times if times else 0.0), verdicts


def _load(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text()))

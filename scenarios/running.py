"""The scenario runner: a fresh mesh per run, the oracle's verdict, and a report per run.

`run_scenario` runs one scenario `repeat` times per mode. Each run:

1. starts a fresh mesh (`kubemesh.services.mesh.launching.Mesh`) shaped as the scenario asks, as
   the scenario's release (`Scenario.profile`, or the `profile` given), with the scenario's bug
   switches on in buggy mode and off in fixed mode, seeded with the run's seed;
2. runs the scenario against it (a deadline in cluster time; a crash or a missing capability
   makes the run inconclusive, never a guess);
3. collects the apiserver's history and the Events before the mesh stops;
4. writes the report directory `<report_dir>/<scenario>/<mode>-seed<seed>/`: `verdict.txt`
   (the verdict in words), `history.jsonl`, `timeline.html` (self-contained) and `run.json`;
   the processes' logs stay in `mesh/logs/`.

A run is as expected when buggy mode reproduced and fixed mode prevented the race.

`run_once(..., faults=False)` runs a scenario with its injections skipped (see
`ScenarioContext`); its report directory is `<mode>-nofaults-seed<seed>/` and the outcome it
expects is the caller's (`kubemesh.scenarios.verifying` runs these).

`run_scenario(..., target=ExistingMesh(...))` runs on a mesh that is already running instead
(the compose stack): see `scenarios.attached`.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

from kubemesh.scenarios.attached import ExistingMesh, run_attached
from kubemesh.scenarios.catalog import SCENARIOS
from kubemesh.scenarios.framework import Mode, Outcome, Scenario, ScenarioContext, Verdict
from kubemesh.scenarios.reporting import RunResult, guarded_run, write_report
from kubemesh.services.machinery.clock import ClusterClock
from kubemesh.services.mesh.endpoint import MeshError
from kubemesh.services.mesh.launching import Mesh, MeshSpec
from kubemesh.services.model import profiles
from kubemesh.services.model.kinds import EVENTS

DEFAULT_REPORT_ROOT: Final = Path("kubemesh-reports")

COMPONENT_ARGS: Final[dict[str, tuple[str, ...]]] = {"apiserver": ("--no-system-pods",)}
"""Flags given to every component of every scenario mesh (on top of the scenario's).

A scenario's cluster holds only the scenario's objects: no control-plane mirror pods (the
scheduler would cache their host as a node it has no Node for) and no cluster DNS pods taking
room on the nodes; the races are measured as the seeds describe them."""


def mode_switches(scenario: Scenario, mode: Mode, profile: str) -> tuple[str, ...]:
    """The `--bugs` of a fresh mesh: the mode's switches, and `-NAME` in fixed mode.

    `-NAME` turns off each of the scenario's own switches that its release turns on: the fix
    backported to that release.
    """
    fixes = (*scenario.bugs, *scenario.also_fixed)
    off = tuple(f"-{b}" for b in fixes if mode == "fixed" and b in profiles.resolve(profile).bugs())
    return (*scenario.bugs_for(mode), *off)


def effective_bugs(scenario: Scenario, mode: Mode, profile: str) -> list[str]:
    """Every switch a fresh mesh of this mode runs with: the release's, plus the mode's, minus the fixed ones."""
    chosen = set(profiles.resolve(profile).bugs()) | set(scenario.bugs_for(mode))
    if mode == "fixed":
        chosen -= {*scenario.bugs, *scenario.also_fixed}
    return sorted(chosen)


def catalog() -> dict[str, Scenario]:
    """Every scenario by name, in catalog order."""
    return {s.name: s for s in SCENARIOS}


def default_report_dir() -> Path:
    """`./kubemesh-reports/<timestamp>`."""
    return DEFAULT_REPORT_ROOT / time.strftime("%Y%m%d-%H%M%S")


def seeds(base: int | None, repeat: int) -> list[int]:
    """The seeds of `repeat` runs: `base, base+1, ...` (a random base when None)."""
    if base is None:
        base = random.SystemRandom().randrange(1, 1_000_000)
    return [base + i for i in range(repeat)]


async def run_scenario(scenario: Scenario, *, modes: Sequence[Mode] = ("buggy", "fixed"), repeat: int = 1,
                       seed: int | None = None, clock_rate: float | None = None, report_dir: Path | None = None,
                       log: Callable[[str], None] | None = None,
                       on_result: Callable[[RunResult], None] | None = None,
                       target: ExistingMesh | None = None, profile: str | None = None) -> list[RunResult]:
    """Run a scenario `repeat` times in each mode (seeds `seed`, `seed+1`, ...).

    `profile` runs fresh meshes as another release than the scenario's own (`current`: today's).

    With `target`, every run attaches to that running mesh instead of starting a fresh one
    (`scenarios.attached.run_attached`: checked, recorded, cleaned up, never torn down); the
    mesh's clock is what it is, so `clock_rate` must be None.
    """
    if target is not None and clock_rate is not None:
        raise ValueError("clock_rate cannot be set for a run attached to an existing mesh")
    root = report_dir or default_report_dir()
    results: list[RunResult] = []
    for s in seeds(seed, repeat):
        for mode in modes:
            if target is not None:
                r = await run_attached(scenario, target=target, mode=mode, seed=s, report_dir=root, log=log)
            else:
                r = await run_once(scenario, mode=mode, seed=s, clock_rate=clock_rate, report_dir=root, log=log,
                                   profile=profile)
            results.append(r)
            if on_result is not None:
                on_result(r)
    return results


async def run_once(scenario: Scenario, *, mode: Mode, seed: int, clock_rate: float | None = None,
                   report_dir: Path, log: Callable[[str], None] | None = None, faults: bool = True,
                   expected: Outcome | None = None, profile: str | None = None) -> RunResult:
    """One run: fresh mesh, scenario, verdict, report (see the module docstring).

    `faults=False` skips the scenario's injections; `expected` (default: the mode's outcome)
    is what the run's `ok` compares with; `profile` (default: the scenario's) is the release
    the mesh runs as. A run whose verdict says the machine stalled the mesh (`Verdict.machine_stall`:
    it tells nothing about the race) is run once more on a fresh mesh, and the second run stands.
    """
    for attempt in (1, 2):
        result, stalled = await _run(scenario, mode=mode, seed=seed, clock_rate=clock_rate, report_dir=report_dir,
                                     log=log, faults=faults, expected=expected, profile=profile)
        if not stalled or attempt == 2:
            return result
        if log is not None:
            log(f"{scenario.name} {mode}: the machine stalled the mesh ({result.summary[:120]}...); running it again")
    raise AssertionError("unreachable")


async def _run(scenario: Scenario, *, mode: Mode, seed: int, clock_rate: float | None, report_dir: Path,
               log: Callable[[str], None] | None, faults: bool, expected: Outcome | None,
               profile: str | None) -> tuple[RunResult, bool]:
    """One attempt of `run_once`: its result, and whether the machine stalled it."""
    release = profile or scenario.profile
    shape = scenario.mesh_shape(mode)
    rate = clock_rate or shape.clock_rate
    out = report_dir / scenario.name / (f"{mode}-seed{seed}" if faults else f"{mode}-nofaults-seed{seed}")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    extra: dict[str, list[str]] = {c: list(a) for c, a in COMPONENT_ARGS.items()}
    for comp, args in shape.extra_args.items():
        extra.setdefault(comp, []).extend(args)
    spec = MeshSpec(nodes=shape.nodes, zones=shape.zones, kubelets=shape.kubelets, capacity=shape.capacity,
                    store=shape.store, apiservers=shape.apiservers,
                    clock_rate=rate, bugs=mode_switches(scenario, mode, release), profile=release, seed=seed,
                    state_dir=out / "mesh", extra_args=extra, start_timeout=30.0, stop_grace=2.0)
    started = time.monotonic()
    mesh = Mesh(spec)
    verdict: Verdict
    history: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    ctx: ScenarioContext | None = None
    cluster_s = 0.0
    t0 = t_end = 0.0
    try:
        try:
            await mesh.start()
        except MeshError as exc:
            verdict = Verdict(outcome="inconclusive", summary=f"the mesh did not start: {str(exc).splitlines()[0]}",
                              evidence=tuple(str(exc).splitlines()[1:40]))
        else:
            endpoint = mesh.endpoint
            async with mesh.client("scenario") as client, endpoint.chaos(instance="scenario") as chaos:
                clock = ClusterClock.from_document(await client.get_clock())
                ctx = ScenarioContext(mesh=endpoint, client=client, chaos=chaos, clock=clock, mode=mode, seed=seed,
                                      log=log, faults=faults)
                t0 = ctx.t0
                verdict = await guarded_run(scenario, ctx)
                t_end = ctx.now()
                cluster_s = t_end - t0
                with contextlib.suppress(Exception):
                    history = await endpoint.history(component="scenario")
                with contextlib.suppress(Exception):
                    events = list((await client.list(EVENTS)).get("items") or [])
    finally:
        with contextlib.suppress(Exception):
            await mesh.stop()
    startup = mesh.ready_seconds
    wall_s = time.monotonic() - started
    scrub_state(out / "mesh")
    result = RunResult(scenario=scenario.name, mode=mode, seed=seed, outcome=verdict.outcome, wall_s=wall_s,
                       cluster_s=cluster_s, report=str(out.resolve()), summary=verdict.summary,
                       expected=expected or scenario.expected[mode], startup_s=startup,
                       evidence=list(verdict.evidence), bugs=effective_bugs(scenario, mode, release),
                       profile=release, faults=faults,
                       skipped=list(ctx.skipped) if ctx is not None else [])
    write_report(out, scenario=scenario, result=result, verdict=verdict, ctx=ctx, history=history, events=events,
                 t0=t0, t_end=t_end, clock_rate=rate)
    return result, verdict.outcome == "inconclusive" and verdict.machine_stall


def scrub_state(state: Path) -> None:
    """Remove the throwaway credentials from a finished mesh's state directory (keep the logs)."""
    for name in ("token", "kubeconfig", "pki", "mesh.json", "data"):
        p = state / name
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                p.unlink()



"""The scenario runner: a fresh mesh per run, the oracle's verdict, and a report per run.

`run_scenario` runs one scenario `repeat` times per mode. Each run:

1. starts a fresh mesh (`services.launching.Mesh`) shaped as the scenario asks, with the
   scenario's bug switches on in buggy mode and none in fixed mode, seeded with the run's seed;
2. runs the scenario against it (a deadline in cluster time; a crash or a missing capability
   makes the run inconclusive, never a guess);
3. collects the apiserver's history and the Events before the mesh stops;
4. writes the report directory `<report_dir>/<scenario>/<mode>-seed<seed>/`: `verdict.txt`
   (the verdict in words), `history.jsonl`, `timeline.html` (self-contained) and `run.json`;
   the processes' logs stay in `mesh/logs/`.

A run is as expected when buggy mode reproduced and fixed mode prevented the race.

`run_scenario(..., target=ExistingMesh(...))` runs on a mesh that is already running instead
(the compose stack): see `scenarios.attached`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import ssl
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import aiohttp

from scenarios import timeline
from scenarios.framework import (
    EXPECTED,
    Mode,
    Outcome,
    Scenario,
    ScenarioContext,
    ScenarioError,
    Verdict,
    fetch_history,
)
from services.clock import ClusterClock

if TYPE_CHECKING:
    from scenarios.attached import ExistingMesh

DEFAULT_REPORT_ROOT: Final = Path("kubemesh-reports")

COMPONENT_ARGS: Final[dict[str, tuple[str, ...]]] = {}
"""Flags given to every component of every scenario mesh (on top of the scenario's)."""


@dataclass(kw_only=True)
class RunResult:
    """One run of one scenario in one mode (what `--json` prints, plus details)."""

    scenario: str
    mode: Mode
    seed: int
    outcome: Outcome
    wall_s: float
    cluster_s: float
    report: str
    summary: str = ""
    expected: Outcome = "reproduced"
    startup_s: float | None = None
    evidence: list[str] = field(default_factory=list)
    bugs: list[str] = field(default_factory=list)
    """The bug switches the run's mesh had on (`Scenario.bugs_for(mode)`)."""

    @property
    def ok(self) -> bool:
        """Whether the outcome is the one expected for the mode."""
        return self.outcome == self.expected

    def public(self) -> dict[str, Any]:
        """The `--json` object."""
        return {"scenario": self.scenario, "mode": self.mode, "seed": self.seed, "outcome": self.outcome,
                "wall_s": round(self.wall_s, 3), "cluster_s": round(self.cluster_s, 3), "report": self.report,
                "bugs": list(self.bugs)}


def catalog() -> dict[str, Scenario]:
    """Every scenario by name, in catalog order."""
    from scenarios.catalog import SCENARIOS

    return {s.name: s for s in SCENARIOS}


def default_report_dir() -> Path:
    """`./kubemesh-reports/<timestamp>`."""
    return DEFAULT_REPORT_ROOT / time.strftime("%Y%m%d-%H%M%S")


def seeds(base: int | None, repeat: int) -> list[int]:
    """The seeds of `repeat` runs: `base, base+1, ...` (a random base when None)."""
    if base is None:
        import random

        base = random.SystemRandom().randrange(1, 1_000_000)
    return [base + i for i in range(repeat)]


async def run_scenario(scenario: Scenario, *, modes: Sequence[Mode] = ("buggy", "fixed"), repeat: int = 1,
                       seed: int | None = None, clock_rate: float | None = None, report_dir: Path | None = None,
                       log: Callable[[str], None] | None = None,
                       on_result: Callable[[RunResult], None] | None = None,
                       target: ExistingMesh | None = None) -> list[RunResult]:
    """Run a scenario `repeat` times in each mode (seeds `seed`, `seed+1`, ...).

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
                from scenarios.attached import run_attached

                r = await run_attached(scenario, target=target, mode=mode, seed=s, report_dir=root, log=log)
            else:
                r = await run_once(scenario, mode=mode, seed=s, clock_rate=clock_rate, report_dir=root, log=log)
            results.append(r)
            if on_result is not None:
                on_result(r)
    return results


def _ssl_context(mesh: Any) -> ssl.SSLContext | bool:
    ca = mesh.ca_path
    return ssl.create_default_context(cafile=str(ca)) if ca is not None else True


async def run_once(scenario: Scenario, *, mode: Mode, seed: int, clock_rate: float | None = None,
                   report_dir: Path, log: Callable[[str], None] | None = None) -> RunResult:
    """One run: fresh mesh, scenario, verdict, report (see the module docstring)."""
    from services.launching import Mesh, MeshError, MeshSpec

    shape = scenario.mesh_shape(mode)
    rate = clock_rate or shape.clock_rate
    out = report_dir / scenario.name / f"{mode}-seed{seed}"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    extra: dict[str, list[str]] = {c: list(a) for c, a in COMPONENT_ARGS.items()}
    for comp, args in shape.extra_args.items():
        extra.setdefault(comp, []).extend(args)
    spec = MeshSpec(nodes=shape.nodes, zones=shape.zones, kubelets=shape.kubelets, capacity=shape.capacity,
                    clock_rate=rate, bugs=scenario.bugs_for(mode), seed=seed,
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
            connector = aiohttp.TCPConnector(ssl=_ssl_context(mesh))
            async with aiohttp.ClientSession(connector=connector) as session, mesh.client("scenario") as client:
                clock = ClusterClock.from_document(await client.get_clock())
                ctx = ScenarioContext(mesh=mesh, client=client, clock=clock, mode=mode, seed=seed,
                                      session=session, log=log)
                t0 = ctx.t0
                verdict = await _guarded_run(scenario, ctx)
                t_end = ctx.now()
                cluster_s = t_end - t0
                with contextlib.suppress(Exception):
                    history = await fetch_history(session, mesh.apiserver_url, mesh.token)
                with contextlib.suppress(Exception):
                    from services.kinds import EVENTS

                    events = list((await client.list(EVENTS)).get("items") or [])
    finally:
        with contextlib.suppress(Exception):
            await mesh.stop()
    startup = mesh.ready_seconds
    wall_s = time.monotonic() - started
    _scrub_state(out / "mesh")
    result = RunResult(scenario=scenario.name, mode=mode, seed=seed, outcome=verdict.outcome, wall_s=wall_s,
                       cluster_s=cluster_s, report=str(out.resolve()), summary=verdict.summary,
                       expected=EXPECTED[mode], startup_s=startup, evidence=list(verdict.evidence),
                       bugs=list(scenario.bugs_for(mode)))
    write_report(out, scenario=scenario, result=result, verdict=verdict, ctx=ctx, history=history, events=events,
                 t0=t0, t_end=t_end, clock_rate=rate)
    return result


async def _guarded_run(scenario: Scenario, ctx: ScenarioContext) -> Verdict:
    """Run the scenario; a crash, a missing capability or the deadline is inconclusive."""
    if scenario.needs_chaos and not await ctx.chaos_available():
        return Verdict(outcome="inconclusive",
                       summary="this scenario needs the chaos front door (/chaos/v1/faults), which the apiserver "
                               "does not serve")
    budget = ctx.clock.to_wall(scenario.deadline) + 20.0
    try:
        async with asyncio.timeout(budget):
            return await scenario.run(ctx)
    except ScenarioError as exc:
        return Verdict(outcome="inconclusive", summary=f"the scenario could not proceed: {exc}",
                       evidence=tuple(ctx.lines))
    except TimeoutError:
        return Verdict(outcome="inconclusive",
                       summary=f"the scenario did not finish within {scenario.deadline:.0f} cluster seconds",
                       evidence=tuple(ctx.lines))
    except Exception as exc:
        tb = traceback.format_exception(exc)
        return Verdict(outcome="inconclusive", summary=f"the scenario crashed: {type(exc).__name__}: {exc}",
                       evidence=tuple("".join(tb).splitlines()[-25:]))


def _scrub_state(state: Path) -> None:
    """Remove the throwaway credentials from a finished mesh's state directory (keep the logs)."""
    for name in ("token", "kubeconfig", "pki", "mesh.json", "data"):
        p = state / name
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                p.unlink()


def event_index(events: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Event objects by history key (`namespace/name`)."""
    out = {}
    for e in events:
        md = e.get("metadata") or {}
        out[f"{md.get('namespace')}/{md.get('name')}"] = e
    return out


def _headline(outcome: str, summary: str) -> str:
    if summary.lower().startswith(f"{outcome}:"):
        summary = summary[len(outcome) + 1:].strip()
    return f"{outcome.upper()}: {summary}"


def write_report(out: Path, *, scenario: Scenario, result: RunResult, verdict: Verdict,
                 ctx: ScenarioContext | None, history: list[dict[str, Any]], events: list[dict[str, Any]],
                 t0: float, t_end: float, clock_rate: float) -> None:
    """Write verdict.txt, history.jsonl, timeline.html and run.json into `out`."""
    with (out / "history.jsonl").open("w") as f:
        for rec in history:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
    bugs = ", ".join(result.bugs) or "none"
    lines = [
        f"{scenario.name} ({', '.join(scenario.upstream)}): {result.mode} mode (bugs: {bugs}), seed {result.seed}",
        f"{scenario.summary}",
        "",
        f"Outcome: {result.outcome.upper()} (expected in {result.mode} mode: {result.expected}"
        f"{'' if result.ok else ' -- NOT AS EXPECTED'})",
        "",
        verdict.summary,
    ]
    if verdict.evidence:
        lines += ["", "Evidence:"] + [f"  - {e}" for e in verdict.evidence]
    if ctx is not None and ctx.lines:
        lines += ["", "Steps (cluster time since the start):"] + [f"  {s}" for s in ctx.lines]
    startup = f"{result.startup_s:.2f} s" if result.startup_s is not None else "n/a"
    lines += ["", f"Wall time {result.wall_s:.2f} s (mesh start {startup}), cluster time {result.cluster_s:.1f} s "
                  f"at clock rate {clock_rate:g}.",
              f"Files: history.jsonl ({len(history)} records), timeline.html, run.json, mesh/logs/."]
    (out / "verdict.txt").write_text("\n".join(lines) + "\n")
    moments = list(ctx.moments) if ctx is not None else []
    windows = list(ctx.windows) if ctx is not None else []
    focus = set(ctx.focus_keys) if ctx is not None else set()
    html = timeline.render(history=history, title=f"{scenario.name}: {result.mode} mode, seed {result.seed}",
                           verdict=_headline(result.outcome, verdict.summary), t0=t0,
                           t_end=t_end or None, moments=moments, windows=windows, focus=focus,
                           events=event_index(events))
    (out / "timeline.html").write_text(html)
    doc = {**result.public(), "expected": result.expected, "ok": result.ok, "summary": verdict.summary,
           "evidence": list(verdict.evidence), "upstream": list(scenario.upstream),
           "bugs": list(result.bugs), "clock_rate": clock_rate,
           "startup_s": result.startup_s, "steps": list(ctx.lines) if ctx else [],
           "moments": [asdict(m) for m in moments], "windows": [asdict(w) for w in windows],
           "t0": t0, "history_records": len(history)}
    (out / "run.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")

"""The report of one scenario run, and the guarded run every runner (fresh or attached) shares.

`guarded_run` runs a scenario under its deadline and turns a crash, a missing capability or
the deadline into an `inconclusive` verdict (never a guess). `write_report` writes the report
directory of a run:

* `verdict.txt`: the verdict in words, the evidence, the scenario's steps;
* `history.jsonl`: the apiserver's history records of the run;
* `timeline.html`: a self-contained page of who saw which event when (`kubemesh.scenarios.timeline`);
* `run.json`: `RunResult.public()` and the details above, for tools.
"""

from __future__ import annotations

import asyncio
import json
import traceback
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kubemesh.scenarios import timeline
from kubemesh.scenarios.framework import Mode, Outcome, Scenario, ScenarioContext, ScenarioError, Verdict


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
    """The bug switches the run's mesh had on (its profile's and the mode's)."""
    profile: str = ""
    """The version profile a fresh run's mesh ran (`kubemesh profiles`); empty for an attached run,
    whose mesh runs the release it was started as."""
    faults: bool = True
    """Whether the scenario's injections were made (False: `kubemesh scenario verify`'s cells)."""
    skipped: list[str] = field(default_factory=list)
    """The injections skipped because faults were off."""

    @property
    def ok(self) -> bool:
        """Whether the outcome is the one expected for the mode."""
        return self.outcome == self.expected

    def public(self) -> dict[str, Any]:
        """The `--json` object."""
        return {"scenario": self.scenario, "mode": self.mode, "seed": self.seed, "outcome": self.outcome,
                "wall_s": round(self.wall_s, 3), "cluster_s": round(self.cluster_s, 3), "report": self.report,
                "bugs": list(self.bugs), "profile": self.profile}


async def guarded_run(scenario: Scenario, ctx: ScenarioContext) -> Verdict:
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
    finally:
        await ctx.close_clients()


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
    faults = "" if result.faults else ", faults off"
    lines = [
        f"{scenario.name} ({', '.join(scenario.upstream)}): {result.mode} mode"
        f"{f' as release {result.profile}' if result.profile else ''} (bugs: {bugs}{faults}), seed {result.seed}",
        f"{scenario.summary}",
        "",
        f"Outcome: {result.outcome.upper()} (expected in {result.mode} mode{faults}: {result.expected}"
        f"{'' if result.ok else ' -- NOT AS EXPECTED'})",
        "",
        verdict.summary,
    ]
    if verdict.evidence:
        lines += ["", "Evidence:"] + [f"  - {e}" for e in verdict.evidence]
    if result.skipped:
        lines += ["", "Skipped (faults off):"] + [f"  - {e}" for e in result.skipped]
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
           "bugs": list(result.bugs), "faults": result.faults, "skipped": list(result.skipped),
           "clock_rate": clock_rate,
           "startup_s": result.startup_s, "steps": list(ctx.lines) if ctx else [],
           "moments": [asdict(m) for m in moments], "windows": [asdict(w) for w in windows],
           "t0": t0, "history_records": len(history)}
    (out / "run.json").write_text(json.dumps(doc, indent=2, default=str) + "\n")

"""The standard benchmark set in one command, one record, and a comparison with an earlier record.

`scripts/bench` (this file) runs, each in its own processes and each against its own
reference measured in the same run, and records:

* `writes.<encoding>.<phase>.vs_bare`: the apiserver's writes/s ÷ the bare handler's, per
  encoding and phase (apiserver_writes; goal ≥ 0.7);
* `writes.msgpack_vs_json.<phase>`: the apiserver's msgpack writes/s ÷ its JSON writes/s
  (apiserver_writes; goal ≥ 1.0);
* `watch.p50_ms`, `watch.p99_ms`: delivery latency, 100 watchers, 1,000 events/s
  (watch_latency; goals < 1 and < 5);
* `cold_start.ready_s`: `kubemesh up --nodes 3` to every node Ready (cold_start; goal < 1.0);
  `cold_start.cpu_s`: the CPU seconds of the launcher and every component at that moment
  (goal < 2.0: two cores give no more within the 1 s goal);
* `pod_startup.p99_s`: a 1,000-replica Deployment on 1,000 nodes, creation to Running
  (deployment_startup; goal < 1.0);
* `scheduler.<kind>_pods_per_s`: pods bound per second on 1,000 nodes, plain and with required
  pod anti-affinity (scheduler_throughput; goals ≥ 680 and ≥ 300). Streaming: the pods are
  created while the scheduler binds them, so this is the whole path (the apiserver's intake,
  the scheduler, the bindings) on a machine whose other load it also feels;
* `scheduler.<kind>_pods_per_cpu_s`: the same run's pods bound per CPU-second of the scheduler
  process: the scheduler's own cost, which other load on the machine barely moves (the same
  goals: with one core to itself, the scheduler binds at most that many pods per second).

Every figure is a median over the benchmark's rounds, with its spread (min, max) where the
benchmark repeats. The record (`benchmarks/results/bench.json`, or `--out`) holds the
figures, their goals and the machine; `--compare FILE` prints each figure beside the same
figure of an earlier record and flags every one that got worse by more than 10 %
(`--against FILE2` compares two records without running anything). Timing never fails
anything: the exit status is 0 whatever the figures, and non-zero only when a benchmark
could not run.

`--quick` runs every benchmark in its smoke-test size (seconds each; what CI runs and
prints); the figures are then rough and marked `quick` in the record.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from _common import BENCH_DIR, PYTHON, RESULTS_DIR, child_env, machine

Doc = dict[str, Any]
PHASES: Final = ("create", "update", "mixed")
REGRESSION: Final = 0.10
"""A figure that got worse by more than this fraction is flagged."""


@dataclass(frozen=True)
class Figure:
    """One figure of the record: its value (a median), its spread, its unit and its goal."""

    value: float
    unit: str
    higher_is_better: bool
    goal: float | None = None
    low: float | None = None
    high: float | None = None

    def met(self) -> bool | None:
        """Whether the goal is met (None without a goal or a value)."""
        if self.goal is None or self.value != self.value:
            return None
        return self.value >= self.goal if self.higher_is_better else self.value < self.goal

    def as_json(self) -> Doc:
        """The record's form."""
        return {"value": self.value, "unit": self.unit, "higher_is_better": self.higher_is_better,
                "goal": self.goal, "min": self.low, "max": self.high, "met": self.met()}


def _spread(values: list[float], *, unit: str, higher: bool, goal: float | None) -> Figure:
    values = [v for v in values if v == v]
    if not values:
        return Figure(float("nan"), unit, higher, goal)
    return Figure(statistics.median(values), unit, higher, goal, min(values), max(values))


# ---------------------------------------------------------------------------------- figures


def writes_figures(doc: Doc) -> dict[str, Figure]:
    """apiserver_writes: per-round ratios to the bare handler, and msgpack over JSON."""
    runs = doc["runs"]
    out: dict[str, Figure] = {}
    for enc in ("json", "msgpack"):
        mine, bare = runs.get(f"apiserver-{enc}", []), runs.get(f"bare-{enc}", [])
        for phase in PHASES:
            ratios = [a[phase]["writes_per_s"] / b[phase]["writes_per_s"] for a, b in zip(mine, bare, strict=False)]
            out[f"writes.{enc}.{phase}.vs_bare"] = _spread(ratios, unit="ratio", higher=True, goal=0.7)
    js, mp = runs.get("apiserver-json", []), runs.get("apiserver-msgpack", [])
    for phase in PHASES:
        ratios = [m[phase]["writes_per_s"] / j[phase]["writes_per_s"] for m, j in zip(mp, js, strict=False)]
        out[f"writes.msgpack_vs_json.{phase}"] = _spread(ratios, unit="ratio", higher=True, goal=1.0)
    return out


def watch_figures(doc: Doc) -> dict[str, Figure]:
    """watch_latency: the apiserver's delivery latency percentiles."""
    api = doc["results"]["apiserver"]
    return {"watch.p50_ms": Figure(api["p50_ms"], "ms", False, 1.0),
            "watch.p99_ms": Figure(api["p99_ms"], "ms", False, 5.0)}


def cold_start_figures(doc: Doc) -> dict[str, Figure]:
    """cold_start: `kubemesh up` to every node Ready."""
    ready = doc["ready_s"]
    out = {"cold_start.ready_s": Figure(ready["median"], "s", False, 1.0, ready["min"], ready["max"])}
    if "cpu_s" in doc:  # the CPU every process had used at Ready: what a cold start costs, whatever the load
        out["cold_start.cpu_s"] = Figure(float(doc["cpu_s"]["total"]), "CPU-s", False, 2.0)
    return out


def pod_startup_figures(doc: Doc) -> dict[str, Figure]:
    """deployment_startup: the p99 of watch-observed creation to Running."""
    return {"pod_startup.p99_s": Figure(doc["target"]["p99_s"], "s", False, 1.0)}


def scheduler_figures(doc: Doc) -> dict[str, Figure]:
    """scheduler_throughput: streaming pods/s per kind at the largest node count measured."""
    out: dict[str, Figure] = {}
    goals = {"plain": 680.0, "anti-affinity": 300.0}
    cases = [c for c in doc["results"].values() if c.get("mode") == "streaming"]
    for kind, goal in goals.items():
        mine = [c for c in cases if c.get("kind") == kind]
        if mine:
            case = max(mine, key=lambda c: c.get("nodes", 0))
            name = kind.replace("-", "_")
            out[f"scheduler.{name}_pods_per_s"] = Figure(float(case.get("throughput_pods_per_s", float("nan"))),
                                                          "pods/s", True, goal)
            out[f"scheduler.{name}_pods_per_cpu_s"] = Figure(
                float(case.get("pods_per_scheduler_cpu_s", float("nan"))), "pods/CPU-s", True, goal)
    return out


@dataclass(frozen=True)
class Bench:
    """One benchmark of the set: how to run it (full and quick) and what figures it gives."""

    name: str
    script: str
    full: tuple[str, ...]
    quick: tuple[str, ...]
    figures: Callable[[Doc], dict[str, Figure]]
    out_flag: str = "--results-dir"
    """How the script is told where to write (`--results-dir DIR`, or `--out FILE`)."""


SET: Final[tuple[Bench, ...]] = (
    Bench("apiserver_writes", "apiserver_writes.py",
          ("--rounds", "5", "--duration", "3", "--warmup", "1", "--servers", "apiserver,bare"),
          ("--quick",), writes_figures),
    Bench("watch_latency", "watch_latency.py", ("--duration", "5", "--servers", "apiserver,bare"),
          ("--quick",), watch_figures),
    Bench("cold_start", "cold_start.py", ("--runs", "5"), ("--runs", "1"), cold_start_figures, out_flag="--out"),
    Bench("deployment_startup", "deployment_startup.py",
          ("--replicas", "1000", "--nodes", "1000", "--start-delays", "1"), ("--quick",), pod_startup_figures),
    Bench("scheduler_throughput", "scheduler_throughput.py",
          ("--nodes", "1000", "--pods", "2000", "--kinds", "plain,anti-affinity", "--modes", "streaming"),
          ("--quick", "--kinds", "plain,anti-affinity"), scheduler_figures),
)


def run_one(bench: Bench, *, quick: bool, workdir: Path) -> tuple[dict[str, Figure], float]:
    """Run one benchmark as its own process; its figures and its wall seconds."""
    results = workdir / bench.name
    results.mkdir(parents=True, exist_ok=True)
    target = str(results / f"{bench.name}.json") if bench.out_flag == "--out" else str(results)
    cmd = [PYTHON, str(BENCH_DIR / bench.script), *(bench.quick if quick else bench.full), bench.out_flag, target]
    print(f"== {bench.name}: {' '.join(cmd[1:])}", flush=True)
    started = time.monotonic()
    proc = subprocess.run(cmd, env=child_env(), cwd=BENCH_DIR.parent, check=False)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{bench.name} exited with {proc.returncode}")
    doc = json.loads((results / f"{bench.name}.json").read_text())
    return bench.figures(doc), seconds


# ---------------------------------------------------------------------------------- record and comparison


def record(figures: dict[str, Figure], *, quick: bool, seconds: dict[str, float]) -> Doc:
    """The record written to the output file."""
    return {"benchmark": "bench", "quick": quick, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "machine": machine(), "seconds": seconds,
            "figures": {name: f.as_json() for name, f in sorted(figures.items())}}


def _fmt(value: Any) -> str:
    if not isinstance(value, int | float) or value != value:
        return "-"
    return f"{value:,.3g}" if abs(value) < 1000 else f"{value:,.0f}"


def print_figures(doc: Doc) -> None:
    """The record as a table."""
    rows = [["figure", "value", "min", "max", "unit", "goal", "met"]]
    for name, f in doc["figures"].items():
        met = "-" if f["met"] is None else ("yes" if f["met"] else "NO")
        rows.append([name, _fmt(f["value"]), _fmt(f["min"]), _fmt(f["max"]), f["unit"], _fmt(f["goal"]), met])
    _print_rows(rows)


def compare(old: Doc, new: Doc) -> list[str]:
    """Print every figure beside the earlier one; the names of those that regressed by > 10 %."""
    rows = [["figure", "before", "now", "change", ""]]
    regressed: list[str] = []
    for name, f in new["figures"].items():
        prev = old.get("figures", {}).get(name)
        if prev is None or not isinstance(prev.get("value"), int | float) or prev["value"] != prev["value"]:
            rows.append([name, "-", _fmt(f["value"]), "-", "new"])
            continue
        a, b = float(prev["value"]), float(f["value"])
        change = (b - a) / a if a else float("nan")
        worse = change < -REGRESSION if f["higher_is_better"] else change > REGRESSION
        if worse:
            regressed.append(name)
        rows.append([name, _fmt(a), _fmt(b), f"{change:+.0%}" if change == change else "-",
                     "REGRESSED" if worse else ""])
    print(f"compared with the record of {old.get('date', '?')}{' (quick)' if old.get('quick') else ''}:")
    _print_rows(rows)
    if regressed:
        print(f"{len(regressed)} figure(s) worse by more than {REGRESSION:.0%}: {', '.join(regressed)}")
    else:
        print(f"no figure worse by more than {REGRESSION:.0%}")
    return regressed


def _print_rows(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for j, r in enumerate(rows):
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))))
        if j == 0:
            print("  ".join("-" * w for w in widths))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line flags."""
    p = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="every benchmark in its smoke-test size (what CI runs)")
    p.add_argument("--only", default="", help="comma-separated benchmark names (default: the whole set: "
                                              + ",".join(b.name for b in SET) + ")")
    p.add_argument("--out", type=Path, default=None, help="the record to write (default benchmarks/results/bench.json)")
    p.add_argument("--compare", type=Path, default=None, help="an earlier record to print the figures beside")
    p.add_argument("--against", type=Path, default=None,
                   help="with --compare: compare this record instead of running the benchmarks")
    a = p.parse_args(argv)
    if a.against is not None and a.compare is None:
        p.error("--against goes with --compare")
    names = {b.name for b in SET}
    a.only = [n for n in a.only.split(",") if n] or [b.name for b in SET]
    unknown = [n for n in a.only if n not in names]
    if unknown:
        p.error(f"unknown benchmark(s) {', '.join(unknown)}; the set is {', '.join(sorted(names))}")
    return a


def main(argv: list[str] | None = None) -> int:
    """Run the set (or compare two records)."""
    args = parse_args(argv)
    if args.against is not None:
        compare(json.loads(args.compare.read_text()), json.loads(args.against.read_text()))
        return 0
    old = json.loads(args.compare.read_text()) if args.compare is not None else None
    figures: dict[str, Figure] = {}
    seconds: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="kubemesh-bench-set-") as tmp:
        for bench in SET:
            if bench.name in args.only:
                got, secs = run_one(bench, quick=args.quick, workdir=Path(tmp))
                figures.update(got)
                seconds[bench.name] = round(secs, 1)
    doc = record(figures, quick=args.quick, seconds=seconds)
    out = args.out or RESULTS_DIR / "bench.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    print()
    print_figures(doc)
    print(f"record: {out}")
    if old is not None:
        print()
        compare(old, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The main job: run every scenario in buggy and in fixed mode, show progress, print the table.

    python -m kubemesh.scenarios.main [--repeat N] [--seed S] [--clock-rate R] [--report-dir DIR]
                                      [--no-verify] [NAME ...]

Each run starts a fresh mesh; one progress line per step and one per finished run. Then each
scenario is verified (`kubemesh.scenarios.verifying`): its first buggy and fixed runs are the
faults-on cells, and two more runs with faults off (switch on and off) complete the four, so
verifying costs two runs per scenario. At the end a table (scenario, buggy outcome, fixed
outcome, verified, wall time) and where the reports are. Exit status 0 iff every run had the
outcome expected for its mode and every scenario is sound (with `--no-verify`: the runs only,
and the column says "-").
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from kubemesh.scenarios.framework import MODES, Mode
from kubemesh.scenarios.reporting import RunResult
from kubemesh.scenarios.running import catalog, default_report_dir, run_scenario
from kubemesh.scenarios.verifying import Verification, verify_scenario


def _outcome_cell(results: list[RunResult]) -> str:
    if not results:
        return "-"
    good = sum(1 for r in results if r.ok)
    if len(results) == 1:
        r = results[0]
        return r.outcome if r.ok else f"{r.outcome} (!)"
    outcomes = sorted({r.outcome for r in results})
    return f"{'/'.join(outcomes)} {good}/{len(results)}" + ("" if good == len(results) else " (!)")


def _verified_cell(v: Verification | None) -> str:
    if v is None:
        return "-"
    if v.sound:
        return "sound"
    bad = [f"{'on' if c.switch else 'off'}/{'on' if c.faults else 'off'}: {c.outcome}" for c in v.cells if not c.ok]
    return f"NOT SOUND ({'; '.join(bad)}) (!)"


def table(results: Sequence[RunResult], names: Sequence[str],
          verified: Mapping[str, Verification] | None = None) -> list[list[str]]:
    """Rows of the final table (with a header); `verified` by scenario name (missing: "-").

    The wall time counts every run of the scenario, the faults-off cells of verify included.
    """
    rows = [["scenario", "buggy outcome", "fixed outcome", "verified", "wall time"]]
    for name in names:
        rs = [r for r in results if r.scenario == name and r.faults]
        wall = sum(r.wall_s for r in results if r.scenario == name)
        rows.append([name, _outcome_cell([r for r in rs if r.mode == "buggy"]),
                     _outcome_cell([r for r in rs if r.mode == "fixed"]),
                     _verified_cell((verified or {}).get(name)), f"{wall:.1f} s"])
    return rows


def print_table(rows: list[list[str]]) -> None:
    """Columns padded to their widest cell."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


async def main_async(args: argparse.Namespace) -> int:
    """Run everything; return the exit status."""
    scenarios = catalog()
    names = args.names or list(scenarios)
    unknown = [n for n in names if n not in scenarios]
    if unknown:
        print(f"unknown scenario(s): {', '.join(unknown)}; known: {', '.join(scenarios)}", file=sys.stderr)
        return 2
    report_dir: Path = args.report_dir or default_report_dir()
    shown = str(report_dir)
    verify = not args.no_verify
    total = len(names) * len(MODES) * args.repeat + (2 * len(names) if verify else 0)
    done: list[RunResult] = []
    verified: dict[str, Verification] = {}
    started = time.monotonic()
    extra = f" + {len(names)} x 2 faults-off runs (verify)" if verify else ""
    print(f"kubemesh: {len(names)} scenarios x {len(MODES)} modes x {args.repeat}{extra} = {total} runs, a fresh "
          f"mesh each; reports in {shown}", flush=True)

    def on_result(r: RunResult) -> None:
        done.append(r)
        flag = "ok  " if r.ok else "FAIL"
        mode = r.mode if r.faults else f"{r.mode} faults off"
        print(f"[{len(done):>3}/{total}] {flag} {r.scenario:<26} {mode:<16} seed={r.seed:<7} {r.outcome:<12} "
              f"{r.wall_s:5.1f}s wall {r.cluster_s:6.0f}s cluster", flush=True)
        if args.verbose or not r.ok:
            print(f"           {r.summary}", flush=True)

    def progress(line: str) -> None:
        if args.verbose:
            print(f"           {line}", flush=True)

    for name in names:
        results = await run_scenario(scenarios[name], modes=MODES, repeat=args.repeat, seed=args.seed,
                                     clock_rate=args.clock_rate, report_dir=report_dir, log=progress,
                                     on_result=on_result)
        if verify:
            reuse: dict[Mode, RunResult] = {r.mode: r for r in results if r.seed == args.seed}
            verified[name] = await verify_scenario(
                scenarios[name], seed=args.seed, report_dir=report_dir, clock_rate=args.clock_rate, log=progress,
                reuse=reuse, on_run=on_result)  # the faults-off runs print like the others
    print()
    print_table(table(done, names, verified if verify else None))
    bad = [r for r in done if not r.ok]
    unsound = [v for v in verified.values() if not v.sound]
    print()
    print(f"{len(done) - len(bad)}/{len(done)} runs as expected in {time.monotonic() - started:.0f} s"
          + (f"; {len(verified) - len(unsound)}/{len(verified)} scenarios sound" if verify else "")
          + f"; reports (verdict.txt, timeline.html, history.jsonl per run): {shown}")
    for r in bad:
        faults = "" if r.faults else " (faults off)"
        print(f"  not as expected: {r.scenario} {r.mode}{faults} seed={r.seed}: {r.outcome}: {r.summary} "
              f"({r.report})")
    for v in unsound:
        print(f"  not sound: {v.scenario}: " + "; ".join(
            f"switch {'on' if c.switch else 'off'}, faults {'on' if c.faults else 'off'}: {c.outcome} "
            f"(sound: {c.expected})" for c in v.cells if not c.ok))
    return 0 if not bad and not unsound else 1


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The main job's flags."""
    p = argparse.ArgumentParser(prog="python -m kubemesh.scenarios.main", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("names", nargs="*", help="scenarios to run (default: all)")
    p.add_argument("--repeat", type=int, default=1, help="runs per scenario and mode")
    p.add_argument("--seed", type=int, default=1, help="seed of the first run of each scenario (default 1)")
    p.add_argument("--clock-rate", type=float, default=None, help="override every scenario's clock rate")
    p.add_argument("--report-dir", type=Path, default=None, help="default: ./kubemesh-reports/<timestamp>")
    p.add_argument("--no-verify", action="store_true",
                   help="skip the two faults-off runs per scenario (the column verified says -)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every scenario step")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point."""
    try:
        args = parse_args(argv)
        args.report_dir = (args.report_dir or default_report_dir()).absolute()
        return asyncio.run(main_async(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

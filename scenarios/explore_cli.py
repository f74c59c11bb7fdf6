"""`kubemesh explore run|replay|workloads`: search for the races nobody scripted in one component.

    kubemesh explore workloads [--json]
    kubemesh explore run --target COMPONENT [--workload NAME|module:function|FILE.py] [--bugs A,B]
                         [--profile P] [--budget RUNS] [--seed S] [--families F,G] [--replays N]
                         [--report-dir DIR] [--json]
    kubemesh explore replay FINDING.json [--times N] [--json]

`run` runs the workload twice without faults, derives plans from what the target received and
wrote, runs up to `--budget` plans on fresh meshes and reports each one that fails an oracle as
a finding (`<report-dir>/plan-NN-FAMILY/finding.json`); see `kubemesh.scenarios.explore`.
Without `--workload` a built-in target uses its default workload. With `--json` the last line
printed is one JSON object: `{"plans_generated", "plans_run", "findings": [{"family", "plan",
"seed", "verdict", "replay_rate", "report", ...}], "wall_s", ...}`. Exit status 0 when the
exploration ran (with or without findings), 1 when the fault-free runs gave no reference.

`replay` re-runs one finding `--times` times; exit status 0 when it reproduced in at least 90 %
of them, 1 otherwise (flaky, with its rate).

Found by the `kubemesh` command through the `kubemesh.commands` entry point (`COMMAND`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from kubemesh.services.model import profiles
from kubemesh.services.tools.commands import Command, bug_list, name_list, positive_int

# The exploration machinery (the launcher, aiohttp) is imported by the actions that run, never at
# import: every `kubemesh` command loads this module through its entry point to build its parser.


def configure(parser: argparse.ArgumentParser) -> None:
    """The `explore` subcommand's arguments."""
    sub = parser.add_subparsers(dest="explore_command", metavar="ACTION", required=True)
    wl = sub.add_parser("workloads", help="list the built-in workloads")
    wl.add_argument("--json", action="store_true", help="one JSON object per workload")
    run = sub.add_parser("run", help="explore one component under one workload on fresh meshes")
    run.add_argument("--target", required=True,
                     help="the component whose observations are perturbed (scheduler, controller_manager, ...)")
    run.add_argument("--workload", default=None,
                     help="a built-in workload (`kubemesh explore workloads`), module:function or FILE.py "
                          "(default: the target's own)")
    run.add_argument("--bugs", type=bug_list, default=(), help="bug switches to turn on in every run (A,B)")
    run.add_argument("--profile", choices=profiles.PROFILES, default="current", help="the release the meshes run as")
    run.add_argument("--budget", type=positive_int, default=10, help="perturbed runs at most (default 10)")
    run.add_argument("--seed", type=int, default=1, help="the seed of every run and of the plan order (default 1)")
    run.add_argument("--families", type=name_list, default=(),
                     help="only these plan families (unobserved,intermediate,stale; default all)")
    run.add_argument("--replays", type=int, default=0, help="replay each finding this many times (default 0)")
    run.add_argument("--report-dir", type=Path, default=None,
                     help="where the reports go (default: ./kubemesh-reports/explore-<timestamp>)")
    run.add_argument("--json", action="store_true", help="print the summary as one JSON object, last")
    rep = sub.add_parser("replay", help="re-run one finding and measure how often it reproduces")
    rep.add_argument("finding", type=Path, help="a finding.json written by `kubemesh explore run`")
    rep.add_argument("--times", type=positive_int, default=10, help="runs (default 10)")
    rep.add_argument("--json", action="store_true", help='print {"finding", "times", "rate", "flaky"} last')


def run(args: argparse.Namespace) -> Any:
    """Dispatch `workloads`, `run` or `replay`."""
    if args.explore_command == "workloads":
        return _workloads(args)
    if args.explore_command == "replay":
        args.finding = Path(args.finding).absolute()
        return _replay(args)
    args.report_dir = (args.report_dir or Path("kubemesh-reports") / time.strftime("explore-%Y%m%d-%H%M%S")).absolute()
    return _run(args)


def _workloads(args: argparse.Namespace) -> int:
    from kubemesh.scenarios.explore_workloads import DEFAULT_FOR, WORKLOADS  # noqa: PLC0415 - see above

    for w in WORKLOADS.values():
        default_of = [t for t, n in DEFAULT_FOR.items() if n == w.name]
        if args.json:
            print(json.dumps({"name": w.name, "summary": w.summary, "target": w.target, "defaultFor": default_of}))
        else:
            print(f"{w.name:<12} {w.summary} (target {w.target}{'; default' if default_of else ''})")
    return 0


async def _run(args: argparse.Namespace) -> int:
    from kubemesh.scenarios import explore, explore_workloads  # noqa: PLC0415 - see above

    name = args.workload or explore_workloads.DEFAULT_FOR.get(args.target)
    if name is None:
        print(f"--workload is needed: {args.target} has no default workload", file=sys.stderr)
        return 2
    try:
        workload = explore_workloads.resolve(name)
    except (ValueError, ImportError) as exc:
        print(f"--workload: {exc}", file=sys.stderr)
        return 2
    unknown = [f for f in args.families if f not in explore.FAMILIES]
    if unknown:
        print(f"--families: unknown {', '.join(unknown)}; known: {', '.join(explore.FAMILIES)}", file=sys.stderr)
        return 2
    report_dir = args.report_dir

    def say(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    summary = await explore.explore(workload, target=args.target, budget=args.budget, seed=args.seed,
                                    report_dir=report_dir, bugs=args.bugs, profile=args.profile,
                                    replays=args.replays, families=tuple(args.families) or explore.FAMILIES, log=say)
    for f in summary.findings:
        rate = (f"reproduced in {f.replay_rate:.0%} of {f.replays} replays" if f.replays
                else "not replayed (--replays N)")
        say(f"finding ({f.family}): {f.label}\n    {f.verdict}\n    {rate}; {f.report}")
    for line in summary.lines():
        say(line)
    if args.json:
        print(json.dumps(summary.public()), flush=True)
    return 1 if summary.reference_error else 0


async def _replay(args: argparse.Namespace) -> int:
    from kubemesh.scenarios import explore  # noqa: PLC0415 - see above

    finding = args.finding

    def say(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    rate, _ = await explore.replay(finding, times=args.times, log=say)
    flaky = rate < explore.FLAKY_BELOW
    say(f"reproduced {round(rate * args.times)}/{args.times} ({rate:.0%}): "
        f"{'flaky, not a bug' if flaky else 'reproducible'}")
    if args.json:
        print(json.dumps({"finding": str(finding), "times": args.times, "rate": rate, "flaky": flaky}), flush=True)
    return 1 if flaky else 0


COMMAND = Command(name="explore", help="perturb what one component observes and report the runs that break",
                  description=__doc__, configure=configure, run=run)

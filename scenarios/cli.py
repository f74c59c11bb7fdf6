"""`kubemesh scenario list|run|verify`: the historic races, run on a fresh mesh in buggy and fixed mode.

    kubemesh scenario list [--json]
    kubemesh scenario verify NAME [--seed S] [--clock-rate R] [--report-dir DIR] [--json]
    kubemesh scenario run NAME [--mode buggy|fixed|both] [--repeat N] [--seed S] [--profile P]
                               [--clock-rate R] [--report-dir DIR] [--json]
    kubemesh scenario run NAME --mode buggy|fixed --attach KUBECONFIG|DIR|URL [--context C]
                               [--token T | --token-file F] [--ca-file F] [--node-access auto|admin|chaos]
                               [--ready-timeout S] [--repeat N] [--seed S] [--report-dir DIR] [--json]

`run` starts a fresh mesh for each run, runs the scenario, checks its oracle and writes a report
per run. Exit status 0 when every run had the outcome expected for its mode (reproduced in
buggy mode, prevented in fixed mode), 1 otherwise. `--json` prints one object per run:
`{"scenario", "mode", "seed", "outcome", "wall_s", "cluster_s", "report", "bugs", "profile"}`.
Each scenario runs as its seed's release (`Scenario.profile`); `--profile current` runs it as
today's release instead.

`verify` checks that a scenario's oracle proves its own path: four runs on fresh meshes, the
bug switch on and off times the scenario's faults on and off, and a table of their outcomes
(`kubemesh.scenarios.verifying`). Sound: reproduced with the switch on and the faults on,
prevented with the switch off and the faults on, inconclusive with the faults off (the race
window was not opened), unless the scenario's workload opens the window by itself. Exit status
0 iff sound. With `--json` the last line printed is one JSON object:
`{"scenario": str, "cells": [{"switch": bool, "faults": bool, "outcome": str}], "sound": bool}`.

With `--attach`, every run uses a mesh that is already running (the compose stack: its
kubeconfig is `.kubemesh/compose/kubeconfig`) instead of a fresh one, and leaves it running:
the runner first checks that the mesh's bug switches are the mode's and that its shape fits the
scenario, and the run is inconclusive ("target mesh ...", with the reason) when they are not.
A mesh runs in one mode, so `--mode` must be buggy or fixed; its clock is its own, so there
is no `--clock-rate`. See `scenarios.attached` and docs/compose.md.

The `kubemesh` command finds this one through the `kubemesh.commands` entry point (`COMMAND`),
since `kubemesh.services` imports nothing above it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from kubemesh.services.model import profiles
from kubemesh.services.tools.commands import Command, positive_float, positive_int

if TYPE_CHECKING:
    from kubemesh.scenarios import verifying
    from kubemesh.scenarios.framework import Mode

# The scenario machinery (the catalog, the runners, aiohttp and the clients under them) is
# imported by the actions that run, never at import: every `kubemesh` command loads this module
# through its entry point to build its parser, `kubemesh up` included, whose cold start it
# would otherwise delay by some 0.3-0.9 s of imports.


def configure(parser: argparse.ArgumentParser) -> None:
    """The `scenario` subcommand's arguments."""
    sub = parser.add_subparsers(dest="scenario_command", metavar="ACTION", required=True)
    lst = sub.add_parser("list", help="list the scenarios")
    lst.add_argument("--json", action="store_true", help="one JSON object per scenario")
    run = sub.add_parser("run", help="run a scenario on fresh meshes (or an existing one with --attach) and report")
    run.add_argument("name", help="scenario name (see `kubemesh scenario list`), or `all`")
    run.add_argument("--mode", choices=("buggy", "fixed", "both"), default="both",
                     help="buggy: the scenario's bug switches on; fixed: off (era switches stay on) (default: both)")
    run.add_argument("--repeat", type=positive_int, default=1, help="runs per mode, seeds S, S+1, ...")
    run.add_argument("--seed", type=int, default=None, help="seed of the first run (default: random)")
    run.add_argument("--clock-rate", type=positive_float, default=None,
                     help="cluster seconds per wall second (default: the scenario's, usually 60)")
    run.add_argument("--report-dir", type=Path, default=None,
                     help="where the reports go (default: ./kubemesh-reports/<timestamp>)")
    run.add_argument("--json", action="store_true", help="print one JSON object per run")
    run.add_argument("--profile", choices=profiles.PROFILES, default=None,
                     help="run fresh meshes as this release instead of the scenario's own (`current`: today's "
                          "defaults, to show the difference; see `kubemesh profiles`)")
    ver = sub.add_parser("verify", help="run a scenario's four cells (switch on/off x faults on/off): is it sound?")
    ver.add_argument("name", help="scenario name (see `kubemesh scenario list`)")
    ver.add_argument("--seed", type=int, default=None, help="the seed of every cell (default: random)")
    ver.add_argument("--clock-rate", type=positive_float, default=None,
                     help="cluster seconds per wall second (default: the scenario's, usually 60)")
    ver.add_argument("--report-dir", type=Path, default=None,
                     help="where the reports go (default: ./kubemesh-reports/<timestamp>)")
    ver.add_argument("--json", action="store_true",
                     help='print {"scenario", "cells": [{"switch", "faults", "outcome"}], "sound"} as the last line')
    g = run.add_argument_group("attached runs (an existing mesh: nothing is started or torn down)")
    g.add_argument("--attach", metavar="KUBECONFIG|DIR|URL", default=None,
                   help="run against this running mesh: a kubeconfig (the compose stack's is "
                        ".kubemesh/compose/kubeconfig), a state folder holding one, or the apiserver's URL")
    g.add_argument("--context", default=None, help="the kubeconfig's context (default: its current-context)")
    g.add_argument("--token", default=None, help="bearer token (default: the kubeconfig's, or $KUBEMESH_TOKEN)")
    g.add_argument("--token-file", type=Path, default=None, help="read the bearer token from this file")
    g.add_argument("--ca-file", type=Path, default=None, help="the apiserver's CA certificate, with a URL")
    g.add_argument("--node-access", choices=("auto", "admin", "chaos"), default="auto",
                   help="power nodes off through the kubelets' admin endpoints or the chaos front door "
                        "(default auto: the admin endpoints when they answer from here)")
    g.add_argument("--ready-timeout", type=positive_float, default=60.0,
                   help="wall seconds to wait for the mesh's components and nodes before a run (default 60)")


def run(args: argparse.Namespace) -> Any:
    """Dispatch `list`, `run` or `verify`."""
    from kubemesh.scenarios import running  # noqa: PLC0415 - see the note on imports above

    if args.scenario_command == "list":
        return _list(args)
    if args.report_dir is None:
        args.report_dir = running.default_report_dir()
    args.report_dir = Path(args.report_dir).absolute()
    if args.scenario_command == "verify":
        return _verify(args)
    return _run(args)


def _list(args: argparse.Namespace) -> int:
    from kubemesh.scenarios import running  # noqa: PLC0415 - see the note on imports above

    scenarios = running.catalog()
    if args.json:
        for s in scenarios.values():
            print(json.dumps({"name": s.name, "summary": s.summary, "upstream": list(s.upstream),
                              "bugs": list(s.bugs), "eraBugs": list(s.era_bugs), "needsChaos": s.needs_chaos,
                              "windowNeedsFaults": s.window_needs_faults, "profile": s.profile}))
        return 0
    width = max(len(n) for n in scenarios)
    for s in scenarios.values():
        bugs = ",".join(s.bugs) or "-"
        print(f"{s.name:<{width}}  {s.summary}")
        era = f"; both modes: {','.join(s.era_bugs)}" if s.era_bugs else ""
        print(f"{'':<{width}}  runs as {s.profile}; upstream: {', '.join(s.upstream)}; buggy mode: {bugs}{era}")
    return 0


async def _run(args: argparse.Namespace) -> int:
    from kubemesh.scenarios import attached, running  # noqa: PLC0415 - see the note on imports above
    from kubemesh.scenarios.framework import MODES  # noqa: PLC0415 - idem
    from kubemesh.services.mesh.endpoint import EndpointError  # noqa: PLC0415 - idem

    scenarios = running.catalog()
    names = list(scenarios) if args.name == "all" else [args.name]
    unknown = [n for n in names if n not in scenarios]
    if unknown:
        print(f"unknown scenario {unknown[0]!r}; known: {', '.join(scenarios)}", file=sys.stderr)
        return 2
    modes: tuple[Mode, ...] = MODES if args.mode == "both" else (cast("Mode", args.mode),)
    target = None
    if args.attach:
        if args.mode == "both":
            print("--attach needs --mode buggy or --mode fixed: a running mesh has one set of bug switches",
                  file=sys.stderr)
            return 2
        if args.clock_rate is not None:
            print("--clock-rate cannot be used with --attach: the mesh's clock is its own", file=sys.stderr)
            return 2
        if args.profile is not None:
            print("--profile cannot be used with --attach: the mesh runs the release it was started as",
                  file=sys.stderr)
            return 2
        try:
            target = attached.ExistingMesh.from_target(
                args.attach, context=args.context, token=args.token, token_file=args.token_file,
                ca_file=args.ca_file, node_access=args.node_access, ready_timeout=args.ready_timeout)
        except EndpointError as exc:
            print(f"--attach: {exc}", file=sys.stderr)
            return 2
    elif any(v is not None for v in (args.context, args.token, args.token_file, args.ca_file)):
        print("--context, --token, --token-file and --ca-file go with --attach", file=sys.stderr)
        return 2
    report_dir = args.report_dir
    ok = True

    def progress(line: str) -> None:
        if not args.json:
            print(f"    {line}", flush=True)

    def on_result(r: Any) -> None:
        if args.json:
            print(json.dumps(r.public()), flush=True)
        else:
            mark = "ok  " if r.ok else "FAIL"
            print(f"[{mark}] {r.scenario} {r.mode} seed={r.seed}: {r.outcome} (expected {r.expected}) "
                  f"wall {r.wall_s:.1f}s cluster {r.cluster_s:.0f}s\n       {r.summary}\n       report: {r.report}",
                  flush=True)

    for name in names:
        results = await running.run_scenario(scenarios[name], modes=modes, repeat=args.repeat, seed=args.seed,
                                             clock_rate=args.clock_rate, report_dir=report_dir,
                                             log=progress if not args.json else None, on_result=on_result,
                                             target=target, profile=args.profile)
        ok = ok and all(r.ok for r in results)
        if not args.json and len(results) > 1:
            for mode in modes:
                rs = [r for r in results if r.mode == mode]
                good = sum(1 for r in rs if r.ok)
                walls = sorted(r.wall_s for r in rs)
                print(f"{name} {mode}: {good}/{len(rs)} as expected; wall s min {walls[0]:.1f} "
                      f"median {walls[len(walls) // 2]:.1f} max {walls[-1]:.1f}")
    if not args.json:
        print(f"reports: {report_dir}")
    return 0 if ok else 1


async def _verify(args: argparse.Namespace) -> int:
    from kubemesh.scenarios import running, verifying  # noqa: PLC0415 - see the note on imports above

    scenarios = running.catalog()
    if args.name not in scenarios:
        print(f"unknown scenario {args.name!r}; known: {', '.join(scenarios)}", file=sys.stderr)
        return 2
    scenario = scenarios[args.name]
    seed = running.seeds(args.seed, 1)[0]
    print(f"verify {scenario.name}, seed {seed}: switch on/off x faults on/off, a fresh mesh each", flush=True)

    def on_cell(c: verifying.Cell) -> None:
        mark = "ok  " if c.ok else "FAIL"
        print(f"[{mark}] switch {'on ' if c.switch else 'off'} faults {'on ' if c.faults else 'off'}: {c.outcome} "
              f"(sound: {c.expected})\n       {c.summary}\n       report: {c.report}", flush=True)

    result = await verifying.verify_scenario(scenario, seed=seed, report_dir=args.report_dir,
                                             clock_rate=args.clock_rate, on_cell=on_cell)
    print()
    for line in result.table():
        print(line)
    print(f"reports: {args.report_dir}", flush=True)
    if args.json:
        print(json.dumps(result.public()), flush=True)
    return 0 if result.sound else 1


COMMAND = Command(name="scenario", help="run the historic races in buggy and fixed mode, with reports, and verify "
                                        "their oracles",
                  description=__doc__, configure=configure, run=run)

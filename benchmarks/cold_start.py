"""Cold start: wall seconds from launching `kubemesh up --nodes 3` to every node Ready.

Each run starts `python -m kubemesh.services.tools.cli up` in a fresh state directory and stops the clock when
it prints that every node is Ready (the launcher's own figure, from its start, is recorded too;
the components' registration with the apiserver is not waited for: the measure is nodes Ready).
Every run also measures `--eager` (components started together with the apiserver).
References measured in the same run on the same machine:

* a bare interpreter, `python -c pass`, so the ratio says how much of the cold start is
  interpreter start-up (the mesh starts five interpreters, two of them one after the other);
* an interpreter importing aiohttp, which every component pays.

Each run is split into phases from the launcher's output: `starting_s`, until `kubemesh up`
prints that it is starting (the launcher's own interpreter and imports, before any component
process exists), and the rest, until every node is Ready (the components' start-up, the
apiserver's, the nodes' registration).

`--baseline DIR` also runs the same cold start from another source tree (e.g. a `git worktree`
or `git archive` of an earlier commit), alternating run by run with this one, so that the
before/after ratio comes from one run on one machine under the same load.

Usage: `python benchmarks/cold_start.py [--runs N] [--nodes 3] [--out PATH] [--baseline DIR]`.
Prints a summary and writes JSON to `benchmarks/results/cold_start.json`. Target: median under 1.0 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 1.0
READY = re.compile(r"(\d+) nodes Ready in ([0-9.]+) s")
STARTING = re.compile(r"kubemesh: starting ")


async def time_interpreter(code: str, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, cwd=ROOT)
        rc = await proc.wait()
        out.append(time.perf_counter() - t0)
        if rc != 0:
            raise RuntimeError(f"python -c {code!r} exited {rc}")
    return out


async def one_cold_start(nodes: int, extra: list[str], limit: float, *, root: Path = ROOT) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kubemesh-bench-") as state:
        t0 = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "kubemesh", "up", "--nodes", str(nodes), "--state-dir", state,
            "--no-wait-registered", *extra,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)})
        assert proc.stdout is not None
        lines: list[str] = []
        ready_at = launcher_s = starting_at = None
        try:
            async with asyncio.timeout(limit):
                while ready_at is None:
                    raw = await proc.stdout.readline()
                    if not raw:
                        raise RuntimeError("kubemesh up exited before the nodes were Ready:\n" + "".join(lines))
                    line = raw.decode(errors="replace")
                    lines.append(line)
                    if starting_at is None and STARTING.search(line):
                        starting_at = time.perf_counter() - t0
                    m = READY.search(line)
                    if m:
                        ready_at = time.perf_counter() - t0
                        launcher_s = float(m.group(2))
            t1 = time.perf_counter()
            proc.send_signal(signal.SIGTERM)
            async with asyncio.timeout(30):
                await proc.communicate()
            stop_s = time.perf_counter() - t1
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        return {"ready_s": ready_at, "launcher_ready_s": launcher_s, "stop_s": stop_s,
                "starting_s": starting_at,
                "components_to_ready_s": None if starting_at is None or ready_at is None else ready_at - starting_at,
                "exit_code": proc.returncode}


def summary(xs: list[float]) -> dict[str, float]:
    return {"median": statistics.median(xs), "mean": statistics.fmean(xs), "min": min(xs), "max": max(xs)}


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "cold_start.json")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another source tree to run alternately with this one (before/after)")
    ap.add_argument("extra", nargs="*", help="more `kubemesh up` arguments (after --)")
    args = ap.parse_args()

    await time_interpreter("pass", 1)  # warm the page cache once, for every measurement alike
    await one_cold_start(args.nodes, args.extra, args.timeout)
    # The two start orders alternate, so that a machine's drift affects both alike.
    runs: list[dict[str, Any]] = []
    eager_runs: list[dict[str, Any]] = []
    baseline_runs: list[dict[str, Any]] = []
    if args.baseline is not None:
        await one_cold_start(args.nodes, args.extra, args.timeout, root=args.baseline.resolve())
    for _ in range(args.runs):
        runs.append(await one_cold_start(args.nodes, args.extra, args.timeout))
        if args.baseline is not None:
            baseline_runs.append(await one_cold_start(args.nodes, args.extra, args.timeout,
                                                      root=args.baseline.resolve()))
        eager_runs.append(await one_cold_start(args.nodes, ["--eager", *args.extra], args.timeout))
    bare = await time_interpreter("pass", args.runs)
    aiohttp_import = await time_interpreter("import aiohttp", args.runs)

    ready = [float(r["ready_s"]) for r in runs]
    eager = [float(r["ready_s"]) for r in eager_runs]
    result = {
        "benchmark": "cold_start",
        "description": f"`kubemesh up --nodes {args.nodes}` launched to every node Ready (wall seconds)",
        "nodes": args.nodes,
        "runs": runs,
        "ready_s": summary(ready),
        "launcher_ready_s": summary([float(r["launcher_ready_s"]) for r in runs]),
        "stop_s": summary([float(r["stop_s"]) for r in runs]),
        "eager": {"description": "`kubemesh up --eager`: components started together with the apiserver",
                  "runs": eager_runs, "ready_s": summary(eager),
                  "ratio_to_python_pass": statistics.median(eager) / statistics.median(bare),
                  "meets_target": statistics.median(eager) < TARGET_SECONDS},
        "reference": {"python_pass_s": summary(bare), "python_import_aiohttp_s": summary(aiohttp_import)},
        "ratio_to_python_pass": statistics.median(ready) / statistics.median(bare),
        "ratio_to_import_aiohttp": statistics.median(ready) / statistics.median(aiohttp_import),
        "target_s": TARGET_SECONDS,
        "meets_target": statistics.median(ready) < TARGET_SECONDS,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "platform": platform.platform()},
        "extra_args": args.extra,
        "phases": {"starting_s": summary([float(r["starting_s"]) for r in runs]),
                   "components_to_ready_s": summary([float(r["components_to_ready_s"]) for r in runs])},
    }
    if baseline_runs:
        b_ready = [float(r["ready_s"]) for r in baseline_runs]
        result["baseline"] = {
            "tree": str(args.baseline), "runs": baseline_runs, "ready_s": summary(b_ready),
            "phases": {"starting_s": summary([float(r["starting_s"]) for r in baseline_runs]),
                       "components_to_ready_s": summary([float(r["components_to_ready_s"]) for r in baseline_runs])},
            "ratio_to_python_pass": statistics.median(b_ready) / statistics.median(bare),
            "this_over_baseline": statistics.median(ready) / statistics.median(b_ready),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    r = result["ready_s"]
    print(f"cold start to {args.nodes} nodes Ready: median {r['median']:.3f} s "
          f"(min {r['min']:.3f}, max {r['max']:.3f}, {args.runs} runs); target < {TARGET_SECONDS} s: "
          f"{'met' if result['meets_target'] else 'NOT met'}")
    e = result["eager"]["ready_s"]
    print(f"  with --eager: median {e['median']:.3f} s (min {e['min']:.3f}, max {e['max']:.3f}); "
          f"target {'met' if result['eager']['meets_target'] else 'NOT met'}")
    print(f"  launcher's own figure: median {result['launcher_ready_s']['median']:.3f} s; "
          f"clean stop: median {result['stop_s']['median']:.3f} s")
    print(f"  reference python -c pass: median {statistics.median(bare) * 1000:.1f} ms "
          f"(ratio {result['ratio_to_python_pass']:.1f}x); python -c 'import aiohttp': "
          f"{statistics.median(aiohttp_import) * 1000:.1f} ms (ratio {result['ratio_to_import_aiohttp']:.1f}x)")
    ph = result["phases"]
    print(f"  phases (median): launcher up to 'starting' {ph['starting_s']['median']:.3f} s, "
          f"then components to every node Ready {ph['components_to_ready_s']['median']:.3f} s")
    if baseline_runs:
        b = result["baseline"]
        print(f"  baseline {args.baseline}: median {b['ready_s']['median']:.3f} s (min {b['ready_s']['min']:.3f}, "
              f"max {b['ready_s']['max']:.3f}; ratio to python -c pass {b['ratio_to_python_pass']:.1f}x); "
              f"phases {b['phases']['starting_s']['median']:.3f} s + "
              f"{b['phases']['components_to_ready_s']['median']:.3f} s; "
              f"this / baseline = {b['this_over_baseline']:.2f}")
    print(f"  written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

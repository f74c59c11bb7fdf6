"""Cold start: wall seconds from launching `kubemesh up --nodes 3` to every node Ready.

Each run starts `python -m kubemesh.services.tools.cli up` in a fresh state directory and stops the clock when
it prints that every node is Ready (the launcher's own figure, from its start, is recorded too;
the components' registration with the apiserver is not waited for: the measure is nodes Ready).
Every round also measures `--no-stagger` (the controller-manager and the scheduler started with
the kubelets instead of once the nodes are Ready), when this tree's `kubemesh up` has the flag.
References measured in the same run on the same machine:

* a bare interpreter, `python -c pass`, so the ratio says how much of the cold start is
  interpreter start-up (the mesh starts five interpreters, two of them one after the other);
* an interpreter importing aiohttp, which every component pays.

Each run is split into phases from the launcher's output: `starting_s`, until `kubemesh up`
prints that it is starting (the launcher's own interpreter and imports, before any component
process exists), and the rest, until every node is Ready (the components' start-up, the
apiserver's, the nodes' registration). `cpu_s` splits the CPU seconds every process had used
when the nodes were Ready (user + system, from /proc): the launcher and each component. A cold
start is CPU-bound (five interpreters' imports on a machine that may have two cores), so this
split says where the time goes.

Python's bytecode cache matters as much as any code change: with `PYTHONDONTWRITEBYTECODE` set
(as in this repository's CI image and development machine) a source tree never gets `.pyc`
files, and every process compiles every module it imports, every time. `--compile` compiles
each measured tree first into a private cache (`PYTHONPYCACHEPREFIX`, so that no tree is
written to), as an installed package (pip compiles) or any second run without that variable
has it; the output records which (`bytecode`).

`--baseline DIR` also runs the same cold start from another source tree (e.g. a `git worktree`
or `git archive` of an earlier commit), alternating run by run with this one, so that the
before/after ratio comes from one run on one machine under the same load.

Usage: `python benchmarks/cold_start.py [--runs N] [--nodes 3] [--out PATH] [--baseline DIR] [--compile]`.
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
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TARGET_SECONDS = 1.0
READY = re.compile(r"(\d+) nodes Ready in ([0-9.]+) s")
STARTING = re.compile(r"kubemesh: starting ")


_ENV: dict[str, str] = {}
"""Extra environment of every measured process (`--compile`'s bytecode cache)."""


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds a live process has used so far (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_split(launcher_pid: int, state: Path) -> dict[str, float | None]:
    """CPU seconds of the launcher and of every process its mesh.json lists (0 for one not started)."""
    out: dict[str, float | None] = {"launcher": cpu_seconds(launcher_pid)}
    try:
        doc = json.loads((state / "mesh.json").read_text())
    except (OSError, ValueError):
        return out
    for p in doc.get("processes") or []:
        pid = p.get("pid")
        out[str(p.get("name"))] = cpu_seconds(pid) if isinstance(pid, int) else 0.0
    return out


def compile_trees(roots: list[Path]) -> None:
    """Compile every module of these trees and of the interpreter's libraries into `_ENV`'s cache.

    With a cache prefix Python looks for bytecode there only, so the standard library and the
    installed packages go there too (their own `__pycache__` folders are not read).
    """
    paths = sysconfig.get_paths()
    libs = {Path(paths[k]) for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    # The package `kubemesh` is a folder of symbolic links to the top-level folders, which
    # compileall does not follow: its modules are imported (and cached) under kubemesh/.
    links = [c for r in roots if (r / "kubemesh").is_dir() for c in (r / "kubemesh").iterdir()
             if c.is_symlink() and c.is_dir()]
    targets = [str(t) for t in (*roots, *links, *sorted(libs)) if t.is_dir()]
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-j", "0", *targets],
                   env={**os.environ, **_ENV}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)


async def time_interpreter(code: str, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", code, cwd=ROOT,
                                                    env={**os.environ, **_ENV})
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
            env={**os.environ, **_ENV, "PYTHONPATH": str(root)})
        assert proc.stdout is not None
        lines: list[str] = []
        ready_at = launcher_s = starting_at = None
        cpu: dict[str, float | None] = {}
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
                        cpu = cpu_split(proc.pid, Path(state))
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
                "cpu_s": cpu, "exit_code": proc.returncode}


def cpu_summary(runs: list[dict[str, Any]]) -> dict[str, float]:
    """Median CPU seconds per process over runs (and their total), at the moment the nodes were Ready."""
    names = list(dict.fromkeys(name for r in runs for name in r["cpu_s"]))
    out = {name: statistics.median(float(r["cpu_s"].get(name) or 0.0) for r in runs) for name in names}
    out["total"] = statistics.median(sum(float(v or 0.0) for v in r["cpu_s"].values()) for r in runs)
    return out


def has_flag(root: Path, flag: str) -> bool:
    """Whether `kubemesh up` of this tree takes `flag`."""
    out = subprocess.run([sys.executable, "-m", "kubemesh", "up", "--help"], capture_output=True, text=True,
                         cwd=root, env={**os.environ, **_ENV, "PYTHONPATH": str(root)}, check=False)
    return flag in out.stdout


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
    ap.add_argument("--compile", action="store_true",
                    help="compile every measured tree into a private bytecode cache first (see the module docstring)")
    ap.add_argument("extra", nargs="*", help="more `kubemesh up` arguments (after --)")
    args = ap.parse_args()
    cache = None
    if args.compile:
        cache = tempfile.TemporaryDirectory(prefix="kubemesh-bench-pycache-")
        _ENV["PYTHONPYCACHEPREFIX"] = cache.name
        compile_trees([ROOT, *([args.baseline.resolve()] if args.baseline is not None else [])])
    try:
        return await measure(args)
    finally:
        if cache is not None:
            cache.cleanup()


async def measure(args: argparse.Namespace) -> int:
    """The measurement proper (`main` prepared the bytecode cache)."""
    variant = ["--no-stagger"] if has_flag(ROOT, "--no-stagger") else []

    await time_interpreter("pass", 1)  # warm the page cache once, for every measurement alike
    await one_cold_start(args.nodes, args.extra, args.timeout)
    # The two start orders alternate, so that a machine's drift affects both alike.
    runs: list[dict[str, Any]] = []
    variant_runs: list[dict[str, Any]] = []
    baseline_runs: list[dict[str, Any]] = []
    if args.baseline is not None:
        await one_cold_start(args.nodes, args.extra, args.timeout, root=args.baseline.resolve())
    for _ in range(args.runs):
        runs.append(await one_cold_start(args.nodes, args.extra, args.timeout))
        if args.baseline is not None:
            baseline_runs.append(await one_cold_start(args.nodes, args.extra, args.timeout,
                                                      root=args.baseline.resolve()))
        if variant:
            variant_runs.append(await one_cold_start(args.nodes, [*variant, *args.extra], args.timeout))
    bare = await time_interpreter("pass", args.runs)
    aiohttp_import = await time_interpreter("import aiohttp", args.runs)

    ready = [float(r["ready_s"]) for r in runs]
    result = {
        "benchmark": "cold_start",
        "description": f"`kubemesh up --nodes {args.nodes}` launched to every node Ready (wall seconds)",
        "nodes": args.nodes,
        "runs": runs,
        "ready_s": summary(ready),
        "launcher_ready_s": summary([float(r["launcher_ready_s"]) for r in runs]),
        "stop_s": summary([float(r["stop_s"]) for r in runs]),
        "reference": {"python_pass_s": summary(bare), "python_import_aiohttp_s": summary(aiohttp_import)},
        "ratio_to_python_pass": statistics.median(ready) / statistics.median(bare),
        "ratio_to_import_aiohttp": statistics.median(ready) / statistics.median(aiohttp_import),
        "target_s": TARGET_SECONDS,
        "meets_target": statistics.median(ready) < TARGET_SECONDS,
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(),
                    "platform": platform.platform()},
        "extra_args": args.extra,
        "bytecode": "compiled first (--compile)" if args.compile else (
            "as found" + (" (PYTHONDONTWRITEBYTECODE set: none is written)"
                          if os.environ.get("PYTHONDONTWRITEBYTECODE") else "")),
        "phases": {"starting_s": summary([float(r["starting_s"]) for r in runs]),
                   "components_to_ready_s": summary([float(r["components_to_ready_s"]) for r in runs])},
        "cpu_s": cpu_summary(runs),
    }
    if variant_runs:
        v_ready = [float(r["ready_s"]) for r in variant_runs]
        result["no_stagger"] = {
            "description": "`kubemesh up --no-stagger`: the controller-manager and the scheduler started with the "
                           "kubelets", "runs": variant_runs, "ready_s": summary(v_ready),
            "cpu_s": cpu_summary(variant_runs), "meets_target": statistics.median(v_ready) < TARGET_SECONDS}
    if baseline_runs:
        b_ready = [float(r["ready_s"]) for r in baseline_runs]
        result["baseline"] = {
            "tree": str(args.baseline), "runs": baseline_runs, "ready_s": summary(b_ready),
            "phases": {"starting_s": summary([float(r["starting_s"]) for r in baseline_runs]),
                       "components_to_ready_s": summary([float(r["components_to_ready_s"]) for r in baseline_runs])},
            "ratio_to_python_pass": statistics.median(b_ready) / statistics.median(bare),
            "this_over_baseline": statistics.median(ready) / statistics.median(b_ready),
            "cpu_s": cpu_summary(baseline_runs),
        }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    r = result["ready_s"]
    print(f"cold start to {args.nodes} nodes Ready: median {r['median']:.3f} s "
          f"(min {r['min']:.3f}, max {r['max']:.3f}, {args.runs} runs); target < {TARGET_SECONDS} s: "
          f"{'met' if result['meets_target'] else 'NOT met'}")
    if variant_runs:
        e = result["no_stagger"]["ready_s"]
        print(f"  with --no-stagger: median {e['median']:.3f} s (min {e['min']:.3f}, max {e['max']:.3f})")
    print(f"  launcher's own figure: median {result['launcher_ready_s']['median']:.3f} s; "
          f"clean stop: median {result['stop_s']['median']:.3f} s")
    print(f"  reference python -c pass: median {statistics.median(bare) * 1000:.1f} ms "
          f"(ratio {result['ratio_to_python_pass']:.1f}x); python -c 'import aiohttp': "
          f"{statistics.median(aiohttp_import) * 1000:.1f} ms (ratio {result['ratio_to_import_aiohttp']:.1f}x)")
    ph = result["phases"]
    print(f"  phases (median): launcher up to 'starting' {ph['starting_s']['median']:.3f} s, "
          f"then components to every node Ready {ph['components_to_ready_s']['median']:.3f} s")
    print(f"  bytecode: {result['bytecode']}")
    print("  CPU s at Ready (median): " + ", ".join(f"{k} {v:.2f}" for k, v in result["cpu_s"].items()))
    if baseline_runs:
        print("  baseline CPU s at Ready (median): "
              + ", ".join(f"{k} {v:.2f}" for k, v in result["baseline"]["cpu_s"].items()))
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

"""Kubelet capacity: how many nodes one kubelet process holds at real cadence (clock rate 1).

For each step N (1,000, 2,500, 5,000, 10,000 by default; stepping stops at the first step
that fails), in one run on one machine:

1. start the apiserver (`python -m kubemesh.apiserver`, clock rate 1) and one kubelet
   (`python -m kubemesh.kubelet --nodes N`, `--pod-watch per-node` by default: one pod watch per node,
   as real kubelets do), each in its own process; no scheduler or controller-manager;
2. **registration**: wall seconds from the kubelet's start until its `/readyz` passes (every
   node registered) and until every node's Lease exists, with both processes' CPU meanwhile;
3. **hold**: from then on, for `--hold` seconds (5 minutes), LIST every Lease of
   `kube-node-lease` in msgpack every `--sample-interval` seconds (10 s; a LIST, not a watch,
   so that the benchmark costs the apiserver little) and, per node, the **renewal lag**
   (cluster now at the LIST's answer minus `spec.renewTime`; the LIST's own duration is
   included, so the figure errs high) and the **gap** between successive renewals seen;
4. CPU (user+system from `/proc/<pid>/stat`, as a share of one core) and RSS of the apiserver
   and the kubelet over the hold, and of the whole machine (other processes' CPU shows when
   the machine was shared).

A step passes when every node's Lease was present in every sample, no renewal lag reached
the Lease's 40 s duration (the point at which the node lifecycle controller would mark the
node NotReady: a false NotReady) and both processes stayed up. A failing step ends its hold
one sample after the first failing one.

References, not measured here (published figures): kubemark needs about 0.09 core per hollow
node; KWOK's maintainers advise at most 1,000 nodes per KWOK controller. The JSON gives the
kubelet's cores per node beside the first.

`--profile S` samples both processes with py-spy for S seconds during each hold and reports
the functions with the most own time (needs `py-spy`).

Run: `.venv/bin/python benchmarks/kubelet_capacity.py [--quick] [--steps 1000,2500] [--pod-watch shared]`.
Prints a table and writes `benchmarks/results/kubelet_capacity.json`.

This module also holds the process-measurement helpers the other component benchmarks
(`scheduler_throughput.py`, `deployment_startup.py`) import.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import aiohttp
from _common import (
    PYTHON,
    REPO,
    ServerProcess,
    child_env,
    machine,
    percentile,
    pin,
    proc_cpu_seconds,
    run_loop,
    server_cores,
    table,
    write_results,
)

from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.machinery.clock import ClusterClock
from kubemesh.services.mesh.state import free_port
from kubemesh.services.model.kinds import LEASES

STEPS: Final = (1000, 2500, 5000, 10000)
LEASE_NAMESPACE: Final = "kube-node-lease"
LEASE_DURATION: Final = 40.0
KUBEMARK_CORES_PER_NODE: Final = 0.09
KWOK_ADVISED_NODES: Final = 1000
TARGET_NODES: Final = 10000


# ------------------------------------------------------------------------- shared helpers


def rss_mb(pid: int) -> tuple[float, float]:
    """(resident MiB now, peak resident MiB) of a process (Linux /proc; zeros elsewhere)."""
    rss = hwm = 0.0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) / 1024
    except OSError:
        pass
    return rss, hwm


def open_fds(pid: int) -> int:
    """How many file descriptors a process has open (Linux /proc; -1 elsewhere)."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def nofile_limit() -> tuple[int, int]:
    """This process's RLIMIT_NOFILE (soft, hard); the components inherit it."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        return soft, hard
    except (ImportError, OSError, ValueError):
        return -1, -1


def machine_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine since boot (all cores; /proc/stat)."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except OSError:
        return 0.0
    ticks = [int(x) for x in first[1:]]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)  # idle + iowait
    # guest time is already counted in user/nice
    busy = sum(ticks[:8]) - idle
    return busy / os.sysconf("SC_CLK_TCK")


def self_cpu_seconds() -> float:
    """User+system CPU seconds of this (benchmark) process."""
    t = os.times()
    return t.user + t.system


@dataclass
class CpuWindow:
    """CPU of some processes, of this process and of the machine between `start()` and `stop()`."""

    pids: dict[str, int]
    started: float = 0.0
    cpu0: dict[str, float] = field(default_factory=dict)
    self0: float = 0.0
    machine0: float = 0.0

    def start(self) -> None:
        """Take the first readings."""
        self.started = time.monotonic()
        self.cpu0 = {k: proc_cpu_seconds(p) for k, p in self.pids.items()}
        self.self0 = self_cpu_seconds()
        self.machine0 = machine_cpu_seconds()

    def stop(self) -> dict[str, Any]:
        """CPU used per process as a share of one core, the machine's busy cores, and RSS."""
        wall = max(time.monotonic() - self.started, 1e-9)
        out: dict[str, Any] = {"wall_s": wall}
        ours = 0.0
        for k, p in self.pids.items():
            used = proc_cpu_seconds(p) - self.cpu0[k]
            ours += used
            rss, hwm = rss_mb(p)
            out[k] = {"cpu_cores": used / wall, "cpu_s": used, "rss_mb": rss, "peak_rss_mb": hwm}
        bench = self_cpu_seconds() - self.self0
        busy = machine_cpu_seconds() - self.machine0
        out["benchmark"] = {"cpu_cores": bench / wall}
        out["machine"] = {"busy_cores": busy / wall, "other_processes_cores": max(0.0, busy - ours - bench) / wall,
                          "cpus": os.cpu_count(), "loadavg_1m_at_end": os.getloadavg()[0]}
        return out


def count_log_levels(path: Path) -> dict[str, Any]:
    """Warnings and errors in a component's JSON log, by event (the 10 most frequent)."""
    by_event: collections.Counter[str] = collections.Counter()
    levels: collections.Counter[str] = collections.Counter()
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    if "Traceback" in line:
                        levels["traceback"] += 1
                    continue
                if not isinstance(rec, dict):
                    continue
                level = str(rec.get("level", ""))
                if level in ("warning", "error", "critical"):
                    levels[level] += 1
                    by_event[f"{level}: {rec.get('event', '?')}"] += 1
    except OSError:
        pass
    return {"levels": dict(levels), "top_events": dict(by_event.most_common(10))}


def start_component(module: str, args: list[str], *, log_path: Path, cores: set[int] | None) -> subprocess.Popen[bytes]:
    """`python -m <module> <args>` in its own process, output to `log_path`, pinned to `cores`."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([PYTHON, "-m", module, *args], cwd=REPO, env=child_env(), stdout=log,
                                stderr=subprocess.STDOUT)
    pin(proc.pid, cores)
    return proc


def stop_process(proc: subprocess.Popen[bytes], grace: float = 10.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def wait_http_ok(url: str, *, proc: subprocess.Popen[bytes], limit: float, interval: float = 0.5) -> float:
    """Poll `url` until 200; the wall seconds it took. Raises when `proc` dies or after `limit` seconds."""
    t0 = time.monotonic()
    async with aiohttp.ClientSession() as session:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"process exited with {proc.returncode} while waiting for {url}")
            with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                    if resp.status == 200:
                        return time.monotonic() - t0
            if time.monotonic() - t0 > limit:
                raise TimeoutError(f"{url} not ready after {limit:g} s")
            await asyncio.sleep(interval)


class Profiler:
    """py-spy sampling of some processes for a while (raw collapsed stacks), summarised by own time."""

    def __init__(self, out_dir: Path, label: str) -> None:
        self.out_dir = out_dir
        self.label = label
        self.procs: dict[str, tuple[subprocess.Popen[bytes], Path]] = {}

    @staticmethod
    def available() -> str | None:
        """The py-spy executable, if any."""
        venv = Path(PYTHON).parent / "py-spy"
        return str(venv) if venv.exists() else shutil.which("py-spy")

    def start(self, pids: dict[str, int], seconds: float, rate: int = 50) -> None:
        """Start one py-spy per process (they end by themselves after `seconds`)."""
        exe = self.available()
        if exe is None:
            print("  (py-spy not found: no profile)", flush=True)
            return
        self.out_dir.mkdir(parents=True, exist_ok=True)
        for name, pid in pids.items():
            out = self.out_dir / f"{self.label}-{name}.pyspy.txt"
            p = subprocess.Popen([exe, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate",
                                  str(rate), "--format", "raw", "--nonblocking", "--gil", "--output", str(out)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.procs[name] = (p, out)

    def finish(self, top: int = 15) -> dict[str, Any]:
        """Wait for the samplers; per process, the functions with the most own and total time."""
        out: dict[str, Any] = {}
        for name, (p, path) in self.procs.items():
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            out[name] = summarise_collapsed(path, top=top)
        return out


IDLE_LEAVES: Final = frozenset({"select", "EpollSelector.select", "poll"})
"""Leaf frames that mean the loop was waiting (py-spy runs with `--gil`, so few remain; uvloop's
loop is C code: its own work shows as `Runner.run`)."""


def summarise_collapsed(path: Path, *, top: int) -> dict[str, Any]:
    """Own time (leaf frame) and total time (anywhere on the stack) per function of a collapsed-stack file."""
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    samples = idle = 0
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {"file": str(path), "samples": 0, "own": {}, "total": {}}
    for line in lines:
        stack, _, count_s = line.rpartition(" ")
        try:
            count = int(count_s)
        except ValueError:
            continue
        frames = [_short_frame(f) for f in stack.split(";") if f]
        if not frames:
            continue
        if frames[-1].split(" (")[0] in IDLE_LEAVES:
            idle += count  # waiting in the event loop's poll (or in uvloop's C loop)
            continue
        samples += count
        own[frames[-1]] += count
        for f in set(frames):
            total[f] += count
    def share(c: collections.Counter[str]) -> dict[str, float]:
        return {k: round(v / samples, 4) for k, v in c.most_common(top)} if samples else {}
    return {"file": str(path), "samples": samples, "idle_samples": idle, "own": share(own), "total": share(total)}


def _short_frame(frame: str) -> str:
    """`func (path/to/file.py:123)` -> `func (pkg/file.py)`: the line numbers merged."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    file = where.rsplit(":", 1)[0]
    parts = file.split("/")
    for marker in ("site-packages", "lib"):
        if marker in parts:
            parts = parts[parts.index(marker) + 1:]
            break
    else:
        with contextlib.suppress(ValueError):
            parts = parts[parts.index(REPO.name) + 1:]
    return f"{name} ({'/'.join(parts[-2:])})"


def print_profile(profile: dict[str, Any], top: int = 8) -> None:
    """The top own-time functions per process."""
    for name, summary in profile.items():
        print(f"  profile {name} ({summary['samples']} busy samples, {summary.get('idle_samples', 0)} in the "
              "loop's poll), own time of busy samples:")
        for fn, share in list(summary["own"].items())[:top]:
            print(f"    {share:6.1%}  {fn}")


# ------------------------------------------------------------------------- the benchmark


def parse_renew_time(value: str) -> float:
    """metav1.MicroTime (`2026-01-01T00:00:00.123456Z`) to epoch seconds."""
    return datetime.fromisoformat(value).timestamp()


@dataclass
class LeaseTracker:
    """Per node: the last renewTime seen, the largest gap between renewals, the largest lag."""

    nodes: int
    last: dict[str, float] = field(default_factory=dict)
    max_gap: dict[str, float] = field(default_factory=dict)
    max_lag: dict[str, float] = field(default_factory=dict)
    lags: list[float] = field(default_factory=list)
    gaps: list[float] = field(default_factory=list)
    renewals: int = 0
    samples: list[dict[str, Any]] = field(default_factory=list)

    def observe(self, items: list[dict[str, Any]], now: float, list_s: float, t: float) -> dict[str, Any]:
        """Fold one LIST of Leases taken at cluster time `now`; that sample's summary."""
        sample_lags: list[float] = []
        seen = 0
        for item in items:
            name = item["metadata"]["name"]
            renew = (item.get("spec") or {}).get("renewTime")
            if not renew:
                continue
            seen += 1
            rt = parse_renew_time(renew)
            lag = now - rt
            sample_lags.append(lag)
            if lag > self.max_lag.get(name, float("-inf")):
                self.max_lag[name] = lag
            prev = self.last.get(name)
            if prev is not None and rt > prev:
                gap = rt - prev
                self.gaps.append(gap)
                self.renewals += 1
                if gap > self.max_gap.get(name, 0.0):
                    self.max_gap[name] = gap
            self.last[name] = rt
        self.lags.extend(sample_lags)
        sample_lags.sort()
        s = {"t_s": t, "leases": seen, "missing": self.nodes - seen, "list_s": list_s,
             "lag_p50_s": percentile(sample_lags, 50), "lag_p99_s": percentile(sample_lags, 99),
             "lag_max_s": sample_lags[-1] if sample_lags else float("nan"),
             "over_duration": sum(1 for x in sample_lags if x >= LEASE_DURATION)}
        self.samples.append(s)
        return s

    def summary(self) -> dict[str, Any]:
        """Lag and gap percentiles over the hold, and the per-node worst cases."""
        lags = sorted(self.lags)
        gaps = sorted(self.gaps)
        node_gaps = sorted(self.max_gap.values())
        return {
            "lag_p50_s": percentile(lags, 50), "lag_p99_s": percentile(lags, 99),
            "lag_max_s": lags[-1] if lags else float("nan"),
            "gap_p50_s": percentile(gaps, 50), "gap_p99_s": percentile(gaps, 99),
            "gap_max_s": gaps[-1] if gaps else float("nan"),
            "node_max_gap_p99_s": percentile(node_gaps, 99),
            "renewals_seen": self.renewals,
            "nodes_never_renewed_in_hold": sum(1 for n in self.last if n not in self.max_gap),
            "nodes_over_duration": sum(1 for v in self.max_lag.values() if v >= LEASE_DURATION),
            "sample_count": len(self.samples),
            "list_s_max": max((s["list_s"] for s in self.samples), default=float("nan")),
        }


async def list_leases(client: ApiClient) -> list[dict[str, Any]]:
    """Every Lease of kube-node-lease (msgpack)."""
    doc = await client.list(LEASES, namespace=LEASE_NAMESPACE)
    items: list[dict[str, Any]] = doc.get("items") or []
    return items


async def run_step(nodes: int, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    """One step: start, register, hold, measure, stop."""
    api_cores, load_cores = (None, None) if args.no_pin else server_cores()
    server = ServerProcess.start("apiserver", cores=api_cores, log_dir=log_dir)
    admin_port = free_port()
    kubelet_log = log_dir / f"kubelet-{nodes}-{args.pod_watch}.log"
    kubelet = start_component("kubemesh.kubelet", [
        "--apiserver", server.base, "--nodes", str(nodes), "--pod-watch", args.pod_watch,
        "--log-level", "warning", "--admin-port", str(admin_port), "--instance", "kubelet-bench",
        "--seed", "1", "--startup-timeout", "60"], log_path=kubelet_log, cores=load_cores)
    pids = {"apiserver": server.proc.pid, "kubelet": kubelet.pid}
    result: dict[str, Any] = {"nodes": nodes, "pod_watch": args.pod_watch}
    client = ApiClient(server.base, component="bench", instance="kubelet-capacity", timeout=120.0)
    try:
        clock = ClusterClock.from_document(await client.get_clock())
        reg = CpuWindow(pids)
        reg.start()
        t0 = time.monotonic()
        register_s = await wait_http_ok(f"http://127.0.0.1:{admin_port}/readyz", proc=kubelet,
                                        limit=args.register_timeout)
        while True:
            leases = await list_leases(client)
            if len(leases) >= nodes:
                break
            if time.monotonic() - t0 > args.register_timeout:
                raise TimeoutError(f"only {len(leases)}/{nodes} leases after {args.register_timeout:g} s")
            await asyncio.sleep(1.0)
        leases_s = time.monotonic() - t0
        result["registration"] = {"all_registered_s": register_s, "all_leases_s": leases_s,
                                  "nodes_per_s": nodes / register_s, "cpu": reg.stop()}
        print(f"  N={nodes:,}: registered in {register_s:.1f} s ({nodes / register_s:,.0f} nodes/s), "
              f"all leases in {leases_s:.1f} s; holding {args.hold:g} s", flush=True)

        tracker = LeaseTracker(nodes)
        hold = CpuWindow(pids)
        hold.start()
        profiler: Profiler | None = None
        if args.profile:
            profiler = Profiler(args.profile_dir or log_dir, f"kubelet_capacity-{nodes}-{args.pod_watch}")
            profiler.start(pids, min(args.profile, args.hold))
        h0 = time.monotonic()
        failed_at: float | None = None
        failure = ""
        next_t = h0
        while True:
            for name, proc in (("apiserver", server.proc), ("kubelet", kubelet)):
                if proc.poll() is not None:
                    failure = failure or f"{name} exited with {proc.returncode}"
            if failure:
                break
            l0 = time.monotonic()
            items = await list_leases(client)
            list_s = time.monotonic() - l0
            s = tracker.observe(items, clock.now(), list_s, l0 - h0)
            print(f"    t={s['t_s']:5.0f}s leases {s['leases']:,} lag p50 {s['lag_p50_s']:.1f} s "
                  f"p99 {s['lag_p99_s']:.1f} s max {s['lag_max_s']:.1f} s (list {list_s:.2f} s)", flush=True)
            if s["missing"] > 0 or s["over_duration"] > 0:
                if failed_at is None:
                    failed_at = s["t_s"]
                    failure = ""  # decided after one more sample
                else:
                    failure = f"{s['over_duration']} leases older than {LEASE_DURATION:g} s, {s['missing']} missing"
                    break
            next_t += args.sample_interval
            if next_t - h0 > args.hold:
                break
            await asyncio.sleep(max(0.0, next_t - time.monotonic()))
        result["hold"] = {"seconds": time.monotonic() - h0, **tracker.summary(), "cpu": hold.stop(),
                          "samples": tracker.samples, "open_fds": {k: open_fds(p) for k, p in pids.items()}}
        if failed_at is not None and not failure:
            failure = f"leases late or missing from t={failed_at:.0f} s"
        if profiler is not None:
            result["profile"] = profiler.finish()
        summary = result["hold"]
        passed = not failure and summary["nodes_over_duration"] == 0
        result["passed"] = passed
        result["failure"] = failure or None
        kcpu = summary["cpu"]["kubelet"]["cpu_cores"]
        result["kubelet_cores_per_node"] = kcpu / nodes
        result["kubelet_cores_per_node_vs_kubemark"] = (kcpu / nodes) / KUBEMARK_CORES_PER_NODE
    except (TimeoutError, RuntimeError, aiohttp.ClientError, OSError) as exc:
        result["passed"] = False
        result["failure"] = f"{type(exc).__name__}: {exc}"
        if "hold" not in result:  # how far registration got, and how stale the first nodes' leases were by then
            with contextlib.suppress(Exception):
                items = await list_leases(client)
                now = ClusterClock.from_document(await client.get_clock()).now()
                lags = sorted(now - parse_renew_time(i["spec"]["renewTime"]) for i in items
                              if (i.get("spec") or {}).get("renewTime"))
                result["at_failure"] = {
                    "leases": len(items), "lag_p50_s": percentile(lags, 50), "lag_p99_s": percentile(lags, 99),
                    "lag_max_s": lags[-1] if lags else float("nan"),
                    "over_duration": sum(1 for x in lags if x >= LEASE_DURATION),
                    "cpu": {k: {"cpu_s": proc_cpu_seconds(p), "rss_mb": rss_mb(p)[0]} for k, p in pids.items()},
                    "open_fds": {k: open_fds(p) for k, p in pids.items()}}
    finally:
        with contextlib.suppress(Exception):
            result["open_fds"] = {k: open_fds(p) for k, p in pids.items()}
        await client.close()
        stop_process(kubelet)
        server.stop()
        result["logs"] = {"kubelet": count_log_levels(kubelet_log), "apiserver": count_log_levels(server.log_path)}
    return result


async def run_all(args: argparse.Namespace, log_dir: Path) -> list[dict[str, Any]]:
    """Every step until one fails."""
    out: list[dict[str, Any]] = []
    for n in args.steps:
        r = await run_step(n, args, log_dir)
        out.append(r)
        if "profile" in r:
            print_profile(r["profile"])
        if not r["passed"]:
            print(f"  N={n:,} FAILED: {r['failure']}; stepping stops", flush=True)
            break
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line flags."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true", help="N=200 held 20 s (the smoke test's mode)")
    p.add_argument("--steps", default=None, help="comma-separated node counts (default 1000,2500,5000,10000)")
    p.add_argument("--hold", type=float, default=None, help="seconds each step is held (default 300)")
    p.add_argument("--sample-interval", type=float, default=None, help="seconds between Lease LISTs (default 10)")
    p.add_argument("--pod-watch", choices=("per-node", "shared"), default="per-node")
    p.add_argument("--register-timeout", type=float, default=600.0)
    p.add_argument("--profile", type=float, default=0.0, help="py-spy both processes for this many seconds")
    p.add_argument("--profile-dir", type=Path, default=None, help="where the py-spy files go (default: a temp dir)")
    p.add_argument("--no-pin", action="store_true", help="do not pin the apiserver and the kubelet to separate cores")
    p.add_argument("--log-dir", type=Path, default=None, help="keep the processes' logs here (default: a temp dir)")
    p.add_argument("--results-dir", type=Path, default=None)
    p.add_argument("--name", default="kubelet_capacity", help="results file name (without .json)")
    a = p.parse_args(argv)
    a.steps = [int(x) for x in a.steps.split(",")] if a.steps else ([200] if a.quick else list(STEPS))
    a.hold = a.hold if a.hold is not None else (20.0 if a.quick else 300.0)
    a.sample_interval = a.sample_interval if a.sample_interval is not None else (5.0 if a.quick else 10.0)
    return a


def main(argv: list[str] | None = None) -> int:
    """Run the steps, print the table, write the JSON."""
    args = parse_args(argv)
    print(f"kubelet_capacity: steps {args.steps}, pod watch {args.pod_watch}, hold {args.hold:g} s, "
          f"LIST every {args.sample_interval:g} s", flush=True)
    with tempfile.TemporaryDirectory(prefix="kubemesh-bench-") as tmp:
        log_dir = args.log_dir or Path(tmp)
        steps = run_loop(lambda: run_all(args, log_dir))
    held = [s["nodes"] for s in steps if s["passed"]]
    best = max(held, default=0)
    doc: dict[str, Any] = {
        "benchmark": args.name,
        "machine": machine(),
        "config": {"steps": args.steps, "hold_s": args.hold, "sample_interval_s": args.sample_interval,
                   "pod_watch": args.pod_watch, "clock_rate": 1.0, "lease_duration_s": LEASE_DURATION,
                   "quick": args.quick, "pinned": not args.no_pin, "rlimit_nofile": list(nofile_limit())},
        "results": {"steps": steps, "max_nodes_held": best},
        "references": {"kubemark_cores_per_hollow_node": KUBEMARK_CORES_PER_NODE,
                       "kwok_advised_nodes_per_controller": KWOK_ADVISED_NODES,
                       "note": "published figures, not measured here"},
        "target": {"description": f"{TARGET_NODES:,} nodes held by one kubelet with no lease late by "
                                  f"{LEASE_DURATION:g} s", "nodes": TARGET_NODES, "met": best >= TARGET_NODES},
    }
    path = write_results(args.name, doc, args.results_dir)
    rows = []
    for s in steps:
        h = s.get("hold")
        reg = s.get("registration")
        if h is None:
            rows.append([f"{s['nodes']:,}", "-" if reg is None else reg["all_registered_s"], "-", "-", "-", "-", "-",
                         "-", "-", "-", "-", "FAIL"])
            continue
        c = h["cpu"]
        rows.append([f"{s['nodes']:,}", reg["all_registered_s"], h["lag_p50_s"], h["lag_p99_s"], h["lag_max_s"],
                     h["gap_max_s"], f"{c['apiserver']['cpu_cores']:.0%}", f"{c['kubelet']['cpu_cores']:.0%}",
                     c["apiserver"]["rss_mb"], c["kubelet"]["rss_mb"], f"{c['machine']['other_processes_cores']:.2f}",
                     "ok" if s["passed"] else "FAIL"])
    print()
    print(table(["nodes", "register s", "lag p50 s", "lag p99 s", "lag max s", "gap max s", "api cpu", "kubelet cpu",
                 "api MiB", "kubelet MiB", "other cores", "result"], rows))
    for s in steps:
        if s.get("failure"):
            print(f"  N={s['nodes']:,}: {s['failure']}")
        if s.get("at_failure"):
            f = s["at_failure"]
            print(f"    at failure: {f['leases']:,} leases, {f['over_duration']:,} older than {LEASE_DURATION:g} s "
                  f"(lag max {f['lag_max_s']:.0f} s); open fds {f['open_fds']}")
        kubelet_logs = s.get("logs", {}).get("kubelet", {}).get("top_events", {})
        if kubelet_logs:
            print(f"    kubelet log: {dict(list(kubelet_logs.items())[:4])}")
        if "kubelet_cores_per_node" in s:
            print(f"  N={s['nodes']:,}: kubelet {s['kubelet_cores_per_node'] * 1000:.3f} millicores/node "
                  f"(kubemark ~{KUBEMARK_CORES_PER_NODE * 1000:.0f}: x{s['kubelet_cores_per_node_vs_kubemark']:.4f})")
    print(f"max nodes held: {best:,} (target {TARGET_NODES:,}: {'met' if doc['target']['met'] else 'NOT met'}; "
          f"KWOK advises <= {KWOK_ADVISED_NODES:,} per controller)")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

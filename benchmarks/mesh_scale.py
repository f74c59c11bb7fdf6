"""Mesh scale: `kubemesh up --nodes N` with its defaults, to all Ready and held at real cadence.

The door a user walks through: the launcher (`kubemesh.services.mesh.launching.Mesh`) with the
same `MeshSpec` that `kubemesh up --nodes N` builds from its defaults (TLS and token on, clock
rate 1, `--kubelets` and `--pod-watch` chosen by the launcher for the node count), in one run:

1. **start**: wall seconds from the launch until every node is Ready, with the count of Ready
   nodes every `--sample-interval` seconds meanwhile (a LIST of Nodes in msgpack); a start that
   does not finish within `--ready-timeout` reports how far it got and ends the run;
2. **hold**: for `--hold` seconds at clock rate 1, every `--sample-interval` seconds a LIST of
   the Leases (the **renewal lag**, cluster now minus `spec.renewTime`, p50/p99/max, and the
   gaps between renewals, as `kubelet_capacity.py`) and a LIST of the Nodes (any node not Ready
   is a **false NotReady**: nothing was done to it);
3. CPU (share of one core) and resident memory of every process over the hold, per 1,000 nodes,
   and **nodes per core** (nodes ÷ the mesh's busy cores) beside kubemark's published figure
   (about 0.09 core per hollow node, i.e. about 11 nodes per core; not measured here).

A run passes when every node became Ready within `--ready-timeout`, no node was ever seen not
Ready during the hold, and no renewal lag reached the Lease duration (40 s).

Run: `.venv/bin/python benchmarks/mesh_scale.py [--nodes 10000] [--hold 600] [--quick]`.
Prints a table and writes `benchmarks/results/mesh_scale.json`. The machine's other load shows
in `machine.loadavg` and in `cpu.machine.other_processes_cores`: on a shared machine the
figures are only comparable within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path
from typing import Any, Final

from _common import machine, run_loop, table, write_results
from kubelet_capacity import LEASE_DURATION, CpuWindow, LeaseTracker, list_leases

from kubemesh.services.machinery.client import ApiClient, ApiError
from kubemesh.services.machinery.clock import ClusterClock
from kubemesh.services.mesh.endpoint import node_is_ready
from kubemesh.services.mesh.launching import Mesh, MeshSpec
from kubemesh.services.model.kinds import NODES

KUBEMARK_CORES_PER_NODE: Final = 0.09
"""kubemark's published cost of a hollow node (not measured here)."""


async def count_ready(client: ApiClient) -> tuple[int, int, list[str]]:
    """(Nodes, Ready nodes, names of up to five nodes not Ready) from one LIST."""
    items = (await client.list(NODES)).get("items") or []
    not_ready = [str(n["metadata"]["name"]) for n in items if not node_is_ready(n)]
    return len(items), len(items) - len(not_ready), not_ready[:5]


async def wait_started(mesh: Mesh, starting: asyncio.Task[None]) -> None:
    """Until the apiserver answers (the start task launched it) or the start failed."""
    while not starting.done():
        apiserver = next((p for p in mesh.processes if p.component == "apiserver"), None)
        if apiserver is not None and apiserver.running and apiserver.port:
            async with mesh.client("bench", instance="mesh-scale") as client:
                try:
                    await client.get_clock()
                    return
                except ApiError:
                    pass
        await asyncio.sleep(0.2)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """Start, wait for Ready, hold, measure, stop."""
    spec = MeshSpec(nodes=args.nodes, kubelets=0, pod_watch="auto", clock_rate=1.0, log_level="warning",
                    start_timeout=args.ready_timeout, wait_registered=False)
    mesh = Mesh(spec)
    result: dict[str, Any] = {"nodes": args.nodes, "choices": mesh.choices(),
                              "kubelets": [{"instance": p.instance, "nodes": p.nodes, "pod_watch": p.pod_watch}
                                           for p in mesh.kubelet_plans]}
    t0 = time.monotonic()
    starting = asyncio.create_task(mesh.start(), name="mesh-start")
    curve: list[dict[str, Any]] = []
    try:
        await wait_started(mesh, starting)
        async with mesh.client("bench", instance="mesh-scale") as client:
            while not starting.done():
                await asyncio.sleep(args.sample_interval)
                try:
                    total, ready, _ = await count_ready(client)
                except (ApiError, RuntimeError) as exc:  # RuntimeError: the failed start closed the session
                    curve.append({"t_s": round(time.monotonic() - t0, 1), "error": str(exc)})
                    continue
                curve.append({"t_s": round(time.monotonic() - t0, 1), "registered": total, "ready": ready})
                print(f"  start {curve[-1]['t_s']:7.1f} s: {ready:6d} Ready of {total} registered", flush=True)
            result["start_curve"] = curve
            try:
                await starting
            except Exception as exc:  # the launcher's own failure message is the result
                result["started"] = False
                result["start_error"] = str(exc).split("\n", 1)[0]
                return result
            result["started"] = True
            result["ready_s"] = round(time.monotonic() - t0, 2)
            print(f"  all {args.nodes} nodes Ready after {result['ready_s']} s", flush=True)
            result["hold"] = await hold(mesh, client, args)
    finally:
        if not starting.done():
            starting.cancel()
        await mesh.stop()
    return result


async def hold(mesh: Mesh, client: ApiClient, args: argparse.Namespace) -> dict[str, Any]:
    """Sample Leases and Nodes for `args.hold` seconds; CPU and memory of every process."""
    clock = ClusterClock.from_document(await client.get_clock())
    pids = {p.name: p.pid for p in mesh.processes if p.pid is not None and p.running}
    window = CpuWindow(pids)
    window.start()
    tracker = LeaseTracker(nodes=args.nodes)
    not_ready_seen: dict[str, float] = {}
    started = time.monotonic()
    while time.monotonic() - started < args.hold:
        await asyncio.sleep(args.sample_interval)
        t = time.monotonic() - started
        before = time.monotonic()
        leases = await list_leases(client)
        s = tracker.observe(leases, clock.now(), time.monotonic() - before, t)
        _, ready, names = await count_ready(client)
        for name in names:
            not_ready_seen.setdefault(name, round(t, 1))
        s["not_ready"] = args.nodes - ready
        print(f"  hold {t:6.0f} s: lease lag p50 {s['lag_p50_s']:.2f} s p99 {s['lag_p99_s']:.2f} s, "
              f"{s['not_ready']} not Ready", flush=True)
    cpu = window.stop()
    procs = {k: v for k, v in cpu.items() if isinstance(v, dict) and "cpu_cores" in v and k != "benchmark"}
    per_k = args.nodes / 1000
    mesh_cores = sum(v["cpu_cores"] for v in procs.values())
    worst_not_ready = max((s.get("not_ready", 0) for s in tracker.samples), default=0)
    return {
        "seconds": args.hold, "leases": tracker.summary(), "samples": tracker.samples,
        "false_not_ready_max": worst_not_ready, "not_ready_first_seen": not_ready_seen,
        "cpu": cpu,
        "per_1000_nodes": {k: {"cpu_cores": round(v["cpu_cores"] / per_k, 4), "rss_mb": round(v["rss_mb"] / per_k, 1)}
                           for k, v in procs.items()},
        "mesh_cores": round(mesh_cores, 3),
        "nodes_per_core": round(args.nodes / mesh_cores, 1) if mesh_cores else float("nan"),
        "kubemark_nodes_per_core": round(1 / KUBEMARK_CORES_PER_NODE, 1),
        "passed": worst_not_ready == 0 and tracker.summary()["nodes_over_duration"] == 0,
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--nodes", type=int, default=None, help="nodes (default 10,000; --quick 300)")
    p.add_argument("--hold", type=float, default=None, help="seconds held at real cadence (default 600; --quick 30)")
    p.add_argument("--ready-timeout", type=float, default=300.0, help="seconds allowed to reach all Ready")
    p.add_argument("--sample-interval", type=float, default=10.0,
                   help="seconds between samples (each lists every Node and Lease: 10 or more at 10,000 nodes)")
    p.add_argument("--quick", action="store_true", help="300 nodes held 30 s (a smoke run)")
    p.add_argument("--results-dir", type=Path, default=None)
    a = p.parse_args(argv)
    a.nodes = a.nodes if a.nodes is not None else (300 if a.quick else 10_000)
    a.hold = a.hold if a.hold is not None else (30.0 if a.quick else 600.0)
    return a


def main(argv: list[str] | None = None) -> int:
    """Run, print the table, write the JSON."""
    args = parse_args(argv)
    print(f"mesh_scale: kubemesh up --nodes {args.nodes} (defaults), hold {args.hold:g} s at clock rate 1",
          flush=True)
    result = run_loop(lambda: run(args))
    doc = {"benchmark": "mesh_scale", "machine": machine(),
           "config": {"nodes": args.nodes, "hold_s": args.hold, "ready_timeout_s": args.ready_timeout,
                      "sample_interval_s": args.sample_interval, "tls": True, "lease_duration_s": LEASE_DURATION},
           "references": {"kubemark_cores_per_hollow_node": KUBEMARK_CORES_PER_NODE,
                          "note": "published figure, not measured here"},
           "result": result}
    path = write_results("mesh_scale", doc, args.results_dir)
    for line in result.get("choices", []):
        print(f"launcher: {line}")
    if not result.get("started"):
        print(f"not every node became Ready within {args.ready_timeout:g} s: {result.get('start_error', '')[:300]}")
        print(f"wrote {path}")
        return 1
    h = result["hold"]
    rows = [[name, v["cpu_cores"], v["rss_mb"], h["per_1000_nodes"][name]["cpu_cores"],
             h["per_1000_nodes"][name]["rss_mb"]]
            for name, v in h["cpu"].items() if isinstance(v, dict) and "rss_mb" in v]
    print(table(["process", "cores", "RSS MB", "cores/1k nodes", "MB/1k nodes"], rows))
    ls = h["leases"]
    print(f"ready after {result['ready_s']} s; lease lag p50 {ls['lag_p50_s']:.2f} s p99 {ls['lag_p99_s']:.2f} s "
          f"max {ls['lag_max_s']:.2f} s; false NotReady (max in a sample) {h['false_not_ready_max']}; "
          f"{h['nodes_per_core']} nodes per core (kubemark about {h['kubemark_nodes_per_core']}); "
          f"{'PASS' if h['passed'] else 'FAIL'}")
    print(f"wrote {path}")
    return 0 if h["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

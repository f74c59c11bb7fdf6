"""Unit costs: what `kubemesh plan` multiplies (docs/capacity.md), measured on this machine.

Three short phases, each with the real processes:

1. **nodes**: `mesh_scale.py`'s run (`kubemesh up --nodes N` defaults: TLS, token, clock rate 1)
   at two sizes, each held `--hold` seconds at real cadence. Per component: CPU per 1,000 nodes
   (the larger run's cores ÷ its nodes) and memory as a base plus a slope per 1,000 nodes (the
   line through the two runs' RSS).
2. **apiserver**: one apiserver over a single-member etcd (`--storage etcd`, what deploy/ runs),
   with TLS and a token. A paced client renews `--leases` Leases at `--rate` writes/s for
   `--seconds`, first with no watcher, then with `--watchers` watches of the Leases (each write
   one event per watcher). The apiserver's CPU gives the cost of 1,000 writes/s (first step) and
   of 1,000 watch events/s (the difference ÷ the events); its RSS before and after creating
   `--pods` Pods gives the memory per 1,000 Pods. etcd's CPU per 1,000 writes/s is read too.
3. **etcd**: `etcdctl check perf --load <--etcd-load>` (60 s, etcd's own load generator)
   against a fresh single member: the writes/s it sustained.

Writes `benchmarks/unit_costs.json` (committed: `kubemesh plan` reads it, through the package's
`kubemesh/unit_costs.json` link) and the full run to `benchmarks/results/unit_costs.json`.
The machine's other load shows in each phase's `machine` figures: the costs are upper bounds on
a busy machine.

Run: `.venv/bin/python benchmarks/unit_costs.py [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import secrets
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Final

from _common import PYTHON, REPO, child_env, machine, proc_cpu_seconds, run_loop, write_results
from durable_writes import check_perf, etcd, stop
from kubelet_capacity import rss_mb
from mesh_scale import run as mesh_run

from kubemesh.services.machinery.certs import ensure_certs
from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.mesh.state import free_port
from kubemesh.services.model.kinds import LEASES, PODS, Obj

HERE = Path(__file__).resolve().parent
COSTS_FILE: Final = HERE / "unit_costs.json"
NS: Final = "default"


def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(base, slope per 1,000) of the line through the first and last (nodes, value) points."""
    (n1, y1), (n2, y2) = points[0], points[-1]
    slope = (y2 - y1) / (n2 - n1) * 1000
    return max(0.0, y1 - slope * n1 / 1000), max(0.0, slope)


async def nodes_phase(sizes: list[int], hold: float) -> list[dict[str, Any]]:
    runs = []
    for n in sizes:
        print(f"nodes: kubemesh up --nodes {n}, hold {hold:g} s", flush=True)
        args = argparse.Namespace(nodes=n, hold=hold, ready_timeout=300.0, sample_interval=10.0)
        result = await mesh_run(args)
        if not result.get("started"):
            raise RuntimeError(f"{n} nodes did not all become Ready: {result.get('start_error')}")
        cpu = result["hold"]["cpu"]
        procs: dict[str, dict[str, float]] = {}
        for name, v in cpu.items():
            if isinstance(v, dict) and "rss_mb" in v:
                component = "kubelet" if name.startswith("kubelet") else name.replace("-", "_")
                acc = procs.setdefault(component, {"cores": 0.0, "rss_mib": 0.0, "processes": 0})
                acc["cores"] += v["cpu_cores"]
                acc["rss_mib"] += v["rss_mb"]
                acc["processes"] += 1
        runs.append({"nodes": n, "processes": procs, "machine": cpu["machine"],
                     "lease_lag_p99_s": result["hold"]["leases"]["lag_p99_s"],
                     "false_not_ready_max": result["hold"]["false_not_ready_max"]})
    return runs


def per_component(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Cores per 1,000 nodes (the largest run) and memory base + per 1,000 nodes, per component."""
    out: dict[str, dict[str, float]] = {}
    big = runs[-1]
    for component, v in big["processes"].items():
        per_process_rss = [(r["nodes"] // int(r["processes"][component]["processes"]),
                            r["processes"][component]["rss_mib"] / r["processes"][component]["processes"])
                           for r in runs]
        base, slope = fit(per_process_rss)
        out[component] = {"cores_per_1000_nodes": round(v["cores"] / big["nodes"] * 1000, 4),
                          "mib_base": round(base, 1), "mib_per_1000_nodes": round(slope, 1)}
    return out


class Servers:
    """etcd and one apiserver over it, TLS and token as `kubemesh up`'s, in a temporary folder."""

    def __init__(self, tmp: Path) -> None:
        self.token = secrets.token_urlsafe(24)
        self.etcd, self.etcd_port = etcd(tmp, None)
        certs = ensure_certs(tmp / "pki")
        self.ca = certs.ca
        (tmp / "token").write_text(self.token + "\n")
        self.port = free_port()
        cmd = [PYTHON, "-m", "kubemesh.apiserver", "--port", str(self.port), "--storage", "etcd",
               "--etcd-endpoints", f"http://127.0.0.1:{self.etcd_port}", "--token-file", str(tmp / "token"),
               "--tls-cert-file", str(certs.cert), "--tls-private-key-file", str(certs.key),
               "--no-system-pods", "--log-level", "warning"]
        with open(tmp / "apiserver.log", "wb") as out:
            self.apiserver = subprocess.Popen(cmd, cwd=REPO, env=child_env(), stdout=out, stderr=subprocess.STDOUT)

    def client(self) -> ApiClient:
        context = ssl.create_default_context(cafile=str(self.ca))
        return ApiClient(f"https://127.0.0.1:{self.port}", component="bench", instance="unit-costs",
                         token=self.token, encoding="msgpack", ssl_context=context)

    def stop(self) -> None:
        stop(self.apiserver)
        stop(self.etcd)


def lease(name: str, renew: str) -> Obj:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name, "namespace": NS},
            "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": renew}}


async def paced_writes(client: ApiClient, leases: list[Obj], *, rate: float, seconds: float) -> int:
    """Update the Leases round robin at `rate` writes/s for `seconds`; the writes done."""
    done = 0
    workers = 16
    start_t = time.monotonic()

    async def worker(w: int) -> None:
        nonlocal done
        i = w
        while True:
            due = start_t + i / rate
            if due - start_t >= seconds:
                return
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            obj = leases[i % len(leases)]
            obj["spec"]["renewTime"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
            leases[i % len(leases)] = await client.update(LEASES, obj)
            done += 1
            i += workers

    # Each Lease is written by one worker only (i ≡ w mod workers, len(leases) a multiple of it).
    await asyncio.gather(*(worker(w) for w in range(workers)))
    return done


async def watch_count(client: ApiClient, rv: str, counter: list[int]) -> None:
    async with client, contextlib.aclosing(client.watch(LEASES, resource_version=rv, namespace=NS,
                                                        allow_bookmarks=False)) as events:
        async for _ in events:
            counter[0] += 1


async def apiserver_phase(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="unit-costs-") as tmp:
        servers = Servers(Path(tmp))
        try:
            client = servers.client()
            async with client:
                for _ in range(300):
                    with contextlib.suppress(Exception):
                        await client.get_clock()
                        break
                    await asyncio.sleep(0.1)
                now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                leases = [await client.create(LEASES, lease(f"l-{i:05d}", now), namespace=NS)
                          for i in range(args.leases)]
                pid, etcd_pid = servers.apiserver.pid, servers.etcd.pid
                out: dict[str, Any] = {"rate": args.rate, "seconds": args.seconds, "watchers": args.watchers}
                await paced_writes(client, leases, rate=args.rate, seconds=2.0)  # warm-up
                for watchers in (0, args.watchers):
                    counters = [[0] for _ in range(watchers)]
                    rv = str((await client.list(LEASES, namespace=NS))["metadata"]["resourceVersion"])
                    watches = [asyncio.create_task(watch_count(servers.client(), rv, c)) for c in counters]
                    await asyncio.sleep(1.0)
                    cpu0, ecpu0, t0 = proc_cpu_seconds(pid), proc_cpu_seconds(etcd_pid), time.monotonic()
                    writes = await paced_writes(client, leases, rate=args.rate, seconds=args.seconds)
                    wall = time.monotonic() - t0
                    cores = (proc_cpu_seconds(pid) - cpu0) / wall
                    etcd_cores = (proc_cpu_seconds(etcd_pid) - ecpu0) / wall
                    await asyncio.sleep(0.5)
                    events = sum(c[0] for c in counters)
                    for w in watches:
                        w.cancel()
                    await asyncio.gather(*watches, return_exceptions=True)
                    out[f"watchers_{watchers}"] = {"writes_per_s": writes / wall, "events_per_s": events / wall,
                                                   "apiserver_cores": cores, "etcd_cores": etcd_cores}
                    print(f"apiserver: {writes / wall:.0f} writes/s, {events / wall:.0f} events/s to {watchers} "
                          f"watchers: apiserver {cores:.3f} cores, etcd {etcd_cores:.3f}", flush=True)
                rss0 = rss_mb(pid)[0]
                pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"namespace": NS},
                       "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}
                sem = asyncio.Semaphore(16)

                async def create(i: int) -> None:
                    async with sem:
                        await client.create(PODS, {**pod, "metadata": {"name": f"p-{i:06d}", "namespace": NS}},
                                            namespace=NS)

                await asyncio.gather(*(create(i) for i in range(args.pods)))
                await asyncio.sleep(2.0)
                rss1 = rss_mb(pid)[0]
                out["pods"] = {"created": args.pods, "rss_mib_before": rss0,
                               "rss_mib_after": rss1}
                print(f"apiserver: RSS {rss0:.0f} -> {rss1:.0f} MB with {args.pods} Pods", flush=True)
                return out
        finally:
            servers.stop()


def etcd_phase(load: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="unit-costs-etcd-") as tmp:
        proc, port = etcd(Path(tmp), None)
        try:
            print(f"etcd: etcdctl check perf --load {load} (60 s)", flush=True)
            return {"load": load, **check_perf(port, load=load)}
        finally:
            stop(proc)


def costs(nodes: list[dict[str, Any]], api: dict[str, Any], etcd_perf: dict[str, Any]) -> dict[str, Any]:
    components = per_component(nodes)
    quiet, loud = api["watchers_0"], api[f"watchers_{api['watchers']}"]
    per_write = quiet["apiserver_cores"] / quiet["writes_per_s"]
    per_event = max(0.0, loud["apiserver_cores"] - quiet["apiserver_cores"] * loud["writes_per_s"]
                    / quiet["writes_per_s"]) / max(loud["events_per_s"], 1.0)
    pods = api["pods"]
    apiserver = {**components["apiserver"],
                 "cores_per_1000_writes_per_s": round(per_write * 1000, 4),
                 "cores_per_1000_watch_events_per_s": round(per_event * 1000, 4),
                 "mib_per_1000_pods": round(max(0.0, pods["rss_mib_after"] - pods["rss_mib_before"])
                                            / pods["created"] * 1000, 1)}
    return {
        "measured": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": {k: v for k, v in machine().items() if k in ("cpus", "python", "platform")},
        "kubelet": components["kubelet"],
        "apiserver": apiserver,
        "controller_manager": components["controller_manager"],
        "scheduler": components["scheduler"],
        "etcd": {"writes_per_s": etcd_perf["writes_per_s"], "check_perf_load": etcd_perf["load"],
                 "check_perf_passed": etcd_perf["passed"],
                 "cores_per_1000_writes_per_s": round(quiet["etcd_cores"] / quiet["writes_per_s"] * 1000, 4)},
        "runs": {"nodes": [{"nodes": r["nodes"],
                            "processes": {k: {"cores": round(v["cores"], 4), "rss_mib": round(v["rss_mib"], 1),
                                              "processes": int(v["processes"])}
                                          for k, v in r["processes"].items()},
                            "other_processes_cores": round(r["machine"]["other_processes_cores"], 3)}
                           for r in nodes],
                 "apiserver": {k: ({kk: round(vv, 4) for kk, vv in v.items()} if isinstance(v, dict) else v)
                               for k, v in api.items()}},
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--sizes", default=None, help="node counts of the two mesh runs (default 500,2000; --quick 100,300)")
    p.add_argument("--hold", type=float, default=None, help="seconds each mesh run is held (default 60; --quick 20)")
    p.add_argument("--rate", type=float, default=200.0, help="Lease writes/s of the apiserver phase")
    p.add_argument("--seconds", type=float, default=None, help="seconds per apiserver step (default 20; --quick 5)")
    p.add_argument("--watchers", type=int, default=20, help="Lease watchers of the second apiserver step")
    p.add_argument("--leases", type=int, default=320, help="Leases the writes cycle through (a multiple of 16)")
    p.add_argument("--pods", type=int, default=None, help="Pods created for the memory per Pod (default 2000)")
    p.add_argument("--etcd-load", default="l", choices=("s", "m", "l", "xl"), help="etcdctl check perf --load")
    p.add_argument("--quick", action="store_true", help="a smoke run (does not write benchmarks/unit_costs.json)")
    p.add_argument("--out", type=Path, default=None, help=f"where the costs go (default {COSTS_FILE})")
    p.add_argument("--results-dir", type=Path, default=None)
    a = p.parse_args(argv)
    a.sizes = [int(s) for s in (a.sizes or ("100,300" if a.quick else "500,2000")).split(",")]
    a.hold = a.hold if a.hold is not None else (20.0 if a.quick else 60.0)
    a.seconds = a.seconds if a.seconds is not None else (5.0 if a.quick else 20.0)
    a.pods = a.pods if a.pods is not None else (200 if a.quick else 2000)
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    nodes = run_loop(lambda: nodes_phase(args.sizes, args.hold))
    api = run_loop(lambda: apiserver_phase(args))
    etcd_perf = etcd_phase(args.etcd_load)
    result = costs(nodes, api, etcd_perf)
    path = write_results("unit_costs", {"benchmark": "unit_costs", "machine": machine(), "config": vars(args) | {
        "out": str(args.out), "results_dir": str(args.results_dir)}, "result": result}, args.results_dir)
    out = args.out or (None if args.quick else COSTS_FILE)
    if out is not None:
        out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("kubelet", "apiserver", "controller_manager", "scheduler", "etcd")},
                     indent=2))
    print(f"wrote {path}" + (f" and {out}" if out else ""))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

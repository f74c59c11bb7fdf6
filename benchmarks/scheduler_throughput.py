"""Scheduler throughput: pods bound per second, observed through the API, at 1,000 and 5,000 nodes.

For each node count (`--nodes`, 1,000 and 5,000) and each pod kind (`plain`, and `anti-affinity`:
required pod anti-affinity on `kubernetes.io/hostname` against the pod's own group, with
`--groups` groups so that it is satisfiable: at most one pod of a group per node), in one run:

1. start a fresh apiserver (`python -m kubemesh.apiserver`) and create the N Nodes directly through the
   API (Ready, 8 CPUs / 32 GiB / 110 pods allocatable, the kubelet's labels); no kubelet runs,
   so pods stay bound but never run, which is all scheduling throughput needs;
2. open a watch on the benchmark's namespace (msgpack), then, per mode:
   * `streaming` (default, as scheduler_perf measures it): start the scheduler
     (`python -m kubemesh.scheduler`), wait for its `/readyz` (informers synced), then create M pods
     (`--pods`, 2,000) over `--concurrency` keep-alive connections as fast as the apiserver
     takes them, while the scheduler binds them;
   * `backlog`: create the M pods first, then start the scheduler: the throughput of
     scheduling and binding alone, without the apiserver's ingest competing;
3. a pod's binding time is when the watch first shows it with `spec.nodeName`.

Reported per case: **throughput** = bindings ÷ seconds from the start of the case to the
last binding (streaming: from the first pod's create request; backlog: from the scheduler's
process start, so interpreter start-up and the informers' sync count against it);
`first_to_last_binding_pods_per_s` divides by the span from the first to the last binding
instead, which overstates a scheduler that binds in bursts (`max_bound_in_1s_share`: the
largest share of the bindings seen within one second);
the **creation rate** (pods acknowledged per second; when it is close to the streaming
throughput the apiserver's ingest, not the scheduler, is the bottleneck); creation-to-binding
latency p50/p99; CPU of the apiserver, the scheduler and this process; and, for
anti-affinity, whether any group has two pods on one node (it must not).

References (published, not measured here): kube-scheduler's scheduler_perf floors, about
680 pods/s for 10,000 pods on 5,000 nodes (plain), on much larger machines. Targets on this
2-core machine: 300 pods/s plain at 1,000 nodes, 100 pods/s with anti-affinity.

`--profile S` samples the apiserver and the scheduler with py-spy for S seconds of each case.

`--core` also measures the scheduler's synchronous core in this process, free of the apiserver
and of the machine's other load (CPU time, not wall time): the same nodes and pods, each pod
through the cycle's pre-pass (inter-pod affinity), filtering, scoring and assume, reported as pods
per CPU-second per kind with the split of CPU between those phases, and anti-affinity ÷ plain.
The pre-pass reads the cache's incremental index (`AffinityState` from `AffinityIndex`); the
split of the scan it replaced is reported beside it (`prepass_scan`), so the before/after of
the anti-affinity pre-pass is in every results file.

Run: `.venv/bin/python benchmarks/scheduler_throughput.py [--quick]`. Prints a table and writes
`benchmarks/results/scheduler_throughput.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import aiohttp
from _common import (
    PodWatch,
    ServerProcess,
    machine,
    percentile,
    run_loop,
    server_cores,
    table,
    write_results,
)
from kubelet_capacity import (
    CpuWindow,
    Profiler,
    count_log_levels,
    print_profile,
    start_component,
    stop_process,
    wait_http_ok,
)

from kubemesh.scheduler.caching import SchedulerCache
from kubemesh.scheduler.filtering import (
    PodFilter,
    affinity_state_from_index,
    compute_affinity_state,
    find_feasible,
    num_feasible_nodes_to_find,
)
from kubemesh.scheduler.podinfo import PodInfo
from kubemesh.scheduler.scoring import compute_inter_pod_scores, score_nodes, select_host
from kubemesh.services.machinery.client import AlreadyExistsError, ApiClient
from kubemesh.services.mesh.state import free_port
from kubemesh.services.model.kinds import NAMESPACES, NODES, PODS

NAMESPACE: Final = "bench"
KINDS: Final = ("plain", "anti-affinity")
MODES: Final = ("streaming", "backlog")
SCHEDULER_PERF_FLOOR: Final = 680.0
"""kube-scheduler's scheduler_perf threshold for 10,000 pods on 5,000 nodes (pods/s)."""
TARGETS: Final = {"plain": 300.0, "anti-affinity": 100.0}
"""pods/s at 1,000 nodes on this 2-core machine."""
TARGET_NODES: Final = 1000


def node_body(i: int) -> dict[str, Any]:
    """A Ready node as a kubelet would register it (the parts the scheduler reads)."""
    name = f"node-{i}"
    zone = f"zone-{i % 3}"
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
            "topology.kubernetes.io/zone": zone, "topology.kubernetes.io/region": "region-1"}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"},
            "allocatable": {"cpu": "7900m", "memory": "32412Mi", "pods": "110", "ephemeral-storage": "99Gi"},
            "conditions": [
                {"type": t, "status": s, "reason": r, "message": r}
                for t, s, r in (("MemoryPressure", "False", "KubeletHasSufficientMemory"),
                                ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
                                ("PIDPressure", "False", "KubeletHasSufficientPID"),
                                ("Ready", "True", "KubeletReady"))],
        },
    }


def pod_body(i: int, kind: str, groups: int) -> dict[str, Any]:
    """A small pod; with anti-affinity, at most one pod of its group per node."""
    group = f"g{i % groups}"
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.9",
                                            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}]}
    if kind == "anti-affinity":
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"group": group}}, "topologyKey": "kubernetes.io/hostname"}]}}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"pod-{i}", "namespace": NAMESPACE, "labels": {"app": "bench", "group": group}},
            "spec": spec}


def max_in_window(times: list[float], width: float) -> int:
    """The most sorted time points within any window of `width` seconds (how bursty the bindings are)."""
    best = j = 0
    for i, t in enumerate(times):
        while t - times[j] > width:
            j += 1
        best = max(best, i - j + 1)
    return best


async def create_all(client: ApiClient, bodies: list[dict[str, Any]], kind_obj: Any, concurrency: int,
                     namespace: str | None = None) -> tuple[float, float, dict[str, float], int]:
    """Create every body with `concurrency` workers: (first send, last ack, ack time per name, errors)."""
    it = iter(bodies)
    acked: dict[str, float] = {}
    errors = 0
    first = time.monotonic()

    async def worker() -> None:
        nonlocal errors
        for body in it:
            try:
                await client.create(kind_obj, body, namespace=namespace)
                acked[body["metadata"]["name"]] = time.monotonic()
            except Exception:  # counted and reported; the benchmark goes on
                errors += 1

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return first, time.monotonic(), acked, errors


class BindingWatch(PodWatch):
    """A msgpack watch on the namespace's pods noting when each pod is first seen bound."""

    def __init__(self, client: ApiClient, resource_version: str) -> None:
        super().__init__(client, resource_version, namespace=NAMESPACE)
        self.bound: dict[str, tuple[float, str, str]] = {}

    def observe(self, type_: str, obj: dict[str, Any], now: float) -> bool:
        """Note the first binding of each pod: (time, node, anti-affinity group)."""
        md = obj.get("metadata") or {}
        node = (obj.get("spec") or {}).get("nodeName")
        name = md.get("name")
        if node and name and name not in self.bound:
            self.bound[name] = (now, node, (md.get("labels") or {}).get("group", ""))
            return True
        return False

    async def wait_for(self, count: int, limit: float) -> bool:
        """Wait until `count` pods are bound (False on timeout or when bindings stop for 30 s)."""
        return await self.wait_until(lambda: len(self.bound) >= count, limit, stall=30)


async def run_case(nodes: int, kind: str, mode: str, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    """One case on a fresh apiserver and scheduler."""
    api_cores, load_cores = (None, None) if args.no_pin else server_cores()
    server = ServerProcess.start("apiserver", cores=api_cores, log_dir=log_dir)
    connector = aiohttp.TCPConnector(limit=0, limit_per_host=0)
    client = ApiClient(server.base, component="bench", instance="scheduler-throughput", connector=connector,
                       timeout=60.0)
    sched: Any = None
    label = f"{nodes}-{kind}-{mode}"
    sched_log = log_dir / f"scheduler-{label}.log"
    result: dict[str, Any] = {"nodes": nodes, "kind": kind, "mode": mode, "pods": args.pods}
    watch: BindingWatch | None = None
    try:
        with contextlib.suppress(AlreadyExistsError):
            await client.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
        n0, n1, n_acked, n_err = await create_all(client, [node_body(i) for i in range(1, nodes + 1)], NODES,
                                                  args.concurrency)
        result["node_creation"] = {"seconds": n1 - n0, "per_s": len(n_acked) / (n1 - n0), "errors": n_err}
        rv = (await client.list(PODS, namespace=NAMESPACE))["metadata"]["resourceVersion"]
        watch = BindingWatch(client, rv)
        watch.start()
        bodies = [pod_body(i, kind, args.groups) for i in range(args.pods)]
        admin_port = free_port()

        def start_scheduler() -> Any:
            return start_component("kubemesh.scheduler", [
                "--apiserver", server.base, "--log-level", "warning", "--admin-port", str(admin_port),
                "--instance", "scheduler-bench", "--seed", "1"], log_path=sched_log, cores=load_cores)

        pods_acked: dict[str, float] = {}
        if mode == "streaming":
            sched = start_scheduler()
            await wait_http_ok(f"http://127.0.0.1:{admin_port}/readyz", proc=sched, limit=120, interval=0.1)
        window = CpuWindow({"apiserver": server.proc.pid, **({"scheduler": sched.pid} if sched else {})})
        window.start()
        c0, c1, pods_acked, p_err = await create_all(client, bodies, PODS, args.concurrency, namespace=NAMESPACE)
        result["pod_creation"] = {"seconds": c1 - c0, "per_s": len(pods_acked) / max(c1 - c0, 1e-9),
                                  "errors": p_err}
        start = c0  # streaming: pods cannot be bound before the first one exists
        if mode == "backlog":
            result["pod_creation"]["cpu"] = window.stop()
            # backlog: from the scheduler's start (its /readyz may answer only after the backlog is
            # scheduled: the scheduling loop does not yield while its queue is non-empty)
            start = time.monotonic()
            sched = start_scheduler()
            await wait_http_ok(f"http://127.0.0.1:{admin_port}/readyz", proc=sched, limit=120, interval=0.1)
            result["scheduler_ready_after_s"] = time.monotonic() - start
            window = CpuWindow({"apiserver": server.proc.pid, "scheduler": sched.pid})
            window.start()
        profiler: Profiler | None = None
        if args.profile:
            profiler = Profiler(args.profile_dir or log_dir, f"scheduler_throughput-{label}")
            profiler.start({"apiserver": server.proc.pid, "scheduler": sched.pid}, args.profile)
        complete = await watch.wait_for(len(pods_acked), limit=args.timeout)
        cpu = window.stop()
        bound = watch.bound
        times = sorted(t for t, _, _ in bound.values())
        span = times[-1] - times[0] if len(times) > 1 else float("nan")
        lat = sorted(bound[n][0] - pods_acked[n] for n in bound if n in pods_acked)
        per_node_group: dict[tuple[str, str], int] = {}
        for _, node, group in bound.values():
            per_node_group[(node, group)] = per_node_group.get((node, group), 0) + 1
        violations = sum(c - 1 for c in per_node_group.values() if c > 1) if kind == "anti-affinity" else 0
        throughput = len(times) / (times[-1] - start) if times and times[-1] > start else float("nan")
        burst = max_in_window(times, 1.0)
        result.update({
            "bound": len(bound), "complete": complete,
            "throughput_pods_per_s": throughput,
            "window_s": times[-1] - start if times else float("nan"),
            "first_binding_after_s": times[0] - start if times else float("nan"),
            "first_to_last_binding_s": span,
            "first_to_last_binding_pods_per_s": (len(times) - 1) / span if len(times) > 1 and span > 0
            else float("nan"),
            "max_bound_in_1s": burst,
            "max_bound_in_1s_share": burst / len(times) if times else float("nan"),
            "end_to_end_pods_per_s": len(bound) / max(times[-1] - c0, 1e-9) if times else float("nan"),
            "latency_p50_s": percentile(lat, 50), "latency_p99_s": percentile(lat, 99),
            "nodes_used": len({node for _, node, _ in bound.values()}),
            "anti_affinity_violations": violations,
            "cpu": cpu,
            "pods_per_scheduler_cpu_s": len(bound) / max(cpu["scheduler"]["cpu_s"], 1e-9),
            "vs_scheduler_perf_floor": throughput / SCHEDULER_PERF_FLOOR,
        })
        if profiler is not None:
            result["profile"] = profiler.finish()
    finally:
        if watch is not None:
            await watch.stop()
        await client.close()
        await connector.close()
        if sched is not None:
            stop_process(sched)
        server.stop()
        result["logs"] = {"scheduler": count_log_levels(sched_log)}
    return result


def core_case(nodes: int, kind: str, pods: int, groups: int, *, scan: bool) -> dict[str, Any]:
    """The synchronous scheduling core in this process: CPU per phase for `pods` pods on `nodes` nodes.

    `scan` builds the inter-pod affinity pre-pass by scanning every placed pod of the snapshot
    (what the scheduler did before the cache kept its index) instead of reading the index.
    """
    cache = SchedulerCache()
    for i in range(1, nodes + 1):
        cache.add_node(node_body(i))
    infos = [PodInfo(pod_body(i, kind, groups)) for i in range(pods)]
    rng = random.Random(1)
    phases = dict.fromkeys(("prepass", "filter", "score", "assume"), 0.0)
    clock = time.process_time
    start = 0
    unschedulable = 0
    for pi in infos:
        t0 = clock()
        view = cache.nodes()
        any_anti = cache.required_anti_pods > 0
        state = (compute_affinity_state(pi, view, any_required_anti=any_anti) if scan else
                 affinity_state_from_index(pi, cache.affinity_index, cache.node_infos_by_name(),
                                           any_required_anti=any_anti))
        t1 = clock()
        found = find_feasible(PodFilter(pi, affinity=state), view, want=num_feasible_nodes_to_find(len(view)),
                              start=start % len(view))
        start += found.processed
        t2 = clock()
        if not found.feasible:
            unschedulable += 1
            phases["prepass"] += t1 - t0
            phases["filter"] += t2 - t1
            continue
        inter = compute_inter_pod_scores(pi, view, any_affinity_pods=(cache.affinity_pods if scan
                                                                      else cache.scoring_affinity_pods) > 0)
        chosen = select_host(found.feasible, score_nodes(pi, found.feasible, inter_pod=inter), rng)
        t3 = clock()
        cache.assume_pod(pi.with_node(chosen.name))
        t4 = clock()
        phases["prepass"] += t1 - t0
        phases["filter"] += t2 - t1
        phases["score"] += t3 - t2
        phases["assume"] += t4 - t3
    total = sum(phases.values())
    return {"nodes": nodes, "kind": kind, "pods": pods, "prepass": "scan" if scan else "index",
            "cpu_s": total, "pods_per_cpu_s": pods / total if total > 0 else float("nan"),
            "unschedulable": unschedulable,
            "split": {k: v / total if total > 0 else float("nan") for k, v in phases.items()},
            "ms_per_pod": {k: v * 1000 / pods for k, v in phases.items()}}


def run_core(args: argparse.Namespace) -> dict[str, Any]:
    """`--core`: every kind with the index, and anti-affinity with the old scan too."""
    nodes = TARGET_NODES if TARGET_NODES in args.nodes else args.nodes[0]
    cases = [core_case(nodes, kind, args.pods, args.groups, scan=False) for kind in KINDS]
    cases.append(core_case(nodes, "anti-affinity", args.pods, args.groups, scan=True))
    by = {f"{c['kind']}/{c['prepass']}": c for c in cases}
    plain = by["plain/index"]["pods_per_cpu_s"]
    out: dict[str, Any] = {
        "cases": by,
        "anti_over_plain": by["anti-affinity/index"]["pods_per_cpu_s"] / plain,
        "anti_over_plain_with_scan": by["anti-affinity/scan"]["pods_per_cpu_s"] / plain,
        "index_over_scan": by["anti-affinity/index"]["pods_per_cpu_s"] / by["anti-affinity/scan"]["pods_per_cpu_s"],
    }
    print(f"scheduling core in this process ({nodes:,} nodes, {args.pods} pods, CPU time):")
    for c in cases:
        split = " ".join(f"{k} {v:.2f} ms" for k, v in c["ms_per_pod"].items())
        print(f"  {c['kind']:13s} pre-pass {c['prepass']:5s}: {c['pods_per_cpu_s']:6.0f} pods per CPU-second "
              f"(per pod: {split})")
    print(f"  anti-affinity / plain: {out['anti_over_plain']:.2f} with the index, "
          f"{out['anti_over_plain_with_scan']:.2f} with the scan; index / scan {out['index_over_scan']:.2f}")
    return out


async def run_all(args: argparse.Namespace, log_dir: Path) -> list[dict[str, Any]]:
    """Every case."""
    out = []
    for nodes in args.nodes:
        for kind in args.kinds:
            for mode in args.modes:
                r = await run_case(nodes, kind, mode, args, log_dir)
                out.append(r)
                print(f"  {nodes:>5,} nodes {kind:13s} {mode:9s}: {r.get('throughput_pods_per_s', float('nan')):7.1f} "
                      f"pods/s bound ({r.get('bound', 0)}/{args.pods}; {r.get('max_bound_in_1s', 0)} within 1 s), "
                      "created at "
                      f"{r.get('pod_creation', {}).get('per_s', float('nan')):.0f}/s", flush=True)
                if "profile" in r:
                    print_profile(r["profile"])
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line flags."""
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--quick", action="store_true", help="100 nodes, 200 pods, streaming only (the smoke test)")
    p.add_argument("--nodes", default=None, help="comma-separated node counts (default 1000,5000)")
    p.add_argument("--pods", type=int, default=None, help="pods per case (default 2000)")
    p.add_argument("--kinds", default=",".join(KINDS))
    p.add_argument("--modes", default=None, help="streaming,backlog (default both)")
    p.add_argument("--groups", type=int, default=10, help="anti-affinity groups (pods/groups must fit the nodes)")
    p.add_argument("--concurrency", type=int, default=16, help="requests in flight while creating")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for every binding")
    p.add_argument("--profile", type=float, default=0.0, help="py-spy the apiserver and scheduler this many s")
    p.add_argument("--core", action="store_true", help="also measure the scheduling core in this process (CPU)")
    p.add_argument("--core-only", action="store_true", help="only the in-process core measurement")
    p.add_argument("--profile-dir", type=Path, default=None)
    p.add_argument("--no-pin", action="store_true", help="do not pin the apiserver and the scheduler apart")
    p.add_argument("--results-dir", type=Path, default=None)
    p.add_argument("--name", default="scheduler_throughput", help="results file name (without .json)")
    a = p.parse_args(argv)
    a.nodes = [int(x) for x in a.nodes.split(",")] if a.nodes else ([100] if a.quick else [1000, 5000])
    a.pods = a.pods if a.pods is not None else (200 if a.quick else 2000)
    a.kinds = [k for k in a.kinds.split(",") if k]
    a.modes = [m for m in (a.modes or ("streaming" if a.quick else ",".join(MODES))).split(",") if m]
    for k in a.kinds:
        if k not in KINDS:
            p.error(f"unknown kind {k!r}")
    for m in a.modes:
        if m not in MODES:
            p.error(f"unknown mode {m!r}")
    if "anti-affinity" in a.kinds and -(-a.pods // a.groups) > min(a.nodes):
        p.error("anti-affinity would be unsatisfiable: raise --groups")
    return a


def main(argv: list[str] | None = None) -> int:
    """Run the cases, print the table, write the JSON."""
    args = parse_args(argv)
    print(f"scheduler_throughput: nodes {args.nodes}, {args.pods} pods per case, kinds {args.kinds}, "
          f"modes {args.modes}", flush=True)
    core = run_core(args) if args.core or args.core_only else None
    cases: list[dict[str, Any]] = []
    if not args.core_only:
        with tempfile.TemporaryDirectory(prefix="kubemesh-bench-") as tmp:
            cases = run_loop(lambda: run_all(args, Path(tmp)))
    results = {f"{c['nodes']}/{c['kind']}/{c['mode']}": c for c in cases}
    met: dict[str, bool | None] = {}
    for kind, floor in TARGETS.items():
        c = results.get(f"{TARGET_NODES}/{kind}/streaming")
        met[kind] = None if c is None else bool(c.get("throughput_pods_per_s", 0) >= floor)
    doc: dict[str, Any] = {
        "benchmark": args.name,
        "machine": machine(),
        "config": {"nodes": args.nodes, "pods": args.pods, "kinds": args.kinds, "modes": args.modes,
                   "groups": args.groups, "concurrency": args.concurrency, "quick": args.quick,
                   "pinned": not args.no_pin},
        "results": results,
        "core": core,
        "references": {"scheduler_perf_floor_pods_per_s": SCHEDULER_PERF_FLOOR,
                       "note": "kube-scheduler scheduler_perf, 10,000 pods on 5,000 nodes, much larger machines; "
                               "published, not measured here"},
        "target": {"description": f"at {TARGET_NODES:,} nodes (streaming): plain >= {TARGETS['plain']:g} pods/s, "
                                  f"anti-affinity >= {TARGETS['anti-affinity']:g} pods/s",
                   "per_kind": met, "met": all(v is True for v in met.values()) if met else None},
    }
    path = write_results(args.name, doc, args.results_dir)
    rows = []
    for c in cases:
        cpu = c.get("cpu", {})
        rows.append([f"{c['nodes']:,}", c["kind"], c["mode"], c.get("throughput_pods_per_s", float("nan")),
                     c.get("first_to_last_binding_pods_per_s", float("nan")),
                     f"{c.get('max_bound_in_1s_share', float('nan')):.0%}",
                     c.get("vs_scheduler_perf_floor", float("nan")),
                     c.get("pod_creation", {}).get("per_s", float("nan")),
                     f"{c.get('bound', 0)}/{c['pods']}", c.get("latency_p50_s", float("nan")),
                     c.get("latency_p99_s", float("nan")),
                     f"{cpu.get('apiserver', {}).get('cpu_cores', float('nan')):.0%}",
                     f"{cpu.get('scheduler', {}).get('cpu_cores', float('nan')):.0%}",
                     f"{cpu.get('benchmark', {}).get('cpu_cores', float('nan')):.0%}",
                     f"{cpu.get('machine', {}).get('other_processes_cores', float('nan')):.2f}",
                     c.get("anti_affinity_violations", "-")])
    print()
    print(table(["nodes", "kind", "mode", "pods/s", "1st-last/s", "in 1 s", "vs 680", "created/s", "bound",
                 "lat p50 s", "lat p99 s", "api cpu", "sched cpu", "bench cpu", "other cores", "violations"], rows))
    for kind, ok in met.items():
        print(f"target {kind} at {TARGET_NODES:,} nodes >= {TARGETS[kind]:g} pods/s: "
              f"{'-' if ok is None else ('met' if ok else 'NOT met')}")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

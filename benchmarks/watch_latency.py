"""Watch delivery latency under fan-out: 100 msgpack watchers, a writer pacing 1,000 pod creates/s.

For each server (`apiserver` as shipped, `apiserver` with history_deliveries off, and the
bare reference of `bare_server.py`, whose watch fans out the same way), in one run:

1. start the server in its own process (pinned to core 0 when there are two or more cores);
2. open the watchers (msgpack): `--timed-watchers` (10) of them, the measuring ones, in a
   process of their own, which reads each stream without decoding it and finds every event's
   send time by a byte marker; the others, the load, spread over `--watcher-procs`
   processes that only count the events they read. (When every one of 100 watchers was
   timed, the two client processes on the load core spent most of a core scanning, and a
   read was timed when its process got the core back, not when the server wrote it: the
   load's readers and the measuring readers are now apart, and the measuring process, mostly
   idle, is scheduled as soon as its data arrives.);
3. a writer (this process) creates pods at `--rate` per second over a pool of keep-alive
   connections, stamping the wall time just before each request is written into an
   annotation (`bench.kubemesh.io/sent`);
4. delivery latency = the wall time at which a watcher's read completed the event, minus
   that send time: it covers the write's request, the server's work and the fan-out to
   every watcher. Events sent during the first `--warmup` seconds are left out.

Reports p50/p99/p99.9/max latency, the achieved write rate and deliveries per second, and
whether every watcher got every event. Prints a table and writes
`benchmarks/results/watch_latency.json`.

Run: `.venv/bin/python benchmarks/watch_latency.py [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from array import array
from pathlib import Path
from typing import Any, Final

from _common import (
    NAME_SLOT,
    PYTHON,
    RESULTS_DIR,
    SENT_SLOT,
    HttpConnection,
    ServerProcess,
    Timer,
    apply_nice,
    build_request,
    child_env,
    encode,
    format_sent,
    machine,
    open_watch,
    percentile,
    pin,
    pod_body,
    run_loop,
    sent_marker,
    server_cores,
    table,
    write_results,
)
from profiling import format_split, maybe_sample, split

ENCODING: Final = "msgpack"
POD_PATH: Final = "/api/v1/namespaces/default/pods"
WATCH_PATH: Final = POD_PATH + "?watch=true"


# ---------------------------------------------------------------------------------- watchers


async def watchers_role(port: int, n: int, out: Path, *, timed: bool) -> None:
    """Hold n watches (timed, or counting only); REPORT prints counts; STOP writes the samples to `out`.* and exits."""
    marker = sent_marker(ENCODING)
    streams = [await open_watch(port, WATCH_PATH, ENCODING, marker, timed=timed) for _ in range(n)]
    print("READY", flush=True)
    cpu0 = time.process_time()
    wall = Timer()
    loop = asyncio.get_running_loop()
    while True:
        line = (await loop.run_in_executor(None, sys.stdin.readline)).strip()
        if line == "REPORT":
            print(json.dumps({"events": [s.events for s in streams],
                              "open": sum(1 for s in streams if not s.closed.done())}), flush=True)
            continue
        break
    cpu = (time.process_time() - cpu0) / wall.elapsed()
    sent, received = array("d"), array("d")
    for s in streams:
        sent.extend(s.sent)
        received.extend(s.received)
    out.with_suffix(".sent").write_bytes(sent.tobytes())
    out.with_suffix(".recv").write_bytes(received.tobytes())
    out.with_suffix(".json").write_text(json.dumps({
        "events": [s.events for s in streams], "open": sum(1 for s in streams if not s.closed.done()),
        "cpu": cpu}))
    for s in streams:
        if s.transport is not None:
            s.transport.close()
    print("DONE", flush=True)


class WatcherProcs:
    """The watcher processes, seen from the driver."""

    def __init__(self, port: int, total: int, procs: int, timed: int, cores: set[int] | None, workdir: Path) -> None:
        """`timed` of the `total` watchers in a process of their own; the rest spread over `procs` processes.

        With `timed >= total`, every watcher is timed, spread over `procs` processes.
        """
        self.outs: list[Path] = []
        self.procs: list[subprocess.Popen[str]] = []
        load = 0 if timed >= total else total - timed
        per = [load // procs + (1 if i < load % procs else 0) for i in range(procs)]
        if load:
            groups = [(timed, True), *((n, False) for n in per)]
        else:
            groups = [(total // procs + (1 if i < total % procs else 0), True) for i in range(procs)]
        for i, (n, is_timed) in enumerate(g for g in groups if g[0]):
            out = workdir / f"watchers-{port}-{i}"
            cmd = [PYTHON, str(Path(__file__).resolve()), "--role", "watchers", "--port", str(port),
                   "--watchers", str(n), "--out", str(out), *(("--timed",) if is_timed else ())]
            p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env())
            pin(p.pid, cores)
            self.procs.append(p)
            self.outs.append(out)
        for p in self.procs:
            assert p.stdout is not None
            line = p.stdout.readline()
            if line.strip() != "READY":
                raise RuntimeError(f"watchers failed to start: {line!r}")

    def _ask(self, p: subprocess.Popen[str], cmd: str) -> str:
        assert p.stdin is not None and p.stdout is not None
        p.stdin.write(cmd + "\n")
        p.stdin.flush()
        return p.stdout.readline()

    def events(self) -> list[int]:
        """Events received so far, per watcher."""
        out: list[int] = []
        for p in self.procs:
            out.extend(json.loads(self._ask(p, "REPORT"))["events"])
        return out

    def wait_drained(self, expected: int, timeout: float) -> float:
        """Seconds until every watcher has `expected` events (or the counts stop moving for 2 s)."""
        t = Timer()
        last: list[int] = []
        still = time.perf_counter()
        while t.elapsed() < timeout:
            got = self.events()
            if min(got) >= expected:
                break
            if got != last:
                last, still = got, time.perf_counter()
            elif time.perf_counter() - still > 2.0:
                break
            time.sleep(0.05)
        return t.elapsed()

    def stop(self) -> tuple[array[float], array[float], dict[str, Any]]:
        """Collect (send times, receive times, summary) from every process."""
        sent, received = array("d"), array("d")
        events: list[int] = []
        opened = 0
        cpu = 0.0
        for p, out in zip(self.procs, self.outs, strict=True):
            line = self._ask(p, "STOP")
            if line.strip() != "DONE":
                raise RuntimeError(f"watcher process answered {line!r}")
            p.wait(timeout=10)
            for suffix, arr in ((".sent", sent), (".recv", received)):
                data = out.with_suffix(suffix).read_bytes()
                arr.frombytes(data)
            doc = json.loads(out.with_suffix(".json").read_text())
            events.extend(doc["events"])
            opened += doc["open"]
            cpu += doc["cpu"]
        return sent, received, {"events": events, "open": opened, "cpu": cpu}

    def kill(self) -> None:
        """Make sure no process is left behind."""
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


# ---------------------------------------------------------------------------------- writer


async def write_paced(port: int, rate: float, duration: float, connections: int) -> dict[str, Any]:
    """Create `rate * duration` pods at `rate` per second, each stamped with its send time."""
    template = encode(pod_body(f"lat-{NAME_SLOT}", seq=NAME_SLOT, sent=SENT_SLOT), ENCODING)
    name_slot, sent_slot = NAME_SLOT.encode(), SENT_SLOT.encode()
    conns = [await HttpConnection.open(port) for _ in range(connections)]
    idle: asyncio.Queue[HttpConnection] = asyncio.Queue()
    for c in conns:
        idle.put_nowait(c)
    total = int(rate * duration)
    ok = errors = late = 0

    async def send(conn: HttpConnection, i: int) -> None:
        nonlocal ok, errors
        body = template.replace(name_slot, b"%010d" % i).replace(sent_slot, format_sent(time.time()))
        try:
            status = await conn.request(build_request("POST", POD_PATH, body, ENCODING))
        except ConnectionError:
            errors += 1
            conn = await HttpConnection.open(port)
        else:
            if status == 201:
                ok += 1
            else:
                errors += 1
        idle.put_nowait(conn)

    tasks: set[asyncio.Task[None]] = set()
    t0 = time.perf_counter() + 0.01
    for i in range(total):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        if idle.empty():
            late += 1  # every connection busy: this create goes out late
        conn = await idle.get()
        task = asyncio.get_running_loop().create_task(send(conn, i))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    sent_for = time.perf_counter() - t0
    while tasks:
        await asyncio.gather(*tuple(tasks))
    seconds = time.perf_counter() - t0
    for c in conns:
        c.close()
    return {"writes": total, "ok": ok, "errors": errors, "late": late, "send_seconds": sent_for,
            "seconds": seconds, "t0_wall": time.time() - seconds}


# ---------------------------------------------------------------------------------- driver


def measure(kind: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """One server: watchers attached, paced writes, latencies."""
    srv_cores, load_cores = args.cores
    server = ServerProcess.start(kind, cores=srv_cores, log_dir=workdir)
    watchers: WatcherProcs | None = None
    try:
        watchers = WatcherProcs(server.port, args.watchers, args.watcher_procs, args.timed_watchers, load_cores,
                                workdir)
        pin(os.getpid(), load_cores)
        cpu0 = server.cpu_seconds()
        t = Timer()
        profile = None if args.profile_dir is None else args.profile_dir / f"{kind}-{server.port}.raw"
        with maybe_sample(server.proc.pid, profile):
            w = run_loop(lambda: write_paced(server.port, args.rate, args.duration, args.connections))
        drain = watchers.wait_drained(w["ok"], timeout=30.0)
        server_cpu_s = server.cpu_seconds() - cpu0
        server_cpu = server_cpu_s / t.elapsed()
        rss = server.rss_mb()
        sent, received, summary = watchers.stop()
    finally:
        if watchers is not None:
            watchers.kill()
        server.stop()
    cutoff = w["t0_wall"] + args.warmup
    lat = sorted((r - s) * 1e3 for s, r in zip(sent, received, strict=True) if s >= cutoff)
    events = summary["events"]
    return {
        "p50_ms": percentile(lat, 50), "p90_ms": percentile(lat, 90), "p99_ms": percentile(lat, 99),
        "p999_ms": percentile(lat, 99.9), "max_ms": lat[-1] if lat else float("nan"),
        "mean_ms": sum(lat) / len(lat) if lat else float("nan"), "samples": len(lat),
        "writes": w["writes"], "writes_ok": w["ok"], "write_errors": w["errors"], "late_sends": w["late"],
        "write_rate": w["ok"] / w["send_seconds"],
        "delivered_per_watcher_per_s": (sum(events) / len(events)) / w["seconds"] if events else 0.0,
        "deliveries_per_s": sum(events) / w["seconds"],
        "events_min": min(events) if events else 0, "events_expected": w["ok"],
        "watchers": len(events), "watchers_open": summary["open"],
        "drain_s": drain, "server_cpu": server_cpu, "watcher_cpu": summary["cpu"], "server_rss_mb": rss,
        # The server's CPU for the whole run per delivery: what the load costs it, which other work
        # on the machine moves far less than it moves the latencies.
        "server_cpu_s": server_cpu_s,
        "server_cpu_us_per_delivery": server_cpu_s / sum(events) * 1e6 if sum(events) else float("nan"),
        **({"profile": split(profile)} if profile is not None else {}),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="a short run (smoke test)")
    p.add_argument("--duration", type=float, default=None, help="seconds of writing (default 10; 2 with --quick)")
    p.add_argument("--warmup", type=float, default=None,
                   help="seconds at the start left out of the statistics (default 1; 0.5 with --quick)")
    p.add_argument("--rate", type=float, default=1000.0, help="creates per second")
    p.add_argument("--watchers", type=int, default=None, help="msgpack watchers (default 100; 10 with --quick)")
    p.add_argument("--watcher-procs", type=int, default=2, help="processes the load's watchers are spread over")
    p.add_argument("--timed-watchers", type=int, default=10,
                   help="watchers whose deliveries are timed, in a process of their own (the others only count "
                        "what they read); at least --watchers times every watcher, as before")
    p.add_argument("--connections", type=int, default=64,
                   help="writer connections (one request in flight each: enough that slow responses do not hold "
                        "back the pacing)")
    p.add_argument("--servers", default=None,
                   help="comma-separated: apiserver,apiserver-nodeliveries,bare (default all; --quick: no "
                        "apiserver-nodeliveries)")
    p.add_argument("--no-pin", action="store_true", help="do not pin the server and the clients to separate cores")
    p.add_argument("--nice", type=int, default=0,
                   help="niceness for the benchmark's processes (negative needs root: less noise from other work)")
    p.add_argument("--results-dir", type=Path, default=None, help="where to write watch_latency.json")
    p.add_argument("--profile", action="store_true",
                   help="sample each server with py-spy while it is written to; print the split and keep the raw "
                        "stacks in <results-dir>/watch_latency-profiles/")
    p.add_argument("--role", choices=("driver", "watchers"), default="driver", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    p.add_argument("--timed", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.duration is None:
        a.duration = 2.0 if a.quick else 10.0
    if a.warmup is None:
        a.warmup = 0.5 if a.quick else 1.0
    if a.watchers is None:
        a.watchers = 10 if a.quick else 100
    if a.servers is None:
        a.servers = "apiserver,bare" if a.quick else "apiserver,apiserver-nodeliveries,bare"
    return a


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or its watcher role)."""
    args = parse_args(argv)
    if args.role == "watchers":
        assert args.out is not None
        run_loop(lambda: watchers_role(args.port, args.watchers, args.out, timed=args.timed))
        return 0
    apply_nice(args.nice)
    mach = machine()
    # Decided once: the driver pins itself to the load cores while it writes, after which its own
    # affinity no longer shows the server's core.
    args.cores = (None, None) if args.no_pin else server_cores()
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    args.profile_dir = None
    if args.profile:
        args.profile_dir = (args.results_dir or RESULTS_DIR) / "watch_latency-profiles"
        args.profile_dir.mkdir(parents=True, exist_ok=True)
    print(f"watch_latency: {args.watchers} msgpack watchers ({min(args.timed_watchers, args.watchers)} timed), "
          f"{args.rate:,.0f} creates/s for {args.duration:g}s (first {args.warmup:g}s left out)", flush=True)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kubemesh-bench-") as tmp:
        for kind in servers:
            r = results[kind] = measure(kind, args, Path(tmp))
            print(f"  {kind:24s} p50 {r['p50_ms']:.2f} ms  p99 {r['p99_ms']:.2f} ms  max {r['max_ms']:.1f} ms  "
                  f"{r['write_rate']:,.0f} writes/s  events {r['events_min']}/{r['events_expected']}", flush=True)
            if "profile" in r:
                print(f"  {'':24s} profile: {format_split(r['profile'])}", flush=True)
    ratios = {kind: {"p50": r["p50_ms"] / results["bare"]["p50_ms"], "p99": r["p99_ms"] / results["bare"]["p99_ms"]}
              for kind, r in results.items() if kind != "bare" and "bare" in results}
    api = results.get("apiserver")
    doc: dict[str, Any] = {
        "benchmark": "watch_latency",
        "machine": mach,
        "config": {"rate": args.rate, "duration_s": args.duration, "warmup_s": args.warmup,
                   "watchers": args.watchers, "watcher_procs": args.watcher_procs,
                   "timed_watchers": min(args.timed_watchers, args.watchers), "encoding": ENCODING,
                   "connections": args.connections, "quick": args.quick, "servers": servers},
        "results": results,
        "ratios_vs_bare": ratios,
        "target": {"description": "apiserver p99 delivery latency < 20 ms",
                   "met": None if api is None else api["p99_ms"] < 20.0},
    }
    path = write_results("watch_latency", doc, args.results_dir)
    rows = [[kind, r["p50_ms"], r["p90_ms"], r["p99_ms"], r["p999_ms"], r["max_ms"], r["write_rate"],
             r["deliveries_per_s"], f"{r['events_min']}/{r['events_expected']}",
             f"{r['watchers_open']}/{r['watchers']}",
             f"{r['server_cpu']:.0%}", r["server_cpu_us_per_delivery"], f"{r['watcher_cpu']:.0%}"]
            for kind, r in results.items()]
    print()
    print(table(["server", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms", "writes/s", "deliveries/s",
                 "events min", "open", "server cpu", "server µs/delivery", "watcher cpu"], rows))
    for kind, r in ratios.items():
        print(f"{kind} vs bare: p50 x{r['p50']:.1f}, p99 x{r['p99']:.1f}")
    if api is not None:
        print(f"target (apiserver p99 < 20 ms): {'met' if doc['target']['met'] else 'NOT met'} "
              f"({api['p99_ms']:.2f} ms)")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

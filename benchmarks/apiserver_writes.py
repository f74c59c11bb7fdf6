"""Pod writes per second with 10 watchers attached: the apiserver against a bare aiohttp handler.

For each encoding (JSON, msgpack) and each server (`apiserver` as shipped, `apiserver` with
history_deliveries off, and the bare reference of `bare_server.py`), in one run on this
machine:

1. start the server in its own process (pinned to core 0 when there are two or more cores);
2. attach 10 watchers of the same encoding (one separate process that reads the streams
   without decoding them, counting events by a marker);
3. create a pool of pods for the updates, then warm up;
4. drive, each for `--duration` seconds: `create` (POST unique pods), `update` (unconditional
   PUTs that each change an annotation, so that every one is a real write), `mixed` (the
   two alternating), with `wrk` (Lua scripts splicing fixed-width digits into pre-encoded
   bodies) or, without wrk, several Python client processes;
5. after each phase, wait until every watcher has received every event (`drain_s`).

Writes/s counts 2xx responses over the phase's wall time. Ratios are apiserver / bare for the
same encoding and phase, measured in the same run. Prints a table and writes
`benchmarks/results/apiserver_writes.json`.

Run: `.venv/bin/python benchmarks/apiserver_writes.py [--quick]`; `--servers apiserver,apiserver-etcd
--etcd-endpoints URL` compares the memory store with `--storage etcd` on the same load.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

import msgpack
from _common import (
    ENCODINGS,
    NAME_SLOT,
    PYTHON,
    RESULTS_DIR,
    SEQ_SLOT,
    HttpConnection,
    ServerProcess,
    Timer,
    apply_nice,
    build_request,
    child_env,
    content_type,
    encode,
    machine,
    open_watch,
    percentile,
    pin,
    pod_body,
    run_loop,
    server_cores,
    table,
    write_results,
)
from profiling import format_split, maybe_sample, merge_splits, split

PHASES: Final = ("create", "update", "mixed")
SEQ_KEY: Final = "bench.kubemesh.io/seq"
POD_PATH: Final = "/api/v1/namespaces/default/pods"
POOL_PREFIX: Final = "bu-"
WATCH_PATH: Final = POD_PATH + "?watch=true"


def seq_marker(encoding: str) -> bytes:
    """Bytes that occur once in every event of a benchmark pod."""
    if encoding == "msgpack":
        out: bytes = msgpack.packb(SEQ_KEY)
        return out
    return b'"' + SEQ_KEY.encode() + b'":'


def templates(encoding: str, prefix: str) -> tuple[bytes, bytes]:
    """(create body, update body) with fixed-width placeholders for the digits."""
    create = encode(pod_body(f"{prefix}-{NAME_SLOT}", seq=NAME_SLOT), encoding)
    update = encode(pod_body(f"{POOL_PREFIX}{NAME_SLOT}", seq=SEQ_SLOT), encoding)
    return create, update


# ---------------------------------------------------------------------------------- wrk


def lua_string(data: bytes) -> str:
    """A Lua string literal holding arbitrary bytes."""
    return '"' + "".join(f"\\{b:03d}" for b in data) + '"'


LUA: Final = """
local mode = "%(mode)s"
local phase = %(phase)d
local pool = %(pool)d
local create_path = "%(path)s"
local update_prefix = "%(path)s/%(pool_prefix)s"
local create_body = %(create)s
local update_body = %(update)s
local headers = {["Content-Type"] = "%(ct)s", ["Accept"] = "%(ct)s", ["User-Agent"] = "kubemesh-bench-wrk"}
local counter = 0
local next_tid = 0

function setup(thread)
  thread:set("tid", next_tid)
  next_tid = next_tid + 1
end

function request()
  counter = counter + 1
  -- phase digit, thread digit, counter: unique across the phases of a run, so that no PUT
  -- sets the annotation to the value it already has (the apiserver would not count it as a write)
  local id = string.format("%%d%%d%%08d", phase, tid %% 10, counter)
  if mode == "create" or (mode == "mixed" and counter %% 2 == 1) then
    local body = string.gsub(create_body, "@@@@@@@@@@", id)
    return wrk.format("POST", create_path, headers, body)
  end
  local name = string.format("%%010d", (counter * 7919 + tid * 104729) %% pool)
  local body = string.gsub(update_body, "@@@@@@@@@@", name)
  body = string.gsub(body, "##########", id)
  return wrk.format("PUT", update_prefix .. name, headers, body)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%%d,"duration_us":%%d,"status_errors":%%d,"connect_errors":%%d,' ..
    '"read_errors":%%d,"write_errors":%%d,"timeouts":%%d,"p50_us":%%d,"p99_us":%%d}\\n',
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


def find_wrk(*, install: bool) -> str | None:
    """The wrk binary; installs the Debian package when allowed and possible."""
    found = shutil.which("wrk")
    if found or not install:
        return found
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        return None
    print("wrk not found: installing it with apt-get", flush=True)
    for cmd in ([apt, "update", "-qq"], [apt, "install", "-y", "-qq", "wrk"]):
        try:
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300,
                           env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})
        except (subprocess.SubprocessError, OSError):
            return None
    return shutil.which("wrk")


def run_wrk(wrk: str, *, port: int, encoding: str, mode: str, phase: int, prefix: str, pool: int, duration: int,
            connections: int, cores: set[int] | None, workdir: Path) -> dict[str, Any]:
    """One wrk run; its summary."""
    create, update = templates(encoding, prefix)
    script = workdir / f"{mode}-{prefix}-{encoding}.lua"
    script.write_text(LUA % {"mode": mode, "phase": phase, "pool": pool, "path": POD_PATH, "pool_prefix": POOL_PREFIX,
                             "create": lua_string(create), "update": lua_string(update),
                             "ct": content_type(encoding)})
    cmd = [wrk, "-t1", f"-c{connections}", f"-d{duration}s", "--timeout", "10s", "-s", str(script),
           f"http://127.0.0.1:{port}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    pin(proc.pid, cores)
    out, _ = proc.communicate(timeout=duration + 60)
    for line in out.splitlines():
        if line.startswith("WRKJSON "):
            s = json.loads(line[len("WRKJSON "):])
            return {"requests": s["requests"], "ok": s["requests"] - s["status_errors"],
                    "errors": s["status_errors"] + s["connect_errors"] + s["read_errors"] + s["write_errors"]
                    + s["timeouts"],
                    "seconds": s["duration_us"] / 1e6, "p50_ms": s["p50_us"] / 1e3, "p99_ms": s["p99_us"] / 1e3}
    raise RuntimeError(f"wrk printed no summary:\n{out}")


# ---------------------------------------------------------------------------------- Python load


async def python_load(port: int, encoding: str, mode: str, phase: int, prefix: str, pool: int, duration: float,
                      connections: int, worker: int) -> dict[str, Any]:
    """Keep `connections` requests in flight for `duration` seconds (the fallback without wrk)."""
    create, update = templates(encoding, prefix)
    ok = errors = 0
    lat: list[float] = []
    deadline = time.perf_counter() + duration

    async def conn_loop(c: int) -> None:
        nonlocal ok, errors
        conn = await HttpConnection.open(port)
        counter = 0
        tid = worker * 100 + c
        while time.perf_counter() < deadline:
            counter += 1
            ident = b"%d%03d%06d" % (phase, tid, counter)  # unique across phases, as in the Lua script
            if mode == "create" or (mode == "mixed" and counter % 2 == 1):
                raw = build_request("POST", POD_PATH, create.replace(NAME_SLOT.encode(), ident), encoding)
            else:
                name = b"%010d" % ((counter * 7919 + tid * 104729) % pool)
                body = update.replace(NAME_SLOT.encode(), name).replace(SEQ_SLOT.encode(), ident)
                raw = build_request("PUT", f"{POD_PATH}/{POOL_PREFIX}{name.decode()}", body, encoding)
            t0 = time.perf_counter()
            status = await conn.request(raw)
            lat.append(time.perf_counter() - t0)
            if 200 <= status < 300:
                ok += 1
            else:
                errors += 1
        conn.close()

    t = Timer()
    await asyncio.gather(*(conn_loop(c) for c in range(connections)))
    return {"requests": ok + errors, "ok": ok, "errors": errors, "seconds": t.elapsed(), "latencies": lat}


def run_python_load(*, port: int, encoding: str, mode: str, phase: int, prefix: str, pool: int, duration: int,
                    connections: int, procs: int, cores: set[int] | None, workdir: Path) -> dict[str, Any]:
    """Several Python client processes; their summaries merged."""
    per_proc = max(1, connections // procs)
    children = []
    for worker in range(procs):
        cmd = [PYTHON, str(Path(__file__).resolve()), "--role", "pyload", "--port", str(port),
               "--encoding", encoding, "--mode", mode, "--phase", str(phase), "--prefix", prefix, "--pool", str(pool),
               "--duration", str(duration), "--connections", str(per_proc), "--worker", str(worker),
               "--out", str(workdir / f"pyload-{port}-{prefix}-{worker}.json")]
        p = subprocess.Popen(cmd, env=child_env())
        pin(p.pid, cores)
        children.append(p)
    parts = []
    for worker, p in enumerate(children):
        if p.wait(timeout=duration + 60) != 0:
            raise RuntimeError(f"Python load process {worker} failed")
        parts.append(json.loads((workdir / f"pyload-{port}-{prefix}-{worker}.json").read_text()))
    lat = sorted(x for part in parts for x in part["latencies"])
    return {"requests": sum(p["requests"] for p in parts), "ok": sum(p["ok"] for p in parts),
            "errors": sum(p["errors"] for p in parts), "seconds": max(p["seconds"] for p in parts),
            "p50_ms": percentile(lat, 50) * 1e3, "p99_ms": percentile(lat, 99) * 1e3}


# ---------------------------------------------------------------------------------- watchers


async def watchers_role(port: int, encoding: str, n: int) -> None:
    """Hold n watch streams; answer REPORT lines on stdin with their counts; EXIT to stop."""
    marker = seq_marker(encoding)
    streams = [await open_watch(port, WATCH_PATH, encoding, marker) for _ in range(n)]
    print("READY", flush=True)
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if line.strip() != "REPORT":
            break
        print(json.dumps({"events": [s.events for s in streams], "bytes": [s.bytes for s in streams],
                          "open": sum(1 for s in streams if not s.closed.done())}), flush=True)
    for s in streams:
        if s.transport is not None:
            s.transport.close()


class Watchers:
    """The watcher process, seen from the driver."""

    def __init__(self, port: int, encoding: str, n: int, cores: set[int] | None) -> None:
        cmd = [PYTHON, str(Path(__file__).resolve()), "--role", "watchers", "--port", str(port),
               "--encoding", encoding, "--watchers", str(n)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=child_env())
        pin(self.proc.pid, cores)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "READY":
            raise RuntimeError(f"watchers failed to start: {line!r}")

    def report(self) -> dict[str, Any]:
        """Events and bytes per watcher so far, and how many streams are open."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write("REPORT\n")
        self.proc.stdin.flush()
        out: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return out

    def stop(self) -> None:
        """EXIT, then kill if needed."""
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            try:
                self.proc.stdin.write("EXIT\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()

    def wait_drained(self, before: list[int], expected: int, timeout: float) -> tuple[float, dict[str, Any]]:
        """Seconds until every watcher has `expected` more events (or its count stops moving)."""
        t = Timer()
        last: list[int] = []
        still_since = time.perf_counter()
        while True:
            rep = self.report()
            got = [a - b for a, b in zip(rep["events"], before, strict=True)]
            if min(got, default=expected) >= expected or t.elapsed() > timeout:
                return t.elapsed(), rep
            if got != last:
                last = got
                still_since = time.perf_counter()
            elif time.perf_counter() - still_since > 2.0:
                return t.elapsed(), rep
            time.sleep(0.02)


# ---------------------------------------------------------------------------------- driver


async def create_pool(port: int, encoding: str, pool: int) -> None:
    """Create the pods the update phases write to."""
    _, update = templates(encoding, "unused")
    conns = [await HttpConnection.open(port) for _ in range(8)]

    async def worker(c: int) -> None:
        for i in range(c, pool, len(conns)):
            name = b"%010d" % i
            body = update.replace(NAME_SLOT.encode(), name).replace(SEQ_SLOT.encode(), b"0" * 10)
            status = await conns[c].request(build_request("POST", POD_PATH, body, encoding))
            if status not in (201, 409):
                raise RuntimeError(f"creating the update pool: {status}")

    await asyncio.gather(*(worker(c) for c in range(len(conns))))
    for c in conns:
        c.close()


def measure_server(kind: str, encoding: str, args: argparse.Namespace, wrk: str | None,
                   workdir: Path) -> dict[str, Any]:
    """All phases against one fresh server in one encoding."""
    srv_cores, load_cores = args.cores
    server = ServerProcess.start(kind, cores=srv_cores, log_dir=workdir, etcd=args.etcd_endpoints)
    watchers: Watchers | None = None
    try:
        watchers = Watchers(server.port, encoding, args.watchers, load_cores)
        run_loop(lambda: create_pool(server.port, encoding, args.pool))

        def load(mode: str, phase: int, duration: int) -> dict[str, Any]:
            prefix = f"c{phase}"
            if wrk is not None:
                return run_wrk(wrk, port=server.port, encoding=encoding, mode=mode, phase=phase, prefix=prefix,
                               pool=args.pool, duration=duration, connections=args.connections, cores=load_cores,
                               workdir=workdir)
            return run_python_load(port=server.port, encoding=encoding, mode=mode, phase=phase, prefix=prefix,
                                   pool=args.pool,
                                   duration=duration, connections=args.connections, procs=args.client_procs,
                                   cores=load_cores, workdir=workdir)

        if args.warmup > 0:
            before = watchers.report()["events"]
            warm = load("mixed", 0, args.warmup)
            watchers.wait_drained(before, warm["ok"], timeout=30.0)
        phases: dict[str, Any] = {}
        for i, mode in enumerate(PHASES, start=1):
            before = watchers.report()["events"]
            cpu0 = server.cpu_seconds()
            ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            profile = None
            if args.profile_dir is not None and kind == "apiserver":  # kept: flame-graph data for a closer look
                profile = args.profile_dir / f"{kind}-{encoding}-{mode}-{server.port}.raw"
            t = Timer()
            with maybe_sample(server.proc.pid, profile):
                r = load(mode, i, args.duration)
            wall = t.elapsed()
            ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu1 = server.cpu_seconds()
            drain, rep = watchers.wait_drained(before, r["ok"], timeout=30.0)
            got = [a - b for a, b in zip(rep["events"], before, strict=True)]
            phases[mode] = {
                "writes_per_s": r["ok"] / r["seconds"],
                "writes_per_cpu_s": r["ok"] / max(cpu1 - cpu0, 1e-9),
                "server_cpu_s": cpu1 - cpu0,
                "requests": r["requests"], "ok": r["ok"], "errors": r["errors"], "seconds": r["seconds"],
                "p50_ms": r["p50_ms"], "p99_ms": r["p99_ms"],
                "server_cpu": (cpu1 - cpu0) / wall,
                "client_cpu": (ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime) / wall,
                "drain_s": drain,
                "watch_events_min": min(got, default=0), "watch_events_max": max(got, default=0),
                "watchers_open": rep["open"],
                "server_rss_mb": server.rss_mb(),
            }
            if profile is not None:
                phases[mode]["profile"] = split(profile)
                print(f"  {'':24s} {encoding:8s} {mode:7s} profile: {format_split(phases[mode]['profile'])}")
            print(f"  {kind:24s} {encoding:8s} {mode:7s} {phases[mode]['writes_per_s']:9,.0f} writes/s  "
                  f"server cpu {phases[mode]['server_cpu']:.0%}  drain {drain:.2f}s  "
                  f"watch events {min(got, default=0)}/{r['ok']}", flush=True)
        return phases
    finally:
        if watchers is not None:
            watchers.stop()
        server.stop()


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One phase over several rounds: medians of the rates, sums of the counts, worst of the checks."""
    def med(key: str) -> float:
        return float(statistics.median(r[key] for r in runs))
    ok = sum(r["ok"] for r in runs)
    cpu = sum(r["server_cpu_s"] for r in runs)
    return {
        "writes_per_s": med("writes_per_s"), "writes_per_s_max": max(r["writes_per_s"] for r in runs),
        "writes_per_cpu_s": ok / max(cpu, 1e-9),
        "requests": sum(r["requests"] for r in runs), "ok": ok, "errors": sum(r["errors"] for r in runs),
        "p50_ms": med("p50_ms"), "p99_ms": med("p99_ms"), "server_cpu": med("server_cpu"),
        "client_cpu": med("client_cpu"), "drain_s": max(r["drain_s"] for r in runs),
        "watch_events_min": sum(r["watch_events_min"] for r in runs),
        "watchers_open": min(r["watchers_open"] for r in runs),
        "server_rss_mb": max(r["server_rss_mb"] for r in runs),
        **({"profile": merge_splits([r["profile"] for r in runs])} if all("profile" in r for r in runs) else {}),
    }


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="a short run (smoke test)")
    p.add_argument("--duration", type=int, default=None, help="seconds per phase (default 5; 1 with --quick)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up seconds per server (default 2; 0 with --quick)")
    p.add_argument("--rounds", type=int, default=None,
                   help="rounds over every server and encoding, interleaved; medians reported (default 3; 1 "
                        "with --quick)")
    p.add_argument("--connections", type=int, default=16, help="concurrent connections of the load generator")
    p.add_argument("--watchers", type=int, default=10, help="watchers attached during the writes")
    p.add_argument("--pool", type=int, default=None, help="pods the updates cycle through (default 1000)")
    p.add_argument("--servers", default=None,
                   help="comma-separated: apiserver,apiserver-nodeliveries,apiserver-etcd,bare (default all but "
                        "apiserver-etcd; --quick: no apiserver-nodeliveries)")
    p.add_argument("--etcd-endpoints", default=None,
                   help="the etcd of `apiserver-etcd` (the apiserver with --storage etcd; etcd's own CPU is not "
                        "in the server CPU figures)")
    p.add_argument("--client", choices=("auto", "wrk", "python"), default="auto",
                   help="load generator: wrk when available (auto), or Python processes")
    p.add_argument("--client-procs", type=int, default=2, help="Python client processes (without wrk)")
    p.add_argument("--no-install", action="store_true", help="never apt-get install wrk")
    p.add_argument("--no-pin", action="store_true", help="do not pin the server and the load to separate cores")
    p.add_argument("--nice", type=int, default=0,
                   help="niceness for the benchmark's processes (negative needs root: less noise from other work)")
    p.add_argument("--results-dir", type=Path, default=None, help="where to write apiserver_writes.json")
    p.add_argument("--profile", action="store_true",
                   help="sample the apiserver with py-spy during every phase and report where its busy time "
                        "went (decode, validate, admission, fields, store, encode, fan-out, http)")
    # Internal roles (child processes).
    p.add_argument("--role", choices=("driver", "watchers", "pyload"), default="driver", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--encoding", default="json", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="create", help=argparse.SUPPRESS)
    p.add_argument("--prefix", default="c", help=argparse.SUPPRESS)
    p.add_argument("--phase", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--worker", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.duration is None:
        a.duration = 1 if a.quick else 5
    if a.rounds is None:
        a.rounds = 1 if a.quick else 3
    if a.warmup is None:
        a.warmup = 0 if a.quick else 2
    if a.pool is None:
        a.pool = 100 if a.quick else 1000
    if a.servers is None:
        a.servers = "apiserver,bare" if a.quick else "apiserver,apiserver-nodeliveries,bare"
    return a


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark (or one of its child roles)."""
    args = parse_args(argv)
    if args.role == "watchers":
        run_loop(lambda: watchers_role(args.port, args.encoding, args.watchers))
        return 0
    if args.role == "pyload":
        out = run_loop(lambda: python_load(args.port, args.encoding, args.mode, args.phase, args.prefix, args.pool,
                                           float(args.duration), args.connections, args.worker))
        args.out.write_text(json.dumps(out))  # a file: a pipe could take a partial write of this much
        return 0
    apply_nice(args.nice)
    args.cores = (None, None) if args.no_pin else server_cores()
    args.profile_dir = None
    if args.profile:
        args.profile_dir = (args.results_dir or RESULTS_DIR) / "apiserver_writes-profiles"
        args.profile_dir.mkdir(parents=True, exist_ok=True)
    servers = [s.strip() for s in args.servers.split(",") if s.strip()]
    wrk = None if args.client == "python" else find_wrk(install=not args.no_install)
    if args.client == "wrk" and wrk is None:
        print("wrk is not available", file=sys.stderr)
        return 2
    client = "wrk" if wrk else f"python ({args.client_procs} processes)"
    print(f"apiserver_writes: {args.duration}s per phase, {args.connections} connections, {args.watchers} "
          f"watchers, load generator {client}", flush=True)
    runs: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="kubemesh-bench-") as tmp:
        for rnd in range(1, args.rounds + 1):
            if args.rounds > 1:
                print(f"round {rnd}/{args.rounds}", flush=True)
            for encoding in ENCODINGS:
                for kind in servers:
                    runs.setdefault(f"{kind}-{encoding}", []).append(
                        measure_server(kind, encoding, args, wrk, Path(tmp)))
    results = {name: {mode: summarize([r[mode] for r in rs]) for mode in PHASES} for name, rs in runs.items()}
    ratios: dict[str, dict[str, float]] = {}
    cpu_ratios: dict[str, dict[str, float]] = {}
    for kind in servers:
        if kind == "bare" or "bare" not in servers:
            continue
        for encoding in ENCODINGS:
            mine, bare = results[f"{kind}-{encoding}"], results[f"bare-{encoding}"]
            ratios[f"{kind}-{encoding}"] = {m: mine[m]["writes_per_s"] / bare[m]["writes_per_s"] for m in PHASES}
            cpu_ratios[f"{kind}-{encoding}"] = {m: mine[m]["writes_per_cpu_s"] / bare[m]["writes_per_cpu_s"]
                                                for m in PHASES}
    target = ratios.get("apiserver-msgpack")
    doc: dict[str, Any] = {
        "benchmark": "apiserver_writes",
        "machine": machine(),
        "config": {"duration_s": args.duration, "warmup_s": args.warmup, "connections": args.connections,
                   "watchers": args.watchers, "pool": args.pool, "client": client, "quick": args.quick,
                   "servers": servers, "rounds": args.rounds},
        "results": results,
        "runs": runs,
        "ratios_vs_bare": ratios,
        "cpu_ratios_vs_bare": cpu_ratios,
        "target": {"description": "apiserver msgpack writes/s >= 0.5 x bare msgpack writes/s",
                   "met": None if target is None else all(v >= 0.5 for v in target.values())},
    }
    path = write_results("apiserver_writes", doc, args.results_dir)
    rows = []
    for name, phases in results.items():
        for mode in PHASES:
            ph = phases[mode]
            rows.append([name, mode, ph["writes_per_s"], ratios.get(name, {}).get(mode, float("nan")),
                         ph["writes_per_cpu_s"], cpu_ratios.get(name, {}).get(mode, float("nan")),
                         ph["p50_ms"], ph["p99_ms"], f"{ph['server_cpu']:.0%}", f"{ph['client_cpu']:.0%}",
                         ph["drain_s"], f"{ph['watch_events_min']}/{ph['ok']}"])
    print()
    print(table(["server-encoding", "phase", "writes/s", "vs bare", "writes/cpu-s", "vs bare", "p50 ms",
                 "p99 ms", "server cpu", "client cpu", "drain s", "watch events"], rows))
    if target is not None:
        cpu_target = cpu_ratios["apiserver-msgpack"]
        print(f"\ntarget (apiserver msgpack >= 0.5 x bare msgpack): {'met' if doc['target']['met'] else 'NOT met'}"
              f" - writes/s ratio {', '.join(f'{m} {v:.2f}' for m, v in target.items())}; "
              f"per CPU-second {', '.join(f'{m} {v:.2f}' for m, v in cpu_target.items())}")
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Durable writes/s: the apiserver with `--fsync` (group commit) against `--no-fsync` and against etcd, same run.

Three servers, each in its own process on the same core (pinned when the machine has two or
more), each with its data directory in the same temporary directory (so the same disk):

1. **fsync**: `python -m kubemesh.apiserver --data-dir D` as shipped (`--fsync`, the default:
   a write is answered once an fdatasync of the log covers it, one fdatasync per batch);
2. **nofsync**: the same with `--no-fsync` (answered after the write(2): survives a process
   kill, not a machine crash);
3. **etcd**: etcd 3.4 (installed by `scripts/etcd-setup`), a single member, which fdatasyncs
   its WAL before answering a put: puts of a ConfigMap-sized value under unique keys through
   its JSON gateway (`POST /v3/kv/put`).

`--connections` keep-alive clients send writes back to back for `--duration` seconds per
phase (ConfigMap creates for the apiserver, puts for etcd: the same client code), alternating
over `--rounds` so that a noisy moment of the machine hits all alike. With `--check-perf`,
`etcdctl check perf --load s` also runs once against the etcd (60 s; its own client) and its
throughput is reported beside.

Ratios reported (medians of the rounds): fsync ÷ nofsync (what durability costs) and
fsync ÷ etcd (durable against durable); the target is fsync ≥ 0.5 of etcd. Prints a table and
writes `benchmarks/results/durable_writes.json`.

Run: `scripts/etcd-setup && .venv/bin/python benchmarks/durable_writes.py [--quick]`.
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Final

import orjson
from _common import (
    PYTHON,
    REPO,
    apply_nice,
    build_request,
    child_env,
    closed_loop,
    machine,
    pin,
    run_loop,
    server_cores,
    table,
    write_results,
)

from kubemesh.services.mesh.state import free_port

CM_PATH: Final = "/api/v1/namespaces/default/configmaps"
TARGET: Final = 0.5
VALUE: Final = "v" * 200
"""The payload of every write: a ConfigMap's data, and the same bytes in etcd's value."""


def start(cmd: list[str], *, log: Path, ready: str, cores: set[int] | None) -> subprocess.Popen[bytes]:
    """Start a server and wait until GET `ready` answers 200."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=child_env(), stdout=out, stderr=subprocess.STDOUT)
    pin(proc.pid, cores)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{cmd[0]} exited with {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(ready, timeout=1.0) as resp:
                if resp.status == 200:
                    return proc
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"{cmd[0]} not ready after 30 s: {log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def apiserver(tmp: Path, name: str, *extra: str, cores: set[int] | None) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    cmd = [PYTHON, "-m", "kubemesh.apiserver", "--port", str(port), "--data-dir", str(tmp / f"{name}-data"),
           "--no-system-pods", "--log-level", "warning", *extra]
    return start(cmd, log=tmp / f"{name}.log", ready=f"http://127.0.0.1:{port}/readyz", cores=cores), port


def etcd(tmp: Path, cores: set[int] | None) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("etcd") or "/usr/bin/etcd"
    port, peer = free_port(), free_port()
    cmd = [binary, "--name", "bench", "--data-dir", str(tmp / "etcd-data"),
           "--listen-client-urls", f"http://127.0.0.1:{port}", "--advertise-client-urls", f"http://127.0.0.1:{port}",
           "--listen-peer-urls", f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls",
           f"http://127.0.0.1:{peer}", "--initial-cluster", f"bench=http://127.0.0.1:{peer}",
           "--log-level", "warn", "--logger", "zap"]
    return start(cmd, log=tmp / "etcd.log", ready=f"http://127.0.0.1:{port}/health", cores=cores), port


async def apiserver_writes(port: int, seconds: float, connections: int, prefix: str) -> dict[str, Any]:
    def next_request(i: int) -> tuple[bytes, int]:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{prefix}-{i:07d}"},
                "data": {"v": VALUE}}
        return build_request("POST", CM_PATH, orjson.dumps(body), "json"), 201

    return summarise(await closed_loop(port, next_request, duration=seconds, connections=connections))


async def etcd_writes(port: int, seconds: float, connections: int, prefix: str) -> dict[str, Any]:
    value = base64.b64encode(orjson.dumps({"apiVersion": "v1", "kind": "ConfigMap", "data": {"v": VALUE}})).decode()

    def next_request(i: int) -> tuple[bytes, int]:
        key = base64.b64encode(f"/registry/configmaps/default/{prefix}-{i:07d}".encode()).decode()
        return build_request("POST", "/v3/kv/put", orjson.dumps({"key": key, "value": value}), "json"), 200

    return summarise(await closed_loop(port, next_request, duration=seconds, connections=connections))


def summarise(done: dict[str, Any]) -> dict[str, Any]:
    return {"writes": done["ok"], "errors": done["errors"], "seconds": done["seconds"],
            "writes_per_s": done["ok"] / done["seconds"]}


async def rounds(args: argparse.Namespace, ports: dict[str, int]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in ports}

    async def phase(name: str, seconds: float, prefix: str) -> dict[str, Any]:
        measure = etcd_writes if name == "etcd" else apiserver_writes
        return await measure(ports[name], seconds, args.connections, prefix)

    for name in ports:
        await phase(name, min(1.0, args.duration), "warm")
    for r in range(args.rounds):
        for name in ports:
            out[name].append(await phase(name, args.duration, f"r{r}"))
        print("  round " + str(r + 1) + ": " + ", ".join(f"{n} {out[n][-1]['writes_per_s']:.0f}/s" for n in ports),
              flush=True)
    return out


def check_perf(port: int, *, load: str = "s") -> dict[str, Any]:
    """`etcdctl check perf --load LOAD` against the etcd: its throughput and verdict."""
    etcdctl = shutil.which("etcdctl") or "/usr/bin/etcdctl"
    proc = subprocess.run([etcdctl, "--endpoints", f"http://127.0.0.1:{port}", "check", "perf", "--load", load],
                          capture_output=True, text=True, timeout=180, check=False,
                          env={**os.environ, "ETCDCTL_API": "3"})
    text = proc.stdout + proc.stderr
    m = re.search(r"Throughput (?:is|too low:) (\d+) writes/s", text)
    return {"writes_per_s": float(m.group(1)) if m else float("nan"), "passed": proc.returncode == 0,
            "output": text.strip().splitlines()[-6:]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=5.0, help="seconds per phase")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--quick", action="store_true", help="1 s phases, 1 round (a smoke run)")
    p.add_argument("--check-perf", action="store_true", help="also run `etcdctl check perf --load s` (60 s)")
    p.add_argument("--no-pin", action="store_true", help="do not pin the servers to a core")
    p.add_argument("--nice", type=int, default=0)
    p.add_argument("--dir", type=Path, default=None, help="where the data directories go (default: a temporary "
                                                          "directory under $TMPDIR)")
    p.add_argument("--results-dir", type=Path, default=None)
    args = p.parse_args()
    if args.quick:
        args.duration, args.rounds = 1.0, 1
    apply_nice(args.nice)
    srv_cores, load_cores = (None, None) if args.no_pin else server_cores()
    have_etcd = shutil.which("etcd") is not None or Path("/usr/bin/etcd").exists()
    if not have_etcd:
        print("etcd is not installed (scripts/etcd-setup installs it): measuring the apiserver only", flush=True)
    print(f"durable_writes: {args.rounds} rounds of {args.duration:g} s per server, {args.connections} connections",
          flush=True)
    procs: list[subprocess.Popen[bytes]] = []
    perf: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix="kubemesh-bench-", dir=args.dir) as tmp_name:
        tmp = Path(tmp_name)
        try:
            ports: dict[str, int] = {}
            proc, ports["fsync"] = apiserver(tmp, "fsync", cores=srv_cores)
            procs.append(proc)
            proc, ports["nofsync"] = apiserver(tmp, "nofsync", "--no-fsync", cores=srv_cores)
            procs.append(proc)
            if have_etcd:
                proc, ports["etcd"] = etcd(tmp, srv_cores)
                procs.append(proc)
            pin(os.getpid(), load_cores)
            data = run_loop(lambda: rounds(args, ports))
            if args.check_perf and have_etcd:
                perf = check_perf(ports["etcd"])
        finally:
            for proc in procs:
                stop(proc)

    def median(xs: list[float]) -> float:
        return sorted(xs)[len(xs) // 2]

    summary = {name: {"writes_per_s": median([x["writes_per_s"] for x in runs]),
                      "errors": sum(x["errors"] for x in runs), "writes": sum(x["writes"] for x in runs)}
               for name, runs in data.items()}
    fsync = summary["fsync"]["writes_per_s"]
    ratios: dict[str, float] = {"fsync_vs_nofsync": fsync / summary["nofsync"]["writes_per_s"]}
    if "etcd" in summary:
        ratios["fsync_vs_etcd"] = fsync / summary["etcd"]["writes_per_s"]
    if perf is not None and perf["writes_per_s"] == perf["writes_per_s"]:
        ratios["fsync_vs_etcdctl_check_perf"] = fsync / perf["writes_per_s"]
    print(table(["server", "writes/s (median)", "writes", "errors"],
                [[name, s["writes_per_s"], s["writes"], s["errors"]] for name, s in summary.items()]))
    if perf is not None:
        print(f"etcdctl check perf --load s: {perf['writes_per_s']:.0f} writes/s "
              f"({'PASS' if perf['passed'] else 'FAIL'})")
    for name, value in ratios.items():
        print(f"ratio {name}: {value:.2f}")
    met = ratios.get("fsync_vs_etcd", float("nan")) >= TARGET
    path = write_results("durable_writes", {
        "benchmark": "durable_writes", "machine": machine(),
        "config": {"duration": args.duration, "rounds": args.rounds, "connections": args.connections,
                   "value_bytes": len(VALUE)},
        "rounds": data, "results": summary, "etcdctl_check_perf": perf, "ratios": ratios,
        "target": {"fsync_vs_etcd": TARGET, "met": met},
    }, args.results_dir)
    print(f"results: {path}")


if __name__ == "__main__":
    main()

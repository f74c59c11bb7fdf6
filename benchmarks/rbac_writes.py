"""Pod creates as a ServiceAccount with the RBAC authorizer on, against the same creates with it off.

Every request of a ServiceAccount token is authenticated (the token's signature once, its
ServiceAccount's uid every time) and, with RBAC on, authorized against the Roles and bindings
(`kubemesh.apiserver.rbac`: bindings indexed by subject, decisions cached per RBAC revision).
This benchmark measures what that costs on the write path, in one run:

1. start two apiservers, `--authorization-mode RBAC` (the default) and `AlwaysAllow`; in each,
   create the ServiceAccount `default/bench`, bind it to the ClusterRole `edit` in `default`
   (plus a few dozen unrelated Roles and bindings, so the index is not trivially small) and
   request a token for it;
2. for each round, alternating the order, `--connections` keep-alive connections create pods
   as that ServiceAccount in a closed loop for `--duration` seconds on each server, with
   `--watchers` pod watches attached (the fan-out is part of every write's cost).

Ratio reported: RBAC-on creates/s ÷ RBAC-off creates/s (medians over the rounds), and the same
per server CPU-second. Target: >= 0.95. Prints a table and writes
`benchmarks/results/rbac_writes.json` (`--results-dir` to write elsewhere).

Run: `.venv/bin/python benchmarks/rbac_writes.py [--quick]`.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import urllib.request
from pathlib import Path
from typing import Any, Final

import orjson
from _common import (
    JSON_CT,
    NAME_SLOT,
    ServerProcess,
    apply_nice,
    closed_loop,
    machine,
    open_watch,
    pin,
    pod_body,
    round_median,
    run_loop,
    sent_marker,
    server_cores,
    table,
    write_results,
)

POD_PATH: Final = "/api/v1/namespaces/default/pods"
MODES: Final = ("rbac", "off")
TARGET: Final = 0.95
RBAC: Final = "/apis/rbac.authorization.k8s.io/v1"


def _post(base: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    req = urllib.request.Request(base + path, data=orjson.dumps(body), method="POST",
                                 headers={"Content-Type": JSON_CT})
    with urllib.request.urlopen(req, timeout=10) as resp:
        doc: dict[str, Any] = json.loads(resp.read())
        return doc


def setup(base: str, *, noise: int) -> str:
    """The ServiceAccount, its binding to `edit`, `noise` unrelated Roles and bindings; its token."""
    _post(base, "/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "bench"}})
    _post(base, f"{RBAC}/namespaces/default/rolebindings", {
        "metadata": {"name": "bench-edit"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"kind": "ServiceAccount", "name": "bench", "namespace": "default"}]})
    for i in range(noise):
        _post(base, f"{RBAC}/namespaces/default/roles", {"metadata": {"name": f"noise-{i}"}, "rules": [
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": [f"c{i}"]}]})
        _post(base, f"{RBAC}/namespaces/default/rolebindings", {
            "metadata": {"name": f"noise-{i}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"noise-{i}"},
            "subjects": [{"kind": "User", "name": f"user-{i}"}]})
    doc = _post(base, "/api/v1/namespaces/default/serviceaccounts/bench/token",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})
    token: str = doc["status"]["token"]
    return token


def template(token: str) -> bytes:
    """A pod create as the ServiceAccount, with a fixed-width name placeholder."""
    body = orjson.dumps(pod_body(f"rb-{NAME_SLOT}", seq="0"))
    head = (f"POST {POD_PATH} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {JSON_CT}\r\nAccept: {JSON_CT}\r\n"
            f"Authorization: Bearer {token}\r\nUser-Agent: kubemesh-bench\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


async def creates(port: int, raw: bytes, prefix: int, duration: float, connections: int) -> dict[str, Any]:
    """`connections` clients creating pods back to back for `duration` s."""
    slot = NAME_SLOT.encode()

    def next_request(i: int) -> tuple[bytes, int]:
        return raw.replace(slot, b"%010d" % (prefix * 10**8 + i)), 201

    return await closed_loop(port, next_request, duration=duration, connections=connections)


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, list[dict[str, Any]]]:
    """Every round on both servers; per mode, the rounds' figures."""
    srv_cores, load_cores = args.cores
    servers = {"rbac": ServerProcess.start("apiserver", cores=srv_cores, log_dir=workdir),
               "off": ServerProcess.start("apiserver", cores=srv_cores, log_dir=workdir,
                                          extra_args=("--authorization-mode", "AlwaysAllow"))}
    pin(os.getpid(), load_cores)
    try:
        raws = {m: template(setup(s.base, noise=args.noise)) for m, s in servers.items()}

        async def run() -> dict[str, list[dict[str, Any]]]:
            watchers = [await open_watch(s.port, f"{POD_PATH}?watch=true", "msgpack", sent_marker("msgpack"))
                        for s in servers.values() for _ in range(args.watchers)]
            out: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
            for m, s in servers.items():  # warm up
                r = await creates(s.port, raws[m], 0, 0.3, 2)
                if r["ok"] == 0:
                    raise RuntimeError(f"{m}: no create succeeded during the warm-up")
            prefix = 0
            for rnd in range(args.rounds):
                for m in (MODES if rnd % 2 == 0 else tuple(reversed(MODES))):
                    prefix += 1
                    s = servers[m]
                    cpu0 = s.cpu_seconds()
                    r = await creates(s.port, raws[m], prefix, args.duration, args.connections)
                    cpu = s.cpu_seconds() - cpu0
                    out[m].append({"creates_per_s": r["ok"] / r["seconds"],
                                   "creates_per_cpu_s": r["ok"] / max(1e-9, cpu),
                                   "ok": r["ok"], "errors": r["errors"], "server_cpu": cpu / r["seconds"]})
            for w in watchers:
                if w.transport is not None:
                    w.transport.close()
            return out

        result: dict[str, list[dict[str, Any]]] = run_loop(run)
        return result
    finally:
        for s in servers.values():
            s.stop()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="a short run (smoke test)")
    p.add_argument("--duration", type=float, default=None, help="seconds per phase (default 5; 1 with --quick)")
    p.add_argument("--rounds", type=int, default=None, help="rounds of both modes (default 4; 1 with --quick)")
    p.add_argument("--connections", type=int, default=16, help="closed-loop writer connections")
    p.add_argument("--watchers", type=int, default=None, help="pod watchers per server (default 5; 1 with --quick)")
    p.add_argument("--noise", type=int, default=None, help="unrelated Roles and bindings (default 50; 5 with --quick)")
    p.add_argument("--no-pin", action="store_true", help="do not pin the servers and the clients to separate cores")
    p.add_argument("--nice", type=int, default=0, help="niceness for the benchmark's processes")
    p.add_argument("--results-dir", type=Path, default=None, help="where to write rbac_writes.json")
    a = p.parse_args(argv)
    a.duration = a.duration if a.duration is not None else (1.0 if a.quick else 5.0)
    a.rounds = a.rounds if a.rounds is not None else (1 if a.quick else 4)
    a.watchers = a.watchers if a.watchers is not None else (1 if a.quick else 5)
    a.noise = a.noise if a.noise is not None else (5 if a.quick else 50)
    return a


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark."""
    args = parse_args(argv)
    apply_nice(args.nice)
    mach = machine()
    args.cores = (None, None) if args.no_pin else server_cores()
    print(f"rbac_writes: {args.rounds} rounds x (rbac, off), {args.duration:g}s phases, {args.connections} "
          f"writers, {args.watchers} watchers per server, {args.noise} unrelated bindings", flush=True)
    with tempfile.TemporaryDirectory(prefix="kubemesh-bench-") as tmp:
        rounds = measure(args, Path(tmp))
    summary = {m: {k: round_median([x[k] for x in rs]) for k in ("creates_per_s", "creates_per_cpu_s", "server_cpu")}
               for m, rs in rounds.items()}
    ratios = {
        "create": summary["rbac"]["creates_per_s"] / summary["off"]["creates_per_s"],
        "create_per_cpu": summary["rbac"]["creates_per_cpu_s"] / summary["off"]["creates_per_cpu_s"],
    }
    print(table(["authorization", "creates/s", "creates/cpu-s", "server cpu"],
                [[m, s["creates_per_s"], s["creates_per_cpu_s"], s["server_cpu"]] for m, s in summary.items()]))
    print("ratios (RBAC on vs off, >= 0.95 is the target): " + ", ".join(f"{k} {v:.3f}" for k, v in ratios.items()))
    met = ratios["create"] >= TARGET
    doc = {"benchmark": "rbac_writes", "machine": mach,
           "config": {k: getattr(args, k) for k in ("duration", "rounds", "connections", "watchers", "noise")},
           "rounds": rounds, "results": summary, "ratios": ratios,
           "target": {"ratio": TARGET, "met": met, "what": "pod creates/s as a ServiceAccount with RBAC on >= 0.95 x "
                                                           "with RBAC off (AlwaysAllow), same run"}}
    path = write_results("rbac_writes", doc, args.results_dir)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

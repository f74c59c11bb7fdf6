"""Custom objects against pods on one apiserver: writes per second and watch delivery latency, as ratios.

A custom object pays for its CRD's schema on every write (pruning, defaults, OpenAPI
validation and CEL rules) where a pod pays for kube-apiserver's pod validation, defaulting
and admission. This benchmark measures both on the same server process, in the same run,
alternating pod and custom-object phases over `--rounds` so that a noisy moment of the
machine hits both alike:

1. start `python -m kubemesh.apiserver`, create a CRD (`widgets.bench.kubemesh.io`) whose
   schema has typed nested fields, defaults, an enum, bounds, a pattern and two CEL rules (a
   realistic operator CRD, not an empty one), and attach `--watchers` msgpack watches of
   each resource that count events without decoding them;
2. **writes**: for each resource, `--connections` keep-alive connections create objects in a
   closed loop for `--duration` seconds, then update them (PUT without resourceVersion) for
   as long: writes/s and per CPU-second of the server;
3. **latency**: one timed watch per resource; a writer creates objects at `--rate`/s,
   stamping the send time in an annotation; delivery latency = receipt time at the watcher
   minus send time (p50/p99).

Ratios reported: custom writes/s ÷ pod writes/s (create, update) and pod p99 ÷ custom p99;
the target is ≥ 0.8 for each. Prints a table and writes
`benchmarks/results/custom_resources.json`.

Run: `.venv/bin/python benchmarks/custom_resources.py [--quick]`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Final

import orjson
from _common import (
    NAME_SLOT,
    SENT_KEY,
    SENT_SLOT,
    HttpConnection,
    ServerProcess,
    apply_nice,
    build_request,
    closed_loop,
    encode,
    format_sent,
    machine,
    open_watch,
    percentile,
    pin,
    pod_body,
    round_median,
    run_loop,
    sent_marker,
    server_cores,
    table,
    write_results,
)

ENCODING: Final = "msgpack"
POD_PATH: Final = "/api/v1/namespaces/default/pods"
WIDGET_PATH: Final = "/apis/bench.kubemesh.io/v1/namespaces/default/widgets"
TARGET: Final = 0.8

CRD: Final[dict[str, Any]] = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.bench.kubemesh.io"},
    "spec": {
        "group": "bench.kubemesh.io", "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "versions": [{
            "name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object", "required": ["image", "replicas"],
                        "x-kubernetes-validations": [
                            {"rule": "self.replicas <= self.maxReplicas", "message": "replicas above maxReplicas"},
                            {"rule": "self.image.startsWith('registry.') || self.image.contains('/')"}],
                        "properties": {
                            "image": {"type": "string", "minLength": 1, "maxLength": 256},
                            "replicas": {"type": "integer", "minimum": 0},
                            "maxReplicas": {"type": "integer", "default": 10},
                            "mode": {"type": "string", "enum": ["fast", "safe"], "default": "safe"},
                            "owner": {"type": "string", "pattern": "^[a-z][a-z0-9-]*$"},
                            "resources": {"type": "object", "properties": {
                                "cpu": {"x-kubernetes-int-or-string": True},
                                "memory": {"x-kubernetes-int-or-string": True}}},
                            "ports": {"type": "array", "x-kubernetes-list-type": "map",
                                      "x-kubernetes-list-map-keys": ["name"],
                                      "items": {"type": "object", "required": ["name", "port"], "properties": {
                                          "name": {"type": "string"},
                                          "port": {"type": "integer", "minimum": 1, "maximum": 65535}}}},
                            "env": {"type": "object", "additionalProperties": {"type": "string"}},
                        },
                    },
                    "status": {"type": "object", "properties": {"ready": {"type": "integer"}}},
                },
            }},
        }],
    },
}


def widget_body(name: str, *, seq: str, sent: str | None = None) -> dict[str, Any]:
    """A custom object about the size of the benchmark's pod (about 400 bytes as sent)."""
    annotations = {"bench.kubemesh.io/seq": seq}
    if sent is not None:
        annotations[SENT_KEY] = sent
    return {
        "apiVersion": "bench.kubemesh.io/v1", "kind": "Widget",
        "metadata": {"name": name, "labels": {"app": "bench", "tier": "web"}, "annotations": annotations},
        "spec": {"image": "registry.example/app:1.25", "replicas": 2, "owner": "team-a",
                 "resources": {"cpu": "100m", "memory": "64Mi"},
                 "ports": [{"name": "http", "port": 80}], "env": {"MODE": "benchmark"}},
    }


BODIES: Final = {"pods": (POD_PATH, pod_body), "widgets": (WIDGET_PATH, widget_body)}


def create_crd(port: int) -> None:
    """POST the CRD and wait until its resource answers."""
    req = urllib.request.Request(f"http://127.0.0.1:{port}/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                                 data=orjson.dumps(CRD), headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 201
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{WIDGET_PATH}", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("the CRD was not served within 10 s")


async def writes(port: int, resource: str, mode: str, prefix: str, duration: float, connections: int,
                 pool: int) -> dict[str, Any]:
    """`connections` clients writing back to back for `duration` s: creates of new names, or updates of the pool."""
    path, body_fn = BODIES[resource]

    def next_request(i: int) -> tuple[bytes, int]:
        if mode == "create":
            name = f"{prefix}-{i:010d}"
            return build_request("POST", path, encode(body_fn(name, seq=str(i)), ENCODING), ENCODING), 201
        name = f"{prefix}-{i % pool:010d}"
        # A new seq every time: a PUT equal to the stored object is a no-op, not a write.
        return build_request("PUT", f"{path}/{name}", encode(body_fn(name, seq=f"u{i}"), ENCODING), ENCODING), 200

    return await closed_loop(port, next_request, duration=duration, connections=connections)


async def paced(port: int, resource: str, rate: float, duration: float, prefix: str) -> dict[str, Any]:
    """Creates at `rate`/s, each stamped with its send time, over a few connections."""
    path, body_fn = BODIES[resource]
    template = encode(body_fn(f"{prefix}-{NAME_SLOT}", seq=NAME_SLOT, sent=SENT_SLOT), ENCODING)
    name_slot, sent_slot = NAME_SLOT.encode(), SENT_SLOT.encode()
    conns: asyncio.Queue[HttpConnection] = asyncio.Queue()
    for _ in range(16):
        conns.put_nowait(await HttpConnection.open(port))
    total = int(rate * duration)
    ok = 0

    async def send(i: int) -> None:
        nonlocal ok
        conn = await conns.get()
        body = template.replace(name_slot, b"%010d" % i).replace(sent_slot, format_sent(time.time()))
        if await conn.request(build_request("POST", path, body, ENCODING)) == 201:
            ok += 1
        conns.put_nowait(conn)

    tasks = []
    t0 = time.perf_counter()
    for i in range(total):
        delay = t0 + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.get_running_loop().create_task(send(i)))
    await asyncio.gather(*tasks)
    while not conns.empty():
        conns.get_nowait().close()
    return {"ok": ok}


def current_revision(port: int, path: str) -> str:
    """The resourceVersion a one-item list of `path` is read at (the store's current revision)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}?limit=1", timeout=10) as resp:
        return str(orjson.loads(resp.read())["metadata"]["resourceVersion"])


async def latency(port: int, resource: str, rate: float, duration: float, prefix: str) -> dict[str, Any]:
    """Delivery latency of paced creates to one timed watch."""
    path, _ = BODIES[resource]
    # From the current revision: an initial state would replay the stamped objects of earlier
    # rounds, whose send times are long past.
    rv = await asyncio.to_thread(current_revision, port, path)
    stream = await open_watch(port, f"{path}?watch=true&resourceVersion={rv}", ENCODING, sent_marker(ENCODING),
                              timed=True)
    start = len(stream.sent)
    w = await paced(port, resource, rate, duration, prefix)
    deadline = time.perf_counter() + 10
    while stream.events - start < w["ok"] and time.perf_counter() < deadline:  # noqa: ASYNC110 - polling a counter
        await asyncio.sleep(0.05)
    assert stream.transport is not None
    stream.transport.close()
    lat = sorted((r - s) * 1e3 for s, r in zip(stream.sent[start:], stream.received[start:], strict=True))
    return {"p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99), "samples": len(lat), "sent": w["ok"]}


async def count_watchers(port: int, n: int) -> list[Any]:
    """n untimed watches per resource, kept open while the writes run (the fan-out is part of the cost)."""
    streams = []
    for resource in BODIES:
        path, _ = BODIES[resource]
        for _ in range(n):
            streams.append(await open_watch(port, f"{path}?watch=true", ENCODING, sent_marker(ENCODING)))
    return streams


async def caught_up(streams: list[Any], *, settle: float = 0.5, limit: float = 60.0) -> None:
    """Wait until the watchers have read everything sent so far (no new event for `settle` s)."""
    deadline = time.perf_counter() + limit
    last = -1
    while time.perf_counter() < deadline:
        seen = sum(s.events for s in streams)
        if seen == last:
            return
        last = seen
        await asyncio.sleep(settle)


def measure(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    """Every round on one server process; per resource, the rounds' writes and latencies."""
    srv_cores, load_cores = args.cores
    server = ServerProcess.start("apiserver", cores=srv_cores, log_dir=workdir)
    pin(os.getpid(), load_cores)
    try:
        create_crd(server.port)

        async def run() -> dict[str, list[dict[str, Any]]]:
            watchers = await count_watchers(server.port, args.watchers)
            out: dict[str, list[dict[str, Any]]] = {r: [] for r in BODIES}
            for rnd in range(args.rounds):
                order = list(BODIES) if rnd % 2 == 0 else list(reversed(BODIES))
                for resource in order:
                    prefix = f"r{rnd}"
                    cpu0 = server.cpu_seconds()
                    c = await writes(server.port, resource, "create", prefix, args.duration,
                                          args.connections, 0)
                    cpu1 = server.cpu_seconds()
                    u = await writes(server.port, resource, "update", prefix, args.duration, args.connections,
                                          max(1, c["ok"]))
                    cpu2 = server.cpu_seconds()
                    # The counting watchers share this process's loop: let them catch up first, or
                    # the timed watch's events wait behind their backlog and the latency is ours.
                    await caught_up(watchers)
                    lat = await latency(server.port, resource, args.rate, args.duration, f"lat{rnd}")
                    out[resource].append({
                        "create_per_s": c["ok"] / c["seconds"], "update_per_s": u["ok"] / u["seconds"],
                        "create_per_cpu_s": c["ok"] / max(1e-9, cpu1 - cpu0),
                        "update_per_cpu_s": u["ok"] / max(1e-9, cpu2 - cpu1),
                        "errors": c["errors"] + u["errors"], **lat})
            for s in watchers:
                if s.transport is not None:
                    s.transport.close()
            return out

        result: dict[str, list[dict[str, Any]]] = run_loop(run)
        return result
    finally:
        server.stop()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line flags."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="a short run (smoke test)")
    p.add_argument("--duration", type=float, default=None, help="seconds per phase (default 5; 1 with --quick)")
    p.add_argument("--rounds", type=int, default=None, help="rounds of both resources (default 3; 1 with --quick)")
    p.add_argument("--connections", type=int, default=16, help="closed-loop writer connections")
    p.add_argument("--rate", type=float, default=None, help="paced creates/s for latency (default 300; 100 quick)")
    p.add_argument("--watchers", type=int, default=None, help="watchers per resource (default 10; 2 with --quick)")
    p.add_argument("--no-pin", action="store_true", help="do not pin the server and the clients to separate cores")
    p.add_argument("--nice", type=int, default=0, help="niceness for the benchmark's processes")
    p.add_argument("--results-dir", type=Path, default=None, help="where to write custom_resources.json")
    a = p.parse_args(argv)
    a.duration = a.duration if a.duration is not None else (1.0 if a.quick else 5.0)
    a.rounds = a.rounds if a.rounds is not None else (1 if a.quick else 3)
    a.rate = a.rate if a.rate is not None else (100.0 if a.quick else 300.0)
    a.watchers = a.watchers if a.watchers is not None else (2 if a.quick else 10)
    return a


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark."""
    args = parse_args(argv)
    apply_nice(args.nice)
    mach = machine()
    args.cores = (None, None) if args.no_pin else server_cores()
    print(f"custom_resources: {args.rounds} rounds x (pods, widgets), {args.duration:g}s phases, "
          f"{args.connections} writers, {args.watchers} watchers per resource", flush=True)
    with tempfile.TemporaryDirectory(prefix="kubemesh-bench-") as tmp:
        rounds = measure(args, Path(tmp))
    summary = {r: {k: round_median([x[k] for x in rs]) for k in ("create_per_s", "update_per_s", "create_per_cpu_s",
                                                             "update_per_cpu_s", "p50_ms", "p99_ms")}
               for r, rs in rounds.items()}
    pods, widgets = summary["pods"], summary["widgets"]
    ratios = {
        "create": widgets["create_per_s"] / pods["create_per_s"],
        "update": widgets["update_per_s"] / pods["update_per_s"],
        "create_per_cpu": widgets["create_per_cpu_s"] / pods["create_per_cpu_s"],
        "update_per_cpu": widgets["update_per_cpu_s"] / pods["update_per_cpu_s"],
        "latency_p99": pods["p99_ms"] / widgets["p99_ms"],
    }
    print(table(["resource", "create/s", "update/s", "create/cpu-s", "update/cpu-s", "p50 ms", "p99 ms"],
                [[r, s["create_per_s"], s["update_per_s"], s["create_per_cpu_s"], s["update_per_cpu_s"],
                  s["p50_ms"], s["p99_ms"]] for r, s in summary.items()]))
    print("ratios (widgets vs pods, >= 1 means custom objects are as fast): "
          + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    met = all(ratios[k] >= TARGET for k in ("create", "update", "latency_p99"))
    doc = {"benchmark": "custom_resources", "machine": mach,
           "config": {k: getattr(args, k) for k in ("duration", "rounds", "connections", "rate", "watchers")},
           "rounds": rounds, "results": summary, "ratios": ratios,
           "target": {"ratio": TARGET, "met": met, "what": "widget create/update writes/s and pod/widget p99 "
                                                           "latency, each >= 0.8"}}
    path = write_results("custom_resources", doc, args.results_dir)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

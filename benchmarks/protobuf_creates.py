"""Pod creates with protobuf bodies (kubectl 1.32+, client-go) against JSON bodies, on one apiserver.

kubectl 1.32+ and every typed client-go client send creates of built-in kinds as Kubernetes
protobuf; the apiserver decodes them (`kubemesh.apiserver.protobuf`) into the dict the JSON
body would have been, and everything after that is shared. This benchmark measures what the
protobuf path costs against the JSON path, on the same server process in the same run,
alternating the two encodings over `--rounds` so that a noisy moment of the machine hits both:

1. start `python -m kubemesh.apiserver` and attach `--watchers` msgpack watches of pods that
   count events without decoding them (the fan-out is part of every write's cost);
2. for each round and encoding, `--connections` keep-alive connections create pods in a
   closed loop for `--duration` seconds. Both encodings send the same pod (the benchmarks'
   usual one, in the Go JSON form a Go client sends, about 700 bytes as JSON, 400 as
   protobuf), asking for JSON back as kubectl 1.33 does (`Accept: protobuf,json`);
3. in this process, the decode alone: microseconds per body for `orjson.loads` of the JSON
   body and for `decode_protobuf` of the protobuf body (informative: no target).

Ratios reported: protobuf creates/s ÷ JSON creates/s, and the same per server CPU-second (the
steadier figure on a shared machine). Target: protobuf creates/s >= 0.9 x JSON. Prints a table
and writes `benchmarks/results/protobuf_creates.json` (`--results-dir` to write elsewhere).

Run: `.venv/bin/python benchmarks/protobuf_creates.py [--quick]`.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
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

from kubemesh.apiserver.protobuf import MEDIA_TYPE, decode_protobuf, encode_protobuf
from kubemesh.apiserver.protobuf.decoding import decode_message
from kubemesh.apiserver.protobuf.encoding import encode_message
from kubemesh.apiserver.protobuf.schema import message_for
from kubemesh.services.model.kinds import PODS

POD_PATH: Final = "/api/v1/namespaces/default/pods"
ENCODINGS: Final = ("json", "protobuf")
TARGET: Final = 0.9
ACCEPT: Final = f"{MEDIA_TYPE},{JSON_CT}"


def go_form(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as a Go client sends it (every value field written, structs present): what both bodies carry."""
    name = message_for(obj["apiVersion"], obj["kind"])
    assert name is not None
    body = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    return {"kind": obj["kind"], "apiVersion": obj["apiVersion"], **decode_message(name, encode_message(name, body))}


def templates() -> dict[str, bytes]:
    """Per encoding, the pod body with a fixed-width name placeholder (same length in both encodings)."""
    pod = go_form(pod_body(f"pb-{NAME_SLOT}", seq="0"))
    return {"json": orjson.dumps(pod), "protobuf": encode_protobuf(pod)}


def request(path: str, body: bytes, encoding: str) -> bytes:
    """A POST as kubectl sends it: the body's media type, JSON or protobuf accepted back."""
    ct = MEDIA_TYPE if encoding == "protobuf" else JSON_CT
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {ct}\r\nAccept: {ACCEPT}\r\n"
            f"User-Agent: kubemesh-bench\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


async def creates(port: int, encoding: str, template: bytes, prefix: int, duration: float,
                  connections: int) -> dict[str, Any]:
    """`connections` clients creating pods back to back for `duration` s."""
    slot = NAME_SLOT.encode()

    def next_request(i: int) -> tuple[bytes, int]:
        name = b"%010d" % (prefix * 10**8 + i)
        return request(POD_PATH, template.replace(slot, name), encoding), 201

    return await closed_loop(port, next_request, duration=duration, connections=connections)


def decode_cost(bodies: dict[str, bytes], n: int) -> dict[str, float]:
    """Microseconds per decode of each body, in this process (the best of 3 batches of n)."""
    body = {e: b.replace(NAME_SLOT.encode(), b"0000000001") for e, b in bodies.items()}
    funcs: dict[str, Callable[[], Any]] = {
        "json": lambda: orjson.loads(body["json"]),
        "protobuf": lambda: decode_protobuf(PODS, body["protobuf"]),
    }
    assert funcs["json"]() == funcs["protobuf"]()  # the same object either way
    out = {}
    for encoding, fn in funcs.items():
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best = min(best, (time.perf_counter() - t0) / n * 1e6)
        out[encoding] = best
    return out


def measure(args: argparse.Namespace, workdir: Path, bodies: dict[str, bytes]) -> dict[str, list[dict[str, Any]]]:
    """Every round on one server process; per encoding, the rounds' figures."""
    srv_cores, load_cores = args.cores
    server = ServerProcess.start("apiserver", cores=srv_cores, log_dir=workdir)
    pin(os.getpid(), load_cores)
    try:
        async def run() -> dict[str, list[dict[str, Any]]]:
            watchers = [await open_watch(server.port, f"{POD_PATH}?watch=true", "msgpack", sent_marker("msgpack"))
                        for _ in range(args.watchers)]
            out: dict[str, list[dict[str, Any]]] = {e: [] for e in ENCODINGS}
            # Warm up both paths (the protobuf tables are compiled on the first protobuf body).
            for encoding in ENCODINGS:
                await creates(server.port, encoding, bodies[encoding], 0, 0.3, 2)
            prefix = 0
            for rnd in range(args.rounds):
                for encoding in (ENCODINGS if rnd % 2 == 0 else tuple(reversed(ENCODINGS))):
                    prefix += 1
                    cpu0 = server.cpu_seconds()
                    r = await creates(server.port, encoding, bodies[encoding], prefix, args.duration,
                                          args.connections)
                    cpu = server.cpu_seconds() - cpu0
                    out[encoding].append({"creates_per_s": r["ok"] / r["seconds"],
                                          "creates_per_cpu_s": r["ok"] / max(1e-9, cpu),
                                          "ok": r["ok"], "errors": r["errors"], "server_cpu": cpu / r["seconds"]})
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
    p.add_argument("--rounds", type=int, default=None, help="rounds of both encodings (default 3; 1 with --quick)")
    p.add_argument("--connections", type=int, default=16, help="closed-loop writer connections")
    p.add_argument("--watchers", type=int, default=None, help="pod watchers (default 10; 2 with --quick)")
    p.add_argument("--no-pin", action="store_true", help="do not pin the server and the clients to separate cores")
    p.add_argument("--nice", type=int, default=0, help="niceness for the benchmark's processes")
    p.add_argument("--results-dir", type=Path, default=None, help="where to write protobuf_creates.json")
    a = p.parse_args(argv)
    a.duration = a.duration if a.duration is not None else (1.0 if a.quick else 5.0)
    a.rounds = a.rounds if a.rounds is not None else (1 if a.quick else 3)
    a.watchers = a.watchers if a.watchers is not None else (2 if a.quick else 10)
    return a


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark."""
    args = parse_args(argv)
    apply_nice(args.nice)
    mach = machine()
    args.cores = (None, None) if args.no_pin else server_cores()
    bodies = templates()
    print(f"protobuf_creates: {args.rounds} rounds x (json, protobuf), {args.duration:g}s phases, "
          f"{args.connections} writers, {args.watchers} watchers; bodies "
          + ", ".join(f"{e} {len(b)} B" for e, b in bodies.items()), flush=True)
    with tempfile.TemporaryDirectory(prefix="kubemesh-bench-") as tmp:
        rounds = measure(args, Path(tmp), bodies)
    decode_us = decode_cost(bodies, 200 if args.quick else 2000)
    summary = {e: {k: round_median([x[k] for x in rs]) for k in ("creates_per_s", "creates_per_cpu_s", "server_cpu")}
               for e, rs in rounds.items()}
    for e, figures in summary.items():
        figures["decode_us"] = decode_us[e]
        figures["body_bytes"] = len(bodies[e])
    ratios = {
        "create": summary["protobuf"]["creates_per_s"] / summary["json"]["creates_per_s"],
        "create_per_cpu": summary["protobuf"]["creates_per_cpu_s"] / summary["json"]["creates_per_cpu_s"],
    }
    print(table(["encoding", "creates/s", "creates/cpu-s", "server cpu", "decode us", "body bytes"],
                [[e, s["creates_per_s"], s["creates_per_cpu_s"], s["server_cpu"], s["decode_us"], s["body_bytes"]]
                 for e, s in summary.items()]))
    print("ratios (protobuf vs json, >= 1 means protobuf creates are as fast): "
          + ", ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    met = ratios["create"] >= TARGET
    doc = {"benchmark": "protobuf_creates", "machine": mach,
           "config": {k: getattr(args, k) for k in ("duration", "rounds", "connections", "watchers")},
           "rounds": rounds, "results": summary, "ratios": ratios,
           "target": {"ratio": TARGET, "met": met, "what": "protobuf pod creates/s >= 0.9 x JSON pod creates/s "
                                                           "on the same server"}}
    path = write_results("protobuf_creates", doc, args.results_dir)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

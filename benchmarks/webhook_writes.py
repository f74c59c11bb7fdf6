"""ConfigMap creates/s through one no-op validating webhook, as a ratio to creates/s without it, same run.

A write that some webhook configuration matches is done in steps (mutate, validate, commit;
`kubemesh.apiserver.admitting`), with an AdmissionReview over HTTPS to the webhook in between.
This benchmark measures what that costs: one apiserver and one webhook server (a separate
process: a TLS aiohttp server that allows everything, with its own CA passed as `caBundle`),
and `--connections` clients creating ConfigMaps for `--duration` seconds per phase, alternating
over `--rounds` so that a noisy moment of the machine hits both alike:

1. **without**: no webhook configuration (the direct write path, the reference);
2. **with**: a ValidatingWebhookConfiguration whose one webhook matches every ConfigMap create.

Ratio reported: with ÷ without (median of the rounds); errors are counted (a create the webhook
path refused). Prints a table and writes `benchmarks/results/webhook_writes.json`.

Run: `.venv/bin/python benchmarks/webhook_writes.py [--quick]`.
"""

from __future__ import annotations

import argparse
import itertools
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Final

import orjson
from _common import (
    PYTHON,
    HttpConnection,
    ServerProcess,
    apply_nice,
    build_request,
    child_env,
    closed_loop,
    encode,
    machine,
    pin,
    run_loop,
    server_cores,
    table,
    write_results,
)

from kubemesh.services.mesh.state import free_port

CM_PATH: Final = "/api/v1/namespaces/default/configmaps"
CONFIG_PATH: Final = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"


def serve_webhook(port: int, cert_dir: Path) -> None:
    """The webhook process: allow every review (GET /count answers how many it saw; the readiness probe)."""
    from aiohttp import web  # noqa: PLC0415 - only the webhook process needs it

    from kubemesh.services.machinery.certs import ensure_certs, server_context  # noqa: PLC0415 - as above

    certs = ensure_certs(cert_dir, hosts=("hook.bench.svc",))
    reviewed = itertools.count(1)
    seen = [0]

    async def review(request: web.Request) -> web.Response:
        doc = orjson.loads(await request.read())
        seen[0] = next(reviewed)
        return web.Response(body=orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                               "response": {"uid": doc["request"]["uid"], "allowed": True}}),
                            content_type="application/json")

    async def count(_request: web.Request) -> web.Response:
        return web.Response(text=str(seen[0]))

    app = web.Application()
    app.router.add_post("/validate", review)
    app.router.add_get("/count", count)
    web.run_app(app, host="127.0.0.1", port=port, ssl_context=server_context(certs.cert, certs.key),
                print=None, access_log=None)


def start_webhook(tmp: Path, cores: set[int] | None) -> tuple[subprocess.Popen[bytes], int, str]:
    """The webhook process, its port and its CA (base64 PEM, as caBundle wants it)."""
    from kubemesh.services.machinery.certs import ensure_certs  # noqa: PLC0415 - the launcher's CA maker

    port = free_port()
    cert_dir = tmp / "webhook-pki"
    ca = ensure_certs(cert_dir, hosts=("hook.bench.svc",)).ca_data()
    with open(tmp / "webhook.log", "wb") as log:
        proc = subprocess.Popen([PYTHON, __file__, "--serve-webhook", str(port), str(cert_dir)], env=child_env(),
                                stdout=log, stderr=subprocess.STDOUT)
    pin(proc.pid, cores)
    deadline = time.monotonic() + 30
    ctx = ssl.create_default_context(cafile=str(cert_dir / "ca.crt"))
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"https://127.0.0.1:{port}/count", timeout=1, context=ctx):
                return proc, port, ca
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the webhook server did not start: {(tmp / 'webhook.log').read_text()}")


async def creates(port: int, seconds: float, connections: int, prefix: str) -> dict[str, Any]:
    """Create ConfigMaps for `seconds` over keep-alive connections: creates, errors, creates/s."""

    def next_request(i: int) -> tuple[bytes, int]:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"{prefix}-{i:07d}"},
                "data": {"seq": str(i)}}
        return build_request("POST", CM_PATH, encode(body, "msgpack"), "msgpack"), 201

    done = await closed_loop(port, next_request, duration=seconds, connections=connections)
    return {"creates": done["ok"], "errors": done["errors"], "seconds": done["seconds"],
            "creates_per_s": done["ok"] / done["seconds"]}


async def json_call(port: int, method: str, path: str, body: Any = None) -> int:
    conn = await HttpConnection.open(port)
    try:
        return await conn.request(build_request(method, path, orjson.dumps(body) if body is not None else b"",
                                                "json"))
    finally:
        conn.close()


def webhook_config(port: int, ca: str) -> dict[str, Any]:
    return {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": "bench"},
            "webhooks": [{"name": "noop.bench.example.com", "sideEffects": "None",
                          "admissionReviewVersions": ["v1"], "failurePolicy": "Fail",
                          "clientConfig": {"url": f"https://127.0.0.1:{port}/validate", "caBundle": ca},
                          "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                                     "resources": ["configmaps"]}]}]}


async def rounds(args: argparse.Namespace, api_port: int, hook_port: int, ca: str) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {"without": [], "with": []}
    await creates(api_port, min(1.0, args.duration), args.connections, "warm")
    for r in range(args.rounds):
        out["without"].append(await creates(api_port, args.duration, args.connections, f"r{r}-plain"))
        status = await json_call(api_port, "POST", CONFIG_PATH, webhook_config(hook_port, ca))
        if status != 201:
            raise RuntimeError(f"creating the webhook configuration: HTTP {status}")
        out["with"].append(await creates(api_port, args.duration, args.connections, f"r{r}-hooked"))
        await json_call(api_port, "DELETE", f"{CONFIG_PATH}/bench")
        print(f"  round {r + 1}: without {out['without'][-1]['creates_per_s']:.0f}/s, "
              f"with {out['with'][-1]['creates_per_s']:.0f}/s", flush=True)
    return out


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--serve-webhook":
        serve_webhook(int(sys.argv[2]), Path(sys.argv[3]))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=5.0, help="seconds per phase")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--quick", action="store_true", help="1 s phases, 1 round (a smoke run)")
    p.add_argument("--no-pin", action="store_true", help="do not pin the servers to a core")
    p.add_argument("--nice", type=int, default=0)
    p.add_argument("--results-dir", type=Path, default=None)
    args = p.parse_args()
    if args.quick:
        args.duration, args.rounds = 1.0, 1
    apply_nice(args.nice)
    srv_cores, load_cores = (None, None) if args.no_pin else server_cores()
    print(f"webhook_writes: {args.rounds} rounds of {args.duration:g} s per phase, {args.connections} connections",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="kubemesh-bench-") as tmp:
        server = ServerProcess.start("apiserver", cores=srv_cores, log_dir=Path(tmp))
        hook, hook_port, ca = start_webhook(Path(tmp), load_cores)
        pin(os.getpid(), load_cores)
        try:
            data = run_loop(lambda: rounds(args, server.port, hook_port, ca))
        finally:
            hook.terminate()
            hook.wait(5)
            server.stop()

    def median(xs: list[float]) -> float:
        return sorted(xs)[len(xs) // 2]

    summary = {phase: {"creates_per_s": median([x["creates_per_s"] for x in runs]),
                       "errors": sum(x["errors"] for x in runs), "creates": sum(x["creates"] for x in runs)}
               for phase, runs in data.items()}
    ratio = summary["with"]["creates_per_s"] / summary["without"]["creates_per_s"]
    print(table(["phase", "creates/s (median)", "creates", "errors"],
                [[ph, s["creates_per_s"], s["creates"], s["errors"]] for ph, s in summary.items()]))
    print(f"ratio with/without: {ratio:.2f}")
    path = write_results("webhook_writes", {
        "benchmark": "webhook_writes", "machine": machine(),
        "config": {"duration": args.duration, "rounds": args.rounds, "connections": args.connections},
        "rounds": data, "results": summary, "ratios": {"with_vs_without": ratio},
    }, args.results_dir)
    print(f"results: {path}")


if __name__ == "__main__":
    main()

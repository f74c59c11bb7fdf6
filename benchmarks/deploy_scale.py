"""Deploy scale: deploy/ applied as `kubemesh plan` plans it, on kubemesh's own process runtime,
measured beside the plan's prediction.

An outer mesh (`kubemesh up --runtime process`, one node, the image `kubemesh:latest` mapped to
this checkout's `scripts/docker-entrypoint`) receives deploy/base with the patches that
`kubemesh plan --nodes N --kubelet-hosts H --apiservers 1 --kustomize` writes, and the changes a
single machine needs (as in tests/deploy/test_deploy_on_process_runtime.py): free ports,
127.0.0.1 instead of Service names, one etcd member on an emptyDir, admin endpoints on any free
port (so no readiness probe on them), the Secret published by this script instead of the Job
(the process runtime gives pods no ServiceAccount token). Several apiservers would each need a
port and something to spread clients over them, which the process runtime does not have: one
apiserver here.

Once every inner node is Ready, the inner processes are held `--hold` seconds at real cadence;
their CPU and resident memory, per component, are printed beside what the plan predicted for the
same topology (`ratio` = measured ÷ predicted; issue #27 asks for 0.8 to 1.2).

Run: `.venv/bin/python benchmarks/deploy_scale.py [--nodes 2000] [--hosts 2] [--hold 60] [--quick]`.
Writes `benchmarks/results/deploy_scale.json`.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import importlib.machinery
import importlib.util
import io
import json
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from _common import REPO, machine, run_loop, table, write_results
from kubelet_capacity import CpuWindow

from kubemesh.services.machinery.client import ApiClient, ApiError
from kubemesh.services.mesh.endpoint import node_is_ready
from kubemesh.services.mesh.launching import Mesh, MeshSpec
from kubemesh.services.mesh.state import free_port
from kubemesh.services.model.kinds import NODES, PODS
from kubemesh.services.tools import cli
from kubemesh.services.tools.planning import PlanSettings, load_unit_costs, plan

ENTRYPOINT = REPO / "scripts" / "docker-entrypoint"
COMPONENTS = {"kubemesh.apiserver": "apiserver", "kubemesh.kubelet": "kubelet",
              "kubemesh.controller_manager": "controller-manager", "kubemesh.scheduler": "scheduler"}


def secret_body(tmp: Path, server: str, token: str) -> dict[str, Any]:
    loader = importlib.machinery.SourceFileLoader("kubemesh_entrypoint", str(ENTRYPOINT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    body: dict[str, Any] = module.secret_body("kubemesh-cluster", namespace="default", server=server, token=token,
                                              hosts=("kubemesh-apiserver",), workdir=tmp)
    return body


def env_patch(kind: str, name: str, container: str, env: dict[str, str], replicas: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": {"spec": {"containers": [
        {"name": container, "env": [{"name": k, "value": v} for k, v in env.items()]}]}}}
    if replicas is not None:
        spec["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def json_patch(kind: str, name: str, ops: list[dict[str, Any]]) -> dict[str, Any]:
    return {"target": {"kind": kind, "name": name}, "patch": json.dumps(ops)}


def write_overlay(root: Path, args: argparse.Namespace, ports: dict[str, int]) -> Path:
    """deploy/base + the plan's patches + what one machine's process runtime needs."""
    overlay = root / "overlay"
    planned = overlay / "plan"
    with contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(["plan", "--nodes", str(args.nodes), "--kubelet-hosts", str(args.hosts), "--apiservers", "1",
                         "--kustomize", str(planned)])
    assert code == 0
    inner = f"https://127.0.0.1:{ports['apiserver']}"
    client, peer = f"http://127.0.0.1:{ports['etcd']}", f"http://127.0.0.1:{ports['peer']}"
    local = [
        env_patch("StatefulSet", "kubemesh-etcd", "etcd", {
            "ETCD_DATA_DIR": "var/lib/etcd", "ETCD_LISTEN_CLIENT_URLS": client, "ETCD_ADVERTISE_CLIENT_URLS": client,
            "ETCD_LISTEN_PEER_URLS": peer, "ETCD_INITIAL_ADVERTISE_PEER_URLS": peer,
            "ETCD_INITIAL_CLUSTER": f"kubemesh-etcd-0={peer}"}, replicas=1),
        env_patch("Deployment", "kubemesh-apiserver", "apiserver", {
            "KUBEMESH_ETCD_ENDPOINTS": client, "KUBEMESH_APISERVER_PORT": str(ports["apiserver"])}),
        *[env_patch(kind, f"kubemesh-{name}", name, {"KUBEMESH_APISERVER": inner, "KUBEMESH_ADMIN_PORT": "0"})
          for kind, name in (("StatefulSet", "kubelet"), ("Deployment", "scheduler"),
                             ("Deployment", "controller-manager"))],
        {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "kubemesh-bootstrap"}, "$patch": "delete"},
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "kubemesh-etcd"},
         "spec": {"template": {"spec": {"volumes": [{"name": "data", "emptyDir": {}}]}}}},
    ]
    patches: list[dict[str, Any]] = [{"path": f"plan/{p.name}"} for p in sorted(planned.iterdir())]
    for i, patch in enumerate(local):
        (overlay / f"local-{i}.yaml").write_text(yaml.safe_dump(patch))
        patches.append({"path": f"local-{i}.yaml"})
    first_port = "/spec/template/spec/containers/0/ports/0/containerPort"
    probe = "/spec/template/spec/containers/0/readinessProbe"
    patches += [
        json_patch("StatefulSet", "kubemesh-etcd", [{"op": "remove", "path": "/spec/volumeClaimTemplates"},
                                                    {"op": "replace", "path": first_port, "value": ports["etcd"]},
                                                    {"op": "replace", "path": f"{probe}/httpGet/port",
                                                     "value": ports["etcd"]}]),
        json_patch("Deployment", "kubemesh-apiserver", [{"op": "replace", "path": first_port,
                                                         "value": ports["apiserver"]}]),
        *[json_patch(kind, f"kubemesh-{name}", [{"op": "remove", "path": probe}])
          for kind, name in (("StatefulSet", "kubelet"), ("Deployment", "scheduler"),
                             ("Deployment", "controller-manager"))],
    ]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(
        {"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
         "resources": [os.path.relpath(REPO / "deploy" / "base", overlay)], "patches": patches}))
    return overlay


def kubectl(mesh: Mesh, *args: str, input: str | None = None) -> str:
    env = {**os.environ, "KUBECONFIG": str(mesh.state_dir / "kubeconfig"), "HOME": str(mesh.state_dir)}
    out = subprocess.run([shutil.which("kubectl") or "kubectl", *args], env=env, input=input, capture_output=True,
                         text=True, timeout=300, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)}: {out.stderr}")
    return out.stdout


def inner_processes(root: Path) -> dict[str, int]:
    """{name: pid} of the inner components and etcd (processes working inside the runtime's root)."""
    found: dict[str, int] = {}
    for proc in sorted(Path("/proc").glob("[0-9]*"), key=lambda p: int(p.name)):
        try:
            cwd = Path(os.readlink(proc / "cwd"))
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not cwd.is_relative_to(root.resolve()):
            continue
        words = [w.decode(errors="replace") for w in cmd]
        component = next((COMPONENTS[w] for w in words if w in COMPONENTS), None)
        if component is None and words and Path(words[0]).name == "etcd":
            component = "etcd"
        if component is not None:
            found[f"{component}#{proc.name}"] = int(proc.name)
    return found


async def run(args: argparse.Namespace) -> dict[str, Any]:
    ports = {name: free_port() for name in ("etcd", "peer", "apiserver")}
    token = "deploy-scale"
    command = f"env PYTHONPATH={REPO} {sys.executable} {ENTRYPOINT}"
    with tempfile.TemporaryDirectory(prefix="deploy-scale-") as tmp_name:
        tmp = Path(tmp_name)
        spec = MeshSpec(nodes=1, runtime="process", capacity="cpu=64,memory=256Gi,pods=110", state_dir=tmp / "outer",
                        log_level="warning", extra_args={"kubelet": ["--image-command", f"kubemesh:latest={command}"]})
        overlay = write_overlay(tmp, args, ports)
        secret = secret_body(tmp / "pki", f"https://127.0.0.1:{ports['apiserver']}", token)
        ca = tmp / "inner-ca.crt"
        ca.write_bytes(base64.b64decode(secret["data"]["ca.crt"]))
        async with Mesh(spec) as mesh:
            t0 = time.monotonic()
            kubectl(mesh, "apply", "-f", "-", input=json.dumps(secret))
            kubectl(mesh, "apply", "-k", str(overlay))
            inner = ApiClient(f"https://127.0.0.1:{ports['apiserver']}", component="bench", instance="deploy-scale",
                              token=token, ssl_context=ssl.create_default_context(cafile=str(ca)))
            result: dict[str, Any] = {"nodes": args.nodes, "hosts": args.hosts}
            async with inner:
                ready = 0
                while time.monotonic() - t0 < args.ready_timeout:
                    with contextlib.suppress(ApiError, OSError):
                        items = (await inner.list(NODES)).get("items") or []
                        ready = sum(1 for n in items if node_is_ready(n))
                        if ready >= args.nodes:
                            break
                    await asyncio.sleep(2.0)
                result["ready"] = ready
                result["ready_s"] = round(time.monotonic() - t0, 1)
                print(f"  {ready} of {args.nodes} inner nodes Ready after {result['ready_s']} s", flush=True)
                if ready < args.nodes:
                    return result
                await asyncio.sleep(args.settle)
                pids = inner_processes(mesh.state_dir / "pods")
                window = CpuWindow(pids)
                window.start()
                await asyncio.sleep(args.hold)
                cpu = window.stop()
                items = (await inner.list(NODES)).get("items") or []
                result["ready_after_hold"] = sum(1 for n in items if node_is_ready(n))
            measured: dict[str, dict[str, float]] = {}
            for name, v in cpu.items():
                if "#" in name:
                    m = measured.setdefault(name.split("#")[0], {"cores": 0.0, "mib": 0.0, "processes": 0})
                    m["cores"] += v["cpu_cores"]
                    m["mib"] += v["rss_mb"]
                    m["processes"] += 1
            result["measured"] = measured
            result["machine"] = cpu["machine"]
            async with mesh.client("bench") as outer:
                kubectl(mesh, "delete", "-k", str(overlay), "--wait=true")
                for _ in range(120):  # the pods' grace periods
                    if not (await outer.list(PODS, namespace="default"))["items"]:
                        break
                    await asyncio.sleep(1.0)
    return result


def compare(args: argparse.Namespace, result: dict[str, Any]) -> list[dict[str, Any]]:
    """Per component: the plan's cores and MiB (every replica) beside the measured ones."""
    p = plan(PlanSettings(nodes=args.nodes, kubelet_hosts=args.hosts, apiservers=1), load_unit_costs())
    rows = []
    for part in p.parts:
        m = result["measured"].get(part.name)
        if m is None:
            continue
        replicas = 1 if part.name == "etcd" else part.replicas
        # A standby replica (leader election) does no work: the plan's cores are the active one's.
        cores = part.cores * (part.active or replicas)
        mib = part.mib * replicas
        rows.append({"component": part.name, "processes": m["processes"], "predicted_cores": round(cores, 3),
                     "measured_cores": round(m["cores"], 3),
                     "cores_ratio": round(m["cores"] / cores, 2) if cores else None,
                     "predicted_mib": round(mib), "measured_mib": round(m["mib"]),
                     "mib_ratio": round(m["mib"] / mib, 2) if mib else None})
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--nodes", type=int, default=None, help="inner nodes (default 2000; --quick 100)")
    p.add_argument("--hosts", type=int, default=None, help="kubelet hosts (default 2; --quick 1)")
    p.add_argument("--hold", type=float, default=None, help="seconds measured (default 60; --quick 10)")
    p.add_argument("--settle", type=float, default=10.0, help="seconds between all Ready and the measurement")
    p.add_argument("--ready-timeout", type=float, default=300.0)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--results-dir", type=Path, default=None)
    a = p.parse_args(argv)
    a.nodes = a.nodes or (100 if a.quick else 2000)
    a.hosts = a.hosts or (1 if a.quick else 2)
    a.hold = a.hold if a.hold is not None else (10.0 if a.quick else 60.0)
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    print(f"deploy_scale: deploy/ as planned for {args.nodes} nodes on {args.hosts} kubelet host(s), one apiserver "
          f"over etcd, on a process-runtime mesh; hold {args.hold:g} s", flush=True)
    result = run_loop(lambda: run(args))
    if result.get("ready", 0) < args.nodes:
        write_results("deploy_scale", {"benchmark": "deploy_scale", "machine": machine(), "result": result},
                      args.results_dir)
        print("not every inner node became Ready")
        return 1
    rows = compare(args, result)
    result["comparison"] = rows
    path = write_results("deploy_scale", {"benchmark": "deploy_scale", "machine": machine(),
                                          "config": {k: str(v) for k, v in vars(args).items()}, "result": result},
                         args.results_dir)
    print(table(["component", "processes", "plan cores", "cores", "ratio", "plan MiB", "MiB", "ratio"],
                [[r["component"], r["processes"], r["predicted_cores"], r["measured_cores"], r["cores_ratio"],
                  r["predicted_mib"], r["measured_mib"], r["mib_ratio"]] for r in rows]))
    print(f"other processes of the machine: {result['machine']['other_processes_cores']:.2f} cores; "
          f"{result['ready_after_hold']} of {args.nodes} inner nodes Ready after the hold")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

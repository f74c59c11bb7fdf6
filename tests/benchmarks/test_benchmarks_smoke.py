"""The benchmarks run end to end in `--quick` mode and write their JSON: no timing is asserted.

Each benchmark starts its own servers and clients as processes, so these tests only check
that the figures exist with the keys the README documents, never what they are.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"

pytestmark = pytest.mark.slow

PHASE_KEYS = {"writes_per_s", "writes_per_cpu_s", "ok", "errors", "p50_ms", "p99_ms", "server_cpu", "client_cpu",
              "drain_s", "watch_events_min", "watchers_open"}
LATENCY_KEYS = {"p50_ms", "p90_ms", "p99_ms", "p999_ms", "max_ms", "samples", "write_rate", "deliveries_per_s",
                "events_min", "events_expected", "watchers", "watchers_open", "server_cpu", "watcher_cpu"}


def run(script: str, out: Path, *extra: str) -> dict[str, Any]:
    """Run a benchmark with --quick into `out`; its JSON document."""
    proc = subprocess.run([sys.executable, str(BENCH / script), "--quick", "--no-pin", "--results-dir", str(out),
                           *extra], cwd=REPO, check=False, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    name = script.removesuffix(".py")
    assert f"results: {out / name}.json" in proc.stdout
    doc: dict[str, Any] = json.loads((out / f"{name}.json").read_text())
    assert doc["benchmark"] == name
    assert {"machine", "config", "results", "ratios_vs_bare", "target"} <= doc.keys()
    return doc


def check_writes(doc: dict[str, Any]) -> None:
    """Every server-encoding has every phase, and every ratio is there."""
    assert set(doc["results"]) == {"apiserver-json", "apiserver-msgpack", "bare-json", "bare-msgpack"}
    for phases in doc["results"].values():
        assert set(phases) == {"create", "update", "mixed"}
        for ph in phases.values():
            assert ph.keys() >= PHASE_KEYS
            assert ph["ok"] > 0
    assert set(doc["ratios_vs_bare"]) == {"apiserver-json", "apiserver-msgpack"}
    assert set(doc["ratios_vs_bare"]["apiserver-msgpack"]) == {"create", "update", "mixed"}
    assert set(doc["cpu_ratios_vs_bare"]) == {"apiserver-json", "apiserver-msgpack"}
    assert isinstance(doc["target"]["met"], bool)


@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk is not installed")
def test_apiserver_writes_quick_with_wrk(tmp_path: Path) -> None:
    check_writes(run("apiserver_writes.py", tmp_path, "--client", "wrk"))


def test_apiserver_writes_quick_with_python_clients(tmp_path: Path) -> None:
    doc = run("apiserver_writes.py", tmp_path, "--client", "python")
    check_writes(doc)
    assert doc["config"]["client"].startswith("python")


def test_watch_latency_quick(tmp_path: Path) -> None:
    # 4 of the 10 watchers timed, in a process of their own; the other 6 only count what they read.
    doc = run("watch_latency.py", tmp_path, "--timed-watchers", "4")
    assert doc["config"]["timed_watchers"] == 4
    assert set(doc["results"]) == {"apiserver", "bare"}
    for r in doc["results"].values():
        assert r.keys() >= LATENCY_KEYS
        assert r["samples"] > 0
        assert r["watchers"] == doc["config"]["watchers"]
        assert r["events_min"] == r["events_expected"]  # every watcher, timed or not, got every event
        assert r["server_cpu_us_per_delivery"] > 0
    assert set(doc["ratios_vs_bare"]) == {"apiserver"}
    assert isinstance(doc["target"]["met"], bool)


def test_custom_resources_quick(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "custom_resources.py"), "--quick", "--no-pin",
                           "--results-dir", str(tmp_path)], cwd=REPO, check=False, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc: dict[str, Any] = json.loads((tmp_path / "custom_resources.json").read_text())
    assert doc["benchmark"] == "custom_resources"
    assert set(doc["results"]) == {"pods", "widgets"}
    assert {"create", "update", "latency_p99"} <= set(doc["ratios"])
    assert all(r["errors"] == 0 for rounds in doc["rounds"].values() for r in rounds)
    assert isinstance(doc["target"]["met"], bool)


def test_list_paging_quick(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "list_paging.py"), "--quick", "--no-pin",
                           "--results-dir", str(tmp_path)], cwd=REPO, check=False, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc: dict[str, Any] = json.loads((tmp_path / "list_paging.json").read_text())
    assert doc["benchmark"] == "list_paging"
    assert set(doc["results"]) == {"full", "paged", "paged_under_writes"}
    assert doc["results"]["paged"]["items"] == doc["results"]["full"]["items"] == doc["config"]["pods"]
    assert {"paged_vs_full", "under_writes_vs_paged", "first_page_vs_full"} == set(doc["ratios"])


def test_protobuf_creates_quick(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "protobuf_creates.py"), "--quick", "--no-pin",
                           "--results-dir", str(tmp_path)], cwd=REPO, check=False, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc: dict[str, Any] = json.loads((tmp_path / "protobuf_creates.json").read_text())
    assert doc["benchmark"] == "protobuf_creates"
    assert set(doc["results"]) == {"json", "protobuf"}
    assert {"create", "create_per_cpu"} <= set(doc["ratios"])
    assert isinstance(doc["target"]["met"], bool)


def test_webhook_writes_quick(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "webhook_writes.py"), "--quick", "--no-pin",
                           "--results-dir", str(tmp_path)], cwd=REPO, check=False, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc: dict[str, Any] = json.loads((tmp_path / "webhook_writes.json").read_text())
    assert doc["benchmark"] == "webhook_writes"
    assert set(doc["results"]) == {"without", "with"}
    assert all(r["errors"] == 0 and r["creates"] > 0 for r in doc["results"].values())
    assert doc["ratios"]["with_vs_without"] > 0


def test_durable_writes_quick(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "durable_writes.py"), "--quick", "--no-pin",
                           "--results-dir", str(tmp_path)], cwd=REPO, check=False, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc: dict[str, Any] = json.loads((tmp_path / "durable_writes.json").read_text())
    assert doc["benchmark"] == "durable_writes"
    # CI runs scripts/setup as root, which installs etcd (scripts/etcd-setup): there it must be measured.
    with_etcd = shutil.which("etcd") is not None or os.environ.get("CI", "").lower() in ("1", "true", "yes")
    servers = {"fsync", "nofsync", "etcd"} if with_etcd else {"fsync", "nofsync"}
    assert set(doc["results"]) == servers
    assert all(r["errors"] == 0 and r["writes"] > 0 for r in doc["results"].values())
    assert doc["ratios"]["fsync_vs_nofsync"] > 0
    assert isinstance(doc["target"]["met"], bool)


def test_rbac_writes_quick(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH / "rbac_writes.py"), "--quick", "--no-pin",
                           "--results-dir", str(tmp_path)], cwd=REPO, check=False, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc: dict[str, Any] = json.loads((tmp_path / "rbac_writes.json").read_text())
    assert doc["benchmark"] == "rbac_writes"
    assert set(doc["results"]) == {"rbac", "off"}
    assert all(r["errors"] == 0 for rs in doc["rounds"].values() for r in rs)
    assert isinstance(doc["target"]["met"], bool)


def test_etcd_clients_quick(tmp_path: Path) -> None:
    if shutil.which("etcd") is None and not Path("/usr/bin/etcd").exists():
        pytest.skip("etcd is not installed (scripts/etcd-setup installs it)")
    proc = subprocess.run([sys.executable, str(BENCH / "etcd_clients.py"), "--quick", "--no-pin",
                           "--results-dir", str(tmp_path)], cwd=REPO, check=False, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc: dict[str, Any] = json.loads((tmp_path / "etcd_clients.json").read_text())
    assert doc["benchmark"] == "etcd_clients"
    assert set(doc["results"]) == {"grpc", "gateway"}
    for figures in doc["results"].values():
        assert figures["cas1.writes_per_s"] > 0 and figures["cas32.cpu_us_per_write"] > 0
        assert figures["range1000.ms_per_range"] > 0 and figures["watch.events_per_s"] > 0
    assert doc["choice"] in ("grpc", "gateway")


def test_mesh_scale_small(tmp_path: Path) -> None:
    """`kubemesh up`'s defaults at a small count: all Ready, held, costs per 1,000 nodes written."""
    proc = subprocess.run([sys.executable, str(BENCH / "mesh_scale.py"), "--nodes", "50", "--hold", "10",
                           "--sample-interval", "5", "--results-dir", str(tmp_path)], cwd=REPO, check=False,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc: dict[str, Any] = json.loads((tmp_path / "mesh_scale.json").read_text())
    result = doc["result"]
    assert result["started"] and result["kubelets"] == [{"instance": "kubelet-0", "nodes": 50, "pod_watch": "per-node"}]
    hold = result["hold"]
    assert hold["passed"] and hold["false_not_ready_max"] == 0 and hold["leases"]["renewals_seen"] > 0
    assert set(hold["per_1000_nodes"]) == {"apiserver", "kubelet-0", "controller-manager", "scheduler"}
    assert hold["nodes_per_core"] > 0 and doc["references"]["kubemark_cores_per_hollow_node"] == 0.09


def test_unit_costs_small(tmp_path: Path) -> None:
    """The unit costs at small sizes, written where asked, and read back by `kubemesh plan`."""
    if shutil.which("etcd") is None and not Path("/usr/bin/etcd").exists():
        pytest.skip("etcd is not installed (scripts/etcd-setup installs it)")
    costs = tmp_path / "costs.json"
    proc = subprocess.run([sys.executable, str(BENCH / "unit_costs.py"), "--quick", "--sizes", "20,60", "--hold", "10",
                           "--seconds", "2", "--pods", "50", "--etcd-load", "s", "--out", str(costs),
                           "--results-dir", str(tmp_path)], cwd=REPO, check=False, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc: dict[str, Any] = json.loads(costs.read_text())
    assert {"kubelet", "apiserver", "controller_manager", "scheduler", "etcd"} <= doc.keys()
    assert doc["apiserver"]["cores_per_1000_writes_per_s"] > 0 and doc["etcd"]["writes_per_s"] > 0
    assert [r["nodes"] for r in doc["runs"]["nodes"]] == [20, 60]
    plan = subprocess.run([sys.executable, "-m", "kubemesh", "plan", "--nodes", "1000", "--costs", str(costs),
                           "--json"], cwd=REPO, check=False, capture_output=True, text=True, timeout=60)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["kubelet_hosts"] >= 1


def test_deploy_scale_quick(tmp_path: Path) -> None:
    """deploy/ as planned on a process-runtime mesh: inner nodes Ready, every inner component measured."""
    if shutil.which("etcd") is None and not Path("/usr/bin/etcd").exists():
        pytest.skip("etcd is not installed (scripts/etcd-setup installs it)")
    proc = subprocess.run([sys.executable, str(BENCH / "deploy_scale.py"), "--quick", "--hold", "3",
                           "--results-dir", str(tmp_path)], cwd=REPO, check=False, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads((tmp_path / "deploy_scale.json").read_text())["result"]
    assert result["ready"] == result["nodes"] == 100
    assert {r["component"] for r in result["comparison"]} == {"etcd", "apiserver", "kubelet", "controller-manager",
                                                              "scheduler"}
    assert all(r["measured_mib"] > 0 and r["predicted_mib"] > 0 for r in result["comparison"])

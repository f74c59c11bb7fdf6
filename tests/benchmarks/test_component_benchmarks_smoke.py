"""The component benchmarks run end to end in `--quick` mode and write their JSON: no timing is asserted.

Each benchmark starts its own apiserver and components as processes; these tests only check
that the figures exist with the keys the benchmarks document, never what they are (the
machine has two shared cores). The kubelet benchmark's hold is shortened further here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCH = REPO / "benchmarks"

pytestmark = pytest.mark.slow


def run(script: str, out: Path, *extra: str) -> dict[str, Any]:
    """Run a benchmark with --quick into `out`; its JSON document."""
    proc = subprocess.run([sys.executable, str(BENCH / script), "--quick", "--no-pin", "--results-dir", str(out),
                           *extra], cwd=REPO, check=False, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    name = script.removesuffix(".py")
    assert f"results: {out / name}.json" in proc.stdout
    doc: dict[str, Any] = json.loads((out / f"{name}.json").read_text())
    assert doc["benchmark"] == name
    assert {"machine", "config", "results", "references", "target"} <= doc.keys()
    assert isinstance(doc["target"]["met"], bool)
    return doc


def check_cpu(cpu: dict[str, Any], processes: set[str]) -> None:
    assert processes <= cpu.keys()
    for name in processes:
        assert {"cpu_cores", "rss_mb", "peak_rss_mb"} <= cpu[name].keys()
    assert {"busy_cores", "other_processes_cores"} <= cpu["machine"].keys()


def test_kubelet_capacity_quick(tmp_path: Path) -> None:
    doc = run("kubelet_capacity.py", tmp_path, "--hold", "8", "--sample-interval", "4")
    steps = doc["results"]["steps"]
    assert [s["nodes"] for s in steps] == [200]
    step = steps[0]
    assert isinstance(step["passed"], bool), step.get("failure")
    assert {"all_registered_s", "all_leases_s", "nodes_per_s", "cpu"} <= step["registration"].keys()
    hold = step["hold"]
    assert {"lag_p50_s", "lag_p99_s", "lag_max_s", "gap_max_s", "nodes_over_duration", "sample_count", "samples",
            "cpu"} <= hold.keys()
    assert hold["sample_count"] == len(hold["samples"]) >= 2
    assert all(s["leases"] == 200 for s in hold["samples"])
    check_cpu(hold["cpu"], {"apiserver", "kubelet"})
    assert "kubelet_cores_per_node" in step
    assert "max_nodes_held" in doc["results"]


def test_scheduler_throughput_quick(tmp_path: Path) -> None:
    doc = run("scheduler_throughput.py", tmp_path, "--core")
    assert set(doc["results"]) == {"100/plain/streaming", "100/anti-affinity/streaming"}
    core = doc["core"]
    assert set(core["cases"]) == {"plain/index", "anti-affinity/index", "anti-affinity/scan"}
    for c in core["cases"].values():
        assert c["unschedulable"] == 0 and c["pods_per_cpu_s"] > 0
        assert set(c["split"]) == {"prepass", "filter", "score", "assume"}
    assert {"anti_over_plain", "anti_over_plain_with_scan", "index_over_scan"} <= core.keys()
    for case in doc["results"].values():
        assert {"throughput_pods_per_s", "first_to_last_binding_pods_per_s", "max_bound_in_1s", "pod_creation",
                "bound", "latency_p50_s", "latency_p99_s",
                "anti_affinity_violations", "vs_scheduler_perf_floor", "cpu"} <= case.keys()
        assert case["bound"] == case["pods"] == 200
        assert case["anti_affinity_violations"] == 0
        check_cpu(case["cpu"], {"apiserver", "scheduler"})
    assert set(doc["target"]["per_kind"]) == {"plain", "anti-affinity"}


def test_deployment_startup_quick(tmp_path: Path) -> None:
    doc = run("deployment_startup.py", tmp_path)
    assert set(doc["results"]) == {"start_delay_1"}
    case = doc["results"]["start_delay_1"]
    assert case["running"] == case["replicas"] == 100
    for key in ("latency_watch", "latency_creation_timestamp"):
        assert {"p50_s", "p99_s", "max_s", "count"} <= case[key].keys()
    assert {"all_running_s", "all_created_s", "all_bound_s", "mesh_ready_s"} <= case.keys()
    # each pod's way to Running, hop by hop, from the apiserver's history
    assert case["hops"].keys() == {"created->scheduler", "scheduler->bound", "bound->kubelet", "kubelet->status",
                                   "status->running", "running->seen", "total"}
    assert all(h["count"] == 100 for h in case["hops"].values())
    assert {"apiserver", "scheduler", "controller-manager"} <= case["cpu"].keys()

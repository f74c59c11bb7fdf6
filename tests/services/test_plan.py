"""`kubemesh plan`: the model of docs/capacity.md, on unit costs chosen here (round numbers, so that
every figure can be checked by hand) and on the measured ones installed with kubemesh.

With these costs (per 1,000 nodes: kubelet 0.1 core and 50 MiB + 100 MiB; apiserver 1 core per
1,000 writes/s and 0.1 per 1,000 watch events/s; etcd 5,000 writes/s):

* 100 nodes: 10 lease renewals/s + 1/3 status posts/s; one host, one apiserver, one etcd member,
  one scheduler and controller-manager;
* 10,000 nodes: 1,033.3 writes/s; a host takes 0.6 core ÷ 0.1 = 6,000 nodes but at most 5,000,
  so 2 hosts of 5,000; watch events 1,000 + 33.3 x (2 + 2) = 1,133.3/s; apiservers: shared work
  1.0333 + 0.1133 = 1.1467 cores, intake 0.1033 per replica, room 0.4967 each: 3 replicas;
* 100,000 nodes: 10,333 writes/s, beyond etcd's 5,000 (first bottleneck at 48,387 nodes);
  longer leases (`--lease-seconds 40`) bring it under.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from kubemesh.services.tools import cli
from kubemesh.services.tools.planning import load_unit_costs

COSTS: dict[str, Any] = {
    "measured": "2026-01-01T00:00:00Z",
    "kubelet": {"cores_per_1000_nodes": 0.1, "mib_base": 50, "mib_per_1000_nodes": 100},
    "controller_manager": {"cores_per_1000_nodes": 0.02, "mib_base": 50, "mib_per_1000_nodes": 10},
    "scheduler": {"cores_per_1000_nodes": 0.0, "mib_base": 40, "mib_per_1000_nodes": 10},
    "apiserver": {"cores_per_1000_nodes": 0.1, "mib_base": 60, "mib_per_1000_nodes": 50, "mib_per_1000_pods": 20,
                  "cores_per_1000_writes_per_s": 1.0, "cores_per_1000_watch_events_per_s": 0.1},
    "etcd": {"writes_per_s": 5000, "cores_per_1000_writes_per_s": 0.5},
}


def plan(tmp_path: Path, *args: str) -> tuple[int, str]:
    costs = tmp_path / "costs.json"
    costs.write_text(json.dumps(COSTS))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["plan", "--costs", str(costs), *args])
    return code, out.getvalue()


def plan_doc(tmp_path: Path, *args: str) -> dict[str, Any]:
    code, out = plan(tmp_path, *args, "--json")
    assert code == 0
    doc: dict[str, Any] = json.loads(out)
    return doc


def parts(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in doc["parts"]}


def test_a_hundred_nodes_is_one_of_each(tmp_path: Path) -> None:
    doc = plan_doc(tmp_path, "--nodes", "100")
    assert doc["writes_per_s"] == pytest.approx(10.3, abs=0.05)
    assert (doc["kubelet_hosts"], doc["nodes_per_host"]) == (1, 100)
    assert {name: p["replicas"] for name, p in parts(doc).items()} == {
        "etcd": 1, "apiserver": 1, "kubelet": 1, "controller-manager": 1, "scheduler": 1}
    kubelet = parts(doc)["kubelet"]
    assert kubelet["mib"] == pytest.approx(60.0)  # 50 + 0.1 x 100
    assert (kubelet["memory_request"], kubelet["memory_limit"]) == ("80Mi", "160Mi")  # x 1.25, x 2, in 16 Mi steps
    assert kubelet["cpu_request"] == "20m"  # 0.01 core x 1.25, in 10 m steps


def test_ten_thousand_nodes(tmp_path: Path) -> None:
    doc = plan_doc(tmp_path, "--nodes", "10000", "--pods", "30000")
    assert doc["writes_per_s"] == pytest.approx(1033.3, abs=0.05)
    assert (doc["kubelet_hosts"], doc["nodes_per_host"]) == (2, 5000)
    assert doc["watch_events_per_s"] == pytest.approx(1133.3, abs=0.05)
    p = parts(doc)
    assert p["apiserver"]["replicas"] == 3
    assert p["apiserver"]["cores"] == pytest.approx(1.14667 / 3 + 0.10333, abs=1e-3)
    assert p["apiserver"]["mib"] == pytest.approx(60 + 500 + 600)  # base + nodes + pods, in every replica
    assert (p["etcd"]["replicas"], p["controller-manager"]["replicas"], p["controller-manager"]["active"]) == (3, 2, 1)
    assert doc["bottleneck"]["what"].startswith("controller-manager")  # 0.6 ÷ 0.02 = 30,000 nodes
    assert doc["bottleneck"]["nodes"] == 30_000

    code, text = plan(tmp_path, "--nodes", "10000")
    assert code == 0
    assert "topology: 2 kubelet host(s) x 5,000 nodes, 3 apiserver(s), 3 etcd member(s)" in text
    assert "first bottleneck: controller-manager (one active replica), at 30,000 nodes" in text


def test_a_hundred_thousand_nodes_exceed_etcd_unless_leases_are_longer(tmp_path: Path) -> None:
    doc = plan_doc(tmp_path, "--nodes", "100000")
    assert doc["writes_per_s"] == pytest.approx(10333.3, abs=0.05)
    limits = {lim["what"].split(" ")[0]: lim for lim in doc["limits"]}
    assert limits["etcd"]["nodes"] == 48_387  # 5,000 ÷ (1/10 + 1/300)
    assert limits["etcd"]["use"] > 2
    _, text = plan(tmp_path, "--nodes", "100000")
    assert "EXCEEDED" in text

    longer = plan_doc(tmp_path, "--nodes", "100000", "--lease-seconds", "40")
    assert longer["writes_per_s"] == pytest.approx(2833.3, abs=0.05)
    assert {lim["what"].split(" ")[0]: lim for lim in longer["limits"]}["etcd"]["use"] < 1


def test_kustomize_patches_set_replicas_slices_and_resources(tmp_path: Path) -> None:
    import yaml  # noqa: PLC0415

    code, out = plan(tmp_path, "--nodes", "10000", "--kustomize", str(tmp_path / "plan"))
    assert code == 0
    written = sorted(p.name for p in (tmp_path / "plan").iterdir())
    assert written == ["apiserver.yaml", "controller-manager.yaml", "etcd.yaml", "kubelet.yaml", "scheduler.yaml"]
    assert out.split() == [str(tmp_path / "plan" / name) for name in
                           ("etcd.yaml", "apiserver.yaml", "kubelet.yaml", "controller-manager.yaml", "scheduler.yaml")]
    kubelet = yaml.safe_load((tmp_path / "plan" / "kubelet.yaml").read_text())
    assert (kubelet["kind"], kubelet["metadata"]["name"], kubelet["spec"]["replicas"]) == \
        ("StatefulSet", "kubemesh-kubelet", 2)
    container = kubelet["spec"]["template"]["spec"]["containers"][0]
    assert container["env"] == [{"name": "KUBEMESH_NODES", "value": "5000"},
                                {"name": "KUBEMESH_POD_WATCH", "value": "shared"}]
    assert container["resources"]["requests"] == {"cpu": "630m", "memory": "688Mi"}
    etcd = yaml.safe_load((tmp_path / "plan" / "etcd.yaml").read_text())["spec"]["template"]["spec"]["containers"][0]
    assert etcd["env"][0]["value"].count("=http://") == 3


def test_the_topology_can_be_given(tmp_path: Path) -> None:
    doc = plan_doc(tmp_path, "--nodes", "2000", "--kubelet-hosts", "4", "--apiservers", "1")
    assert (doc["kubelet_hosts"], doc["nodes_per_host"], parts(doc)["apiserver"]["replicas"]) == (4, 500, 1)
    assert doc["watch_events_per_s"] == pytest.approx(200 + 2000 / 300 * 6, abs=0.05)


def test_the_measured_costs_are_installed() -> None:
    costs = load_unit_costs()
    assert costs.kubelet.cores_per_1000_nodes > 0
    assert costs.apiserver_cores_per_1000_writes > 0
    assert costs.etcd_writes_per_s > 0
    assert costs.measured


def test_usage_errors(tmp_path: Path) -> None:
    assert plan(tmp_path, "--nodes", "0")[0] == 2
    assert cli.main(["plan", "--nodes", "10", "--costs", str(tmp_path / "missing.json")]) == 1

"""Attached scenario runs (`scenarios.attached`) against a local `Mesh` the test starts itself.

The mesh is what the runner did not start: the run must check it (bug switches, shape), use it,
clean up after itself and leave it running; a mesh in the wrong mode gives an inconclusive run
with the reason, and nothing on it changes.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

import pytest

from kubemesh.scenarios.attached import (
    LEDGER_NAME,
    LEDGER_NAMESPACE,
    ExistingMesh,
    NotReady,
    Refused,
    TargetError,
    check_nodes,
    check_switches,
)
from kubemesh.scenarios.catalog.recreate_stuck_terminating import OUT_OF_SERVICE, RecreateStuckTerminating
from kubemesh.scenarios.framework import MeshShape, Scenario, ScenarioContext, Verdict
from kubemesh.scenarios.reporting import RunResult
from kubemesh.scenarios.running import run_scenario
from kubemesh.services.machinery.client import ApiClient, InvalidError, NotFoundError
from kubemesh.services.mesh.endpoint import MeshEndpoint
from kubemesh.services.mesh.launching import Mesh, MeshSpec
from kubemesh.services.model.kinds import CONFIGMAPS, NAMESPACES, NODES

SCENARIO = RecreateStuckTerminating()
SHAPE = SCENARIO.mesh_shape("buggy")
REPO = Path(__file__).resolve().parent.parent.parent


def mesh_spec(tmp_path: Path, *, bugs: tuple[str, ...]) -> MeshSpec:
    """A mesh of the scenario's shape, started by the test (not by the runner)."""
    return MeshSpec(nodes=SHAPE.nodes, clock_rate=SHAPE.clock_rate, bugs=bugs, seed=3, state_dir=tmp_path / "mesh",
                    start_timeout=30.0, stop_grace=2.0)


async def ledger(client: ApiClient) -> dict[str, dict[str, Any]]:
    """The runs recorded on the mesh, by run id ({} when none)."""
    try:
        cm = await client.get(CONFIGMAPS, LEDGER_NAME, namespace=LEDGER_NAMESPACE)
    except NotFoundError:
        return {}
    return {k: json.loads(v) for k, v in (cm.get("data") or {}).items()}


async def scenario_namespaces(client: ApiClient) -> list[str]:
    """Namespaces created by attached runs and still there."""
    items = (await client.list(NAMESPACES)).get("items") or []
    return [n["metadata"]["name"] for n in items if n["metadata"]["name"].startswith("scn-")]


def assert_ran(result: RunResult, outcome: str) -> None:
    report = Path(result.report)
    assert result.outcome == outcome, f"{result.summary}\n" + (report / "verdict.txt").read_text()
    assert "Attached to the existing mesh" in (report / "verdict.txt").read_text()
    assert json.loads((report / "run.json").read_text())["target"]["ledgerState"] == "clean"
    assert (report / "history.jsonl").stat().st_size > 0


class QuickConsumer(Scenario):
    """A scenario that is not reusable: running it consumes an attached mesh."""

    name: ClassVar[str] = "quick-consumer"
    summary: ClassVar[str] = "test only: changes the mesh without undoing it"
    bugs: ClassVar[tuple[str, ...]] = SCENARIO.bugs
    shape: ClassVar[MeshShape] = SHAPE

    async def run(self, ctx: ScenarioContext) -> Verdict:
        return Verdict(outcome="reproduced", summary="reproduced: nothing to see (test scenario)")


@pytest.mark.slow
async def test_buggy_run_on_a_buggy_mesh_reproduces_twice_cleans_up_and_leaves_the_mesh_running(
        tmp_path: Path) -> None:
    async with Mesh(mesh_spec(tmp_path, bugs=SCENARIO.bugs_for("buggy"))) as mesh, mesh.client() as client:
        target = ExistingMesh.from_kubeconfig(mesh.kubeconfig_path)
        assert target.endpoint.url == mesh.apiserver_url and target.endpoint.token == mesh.token
        pids = [p.pid for p in mesh.processes]

        # 1: node power through the kubelets' admin endpoints (they answer on loopback).
        [first] = await run_scenario(SCENARIO, modes=("buggy",), seed=11, report_dir=tmp_path / "r1", target=target)
        assert_ran(first, "reproduced")
        assert "kubelets' admin endpoints" in (Path(first.report) / "verdict.txt").read_text()
        # Cleaned up: the run's namespace is gone, no out-of-service taint is left, and the
        # ledger says the mesh can be used again.
        assert await scenario_namespaces(client) == []
        for node in (await client.list(NODES))["items"]:
            assert OUT_OF_SERVICE not in {t["key"] for t in node["spec"].get("taints") or []}
        assert [e["state"] for e in (await ledger(client)).values()] == ["clean"]

        # 2: the same mesh again, node power through the chaos front door's node.powerOff.
        [second] = await run_scenario(SCENARIO, modes=("buggy",), seed=12, report_dir=tmp_path / "r2",
                                      target=replace(target, node_access="chaos"))
        assert_ran(second, "reproduced")
        history = [json.loads(line) for line in (Path(second.report) / "history.jsonl").read_text().splitlines()]
        assert any(r["type"] == "fault" and r.get("fault", "").startswith("scenario-power-off-") for r in history)
        assert not any(r["type"] == "fault" for r in
                       (json.loads(line) for line in (Path(first.report) / "history.jsonl").read_text().splitlines()))
        states = sorted(e["state"] for e in (await ledger(client)).values())
        assert states == ["clean", "clean"]
        assert await scenario_namespaces(client) == []

        # Nothing was torn down: the same processes run, every node is Ready again.
        assert [p.pid for p in mesh.processes] == pids and all(p.running for p in mesh.processes)
        await mesh.wait_nodes_ready(SHAPE.nodes, timeout=30)

        # The other mode on this mesh: refused before anything is changed.
        [fixed] = await run_scenario(SCENARIO, modes=("fixed",), seed=13, report_dir=tmp_path / "r3", target=target)
        assert fixed.outcome == "inconclusive"
        assert fixed.summary.startswith(f"target mesh {mesh.kubeconfig_path}: ")
        assert "no-out-of-service-gc" in fixed.summary and "fixed mode" in fixed.summary
        assert len(await ledger(client)) == 2

        # A scenario that is not reusable consumes the mesh; later runs are refused.
        [consumer] = await run_scenario(QuickConsumer(), modes=("buggy",), seed=14, report_dir=tmp_path / "r4",
                                        target=target)
        assert consumer.outcome == "reproduced"
        [refused] = await run_scenario(SCENARIO, modes=("buggy",), seed=15, report_dir=tmp_path / "r5",
                                       target=target)
        assert refused.outcome == "inconclusive"
        assert "already used" in refused.summary and "quick-consumer" in refused.summary
        assert sorted(e["state"] for e in (await ledger(client)).values()) == ["clean", "clean", "consumed"]


async def test_buggy_run_on_a_fixed_mesh_is_inconclusive_and_changes_nothing(tmp_path: Path) -> None:
    async with Mesh(mesh_spec(tmp_path, bugs=SCENARIO.bugs_for("fixed"))) as mesh, mesh.client() as client:
        [result] = await run_scenario(SCENARIO, modes=("buggy",), seed=5, report_dir=tmp_path / "r",
                                      target=ExistingMesh.from_target(str(mesh.state_dir)))
        assert result.outcome == "inconclusive" and not result.ok
        assert result.summary.startswith(f"target mesh {mesh.kubeconfig_path}: "), result.summary
        assert "controller_manager" in result.summary and "no-out-of-service-gc" in result.summary, result.summary
        assert result.wall_s < 15
        verdict = (Path(result.report) / "verdict.txt").read_text()
        assert "INCONCLUSIVE" in verdict and "target mesh" in verdict
        assert await ledger(client) == {} and await scenario_namespaces(client) == []
        assert all(p.running for p in mesh.processes)

        # The same through the CLI: one JSON line, exit status 1 (not as expected).
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys; from kubemesh.services.tools.cli import main; sys.exit(main())",
            "scenario", "run", SCENARIO.name, "--mode", "buggy", "--attach", str(mesh.kubeconfig_path), "--json",
            "--seed", "6", "--report-dir", str(tmp_path / "cli"), cwd=REPO,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await proc.communicate()
        assert proc.returncode == 1, err.decode()
        [line] = out.decode().splitlines()
        doc = json.loads(line)
        assert doc["outcome"] == "inconclusive" and doc["mode"] == "buggy"
        assert "no-out-of-service-gc" in json.loads((Path(doc["report"]) / "run.json").read_text())["summary"]


async def test_history_last_index_and_the_registry_of_bug_switches(tmp_path: Path) -> None:
    async with Mesh(MeshSpec(nodes=1, clock_rate=60, state_dir=tmp_path / "mesh", start_timeout=30.0,
                             stop_grace=2.0, components=("apiserver",))) as mesh:
        target = ExistingMesh.from_kubeconfig(mesh.kubeconfig_path)
        async with mesh.client() as client:
            for i in range(37):
                await client.create(CONFIGMAPS, {"metadata": {"name": f"c{i}"}, "data": {}}, namespace="default")
            records = await target.endpoint.history()
            assert await target.endpoint.history_last_index() == records[-1]["index"]

            # The registry keeps the switches a component publishes (read-only for everyone else).
            reg = {"component": "scheduler", "instance": "s1", "adminURL": "http://127.0.0.1:1",
                   "bugs": ["keep-missed-node", "ghost-node-affinity-error"]}
            await client.request("PUT", "/kubemesh/v1/components/s1", body=reg, content_type="application/json")
            [entry] = (await client.request("GET", "/kubemesh/v1/components"))["items"]
            assert entry["bugs"] == ["ghost-node-affinity-error", "keep-missed-node"]
            with pytest.raises(InvalidError):
                await client.request("PUT", "/kubemesh/v1/components/s1", body={**reg, "bugs": "keep-missed-node"},
                                     content_type="application/json")


# -- the checks, on synthetic documents -------------------------------------------------------


def node(name: str, *, ready: bool = True, taints: list[dict[str, str]] | None = None,
         zone: str = "zone-a") -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"topology.kubernetes.io/zone": zone}},
            "spec": {"taints": taints or []},
            "status": {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "capacity": {"cpu": "4", "memory": "16Gi", "pods": "110"}}}


def test_check_nodes_refuses_what_waiting_cannot_fix_and_waits_for_the_rest() -> None:
    three = [node("node-1"), node("node-2"), node("node-3")]
    assert "3 nodes Ready" in check_nodes(three, scenario=SCENARIO, mode="buggy")
    with pytest.raises(Refused, match="exactly 3"):
        check_nodes([*three, node("node-4")], scenario=SCENARIO, mode="buggy")
    with pytest.raises(NotReady, match="needs 3"):
        check_nodes(three[:2], scenario=SCENARIO, mode="buggy")
    with pytest.raises(NotReady, match="node-2 is not Ready"):
        check_nodes([three[0], node("node-2", ready=False), three[2]], scenario=SCENARIO, mode="buggy")
    tainted = node("node-3", taints=[{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}])
    with pytest.raises(NotReady, match="unreachable:NoExecute"):
        check_nodes([*three[:2], tainted], scenario=SCENARIO, mode="buggy")

    class Zoned(QuickConsumer):
        shape: ClassVar[MeshShape] = MeshShape(nodes=2, zones=("a", "b"), capacity="cpu=8")

    with pytest.raises(Refused, match="zones"):
        check_nodes([node("n1", zone="a"), node("n2", zone="a")], scenario=Zoned(), mode="buggy")
    with pytest.raises(Refused, match="cpu capacity 4"):
        check_nodes([node("n1", zone="a"), node("n2", zone="b")], scenario=Zoned(), mode="buggy")


def test_check_switches_wants_exactly_the_modes_switches_from_every_component() -> None:
    def reg(cm: list[str], *, kubelet: list[str] | None = None) -> list[dict[str, Any]]:
        return [{"component": "controller_manager", "instance": "controller-manager", "bugs": cm},
                {"component": "scheduler", "instance": "scheduler", "bugs": []},
                {"component": "kubelet", "instance": "kubelet-0", "bugs": kubelet or []}]

    assert "no-out-of-service-gc" in check_switches(reg(["no-out-of-service-gc"]), scenario=SCENARIO, mode="buggy")
    assert "none" in check_switches(reg([]), scenario=SCENARIO, mode="fixed")
    with pytest.raises(Refused, match=re.escape("controller-manager (controller_manager) runs with bug switches none")):
        check_switches(reg([]), scenario=SCENARIO, mode="buggy")
    with pytest.raises(Refused, match="no-node-lease"):  # an extra switch elsewhere changes the mesh too
        check_switches(reg(["no-out-of-service-gc"], kubelet=["no-node-lease"]), scenario=SCENARIO, mode="buggy")
    with pytest.raises(NotReady, match="no scheduler has registered"):
        check_switches([r for r in reg([]) if r["component"] != "scheduler"], scenario=SCENARIO, mode="fixed")
    old = [{**r, "bugs": None} if r["component"] == "kubelet" else r for r in reg([])]
    with pytest.raises(NotReady, match="does not publish its bug switches"):
        check_switches([{k: v for k, v in r.items() if v is not None} for r in old], scenario=SCENARIO, mode="fixed")


def test_targets_from_kubeconfig_folder_and_url(tmp_path: Path) -> None:
    ca = b"-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n"
    (tmp_path / "ca.crt").write_bytes(ca)
    (tmp_path / "kubeconfig").write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: a\n"
        "clusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:7443/', certificate-authority: ca.crt}\n"
        "- name: d\n  cluster: {server: 'http://127.0.0.1:8080'}\n"
        "users:\n- name: u\n  user: {token: tok}\n"
        "contexts:\n- name: a\n  context: {cluster: c, user: u}\n- name: b\n  context: {cluster: d}\n")
    t = ExistingMesh.from_target(str(tmp_path))
    e = t.endpoint
    assert (e.url, e.token, e.ca_pem, e.source) == ("https://127.0.0.1:7443", "tok", ca, str(tmp_path / "kubeconfig"))
    other = ExistingMesh.from_kubeconfig(tmp_path / "kubeconfig", context="b")
    assert (other.endpoint.url, other.endpoint.token) == ("http://127.0.0.1:8080", None)
    (tmp_path / "token").write_text("secret\n")
    url = ExistingMesh.from_target("http://127.0.0.1:9/", token_file=tmp_path / "token", node_access="chaos")
    assert (url.endpoint.url, url.endpoint.token, url.node_access) == ("http://127.0.0.1:9", "secret", "chaos")
    with pytest.raises(TargetError, match="no context named"):
        ExistingMesh.from_kubeconfig(tmp_path / "kubeconfig", context="nope")
    with pytest.raises(TargetError, match="neither"):
        ExistingMesh.from_target(str(tmp_path / "missing"))


async def test_an_unreachable_target_is_inconclusive(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    [result] = await run_scenario(SCENARIO, modes=("buggy",), seed=1, report_dir=tmp_path,
                                  target=ExistingMesh(endpoint=MeshEndpoint(url=f"http://127.0.0.1:{port}", token="t")))
    assert result.outcome == "inconclusive"
    assert result.summary.startswith(f"target mesh http://127.0.0.1:{port}: the apiserver does not answer GET /clock")

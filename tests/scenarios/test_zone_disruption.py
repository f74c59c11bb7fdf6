"""zone-disruption: both modes on real meshes through the runner, and the oracle's arithmetic on
synthetic data.

On a mesh, buggy mode (legacy-pod-eviction) must reproduce (keep pods, which tolerate the
unreachable taint forever, deleted by the node controller's evictor with no taint) and fixed
mode must prevent it (the same nodes tainted at the same zone rates, no keep pod deleted); each
run's history is checked for that mechanism too. The synthetic tests pin down the zone model,
the processing-time estimates and the re-queue accounting the verdict depends on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import pytest

from kubemesh.scenarios.catalog.zone_disruption import (
    FULL,
    NORMAL,
    PARTIAL,
    Judge,
    NodeFacts,
    Observer,
    Sample,
    ZoneView,
    expected_qps,
    expected_state,
    model_at,
    wasted_between,
)
from kubemesh.scenarios.framework import EXPECTED, Mode, ScenarioContext
from kubemesh.scenarios.oracles import select
from kubemesh.scenarios.running import catalog, effective_bugs, run_once
from kubemesh.services.machinery.clock import format_time


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["buggy", "fixed"])
async def test_zone_disruption_outcome_and_mechanism(mode: Mode, tmp_path: Path) -> None:
    scenario = catalog()["zone-disruption"]
    result = await run_once(scenario, mode=mode, seed=7, report_dir=tmp_path)
    assert result.outcome == EXPECTED[mode], f"{result.summary}\n" + "\n".join(result.evidence)
    report = Path(result.report)
    for f in ("verdict.txt", "history.jsonl", "timeline.html", "run.json"):
        assert (report / f).stat().st_size > 0, f
    doc = json.loads((report / "run.json").read_text())
    # The 1.7 release's switches, with legacy-pod-eviction on in buggy mode and off in fixed mode.
    assert doc["ok"] is True and doc["bugs"] == effective_bugs(scenario, mode, scenario.profile)
    assert ("legacy-pod-eviction" in doc["bugs"]) is (mode == "buggy")
    # Every phase was measured and passed (a failed check would have made the run inconclusive).
    for phase in ("zone states", "phase 1, zone-a Normal", "phase 1-2, zone-b PartialDisruption",
                  "phase 2, zone-b FullDisruption", "phase 3, zone-a PartialDisruption", "phase 4, master"):
        assert any(e.startswith(phase) for e in result.evidence), phase
    assert not any(e.endswith("<-- OFF") for e in result.evidence)
    history = [json.loads(line) for line in (report / "history.jsonl").read_text().splitlines()]
    keep_deletes = [r for r in select(history, type="request", verb="delete", component="controller_manager")
                    if "/pods/keep-" in r["path"] and r["code"] < 300]
    if mode == "buggy":
        # 8 of 9 nodes processed (the last one only ever in master disruption): 8 keep pods gone.
        assert len(keep_deletes) == 8
        assert "NoExecute taint" not in result.summary and "without a taint" in result.summary
    else:
        assert keep_deletes == []
        assert "8 nodes tainted" in result.summary and "removed every NoExecute taint" in result.summary


# -- the zone model ------------------------------------------------------------------------------


@pytest.mark.parametrize(("down", "size", "state", "qps"), [
    (0, 5, NORMAL, 0.1), (2, 5, NORMAL, 0.1),            # at most 2 not ready: never partial
    (3, 5, PARTIAL, 0.01), (4, 5, PARTIAL, 0.01),        # a large zone (5 > threshold 4): secondary rate
    (3, 4, PARTIAL, 0.0),                                # a small zone (4 <= 4): stop
    (2, 4, NORMAL, 0.1), (4, 4, FULL, 0.1), (5, 5, FULL, 0.1),
    (3, 6, NORMAL, 0.1),                                 # 50 % < 55 %
])
def test_zone_model_follows_the_flags(down: int, size: int, state: str, qps: float) -> None:
    assert expected_state(down, size) == state
    assert expected_qps(state, size) == qps


def _facts(crossings: dict[str, float]) -> dict[str, NodeFacts]:
    zone = {f"node-{i}": "zone-a" for i in range(1, 6)} | {f"node-{i}": "zone-b" for i in range(6, 10)}
    return {n: NodeFacts(name=n, zone=z, crossed=crossings.get(n)) for n, z in zone.items()}


def test_model_enters_master_disruption_only_when_every_zone_is_full() -> None:
    facts = _facts({"node-6": 10, "node-7": 10, "node-8": 10, "node-9": 50, "node-1": 20, "node-2": 20})
    assert model_at(facts, 30) == (False, {"zone-a": (NORMAL, 0.1), "zone-b": (PARTIAL, 0.0)})
    assert model_at(facts, 60) == (False, {"zone-a": (NORMAL, 0.1), "zone-b": (FULL, 0.1)})
    facts["node-3"].crossed = facts["node-4"].crossed = 70
    assert model_at(facts, 80)[1]["zone-a"] == (PARTIAL, 0.01)
    facts["node-5"].crossed = 90
    assert model_at(facts, 95) == (True, {"zone-a": (FULL, 0.0), "zone-b": (FULL, 0.0)})


# -- processing times ----------------------------------------------------------------------------


def test_processed_uses_the_controllers_clock() -> None:
    f = NodeFacts(name="node-1", zone="zone-a", tainted=105.7, taint_added=100.0)
    assert f.processed == 100.5  # decided in [100, 101), written much later
    f = NodeFacts(name="node-1", zone="zone-a", tainted=100.4, taint_added=100.0)
    assert f.processed == pytest.approx(100.2)  # decided in [100, 100.4]
    f = NodeFacts(name="node-1", zone="zone-a", evicted=99.0, deletes={"keep-node-1": 101.0, "fast-node-1": 100.0})
    assert f.processed == 99.0 and f.how == "pods deleted by the evictor"
    f = NodeFacts(name="node-1", zone="zone-a", deletes={"keep-node-1": 101.0, "fast-node-1": 100.0})
    assert f.processed == 100.0
    assert NodeFacts(name="node-1", zone="zone-a").processed is None


def _node(name: str, rv: int, *, ready: str, taint_at: float | None = None, since: float = 0.0) -> dict[str, Any]:
    taints = [] if taint_at is None else [{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute",
                                           "timeAdded": format_time(taint_at)}]
    return {"metadata": {"name": name, "resourceVersion": str(rv)}, "spec": {"taints": taints},
            "status": {"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": format_time(since)}]}}


def test_observer_reconstructs_a_node_from_its_versions_and_the_history() -> None:
    obs = Observer(cast(ScenarioContext, None), {"zone-a": ["node-1"]})
    obs.versions["node-1"] = [_node("node-1", 5, ready="True"), _node("node-1", 9, ready="Unknown", since=1000),
                              _node("node-1", 12, ready="Unknown", since=1000, taint_at=1020),
                              _node("node-1", 30, ready="Unknown", since=1000)]
    cm = {"component": "controller_manager"}
    records: list[dict[str, Any]] = [
        {"type": "write", "resource": "nodes", "key": "node-1", "rv": 9, "time": 1000.6, **cm},
        {"type": "write", "resource": "pods", "key": "default/keep-node-1", "rv": 10, "time": 1001.0, **cm},
        {"type": "write", "resource": "nodes", "key": "node-1", "rv": 12, "time": 1020.3, **cm},
        {"type": "request", "verb": "delete", "code": 200, "time": 1050.5, "key": "namespaces/default/pods/fast-node-1",
         "path": "/api/v1/namespaces/default/pods/fast-node-1", **cm},
        {"type": "write", "resource": "nodes", "key": "node-1", "rv": 30, "time": 1100.0, **cm},
    ]
    f = obs.facts(records)["node-1"]
    assert (f.crossed, f.crossed_from, f.tainted, f.taint_added, f.untainted) == (1000.6, 1000.0, 1020.3, 1020.0,
                                                                                    1100.0)
    assert f.processed == pytest.approx(1020.15) and f.deletes == {"fast-node-1": 1050.5}
    # Not seen queued: queued from the decision plus a period, at the latest a period after the
    # chain of the controller's writes of that pass (1001.0).
    assert f.queued == 1005.0 and f.queued_by == 1006.0
    events = [{"reason": "DeletingAllPods", "involvedObject": {"kind": "Node", "name": "node-1"},
               "eventTime": "2026-11-21T12:00:00.250000Z"}]
    assert obs.facts(records, events)["node-1"].evicted is not None


def test_a_stall_of_the_mesh_does_not_end_a_monitor_pass() -> None:
    obs = Observer(cast(ScenarioContext, None), {"zone-a": ["node-1"]})
    obs.versions["node-1"] = [_node("node-1", 5, ready="True"), _node("node-1", 9, ready="Unknown", since=1000)]
    cm = {"component": "controller_manager"}
    records: list[dict[str, Any]] = [
        {"type": "write", "resource": "nodes", "key": "node-1", "rv": 9, "time": 1000.6, **cm},
        {"type": "write", "resource": "pods", "key": "default/keep-node-1", "rv": 10, "time": 1012.0, **cm},
    ]
    assert obs.facts(records)["node-1"].queued_by == 1005.6  # a 11.4 s gap: the next pass
    obs.stalls = [(1001.0, 1010.0)]
    assert obs.stalled(1000.0, 1005.0) == 4.0 and obs.stalled(1020.0, 1030.0) == 0.0
    assert obs.facts(records)["node-1"].queued_by == 1017.0  # 9 s of it the mesh stood still


def test_requeued_nodes_are_counted_only_for_entries_added_after_processing() -> None:
    facts = {"node-1": NodeFacts(name="node-1", zone="zone-a", tainted=50.0),
             "node-2": NodeFacts(name="node-2", zone="zone-a")}
    # The entry being processed stays queued until the action returns: not a re-queue.
    both = ("node-1", "node-2")
    in_flight = Sample(time=50.5, master=False,
                       zones={"zone-a": ZoneView(state=NORMAL, qps=0.1, queue=both, added=(45.0, 46.0))})
    fresh = Sample(time=55.0, master=False,
                   zones={"zone-a": ZoneView(state=NORMAL, qps=0.1, queue=both[::-1], added=(46.0, 54.0))})
    assert wasted_between([in_flight], "zone-a", facts, 40.0, 70.0) == []
    assert wasted_between([in_flight, fresh], "zone-a", facts, 40.0, 70.0) == ["node-1"]
    assert wasted_between([fresh], "zone-a", facts, 56.0, 70.0) == []
    # Decided at 50.0 (timeAdded), written at 50.9: a re-add at 50.5 is the pass before the
    # taint reached it, not a re-queue.
    facts["node-1"] = NodeFacts(name="node-1", zone="zone-a", tainted=50.9, taint_added=50.0)
    before_write = Sample(time=50.6, master=False,
                          zones={"zone-a": ZoneView(state=NORMAL, qps=0.1, queue=both, added=(50.5, 46.0))})
    assert wasted_between([before_write], "zone-a", facts, 40.0, 70.0) == []


def test_judge_windows_are_asymmetric_and_recorded() -> None:
    j = Judge(t0=0.0, early=1.0, late=3.0, step=2.0)
    assert j.at("p", "x", 10.5, 10.0) and j.at("p", "x", 9.0, 10.0) and not j.at("p", "x", 8.9, 10.0)
    assert j.at("p", "x", 17.0, 10.0, by=14.0) and not j.at("p", "x", 17.1, 10.0, by=14.0)
    assert not j.at("p", "x", None, 10.0)
    assert len(j.problems) == 3 and all(e.startswith("p: x at ") for e in j.evidence)
    assert j.evidence[-1].endswith("<-- OFF")

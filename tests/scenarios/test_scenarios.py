"""The scenarios on real meshes (each in both modes once), and the oracles and the timeline on
synthetic data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubemesh.scenarios import oracles, timeline
from kubemesh.scenarios.framework import EXPECTED, Mode, Moment, Window
from kubemesh.scenarios.main import table
from kubemesh.scenarios.reporting import RunResult
from kubemesh.scenarios.running import catalog, run_once

SLOW = {"node-heartbeat-eviction", "recreate-stuck-terminating", "pre-lease-heartbeat", "ready-false-eviction",
        "large-cluster-threshold"}

CASES = [pytest.param(name, mode, id=f"{name}-{mode}",
                      marks=[pytest.mark.slow] if name in SLOW else [])
         for name in catalog() for mode in ("buggy", "fixed")]


@pytest.mark.parametrize(("name", "mode"), CASES)
async def test_scenario_outcome_matches_mode(name: str, mode: Mode, tmp_path: Path) -> None:
    scenario = catalog()[name]
    result = await run_once(scenario, mode=mode, seed=7, report_dir=tmp_path)
    if result.outcome == "inconclusive" and "chaos front door" in result.summary:
        pytest.skip("the apiserver does not serve /chaos/v1/faults")
    assert result.outcome == EXPECTED[mode], f"{result.summary}\n" + "\n".join(result.evidence)
    report = Path(result.report)
    for f in ("verdict.txt", "history.jsonl", "timeline.html", "run.json"):
        assert (report / f).stat().st_size > 0, f
    doc = json.loads((report / "run.json").read_text())
    assert doc["outcome"] == result.outcome and doc["ok"] is True
    assert result.outcome.upper() in (report / "verdict.txt").read_text()
    assert "<svg" in (report / "timeline.html").read_text()


def test_catalog_names_are_the_fixed_ones() -> None:
    assert {"ghost-node-affinity", "nominated-node-race", "recreate-stuck-terminating", "force-delete-zombie",
            "node-heartbeat-eviction", "stale-update-unnominates", "node-pressure-predicates"} <= set(catalog())


# -- oracles -----------------------------------------------------------------------------------


def test_decide_is_three_valued() -> None:
    assert oracles.decide(symptom=True, healthy=False, reproduced="r", prevented="p").outcome == "reproduced"
    assert oracles.decide(symptom=False, healthy=True, reproduced="r", prevented="p").outcome == "prevented"
    both = oracles.decide(symptom=True, healthy=True, reproduced="r", prevented="p")
    assert both.outcome == "inconclusive" and "both" in both.summary
    neither = oracles.decide(symptom=False, healthy=False, reproduced="r", prevented="p")
    assert neither.outcome == "inconclusive" and "neither" in neither.summary
    unknown = oracles.decide(symptom=None, healthy=True, reproduced="r", prevented="p")
    assert unknown.outcome == "inconclusive"


HISTORY = [
    {"index": 1, "time": 100.0, "type": "write", "component": "scenario", "instance": "scenario",
     "resource": "nodes", "event": "DELETED", "key": "node-1", "rv": 10},
    {"index": 2, "time": 100.5, "type": "delivery", "component": "scheduler", "instance": "scheduler",
     "resource": "nodes", "event": "DELETED", "key": "node-1", "rv": 10, "watch": 3},
    {"index": 3, "time": 101.0, "type": "write", "component": "scheduler", "instance": "scheduler",
     "resource": "events", "event": "ADDED", "key": "default/web-1.abc", "rv": 11},
    {"index": 4, "time": 103.0, "type": "write", "component": "scheduler", "instance": "scheduler",
     "resource": "events", "event": "MODIFIED", "key": "default/web-1.abc", "rv": 12},
    {"index": 5, "time": 140.0, "type": "delivery", "component": "scheduler", "instance": "scheduler",
     "resource": "pods", "event": "DELETED", "key": "default/web-0", "rv": 20, "watch": 4},
    {"index": 6, "time": 120.0, "type": "fault", "op": "inject", "fault": "hold-pods", "outcome": "ok"},
    {"index": 7, "time": 130.0, "type": "fault", "op": "recover", "fault": "hold-pods", "outcome": "ok"},
    {"index": 8, "time": 105.0, "type": "write", "component": "kubelet", "instance": "node-2",
     "resource": "leases", "event": "MODIFIED", "key": "kube-node-lease/node-2", "rv": 13},
]
EVENTS = {"default/web-1.abc": {"type": "Warning", "reason": "FailedScheduling", "message": 'node "node-1" not found',
                                "involvedObject": {"kind": "Pod", "namespace": "default", "name": "web-1"}}}


def test_select_and_first_filter_history() -> None:
    assert [r["index"] for r in oracles.select(HISTORY, type="delivery", component="scheduler")] == [2, 5]
    assert oracles.first(HISTORY, resource="pods", event="DELETED") == HISTORY[4]
    assert oracles.select(HISTORY, type="write", after=102.0, before=104.0) == [HISTORY[3]]
    assert oracles.first(HISTORY, key="nothing") is None


def test_timeline_draws_focus_objects_warnings_faults_and_moments() -> None:
    focus = {("nodes", "node-1"), ("pods", "default/web-0"), ("pods", "default/web-1")}
    page = timeline.render(history=HISTORY, title="ghost <test>", verdict="REPRODUCED: x", t0=99.0, t_end=150.0,
                           moments=[Moment(time=100.5, label="node-1 DELETE reaches scheduler", lane="scheduler")],
                           windows=[Window(start=99.5, end=None, label="node-1 powered off")],
                           focus=focus, events=EVENTS)
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "</html>" in page
    assert "ghost &lt;test&gt;" in page  # escaped
    assert "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")  # no external assets
    assert "node-1 DELETE reaches scheduler" in page
    assert "FailedScheduling" in page and "not found" in page
    assert "fault hold-pods" in page and "node-1 powered off" in page
    assert "DEL web-0" in page and "DEL node-1" in page
    assert "leases" not in page  # not focused
    marks = timeline.select_marks(HISTORY, focus=focus, events=EVENTS, t_from=99.0, t_to=150.0)
    assert [(m.lane, m.shape) for m in marks] == [("scenario", "square"), ("scheduler", "circle"),
                                                 ("scheduler", "diamond"), ("scheduler", "diamond"),
                                                 ("scheduler", "circle")]


def test_timeline_without_focus_shows_pod_and_node_changes() -> None:
    marks = timeline.select_marks(HISTORY, focus=set(), events=EVENTS, t_from=0.0, t_to=None)
    assert {m.row for m in marks} == {"nodes", "pods", "events"}


def test_timeline_draws_admission_webhook_calls_in_a_lane_of_their_configuration() -> None:
    calls = [{"index": 90, "time": 101.0, "type": "webhook", "configuration": "policy", "webhook": "deny.example.com",
              "operation": "CREATE", "resource": "pods", "key": "default/web-0", "latency": 0.004,
              "outcome": "denied"},
             {"index": 91, "time": 102.0, "type": "webhook", "configuration": "policy", "webhook": "deny.example.com",
              "operation": "CREATE", "resource": "pods", "key": "default/web-1", "latency": 1.0, "outcome": "ignored",
              "error": "context deadline exceeded"}]
    marks = timeline.select_marks([*HISTORY, *calls], focus=set(), events=EVENTS, t_from=0.0, t_to=None)
    hooks = [m for m in marks if m.lane == "webhook policy"]
    assert [(m.shape, m.row, m.label) for m in hooks] == [("triangle", "pods", "denied"),
                                                          ("triangle", "pods", "ignored")]
    assert "context deadline exceeded" in hooks[1].tip
    page = timeline.render(history=[*HISTORY, *calls], title="t", verdict="v", t0=0.0)
    assert "webhook policy" in page and "admission webhook call" in page


def test_fault_windows_pair_inject_and_recover() -> None:
    ws = timeline.fault_windows(HISTORY, t_end=150.0)
    assert [(w.label, w.start, w.end) for w in ws] == [("fault hold-pods", 120.0, 130.0)]


def test_main_table_summarises_modes() -> None:
    rs = [RunResult(scenario="a", mode="buggy", seed=1, outcome="reproduced", wall_s=2.0, cluster_s=10, report="r"),
          RunResult(scenario="a", mode="fixed", seed=1, outcome="reproduced", wall_s=1.0, cluster_s=10, report="r",
                    expected="prevented")]
    rows = table(rs, ["a"])
    assert rows[1] == ["a", "reproduced", "reproduced (!)", "3.0 s"]

"""The scenarios on real meshes (each verified: switch on/off x faults on/off, the faults-on cells
being its buggy and fixed runs), and the oracles and the timeline on synthetic data."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any, get_args

import pytest

from kubemesh.scenarios import oracles, timeline
from kubemesh.scenarios.framework import Moment, Outcome, Window
from kubemesh.scenarios.main import table
from kubemesh.scenarios.reporting import RunResult
from kubemesh.scenarios.running import catalog
from kubemesh.scenarios.verifying import CELLS, Cell, Verification, expected_outcome, verify_scenario

REPO = Path(__file__).resolve().parent.parent.parent
SEED = 7
OUTCOMES = set(get_args(Outcome))

CLI_SCENARIO = "nominated-node-race"
"""The scenario verified through the real CLI (`kubemesh scenario verify NAME --json` in a
subprocess): its test checks the JSON contract too, at no extra cost."""

CASES = [pytest.param(CLI_SCENARIO, id=CLI_SCENARIO)]
"""Every scenario's four cells run in the main job (`scripts/main`, which the README documents and
tests/docs runs as written; its exit status needs every scenario sound, reproduced in buggy and
prevented in fixed mode). Here one scenario runs them again through `kubemesh scenario verify`,
for the JSON contract and the reports of each cell, instead of running every scenario twice."""


async def _verify_via_cli(name: str, report_dir: Path) -> tuple[int, dict[str, Any], list[str]]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", "import sys; from kubemesh.services.tools.cli import main; sys.exit(main())",
        "scenario", "verify", name, "--json", "--seed", str(SEED), "--report-dir", str(report_dir), cwd=REPO,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await proc.communicate()
    lines = out.decode().splitlines()
    assert lines, err.decode()
    assert proc.returncode is not None
    return proc.returncode, json.loads(lines[-1]), lines


@pytest.mark.parametrize("name", CASES)
async def test_scenario_verify_is_sound(name: str, tmp_path: Path) -> None:
    """The four cells: the faults-on ones are the buggy and fixed runs (reproduced, prevented),
    the faults-off ones must say the window did not open (or, for a scenario whose workload opens
    it alone, give the same verdicts)."""
    scenario = catalog()[name]
    if name == CLI_SCENARIO:
        code, doc, lines = await _verify_via_cli(name, tmp_path)
        # The contract: the last line is one JSON object of exactly these keys and types.
        assert set(doc) == {"scenario", "cells", "sound"} and doc["scenario"] == name
        assert isinstance(doc["sound"], bool) and code == (0 if doc["sound"] else 1), lines
        assert [(c["switch"], c["faults"]) for c in doc["cells"]] == list(CELLS)
        for c in doc["cells"]:
            assert set(c) == {"switch", "faults", "outcome"} and c["outcome"] in OUTCOMES
            assert isinstance(c["switch"], bool) and isinstance(c["faults"], bool)
        cells = [(c["switch"], c["faults"], c["outcome"]) for c in doc["cells"]]
        sound, table = doc["sound"], "\n".join(lines)
    else:
        v = await verify_scenario(scenario, seed=SEED, report_dir=tmp_path)
        cells = [(c.switch, c.faults, c.outcome) for c in v.cells]
        sound = v.sound
        table = "\n".join([*v.table(), *(f"{c.report}: {c.summary}" for c in v.cells)])
    verdicts = [tmp_path / scenario.name / f"{mode}-seed{SEED}" / "verdict.txt" for mode in ("buggy", "fixed")]
    if any(v.exists() and "the chaos front door (/chaos/v1/faults), which" in v.read_text() for v in verdicts):
        pytest.skip("the apiserver does not serve /chaos/v1/faults")
    assert sound, table
    assert cells == [(sw, f, expected_outcome(scenario, switch=sw, faults=f)) for sw, f in CELLS], table
    for mode, faults in (("buggy", True), ("fixed", True), ("buggy", False), ("fixed", False)):
        report = tmp_path / scenario.name / (f"{mode}-seed{SEED}" if faults else f"{mode}-nofaults-seed{SEED}")
        for f in ("verdict.txt", "history.jsonl", "timeline.html", "run.json"):
            assert (report / f).stat().st_size > 0, f
        doc = json.loads((report / "run.json").read_text())
        assert doc["ok"] is True and doc["faults"] is faults and doc["mode"] == mode
        assert doc["outcome"].upper() in (report / "verdict.txt").read_text()
        assert "<svg" in (report / "timeline.html").read_text()
        # Faults off: the scenario's injections were recorded as skipped, none was made.
        if faults:
            assert not doc["skipped"], doc["skipped"]
        elif scenario.window_needs_faults:
            assert doc["skipped"]
            assert "Skipped (faults off):" in (report / "verdict.txt").read_text()


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
    assert rows[0] == ["scenario", "buggy outcome", "fixed outcome", "verified", "wall time"]
    assert rows[1] == ["a", "reproduced", "reproduced (!)", "-", "3.0 s"]
    off = RunResult(scenario="a", mode="buggy", seed=1, outcome="reproduced", wall_s=4.0, cluster_s=10, report="r",
                    expected="inconclusive", faults=False)
    cells = (Cell(switch=True, faults=True, outcome="reproduced", expected="reproduced"),
             Cell(switch=False, faults=True, outcome="reproduced", expected="prevented"),
             Cell(switch=True, faults=False, outcome="reproduced", expected="inconclusive"),
             Cell(switch=False, faults=False, outcome="inconclusive", expected="inconclusive"))
    v = Verification(scenario="a", seed=1, cells=cells)
    rows = table([*rs, off], ["a"], {"a": v})
    assert rows[1] == ["a", "reproduced", "reproduced (!)", "NOT SOUND (off/on: reproduced; on/off: reproduced) (!)",
                       "7.0 s"]
    assert not v.sound and v.public() == {"scenario": "a", "sound": False, "cells": [
        {"switch": True, "faults": True, "outcome": "reproduced"},
        {"switch": False, "faults": True, "outcome": "reproduced"},
        {"switch": True, "faults": False, "outcome": "reproduced"},
        {"switch": False, "faults": False, "outcome": "inconclusive"}]}


def test_soundness_expects_inconclusive_without_faults_unless_the_workload_opens_the_window() -> None:
    scenarios = catalog()
    needs = scenarios["nominated-node-race"]
    assert [expected_outcome(needs, switch=sw, faults=f) for sw, f in CELLS] == [
        "reproduced", "prevented", "inconclusive", "inconclusive"]
    alone = scenarios["ghost-node-affinity"]
    assert not alone.window_needs_faults
    assert [expected_outcome(alone, switch=sw, faults=f) for sw, f in CELLS] == [
        "reproduced", "prevented", "reproduced", "prevented"]


def test_fault_ops_flatten_the_detail_and_heartbeats_select_a_nodes_lease_and_status() -> None:
    held = oracles.fault_ops(HISTORY_FAULTS, "hold", op="inject", effect="hold")
    assert [(r["index"], r["key"], r["rv"]) for r in held] == [(2, "default/p", 83)]
    assert oracles.fault_ops(HISTORY_FAULTS, "other") == []
    assert [r["index"] for r in oracles.heartbeats(HISTORY_FAULTS, "node-2")] == [3, 4]
    assert [r["index"] for r in oracles.heartbeats(HISTORY_FAULTS, "node-2", after=11.0)] == [4]
    assert oracles.heartbeats(HISTORY_FAULTS, "node-1") == []


def test_held_past_compares_the_held_events_delivery_with_the_components_first_write() -> None:
    decided = {"index": 6, "time": 13.0, "type": "write", "component": "scheduler", "resource": "pods",
               "event": "MODIFIED", "key": "default/s", "rv": 87}
    late = {"index": 7, "time": 14.0, "type": "delivery", "component": "scheduler", "resource": "pods",
            "event": "MODIFIED", "key": "default/p", "rv": 83, "watch": 3}
    early = {**late, "index": 5, "time": 12.9}
    opened = oracles.held_past([*HISTORY_FAULTS, decided, late], fault="hold", key="default/p",
                               component="scheduler", acted_on="default/s")
    assert opened.opened and opened.delivered == late and "rv 83" in opened.evidence[0]
    before = oracles.held_past([*HISTORY_FAULTS, early, decided], fault="hold", key="default/p",
                               component="scheduler", acted_on="default/s")
    assert not before.opened and "before it decided" in before.why
    nothing = oracles.held_past([decided, late], fault="hold", key="default/p", component="scheduler",
                                acted_on="default/s")
    assert not nothing.opened and "held no event" in nothing.why
    undecided = oracles.held_past(HISTORY_FAULTS, fault="hold", key="default/p", component="scheduler",
                                  acted_on="default/s")
    assert not undecided.opened and undecided.delivered is None


HISTORY_FAULTS: list[dict[str, Any]] = [
    {"index": 1, "time": 9.0, "type": "fault", "op": "create", "fault": "hold", "detail": {"spec": {}}},
    {"index": 2, "time": 10.0, "type": "fault", "op": "inject", "fault": "hold", "outcome": "ok",
     "detail": {"effect": "hold", "key": "default/p", "rv": 83, "component": "scheduler"}},
    {"index": 3, "time": 10.5, "type": "write", "component": "kubelet", "instance": "node-2", "resource": "leases",
     "event": "MODIFIED", "key": "kube-node-lease/node-2", "rv": 84},
    {"index": 4, "time": 12.0, "type": "write", "component": "kubelet", "instance": "node-2", "resource": "nodes",
     "event": "MODIFIED", "key": "node-2", "rv": 85},
    {"index": 5, "time": 12.5, "type": "write", "component": "scheduler", "instance": "scheduler",
     "resource": "nodes", "event": "MODIFIED", "key": "node-1", "rv": 86},
]

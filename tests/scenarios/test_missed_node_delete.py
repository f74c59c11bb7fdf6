"""missed-node-delete on real meshes through the runner: buggy reproduces, fixed prevents.

Besides the outcome, each mode is checked for its mechanism in the report: the switches the mesh
ran with (the era switch in both modes), the scheduler's re-read of the node (fixed only), and
where the probe ended up.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kubemesh.scenarios.framework import EXPECTED, Mode
from kubemesh.scenarios.oracles import select
from kubemesh.scenarios.running import catalog, effective_bugs, run_once


@pytest.mark.parametrize("mode", ["buggy", "fixed"])
async def test_missed_node_delete_outcome_and_mechanism(mode: Mode, tmp_path: Path) -> None:
    scenario = catalog()["missed-node-delete"]
    result = await run_once(scenario, mode=mode, seed=11, report_dir=tmp_path)
    if result.outcome == "inconclusive" and "chaos front door" in result.summary:
        pytest.skip("the apiserver does not serve /chaos/v1/faults")
    assert result.outcome == EXPECTED[mode], f"{result.summary}\n" + "\n".join(result.evidence)
    report = Path(result.report)
    doc = json.loads((report / "run.json").read_text())
    # The 1.8 release's switches, with the switch under test on in buggy mode and off in fixed mode.
    expected_bugs = effective_bugs(scenario, mode, scenario.profile)
    assert "ghost-node-affinity-error" in expected_bugs
    assert ("keep-missed-node" in expected_bugs) is (mode == "buggy")
    assert doc["bugs"] == expected_bugs and result.public()["bugs"] == expected_bugs
    assert f"bugs: {', '.join(expected_bugs)}" in (report / "verdict.txt").read_text()
    history = [json.loads(line) for line in (report / "history.jsonl").read_text().splitlines()]
    victim = next(r["key"] for r in select(history, type="write", resource="nodes", event="DELETED"))
    rereads = [r for r in select(history, type="request", component="scheduler", verb="get")
               if r["path"].endswith(f"/nodes/{victim}")]
    injects = [r for r in select(history, type="fault") if r.get("op") == "inject"
               and str(r.get("fault", "")).startswith("miss-")]
    assert injects and all(r["outcome"] == "ok" for r in injects)
    assert 'not found' in result.summary and victim in result.summary
    if mode == "buggy":
        assert rereads == []
        assert f"to {victim}, a node deleted" in result.summary  # #94437: bound to the gone node
    else:
        assert rereads and all(r["code"] == 404 for r in rereads)
        assert f"({victim} gone)" in "\n".join(result.evidence)

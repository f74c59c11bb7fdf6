"""`scripts/bench`: one record of the standard figures, and the comparison that flags regressions.

Behaviour only, never timing: the record has every figure of the benchmarks it ran, with its
goal and spread; `--compare` prints each figure beside an earlier record's and flags those
worse by more than 10 % (in the direction that is worse for that figure), and exits 0 either
way. `apiserver_writes --profile` splits the server's busy time into the stages of the
write path (py-spy, which CI runs as root).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(REPO / "scripts" / "bench"), *args], cwd=REPO, check=False, capture_output=True,
                          text=True, timeout=600)


def test_a_quick_record_and_a_comparison_that_flags_what_got_worse(tmp_path: Path) -> None:
    first = tmp_path / "first.json"
    proc = bench("--quick", "--only", "apiserver_writes,cold_start", "--out", str(first))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(first.read_text())
    assert doc["quick"] is True
    names = set(doc["figures"])
    assert {f"writes.{enc}.{phase}.vs_bare" for enc in ("json", "msgpack") for phase in ("create", "update", "mixed")
            } | {"writes.msgpack_vs_json.create", "cold_start.ready_s"} <= names
    for figure in doc["figures"].values():
        assert figure["value"] > 0 and figure["goal"] is not None and figure["met"] in (True, False)
    assert f"record: {first}" in proc.stdout

    # A later record where one higher-is-better ratio fell by 20 % and one lower-is-better time rose by 5 %.
    later = json.loads(first.read_text())
    later["figures"]["writes.json.create.vs_bare"]["value"] *= 0.8
    later["figures"]["cold_start.ready_s"]["value"] *= 1.05
    second = tmp_path / "second.json"
    second.write_text(json.dumps(later))
    proc = bench("--compare", str(first), "--against", str(second))
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()}
    assert "REGRESSED" in lines["writes.json.create.vs_bare"] and "-20%" in lines["writes.json.create.vs_bare"]
    assert "REGRESSED" not in lines["cold_start.ready_s"] and "+5%" in lines["cold_start.ready_s"]
    assert "1 figure(s) worse by more than 10%: writes.json.create.vs_bare" in proc.stdout


def test_the_write_benchmark_profiles_the_apiserver_into_stages(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / "apiserver_writes.py"), "--quick", "--no-pin",
                           "--servers", "apiserver", "--profile", "--results-dir", str(tmp_path)],
                          cwd=REPO, check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((tmp_path / "apiserver_writes.json").read_text())
    for enc in ("json", "msgpack"):
        for phase in ("create", "update", "mixed"):
            split = doc["results"][f"apiserver-{enc}"][phase]["profile"]
            stages = {k: v for k, v in split.items() if k not in ("samples", "idle")}
            assert split["samples"] > 0
            assert abs(sum(stages.values()) - 1.0) < 1e-6
            # every write decodes, validates, stores and answers: those stages are seen
            assert all(stages[s] > 0 for s in ("decode", "store", "http")), split
    assert list((tmp_path / "apiserver_writes-profiles").glob("*.raw"))
    assert "profile: decode" in proc.stdout

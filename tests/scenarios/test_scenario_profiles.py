"""Each scenario runs as its seed's release: the README's table, the switches of each mode."""

from __future__ import annotations

import re
from pathlib import Path

from kubemesh.scenarios.running import catalog, effective_bugs, mode_switches
from kubemesh.services.model import profiles

README = Path(__file__).resolve().parent.parent.parent / "README.md"
ROW = re.compile(r"^\| ([a-z-]+) \| (\d{3}|-) \| ([0-9.]+|current) \| ([a-z-]+) \|$", re.M)


def test_readme_table_says_which_release_each_scenario_runs_as() -> None:
    rows = {m.group(1): (m.group(3), m.group(4)) for m in ROW.finditer(README.read_text())}
    assert set(rows) == set(catalog()), "the README's scenario table and the catalogue differ"
    for name, s in catalog().items():
        assert rows[name] == (s.profile, ",".join(s.bugs) or "-"), name


def test_every_scenario_runs_as_a_known_release_and_fixed_mode_backports_its_fix() -> None:
    for name, s in catalog().items():
        release = profiles.resolve(s.profile)
        buggy, fixed = effective_bugs(s, "buggy", s.profile), effective_bugs(s, "fixed", s.profile)
        assert set(s.bugs) <= set(buggy) and release.bugs() <= set(buggy), name
        assert not set(fixed) & {*s.bugs, *s.also_fixed}, name
        for bug in {*s.bugs, *s.also_fixed} & release.bugs():
            assert f"-{bug}" in mode_switches(s, "fixed", s.profile), (name, bug)
        # Today's release has no switch on: fixed mode there is today's code.
        assert effective_bugs(s, "fixed", "current") == sorted(s.era_bugs), name

"""`verify`: does a scenario's oracle prove its own path? Four cells, switch x faults.

A verdict is only worth something if the oracle would have said otherwise had the race not
happened. `verify_scenario` runs a scenario in four cells on fresh meshes, one seed:

=============  ==========  ===================================================
switch         faults      sound outcome
=============  ==========  ===================================================
on (buggy)     on          reproduced
off (fixed)    on          prevented
on (buggy)     off         inconclusive: the race window was not opened
off (fixed)    off         inconclusive: the race window was not opened
=============  ==========  ===================================================

"switch on" is the scenario's buggy mode (its `bugs` on), "off" its fixed mode; "faults off"
runs the same workload and oracle with every injection skipped (`ScenarioContext.faults`).
A scenario whose workload alone opens the window declares `window_needs_faults = False` (its
docstring says why); for it the faults-off cells must give the faults-on outcomes, because
there the window opens all the same and the oracle must see that it did.

The scenario is *sound* when every cell has its outcome. Oracles read their evidence from the
history (what was held, delivered, written, when), so a run whose window did not open says
inconclusive instead of restating what was meant to happen.

The faults-on cells are the normal buggy and fixed runs; the main job passes its own as
`reuse` so that verifying costs it only the two faults-off runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from kubemesh.scenarios.framework import Mode, Outcome, Scenario
from kubemesh.scenarios.reporting import RunResult
from kubemesh.scenarios.running import run_once

CELLS: Final[tuple[tuple[bool, bool], ...]] = ((True, True), (False, True), (True, False), (False, False))
"""(switch, faults) of the four cells, in the order they run and print."""


def mode_of(switch: bool) -> Mode:
    """The mode a switch position runs as: on = buggy, off = fixed."""
    return "buggy" if switch else "fixed"


def expected_outcome(scenario: Scenario, *, switch: bool, faults: bool) -> Outcome:
    """The outcome a sound scenario has in a cell (see the module docstring)."""
    if faults or not scenario.window_needs_faults:
        return scenario.expected["buggy" if switch else "fixed"]
    return "inconclusive"


@dataclass(frozen=True, kw_only=True)
class Cell:
    """One cell: its switch and faults, what it gave, what a sound scenario gives there."""

    switch: bool
    faults: bool
    outcome: Outcome
    expected: Outcome
    summary: str = ""
    report: str = ""

    @property
    def ok(self) -> bool:
        """Whether the cell has the sound outcome."""
        return self.outcome == self.expected

    def public(self) -> dict[str, Any]:
        """The cell in the JSON contract."""
        return {"switch": self.switch, "faults": self.faults, "outcome": self.outcome}


@dataclass(frozen=True, kw_only=True)
class Verification:
    """The four cells of one scenario and whether it is sound."""

    scenario: str
    seed: int
    cells: tuple[Cell, ...]
    window_needs_faults: bool = True

    @property
    def sound(self) -> bool:
        """Every cell had its sound outcome."""
        return len(self.cells) == len(CELLS) and all(c.ok for c in self.cells)

    def public(self) -> dict[str, Any]:
        """The contract: `{"scenario", "cells": [{"switch", "faults", "outcome"}], "sound"}`."""
        return {"scenario": self.scenario, "cells": [c.public() for c in self.cells], "sound": self.sound}

    def table(self) -> list[str]:
        """The cells as text lines (a header, one line per cell, the conclusion)."""
        lines = [f"{'switch':<13}{'faults':<8}{'outcome':<14}{'sound outcome'}",
                 f"{'-' * 12} {'-' * 7} {'-' * 13} {'-' * 13}"]
        for c in self.cells:
            switch = f"on ({mode_of(c.switch)})" if c.switch else f"off ({mode_of(c.switch)})"
            mark = "" if c.ok else "  <- not sound"
            lines.append(f"{switch:<13}{'on' if c.faults else 'off':<8}{c.outcome:<14}{c.expected:<15}{mark}".rstrip())
        note = "" if self.window_needs_faults else " (its workload opens the window without faults)"
        lines.append(f"{self.scenario}: {'sound' if self.sound else 'NOT SOUND'}{note}, seed {self.seed}")
        return lines


def cell_of(scenario: Scenario, result: RunResult, *, switch: bool, faults: bool) -> Cell:
    """A cell from a run."""
    return Cell(switch=switch, faults=faults, outcome=result.outcome,
                expected=expected_outcome(scenario, switch=switch, faults=faults), summary=result.summary,
                report=result.report)


async def verify_scenario(scenario: Scenario, *, seed: int, report_dir: Path, clock_rate: float | None = None,
                          log: Callable[[str], None] | None = None, on_cell: Callable[[Cell], None] | None = None,
                          reuse: Mapping[Mode, RunResult] | None = None,
                          on_run: Callable[[RunResult], None] | None = None) -> Verification:
    """Run the four cells (fresh meshes, seed `seed`) and tell whether the scenario is sound.

    `reuse` gives faults-on runs already made (by mode, same seed): they stand for their cells.
    `on_run` is called with each run this call makes (not with the reused ones).
    """
    cells: list[Cell] = []
    for switch, faults in CELLS:
        mode = mode_of(switch)
        expected = expected_outcome(scenario, switch=switch, faults=faults)
        prior = (reuse or {}).get(mode) if faults else None
        if prior is not None and prior.faults:
            result = prior
        else:
            result = await run_once(scenario, mode=mode, seed=seed, clock_rate=clock_rate, report_dir=report_dir,
                                    log=log, faults=faults, expected=expected)
            if on_run is not None:
                on_run(result)
        cell = cell_of(scenario, result, switch=switch, faults=faults)
        cells.append(cell)
        if on_cell is not None:
            on_cell(cell)
    return Verification(scenario=scenario.name, seed=seed, cells=tuple(cells),
                        window_needs_faults=scenario.window_needs_faults)

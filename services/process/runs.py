"""One run of a process: an id drawn when it starts, and how the previous run of the same process ended.

A process restarted by the launcher (`kubemesh.services.mesh.launching`) or re-executed in place
by a crash fault (`kubemesh.services.process.chaospoints.crash_process`) is a new run of the same
component instance: the instance name stays, the `boot` id changes, and the exit code of the run
before is handed over in the environment (`KUBEMESH_LAST_EXIT_CODE`), which this process reads
once and removes, so that its own children never inherit it. Components publish both in their
registration; the apiserver's control-plane mirror pods count restarts from them.

The boot id is an identity, not a decision: it is drawn from the OS, never from a component's
seeded RNG, so that seeded runs draw the same numbers whether or not a process was restarted.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from functools import cache
from typing import Final

LAST_EXIT_ENV: Final = "KUBEMESH_LAST_EXIT_CODE"


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """The run of one process."""

    boot: str
    """16 hex digits, new at every process start (an exec in place included)."""
    last_exit_code: int | None
    """How the previous run of this process ended, when whoever restarted it knew; else None."""


@cache
def this_run() -> Run:
    """The run of the calling process (read once; the environment variable is removed)."""
    raw = os.environ.pop(LAST_EXIT_ENV, None)
    try:
        code = int(raw) if raw is not None else None
    except ValueError:
        code = None
    return Run(boot=secrets.token_hex(8), last_exit_code=code)


def exit_code_of(returncode: int) -> int:
    """A container-style exit code: a death by signal N is 128 + N (SIGKILL: 137)."""
    return 128 - returncode if returncode < 0 else returncode

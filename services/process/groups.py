"""Process groups a component started for others (the kubelet's process runtime), recorded on disk.

Each group leader's pid (which is the group id: the child starts its own session) is recorded
as a file `<dir>/<pgid>` holding the leader's start time in clock ticks since boot (field 22 of
`/proc/<pid>/stat`). A record outlives the recorder: a kubelet killed with `kill -9` leaves its
records behind, and whoever looks next (the restarted kubelet, `kubemesh down`, a test's
teardown) calls `reap(dir)`, which SIGKILLs every process of every recorded group that started
no earlier than its leader (a process of a recycled group id is older than the record, or
belongs to a group that no longer has a recorded leader: a pid recycled by an unrelated
process can only be younger than the record if it also took the recorded group id, which a
recycled pid does only as a new session leader of its own; the start-time check then still
spares processes started before the record was written).

Linux only (`/proc`); elsewhere `members` finds nothing and `reap` only removes the records.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def start_ticks(pid: int) -> int | None:
    """The start time of `pid` in clock ticks since boot, or None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return int(fields[19]) if len(fields) > 19 else None


def _group_of(pid: int) -> tuple[int, int] | None:
    """(process group id, start ticks) of `pid`, None when gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    if len(fields) < 20 or fields[0] == "Z":
        return None
    return int(fields[2]), int(fields[19])


def members(pgid: int, *, since: int = 0) -> list[int]:
    """Live (non-zombie) processes of group `pgid` that started at or after tick `since`."""
    out = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            found = _group_of(int(entry.name))
            if found is not None and found[0] == pgid and found[1] >= since:
                out.append(int(entry.name))
    return out


def record(directory: Path, pgid: int) -> None:
    """Record the group led by `pgid` (call right after starting the leader)."""
    directory.mkdir(parents=True, exist_ok=True)
    ticks = start_ticks(pgid)
    (directory / str(pgid)).write_text(str(ticks if ticks is not None else 0))


def forget(directory: Path, pgid: int) -> None:
    """Drop the record of a group whose processes are all gone."""
    with contextlib.suppress(OSError):
        (directory / str(pgid)).unlink()


def kill_group(pgid: int, *, since: int = 0, sig: int = signal.SIGKILL) -> int:
    """Send `sig` to every process of the group started at or after `since`; how many were hit."""
    hit = 0
    for pid in members(pgid, since=since):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
            hit += 1
    return hit


def reap(directory: Path) -> int:
    """SIGKILL every process of every group recorded under `directory` (recursively), and drop the records.

    Returns how many processes were signalled.
    """
    if not directory.is_dir():
        return 0
    hit = 0
    for path in directory.rglob("*"):
        if not path.is_file() or not path.name.isdigit() or path.parent.name != "groups":
            continue
        try:
            since = int(path.read_text().strip() or 0)
        except (OSError, ValueError):
            since = 0
        hit += kill_group(int(path.name), since=since)
        with contextlib.suppress(OSError):
            path.unlink()
    return hit

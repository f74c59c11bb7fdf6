"""The emulated containers' logs: what `kubectl logs` shows for a container that runs no process.

Every run of a container (one container ID) has one `ContainerLog`: a bounded list of lines,
each with the cluster time it was written. The kubelet writes what a runtime would know and
the pod asks for (`kubemesh.kubelet.lifecycle` calls these at each transition):

* `[kubemesh] container "c" started (image i, id <12 hex digits of the container ID>, restart n)`
  when the run starts;
* the lines of the pod's `kubemesh.io/log.<container>` annotation, else of `kubemesh.io/log`
  (a multi-line string), as if the process printed them: all at start, or one every
  `kubemesh.io/log-interval` cluster seconds from the start;
* `[kubemesh] received SIGTERM` when the container is asked to stop;
* `[kubemesh] exited with code n (reason)` when the run ends; nothing is written after it.

Lines printed on an interval are stored with their future time and become visible when the
cluster clock reaches it (a run that ends first drops the lines it never printed). A run keeps
at most `MAX_LINES` lines, the oldest dropped first, as a rotated log file would lose them.

`select` applies the options of `GET pods/{name}/log` as the kubelet applies them to a log file:
`sinceSeconds`/`sinceTime`, then `tailLines`, then `timestamps` (each line prefixed with its
RFC 3339 time at nanosecond width and a space), then `limitBytes` over the output.
`follow` (`ContainerLog.follow`) streams on until the run has ended and every line was sent.
"""

from __future__ import annotations

import asyncio
import bisect
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final

from kubemesh.services.machinery.clock import Clock
from kubemesh.services.model.kinds import Obj

LOG: Final = "kubemesh.io/log"
"""Lines every container of the pod prints at start (`kubemesh.io/log.<container>` for one container)."""
LOG_INTERVAL: Final = "kubemesh.io/log-interval"
"""Cluster seconds between the printed lines (default 0: all at once when the container starts)."""
MAX_LINES: Final = 1000
"""Lines one container run keeps (the oldest are dropped first)."""

PREFIX: Final = "[kubemesh] "


def timestamp(t: float) -> str:
    """RFC 3339 in UTC with nine fractional digits, as the kubelet prefixes `--timestamps` lines."""
    dt = datetime.fromtimestamp(t, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"


@dataclass(slots=True, frozen=True, order=True)
class Line:
    """One line of a container's log (without its newline)."""

    at: float
    seq: int
    text: str


@dataclass(slots=True, kw_only=True)
class LogOptions:
    """The PodLogOptions the kubelet applies (already validated by the apiserver)."""

    follow: bool = False
    timestamps: bool = False
    tail_lines: int | None = None
    since: float | None = None
    """Cluster time: only lines written at or after it."""
    limit_bytes: int | None = None


@dataclass(slots=True, kw_only=True)
class ContainerLog:
    """The log of one run of one container."""

    container_id: str
    lines: list[Line] = field(default_factory=list)
    ended: float | None = None
    """When the run ended (its last line, the exit, is written at that time)."""
    _seq: int = 0

    def write(self, at: float, text: str) -> None:
        """Add a line written at cluster time `at` (kept in time order; ignored once ended)."""
        if self.ended is not None:
            return
        for part in text.splitlines() or [""]:
            self._seq += 1
            bisect.insort(self.lines, Line(at, self._seq, part))
        if len(self.lines) > MAX_LINES:
            del self.lines[: len(self.lines) - MAX_LINES]

    def end(self, at: float, text: str) -> None:
        """The run ended at `at`: drop the lines it never printed, write `text` last."""
        if self.ended is not None:
            return
        self.lines = [ln for ln in self.lines if ln.at <= at]
        self.write(at, text)
        self.ended = at

    def close(self, at: float) -> None:
        """The run ended at `at` without a last line of the kubelet's (a real process's log)."""
        if self.ended is None:
            self.ended = at

    def visible(self, now: float) -> list[Line]:
        """The lines written by cluster time `now`."""
        return self.lines[: bisect.bisect_right(self.lines, now, key=lambda ln: ln.at)]

    def select(self, now: float, opts: LogOptions) -> list[Line]:
        """The visible lines the options pick (since, then tail)."""
        lines = self.visible(now)
        if opts.since is not None:
            since = opts.since
            lines = [ln for ln in lines if ln.at >= since]
        if opts.tail_lines is not None:
            lines = lines[len(lines) - opts.tail_lines:] if opts.tail_lines else []
        return lines

    async def follow(self, *, clock: Clock, opts: LogOptions, alive: Callable[[], bool],
                     poll: float = 0.25) -> AsyncIterator[bytes]:
        """The selected lines, then (with `opts.follow`) each new line until the run has ended.

        `alive` says whether the run is still this kubelet's (the pod was not forgotten and the
        node not powered off): a stream whose run vanished ends instead of waiting forever.
        `poll` is the longest wall-time wait between two looks at the log. A line becomes
        visible when the clock reaches its time, which need not be in the order lines were
        written: what was sent (or left out by since/tail) is tracked by line, not by position.
        """
        budget = opts.limit_bytes
        now = clock.now()
        batch = self.select(now, opts)
        seen = {ln.seq for ln in self.visible(now)}
        while True:
            for ln in batch:
                data = render(ln, timestamps=opts.timestamps)
                if budget is not None:
                    data = data[:budget]
                    budget -= len(data)
                yield data
                if budget is not None and budget <= 0:
                    return
            if not opts.follow:
                return
            if self.ended is not None and all(ln.seq in seen for ln in self.lines):
                return
            if not alive():
                return
            upcoming = [ln.at for ln in self.lines if ln.seq not in seen and ln.at > now]
            wait = poll if not upcoming else min(poll, max(0.01, clock.to_wall(min(upcoming) - now)))
            await asyncio.sleep(wait)  # wall time: the client waits in wall time, whatever the clock's skew
            now = clock.now()
            fresh = [ln for ln in self.visible(now) if ln.seq not in seen]
            seen.update(ln.seq for ln in fresh)
            batch = [ln for ln in fresh if opts.since is None or ln.at >= opts.since]


def render(line: Line, *, timestamps: bool) -> bytes:
    """One line as the log endpoint writes it (with its newline)."""
    text = f"{timestamp(line.at)} {line.text}\n" if timestamps else f"{line.text}\n"
    return text.encode()


def printed_lines(pod: Obj, container: str) -> tuple[list[str], float]:
    """The lines `container` of `pod` prints at start, and the interval between them."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(f"{LOG}.{container}")
    if text is None:
        text = annotations.get(LOG)
    lines = str(text).splitlines() if text else []
    try:
        interval = max(0.0, float(annotations.get(LOG_INTERVAL) or 0.0))
    except (TypeError, ValueError):
        interval = 0.0
    return lines[:MAX_LINES], interval

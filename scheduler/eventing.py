"""Recording events (core/v1 Event) without slowing the caller down.

`EventRecorder.record()` never awaits: it puts the event on a bounded queue and a background task
writes it. As client-go's recorder does, repeated events (same object, type, reason and message)
are aggregated into one Event whose `count` and `lastTimestamp` grow, by a merge patch, instead
of one object per occurrence. When the queue is full the event is dropped and counted: losing an
event is better than stalling a scheduling cycle. Events carry `source.component` (and
`reportingComponent`) and `firstTimestamp`/`lastTimestamp` in cluster time.

Nothing here is scheduler-specific: it could move to `services` for every component.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from services.client import ApiClient, NotFoundError
from services.clock import Clock, format_micro_time, format_time
from services.kinds import EVENTS, Obj


@dataclass(slots=True)
class _Pending:
    ref: Obj
    type: str
    reason: str
    message: str
    time: float


class EventRecorder:
    """Fire-and-forget events with aggregation (see the module docstring)."""

    def __init__(self, client: ApiClient, *, clock: Clock, rng: random.Random, component: str,
                 host: str = "", max_pending: int = 1000, max_remembered: int = 4096) -> None:
        self.client = client
        self.clock = clock
        self.rng = rng
        self.component = component
        self.host = host
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(maxsize=max_pending)
        self._seen: OrderedDict[tuple[str, str, str, str], tuple[str, str, int, str]] = OrderedDict()
        self._max_remembered = max_remembered
        self.dropped = 0
        self.written = 0

    def record(self, obj: Obj, *, type: str, reason: str, message: str) -> None:
        """Queue an event about `obj` (a full object or an ObjectReference-like dict)."""
        meta = obj.get("metadata") or {}
        ref = {"kind": obj.get("kind", "Pod"), "apiVersion": obj.get("apiVersion", "v1"),
               "namespace": meta.get("namespace", obj.get("namespace", "")),
               "name": meta.get("name", obj.get("name", "")), "uid": meta.get("uid", obj.get("uid", "")),
               "resourceVersion": meta.get("resourceVersion", obj.get("resourceVersion", ""))}
        try:
            self._queue.put_nowait(_Pending(ref, type, reason, message, self.clock.now()))
        except asyncio.QueueFull:
            self.dropped += 1

    async def run(self) -> None:
        """Write queued events until cancelled."""
        while True:
            ev = await self._queue.get()
            with contextlib.suppress(Exception):
                await self._write(ev)

    async def _write(self, ev: _Pending) -> None:
        ns = ev.ref["namespace"] or "default"
        key = (ev.ref["uid"] or f"{ns}/{ev.ref['name']}", ev.type, ev.reason, ev.message)
        now = format_time(ev.time)
        known = self._seen.get(key)
        if known is not None:
            name, first, count, _ = known
            try:
                await self.client.patch(EVENTS, name, {"count": count + 1, "lastTimestamp": now},
                                        namespace=ns)
                self._seen[key] = (name, first, count + 1, now)
                self._seen.move_to_end(key)
                self.written += 1
                return
            except NotFoundError:
                self._seen.pop(key, None)
        name = f"{ev.ref['name']}.{int(ev.time * 1e9):x}{self.rng.getrandbits(16):04x}"
        body: Obj = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": ev.ref, "reason": ev.reason, "message": ev.message, "type": ev.type,
            "source": {"component": self.component, **({"host": self.host} if self.host else {})},
            "reportingComponent": self.component, "reportingInstance": self.host or self.component,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "eventTime": format_micro_time(ev.time), "action": "Scheduling" if ev.type else "",
        }
        await self.client.create(EVENTS, body, namespace=ns)
        self.written += 1
        self._seen[key] = (name, now, 1, now)
        if len(self._seen) > self._max_remembered:
            self._seen.popitem(last=False)

    def stats(self) -> dict[str, Any]:
        """Counters for the debug endpoint."""
        return {"pending": self._queue.qsize(), "written": self.written, "dropped": self.dropped}

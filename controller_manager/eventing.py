"""An event recorder: core/v1 Events for what the controllers do, written off the hot path.

`EventRecorder.event(obj, type, reason, message)` never blocks and never raises: it puts the
event on a bounded in-memory queue that `run()` writes to the apiserver. As client-go's
recorder, a repeat of the same (object, type, reason, message) within the correlation window
increments `count` and `lastTimestamp` of the existing Event instead of creating a new one,
and a full queue drops events (controllers must never stall on events).

`recorded` keeps the last events in memory so unit tests and the debug endpoint can read them
without an apiserver. (This module could move to `services/` for the scheduler and kubelet.)
"""

from __future__ import annotations

import asyncio
import collections
from dataclasses import dataclass
from typing import Any

import structlog

from controller_manager.objects import Api, now_str
from services.clock import Clock
from services.kinds import EVENTS, Obj, name_of, namespace_of, uid_of

_log = structlog.get_logger("controller_manager.eventing")

CORRELATION_WINDOW = 600.0
"""Seconds during which identical events are aggregated into one Event's count."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedEvent:
    """One event as the controller meant it."""

    component: str
    kind: str
    namespace: str
    name: str
    uid: str
    type: str
    reason: str
    message: str
    at: float


class EventRecorder:
    """Queue events and write them to the apiserver in the background."""

    def __init__(self, *, clock: Clock, api: Api | None, host: str = "", capacity: int = 10_000,
                 keep: int = 2_000) -> None:
        self._clock = clock
        self._api = api
        self._host = host
        self._queue: asyncio.Queue[RecordedEvent] = asyncio.Queue(maxsize=capacity)
        self.recorded: collections.deque[RecordedEvent] = collections.deque(maxlen=keep)
        self._seen: dict[tuple[str, str, str, str, str], tuple[str, str, int, float]] = {}
        self._seq = 0
        self.dropped = 0

    def for_component(self, component: str) -> ComponentRecorder:
        """A recorder that stamps `source.component` (e.g. "node-controller")."""
        return ComponentRecorder(self, component)

    def record(self, component: str, obj: Obj, type_: str, reason: str, message: str) -> None:
        """Queue one event about `obj` (never blocks, never raises)."""
        ev = RecordedEvent(component=component, kind=str(obj.get("kind") or ""), namespace=namespace_of(obj),
                           name=name_of(obj), uid=uid_of(obj), type=type_, reason=reason, message=message,
                           at=self._clock.now())
        self.recorded.append(ev)
        if self._api is None:
            return
        try:
            self._queue.put_nowait(ev)
        except asyncio.QueueFull:
            self.dropped += 1

    def reasons(self, reason: str | None = None) -> list[RecordedEvent]:
        """The recorded events, optionally only those with `reason`."""
        return [e for e in self.recorded if reason is None or e.reason == reason]

    async def run(self) -> None:
        """Write queued events until cancelled."""
        while True:
            ev = await self._queue.get()
            try:
                await self._write(ev)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # events are best effort, as upstream
                _log.debug("event write failed", reason=ev.reason, object=ev.name, error=repr(exc))

    async def _write(self, ev: RecordedEvent) -> None:
        assert self._api is not None
        # Node events live in "default", as upstream records them.
        ns = ev.namespace or "default"
        key = (ev.uid or ev.name, ev.type, ev.reason, ev.message, ev.component)
        now = ev.at
        prior = self._seen.get(key)
        if prior is not None and now - prior[3] < CORRELATION_WINDOW:
            name, pns, count, first = prior
            try:
                await self._api.patch(EVENTS, name, {"count": count + 1, "lastTimestamp": now_str(now)},
                                      namespace=pns)
                self._seen[key] = (name, pns, count + 1, first)
                return
            except Exception:  # the Event expired or was deleted: create a new one
                self._seen.pop(key, None)
        self._seq += 1
        name = f"{ev.name}.{int(now * 1e9):x}{self._seq:04x}"
        body: dict[str, Any] = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {"kind": ev.kind, "namespace": ev.namespace, "name": ev.name, "uid": ev.uid,
                               "apiVersion": _api_version(ev.kind)},
            "reason": ev.reason, "message": ev.message, "type": ev.type,
            "source": {"component": ev.component, **({"host": self._host} if self._host else {})},
            "firstTimestamp": now_str(now), "lastTimestamp": now_str(now), "count": 1,
            "reportingComponent": ev.component, "reportingInstance": self._host,
        }
        if not ev.namespace:
            body["involvedObject"].pop("namespace")
        await self._api.create(EVENTS, body, namespace=ns)
        if len(self._seen) > 20_000:
            self._seen.clear()
        self._seen[key] = (name, ns, 1, now)


def _api_version(kind: str) -> str:
    return "apps/v1" if kind in ("Deployment", "ReplicaSet", "DaemonSet") else "v1"


class ComponentRecorder:
    """An `EventRecorder` bound to one source component."""

    def __init__(self, parent: EventRecorder, component: str) -> None:
        self._parent = parent
        self.component = component

    def normal(self, obj: Obj, reason: str, message: str) -> None:
        """Record a Normal event."""
        self._parent.record(self.component, obj, "Normal", reason, message)

    def warning(self, obj: Obj, reason: str, message: str) -> None:
        """Record a Warning event."""
        self._parent.record(self.component, obj, "Warning", reason, message)

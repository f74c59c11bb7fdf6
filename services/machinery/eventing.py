"""Recording core/v1 Events without slowing the caller down (client-go's `EventRecorder`).

A component builds one `EventRecorder` per process, runs `run()` as a long-lived task, and
calls `record()` (or `normal()`/`warning()`, or those of a `for_component()` view) from its
hot paths. Guarantees:

* **Never blocks, never raises.** `record()` is synchronous: it stamps the event with the
  injected clock's `now()` and puts it on a bounded queue (`max_pending`). When the queue is
  full the event is dropped and counted in `dropped`: losing an event is better than stalling
  a scheduling cycle or a controller. Write failures are logged at debug level and counted in
  `failed`; they never reach the caller.
* **Aggregation by count.** As client-go's event logger, a repeat of the same (reporting
  component, involved object, type, reason, message) does not create a new Event: the Event
  written for the first occurrence gets `count + 1` and a new `lastTimestamp` (a JSON merge
  patch). The recorder remembers the last `max_remembered` distinct events (least recently
  used first out); an Event that has vanished (404 on the patch) is created afresh with count 1.
* **Order.** Events are written one at a time, in the order they were recorded.
* **Cluster time.** `firstTimestamp`/`lastTimestamp` (metav1.Time) and `eventTime`
  (MicroTime) are the clock's time when `record()` was called, not when the write happened.
* **Identity.** Every Event carries `source.component` and `reportingComponent` (the
  component passed to `record`, e.g. `default-scheduler` or `node-controller`), and
  `source.host` and `reportingInstance` (the process's instance). Events about
  cluster-scoped objects (nodes) are written to the `default` namespace, as upstream.
* **Names** are upstream's `<object>.<unix nanoseconds in hex>` plus a per-recorder sequence
  number, so two events of one object recorded at the same instant do not collide.
* **Memory only.** With `client=None` nothing is written; every event is still kept in
  `recorded` (the last `keep` events), which tests and debug endpoints read.
"""

from __future__ import annotations

import asyncio
import collections
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Final, Protocol

import structlog

from kubemesh.services.machinery.client import NotFoundError
from kubemesh.services.machinery.clock import Clock, format_micro_time, format_time
from kubemesh.services.model.kinds import EVENTS, KINDS, Kind, Obj

_log = structlog.get_logger("kubemesh.services.machinery.eventing")

NORMAL: Final = "Normal"
WARNING: Final = "Warning"

_API_VERSIONS: Final[dict[str, str]] = {k.kind: k.api_version for k in KINDS if k.storage}


class EventClient(Protocol):
    """The part of `kubemesh.services.machinery.client.ApiClient` the recorder uses."""

    async def create(self, kind: Kind, body: Obj, *, namespace: str | None = None) -> Obj:
        """POST an object."""
        ...

    async def patch(self, kind: Kind, name: str, patch: Obj, *, namespace: str | None = None) -> Obj:
        """Merge-patch an object."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RecordedEvent:
    """One event as its caller meant it (before aggregation)."""

    component: str
    kind: str
    api_version: str
    namespace: str
    name: str
    uid: str
    resource_version: str
    type: str
    reason: str
    message: str
    action: str
    at: float
    """Cluster time of the `record()` call."""

    @property
    def key(self) -> tuple[str, ...]:
        """What identical events share (client-go's aggregation key)."""
        obj = self.uid or f"{self.kind}/{self.namespace}/{self.name}"
        return (self.component, obj, self.type, self.reason, self.message)

    def involved_object(self) -> Obj:
        """The ObjectReference of the Event."""
        ref: Obj = {"kind": self.kind, "apiVersion": self.api_version, "name": self.name, "uid": self.uid}
        if self.namespace:
            ref["namespace"] = self.namespace
        if self.resource_version:
            ref["resourceVersion"] = self.resource_version
        return ref


@dataclass(slots=True)
class _Written:
    name: str
    namespace: str
    count: int


def _reference(obj: Obj) -> tuple[str, str, str, str, str, str]:
    """(kind, apiVersion, namespace, name, uid, resourceVersion) of an object or an ObjectReference."""
    meta = obj.get("metadata")
    src = meta if isinstance(meta, dict) else obj
    kind = str(obj.get("kind") or "")
    api_version = str(obj.get("apiVersion") or _API_VERSIONS.get(kind, "v1"))
    return (kind, api_version, str(src.get("namespace") or ""), str(src.get("name") or ""),
            str(src.get("uid") or ""), str(src.get("resourceVersion") or ""))


class EventRecorder:
    """Fire-and-forget Events with aggregation (see the module docstring)."""

    def __init__(self, client: EventClient | None, *, clock: Clock, component: str, instance: str = "",
                 max_pending: int = 1000, max_remembered: int = 4096, keep: int = 1000) -> None:
        if max_pending < 1 or max_remembered < 1:
            raise ValueError("max_pending and max_remembered must be positive")
        self._client = client
        self._clock = clock
        self.component = component
        """The default reporting component (`for_component` views override it)."""
        self.instance = instance
        self._queue: asyncio.Queue[RecordedEvent] = asyncio.Queue(maxsize=max_pending)
        self._written: OrderedDict[tuple[str, ...], _Written] = OrderedDict()
        self._max_remembered = max_remembered
        self._seq = 0
        self.recorded: collections.deque[RecordedEvent] = collections.deque(maxlen=keep)
        """The last `keep` events recorded (written or not)."""
        self.dropped = 0
        """Events lost because the queue was full."""
        self.written = 0
        """Successful writes (creates and count patches)."""
        self.failed = 0
        """Writes the apiserver refused or that did not reach it."""

    # -- recording (synchronous) ----------------------------------------------------------------

    def record(self, obj: Obj, *, type: str, reason: str, message: str, action: str = "",
               component: str | None = None) -> None:
        """Queue an event about `obj` (an object or an ObjectReference-like dict); never blocks."""
        kind, api_version, namespace, name, uid, rv = _reference(obj)
        ev = RecordedEvent(component=component or self.component, kind=kind, api_version=api_version,
                           namespace=namespace, name=name, uid=uid, resource_version=rv, type=type,
                           reason=reason, message=message, action=action, at=self._clock.now())
        self.recorded.append(ev)
        if self._client is None:
            return
        try:
            self._queue.put_nowait(ev)
        except asyncio.QueueFull:
            self.dropped += 1

    def normal(self, obj: Obj, reason: str, message: str) -> None:
        """Record a Normal event as the default component."""
        self.record(obj, type=NORMAL, reason=reason, message=message)

    def warning(self, obj: Obj, reason: str, message: str) -> None:
        """Record a Warning event as the default component."""
        self.record(obj, type=WARNING, reason=reason, message=message)

    def for_component(self, component: str) -> ComponentRecorder:
        """A view that records as `component` (e.g. `node-controller`) through this recorder."""
        return ComponentRecorder(self, component)

    def reasons(self, reason: str | None = None) -> list[RecordedEvent]:
        """The remembered events, optionally only those with `reason`."""
        return [e for e in self.recorded if reason is None or e.reason == reason]

    def stats(self) -> dict[str, Any]:
        """Counters for debug endpoints."""
        return {"pending": self._queue.qsize(), "written": self.written, "dropped": self.dropped,
                "failed": self.failed}

    # -- writing (the background task) ----------------------------------------------------------

    async def run(self) -> None:
        """Write queued events until cancelled."""
        while True:
            ev = await self._queue.get()
            try:
                await self._write(ev)
            except Exception as exc:  # best effort, as upstream: never let an event stop the loop
                self.failed += 1
                _log.debug("event write failed", reason=ev.reason, object=ev.name, error=str(exc) or type(exc).__name__)
            finally:
                self._queue.task_done()

    async def join(self) -> None:
        """Wait until every queued event has been handled (needs `run()` running)."""
        await self._queue.join()

    async def _write(self, ev: RecordedEvent) -> None:
        assert self._client is not None
        key = ev.key
        stamp = format_time(ev.at)
        known = self._written.get(key)
        if known is not None:
            try:
                await self._client.patch(EVENTS, known.name, {"count": known.count + 1, "lastTimestamp": stamp},
                                         namespace=known.namespace)
            except NotFoundError:
                del self._written[key]  # the Event expired or was deleted: create it again
            else:
                known.count += 1
                self._written.move_to_end(key)
                self.written += 1
                return
        namespace = ev.namespace or "default"
        self._seq += 1
        name = f"{ev.name}.{int(ev.at * 1e9):x}{self._seq:04x}"
        source: Obj = {"component": ev.component}
        if self.instance:
            source["host"] = self.instance
        body: Obj = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": ev.involved_object(),
            "reason": ev.reason, "message": ev.message, "type": ev.type,
            "source": source,
            "reportingComponent": ev.component, "reportingInstance": self.instance or ev.component,
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "eventTime": format_micro_time(ev.at),
        }
        if ev.action:
            body["action"] = ev.action
        await self._client.create(EVENTS, body, namespace=namespace)
        self.written += 1
        self._written[key] = _Written(name=name, namespace=namespace, count=1)
        if len(self._written) > self._max_remembered:
            self._written.popitem(last=False)


class ComponentRecorder:
    """An `EventRecorder` seen as one reporting component."""

    def __init__(self, parent: EventRecorder, component: str) -> None:
        self._parent = parent
        self.component = component

    def record(self, obj: Obj, *, type: str, reason: str, message: str, action: str = "") -> None:
        """Queue an event about `obj` as this component."""
        self._parent.record(obj, type=type, reason=reason, message=message, action=action,
                            component=self.component)

    def normal(self, obj: Obj, reason: str, message: str) -> None:
        """Record a Normal event."""
        self.record(obj, type=NORMAL, reason=reason, message=message)

    def warning(self, obj: Obj, reason: str, message: str) -> None:
        """Record a Warning event."""
        self.record(obj, type=WARNING, reason=reason, message=message)

"""The history: every request, every watch delivery and every fault operation, in order.

History is the product of a chaos run: it is how a report shows which component saw which
event when. Records are appended synchronously (so their order is the order things happened
in this process), numbered from 1, stamped with cluster time, and kept in a bounded ring:
the oldest records are dropped first, and `first_index` says where the ring now starts.

Record types (all records have `index`, `time` (cluster seconds) and `type`):

* `request`: `component`, `instance`, `verb`, `path`, `key`, `rv` (of the object returned),
  `code`, `latency` (wall seconds);
* `write`: `component`, `instance`, `resource`, `event` (ADDED/MODIFIED/DELETED), `key`, `rv`;
* `delivery`: `component`, `instance`, `watch` (watcher id), `resource`, `event`, `key`, `rv`;
* `fault`: `op` (create, inject, recover, update, delete, trigger), `fault`, `outcome`
  (ok, fail, info: Jepsen's vocabulary; info = outcome unknown), `detail`.

Subscribers (`subscribe`) are called synchronously with each record; the chaos triggers
use this to fire the moment a component has been delivered or has written an event.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextvars import ContextVar
from typing import Any, Final

from services.clock import Clock

Record = dict[str, Any]
Subscriber = Callable[[Record], None]

DELIVERY_FIELDS: Final = ("index", "time", "type", "component", "instance", "watch", "resource", "event", "key",
                          "rv")
"""The fields of a `delivery` record, in the order `History.deliveries` takes their values."""

Delivery = tuple[int, float, str, str, str, int, str, str, str, int]
"""A delivery record as kept: a tuple in `DELIVERY_FIELDS` order (a fifth of a dict's memory;
deliveries are most of the history, one per event per watcher)."""

WRITER: Final[ContextVar[tuple[str, str]]] = ContextVar("kubemesh_writer", default=("unknown", "unknown"))
"""The (component, instance) whose request is being served: attributes store writes to it."""


def _as_record(rec: Record | Delivery) -> Record:
    return rec if isinstance(rec, dict) else dict(zip(DELIVERY_FIELDS, rec, strict=True))


class History:
    """A bounded, ordered, subscribable log of what happened."""

    def __init__(self, *, clock: Clock, capacity: int = 1_000_000, deliveries: bool = True) -> None:
        self.clock = clock
        self.capacity = capacity
        self.record_deliveries = deliveries
        self._records: deque[Record | Delivery] = deque(maxlen=capacity)
        self._next = 1
        self._subscribers: list[Subscriber] = []
        self._changed = asyncio.Event()

    @property
    def first_index(self) -> int:
        """Index of the oldest record still kept (next index when empty)."""
        if not self._records:
            return self._next
        first = self._records[0]
        return int(first["index"]) if isinstance(first, dict) else first[0]

    @property
    def last_index(self) -> int:
        """Index of the newest record (0 when nothing was recorded)."""
        return self._next - 1

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        """Be called with every new record; returns a function that unsubscribes."""
        self._subscribers.append(subscriber)

        def unsubscribe() -> None:
            if subscriber in self._subscribers:
                self._subscribers.remove(subscriber)

        return unsubscribe

    def append(self, type_: str, **fields: Any) -> Record:
        """Record one thing that happened, now."""
        rec: Record = {"index": self._next, "time": self.clock.now(), "type": type_, **fields}
        self._next += 1
        self._records.append(rec)
        for sub in tuple(self._subscribers):
            sub(rec)
        self._changed.set()
        return rec

    def deliveries(self, *, component: str, instance: str, watch: int,
                   events: Sequence[tuple[str, str, str, int]]) -> None:
        """Record the deliveries of one watch write, now, in order: (resource, event, key, rv) each."""
        first = self._next
        self._next = first + len(events)
        now = self.clock.now()
        batch: list[Delivery] = [(first + i, now, "delivery", component, instance, watch, resource, event, key, rv)
                                 for i, (resource, event, key, rv) in enumerate(events)]
        self._records.extend(batch)
        if self._subscribers:
            for rec in batch:
                for sub in tuple(self._subscribers):
                    sub(_as_record(rec))
        self._changed.set()

    def since(self, index: int = 0, *, types: Iterable[str] | None = None, limit: int | None = None) -> list[Record]:
        """Records with an index above `index` (optionally of some types only)."""
        wanted = set(types) if types else None
        out: list[Record] = []
        records = self._records
        start = min(max(0, index - self.first_index + 1), len(records))
        # A deque is slow to index in the middle: walk it once, from the nearer end.
        if start > len(records) // 2:
            tail: Iterable[Record | Delivery] = reversed(list(itertools.islice(reversed(records),
                                                                              len(records) - start)))
        else:
            tail = itertools.islice(records, start, None)
        for kept in tail:
            if wanted is None or (kept["type"] if isinstance(kept, dict) else kept[2]) in wanted:
                out.append(_as_record(kept))
                if limit is not None and len(out) >= limit:
                    break
        return out

    async def follow(self, index: int = 0, *, types: Iterable[str] | None = None) -> AsyncIterator[Record]:
        """Records after `index`, then new ones as they come (until cancelled)."""
        wanted = tuple(types) if types else None
        while True:
            batch = self.since(index, types=wanted)
            for rec in batch:
                yield rec
            if batch:
                index = batch[-1]["index"]
            else:
                index = max(index, self.last_index)
            self._changed.clear()
            if self.last_index <= index:
                await self._changed.wait()

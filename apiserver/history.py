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
* `fault`: `op` (create, trigger, inject, recover, update, end, delete), `fault`, `faultType`,
  `outcome` (ok, fail, info: Jepsen's vocabulary; info = outcome unknown), `detail`.

Records are kept compact (`_Row`, `_Deliveries`: a quarter of a dict's memory or less) and
become dicts when read: a full ring of a million records is a few hundred MB, not a GB.

Subscribers (`subscribe`) are called synchronously with each record (tools in the same
process; the chaos triggers see writes and deliveries first-hand, not through here).
"""

from __future__ import annotations

import asyncio
import sys
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterable
from contextvars import ContextVar
from typing import Any, Final

from kubemesh.services.machinery.clock import Clock

Record = dict[str, Any]
Subscriber = Callable[[Record], None]

Seen = tuple[str, str, str, int]
"""What one delivery says about its event: (resource, event type as the watcher saw it, key, rv).
One such tuple is shared by every watcher that saw the event the same way."""

WRITER: Final[ContextVar[tuple[str, str]]] = ContextVar("kubemesh_writer", default=("unknown", "unknown"))
"""The (component, instance) whose request is being served: attributes store writes to it."""


class _Deliveries:
    """The deliveries of one watch write, or of one flush's writes that carried the same events.

    Records `first` .. `first + len(watchers) * len(seen) - 1`: each watcher's deliveries in
    turn, in the order the watchers were written to, each in the order of `seen`.

    Deliveries are most of the history (one per event per watcher), so they are kept one entry
    per write, holding references to shared `Seen` tuples: no object per delivery, and dicts
    only for the records someone reads. The watchers written to in one flush mostly get the
    very same events (`History.deliveries`' `batch`): they share one entry, and the entry's
    time (the flush's), instead of one entry each. (A plain slotted class: one is built per
    watch write, and a frozen dataclass's constructor costs several times more.)
    """

    __slots__ = ("batch", "first", "seen", "time", "watchers")

    def __init__(self, first: int, time: float, watcher: tuple[str, str, int], seen: list[Seen],
                 batch: int | None) -> None:
        self.first = first
        self.time = time
        self.watchers = [watcher]
        """(component, instance, watch id) of each watcher recorded here."""
        self.seen = seen
        self.batch = batch

    def count(self) -> int:
        """The records this entry holds."""
        return len(self.watchers) * len(self.seen)

    def record(self, i: int) -> Record:
        w, j = divmod(i, len(self.seen))
        component, instance, watch = self.watchers[w]
        resource, event, key, rv = self.seen[j]
        return {"index": self.first + i, "time": self.time, "type": "delivery", "component": component,
                "instance": instance, "watch": watch, "resource": resource, "event": event, "key": key,
                "rv": rv}


class _Row:
    """One record kept as a tuple of values beside a shared tuple of field names.

    A request or write record as a dict cost about 1.1 KB; at ten thousand nodes the ring takes
    two thousand of them a second, and a full ring of dicts was most of the apiserver's memory.
    A row costs about a quarter of that: the field names are shared by every row of the same
    shape, the strings that repeat (component, instance, verb, path, key, user) are interned,
    and a request's authorization attributes are shared between equal ones. The dict is built
    when someone reads the record.
    """

    __slots__ = ("first", "names", "time", "type", "values")

    def __init__(self, first: int, time: float, type_: str, names: tuple[str, ...], values: tuple[Any, ...]) -> None:
        self.first = first
        self.time = time
        self.type = type_
        self.names = names
        self.values = values

    def record(self) -> Record:
        rec: Record = {"index": self.first, "time": self.time, "type": self.type}
        rec.update(zip(self.names, self.values, strict=True))
        return rec


_Entry = Record | _Deliveries | _Row

_INTERNED: Final = frozenset({"component", "instance", "verb", "path", "key", "user", "resource", "event"})
"""Fields whose string values repeat from record to record (a node's lease path every 10 s)."""
_SHARED_ATTRIBUTES_MAX: Final = 100_000
"""Distinct attribute dicts shared before the table starts over (bounds its memory)."""


def _first(entry: _Entry) -> int:
    return entry.first if isinstance(entry, _Deliveries | _Row) else int(entry["index"])


def _count(entry: _Entry) -> int:
    return entry.count() if isinstance(entry, _Deliveries) else 1


class History:
    """A bounded, ordered, subscribable log of what happened."""

    def __init__(self, *, clock: Clock, capacity: int = 1_000_000, deliveries: bool = True) -> None:
        self.clock = clock
        self.capacity = capacity
        self.record_deliveries = deliveries
        self._entries: deque[_Entry] = deque()
        self._size = 0  # records held by the entries
        self._next = 1
        self._subscribers: list[Subscriber] = []
        self._changed = asyncio.Event()
        self._names: dict[tuple[str, ...], tuple[str, ...]] = {}
        self._attributes: dict[tuple[tuple[str, Any], ...], dict[str, Any]] = {}

    @property
    def first_index(self) -> int:
        """Index of the oldest record still kept (next index when empty)."""
        return _first(self._entries[0]) if self._entries else self._next

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

    def _keep(self, entry: _Entry | None, count: int) -> None:
        """Add an entry holding `count` records (None: `count` records added to the newest entry)."""
        if entry is not None:
            self._entries.append(entry)
        self._size += count
        # The ring drops whole entries, oldest first (a write's deliveries go together).
        while self._size > self.capacity and len(self._entries) > 1:
            self._size -= _count(self._entries.popleft())

    def append(self, type_: str, **fields: Any) -> None:
        """Record one thing that happened, now."""
        index = self._next
        self._next += 1
        if self._subscribers:
            rec: Record = {"index": index, "time": self.clock.now(), "type": type_, **fields}
            self._keep(rec, 1)
            for sub in tuple(self._subscribers):
                sub(rec)
        else:
            self._keep(self._row(index, type_, fields), 1)
        self._changed.set()

    def _row(self, index: int, type_: str, fields: dict[str, Any]) -> _Row:
        names = tuple(fields)
        names = self._names.setdefault(names, names)
        values = tuple(self._compact(name, value) for name, value in fields.items())
        return _Row(index, self.clock.now(), type_, names, values)

    def _compact(self, name: str, value: Any) -> Any:
        """The value to keep: a repeating string interned, equal attribute dicts shared."""
        if isinstance(value, str):
            return sys.intern(value) if name in _INTERNED else value
        if not isinstance(value, dict) or name != "attributes":
            return value
        shape = tuple(value.items())
        try:
            shared = self._attributes.get(shape)
        except TypeError:  # an unhashable value: kept as it is
            return value
        if shared is None:
            if len(self._attributes) >= _SHARED_ATTRIBUTES_MAX:
                self._attributes.clear()
            shared = self._attributes[shape] = value
        return shared

    def deliveries(self, *, component: str, instance: str, watch: int, seen: list[Seen],
                   batch: int | None = None) -> None:
        """Record the deliveries of one watch write, now, in order (the list is taken over, not copied).

        `batch`: the flush this write belongs to (None: a write of its own). Consecutive writes
        of one batch with the very same `seen` list (the flusher's watchers that got the same
        events) share one entry and its time: one list append each instead of an entry, a
        clock read and a ring step. The records read back are the same, one per delivery, in
        the same order.
        """
        if not seen:
            return
        n = len(seen)
        if batch is not None and not self._subscribers and self._entries:
            last = self._entries[-1]
            if isinstance(last, _Deliveries) and last.batch == batch and last.seen is seen:
                last.watchers.append((component, instance, watch))
                self._next += n
                self._keep(None, n)
                self._changed.set()
                return
        entry = _Deliveries(self._next, self.clock.now(), (component, instance, watch), seen, batch)
        self._next += n
        self._keep(entry, n)
        if self._subscribers:
            for i in range(n):
                rec = entry.record(i)
                for sub in tuple(self._subscribers):
                    sub(rec)
        self._changed.set()

    def since(self, index: int = 0, *, types: Iterable[str] | None = None, limit: int | None = None) -> list[Record]:
        """Records with an index above `index` (optionally of some types only)."""
        wanted = set(types) if types else None
        entries = self._entries
        if not entries or index >= self._next - 1:
            return []
        # Walk the entries once, from the nearer end (a deque is slow to index in the middle).
        if index - self.first_index > self._size // 2:
            tail: list[_Entry] = []
            for entry in reversed(entries):
                tail.append(entry)
                if _first(entry) <= index + 1:
                    break
            tail.reverse()
            picked: Iterable[_Entry] = tail
        else:
            picked = entries
        out: list[Record] = []
        for entry in picked:
            if isinstance(entry, _Deliveries):
                count = entry.count()
                if entry.first + count <= index + 1 or (wanted is not None and "delivery" not in wanted):
                    continue
                for i in range(max(0, index + 1 - entry.first), count):
                    out.append(entry.record(i))
                    if limit is not None and len(out) >= limit:
                        return out
            elif isinstance(entry, _Row):
                if entry.first > index and (wanted is None or entry.type in wanted):
                    out.append(entry.record())
                    if limit is not None and len(out) >= limit:
                        return out
            elif entry["index"] > index and (wanted is None or entry["type"] in wanted):
                out.append(entry)
                if limit is not None and len(out) >= limit:
                    return out
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

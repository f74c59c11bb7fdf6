"""Watch streams: a window of recent events per kind, and fan-out to bounded watchers.

What a watch promises (the Kubernetes watch-cache contract, kept here):

* Events reach a watcher in revision order; per-object order is therefore always kept.
* A watch from revision N delivers every matching event after N, if N is still inside the
  kind's window; if the window has moved past N the watch fails with 410 Expired and the
  client relists. A watch from "" or "0" starts with a synthetic ADDED per matching object.
* With selectors, an object that starts matching arrives as ADDED and one that stops
  matching as DELETED (carrying its previous state at the new revision).
* BOOKMARK events (when asked for) carry a revision up to which this watcher has been sent
  everything it matches; they are emitted only when its queue is empty, at most every
  `WatchSettings.bookmark_interval` (busy or not). The bookmark that ends the initial events
  carries the revision of the initial state.
* A watcher's queue is bounded. A watcher that cannot keep up is closed (its stream ends;
  the client resumes from its last revision), never allowed to grow memory without bound.

Fan-out cost: a live event is not handed to one task per watcher. Once a watcher has sent
its initial state and has nothing queued, its stream goes *direct*: new items are queued and
the watcher is marked dirty in the hub's `Flusher`, which, once per flush, writes every dirty
watcher's backlog to its connection as one chunk, synchronously. Flushes are driven by
readiness and bounded in duty cycle: the next flush runs at the end of the current loop
iteration (after whatever else was ready, so one iteration's events share one write per
watcher) unless the last flush ended less than its own duration ago, in which case it waits
out that gap (never longer than `WatchSettings.flush_interval`). An idle hub therefore
delivers at once, and a hub whose flushes get expensive (many watchers, big backlogs) spends
at most about half its time flushing, writing bigger chunks less often, instead of one task
wake-up and one write per event. The stream's task wakes only to close, to send a bookmark,
or when the connection's buffer is full; it then takes the queue back (awaiting the drain)
and goes direct again once the queue is empty. Both paths pop the same queue and write
without awaiting in between, so revision order holds across the switch.

Encoding cost: an event's object is serialised at most once per encoding, and the frame
bytes for each (event type, encoding) are cached on the event, so every watcher of one
encoding is sent the same bytes. Pod watchers that select one node (`spec.nodeName=X`, the
kubelet's watch) sit in an index, so a pod event is offered to the watchers of its node and
to the unindexed watchers only: fan-out does not grow with the number of kubelets.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgpack
import structlog

from kubemesh.apiserver import conversion
from kubemesh.apiserver.history import Seen
from kubemesh.apiserver.storage import EventType, Store
from kubemesh.services.model.codec import Encoding, encode
from kubemesh.services.model.kinds import PODS, Kind, Obj, labels_of, namespace_of
from kubemesh.services.model.selectors import FieldSelector, LabelSelector


@dataclass(slots=True, eq=False)
class Event:
    """One write as watchers see it, with its encodings cached."""

    type: EventType
    kind: Kind
    obj: Obj
    prev: Obj | None
    rv: int
    _bytes: dict[tuple[bool, Encoding], bytes] = field(default_factory=dict)
    _frames: dict[tuple[str, bool, Encoding], bytes] = field(default_factory=dict)
    _plain: dict[Encoding, bytes] = field(default_factory=dict)
    _as_deleted: Obj | None = None
    namespace: str = ""
    """The object's namespace (computed once: every watcher's namespace check reads it)."""
    key: str = ""
    """The object's `namespace/name` key (computed once; history records it per delivery)."""
    seen: Seen = field(init=False)
    """What the history records of a delivery of this event as it is (shared by every such delivery)."""

    def __post_init__(self) -> None:
        md = self.obj.get("metadata") or {}
        self.namespace = str(md.get("namespace") or "")
        name = str(md.get("name") or "")
        self.key = f"{self.namespace}/{name}" if self.namespace else name
        self.seen = (self.kind.plural, self.type, self.key, self.rv)

    def seen_as(self, type_: str) -> Seen:
        """What the history records of a delivery of this event seen as `type_`.

        Shared by every watcher that saw the event as it is (the others are selector
        transitions, recorded as the type they were seen as).
        """
        return self.seen if type_ == self.type else (self.kind.plural, type_, self.key, self.rv)

    def object_for(self, *, use_prev: bool) -> Obj:
        """The object a frame carries: the new state, or the previous state re-stamped."""
        if not use_prev or self.prev is None:
            return self.obj
        if self._as_deleted is None:
            self._as_deleted = {**self.prev, "metadata": {**self.prev["metadata"],
                                                          "resourceVersion": str(self.rv)}}
        return self._as_deleted

    def frame(self, type_: str, encoding: Encoding, *, use_prev: bool = False) -> bytes:
        """The wire frame `{"type": type_, "object": ...}` in an encoding, built once."""
        if type_ == self.type and not use_prev:  # the common case, asked once per watcher: one lookup
            plain = self._plain.get(encoding)
            if plain is None:
                plain = self._plain[encoding] = self._build(type_, encoding, use_prev=False)
            return plain
        return self._build(type_, encoding, use_prev=use_prev)

    def body(self, encoding: Encoding, *, use_prev: bool = False) -> bytes:
        """The object (as `object_for` gives it) serialised in an encoding, once."""
        bkey = (use_prev, encoding)
        body = self._bytes.get(bkey)
        if body is None:
            obj = self.object_for(use_prev=use_prev)
            body = encode(obj, encoding)
            self._bytes[bkey] = body
        return body

    def _build(self, type_: str, encoding: Encoding, *, use_prev: bool) -> bytes:
        fkey = (type_, use_prev, encoding)
        cached = self._frames.get(fkey)
        if cached is not None:
            return cached
        frame = encode_frame(type_, self.body(encoding, use_prev=use_prev), encoding)
        self._frames[fkey] = frame
        return frame


log = structlog.get_logger("apiserver.watching")

_MSGPACK_HEADS: dict[str, bytes] = {}


def encode_frame(type_: str, body: bytes, encoding: Encoding) -> bytes:
    """Wrap an encoded object into a watch frame."""
    if encoding == "msgpack":
        head = _MSGPACK_HEADS.get(type_)
        if head is None:
            head = b"\x82" + msgpack.packb("type") + msgpack.packb(type_) + msgpack.packb("object")
            _MSGPACK_HEADS[type_] = head
        return head + body
    return b'{"type":"' + type_.encode() + b'","object":' + body + b"}\n"


def encode_event(type_: str, obj: Obj, encoding: Encoding) -> bytes:
    """Encode a one-off event (synthetic ADDED, BOOKMARK, ERROR)."""
    body = encode(obj, encoding)
    return encode_frame(type_, body, encoding)


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchSettings:
    """Limits of the watch machinery."""

    window: int = 10_000
    """Events kept per kind for watches that resume from a revision."""
    max_queue: int = 10_000
    """Events a watcher may have waiting; beyond that it is closed as too slow."""
    bookmark_interval: float = 5.0
    """Wall seconds between the bookmarks of a watcher that asked for them (sent only when its
    queue is empty)."""
    batch: int = 512
    """Frames joined into one write when a watcher has a backlog."""
    flush_interval: float = 0.005
    """The longest gap between two flushes of the direct writers (see the module docstring):
    the most a live event waits for its write beyond the end of its loop iteration. A flush
    waits only as long as the previous one took, up to this."""


Item = tuple[str, Event, bool]
"""A queued delivery: (event type as this watcher sees it, the event, carry previous state)."""

Tap = Callable[["Watcher", Item], bool]
"""Chaos's hook on a watcher: called with each item before it is queued; returning True
means the tap took the item (held, delayed, dropped...) and will `inject` what it delivers."""

Deliver = Callable[["Watcher", Sequence[Item]], None]
"""Called with the items of each write, in order, at the moment their frames are handed to the
connection."""

TableRow = Callable[[Kind, Obj], Obj]
"""An object as the one-row Table a table watch sends (kubectl's `get -w`)."""


class Sink(Protocol):
    """A watch connection written to synchronously (the direct path)."""

    def write(self, data: bytes) -> bool:
        """Send a chunk now; False when the connection is gone or its buffer is over its limit."""
        ...

    async def drain(self) -> None:
        """Wait until the connection's buffer has room again."""
        ...

    def abort(self) -> None:
        """Drop the connection at once (what is buffered is lost)."""
        ...


class ChunkMemo:
    """The last chunk built from a list of items, for the next watcher with the same backlog.

    Watchers flushed in one pass mostly hold the very same items (`publish` shares one item
    tuple between every watcher offered an event as it is), in the same order: their chunk
    is built once. Items compare by identity first, so checking a backlog against the last
    one is a C-level walk, and a watcher whose items differ anywhere (a selector
    transition, another kind) gets its own chunk.
    """

    __slots__ = ("chunk", "encoding", "items")

    def __init__(self) -> None:
        self.items: list[Item] = []
        self.encoding = ""
        self.chunk = b""

    def get(self, items: list[Item], encoding: str) -> bytes | None:
        """The chunk of exactly these items in this encoding, if it was the last one built."""
        if encoding == self.encoding and items == self.items:
            return self.chunk
        return None

    def put(self, items: list[Item], encoding: str, chunk: bytes) -> None:
        """Remember a chunk (replacing the previous one)."""
        self.items, self.encoding, self.chunk = items, encoding, chunk

    def clear(self) -> None:
        """Let go of the last items (a flush is over: their events need not stay alive)."""
        self.items, self.encoding, self.chunk = [], "", b""


class Flusher:
    """Coalesces the direct writes of every watcher of a hub (see the module docstring).

    `mark` records a watcher with new items and schedules a flush if none is pending: at the
    end of this loop iteration, or, when the last flush ended less than its own duration ago,
    once that gap is over (capped at `interval`). A flush writes each marked watcher's backlog
    as one chunk, in the order the watchers were marked (each watcher's own items stay in
    revision order).
    """

    def __init__(self, *, interval: float) -> None:
        self.interval = interval
        self.memo = ChunkMemo()
        self._dirty: dict[Watcher, None] = {}
        self._handle: asyncio.Handle | asyncio.TimerHandle | None = None
        self._ready_at = float("-inf")
        """`time.perf_counter()` before which no flush starts: the last flush's end plus its duration.
        (Not the loop's clock: uvloop's counts whole milliseconds, and most flushes take less.)"""
        self.flushes = 0
        self.batch: int | None = None
        """The number of the flush running now (None between flushes): the deliveries it writes
        are one batch for the history (`History.deliveries`)."""

    def mark(self, w: Watcher) -> None:
        """`w` has queued items to write."""
        self._dirty[w] = None
        if self._handle is None:
            loop = asyncio.get_running_loop()
            delay = self._ready_at - time.perf_counter()
            self._handle = loop.call_later(delay, self.flush) if delay > 0 else loop.call_soon(self.flush)

    def flush(self) -> None:
        """Write every marked watcher's backlog (the scheduled callback; tests call it too)."""
        self._handle = None
        started = time.perf_counter()
        self.flushes += 1
        self.batch = self.flushes
        dirty, self._dirty = self._dirty, {}
        try:
            self._flush_each(dirty)
        finally:
            self.batch = None
            self.memo.clear()
            ended = time.perf_counter()
            self._ready_at = ended + min(ended - started, self.interval)

    def _flush_each(self, dirty: dict[Watcher, None]) -> None:
        for w in dirty:
            try:
                w.flush()
            except Exception:
                # One broken stream must not strand the others. Its items may be half taken:
                # cut the connection so that its client resumes from what it really received.
                log.exception("watch flush failed; closing the stream", watcher=w.id, who=w.identity)
                w.close("internal error while writing the stream")
                if w.sink is not None:
                    w.sink.abort()

_ids = itertools.count(1)


class Watcher:
    """One watch stream: its selection, its queue and its writer side."""

    def __init__(self, *, kind: Kind, namespace: str | None, labels: LabelSelector | None,
                 fields: FieldSelector | None, encoding: Encoding, bookmarks: bool,
                 identity: tuple[str, str], settings: WatchSettings, now: Callable[[], float],
                 revision: Callable[[], int], flusher: Flusher | None = None,
                 table_row: TableRow | None = None) -> None:
        self.kind = kind
        self.namespace = namespace or None
        self.labels = labels if labels is not None and not labels.empty else None
        self.fields = fields if fields is not None and not fields.empty else None
        self.encoding: Encoding = "json" if table_row is not None else encoding
        self.table_row = table_row
        """For kubectl's `get -w`: each object as a Table row (JSON only); None sends the objects."""
        self.bookmarks = bookmarks
        self.identity = identity
        self.settings = settings
        self._now = now
        self._revision = revision
        self.initial: deque[bytes] = deque()
        self.queue: deque[Item] = deque()
        self.closed = False
        self.close_reason = ""
        self.final_frame: bytes | None = None
        self.delivered = 0
        self._wake = asyncio.Event()
        self.node_key: str | None = None
        self.initial_end_rv: int | None = None
        self.id = next(_ids)
        self.taps: list[Tap] = []
        self.on_deliver: Deliver | None = None
        self._suppress_bookmarks = False
        self._flusher = flusher
        self.sink: Sink | None = None
        """The connection, for the direct path (set by the server once the response is started)."""
        self.converts = conversion.differs(kind)
        """A resource watched at another version than it is stored at: frames are its own."""
        self.direct = False
        """Whether new items are written by the flusher (True) or by the stream's task."""

    # ------------------------------------------------------------------------------ selection

    def matches(self, obj: Obj) -> bool:
        """Whether an object is in this watcher's selection."""
        if self.namespace is not None and namespace_of(obj) != self.namespace:
            return False
        if self.labels is not None and not self.labels.matches(labels_of(obj)):
            return False
        return self.fields is None or self.fields.matches(obj)

    def offer(self, event: Event, plain: Item | None = None) -> None:
        """Queue an event as this watcher sees it (synchronously, in revision order).

        `plain`: the item `(event.type, event, False)`, shared by every watcher that takes the
        event as it is. (It is not kept on the event: the tuple would make a reference cycle,
        and every event would become garbage for the cyclic collector.)
        """
        if self.closed:
            return
        if self.namespace is not None and event.namespace != self.namespace:
            return  # an object never changes namespace: no transition to consider
        item: Item
        if self.labels is None and self.fields is None:
            item = plain if plain is not None else (event.type, event, False)
        elif event.type == "MODIFIED" and event.prev is not None:
            now_in = self.matches(event.obj)
            was_in = self.matches(event.prev)
            if now_in and was_in:
                item = ("MODIFIED", event, False)
            elif now_in:
                item = ("ADDED", event, False)
            elif was_in:
                item = ("DELETED", event, True)
            else:
                return
        elif self.matches(event.obj):
            item = (event.type, event, False)
        else:
            return
        # This runs for every event and every watcher of its kind: keep it flat.
        for tap in self.taps:
            if tap(self, item):
                return
        self._enqueue(item)

    def inject(self, item: Item) -> None:
        """Queue an item past the taps (chaos releasing what it held)."""
        if not self.closed:
            self._enqueue(item)

    def _enqueue(self, item: Item) -> None:
        """Queue an item on an open watcher and wake whoever writes it."""
        if len(self.queue) >= self.settings.max_queue:
            # A watcher that cannot keep up is cut off, as the real watch cache does; the
            # client resumes from the last revision it received. Its connection is aborted:
            # a client that stopped reading would otherwise hold the stream's task forever.
            self.close("watcher too slow: its queue is full")
            if self.sink is not None:
                self.sink.abort()
            return
        self.queue.append(item)
        if self.direct:
            assert self._flusher is not None
            self._flusher.mark(self)
        else:
            self._wake.set()

    def add_initial(self, frame: bytes) -> None:
        """Queue a frame of the initial state (not counted against the queue bound)."""
        self.initial.append(frame)

    def force_gone(self, message: str) -> None:
        """End the stream with a 410 ERROR event, as a compacted watch cache does."""
        status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": message, "reason": "Expired", "code": 410}
        self.queue.clear()
        self.close(message, final_frame=encode_event("ERROR", status, self.encoding))

    def close(self, reason: str, *, final_frame: bytes | None = None) -> None:
        """End the stream after what is already queued (final_frame: e.g. an ERROR)."""
        if not self.closed:
            self.closed = True
            self.close_reason = reason
            self.final_frame = final_frame
            self.direct = False
            self._wake.set()

    # ------------------------------------------------------------------------------ writing

    def _frame(self, item: Item) -> bytes:
        type_, event, use_prev = item
        if self.table_row is not None:
            obj = event.object_for(use_prev=use_prev)
            return encode_event(type_, self.table_row(self.kind, obj), "json")
        if self.converts:
            return encode_event(type_, conversion.at_version(self.kind, event.object_for(use_prev=use_prev)),
                                self.encoding)
        return event.frame(type_, self.encoding, use_prev=use_prev)

    @property
    def suppress_bookmarks(self) -> bool:
        """Whether bookmarks are withheld (chaos sets it while it holds events back)."""
        return self._suppress_bookmarks

    @suppress_bookmarks.setter
    def suppress_bookmarks(self, value: bool) -> None:
        self._suppress_bookmarks = value
        # A stream waiting without a timeout (bookmarks suppressed) must re-arm its timer.
        self.wake()

    def wake(self) -> None:
        """Make the writer re-check its queue and bookmark timer."""
        self._wake.set()

    def _idle(self) -> bool:
        # Re-read after the wait: events may have arrived while we slept.
        return not self.queue and not self.closed and not self.suppress_bookmarks

    def bookmark(self, *, initial_end: bool = False) -> bytes:
        """A BOOKMARK frame at the current revision.

        The initial-end bookmark carries the initial state's revision instead: live events
        after that state may already be queued behind it.
        """
        md: dict[str, Any] = {"resourceVersion": str(self._revision())}
        if initial_end:
            if self.initial_end_rv is not None:
                md["resourceVersion"] = str(self.initial_end_rv)
            md["annotations"] = {"k8s.io/initial-events-end": "true"}
        obj = {"kind": self.kind.kind, "apiVersion": self.kind.api_version, "metadata": md}
        return encode_event("BOOKMARK", obj, self.encoding)

    def _take(self, n: int, *, in_flush: bool = False) -> bytes:
        """Pop `n` queued items and return their frames as one chunk (deliveries reported).

        `in_flush`: called by the flusher, whose memo may already hold this very chunk.
        """
        queue = self.queue
        if n >= len(queue):  # the flusher takes everything: no per-item pop
            items = list(queue)
            queue.clear()
        else:
            items = [queue.popleft() for _ in range(n)]
        self.delivered += len(items)
        if self.on_deliver is not None:
            self.on_deliver(self, items)
        if self.table_row is not None or self.converts:
            # Frames of its own (rows, or objects at another version): never the shared ones.
            return b"".join([self._frame(item) for item in items])
        enc = self.encoding
        memo = self._flusher.memo if in_flush and self._flusher is not None else None
        if memo is not None:
            chunk = memo.get(items, enc)
            if chunk is not None:
                return chunk
        frames: list[bytes] = []
        for type_, event, use_prev in items:
            # The common case is the event as it is, whose frame is cached per encoding.
            frame = event._plain.get(enc) if type_ == event.type and not use_prev else None
            frames.append(frame if frame is not None else event.frame(type_, enc, use_prev=use_prev))
        chunk = b"".join(frames)
        if memo is not None:
            memo.put(items, enc, chunk)
        return chunk

    def flush(self) -> None:
        """The direct path: write the whole backlog now (called by the flusher)."""
        if not self.direct or self.closed or not self.queue or self.sink is None:
            return
        if not self.sink.write(self._take(len(self.queue), in_flush=True)):
            # Gone, or its buffer is full: the stream's task takes over and awaits the drain.
            self.direct = False
            self._wake.set()

    async def stream(self) -> AsyncIterator[bytes]:
        """The bytes to send, batched; ends when the watcher is closed and drained.

        With a `sink` and a flusher, live items are written directly while the stream waits
        (see the module docstring); what it yields is then only the initial state, bookmarks,
        backlogs after a full buffer, and the final frame.
        """
        try:
            async for chunk in self._stream():
                yield chunk
        finally:
            # However the stream ends (closed, timeoutSeconds, the client gone), nothing may
            # write to its connection any more: the response is finished or reused.
            self.direct = False
            self.sink = None

    async def _stream(self) -> AsyncIterator[bytes]:
        batch = self.settings.batch
        while True:
            self.direct = False
            if self.initial:
                n = min(batch, len(self.initial))
                chunk = b"".join(self.initial.popleft() for _ in range(n))
                self.delivered += n
                if not self.initial and self.initial_end_rv is not None:
                    chunk += self.bookmark(initial_end=True)
                yield chunk
                continue
            if self.queue:
                yield self._take(min(batch, len(self.queue)))
                continue
            if self.closed:
                if self.final_frame is not None:
                    yield self.final_frame
                return
            self._wake.clear()
            if self.sink is not None and self._flusher is not None:
                await self.sink.drain()
                if self.queue or self.closed:
                    continue
                self.direct = True
            if self.bookmarks and not self.suppress_bookmarks:
                try:
                    async with asyncio.timeout(self.settings.bookmark_interval):
                        await self._wake.wait()
                except TimeoutError:
                    self.direct = False
                    if self._idle():
                        yield self.bookmark()
            else:
                await self._wake.wait()


class WatchHub:
    """The event windows of every kind and the registry of live watchers."""

    def __init__(self, *, store: Store, now: Callable[[], float], settings: WatchSettings | None = None,
                 table_row: TableRow | None = None) -> None:
        """A hub over `store`; subscribe `publish` to the store (the assembly orders the publishers).

        `table_row` turns an object into the Table row that table watches send (kubectl's
        `get -w`); without it a table watch gets the plain objects.
        """
        self.store = store
        self._table_row = table_row
        self.settings = settings or WatchSettings()
        self._now = now
        # By resource (`Kind.resource`): every version of a resource shares its window, and the
        # window of a kind added at run time (a custom resource) starts with its first event.
        self.windows: defaultdict[str, deque[Event]] = defaultdict(deque)
        # Every event of a resource after floor(resource) is in its window: until its window
        # first drops an event, that is the revision the hub started at (no event of it since).
        self._start = store.revision
        self._floor: dict[str, int] = {}
        self._general: defaultdict[str, set[Watcher]] = defaultdict(set)
        self._by_node: dict[str, set[Watcher]] = {}
        self.on_watcher: list[Callable[[Watcher], None]] = []
        """Called for every new watcher before it is offered anything live (chaos attaches taps)."""
        self.on_deliver: Deliver | None = None
        self.flusher = Flusher(interval=self.settings.flush_interval)

    def floor(self, kind: Kind) -> int:
        """Every event of the kind's resource after this revision is in its window."""
        return self._floor.get(kind.resource, self._start)

    @property
    def watchers(self) -> list[Watcher]:
        """Every live watcher."""
        out = [w for ws in self._general.values() for w in ws]
        out.extend(w for ws in self._by_node.values() for w in ws)
        return out

    def publish(self, kind: Kind, type_: EventType, obj: Obj, prev: Obj | None, rv: int) -> None:
        """Record a write in the kind's window and offer it to the watchers that may match."""
        event = Event(type=type_, kind=kind, obj=obj, prev=prev, rv=rv)
        resource = kind.resource
        window = self.windows[resource]
        window.append(event)
        if len(window) > self.settings.window:
            self._floor[resource] = window.popleft().rv
        plain: Item = (type_, event, False)
        for w in tuple(self._general[resource]):
            w.offer(event, plain)
        if kind is PODS and self._by_node:
            node = _node(obj)
            targets = set(self._by_node.get(node, ()))
            if prev is not None:
                old = _node(prev)
                if old != node:
                    targets.update(self._by_node.get(old, ()))
            for w in targets:
                w.offer(event, plain)

    def watch(self, kind: Kind, *, namespace: str | None, labels: LabelSelector | None,
              fields: FieldSelector | None, resource_version: str, send_initial_events: bool,
              encoding: Encoding, table: bool, bookmarks: bool, identity: tuple[str, str]) -> Watcher:
        """Open a watcher; raises ValueError (410) when the revision is outside the window."""
        w = Watcher(kind=kind, namespace=namespace, labels=labels, fields=fields, encoding=encoding,
                    bookmarks=bookmarks, identity=identity, settings=self.settings, now=self._now,
                    revision=lambda: self.store.revision, flusher=self.flusher,
                    table_row=self._table_row if table else None)
        w.on_deliver = self.on_deliver
        for hook in self.on_watcher:
            hook(w)
        rv_text = resource_version or ""
        if send_initial_events or rv_text in ("", "0"):
            # Initial state and registration happen with no await in between, so no write
            # can fall between the synthetic ADDED events and the live ones.
            objects = self._initial_objects(kind, namespace=namespace, fields=fields)
            for obj in sorted((o for o in objects if w.matches(o)), key=_sort_key):
                if w.table_row is not None:
                    w.add_initial(encode_event("ADDED", w.table_row(kind, obj), "json"))
                else:
                    w.add_initial(encode_event("ADDED", conversion.at_version(kind, obj), w.encoding))
            if send_initial_events:
                w.initial_end_rv = self.store.revision
                if not w.initial:
                    w.add_initial(b"")
        else:
            try:
                since = int(rv_text)
            except ValueError as exc:
                raise LookupError(f"invalid resourceVersion {rv_text!r}") from exc
            floor = self.floor(kind)
            if since < floor:
                raise ValueError(f"too old resource version: {since} ({floor})")
            for event in self.windows[kind.resource]:
                if event.rv > since:
                    w.offer(event)
        self._register(w)
        return w

    def _initial_objects(self, kind: Kind, *, namespace: str | None, fields: FieldSelector | None) -> list[Obj]:
        node = fields.exact("spec.nodeName") if (kind is PODS and fields is not None) else None
        if node is not None:
            return list(self.store.pods_on_node(node))
        return list(self.store.items(kind, namespace=namespace))

    def _register(self, w: Watcher) -> None:
        node = w.fields.exact("spec.nodeName") if (w.kind is PODS and w.fields is not None) else None
        if node is not None:
            w.node_key = node
            self._by_node.setdefault(node, set()).add(w)
        else:
            self._general[w.kind.resource].add(w)

    def event_at(self, kind: Kind, rv: int) -> Event | None:
        """The event the write at revision `rv` published, if it is the newest of its kind (else None).

        A write's response looks its event up to reuse the encoded object. It does so right after
        the write, with no await in between, so the write's event is the newest of its kind; any
        other revision (a no-op write returns the stored object, whose revision is older) is None
        at once, never a walk through the window.
        """
        window = self.windows.get(kind.resource)
        if window and window[-1].rv == rv:
            return window[-1]
        return None

    def unregister(self, w: Watcher) -> None:
        """Forget a watcher whose stream ended."""
        if w.node_key is not None:
            bucket = self._by_node.get(w.node_key)
            if bucket is not None:
                bucket.discard(w)
                if not bucket:
                    del self._by_node[w.node_key]
        else:
            self._general[w.kind.resource].discard(w)

    def state_at(self, kind: Kind, rv: int) -> dict[str, Obj]:
        """The objects of a kind as they were at revision `rv` (for stale reads).

        Rebuilt by undoing the window's events after `rv`; raises ValueError when `rv` is
        older than the window.
        """
        floor = self.floor(kind)
        if rv < floor:
            raise ValueError(f"revision {rv} is older than the window of {kind.resource} ({floor})")
        state = {_key(o): o for o in self.store.items(kind)}
        for event in reversed(self.windows[kind.resource]):
            if event.rv <= rv:
                break
            key = _key(event.obj)
            if event.type == "ADDED":
                state.pop(key, None)
            elif event.prev is not None:
                state[key] = event.prev
        return state

    def close_resource(self, resource: str, reason: str) -> None:
        """End every stream of a resource that stopped being served (its CRD was deleted)."""
        for w in tuple(self._general.pop(resource, ())):
            w.close(reason)

    def close_all(self, reason: str) -> None:
        """Close every stream (server shutdown)."""
        for w in self.watchers:
            w.close(reason)


def _key(obj: Obj) -> str:
    md = obj.get("metadata") or {}
    ns = md.get("namespace")
    return f"{ns}/{md.get('name')}" if ns else str(md.get("name"))


def _node(pod: Obj) -> str:
    return str((pod.get("spec") or {}).get("nodeName") or "")


def _sort_key(obj: Obj) -> tuple[str, str]:
    md = obj.get("metadata") or {}
    return (str(md.get("namespace") or ""), str(md.get("name") or ""))


async def drain_stream(w: Watcher) -> list[bytes]:
    """Test helper: everything a closed watcher would still send."""
    out: list[bytes] = []
    with contextlib.suppress(asyncio.CancelledError):
        async for chunk in w.stream():
            out.append(chunk)
    return out

"""Reflector, indexed store and informer: a component's local, watched cache of one resource.

An `Informer` lists a resource, then watches it from the list's resourceVersion, keeps every
object in an indexed `Store` and calls the handlers registered with `add_handlers()`. This is
client-go's SharedInformer, reduced to what the components need and written for asyncio.

What an informer promises:

* **Per-object order.** For any one key, the store and the handlers see that object's changes
  in the order the apiserver made them (as delivered by the watch stream). A handler is called
  after the store has applied the change, so a handler that reads the cache sees at least the
  state it was told about.
* **No order across objects, and none across informers.** Two objects' events may be seen in
  any interleaving relative to their resourceVersions after a relist, and the pod informer and
  the node informer of one component are not synchronised at all: a pod may name a node that
  the node informer has not seen yet (or no longer has). Handlers must act on cache state,
  level-based, never on the assumption that a related object is already (or still) cached.
* **Every deletion is delivered, perhaps late and perhaps without the final state.** When the
  watch breaks and the events in between are gone (410), the informer relists and compares:
  objects that vanished are delivered as `on_delete(DeletedFinalStateUnknown(key, last_known))`,
  objects that changed as `on_update(old, new)`, new ones as `on_add(obj, False)`. Objects that
  did not change are not re-delivered (there is no periodic resync).
* **UID caveat.** A key may be deleted and recreated between two observations. Whenever the
  informer notices that the UID behind a key changed, it delivers `on_delete` of the old
  object (as `DeletedFinalStateUnknown`) and then `on_add` of the new one, never an update
  across UIDs.
* **The cache never goes back in time on a relist.** A relist asks for the highest
  resourceVersion the informer has seen (in normal operation, the last one). kubemesh's
  apiserver serves its current state for any resourceVersion, but chaos may serve a lagging
  snapshot (stale reads, as an HA control plane can): when a list comes back older than what
  the informer has already seen, it is discarded and the informer retries with backoff,
  keeping its newer cache, until a list at least as new arrives. (Caveat: an apiserver
  restarted without its data directory restarts its revisions too; the informer then keeps
  retrying and says so in its logs, at warning level.)
* **Watches resume, they do not replay.** When a watch ends (server timeout, closed stream,
  broken connection) the informer watches again from the last resourceVersion it saw,
  bookmarks included; only a 410 (an ERROR event with a 410 Status, or an HTTP 410 at request
  time) leads to a relist. Errors back off exponentially with jitter from the injected `rng`,
  in cluster time on the injected `clock` (at rate 60 a 30 s backoff is half a wall second: the
  cache stays blind for the same share of the cluster's grace periods at any rate).
* **Handlers** are plain callables run on the informer's task, one at a time, in event order;
  they must not block (enqueue a key instead). An exception in a handler is logged and does
  not stop the informer or the other handlers. Cached objects are shared with every handler
  and every reader of the cache: treat them as read-only.
* **Freeze** (chaos: a stale cache). While frozen the informer keeps reading its watch (and its
  `observed_resource_version` moves on) but applies nothing to the store and calls no handler;
  it buffers what it read. `unfreeze()` applies the buffer in order. The buffer is bounded: when
  it overflows it is dropped, and the informer relists on unfreeze instead.
* **Handler drops** (chaos: a missed event at the handler, `component.dropHandler`). A rule
  added with `add_handler_drop` makes the informer apply a matching change to its store as
  usual but not tell the handlers about it (kubernetes#56261's "cleaning the node from the
  scheduler cache errors out", #94437's missed node DELETE). Unlike `watch.drop` at the
  apiserver, after which the store is wrong too and the next relist repairs it (a vanished
  object comes back as `DeletedFinalStateUnknown`), here the store is right and only the
  handlers' consumer is wrong, so no relist ever repairs it: exactly the divergence between a
  component's lister and its own derived cache. No rule armed costs one falsy check per
  notification.
* **Resource versions.** `last_resource_version` is that of the last list or event applied to
  the cache; `observed_resource_version` the last one read from the server (bookmarks
  included), ahead of the former while frozen. A component that wrote an object at revision N
  knows its cache reflects that write once `int(last_resource_version) >= N`.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final

import structlog

from kubemesh.services.machinery.client import ApiClient, ApiError, GoneError
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.model import codec
from kubemesh.services.model.kinds import Kind, Obj, key_of, rv_of, uid_of

log = structlog.get_logger("kubemesh.services.machinery.informing")

IndexFunc = Callable[[Obj], builtins.list[str]]
"""Maps an object to the index values it is filed under (possibly none)."""

INDEX_BY_NODE: Final = "byNode"
"""The conventional index name for `index_pods_by_node`."""


def index_pods_by_node(obj: Obj) -> builtins.list[str]:
    """Index pods by `spec.nodeName`; unscheduled pods are filed under ""."""
    spec = obj.get("spec")
    node = spec.get("nodeName") if isinstance(spec, dict) else None
    return [str(node) if node else ""]


@dataclass(frozen=True, slots=True)
class DeletedFinalStateUnknown:
    """An object that vanished while the informer was not watching.

    `obj` is the last state the informer knew, which may be older than the object's final one.
    """

    key: str
    obj: Obj


def final_state(obj: Obj | DeletedFinalStateUnknown) -> Obj:
    """The object a delete notification carries (the last known state when the delete was missed)."""
    return obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj


@dataclass(frozen=True, slots=True, kw_only=True)
class InformerSettings:
    """Tuning of the reflector behind an informer."""

    min_watch_timeout: int = 300
    """Lower bound of the `timeoutSeconds` asked of each watch (chosen at random, as client-go
    does, so that watches of many clients do not all end at once)."""
    max_watch_timeout: int = 600
    """Upper bound of the `timeoutSeconds` asked of each watch."""
    initial_backoff: float = 0.8
    """First delay after an error, in cluster seconds; doubled on each consecutive error."""
    max_backoff: float = 30.0
    """Upper bound of the backoff, in cluster seconds."""
    jitter: float = 0.5
    """Fraction of each backoff removed at random (0 = none)."""
    freeze_buffer: int = 10_000
    """How many events (a relist counts as one) a frozen informer buffers before it drops the
    buffer and plans a relist for when it is unfrozen."""
    first_list_from_cache: bool = False
    """The first list asks resourceVersion "0" (whatever the apiserver's watch cache holds, as
    client-go's reflector did before WatchList) instead of an unset one (a consistent read). A
    component (re)started against an apiserver whose cache lags then starts from the past:
    kubernetes#59848. Relists never go back in time either way (they ask for at least the
    highest resourceVersion seen, kubernetes#83520)."""


# ---------------------------------------------------------------------------------------------
# The store.


class Store:
    """Objects by cache key (`namespace/name` or `name`), with secondary indexes.

    Not thread-safe, and needing no lock: it is only touched from the event loop, and every
    method is synchronous.
    """

    def __init__(self, *, indexers: Mapping[str, IndexFunc] | None = None) -> None:
        self._items: dict[str, Obj] = {}
        self._indexers: dict[str, IndexFunc] = dict(indexers or {})
        # index name -> value -> keys; and index name -> key -> the values it is filed under.
        self._indices: dict[str, dict[str, set[str]]] = {n: {} for n in self._indexers}
        self._filed: dict[str, dict[str, builtins.list[str]]] = {n: {} for n in self._indexers}

    def __len__(self) -> int:
        return len(self._items)

    def add_indexers(self, indexers: Mapping[str, IndexFunc]) -> None:
        """Add indexes (an index already present under a name is kept) and file every object in them."""
        new = {n: f for n, f in indexers.items() if n not in self._indexers}
        if not new:
            return
        self._indexers.update(new)
        for n in new:
            self._indices[n] = {}
            self._filed[n] = {}
        for key, obj in self._items.items():
            self._reindex(key, obj, only=new)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def get(self, key: str) -> Obj | None:
        """The object under `key`, or None."""
        return self._items.get(key)

    def keys(self) -> builtins.list[str]:
        """Every key, in no particular order."""
        return builtins.list(self._items)

    def items(self) -> builtins.list[tuple[str, Obj]]:
        """Every (key, object) pair."""
        return builtins.list(self._items.items())

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        """The objects filed under `value` in `index` (KeyError for an unknown index)."""
        keys = self._indices[index].get(value, ())
        return [self._items[k] for k in keys]

    def index_values(self, index: str) -> builtins.list[str]:
        """The values `index` currently holds objects under."""
        return builtins.list(self._indices[index])

    def put(self, key: str, obj: Obj) -> Obj | None:
        """Add or replace an object; returns the previous one."""
        old = self._items.get(key)
        self._items[key] = obj
        self._reindex(key, obj)
        return old

    def remove(self, key: str) -> Obj | None:
        """Remove an object; returns it (None if absent)."""
        old = self._items.pop(key, None)
        if old is not None:
            self._reindex(key, None)
        return old

    def replace(self, objs: Mapping[str, Obj]) -> None:
        """Replace the whole content."""
        for key in builtins.list(self._items):
            if key not in objs:
                self.remove(key)
        for key, obj in objs.items():
            self.put(key, obj)

    def list(self) -> builtins.list[Obj]:
        """Every object, in no particular order."""
        return builtins.list(self._items.values())

    def _reindex(self, key: str, obj: Obj | None, *, only: Mapping[str, IndexFunc] | None = None) -> None:
        for name, func in (only if only is not None else self._indexers).items():
            filed = self._filed[name]
            index = self._indices[name]
            for value in filed.pop(key, ()):
                keys = index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]
            if obj is None:
                continue
            try:
                values = func(obj)
            except Exception:
                log.exception("index function failed", index=name, key=key)
                values = []
            if values:
                filed[key] = values
                for value in values:
                    index.setdefault(value, set()).add(key)


# ---------------------------------------------------------------------------------------------
# What the reflector hands to the informer.


@dataclass(frozen=True, slots=True)
class _Event:
    type: str
    obj: Obj
    rv: str


@dataclass(frozen=True, slots=True)
class _Relisted:
    items: builtins.list[Obj]
    rv: str


_Delta = _Event | _Relisted


class _End(Enum):
    ENDED = "ended"            # the server ended the stream: resume from the last RV
    GONE = "gone"              # 410: relist
    ERROR = "error"            # anything else: back off, resume from the last RV
    RELIST = "relist"          # asked for by unfreeze() after a buffer overflow


class _StaleListError(Exception):
    """A list older than what the informer has already seen."""


# ---------------------------------------------------------------------------------------------
# The informer.


HANDLER_EVENT_TYPES: Final = frozenset({"ADDED", "MODIFIED", "DELETED"})


@dataclass(slots=True, kw_only=True)
class HandlerDrop:
    """A chaos rule: notifications the informer's handlers do not get (see the module docstring).

    It matches a notification by kind (`ADDED` = `on_add`, `MODIFIED` = `on_update`, `DELETED`
    = `on_delete`, whether it comes from a watch event or from a relist; a UID change is a
    DELETED then an ADDED) and by the object's namespace and name (for a
    `DeletedFinalStateUnknown`, its last known state). Empty or None fields match anything.
    With `occurrence` N only the N-th matching notification is dropped; without, every one.
    The store is never affected. `seen` and `dropped` count matches and drops.
    """

    event_types: frozenset[str] = frozenset()
    namespace: str | None = None
    name: str | None = None
    occurrence: int | None = None
    seen: int = 0
    dropped: int = 0
    dropped_keys: builtins.list[str] = field(default_factory=builtins.list)
    """`TYPE key@resourceVersion` of the notifications dropped (the first 100)."""

    def matches(self, type_: str, obj: Obj) -> bool:
        """Whether a notification of this kind about this object is selected."""
        if self.event_types and type_ not in self.event_types:
            return False
        md = obj.get("metadata") or {}
        if self.name is not None and md.get("name") != self.name:
            return False
        return self.namespace is None or (md.get("namespace") or "") == self.namespace

    def take(self, type_: str, obj: Obj) -> bool:
        """Count a notification; True when it is to be dropped."""
        if not self.matches(type_, obj):
            return False
        self.seen += 1
        if self.occurrence is not None and self.seen != self.occurrence:
            return False
        self.dropped += 1
        if len(self.dropped_keys) < 100:
            self.dropped_keys.append(f"{type_} {key_of(obj)}@{rv_of(obj)}")
        return True

    def describe(self) -> dict[str, Any]:
        """The rule and its counters as JSON."""
        return {"eventTypes": sorted(self.event_types), "namespace": self.namespace, "name": self.name,
                "occurrence": self.occurrence, "seen": self.seen, "dropped": self.dropped,
                "droppedKeys": builtins.list(self.dropped_keys)}


OnAdd = Callable[[Obj, bool], None]
OnUpdate = Callable[[Obj, Obj], None]
OnDelete = Callable[[Obj | DeletedFinalStateUnknown], None]


@dataclass(frozen=True, slots=True)
class _Handlers:
    on_add: OnAdd | None
    on_update: OnUpdate | None
    on_delete: OnDelete | None


class Informer:
    """A watched, indexed cache of one resource (optionally narrowed by namespace/selectors)."""

    def __init__(self, client: ApiClient, kind: Kind, *, clock: Clock, namespace: str | None = None,
                 label_selector: str | None = None, field_selector: str | None = None,
                 indexers: Mapping[str, IndexFunc] | None = None, name: str | None = None,
                 rng: random.Random | None = None, settings: InformerSettings | None = None) -> None:
        """Create an informer; nothing happens until `run()`.

        Args:
            client: The API client to list and watch with.
            kind: The resource.
            clock: Cluster clock for backoff sleeps and `wait_for_sync` timeouts.
            namespace: Watch one namespace only (all when None).
            label_selector: Narrow the list and watch.
            field_selector: Narrow the list and watch (e.g. `spec.nodeName=node-1`).
            indexers: Secondary indexes by name, e.g. `{INDEX_BY_NODE: index_pods_by_node}`.
            name: A name for logs (defaults to the resource and the selectors).
            rng: Source of backoff jitter and watch timeouts (an OS-seeded one when None).
            settings: Reflector tuning; the defaults of `InformerSettings` when None.
        """
        self._client = client
        self.kind = kind
        self._clock = clock
        self._namespace = namespace
        self._label_selector = label_selector
        self._field_selector = field_selector
        self._rng = rng if rng is not None else random.Random()
        self.settings = settings or InformerSettings()
        self.name = name or "/".join(
            p for p in (kind.resource, namespace, label_selector, field_selector) if p)
        self._store = Store(indexers=indexers)
        self._handlers: builtins.list[_Handlers] = []
        self._log = log.bind(informer=self.name)

        # Resource versions. `_seen_rv`: the last one read from the server (list, event or
        # bookmark), where a watch resumes. `_high_rv`: the highest one read, below which a
        # relist must not go. `_applied_rv`: the last one applied to the store.
        self._seen_rv = ""
        self._high_rv = 0
        self._applied_rv = ""

        self._synced = asyncio.Event()
        self._frozen = False
        self._overflowed = False
        self._buffer: builtins.list[_Delta] = []
        self._relist_requested = asyncio.Event()
        self._drops: dict[str, HandlerDrop] = {}
        """Chaos: handler-drop rules by id (empty in normal operation: one falsy check)."""

    # -- handlers ------------------------------------------------------------------------------

    def add_handlers(self, *, on_add: OnAdd | None = None, on_update: OnUpdate | None = None,
                     on_delete: OnDelete | None = None) -> None:
        """Register handlers; called in event order on the informer's task.

        A handler set added after the informer has synced is first told about every cached
        object as `on_add(obj, True)`, so that late registration misses nothing.
        """
        handlers = _Handlers(on_add, on_update, on_delete)
        self._handlers.append(handlers)
        if self.has_synced and on_add is not None:
            for obj in self._store.list():
                self._call(on_add, obj, True)

    def _call(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            self._log.exception("informer handler failed", handler=getattr(fn, "__qualname__", repr(fn)))

    def _notify_add(self, obj: Obj, initial: bool) -> None:
        if self._drops and self._dropped("ADDED", obj):
            return
        for h in self._handlers:
            if h.on_add is not None:
                self._call(h.on_add, obj, initial)

    def _notify_update(self, old: Obj, new: Obj) -> None:
        if self._drops and self._dropped("MODIFIED", new):
            return
        for h in self._handlers:
            if h.on_update is not None:
                self._call(h.on_update, old, new)

    def _notify_delete(self, obj: Obj | DeletedFinalStateUnknown) -> None:
        if self._drops and self._dropped("DELETED", obj.obj if isinstance(obj, DeletedFinalStateUnknown) else obj):
            return
        for h in self._handlers:
            if h.on_delete is not None:
                self._call(h.on_delete, obj)

    # -- chaos: handler drops ------------------------------------------------------------------

    def _dropped(self, type_: str, obj: Obj) -> bool:
        # Every rule counts the notification (so each one's occurrence is its own), and any
        # rule that takes it drops it.
        drop = False
        for rule_id, rule in self._drops.items():
            if rule.take(type_, obj):
                drop = True
                self._log.warning("chaos: handler notification dropped", rule=rule_id, notification=type_,
                                  key=key_of(obj), rv=rv_of(obj))
        return drop

    def add_handler_drop(self, rule_id: str, rule: HandlerDrop) -> None:
        """Arm (or replace) a handler-drop rule (see the module docstring)."""
        self._drops[rule_id] = rule
        self._log.info("chaos: handler drop armed", rule=rule_id, **rule.describe())

    def remove_handler_drop(self, rule_id: str) -> HandlerDrop | None:
        """Disarm a rule; returns it with its counters (None if it was not armed).

        What it dropped stays dropped: nothing is re-delivered.
        """
        rule = self._drops.pop(rule_id, None)
        if rule is not None:
            self._log.info("chaos: handler drop disarmed", rule=rule_id, seen=rule.seen, dropped=rule.dropped)
        return rule

    @property
    def handler_drops(self) -> Mapping[str, HandlerDrop]:
        """The armed handler-drop rules by id (read-only view)."""
        return dict(self._drops)

    # -- cache access --------------------------------------------------------------------------

    @property
    def has_synced(self) -> bool:
        """Whether the first list has been applied to the store."""
        return self._synced.is_set()

    async def wait_for_sync(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109 (contract)
        """Wait until the first list is applied; False if `timeout` cluster seconds pass first."""
        if self._synced.is_set():
            return True
        if timeout is None:
            await self._synced.wait()
            return True
        try:
            async with asyncio.timeout(self._clock.to_wall(timeout)):
                await self._synced.wait()
        except TimeoutError:
            return False
        return True

    @property
    def last_resource_version(self) -> str:
        """The resourceVersion of the last list or event applied to the cache ("" before)."""
        return self._applied_rv

    @property
    def observed_resource_version(self) -> str:
        """The last resourceVersion read from the server, bookmarks included.

        Ahead of `last_resource_version` while the informer is frozen.
        """
        return self._seen_rv

    @property
    def store(self) -> Store:
        """The underlying store (read it; never write it)."""
        return self._store

    def get(self, key: str) -> Obj | None:
        """The cached object under `key` (`namespace/name`, or `name` if cluster-scoped)."""
        return self._store.get(key)

    def by_index(self, index: str, value: str) -> builtins.list[Obj]:
        """The cached objects filed under `value` in the index called `index`."""
        return self._store.by_index(index, value)

    def keys(self) -> builtins.list[str]:
        """Every cached key."""
        return self._store.keys()

    # -- chaos: freezing -----------------------------------------------------------------------

    @property
    def frozen(self) -> bool:
        """Whether the informer is frozen."""
        return self._frozen

    def freeze(self) -> None:
        """Stop applying events (the cache goes stale); keep reading and buffering them."""
        if not self._frozen:
            self._log.info("informer frozen", rv=self._applied_rv)
        self._frozen = True

    def unfreeze(self) -> None:
        """Apply what was buffered, in order, before returning; or relist after an overflow."""
        if not self._frozen:
            return
        self._frozen = False
        buffered, self._buffer = self._buffer, []
        if self._overflowed:
            self._overflowed = False
            self._log.info("informer unfrozen after a buffer overflow; relisting")
            self._relist_requested.set()
            return
        self._log.info("informer unfrozen", buffered=len(buffered))
        # IMPORTANT: no await between here and the end: the reflector must not deliver a new
        # event before the buffered ones are applied, or per-object order would break.
        for delta in buffered:
            self._apply(delta)

    # -- applying ------------------------------------------------------------------------------

    def _deliver(self, delta: _Delta) -> None:
        if not self._frozen:
            self._apply(delta)
            return
        if self._overflowed:
            return  # dropped: a relist on unfreeze will catch up
        if len(self._buffer) >= self.settings.freeze_buffer:
            self._log.warning("frozen informer's buffer overflowed; will relist on unfreeze",
                              buffered=len(self._buffer))
            self._buffer.clear()
            self._overflowed = True
            return
        self._buffer.append(delta)

    def _apply(self, delta: _Delta) -> None:
        if isinstance(delta, _Relisted):
            self._apply_list(delta)
        else:
            self._apply_event(delta)
        self._applied_rv = delta.rv

    def _apply_event(self, ev: _Event) -> None:
        obj = ev.obj
        key = key_of(obj)
        if ev.type == "DELETED":
            self._store.remove(key)
            # The event's object is the final state: deliver it as it is.
            self._notify_delete(obj)
            return
        old = self._store.put(key, obj)
        if old is None:
            self._notify_add(obj, False)
        elif _replaced(old, obj):
            # A missed DELETED (e.g. dropped by chaos): never an update across UIDs.
            self._notify_delete(DeletedFinalStateUnknown(key, old))
            self._notify_add(obj, False)
        else:
            self._notify_update(old, obj)

    def _apply_list(self, relisted: _Relisted) -> None:
        initial = not self._synced.is_set()
        new = {key_of(o): o for o in relisted.items}
        old = dict(self._store.items())
        # The whole list is applied to the store before any handler runs, so that handlers
        # read a cache that is consistent as of the list's resourceVersion.
        self._store.replace(new)
        for key, before in old.items():
            if key not in new:
                self._notify_delete(DeletedFinalStateUnknown(key, before))
        for key, obj in new.items():
            prev = old.get(key)
            if prev is None:
                self._notify_add(obj, initial)
            elif _replaced(prev, obj):
                self._notify_delete(DeletedFinalStateUnknown(key, prev))
                self._notify_add(obj, False)
            elif rv_of(prev) != rv_of(obj):
                self._notify_update(prev, obj)
        if initial:
            self._synced.set()
            self._log.info("informer synced", objects=len(new), rv=relisted.rv)

    # -- the reflector -------------------------------------------------------------------------

    def _observe(self, rv: str) -> None:
        if not rv:
            return
        self._seen_rv = rv
        self._high_rv = max(self._high_rv, _rv_int(rv))

    async def run(self) -> None:
        """List, watch and keep the cache up to date until cancelled."""
        need_list = True
        failures = 0
        while True:
            if need_list:
                try:
                    await self._list()
                except asyncio.CancelledError:
                    raise
                except _StaleListError as exc:
                    failures += 1
                    self._log.warning("list is older than the cache; retrying", error=str(exc))
                    await self._backoff(failures)
                    continue
                except Exception as exc:
                    failures += 1
                    self._log.warning("list failed", error=str(exc), error_type=type(exc).__name__)
                    await self._backoff(failures)
                    continue
                need_list = False
                self._relist_requested.clear()

            end, received = await self._watch_or_relist()
            if end is _End.RELIST:
                need_list = True
                continue
            if received:
                failures = 0
            if end is _End.GONE:
                need_list = True
            if end is _End.ENDED and received:
                continue  # an ordinary end (server timeout): resume at once
            # A 410, an error, or a stream that ended without a single event: back off, except
            # for the first 410 after a healthy stream, which relists at once as client-go does.
            failures += 1
            if end is _End.GONE and failures == 1:
                continue
            await self._backoff(failures)

    async def _backoff(self, failures: int) -> None:
        s = self.settings
        delay = min(s.max_backoff, s.initial_backoff * (2.0 ** max(0, failures - 1)))
        delay *= 1.0 - s.jitter * self._rng.random()
        await self._clock.sleep(delay)

    async def _list(self) -> None:
        floor = self._high_rv
        # Ask for at least what we have seen; the first list asks for the latest state.
        result = await self._client.list(
            self.kind, namespace=self._namespace, label_selector=self._label_selector,
            field_selector=self._field_selector,
            resource_version=str(floor) if floor else "0" if self.settings.first_list_from_cache else None)
        rv = str((result.get("metadata") or {}).get("resourceVersion") or "")
        if floor and _rv_int(rv) < floor:
            raise _StaleListError(f"list at resourceVersion {rv} < {floor} already seen")
        items: builtins.list[Obj] = []
        for item in result.get("items") or []:
            if isinstance(item, dict):
                # List items carry no kind/apiVersion on the wire; handlers expect them.
                item.setdefault("apiVersion", self.kind.api_version)
                item.setdefault("kind", self.kind.kind)
                items.append(item)
        self._observe(rv)
        self._deliver(_Relisted(items, rv))

    async def _watch_or_relist(self) -> tuple[_End, int]:
        """Run one watch until it ends, or until unfreeze() asks for a relist."""
        watch = asyncio.create_task(self._watch(), name=f"informer-watch:{self.name}")
        relist = asyncio.create_task(self._relist_requested.wait(), name=f"informer-relist:{self.name}")
        try:
            await asyncio.wait({watch, relist}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
            relist.cancel()
            # Let the watch close its stream before we go on (or before we are cancelled).
            await asyncio.gather(watch, relist, return_exceptions=True)
        if watch.done() and not watch.cancelled():
            return watch.result()
        return _End.RELIST, 0

    async def _watch(self) -> tuple[_End, int]:
        received = 0
        s = self.settings
        timeout = self._rng.randint(s.min_watch_timeout, max(s.min_watch_timeout, s.max_watch_timeout))
        stream = self._client.watch(
            self.kind, resource_version=self._seen_rv, namespace=self._namespace,
            label_selector=self._label_selector, field_selector=self._field_selector,
            allow_bookmarks=True, timeout_seconds=timeout)
        try:
            async with contextlib.aclosing(stream):
                async for ev in stream:
                    if ev.type == "ERROR":
                        err = ApiError.from_status(ev.object)
                        if err.code == 410 or err.reason in ("Expired", "Gone"):
                            self._log.info("watch expired; relisting", rv=self._seen_rv, message=err.message)
                            return _End.GONE, received
                        self._log.warning("watch error event", code=err.code, message=err.message)
                        return _End.ERROR, received
                    received += 1
                    rv = str((ev.object.get("metadata") or {}).get("resourceVersion") or "")
                    self._observe(rv)
                    if ev.type != "BOOKMARK":
                        self._deliver(_Event(ev.type, ev.object, rv))
        except GoneError as exc:
            self._log.info("watch expired at request time; relisting", rv=self._seen_rv, message=exc.message)
            return _End.GONE, received
        except (ApiError, codec.DecodeError) as exc:
            self._log.warning("watch failed", error=str(exc), error_type=type(exc).__name__,
                              rv=self._seen_rv)
            return _End.ERROR, received
        except asyncio.CancelledError:
            raise
        except Exception:
            self._log.exception("watch failed unexpectedly", rv=self._seen_rv)
            return _End.ERROR, received
        return _End.ENDED, received

    def list(self) -> builtins.list[Obj]:
        """Every cached object, in no particular order."""
        return self._store.list()


def _rv_int(rv: str) -> int:
    try:
        return int(rv)
    except ValueError:
        return 0


def _replaced(old: Obj, new: Obj) -> bool:
    """Whether `new` is another object than `old` under the same key (a different UID)."""
    a, b = uid_of(old), uid_of(new)
    return bool(a and b and a != b)

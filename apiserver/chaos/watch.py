"""Watch-stream chaos: one tap per watcher that holds, delays, drops, duplicates and reorders.

Every watcher gets the tap when it is created (`WatchHub.on_watcher`), before it is offered
any event, so faults apply to replayed events as well as live ones, and to watchers that
existed before a fault was created (Toxiproxy users were bitten by faults that skipped
existing connections).

Ordering contract (client-go's informer promise, kept under chaos):

* **Per-object order is kept.** Once an event of an object is taken (held, delayed, pooled
  for reordering), every later event of that object on the same watcher queues behind it,
  and is delivered only after it, whatever faults apply to it. Only a fault with
  `breakObjectOrder: true` takes its events out of that queue (and a reorder pool with it
  shuffles freely); this is the "byzantine" class and off by default.
* **Across objects anything goes**: delays and reorder windows let other objects' events
  overtake. Released events leave in their arrival order (or the reorder's shuffled order).
* **No bookmark past a held event.** A bookmark promises that everything up to its revision
  was delivered, so `suppress_bookmarks` is set while a watcher has anything taken.

Overlapping faults on one event: a firing `watch.drop` wins (the event is gone); otherwise
the event waits for every firing hold to be released *and* for the longest firing delay;
a reorder pool takes only events no hold or delay took; a firing duplicate sends the event
twice in a row whenever it is delivered.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubemesh.apiserver.chaos.faults import Fault, Timer, Timers, log
from kubemesh.apiserver.watching import Item, Watcher
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.model.kinds import key_of

ITEM_TYPES = ("watch.hold", "watch.delay", "watch.drop", "watch.duplicate", "watch.reorder")


class Engine(Protocol):
    """What the watch chaos needs from the engine."""

    clock: Clock
    timers: Timers

    def faults_of(self, types: Iterable[str]) -> list[Fault]:
        """Active faults of some types, in creation order."""
        ...

    def record(self, op: str, fault: Fault, outcome: str, **detail: Any) -> None:
        """Append a fault record to the history."""
        ...

    def on_delivered(self, w: Watcher, items: Sequence[Item]) -> None:
        """A watcher's items were handed to its connection, in order (triggers)."""
        ...


@dataclass(eq=False)
class Pending:
    """An event a fault took from a watcher, waiting to be delivered."""

    seq: int
    item: Item
    key: str
    ordered: bool
    holds: set[str] = field(default_factory=set)
    delayed: bool = False
    pooled: str | None = None
    copies: int = 1
    faults: list[str] = field(default_factory=list)

    @property
    def ready(self) -> bool:
        """Nothing keeps it any longer (it may still wait behind its object's queue)."""
        return not self.holds and not self.delayed and self.pooled is None


@dataclass(eq=False)
class WatcherState:
    """What chaos holds for one watcher."""

    watcher: Watcher
    by_key: dict[str, deque[Pending]] = field(default_factory=dict)
    loose: list[Pending] = field(default_factory=list)
    pools: dict[str, list[Pending]] = field(default_factory=dict)
    pool_timers: dict[str, Timer] = field(default_factory=dict)
    timers: set[Timer] = field(default_factory=set)

    @property
    def pending(self) -> int:
        """Events taken and not yet delivered."""
        return sum(len(q) for q in self.by_key.values()) + len(self.loose)


def _item_matches(f: Fault, w: Watcher, item: Item) -> bool:
    if not f.hits(*w.identity):
        return False
    type_, event, use_prev = item
    sel = f.spec.match
    if not sel.matches_resource(event.kind.plural):
        return False
    if sel.event_types and type_ not in sel.event_types:
        return False
    obj = event.object_for(use_prev=use_prev)
    return sel.matches_object(obj, event.prev)


def watcher_matches(f: Fault, w: Watcher) -> bool:
    """Whether a fault aimed at watchers (close, 410, bookmarks) hits this one."""
    if not f.hits(*w.identity) or not f.spec.match.matches_resource(w.kind.plural):
        return False
    ns = f.spec.match.namespace
    return ns is None or w.namespace in (None, ns)


class WatchChaos:
    """The taps of every watcher and what they hold."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.items_active = False
        """Whether a fault of an item type (ITEM_TYPES) is active (the engine keeps it current)."""
        self.states: dict[int, WatcherState] = {}
        self._seq = itertools.count()

    # ------------------------------------------------------------------------------ wiring

    def attach(self, w: Watcher) -> None:
        """`WatchHub.on_watcher` hook: tap the watcher and observe its deliveries."""
        state = WatcherState(w)
        self.states[w.id] = state

        def tap(watcher: Watcher, item: Item) -> bool:
            # Called for every event and every watcher: with no watch fault active and nothing
            # taken from this watcher, it must cost next to nothing.
            if not self.items_active and not state.by_key:
                return False
            return self._safe_tap(state, item)

        w.taps.append(tap)
        inner = w.on_deliver

        def delivered(watcher: Watcher, items: Sequence[Item]) -> None:
            if inner is not None:
                inner(watcher, items)
            self.engine.on_delivered(watcher, items)

        w.on_deliver = delivered
        self.refresh_bookmarks(w)

    def prune(self) -> None:
        """Forget closed watchers (their pending events can never be delivered)."""
        for wid, state in list(self.states.items()):
            if state.watcher.closed:
                self._forget(state)
                del self.states[wid]

    def _forget(self, state: WatcherState) -> None:
        for t in state.timers:
            t.cancel()
        for t in state.pool_timers.values():
            t.cancel()
        state.timers.clear()
        state.pool_timers.clear()
        state.by_key.clear()
        state.loose.clear()
        state.pools.clear()

    def refresh_bookmarks(self, w: Watcher) -> None:
        """Suppress bookmarks while anything is taken or a noBookmarks fault hits the watcher."""
        state = self.states.get(w.id)
        held = state is not None and state.pending > 0
        suppress = held or any(watcher_matches(f, w) for f in self.engine.faults_of(["watch.noBookmarks"]))
        if w.suppress_bookmarks != suppress:
            w.suppress_bookmarks = suppress  # the setter wakes the stream to re-arm its timer

    def pending_total(self) -> int:
        """Events taken from every watcher and not delivered (0 when nothing is left behind)."""
        return sum(s.pending for s in self.states.values())

    # ------------------------------------------------------------------------------ the tap

    def _safe_tap(self, state: WatcherState, item: Item) -> bool:
        try:
            return self._tap(state, item)
        except Exception:  # chaos must never break a watch stream: deliver normally
            log.exception("watch chaos failed")
            return False

    def _tap(self, state: WatcherState, item: Item) -> bool:
        active = self.engine.faults_of(ITEM_TYPES)
        if not active and not state.by_key:
            return False  # the common case, on every event for every watcher: nothing to do
        w = state.watcher
        type_, event, use_prev = item
        key = f"{event.kind.plural}/{key_of(event.object_for(use_prev=use_prev))}"
        faults = [f for f in active if _item_matches(f, w, item)]
        blocked = key in state.by_key
        if not faults and not blocked:
            return False
        detail = {"component": w.identity[0], "instance": w.identity[1], "watch": w.id,
                  "resource": event.kind.plural, "event": type_, "key": key_of(event.obj), "rv": event.rv}
        for f in faults:
            if f.spec.type == "watch.drop" and f.fires():
                f.injected += 1
                self.engine.record("inject", f, "ok", effect="drop", **detail)
                return True
        holds = [f for f in faults if f.spec.type == "watch.hold" and f.fires()]
        delays = [(f, self._delay_of(f)) for f in faults if f.spec.type == "watch.delay" and f.fires()]
        dups = [f for f in faults if f.spec.type == "watch.duplicate" and f.fires()]
        reorder = None
        if not holds and not delays:
            reorder = next((f for f in faults if f.spec.type == "watch.reorder" and f.fires()), None)
        taking = [*holds, *(f for f, _ in delays), *([reorder] if reorder else [])]
        if not taking and not dups and not blocked:
            return False
        ordered = not any(f.spec.break_object_order for f in taking)
        p = Pending(seq=next(self._seq), item=item, key=key, ordered=ordered, holds={f.name for f in holds},
                    copies=2 if dups else 1, faults=[f.name for f in taking])
        for f in holds:
            f.injected += 1
            self.engine.record("inject", f, "ok", effect="hold", **detail)
        for f in dups:
            f.injected += 1
            self.engine.record("inject", f, "ok", effect="duplicate", **detail)
        if delays:
            longest = max(d for _, d in delays)
            for f, d in delays:
                f.injected += 1
                self.engine.record("inject", f, "ok", effect="delay", delay=round(d, 6), **detail)
            p.delayed = True
            timer_box: list[Timer] = []

            def delay_done() -> None:
                p.delayed = False
                for t in timer_box:
                    state.timers.discard(t)
                for f, _ in delays:
                    if f.live:
                        f.recovered += 1
                        self.engine.record("recover", f, "ok", effect="deliver", **detail)
                self.flush(state)

            timer = self.engine.timers.call_later(longest, delay_done)
            timer_box.append(timer)
            state.timers.add(timer)
        if reorder is not None:
            reorder.injected += 1
            self.engine.record("inject", reorder, "ok", effect="reorder", **detail)
            p.pooled = reorder.name
            pool = state.pools.setdefault(reorder.name, [])
            pool.append(p)
            window = int(reorder.spec.params.get("window", 4))
            if len(pool) >= window:
                self._flush_pool(state, reorder.name)
            elif reorder.name not in state.pool_timers:
                name = reorder.name
                state.pool_timers[name] = self.engine.timers.call_later(
                    float(reorder.spec.params.get("maxDelay", 1.0)), lambda: self._flush_pool(state, name))
        if p.ordered:
            state.by_key.setdefault(key, deque()).append(p)
        else:
            state.loose.append(p)
        self.flush(state)
        return True

    def _delay_of(self, f: Fault) -> float:
        base = float(f.spec.params["delay"])
        jitter = float(f.spec.params.get("jitter", 0.0))
        return max(0.0, base + (f.rng.uniform(-jitter, jitter) if jitter else 0.0))

    def _flush_pool(self, state: WatcherState, name: str) -> None:
        pool = state.pools.pop(name, [])
        timer = state.pool_timers.pop(name, None)
        if timer is not None:
            timer.cancel()
        if not pool:
            return
        fault = next((f for f in self.engine.faults_of(["watch.reorder"]) if f.name == name), None)
        rng = fault.rng if fault is not None else None
        shuffled = list(pool)
        if rng is not None:
            rng.shuffle(shuffled)
        if not any(p.ordered for p in pool):
            order = shuffled
        else:
            # A random interleaving that keeps each object's own order: the shuffle decides
            # which object goes in each slot, the object's events fill its slots in order.
            per_key: dict[str, deque[Pending]] = {}
            for p in pool:
                per_key.setdefault(p.key, deque()).append(p)
            order = [per_key[p.key].popleft() for p in shuffled]
        for p in order:
            p.seq = next(self._seq)
            p.pooled = None
        if fault is not None:
            fault.recovered += len(order)
            self.engine.record("recover", fault, "ok", effect="reorder", watch=state.watcher.id,
                               keys=[key_of(p.item[1].obj) for p in order])
        self.flush(state)

    # ------------------------------------------------------------------------------ delivery

    def flush(self, state: WatcherState) -> None:
        """Deliver every ready event that no earlier event of its object still blocks, oldest first."""
        w = state.watcher
        while True:
            best: Pending | None = None
            for q in state.by_key.values():
                head = q[0]
                if head.ready and (best is None or head.seq < best.seq):
                    best = head
            for p in state.loose:
                if p.ready and (best is None or p.seq < best.seq):
                    best = p
            if best is None:
                break
            if best.ordered:
                q = state.by_key[best.key]
                q.popleft()
                if not q:
                    del state.by_key[best.key]
            else:
                state.loose.remove(best)
            for _ in range(best.copies):
                w.inject(best.item)
        self.refresh_bookmarks(w)

    def release(self, fault: Fault) -> int:
        """The fault ended: let go of everything it keeps, on every watcher; returns how many."""
        released = 0
        for state in list(self.states.values()):
            touched = False
            for p in [*(p for q in state.by_key.values() for p in q), *state.loose]:
                if fault.name in p.holds:
                    p.holds.discard(fault.name)
                    released += 1
                    touched = True
                    fault.recovered += 1
                    self.engine.record("recover", fault, "ok", effect="release", watch=state.watcher.id,
                                       resource=p.item[1].kind.plural, event=p.item[0],
                                       key=key_of(p.item[1].obj), rv=p.item[1].rv)
            if fault.name in state.pools:
                released += len(state.pools[fault.name])
                self._flush_pool(state, fault.name)
                touched = True
            if touched:
                self.flush(state)
            else:
                self.refresh_bookmarks(state.watcher)
        return released

    def release_delays(self, fault: Fault) -> None:
        """A delay fault ended: deliver what only it delays now (as a healed link would)."""
        for state in list(self.states.values()):
            touched = False
            for p in [*(p for q in state.by_key.values() for p in q), *state.loose]:
                if p.delayed and fault.name in p.faults:
                    p.delayed = False
                    touched = True
                    fault.recovered += 1
            if touched:
                self.flush(state)

    def close_watchers(self, fault: Fault, action: Callable[[Watcher], None]) -> int:
        """Apply a one-time action (close, 410) to every live watcher the fault hits."""
        n = 0
        for state in list(self.states.values()):
            w = state.watcher
            if w.closed or not watcher_matches(fault, w):
                continue
            action(w)
            self._forget(state)
            n += 1
        return n

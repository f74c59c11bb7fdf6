"""Triggers: faults armed or released when a component observes or makes a change (Sieve's idea).

A trigger names a point (`delivered`: a watch event reached the component's connection;
`written`: the component's request wrote it), a component (and instance), a resource, event
types and fields, an occurrence (the n-th match fires) and a delay in cluster seconds. The
apiserver sees every write (`on_write`, a store publisher) and every delivery (`on_delivered`,
from the watch taps), so it evaluates triggers itself, in the order things happened.

Evaluation never raises into a write or a stream: a failing trigger is logged and skipped.
"""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from typing import Any, Protocol

from kubemesh.apiserver.chaos.faults import Fault, Timers, log
from kubemesh.apiserver.history import WRITER
from kubemesh.apiserver.storage import EventType
from kubemesh.apiserver.watching import Item, Watcher
from kubemesh.services.model.kinds import Kind, Obj, key_of


class Engine(Protocol):
    """What the triggers need from the engine (`kubemesh.apiserver.chaos.engine.ChaosEngine`)."""

    triggered: list[Fault]
    timers: Timers

    def record(self, op: str, fault: Fault, outcome: str, **detail: Any) -> None:
        """Append a fault record to the history."""
        ...

    def activate(self, f: Fault) -> Coroutine[Any, Any, None] | None:
        """Make a Pending fault Active (an arm trigger fired)."""
        ...

    def end_now(self, f: Fault, reason: str) -> Coroutine[Any, Any, None] | None:
        """End a fault (a release trigger fired)."""
        ...

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> None:
        """Run a coroutine in the background."""
        ...


class Triggers:
    """Evaluates the triggers of every live fault against writes and deliveries."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
    def on_delivered(self, w: Watcher, items: Sequence[Item]) -> None:
        """Watch events reached a component's connection (one write's worth, in order)."""
        if not self.engine.triggered:
            return  # the common case, once per write to a watcher: no trigger to evaluate
        for type_, event, use_prev in items:
            try:
                self._observe("delivered", w.identity, event.kind, type_, event.object_for(use_prev=use_prev),
                              event.prev, event.rv)
            except Exception:  # chaos must never break a watch stream
                log.exception("chaos trigger evaluation failed")

    def on_write(self, kind: Kind, type_: EventType, obj: Obj, prev: Obj | None, rv: int) -> None:
        """Store subscription: every write, in revision order."""
        if self.engine.triggered:
            try:
                self._observe("written", WRITER.get(), kind, type_, obj, prev, rv)
            except Exception:  # chaos must never fail a write
                log.exception("chaos trigger evaluation failed")

    def _observe(self, point: str, who: tuple[str, str], kind: Kind, type_: str, obj: Obj, prev: Obj | None,
                 rv: int) -> None:
        for f in list(self.engine.triggered):
            for i, t in enumerate(f.spec.triggers):
                if t.on != point or t.component not in (None, who[0]) or t.instance not in (None, who[1]):
                    continue
                sel = t.selector
                if not sel.matches_resource(kind.plural) or (sel.event_types and type_ not in sel.event_types):
                    continue
                if not sel.matches_object(obj, prev):
                    continue
                f.trigger_counts[i] += 1
                if f.trigger_counts[i] != t.occurrence:
                    continue
                self.engine.record("trigger", f, "ok", action=t.action, on=point, component=who[0], instance=who[1],
                            resource=kind.plural, event=type_, key=key_of(obj), rv=rv, delay=t.delay)
                action = t.action

                def fire(f: Fault = f, action: str = action) -> None:
                    engine = self.engine
                    coro = engine.activate(f) if action == "arm" else engine.end_now(f, "release trigger fired")
                    if coro is not None:
                        self.engine.spawn(coro, name=f"chaos-trigger-{f.name}")

                if t.delay > 0:
                    self.engine.timers.call_later(t.delay, fire)
                else:
                    fire()

"""Oracles: liveness (must happen within T of cluster time) and safety (must never happen).

An oracle observes; it never guesses. `eventually` polls a probe until it holds or the deadline
passes, `never` polls a probe for a violation during a period, and `decide` turns what was seen
into a verdict:

* the symptom of the bug was observed and the healthy outcome was not: `reproduced`;
* the healthy outcome was observed and the symptom was not: `prevented`;
* anything else (both, or neither, or a probe that could not tell): `inconclusive`, with why.

The history helpers `select` and `first` (`kubemesh.scenarios.records`) query the apiserver's
records: requests, writes, deliveries and fault operations.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kubemesh.scenarios.framework import ScenarioContext, Verdict
from kubemesh.scenarios.records import Record, first, select
from kubemesh.services.machinery.clock import parse_time


@dataclass(frozen=True, kw_only=True)
class Observation:
    """The result of one oracle: whether its property held, when it was decided, and the evidence."""

    what: str
    held: bool
    """eventually: it happened in time. never: no violation was seen."""
    at: float | None = None
    """Cluster time when it happened (eventually) or was violated (never)."""
    value: Any = None
    """What the probe returned when it decided (the object, the violation)."""

    def describe(self, t0: float = 0.0) -> str:
        """One line for the report."""
        when = f" at t={self.at - t0:.1f}s" if self.at is not None else ""
        return f"{self.what}: {'held' if self.held else 'violated'}{when}"


async def eventually(ctx: ScenarioContext, what: str, probe: Callable[[], Awaitable[Any]], *,
                     within: float) -> Observation:
    """Liveness: `probe` returns something truthy within `within` cluster seconds."""
    value = await ctx.until(probe, within=within)
    return Observation(what=what, held=bool(value), at=ctx.now() if value else None, value=value)


async def never(ctx: ScenarioContext, what: str, probe: Callable[[], Awaitable[Any]], *,
                during: float) -> Observation:
    """Safety: `probe` (which returns the violation, or something falsy) stays falsy for `during`."""
    value = await ctx.until(probe, within=during)
    return Observation(what=what, held=not value, at=ctx.now() if value else None, value=value)


def decide(*, symptom: bool | None, healthy: bool | None, reproduced: str, prevented: str,
           inconclusive: str = "", evidence: Iterable[str] = ()) -> Verdict:
    """The three-valued verdict (see the module docstring); None means the probe could not tell."""
    ev = tuple(evidence)
    if symptom and not healthy:
        return Verdict(outcome="reproduced", summary=reproduced, evidence=ev)
    if healthy and not symptom and symptom is not None:
        return Verdict(outcome="prevented", summary=prevented, evidence=ev)
    why = inconclusive or ("both the symptom and the healthy outcome were observed" if symptom and healthy
                           else "neither the symptom nor the healthy outcome was observed")
    return Verdict(outcome="inconclusive", summary=why, evidence=ev)


def inconclusive(reason: str, evidence: Iterable[str] = ()) -> Verdict:
    """A verdict for a run that could not decide (setup failed, a precondition never held)."""
    return Verdict(outcome="inconclusive", summary=reason, evidence=tuple(evidence))


def fault_ops(records: Iterable[Record], fault: str, *, op: str | None = None,
              effect: str | None = None) -> list[Record]:
    """The history's records of one chaos fault, oldest first.

    `op`: inject, recover, trigger, ...; `effect`: hold, release, drop, ... A fault that was never
    created (faults off) has none. The record's `detail` (effect, key, rv, watch, ...) is merged
    into the returned copies.
    """
    out = []
    for r in records:
        if r.get("type") != "fault" or r.get("fault") != fault or (op is not None and r.get("op") != op):
            continue
        flat = {**(r.get("detail") or {}), **{k: v for k, v in r.items() if k != "detail"}}
        if effect is None or flat.get("effect") == effect:
            out.append(flat)
    return out


@dataclass(frozen=True, kw_only=True)
class HeldPast:
    """Whether a held event reached its component only after the component acted on another object."""

    opened: bool
    why: str = ""
    """Why the window did not open (empty when it did)."""
    evidence: tuple[str, ...] = ()
    delivered: Record | None = None
    """The held event's delivery to the component (None: never delivered)."""


def held_past(records: Sequence[Record], *, fault: str, key: str, component: str, acted_on: str,
              t0: float = 0.0) -> HeldPast:
    """Whether `fault` held an event of `key` on `component`'s watch until the component had acted.

    Acted: its first write of the pod `acted_on`. From the history alone: the hold's `inject` record (the event's
    resourceVersion), the delivery of that event to the component, and the component's first write
    of `acted_on` (its decision), compared by record index.
    """
    held = [r for r in fault_ops(records, fault, op="inject", effect="hold") if r.get("key") == key]
    acted = first(records, type="write", component=component, resource="pods", key=acted_on)

    def at(r: Record | None) -> str:
        return "never" if r is None else f"at t={float(r['time']) - t0:.1f}s (record {r['index']})"

    if not held:
        return HeldPast(opened=False, why=f"{fault} held no event of {key} on the {component}'s watch",
                        evidence=(f"{fault}: nothing held; the {component}'s first write of {acted_on} {at(acted)}",))
    rv = held[0].get("rv")
    delivered = next((r for r in select(records, type="delivery", component=component, key=key)
                      if r.get("rv") == rv), None)
    ev = (f"{fault} held {key} (rv {rv}) on the {component}'s watch {at(held[0])}; delivered {at(delivered)}",
          f"the {component}'s first write of {acted_on} (its decision): {at(acted)}")
    if acted is None:
        return HeldPast(opened=False, why=f"the {component} never decided on {acted_on}", evidence=ev,
                        delivered=delivered)
    if delivered is not None and int(delivered["index"]) < int(acted["index"]):
        return HeldPast(opened=False, why=f"the held event of {key} reached the {component} before it decided on "
                                          f"{acted_on}", evidence=ev, delivered=delivered)
    return HeldPast(opened=True, evidence=ev, delivered=delivered)


def heartbeats(records: Iterable[Record], node: str, *, after: float | None = None,
               before: float | None = None) -> list[Record]:
    """The writes a node's kubelet made of its Lease or its Node (its heartbeats), oldest first.

    A powered-off or cut-off kubelet makes none: the history shows whether the node really went
    silent, which the oracles check before they blame a race on it.
    """
    lease = f"kube-node-lease/{node}"
    return [r for r in select(records, type="write", component="kubelet", after=after, before=before)
            if (r.get("resource") == "leases" and r.get("key") == lease)
            or (r.get("resource") == "nodes" and r.get("key") == node)]


def heartbeats_after_power_off(records: Iterable[Record], node: str, *, off_at: float,
                               clock_rate: float) -> list[Record]:
    """A node's heartbeats after its power-off request ended at `off_at` (cluster time).

    One heartbeat may still be in flight when the request returns: its write lands up to a
    couple of cluster seconds (and a tenth of a wall second, scaled by the clock rate) later
    and does not count as the node being alive.
    """
    return heartbeats(records, node, after=off_at + 2.0 + 0.1 * clock_rate)


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    """A status condition of an object by type."""
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if isinstance(c, dict) and c.get("type") == type_:
            return c
    return None


def taint_keys(node: dict[str, Any] | None) -> set[str]:
    """`key:effect` of every taint on a node."""
    return {f"{t.get('key')}:{t.get('effect')}" for t in ((node or {}).get("spec") or {}).get("taints") or ()}


def is_terminating(pod: dict[str, Any] | None) -> bool:
    """Whether a pod has a deletionTimestamp."""
    return bool(((pod or {}).get("metadata") or {}).get("deletionTimestamp"))


def is_running(pod: dict[str, Any] | None) -> bool:
    """Whether a pod's phase is Running."""
    return ((pod or {}).get("status") or {}).get("phase") == "Running"


def started_at(pod: dict[str, Any] | None) -> float | None:
    """When the pod's first running container started (cluster time), None if none runs."""
    for c in ((pod or {}).get("status") or {}).get("containerStatuses") or []:
        started = ((c.get("state") or {}).get("running") or {}).get("startedAt")
        if started:
            return parse_time(str(started))
    return None


def node_name(pod: dict[str, Any] | None) -> str:
    """`spec.nodeName` of a pod ("" when unscheduled)."""
    return str(((pod or {}).get("spec") or {}).get("nodeName") or "")


__all__ = ["HeldPast", "Observation", "Record", "condition", "decide", "eventually", "fault_ops", "first",
           "heartbeats", "held_past", "inconclusive", "is_running", "is_terminating", "never", "node_name", "select",
           "taint_keys"]

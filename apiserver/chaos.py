"""The chaos front door: `/chaos/v1/...` on the apiserver, and the engine that enforces faults.

`install(app, rng=...)` wires everything into an app built by `apiserver.server.build_app`:
the routes, one request interceptor (request faults, partitions, stale reads, 410 on new
watches), a tap on every watcher (`apiserver.chaos_watch`), a store subscription and a
delivery hook (Sieve-style triggers), and a background task that runs the cluster-clock
timers (TTLs, trigger delays, event delays).

The API (JSON, or msgpack with `application/vnd.kubemesh.msgpack`; bearer token as for the
rest of the apiserver):

    POST   /chaos/v1/faults                create one fault (201); 422 names the field at fault
    GET    /chaos/v1/faults                {"items": [fault...]}
    PUT    /chaos/v1/faults                the desired set {"items": [spec...]}: creates, replaces,
                                           removes; answers what it did
    GET    /chaos/v1/faults/{name}         one fault with its status
    PATCH  /chaos/v1/faults/{name}         merge patch of the spec (name and type are fixed)
    DELETE /chaos/v1/faults/{name}         heal and remove; answers the final fault
    POST   /chaos/v1/faults/{name}/release end (heal) now, keep it listed as Recovered
    POST   /chaos/v1/reset                 heal and remove everything: {"healed": [...], "removed": [...]}
    GET    /chaos/v1/history               {"items", "lastIndex"} (?since=&type=&fault=&limit=),
                                           JSON lines with ?format=jsonl, a live stream with ?follow=true
    GET    /chaos/v1/types                 every fault type with its category
    GET    /chaos/v1/points                the chaos points each registered component declares

Life of a fault: `create` records intent in the history before anything is injected;
a fault with an arm trigger stays `Pending` until it fires; `Active` faults end (`Recovered`)
when their duration passes, a release trigger fires, they are released, deleted or reset,
and ending undoes every effect that took effect (or may have). Every step is a `fault`
record in the history: create, trigger, inject, recover, update, end, delete.

Overlapping faults (tested): request latencies add up; a partition wins over everything;
then stalls, resets, the first firing error, stale reads (the largest lag), the handler,
commit-then-fail. Watch faults: see `apiserver.chaos_watch`. Forwarded effects are
reference-counted: see `apiserver.chaos_forward`.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import math
import random
from collections import deque
from collections.abc import AsyncIterator, Coroutine, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson
import structlog
from aiohttp import web

from apiserver import errors
from apiserver.chaos_faults import Fault, Timers, fault_rng
from apiserver.chaos_forward import CallResult, EffectKey, Effects, Forwarder
from apiserver.chaos_spec import ONE_SHOT, TYPES, WRITE_VERBS, FaultSpec, SpecError, parse
from apiserver.chaos_watch import ITEM_TYPES, WatchChaos
from apiserver.history import WRITER
from apiserver.serving import (
    HUB,
    REGISTRY,
    parse_target,
    read_body,
    render,
    render_status,
    response_encoding,
    selectors,
)
from apiserver.storage import EventType
from apiserver.watching import Item, Watcher, encode_event
from services import codec
from services.clock import Clock
from services.kinds import NODES, Kind, Obj, key_of

log = structlog.get_logger("apiserver.chaos")

KNOWN_COMPONENTS: Final = frozenset({"kubelet", "scheduler", "controller_manager"})
_SKIP_PREFIXES: Final = ("/chaos/", "/kubemesh/v1/history")
_OPEN: Final = frozenset({"/healthz", "/livez", "/readyz", "/metrics"})
_REQUEST_TYPES: Final = (*(t for t, c in TYPES.items() if c in ("request", "reads")), "watch.gone")
_REASONS: Final = {409: "Conflict", 410: "Expired", 429: "TooManyRequests", 500: "InternalError",
                   503: "ServiceUnavailable", 504: "Timeout"}
RESET_STATUS: Final = 444
"""The code the history's request record shows for a request chaos answered by cutting the connection."""


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """What an API request names."""

    verb: str
    kind: Kind
    sub: str | None
    namespace: str | None
    name: str | None


def _invalid(causes: list[dict[str, str]], name: str = "") -> errors.StatusError:
    text = "; ".join(f"{c['field']}: {c['message']}" for c in causes)
    return errors.StatusError(422, "Invalid", f'Fault "{name}" is invalid: {text}' if name else
                              f"Fault is invalid: {text}",
                              details={"name": name, "group": "chaos.kubemesh.io", "kind": "Fault", "causes": causes})


def _fault_not_found(name: str) -> errors.StatusError:
    return errors.StatusError(404, "NotFound", f'faults "{name}" not found',
                              details={"name": name, "group": "chaos.kubemesh.io", "kind": "faults"})


def choose(mode: str, value: float | None, candidates: list[str], rng: random.Random) -> list[str]:
    """Chaos Mesh's selection modes over sorted candidates."""
    if mode == "all" or not candidates:
        return list(candidates)
    if mode == "one":
        return [rng.choice(candidates)]
    if mode == "fixed":
        n = min(len(candidates), int(value or 1))
    else:
        n = max(1, math.floor(len(candidates) * float(value or 0) / 100.0))
    return sorted(rng.sample(candidates, n))


def merge_patch(base: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return patch
    out = dict(base) if isinstance(base, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


class ChaosEngine:
    """Every fault of one apiserver and how each is enforced."""

    def __init__(self, app: web.Application, *, rng: random.Random, token: str | None = None,
                 clock: Clock | None = None, forward_timeout: float = 5.0) -> None:
        from apiserver.server import CLOCK, COMPONENTS, HISTORY

        self.app = app
        self.clock: Clock = clock if clock is not None else app[CLOCK]
        self.history = app[HISTORY]
        self.hub = app[HUB]
        self.registry = app[REGISTRY]
        self.store = self.registry.store
        self.components = app[COMPONENTS]
        self.seed = rng.getrandbits(64)
        self.rng = rng
        self.faults: dict[str, Fault] = {}
        self.timers = Timers(self.clock)
        self.watch = WatchChaos(self)
        self.forwarder = Forwarder(token=token, timeout=forward_timeout)
        self.effects = Effects()
        self.seen: dict[tuple[str, str], float] = {}
        self.samples: deque[tuple[float, int]] = deque(maxlen=200_000)
        self.tasks: set[asyncio.Task[Any]] = set()
        self.stalled = 0
        self._active: dict[str, list[Fault]] = {}
        self._requests_active = False
        self._triggered: list[Fault] = []
        self._lock = asyncio.Lock()

    # ------------------------------------------------------------------------------ bookkeeping

    def _reindex(self) -> None:
        active: dict[str, list[Fault]] = {}
        for f in self.faults.values():
            if f.active:
                active.setdefault(f.spec.type, []).append(f)
        self._active = active
        self.watch.items_active = any(t in active for t in ITEM_TYPES)
        self._requests_active = any(t in active for t in _REQUEST_TYPES)
        self._triggered = [f for f in self.faults.values() if f.live and f.spec.triggers]

    def faults_of(self, types: Iterable[str]) -> list[Fault]:
        """Active faults of some types, in creation order."""
        out: list[Fault] = []
        for t in types:
            out.extend(self._active.get(t, ()))
        if len(out) > 1:
            order = {f: i for i, f in enumerate(self.faults.values())}
            out.sort(key=lambda f: order.get(f, 0))
        return out

    def record(self, op: str, fault: Fault, outcome: str, **detail: Any) -> None:
        """One `fault` record in the history (and one log line)."""
        self.history.append("fault", op=op, fault=fault.name, faultType=fault.spec.type, outcome=outcome,
                            detail=detail)
        if op not in ("inject", "recover"):
            log.info("chaos", op=op, fault_id=fault.name, type=fault.spec.type, outcome=outcome, detail=detail)

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> None:
        """Run a coroutine in the background (tracked; cancelled on shutdown)."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("chaos task failed", task=task.get_name(), error=repr(task.exception()))

    def leftovers(self) -> dict[str, int]:
        """What chaos still holds: all zeros once everything was healed."""
        self.watch.prune()
        return {"liveFaults": sum(1 for f in self.faults.values() if f.live),
                "pendingEvents": self.watch.pending_total(),
                "suppressedBookmarks": sum(1 for s in self.watch.states.values()
                                           if s.watcher.suppress_bookmarks and not s.watcher.closed),
                "effects": len(self.effects), "stalledRequests": self.stalled, "timers": len(self.timers)}

    # ------------------------------------------------------------------------------ identities

    def _identities(self) -> set[tuple[str, str]]:
        ids = {(str(e.get("component", "")), inst) for inst, e in self.components.items()}
        ids.update(self.seen)
        ids.update(s.watcher.identity for s in self.watch.states.values() if not s.watcher.closed)
        return ids

    def _node_names(self) -> list[str]:
        return sorted(str(o["metadata"]["name"]) for o in self.store.items(NODES))

    def _check_targets(self, spec: FaultSpec) -> list[dict[str, str]]:
        """Unknown targets, as 422 causes (nothing is created when there are any)."""
        causes: list[dict[str, str]] = []
        t = spec.target

        def bad(fld: str, msg: str) -> None:
            causes.append({"field": fld, "message": msg, "reason": "FieldValueNotFound"})

        cat = spec.category
        if cat == "node":
            names = set(self._node_names())
            for n in t.nodes:
                if n not in names:
                    bad("target.node", f'node "{n}" not found')
            if not t.nodes and not names:
                bad("target.node", "there are no nodes")
            return causes
        if cat in ("component", "clock"):
            registered = {inst: str(e.get("component")) for inst, e in self.components.items()}
            for inst in t.instances:
                if inst not in registered:
                    bad("target.instance", f'no component instance "{inst}" is registered '
                                           f"(registered: {', '.join(sorted(registered)) or 'none'})")
                elif t.component is not None and registered[inst] != t.component:
                    bad("target.instance", f'instance "{inst}" is a {registered[inst]}, not a {t.component}')
            if not t.instances and t.component not in registered.values():
                bad("target.component", f'no instance of component "{t.component}" is registered '
                                        f"(registered: {', '.join(sorted(set(registered.values()))) or 'none'})")
            return causes
        ids = self._identities()
        comps = {c for c, _ in ids} | KNOWN_COMPONENTS
        if t.component not in (None, "*") and t.component not in comps:
            bad("target.component", f'unknown component "{t.component}" (known: {", ".join(sorted(comps))})')
        insts = {i for _, i in ids}
        for inst in t.instances:
            if inst not in insts:
                bad("target.instance", f'no client "{inst}" has registered or sent a request')
        if t.nodes:
            names = set(self._node_names()) | {i for c, i in ids if c == "kubelet"}
            for n in t.nodes:
                if n not in names:
                    bad("target.node", f'node "{n}" not found')
        return causes

    def _client_candidates(self, f: Fault) -> list[str]:
        t = f.spec.target
        out = []
        for comp, inst in self._identities():
            if f.spec_hits(comp, inst) and comp:
                out.append(f"{comp}/{inst}")
        if t.nodes:
            out.extend(f"kubelet/{n}" for n in t.nodes if f"kubelet/{n}" not in out)
        return sorted(out)

    # ------------------------------------------------------------------------------ lifecycle

    async def create(self, raw: Any, *, check: bool = True) -> Fault:
        """Validate, record and start one fault."""
        try:
            spec = parse(raw)
        except SpecError as exc:
            raise _invalid(exc.causes, raw.get("name", "") if isinstance(raw, dict) else "") from exc
        if not (isinstance(raw, dict) and raw.get("name")):
            base, n = spec.name, 2
            while spec.name in self.faults and self.faults[spec.name].live:
                spec = _renamed(spec, f"{base}-{n}")
                n += 1
        old = self.faults.get(spec.name)
        if old is not None and old.live:
            raise errors.StatusError(409, "AlreadyExists", f'faults "{spec.name}" already exists',
                                     details={"name": spec.name, "group": "chaos.kubemesh.io", "kind": "faults"})
        if check:
            causes = self._check_targets(spec)
            if causes:
                raise _invalid(causes, spec.name)
        f = Fault(spec=spec, rng=fault_rng(self.seed, spec.name), created_at=self.clock.now(),
                  trigger_counts=[0] * len(spec.triggers))
        self.faults.pop(spec.name, None)
        self.faults[spec.name] = f
        self.record("create", f, "ok", spec=spec.to_dict())
        if any(t.action == "arm" for t in spec.triggers):
            self._reindex()
        else:
            await self._run(self._activate(f))
        return f

    async def _run(self, coro: Coroutine[Any, Any, None] | None) -> None:
        if coro is not None:
            await coro

    def _activate(self, f: Fault) -> Coroutine[Any, Any, None] | None:
        """Make a fault Active; the synchronous part happens now, forwarding is returned."""
        if f.phase != "Pending":
            return None
        now = self.clock.now()
        f.phase = "Active"
        f.activated_at = now
        self._schedule_end(f)
        spec = f.spec
        cat = spec.category
        if cat in ("request", "watch", "reads") and spec.target.mode != "all":
            f.targets = choose(spec.target.mode, spec.target.value, self._client_candidates(f), f.rng)
        self._reindex()
        if spec.type in ("watch.close", "watch.gone", "partition"):
            what = "gone" if spec.type == "watch.gone" else "close"

            def act(w: Watcher) -> None:
                if what == "gone":
                    w.force_gone(f"chaos: fault {f.name} forced 410 Gone")
                else:
                    w.close(f"chaos: fault {f.name}")
                f.injected += 1
                self.record("inject", f, "ok", effect=what, component=w.identity[0], instance=w.identity[1],
                            watch=w.id, resource=w.kind.plural)

            if spec.type == "partition":
                for state in list(self.watch.states.values()):
                    w = state.watcher
                    if not w.closed and f.hits(*w.identity):
                        act(w)
                        self.watch.states.pop(w.id, None)
            else:
                self.watch.close_watchers(f, act)
        if spec.type == "watch.noBookmarks":
            self._refresh_all_bookmarks()
        if cat in ("node", "component", "clock"):
            return self._inject_forwarded(f)
        if spec.type in ONE_SHOT:
            return self._end(f, "one-shot fault done")
        return None

    def _schedule_end(self, f: Fault) -> None:
        if f.timer is not None:
            f.timer.cancel()
            f.timer = None
        if f.spec.duration is not None and f.activated_at is not None:
            f.ends_at = f.activated_at + f.spec.duration
            f.timer = self.timers.call_at(f.ends_at, lambda: self.spawn(
                self._run(self._end(f, "duration elapsed")), name=f"chaos-end-{f.name}"))
        else:
            f.ends_at = None

    def _refresh_all_bookmarks(self) -> None:
        for state in self.watch.states.values():
            self.watch.refresh_bookmarks(state.watcher)

    def _end(self, f: Fault, reason: str) -> Coroutine[Any, Any, None] | None:
        """End a fault: stop enforcing it now; the returned coroutine undoes forwarded effects."""
        if not f.live:
            return None
        was_active = f.active
        f.phase = "Recovered"
        f.ended_at = self.clock.now()
        f.ended.set()
        if f.timer is not None:
            f.timer.cancel()
            f.timer = None
        self._reindex()
        self.record("end", f, "ok", reason=reason)
        if not was_active:
            return None
        t = f.spec.type
        if t in ("watch.hold", "watch.reorder"):
            self.watch.release(f)
        elif t == "watch.delay":
            self.watch.release_delays(f)
        elif t == "watch.noBookmarks":
            self._refresh_all_bookmarks()
        if f.spec.category in ("node", "component", "clock"):
            return self._recover_forwarded(f)
        return None

    async def end(self, f: Fault, reason: str) -> None:
        """End a fault and wait for its forwarded effects to be undone."""
        await self._run(self._end(f, reason))

    async def delete(self, name: str) -> Fault:
        """Heal and remove one fault."""
        f = self.faults.get(name)
        if f is None:
            raise _fault_not_found(name)
        await self.end(f, "deleted")
        self.faults.pop(name, None)
        self._reindex()
        self.record("delete", f, "ok")
        return f

    async def reset(self) -> dict[str, Any]:
        """Heal and remove every fault; what was healed."""
        healed: list[dict[str, Any]] = []
        removed: list[str] = []
        for f in list(self.faults.values()):
            if f.live:
                await self.end(f, "reset")
                healed.append(f.to_dict())
            removed.append(f.name)
            self.faults.pop(f.name, None)
            self.record("delete", f, "ok", reason="reset")
        self._reindex()
        # Nothing may be left behind: effects whose faults are gone, timers, held events.
        for key in list(self.effects._stacks):
            for entry in list(self.effects._stacks.get(key, ())):
                await self.effects.pop(key, entry.fault)
        self.timers.clear()
        for state in self.watch.states.values():
            state.timers.clear()
            state.pool_timers.clear()
        self.watch.prune()
        self._refresh_all_bookmarks()
        return {"healed": healed, "removed": removed}

    async def patch(self, name: str, patch: Any) -> Fault:
        """Merge-patch a fault's spec."""
        f = self.faults.get(name)
        if f is None:
            raise _fault_not_found(name)
        if not isinstance(patch, dict):
            raise _invalid([{"field": "", "message": "a merge patch must be an object",
                             "reason": "FieldValueInvalid"}], name)
        causes = [{"field": k, "message": "cannot be changed", "reason": "FieldValueForbidden"}
                  for k in ("name", "type") if k in patch and patch[k] != f.spec.to_dict()[k]]
        if causes:
            raise _invalid(causes, name)
        raw = merge_patch(f.spec.to_dict(), {k: v for k, v in patch.items() if k != "status"})
        if "duration" not in raw:
            raw["duration"] = None
        try:
            spec = parse(raw)
        except SpecError as exc:
            raise _invalid(exc.causes, name) from exc
        causes = self._check_targets(spec)
        if causes:
            raise _invalid(causes, name)
        old = f.spec
        forwarded = spec.category in ("node", "component", "clock")
        redo = f.active and forwarded and (spec.target != old.target or spec.params != old.params
                                           or spec.match != old.match)
        if redo:
            await self._run(self._recover_forwarded(f))
        f.spec = spec
        if spec.triggers != old.triggers:
            f.trigger_counts = [0] * len(spec.triggers)
        if spec.target != old.target and spec.category in ("request", "watch", "reads") and f.active:
            f.targets = (choose(spec.target.mode, spec.target.value, self._client_candidates(f), f.rng)
                         if spec.target.mode != "all" else None)
        if f.active:
            self._schedule_end(f)
        self._reindex()
        self.record("update", f, "ok", spec=spec.to_dict())
        if redo:
            await self._run(self._inject_forwarded(f))
        if spec.type == "watch.noBookmarks":
            self._refresh_all_bookmarks()
        return f

    async def apply(self, items: Any) -> dict[str, list[str]]:
        """Reconcile to a desired set of faults (PUT)."""
        if isinstance(items, dict):
            items = items.get("items")
        if not isinstance(items, list):
            raise _invalid([{"field": "items", "message": "required: a list of fault specs",
                             "reason": "FieldValueRequired"}])
        specs: list[FaultSpec] = []
        causes: list[dict[str, str]] = []
        for i, raw in enumerate(items):
            try:
                spec = parse(raw)
            except SpecError as exc:
                causes.extend({**c, "field": f"items[{i}].{c['field']}"} for c in exc.causes)
                continue
            for c in self._check_targets(spec):
                causes.append({**c, "field": f"items[{i}].{c['field']}"})
            specs.append(spec)
        names = [s.name for s in specs]
        for dup in sorted({n for n in names if names.count(n) > 1}):
            causes.append({"field": "items", "message": f'name "{dup}" appears twice', "reason": "FieldValueDuplicate"})
        if causes:
            raise _invalid(causes)
        out: dict[str, list[str]] = {"created": [], "replaced": [], "unchanged": [], "removed": []}
        wanted = {s.name: s for s in specs}
        for name in [n for n in self.faults if n not in wanted]:
            await self.delete(name)
            out["removed"].append(name)
        for spec in specs:
            cur = self.faults.get(spec.name)
            if cur is not None and cur.live and cur.spec.to_dict() == spec.to_dict():
                out["unchanged"].append(spec.name)
                continue
            if cur is not None:
                await self.delete(spec.name)
                out["replaced"].append(spec.name)
            else:
                out["created"].append(spec.name)
            await self.create(spec.to_dict(), check=False)
        return out

    # ------------------------------------------------------------------------------ triggers

    def on_delivered(self, w: Watcher, items: Sequence[Item]) -> None:
        """Watch events reached a component's connection (one write's worth, in order)."""
        if not self._triggered:
            return  # the common case, once per write to a watcher: no trigger to evaluate
        for type_, event, use_prev in items:
            try:
                self._observe("delivered", w.identity, event.kind, type_, event.object_for(use_prev=use_prev),
                              event.prev, event.rv)
            except Exception:  # chaos must never break a watch stream
                log.exception("chaos trigger evaluation failed")

    def on_write(self, kind: Kind, type_: EventType, obj: Obj, prev: Obj | None, rv: int) -> None:
        """Store subscription: every write, in revision order."""
        self.samples.append((self.clock.now(), rv))
        if self._triggered:
            try:
                self._observe("written", WRITER.get(), kind, type_, obj, prev, rv)
            except Exception:  # chaos must never fail a write
                log.exception("chaos trigger evaluation failed")

    def _observe(self, point: str, who: tuple[str, str], kind: Kind, type_: str, obj: Obj, prev: Obj | None,
                 rv: int) -> None:
        for f in list(self._triggered):
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
                self.record("trigger", f, "ok", action=t.action, on=point, component=who[0], instance=who[1],
                            resource=kind.plural, event=type_, key=key_of(obj), rv=rv, delay=t.delay)
                action = t.action

                def fire(f: Fault = f, action: str = action) -> None:
                    coro = self._activate(f) if action == "arm" else self._end(f, "release trigger fired")
                    if coro is not None:
                        self.spawn(coro, name=f"chaos-trigger-{f.name}")

                if t.delay > 0:
                    self.timers.call_later(t.delay, fire)
                else:
                    fire()

    # ------------------------------------------------------------------------------ forwarding

    async def _kubelet_url(self, node: str) -> str | None:
        obj = self.store.get(NODES, node)
        port = None
        if obj is not None:
            port = (((obj.get("status") or {}).get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
        kubelets = [str(e["adminURL"]).rstrip("/") for e in self.components.values()
                    if e.get("component") == "kubelet" and e.get("adminURL")]
        if isinstance(port, int) and port > 0:
            for url in kubelets:
                if url.rsplit(":", 1)[-1] == str(port):
                    return url
            return f"http://127.0.0.1:{port}"
        for url in kubelets:
            res = await self.forwarder.call("GET", f"{url}/nodes/{node}")
            if res.outcome == "ok":
                return url
        return None

    def _forward_targets(self, f: Fault) -> list[str]:
        t = f.spec.target
        if f.spec.category == "node":
            candidates = list(t.nodes) or self._node_names()
        else:
            candidates = sorted(t.instances) or sorted(
                inst for inst, e in self.components.items() if e.get("component") == t.component)
        return choose(t.mode, t.value, candidates, f.rng)

    def _plan(self, f: Fault, target: str, base: str) -> tuple[EffectKey | None, tuple[str, str, Any],
                                                                 tuple[str, str, Any] | None]:
        """(effect key, inject call, undo call) of a forwarded fault on one target."""
        p = f.spec.params
        t = f.spec.type
        n = f"{base}/nodes/{target}"
        simple = {"node.powerOff": ("power", "power-off", "power-on"), "node.leaseStop": ("lease", "lease/stop",
                  "lease/resume"), "node.statusStop": ("status", "status/stop", "status/resume")}
        if t in simple:
            k, on, off = simple[t]
            return ("node", target, k), ("POST", f"{n}/{on}", None), ("POST", f"{n}/{off}", None)
        if t == "node.condition":
            return (("node", target, "condition", p["type"]), ("POST", f"{n}/conditions", dict(p)),
                    ("DELETE", f"{n}/conditions/{p['type']}", None))
        if t == "node.containersSlow":
            return (("node", target, "slow"), ("POST", f"{n}/containers/slow", dict(p)),
                    ("POST", f"{n}/containers/slow", {"startDelay": 0, "stopDelay": None}))
        if t == "node.containersFail":
            return None, ("POST", f"{n}/containers/fail", dict(p)), None
        if t == "component.pause":
            return ("component", target, "pause"), ("POST", f"{base}/chaos/pause", None), \
                ("POST", f"{base}/chaos/resume", None)
        if t == "component.crash":
            return None, ("POST", f"{base}/chaos/crash", dict(p)), None
        if t == "component.freezeInformer":
            i = p["informer"]
            return (("component", target, "informer", i), ("POST", f"{base}/chaos/informers/{i}/freeze", None),
                    ("POST", f"{base}/chaos/informers/{i}/unfreeze", None))
        if t == "component.dropHandler":
            m = f.spec.match
            drop = {"resources": list(m.resources), "eventTypes": list(m.event_types), "namespace": m.namespace,
                    "name": m.name, "occurrence": p.get("occurrence")}
            url = f"{base}/chaos/handler-drops/{f.name}"
            return ("component", target, "dropHandler", f.name), ("POST", url, drop), ("DELETE", url, None)
        if t == "component.chaosPoint":
            body = {k: v for k, v in p.items() if k != "point"}
            return (("component", target, "point", p["point"]), ("POST", f"{base}/chaos/points/{p['point']}", body),
                    ("DELETE", f"{base}/chaos/points/{p['point']}", None))
        if t == "clock.jump" and not p.get("undo", True):
            return None, ("POST", f"{base}/chaos/clock", {"jump": p["seconds"]}), None
        # clock.skew and undone jumps: offsets that add up while they overlap
        return ("clock", target), ("POST", f"{base}/chaos/clock", None), ("POST", f"{base}/chaos/clock", {"skew": 0})

    async def _base_url(self, f: Fault, target: str) -> str | None:
        if f.spec.category == "node":
            return await self._kubelet_url(target)
        entry = self.components.get(target)
        return str(entry["adminURL"]).rstrip("/") if entry and entry.get("adminURL") else None

    async def _inject_forwarded(self, f: Fault) -> None:
        targets = self._forward_targets(f)
        f.targets = targets
        results = await asyncio.gather(*(self._inject_one(f, tgt) for tgt in targets))
        if targets and all(r == "fail" for r in results) and f.active:
            f.phase = "Failed"
            f.ended_at = self.clock.now()
            f.ended.set()
            if f.timer is not None:
                f.timer.cancel()
            self._reindex()
        elif f.spec.type in ONE_SHOT and f.live:
            await self.end(f, "one-shot fault done")

    async def _inject_one(self, f: Fault, target: str) -> str:
        if not f.fires():
            self.record("inject", f, "info", target=target, effect="skipped (probability)")
            return "skipped"
        base = await self._base_url(f, target)
        if base is None:
            f.last_error = f"no admin endpoint found for {target}"
            self.record("inject", f, "fail", target=target, error=f.last_error)
            return "fail"
        key, (m, url, body), undo = self._plan(f, target, base)

        async def do() -> CallResult:
            if key is not None and key[0] == "clock":
                return await self.forwarder.call(m, url, {"skew": self.effects.total(key)})
            return await self.forwarder.call(m, url, body)

        if key is None or undo is None:
            res = await do()
        else:
            um, uurl, ubody = undo

            async def undo_call() -> CallResult:
                return await self.forwarder.call(um, uurl, ubody)

            value = float(f.spec.params.get("seconds", 0.0)) if key[0] == "clock" else 0.0
            res = await self.effects.push(key, f.name, apply=do, undo=undo_call, value=value)
        if res.outcome != "fail":
            f.injected += 1
        if res.outcome != "ok":
            f.last_error = res.detail
        self.record("inject", f, res.outcome, target=target, call=res.detail)
        return res.outcome

    async def _recover_forwarded(self, f: Fault) -> None:
        for key in self.effects.keys_of(f.name):
            res = await self.effects.pop(key, f.name)
            if res is None:
                continue
            if res.outcome != "fail":
                f.recovered += 1
            if res.outcome != "ok":
                f.last_error = res.detail
            self.record("recover", f, res.outcome, target=key[1], call=res.detail)

    # ------------------------------------------------------------------------------ requests

    def engaged(self, request: web.Request, who: tuple[str, str]) -> bool:
        """Whether a request fault may apply (`apiserver.server.Interceptor`); notes who was seen.

        Every API request passes here: with no request fault active it is one flag check.
        """
        path = request.path
        if path.startswith(_SKIP_PREFIXES) or path in _OPEN:
            return False
        if who not in self.seen and len(self.seen) < 100_000:
            self.seen[who] = self.clock.now()
        return self._requests_active

    async def intercept(self, request: web.Request, who: tuple[str, str],
                        handler: Any) -> web.StreamResponse:
        """The request interceptor (`app[INTERCEPTORS]`), for requests it is `engaged` with."""
        path = request.path
        faults = [f for f in self.faults_of(_REQUEST_TYPES) if f.hits(*who)]
        if not faults:
            resp: web.StreamResponse = await handler()
            return resp
        detail = {"component": who[0], "instance": who[1], "method": request.method, "path": path}
        for f in faults:
            if f.spec.type == "partition":
                f.injected += 1
                self.record("inject", f, "ok", effect="partition", **detail)
                if f.spec.params.get("mode") == "blackhole":
                    await self._stall(f, None)
                return self._reset(request)
        info = self._describe(request)
        if info is None:
            resp = await handler()
            return resp
        detail["verb"] = info.verb
        matched = [f for f in faults if self._request_matches(f, info)]
        total = 0.0
        for f in matched:
            if f.spec.type == "request.latency" and f.fires():
                d = self._latency(f)
                total += d
                f.injected += 1
                self.record("inject", f, "ok", effect="latency", delay=round(d, 6), **detail)
        if total > 0:
            await self.clock.sleep(total)
        for f in matched:
            if f.spec.type == "request.stall" and f.fires():
                f.injected += 1
                self.record("inject", f, "ok", effect="stall", **detail)
                await self._stall(f, f.spec.params.get("timeout"))
                if f.spec.params.get("then") == "reset":
                    return self._reset(request)
        for f in matched:
            if f.spec.type == "request.reset" and f.fires():
                f.injected += 1
                self.record("inject", f, "ok", effect="reset", **detail)
                return self._reset(request)
        for f in matched:
            if f.spec.type == "request.error" and f.fires():
                code = int(f.spec.params["code"])
                f.injected += 1
                self.record("inject", f, "ok", effect="error", code=code, **detail)
                msg = f.spec.params.get("message") or f"chaos: fault {f.name} injected {code}"
                raise errors.StatusError(code, _REASONS[code], msg, retry_after=f.spec.params.get("retryAfter"))
        if info.verb == "watch":
            for f in matched:
                if f.spec.type == "watch.gone" and f.spec.params.get("newWatches") and f.fires():
                    f.injected += 1
                    self.record("inject", f, "ok", effect="gone", **detail)
                    return await self._gone_stream(request, f)
        if info.verb in ("get", "list"):
            stale = [f for f in matched if f.spec.type == "reads.stale" and f.fires()]
            if stale:
                rv = min(self._stale_rv(f) for f in stale)
                lagging = next(f for f in stale if self._stale_rv(f) == rv)
                stale_resp = self._stale(request, info, lagging, rv, detail)
                if stale_resp is not None:
                    return stale_resp
        resp = await handler()
        if info.verb in WRITE_VERBS and resp.status < 400:
            for f in matched:
                if f.spec.type == "request.commitThenFail" and f.fires():
                    code = int(f.spec.params.get("code", 500))
                    f.injected += 1
                    self.record("inject", f, "ok", effect="commitThenFail", code=code, committedRV=request.get("rv"),
                                **detail)
                    return render_status(request, errors.StatusError(
                        code, _REASONS[code], f"chaos: fault {f.name}: the write was committed, then failed"))
        return resp

    def _describe(self, request: web.Request) -> RequestInfo | None:
        tail = request.match_info.get("tail")
        version = request.match_info.get("version")
        if tail is None or version is None:
            return None
        try:
            t = parse_target(request.match_info.get("group", ""), version, tail)
        except errors.StatusError:
            return None
        m = request.method
        if t.name is None:
            if m == "GET":
                verb = "watch" if t.watch or request.query.get("watch", "").lower() in ("1", "true") else "list"
            else:
                verb = {"POST": "create", "DELETE": "deletecollection"}.get(m, m.lower())
        else:
            verb = {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete",
                    "POST": "create"}.get(m, m.lower())
        return RequestInfo(verb=verb, kind=t.kind, sub=t.sub, namespace=t.namespace, name=t.name)

    @staticmethod
    def _request_matches(f: Fault, info: RequestInfo) -> bool:
        sel = f.spec.match
        if sel.verbs and info.verb not in sel.verbs:
            return False
        if not sel.matches_resource(info.kind.plural, info.sub):
            return False
        if sel.namespace is not None and info.namespace != sel.namespace:
            return False
        return sel.name is None or info.name == sel.name

    def _latency(self, f: Fault) -> float:
        p = f.spec.params
        base, jitter = float(p["delay"]), float(p.get("jitter", 0.0))
        if not jitter:
            return base
        if p.get("distribution") == "exponential":
            return base + f.rng.expovariate(1.0 / jitter)
        return max(0.0, base + f.rng.uniform(-jitter, jitter))

    async def _stall(self, f: Fault, limit: float | None) -> None:
        self.stalled += 1
        try:
            waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(f.ended.wait())}
            if limit is not None:
                waits.add(asyncio.ensure_future(self.clock.sleep(limit)))
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
        finally:
            self.stalled -= 1

    @staticmethod
    def _reset(request: web.Request) -> web.Response:
        transport = request.transport
        if transport is not None:
            transport.abort()
        return web.Response(status=RESET_STATUS)

    async def _gone_stream(self, request: web.Request, f: Fault) -> web.StreamResponse:
        enc = response_encoding(request)
        resp = web.StreamResponse(status=200, headers={"Content-Type": codec.content_type(enc)})
        await resp.prepare(request)
        await resp.write(encode_event("ERROR", errors.gone(f"chaos: fault {f.name}: too old resource version")
                                      .status(), enc))
        await resp.write_eof()
        return resp

    def _stale_rv(self, f: Fault) -> int:
        p = f.spec.params
        current = self.store.revision
        if "revisions" in p:
            return max(0, current - int(p["revisions"]))
        cutoff = self.clock.now() - float(p["seconds"])
        times = [t for t, _ in self.samples]
        i = bisect.bisect_right(times, cutoff)
        if i == len(self.samples):
            return current
        if i == 0:
            return max(0, self.samples[0][1] - 1)
        return self.samples[i - 1][1]

    def _stale(self, request: web.Request, info: RequestInfo, f: Fault, rv: int,
               detail: dict[str, Any]) -> web.Response | None:
        from apiserver import tables

        if tables.wants_table(request.headers.get("Accept")):
            return None
        kind = info.kind
        floor = self.hub.floor.get(kind, 0)
        rv = max(rv, floor)
        try:
            state = self.hub.state_at(kind, rv)
        except (ValueError, KeyError):
            return None
        f.injected += 1
        self.record("inject", f, "ok", effect="stale", rv=rv, current=self.store.revision, **detail)
        if info.name is not None:
            key = f"{info.namespace}/{info.name}" if info.namespace else info.name
            obj = state.get(key)
            if obj is None:
                raise errors.not_found(kind, info.name)
            return render(request, obj)
        labels, fields = selectors(request, kind)
        items = []
        for obj in state.values():
            md = obj.get("metadata") or {}
            if info.namespace and md.get("namespace") != info.namespace:
                continue
            if labels is not None and not labels.empty and not labels.matches(md.get("labels") or {}):
                continue
            if fields is not None and not fields.empty and not fields.matches(obj):
                continue
            items.append(obj)
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return render(request, {"kind": f"{kind.kind}List", "apiVersion": kind.api_version,
                                "metadata": {"resourceVersion": str(rv)}, "items": items})

    # ------------------------------------------------------------------------------ HTTP API

    def routes(self) -> list[web.RouteDef]:
        """The `/chaos/v1` routes."""
        return [
            web.get("/chaos/v1/faults", self.h_list),
            web.post("/chaos/v1/faults", self.h_create),
            web.put("/chaos/v1/faults", self.h_apply),
            web.get("/chaos/v1/faults/{name}", self.h_get),
            web.patch("/chaos/v1/faults/{name}", self.h_patch),
            web.delete("/chaos/v1/faults/{name}", self.h_delete),
            web.post("/chaos/v1/faults/{name}/release", self.h_release),
            web.post("/chaos/v1/reset", self.h_reset),
            web.get("/chaos/v1/history", self.h_history),
            web.get("/chaos/v1/types", self.h_types),
            web.get("/chaos/v1/points", self.h_points),
            web.get("/chaos/v1/leftovers", self.h_leftovers),
        ]

    async def _body(self, request: web.Request) -> Any:
        body, _ = await read_body(request)
        return body

    async def h_list(self, request: web.Request) -> web.Response:
        """GET /chaos/v1/faults."""
        return render(request, {"kind": "FaultList", "items": [f.to_dict() for f in self.faults.values()]})

    async def h_create(self, request: web.Request) -> web.Response:
        """POST /chaos/v1/faults."""
        body = await self._body(request)
        async with self._lock:
            f = await self.create(body)
        return render(request, f.to_dict(), status=201)

    async def h_apply(self, request: web.Request) -> web.Response:
        """PUT /chaos/v1/faults."""
        body = await self._body(request)
        async with self._lock:
            out = await self.apply(body)
            items = [f.to_dict() for f in self.faults.values()]
        return render(request, {**out, "items": items})

    async def h_get(self, request: web.Request) -> web.Response:
        """GET /chaos/v1/faults/{name}."""
        f = self.faults.get(request.match_info["name"])
        if f is None:
            raise _fault_not_found(request.match_info["name"])
        return render(request, f.to_dict())

    async def h_patch(self, request: web.Request) -> web.Response:
        """PATCH /chaos/v1/faults/{name}."""
        body = await self._body(request)
        async with self._lock:
            f = await self.patch(request.match_info["name"], body)
        return render(request, f.to_dict())

    async def h_delete(self, request: web.Request) -> web.Response:
        """DELETE /chaos/v1/faults/{name}."""
        async with self._lock:
            f = await self.delete(request.match_info["name"])
        return render(request, f.to_dict())

    async def h_release(self, request: web.Request) -> web.Response:
        """POST /chaos/v1/faults/{name}/release."""
        f = self.faults.get(request.match_info["name"])
        if f is None:
            raise _fault_not_found(request.match_info["name"])
        async with self._lock:
            await self.end(f, "released")
        return render(request, f.to_dict())

    async def h_reset(self, request: web.Request) -> web.Response:
        """POST /chaos/v1/reset."""
        async with self._lock:
            out = await self.reset()
        return render(request, out)

    async def h_leftovers(self, request: web.Request) -> web.Response:
        """GET /chaos/v1/leftovers: what chaos still holds (all zero after a reset)."""
        return render(request, self.leftovers())

    async def h_types(self, request: web.Request) -> web.Response:
        """GET /chaos/v1/types."""
        return render(request, {"types": [{"type": t, "category": c, "oneShot": t in ONE_SHOT}
                                          for t, c in TYPES.items()]})

    async def h_points(self, request: web.Request) -> web.Response:
        """GET /chaos/v1/points: each registered component's chaos points."""
        out = []
        for inst, e in sorted(self.components.items()):
            url = str(e.get("adminURL") or "").rstrip("/")
            if not url or e.get("component") == "kubelet":
                continue
            res = await self.forwarder.call("GET", f"{url}/chaos/points")
            points = res.body.get("points") if res.outcome == "ok" and isinstance(res.body, dict) else None
            out.append({"instance": inst, "component": e.get("component"), "points": points,
                        **({} if res.outcome == "ok" else {"error": res.detail})})
        return render(request, {"items": out})

    async def h_history(self, request: web.Request) -> web.StreamResponse:
        """GET /chaos/v1/history."""
        q = request.query
        try:
            since = int(q.get("since", "0"))
            limit = int(q["limit"]) if q.get("limit") else None
        except ValueError as exc:
            raise errors.bad_request("since and limit must be integers") from exc
        types = [t for t in q.get("type", "").split(",") if t] or None
        fault = q.get("fault")

        def keep(rec: dict[str, Any]) -> bool:
            return fault is None or rec.get("fault") == fault

        if q.get("follow", "").lower() in ("1", "true"):
            resp = web.StreamResponse(headers={"Content-Type": "application/jsonl"})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            with contextlib.suppress(ConnectionResetError):
                async for rec in self._follow(since, types):
                    if keep(rec):
                        await resp.write(orjson.dumps(rec) + b"\n")
            return resp
        records = [r for r in self.history.since(since, types=types) if keep(r)]
        if limit is not None:
            records = records[:limit]
        if q.get("format") == "jsonl" or "application/jsonl" in request.headers.get("Accept", ""):
            return web.Response(body=b"".join(orjson.dumps(r) + b"\n" for r in records),
                                headers={"Content-Type": "application/jsonl"})
        return render(request, {"items": records, "lastIndex": self.history.last_index})

    def _follow(self, since: int, types: list[str] | None) -> AsyncIterator[dict[str, Any]]:
        return self.history.follow(since, types=types)

    # ------------------------------------------------------------------------------ background

    async def background(self, app: web.Application) -> AsyncIterator[None]:
        """cleanup_ctx: run the timers; on shutdown heal what is still in effect."""
        task = asyncio.get_running_loop().create_task(self.timers.run(), name="chaos-timers")
        yield
        with contextlib.suppress(Exception):
            async with asyncio.timeout(3.0):
                if any(f.live for f in self.faults.values()):
                    await self.reset()
        task.cancel()
        for t in list(self.tasks):
            t.cancel()
        await asyncio.gather(task, *self.tasks, return_exceptions=True)
        await self.forwarder.close()


def _renamed(spec: FaultSpec, name: str) -> FaultSpec:
    raw = spec.to_dict()
    raw["name"] = name
    return parse(raw)


CHAOS: Final = web.AppKey("chaos", ChaosEngine)


def install(app: web.Application, *, rng: random.Random, token: str | None = None, clock: Clock | None = None,
            forward_timeout: float = 5.0) -> ChaosEngine:
    """Wire the chaos front door into an apiserver app (before it starts).

    Args:
        app: The app from `apiserver.server.build_app`.
        rng: The seeded RNG all chaos randomness derives from (per-fault RNGs are derived
            from one draw of it and the fault's name).
        token: The bearer token to send to kubelets' and components' admin endpoints.
        clock: The clock for durations and delays (default `app[CLOCK]`; tests pass a `ManualClock`).
        forward_timeout: Wall seconds a forwarded call may take before its outcome is `info`.
    """
    from apiserver.server import INTERCEPTORS

    engine = ChaosEngine(app, rng=rng, token=token, clock=clock, forward_timeout=forward_timeout)
    app[CHAOS] = engine
    app[INTERCEPTORS].append(engine)
    app[HUB].on_watcher.append(engine.watch.attach)
    engine.store.subscribe(engine.on_write)
    app.add_routes(engine.routes())
    app.cleanup_ctx.append(engine.background)
    return engine

"""The chaos engine: every fault of one apiserver, its life, and the effects it forwards.

Life of a fault: `create` records intent in the history before anything is injected; a fault
with an arm trigger stays `Pending` until it fires; `Active` faults end (`Recovered`) when
their duration passes, a release trigger fires, they are released, deleted or reset, and
ending undoes every effect that took effect (or may have). Every step is a `fault` record in
the history: create, trigger, inject, recover, update, end, delete.

Where each family is enforced: request faults by `kubemesh.apiserver.chaos.interception`,
watch faults by the taps of `kubemesh.apiserver.chaos.watch`, triggers by
`kubemesh.apiserver.chaos.triggers`; node, component and clock faults are forwarded to the
process that hosts their target (`kubemesh.apiserver.chaos.forward`, reference-counted).

Targets: node faults need a node that exists; component and clock faults a registered
instance (an admin endpoint to call). Request and watch faults match any client identity,
the kubemesh component header or the name in its User-Agent: a fault for a client that has
not connected yet is accepted (its status says so) and takes effect the moment it connects.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import math
import random
from collections.abc import AsyncIterator, Collection, Coroutine, Iterable, Sequence
from typing import Any, Final

import structlog
from aiohttp import web

from kubemesh.apiserver import errors
from kubemesh.apiserver.chaos.faults import Fault, Timers, fault_not_found, fault_rng, invalid
from kubemesh.apiserver.chaos.forward import CallResult, Effects, Forwarder, plan_calls
from kubemesh.apiserver.chaos.interception import REQUEST_TYPES, RequestChaos
from kubemesh.apiserver.chaos.spec import ONE_SHOT, FaultSpec, SpecError, parse
from kubemesh.apiserver.chaos.triggers import Triggers
from kubemesh.apiserver.chaos.watch import ITEM_TYPES, WatchChaos
from kubemesh.apiserver.core import ApiserverCore
from kubemesh.apiserver.watching import Item, Watcher
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.model.kinds import NODES

log = structlog.get_logger("apiserver.chaos")

KNOWN_COMPONENTS: Final = frozenset({"kubelet", "scheduler", "controller_manager"})
"""The kubemesh components (their identities are known before they connect)."""


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

    def __init__(self, core: ApiserverCore, *, rng: random.Random, token: str | None = None,
                 clock: Clock | None = None, forward_timeout: float = 5.0) -> None:
        """An engine over an assembled apiserver.

        Args:
            core: What it enforces faults on (its clock, store, hub, history, components).
            rng: The seeded RNG all chaos randomness derives from (per-fault RNGs are derived
                from one draw of it and the fault's name).
            token: The bearer token to send to kubelets' and components' admin endpoints.
            clock: The clock for durations and delays (default the core's; tests pass a `ManualClock`).
            forward_timeout: Wall seconds a forwarded call may take before its outcome is `info`.
        """
        self.core = core
        self.clock: Clock = clock if clock is not None else core.clock
        self.history = core.history
        self.hub = core.hub
        self.store = core.store
        self.targets = core.targets
        self.components = core.components.entries
        self.seed = rng.getrandbits(64)
        self.rng = rng
        self.faults: dict[str, Fault] = {}
        self.timers = Timers(self.clock)
        self.watch = WatchChaos(self)
        self.forwarder = Forwarder(token=token, timeout=forward_timeout)
        self.effects = Effects()
        self.seen: dict[tuple[str, str], float] = {}
        """Client identities that sent requests, with when they were first seen."""
        self.tasks: set[asyncio.Task[Any]] = set()
        self.stalled = 0
        self._active: dict[str, list[Fault]] = {}
        self.requests_active = False
        """Whether any request fault is active (requests are not intercepted otherwise)."""
        self.triggered: list[Fault] = []
        """Live faults with triggers, evaluated on every write and delivery."""
        self.lock = asyncio.Lock()
        """Serialises changes of the fault set (the HTTP routes take it)."""
        self.requests = RequestChaos(self)
        self.triggers = Triggers(self)

    # ------------------------------------------------------------------------------ bookkeeping

    def _reindex(self) -> None:
        active: dict[str, list[Fault]] = {}
        for f in self.faults.values():
            if f.active:
                active.setdefault(f.spec.type, []).append(f)
        self._active = active
        self.watch.items_active = any(t in active for t in ITEM_TYPES)
        self.requests_active = any(t in active for t in REQUEST_TYPES)
        self.triggered = [f for f in self.faults.values() if f.live and f.spec.triggers]
        self._sync_rbac(active)
        self._sync_apiserver(active)

    def _sync_apiserver(self, active: dict[str, list[Fault]]) -> None:
        """Hand the active watch-cache lag to the etcd watch cache: the longest delay, or frozen if one has none."""
        cache = self.core.etcd
        if cache is None:
            return
        cuts = active.get("apiserver.etcdPartition", ())
        # Partitioned from etcd: every etcd call fails, and the watch delivers nothing until it heals.
        cache.etcd.cut = (f"etcdserver: request timed out (chaos: fault {cuts[0].name} partitions this apiserver "
                          "from etcd)") if cuts else None
        cache.etcd.cut_blackhole = any(f.spec.params.get("mode") == "blackhole" for f in cuts)
        lags = active.get("apiserver.watchCacheLag", ())
        delays = [f.spec.params.get("delay") for f in lags]
        lag: float | None = 0.0 if not lags else None if None in delays else max(float(d or 0) for d in delays)
        if cuts:
            lag = None
        if cache.lagging or lag != 0.0:
            cache.set_lag(lag)

    def _sync_rbac(self, active: dict[str, list[Fault]]) -> None:
        """Hand the active RBAC faults to the authorizer and the authenticator (they act on every request)."""
        revoked: dict[str, frozenset[int] | None] = {}
        for f in active.get("rbac.revokeBinding", ()):
            binding, rules = str(f.spec.params["binding"]), f.spec.params.get("rules")
            if rules is None or revoked.get(binding, frozenset()) is None:
                revoked[binding] = None
            else:
                revoked[binding] = frozenset(rules) | (revoked.get(binding) or frozenset())
        authorizer, authenticator = self.core.authorizer, self.core.authenticator
        if revoked != authorizer.revoked:
            authorizer.revoked = revoked
            authorizer.invalidate()
        authenticator.rejected = {str(f.spec.params["user"]) for f in active.get("rbac.rejectTokens", ())}

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
        if cat == "apiserver":
            if self.core.etcd is None:
                bad_value = {"field": "type", "reason": "FieldValueNotSupported", "message": (
                    f"{spec.type} needs an apiserver over etcd (--storage etcd; kubemesh up --store etcd): in memory "
                    "the store is the apiserver's own, with no etcd to lag behind or be cut off from (reads.stale "
                    "and partition act on clients instead)")}
                causes.append(bad_value)
            return causes
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
        # Request and watch faults target any client identity, connected or not (users set up
        # faults first and start their controller second); only a near miss of a kubemesh
        # component's name is refused, since it can never match.
        ids = self._identities()
        if t.component is not None and t.component not in ("*", *KNOWN_COMPONENTS):
            meant = _kubemesh_component_meant(t.component)
            if meant is not None:
                bad("target.component", f'unknown component "{t.component}": the kubemesh component is "{meant}"')
        if t.nodes:
            names = set(self._node_names()) | {i for c, i in ids if c == "kubelet"}
            for n in t.nodes:
                if n not in names:
                    bad("target.node", f'node "{n}" not found')
        return causes

    def _resources(self) -> frozenset[str]:
        """The plurals a fault may match: every kind served now, custom resources included."""
        return frozenset(k.plural for k in self.core.kinds.all())

    def _not_connected(self, spec: FaultSpec) -> str | None:
        """For a client fault: how its target is named when no client with that identity was seen yet."""
        if spec.category not in ("request", "watch", "reads") or spec.target.nodes:
            return None
        probe = Fault(spec=spec, rng=random.Random(0), created_at=0.0)
        if any(probe.spec_hits(c, i) for c, i in self._identities()):
            return None
        t = spec.target
        parts = ([f'component "{t.component}"'] if t.component not in (None, "*") else []) + \
            [f'instance "{i}"' for i in t.instances]
        return " and ".join(parts) or "matching"

    def client_seen(self, who: tuple[str, str]) -> None:
        """A client identity sent its first request: faults waiting for it take effect now."""
        for f in self.faults.values():
            if not f.live or not f.spec_hits(*who):
                continue
            if f.waiting_for is not None:
                f.waiting_for = None
                self.record("update", f, "ok", connected={"component": who[0], "instance": who[1]})
            t = f.spec.target
            if f.active and f.targets is not None and t.mode in ("one", "fixed"):
                wanted = 1 if t.mode == "one" else int(t.value or 1)
                client = f"{who[0]}/{who[1]}"
                if len(f.targets) < wanted and client not in f.targets:
                    f.targets = sorted([*f.targets, client])

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
            spec = parse(raw, resources=self._resources())
        except SpecError as exc:
            raise invalid(exc.causes, raw.get("name", "") if isinstance(raw, dict) else "") from exc
        if not (isinstance(raw, dict) and raw.get("name")):
            base, n = spec.name, 2
            while spec.name in self.faults and self.faults[spec.name].live:
                spec = _renamed(spec, f"{base}-{n}", self._resources())
                n += 1
        old = self.faults.get(spec.name)
        if old is not None and old.live:
            raise errors.StatusError(409, "AlreadyExists", f'faults "{spec.name}" already exists',
                                     details={"name": spec.name, "group": "chaos.kubemesh.io", "kind": "faults"})
        if check:
            causes = self._check_targets(spec)
            if causes:
                raise invalid(causes, spec.name)
        f = Fault(spec=spec, rng=fault_rng(self.seed, spec.name), created_at=self.clock.now(),
                  trigger_counts=[0] * len(spec.triggers), waiting_for=self._not_connected(spec))
        self.faults.pop(spec.name, None)
        self.faults[spec.name] = f
        self.record("create", f, "ok", spec=spec.to_dict())
        if any(t.action == "arm" for t in spec.triggers):
            self._reindex()
        else:
            await self._run(self.activate(f))
        return f

    async def _run(self, coro: Coroutine[Any, Any, None] | None) -> None:
        if coro is not None:
            await coro

    def activate(self, f: Fault) -> Coroutine[Any, Any, None] | None:
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
            return self.end_now(f, "one-shot fault done")
        return None

    def _schedule_end(self, f: Fault) -> None:
        if f.timer is not None:
            f.timer.cancel()
            f.timer = None
        if f.spec.duration is not None and f.activated_at is not None:
            f.ends_at = f.activated_at + f.spec.duration
            f.timer = self.timers.call_at(f.ends_at, lambda: self.spawn(
                self._run(self.end_now(f, "duration elapsed")), name=f"chaos-end-{f.name}"))
        else:
            f.ends_at = None

    def _refresh_all_bookmarks(self) -> None:
        for state in self.watch.states.values():
            self.watch.refresh_bookmarks(state.watcher)

    def end_now(self, f: Fault, reason: str) -> Coroutine[Any, Any, None] | None:
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
        await self._run(self.end_now(f, reason))

    async def delete(self, name: str) -> Fault:
        """Heal and remove one fault."""
        f = self.faults.get(name)
        if f is None:
            raise fault_not_found(name)
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
            raise fault_not_found(name)
        if not isinstance(patch, dict):
            raise invalid([{"field": "", "message": "a merge patch must be an object",
                             "reason": "FieldValueInvalid"}], name)
        causes = [{"field": k, "message": "cannot be changed", "reason": "FieldValueForbidden"}
                  for k in ("name", "type") if k in patch and patch[k] != f.spec.to_dict()[k]]
        if causes:
            raise invalid(causes, name)
        raw = merge_patch(f.spec.to_dict(), {k: v for k, v in patch.items() if k != "status"})
        if "duration" not in raw:
            raw["duration"] = None
        try:
            spec = parse(raw, resources=self._resources())
        except SpecError as exc:
            raise invalid(exc.causes, name) from exc
        causes = self._check_targets(spec)
        if causes:
            raise invalid(causes, name)
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
            raise invalid([{"field": "items", "message": "required: a list of fault specs",
                             "reason": "FieldValueRequired"}])
        specs: list[FaultSpec] = []
        causes: list[dict[str, str]] = []
        for i, raw in enumerate(items):
            try:
                spec = parse(raw, resources=self._resources())
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
            raise invalid(causes)
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




    def on_delivered(self, w: Watcher, items: Sequence[Item]) -> None:
        """Watch events reached a component's connection (for `WatchChaos`): the triggers see them."""
        self.triggers.on_delivered(w, items)

    # ------------------------------------------------------------------------------ forwarding

    async def _kubelet_url(self, node: str) -> str | None:
        """The admin URL of the kubelet hosting `node`: the one that registered it, else the one that answers for it.

        Never by port: kubelets in containers all listen on the same one.
        """
        kubelets = [e for e in self.components.values() if e.get("component") == "kubelet" and e.get("adminURL")]
        for e in kubelets:
            if node in (e.get("nodes") or ()):
                return str(e["adminURL"]).rstrip("/")
        for e in kubelets:
            url = str(e["adminURL"]).rstrip("/")
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
        key, (m, url, body), undo = plan_calls(f, target, base)

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


def _kubemesh_component_meant(name: str) -> str | None:
    """The kubemesh component a name nearly spells (`controller-manager`, `shceduler`, `kube-scheduler`)."""
    plain = name.lower().replace("-", "_").removeprefix("kube_")
    close = difflib.get_close_matches(plain, [*KNOWN_COMPONENTS, "apiserver"], n=1, cutoff=0.8)
    return close[0] if close and close[0] != name else None


def _renamed(spec: FaultSpec, name: str, resources: Collection[str]) -> FaultSpec:
    raw = spec.to_dict()
    raw["name"] = name
    return parse(raw, resources=resources)

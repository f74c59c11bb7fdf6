"""Request faults, enforced on the API requests of the clients they target.

Every API request passes `engaged` (one flag check while no request fault is active); the
engaged ones go through `intercept`, which applies, in this order, what overlaps (tested):
latencies add up; a partition wins over everything; then stalls, resets, the first firing
error, new watches answered 410, stale reads (the largest lag), the handler, and
commit-then-fail (the write happened; the client is told it failed).

Stale reads serve a component's gets and lists from the watch windows as they were N
revisions (or seconds) ago: `sample_write` is a store publisher that remembers when each
revision was written.
"""

from __future__ import annotations

import asyncio
import bisect
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from aiohttp import web

from kubemesh.apiserver import errors, tables
from kubemesh.apiserver.chaos.faults import Fault
from kubemesh.apiserver.chaos.spec import TYPES, WRITE_VERBS
from kubemesh.apiserver.serving import LOSE_RESPONSE, Targets, render, render_status, response_encoding, selectors
from kubemesh.apiserver.storage import EventType, Store
from kubemesh.apiserver.watching import WatchHub, encode_event
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.model import codec
from kubemesh.services.model.kinds import Kind, Obj

_SKIP_PREFIXES: Final = ("/chaos/", "/kubemesh/v1/history")
_OPEN: Final = frozenset({"/healthz", "/livez", "/readyz", "/metrics"})
REQUEST_TYPES: Final = (*(t for t, c in TYPES.items() if c in ("request", "reads")), "watch.gone")
"""Fault types enforced on requests (while none is active, requests are not intercepted)."""
_REASONS: Final = {409: "Conflict", 410: "Expired", 429: "TooManyRequests", 500: "InternalError",
                   503: "ServiceUnavailable", 504: "Timeout"}
RESET_STATUS: Final = 444
"""The code the history's request record shows for a request chaos answered by cutting the connection."""


def _error(code: int, message: str, *, retry_after: int | None = None) -> errors.StatusError:
    """The Status an injected error answers with, shaped as kube-apiserver's of that code (a 500's cause)."""
    if code == 500:
        err = errors.internal(message)
        err.retry_after = retry_after
        return err
    return errors.StatusError(code, _REASONS[code], message, retry_after=retry_after)


class Engine(Protocol):
    """What the request chaos needs from the engine (`kubemesh.apiserver.chaos.engine.ChaosEngine`)."""

    clock: Clock
    hub: WatchHub
    store: Store
    targets: Targets
    seen: dict[tuple[str, str], float]
    requests_active: bool
    stalled: int

    def faults_of(self, types: Iterable[str]) -> list[Fault]:
        """Active faults of some types, in creation order."""
        ...

    def record(self, op: str, fault: Fault, outcome: str, **detail: Any) -> None:
        """Append a fault record to the history."""
        ...

    def client_seen(self, who: tuple[str, str]) -> None:
        """A client identity sent its first request."""
        ...


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """What an API request names."""

    verb: str
    kind: Kind
    sub: str | None
    namespace: str | None
    name: str | None


class RequestChaos:
    """The request interceptor of the chaos front door (a `kubemesh.apiserver.core.Interceptor`)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.samples: deque[tuple[float, int]] = deque(maxlen=200_000)
        """(cluster time, revision) of recent writes: where `reads.stale` with `seconds` looks back to."""

    def sample_write(self, kind: Kind, type_: EventType, obj: Obj, prev: Obj | None, rv: int) -> None:
        """Store publisher: remember when revision `rv` was written."""
        self.samples.append((self.engine.clock.now(), rv))
    def engaged(self, request: web.Request, who: tuple[str, str]) -> bool:
        """Whether a request fault may apply (`apiserver.server.Interceptor`); notes who was seen.

        Every API request passes here: with no request fault active it is one flag check.
        """
        path = request.path
        if path.startswith(_SKIP_PREFIXES) or path in _OPEN:
            return False
        if who not in self.engine.seen and len(self.engine.seen) < 100_000:
            self.engine.seen[who] = self.engine.clock.now()
            self.engine.client_seen(who)
        return self.engine.requests_active

    async def intercept(self, request: web.Request, who: tuple[str, str],
                        handler: Any) -> web.StreamResponse:
        """The request interceptor (`app[INTERCEPTORS]`), for requests it is `engaged` with."""
        path = request.path
        faults = [f for f in self.engine.faults_of(REQUEST_TYPES) if f.hits(*who)]
        if not faults:
            resp: web.StreamResponse = await handler()
            return resp
        detail = {"component": who[0], "instance": who[1], "method": request.method, "path": path}
        for f in faults:
            if f.spec.type == "partition":
                f.injected += 1
                self.engine.record("inject", f, "ok", effect="partition", **detail)
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
                self.engine.record("inject", f, "ok", effect="latency", delay=round(d, 6), **detail)
        if total > 0:
            await self.engine.clock.sleep(total)
        for f in matched:
            if f.spec.type == "request.stall" and f.fires():
                f.injected += 1
                self.engine.record("inject", f, "ok", effect="stall", **detail)
                await self._stall(f, f.spec.params.get("timeout"))
                if f.spec.params.get("then") == "reset":
                    return self._reset(request)
        for f in matched:
            if f.spec.type == "request.reset" and f.fires():
                f.injected += 1
                self.engine.record("inject", f, "ok", effect="reset", **detail)
                return self._reset(request)
        for f in matched:
            if f.spec.type == "request.error" and f.fires():
                code = int(f.spec.params["code"])
                f.injected += 1
                self.engine.record("inject", f, "ok", effect="error", code=code, **detail)
                msg = f.spec.params.get("message") or f"chaos: fault {f.name} injected {code}"
                raise _error(code, msg, retry_after=f.spec.params.get("retryAfter"))
        if info.verb == "watch":
            for f in matched:
                if f.spec.type == "watch.gone" and f.spec.params.get("newWatches") and f.fires():
                    f.injected += 1
                    self.engine.record("inject", f, "ok", effect="gone", **detail)
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
                    if f.spec.params.get("lose"):
                        self.engine.record("inject", f, "ok", effect="commitThenLose",
                                           committedRV=request.get("rv"), **detail)
                        request[LOSE_RESPONSE] = f.name
                        return resp
                    self.engine.record("inject", f, "ok", effect="commitThenFail", code=code,
                                       committedRV=request.get("rv"), **detail)
                    return render_status(request, _error(
                        code, f"chaos: fault {f.name}: the write was committed, then failed"))
        return resp

    def _describe(self, request: web.Request) -> RequestInfo | None:
        tail = request.match_info.get("tail")
        version = request.match_info.get("version")
        if tail is None or version is None:
            return None
        try:
            t = self.engine.targets.parse(request.match_info.get("group", ""), version, tail)
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
        return sel.matches_target(plural=info.kind.plural, sub=info.sub, namespace=info.namespace, name=info.name)

    def _latency(self, f: Fault) -> float:
        p = f.spec.params
        base, jitter = float(p["delay"]), float(p.get("jitter", 0.0))
        if not jitter:
            return base
        if p.get("distribution") == "exponential":
            return base + f.rng.expovariate(1.0 / jitter)
        return max(0.0, base + f.rng.uniform(-jitter, jitter))

    async def _stall(self, f: Fault, limit: float | None) -> None:
        self.engine.stalled += 1
        try:
            waits: set[asyncio.Future[Any]] = {asyncio.ensure_future(f.ended.wait())}
            if limit is not None:
                waits.add(asyncio.ensure_future(self.engine.clock.sleep(limit)))
            try:
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
        finally:
            self.engine.stalled -= 1

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
        current = self.engine.store.revision
        if "revisions" in p:
            return max(0, current - int(p["revisions"]))
        cutoff = self.engine.clock.now() - float(p["seconds"])
        times = [t for t, _ in self.samples]
        i = bisect.bisect_right(times, cutoff)
        if i == len(self.samples):
            return current
        if i == 0:
            return max(0, self.samples[0][1] - 1)
        return self.samples[i - 1][1]

    def _stale(self, request: web.Request, info: RequestInfo, f: Fault, rv: int,
               detail: dict[str, Any]) -> web.Response | None:

        if tables.wants_table(request.headers.get("Accept")):
            return None
        kind = info.kind
        floor = self.engine.hub.floor(kind)
        rv = max(rv, floor)
        try:
            state = self.engine.hub.state_at(kind, rv)
        except (ValueError, KeyError):
            return None
        f.injected += 1
        self.engine.record("inject", f, "ok", effect="stale", rv=rv, current=self.engine.store.revision, **detail)
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

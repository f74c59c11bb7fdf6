"""The apiserver process: settings, the aiohttp application, and its lifecycle.

Besides the Kubernetes API (`serving.py`) the process serves:

* `/healthz`, `/livez`, `/readyz` (open without a token), `/metrics` (Prometheus);
* `/clock`: the cluster clock every component derives its time from;
* `/kubemesh/v1/components`: the registry where components announce their admin endpoints,
  so that chaos can reach them, and the bug switches they run with (`bugs`, read-only: what
  an attached scenario run checks against its mode).

With a token configured, every other path needs `Authorization: Bearer <token>`; without
one, a request is 401 and changes nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import random
import signal
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

import orjson
import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from apiserver import errors
from apiserver.history import WRITER, History
from apiserver.registry import Registry
from apiserver.serving import (
    HUB,
    MAX_BODY,
    REGISTRY,
    RESOURCE,
    RESPONSE_RV,
    VERB,
    Api,
    identity,
    read_body,
    render,
    render_status,
)
from apiserver.storage import Backend, LogBackend, MemoryBackend, Store
from apiserver.watching import Item, Watcher, WatchHub, WatchSettings
from services.certs import server_context
from services.clock import ClusterClock, component_rng
from services.gctuning import GcSettings, SurvivorFreezer
from services.kinds import Kind, Obj, key_of
from services.metrics import RequestStats

OPEN_PATHS: Final = frozenset({"/healthz", "/livez", "/readyz"})
log = structlog.get_logger("apiserver")


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """How one apiserver process is configured."""

    host: str = "127.0.0.1"
    port: int = 6443
    data_dir: str | None = None
    """Directory for the append-only log and snapshots; None keeps state in memory only."""
    fsync: bool = False
    """fsync every write (survives machine crashes, not only process kills)."""
    token: str | None = None
    """Bearer token required on everything but the health endpoints."""
    tls_cert: str | None = None
    """Serving certificate (PEM); with `tls_key`, the apiserver serves HTTPS, as kubectl needs
    to send a token at all (client-go sends no credentials over plain http)."""
    tls_key: str | None = None
    clock_rate: float = 1.0
    """Cluster seconds per wall second."""
    seed: int | None = None
    """Seed for uids and generated names; None for an OS-seeded RNG."""
    watch: WatchSettings = field(default_factory=WatchSettings)
    history_capacity: int = 1_000_000
    """Records kept in the history ring."""
    history_deliveries: bool = True
    """Record every watch delivery (the timeline of a race); off only for benchmarks."""
    chaos: bool = True
    """Serve the chaos front door (tests that install it with their own clock turn this off)."""
    chaos_forward_timeout: float = 5.0
    """Wall seconds a fault forwarded to a kubelet or component may take before its outcome is `info`."""
    gc: GcSettings = field(default_factory=GcSettings)
    """How the process keeps the cyclic collector's pauses short (services/gctuning.py)."""


@dataclass(slots=True)
class Metrics:
    """The apiserver's Prometheus metrics."""

    registry: CollectorRegistry
    requests: RequestStats
    """`apiserver_request_total` and `apiserver_request_duration_seconds` (observed on every request)."""
    watchers: Gauge
    objects: Gauge

    @classmethod
    def create(cls) -> Metrics:
        """Fresh metrics on their own registry."""
        reg = CollectorRegistry()
        requests = RequestStats(requests="apiserver_request", latency="apiserver_request_duration_seconds",
                                buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5))
        reg.register(requests)
        return cls(
            registry=reg,
            requests=requests,
            watchers=Gauge("apiserver_registered_watchers", "Live watch streams", registry=reg),
            objects=Gauge("apiserver_storage_revision", "Current store revision", registry=reg),
        )


Handler = Callable[[], Awaitable[web.StreamResponse]]


class Interceptor(Protocol):
    """Wraps the handling of API requests: may delay one, fail it, or fail it after it ran."""

    def engaged(self, request: web.Request, who: tuple[str, str]) -> bool:
        """Whether this request must go through `intercept` (asked synchronously, for every request)."""
        ...

    async def intercept(self, request: web.Request, who: tuple[str, str], handler: Handler) -> web.StreamResponse:
        """Handle the request, calling `handler` (or not)."""
        ...


CLOCK: Final = web.AppKey("clock", ClusterClock)
HISTORY: Final = web.AppKey("history", History)
INTERCEPTORS: Final = web.AppKey("interceptors", list[Interceptor])
METRICS: Final = web.AppKey("metrics", Metrics)
COMPONENTS: Final = web.AppKey("components", dict[str, dict[str, Any]])


def _load_clock(settings: ServerSettings) -> ClusterClock:
    """The cluster clock, continued across restarts when there is a data directory."""
    if settings.data_dir:
        path = Path(settings.data_dir) / "clock.json"
        if path.exists():
            doc = orjson.loads(path.read_bytes())
            if float(doc.get("rate", 0)) == settings.clock_rate:
                return ClusterClock.from_document(doc)
        clock = ClusterClock(rate=settings.clock_rate)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(clock.document()))
        return clock
    return ClusterClock(rate=settings.clock_rate)


def build_app(settings: ServerSettings) -> web.Application:
    """The whole apiserver as an aiohttp application (tests may run it in-process)."""
    clock = _load_clock(settings)
    backend: Backend = LogBackend(settings.data_dir, fsync=settings.fsync) if settings.data_dir \
        else MemoryBackend()
    store = Store(backend=backend)
    hub = WatchHub(store=store, now=clock.now, settings=settings.watch)
    rng = random.Random(settings.seed) if settings.seed is not None else random.Random()
    registry = Registry(store=store, clock=clock, rng=rng)
    metrics = Metrics.create()
    api = Api(registry=registry, hub=hub, server_address=f"{settings.host}:{settings.port}")
    token = settings.token
    history = History(clock=clock, capacity=settings.history_capacity, deliveries=settings.history_deliveries)
    interceptors: list[Interceptor] = []

    def record_write(kind: Kind, event: str, obj: Obj, prev: Obj | None, rv: int) -> None:
        component, instance = WRITER.get()
        history.append("write", component=component, instance=instance, resource=kind.plural, event=event,
                       key=key_of(obj), rv=rv)

    # Watchers flushed together mostly deliver the very same items: their `Seen` list is built
    # once and shared by their history entries (nobody mutates a recorded list).
    last_seen: list[Any] = [None, None]  # [items, seen]

    def record_delivery(w: Watcher, items: Sequence[Item]) -> None:
        component, instance = w.identity
        if items == last_seen[0]:
            seen = last_seen[1]
        else:
            seen = [event.seen_as(type_) for type_, event, _ in items]
            last_seen[0], last_seen[1] = items, seen
        history.deliveries(component=component, instance=instance, watch=w.id, seen=seen)

    store.subscribe(record_write)
    if settings.history_deliveries:
        hub.on_deliver = record_delivery

    observe = metrics.requests.observe

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        started = loop.time()
        who: tuple[str, str] | None = None
        try:
            if token is not None and request.path not in OPEN_PATHS:
                sent = request.headers.get("Authorization", "")
                if not (sent.startswith("Bearer ") and hmac.compare_digest(sent[7:].strip(), token)):
                    raise errors.StatusError(401, "Unauthorized", "Unauthorized")
            who = identity(request)
            writer = WRITER.set(who)
            try:
                resp = await _chain(request, who, handler, interceptors)
            finally:
                WRITER.reset(writer)
        except errors.StatusError as exc:
            resp = render_status(request, exc)
        except web.HTTPException as exc:
            if exc.status == 413:
                resp = render_status(request, errors.too_large(MAX_BODY))
            elif exc.status == 404:
                resp = render_status(request, errors.unknown_resource())
            elif exc.status == 405:
                resp = render_status(request, errors.method_not_allowed())
            else:
                resp = render_status(request, errors.StatusError(exc.status, exc.reason, exc.text or exc.reason))
        except (asyncio.CancelledError, ConnectionResetError):
            raise
        except Exception as exc:
            log.exception("unhandled error", path=request.path, method=request.method, client=identity(request))
            resp = render_status(request, errors.internal(type(exc).__name__))
        elapsed = loop.time() - started
        verb = request.get(VERB)  # set once a resource path was resolved
        if verb is not None:
            observe(verb=verb, resource=request.get(RESOURCE, ""), code=resp.status, seconds=elapsed)
        else:
            # Labelled by route, never by raw path: unknown paths must not grow the series.
            route = request.match_info.route.resource
            observe(verb=request.method, resource=route.canonical if route is not None else "unmatched",
                    code=resp.status, seconds=elapsed)
            if not (request.path.startswith("/chaos") or "tail" in request.match_info):
                return resp
            verb = _verb(request)
        component, instance = who if who is not None else identity(request)
        history.append("request", component=component, instance=instance, verb=verb, path=request.path,
                       key=request.match_info.get("tail", ""), rv=request.get(RESPONSE_RV), code=resp.status,
                       latency=round(elapsed, 6))
        return resp

    app = web.Application(middlewares=[guard], client_max_size=MAX_BODY + 1024)
    app[REGISTRY] = registry
    app[HUB] = hub
    app[CLOCK] = clock
    app[METRICS] = metrics
    app[COMPONENTS] = {}
    app[HISTORY] = history
    app[INTERCEPTORS] = interceptors
    app.add_routes(api.routes())

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def metrics_handler(request: web.Request) -> web.Response:
        metrics.watchers.set(len(hub.watchers))
        metrics.objects.set(store.revision)
        return web.Response(body=generate_latest(metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def clock_handler(request: web.Request) -> web.Response:
        return render(request, clock.document())

    async def put_component(request: web.Request) -> web.Response:
        body, _ = await read_body(request)
        if not isinstance(body, dict) or not isinstance(body.get("adminURL"), str):
            raise errors.StatusError(422, "Invalid", "a registration needs component, instance and adminURL")
        instance = request.match_info["instance"]
        entry = {"component": str(body.get("component", "")), "instance": instance,
                 "adminURL": body["adminURL"], "registeredAt": clock.now()}
        bugs = body.get("bugs")
        if bugs is not None:
            if not isinstance(bugs, list) or not all(isinstance(b, str) for b in bugs):
                raise errors.StatusError(422, "Invalid", "bugs must be a list of bug switch names")
            entry["bugs"] = sorted(set(bugs))
        app[COMPONENTS][instance] = entry
        return render(request, entry)

    async def list_components(request: web.Request) -> web.Response:
        return render(request, {"items": sorted(app[COMPONENTS].values(), key=lambda e: e["instance"])})

    async def history_handler(request: web.Request) -> web.StreamResponse:
        q = request.query
        try:
            since = int(q.get("since", "0"))
            limit = int(q["limit"]) if q.get("limit") else None
        except ValueError as exc:
            raise errors.bad_request("since and limit must be integers") from exc
        types = [t for t in q.get("type", "").split(",") if t] or None
        if q.get("follow", "").lower() not in ("1", "true"):
            records = history.since(since, types=types, limit=limit)
            body = b"".join(orjson.dumps(r) + b"\n" for r in records)
            return web.Response(body=body, headers={"Content-Type": "application/jsonl"})
        resp = web.StreamResponse(headers={"Content-Type": "application/jsonl"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        with contextlib.suppress(ConnectionResetError):
            async for rec in history.follow(since, types=types):
                await resp.write(orjson.dumps(rec) + b"\n")
        return resp

    app.add_routes([
        web.get("/kubemesh/v1/history", history_handler),
        web.get("/healthz", health), web.get("/livez", health), web.get("/readyz", health),
        web.get("/metrics", metrics_handler), web.get("/clock", clock_handler),
        web.put("/kubemesh/v1/components/{instance}", put_component),
        web.get("/kubemesh/v1/components", list_components),
    ])

    async def compactor(app: web.Application) -> Any:
        async def loop() -> None:
            while True:
                await asyncio.sleep(1.0)
                store.compact()
        task = asyncio.get_running_loop().create_task(loop(), name="apiserver-compactor")
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async def on_shutdown(app: web.Application) -> None:
        api.shutting_down = True
        hub.close_all("apiserver shutting down")

    async def on_cleanup(app: web.Application) -> None:
        store.close()

    # The chaos front door: faults enforced here (requests, watch streams, stale reads) and
    # forwarded to kubelets and components' admin endpoints (see apiserver/chaos.py).
    if settings.chaos:
        from apiserver.chaos import install as install_chaos
        install_chaos(app, rng=component_rng(settings.seed, component="apiserver", instance="chaos"),
                      token=settings.token, forward_timeout=settings.chaos_forward_timeout)

    app.cleanup_ctx.append(compactor)
    app.on_shutdown.append(on_shutdown)
    app.on_cleanup.append(on_cleanup)
    return app


async def _chain(request: web.Request, who: tuple[str, str], handler: Any,
                 interceptors: list[Interceptor]) -> web.StreamResponse:
    """Run the handler through the engaged interceptors (chaos), outermost first."""
    engaged = [i for i in interceptors if i.engaged(request, who)]
    if not engaged:  # the common case: no fault concerns this request
        resp: web.StreamResponse = await handler(request)
        return resp

    async def call(i: int) -> web.StreamResponse:
        if i == len(engaged):
            resp: web.StreamResponse = await handler(request)
            return resp
        return await engaged[i].intercept(request, who, lambda: call(i + 1))
    return await call(0)


def _verb(request: web.Request) -> str:
    """The Kubernetes verb of a request (list, watch, get, create, update, patch, delete...)."""
    method = request.method
    tail = request.match_info.get("tail", "")
    parts = [p for p in tail.split("/") if p]
    if parts and parts[0] == "namespaces" and len(parts) >= 3:
        parts = parts[2:]
    collection = len(parts) <= 1
    if method == "GET":
        if collection:
            return "watch" if request.query.get("watch", "").lower() in ("1", "true") else "list"
        return "get"
    return {"POST": "create", "PUT": "update", "PATCH": "patch",
            "DELETE": "deletecollection" if collection else "delete"}.get(method, method.lower())


async def serve(settings: ServerSettings, *, stop: asyncio.Event | None = None) -> None:
    """Run the apiserver until `stop` is set (or SIGTERM/SIGINT when run as a process)."""
    app = build_app(settings)
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    ssl_context = server_context(settings.tls_cert, settings.tls_key) \
        if settings.tls_cert and settings.tls_key else None
    site = web.TCPSite(runner, settings.host, settings.port, backlog=4096, reuse_address=True,
                       ssl_context=ssl_context)
    await site.start()
    # What start-up built lives for the whole process, and stored objects are acyclic trees
    # that reference counting frees: survivors are frozen out of the cyclic collector's walks,
    # which kept its pauses out of the watch latency tail (services/gctuning.py).
    freezer = SurvivorFreezer(settings=settings.gc)
    freezer.start()
    log.info("apiserver listening", host=settings.host, port=settings.port, data_dir=settings.data_dir,
             clock_rate=settings.clock_rate, auth=settings.token is not None, tls=ssl_context is not None)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        log.info("apiserver stopping")
        freezer.stop()
        await runner.cleanup()

"""The apiserver process: settings, the aiohttp application, and its lifecycle.

Besides the Kubernetes API (`serving.py`) the process serves:

* `/healthz`, `/livez`, `/readyz` (open without a token), `/metrics` (Prometheus);
* `/clock`: the cluster clock every component derives its time from;
* `/kubemesh/v1/components`: the registry where components announce their admin endpoints
  (`kubemesh.apiserver.components`);
* `/kubemesh/v1/history`: the history (`kubemesh.apiserver.history_routes`).

The parts behind these routes are assembled by `kubemesh.apiserver.core.assemble`; this module
is the HTTP front: authentication, request accounting and the routes.

With a token configured, every other path needs `Authorization: Bearer <token>` (the admin,
`system:masters`) or a ServiceAccount token (`kubemesh.apiserver.authn`); without one, a
request is 401 and changes nothing. Impersonation headers are applied next, then a request on
a path that is no resource (discovery, `/version`, `/clock`, `/chaos`, `/kubemesh`) is
authorized as a non-resource URL; resource requests are authorized by the serving layer, once
their target is resolved (`kubemesh.apiserver.rbac`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import signal
from typing import Any, Final

import structlog
from aiohttp import web
from prometheus_client import Counter, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kubemesh.apiserver import chaos, errors, history_routes
from kubemesh.apiserver.admitting import Admitting
from kubemesh.apiserver.authn import impersonate
from kubemesh.apiserver.core import ApiserverCore, Interceptor, assemble
from kubemesh.apiserver.etcdcache import FRESH, RETRIES, STAGE, CacheStore, EtcdCache, Preloaded, Retry
from kubemesh.apiserver.etcdstore import EtcdSettings, EtcdStore, StorageError, decode_object
from kubemesh.apiserver.history import WRITER
from kubemesh.apiserver.podstreams import PodStreams
from kubemesh.apiserver.rbac import USER, Attributes, User
from kubemesh.apiserver.serving import (
    DENIED,
    LOSE_RESPONSE,
    MAX_BODY,
    RESOURCE,
    RESPONSE_RV,
    TARGET,
    VERB,
    WHAT,
    WRITTEN,
    Api,
    attributes_record,
    authorize,
    identity,
    render,
    render_status,
)
from kubemesh.apiserver.settings import ServerSettings, apiserver_identity, own_url
from kubemesh.apiserver.sharedstate import SharedRegistry, shared_clock, shared_signing_key
from kubemesh.apiserver.storage import Staged, Store, StoreWriteError
from kubemesh.apiserver.watching import WatchHub
from kubemesh.services.machinery.certs import server_context
from kubemesh.services.machinery.clock import ClusterClock, component_rng
from kubemesh.services.model.kinds import Obj, key_of
from kubemesh.services.process.gctuning import SurvivorFreezer
from kubemesh.services.process.runs import this_run

OPEN_PATHS: Final = frozenset({"/healthz", "/livez", "/readyz"})
log = structlog.get_logger("apiserver")

__all__ = ["ServerSettings", "build_app", "serve"]


def build_app(core: ApiserverCore) -> web.Application:
    """The HTTP front of an assembled apiserver (tests may run it in-process).

    With `core.settings.chaos`, the chaos front door is installed on it
    (`kubemesh.apiserver.chaos.install`).
    """
    settings = core.settings
    history, hub, store = core.history, core.hub, core.store
    webhooks = core.webhooks
    api = Api(registry=core.registry, hub=hub, targets=core.targets, discovery=core.discovery, openapi=core.openapi,
              admitting=Admitting(registry=core.registry, webhooks=webhooks), authenticator=core.authenticator,
              authorizer=core.authorizer, request_checks=core.request_checks, etcd=core.etcd)
    pod_streams = PodStreams(registry=core.registry, kubelet_of=core.components.kubelet_of, token=settings.token)

    async def apiservers(request: web.Request) -> web.Response:
        """`GET /kubemesh/v1/apiservers`: {"items": [{"name", "url"}]}, every apiserver of the cluster."""
        if core.apiservers is None:
            items = [{"name": apiserver_identity(settings), "url": own_url(settings)}]
        else:
            try:
                items = await core.apiservers()
            except StorageError as exc:
                raise errors.storage_failure(str(exc)) from exc
        return render(request, {"items": items})
    api.pod_streams.update(pod_streams.handlers())
    authenticator, authorizer = core.authenticator, core.authorizer
    interceptors = core.interceptors
    etcd = core.etcd
    observe = core.metrics.requests.observe

    @web.middleware
    async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        started = loop.time()
        who: tuple[str, str] | None = None
        user: User | None = None
        try:
            if request.path not in OPEN_PATHS:
                user = authenticator.authenticate(request.headers.get("Authorization", ""),
                                                  component=request.headers.get("X-Kubemesh-Component"),
                                                  instance=request.headers.get("X-Kubemesh-Instance"),
                                                  controller=request.headers.get("X-Kubemesh-Controller"))
                if user is None:
                    raise errors.StatusError(401, "Unauthorized", "Unauthorized")
                if "Impersonate-User" in request.headers or "Impersonate-Group" in request.headers:
                    user = impersonate(request.headers, list(request.headers.items()), user, authorizer)
                if not _resource_path(request):
                    authorize(request, authorizer, user, Attributes(verb=request.method.lower(), path=request.path,
                                                                    resource_request=False))
            who = identity(request)
            writer = WRITER.set(who)
            as_user = USER.set(user)
            run = handler
            if etcd is not None and request.method in _WRITE_METHODS:
                run = functools.partial(_committed, handler, etcd=etcd, api=api, hub=hub)
            try:
                resp = await _chain(request, who, run, interceptors)
            finally:
                WRITER.reset(writer)
                USER.reset(as_user)
        except errors.StatusError as exc:
            resp = render_status(request, exc)
        except StoreWriteError as exc:  # the append failed: the write was not applied
            resp = render_status(request, errors.storage_failure(str(exc)))
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
        except RecursionError:
            # JSON allows 1,024 levels; walking that deep exceeds Python's stack. Nothing is stored
            # before validation walks the object, so the store is as it was.
            resp = render_status(request, errors.bad_request("the object is nested too deeply to be handled"))
        except Exception as exc:
            log.exception("unhandled error", path=request.path, method=request.method, client=identity(request))
            resp = render_status(request, errors.internal(type(exc).__name__))
        verb = request.get(VERB)  # set once a resource path was resolved
        if verb in _WRITE_VERBS and resp.status < 400 and not resp.prepared:
            try:
                # Acknowledged only once durable: with fsync, after the group commit covering it.
                await store.flush()
            except StoreWriteError as exc:
                resp = render_status(request, errors.storage_failure(str(exc)))
            else:
                await _send_committed(request, resp, lost=core.metrics.responses_lost, verb=verb)
        elapsed = loop.time() - started
        if verb is not None:
            observe(verb=verb, resource=request.get(RESOURCE, ""), code=resp.status, seconds=elapsed)
        else:
            # Labelled by route, never by raw path: unknown paths must not grow the series.
            route = request.match_info.route.resource
            observe(verb=request.method, resource=route.canonical if route is not None else "unmatched",
                    code=resp.status, seconds=elapsed)
            if not (request.path.startswith("/chaos") or "tail" in request.match_info or DENIED in request):
                return resp
            verb = _verb(request)
        component, instance = who if who is not None else identity(request)
        history.append("request", component=component, instance=instance, verb=verb, path=request.path,
                       key=request.match_info.get("tail", ""), rv=request.get(RESPONSE_RV), code=resp.status,
                       latency=round(elapsed, 6), user=user.name if user is not None else "",
                       attributes=attributes_record(request.get(WHAT), denied=DENIED in request))
        return resp

    # The body's Content-Encoding is undone by `serving.read_raw`, not by aiohttp's parser, which
    # would refuse a body that does not match it with a plain-text 400 (no Status) before any handler.
    app = web.Application(middlewares=[guard], client_max_size=MAX_BODY + 1024,
                          handler_args={"auto_decompress": False})
    app.add_routes(api.routes())

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def metrics_handler(request: web.Request) -> web.Response:
        core.metrics.watchers.set(len(hub.watchers))
        core.metrics.objects.set(store.revision)
        return web.Response(body=generate_latest(core.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def clock_handler(request: web.Request) -> web.Response:
        return render(request, core.clock.document())

    app.add_routes([
        web.get("/healthz", health), web.get("/livez", health), web.get("/readyz", health),
        web.get("/metrics", metrics_handler), web.get("/clock", clock_handler),
        *history_routes.routes(history), *core.components.routes(), web.get("/kubemesh/v1/apiservers", apiservers),
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
        await webhooks.close()
        await pod_streams.close()
        store.close()
        if etcd is not None:
            await etcd.close()

    # The chaos front door: faults enforced here (requests, watch streams, stale reads) and
    # forwarded to kubelets and components' admin endpoints (kubemesh.apiserver.chaos).
    if settings.chaos:
        chaos.install(app, core, rng=component_rng(settings.seed, component="apiserver", instance="chaos"),
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


def _resource_path(request: web.Request) -> bool:
    """Whether the serving layer authorizes this request itself (a path under /api/v1 or /apis/<g>/<v>)."""
    return "tail" in request.match_info and request.path.startswith(("/api/", "/apis/"))


_WRITE_VERBS: Final = frozenset({"create", "update", "patch", "delete", "deletecollection"})
_WRITE_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})


async def _committed(handler: Any, request: web.Request, *, etcd: EtcdCache, api: Api,
                     hub: WatchHub) -> web.StreamResponse:
    """`--storage etcd`: run a write handler with its store writes staged, commit them, answer from etcd's state.

    The handler runs against the watch cache as in memory mode, but its writes are staged
    (`etcdcache.STAGE`); they are committed to etcd, and the answer waits until the watch cache
    has applied them and is rendered again from the committed object (its resourceVersion is
    etcd's revision). When a commit loses its compare (another writer changed the key since the
    cache showed it), the request runs again once the cache has applied that change, at most
    `RETRIES` times (kube's GuaranteedUpdate): a stale resourceVersion sent by the client then
    fails in the registry with the usual 409.
    """
    lost: Retry | None = None
    fresh: dict[tuple[str, str], Obj | None] = {}
    for _ in range(RETRIES):
        stage: list[Staged] = []
        token, fresh_token = STAGE.set(stage), FRESH.set(fresh or None)
        try:
            resp: web.StreamResponse = await handler(request)
        except errors.StatusError as exc:
            # A conflict found against a lagging cache (chaos) may be the cache's staleness, not the
            # client's: GuaranteedUpdate then re-reads the object from etcd and tries again.
            target = request.get(TARGET)
            if exc.code != 409 or not etcd.lagging or target is None or target.name is None:
                raise
            ident = (target.kind.resource, f"{target.namespace}/{target.name}" if target.namespace else target.name)
            if ident in fresh:
                raise
            try:
                fresh[ident] = await etcd.read_one(kind=target.kind, namespace=target.namespace, name=target.name)
            except StorageError as failed:
                raise errors.storage_failure(str(failed)) from failed
            request.pop(WRITTEN, None)
            continue
        finally:
            STAGE.reset(token)
            FRESH.reset(fresh_token)
        if not stage:
            return resp
        try:
            skipped = await etcd.commit(stage)
        except Retry as exc:  # the first write lost its compare, nothing is committed: run again
            lost = exc
            if etcd.lagging:  # chaos: the cache may not have it for long; the key is read from etcd (FRESH)
                fresh[(exc.staged.kind.resource, exc.staged.key)] = \
                    decode_object(exc.current) if exc.current is not None else None
                request.pop(WRITTEN, None)
                continue
            try:
                await etcd.applied(exc.revision)
            except StorageError as failed:
                raise errors.storage_failure(str(failed)) from failed
            request.pop(WRITTEN, None)
            continue
        except StorageError as exc:
            raise errors.storage_failure(str(exc)) from exc
        for miss in skipped:
            # The request's first write is committed; a later one (a hook's: a CRD's status, an
            # APIService, an allocation) lost to another writer of its key. Not run again, which
            # would repeat the first: answered from what was committed (docs/design.md, limits).
            log.warning("a later write of a request lost a race and was not committed",
                        resource=miss.staged.kind.resource, key=miss.staged.key, changed_at=miss.revision)
        written = request.get(WRITTEN)
        if written is None:
            return resp
        # The staged write of the object answered: that very object, else the last write of its key.
        resource, key = written.kind.resource, key_of(written.obj)
        answered = next((s for s in stage if s.obj is written.obj or s.final is written.obj), None)
        if answered is None:
            answered = next((s for s in reversed(stage) if s.kind.resource == resource and s.key == key), None)
        if answered is not None and answered.revision:
            return api.render_written(request, written.kind, _committed_object(hub, answered),
                                      status=written.status, warnings=written.warnings)
        return resp
    assert lost is not None
    raise errors.conflict(lost.staged.kind, lost.staged.key.rpartition("/")[2])


def _committed_object(hub: WatchHub, s: Staged) -> Obj:
    """The object a committed write stored, as the watch cache has it (its event's, when still the newest)."""
    event = hub.event_at(s.kind, s.revision)
    if event is not None:
        return event.obj
    obj = s.obj if s.obj is not None else s.final
    assert obj is not None
    return {**obj, "metadata": {**obj["metadata"], "resourceVersion": str(s.revision)}}


async def _send_committed(request: web.Request, resp: web.StreamResponse, *, lost: Counter, verb: str) -> None:
    """Send the answer to a write the store has committed, here rather than in aiohttp.

    Past this point the write is durable and visible to watchers; if its answer cannot be
    written (a header the HTTP stack refuses, a connection gone), aiohttp would drop the
    connection silently. Here the loss is logged and counted
    (`apiserver_responses_lost_total`) and the connection is closed, so the client sees a
    failure and retries; its retry finds the object (a 409 on create, the stored object on
    a read). The response is left finished, so aiohttp does not write it a second time.
    """
    try:
        fault = request.get(LOSE_RESPONSE)
        if fault is not None:
            raise ConnectionResetError(f"chaos: fault {fault} lost the answer to a committed write")
        await resp.prepare(request)
        await resp.write_eof()
    except (asyncio.CancelledError, KeyboardInterrupt):
        raise
    except BaseException as exc:  # any failure here loses an answer: none may escape unlogged
        resource = request.get(RESOURCE, "")
        lost.labels(verb=verb, resource=resource).inc()
        log.warning("response lost after commit", verb=verb, resource=resource, path=request.path,
                    rv=request.get(RESPONSE_RV), status=resp.status, error=f"{type(exc).__name__}: {exc}")
        if request.transport is not None:
            request.transport.abort()
        with contextlib.suppress(Exception):
            await resp.write_eof()  # marks it finished (nothing reaches the aborted transport)


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
    cache: EtcdCache | None = None
    store: Store | None = None
    shared: SharedRegistry | None = None
    clock: ClusterClock | None = None
    signing_key: bytes | None = None
    if settings.storage == "etcd":
        # Everything at one revision into the cache, then the watch from the next one on
        # (kubemesh.apiserver.etcdcache).
        etcd = await EtcdStore.open(settings=EtcdSettings(endpoints=settings.etcd_endpoints,
                                                          prefix=settings.etcd_prefix))
        # Several apiservers may serve this etcd: they run one clock and sign with one key.
        clock = await shared_clock(etcd, rate=settings.clock_rate)
        signing_key = await shared_signing_key(etcd)
        revision, objects = await EtcdCache.load(etcd)
        store = CacheStore(backend=Preloaded(revision=revision, objects=objects))
        cache = EtcdCache(etcd=etcd, store=store, revision=revision,
                          compaction_interval=settings.etcd_compaction_interval, clock=clock)
        log.info("etcd storage", endpoints=",".join(settings.etcd_endpoints), revision=revision, objects=len(objects))
    core = assemble(settings, store=store, etcd=cache, clock=clock, signing_key=signing_key)
    if cache is not None:
        shared = SharedRegistry(etcd=cache.etcd, registry=core.components, apiserver=apiserver_identity(settings),
                                url=own_url(settings))
        await shared.announce()
        shared.start()
        core = dataclasses.replace(core, apiservers=shared.apiservers)
        cache.start(core.kinds)
        for step, run_step in core.start_steps:  # each step reads what the steps before committed
            run_step()
            await cache.drain()
            log.debug("start-up step committed", step=step)
    app = build_app(core)
    # The apiserver's own mirror pod: it registers with no one, so it tells its registry itself.
    run = this_run()
    try:
        core.components.registered_self(component="apiserver", instance=apiserver_identity(settings),
                                        boot=run.boot, last_exit_code=run.last_exit_code)
    except StoreWriteError as exc:  # a full disk: serve what is stored all the same
        log.error("a start-up write failed; serving what is stored", step="apiserver mirror pod", error=str(exc))
    if cache is not None:
        await cache.drain()
    runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    ssl_context = server_context(settings.tls_cert, settings.tls_key) \
        if settings.tls_cert and settings.tls_key else None
    site = web.TCPSite(runner, settings.host, settings.port, backlog=4096, reuse_address=True,
                       ssl_context=ssl_context)
    await site.start()
    # What start-up built lives for the whole process, and stored objects are acyclic trees
    # that reference counting frees: survivors are frozen out of the cyclic collector's walks,
    # which kept its pauses out of the watch latency tail (kubemesh.services.process.gctuning).
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
        if shared is not None:
            await shared.close()

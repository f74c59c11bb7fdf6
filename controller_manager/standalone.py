"""Process bootstrap: `run(ctx)` for `services.component.main`, and a fallback until it exists.

The fallback does what `services.component.main` is documented to do, reduced to what the
controller-manager needs: common flags, JSON logs, the API client, the cluster clock from
`GET /clock`, the seeded RNG, an admin endpoint (`/healthz`, `/readyz`, `/livez`,
`/debug/controller-manager`, bearer token when configured), registration in the apiserver's
component registry, and an orderly stop on SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web

from controller_manager import debugging
from controller_manager.app import ControllerManager
from controller_manager.settings import add_arguments, from_namespace, profile_bugs
from services.bugs import parse_bugs, split_names
from services.client import ApiClient, ApiError
from services.clock import ClusterClock, component_rng

COMPONENT = "controller_manager"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Common flags plus the controller-manager's."""
    p = argparse.ArgumentParser(prog="python -m controller_manager", description="kubemesh kube-controller-manager")
    p.add_argument("--apiserver", default=os.environ.get("KUBEMESH_APISERVER", "http://127.0.0.1:6443"))
    p.add_argument("--token-file", default=None)
    p.add_argument("--instance", default=None)
    p.add_argument("--admin-host", default="127.0.0.1")
    p.add_argument("--admin-port", type=int, default=0)
    p.add_argument("--bugs", default="")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--log-level", default="info")
    p.add_argument("--encoding", choices=("msgpack", "json"), default="msgpack")
    add_arguments(p)
    return p.parse_args(argv)


def build(*, client: ApiClient, clock: Any, rng: Any, bugs: frozenset[str], args: argparse.Namespace | None,
          instance: str) -> ControllerManager:
    """The controller-manager for parsed flags (the profile's switches join the explicit ones)."""
    settings = from_namespace(args) if args is not None else from_namespace(_defaults())
    all_bugs = frozenset(bugs) | profile_bugs(settings.profile)
    cm = ControllerManager(client=client, clock=clock, rng=rng, settings=settings, bugs=all_bugs, instance=instance)
    cm.build()
    return cm


def _defaults() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_arguments(p)
    return p.parse_args([])


async def run(ctx: Any) -> None:
    """`run(ctx)` for `services.component.main` (ctx: the documented ComponentContext)."""
    cm = build(client=ctx.client, clock=ctx.clock, rng=ctx.rng, bugs=frozenset(ctx.bugs),
               args=getattr(ctx, "args", None), instance=ctx.instance)
    admin = getattr(ctx, "admin", None)
    for attr in ("add_routes", "mount"):
        fn = getattr(admin, attr, None)
        if callable(fn):
            fn(debugging.routes(cm.debug))
            break
    else:
        router = getattr(getattr(admin, "app", None), "router", None)
        if router is not None:
            router.add_routes(debugging.routes(cm.debug))
    await cm.run(ctx.stop)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


async def main_async(args: argparse.Namespace) -> None:
    """Run the controller-manager process until SIGTERM/SIGINT."""
    level = getattr(logging, str(args.log_level).upper(), logging.INFO)
    instance = args.instance or f"controller-manager-{socket.gethostname()}-{os.getpid()}"
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level),
                        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"),
                                    structlog.processors.JSONRenderer()])
    log = structlog.get_logger(COMPONENT).bind(component=COMPONENT, instance=instance)
    token = args.token
    bugs = parse_bugs(component=COMPONENT, cli=split_names(args.bugs))
    client = ApiClient(args.apiserver, component=COMPONENT, instance=instance, token=token, encoding=args.encoding)
    clock = ClusterClock.from_document(await client.get_clock())
    rng = component_rng(args.seed, component=COMPONENT, instance=instance)
    cm = build(client=client, clock=clock, rng=rng, bugs=bugs, args=args, instance=instance)

    @web.middleware
    async def auth(request: web.Request,
                   handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if token and request.path not in ("/healthz", "/readyz", "/livez") and \
                request.headers.get("Authorization") != f"Bearer {token}":
            raise web.HTTPUnauthorized(text="bearer token required")
        return await handler(request)

    app = web.Application(middlewares=[auth])

    async def healthz(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_request: web.Request) -> web.Response:
        if not all(i.has_synced for i in cm.informers.values()):
            return web.Response(status=503, text="informers not synced")
        return web.Response(text="ok")

    app.add_routes([web.get("/healthz", healthz), web.get("/livez", healthz), web.get("/readyz", readyz)])
    app.add_routes(debugging.routes(cm.debug))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    port = args.admin_port or _free_port(args.admin_host)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, args.admin_host, port).start()
    admin_url = f"http://{args.admin_host}:{port}"
    with contextlib.suppress(ApiError):
        await client.request("PUT", f"/kubemesh/v1/components/{instance}",
                             body={"component": COMPONENT, "instance": instance, "adminURL": admin_url})
    log.info("controller-manager started", admin=admin_url, apiserver=args.apiserver,
             controllers=list(cm.settings.controllers), bugs=sorted(cm.bugs), profile=cm.settings.profile)
    try:
        await cm.run(stop)
    finally:
        await runner.cleanup()
        await client.close()
        log.info("controller-manager stopped")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the fallback bootstrap."""
    args = parse_args(argv)
    args.token = os.environ.get("KUBEMESH_TOKEN") or None
    if args.token_file:
        args.token = Path(args.token_file).read_text().strip() or None
    asyncio.run(main_async(args))
    return 0

"""A minimal process bootstrap for the kubelet, used until `services.component` exists.

It does what `services.component.main` is documented to do, reduced to what the kubelet
needs: common flags, JSON logs, the API client, the cluster clock from `GET /clock`, the
seeded RNG, an admin endpoint (`/healthz`, `/readyz`, `/livez` and the kubelet's routes,
behind the bearer token when one is configured), registration in the apiserver's component
registry, and an orderly stop on SIGTERM/SIGINT. `kubelet/__main__.py` prefers the shared
runtime whenever it is importable.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import socket
from collections.abc import Awaitable, Callable
from pathlib import Path

import structlog
from aiohttp import web

from kubelet.hosting import KubeletHost
from kubelet.running import add_arguments, run_host, settings_from_args
from services.bugs import parse_bugs, split_names
from services.client import ApiClient, ApiError
from services.clock import ClusterClock, component_rng


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Common flags plus the kubelet's."""
    p = argparse.ArgumentParser(prog="python -m kubelet", description="kubemesh kubelet (many nodes)")
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


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


async def main_async(args: argparse.Namespace) -> None:
    """Run the kubelet process until SIGTERM/SIGINT."""
    level = getattr(logging, str(args.log_level).upper(), logging.INFO)
    instance = args.instance or f"kubelet-{os.getpid()}"
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level),
                        processors=[structlog.processors.add_log_level, structlog.processors.TimeStamper(fmt="iso"),
                                    structlog.processors.JSONRenderer()])
    log = structlog.get_logger("kubelet").bind(component="kubelet", instance=instance)
    token = args.token
    bugs = parse_bugs(component="kubelet", cli=split_names(args.bugs))
    settings = settings_from_args(args, bugs=bugs)
    client = ApiClient(args.apiserver, component="kubelet", instance=instance, token=token, encoding=args.encoding)
    clock = ClusterClock.from_document(await client.get_clock())
    rng = component_rng(args.seed, component="kubelet", instance=instance)
    port = args.admin_port or _free_port(args.admin_host)
    host = KubeletHost(settings=settings, base_url=args.apiserver, instance=instance, clock=clock, rng=rng,
                       admin_port=port, token=token, encoding=args.encoding)
    host.build()

    @web.middleware
    async def auth(request: web.Request,
                   handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        if token and request.path not in ("/healthz", "/readyz", "/livez") and \
                request.headers.get("Authorization") != f"Bearer {token}":
            raise web.HTTPUnauthorized(text="bearer token required")
        return await handler(request)

    app = web.Application(middlewares=[auth])

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(request: web.Request) -> web.Response:
        ready = host.ready_count()
        if ready < len(host.nodes):
            return web.Response(status=503, text=f"{ready}/{len(host.nodes)} nodes registered")
        return web.Response(text="ok")

    app.add_routes([web.get("/healthz", healthz), web.get("/livez", healthz), web.get("/readyz", readyz)])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    def mount(routes: list[web.RouteDef]) -> None:
        app.add_routes(routes)

    # Routes must be added before the app starts (aiohttp freezes the router).
    from kubelet import admin as admin_routes

    mount(admin_routes.routes(host.nodes, clock=clock))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, args.admin_host, port)
    await site.start()
    admin_url = f"http://{args.admin_host}:{port}"
    try:
        await client.request("PUT", f"/kubemesh/v1/components/{instance}", content_type="application/json",
                             body={"component": "kubelet", "instance": instance, "adminURL": admin_url,
                                   "nodes": list(host.nodes)})
    except ApiError as exc:
        log.warning("could not register with the component registry", error=str(exc))
    log.info("kubelet started", nodes=len(host.nodes), admin=admin_url, apiserver=args.apiserver)
    try:
        await run_host(host, stop=stop)
    finally:
        await runner.cleanup()
        await client.close()
        log.info("kubelet stopped")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the fallback bootstrap."""
    args = parse_args(argv)
    args.token = os.environ.get("KUBEMESH_TOKEN") or None
    if args.token_file:
        args.token = Path(args.token_file).read_text().strip() or None
    asyncio.run(main_async(args))
    return 0

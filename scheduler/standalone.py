"""A minimal process bootstrap for the scheduler, used until `services.component` exists.

It does what `services.component.main` is documented to do, reduced to what the scheduler needs:
the common flags, JSON logs, the API client, the cluster clock from `GET /clock`, the seeded RNG,
an admin endpoint (`/healthz`, `/readyz`, `/livez`, `/debug/scheduler`; bearer token when one is
configured, health endpoints open), registration in the apiserver's component registry, and an
orderly stop on SIGTERM/SIGINT. `scheduler/__main__.py` prefers the shared runtime when present.
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
from types import SimpleNamespace

import structlog
from aiohttp import web

from scheduler import debugging
from scheduler.running import Holder, add_arguments, run
from services.bugs import parse_bugs, split_names
from services.client import ApiClient, ApiError
from services.clock import ClusterClock, component_rng


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Common flags plus the scheduler's."""
    p = argparse.ArgumentParser(prog="python -m scheduler", description="kubemesh kube-scheduler")
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
    """Run the scheduler process until SIGTERM/SIGINT."""
    level = getattr(logging, str(args.log_level).upper(), logging.INFO)
    instance = args.instance or f"scheduler-{os.getpid()}"
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(level),
                        processors=[structlog.processors.add_log_level,
                                    structlog.processors.TimeStamper(fmt="iso"),
                                    structlog.processors.JSONRenderer()])
    log = structlog.get_logger("scheduler").bind(component="scheduler", instance=instance)
    token = args.token
    bugs = parse_bugs(component="scheduler", cli=split_names(args.bugs))
    client = ApiClient(args.apiserver, component="scheduler", instance=instance, token=token,
                       encoding=args.encoding)
    clock = ClusterClock.from_document(await client.get_clock())
    rng = component_rng(args.seed, component="scheduler", instance=instance)
    port = args.admin_port or _free_port(args.admin_host)
    holder = Holder()

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

    app.add_routes([web.get("/healthz", healthz), web.get("/livez", healthz), web.get("/readyz", healthz)])
    # Routes must be added before the app starts (aiohttp freezes the router).
    app.add_routes(debugging.routes(holder.document))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, args.admin_host, port).start()
    admin_url = f"http://{args.admin_host}:{port}"
    with contextlib.suppress(ApiError):
        await client.request("PUT", f"/kubemesh/v1/components/{instance}",
                             body={"component": "scheduler", "instance": instance, "adminURL": admin_url})
    log.info("scheduler process started", admin=admin_url, apiserver=args.apiserver)
    ctx = SimpleNamespace(component="scheduler", instance=instance, client=client, clock=clock, rng=rng,
                          bugs=bugs, admin=None, log=log, stop=stop, args=args)
    try:
        await run(ctx, holder=holder)
    finally:
        await runner.cleanup()
        await client.close()
        log.info("scheduler stopped")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the fallback bootstrap."""
    args = parse_args(argv)
    args.token = os.environ.get("KUBEMESH_TOKEN") or None
    if args.token_file:
        args.token = Path(args.token_file).read_text().strip() or None
    asyncio.run(main_async(args))
    return 0

"""The kubelet component's entry points: its flags, its settings and its `run(ctx)`.

`add_arguments` adds the kubelet's own flags to the common ones; `settings_from_args` turns
them (and the bug switches) into `KubeletSettings`; `run` hosts the nodes inside the
component runtime (`ComponentContext`): it builds a `KubeletHost`, mounts the admin routes on
the admin endpoint, powers every node on and lives until the context's stop event (or
cancellation), then powers every node off and closes the clients.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from aiohttp import web

from kubelet import admin
from kubelet.hosting import KubeletHost
from kubelet.settings import KubeletSettings, parse_capacity
from services.clock import Clock


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The kubelet's own flags."""
    d = KubeletSettings()
    g = parser.add_argument_group("kubelet")
    g.add_argument("--nodes", type=int, default=d.nodes, help="how many nodes this process hosts")
    g.add_argument("--node-prefix", default=d.node_prefix, help="node names are <prefix>-<i>")
    g.add_argument("--node-offset", type=int, default=d.node_offset,
                   help="the first node is <prefix>-<offset+1> (several processes host disjoint ranges)")
    g.add_argument("--zone", default=d.zone, help="topology.kubernetes.io/zone of the nodes")
    g.add_argument("--region", default=d.region, help="topology.kubernetes.io/region of the nodes")
    g.add_argument("--capacity", type=parse_capacity, default=None, help="e.g. cpu=8,memory=32Gi,pods=110")
    g.add_argument("--node-status-update-frequency", type=float, default=d.node_status_update_frequency,
                   help="seconds between node status computations (and the heartbeat timeout)")
    g.add_argument("--node-status-report-frequency", type=float, default=None,
                   help="seconds after which an unchanged status is posted anyway (default: every update)")
    g.add_argument("--node-lease-duration-seconds", type=float, default=d.node_lease_duration)
    g.add_argument("--pod-start-delay", type=float, default=d.pod_start_delay,
                   help="cluster seconds a pod spends in ContainerCreating")
    g.add_argument("--container-stop-delay", type=float, default=d.container_stop_delay,
                   help="cluster seconds a container takes to exit after SIGTERM")
    g.add_argument("--pod-watch", choices=("per-node", "shared"), default=d.pod_watch,
                   help="each node watches its own pods, or one watch for the process")
    g.add_argument("--register-concurrency", type=int, default=d.register_concurrency)


def settings_from_args(args: argparse.Namespace, *, bugs: Iterable[str] = ()) -> KubeletSettings:
    """Flags (and bug switches) into settings."""
    d = KubeletSettings()
    return KubeletSettings(
        nodes=args.nodes, node_prefix=args.node_prefix, node_offset=args.node_offset, zone=args.zone,
        region=args.region, capacity=args.capacity or d.capacity,
        node_status_update_frequency=args.node_status_update_frequency,
        node_status_report_frequency=args.node_status_report_frequency,
        node_lease_duration=args.node_lease_duration_seconds, pod_start_delay=args.pod_start_delay,
        container_stop_delay=args.container_stop_delay, pod_watch=args.pod_watch,
        register_concurrency=args.register_concurrency, no_node_lease="no-node-lease" in set(bugs),
    )


class Context(Protocol):
    """What `run` needs of `services.component.ComponentContext`."""

    instance: str
    clock: Clock
    stop: asyncio.Event


def _admin_port(admin: Any) -> int:
    for attr in ("port", "admin_port"):
        value = getattr(admin, attr, None)
        if isinstance(value, int):
            return value
    url = getattr(admin, "url", None) or getattr(admin, "admin_url", None)
    if isinstance(url, str) and url.rsplit(":", 1)[-1].split("/")[0].isdigit():
        return int(url.rsplit(":", 1)[-1].split("/")[0])
    return 0


def _mount(admin_obj: Any, routes: list[web.RouteDef]) -> None:
    for target in (admin_obj, getattr(admin_obj, "app", None), getattr(admin_obj, "router", None)):
        add = getattr(target, "add_routes", None)
        if callable(add):
            add(routes)
            return
    raise RuntimeError("the admin endpoint does not accept routes")


async def run_host(host: KubeletHost, *, stop: asyncio.Event,
                   mount: Callable[[list[web.RouteDef]], None] | None = None) -> None:
    """Run `host` until `stop` is set or the task is cancelled; always stops the nodes."""
    if not host.nodes:
        host.build()
    if mount is not None:
        mount(admin.routes(host.nodes, clock=host.clock))
    try:
        await host.start()
        await stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await asyncio.shield(host.stop())


async def run(ctx: Any) -> None:
    """The kubelet's `run(ctx)` for `services.component.main`."""
    args = getattr(ctx, "args", None)
    settings = getattr(ctx, "settings", None)
    if not isinstance(settings, KubeletSettings):
        settings = settings_from_args(args, bugs=getattr(ctx, "bugs", ())) if args is not None \
            else KubeletSettings()
    client = ctx.client
    host = KubeletHost(settings=settings, base_url=client.base_url, instance=ctx.instance, clock=ctx.clock,
                       rng=ctx.rng, admin_port=_admin_port(ctx.admin), token=getattr(ctx, "token", None),
                       encoding=client.encoding)
    await run_host(host, stop=ctx.stop, mount=lambda routes: _mount(ctx.admin, routes))

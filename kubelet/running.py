"""The kubelet component's entry points: its flags, its settings and its `run(ctx)`.

`add_arguments` adds the kubelet's own flags to the common ones; `settings_from_args` turns
them (and the bug switches) into `KubeletSettings`; `run` hosts the nodes inside the
component runtime (`kubemesh.services.process.component.ComponentContext`): it builds a `KubeletHost`, mounts
the node routes on the admin endpoint, makes `/readyz` fail until every node has registered,
powers every node on and lives until the context's stop event (or cancellation), then powers
every node off and closes the clients.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable, Iterable

from kubemesh.kubelet import admin
from kubemesh.kubelet.hosting import KubeletHost
from kubemesh.kubelet.pressure import parse_duration
from kubemesh.kubelet.settings import KubeletSettings, parse_capacity
from kubemesh.services.process.component import ComponentContext


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
                   help="seconds after which an unchanged status is posted anyway (the profile's: 300 from 1.14 on, as "
                        "upstream with leases; every update before)")
    g.add_argument("--node-lease-duration-seconds", type=float, default=d.node_lease_duration)
    g.add_argument("--pod-start-delay", type=float, default=d.pod_start_delay,
                   help="cluster seconds a pod spends in ContainerCreating")
    g.add_argument("--container-stop-delay", type=float, default=d.container_stop_delay,
                   help="cluster seconds a container takes to exit after SIGTERM")
    g.add_argument("--default-run-seconds", type=float, default=d.default_run_seconds,
                   help="cluster seconds a run-to-completion pod's containers run before exiting 0 when the pod "
                        "has no kubemesh.io/run-seconds annotation (negative: until stopped)")
    g.add_argument("--eviction-hard", default=d.eviction_hard,
                   help="hard eviction thresholds, e.g. memory.available<100Mi,nodefs.available<10%%")
    g.add_argument("--eviction-soft", default=d.eviction_soft, help="soft eviction thresholds (same syntax)")
    g.add_argument("--eviction-soft-grace-period", default=d.eviction_soft_grace_period,
                   help="grace period of each soft threshold, e.g. memory.available=1m30s")
    g.add_argument("--eviction-pressure-transition-period", type=parse_duration,
                   default=d.eviction_pressure_transition_period,
                   help="how long a pressure condition stays True after its threshold was last met "
                        "(cluster time; 5m0s, 300s or 300)")
    g.add_argument("--low-diskspace-threshold-mb", type=int, default=d.low_diskspace_threshold_mb,
                   help="v1.7's OutOfDisk condition: True while free node disk is below this many MiB, new pods "
                        "refused meanwhile (0: not reported, as since v1.8)")
    g.add_argument("--max-pids", type=int, default=d.max_pids, help="the node's PID limit (pid.available)")
    g.add_argument("--pod-watch", choices=("per-node", "shared"), default=d.pod_watch,
                   help="each node watches its own pods, or one watch for the process")
    g.add_argument("--register-concurrency", type=int, default=d.register_concurrency)
    g.add_argument("--runtime", choices=("emulated", "process", "opt-in"), default=d.runtime,
                   help="emulated: containers run no process (default); process: every pod's containers run as "
                        "local processes unless annotated kubemesh.io/runtime=emulated; opt-in: only pods "
                        "annotated kubemesh.io/runtime=process")
    g.add_argument("--runtime-dir", default=None,
                   help="the process runtime's directory (pods' files, process group records)")
    g.add_argument("--image-command", action="append", default=[], metavar="IMAGE=COMMAND",
                   help="the process runtime runs COMMAND (split on spaces) for a container of IMAGE without command")


def settings_from_args(args: argparse.Namespace, *, bugs: Iterable[str] = ()) -> KubeletSettings:
    """Flags (and bug switches) into settings."""
    d = KubeletSettings()
    return KubeletSettings(
        nodes=args.nodes, node_prefix=args.node_prefix, node_offset=args.node_offset, zone=args.zone,
        region=args.region, capacity=args.capacity or d.capacity,
        node_status_update_frequency=args.node_status_update_frequency,
        node_status_report_frequency=args.node_status_report_frequency,
        node_lease_duration=args.node_lease_duration_seconds, pod_start_delay=args.pod_start_delay,
        container_stop_delay=args.container_stop_delay, default_run_seconds=args.default_run_seconds,
        pod_watch=args.pod_watch, runtime=args.runtime, runtime_dir=args.runtime_dir,
        image_commands={k: tuple(v.split()) for k, _, v in (x.partition("=") for x in args.image_command)},
        register_concurrency=args.register_concurrency, no_node_lease="no-node-lease" in set(bugs),
        pods_first_list_from_cache="pods-list-from-watch-cache" in set(bugs),
        eviction_hard=args.eviction_hard, eviction_soft=args.eviction_soft,
        eviction_soft_grace_period=args.eviction_soft_grace_period,
        eviction_pressure_transition_period=args.eviction_pressure_transition_period, max_pids=args.max_pids,
        low_diskspace_threshold_mb=args.low_diskspace_threshold_mb,
    )


def _registered_check(host: KubeletHost) -> Callable[[], bool]:
    """A readiness check: passes once every hosted node has registered."""

    def check() -> bool:
        ready, total = host.ready_count(), len(host.nodes)
        if ready < total:
            raise RuntimeError(f"{ready}/{total} nodes registered")
        return True

    return check


async def run(ctx: ComponentContext, args: argparse.Namespace) -> None:
    """The kubelet's `run(ctx, args)` for `kubemesh.services.process.component.main`.

    Builds the host, mounts the node routes and the `nodes-registered` readiness check on the
    admin endpoint, powers every node on, and on stop powers every node off and closes the
    nodes' clients (shielded, so that a cancellation during shutdown does not leak them).
    """
    settings = settings_from_args(args, bugs=ctx.bugs)
    host = KubeletHost(settings=settings, base_url=ctx.client.base_url, instance=ctx.instance, clock=ctx.clock,
                       rng=ctx.rng, admin_port=ctx.admin.port or 0, token=ctx.token, encoding=ctx.client.encoding)
    host.build()
    # Node faults are routed by what each kubelet registered: the nodes it hosts, with its admin URL.
    ctx.publish(nodes=sorted(host.nodes))
    ctx.admin.add_routes(admin.routes(host.nodes, clock=ctx.clock))
    ctx.admin.add_check("nodes-registered", _registered_check(host), endpoints=("readyz",))
    try:
        await host.start()
        ctx.log.info("kubelet started", nodes=len(host.nodes), pod_watch=settings.pod_watch)
        await ctx.stop.wait()
    finally:
        try:
            await asyncio.shield(host.stop())
        except Exception as exc:  # the nodes are going away regardless; do not fail the shutdown
            ctx.log.warning("error while stopping the nodes", error=repr(exc))

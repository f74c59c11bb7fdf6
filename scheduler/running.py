"""The scheduler component's entry points: its flags, its settings and its `run(ctx, args)`.

`run` builds the informers (nodes, pods, priority classes), wires their handlers into the
`Scheduler`, waits for the caches to sync and then schedules until the context's stop event is
set. `/readyz` fails until the informers have synced; `/debug/scheduler` shows the scheduler's
state. With `--leader-elect` the scheduling loop runs only while this instance holds the
`kube-system/kube-scheduler` Lease (informers and caches stay warm either way, as upstream);
losing the lease raises `kubemesh.services.machinery.electing.LeadershipLost`, which ends the process with exit
code 1, as kube-scheduler exits, so that its supervisor (or `kubemesh up`) restarts it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
from collections.abc import Mapping
from typing import Any

from kubemesh.scheduler import debugging
from kubemesh.scheduler.binding import ClientApi
from kubemesh.scheduler.scheduling import Scheduler
from kubemesh.scheduler.settings import SchedulerSettings
from kubemesh.services.machinery.electing import LeaderElectionSettings, LeaderElector, LeadershipLost, process_identity
from kubemesh.services.machinery.eventing import EventRecorder
from kubemesh.services.machinery.informing import Informer
from kubemesh.services.model.kinds import NODES, PODS, PRIORITYCLASSES
from kubemesh.services.process.component import ComponentContext
from kubemesh.services.process.supervising import TaskHandle

LEASE_NAME = "kube-scheduler"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The scheduler's own flags."""
    d = SchedulerSettings()
    g = parser.add_argument_group("scheduler")
    g.add_argument("--leader-elect", action="store_true", help="run the loop only while holding the lease")
    g.add_argument("--percentage-of-nodes-to-score", type=int, default=d.percentage_of_nodes_to_score,
                   help="share of nodes to find feasible before scoring (0 = adaptive)")
    g.add_argument("--scheduler-name", default=d.scheduler_name)
    g.add_argument("--pod-initial-backoff-seconds", type=float, default=d.pod_initial_backoff)
    g.add_argument("--pod-max-backoff-seconds", type=float, default=d.pod_max_backoff)
    g.add_argument("--assumed-pod-ttl", type=float, default=d.assumed_pod_ttl,
                   help="cluster seconds an unconfirmed binding stays assumed (0 = forever)")
    g.add_argument("--parallel-binds", type=int, default=d.parallel_binds)


def settings_from_args(args: argparse.Namespace) -> SchedulerSettings:
    """Flags into settings."""
    return SchedulerSettings(
        scheduler_name=args.scheduler_name,
        percentage_of_nodes_to_score=args.percentage_of_nodes_to_score,
        pod_initial_backoff=args.pod_initial_backoff_seconds,
        pod_max_backoff=args.pod_max_backoff_seconds,
        assumed_pod_ttl=args.assumed_pod_ttl,
        parallel_binds=args.parallel_binds,
    )


def _document(sched: Scheduler, events: EventRecorder) -> Mapping[str, Any]:
    doc = dict(sched.dump())
    doc["events"] = events.stats()
    return doc


async def run(ctx: ComponentContext, args: argparse.Namespace) -> None:
    """The scheduler's `run(ctx, args)` for `kubemesh.services.process.component.main` (see the module docstring)."""
    settings = settings_from_args(args)
    client, clock, rng = ctx.client, ctx.clock, ctx.rng
    events = EventRecorder(client, clock=clock, component=settings.scheduler_name, instance=ctx.instance)
    nodes = Informer(client, NODES, clock=clock, rng=rng, name="scheduler/nodes")
    pods = Informer(client, PODS, clock=clock, rng=rng, name="scheduler/pods")
    classes = Informer(client, PRIORITYCLASSES, clock=clock, rng=rng, name="scheduler/priorityclasses")
    ctx.informers.update({"nodes": nodes, "pods": pods, "priorityclasses": classes})  # chaos can freeze one
    informers = (classes, nodes, pods)

    def priority_of_class(name: str) -> int | None:
        # Admission resolves spec.priority; this covers pods created before their class.
        if name:
            pc = classes.get(name)
            return int(pc.get("value", 0)) if pc else None
        for pc in classes.list():
            if pc.get("globalDefault"):
                return int(pc.get("value", 0))
        return None

    sched = Scheduler(api=ClientApi(client, events=events), clock=clock, rng=rng, settings=settings,
                      bugs=ctx.bugs, node_lookup=nodes.get, priority_of_class=priority_of_class, log=ctx.log,
                      points=ctx.points)
    nodes.add_handlers(on_add=sched.on_node_add, on_update=sched.on_node_update, on_delete=sched.on_node_delete)
    pods.add_handlers(on_add=sched.on_pod_add, on_update=sched.on_pod_update, on_delete=sched.on_pod_delete)
    ctx.admin.add_routes(debugging.routes(lambda: _document(sched, events)))
    ctx.admin.add_check("informers-synced", lambda: all(i.has_synced for i in informers), endpoints=("readyz",))

    async def work() -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(sched.run(), name="scheduler loop")
            tg.create_task(sched.housekeeping(), name="scheduler housekeeping")

    async def lead() -> None:
        for inf in informers:
            await inf.wait_for_sync()
        ctx.log.info("scheduler started", bugs=sorted(ctx.bugs), nodes=len(nodes.list()),
                     leader_elect=args.leader_elect)
        if not args.leader_elect:
            await work()
            return
        elector = LeaderElector(client, settings=LeaderElectionSettings(name=LEASE_NAME),
                               identity=process_identity(ctx.instance),
                                clock=clock, rng=random.Random(rng.getrandbits(64)))
        try:
            await elector.run(work)
        except LeadershipLost:
            ctx.log.error("leader election lost; exiting so that the process is restarted")
            raise

    handles: list[TaskHandle[None]] = [ctx.spawn(inf.run(), name=f"informer:{inf.name}") for inf in informers]
    handles.append(ctx.spawn(events.run(), name="scheduler:events"))
    handles.append(ctx.spawn(lead(), name="scheduler:leader-election" if args.leader_elect else "scheduler:work"))
    try:
        await ctx.stop.wait()
    finally:
        sched.queue.close()
        for h in reversed(handles):  # the loop first, the informers last
            h.cancel()
        await asyncio.wait([h.task for h in handles])
        with contextlib.suppress(Exception):
            await sched.wait_idle()

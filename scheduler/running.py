"""The scheduler component's entry points: its flags, its settings and its `run(ctx)`.

`run` builds the informers (nodes, pods, priority classes), wires their handlers into the
`Scheduler`, waits for the caches to sync and then schedules until the context's stop event is
set. With `--leader-elect` the scheduling loop runs only while this instance holds the
`kube-system/kube-scheduler` Lease (informers and caches stay warm either way, as upstream).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
from collections.abc import Mapping
from typing import Any

from scheduler import debugging
from scheduler.binding import ClientApi
from scheduler.eventing import EventRecorder
from scheduler.scheduling import Scheduler
from scheduler.settings import SchedulerSettings
from services.informing import Informer
from services.kinds import NODES, PODS, PRIORITYCLASSES


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


def settings_from_args(args: argparse.Namespace | None) -> SchedulerSettings:
    """Flags into settings (defaults when there are no flags)."""
    if args is None:
        return SchedulerSettings()
    d = SchedulerSettings()
    return SchedulerSettings(
        scheduler_name=getattr(args, "scheduler_name", d.scheduler_name),
        percentage_of_nodes_to_score=getattr(args, "percentage_of_nodes_to_score", 0),
        pod_initial_backoff=getattr(args, "pod_initial_backoff_seconds", d.pod_initial_backoff),
        pod_max_backoff=getattr(args, "pod_max_backoff_seconds", d.pod_max_backoff),
        assumed_pod_ttl=getattr(args, "assumed_pod_ttl", d.assumed_pod_ttl),
        parallel_binds=getattr(args, "parallel_binds", d.parallel_binds),
    )


class Holder:
    """The running scheduler, once built (the debug route is mounted before it exists)."""

    def __init__(self) -> None:
        self.scheduler: Scheduler | None = None
        self.events: EventRecorder | None = None

    def document(self) -> Mapping[str, Any] | None:
        """The debug document, or None before the scheduler is built."""
        if self.scheduler is None:
            return None
        doc = dict(self.scheduler.dump())
        if self.events is not None:
            doc["events"] = self.events.stats()
        return doc


async def run(ctx: Any, *, holder: Holder | None = None) -> None:
    """The scheduler's `run(ctx)` for `services.component.main`."""
    holder = holder or Holder()
    settings = settings_from_args(getattr(ctx, "args", None))
    bugs = frozenset(getattr(ctx, "bugs", ()) or ())
    client, clock, rng = ctx.client, ctx.clock, ctx.rng
    log = getattr(ctx, "log", None)
    debugging.mount(getattr(ctx, "admin", None), debugging.routes(holder.document))

    events = EventRecorder(client, clock=clock, rng=rng, component=settings.scheduler_name,
                           host=str(getattr(ctx, "instance", "")))
    nodes = Informer(client, NODES, clock=clock, rng=rng, name="scheduler/nodes")
    pods = Informer(client, PODS, clock=clock, rng=rng, name="scheduler/pods")
    classes = Informer(client, PRIORITYCLASSES, clock=clock, rng=rng, name="scheduler/priorityclasses")

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
                      bugs=bugs, node_lookup=nodes.get, priority_of_class=priority_of_class, log=log)
    holder.scheduler, holder.events = sched, events
    nodes.add_handlers(on_add=sched.on_node_add, on_update=sched.on_node_update, on_delete=sched.on_node_delete)
    pods.add_handlers(on_add=sched.on_pod_add, on_update=sched.on_pod_update, on_delete=sched.on_pod_delete)

    async def work() -> None:
        async with asyncio.TaskGroup() as tg:
            tg.create_task(sched.run(), name="scheduler loop")
            tg.create_task(sched.housekeeping(), name="scheduler housekeeping")

    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(inf.run(), name=f"informer {inf.name}") for inf in (classes, nodes, pods)]
        tasks.append(tg.create_task(events.run(), name="scheduler events"))
        for inf in (classes, nodes, pods):
            await inf.wait_for_sync()
        if getattr(ctx, "args", None) is not None and getattr(ctx.args, "leader_elect", False) \
                and importlib.util.find_spec("services.electing") is not None:
            electing = importlib.import_module("services.electing")
            elector = electing.LeaderElector(
                client, settings=electing.LeaderElectionSettings(name="kube-scheduler"),
                identity=str(getattr(ctx, "instance", "scheduler")), clock=clock)
            tasks.append(tg.create_task(elector.run(work), name="scheduler election"))
        else:
            tasks.append(tg.create_task(work(), name="scheduler work"))
        if log is not None:
            log.info("scheduler started", bugs=sorted(bugs), nodes=len(nodes.list()))
        await ctx.stop.wait()
        sched.queue.close()
        for t in tasks:
            t.cancel()
    with contextlib.suppress(Exception):
        await sched.wait_idle()

"""The controller-manager component's entry points: `build` and `run(ctx, args)`.

`build` turns parsed flags into a wired `ControllerManager` (the component runtime has
applied the profile: its defaults are the flags', its switches are in `bugs`); `run` runs it
inside the component runtime (`kubemesh.services.process.component`): the shared informers
and the event recorder as supervised tasks, the controllers once the caches have synced
(while leading, with `--leader-elect`), `/debug/controller-manager` on the admin endpoint,
and a readiness check that fails until every informer has synced. On stop the controllers
are cancelled first and the informers last. Losing the lease ends the process
with exit code 1 (see `controller_manager.app`).
"""

from __future__ import annotations

import argparse
import asyncio
import random
from collections.abc import Coroutine
from typing import Any

from kubemesh.controller_manager import debugging
from kubemesh.controller_manager.app import ControllerManager
from kubemesh.controller_manager.catalogue import ALL_CONTROLLERS
from kubemesh.controller_manager.settings import add_arguments, from_namespace, parse_flags
from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.process.chaospoints import ChaosPoints
from kubemesh.services.process.component import ComponentContext
from kubemesh.services.process.supervising import TaskHandle

__all__ = ["add_arguments", "build", "run"]


def build(*, client: ApiClient, clock: Clock, rng: random.Random, bugs: frozenset[str],
          args: argparse.Namespace | None, instance: str, points: ChaosPoints | None = None,
          registry: dict[str, Any] | None = None) -> ControllerManager:
    """The controller-manager for parsed flags (defaults when `args` is None).

    `registry` receives its informers by name (the component's chaos-visible informers).
    """
    settings = from_namespace(args if args is not None else parse_flags(), known=ALL_CONTROLLERS)
    cm = ControllerManager(client=client, clock=clock, rng=rng, settings=settings, bugs=frozenset(bugs),
                           instance=instance,
                           points=points or ChaosPoints())
    cm.build(registry=registry)
    return cm


async def run(ctx: ComponentContext, args: argparse.Namespace) -> None:
    """The controller-manager's `run(ctx, args)` for `kubemesh.services.process.component.main`."""
    cm = build(client=ctx.client, clock=ctx.clock, rng=ctx.rng, bugs=ctx.bugs, args=args, instance=ctx.instance,
               points=ctx.points, registry=ctx.informers)  # chaos can freeze one (a stale cache)
    ctx.admin.add_routes(debugging.routes(cm.debug))
    ctx.admin.add_check("informers-synced", cm.synced, endpoints=("readyz",))
    # A --profile turns switches on too (ctx.bugs has them): publish every switch this process runs with.
    ctx.publish(bugs=sorted(cm.bugs))
    assert cm.recorder is not None and cm.informers is not None
    informer_tasks: list[TaskHandle[None]] = []

    def spawn_informer(coro: Coroutine[Any, Any, None], name: str) -> TaskHandle[None]:
        handle = ctx.spawn(coro, name=name)
        informer_tasks.append(handle)
        return handle

    cm.informers.start(spawn_informer)
    handles: list[TaskHandle[None]] = []
    handles.append(ctx.spawn(cm.recorder.run(), name="controller-manager:events"))
    handles.append(ctx.spawn(cm.lead(), name="controller-manager:leader-election" if cm.settings.leader_elect
                             else "controller-manager:controllers"))
    ctx.log.info("controller-manager started", controllers=[s.name for s in cm.specs], bugs=sorted(cm.bugs),
                 profile=cm.settings.profile, leader_elect=cm.settings.leader_elect)
    try:
        await ctx.stop.wait()
    finally:
        for h in reversed(handles):  # controllers first, informers last
            h.cancel()
        await asyncio.wait([h.task for h in handles])
        for h in informer_tasks:
            h.cancel()
        if informer_tasks:
            await asyncio.wait([h.task for h in informer_tasks])

"""The chaos front door: `/chaos/v1` on the apiserver, and the faults it enforces.

`install(app, core, rng=...)` wires chaos into an apiserver assembled by
`kubemesh.apiserver.core.assemble` and served by `kubemesh.apiserver.server.build_app`:

* the HTTP routes (`routes`);
* one request interceptor (`interception`: request faults, partitions, stale reads, 410 on
  new watches), appended to the core's interceptors;
* a tap on every new watcher (`watch`: hold, drop, delay, duplicate, reorder, close, 410);
* two store publishers, after the hub's and the history's: the stale-read samples and the
  write triggers (`triggers`), whose delivery side the watch taps feed;
* the webhook faults, which the admission webhook dispatcher asks before each call
  (`webhookfaults`);
* the RBAC faults (`rbac.revokeBinding`, `rbac.rejectTokens`), which the engine hands to the
  core's authorizer and authenticator whenever the set of active faults changes;
* a background task on the app that runs the cluster-clock timers (TTLs, trigger delays,
  event delays) and heals what is still in effect when the apiserver stops.

Fault types and their spec: `spec`; a fault's state: `faults`; effects forwarded to kubelets
and components' admin endpoints: `forward`; the fault lifecycle: `engine`.
"""

from __future__ import annotations

import random
from typing import Final

from aiohttp import web

from kubemesh.apiserver.chaos.engine import ChaosEngine
from kubemesh.apiserver.chaos.routes import ChaosRoutes
from kubemesh.apiserver.chaos.webhookfaults import WebhookFaults
from kubemesh.apiserver.core import ApiserverCore
from kubemesh.services.machinery.clock import Clock

CHAOS: Final = web.AppKey("chaos", ChaosEngine)
"""The engine of an app chaos was installed on (for tests and tools in the same process)."""


def install(app: web.Application, core: ApiserverCore, *, rng: random.Random, token: str | None = None,
            clock: Clock | None = None, forward_timeout: float = 5.0) -> ChaosEngine:
    """Wire the chaos front door into an apiserver app before it starts (see the module docstring).

    Args:
        app: The app `build_app(core)` made.
        core: The assembled apiserver the app serves.
        rng: The seeded RNG all chaos randomness derives from.
        token: The bearer token to send to kubelets' and components' admin endpoints.
        clock: The clock for durations and delays (default the core's; tests pass a `ManualClock`).
        forward_timeout: Wall seconds a forwarded call may take before its outcome is `info`.
    """
    engine = ChaosEngine(core, rng=rng, token=token, clock=clock, forward_timeout=forward_timeout)
    app[CHAOS] = engine
    core.interceptors.append(engine.requests)
    core.hub.on_watcher.append(engine.watch.attach)
    core.store.subscribe(engine.requests.sample_write)  # publisher 3: after the hub and the history
    core.store.subscribe(engine.triggers.on_write)  # publisher 4
    core.webhooks.faults = WebhookFaults(engine)  # webhook.latency, webhook.error, webhook.unreachable
    app.add_routes(ChaosRoutes(engine).routes())
    app.cleanup_ctx.append(engine.background)
    return engine


__all__ = ["CHAOS", "ChaosEngine", "install"]

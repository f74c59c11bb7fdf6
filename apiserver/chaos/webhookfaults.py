"""Webhook faults: make an admission webhook slow, failing or unreachable on demand.

`webhook.latency` (params `delay`, cluster seconds), `webhook.error` (params `code`, default 500)
and `webhook.unreachable` target a webhook configuration by name (`target.webhookConfiguration`,
`*` for every one) and optionally one of its webhooks (`target.webhook`), and may match the
request (`match.verbs`: create, update, patch, delete; `match.resources`, `match.namespace`,
`match.name`). The dispatcher (`kubemesh.apiserver.webhooks`) asks `WebhookFaults.for_call`
before each call; what the faults do then happens to the call as it would to a real one, and
the webhook's `failurePolicy` decides what the write gets: that is what a user comes to see
(pods that cannot be created, a Deployment that stalls, a controller that retries forever).
Each effect is a `fault` record (`inject`) in the history, beside the call's own `webhook`
record; a fault ends like any other (duration, DELETE, `kubemesh chaos reset`) and has nothing
to heal.
"""

from __future__ import annotations

from typing import Final, Protocol

from kubemesh.apiserver.chaos.faults import Fault
from kubemesh.apiserver.chaos.spec import TYPES, WEBHOOK_OPERATIONS
from kubemesh.apiserver.webhooks import Attributes, CallFault

WEBHOOK_TYPES: Final = tuple(t for t, c in TYPES.items() if c == "webhook")


class Engine(Protocol):
    """What webhook faults need from the engine (`kubemesh.apiserver.chaos.engine.ChaosEngine`)."""

    def faults_of(self, types: tuple[str, ...]) -> list[Fault]:
        """Active faults of these types."""
        ...

    def record(self, op: str, fault: Fault, outcome: str, **detail: object) -> None:
        """A `fault` history record."""
        ...


class WebhookFaults:
    """The active webhook faults, as the webhook dispatcher asks them (`webhooks.CallFaults`)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def for_call(self, *, configuration: str, webhook: str, attrs: Attributes) -> list[CallFault]:
        """The effects on one call, in fault creation order (latencies first: they add up before a failure)."""
        out: list[CallFault] = []
        for f in self.engine.faults_of(WEBHOOK_TYPES):
            if not _hits(f, configuration=configuration, webhook=webhook, attrs=attrs) or not f.fires():
                continue
            f.injected += 1
            effect = f.spec.type.removeprefix("webhook.")
            detail = {"webhookConfiguration": configuration, "webhook": webhook, "operation": attrs.operation,
                      "resource": attrs.kind.plural, "name": attrs.name}
            if effect == "latency":
                out.append(CallFault(effect="latency", delay=float(f.spec.params["delay"])))
                self.engine.record("inject", f, "ok", effect="latency", delay=f.spec.params["delay"], **detail)
            elif effect == "error":
                out.append(CallFault(effect="error", code=int(f.spec.params.get("code", 500))))
                self.engine.record("inject", f, "ok", effect="error", code=f.spec.params.get("code", 500), **detail)
            else:
                out.append(CallFault(effect="unreachable"))
                self.engine.record("inject", f, "ok", effect="unreachable", **detail)
        out.sort(key=lambda c: c.effect != "latency")
        return out


def _hits(f: Fault, *, configuration: str, webhook: str, attrs: Attributes) -> bool:
    t, m = f.spec.target, f.spec.match
    if t.webhook_configuration not in ("*", configuration) or t.webhook not in (None, webhook):
        return False
    if m.verbs and attrs.operation not in {WEBHOOK_OPERATIONS[v] for v in m.verbs}:
        return False
    return m.matches_target(plural=attrs.kind.plural, sub=attrs.subresource, namespace=attrs.namespace,
                            name=attrs.name)

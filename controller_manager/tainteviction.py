"""The taint-eviction controller: delete pods that do not tolerate their node's NoExecute taints.

For each pod bound to a node with NoExecute taints (upstream `processPodOnNode`):

* a taint the pod does not tolerate → delete now;
* every taint tolerated, some with `tolerationSeconds` → delete at `first seen + min(seconds)`
  (0 or negative seconds mean now); tolerations without seconds tolerate forever;
* no NoExecute taint left, or the pod gone or moved → cancel the scheduled deletion.

The timer starts when this controller first sees the taint on the pod's node, not at the
taint's `timeAdded`, and an existing timer is kept when the pod or node changes (upstream
keeps the earlier `CreatedAt`). The DefaultTolerationSeconds admission gives every pod 300 s
for `not-ready` and `unreachable`, hence the "pods deleted five minutes after the node went
Unknown" timeline. Deletion is graceful: on a powered-off node the pod stays Terminating.

`plan_pod` is the pure decision; `TaintEvictionController` keeps the timers (on the cluster
clock, through the workqueue's `add_after`) and does the writes: a DisruptionTarget condition
(DeletionByTaintManager), then DELETE, with a TaintManagerEviction event.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Literal

import structlog

from kubemesh.controller_manager.controllers import ControllerContext, ControllerSpec, InformerNeed, Started
from kubemesh.controller_manager.objects import (
    NO_EXECUTE,
    Api,
    IndexedStore,
    Store,
    index_by_node,
    is_terminating,
    node_name_of,
    now_str,
)
from kubemesh.services.machinery.client import NotFoundError
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.machinery.eventing import ComponentRecorder
from kubemesh.services.machinery.informing import final_state
from kubemesh.services.machinery.queueing import Result, run_workers
from kubemesh.services.model.kinds import NODES, PODS, Obj, key_of, name_of, namespace_of
from kubemesh.services.model.podutil import taints_of, toleration_matches, tolerations_of

_log = structlog.get_logger("controller_manager.tainteviction")

Key = tuple[str, str]
"""("node", name) or ("pod", namespace/name)."""


def no_execute_taints(node: Obj | None) -> list[dict[str, Any]]:
    """The node's NoExecute taints."""
    return [] if node is None else [t for t in taints_of(node) if t.get("effect") == NO_EXECUTE]


def matching_tolerations(taints: list[dict[str, Any]], tolerations: list[dict[str, Any]],
                         ) -> tuple[bool, list[dict[str, Any]]]:
    """(all taints tolerated, the tolerations used), upstream `GetMatchingTolerations`."""
    used: list[dict[str, Any]] = []
    for taint in taints:
        match = next((t for t in tolerations if toleration_matches(t, taint)), None)
        if match is None:
            return False, []
        used.append(match)
    return True, used


def min_toleration_seconds(used: list[dict[str, Any]]) -> float | None:
    """The shortest tolerationSeconds among `used`: 0 when none used, None for 'forever'."""
    if not used:
        return 0.0
    best: float | None = None
    for t in used:
        secs = t.get("tolerationSeconds")
        if secs is None:
            continue
        if secs <= 0:
            return 0.0
        if best is None or secs < best:
            best = float(secs)
    return best


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do about one pod."""

    action: Literal["cancel", "delete", "schedule", "keep"]
    at: float = 0.0


def plan_pod(pod: Obj | None, node: Obj | None, *, now: float, scheduled_at: float | None,
             scheduled_created: float | None) -> Decision:
    """Decide about one pod given its node and the timer already running for it (if any)."""
    if pod is None or not node_name_of(pod) or is_terminating(pod):
        return Decision("cancel")
    taints = no_execute_taints(node)
    if not taints:
        return Decision("cancel")
    ok, used = matching_tolerations(taints, tolerations_of(pod))
    if not ok:
        return Decision("delete", now)
    secs = min_toleration_seconds(used)
    if secs is None:
        return Decision("cancel")
    if scheduled_at is not None and scheduled_created is not None:
        return Decision("keep", scheduled_at)
    fire = now + secs
    return Decision("delete", now) if fire <= now else Decision("schedule", fire)


class TaintEvictionController:
    """Timers per pod, fed by node and pod events; reconcile(key) is level-based."""

    def __init__(self, *, api: Api, nodes: Store, pods: IndexedStore, clock: Clock,
                 recorder: ComponentRecorder) -> None:
        self.api = api
        self.nodes = nodes
        self.pods = pods
        self.clock = clock
        self.recorder = recorder
        self.timers: dict[str, tuple[float, float]] = {}
        """pod key → (created, fire at)."""
        self.deleted: list[str] = []
        self.requeue: Any = None
        """Set by the wiring: callable(key, delay) adding a key after a delay."""

    async def reconcile(self, key: Key) -> Result | None:
        """Process a node (all its pods) or one pod."""
        kind, name = key
        if kind == "node":
            delays = [await self.process_pod(key_of(p)) for p in self.pods.by_index("node", name)]
            due = [d for d in delays if d is not None]
            return Result(requeue_after=min(due)) if due else None
        delay = await self.process_pod(name)
        return Result(requeue_after=delay) if delay is not None else None

    async def process_pod(self, pod_key: str) -> float | None:
        """Decide and act for one pod; the delay until its timer fires, if one is pending."""
        pod = self.pods.get(pod_key)
        node = self.nodes.get(node_name_of(pod)) if pod is not None else None
        now = self.clock.now()
        created, fire = self.timers.get(pod_key, (None, None))
        d = plan_pod(pod, node, now=now, scheduled_at=fire, scheduled_created=created)
        if d.action == "cancel":
            if self.timers.pop(pod_key, None) is not None and pod is not None and not is_terminating(pod):
                self.recorder.normal(pod, "TaintManagerEviction", f"Cancelling deletion of Pod {pod_key}")
            return None
        if d.action == "schedule":
            self.timers[pod_key] = (now, d.at)
            return d.at - now
        if d.action == "keep" and d.at > now:
            return d.at - now
        assert pod is not None
        self.timers.pop(pod_key, None)
        await self._delete(pod)
        return None

    async def _delete(self, pod: Obj) -> None:
        key = key_of(pod)
        self.recorder.normal(pod, "TaintManagerEviction", f"Marking for deletion Pod {key}")
        body = copy.deepcopy(pod)
        conds = body.setdefault("status", {}).setdefault("conditions", [])
        if not any(c.get("type") == "DisruptionTarget" for c in conds):
            conds.append({"type": "DisruptionTarget", "status": "True", "reason": "DeletionByTaintManager",
                          "message": "Taint manager: deleting due to NoExecute taint",
                          "lastTransitionTime": now_str(self.clock.now())})
            try:
                await self.api.update(PODS, body, subresource="status")
            except NotFoundError:
                return
            except Exception as exc:  # the condition is informative; deletion matters
                _log.debug("could not add DisruptionTarget condition", pod=key, error=repr(exc))
        try:
            await self.api.delete(PODS, name_of(pod), namespace=namespace_of(pod))
        except NotFoundError:
            return
        self.deleted.append(key)

    def snapshot(self) -> dict[str, Any]:
        """Pending deletions, for the debug endpoint."""
        return {"pending": {k: {"since": c, "fireAt": f} for k, (c, f) in sorted(self.timers.items())},
                "deleted": len(self.deleted)}


def _taints_changed(old: Obj, new: Obj) -> bool:
    return bool((old.get("spec") or {}).get("taints") != (new.get("spec") or {}).get("taints"))


def _start(ctx: ControllerContext) -> Started:
    c = TaintEvictionController(api=ctx.api, nodes=ctx.informer(_NODES), pods=ctx.informer(_PODS), clock=ctx.clock,
                                recorder=ctx.recorder.for_component("taint-eviction-controller"))
    q = ctx.queue("taint-eviction")
    ctx.on(NODES, on_add=lambda o, _i: q.add(("node", key_of(o))),
           on_update=lambda old, new: q.add(("node", key_of(new))) if _taints_changed(old, new) else None)
    ctx.on(PODS, on_add=lambda o, _i: q.add(("pod", key_of(o))),
           on_update=lambda _old, new: q.add(("pod", key_of(new))),
           on_delete=lambda o: q.add(("pod", key_of(final_state(o)))))
    return Started(run=run_workers(q, c.reconcile, workers=8, name="taint-eviction"), controller=c,
                   snapshot=c.snapshot)


_NODES = InformerNeed(kind=NODES)
_PODS = InformerNeed(kind=PODS, indexers={"node": index_by_node})
CONTROLLER = ControllerSpec(name="taint-eviction", informers=(_NODES, _PODS), start=_start,
                            debug_key="taintEviction")

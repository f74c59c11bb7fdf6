"""The ReplicaSet controller: keep `spec.replicas` active pods, with expectations and adoption.

The same code runs the ReplicationController controller (`v1` ReplicationController), as
upstream runs one for the other through a conversion layer: a `Replicated` entry says which kind
a controller instance owns, how it reads that kind's selector (a ReplicaSet has a
`metav1.LabelSelector`, a ReplicationController a plain equality map), and what its events and
chaos point are called. Everything else, expectations, adoption, ranking and status, is shared.

`reconcile(key)` is level-based:

1. **Claim** (upstream `ClaimPods`): pods in the namespace that match the selector and have no
   controller are adopted (ownerReference patch) unless the ReplicaSet is being deleted; pods
   it controls that no longer match are released.
2. **Manage** only when the expectations are satisfied (our previous writes are in the
   cache): with fewer active pods than wanted it creates the difference (at most
   `burst_replicas`, in slow-start batches 1, 2, 4, ...); with more it deletes the surplus in
   upstream's rank order (unscheduled, then Pending, not ready, ready for a shorter time, more
   restarts, newer first). **Active** means not Failed/Succeeded and not being deleted:
   a Terminating pod on a dead node is not a replica, so a replacement is created (§2.3).
3. **Status**: replicas, fullyLabeledReplicas, readyReplicas, availableReplicas
   (ready for minReadySeconds), observedGeneration; written only when changed.

Events: SuccessfulCreate, SuccessfulDelete, FailedCreate. Pod names are the ReplicaSet name
plus a 5-character suffix from the seeded RNG (deterministic runs).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import structlog

from kubemesh.controller_manager.controllers import ControllerContext, ControllerSpec, InformerNeed, Started
from kubemesh.controller_manager.expectations import Expectations
from kubemesh.controller_manager.objects import (
    Api,
    IndexedStore,
    Store,
    condition,
    controller_ref,
    creation_time,
    index_by_namespace,
    is_active,
    is_available,
    is_ready,
    node_name_of,
    owner_refs,
    phase,
    ts,
)
from kubemesh.services.machinery.client import AlreadyExistsError, ConflictError, NotFoundError
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.machinery.eventing import ComponentRecorder
from kubemesh.services.machinery.informing import final_state
from kubemesh.services.machinery.queueing import Result, run_workers
from kubemesh.services.model.kinds import (
    PODS,
    REPLICASETS,
    REPLICATIONCONTROLLERS,
    Kind,
    Obj,
    key_of,
    labels_of,
    meta,
    name_of,
    namespace_of,
    uid_of,
)
from kubemesh.services.model.selectors import LabelSelector, label_selector_from_dict
from kubemesh.services.process.chaospoints import ChaosPoints

_log = structlog.get_logger("controller_manager.replicaset")

SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def random_suffix(rng: random.Random, n: int = 5) -> str:
    """A name suffix as Kubernetes generates them (no vowels, no confusable digits)."""
    return "".join(rng.choice(SUFFIX_ALPHABET) for _ in range(n))


def selector_of(obj: Obj) -> LabelSelector:
    """The workload's metav1.LabelSelector (an absent selector selects nothing)."""
    return label_selector_from_dict((obj.get("spec") or {}).get("selector"))


def equality_selector_of(obj: Obj) -> LabelSelector:
    """A ReplicationController's selector: a map of labels that must all be equal (empty selects nothing).

    The apiserver defaults an absent selector to the template's labels, so an RC stored without
    one is an RC whose template has no labels, and it selects nothing, as upstream.
    """
    labels = (obj.get("spec") or {}).get("selector")
    if not isinstance(labels, dict) or not labels:
        return label_selector_from_dict(None)
    return label_selector_from_dict({"matchLabels": {str(k): str(v) for k, v in labels.items()}})


@dataclass(frozen=True, slots=True, kw_only=True)
class Replicated:
    """The kind one replica controller instance owns, and what differs between the two kinds."""

    kind: Kind
    selector: Callable[[Obj], LabelSelector]
    component: str
    """The event source's component (upstream's names)."""
    after_create_point: str
    """The chaos point hit after each pod create, before the create is observed."""


REPLICASET: Final = Replicated(kind=REPLICASETS, selector=selector_of, component="replicaset-controller",
                               after_create_point="replicaset.after_create_pod")
REPLICATIONCONTROLLER: Final = Replicated(kind=REPLICATIONCONTROLLERS, selector=equality_selector_of,
                                          component="replication-controller",
                                          after_create_point="replicationcontroller.after_create_pod")


def claim(owner: Obj, selector: LabelSelector, candidates: list[Obj]) -> tuple[list[Obj], list[Obj], list[Obj]]:
    """(owned, to adopt, to release) among `candidates`, as upstream's ControllerRefManager."""
    owned: list[Obj] = []
    adopt: list[Obj] = []
    release: list[Obj] = []
    uid = uid_of(owner)
    deleting = bool(meta(owner).get("deletionTimestamp"))
    for pod in candidates:
        ref = controller_ref(pod)
        matches = selector.matches(labels_of(pod))
        if ref is not None:
            if ref.get("uid") != uid:
                continue
            if matches:
                owned.append(pod)
            elif not deleting and not meta(pod).get("deletionTimestamp"):
                release.append(pod)
            continue
        if matches and not deleting and not meta(pod).get("deletionTimestamp"):
            adopt.append(pod)
    return owned, adopt, release


_PHASE_RANK = {"Pending": 0, "Unknown": 1, "Running": 2}


def deletion_rank(pod: Obj) -> tuple[Any, ...]:
    """Sort key: pods first in this order are deleted first (upstream ActivePods ranking)."""
    ready_cond = condition(pod, "Ready")
    ready = is_ready(pod)
    ready_since = ts(ready_cond.get("lastTransitionTime")) if ready and ready_cond else None
    restarts = sum(int(cs.get("restartCount") or 0)
                   for cs in (pod.get("status") or {}).get("containerStatuses") or [])
    return (1 if node_name_of(pod) else 0, _PHASE_RANK.get(phase(pod), 0), 1 if ready else 0,
            -(ready_since or 0.0), -restarts, -creation_time(pod))


def pods_to_delete(pods: list[Obj], n: int) -> list[Obj]:
    """The `n` pods to delete first."""
    return sorted(pods, key=deletion_rank)[:n] if n > 0 else []


def compute_status(rs: Obj, active: list[Obj], *, now: float) -> dict[str, Any]:
    """The ReplicaSet status for its active pods (upstream `calculateStatus`)."""
    spec = rs.get("spec") or {}
    template_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels") or {}
    min_ready = float(spec.get("minReadySeconds") or 0)
    status = copy.deepcopy(rs.get("status") or {})
    status["replicas"] = len(active)
    status["fullyLabeledReplicas"] = sum(
        1 for p in active if all(labels_of(p).get(k) == v for k, v in template_labels.items()))
    status["readyReplicas"] = sum(1 for p in active if is_ready(p))
    status["availableReplicas"] = sum(1 for p in active if is_available(p, min_ready_seconds=min_ready, now=now))
    status["observedGeneration"] = meta(rs).get("generation", 1)
    return status


def pod_from_template(owner: Obj, *, api_version: str, kind: str, name: str) -> Obj:
    """A pod for `owner`'s template, controlled by it."""
    tmpl = copy.deepcopy((owner.get("spec") or {}).get("template") or {})
    tmeta = tmpl.get("metadata") or {}
    md: dict[str, Any] = {"name": name, "namespace": namespace_of(owner), "labels": dict(tmeta.get("labels") or {}),
                          "ownerReferences": [{"apiVersion": api_version, "kind": kind, "name": name_of(owner),
                                               "uid": uid_of(owner), "controller": True,
                                               "blockOwnerDeletion": True}]}
    if tmeta.get("annotations"):
        md["annotations"] = dict(tmeta["annotations"])
    if tmeta.get("finalizers"):
        md["finalizers"] = list(tmeta["finalizers"])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": tmpl.get("spec") or {}}


def slow_start_sizes(total: int, initial: int = 1) -> list[int]:
    """Batch sizes 1, 2, 4, ... summing to `total` (upstream `slowStartBatch`)."""
    out: list[int] = []
    size = initial
    remaining = total
    while remaining > 0:
        b = min(size, remaining)
        out.append(b)
        remaining -= b
        size *= 2
    return out


class ReplicaSetController:
    """Level-based reconciler of ReplicaSets (or ReplicationControllers) over the shared caches.

    `replicasets` is the cache of the owning kind (`owns.kind`); the name stays that of the
    common case.
    """

    def __init__(self, *, api: Api, replicasets: Store, pods: IndexedStore, clock: Clock, rng: random.Random,
                 recorder: ComponentRecorder, burst_replicas: int = 500, expectations_ttl: float = 300.0,
                 points: ChaosPoints | None = None, owns: Replicated = REPLICASET) -> None:
        self.api = api
        self.owns = owns
        self.points = points or ChaosPoints()
        self.points.declare(owns.after_create_point)
        self.replicasets = replicasets
        self.pods = pods
        self.clock = clock
        self.rng = rng
        self.recorder = recorder
        self.burst = burst_replicas
        self.expectations = Expectations(clock=clock, ttl=expectations_ttl)
        self.enqueue: Callable[[str], None] = lambda key: None

    # -- event handlers (wired to the shared informers) ---------------------------------------

    def _owner_key(self, pod: Obj) -> str | None:
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") != self.owns.kind.kind:
            return None
        key = f"{namespace_of(pod)}/{ref.get('name')}"
        rs = self.replicasets.get(key)
        if rs is None or uid_of(rs) != ref.get("uid"):
            return None
        return key

    def _matching(self, pod: Obj) -> list[str]:
        return [key_of(rs) for rs in self.replicasets.list()
                if namespace_of(rs) == namespace_of(pod) and self.owns.selector(rs).matches(labels_of(pod))]

    def on_pod_add(self, pod: Obj, _initial: bool = False) -> None:
        """A pod appeared: lower the owner's creation expectation (or find an adopter)."""
        if meta(pod).get("deletionTimestamp"):
            self.on_pod_delete(pod)
            return
        key = self._owner_key(pod)
        if key is not None:
            self.expectations.creation_observed(key)
            self.enqueue(key)
        elif controller_ref(pod) is None:
            for k in self._matching(pod):
                self.enqueue(k)

    def on_pod_update(self, old: Obj, new: Obj) -> None:
        """A pod changed: a new deletionTimestamp counts as the deletion we expected."""
        if meta(new).get("deletionTimestamp") and not meta(old).get("deletionTimestamp"):
            self.on_pod_delete(new)
            return
        old_key, new_key = self._owner_key(old), self._owner_key(new)
        for k in {old_key, new_key}:
            if k is not None:
                self.enqueue(k)
        if new_key is None and controller_ref(new) is None:
            for k in self._matching(new):
                self.enqueue(k)

    def on_pod_delete(self, pod: Obj) -> None:
        """A pod is gone (or going): lower the owner's deletion expectation."""
        key = self._owner_key(pod)
        if key is not None:
            self.expectations.deletion_observed(key, key_of(pod))
            self.enqueue(key)

    # -- reconcile ----------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        """Sync one ReplicaSet."""
        rs = self.replicasets.get(key)
        if rs is None:
            self.expectations.delete(key)
            return None
        need_sync = self.expectations.satisfied(key) and not meta(rs).get("deletionTimestamp")
        selector = self.owns.selector(rs)
        candidates = [p for p in self.pods.by_index("namespace", namespace_of(rs))]
        owned, adopt, release = claim(rs, selector, candidates)
        for pod in adopt:
            if await self._adopt(rs, pod):
                owned.append(pod)
        for pod in release:
            await self._release(rs, pod)
        active = [p for p in owned if is_active(p)]
        if need_sync:
            await self.manage_replicas(rs, active)
        status = compute_status(rs, active, now=self.clock.now())
        if status != (rs.get("status") or {}):
            await self._write_status(rs, status)
        spec = rs.get("spec") or {}
        min_ready = float(spec.get("minReadySeconds") or 0)
        if (min_ready > 0 and status["readyReplicas"] == int(spec.get("replicas", 1))
                and status["availableReplicas"] != status["readyReplicas"]):
            return Result(requeue_after=min_ready)
        return None

    async def manage_replicas(self, rs: Obj, active: list[Obj]) -> None:
        """Create or delete pods so that `len(active) == spec.replicas`."""
        key = key_of(rs)
        want = int((rs.get("spec") or {}).get("replicas", 1))
        diff = len(active) - want
        if diff < 0:
            n = min(-diff, self.burst)
            self.expectations.expect_creations(key, n)
            created = 0
            for size in slow_start_sizes(n):
                results = await asyncio.gather(*(self._create_pod(rs) for _ in range(size)),
                                               return_exceptions=True)
                ok = sum(1 for r in results if r is True)
                created += ok
                failed = size - ok
                for _ in range(failed):
                    self.expectations.creation_observed(key)
                if failed:
                    # Skipped batches will never be observed: lower the expectation for them too.
                    for _ in range(n - created - failed):
                        self.expectations.creation_observed(key)
                    break
        elif diff > 0:
            victims = pods_to_delete(active, min(diff, self.burst))
            self.expectations.expect_deletions(key, [key_of(p) for p in victims])
            results = await asyncio.gather(*(self._delete_pod(rs, p) for p in victims), return_exceptions=True)
            for p, r in zip(victims, results, strict=True):
                if r is not True:
                    self.expectations.deletion_observed(key, key_of(p))

    async def _create_pod(self, rs: Obj) -> bool:
        for _ in range(3):
            name = f"{name_of(rs)}-{random_suffix(self.rng)}"
            pod = pod_from_template(rs, api_version=self.owns.kind.api_version, kind=self.owns.kind.kind, name=name)
            try:
                await self.api.create(PODS, pod, namespace=namespace_of(rs))
            except AlreadyExistsError:
                continue
            except Exception as exc:
                self.recorder.warning(rs, "FailedCreate", f"Error creating: {exc}")
                raise
            self.recorder.normal(rs, "SuccessfulCreate", f"Created pod: {name}")
            # After a create, before the expectation is observed: a crash here is the window
            # in which a restarted controller may create duplicates (kubernetes#129795).
            await self.points.hit(self.owns.after_create_point)
            return True
        return False

    async def _delete_pod(self, rs: Obj, pod: Obj) -> bool:
        try:
            await self.api.delete(PODS, name_of(pod), namespace=namespace_of(pod),
                                  preconditions={"uid": uid_of(pod)})
        except NotFoundError:
            return False
        except Exception as exc:
            self.recorder.warning(rs, "FailedDelete", f"Error deleting: {exc}")
            raise
        self.recorder.normal(rs, "SuccessfulDelete", f"Deleted pod: {name_of(pod)}")
        return True

    async def _adopt(self, rs: Obj, pod: Obj) -> bool:
        refs = [*owner_refs(pod), {"apiVersion": self.owns.kind.api_version, "kind": self.owns.kind.kind,
                                   "name": name_of(rs),
                                   "uid": uid_of(rs), "controller": True, "blockOwnerDeletion": True}]
        try:
            patch = {"metadata": {"ownerReferences": refs, "resourceVersion": meta(pod).get("resourceVersion")}}
            await self.api.patch(PODS, name_of(pod), patch, namespace=namespace_of(pod))
        except (NotFoundError, ConflictError):
            return False
        return True

    async def _release(self, rs: Obj, pod: Obj) -> None:
        refs = [r for r in owner_refs(pod) if r.get("uid") != uid_of(rs)]
        with contextlib.suppress(NotFoundError, ConflictError):
            await self.api.patch(PODS, name_of(pod), {"metadata": {"ownerReferences": refs or None}},
                                 namespace=namespace_of(pod))

    async def _write_status(self, rs: Obj, status: dict[str, Any]) -> None:
        body = copy.deepcopy(rs)
        body["status"] = status
        try:
            await self.api.update(self.owns.kind, body, subresource="status")
        except ConflictError:
            fresh = await self.api.get(self.owns.kind, name_of(rs), namespace=namespace_of(rs))
            fresh["status"] = {**status, "observedGeneration": status["observedGeneration"]}
            await self.api.update(self.owns.kind, fresh, subresource="status")
        except NotFoundError:
            pass


def _starter(owns: Replicated, need: InformerNeed) -> Callable[[ControllerContext], Started]:
    def start(ctx: ControllerContext) -> Started:
        w = ctx.settings.workloads
        c = ReplicaSetController(api=ctx.api, replicasets=ctx.informer(need), pods=ctx.informer(_PODS),
                                 clock=ctx.clock, rng=ctx.rng, recorder=ctx.recorder.for_component(owns.component),
                                 burst_replicas=w.burst_replicas, expectations_ttl=w.expectations_ttl,
                                 points=ctx.points, owns=owns)
        q = ctx.queue(owns.kind.singular)
        c.enqueue = q.add
        ctx.on(owns.kind, on_add=lambda o, _i: q.add(key_of(o)), on_update=lambda _old, new: q.add(key_of(new)),
               on_delete=lambda o: q.add(key_of(final_state(o))))
        ctx.on(PODS, on_add=c.on_pod_add, on_update=c.on_pod_update,
               on_delete=lambda o: c.on_pod_delete(final_state(o)))
        return Started(run=run_workers(q, c.reconcile, workers=w.replicaset_workers, name=owns.kind.singular),
                       controller=c)

    return start


_REPLICASETS = InformerNeed(kind=REPLICASETS, indexers={"namespace": index_by_namespace})
_REPLICATIONCONTROLLERS = InformerNeed(kind=REPLICATIONCONTROLLERS, indexers={"namespace": index_by_namespace})
_PODS = InformerNeed(kind=PODS, indexers={"namespace": index_by_namespace})
CONTROLLER = ControllerSpec(name="replicaset", informers=(_REPLICASETS, _PODS),
                            start=_starter(REPLICASET, _REPLICASETS))
RC_CONTROLLER = ControllerSpec(name="replicationcontroller", informers=(_REPLICATIONCONTROLLERS, _PODS),
                               start=_starter(REPLICATIONCONTROLLER, _REPLICATIONCONTROLLERS))
"""The ReplicationController controller: this module's code over `v1` ReplicationControllers."""

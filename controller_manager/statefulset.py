"""The StatefulSet controller: stable pod identities, ordered scaling, revisioned rolling updates.

`reconcile(key)` follows upstream's `defaultStatefulSetControl.UpdateStatefulSet`:

* **Identity.** The pod of ordinal *i* is `<set>-<i>` for *i* in `[start, start + replicas)`
  (`spec.ordinals.start`, 0 by default), with hostname `<set>-<i>`, subdomain
  `spec.serviceName`, and the labels `statefulset.kubernetes.io/pod-name`,
  `apps.kubernetes.io/pod-index` and `controller-revision-hash` (its revision's name). Pods
  matching the selector and named like members are adopted; members that stop matching are
  released. Names are the only guard against duplicates: a create that finds the pod
  already there waits for the cache.
* **Storage.** Each `volumeClaimTemplates` entry becomes the PVC `<template>-<set>-<i>`
  (labels: the template's plus the selector's), created before its pod and mounted under the
  template's name. No provisioner binds them: they stay Pending and the pod runs anyway.
  `persistentVolumeClaimRetentionPolicy`: `whenDeleted: Delete` makes the set an owner of
  every claim (the garbage collector deletes them with the set); `whenScaled: Delete` makes
  a scaled-down pod the owner of its claims before the pod is deleted; `Retain` removes the
  corresponding references.
* **Revisions.** The template is stored as a ControllerRevision `<set>-<hash>` (labels: the
  template's plus `controller.kubernetes.io/hash`; data: the template as a replace patch;
  `revision`: increasing). An unchanged template reuses the latest revision; a template equal
  to an older revision (a rollback) gets that revision renumbered; a name taken by different
  data bumps `status.collisionCount`. Revisions no pod and neither status revision uses are
  deleted oldest first beyond `revisionHistoryLimit`.
* **OrderedReady** (the default): missing pods are created in ordinal order, each only once
  every lower one is Running and Ready (and available for `minReadySeconds`); Failed or
  Succeeded pods are deleted to be recreated; surplus pods are deleted one at a time from the
  highest ordinal, each once the one before is gone. **Parallel** creates and deletes all
  at once.
* **Updates.** `RollingUpdate` deletes, from the highest ordinal down to `partition`, one pod
  not at the update revision at a time, each once the previous ones are healthy again; the
  replacement is created from the update revision (ordinals below the partition are
  recreated from the current one). `OnDelete` only uses the update revision for pods the
  user deleted.
* **Status** (as `kubectl rollout status statefulset/x` reads it): replicas, readyReplicas,
  availableReplicas, currentReplicas, updatedReplicas, currentRevision, updateRevision,
  observedGeneration, collisionCount; once a rolling update has every wanted pod updated and
  ready, the update revision becomes the current one.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import structlog

from kubemesh.controller_manager.controllers import ControllerContext, ControllerSpec, InformerNeed, Started
from kubemesh.controller_manager.deployment import compute_hash
from kubemesh.controller_manager.objects import (
    Api,
    IndexedStore,
    Store,
    controller_ref,
    index_by_namespace,
    is_available,
    is_ready,
    is_terminating,
    owner_refs,
    phase,
)
from kubemesh.controller_manager.replicaset import claim, selector_of, slow_start_sizes
from kubemesh.services.machinery.client import AlreadyExistsError, ConflictError, NotFoundError
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.machinery.eventing import ComponentRecorder
from kubemesh.services.machinery.informing import final_state
from kubemesh.services.machinery.queueing import Result, run_workers
from kubemesh.services.model.kinds import (
    CONTROLLERREVISIONS,
    PERSISTENTVOLUMECLAIMS,
    PODS,
    STATEFULSETS,
    Obj,
    key_of,
    labels_of,
    meta,
    name_of,
    namespace_of,
    uid_of,
)

_log = structlog.get_logger("controller_manager.statefulset")

POD_NAME_LABEL: Final = "statefulset.kubernetes.io/pod-name"
POD_INDEX_LABEL: Final = "apps.kubernetes.io/pod-index"
REVISION_LABEL: Final = "controller-revision-hash"
HASH_LABEL: Final = "controller.kubernetes.io/hash"
_MEMBER: Final = re.compile(r"^(.*)-([0-9]+)$")


# -- identity ---------------------------------------------------------------------------------


def sts_spec(sts: Obj) -> dict[str, Any]:
    """The set's spec (never None)."""
    return sts.get("spec") or {}


def replicas_of(sts: Obj) -> int:
    """spec.replicas (1 when absent)."""
    r = sts_spec(sts).get("replicas")
    return 1 if r is None else int(r)


def start_ordinal(sts: Obj) -> int:
    """spec.ordinals.start (0 when absent)."""
    return int((sts_spec(sts).get("ordinals") or {}).get("start") or 0)


def ordinal_of(sts_name: str, pod_name: str) -> int | None:
    """The ordinal of a pod named `<sts_name>-<n>`, None for a pod that is no member."""
    m = _MEMBER.match(pod_name)
    if m is None or m.group(1) != sts_name:
        return None
    return int(m.group(2))


def pod_name(sts: Obj, ordinal: int) -> str:
    """`<set>-<ordinal>`."""
    return f"{name_of(sts)}-{ordinal}"


def claim_name(template_name: str, sts: Obj, ordinal: int) -> str:
    """`<template>-<set>-<ordinal>`."""
    return f"{template_name}-{name_of(sts)}-{ordinal}"


def revision_of(pod: Obj) -> str:
    """The pod's `controller-revision-hash` label."""
    return str(labels_of(pod).get(REVISION_LABEL) or "")


def is_running_and_ready(pod: Obj) -> bool:
    """Phase Running and the Ready condition True."""
    return phase(pod) == "Running" and is_ready(pod)


def is_healthy(pod: Obj, *, min_ready: float, now: float) -> bool:
    """Running, ready (for minReadySeconds) and not being deleted."""
    return (is_running_and_ready(pod) and not is_terminating(pod)
            and is_available(pod, min_ready_seconds=min_ready, now=now))


def update_strategy(sts: Obj) -> tuple[str, int]:
    """(`RollingUpdate` or `OnDelete`, partition)."""
    us = sts_spec(sts).get("updateStrategy") or {}
    kind = str(us.get("type") or "RollingUpdate")
    partition = int((us.get("rollingUpdate") or {}).get("partition") or 0)
    return kind, partition


def retention(sts: Obj) -> tuple[str, str]:
    """(whenDeleted, whenScaled), Retain by default."""
    p = sts_spec(sts).get("persistentVolumeClaimRetentionPolicy") or {}
    return str(p.get("whenDeleted") or "Retain"), str(p.get("whenScaled") or "Retain")


# -- revisions --------------------------------------------------------------------------------


def revision_data(sts: Obj) -> Obj:
    """What a ControllerRevision stores: the template as a replace patch."""
    template = copy.deepcopy(sts_spec(sts).get("template") or {})
    template["$patch"] = "replace"
    return {"spec": {"template": template}}


def template_of_revision(revision: Obj) -> Obj:
    """The pod template a ControllerRevision stores."""
    template = copy.deepcopy(((revision.get("data") or {}).get("spec") or {}).get("template") or {})
    template.pop("$patch", None)
    return template


def revision_number(revision: Obj) -> int:
    """The revision's `revision`."""
    return int(revision.get("revision") or 0)


def new_revision(sts: Obj, number: int, collision_count: int) -> Obj:
    """A ControllerRevision for the set's current template (not yet stored)."""
    data = revision_data(sts)
    digest = compute_hash(data, collision_count)
    labels = dict(((sts_spec(sts).get("template") or {}).get("metadata") or {}).get("labels") or {})
    labels[HASH_LABEL] = digest
    md: dict[str, Any] = {"name": f"{name_of(sts)}-{digest}", "namespace": namespace_of(sts), "labels": labels,
                          "ownerReferences": [_owner(sts)]}
    if meta(sts).get("annotations"):
        md["annotations"] = dict(meta(sts)["annotations"])
    return {"apiVersion": "apps/v1", "kind": "ControllerRevision", "metadata": md, "data": data, "revision": number}


def _owner(sts: Obj) -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name_of(sts), "uid": uid_of(sts),
            "controller": True, "blockOwnerDeletion": True}


# -- pods and claims --------------------------------------------------------------------------


def new_pod(sts: Obj, template: Obj, ordinal: int, revision: str) -> Obj:
    """The pod of `ordinal` from `template` (a revision's), with its identity and storage."""
    tmpl = copy.deepcopy(template)
    tmeta = tmpl.get("metadata") or {}
    name = pod_name(sts, ordinal)
    labels = dict(tmeta.get("labels") or {})
    labels.update({POD_NAME_LABEL: name, POD_INDEX_LABEL: str(ordinal), REVISION_LABEL: revision})
    md: dict[str, Any] = {"name": name, "namespace": namespace_of(sts), "labels": labels,
                          "ownerReferences": [_owner(sts)]}
    if tmeta.get("annotations"):
        md["annotations"] = dict(tmeta["annotations"])
    if tmeta.get("finalizers"):
        md["finalizers"] = list(tmeta["finalizers"])
    spec = tmpl.get("spec") or {}
    spec["hostname"] = name
    service = sts_spec(sts).get("serviceName")
    if service:
        spec["subdomain"] = service
    templates = sts_spec(sts).get("volumeClaimTemplates") or []
    if templates:
        claimed = {str((t.get("metadata") or {}).get("name")) for t in templates}
        volumes = [v for v in spec.get("volumes") or [] if v.get("name") not in claimed]
        for t in templates:
            tname = str((t.get("metadata") or {}).get("name"))
            volumes.append({"name": tname, "persistentVolumeClaim": {"claimName": claim_name(tname, sts, ordinal)}})
        spec["volumes"] = volumes
    return {"apiVersion": "v1", "kind": "Pod", "metadata": md, "spec": spec}


def new_claims(sts: Obj, ordinal: int) -> list[Obj]:
    """The PVCs of `ordinal`, from `volumeClaimTemplates`."""
    out = []
    match = dict((sts_spec(sts).get("selector") or {}).get("matchLabels") or {})
    for t in sts_spec(sts).get("volumeClaimTemplates") or []:
        tmeta = t.get("metadata") or {}
        labels = {**(tmeta.get("labels") or {}), **match}
        md: dict[str, Any] = {"name": claim_name(str(tmeta.get("name")), sts, ordinal),
                              "namespace": namespace_of(sts), "labels": labels}
        if tmeta.get("annotations"):
            md["annotations"] = dict(tmeta["annotations"])
        out.append({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": md,
                    "spec": copy.deepcopy(t.get("spec") or {})})
    return out


def claim_owner_refs(claim_obj: Obj, sts: Obj, pod: Obj | None, *, scaled_down: bool) -> list[dict[str, Any]]:
    """The claim's owner references under the set's retention policy (other owners kept)."""
    when_deleted, when_scaled = retention(sts)
    refs = [r for r in owner_refs(claim_obj)
            if r.get("uid") != uid_of(sts) and (pod is None or r.get("uid") != uid_of(pod))]
    set_ref = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": name_of(sts), "uid": uid_of(sts)}
    if when_deleted == "Delete" and not (when_scaled == "Delete" and scaled_down):
        refs.append(set_ref)
    if when_scaled == "Delete" and scaled_down and pod is not None and uid_of(pod):
        refs.append({"apiVersion": "v1", "kind": "Pod", "name": name_of(pod), "uid": uid_of(pod)})
    return refs


def _same_refs(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> bool:
    return sorted(str(r.get("uid")) for r in a) == sorted(str(r.get("uid")) for r in b)


# -- the controller ---------------------------------------------------------------------------


@dataclass(slots=True)
class _Status:
    replicas: int = 0
    ready: int = 0
    available: int = 0
    current: int = 0
    updated: int = 0


class StatefulSetController:
    """Level-based StatefulSet reconciler over the pod, revision and claim caches."""

    def __init__(self, *, api: Api, statefulsets: Store, pods: IndexedStore, revisions: IndexedStore,
                 claims: IndexedStore, clock: Clock, recorder: ComponentRecorder) -> None:
        self.api = api
        self.statefulsets = statefulsets
        self.pods = pods
        self.revisions = revisions
        self.claims = claims
        self.clock = clock
        self.recorder = recorder
        self.enqueue: Callable[[str], None] = lambda key: None

    # -- event handlers -----------------------------------------------------------------------

    def _owner_key(self, obj: Obj) -> str | None:
        ref = controller_ref(obj)
        if ref is None or ref.get("kind") != "StatefulSet":
            return None
        key = f"{namespace_of(obj)}/{ref.get('name')}"
        sts = self.statefulsets.get(key)
        return key if sts is not None and uid_of(sts) == ref.get("uid") else None

    def on_owned(self, obj: Obj) -> None:
        """A pod or revision changed: sync its set, or the sets that may adopt it."""
        key = self._owner_key(obj)
        if key is not None:
            self.enqueue(key)
            return
        if controller_ref(obj) is None:
            for sts in self.statefulsets.list():
                if namespace_of(sts) == namespace_of(obj) and selector_of(sts).matches(labels_of(obj)):
                    self.enqueue(key_of(sts))

    def on_owned_update(self, old: Obj, new: Obj) -> None:
        """Sync the new owner (or the sets that may adopt it), and the old owner if it changed."""
        if meta(old).get("resourceVersion") == meta(new).get("resourceVersion"):
            return
        old_key = self._owner_key(old)
        if old_key is not None and controller_ref(old) != controller_ref(new):
            self.enqueue(old_key)
        self.on_owned(new)

    # -- reconcile ----------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        """Sync one StatefulSet."""
        sts = self.statefulsets.get(key)
        if sts is None:
            return None
        pods = await self._claim_pods(sts)
        revisions = await self._claim_revisions(sts)
        revisions.sort(key=lambda r: (revision_number(r), name_of(r)))
        current, update, collisions = await self._revisions(sts, revisions)
        now = self.clock.now()
        st, requeue = await self._update(sts, pods, current, update, now)
        await self._write_status(sts, st, current=name_of(current), update=name_of(update), collisions=collisions)
        await self._truncate_history(sts, pods, revisions, current, update)
        return Result(requeue_after=requeue) if requeue is not None else None

    async def _claim_pods(self, sts: Obj) -> list[Obj]:
        members = [p for p in self.pods.by_index("namespace", namespace_of(sts))
                   if ordinal_of(name_of(sts), name_of(p)) is not None]
        owned, adopt, release = claim(sts, selector_of(sts), members)
        for pod in adopt:
            refs = [*owner_refs(pod), _owner(sts)]
            with contextlib.suppress(NotFoundError, ConflictError):
                owned.append(await self.api.patch(PODS, name_of(pod), {"metadata": {
                    "ownerReferences": refs, "resourceVersion": meta(pod).get("resourceVersion")}},
                    namespace=namespace_of(pod)))
        for pod in release:
            refs = [r for r in owner_refs(pod) if r.get("uid") != uid_of(sts)]
            with contextlib.suppress(NotFoundError, ConflictError):
                await self.api.patch(PODS, name_of(pod), {"metadata": {"ownerReferences": refs or None}},
                                     namespace=namespace_of(pod))
        return owned

    async def _claim_revisions(self, sts: Obj) -> list[Obj]:
        owned: list[Obj] = []
        selector = selector_of(sts)
        for rev in self.revisions.by_index("namespace", namespace_of(sts)):
            ref = controller_ref(rev)
            if ref is not None:
                if ref.get("uid") == uid_of(sts):
                    owned.append(rev)
                continue
            if selector.matches(labels_of(rev)) and not is_terminating(sts):
                with contextlib.suppress(NotFoundError, ConflictError):
                    owned.append(await self.api.patch(CONTROLLERREVISIONS, name_of(rev), {"metadata": {
                        "ownerReferences": [*owner_refs(rev), _owner(sts)],
                        "resourceVersion": meta(rev).get("resourceVersion")}}, namespace=namespace_of(rev)))
        return owned

    async def _revisions(self, sts: Obj, revisions: list[Obj]) -> tuple[Obj, Obj, int]:
        """(current revision, update revision, collision count); may create or renumber one."""
        collisions = int((sts.get("status") or {}).get("collisionCount") or 0)
        latest = revision_number(revisions[-1]) if revisions else 0
        wanted = new_revision(sts, latest + 1, collisions)
        equal = [r for r in revisions if r.get("data") == wanted["data"]]
        if equal and equal[-1] is revisions[-1]:
            update = revisions[-1]
        elif equal:
            # A rollback: the old revision becomes the newest again.
            body = copy.deepcopy(equal[-1])
            body["revision"] = latest + 1
            update = await self.api.update(CONTROLLERREVISIONS, body)
        else:
            update, collisions = await self._create_revision(sts, latest + 1, collisions)
        current = next((r for r in revisions if name_of(r) == (sts.get("status") or {}).get("currentRevision")),
                       update)
        return current, update, collisions

    async def _create_revision(self, sts: Obj, number: int, collisions: int) -> tuple[Obj, int]:
        """Store a revision of the current template; (it, the collision count it took)."""
        while True:
            body = new_revision(sts, number, collisions)
            try:
                created = await self.api.create(CONTROLLERREVISIONS, body, namespace=namespace_of(sts))
            except AlreadyExistsError:
                existing = await self.api.get(CONTROLLERREVISIONS, name_of(body), namespace=namespace_of(sts))
                ref = controller_ref(existing)
                if existing.get("data") == body["data"] and ref is not None and ref.get("uid") == uid_of(sts):
                    return existing, collisions
                collisions += 1  # the name is taken by other data: hash again
                continue
            return created, collisions

    async def _update(self, sts: Obj, pods: list[Obj], current: Obj, update: Obj,
                      now: float) -> tuple[_Status, float | None]:
        """Create, delete and roll pods; the status counters and an optional requeue delay."""
        spec = sts_spec(sts)
        min_ready = float(spec.get("minReadySeconds") or 0)
        cur_name, upd_name = name_of(current), name_of(update)
        st = _Status()
        for p in pods:
            st.replicas += 1
            if is_running_and_ready(p):
                st.ready += 1
                if is_available(p, min_ready_seconds=min_ready, now=now):
                    st.available += 1
            if not is_terminating(p):
                st.current += revision_of(p) == cur_name
                st.updated += revision_of(p) == upd_name
        requeue = min_ready if min_ready > 0 and st.ready > st.available else None
        if is_terminating(sts):
            return st, requeue
        start, count = start_ordinal(sts), replicas_of(sts)
        replicas: dict[int, Obj] = {}
        condemned: list[tuple[int, Obj]] = []
        for p in pods:
            ord_ = ordinal_of(name_of(sts), name_of(p))
            if ord_ is None:
                continue
            if start <= ord_ < start + count:
                replicas[ord_] = p
            else:
                condemned.append((ord_, p))
        condemned.sort(key=lambda x: -x[0])
        kind, partition = update_strategy(sts)
        current_tmpl, update_tmpl = template_of_revision(current), template_of_revision(update)

        def fresh_pod(ord_: int) -> Obj:
            if kind == "RollingUpdate" and ord_ < start + partition:
                return new_pod(sts, current_tmpl, ord_, cur_name)
            return new_pod(sts, update_tmpl, ord_, upd_name)

        monotonic = spec.get("podManagementPolicy", "OrderedReady") != "Parallel"
        members = {**replicas, **dict(condemned)}
        first_unhealthy = min((o for o, p in members.items() if not is_healthy(p, min_ready=min_ready, now=now)),
                              default=None)
        # Replicas, in ordinal order.
        to_create: list[int] = []
        for ord_ in range(start, start + count):
            pod = replicas.get(ord_)
            if pod is not None and phase(pod) in ("Failed", "Succeeded"):
                if not is_terminating(pod):
                    reason = "RecreatingFailedPod" if phase(pod) == "Failed" else "RecreatingTerminatedPod"
                    self.recorder.warning(sts, reason, f"StatefulSet {key_of(sts)} is recreating "
                                                       f"{phase(pod).lower()} Pod {name_of(pod)}")
                    await self._delete_pod(sts, pod)
                    st.replicas -= 1
                    st.current -= revision_of(pod) == cur_name
                    st.updated -= revision_of(pod) == upd_name
                if monotonic:
                    return st, requeue
                continue
            if pod is None:
                if monotonic:
                    created = await self._create_pod(sts, fresh_pod(ord_), ord_)
                    if created:
                        st.replicas += 1
                        st.current += revision_of(created) == cur_name
                        st.updated += revision_of(created) == upd_name
                    return st, requeue
                to_create.append(ord_)
                continue
            await self._fix_identity(sts, pod, ord_)
            await self._fix_claims(sts, pod, ord_, scaled_down=False)
            if monotonic and is_terminating(pod):
                return st, requeue
            if monotonic and not is_running_and_ready(pod):
                return st, requeue
            if monotonic and not is_available(pod, min_ready_seconds=min_ready, now=now):
                return st, min_ready
        for size_batch in _batches(to_create):
            results = await asyncio.gather(*(self._create_pod(sts, fresh_pod(o), o) for o in size_batch),
                                           return_exceptions=True)
            for r in results:
                if isinstance(r, dict):
                    st.replicas += 1
                    st.current += revision_of(r) == cur_name
                    st.updated += revision_of(r) == upd_name
            if any(isinstance(r, BaseException) for r in results):
                raise next(r for r in results if isinstance(r, BaseException))
        # Surplus pods, highest ordinal first.
        for ord_, pod in condemned:
            if is_terminating(pod):
                if monotonic:
                    return st, requeue
                continue
            if monotonic and ord_ != first_unhealthy and not is_healthy(pod, min_ready=min_ready, now=now):
                return st, requeue
            await self._fix_claims(sts, pod, ord_, scaled_down=True)
            await self._delete_pod(sts, pod)
            st.current -= revision_of(pod) == cur_name
            st.updated -= revision_of(pod) == upd_name
            if monotonic:
                return st, requeue
        if kind != "RollingUpdate":
            return st, requeue
        # Rolling update: one pod at a time, from the highest ordinal down to the partition.
        for ord_ in range(start + count - 1, start + min(partition, count) - 1, -1):
            pod = replicas.get(ord_)
            if pod is None:
                return st, requeue
            if revision_of(pod) != upd_name and not is_terminating(pod):
                _log.info("pod is terminating for update", statefulset=key_of(sts), pod=name_of(pod))
                await self._delete_pod(sts, pod)
                st.current -= revision_of(pod) == cur_name
                return st, requeue
            if not is_healthy(pod, min_ready=min_ready, now=now):
                return st, requeue
        return st, requeue

    async def _create_pod(self, sts: Obj, pod: Obj, ordinal: int) -> Obj | None:
        """Create the pod's claims, then the pod; the pod, or None when it exists already."""
        for c in new_claims(sts, ordinal):
            if self.claims.get(f"{namespace_of(sts)}/{name_of(c)}") is not None:
                continue
            c["metadata"]["ownerReferences"] = claim_owner_refs(c, sts, None, scaled_down=False) or None
            if c["metadata"]["ownerReferences"] is None:
                del c["metadata"]["ownerReferences"]
            try:
                await self.api.create(PERSISTENTVOLUMECLAIMS, c, namespace=namespace_of(sts))
            except AlreadyExistsError:
                pass
            except Exception as exc:
                self.recorder.warning(sts, "FailedCreate", f"create Claim {name_of(c)} for Pod {name_of(pod)} in "
                                                           f"StatefulSet {name_of(sts)} failed error: {exc}")
                raise
            else:
                self.recorder.normal(sts, "SuccessfulCreate", f"create Claim {name_of(c)} Pod {name_of(pod)} in "
                                                              f"StatefulSet {name_of(sts)} success")
        try:
            created = await self.api.create(PODS, pod, namespace=namespace_of(sts))
        except AlreadyExistsError:
            return None  # the cache has not shown it yet (or it is still going away)
        except Exception as exc:
            self.recorder.warning(sts, "FailedCreate", f"create Pod {name_of(pod)} in StatefulSet {name_of(sts)} "
                                                       f"failed error: {exc}")
            raise
        self.recorder.normal(sts, "SuccessfulCreate", f"create Pod {name_of(pod)} in StatefulSet {name_of(sts)} "
                                                      f"successful")
        return created

    async def _delete_pod(self, sts: Obj, pod: Obj) -> None:
        try:
            await self.api.delete(PODS, name_of(pod), namespace=namespace_of(pod), preconditions={"uid": uid_of(pod)})
        except (NotFoundError, ConflictError):
            return
        except Exception as exc:
            self.recorder.warning(sts, "FailedDelete", f"delete Pod {name_of(pod)} in StatefulSet {name_of(sts)} "
                                                       f"failed error: {exc}")
            raise
        self.recorder.normal(sts, "SuccessfulDelete", f"delete Pod {name_of(pod)} in StatefulSet {name_of(sts)} "
                                                      f"successful")

    async def _fix_identity(self, sts: Obj, pod: Obj, ordinal: int) -> None:
        """Restore the identity labels of a member that lost them."""
        want = {POD_NAME_LABEL: name_of(pod), POD_INDEX_LABEL: str(ordinal)}
        labels = labels_of(pod)
        if all(labels.get(k) == v for k, v in want.items()):
            return
        with contextlib.suppress(NotFoundError, ConflictError):
            await self.api.patch(PODS, name_of(pod), {"metadata": {
                "labels": want, "resourceVersion": meta(pod).get("resourceVersion")}}, namespace=namespace_of(pod))

    async def _fix_claims(self, sts: Obj, pod: Obj, ordinal: int, *, scaled_down: bool) -> None:
        """Bring the owner references of the pod's claims in line with the retention policy."""
        for c in new_claims(sts, ordinal):
            existing = self.claims.get(f"{namespace_of(sts)}/{name_of(c)}")
            if existing is None or is_terminating(existing):
                continue
            refs = claim_owner_refs(existing, sts, pod, scaled_down=scaled_down)
            if _same_refs(refs, owner_refs(existing)):
                continue
            with contextlib.suppress(NotFoundError, ConflictError):
                await self.api.patch(PERSISTENTVOLUMECLAIMS, name_of(existing), {"metadata": {
                    "ownerReferences": refs or None, "resourceVersion": meta(existing).get("resourceVersion")}},
                    namespace=namespace_of(existing))

    async def _write_status(self, sts: Obj, st: _Status, *, current: str, update: str, collisions: int) -> None:
        kind, _ = update_strategy(sts)
        status = copy.deepcopy(sts.get("status") or {})
        status.update(observedGeneration=meta(sts).get("generation", 1), replicas=max(0, st.replicas),
                      readyReplicas=st.ready, availableReplicas=st.available, currentReplicas=max(0, st.current),
                      updatedReplicas=max(0, st.updated), currentRevision=current, updateRevision=update,
                      collisionCount=collisions)
        if (kind == "RollingUpdate" and status["updatedReplicas"] == status["replicas"]
                and status["readyReplicas"] == status["replicas"] and status["updatedReplicas"] >= replicas_of(sts)):
            # The rolling update is complete: the update revision is the current one now.
            # (Unlike upstream, a pod below the partition being recreated does not count as
            # done: every wanted ordinal must be at the update revision.)
            status["currentReplicas"] = status["updatedReplicas"]
            status["currentRevision"] = update
        if status == (sts.get("status") or {}):
            return
        body = copy.deepcopy(sts)
        body["status"] = status
        try:
            await self.api.update(STATEFULSETS, body, subresource="status")
        except ConflictError:
            fresh = await self.api.get(STATEFULSETS, name_of(sts), namespace=namespace_of(sts))
            fresh["status"] = status
            await self.api.update(STATEFULSETS, fresh, subresource="status")
        except NotFoundError:
            pass

    async def _truncate_history(self, sts: Obj, pods: list[Obj], revisions: list[Obj], current: Obj,
                                update: Obj) -> None:
        live = {name_of(current), name_of(update), *(revision_of(p) for p in pods)}
        history = [r for r in revisions if name_of(r) not in live]
        limit = int(sts_spec(sts).get("revisionHistoryLimit", 10))
        for rev in history[:max(0, len(history) - limit)]:
            with contextlib.suppress(NotFoundError):
                await self.api.delete(CONTROLLERREVISIONS, name_of(rev), namespace=namespace_of(rev),
                                      preconditions={"uid": uid_of(rev)})


def _batches(ordinals: list[int]) -> list[list[int]]:
    out, rest = [], list(ordinals)
    for size in slow_start_sizes(len(rest)):
        out.append(rest[:size])
        rest = rest[size:]
    return out


def _start(ctx: ControllerContext) -> Started:
    c = StatefulSetController(api=ctx.api, statefulsets=ctx.informer(_STATEFULSETS), pods=ctx.informer(_PODS),
                              revisions=ctx.informer(_REVISIONS), claims=ctx.informer(_CLAIMS), clock=ctx.clock,
                              recorder=ctx.recorder.for_component("statefulset-controller"))
    q = ctx.queue("statefulset")
    c.enqueue = q.add
    ctx.on(STATEFULSETS, on_add=lambda o, _i: q.add(key_of(o)), on_update=lambda _old, new: q.add(key_of(new)),
           on_delete=lambda o: q.add(key_of(final_state(o))))
    for kind in (PODS, CONTROLLERREVISIONS):
        ctx.on(kind, on_add=lambda o, _i: c.on_owned(o), on_update=c.on_owned_update,
               on_delete=lambda o: c.on_owned(final_state(o)))
    return Started(run=run_workers(q, c.reconcile, workers=ctx.settings.statefulset.statefulset_workers,
                                   name="statefulset"), controller=c)


_STATEFULSETS = InformerNeed(kind=STATEFULSETS)
_PODS = InformerNeed(kind=PODS, indexers={"namespace": index_by_namespace})
_REVISIONS = InformerNeed(kind=CONTROLLERREVISIONS, indexers={"namespace": index_by_namespace})
_CLAIMS = InformerNeed(kind=PERSISTENTVOLUMECLAIMS, indexers={"namespace": index_by_namespace})
CONTROLLER = ControllerSpec(name="statefulset", informers=(_STATEFULSETS, _PODS, _REVISIONS, _CLAIMS), start=_start)

"""The Deployment controller: ReplicaSets per template revision, RollingUpdate and Recreate.

`reconcile(key)`:

* **ReplicaSets**: those in the namespace the Deployment controls (orphans matching the
  selector are adopted). The *new* ReplicaSet is the one whose template equals the
  Deployment's, ignoring the `pod-template-hash` label; it is created on demand, named
  `<deployment>-<hash>`, the hash computed from the template and `collisionCount`
  (FNV-1a over canonical JSON: stable, not upstream's bytes). Revisions live in the
  `deployment.kubernetes.io/revision` annotation: the new ReplicaSet gets the highest old
  revision + 1 and the Deployment carries the new ReplicaSet's.
* **RollingUpdate** (upstream `rolloutRolling`): scale the new ReplicaSet up within
  `replicas + maxSurge` (percent rounds up), then scale old ones down keeping at least
  `replicas - maxUnavailable` (percent rounds down; both 0 → maxUnavailable 1) available,
  unhealthy old replicas first. Only availability counts: a Terminating pod on a dead node
  does not block it.
* **Recreate** (upstream `rolloutRecreate`): scale every old ReplicaSet to 0; then wait while
  `old_pods_running`: any old ReplicaSet still reports replicas, or any pod of an old
  ReplicaSet is in a non-terminal phase (Pending, Running, Unknown), *including pods being
  deleted*. Failed and Succeeded pods do not count. A pod Terminating forever on a
  powered-off node therefore blocks the rollout forever (the seed's trap, #112452) until
  PodGC or a force delete removes it. Then create/scale the new ReplicaSet to `replicas`.
* **Status** (upstream `syncRolloutStatus`): replicas, updatedReplicas, readyReplicas,
  availableReplicas, unavailableReplicas, observedGeneration, and the conditions Available
  (MinimumReplicasAvailable/Unavailable) and Progressing (NewReplicaSetCreated,
  ReplicaSetUpdated, NewReplicaSetAvailable, ProgressDeadlineExceeded after
  `progressDeadlineSeconds` without progress). `kubectl rollout status` reads exactly these.
* Old ReplicaSets beyond `revisionHistoryLimit` (10) with no replicas are deleted.

Events: ScalingReplicaSet ("Scaled up replica set X from 0 to 3").
"""

from __future__ import annotations

import contextlib
import copy
import random
from collections.abc import Callable
from typing import Any

import orjson
import structlog

from kubemesh.controller_manager.controllers import ControllerContext, ControllerSpec, InformerNeed, Started
from kubemesh.controller_manager.objects import (
    Api,
    IndexedStore,
    Store,
    controller_ref,
    creation_time,
    index_by_namespace,
    int_or_percent,
    owner_refs,
    phase,
    ts,
)
from kubemesh.controller_manager.replicaset import SUFFIX_ALPHABET, claim, selector_of
from kubemesh.services.machinery.client import AlreadyExistsError, ConflictError, NotFoundError
from kubemesh.services.machinery.clock import Clock, format_time
from kubemesh.services.machinery.eventing import ComponentRecorder
from kubemesh.services.machinery.informing import final_state
from kubemesh.services.machinery.queueing import Result, run_workers
from kubemesh.services.model.kinds import (
    DEPLOYMENTS,
    PODS,
    REPLICASETS,
    Obj,
    key_of,
    labels_of,
    meta,
    name_of,
    namespace_of,
    uid_of,
)

_log = structlog.get_logger("controller_manager.deployment")

HASH_LABEL = "pod-template-hash"
REVISION = "deployment.kubernetes.io/revision"
DESIRED_REPLICAS = "deployment.kubernetes.io/desired-replicas"
MAX_REPLICAS = "deployment.kubernetes.io/max-replicas"
REVISION_HISTORY = "deployment.kubernetes.io/revision-history"


# -- templates and revisions ------------------------------------------------------------------


def compute_hash(template: Obj, collision_count: int | None = None) -> str:
    """A stable short hash of a pod template (with the collision count, as upstream)."""
    data = orjson.dumps(template, option=orjson.OPT_SORT_KEYS)
    if collision_count:
        data += str(collision_count).encode()
    h = 0x811C9DC5
    for b in data:
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    out = []
    while h:
        h, r = divmod(h, len(SUFFIX_ALPHABET))
        out.append(SUFFIX_ALPHABET[r])
    return "".join(out) or SUFFIX_ALPHABET[0]


def _without_hash(template: Obj) -> Obj:
    t = copy.deepcopy(template or {})
    labels = (t.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop(HASH_LABEL, None)
        if not labels:
            t["metadata"].pop("labels")
    if isinstance(t.get("metadata"), dict) and not t["metadata"]:
        t.pop("metadata")
    return t


def equal_ignore_hash(a: Obj, b: Obj) -> bool:
    """Whether two pod templates are equal apart from the pod-template-hash label."""
    return _without_hash(a) == _without_hash(b)


def revision_of(obj: Obj) -> int:
    """The revision annotation as an int (0 when absent)."""
    try:
        return int((meta(obj).get("annotations") or {}).get(REVISION) or 0)
    except ValueError:
        return 0


def replicas_of(obj: Obj) -> int:
    """spec.replicas (1 when absent, as defaulting does)."""
    r = (obj.get("spec") or {}).get("replicas")
    return 1 if r is None else int(r)


def status_int(obj: Obj, field: str) -> int:
    """An integer status field (0 when absent)."""
    return int((obj.get("status") or {}).get(field) or 0)


def find_new_and_old(d: Obj, rss: list[Obj]) -> tuple[Obj | None, list[Obj]]:
    """(new ReplicaSet, old ones): the oldest one matching the template is the new one."""
    tmpl = (d.get("spec") or {}).get("template") or {}
    new = None
    for rs in sorted(rss, key=lambda r: (creation_time(r), name_of(r))):
        if equal_ignore_hash((rs.get("spec") or {}).get("template") or {}, tmpl):
            new = rs
            break
    return new, [rs for rs in rss if rs is not new]


def is_recreate(d: Obj) -> bool:
    """Whether the strategy is Recreate."""
    return ((d.get("spec") or {}).get("strategy") or {}).get("type") == "Recreate"


def resolve_fenceposts(d: Obj) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) as numbers; never both 0."""
    replicas = replicas_of(d)
    ru = ((d.get("spec") or {}).get("strategy") or {}).get("rollingUpdate") or {}
    surge = int_or_percent(ru.get("maxSurge", "25%"), replicas, round_up=True)
    unavailable = int_or_percent(ru.get("maxUnavailable", "25%"), replicas, round_up=False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


def max_unavailable(d: Obj) -> int:
    """Upstream MaxUnavailable: 0 for Recreate or zero replicas, else capped at replicas."""
    if is_recreate(d) or replicas_of(d) == 0:
        return 0
    return min(resolve_fenceposts(d)[1], replicas_of(d))


def new_rs_new_replicas(d: Obj, all_rss: list[Obj], new_rs: Obj | None) -> int:
    """How many replicas the new ReplicaSet may have now."""
    if is_recreate(d):
        return replicas_of(d)
    current_new = replicas_of(new_rs) if new_rs is not None else 0
    surge, _ = resolve_fenceposts(d)
    current = sum(replicas_of(rs) for rs in all_rss)
    max_total = replicas_of(d) + surge
    if current >= max_total:
        return current_new
    scale_up = min(max_total - current, replicas_of(d) - current_new)
    return current_new + max(0, scale_up)


def old_pods_running(new_rs: Obj | None, old_rss: list[Obj], pod_map: dict[str, list[Obj]]) -> bool:
    """Whether Recreate must keep waiting: any old replica reported or any old pod not terminal.

    Pods being deleted count (a Terminating pod may still run); Failed/Succeeded do not;
    Unknown counts (we cannot know it stopped). This is upstream's rule.
    """
    if sum(status_int(rs, "replicas") for rs in old_rss) > 0:
        return True
    new_uid = uid_of(new_rs) if new_rs is not None else None
    for rs_uid, pods in pod_map.items():
        if rs_uid == new_uid:
            continue
        for pod in pods:
            if phase(pod) in ("Failed", "Succeeded"):
                continue
            return True
    return False


def plan_old_scale_down(d: Obj, all_rss: list[Obj], old_rss: list[Obj], new_rs: Obj | None,
                        ) -> dict[str, int]:
    """Upstream `reconcileOldReplicaSets`: new replica counts for old ReplicaSets (by uid)."""
    old_count = sum(replicas_of(rs) for rs in old_rss)
    if old_count == 0:
        return {}
    all_count = sum(replicas_of(rs) for rs in all_rss)
    min_available = replicas_of(d) - max_unavailable(d)
    new_unavailable = (replicas_of(new_rs) - status_int(new_rs, "availableReplicas")) if new_rs is not None else 0
    max_scaled_down = all_count - min_available - new_unavailable
    if max_scaled_down <= 0:
        return {}
    out: dict[str, int] = {}
    current = {uid_of(rs): replicas_of(rs) for rs in all_rss}
    # First, unhealthy old replicas (they cost no availability).
    cleaned = 0
    for rs in sorted(old_rss, key=lambda r: (creation_time(r), name_of(r))):
        if cleaned >= max_scaled_down:
            break
        reps = current[uid_of(rs)]
        if reps == 0:
            continue
        unhealthy = reps - status_int(rs, "availableReplicas")
        if unhealthy <= 0:
            continue
        n = min(max_scaled_down - cleaned, unhealthy)
        current[uid_of(rs)] = reps - n
        out[uid_of(rs)] = reps - n
        cleaned += n
    # Then healthy ones, keeping minAvailable.
    available = sum(status_int(rs, "availableReplicas") for rs in all_rss)
    if available > min_available:
        total = available - min_available
        done = 0
        for rs in sorted(old_rss, key=lambda r: (creation_time(r), name_of(r))):
            if done >= total:
                break
            reps = current[uid_of(rs)]
            if reps == 0:
                continue
            n = min(reps, total - done)
            current[uid_of(rs)] = reps - n
            out[uid_of(rs)] = reps - n
            done += n
    return out


# -- status ------------------------------------------------------------------------------------


def _cond(status: dict[str, Any], ctype: str) -> dict[str, Any] | None:
    for c in status.get("conditions") or []:
        if c.get("type") == ctype:
            return dict(c)
    return None


def _set_cond(status: dict[str, Any], new: dict[str, Any]) -> None:
    """SetDeploymentCondition: no change for the same status and reason; keep the transition time."""
    conds = [dict(c) for c in status.get("conditions") or []]
    cur = next((c for c in conds if c.get("type") == new["type"]), None)
    if cur is not None and cur.get("status") == new["status"] and cur.get("reason") == new["reason"]:
        return
    if cur is not None and cur.get("status") == new["status"]:
        new["lastTransitionTime"] = cur.get("lastTransitionTime")
    status["conditions"] = [c for c in conds if c.get("type") != new["type"]] + [new]


def _new_cond(ctype: str, status: str, reason: str, message: str, now: float) -> dict[str, Any]:
    t = format_time(now)
    return {"type": ctype, "status": status, "reason": reason, "message": message, "lastUpdateTime": t,
            "lastTransitionTime": t}


def deployment_complete(d: Obj, st: dict[str, Any]) -> bool:
    """Every replica updated and available, and the latest spec observed."""
    r = replicas_of(d)
    return bool(st.get("updatedReplicas", 0) == r and st.get("replicas", 0) == r and st.get("availableReplicas", 0) == r
            and st.get("observedGeneration", 0) >= meta(d).get("generation", 1))


def deployment_progressing(d: Obj, st: dict[str, Any]) -> bool:
    """Any progress since the last recorded status."""
    old = d.get("status") or {}
    old_old = int(old.get("replicas") or 0) - int(old.get("updatedReplicas") or 0)
    new_old = st.get("replicas", 0) - st.get("updatedReplicas", 0)
    return bool(st.get("updatedReplicas", 0) > int(old.get("updatedReplicas") or 0) or new_old < old_old
            or st.get("readyReplicas", 0) > int(old.get("readyReplicas") or 0)
            or st.get("availableReplicas", 0) > int(old.get("availableReplicas") or 0))


def deployment_timed_out(d: Obj, st: dict[str, Any], now: float) -> bool:
    """No progress for progressDeadlineSeconds."""
    deadline = (d.get("spec") or {}).get("progressDeadlineSeconds")
    cond = _cond(st, "Progressing")
    if deadline is None or cond is None:
        return False
    if cond.get("reason") == "NewReplicaSetAvailable":
        return False
    if cond.get("reason") == "ProgressDeadlineExceeded":
        return True
    since = ts(cond.get("lastUpdateTime"))
    return since is not None and since + float(deadline) < now


def calculate_status(d: Obj, all_rss: list[Obj], new_rs: Obj | None, *, now: float) -> dict[str, Any]:
    """The Deployment's status from its ReplicaSets, with Available and Progressing conditions."""
    st = copy.deepcopy(d.get("status") or {})
    available = sum(status_int(rs, "availableReplicas") for rs in all_rss)
    total = sum(replicas_of(rs) for rs in all_rss)
    st["observedGeneration"] = meta(d).get("generation", 1)
    st["replicas"] = sum(status_int(rs, "replicas") for rs in all_rss)
    st["updatedReplicas"] = status_int(new_rs, "replicas") if new_rs is not None else 0
    st["readyReplicas"] = sum(status_int(rs, "readyReplicas") for rs in all_rss)
    st["availableReplicas"] = available
    st["unavailableReplicas"] = max(0, total - available)
    if available >= replicas_of(d) - max_unavailable(d):
        _set_cond(st, _new_cond("Available", "True", "MinimumReplicasAvailable", "Deployment has minimum availability.",
                                now))
    else:
        _set_cond(st, _new_cond("Available", "False", "MinimumReplicasUnavailable",
                                "Deployment does not have minimum availability.", now))
    deadline = (d.get("spec") or {}).get("progressDeadlineSeconds")
    cur = _cond(d.get("status") or {}, "Progressing")
    complete_already = st["replicas"] == st["updatedReplicas"] and cur is not None and cur.get(
        "reason") == "NewReplicaSetAvailable"
    if deadline is None:
        st["conditions"] = [c for c in st.get("conditions") or [] if c.get("type") != "Progressing"]
    elif not complete_already:
        rs_name = name_of(new_rs) if new_rs is not None else ""
        if deployment_complete(d, st):
            _set_cond(st, _new_cond("Progressing", "True", "NewReplicaSetAvailable",
                                    f'ReplicaSet "{rs_name}" has successfully progressed.', now))
        elif deployment_progressing(d, st):
            c = _new_cond("Progressing", "True", "ReplicaSetUpdated",
                          f'ReplicaSet "{rs_name}" is progressing.' if new_rs is not None
                          else f'Deployment "{name_of(d)}" is progressing.', now)
            if cur is not None and cur.get("status") == "True":
                c["lastTransitionTime"] = cur.get("lastTransitionTime")
            st["conditions"] = [x for x in st.get("conditions") or [] if x.get("type") != "Progressing"] + [c]
        elif deployment_timed_out(d, st, now):
            _set_cond(st, _new_cond("Progressing", "False", "ProgressDeadlineExceeded",
                                    f'ReplicaSet "{rs_name}" has timed out progressing.', now))
    return st


# -- the controller ----------------------------------------------------------------------------


class DeploymentController:
    """Level-based Deployment reconciler over the shared caches."""

    def __init__(self, *, api: Api, deployments: Store, replicasets: IndexedStore, pods: IndexedStore,
                 clock: Clock, rng: random.Random, recorder: ComponentRecorder) -> None:
        self.api = api
        self.deployments = deployments
        self.replicasets = replicasets
        self.pods = pods
        self.clock = clock
        self.rng = rng
        self.recorder = recorder
        self.enqueue: Callable[[str], None] = lambda key: None

    # -- handlers -----------------------------------------------------------------------------

    def _owner(self, rs: Obj) -> str | None:
        ref = controller_ref(rs)
        if ref is None or ref.get("kind") != "Deployment":
            return None
        return f"{namespace_of(rs)}/{ref.get('name')}"

    def on_rs(self, rs: Obj) -> None:
        """A ReplicaSet changed: sync its Deployment (or every Deployment that could adopt it)."""
        key = self._owner(rs)
        if key is not None:
            self.enqueue(key)
            return
        for d in self.deployments.list():
            if namespace_of(d) == namespace_of(rs) and selector_of(d).matches(labels_of(rs)):
                self.enqueue(key_of(d))

    def on_pod(self, pod: Obj) -> None:
        """A pod changed or went away: Recreate deployments wait on old pods, so sync them."""
        ref = controller_ref(pod)
        if ref is None or ref.get("kind") != "ReplicaSet":
            return
        rs = self.replicasets.get(f"{namespace_of(pod)}/{ref.get('name')}")
        if rs is None:
            return
        key = self._owner(rs)
        if key is None:
            return
        d = self.deployments.get(key)
        if d is not None and is_recreate(d):
            self.enqueue(key)

    # -- reconcile ----------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        """Sync one Deployment."""
        d = self.deployments.get(key)
        if d is None:
            return None
        d = copy.deepcopy(d)
        if meta(d).get("deletionTimestamp"):
            return None
        selector = selector_of(d)
        if selector.empty:
            self.recorder.warning(d, "SelectingAll",
                                  "This deployment is selecting all pods. A non-empty selector is required.")
            return None
        candidates = self.replicasets.by_index("namespace", namespace_of(d))
        owned, adopt, release = claim(d, selector, candidates)
        for rs in adopt:
            if await self._set_owner(rs, d, adopt=True):
                owned.append(rs)
        for rs in release:
            await self._set_owner(rs, d, adopt=False)
        rss = [copy.deepcopy(rs) for rs in owned]
        if (d.get("spec") or {}).get("paused"):
            new_rs, _old = find_new_and_old(d, rss)
            await self._sync_status(d, rss, new_rs)
            return None
        if is_recreate(d):
            return await self._rollout_recreate(d, rss)
        return await self._rollout_rolling(d, rss)

    def _pod_map(self, d: Obj, rss: list[Obj]) -> dict[str, list[Obj]]:
        uids = {uid_of(rs) for rs in rss}
        out: dict[str, list[Obj]] = {u: [] for u in uids}
        for pod in self.pods.by_index("namespace", namespace_of(d)):
            ref = controller_ref(pod)
            if ref is not None and ref.get("uid") in uids:
                out[str(ref.get("uid"))].append(pod)
        return out

    async def _rollout_recreate(self, d: Obj, rss: list[Obj]) -> Result | None:
        new_rs, old = await self._sync_revision(d, rss, create=False)
        scaled = False
        for rs in old:
            if replicas_of(rs) > 0:
                await self._scale(d, rs, 0)
                scaled = True
        if scaled:
            return await self._sync_status(d, [*old, *([new_rs] if new_rs else [])], new_rs)
        if old_pods_running(new_rs, old, self._pod_map(d, rss)):
            return await self._sync_status(d, [*old, *([new_rs] if new_rs else [])], new_rs)
        if new_rs is None:
            new_rs, old = await self._sync_revision(d, rss, create=True)
        if new_rs is not None and replicas_of(new_rs) != replicas_of(d):
            await self._scale(d, new_rs, replicas_of(d))
        all_rss = [*old, *([new_rs] if new_rs else [])]
        if new_rs is not None:
            await self._cleanup(d, old)
        return await self._sync_status(d, all_rss, new_rs)

    async def _rollout_rolling(self, d: Obj, rss: list[Obj]) -> Result | None:
        new_rs, old = await self._sync_revision(d, rss, create=True)
        all_rss = [*old, *([new_rs] if new_rs else [])]
        if new_rs is not None:
            want = replicas_of(d) if replicas_of(new_rs) > replicas_of(d) else new_rs_new_replicas(d, all_rss, new_rs)
            if want != replicas_of(new_rs):
                await self._scale(d, new_rs, want)
                return await self._sync_status(d, all_rss, new_rs)
        plan = plan_old_scale_down(d, all_rss, [rs for rs in old if replicas_of(rs) > 0], new_rs)
        if plan:
            for rs in old:
                if uid_of(rs) in plan:
                    await self._scale(d, rs, plan[uid_of(rs)])
            return await self._sync_status(d, all_rss, new_rs)
        await self._cleanup(d, old)
        return await self._sync_status(d, all_rss, new_rs)

    async def _sync_revision(self, d: Obj, rss: list[Obj], *, create: bool) -> tuple[Obj | None, list[Obj]]:
        new_rs, old = find_new_and_old(d, rss)
        max_old = max((revision_of(rs) for rs in old), default=0)
        want_rev = max_old + 1
        if new_rs is not None:
            ann = meta(new_rs).get("annotations") or {}
            changes: dict[str, str] = {}
            if revision_of(new_rs) < want_rev:
                changes[REVISION] = str(want_rev)
            surge, _ = resolve_fenceposts(d)
            if ann.get(DESIRED_REPLICAS) != str(replicas_of(d)):
                changes[DESIRED_REPLICAS] = str(replicas_of(d))
                changes[MAX_REPLICAS] = str(replicas_of(d) + (0 if is_recreate(d) else surge))
            if changes:
                new_rs = await self.api.patch(REPLICASETS, name_of(new_rs), {"metadata": {"annotations": changes}},
                                              namespace=namespace_of(new_rs))
        elif create:
            new_rs = await self._create_new_rs(d, rss, old, want_rev)
        if new_rs is not None:
            await self._set_deployment_revision(d, str(revision_of(new_rs)))
        return new_rs, old

    async def _create_new_rs(self, d: Obj, rss: list[Obj], old: list[Obj], revision: int) -> Obj | None:
        spec = d.get("spec") or {}
        collisions = int((d.get("status") or {}).get("collisionCount") or 0)
        tmpl = copy.deepcopy(spec.get("template") or {})
        h = compute_hash(_without_hash(tmpl), collisions)
        tmpl.setdefault("metadata", {}).setdefault("labels", {})[HASH_LABEL] = h
        sel = copy.deepcopy(spec.get("selector") or {})
        sel.setdefault("matchLabels", {})[HASH_LABEL] = h
        surge, _ = resolve_fenceposts(d)
        replicas = new_rs_new_replicas(d, old, None)
        rs: Obj = {
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": f"{name_of(d)}-{h}", "namespace": namespace_of(d),
                         "labels": dict(tmpl["metadata"]["labels"]),
                         "annotations": {REVISION: str(revision), DESIRED_REPLICAS: str(replicas_of(d)),
                                         MAX_REPLICAS: str(replicas_of(d) + (0 if is_recreate(d) else surge))},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": name_of(d),
                                              "uid": uid_of(d), "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"replicas": replicas, "minReadySeconds": int(spec.get("minReadySeconds") or 0),
                     "selector": sel, "template": tmpl},
        }
        try:
            created = await self.api.create(REPLICASETS, rs, namespace=namespace_of(d))
        except AlreadyExistsError:
            existing = await self.api.get(REPLICASETS, name_of(rs), namespace=namespace_of(d))
            ref = controller_ref(existing)
            if ref is not None and ref.get("uid") == uid_of(d) and equal_ignore_hash(
                    (existing.get("spec") or {}).get("template") or {}, tmpl):
                return existing
            # A hash collision: bump collisionCount so the next sync picks another name.
            st = copy.deepcopy(d.get("status") or {})
            st["collisionCount"] = collisions + 1
            await self._write_status(d, st)
            raise
        if replicas > 0:
            self.recorder.normal(d, "ScalingReplicaSet",
                                 f"Scaled up replica set {name_of(created)} from 0 to {replicas}")
        st = copy.deepcopy(d.get("status") or {})
        if spec.get("progressDeadlineSeconds") is not None:
            _set_cond(st, _new_cond("Progressing", "True", "NewReplicaSetCreated",
                                    f'Created new replica set "{name_of(created)}"', self.clock.now()))
            d["status"] = await self._write_status(d, st) or st
        return created

    async def _set_deployment_revision(self, d: Obj, revision: str) -> None:
        ann = meta(d).get("annotations") or {}
        if ann.get(REVISION) == revision:
            return
        try:
            new = await self.api.patch(DEPLOYMENTS, name_of(d), {"metadata": {"annotations": {REVISION: revision}}},
                                       namespace=namespace_of(d))
        except NotFoundError:
            return
        meta(d).setdefault("annotations", {})[REVISION] = revision
        meta(d)["resourceVersion"] = meta(new).get("resourceVersion")

    async def _scale(self, d: Obj, rs: Obj, replicas: int) -> None:
        old = replicas_of(rs)
        if old == replicas:
            return
        surge, _ = resolve_fenceposts(d)
        patch = {"metadata": {"annotations": {DESIRED_REPLICAS: str(replicas_of(d)),
                                              MAX_REPLICAS: str(replicas_of(d) + (0 if is_recreate(d) else surge))}},
                 "spec": {"replicas": replicas}}
        new = await self.api.patch(REPLICASETS, name_of(rs), patch, namespace=namespace_of(rs))
        rs["spec"] = new.get("spec") or {**(rs.get("spec") or {}), "replicas": replicas}
        rs["metadata"] = new.get("metadata") or rs["metadata"]
        word = "up" if replicas > old else "down"
        self.recorder.normal(d, "ScalingReplicaSet",
                             f"Scaled {word} replica set {name_of(rs)} from {old} to {replicas}")

    async def _cleanup(self, d: Obj, old: list[Obj]) -> None:
        limit = (d.get("spec") or {}).get("revisionHistoryLimit")
        limit = 10 if limit is None else int(limit)
        dead = [rs for rs in old if replicas_of(rs) == 0 and status_int(rs, "replicas") == 0
                and not meta(rs).get("deletionTimestamp")]
        excess = len(dead) - limit
        if excess <= 0:
            return
        for rs in sorted(dead, key=lambda r: (revision_of(r), creation_time(r)))[:excess]:
            with contextlib.suppress(NotFoundError):
                await self.api.delete(REPLICASETS, name_of(rs), namespace=namespace_of(rs))

    async def _sync_status(self, d: Obj, all_rss: list[Obj], new_rs: Obj | None) -> Result | None:
        now = self.clock.now()
        st = calculate_status(d, all_rss, new_rs, now=now)
        if st != (d.get("status") or {}):
            await self._write_status(d, st)
        deadline = (d.get("spec") or {}).get("progressDeadlineSeconds")
        cond = _cond(st, "Progressing")
        if (deadline is not None and cond is not None and cond.get("status") == "True"
                and cond.get("reason") != "NewReplicaSetAvailable" and not deployment_complete(d, st)):
            since = ts(cond.get("lastUpdateTime")) or now
            return Result(requeue_after=max(1.0, since + float(deadline) - now + 1.0))
        return None

    async def _write_status(self, d: Obj, st: dict[str, Any]) -> dict[str, Any] | None:
        body = copy.deepcopy(d)
        body["status"] = st
        try:
            new = await self.api.update(DEPLOYMENTS, body, subresource="status")
        except ConflictError:
            fresh = await self.api.get(DEPLOYMENTS, name_of(d), namespace=namespace_of(d))
            fresh["status"] = st
            new = await self.api.update(DEPLOYMENTS, fresh, subresource="status")
        except NotFoundError:
            return None
        meta(d)["resourceVersion"] = meta(new).get("resourceVersion")
        d["status"] = st
        return st

    async def _set_owner(self, rs: Obj, d: Obj, *, adopt: bool) -> bool:
        if adopt:
            refs = [*owner_refs(rs), {"apiVersion": "apps/v1", "kind": "Deployment", "name": name_of(d),
                                      "uid": uid_of(d), "controller": True, "blockOwnerDeletion": True}]
        else:
            refs = [r for r in owner_refs(rs) if r.get("uid") != uid_of(d)]
        try:
            await self.api.patch(REPLICASETS, name_of(rs), {"metadata": {"ownerReferences": refs or None}},
                                 namespace=namespace_of(rs))
        except (NotFoundError, ConflictError):
            return False
        return True


def _start(ctx: ControllerContext) -> Started:
    c = DeploymentController(api=ctx.api, deployments=ctx.informer(_DEPLOYMENTS),
                             replicasets=ctx.informer(_REPLICASETS), pods=ctx.informer(_PODS),
                             clock=ctx.clock, rng=ctx.rng,
                             recorder=ctx.recorder.for_component("deployment-controller"))
    q = ctx.queue("deployment")
    c.enqueue = q.add
    ctx.on(DEPLOYMENTS, on_add=lambda o, _i: q.add(key_of(o)), on_update=lambda _old, new: q.add(key_of(new)),
           on_delete=lambda o: q.add(key_of(final_state(o))))
    ctx.on(REPLICASETS, on_add=lambda o, _i: c.on_rs(o), on_update=lambda _old, new: c.on_rs(new),
           on_delete=lambda o: c.on_rs(final_state(o)))
    ctx.on(PODS, on_update=lambda _old, new: c.on_pod(new), on_delete=lambda o: c.on_pod(final_state(o)))
    return Started(run=run_workers(q, c.reconcile, workers=ctx.settings.workloads.deployment_workers,
                                   name="deployment"), controller=c)


_DEPLOYMENTS = InformerNeed(kind=DEPLOYMENTS, indexers={"namespace": index_by_namespace})
_REPLICASETS = InformerNeed(kind=REPLICASETS, indexers={"namespace": index_by_namespace})
_PODS = InformerNeed(kind=PODS, indexers={"namespace": index_by_namespace})
CONTROLLER = ControllerSpec(name="deployment", informers=(_DEPLOYMENTS, _REPLICASETS, _PODS), start=_start)

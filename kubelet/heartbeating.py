"""Node heartbeats: the Lease renewal loop and the NodeStatus loop of one node.

Each emulated node runs both loops on its own heartbeat client (`nodes.EmulatedNode` builds
it: no client-side retries or throttling, a timeout equal to the status update frequency,
one shared unlimited connector), so one node's stalled request never delays another node's.

Lease loop (upstream's node lease controller):

* every `renew interval` (0.25 of 40 s = 10 s), stretched by up to 4 % of jitter, measured from
  the end of the previous sync (a sliding period);
* a sync first tries to update the last Lease it wrote; if that fails it ensures the Lease
  exists (GET, or create when missing) with exponential backoff (0.2 s doubling up to 7 s, for
  as long as it takes) and then updates it;
* one update is tried up to 5 times at once; a 409 Conflict re-reads the Lease (through the
  backoff ensure) before the next try; after 5 failures the loop waits for the next period.

NodeStatus loop (upstream's `syncNodeStatus`):

* every `--node-status-update-frequency` (10 s, with the same jitter) the node computes its
  status and patches it (strategic merge patch on `nodes/{name}/status`; conditions merge by
  type), up to 5 attempts without pause;
* an unchanged status is posted only when the report frequency has passed since the last
  post (`--node-status-report-frequency`, 5 min from the 1.14 profile on, as upstream since
  leases; the status computation frequency before); with `no-node-lease` the status post is the
  heartbeat, so it is posted every time;
* in between, as upstream's `tryUpdateNodeStatus`, the node reads its Node and posts when the
  apiserver's conditions differ from the ones it computed: another writer (the node-lifecycle
  controller marking it Unknown on a lease it saw late, an operator) is answered within one
  update period, not one report period. Upstream's read is a GET served from the apiserver's
  watch cache; here it is the kubelet process's one node informer (`KubeletHost.node_view`),
  the same view without one request per node and period (ten thousand nodes would otherwise
  add a thousand GETs a second);
* the first post after registration carries the whole status (capacity, allocatable,
  addresses, nodeInfo, daemonEndpoints); later ones carry the conditions.

Cost: each loop is one task that sleeps on the cluster clock between syncs (one timer per
loop); after the first sync (right after registration) each loop pauses a random part of one
period (from the node's seeded rng), so that ten thousand nodes started together do not stay
in step.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

import structlog

from kubemesh.kubelet.settings import KubeletSettings
from kubemesh.services.machinery.client import ApiError, ConflictError, NotFoundError, PatchType
from kubemesh.services.machinery.clock import Clock, format_micro_time, format_time
from kubemesh.services.model.kinds import LEASES, NODES, Kind, Obj

log = structlog.get_logger("kubelet.heartbeating")

LEASE_NAMESPACE: Final = "kube-node-lease"

CONDITION_DEFAULTS: Final[dict[str, tuple[str, str, str]]] = {
    # type: (healthy status, reason, message)
    "MemoryPressure": ("False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    "DiskPressure": ("False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    "PIDPressure": ("False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    "Ready": ("True", "KubeletReady", "kubelet is posting ready status"),
}
"""The conditions a kubelet reports, in its order, with their healthy values."""

PRESSURE_TRUE: Final[dict[str, tuple[str, str, str]]] = {
    "MemoryPressure": ("True", "KubeletHasInsufficientMemory", "kubelet has insufficient memory available"),
    "DiskPressure": ("True", "KubeletHasDiskPressure", "kubelet has disk pressure"),
    "PIDPressure": ("True", "KubeletHasInsufficientPID", "kubelet has insufficient PID available"),
}
"""The pressure conditions as the eviction manager reports them when its signals say so."""

OUT_OF_DISK: Final[dict[bool, tuple[str, str, str]]] = {
    False: ("False", "KubeletHasSufficientDisk", "kubelet has sufficient disk space available"),
    True: ("True", "KubeletOutOfDisk", "out of disk space"),
}
"""1.7's OutOfDisk condition (`--low-diskspace-threshold-mb`), reported first as v1.7's kubelet did."""


class HeartbeatApi(Protocol):
    """The part of `kubemesh.services.machinery.client.ApiClient` the heartbeat loops use."""

    async def get(self, kind: Kind, name: str, *, namespace: str | None = None,
                  subresource: str | None = None) -> Obj:
        """GET one object."""
        ...

    async def create(self, kind: Kind, body: Obj, *, namespace: str | None = None) -> Obj:
        """POST an object."""
        ...

    async def update(self, kind: Kind, body: Obj, *, subresource: str | None = None) -> Obj:
        """PUT an object."""
        ...

    async def patch(self, kind: Kind, name: str, patch: Obj | list[Obj], *, namespace: str | None = None,
                    patch_type: PatchType = "merge", subresource: str | None = None) -> Obj:
        """PATCH an object."""
        ...


def backoff_schedule(*, initial: float, maximum: float) -> Iterator[float]:
    """The pauses of the lease's ensure loop: `initial` doubled before each pause, capped."""
    sleep = initial
    while True:
        sleep = min(2 * sleep, maximum)
        yield sleep


def jittered(interval: float, *, factor: float, rng: random.Random) -> float:
    """`interval` stretched by up to `factor` (client-go's `wait.Jitter`)."""
    return interval * (1.0 + factor * rng.random())


# ---------------------------------------------------------------------------------------------
# Conditions.


@dataclass(slots=True)
class NodeConditions:
    """The node's conditions with overrides (chaos: set/clear a condition) and transition times.

    A condition's value is its override if any, else what the eviction manager computed from
    its signals (`set_pressure`), else its healthy default. `lastTransitionTime` moves only
    when a condition's status changes; `lastHeartbeatTime` is the time of the post.

    OutOfDisk is reported only once `set_out_of_disk` was called (a kubelet with
    `--low-diskspace-threshold-mb`, 1.7); today's kubelets have no such condition.
    """

    since: dict[str, float] = field(default_factory=dict)
    current: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    overrides: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    computed: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    out_of_disk: bool | None = None

    def set_out_of_disk(self, value: bool) -> bool:
        """Whether free disk is under `--low-diskspace-threshold-mb` now; whether that changed."""
        changed = value != self.out_of_disk
        self.out_of_disk = value
        return changed

    def _types(self) -> list[str]:
        reported = ["OutOfDisk"] if self.out_of_disk is not None else []
        return [*reported, *CONDITION_DEFAULTS, *(t for t in self.overrides
                                                   if t not in CONDITION_DEFAULTS and t not in reported)]

    def set_pressure(self, active: frozenset[str]) -> bool:
        """The pressure conditions the eviction manager finds True now; whether that changed."""
        new = {c: PRESSURE_TRUE[c] for c in active if c in PRESSURE_TRUE}
        changed = new != self.computed
        self.computed = new
        return changed

    def _value(self, ctype: str) -> tuple[str, str, str]:
        reported = OUT_OF_DISK[self.out_of_disk] if ctype == "OutOfDisk" and self.out_of_disk is not None else None
        return self.overrides.get(ctype) or self.computed.get(ctype) or reported or CONDITION_DEFAULTS[ctype]

    def set(self, ctype: str, status: str, *, reason: str | None = None, message: str | None = None) -> None:
        """Override one condition until `clear`."""
        reason = reason or {"MemoryPressure": "KubeletHasInsufficientMemory",
                            "DiskPressure": "KubeletHasDiskPressure",
                            "PIDPressure": "KubeletHasInsufficientPID",
                            "Ready": "KubeletNotReady"}.get(ctype, "KubemeshChaos")
        self.overrides[ctype] = (status, reason, message or f"set by kubemesh: {ctype}={status}")

    def clear(self, ctype: str) -> bool:
        """Drop an override; True if there was one."""
        return self.overrides.pop(ctype, None) is not None

    def statuses(self) -> dict[str, str]:
        """`{type: status}` as they stand (overrides applied)."""
        return {t: self._value(t)[0] for t in self._types()}

    def observe(self, now: float) -> list[dict[str, Any]]:
        """The conditions as of `now`, recording transitions."""
        out: list[dict[str, Any]] = []
        types = self._types()
        for ctype in types:
            value = self._value(ctype)
            if self.current.get(ctype, (None,))[0] != value[0]:
                self.since[ctype] = now
            self.current[ctype] = value
            out.append({"type": ctype, "status": value[0], "reason": value[1], "message": value[2],
                        "lastHeartbeatTime": format_time(now),
                        "lastTransitionTime": format_time(self.since[ctype])})
        # A condition of a type the kubelet does not report by itself (set by chaos, then
        # cleared) must leave the Node: a strategic merge patch keeps list elements it does not
        # mention, so say so explicitly (conditions merge by `type`).
        for ctype in [t for t in self.current if t not in types]:
            del self.current[ctype]
            self.since.pop(ctype, None)
            out.append({"type": ctype, "$patch": "delete"})
        return out

    def fingerprint(self) -> tuple[tuple[str, str, str], ...]:
        """What a status change is judged by (heartbeat times excluded)."""
        return tuple(sorted((t, *v) for t, v in self.current.items()))  # type: ignore[misc]


# ---------------------------------------------------------------------------------------------
# The Lease.


class LeaseUpdateError(Exception):
    """Every attempt of one renewal failed."""


class LeaseRenewer:
    """Keeps one node's Lease in `kube-node-lease` renewed (upstream's lease controller)."""

    def __init__(self, *, api: HeartbeatApi, node: str, clock: Clock, rng: random.Random,
                 settings: KubeletSettings, node_uid: Callable[[], str | None]) -> None:
        self.api = api
        self.node = node
        self.clock = clock
        self.rng = rng
        self.settings = settings
        self._node_uid = node_uid
        self.latest: Obj | None = None
        self.renewals = 0
        self.failures = 0
        self.last_renew: float | None = None
        self._log = log.bind(node=node, loop="lease")

    def new_lease(self, base: Obj | None) -> Obj:
        """The Lease to write: `base` (or a fresh one) renewed now, owned by the Node."""
        if base is None:
            lease: Obj = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                          "metadata": {"name": self.node, "namespace": LEASE_NAMESPACE}, "spec": {}}
        else:
            lease = {**base, "metadata": dict(base.get("metadata") or {}),
                     "spec": dict(base.get("spec") or {})}
        spec = lease["spec"]
        spec["holderIdentity"] = self.node
        spec["leaseDurationSeconds"] = int(self.settings.node_lease_duration)
        spec["renewTime"] = format_micro_time(self.clock.now())
        md = lease["metadata"]
        uid = self._node_uid()
        if uid and not md.get("ownerReferences"):
            md["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": self.node, "uid": uid}]
        return lease

    async def ensure(self) -> tuple[Obj, bool]:
        """The current Lease, creating it when missing; True when this call created it."""
        try:
            return await self.api.get(LEASES, self.node, namespace=LEASE_NAMESPACE), False
        except NotFoundError:
            created = await self.api.create(LEASES, self.new_lease(None), namespace=LEASE_NAMESPACE)
            return created, True

    async def backoff_ensure(self) -> tuple[Obj, bool]:
        """`ensure` until it succeeds, pausing 0.2 s doubling up to 7 s between attempts."""
        pauses = backoff_schedule(initial=self.settings.lease_initial_backoff,
                                  maximum=self.settings.lease_max_backoff)
        while True:
            try:
                return await self.ensure()
            except ApiError as exc:
                pause = next(pauses)
                self._log.warning("failed to ensure lease exists", error=str(exc), retry_in=pause)
                await self.clock.sleep(pause)

    async def retry_update(self, base: Obj) -> Obj:
        """Renew: up to `lease_max_update_retries` immediate attempts; re-read on conflict."""
        for attempt in range(self.settings.lease_max_update_retries):
            try:
                lease = await self.api.update(LEASES, self.new_lease(base))
            except ConflictError:
                self.failures += 1
                base, _ = await self.backoff_ensure()
                continue
            except ApiError as exc:
                self.failures += 1
                self._log.debug("lease update failed", attempt=attempt + 1, error=str(exc))
                continue
            self._renewed(lease)
            return lease
        raise LeaseUpdateError(f"failed {self.settings.lease_max_update_retries} attempts to update lease")

    def _renewed(self, lease: Obj) -> None:
        self.latest = lease
        self.renewals += 1
        self.last_renew = self.clock.now()

    async def sync(self) -> None:
        """One renewal, as upstream's `sync`."""
        if self.latest is not None:
            try:
                await self.retry_update(self.latest)
                return
            except LeaseUpdateError as exc:
                self._log.info("failed to update lease using latest lease, falling back to ensure",
                               error=str(exc))
        lease, created = await self.backoff_ensure()
        if created:
            self._renewed(lease)
            return
        try:
            await self.retry_update(lease)
        except LeaseUpdateError as exc:
            self._log.warning("failed to update lease", error=str(exc))

    async def run(self, *, synced: bool = False) -> None:
        """Renew forever: once now (unless the boot did: `synced`), then from a random phase of the period on."""
        interval = self.settings.lease_renew_interval
        if not synced:
            await self.sync()
        await self.clock.sleep(self.rng.random() * interval)
        while True:
            await self.sync()
            await self.clock.sleep(jittered(interval, factor=self.settings.jitter_factor, rng=self.rng))


# ---------------------------------------------------------------------------------------------
# The NodeStatus.


class StatusUpdateError(Exception):
    """Every attempt of one status update failed."""


class StatusReporter:
    """Posts one node's status (upstream's `syncNodeStatus`)."""

    def __init__(self, *, api: HeartbeatApi, node: str, clock: Clock, rng: random.Random,
                 settings: KubeletSettings, conditions: NodeConditions,
                 full_status: Callable[[], Obj], observed: Callable[[], Obj | None] | None = None) -> None:
        self.api = api
        self.node = node
        self.clock = clock
        self.rng = rng
        self.settings = settings
        self.conditions = conditions
        self._full_status = full_status
        self._observed = observed
        """The Node as the kubelet process's node informer holds it (None: GET it)."""
        self.need_full = True
        self.posts = 0
        self.reads = 0
        """How often the status loop read its Node between reports (from `observed`, or a GET)."""
        self.failures = 0
        self.last_post: float | None = None
        self._last_fingerprint: object = None
        self._log = log.bind(node=node, loop="status")

    def due(self, now: float) -> bool:
        """Whether a post is due (changed, report period passed, or no lease)."""
        if self.need_full or self.last_post is None or self.settings.no_node_lease:
            return True
        if self.conditions.fingerprint() != self._last_fingerprint:
            return True
        return now >= self.last_post + self.settings.status_report_interval - 1e-9

    async def sync(self) -> bool:
        """One update with up to `node_status_update_retry` attempts; True when posted."""
        now = self.clock.now()
        previous = self.conditions.fingerprint()
        conditions = self.conditions.observe(now)
        changed = self.conditions.fingerprint() != previous
        if not changed and not self.due(now) and not await self._server_differs():
            return False
        status: Obj = {**self._full_status(), "conditions": conditions} if self.need_full \
            else {"conditions": conditions}
        last: Exception | None = None
        for _ in range(self.settings.node_status_update_retry):
            try:
                await self.api.patch(NODES, self.node, {"status": status}, patch_type="strategic",
                                     subresource="status")
            except ApiError as exc:
                self.failures += 1
                last = exc
                continue
            self.posts += 1
            self.last_post = now
            self.need_full = False
            self._last_fingerprint = self.conditions.fingerprint()
            return True
        raise StatusUpdateError(f"update node status exceeds retry count: {last}")

    async def _server_differs(self) -> bool:
        """Whether the apiserver's Node shows conditions other than the ones this node computed.

        Upstream's kubelet reads its Node before every status update (a GET served from the
        apiserver's watch cache) and skips the PATCH only when nothing it would write differs.
        Here the read is the kubelet process's node informer (`observed`), the same watch-cache
        view without a request per node and period; without one, a GET. A node the view does
        not hold, or a failed GET, counts as "differs" (the PATCH then tells). Only the
        conditions the node reports count (another writer's own conditions, and heartbeat
        times, do not).
        """
        if self._observed is not None:
            node = self._observed()
            if node is None:
                return True
        else:
            try:
                node = await self.api.get(NODES, self.node)
            except ApiError:
                return True
        self.reads += 1
        server = {str(c.get("type")): str(c.get("status"))
                  for c in (node.get("status") or {}).get("conditions") or [] if isinstance(c, dict)}
        return any(server.get(t) != v[0] for t, v in self.conditions.current.items())

    async def sync_logged(self) -> None:
        """One `sync`; a failure is logged (the next period tries again)."""
        try:
            await self.sync()
        except StatusUpdateError as exc:
            self._log.warning("unable to update node status", error=str(exc))

    async def run(self, *, synced: bool = False) -> None:
        """Post forever: once now (unless the boot did: `synced`), then from a random phase of the period on."""
        interval = self.settings.node_status_update_frequency
        if not synced:
            await self.sync_logged()
        await self.clock.sleep(self.rng.random() * interval)
        while True:
            await self.sync_logged()
            await self.clock.sleep(jittered(interval, factor=self.settings.jitter_factor, rng=self.rng))

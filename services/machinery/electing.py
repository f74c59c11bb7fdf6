"""Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics.

Several replicas of a component run `LeaderElector.run(work)`; `work` runs in at most one
of them at a time, as far as a lease can promise it:

* **Acquiring.** A candidate takes the lease when nobody holds it (no Lease, or an empty
  `holderIdentity`) or when the holder's lease has expired. Expiry is judged, as client-go
  does, from when *this* candidate last saw the record change (`observedTime +
  leaseDurationSeconds < now`), so clock skew between replicas does not shorten a lease;
  `expiry="renew-time"` judges from the record's `renewTime` instead (skew-sensitive, for
  chaos that wants two leaders). Candidates retry every `retry_period` (jittered by up to
  120 % when an RNG is given, as client-go's `JitterUntil`).
* **Writing.** Every write carries the `resourceVersion` it read: two candidates racing for
  one lease are serialised by the apiserver (409 Conflict), and the loser retries on its
  next period. The record written is client-go's: `holderIdentity`, `leaseDurationSeconds`,
  `acquireTime` and `renewTime` (MicroTime, cluster clock) and `leaseTransitions` (bumped
  when the holder changes).
* **Renewing.** The leader renews every `retry_period`. If it cannot renew within
  `renew_deadline` (errors, 409s, a stalled request, a paused process), or it sees another
  holder on the lease, it stops leading: `work` is cancelled and `run` raises
  `LeadershipLost`. Because `renew_deadline < lease_duration`, the old leader has stopped
  working by the time another candidate may take over, provided the clocks agree.
* **Releasing.** When `work` returns or `run` is cancelled while leading, the lease is
  released (empty holder, duration 1 s) if `release_on_cancel` is set, so a successor does
  not wait for expiry (client-go's `ReleaseOnCancel`).

All durations are cluster seconds on the injected clock; nothing here reads the wall clock.
"""

from __future__ import annotations

import asyncio
import copy
import enum
import math
import os
import random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import structlog

from kubemesh.services.machinery.client import AlreadyExistsError, ApiError, ConflictError, NotFoundError
from kubemesh.services.machinery.clock import Clock, format_micro_time, parse_time
from kubemesh.services.model.kinds import LEASES, Kind, Obj

_log = structlog.get_logger("kubemesh.services.machinery.electing")

JITTER_FACTOR = 1.2
"""client-go's jitter for acquire retries: wait `retry_period * (1 + rand * 1.2)`."""


class LeaseClient(Protocol):
    """The part of `kubemesh.services.machinery.client.ApiClient` that leader election uses."""

    async def get(self, kind: Kind, name: str, *, namespace: str | None = None) -> Obj:
        """Read one object (raises NotFoundError)."""
        ...

    async def create(self, kind: Kind, body: Obj, *, namespace: str | None = None) -> Obj:
        """Create an object (raises AlreadyExistsError)."""
        ...

    async def update(self, kind: Kind, body: Obj) -> Obj:
        """Replace an object at its resourceVersion (raises ConflictError)."""
        ...


@dataclass(frozen=True, kw_only=True)
class LeaderElectionSettings:
    """Where the lease lives and how long leadership lasts (client-go's defaults)."""

    name: str
    """The Lease's name, e.g. `kube-scheduler`."""
    namespace: str = "kube-system"
    """The Lease's namespace."""
    lease_duration: float = 15.0
    """How long non-leaders wait after the last observed change before taking over."""
    renew_deadline: float = 10.0
    """How long the leader keeps trying to renew before it gives up leading."""
    retry_period: float = 2.0
    """How often candidates try to acquire and the leader renews."""
    release_on_cancel: bool = True
    """Release the lease when work ends or `run` is cancelled while leading."""
    expiry: Literal["observed", "renew-time"] = "observed"
    """Judge expiry from when the record was last seen to change (client-go) or from renewTime."""

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("the lease needs a name")
        if self.retry_period <= 0:
            raise ValueError("retry_period must be positive")
        if self.lease_duration <= self.renew_deadline:
            raise ValueError("lease_duration must be greater than renew_deadline")
        if self.renew_deadline <= JITTER_FACTOR * self.retry_period:
            raise ValueError("renew_deadline must be greater than retry_period * 1.2")


class LeadershipLost(Exception):
    """The leader could not renew its lease in time, or another candidate took it."""


class _Attempt(enum.Enum):
    HELD = "held"  # we hold the lease now
    FAILED = "failed"  # transient: error or lost a write race; try again
    TAKEN = "taken"  # another candidate holds a valid lease


class LeaderElector:
    """Contends for one Lease and runs work only while holding it."""

    def __init__(self, client: LeaseClient, *, settings: LeaderElectionSettings, identity: str,
                 clock: Clock, rng: random.Random | None = None,
                 on_started_leading: Callable[[], None] | None = None,
                 on_stopped_leading: Callable[[], None] | None = None,
                 on_new_leader: Callable[[str], None] | None = None) -> None:
        if not identity:
            raise ValueError("a candidate needs an identity")
        self._client = client
        self.settings = settings
        self.identity = identity
        self._clock = clock
        self._rng = rng
        self._on_started = on_started_leading
        self._on_stopped = on_stopped_leading
        self._on_new_leader = on_new_leader
        self._lease: Obj | None = None  # the last Lease read or written
        self._observed: tuple[Any, ...] | None = None  # the last record seen
        self._observed_time = 0.0
        self._leader = ""
        self._is_leader = False
        self._log = _log.bind(lease=f"{settings.namespace}/{settings.name}", identity=identity)

    @property
    def is_leader(self) -> bool:
        """Whether this candidate currently leads (its work is running)."""
        return self._is_leader

    @property
    def leader(self) -> str:
        """The holder identity last observed on the lease ("" if none)."""
        return self._leader

    async def run(self, work: Callable[[], Awaitable[None]]) -> None:
        """Acquire the lease, run `work` while leading, and renew until work ends.

        Returns when `work` returns (after releasing the lease if configured).

        Raises:
            LeadershipLost: the lease could not be renewed in time; `work` was cancelled.
            Exception: whatever `work` raised (the lease is released first).
        """
        await self._acquire()
        self._set_leading(True)
        work_task = asyncio.create_task(_as_coroutine(work), name=f"leader:{self.settings.name}:work")
        renew_task = asyncio.create_task(self._renew_loop(), name=f"leader:{self.settings.name}:renew")
        try:
            await asyncio.wait({work_task, renew_task}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            await _cancel_and_wait(work_task, renew_task)
            await self._step_down(release=True)
            raise
        if not work_task.done():
            # IMPORTANT: the renew loop ended, so leadership is lost: the work must stop now.
            await _cancel_and_wait(work_task)
            self._set_leading(False)
            exc = renew_task.exception()
            raise LeadershipLost(f"lost lease {self.settings.namespace}/{self.settings.name}") from exc
        await _cancel_and_wait(renew_task)
        await self._step_down(release=True)
        work_task.result()  # re-raises the work's failure

    # -- the loops ------------------------------------------------------------------------------

    async def _acquire(self) -> None:
        while True:
            if await self._try_acquire_or_renew() is _Attempt.HELD:
                self._log.info("acquired lease")
                return
            delay = self.settings.retry_period
            if self._rng is not None:
                delay += self._rng.random() * JITTER_FACTOR * delay
            await self._clock.sleep(delay)

    async def _renew_loop(self) -> None:
        """Renew every retry_period; return when leadership is lost."""
        while True:
            await self._clock.sleep(self.settings.retry_period)
            if not await self._renew_before_deadline():
                return

    async def _renew_before_deadline(self) -> bool:
        attempts = asyncio.create_task(self._renew_attempts(), name=f"leader:{self.settings.name}:attempt")
        timer = asyncio.create_task(self._clock.sleep(self.settings.renew_deadline))
        try:
            await asyncio.wait({attempts, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            await _cancel_and_wait(attempts, timer)
        if attempts.done() and not attempts.cancelled() and attempts.exception() is None:
            if attempts.result():
                return True
            self._log.warning("lease taken by another candidate", holder=self._leader)
            return False
        self._log.warning("failed to renew lease before the deadline",
                          renew_deadline=self.settings.renew_deadline)
        return False

    async def _renew_attempts(self) -> bool:
        """Try every retry_period until renewed (True) or another holder is seen (False)."""
        while True:
            outcome = await self._try_acquire_or_renew()
            if outcome is _Attempt.HELD:
                return True
            if outcome is _Attempt.TAKEN:
                return False
            await self._clock.sleep(self.settings.retry_period)

    # -- one attempt ----------------------------------------------------------------------------

    async def _try_acquire_or_renew(self) -> _Attempt:
        s = self.settings
        now = self._clock.now()
        try:
            # Fast path, as client-go: the leader writes over the lease it last wrote.
            if self._is_leader and self._lease is not None:
                try:
                    self._lease = await self._client.update(LEASES, self._record(self._lease, now=now))
                    self._observe(self._lease, now)
                    return _Attempt.HELD
                except ConflictError:
                    pass  # somebody else wrote it: read and judge below
            try:
                lease = await self._client.get(LEASES, s.name, namespace=s.namespace)
            except NotFoundError:
                body: Obj = {"apiVersion": LEASES.api_version, "kind": LEASES.kind,
                             "metadata": {"name": s.name, "namespace": s.namespace}, "spec": {}}
                created = await self._client.create(LEASES, self._record(body, now=now), namespace=s.namespace)
                self._lease = created
                self._observe(created, now)
                return _Attempt.HELD
            self._lease = lease
            self._observe(lease, now)
            spec = lease.get("spec") or {}
            holder = str(spec.get("holderIdentity") or "")
            if holder and holder != self.identity and self._lease_valid(spec, now):
                return _Attempt.TAKEN
            self._lease = await self._client.update(LEASES, self._record(lease, now=now))
            self._observe(self._lease, now)
            return _Attempt.HELD
        except (ConflictError, AlreadyExistsError):
            self._log.debug("lost a write race for the lease")
            return _Attempt.FAILED
        except ApiError as exc:
            self._log.warning("lease request failed", error=str(exc))
            return _Attempt.FAILED

    def _record(self, lease: Obj, *, now: float) -> Obj:
        """The lease with this candidate as holder, renewed at `now`."""
        body = copy.deepcopy(lease)
        spec = body.setdefault("spec", {})
        stamp = format_micro_time(now)
        if spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = stamp
            if spec.get("holderIdentity"):
                spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            else:
                spec.setdefault("leaseTransitions", 0)
        spec["holderIdentity"] = self.identity
        spec["leaseDurationSeconds"] = max(1, math.ceil(self.settings.lease_duration))
        spec["renewTime"] = stamp
        return body

    def _observe(self, lease: Obj, now: float) -> None:
        spec = lease.get("spec") or {}
        record = (spec.get("holderIdentity"), spec.get("renewTime"), spec.get("acquireTime"),
                  spec.get("leaseTransitions"), spec.get("leaseDurationSeconds"))
        if record != self._observed:
            self._observed = record
            self._observed_time = now
        holder = str(spec.get("holderIdentity") or "")
        if holder != self._leader:
            self._leader = holder
            if holder:
                self._log.info("new leader observed", holder=holder)
            if self._on_new_leader is not None and holder:
                self._on_new_leader(holder)

    def _lease_valid(self, spec: Obj, now: float) -> bool:
        duration = float(spec.get("leaseDurationSeconds") or 0)
        if self.settings.expiry == "observed":
            return self._observed_time + duration > now
        renew = spec.get("renewTime")
        try:
            renewed = parse_time(renew) if isinstance(renew, str) else 0.0
        except ValueError:
            renewed = 0.0
        return renewed + duration > now

    # -- leaving --------------------------------------------------------------------------------

    def _set_leading(self, leading: bool) -> None:
        if leading == self._is_leader:
            return
        self._is_leader = leading
        callback = self._on_started if leading else self._on_stopped
        if not leading:
            self._log.info("stopped leading")
        if callback is not None:
            callback()

    async def _step_down(self, *, release: bool) -> None:
        if release and self.settings.release_on_cancel and self._is_leader and self._lease is not None:
            # Bounded, so that a stalled apiserver cannot hold up shutdown.
            released = asyncio.create_task(self._release(self._lease))
            timer = asyncio.create_task(self._clock.sleep(self.settings.retry_period))
            try:
                await asyncio.wait({released, timer}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                await _cancel_and_wait(released, timer)
        self._set_leading(False)

    async def _release(self, lease: Obj) -> None:
        body = copy.deepcopy(lease)
        spec = body.setdefault("spec", {})
        if spec.get("holderIdentity") != self.identity:
            return
        stamp = format_micro_time(self._clock.now())
        spec.update(holderIdentity="", leaseDurationSeconds=1, renewTime=stamp, acquireTime=stamp)
        try:
            self._lease = await self._client.update(LEASES, body)
            self._log.info("released lease")
        except ApiError as exc:
            self._log.warning("could not release lease", error=str(exc))


async def _as_coroutine(work: Callable[[], Awaitable[None]]) -> None:
    await work()


async def _cancel_and_wait(*tasks: asyncio.Task[Any]) -> None:
    """Cancel tasks and wait until they have finished; the caller's own cancellation propagates."""
    for t in tasks:
        if not t.done():
            t.cancel()
    await asyncio.wait(tasks)
    for t in tasks:
        if not t.cancelled():
            t.exception()  # mark as retrieved; the caller reads what it needs


def process_identity(instance: str) -> str:
    """A leader-election identity unique to this process, as client-go uses hostname + uuid.

    The instance name alone is not enough: a restarted incarnation would take over its
    predecessor's lease at once (it "already holds" it), and two processes started with the
    same name would both believe they lead.
    """
    return f"{instance}_{os.getpid()}_{uuid.uuid4().hex[:8]}"

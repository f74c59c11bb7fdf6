"""Lease-based leader election for the controller-manager (fallback until `services.electing`).

client-go's algorithm on a `coordination.k8s.io/v1` Lease (`kube-system/kube-controller-manager`):
acquire when the lease is free or its holder has not renewed for `lease_duration`; renew every
`retry_period`; when a renewal has not succeeded for `renew_deadline`, stop leading (the work
is cancelled) and try to acquire again. All writes are optimistic (resourceVersion), so two
candidates never both win the same term. Times are cluster time.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog

from services.client import AlreadyExistsError, ApiClient, ApiError, ConflictError, NotFoundError
from services.clock import Clock, format_micro_time, parse_time
from services.kinds import LEASES, Obj

_log = structlog.get_logger("controller_manager.leasing")


@dataclass(frozen=True, slots=True, kw_only=True)
class ElectionSettings:
    """kube-controller-manager's --leader-elect-* defaults."""

    name: str = "kube-controller-manager"
    namespace: str = "kube-system"
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0


class LeaseElector:
    """Run `work` only while holding the lease."""

    def __init__(self, client: ApiClient, *, settings: ElectionSettings, identity: str, clock: Clock) -> None:
        self.client = client
        self.settings = settings
        self.identity = identity
        self.clock = clock
        self.is_leader = False
        self.transitions = 0

    def _body(self, current: Obj | None, *, acquire: bool) -> Obj:
        now = format_micro_time(self.clock.now())
        spec: dict[str, Any] = dict((current or {}).get("spec") or {})
        transitions = int(spec.get("leaseTransitions") or 0)
        if acquire and spec.get("holderIdentity") != self.identity:
            spec["acquireTime"] = now
            transitions += 1 if current is not None else 0
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=int(self.settings.lease_duration),
                    renewTime=now, leaseTransitions=transitions)
        md: dict[str, Any] = {"name": self.settings.name, "namespace": self.settings.namespace}
        if current is not None:
            md["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": md, "spec": spec}

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; True when we hold the lease afterwards."""
        try:
            current = await self.client.get(LEASES, self.settings.name, namespace=self.settings.namespace)
        except NotFoundError:
            try:
                await self.client.create(LEASES, self._body(None, acquire=True), namespace=self.settings.namespace)
            except (AlreadyExistsError, ConflictError):
                return False
            return True
        spec = current.get("spec") or {}
        holder = spec.get("holderIdentity")
        if holder and holder != self.identity:
            renew = spec.get("renewTime")
            duration = float(spec.get("leaseDurationSeconds") or self.settings.lease_duration)
            with contextlib.suppress(ValueError, TypeError):
                if renew and parse_time(str(renew)) + duration > self.clock.now():
                    return False
        try:
            await self.client.update(LEASES, self._body(current, acquire=True))
        except ConflictError:
            return False
        return True

    async def run(self, work: Callable[[], Coroutine[Any, Any, None]]) -> None:
        """Acquire, run `work` while renewing, and start over when leadership is lost."""
        while True:
            while not await self._attempt():
                await self.clock.sleep(self.settings.retry_period)
            self.is_leader = True
            self.transitions += 1
            _log.info("became leader", identity=self.identity, lease=self.settings.name)
            # A cancelled child is not an error for the TaskGroup: losing the lease cancels
            # the work and we campaign again; cancelling run() cancels both.
            async with asyncio.TaskGroup() as tg:
                worker = tg.create_task(work(), name="leader-work")
                await self._renew_loop()
                worker.cancel()
            self.is_leader = False
            _log.warning("leadership lost", identity=self.identity)

    async def _attempt(self) -> bool:
        try:
            return await self.try_acquire_or_renew()
        except ApiError as exc:
            _log.debug("lease attempt failed", error=repr(exc))
            return False

    async def _renew_loop(self) -> None:
        last_ok = self.clock.now()
        while True:
            await self.clock.sleep(self.settings.retry_period)
            if await self._attempt():
                last_ok = self.clock.now()
            elif self.clock.now() - last_ok > self.settings.renew_deadline:
                self.is_leader = False
                return

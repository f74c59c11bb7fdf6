"""The Python client of the chaos front door (`/chaos/v1` on the apiserver).

    async with MeshEndpoint.resolve(state_dir=Path(".kubemesh")).chaos() as chaos, chaos.power_off("node-1"):
        ...                                   # the node is powered on again on exit
    async with chaos.hold_watch(component="scheduler", resource="pods", event_types=["DELETED"],
                                release_on=delivered("scheduler", "nodes", name="node-1",
                                                     event_types=["DELETED"], delay=30)):
        ...

Every context manager creates its fault on entry and removes it (heals it) on exit, also
when the body raises or is cancelled; removal is shielded from cancellation and a fault
already gone is not an error. Plain calls: `add`, `list`, `get`, `update`, `remove`,
`release`, `apply` (the desired set), `reset`, `history`, `follow_history`.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import AsyncIterator, Sequence
from types import TracebackType
from typing import Any

import orjson

from kubemesh.services.machinery.client import ApiClient, InvalidError, NotFoundError

__all__ = ["Chaos", "FaultContext", "FaultFailedError", "InvalidError", "delivered", "written"]

Spec = dict[str, Any]


class FaultFailedError(RuntimeError):
    """A fault was accepted but could not be applied (phase `Failed`): `fault` says why."""

    def __init__(self, fault: Spec) -> None:
        status = fault.get("status") or {}
        super().__init__(f"fault {fault.get('name')} ({fault.get('type')}) could not be applied: "
                         f"{status.get('lastError') or 'no reason given'}")
        self.fault = fault


def delivered(component: str, resource: str, *, name: str | None = None, namespace: str | None = None,
              event_types: Sequence[str] = (), fields: Sequence[Any] = (), occurrence: int = 1,
              delay: float = 0.0, instance: str | None = None, action: str = "release") -> Spec:
    """A trigger: when `component` received a matching event on a watch."""
    return _trigger("delivered", component, resource, name=name, namespace=namespace, event_types=event_types,
                    fields=fields, occurrence=occurrence, delay=delay, instance=instance, action=action)


def written(component: str, resource: str, *, name: str | None = None, namespace: str | None = None,
            event_types: Sequence[str] = (), fields: Sequence[Any] = (), occurrence: int = 1,
            delay: float = 0.0, instance: str | None = None, action: str = "release") -> Spec:
    """A trigger: when `component` wrote a matching change."""
    return _trigger("written", component, resource, name=name, namespace=namespace, event_types=event_types,
                    fields=fields, occurrence=occurrence, delay=delay, instance=instance, action=action)


def _trigger(on: str, component: str, resource: str, *, name: str | None, namespace: str | None,
             event_types: Sequence[str], fields: Sequence[Any], occurrence: int, delay: float,
             instance: str | None, action: str) -> Spec:
    t: Spec = {"action": action, "on": on, "component": component, "resource": resource,
               "occurrence": occurrence, "delay": delay}
    if name is not None:
        t["name"] = name
    if namespace is not None:
        t["namespace"] = namespace
    if event_types:
        t["eventTypes"] = list(event_types)
    if fields:
        t["fields"] = list(fields)
    if instance is not None:
        t["instance"] = instance
    return t


class FaultContext:
    """`async with`: create the fault on entry, remove it on exit (whatever happened)."""

    def __init__(self, chaos: Chaos, spec: Spec) -> None:
        self.chaos = chaos
        self.spec = spec
        self.fault: Spec | None = None

    @property
    def name(self) -> str:
        """The fault's name (once created)."""
        if self.fault is None:
            raise RuntimeError("the fault was not created yet")
        return str(self.fault["name"])

    async def status(self) -> Spec:
        """The fault as the apiserver shows it now."""
        return await self.chaos.get(self.name)

    async def __aenter__(self) -> FaultContext:
        try:
            self.fault = await self.chaos.add(self.spec)
        except FaultFailedError as exc:
            # A fault that did nothing must not linger as Failed in the list: remove it, then fail loudly.
            await asyncio.shield(self.chaos.remove(str(exc.fault["name"]), missing_ok=True))
            raise
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if self.fault is None:
            return
        # Shielded: a cancelled body must still heal its fault.
        await asyncio.shield(self.chaos.remove(self.name, missing_ok=True))


class Chaos:
    """Client of `/chaos/v1` over an `ApiClient` (usually from `MeshEndpoint.chaos()`).

    With `owned`, `close()` (or leaving `async with`) closes the client too.
    """

    def __init__(self, client: ApiClient, *, owned: bool = False) -> None:
        self._client = client
        self._owned = owned
        self.base_url = client.base_url

    async def close(self) -> None:
        """Close the client if this object owns it."""
        if self._owned:
            await self._client.close()

    async def __aenter__(self) -> Chaos:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _req(self, method: str, path: str, body: Any = None, params: dict[str, str] | None = None) -> Any:
        return await self._client.request(method, path, body=body, params=params,
                                          content_type="application/json" if body is not None else None,
                                          idempotent=method in ("GET", "PUT", "DELETE"))

    # ------------------------------------------------------------------------------ CRUD

    async def add(self, spec: Spec, *, check: bool = True) -> Spec:
        """Create a fault; returns it with its status.

        Raises:
            InvalidError: A bad spec (422), nothing created.
            FaultFailedError: With `check`, the fault was created but could not be applied
                (forwarded faults are applied before the answer: a node nobody hosts, an admin
                endpoint that refused); it stays listed as `Failed`.
        """
        out: Spec = await self._req("POST", "/chaos/v1/faults", spec)
        if check and (out.get("status") or {}).get("phase") == "Failed":
            raise FaultFailedError(out)
        return out

    async def list(self) -> list[Spec]:
        """Every fault."""
        out = await self._req("GET", "/chaos/v1/faults")
        return list(out["items"])

    async def get(self, name: str) -> Spec:
        """One fault."""
        out: Spec = await self._req("GET", f"/chaos/v1/faults/{name}")
        return out

    async def update(self, name: str, patch: Spec) -> Spec:
        """Merge-patch a fault."""
        out: Spec = await self._req("PATCH", f"/chaos/v1/faults/{name}", patch)
        return out

    async def remove(self, name: str, *, missing_ok: bool = False) -> Spec | None:
        """Heal and remove a fault; returns its final state."""
        try:
            out: Spec = await self._req("DELETE", f"/chaos/v1/faults/{name}")
        except NotFoundError:
            if missing_ok:
                return None
            raise
        return out

    async def release(self, name: str) -> Spec:
        """End a fault now (it stays listed as Recovered)."""
        out: Spec = await self._req("POST", f"/chaos/v1/faults/{name}/release")
        return out

    async def apply(self, specs: Sequence[Spec]) -> Spec:
        """Reconcile to a desired set (PUT)."""
        out: Spec = await self._req("PUT", "/chaos/v1/faults", {"items": list(specs)})
        return out

    async def reset(self) -> Spec:
        """Heal and remove everything; `{"healed": [...], "removed": [...]}`."""
        out: Spec = await self._req("POST", "/chaos/v1/reset")
        return out

    async def history(self, *, since: int = 0, types: Sequence[str] = (), fault: str | None = None,
                      limit: int | None = None) -> builtins.list[Spec]:
        """History records after `since`."""
        params = {"since": str(since)}
        if types:
            params["type"] = ",".join(types)
        if fault:
            params["fault"] = fault
        if limit is not None:
            params["limit"] = str(limit)
        out = await self._req("GET", "/chaos/v1/history", params=params)
        return list(out["items"])

    async def follow_history(self, *, since: int = 0, types: Sequence[str] = ()) -> AsyncIterator[Spec]:
        """History records after `since`, then live ones (until the caller stops iterating)."""
        params = {"since": str(since), "follow": "true"}
        if types:
            params["type"] = ",".join(types)
        async for line in self._client.stream_lines("/chaos/v1/history", params=params):
            yield orjson.loads(line)

    # ------------------------------------------------------------------------------ helpers

    def fault(self, spec: Spec | None = None, **fields: Any) -> FaultContext:
        """`async with chaos.fault({...})` or `chaos.fault(type=..., target=..., ...)`."""
        full = dict(spec or {})
        full.update(fields)
        full.setdefault("duration", None)
        return FaultContext(self, full)

    def power_off(self, node: str, *, duration: float | None = None, name: str | None = None) -> FaultContext:
        """Power a node off (heartbeats, lease, status and pod work stop); on again on exit."""
        return self.fault(_named({"type": "node.powerOff", "target": {"node": node}, "duration": duration}, name))

    def node_partition(self, node: str, *, duration: float | None = None, name: str | None = None) -> FaultContext:
        """Cut a node's machine off the apiserver (its containers run on); healed on exit (`node.partition`).

        Unlike `partition(node=...)`, enforced at the apiserver on the node's clients (which retry
        and reconnect by their own backoff), this stops the kubelet's loops and restarts them at heal.
        """
        return self.fault(_named({"type": "node.partition", "target": {"node": node}, "duration": duration}, name))

    def node_condition(self, node: str, type_: str, status: str = "True", *, duration: float | None = None,
                       name: str | None = None) -> FaultContext:
        """Set a node condition (MemoryPressure, Ready=False...); cleared on exit."""
        return self.fault(_named({"type": "node.condition", "target": {"node": node},
                                  "params": {"type": type_, "status": status}, "duration": duration}, name))

    def hold_watch(self, *, component: str, resource: str, event_types: Sequence[str] = (),
                   name: str | None = None, namespace: str | None = None, fields: Sequence[Any] = (),
                   release_on: Spec | None = None, duration: float | None = None, instance: str | None = None,
                   fault_name: str | None = None) -> FaultContext:
        """Hold matching watch events to a component until exit, `duration` or the `release_on` trigger."""
        spec = {"type": "watch.hold", "target": _target(component, instance),
                "match": _match(resource, event_types=event_types, name=name, namespace=namespace, fields=fields),
                "duration": duration}
        if release_on is not None:
            spec["trigger"] = {**release_on, "action": release_on.get("action", "release")}
        return self.fault(_named(spec, fault_name))

    def drop_watch(self, *, component: str, resource: str, event_types: Sequence[str] = (),
                   name: str | None = None, namespace: str | None = None, fields: Sequence[Any] = (),
                   probability: float = 1.0, duration: float | None = None, instance: str | None = None,
                   fault_name: str | None = None) -> FaultContext:
        """Drop matching watch events to a component."""
        return self.fault(_named({"type": "watch.drop", "target": _target(component, instance),
                                  "match": _match(resource, event_types=event_types, name=name, namespace=namespace,
                                                  fields=fields),
                                  "probability": probability, "duration": duration}, fault_name))

    def partition(self, component: str | None = None, *, instance: str | None = None, node: str | None = None,
                  blackhole: bool = False, duration: float | None = None, name: str | None = None) -> FaultContext:
        """Cut a component (or a node's kubelet clients) off the apiserver."""
        target: Spec = {"node": node} if node else _target(component or "*", instance)
        return self.fault(_named({"type": "partition", "target": target,
                                  "params": {"mode": "blackhole" if blackhole else "reset"},
                                  "duration": duration}, name))

    def latency(self, component: str, delay: float, *, jitter: float = 0.0, verbs: Sequence[str] = (),
                resources: Sequence[str] = (), duration: float | None = None, name: str | None = None) -> FaultContext:
        """Add latency to a component's requests (cluster seconds)."""
        match: Spec = {}
        if verbs:
            match["verbs"] = list(verbs)
        if resources:
            match["resources"] = list(resources)
        return self.fault(_named({"type": "request.latency", "target": {"component": component}, "match": match,
                                  "params": {"delay": delay, "jitter": jitter}, "duration": duration}, name))

    def stale_reads(self, component: str, *, revisions: int | None = None, seconds: float | None = None,
                    duration: float | None = None, name: str | None = None) -> FaultContext:
        """Serve a component's gets and lists from the past."""
        params: Spec = {"revisions": revisions} if revisions is not None else {"seconds": seconds}
        return self.fault(_named({"type": "reads.stale", "target": {"component": component}, "params": params,
                                  "duration": duration}, name))

    def pause(self, component: str, *, instance: str | None = None, duration: float | None = None,
              name: str | None = None) -> FaultContext:
        """Pause a component (resumed on exit)."""
        return self.fault(_named({"type": "component.pause", "target": _target(component, instance),
                                  "duration": duration}, name))


def _named(spec: Spec, name: str | None) -> Spec:
    if name:
        spec["name"] = name
    return spec


def _target(component: str, instance: str | None) -> Spec:
    t: Spec = {"component": component}
    if instance:
        t["instance"] = instance
    return t


def _match(resource: str, *, event_types: Sequence[str], name: str | None, namespace: str | None,
           fields: Sequence[Any]) -> Spec:
    m: Spec = {"resources": [resource]}
    if event_types:
        m["eventTypes"] = list(event_types)
    if name is not None:
        m["name"] = name
    if namespace is not None:
        m["namespace"] = namespace
    if fields:
        m["fields"] = list(fields)
    return m


"""The component registry: where every component process says how to reach its admin endpoint.

    PUT    /kubemesh/v1/components/{instance}   {"component", "adminURL", "bugs"?, "nodes"?, "boot"?,
                                                 "lastExitCode"?}
    DELETE /kubemesh/v1/components/{instance}   the process is stopping (answers the entry, or 404)
    GET    /kubemesh/v1/components              {"items": [entry, ...]} sorted by instance

Components register at start and again every few seconds (a restarted apiserver learns them
again), and deregister when they stop (a crashed one leaves its entry until it starts again).
An entry holds what others need to reach or check the process: its admin URL, the bug switches
it runs with (what an attached scenario run checks against its mode), for a kubelet, the
nodes it hosts, and the process run it comes from (`boot`, drawn at each process start, and
`lastExitCode`, how the previous run ended when that is known): listeners (the control plane's
mirror pods, `kubemesh.apiserver.controlplane`) hear of every registration and deregistration.
Chaos forwards node faults to the kubelet that registered the node, never by port: kubelets in
containers all listen on the same one.

Entries are kept in memory only; nothing here outlives the process. Over etcd with several
apiservers, `kubemesh.apiserver.sharedstate.SharedRegistry` copies them between the apiservers
(`publish`), and each entry names the apiserver it registered with (`apiserver`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from aiohttp import web

from kubemesh.apiserver import errors
from kubemesh.apiserver.serving import read_body, render
from kubemesh.services.machinery.clock import Clock

Entry = dict[str, Any]


class RegistrationListener(Protocol):
    """Told of every registration (the periodic ones included) and every deregistration."""

    def registered(self, entry: Entry) -> None:
        """An instance registered (again)."""
        ...

    def deregistered(self, entry: Entry) -> None:
        """An instance said it is stopping."""
        ...


class ComponentRegistry:
    """Every registered component instance (see the module docstring)."""

    def __init__(self, *, clock: Clock) -> None:
        self._clock = clock
        self.entries: dict[str, Entry] = {}
        """Entries by instance name."""
        self.listeners: list[RegistrationListener] = []
        self.apiserver: str | None = None
        """The name of this apiserver, written into each entry it takes (None: not named, one apiserver)."""
        self.publish: Callable[[str, Entry | None], None] | None = None
        """Told of every entry this apiserver takes or forgets (the instance, the entry or None), to share it."""

    def register(self, instance: str, body: Any) -> Entry:
        """Validate and keep one registration; raises a 422 `StatusError` naming what is wrong."""
        if not isinstance(body, dict) or not isinstance(body.get("adminURL"), str):
            raise errors.StatusError(422, "Invalid", "a registration needs component, instance and adminURL")
        entry: Entry = {"component": str(body.get("component", "")), "instance": instance,
                        "adminURL": body["adminURL"], "registeredAt": self._clock.now()}
        for key, what in (("bugs", "bug switch names"), ("nodes", "node names")):
            value = body.get(key)
            if value is None:
                continue
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise errors.StatusError(422, "Invalid", f"{key} must be a list of {what}")
            entry[key] = sorted(set(value))
        boot, last_exit = body.get("boot"), body.get("lastExitCode")
        if boot is not None and not isinstance(boot, str):
            raise errors.StatusError(422, "Invalid", "boot must be a string")
        if last_exit is not None and (not isinstance(last_exit, int) or isinstance(last_exit, bool)):
            raise errors.StatusError(422, "Invalid", "lastExitCode must be an integer")
        if boot is not None:
            entry["boot"] = boot
        if last_exit is not None:
            entry["lastExitCode"] = last_exit
        if self.apiserver is not None:
            entry["apiserver"] = self.apiserver
        self.entries[instance] = entry
        for listener in self.listeners:
            listener.registered(entry)
        if self.publish is not None:
            self.publish(instance, entry)
        return entry

    def registered_self(self, *, component: str, instance: str, boot: str, last_exit_code: int | None) -> None:
        """Tell the listeners of a run of the apiserver itself (it has no admin endpoint, so no entry)."""
        entry: Entry = {"component": component, "instance": instance, "boot": boot}
        if last_exit_code is not None:
            entry["lastExitCode"] = last_exit_code
        for listener in self.listeners:
            listener.registered(entry)

    def deregister(self, instance: str) -> Entry | None:
        """Forget an instance that is stopping; its entry, or None if it had none."""
        entry = self.entries.pop(instance, None)
        if entry is not None:
            for listener in self.listeners:
                listener.deregistered(entry)
            if self.publish is not None:
                self.publish(instance, None)
        return entry

    def of_component(self, component: str) -> list[Entry]:
        """The entries of every instance of a component."""
        return [e for e in self.entries.values() if e.get("component") == component]

    def admin_url(self, instance: str) -> str | None:
        """The admin URL an instance registered (no trailing slash), or None."""
        entry = self.entries.get(instance)
        return str(entry["adminURL"]).rstrip("/") if entry and entry.get("adminURL") else None

    def kubelet_of(self, node: str) -> str | None:
        """The admin URL of the kubelet that registered `node`, or None."""
        for e in self.of_component("kubelet"):
            if node in (e.get("nodes") or ()) and e.get("adminURL"):
                return str(e["adminURL"]).rstrip("/")
        return None

    def routes(self) -> list[web.RouteDef]:
        """`PUT /kubemesh/v1/components/{instance}` and `GET /kubemesh/v1/components`."""

        async def put(request: web.Request) -> web.Response:
            body, _ = await read_body(request)
            return render(request, self.register(request.match_info["instance"], body))

        async def delete(request: web.Request) -> web.Response:
            instance = request.match_info["instance"]
            entry = self.deregister(instance)
            if entry is None:
                raise errors.StatusError(404, "NotFound", f'components "{instance}" not found',
                                         details={"name": instance, "group": "kubemesh.io", "kind": "components"})
            return render(request, entry)

        async def list_(request: web.Request) -> web.Response:
            return render(request, {"items": sorted(self.entries.values(), key=lambda e: e["instance"])})

        return [web.put("/kubemesh/v1/components/{instance}", put),
                web.delete("/kubemesh/v1/components/{instance}", delete),
                web.get("/kubemesh/v1/components", list_)]

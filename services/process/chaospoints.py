"""Named chaos points in component code, and the admin routes chaos arms them through.

A component marks the exact steps where a crash or a pause is interesting (Sieve's
intermediate states, e.g. between the two writes of one reconcile)::

    self.points.declare("nodelifecycle.after_taint")      # in the controller's constructor
    await self.points.hit("nodelifecycle.after_taint")    # at the step

The points belong to one process: its `ComponentContext.points`, handed to the controllers
that declare them (there is no module-level registry, so in-process tests never share one).

Unarmed, a point costs a dict lookup. Armed (`POST /chaos/points/{name}` on the admin
endpoint, which the apiserver's `component.chaosPoint` fault calls), the `after`+1-th hit
and the following ones, `count` times in all, either crash the process (exit code, or an
in-place restart with `restart: true`) or pause the task that hit it until the point is
disarmed (`DELETE /chaos/points/{name}`) or resumed. Points are declared by being hit or
with `declare()`, so `GET /chaos/points` can list them before they fire.

Admin routes (`install_routes(admin, informers=...)` on an `AdminServer`, or `routes(...)`
for a plain aiohttp app); bodies and answers are JSON:

    GET    /chaos/points                      {"points": [{"name","hits","armed"}]}
    POST   /chaos/points/{name}               {"action": "crash"|"pause", "count"?: 1, "after"?: 0,
                                               "exitCode"?: 1, "restart"?: false}
    DELETE /chaos/points/{name}               disarm, and release tasks paused there
    POST   /chaos/crash                       {"exitCode"?: 1, "restart"?: false, "apiserver"?: URL}: after
                                               answering (with `apiserver`, the restarted process talks
                                               to that apiserver: a reconnection to another one of an
                                               HA control plane)
    GET    /chaos/informers                   {"informers": [{"name","frozen"}]}
    POST   /chaos/informers/{name}/freeze     the informer stops applying events (stale cache)
    POST   /chaos/informers/{name}/unfreeze   it applies what it buffered
    GET    /chaos/handler-drops               {"drops": [{"id","informer","resource",...counters}]}
    POST   /chaos/handler-drops/{id}          {"resources": [...], "eventTypes"?, "namespace"?, "name"?,
                                               "occurrence"?}: every informer of those resources
                                               stops telling its handlers about matching changes
                                               (its store still applies them; each informer counts
                                               its own occurrence; 404 if none)
    DELETE /chaos/handler-drops/{id}          disarm; answers the counters (dropped stays dropped)

`restart: true` re-executes the process in place (same pid, same arguments), which is what
a supervisor restarting a crashed component looks like to the rest of the mesh.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from aiohttp import web

from kubemesh.services.machinery.informing import HANDLER_EVENT_TYPES, HandlerDrop
from kubemesh.services.process.runs import LAST_EXIT_ENV

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Crash = Callable[..., None]
"""`crash_process`: (exit code, restart, apiserver=URL when one is given)."""


class Freezable(Protocol):
    """What an informer offers chaos (`kubemesh.services.machinery.informing.Informer`)."""

    def freeze(self) -> None:
        """Stop applying events."""

    def unfreeze(self) -> None:
        """Apply what was buffered."""


class RouteTable(Protocol):
    """`kubemesh.services.process.admin.AdminServer.add_route`."""

    def add_route(self, method: str, path: str, handler: Handler) -> None:
        """Serve a route."""


def crash_process(exit_code: int, restart: bool, *, apiserver: str | None = None) -> None:
    """Exit now without cleanup (a crash), or re-execute this process in place (against `apiserver` if given)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if restart:  # the next run reports this one's exit code (kubemesh.services.process.runs)
        os.environ[LAST_EXIT_ENV] = str(exit_code)
        argv = list(sys.orig_argv[1:])
        if apiserver is not None:
            argv = with_apiserver(argv, apiserver)
        os.execv(sys.executable, [sys.executable, *argv])
    os._exit(exit_code)


def with_apiserver(argv: list[str], url: str) -> list[str]:
    """`argv` with its `--apiserver` value replaced by `url` (added when it has none)."""
    out: list[str] = []
    i, found = 0, False
    while i < len(argv):
        arg = argv[i]
        if arg == "--apiserver" and i + 1 < len(argv):
            out += [arg, url]
            i, found = i + 2, True
            continue
        if arg.startswith("--apiserver="):
            out.append(f"--apiserver={url}")
            found = True
        else:
            out.append(arg)
        i += 1
    return out if found else [*out, "--apiserver", url]


@dataclass
class _Arm:
    action: str
    count: int = 1
    after: int = 0
    exit_code: int = 1
    restart: bool = False
    fired: int = 0
    released: asyncio.Event = field(default_factory=asyncio.Event)


class ChaosPoints:
    """The chaos points of one process."""

    def __init__(self, *, crash: Crash = crash_process) -> None:
        self.crash = crash
        self.hits: dict[str, int] = {}
        self.armed: dict[str, _Arm] = {}
        self.paused: dict[str, int] = {}

    def declare(self, *names: str) -> None:
        """Make points known before they are hit."""
        for n in names:
            self.hits.setdefault(n, 0)

    def arm(self, name: str, *, action: str, count: int = 1, after: int = 0, exit_code: int = 1,
            restart: bool = False) -> None:
        """Fire `action` on the hits after the first `after`, `count` times."""
        if action not in ("crash", "pause"):
            raise ValueError("action must be crash or pause")
        if count < 1 or after < 0:
            raise ValueError("count must be >= 1 and after >= 0")
        self.disarm(name)
        self.hits.setdefault(name, 0)
        self.armed[name] = _Arm(action, count, after, exit_code, restart)

    def disarm(self, name: str) -> bool:
        """Disarm a point and release the tasks paused at it; whether it was armed."""
        arm = self.armed.pop(name, None)
        if arm is None:
            return False
        arm.released.set()
        return True

    async def hit(self, name: str) -> None:
        """The code passed point `name`."""
        seen = self.hits.get(name, 0)
        self.hits[name] = seen + 1
        arm = self.armed.get(name)
        if arm is None or seen < arm.after or arm.fired >= arm.count:
            return
        arm.fired += 1
        if arm.action == "crash":
            self.crash(arm.exit_code, arm.restart)
            return
        self.paused[name] = self.paused.get(name, 0) + 1
        try:
            await arm.released.wait()
        finally:
            self.paused[name] -= 1

    def describe(self) -> list[dict[str, Any]]:
        """Every known point."""
        out = []
        for name in sorted(self.hits):
            arm = self.armed.get(name)
            out.append({"name": name, "hits": self.hits[name], "paused": self.paused.get(name, 0),
                        "armed": None if arm is None else {"action": arm.action, "count": arm.count,
                                                           "after": arm.after, "fired": arm.fired}})
        return out


def _json(value: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(value), content_type="application/json")


def _status(code: int, reason: str, message: str) -> web.Response:
    return _json({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                  "message": message, "reason": reason, "code": code}, code)


async def _body(request: web.Request) -> dict[str, Any]:
    raw = await request.read()
    if not raw:
        return {}
    value = orjson.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("the body must be a JSON object")
    return value


def handlers(*, points: ChaosPoints,
             informers: Mapping[str, Freezable] | Callable[[], Mapping[str, Freezable]] | None = None,
             crash: Crash | None = None, crash_delay: float = 0.05) -> list[tuple[str, str, Handler]]:
    """(method, path, handler) of every chaos admin route."""
    pts = points

    def informer_map() -> Mapping[str, Freezable]:
        if informers is None:
            return {}
        return informers() if callable(informers) else informers

    async def list_points(request: web.Request) -> web.StreamResponse:
        return _json({"points": pts.describe()})

    async def arm(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        try:
            b = await _body(request)
            pts.arm(name, action=str(b.get("action")), count=int(b.get("count", 1)), after=int(b.get("after", 0)),
                    exit_code=int(b.get("exitCode", 1)), restart=bool(b.get("restart", False)))
        except (ValueError, TypeError) as exc:
            return _status(400, "BadRequest", str(exc))
        return _json({"point": name, "armed": True})

    async def disarm(request: web.Request) -> web.StreamResponse:
        name = request.match_info["name"]
        return _json({"point": name, "armed": False, "changed": pts.disarm(name)})

    async def crash_now(request: web.Request) -> web.StreamResponse:
        try:
            b = await _body(request)
            code, restart = int(b.get("exitCode", 1)), bool(b.get("restart", False))
            apiserver = b.get("apiserver")
            if apiserver is not None and (not isinstance(apiserver, str) or not restart):
                raise ValueError("apiserver: the URL a restarted process talks to (with restart: true)")
        except (ValueError, TypeError) as exc:
            return _status(400, "BadRequest", str(exc))
        # Answer first, then die: the apiserver then knows the crash was ordered (ok, not info).
        die = functools.partial(crash or pts.crash, code, restart, **({"apiserver": apiserver} if apiserver else {}))
        asyncio.get_running_loop().call_later(crash_delay, die)
        return _json({"crashing": True, "exitCode": code, "restart": restart,
                      **({"apiserver": apiserver} if apiserver else {})})

    async def list_informers(request: web.Request) -> web.StreamResponse:
        return _json({"informers": [{"name": n, "frozen": bool(getattr(i, "_frozen", False))}
                                    for n, i in sorted(informer_map().items())]})

    def informer_op(op: str) -> Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            name = request.match_info["name"]
            inf = informer_map().get(name)
            if inf is None:
                return _status(404, "NotFound", f"no informer {name!r} (known: {', '.join(sorted(informer_map()))})")
            inf.freeze() if op == "freeze" else inf.unfreeze()
            return _json({"informer": name, "frozen": op == "freeze"})

        return handler

    def drop_targets(resources: list[str] | None = None) -> list[tuple[str, str, Any]]:
        # (informer name, resource, informer) of the informers that can drop handler
        # notifications (`kubemesh.services.machinery.informing.Informer`), of some resources or of all.
        out = []
        for name, inf in sorted(informer_map().items()):
            resource = str(getattr(getattr(inf, "kind", None), "plural", None) or name)
            if (resources is None or resource in resources) and callable(getattr(inf, "add_handler_drop", None)):
                out.append((name, resource, inf))
        return out

    async def list_drops(request: web.Request) -> web.StreamResponse:
        drops = []
        for name, resource, inf in drop_targets():
            for rule_id, rule in sorted(inf.handler_drops.items()):
                drops.append({"id": rule_id, "informer": name, "resource": resource, **rule.describe()})
        return _json({"drops": drops})

    async def add_drop(request: web.Request) -> web.StreamResponse:
        rule_id = request.match_info["id"]
        try:
            b = await _body(request)
            resources = b.get("resources")
            if not isinstance(resources, list) or not resources or not all(isinstance(r, str) for r in resources):
                raise ValueError("resources: a non-empty list of resource names is required")
            events = b.get("eventTypes") or []
            if not isinstance(events, list) or any(e not in HANDLER_EVENT_TYPES for e in events):
                raise ValueError("eventTypes: a list of ADDED, MODIFIED, DELETED")
            namespace, obj_name = b.get("namespace"), b.get("name")
            for key, value in (("namespace", namespace), ("name", obj_name)):
                if value is not None and not isinstance(value, str):
                    raise ValueError(f"{key}: must be a string")
            occurrence = b.get("occurrence")
            if occurrence is not None and (isinstance(occurrence, bool) or not isinstance(occurrence, int)
                                           or occurrence < 1):
                raise ValueError("occurrence: an integer >= 1")
        except ValueError as exc:
            return _status(400, "BadRequest", str(exc))
        targets = drop_targets(resources)
        if not targets:
            return _status(404, "NotFound", f"no informer of {', '.join(resources)} "
                                            f"(informers: {', '.join(sorted(informer_map())) or 'none'})")
        for _name, _resource, inf in targets:
            inf.add_handler_drop(rule_id, HandlerDrop(event_types=frozenset(events), namespace=namespace,
                                                      name=obj_name, occurrence=occurrence))
        return _json({"id": rule_id, "informers": [n for n, _, _ in targets]})

    async def remove_drop(request: web.Request) -> web.StreamResponse:
        rule_id = request.match_info["id"]
        removed = []
        for name, _resource, inf in drop_targets():
            rule = inf.remove_handler_drop(rule_id)
            if rule is not None:
                removed.append({"informer": name, **rule.describe()})
        return _json({"id": rule_id, "removed": removed})

    return [
        ("GET", "/chaos/points", list_points),
        ("POST", "/chaos/points/{name}", arm),
        ("DELETE", "/chaos/points/{name}", disarm),
        ("POST", "/chaos/crash", crash_now),
        ("GET", "/chaos/informers", list_informers),
        ("POST", "/chaos/informers/{name}/freeze", informer_op("freeze")),
        ("POST", "/chaos/informers/{name}/unfreeze", informer_op("unfreeze")),
        ("GET", "/chaos/handler-drops", list_drops),
        ("POST", "/chaos/handler-drops/{id}", add_drop),
        ("DELETE", "/chaos/handler-drops/{id}", remove_drop),
    ]


def install_routes(admin: RouteTable, **kwargs: Any) -> None:
    """Add the chaos admin routes to an `AdminServer` (see `handlers` for the arguments)."""
    for method, path, handler in handlers(**kwargs):
        admin.add_route(method, path, handler)


def routes(**kwargs: Any) -> list[web.RouteDef]:
    """The chaos admin routes for a plain aiohttp app."""
    return [web.route(m, p, h) for m, p, h in handlers(**kwargs)]

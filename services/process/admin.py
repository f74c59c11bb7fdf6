"""Every process's admin endpoint: health, metrics, debug and chaos hooks.

`AdminServer` serves, as Kubernetes components do:

* `/healthz`, `/livez`, `/readyz`: `ok` (200) when every registered check of that endpoint
  passes; otherwise 500 with one `[+]name ok` / `[-]name failed: reason withheld` line per
  check. `?verbose` lists the checks also on success; `?exclude=name` (repeatable) skips
  checks; `/readyz/<name>` runs one check. Health endpoints never require a token, so that
  probes and `kubemesh up` can poll them. Built-in checks: `ping` (all three) and
  `shutdown` (readyz; fails once `set_shutting_down()` was called, so that a stopping
  process is taken out of rotation before it stops answering).
* `/metrics`: the process's `Metrics` registry in Prometheus text format.
* component routes added with `add_route(method, path, handler)` at any time, also after
  `start()` (aiohttp freezes its router on start, so they are dispatched from a table);
  path segments may be `{name}` placeholders, read as `request.match_info["name"]`.

When a token is configured, everything except the health endpoints needs
`Authorization: Bearer <token>`; otherwise the answer is 401 with a `metav1.Status` body.
The server binds 127.0.0.1 unless told otherwise; port 0 picks a free port, which `start()`
returns.
"""

from __future__ import annotations

import hmac
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal, cast

import orjson
import structlog
from aiohttp import web

from kubemesh.services.process.metrics import CONTENT_TYPE, Metrics

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Check = Callable[[], bool | Awaitable[bool]]
"""A health check: returns True when healthy; False or an exception means failing."""

Endpoint = Literal["healthz", "livez", "readyz"]
ENDPOINTS: Final[tuple[Endpoint, ...]] = ("healthz", "livez", "readyz")

_log = structlog.get_logger("kubemesh.services.process.admin")


@dataclass(frozen=True, kw_only=True)
class AdminSettings:
    """Where the admin endpoint listens and who may use it."""

    host: str = "127.0.0.1"
    """Address to bind; 127.0.0.1 unless the process must be reachable from elsewhere."""
    port: int = 0
    """Port to bind; 0 picks a free port."""
    token: str | None = None
    """Bearer token required on every non-health route; None disables authentication."""


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    """A metav1.Status failure document."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def status_response(code: int, reason: str, message: str) -> web.Response:
    """A JSON metav1.Status failure response."""
    return web.Response(status=code, body=orjson.dumps(status_body(code, reason, message)),
                        content_type="application/json")


def json_response(value: Any, *, status: int = 200) -> web.Response:
    """A JSON response encoded with orjson."""
    return web.Response(status=status, body=orjson.dumps(value), content_type="application/json")


@dataclass(frozen=True, slots=True)
class _Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler


def _compile(path: str) -> re.Pattern[str]:
    if not path.startswith("/"):
        raise ValueError(f"route path must start with '/': {path!r}")
    parts = []
    for segment in path.split("/"):
        m = re.fullmatch(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", segment)
        parts.append(f"(?P<{m.group(1)}>[^/]+)" if m else re.escape(segment))
    return re.compile("/".join(parts))


class AdminServer:
    """The admin HTTP endpoint of one process."""

    def __init__(self, *, component: str, instance: str, settings: AdminSettings | None = None,
                 metrics: Metrics | None = None) -> None:
        self.component = component
        self.instance = instance
        self.settings = settings or AdminSettings()
        self.metrics = metrics or Metrics()
        self._checks: dict[Endpoint, dict[str, Check]] = {e: {} for e in ENDPOINTS}
        self._routes: list[_Route] = []
        self._runner: web.AppRunner | None = None
        self._port: int | None = None
        self._shutting_down = False
        self._log = _log.bind(component=component, instance=instance)
        for endpoint in ENDPOINTS:
            self.add_check("ping", _ping, endpoints=(endpoint,))
        self.add_check("shutdown", self._not_shutting_down, endpoints=("readyz",))

    # -- registration ---------------------------------------------------------------------------

    def add_check(self, name: str, check: Check, *, endpoints: Iterable[Endpoint] = ENDPOINTS) -> None:
        """Register (or replace) a named check on the given health endpoints."""
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
            raise ValueError(f"invalid check name {name!r}")
        for endpoint in endpoints:
            self._checks[endpoint][name] = check

    def add_route(self, method: str, path: str, handler: Handler) -> None:
        """Serve `handler` for `method path` (token-protected when a token is set)."""
        top = path.strip("/").split("/", 1)[0]
        if top in (*ENDPOINTS, "metrics"):
            raise ValueError(f"{path!r} is reserved")
        self._routes.append(_Route(method.upper(), _compile(path), handler))

    def add_routes(self, routes: Iterable[web.RouteDef]) -> None:
        """Serve aiohttp route definitions (`web.get(...)`, `web.post(...)`) via `add_route`."""
        for route in routes:
            self.add_route(route.method, route.path, cast(Handler, route.handler))

    def set_shutting_down(self) -> None:
        """Fail readiness from now on (the process is stopping)."""
        self._shutting_down = True

    def _not_shutting_down(self) -> bool:
        if self._shutting_down:
            raise RuntimeError("process is shutting down")
        return True

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def port(self) -> int | None:
        """The bound port once started."""
        return self._port

    @property
    def url(self) -> str:
        """`http://host:port` of the running server."""
        if self._port is None:
            raise RuntimeError("admin server not started")
        host = self.settings.host
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self._port}"

    def make_app(self) -> web.Application:
        """The aiohttp application (exposed for in-process tests)."""
        app = web.Application(middlewares=[self._auth_middleware])
        for endpoint in ENDPOINTS:
            app.router.add_get(f"/{endpoint}", self._health)
            app.router.add_get(f"/{endpoint}/{{check}}", self._health_one)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        return app

    async def start(self) -> int:
        """Bind and serve; returns the port."""
        if self._runner is not None:
            raise RuntimeError("admin server already started")
        runner = web.AppRunner(self.make_app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, self.settings.host, self.settings.port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        addresses = runner.addresses
        self._port = int(addresses[0][1]) if addresses else self.settings.port
        self._log.info("admin endpoint listening", url=self.url)
        return self._port

    async def stop(self) -> None:
        """Stop serving (idempotent)."""
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    # -- handlers -------------------------------------------------------------------------------

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        token = self.settings.token
        top = request.path.strip("/").split("/", 1)[0]
        if token and top not in ENDPOINTS:
            header = request.headers.get("Authorization", "")
            scheme, _, given = header.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
                return status_response(401, "Unauthorized", "Unauthorized")
        return await handler(request)

    async def _run_checks(self, endpoint: Endpoint, names: Iterable[str]) -> list[tuple[str, str | None]]:
        results: list[tuple[str, str | None]] = []
        for name in names:
            check = self._checks[endpoint][name]
            try:
                outcome = check()
                if inspect.isawaitable(outcome):
                    outcome = await outcome
                error = None if outcome else "check returned false"
            except Exception as exc:  # a failing check is a result, not an error of the endpoint
                error = str(exc) or type(exc).__name__
            results.append((name, error))
        return results

    async def _health(self, request: web.Request) -> web.Response:
        endpoint: Endpoint = request.path.strip("/")  # type: ignore[assignment]
        excluded = set(request.query.getall("exclude", []))
        names = [n for n in self._checks[endpoint] if n not in excluded]
        results = await self._run_checks(endpoint, names)
        failed = any(err is not None for _, err in results)
        verbose = "verbose" in request.query
        if not failed and not verbose:
            return web.Response(text="ok")
        lines = [f"[+]{n} ok" if err is None else f"[-]{n} failed: reason withheld" for n, err in results]
        lines.extend(f"[+]{n} excluded: ok" for n in sorted(excluded) if n in self._checks[endpoint])
        lines.append(f"{endpoint} check {'failed' if failed else 'passed'}")
        if failed:
            self._log.info("health check failed", endpoint=endpoint,
                           failed={n: err for n, err in results if err is not None})
        return web.Response(status=500 if failed else 200, text="\n".join(lines) + "\n")

    async def _health_one(self, request: web.Request) -> web.Response:
        endpoint: Endpoint = request.path.strip("/").split("/", 1)[0]  # type: ignore[assignment]
        name = request.match_info["check"]
        if name not in self._checks[endpoint]:
            return web.Response(status=404, text="404 page not found\n")
        [(_, err)] = await self._run_checks(endpoint, [name])
        if err is None:
            return web.Response(text="ok")
        return web.Response(status=500, text=f"internal server error: {err}\n")

    async def _metrics(self, request: web.Request) -> web.Response:
        resp = web.Response(body=self.metrics.exposition())
        resp.headers["Content-Type"] = CONTENT_TYPE
        return resp

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        path_matched = False
        for route in self._routes:
            m = route.pattern.fullmatch(request.path)
            if m is None:
                continue
            path_matched = True
            if route.method not in ("*", request.method):
                continue
            request.match_info.update(m.groupdict())
            return await route.handler(request)
        if path_matched:
            return status_response(405, "MethodNotAllowed", f"method {request.method} not allowed")
        return status_response(404, "NotFound", f"the server could not find {request.path}")


def _ping() -> bool:
    return True

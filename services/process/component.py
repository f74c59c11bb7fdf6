"""The common bootstrap of every component process.

A component's `__main__` is thin::

    async def run(ctx: ComponentContext, args: argparse.Namespace) -> None:
        ...  # until ctx.stop is set

    def main() -> int:
        parser = argparse.ArgumentParser(prog="python -m kubemesh.scheduler")
        parser.add_argument("--workers", type=int, default=4)
        return component.main(component="scheduler", run=run, parser=parser)

`main` parses the common flags (`common_arguments`) on top of the component's own,
configures JSON logging, builds the `ApiClient`, fetches the cluster clock from the
apiserver (`GET /clock`, retried until it answers or `--startup-timeout` passes), derives
the seeded RNG, reads the bug switches, starts the admin endpoint, registers it with the
apiserver (`PUT /kubemesh/v1/components/{instance}` with its admin URL and its bug switches,
repeated every `--register-interval` wall seconds so that a restarted apiserver learns it
again; a 404 is ignored), and runs `run(ctx, args)` under a `kubemesh.services.process.supervising.Supervisor`.
SIGTERM or SIGINT (or `run` returning, or any supervised task failing) leads to the one staged
shutdown: readiness fails, `ctx.on_stop` hooks run, tasks drain, the rest are cancelled, stuck
tasks are named.
The exit code is 0 for a clean shutdown and 1 otherwise (2 for bad flags).

Admin hooks added to every component (token-protected like every non-health route):

* `POST /chaos/clock` with `{"skew": s}` sets this process's clock skew to `s` cluster
  seconds; `{"jump": s}` moves it by `s`. Answers `{"skew", "now"}`. Sleepers are not woken
  early (see `kubemesh.services.machinery.clock`).
* `POST /chaos/pause` and `POST /chaos/resume` close and open `ctx.pause`. Pausing is
  cooperative: components call `await ctx.gate()` in their loops (before taking a queue
  key, before a heartbeat) and block there while paused. Answers `{"paused": bool}`.
* `GET /debug/tasks`: the names of the supervised tasks still running.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import os
import random
import socket
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import orjson
from aiohttp import web
from structlog.typing import FilteringBoundLogger

from kubemesh.services.machinery.client import ApiClient, ApiError, NotFoundError
from kubemesh.services.machinery.clock import Clock, ClusterClock, component_rng
from kubemesh.services.model import codec, profiles
from kubemesh.services.model.bugs import UnknownBugError, parse_bugs, split_names
from kubemesh.services.process import chaospoints, startup
from kubemesh.services.process.admin import AdminServer, AdminSettings, json_response, status_response
from kubemesh.services.process.chaospoints import ChaosPoints, Freezable
from kubemesh.services.process.gctuning import GcSettings, SurvivorFreezer
from kubemesh.services.process.logs import LEVELS, configure_logging
from kubemesh.services.process.metrics import Metrics
from kubemesh.services.process.runs import this_run
from kubemesh.services.process.supervising import (
    ShutdownReport,
    ShutdownSettings,
    StopHook,
    Supervisor,
    TaskHandle,
    install_signal_handlers,
)

T = TypeVar("T")

TOKEN_ENV = "KUBEMESH_TOKEN"
APISERVER_ENV = "KUBEMESH_APISERVER"
SEED_ENV = "KUBEMESH_SEED"


class PauseGate:
    """A gate that chaos can close: `await wait()` blocks while paused."""

    def __init__(self) -> None:
        self._open = asyncio.Event()
        self._open.set()

    @property
    def paused(self) -> bool:
        """Whether the gate is closed."""
        return not self._open.is_set()

    def pause(self) -> None:
        """Close the gate."""
        self._open.clear()

    def resume(self) -> None:
        """Open the gate, releasing every waiter."""
        self._open.set()

    async def wait(self) -> None:
        """Return at once if open, else when resumed."""
        await self._open.wait()


@dataclass(frozen=True, kw_only=True)
class ComponentContext:
    """What a component's `run` receives: its identity, collaborators and lifecycle."""

    component: str
    instance: str
    client: ApiClient
    clock: Clock
    """Cluster time (a `ClusterClock` in a real process)."""
    rng: random.Random
    """Seeded from `--seed`, the component and the instance."""
    bugs: frozenset[str]
    """The bug switches of this component that are on."""
    admin: AdminServer
    log: FilteringBoundLogger
    stop: asyncio.Event
    """Set when the process begins to stop; `run` should return soon after."""
    metrics: Metrics
    pause: PauseGate
    """Closed by `POST /chaos/pause`; see `gate()`."""
    supervisor: Supervisor
    args: argparse.Namespace
    """The parsed command line (common and component flags)."""
    token: str | None = None
    """The bearer token this process uses and requires (None: no authentication)."""
    informers: dict[str, Freezable] = field(default_factory=dict)
    """The component's informers by resource name; chaos can freeze one (a stale cache)."""
    points: ChaosPoints = field(default_factory=ChaosPoints)
    """The process's chaos points (`kubemesh.services.process.chaospoints`): hand them to the
    controllers that declare some; chaos arms them through the admin endpoint."""
    registration: dict[str, Any] = field(default_factory=dict)
    """Facts the component publishes in its registration besides its admin URL and bug switches
    (the kubelet: the nodes it hosts, so that node faults reach it); change them with `publish`."""
    registration_changed: asyncio.Event = field(default_factory=asyncio.Event)

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str, finishable: bool = False) -> TaskHandle[T]:
        """Start a named, supervised long-lived task (see `Supervisor.spawn`)."""
        return self.supervisor.spawn(coro, name=name, finishable=finishable)

    def on_stop(self, hook: StopHook, *, name: str | None = None) -> None:
        """Run `hook` when shutdown begins (e.g. `queue.shutdown`)."""
        self.supervisor.on_stop(hook, name=name)

    def publish(self, **facts: Any) -> None:
        """Add facts to the registration and register again now (not at the next interval)."""
        self.registration.update(facts)
        self.registration_changed.set()

    @property
    def paused(self) -> bool:
        """Whether chaos has paused this component."""
        return self.pause.paused

    async def gate(self) -> None:
        """Block while the component is paused (call it in work loops)."""
        await self.pause.wait()


Run = Callable[[ComponentContext, argparse.Namespace], Awaitable[None]] | Callable[[ComponentContext], Awaitable[None]]
"""`run(ctx, args)`, or `run(ctx)` (then the flags are `ctx.args`)."""


def _call_run(run: Run, ctx: ComponentContext) -> Awaitable[None]:
    """Call `run` with `(ctx, args)` or `(ctx)`, whichever it accepts."""
    try:
        params = list(inspect.signature(run).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) >= 2 or any(p.kind is p.VAR_POSITIONAL for p in params):
        return cast(Callable[[ComponentContext, argparse.Namespace], Awaitable[None]], run)(ctx, ctx.args)
    return cast(Callable[[ComponentContext], Awaitable[None]], run)(ctx)


def common_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the flags every component accepts."""
    g = parser.add_argument_group("kubemesh")
    g.add_argument("--apiserver", default=os.environ.get(APISERVER_ENV, "http://127.0.0.1:6443"),
                   help=f"apiserver URL (env {APISERVER_ENV})")
    g.add_argument("--token-file", default=None,
                   help=f"file holding the bearer token (default: env {TOKEN_ENV})")
    g.add_argument("--instance", default=None, help="instance name (default <component>-<host>-<pid>)")
    g.add_argument("--admin-host", default="127.0.0.1", help="admin endpoint address")
    g.add_argument("--admin-port", type=int, default=0, help="admin endpoint port (0: any free port)")
    g.add_argument("--bugs", default="", help="comma-separated bug switches to turn on (-NAME: off)")
    profiles.add_argument(g)
    g.add_argument("--seed", type=int, default=_env_int(SEED_ENV), help=f"RNG seed (env {SEED_ENV})")
    g.add_argument("--log-level", default="info", choices=LEVELS)
    g.add_argument("--encoding", default="msgpack", choices=("msgpack", "json"))
    g.add_argument("--startup-timeout", type=float, default=30.0,
                   help="wall seconds to wait for the apiserver at startup")
    g.add_argument("--register-interval", type=float, default=10.0,
                   help="wall seconds between registrations with the apiserver")
    g.add_argument("--drain-timeout", type=float, default=5.0,
                   help="wall seconds tasks may take to finish after SIGTERM")
    g.add_argument("--cancel-timeout", type=float, default=2.0,
                   help="wall seconds cancelled tasks may take before they count as stuck")
    return parser


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    try:
        return int(value) if value else None
    except ValueError:
        return None


def default_instance(component: str) -> str:
    """`<component>-<hostname>-<pid>`."""
    return f"{component}-{socket.gethostname()}-{os.getpid()}"


def read_token(token_file: str | None) -> str | None:
    """The bearer token from a file, else from `KUBEMESH_TOKEN`, else None."""
    if token_file:
        with open(token_file, encoding="utf-8") as f:
            return f.read().strip() or None
    return os.environ.get(TOKEN_ENV) or None


async def fetch_clock(client: ApiClient, *, wait_for: float, log: FilteringBoundLogger) -> ClusterClock:
    """The apiserver's cluster clock, retried until it answers.

    Raises:
        TimeoutError: the apiserver did not answer within `wait_for` wall seconds.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait_for
    # Components start together with the apiserver (the launcher's eager start), so the first
    # attempts usually fail with a refused connection, which costs next to nothing on loopback:
    # retry every 50 ms for the first seconds so that no back-off delay is added to a cold start,
    # and back off (to 1 s) only for an apiserver that is slow to come or away.
    fast_until = loop.time() + 5.0
    delay = 0.05
    attempt = 0
    while True:
        remaining = deadline - loop.time()
        try:
            async with asyncio.timeout(max(remaining, 0.001)):
                doc = await client.get_clock()
            return ClusterClock.from_document(doc)
        except (ApiError, TimeoutError, KeyError, TypeError, ValueError) as exc:
            if loop.time() + delay >= deadline:
                raise TimeoutError(f"apiserver {client.base_url} did not answer GET /clock") from exc
            if delay >= 1.0 or attempt % 20 == 0:  # about once a second
                log.info("waiting for the apiserver", error=str(exc) or type(exc).__name__)
            attempt += 1
        await asyncio.sleep(delay)
        if loop.time() >= fast_until:
            delay = min(delay * 2, 1.0)


def advertised_url(admin: AdminServer) -> str:
    """The admin URL others should use (the hostname when bound to every address)."""
    host = admin.settings.host
    if host in ("", "0.0.0.0", "::"):
        return f"http://{socket.gethostname()}:{admin.port}"
    return admin.url


async def register_forever(ctx: ComponentContext, *, interval: float) -> None:
    """Tell the apiserver where this component's admin endpoint is, now and every `interval`."""
    # `bugs`: the switches this process runs with, published read-only through the registry so
    # that a scenario run attached to an existing mesh can check the mesh is in the right mode.
    run = this_run()
    base: dict[str, Any] = {"component": ctx.component, "instance": ctx.instance,
                            "adminURL": advertised_url(ctx.admin), "bugs": sorted(ctx.bugs), "boot": run.boot}
    if run.last_exit_code is not None:
        base["lastExitCode"] = run.last_exit_code
    path = f"/kubemesh/v1/components/{ctx.instance}"
    missing_logged = False
    while not ctx.stop.is_set():
        ctx.registration_changed.clear()
        body = {**base, **ctx.registration}  # published facts (bugs of a profile, nodes) win
        try:
            # JSON whatever the client's encoding: the registry is a small, external-facing API.
            await ctx.client.request("PUT", path, body=body, content_type=codec.JSON, idempotent=True)
        except NotFoundError:
            if not missing_logged:
                ctx.log.info("apiserver has no component registry; will retry")
                missing_logged = True
        except ApiError as exc:
            ctx.log.warning("registration failed", error=str(exc))
        stop = asyncio.ensure_future(ctx.stop.wait())
        changed = asyncio.ensure_future(ctx.registration_changed.wait())
        try:
            await asyncio.wait({stop, changed}, timeout=interval, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            changed.cancel()
    # Stopping (not crashing): say so, so that nothing is routed to an endpoint that is going away
    # (a kubelet scaled away must not keep its nodes' faults). A crash leaves the entry; the next
    # start replaces it.
    with contextlib.suppress(ApiError, TimeoutError):
        async with asyncio.timeout(2.0):
            await ctx.client.request("DELETE", path, idempotent=True)


def install_chaos_routes(ctx: ComponentContext) -> None:
    """Add the clock, pause and debug hooks documented in the module docstring."""

    async def clock_fault(request: web.Request) -> web.Response:
        clock = ctx.clock
        if not isinstance(clock, ClusterClock):
            return status_response(501, "NotImplemented", "this process's clock cannot be skewed")
        try:
            body = orjson.loads(await request.read() or b"{}")
            if "skew" in body:
                clock.skew = float(body["skew"])
            elif "jump" in body:
                clock.jump(float(body["jump"]))
            else:
                return status_response(400, "BadRequest", 'expected {"skew": s} or {"jump": s}')
        except (orjson.JSONDecodeError, TypeError, ValueError, AttributeError) as exc:
            return status_response(400, "BadRequest", f"invalid body: {exc}")
        ctx.log.warning("chaos: clock changed", skew=clock.skew)
        return json_response({"skew": clock.skew, "now": clock.now()})

    async def pause(request: web.Request) -> web.Response:
        ctx.pause.pause()
        ctx.log.warning("chaos: paused")
        return json_response({"paused": True})

    async def resume(request: web.Request) -> web.Response:
        ctx.pause.resume()
        ctx.log.warning("chaos: resumed")
        return json_response({"paused": False})

    async def tasks(request: web.Request) -> web.Response:
        return json_response({"tasks": ctx.supervisor.task_names, "paused": ctx.paused})

    ctx.admin.add_route("POST", "/chaos/clock", clock_fault)
    ctx.admin.add_route("POST", "/chaos/pause", pause)
    ctx.admin.add_route("POST", "/chaos/resume", resume)
    ctx.admin.add_route("GET", "/debug/tasks", tasks)
    # Informer freezes, named chaos points and crashes (see kubemesh.services.process.chaospoints).
    chaospoints.install_routes(ctx.admin, points=ctx.points, informers=lambda: ctx.informers)


async def run_component(*, component: str, run: Run, args: argparse.Namespace, instance: str,
                        bugs: frozenset[str], token: str | None) -> ShutdownReport:
    """The asynchronous part of `main` (usable from tests with a running loop)."""
    log = configure_logging(component=component, instance=instance, level=args.log_level)
    rng = component_rng(args.seed, component=component, instance=instance)
    client_rng = component_rng(args.seed, component=component, instance=f"{instance}/client")
    client = ApiClient(args.apiserver, component=component, instance=instance, token=token,
                       encoding=args.encoding, rng=client_rng, ca_file=os.environ.get("KUBEMESH_CA_FILE") or None)
    supervisor = Supervisor(settings=ShutdownSettings(drain_timeout=args.drain_timeout,
                                                      cancel_timeout=args.cancel_timeout), log=log)
    uninstall = install_signal_handlers(supervisor)
    admin: AdminServer | None = None
    try:
        try:
            clock = await _until_stopped(supervisor, fetch_clock(client, wait_for=args.startup_timeout, log=log))
        except TimeoutError as exc:
            log.error("giving up: apiserver unreachable", error=str(exc))
            return ShutdownReport(failed=("startup",), reason=str(exc))
        if clock is None:
            return ShutdownReport(reason="stopped during startup")
        log = configure_logging(component=component, instance=instance, level=args.log_level, clock=clock)
        supervisor._log = log
        metrics = Metrics()
        admin = AdminServer(component=component, instance=instance, metrics=metrics,
                            settings=AdminSettings(host=args.admin_host, port=args.admin_port, token=token))
        ctx = ComponentContext(component=component, instance=instance, client=client, clock=clock, rng=rng,
                               bugs=bugs, admin=admin, log=log, stop=supervisor.stop, metrics=metrics,
                               pause=PauseGate(), supervisor=supervisor, args=args, token=token)
        # Chaos pause: a paused component neither sends requests nor reads its watches.
        client.gate = ctx.pause.wait
        install_chaos_routes(ctx)
        await admin.start()
        # A kubelet hosting thousands of nodes holds hundreds of thousands of long-lived objects
        # (clients, tasks, informers); with the collector's defaults every older-generation pass
        # walked them all, a third of its CPU while ten thousand nodes booted. Survivors are
        # frozen out of the walks, as in the apiserver (kubemesh.services.process.gctuning).
        freezer = SurvivorFreezer(settings=GcSettings())
        freezer.start()
        supervisor.on_stop(freezer.stop, name="gc-freezer")
        supervisor.on_stop(admin.set_shutting_down, name="readiness")
        supervisor.on_stop(ctx.pause.resume, name="unpause")  # paused loops must see the stop
        log.info("starting", bugs=sorted(bugs), apiserver=args.apiserver, admin=admin.url,
                 rate=clock.rate)

        async def main_task() -> None:
            await _call_run(run, ctx)

        async with supervisor:
            supervisor.spawn(main_task(), name=f"{component}:run", finishable=True, stop_when_done=True)
            supervisor.spawn(register_forever(ctx, interval=args.register_interval), name="registration")
            report = await supervisor.wait()
        log.info("stopped", reason=report.reason, failed=list(report.failed), exited=list(report.exited),
                 cancelled=list(report.cancelled), stuck=list(report.stuck))
        return report
    finally:
        uninstall()
        if admin is not None:
            await admin.stop()
        await client.close()


async def _until_stopped(supervisor: Supervisor, coro: Coroutine[Any, Any, T]) -> T | None:
    """Run `coro` unless a stop signal comes first (then None)."""
    task = asyncio.ensure_future(coro)
    stopped = asyncio.ensure_future(supervisor.stop.wait())
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
    if task.cancelled():
        return None
    return task.result()


def main(*, component: str, run: Run, parser: argparse.ArgumentParser | None = None,
         argv: list[str] | None = None,
         add_arguments: Callable[[argparse.ArgumentParser], None] | None = None) -> int:
    """Parse flags, run the component until it stops, and return the process exit code.

    Args:
        component: The component name (`scheduler`, `kubelet`, ...).
        run: The component's `run(ctx, args)` or `run(ctx)`.
        parser: A parser holding the component's own flags (the common ones are added).
        argv: The arguments (default: `sys.argv[1:]`).
        add_arguments: Alternatively to `parser`, a function adding the component's flags.
    """
    startup.imports_done()  # the collector back on if the component's __main__ turned it off
    parser = parser or argparse.ArgumentParser(prog=f"python -m {component}")
    if add_arguments is not None:
        add_arguments(parser)
    common_arguments(parser)
    args = parser.parse_args(argv)
    try:
        # The release's defaults become the flags' defaults: parse again so explicit flags win.
        release = profiles.apply_defaults(parser, component=component, profile=args.profile, strict=False)
        args = parser.parse_args(argv)
        bugs = parse_bugs(component=component, cli=split_names(args.bugs), profile=release.bugs(component))
        token = read_token(args.token_file)
    except (UnknownBugError, profiles.UnknownProfileError, LookupError, OSError) as exc:
        parser.error(str(exc))
    instance = args.instance or default_instance(component)
    try:  # uvloop is optional; it makes a kubelet hosting thousands of nodes markedly cheaper
        import uvloop  # noqa: PLC0415 - optional (not on Windows): the stock loop works, only slower
        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    except ImportError:
        loop = asyncio.new_event_loop()
    report: ShutdownReport | None = None
    try:
        report = loop.run_until_complete(run_component(component=component, run=run, args=args,
                                                       instance=instance, bugs=bugs, token=token))
    except KeyboardInterrupt:
        return 130
    finally:
        if report is None or not report.stuck:
            _cancel_leftovers(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
        # With stuck tasks the loop is closed under them: the hard-kill of staged shutdown.
        loop.close()
    return report.exit_code


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    if not tasks:
        return
    for t in tasks:
        t.cancel()
    loop.run_until_complete(asyncio.wait(tasks, timeout=1.0))

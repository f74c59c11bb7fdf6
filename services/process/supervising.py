"""Structured concurrency for a process: named tasks, one stop signal, staged shutdown.

A process's long-lived tasks (informers, workers, heartbeats, the component's `run`) are
created only through `Supervisor.spawn(coro, name=...)`. The supervisor promises:

* **Every task is named and watched.** A task that fails is logged with its name and
  traceback; a task that returns although it was not `finishable` is logged as an
  unexpected exit. Either way the whole process begins to stop (as a TaskGroup cancels its
  siblings), and the exit code says so.
* **One stop path.** `stop` is an `asyncio.Event`; SIGTERM and SIGINT set it
  (`install_signal_handlers`), and so do a failed task, a finished `finishable` task that
  asked for it, and leaving the `async with` block. A second signal skips the drain stage.
* **Staged shutdown.** Once `stop` is set: (1) readiness fails and the `on_stop` hooks run
  in registration order (stop accepting, close watches, `queue.shutdown(drain=True)`);
  (2) tasks get `drain_timeout` wall seconds to finish by themselves; (3) the rest are
  cancelled and get `cancel_timeout` more; (4) tasks still running are reported by name as
  stuck, and abandoned: the caller decides whether to hard-exit (`kubemesh.services.process.component`
  does). Nothing is awaited without a bound, so shutdown always ends.
* **No task outlives the block** unless it is reported as stuck.

Unlike `asyncio.TaskGroup`, whose exit waits forever for a task that ignores cancellation,
the supervisor can give up on such a task and name it; otherwise it keeps TaskGroup's
promises (tasks belong to one scope, the first failure stops everything, failures are
never lost). Shutdown waits are in wall time: they bound how long a process takes to die,
which is not cluster logic.
"""

from __future__ import annotations

import asyncio
import inspect
import signal
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, TypeVar

import structlog

T = TypeVar("T")

StopHook = Callable[[], Awaitable[None] | None]

_log = structlog.get_logger("kubemesh.services.process.supervising")


@dataclass(frozen=True, kw_only=True)
class ShutdownSettings:
    """How long each shutdown stage may take (wall seconds)."""

    drain_timeout: float = 5.0
    """How long tasks may take to finish on their own after `stop` (queues drain meanwhile)."""
    cancel_timeout: float = 2.0
    """How long cancelled tasks may take to unwind before they are reported as stuck."""
    hook_timeout: float = 2.0
    """How long each `on_stop` hook may take."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskHandle(Generic[T]):
    """A supervised task."""

    name: str
    task: asyncio.Task[T | None]

    def cancel(self) -> None:
        """Cancel the task (a cancelled task is never reported as a failure)."""
        self.task.cancel()

    def done(self) -> bool:
        """Whether the task has ended."""
        return self.task.done()


@dataclass(frozen=True, kw_only=True)
class ShutdownReport:
    """How a supervisor's tasks ended."""

    failed: tuple[str, ...] = ()
    """Tasks that raised."""
    exited: tuple[str, ...] = ()
    """Non-finishable tasks that returned before shutdown began."""
    cancelled: tuple[str, ...] = ()
    """Tasks that had to be cancelled (they did not finish within the drain stage)."""
    stuck: tuple[str, ...] = ()
    """Tasks that ignored cancellation and were abandoned."""
    reason: str = ""
    """What started the shutdown."""
    errors: dict[str, BaseException] = field(default_factory=dict)
    """The exception of each failed task."""

    @property
    def clean(self) -> bool:
        """No task failed, exited unexpectedly or got stuck."""
        return not (self.failed or self.exited or self.stuck)

    @property
    def exit_code(self) -> int:
        """0 for a clean shutdown, 1 otherwise."""
        return 0 if self.clean else 1


class Supervisor:
    """The root task scope of a process (use as `async with Supervisor(...) as sup:`)."""

    def __init__(self, *, stop: asyncio.Event | None = None, settings: ShutdownSettings | None = None,
                 log: Any = None) -> None:
        self.stop = stop or asyncio.Event()
        self.settings = settings or ShutdownSettings()
        self._log = log if log is not None else _log
        self._tasks: dict[asyncio.Task[Any], bool] = {}  # task -> finishable
        self._hooks: list[tuple[str, StopHook]] = []
        self._failed: dict[str, BaseException] = {}
        self._exited: list[str] = []
        self._reason = ""
        self._force = asyncio.Event()
        self._stopping = False
        self._report: ShutdownReport | None = None

    # -- tasks ----------------------------------------------------------------------------------

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str, finishable: bool = False,
              stop_when_done: bool = False) -> TaskHandle[T]:
        """Start a named task under supervision.

        Args:
            coro: The coroutine to run.
            name: The task's name, used in logs and the shutdown report.
            finishable: Whether returning is normal (otherwise it is logged as unexpected and
                the process stops).
            stop_when_done: Begin the shutdown when the task returns (e.g. the component's
                main coroutine).

        Returns:
            A handle (not awaitable, so that fire-and-forget calls need no `_ =`); its
            `task` yields the result, or None if the coroutine failed (the failure is
            reported by the supervisor).
        """
        if self._stopping and self._report is not None:
            coro.close()
            raise RuntimeError("supervisor has shut down")
        task = asyncio.get_running_loop().create_task(self._guard(coro, name, finishable, stop_when_done),
                                                      name=name)
        self._tasks[task] = finishable
        task.add_done_callback(self._forget)
        return TaskHandle(name=name, task=task)

    def _forget(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)

    async def _guard(self, coro: Coroutine[Any, Any, T], name: str, finishable: bool,
                     stop_when_done: bool) -> T | None:
        try:
            result = await coro
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._log.error("task failed", task=name, exc_info=exc)
            self._failed[name] = exc
            self.request_stop(f"task {name} failed: {exc!r}")
            return None
        if not finishable and not self.stop.is_set():
            self._log.error("task exited unexpectedly", task=name)
            self._exited.append(name)
            self.request_stop(f"task {name} exited unexpectedly")
        elif stop_when_done:
            self.request_stop(f"task {name} finished")
        else:
            self._log.debug("task finished", task=name)
        return result

    @property
    def task_names(self) -> list[str]:
        """Names of the tasks still running."""
        return sorted(t.get_name() for t in self._tasks if not t.done())

    # -- stopping -------------------------------------------------------------------------------

    def on_stop(self, hook: StopHook, *, name: str | None = None) -> None:
        """Run `hook` (sync or async) when shutdown begins, in registration order."""
        self._hooks.append((name or str(getattr(hook, "__qualname__", repr(hook))), hook))

    def request_stop(self, reason: str = "requested") -> None:
        """Begin the shutdown (idempotent; the first reason is kept)."""
        if not self.stop.is_set():
            self._reason = reason
            self._log.info("stopping", reason=reason)
            self.stop.set()

    def force(self) -> None:
        """Skip the drain stage: cancel everything now (a second SIGTERM/SIGINT)."""
        self._force.set()
        self.request_stop("forced")

    async def wait(self) -> ShutdownReport:
        """Wait for `stop`, then shut down in stages; returns the report."""
        await self.stop.wait()
        return await self.shutdown()

    async def shutdown(self) -> ShutdownReport:
        """Run the staged shutdown now (idempotent; later calls return the same report)."""
        if self._report is not None:
            return self._report
        if not self.stop.is_set():
            self.request_stop("shutdown")
        self._stopping = True
        s = self.settings
        for name, hook in self._hooks:
            try:
                outcome = hook()
                if inspect.isawaitable(outcome):
                    await asyncio.wait_for(_awaitable_coro(outcome), s.hook_timeout)
            except TimeoutError:
                self._log.warning("stop hook timed out", hook=name)
            except Exception as exc:
                self._log.error("stop hook failed", hook=name, exc_info=exc)
        pending = {t for t in self._tasks if not t.done()}
        if pending and not self._force.is_set():
            # Until every task is done, the drain timeout passes, or a second signal forces.
            drained = asyncio.ensure_future(asyncio.wait(pending))
            force = asyncio.ensure_future(self._force.wait())
            try:
                await asyncio.wait({drained, force}, timeout=s.drain_timeout,
                                   return_when=asyncio.FIRST_COMPLETED)
            finally:
                drained.cancel()
                force.cancel()
        pending = {t for t in self._tasks if not t.done()}
        cancelled = sorted(t.get_name() for t in pending)
        if pending:
            self._log.info("cancelling tasks", tasks=cancelled)
            for t in pending:
                t.cancel()
            await asyncio.wait(pending, timeout=s.cancel_timeout)
        stuck = sorted(t.get_name() for t in pending if not t.done())
        if stuck:
            self._log.error("tasks did not stop; abandoning them", tasks=stuck)
        self._report = ShutdownReport(failed=tuple(self._failed), exited=tuple(self._exited),
                                      cancelled=tuple(cancelled), stuck=tuple(stuck), reason=self._reason,
                                      errors=dict(self._failed))
        return self._report

    # -- scope ----------------------------------------------------------------------------------

    async def __aenter__(self) -> Supervisor:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if exc is not None and not isinstance(exc, asyncio.CancelledError):
            self._failed.setdefault("<body>", exc)
            self.request_stop(f"supervisor body failed: {exc!r}")
        try:
            await self.shutdown()
        except asyncio.CancelledError:
            # IMPORTANT: a second cancellation must not leave tasks running behind us.
            for t in self._tasks:
                t.cancel()
            raise

    @property
    def report(self) -> ShutdownReport | None:
        """The shutdown report, once shut down."""
        return self._report


async def _awaitable_coro(aw: Awaitable[Any]) -> Any:
    return await aw


def install_signal_handlers(supervisor: Supervisor, *,
                            signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT),
                            ) -> Callable[[], None]:
    """Make SIGTERM/SIGINT start the shutdown (a second one forces it); returns an uninstaller."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []

    def handle(sig: signal.Signals) -> None:
        if supervisor.stop.is_set():
            supervisor._log.warning("second signal; forcing shutdown", signal=sig.name)
            supervisor.force()
        else:
            supervisor.request_stop(f"signal {sig.name}")

    for sig in signals:
        try:
            loop.add_signal_handler(sig, handle, sig)
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or Windows
            continue
        installed.append(sig)

    def uninstall() -> None:
        for sig in installed:
            loop.remove_signal_handler(sig)

    return uninstall

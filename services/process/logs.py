"""Structured JSON logging for every kubemesh process.

`configure_logging` makes every log line one JSON object on stderr with `component`,
`instance`, `level`, `event`, the wall timestamp and, once a clock is known, the cluster
time (`ct`) that scenarios and timelines line up on. Context bound with `bound_context`
(or `structlog.contextvars`) is merged into every line logged by the same task, so a
reconcile's key or a request's fault id appears on everything it logs. Records from the
standard `logging` module (aiohttp, asyncio) go through the same renderer.

Configuration is process-wide (structlog and `logging` are global by nature); calling
`configure_logging` again replaces it, which `kubemesh.services.process.component` does once the cluster
clock is known.
"""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator, MutableMapping
from typing import Any, BinaryIO

import orjson
import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

from kubemesh.services.machinery.clock import Clock

LEVELS = ("debug", "info", "warning", "error", "critical")


def _level(level: str) -> int:
    name = level.strip().upper()
    value = logging.getLevelName(name)
    if not isinstance(value, int):
        raise ValueError(f"unknown log level {level!r}; one of {', '.join(LEVELS)}")
    return value


class _ClusterTime:
    """Adds the cluster time `ct` to each event when a clock is set."""

    def __init__(self, clock: Clock | None) -> None:
        self.clock = clock

    def __call__(self, logger: WrappedLogger, name: str, event: EventDict) -> EventDict:
        if self.clock is not None:
            event.setdefault("ct", round(self.clock.now(), 6))
        return event


def _serialize(value: Any, **_: Any) -> bytes:
    return orjson.dumps(value, default=repr)


def _serialize_text(value: Any, **_: Any) -> str:
    return orjson.dumps(value, default=repr).decode()


def configure_logging(*, component: str, instance: str, level: str = "info", clock: Clock | None = None,
                      stream: BinaryIO | None = None) -> structlog.typing.FilteringBoundLogger:
    """Log JSON lines to stderr (or `stream`), bound to this component and instance.

    Args:
        component: The component name (`scheduler`, ...), on every line.
        instance: The instance name, on every line.
        level: The minimum level (`debug`, `info`, `warning`, `error`).
        clock: The cluster clock; when given, every line carries `ct` (cluster seconds).
        stream: A binary stream to write to instead of stderr (tests).

    Returns:
        A logger bound to component and instance.
    """
    threshold = _level(level)
    out = stream if stream is not None else sys.stderr.buffer
    static = {"component": component, "instance": instance}

    def add_static(logger: WrappedLogger, name: str, event: EventDict) -> EventDict:
        for k, v in static.items():
            event.setdefault(k, v)
        return event

    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _ClusterTime(clock),
        add_static,
    ]
    structlog.configure(
        processors=[
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=_serialize),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.BytesLoggerFactory(file=out),
        cache_logger_on_first_use=False,
    )
    # The standard library's records (aiohttp, asyncio) in the same JSON shape.
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *shared],
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info,
                    structlog.processors.JSONRenderer(serializer=_serialize_text)],
    )
    handler = logging.StreamHandler(_TextOver(out))
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_kubemesh", False):
            root.removeHandler(old)
    handler._kubemesh = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(max(threshold, logging.INFO))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    return get_logger()


def reset_logging() -> None:
    """Undo `configure_logging` (structlog defaults, our stdlib handler removed); for tests."""
    structlog.reset_defaults()
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_kubemesh", False):
            root.removeHandler(old)


class _TextOver:
    """A minimal text stream over a binary one, for the stdlib handler."""

    def __init__(self, out: BinaryIO) -> None:
        self._out = out

    def write(self, text: str) -> int:
        self._out.write(text.encode())
        return len(text)

    def flush(self) -> None:
        self._out.flush()


def get_logger(name: str | None = None, **initial: Any) -> structlog.typing.FilteringBoundLogger:
    """A logger with optional initial bindings (`logger` is set to `name` when given)."""
    log: structlog.typing.FilteringBoundLogger = structlog.get_logger()
    if name is not None:
        initial = {"logger": name, **initial}
    return log.bind(**initial) if initial else log


@contextlib.contextmanager
def bound_context(**values: Any) -> Iterator[None]:
    """Bind values to every log line of the current task (and tasks it creates) within the block."""
    with structlog.contextvars.bound_contextvars(**values):
        yield


def bind_context(**values: Any) -> None:
    """Bind values to every later log line of the current task (and tasks it creates)."""
    structlog.contextvars.bind_contextvars(**values)


def drop_keys(*keys: str) -> Processor:
    """A processor that removes noisy keys (for callers building their own chains)."""

    def drop(logger: WrappedLogger, name: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        for k in keys:
            event.pop(k, None)
        return event

    return drop

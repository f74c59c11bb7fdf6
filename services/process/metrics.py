"""Per-process Prometheus metrics.

Each process owns one `Metrics` holder with its own `CollectorRegistry` (never the global
default registry), so tests can build many components in one interpreter without
"duplicated timeseries" errors, and `/metrics` shows exactly this process's series. The
helpers are idempotent: asking twice for the same name returns the same metric, so modules
can declare their metrics where they use them.

Work queues are exported with client-go's metric names (`workqueue_depth`,
`workqueue_adds_total`, `workqueue_retries_total`, plus `workqueue_processing` and
`workqueue_waiting`), labelled by queue name and read at scrape time from `WorkQueue.stats()`.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from kubemesh.services.machinery.queueing import QueueStats

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The media type of the text exposition format."""

M = TypeVar("M", Counter, Gauge, Histogram)


class HasStats(Protocol):
    """Anything with queue statistics (a `WorkQueue`)."""

    def stats(self) -> QueueStats:
        """A snapshot of the queue's counters."""
        ...


class _QueueCollector:
    """Reads every tracked queue's counters at scrape time."""

    def __init__(self) -> None:
        self.queues: dict[str, HasStats] = {}

    def collect(self) -> Iterator[Metric]:
        depth = GaugeMetricFamily("workqueue_depth", "Current depth of the work queue.", labels=["name"])
        processing = GaugeMetricFamily("workqueue_processing", "Keys being processed.", labels=["name"])
        waiting = GaugeMetricFamily("workqueue_waiting", "Keys waiting for a delay.", labels=["name"])
        adds = CounterMetricFamily("workqueue_adds", "Total adds handled by the work queue.",
                                   labels=["name"])
        retries = CounterMetricFamily("workqueue_retries", "Total rate-limited retries.", labels=["name"])
        for name, queue in sorted(self.queues.items()):
            s = queue.stats()
            depth.add_metric([name], s.depth)
            processing.add_metric([name], s.processing)
            waiting.add_metric([name], s.waiting)
            adds.add_metric([name], s.adds)
            retries.add_metric([name], s.retries)
        yield from (depth, processing, waiting, adds, retries)


class RequestStats:
    """Request counts and latencies kept as plain numbers, exported at scrape time.

    A server observes every request: with prometheus_client's labelled `Counter` and
    `Histogram` that is two locked updates and a Python walk over the buckets each time.
    Here an observation is two dict updates and a `bisect` (a single-threaded asyncio
    process needs no lock); `collect` turns the numbers into the same two series a
    `Counter` (`<requests>_total`, labelled verb, resource, code) and a `Histogram`
    (`<latency>`, labelled verb) would export.
    """

    def __init__(self, *, requests: str, latency: str, buckets: Sequence[float]) -> None:
        self.requests_name = requests
        self.latency_name = latency
        self.bounds = tuple(sorted(buckets))
        self.counts: dict[tuple[str, str, int], int] = {}
        # per verb: a count per bucket (the last one is +Inf, not cumulative yet) and the sum
        self.latencies: dict[str, tuple[list[int], list[float]]] = {}

    def observe(self, *, verb: str, resource: str, code: int, seconds: float) -> None:
        """Count one request and its latency."""
        key = (verb, resource, code)
        self.counts[key] = self.counts.get(key, 0) + 1
        entry = self.latencies.get(verb)
        if entry is None:
            entry = self.latencies[verb] = ([0] * (len(self.bounds) + 1), [0.0])
        entry[0][bisect.bisect_left(self.bounds, seconds)] += 1
        entry[1][0] += seconds

    def collect(self) -> Iterator[Metric]:
        """The two metric families (prometheus_client's custom collector protocol)."""
        total = CounterMetricFamily(self.requests_name, "Requests by verb, resource and code",
                                    labels=["verb", "resource", "code"])
        for (verb, resource, code), n in sorted(self.counts.items()):
            total.add_metric([verb, resource, str(code)], n)
        hist = HistogramMetricFamily(self.latency_name, "Request latency (wall seconds)", labels=["verb"])
        for verb, (per_bucket, sums) in sorted(self.latencies.items()):
            cumulative = list(itertools.accumulate(per_bucket))
            buckets = [(repr(float(b)), c) for b, c in zip(self.bounds, cumulative, strict=False)]
            buckets.append(("+Inf", cumulative[-1]))
            hist.add_metric([verb], buckets, sums[0])
        yield from (total, hist)


class Metrics:
    """One process's metrics registry and the helpers to declare metrics on it."""

    def __init__(self, *, namespace: str = "kubemesh", process_collectors: bool = True) -> None:
        """Create an empty registry.

        Args:
            namespace: Prefix of every metric declared through the helpers (`kubemesh_...`).
            process_collectors: Also export process_* and python_* series.
        """
        self.registry = CollectorRegistry(auto_describe=True)
        self.namespace = namespace
        self._metrics: dict[str, Counter | Gauge | Histogram] = {}
        self._queues = _QueueCollector()
        self.registry.register(self._queues)
        if process_collectors:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)

    def _get(self, cls: type[M], name: str, documentation: str, labels: Sequence[str],
             **kwargs: Any) -> M:
        existing = self._metrics.get(name)
        if existing is not None:
            if not isinstance(existing, cls):
                raise ValueError(f"metric {name!r} already declared as {type(existing).__name__}")
            return existing
        metric = cls(name, documentation, labelnames=tuple(labels), namespace=self.namespace,
                     registry=self.registry, **kwargs)
        self._metrics[name] = metric
        return metric

    def counter(self, name: str, documentation: str, *, labels: Sequence[str] = ()) -> Counter:
        """A counter `<namespace>_<name>_total` (created on first use)."""
        return self._get(Counter, name, documentation, labels)

    def gauge(self, name: str, documentation: str, *, labels: Sequence[str] = ()) -> Gauge:
        """A gauge `<namespace>_<name>` (created on first use)."""
        return self._get(Gauge, name, documentation, labels)

    def histogram(self, name: str, documentation: str, *, labels: Sequence[str] = (),
                  buckets: Iterable[float] | None = None) -> Histogram:
        """A histogram `<namespace>_<name>` (created on first use; Prometheus' default buckets)."""
        if buckets is None:
            return self._get(Histogram, name, documentation, labels)
        return self._get(Histogram, name, documentation, labels, buckets=tuple(buckets))

    def track_queue(self, queue: HasStats, *, name: str | None = None) -> None:
        """Export a work queue's counters under `name` (default: its stats' name)."""
        self._queues.queues[name or queue.stats().name] = queue

    def untrack_queue(self, name: str) -> None:
        """Stop exporting a queue."""
        self._queues.queues.pop(name, None)

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)

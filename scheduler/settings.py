"""The scheduler's settings: every knob with its upstream default and what it changes.

All durations are cluster seconds (the injected clock), so a mesh running at clock rate 60
backs pods off, expires assumed pods and flushes queues sixty times faster in wall time.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubemesh.scheduler.podinfo import DEFAULT_SCHEDULER


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerSettings:
    """Settings of one kube-scheduler emulation."""

    scheduler_name: str = DEFAULT_SCHEDULER
    """Pods whose `spec.schedulerName` is this name are scheduled; events carry it as source."""

    percentage_of_nodes_to_score: int = 0
    """Share of nodes (1..100) to find feasible before scoring stops searching; 0 = adaptive
    (upstream: 50% minus 1% per 125 nodes, at least 5%), never fewer than `min_feasible_nodes`."""
    min_feasible_nodes: int = 100
    """Below this many nodes every node is filtered and scored (upstream minFeasibleNodesToFind)."""

    pod_initial_backoff: float = 1.0
    """Backoff after the first failed attempt; doubles per attempt (podInitialBackoffSeconds)."""
    pod_max_backoff: float = 10.0
    """Backoff cap (podMaxBackoffSeconds)."""
    max_unschedulable_duration: float = 300.0
    """A pod unschedulable for this long is retried even without a cluster event."""
    backoff_flush_period: float = 1.0
    """How often pods whose backoff completed move to the active queue."""
    unschedulable_flush_period: float = 30.0
    """How often pods unschedulable for longer than `max_unschedulable_duration` are retried."""

    assumed_pod_ttl: float = 0.0
    """How long an assumed pod whose binding finished waits for its ADD on the watch before it
    expires and its resources are released; 0 = never, today's upstream (30 s before 1.19, then
    15 min: an expiry while the watch lags lets a second pod take the same resources, #106361)."""
    cache_cleanup_period: float = 1.0
    """How often expired assumed pods are looked for."""

    parallel_binds: int = 32
    """Binding cycles that may run concurrently (each is one POST pods/binding)."""

    min_candidate_nodes_percentage: int = 10
    """Preemption dry-runs at least this share of the candidate nodes ..."""
    min_candidate_nodes_absolute: int = 100
    """... and at least this many."""

    hard_pod_affinity_weight: int = 1
    """Weight given in scoring to existing pods' required affinity terms that match the pod."""

    update_pod_condition: bool = True
    """Whether a failed attempt patches `PodScheduled=False` into the pod's status (upstream does;
    the echo of that patch is the stale update of kubernetes#74931)."""

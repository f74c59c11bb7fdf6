"""Settings of the emulated kube-controller-manager, with the upstream flags and defaults.

Every duration is in cluster seconds (the apiserver's scalable clock), never wall seconds.
`--profile` (a flag every component shares, `kubemesh.services.model.profiles`) names a
Kubernetes release; the release's table entry sets the defaults of these flags (for example
node-monitor-grace-period 40 s before 1.32, 50 s after, alpha taint keys in 1.7) and the bug
switches that describe its behaviour (1.7 evicts pods without taints and has no non-graceful
node shutdown). Explicit flags always override the profile.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from kubemesh.services.model import profiles
from kubemesh.services.model.profiles import PROFILES, Profile
from kubemesh.services.model.wellknown import TAINT_NOT_READY, TAINT_UNREACHABLE

__all__ = ["PROFILES", "Profile"]


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeLifecycleSettings:
    """The node-lifecycle controller's flags (kube-controller-manager names in comments)."""

    node_monitor_period: float = 5.0
    """`--node-monitor-period`: how often node health is evaluated."""
    node_monitor_grace_period: float = 50.0
    """`--node-monitor-grace-period`: 40 s before 1.32 (PR #126287), 50 s since."""
    node_startup_grace_period: float = 60.0
    """`--node-startup-grace-period`: grace for a node that never posted Ready."""
    pod_eviction_timeout: float = 300.0
    """`--pod-eviction-timeout`: the legacy path's wait before deleting a dead node's pods."""
    node_eviction_rate: float = 0.1
    """`--node-eviction-rate`: nodes per second tainted (or evicted) in a healthy zone."""
    secondary_node_eviction_rate: float = 0.01
    """`--secondary-node-eviction-rate`: the rate in a partially disrupted large zone."""
    large_cluster_size_threshold: int = 50
    """`--large-cluster-size-threshold`: zones larger than this keep the secondary rate."""
    unhealthy_zone_threshold: float = 0.55
    """`--unhealthy-zone-threshold`: share of not-ready nodes (and more than 2) for PartialDisruption."""
    eviction_pass_period: float = 0.1
    """How often the zone queues are drained (upstream `nodeEvictionPeriod`, 100 ms)."""
    not_ready_taint_key: str = TAINT_NOT_READY
    """The NoExecute taint of a node whose Ready is False (`node.alpha.kubernetes.io/notReady` before 1.9)."""
    unreachable_taint_key: str = TAINT_UNREACHABLE
    """The NoExecute taint of a node whose Ready is Unknown (`node.alpha.kubernetes.io/unreachable` before 1.9)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PodGCSettings:
    """The pod garbage collector's constants."""

    terminated_pod_gc_threshold: int = 12500
    """`--terminated-pod-gc-threshold`: terminated pods kept before the oldest are deleted (0 = off)."""
    gc_check_period: float = 20.0
    """How often PodGC runs (upstream `gcCheckPeriod`)."""
    quarantine_time: float = 40.0
    """`--podgc-orphan-quarantine` (kubemesh; upstream's constant `quarantineTime` since v1.17): how
    long a node must be missing before its pods are deleted as orphans. 0 is the behaviour before
    v1.17 (a profile sets it): the pass that finds the node missing deletes them (after a GET)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkloadSettings:
    """ReplicaSet, Deployment and DaemonSet controller constants."""

    burst_replicas: int = 500
    """Most pods a ReplicaSet creates or deletes in one sync (upstream `BurstReplicas`)."""
    expectations_ttl: float = 300.0
    """After this long, unmet expectations are treated as satisfied (upstream `ExpectationsTimeout`)."""
    replicaset_workers: int = 5
    deployment_workers: int = 5
    daemonset_workers: int = 2
    gc_workers: int = 20
    namespace_workers: int = 10
    """`--concurrent-namespace-syncs`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchSettings:
    """Job, CronJob and TTL-after-finished controller constants (upstream names in comments)."""

    job_workers: int = 5
    """`--concurrent-job-syncs`."""
    cronjob_workers: int = 5
    """`--concurrent-cron-job-syncs`."""
    ttl_after_finished_workers: int = 5
    """`--concurrent-ttl-after-finished-syncs`."""
    job_sync_batch_period: float = 1.0
    """Pod events and status-only Job updates sync the Job after this delay (upstream
    `syncJobBatchPeriod`), so that a burst of pod changes costs one sync."""
    pod_failure_backoff: float = 10.0
    """Delay before replacing a failed pod, doubling per consecutive failure (upstream
    `DefaultJobPodFailureBackOff`) ..."""
    max_pod_failure_backoff: float = 600.0
    """... up to this cap (upstream `MaxJobPodFailureBackOff`)."""
    max_uncounted_pods: int = 500
    """Most pod uids in `status.uncountedTerminatedPods` at once (upstream `MaxUncountedPods`)."""
    max_pod_create_delete_per_sync: int = 500
    """Most pods a Job creates or deletes in one sync (upstream `MaxPodCreateDeletePerSync`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StatefulSetSettings:
    """StatefulSet controller constants."""

    statefulset_workers: int = 5
    """`--concurrent-statefulset-syncs`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EndpointSettings:
    """Endpoints and EndpointSlice controller constants (upstream flags in comments)."""

    endpoint_workers: int = 5
    """`--concurrent-endpoint-syncs`."""
    endpointslice_workers: int = 5
    """`--concurrent-service-endpoint-syncs`."""
    max_endpoints_per_slice: int = 100
    """`--max-endpoints-per-slice` (1 to 1000)."""
    endpoint_updates_batch_period: float = 0.0
    """`--endpoint-updates-batch-period`: pod changes sync their Services after this delay (0: at once)."""
    endpointslice_updates_batch_period: float = 0.0
    """`--endpointslice-updates-batch-period`: the same for the EndpointSlice controller."""
    max_endpoints_capacity: int = 1000
    """Most addresses in one Endpoints object (upstream `maxCapacity`); beyond, it is truncated."""
    endpointslice_change_min_sync_delay: float = 1.0
    """A change of a managed EndpointSlice by someone else syncs its Service after this delay
    (upstream `endpointSliceChangeMinSyncDelay`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ControllerManagerSettings:
    """Everything the controller-manager process is configured with."""

    profile: Profile = "current"
    controllers: tuple[str, ...] | None = None
    """The controllers to run by name; None runs every one (`kubemesh.controller_manager.catalogue`)."""
    leader_elect: bool = False
    node_lifecycle: NodeLifecycleSettings = field(default_factory=NodeLifecycleSettings)
    podgc: PodGCSettings = field(default_factory=PodGCSettings)
    workloads: WorkloadSettings = field(default_factory=WorkloadSettings)
    batch: BatchSettings = field(default_factory=BatchSettings)
    statefulset: StatefulSetSettings = field(default_factory=StatefulSetSettings)
    endpoints: EndpointSettings = field(default_factory=EndpointSettings)

    def enabled(self, controller: str) -> bool:
        """Whether `controller` runs in this process."""
        return self.controllers is None or controller in self.controllers


def profile_bugs(profile: str) -> frozenset[str]:
    """The controller-manager's switches a release turns on (`kubemesh profiles` lists them)."""
    return profiles.resolve(profile).bugs("controller_manager")


def parse_flags(argv: Sequence[str] = ()) -> argparse.Namespace:
    """The controller-manager's own flags and `--profile`, parsed with the release's defaults.

    What the component runtime does; for `build` without a command line, and for tests.
    """
    p = argparse.ArgumentParser()
    add_arguments(p)
    profiles.add_argument(p)
    ns = p.parse_args(list(argv))
    profiles.apply_defaults(p, component="controller_manager", profile=ns.profile)
    return p.parse_args(list(argv))


def _duration(value: str) -> float:
    """Parse `5`, `5s`, `40s`, `5m`, `1h`, `100ms` (Go duration subset) into seconds."""
    v = value.strip()
    units = (("ms", 0.001), ("s", 1.0), ("m", 60.0), ("h", 3600.0))
    for suffix, scale in units:
        if v.endswith(suffix) and not (suffix == "s" and v.endswith("ms")):
            return float(v[: -len(suffix)]) * scale
    return float(v)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the controller-manager's own flags (defaults None: the code's own, or the profile's)."""
    parser.add_argument("--controllers", default="*",
                        help="comma-separated controllers to run: '*' for all, '-name' to leave one out")
    parser.add_argument("--leader-elect", action="store_true", help="run only while holding the lease")
    for flag in ("node-monitor-period", "node-monitor-grace-period", "node-startup-grace-period",
                 "pod-eviction-timeout"):
        parser.add_argument(f"--{flag}", type=_duration, default=None)
    for flag in ("node-eviction-rate", "secondary-node-eviction-rate", "unhealthy-zone-threshold"):
        parser.add_argument(f"--{flag}", type=float, default=None)
    parser.add_argument("--large-cluster-size-threshold", type=int, default=None)
    parser.add_argument("--terminated-pod-gc-threshold", type=int, default=None)
    parser.add_argument("--podgc-orphan-quarantine", type=_duration, default=None,
                        help="how long a node must be missing before PodGC deletes its pods (kubemesh: upstream's "
                             "constant 40 s since v1.17; releases before had none, 0)")
    for flag in ("not-ready-taint-key", "unreachable-taint-key"):
        parser.add_argument(f"--{flag}", default=None,
                            help="NoExecute taint key of taint-based eviction (kubemesh; a profile sets the "
                                 "release's, alpha names before 1.9)")
    for flag in ("concurrent-endpoint-syncs", "concurrent-service-endpoint-syncs", "max-endpoints-per-slice"):
        parser.add_argument(f"--{flag}", type=int, default=None)
    for flag in ("endpoint-updates-batch-period", "endpointslice-updates-batch-period"):
        parser.add_argument(f"--{flag}", type=_duration, default=None)


def from_namespace(ns: argparse.Namespace, *, known: Sequence[str]) -> ControllerManagerSettings:
    """Settings from parsed flags (`parse_flags`, or the component runtime's).

    A profile's defaults are already the flags' defaults there.

    `known` is every controller's name, to check `--controllers` against.
    """
    base = ControllerManagerSettings(profile=getattr(ns, "profile", profiles.DEFAULT_PROFILE))
    nl_overrides = {
        name: getattr(ns, name)
        for name in ("node_monitor_period", "node_monitor_grace_period", "node_startup_grace_period",
                     "pod_eviction_timeout", "node_eviction_rate", "secondary_node_eviction_rate",
                     "unhealthy_zone_threshold", "large_cluster_size_threshold", "not_ready_taint_key",
                     "unreachable_taint_key")
        if getattr(ns, name, None) is not None
    }
    podgc = base.podgc
    if getattr(ns, "terminated_pod_gc_threshold", None) is not None:
        podgc = dataclasses.replace(podgc, terminated_pod_gc_threshold=ns.terminated_pod_gc_threshold)
    if getattr(ns, "podgc_orphan_quarantine", None) is not None:
        podgc = dataclasses.replace(podgc, quarantine_time=ns.podgc_orphan_quarantine)
    return dataclasses.replace(
        base,
        controllers=parse_controllers(ns.controllers, known=known),
        leader_elect=bool(ns.leader_elect),
        node_lifecycle=dataclasses.replace(base.node_lifecycle, **nl_overrides),
        podgc=podgc,
        endpoints=_endpoint_settings(ns, base.endpoints),
    )


def _endpoint_settings(ns: argparse.Namespace, base: EndpointSettings) -> EndpointSettings:
    """The endpoint controllers' flags over their defaults (raises ValueError on a value upstream refuses)."""
    flags = {"concurrent_endpoint_syncs": "endpoint_workers", "concurrent_service_endpoint_syncs":
             "endpointslice_workers", "max_endpoints_per_slice": "max_endpoints_per_slice",
             "endpoint_updates_batch_period": "endpoint_updates_batch_period",
             "endpointslice_updates_batch_period": "endpointslice_updates_batch_period"}
    overrides = {field_name: getattr(ns, flag) for flag, field_name in flags.items()
                 if getattr(ns, flag, None) is not None}
    out = dataclasses.replace(base, **overrides)
    if not 1 <= out.max_endpoints_per_slice <= 1000:
        raise ValueError("--max-endpoints-per-slice must be between 1 and 1000")
    if out.endpoint_workers < 1 or out.endpointslice_workers < 1:
        raise ValueError("--concurrent-endpoint-syncs and --concurrent-service-endpoint-syncs must be at least 1")
    return out


def parse_controllers(value: str | Sequence[str], *, known: Sequence[str]) -> tuple[str, ...]:
    """Parse `--controllers`: names, `*` for all, `-name` to disable one (as upstream)."""
    names = [n.strip() for n in value.split(",")] if isinstance(value, str) else list(value)
    names = [n for n in names if n]
    chosen: list[str] = []
    if not names or "*" in names:
        chosen = list(known)
    for n in names:
        if n == "*" or n.startswith("-"):
            continue
        if n not in known:
            raise ValueError(f"unknown controller {n!r}; known: {', '.join(known)}")
        if n not in chosen:
            chosen.append(n)
    for n in names:
        if n.startswith("-"):
            if n[1:] not in known:
                raise ValueError(f"unknown controller {n[1:]!r}")
            chosen = [c for c in chosen if c != n[1:]]
    return tuple(chosen)

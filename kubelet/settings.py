"""The kubelet emulator's settings: one documented dataclass, with upstream's defaults.

Every duration is in cluster seconds (the injected clock scales them). The defaults are those
of a current kubelet unless a field says otherwise. A version profile (`--profile`,
`kubemesh.services.model.profiles`) needs nothing here: the component runtime makes the
release's values the defaults of the kubelet's flags and turns its switch (`no-node-lease`,
before 1.14) on.

Guarantees: a `KubeletSettings` is immutable and validated on construction, so every node of a
process sees the same, sane configuration.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from kubemesh.kubelet.pressure import DEFAULT_EVICTION_HARD, Threshold, parse_grace_periods, parse_thresholds
from kubemesh.services.model.quantities import parse_quantity

DEFAULT_CAPACITY: Final[Mapping[str, str]] = {
    "cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi",
}
"""A mid-sized cloud VM."""

DEFAULT_RESERVED: Final[Mapping[str, str]] = {"cpu": "100m", "memory": "356Mi", "ephemeral-storage": "1Gi"}
"""What allocatable leaves out: kube-reserved and system-reserved plus the hard eviction
threshold (memory.available<100Mi), as a kubeadm node reports it."""

PodWatch = Literal["per-node", "shared"]
Runtime = Literal["emulated", "process", "opt-in"]


def parse_capacity(text: str) -> dict[str, str]:
    """Parse `cpu=8,memory=32Gi,pods=110` (each value must be a valid quantity)."""
    out: dict[str, str] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise ValueError(f"capacity item {item!r} is not name=quantity")
        parse_quantity(value.strip())
        out[name.strip()] = value.strip()
    return out


@dataclass(frozen=True, kw_only=True)
class KubeletSettings:
    """How one kubelet process behaves; every node it hosts shares these settings."""

    nodes: int = 1
    """How many nodes this process hosts."""
    node_prefix: str = "node"
    """Node names are `<prefix>-<i>`."""
    node_offset: int = 0
    """The first node is `<prefix>-<offset+1>`, so several processes can host disjoint ranges."""
    zone: str = "zone-a"
    """`topology.kubernetes.io/zone` of every node of this process."""
    region: str = "region-1"
    """`topology.kubernetes.io/region`."""
    capacity: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_CAPACITY))
    """Node capacity, quantities as strings (missing names fall back to `DEFAULT_CAPACITY`)."""
    reserved: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_RESERVED))
    """Subtracted from capacity to give allocatable."""
    kubelet_version: str = "v1.33.0-kubemesh"
    """Reported in `status.nodeInfo.kubeletVersion`."""

    # Heartbeats (races.md 2.4).
    node_status_update_frequency: float = 10.0
    """How often the kubelet computes node status (`--node-status-update-frequency`); also the
    heartbeat client's timeout, as upstream."""
    node_status_report_frequency: float | None = None
    """How often an unchanged status is posted anyway (`--node-status-report-frequency`). None:
    every update (upstream's when the update frequency is set explicitly). The profiles set
    upstream's values: 300 s from 1.14 (leases on by default, so `current` too), every update
    before. In between the node GETs its Node each update and posts when the conditions there
    differ from its own (`kubemesh.kubelet.heartbeating`)."""
    node_status_update_retry: int = 5
    """Attempts per status update (upstream `nodeStatusUpdateRetry`), without pause."""
    node_lease_duration: float = 40.0
    """`spec.leaseDurationSeconds` of the node Lease."""
    node_lease_renew_interval_fraction: float = 0.25
    """Renew interval = fraction times duration (10 s by default)."""
    lease_max_update_retries: int = 5
    """Immediate attempts of one renewal before giving up until the next interval."""
    lease_initial_backoff: float = 0.1
    """Backoff of `ensure lease` doubles from this (first pause 0.2 s) ..."""
    lease_max_backoff: float = 7.0
    """... up to this cap."""
    jitter_factor: float = 0.04
    """Each loop's interval is stretched by up to this fraction (upstream `JitterUntil`)."""
    min_wall_timeout: float = 1.0
    """Floor of the heartbeat timeout in wall seconds, so a high clock rate does not turn
    every request into a timeout."""
    register_concurrency: int = 64
    """At most this many registrations in flight at start-up (10,000 nodes register in waves)."""

    # Pods.
    pod_start_delay: float = 1.0
    """Cluster seconds a pod spends in ContainerCreating (sandbox, image pull, start)."""
    container_stop_delay: float = 0.5
    """Cluster seconds a container takes to exit after SIGTERM (killed at the grace period)."""
    default_run_seconds: float = 5.0
    """How long the containers of a run-to-completion pod (restartPolicy Never or OnFailure)
    run before exiting 0 when the pod has no `kubemesh.io/run-seconds` annotation, so that a
    plain Job completes; negative: they run until stopped. `restartPolicy: Always` pods always
    run until stopped."""
    crash_loop_base: float = 10.0
    """CrashLoopBackOff: the second restart waits this long, doubling ..."""
    crash_loop_max: float = 300.0
    """... up to this cap."""
    eviction_monitoring_interval: float = 10.0
    """How often the eviction manager observes its signals and evicts at most one pod."""
    default_container_memory_usage: str = "64Mi"
    """Emulated usage of a container without a memory request (`kubemesh.kubelet.pressure`)."""
    eviction_hard: str = DEFAULT_EVICTION_HARD
    """`--eviction-hard`: thresholds that act at once (upstream's Linux defaults)."""
    eviction_soft: str = ""
    """`--eviction-soft`: thresholds that act once met for their grace period (none by default)."""
    eviction_soft_grace_period: str = ""
    """`--eviction-soft-grace-period`, e.g. `memory.available=1m30s` (one per soft threshold)."""
    eviction_pressure_transition_period: float = 300.0
    """`--eviction-pressure-transition-period`: a pressure condition stays True this long after
    its last threshold was last met."""
    low_diskspace_threshold_mb: int = 0
    """`--low-diskspace-threshold-mb` (v1.7's disk-space manager, 256 there; removed in v1.8 by
    kubernetes#48846): when positive the node reports OutOfDisk, True while `nodefs.available`
    is below this many MiB, and the kubelet refuses new pods meanwhile. 0: no such condition."""
    max_pids: int = 4_194_304
    """The node's PID limit (`pid.available` = this minus the pods' emulated PIDs)."""
    pod_watch: PodWatch = "per-node"
    """`per-node`: each node watches its own pods (field selector spec.nodeName), as real
    kubelets do. `shared`: one watch of all pods for the process, dispatched by node (cheaper
    at thousands of nodes; the apiserver sees one watcher)."""

    runtime: Runtime = "emulated"
    """`emulated`: no container runs a process (the default). `process`: every pod's containers
    run as local processes (`kubemesh.kubelet.processes`) unless the pod is annotated
    `kubemesh.io/runtime: emulated`; `opt-in`: only pods annotated `kubemesh.io/runtime: process`."""
    runtime_dir: str | None = None
    """Where the process runtime keeps its pods' directories and process group records
    (`<runtime_dir>/<instance>`); None: `kubemesh-pods` in the system's temporary directory."""
    image_commands: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """The process runtime's command for a container without `command`, by image."""

    # Behaviour switches.
    no_node_lease: bool = False
    """The `no-node-lease` bug switch: no Lease; the NodeStatus update is the heartbeat."""
    pods_first_list_from_cache: bool = False
    """The `pods-list-from-watch-cache` bug switch: a node's pod informer starts from a list at
    resourceVersion "0" (`InformerSettings.first_list_from_cache`), whatever the apiserver's cache holds."""

    def __post_init__(self) -> None:
        if self.nodes < 0:
            raise ValueError("nodes must be >= 0")
        if self.node_offset < 0:
            raise ValueError("node offset must be >= 0")
        if self.node_status_update_frequency <= 0 or self.node_lease_duration <= 0:
            raise ValueError("heartbeat periods must be positive")
        if not 0 < self.node_lease_renew_interval_fraction < 1:
            raise ValueError("renew interval fraction must be in (0, 1)")
        for value in (*self.capacity.values(), *self.reserved.values()):
            parse_quantity(value)
        self.eviction_thresholds()

    @property
    def lease_renew_interval(self) -> float:
        """Cluster seconds between lease renewals (10 s by default)."""
        return self.node_lease_duration * self.node_lease_renew_interval_fraction

    @property
    def status_report_interval(self) -> float:
        """Cluster seconds after which an unchanged status is posted anyway."""
        if self.node_status_report_frequency is None:
            return self.node_status_update_frequency
        return self.node_status_report_frequency

    def eviction_thresholds(self) -> list[Threshold]:
        """The hard and soft eviction thresholds (raises ValueError when a flag is malformed)."""
        grace = parse_grace_periods(self.eviction_soft_grace_period)
        return [*parse_thresholds(self.eviction_hard, hard=True),
                *parse_thresholds(self.eviction_soft, hard=False, grace_periods=grace)]

    def node_names(self) -> list[str]:
        """The names of the nodes this process hosts, in index order."""
        return [self.node_name(i) for i in range(self.node_offset + 1, self.node_offset + self.nodes + 1)]

    def node_name(self, index: int) -> str:
        """The name of node number `index` (1-based)."""
        return f"{self.node_prefix}-{index}"

    def node_capacity(self) -> dict[str, str]:
        """Capacity with defaults filled in."""
        return {**DEFAULT_CAPACITY, **self.capacity}

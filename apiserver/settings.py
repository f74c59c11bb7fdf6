"""How one apiserver process is configured (`python -m kubemesh.apiserver` flags into `ServerSettings`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from kubemesh.apiserver.admission import TolerationDefaults
from kubemesh.apiserver.watching import WatchSettings
from kubemesh.services.process.gctuning import GcSettings


@dataclass(frozen=True, slots=True, kw_only=True)
class ServerSettings:
    """How one apiserver process is configured."""

    host: str = "127.0.0.1"
    port: int = 6443
    data_dir: str | None = None
    """Directory for the append-only log and snapshots; None keeps state in memory only."""
    storage: str = "memory"
    """`--storage`: `memory` (the store of this process, durable with `data_dir`) or `etcd` (objects in
    etcd at `etcd_endpoints`, the store in memory the watch cache in front of it:
    `kubemesh.apiserver.etcdcache`)."""
    etcd_endpoints: tuple[str, ...] = ()
    """`--etcd-endpoints`: etcd's client URLs (http://host:port), for `--storage etcd`."""
    etcd_prefix: str = "/registry"
    """`--etcd-prefix`: where the objects are kept in etcd (kube-apiserver's default)."""
    etcd_compaction_interval: float = 300.0
    """`--etcd-compaction-interval` (seconds; 0 disables): compact etcd to the revision of one interval
    before, as kube-apiserver does every 5 minutes."""
    fsync: bool = True
    """Acknowledge a write only after an fdatasync of the log covers it (group commit: one
    fdatasync per batch); survives machine crashes, not only process kills. `--no-fsync`: the
    write(2) alone, which survives a process kill only."""
    token: str | None = None
    """Bearer token required on everything but the health endpoints."""
    tls_cert: str | None = None
    """Serving certificate (PEM); with `tls_key`, the apiserver serves HTTPS, as kubectl needs
    to send a token at all (client-go sends no credentials over plain http)."""
    tls_key: str | None = None
    clock_rate: float = 1.0
    """Cluster seconds per wall second."""
    seed: int | None = None
    """Seed for uids and generated names; None for an OS-seeded RNG."""
    watch: WatchSettings = field(default_factory=WatchSettings)
    history_capacity: int = 1_000_000
    """Records kept in the history ring."""
    history_deliveries: bool = True
    """Record every watch delivery (the timeline of a race); off only for benchmarks."""
    chaos: bool = True
    """Serve the chaos front door (tests that install it with their own clock turn this off)."""
    chaos_forward_timeout: float = 5.0
    """Wall seconds a fault forwarded to a kubelet or component may take before its outcome is `info`."""
    gc: GcSettings = field(default_factory=GcSettings)
    """How the process keeps the cyclic collector's pauses short (kubemesh.services.process.gctuning)."""
    authorization_mode: str = "RBAC"
    """`--authorization-mode`: `RBAC` (upstream's authorizer over Roles and bindings; `system:masters`
    may do everything) or `AlwaysAllow` (every authenticated user may do everything)."""
    component_identities: bool = True
    """`--component-identities` (default; `--no-component-identities` turns it off): kubemesh's components
    act as their own users (system:kube-scheduler, system:kube-controller-manager, system:node:<name>)
    under their bootstrap roles and the node authorizer, not as the admin."""
    anonymous_auth: bool = False
    """`--anonymous-auth`: requests without a token are `system:anonymous` (RBAC decides) rather than 401."""
    service_cluster_ip_range: str = "10.96.0.0/12"
    """`--service-cluster-ip-range`: Services' cluster IPs; its first address is the `kubernetes` Service's."""
    service_node_port_range: str = "30000-32767"
    """`--service-node-port-range`: the node ports of NodePort and LoadBalancer Services."""
    advertise_address: str | None = None
    """`--advertise-address`: the address in the `kubernetes` endpoints (None: the bind address, or
    127.0.0.1 when that is unspecified)."""
    profile: str = "current"
    """`--profile`: the Kubernetes release whose defaults the flags took (`kubemesh profiles`)."""
    tolerations: TolerationDefaults = field(default_factory=TolerationDefaults)
    """DefaultTolerationSeconds: `--default-not-ready-toleration-seconds`,
    `--default-unreachable-toleration-seconds` and the release's taint keys."""
    system_pods: bool = True
    """What kubeadm puts in kube-system: the control plane's mirror pods
    (`kubemesh.apiserver.controlplane`) and cluster DNS (`kubemesh.apiserver.addons`).
    `--no-system-pods` leaves kube-system empty (scenario meshes, which hold only their own objects)."""


def _address(settings: ServerSettings) -> str:
    """`--advertise-address`, else the bind address, else (bound to every address, as in a container) the host name."""
    import socket  # noqa: PLC0415 - only for this rare case

    address = settings.advertise_address or settings.host
    return socket.gethostname() if address in ("0.0.0.0", "::", "") else address


def own_url(settings: ServerSettings) -> str:
    """How clients reach this apiserver: its scheme, `_address` and port."""
    scheme = "https" if settings.tls_cert and settings.tls_key else "http"
    return f"{scheme}://{_address(settings)}:{settings.port}"


def apiserver_identity(settings: ServerSettings) -> str:
    """The name of an apiserver among several over one etcd: `apiserver-<address>-<port>`.

    The address is `--advertise-address`, else the bind address, else (bound to every address,
    as in a container) the host name: each apiserver of a compose stack has its own.
    """
    return f"apiserver-{_address(settings)}-{settings.port}"

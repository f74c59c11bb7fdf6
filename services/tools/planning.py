"""`kubemesh plan`: the topology and resources of an emulated cluster of N nodes on a real cluster.

The model (docs/capacity.md writes it out with the 100,000-node example) multiplies the unit
costs that `benchmarks/unit_costs.py` measured (`benchmarks/unit_costs.json`, installed as
`kubemesh/unit_costs.json`) by the load N nodes make at steady state:

* writes/s W = N / lease period (each node renews its Lease) + N / status report period (each
  node posts its status when nothing changed; the current profile's 300 s);
* watch events/s E = N / lease period (the controller-manager's Lease informer) + N / report
  period x (2 + H) (the Node informers of the scheduler, the controller-manager and each of
  the H kubelet hosts);
* an apiserver serves its share of the writes and watch events, and also takes every write into
  its own watch cache from etcd: cores = (W x write cost + E x event cost) / A + W x event cost.
  Its memory does not split: every replica caches every object;
* a kubelet host's cores and memory grow with the nodes it hosts; the controller-manager and the
  scheduler run one active replica (leader election) whatever the size;
* etcd takes every write (each member applies all of them): its capacity is the writes/s
  `etcdctl check perf` sustained.

Every kubemesh component is one Python process: it can use at most one core. Each is sized to
`target_share` of that core (a start-up burst or a GC pause must not delay lease renewals past
their deadline), and the number of replicas of what scales out (kubelet hosts, apiservers)
follows. What cannot scale out (etcd's writes, the apiservers' watch-cache intake, the one
active controller-manager) has a node count where it saturates: the smallest is the first
bottleneck.

Pure arithmetic: no I/O except `load_unit_costs`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Final

from kubemesh.services.mesh.launching import NODES_PER_KUBELET_AUTO, SHARED_POD_WATCH_ABOVE

NODES_PER_HOST_MAX: Final = NODES_PER_KUBELET_AUTO
"""At most this many nodes per kubelet host (the launcher's one process per 5,000 nodes)."""

MIB_QUANTUM: Final = 16
MILLICORE_QUANTUM: Final = 10


@dataclass(frozen=True, kw_only=True)
class ComponentCost:
    """Measured costs of one component process."""

    cores_per_1000_nodes: float
    mib_base: float
    mib_per_1000_nodes: float


@dataclass(frozen=True, kw_only=True)
class UnitCosts:
    """What `benchmarks/unit_costs.py` measured (see its docstring for how)."""

    kubelet: ComponentCost
    controller_manager: ComponentCost
    scheduler: ComponentCost
    apiserver_mib_base: float
    apiserver_mib_per_1000_nodes: float
    apiserver_mib_per_1000_pods: float
    apiserver_cores_per_1000_writes: float
    """Cores per 1,000 writes/s."""
    apiserver_cores_per_1000_events: float
    """Cores per 1,000 watch events/s."""
    etcd_writes_per_s: float
    """The writes/s `etcdctl check perf` sustained against one member."""
    etcd_cores_per_1000_writes: float
    measured: str = ""

    @classmethod
    def from_document(cls, doc: dict[str, Any]) -> UnitCosts:
        """From the JSON `benchmarks/unit_costs.py` writes."""
        def component(name: str) -> ComponentCost:
            c = doc[name]
            return ComponentCost(cores_per_1000_nodes=float(c["cores_per_1000_nodes"]),
                                 mib_base=float(c["mib_base"]), mib_per_1000_nodes=float(c["mib_per_1000_nodes"]))

        api, etcd = doc["apiserver"], doc["etcd"]
        return cls(kubelet=component("kubelet"), controller_manager=component("controller_manager"),
                   scheduler=component("scheduler"), apiserver_mib_base=float(api["mib_base"]),
                   apiserver_mib_per_1000_nodes=float(api["mib_per_1000_nodes"]),
                   apiserver_mib_per_1000_pods=float(api["mib_per_1000_pods"]),
                   apiserver_cores_per_1000_writes=float(api["cores_per_1000_writes_per_s"]),
                   apiserver_cores_per_1000_events=float(api["cores_per_1000_watch_events_per_s"]),
                   etcd_writes_per_s=float(etcd["writes_per_s"]),
                   etcd_cores_per_1000_writes=float(etcd["cores_per_1000_writes_per_s"]),
                   measured=str(doc.get("measured", "")))


def load_unit_costs(path: Path | None = None) -> UnitCosts:
    """The unit costs in `path`, by default the measured ones installed with kubemesh."""
    text = path.read_text() if path is not None else \
        resources.files("kubemesh").joinpath("unit_costs.json").read_text()
    return UnitCosts.from_document(json.loads(text))


@dataclass(frozen=True, kw_only=True)
class PlanSettings:
    """What to plan for."""

    nodes: int
    pods: int = 0
    lease_seconds: float = 10.0
    """Each node renews its Lease this often (the kubelet's 10 s)."""
    status_report_seconds: float = 300.0
    """An unchanged node status is posted this often (the current profile's 300 s)."""
    target_share: float = 0.6
    """The share of its one core a component process is planned to use."""
    headroom: float = 1.25
    """Requests are the predicted use times this."""
    kubelet_hosts: int = 0
    """Kubelet hosts to plan with (0: as many as keep each within `target_share`)."""
    apiservers: int = 0
    """Apiservers to plan with (0: as many as keep each within `target_share`)."""


@dataclass(frozen=True, kw_only=True)
class Part:
    """One workload of the plan: its replicas and what each replica uses and requests."""

    name: str
    replicas: int
    cores: float
    """Predicted cores of one replica."""
    mib: float
    """Predicted memory (MiB) of one replica."""
    cpu_request: str
    memory_request: str
    memory_limit: str
    active: int = 0
    """Replicas that work (the others stand by under leader election); 0: all of them."""
    note: str = ""


@dataclass(frozen=True, kw_only=True)
class Limit:
    """Something that does not scale out, and the node count where it saturates."""

    what: str
    nodes: int
    """Nodes at which it reaches its capacity (the other settings as planned)."""
    use: float
    """Its use at the planned node count, as a share of its capacity."""


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What `plan` computed: the load, the workloads and the limits."""

    settings: PlanSettings
    writes_per_s: float
    lease_writes_per_s: float
    status_writes_per_s: float
    watch_events_per_s: float
    kubelet_hosts: int
    nodes_per_host: int
    parts: list[Part]
    limits: list[Limit] = field(default_factory=list)
    measured: str = ""

    @property
    def bottleneck(self) -> Limit:
        """The first thing to saturate as the cluster grows."""
        return min(self.limits, key=lambda lim: lim.nodes)

    def part(self, name: str) -> Part:
        """The workload `name` (etcd, apiserver, kubelet, controller-manager, scheduler)."""
        return next(p for p in self.parts if p.name == name)

    def to_document(self) -> dict[str, Any]:
        """The plan as `kubemesh plan --json` prints it."""
        doc = asdict(self)
        doc["bottleneck"] = asdict(self.bottleneck)
        doc["total_cpu_requests_cores"] = round(sum(p.replicas * _cores(p.cpu_request) for p in self.parts), 2)
        doc["total_memory_requests_mib"] = sum(p.replicas * _mib(p.memory_request) for p in self.parts)
        return doc


def _cores(quantity: str) -> float:
    return int(quantity.removesuffix("m")) / 1000


def _mib(quantity: str) -> int:
    return int(quantity.removesuffix("Mi"))


def _whole(x: float) -> int:
    """`x` rounded down, but not below a whole number it misses by a float's error (0.6 / 0.1)."""
    return math.floor(x + 1e-6)


def cpu_quantity(cores: float) -> str:
    """A CPU quantity in millicores, rounded up to 10m."""
    return f"{max(MILLICORE_QUANTUM, math.ceil(cores * 1000 / MILLICORE_QUANTUM) * MILLICORE_QUANTUM)}m"


def memory_quantity(mib: float) -> str:
    """A memory quantity in Mi, rounded up to 16Mi."""
    return f"{max(MIB_QUANTUM, math.ceil(mib / MIB_QUANTUM) * MIB_QUANTUM)}Mi"


def _part(name: str, *, replicas: int, cores: float, mib: float, headroom: float, active: int = 0,
          note: str = "") -> Part:
    request_mib = mib * headroom
    return Part(name=name, replicas=replicas, cores=round(cores, 4), mib=round(mib, 1),
                cpu_request=cpu_quantity(cores * headroom), memory_request=memory_quantity(request_mib),
                memory_limit=memory_quantity(2 * request_mib), active=active, note=note)


def plan(settings: PlanSettings, costs: UnitCosts) -> Plan:
    """The topology and resources for `settings.nodes` nodes."""
    n, s = settings.nodes, settings
    if n < 1:
        raise ValueError("plan at least one node")
    per_core = s.target_share
    lease_w = n / s.lease_seconds
    status_w = n / s.status_report_seconds
    writes = lease_w + status_w

    # Kubelet hosts: as many nodes per host as keep it under its share of a core.
    k = costs.kubelet
    by_cpu = _whole(per_core / k.cores_per_1000_nodes * 1000) if k.cores_per_1000_nodes > 0 else NODES_PER_HOST_MAX
    hosts = s.kubelet_hosts or math.ceil(n / max(1, min(NODES_PER_HOST_MAX, by_cpu)))
    per_host = math.ceil(n / hosts)
    events = lease_w + status_w * (2 + hosts)

    # Apiservers: their share of the requests, plus every write's intake into each watch cache.
    c_w = costs.apiserver_cores_per_1000_writes / 1000
    c_e = costs.apiserver_cores_per_1000_events / 1000
    intake = writes * c_e
    shared = writes * c_w + events * c_e
    room = per_core - intake
    apiservers = s.apiservers or max(1 if n <= 1000 else 3, math.ceil(shared / room) if room > 0 else 1)
    api_cores = shared / apiservers + intake
    api_mib = (costs.apiserver_mib_base + n / 1000 * costs.apiserver_mib_per_1000_nodes
               + s.pods / 1000 * costs.apiserver_mib_per_1000_pods)

    ha = n > 1000
    members = 3 if ha else 1
    standby = 2 if ha else 1
    cm, sch = costs.controller_manager, costs.scheduler
    parts = [
        _part("etcd", replicas=members, cores=writes * costs.etcd_cores_per_1000_writes / 1000,
              mib=512.0 / s.headroom, headroom=s.headroom,
              note=f"capacity {costs.etcd_writes_per_s:,.0f} writes/s (etcdctl check perf, one member); memory not "
                   "measured: 512Mi"),
        _part("apiserver", replicas=apiservers, cores=api_cores, mib=api_mib, headroom=s.headroom,
              note="every replica caches every object"),
        _part("kubelet", replicas=hosts, cores=per_host / 1000 * k.cores_per_1000_nodes,
              mib=k.mib_base + per_host / 1000 * k.mib_per_1000_nodes, headroom=s.headroom,
              note=f"{per_host:,} nodes per host"),
        _part("controller-manager", replicas=standby, active=1, cores=n / 1000 * cm.cores_per_1000_nodes,
              mib=cm.mib_base + n / 1000 * cm.mib_per_1000_nodes, headroom=s.headroom),
        _part("scheduler", replicas=standby, active=1, cores=n / 1000 * sch.cores_per_1000_nodes,
              mib=sch.mib_base + n / 1000 * sch.mib_per_1000_nodes, headroom=s.headroom,
              note="steady state: scheduling bursts not modelled"),
    ]

    # What does not scale out, and the node count where each saturates.
    per_node_writes = 1 / s.lease_seconds + 1 / s.status_report_seconds
    limits = [Limit(what=f"etcd writes ({costs.etcd_writes_per_s:,.0f}/s measured)",
                    nodes=_whole(costs.etcd_writes_per_s / per_node_writes), use=writes / costs.etcd_writes_per_s)]
    if c_e > 0:
        limits.append(Limit(what="apiserver watch-cache intake (every write, in every replica)",
                            nodes=_whole(per_core / (c_e * per_node_writes)), use=intake / per_core))
    if cm.cores_per_1000_nodes > 0:
        limits.append(Limit(what="controller-manager (one active replica)",
                            nodes=_whole(per_core / cm.cores_per_1000_nodes * 1000),
                            use=n / 1000 * cm.cores_per_1000_nodes / per_core))
    return Plan(settings=s, writes_per_s=round(writes, 1), lease_writes_per_s=round(lease_w, 1),
                status_writes_per_s=round(status_w, 1), watch_events_per_s=round(events, 1), kubelet_hosts=hosts,
                nodes_per_host=per_host, parts=parts, limits=sorted(limits, key=lambda lim: lim.nodes),
                measured=costs.measured)


def render_text(p: Plan) -> str:
    """The plan as `kubemesh plan` prints it."""
    s = p.settings
    lines = [f"kubemesh plan: {s.nodes:,} nodes, {s.pods:,} pods; leases renewed every {s.lease_seconds:g} s, "
             f"node status every {s.status_report_seconds:g} s",
             f"load: {p.writes_per_s:,.0f} writes/s ({p.lease_writes_per_s:,.0f} lease renewals, "
             f"{p.status_writes_per_s:,.0f} node status), {p.watch_events_per_s:,.0f} watch events/s",
             f"topology: {p.kubelet_hosts} kubelet host(s) x {p.nodes_per_host:,} nodes, "
             f"{p.part('apiserver').replicas} apiserver(s), {p.part('etcd').replicas} etcd member(s)",
             ""]
    rows = [["component", "replicas", "cores each", "MiB each", "cpu request", "memory request", "memory limit", ""]]
    for part in p.parts:
        replicas = f"{part.replicas} ({part.active} active)" if part.active else str(part.replicas)
        rows.append([part.name, replicas, f"{part.cores:.3f}", f"{part.mib:,.0f}", part.cpu_request,
                     part.memory_request, part.memory_limit, part.note])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    doc = p.to_document()
    lines += ["", f"requests in all: {doc['total_cpu_requests_cores']:g} cores, "
                  f"{doc['total_memory_requests_mib'] / 1024:,.1f} GiB", "limits (what does not scale out):"]
    for lim in p.limits:
        over = "  EXCEEDED" if lim.use > 1 else ""
        lines.append(f"  {lim.what}: saturates at {lim.nodes:,} nodes ({lim.use:.0%} used){over}")
    b = p.bottleneck
    lines.append(f"first bottleneck: {b.what}, at {b.nodes:,} nodes")
    if p.measured:
        lines.append(f"unit costs measured {p.measured} (benchmarks/unit_costs.py; docs/capacity.md)")
    return "\n".join(lines) + "\n"


_WORKLOADS: Final = {"etcd": ("StatefulSet", "kubemesh-etcd"), "apiserver": ("Deployment", "kubemesh-apiserver"),
                     "kubelet": ("StatefulSet", "kubemesh-kubelet"),
                     "controller-manager": ("Deployment", "kubemesh-controller-manager"),
                     "scheduler": ("Deployment", "kubemesh-scheduler")}


def render_patches(p: Plan) -> dict[str, str]:
    """Strategic-merge patches of deploy/base for the plan, one file per workload.

    The files are `<part>.yaml`, what deploy/overlays/*/plan/ hold: kustomize before 5.1 (kubectl
    1.27's) reads one object per patch file.
    """
    import yaml  # noqa: PLC0415 - only this rendering needs it

    s = p.settings
    flags = [f"--nodes {s.nodes}"]
    if s.pods:
        flags.append(f"--pods {s.pods}")
    if s.lease_seconds != PlanSettings.lease_seconds:
        flags.append(f"--lease-seconds {s.lease_seconds:g}")
    if s.status_report_seconds != PlanSettings.status_report_seconds:
        flags.append(f"--status-seconds {s.status_report_seconds:g}")
    if s.kubelet_hosts:
        flags.append(f"--kubelet-hosts {s.kubelet_hosts}")
    if s.apiservers:
        flags.append(f"--apiservers {s.apiservers}")
    head = (f"# Written by `kubemesh plan {' '.join(flags)} --kustomize DIR` from the unit costs measured "
            f"{p.measured or '(date unknown)'}:\n# {p.kubelet_hosts} kubelet host(s) x {p.nodes_per_host:,} nodes. "
            "Generate it again rather than edit it.\n")
    out = {}
    for part in p.parts:
        kind, name = _WORKLOADS[part.name]
        container: dict[str, Any] = {"name": part.name, "resources": {
            "requests": {"cpu": part.cpu_request, "memory": part.memory_request},
            "limits": {"memory": part.memory_limit}}}
        if part.name == "kubelet":
            # One pod watch per node, as real kubelets, up to the launcher's threshold; one for the
            # process above it (thousands of watches are thousands of TLS connections to hold), as
            # in the runs that measured the costs.
            watch = "shared" if p.nodes_per_host > SHARED_POD_WATCH_ABOVE else "per-node"
            container["env"] = [{"name": "KUBEMESH_NODES", "value": str(p.nodes_per_host)},
                                {"name": "KUBEMESH_POD_WATCH", "value": watch}]
        if part.name == "etcd":
            container["env"] = [{"name": "ETCD_INITIAL_CLUSTER", "value": ",".join(
                f"kubemesh-etcd-{i}=http://kubemesh-etcd-{i}.kubemesh-etcd:2380" for i in range(part.replicas))}]
        doc = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name},
               "spec": {"replicas": part.replicas, "template": {"spec": {"containers": [container]}}}}
        out[f"{part.name}.yaml"] = head + yaml.safe_dump(doc, sort_keys=False)
    return out

"""Service cluster IPs and node ports, and the `default/kubernetes` Service, in the write path.

kube-apiserver's Service storage allocates a cluster IP from `--service-cluster-ip-range` and
node ports from `--service-node-port-range` while a Service is written, and a small controller
keeps the `default/kubernetes` Service with its Endpoints and EndpointSlice. Here one
`ServiceIPs`, a `registry.WriteHook`, does both, synchronously, in the registry's write path.

* **Defaults** (upstream `SetDefaults_Service`): `type: ClusterIP`, `sessionAffinity: None`
  (`ClientIP` gets its 10800 s timeout), each port's `protocol: TCP` and `targetPort` = `port`,
  `internalTrafficPolicy: Cluster` (not for ExternalName), `externalTrafficPolicy: Cluster` for
  externally reachable services, `allocateLoadBalancerNodePorts: true` for LoadBalancer; on
  create and on every update (a PUT may carry a spec without them). `admission.py` sets only
  `status.loadBalancer` for Services: everything else is here.
* **IP families** (single-stack, the family of the range): `ipFamilies: [IPv4]` and
  `ipFamilyPolicy: SingleStack`, except that a headless Service without a selector gets
  `RequireDualStack` with both families, as upstream; dual-stack requests are refused with
  upstream's causes.
* **Cluster IPs**: a requested `clusterIP`/`clusterIPs` is checked (422 `spec.clusterIPs:
  Invalid value: [...]: failed to allocate IP X: provided IP is already allocated`, or `the
  provided IP (X) is not in the valid range. The range of valid IPs is 10.96.0.0/12`); otherwise
  one is drawn from the dynamic (upper) band first, then the static (lower) band (KEP-3070), from
  a random offset of this hook's seeded RNG scanning forward. Headless (`clusterIP: None`) and
  `type: ExternalName` services get none.
* **Node ports** for NodePort and LoadBalancer services (unless `allocateLoadBalancerNodePorts:
  false`): requested ones are checked (422 on `spec.ports[i].nodePort`: `provided port is
  already allocated` / `provided port is not in the valid range. The range of valid ports is
  30000-32767`), missing ones drawn as for IPs (offset band of upstream's port allocator); ports
  of one Service with the same port number share one node port; other types may not set one.
* **Updates** as upstream's REST layer: allocated values a client left out are kept
  (`patchAllocatedValues`), `clusterIP` and `clusterIPs` are kept in step
  (`normalizeClusterIPs`), fields the new type does not use are dropped when the client left
  them unchanged (`dropTypeDependentFields`), and the primary cluster IP may not change
  (`spec.clusterIPs[0]: Invalid value: [...]: may not change once set`) except to or from
  ExternalName (ExternalName to ClusterIP allocates, the reverse releases).
* **Release**: an IP or node port is free again once no stored Service holds it (deleted, or
  updated to a type that drops it) and can be handed out again at once.
* **Invariant: the allocation is a function of the store.** `admit` only *chooses* (draws a free
  value or checks a requested one) and records nothing; `written` records what the stored object
  holds and `removed` releases it. A write refused after `admit` (validation, AlreadyExists,
  namespace checks) and a dry run therefore leak nothing, and `restore` rebuilds exactly this
  state from the store after a restart with `--data-dir` (no double allocation). This relies on
  the registry's write path being synchronous: nothing else is admitted between one request's
  `admit` and its store write, so two requests can never choose the same free value.
* **`default/kubernetes`** (upstream's kubernetesservice controller and lease endpoint
  reconciler): the Service (`component: apiserver`, `provider: kubernetes`, the first address of
  the range, port `https` 443 to the apiserver's port), the Endpoints `kubernetes` (label
  `endpointslice.kubernetes.io/skip-mirror: "true"`, the advertised address) and the
  EndpointSlice `kubernetes` (label `kubernetes.io/service-name`), created at start and
  reconciled there (ports and type of the Service; addresses and ports of the other two), created
  again as soon as one is deleted and put right as soon as a client changes what is reconciled.
  These writes are attributed to `kube-apiserver` in the history.
"""

from __future__ import annotations

import contextlib
import ipaddress
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Final

import structlog

from kubemesh.apiserver import errors, fielderrors
from kubemesh.apiserver.fielderrors import Cause
from kubemesh.apiserver.history import WRITER
from kubemesh.apiserver.registry import Registry, WriteOptions
from kubemesh.apiserver.settings import ServerSettings
from kubemesh.apiserver.storage import EventType
from kubemesh.services.model.kinds import ENDPOINTS, ENDPOINTSLICES, SERVICES, Kind, Obj, key_of, rv_of

_log = structlog.get_logger("apiserver.serviceips")

DEFAULT_SERVICE_CIDR: Final = "10.96.0.0/12"
"""`--service-cluster-ip-range` of kubeadm and kind (kube-apiserver's own default is 10.0.0.0/24)."""
DEFAULT_NODE_PORT_RANGE: Final = "30000-32767"
"""`--service-node-port-range`."""
DEFAULT_SECURE_PORT: Final = 6443
"""The `kubernetes` Service's target port when the apiserver's port is not known (0: chosen at bind)."""

TYPES: Final = ("ClusterIP", "ExternalName", "LoadBalancer", "NodePort")
IP_FAMILIES: Final = ("IPv4", "IPv6")
IP_FAMILY_POLICIES: Final = ("PreferDualStack", "RequireDualStack", "SingleStack")
CLIENT_IP_TIMEOUT: Final = 10800
"""Upstream `DefaultClientIPServiceAffinitySeconds`."""
NONE: Final = "None"

KUBERNETES_KEY: Final = "default/kubernetes"
KUBERNETES_LABELS: Final = {"component": "apiserver", "provider": "kubernetes"}
SKIP_MIRROR: Final = "endpointslice.kubernetes.io/skip-mirror"
SERVICE_NAME_LABEL: Final = "kubernetes.io/service-name"
WRITER_IDENTITY: Final = ("kube-apiserver", "kube-apiserver")
"""Who the history says wrote what this hook writes itself."""

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


# ---------------------------------------------------------------------------------------------
# Ranges.


def _family(address: Address) -> str:
    return "IPv4" if address.version == 4 else "IPv6"


def _parse_ip(value: Any) -> Address | None:
    """An IP address, or None when `value` is not one (Go's parser refuses leading zeros too)."""
    if not isinstance(value, str):
        return None
    try:
        return ipaddress.ip_address(value)
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Band:
    """`size` consecutive integers from `first`; the lowest `static` are preferred last.

    KEP-3070 (IPs) and KEP-3668 (node ports): dynamic allocation draws from the upper band
    first, so the lower band stays free for values users ask for by number.
    """

    first: int
    size: int
    static: int

    def contains(self, value: int) -> bool:
        """Whether `value` is one of the band's values."""
        return self.first <= value < self.first + self.size

    def pick(self, taken: Callable[[int], bool], rng: random.Random) -> int | None:
        """A value that is not `taken`: from a random start in the upper band, then the lower; None when full."""
        for lo, hi in ((self.static, self.size), (0, self.static)):
            span = hi - lo
            if span <= 0:
                continue
            start = rng.randrange(span)
            for i in range(span):
                value = self.first + lo + (start + i) % span
                if not taken(value):
                    return value
        return None


def _static_band(size: int, *, low: int, high: int, step: int) -> int:
    """Upstream `calculateRangeOffset`: min(max(low, size/step), high), 0 for tiny ranges."""
    if size <= low:
        return 0
    return min(max(low, size // step), high)


@dataclass(frozen=True, slots=True)
class IPRange:
    """The service CIDR: its usable addresses (not the network address, nor IPv4's broadcast)."""

    cidr: str
    family: str
    band: Band

    @classmethod
    def parse(cls, cidr: str) -> IPRange:
        """Parse `--service-cluster-ip-range` (one CIDR); raises ValueError."""
        net = ipaddress.ip_network(cidr.strip(), strict=True)
        total = net.num_addresses
        size = max(total - (2 if net.version == 4 else 1), 0)
        return cls(cidr=str(net), family=_family(net.network_address),
                   band=Band(first=int(net.network_address) + 1, size=size,
                             static=_static_band(total, low=16, high=256, step=16)))

    def address(self, value: int) -> str:
        """The text of the address numbered `value`."""
        return str(ipaddress.ip_address(value)) if self.family == "IPv4" else str(ipaddress.IPv6Address(value))

    @property
    def first_address(self) -> str:
        """The first usable address: the `kubernetes` Service's."""
        return self.address(self.band.first)

    def contains(self, address: Address) -> bool:
        """Whether an address is one this range hands out."""
        return _family(address) == self.family and self.band.contains(int(address))


@dataclass(frozen=True, slots=True)
class PortRange:
    """`--service-node-port-range`: `30000-32767` (or `30000+2767`, or one port)."""

    text: str
    band: Band

    @classmethod
    def parse(cls, text: str) -> PortRange:
        """Parse the flag's value; raises ValueError."""
        value = text.strip()
        if "-" in value:
            lo_text, hi_text = value.split("-", 1)
            lo, hi = int(lo_text), int(hi_text)
        elif "+" in value:
            lo_text, extra = value.split("+", 1)
            lo = int(lo_text)
            hi = lo + int(extra)
        else:
            lo = hi = int(value)
        if not 0 < lo <= hi < 65536:
            raise ValueError(f"invalid port range {text!r}")
        size = hi - lo + 1
        return cls(text=f"{lo}-{hi}", band=Band(first=lo, size=size, static=_static_band(size, low=16, high=128,
                                                                                         step=32)))


# ---------------------------------------------------------------------------------------------
# Reading a Service.


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _ports(spec: Obj) -> list[dict[str, Any]]:
    """The port entries that are objects (validation reports the others)."""
    ports = spec.get("ports")
    return [p for p in ports if isinstance(p, dict)] if isinstance(ports, list) else []


def _needs_cluster_ip(spec: Obj) -> bool:
    return spec.get("type") != "ExternalName"


def _needs_node_port(spec: Obj) -> bool:
    return spec.get("type") in ("NodePort", "LoadBalancer")


def _externally_accessible(spec: Obj) -> bool:
    kind = spec.get("type")
    return kind in ("NodePort", "LoadBalancer") or (kind == "ClusterIP" and bool(spec.get("externalIPs")))


def _cluster_ips(spec: Obj) -> list[Any]:
    ips = spec.get("clusterIPs")
    return list(ips) if isinstance(ips, list) else []


def _headless(spec: Obj) -> bool:
    ips = _cluster_ips(spec)
    return len(ips) == 1 and ips[0] == NONE


def _node_port_numbers(spec: Obj) -> set[int]:
    return {p["nodePort"] for p in _ports(spec) if _is_int(p.get("nodePort")) and p["nodePort"] != 0}


def held_ips(svc: Obj) -> set[int]:
    """The cluster IPs a stored Service holds, as integers."""
    spec = svc.get("spec")
    if not isinstance(spec, dict) or not _needs_cluster_ip(spec):
        return set()
    values = [*_cluster_ips(spec), spec.get("clusterIP")]
    return {int(a) for a in (_parse_ip(v) for v in values) if a is not None}


def held_node_ports(svc: Obj) -> set[int]:
    """The node ports a stored Service holds."""
    spec = svc.get("spec")
    return _node_port_numbers(spec) if isinstance(spec, dict) else set()


def _dict(value: Any) -> Obj:
    """`value` if it is an object, else an empty one."""
    return value if isinstance(value, dict) else {}


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


# ---------------------------------------------------------------------------------------------
# Upstream's defaulting and the REST layer's fix-ups, on a spec this hook owns (a fresh copy).


def set_defaults(spec: Obj) -> None:
    """`SetDefaults_Service` on a spec whose `type` is valid."""
    affinity = spec.get("sessionAffinity") or "None"
    spec["sessionAffinity"] = affinity
    if affinity == "None":
        spec.pop("sessionAffinityConfig", None)
    elif affinity == "ClientIP":
        config = spec.get("sessionAffinityConfig")
        client = config.get("clientIP") if isinstance(config, dict) else None
        if not isinstance(client, dict) or client.get("timeoutSeconds") is None:
            spec["sessionAffinityConfig"] = {"clientIP": {"timeoutSeconds": CLIENT_IP_TIMEOUT}}
    svc_type = spec["type"]
    for port in _ports(spec):
        if not port.get("protocol"):
            port["protocol"] = "TCP"
        target = port.get("targetPort")
        if (target is None or target == "" or (_is_int(target) and target == 0)) and _is_int(port.get("port")):
            port["targetPort"] = port["port"]
    if _externally_accessible(spec) and not spec.get("externalTrafficPolicy"):
        spec["externalTrafficPolicy"] = "Cluster"
    if spec.get("internalTrafficPolicy") is None and svc_type in ("ClusterIP", "NodePort", "LoadBalancer"):
        spec["internalTrafficPolicy"] = "Cluster"
    if svc_type == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts") is None:
        spec["allocateLoadBalancerNodePorts"] = True


def drop_type_dependent_fields(spec: Obj, old: Obj) -> None:
    """Upstream `dropTypeDependentFields`: what the new type does not use goes, if the client left it as it was."""
    if _needs_cluster_ip(old) and not _needs_cluster_ip(spec):
        if spec.get("clusterIP") == old.get("clusterIP") and _cluster_ips(spec) == _cluster_ips(old):
            spec.pop("clusterIP", None)
            spec.pop("clusterIPs", None)
        if spec.get("ipFamilies") == old.get("ipFamilies"):
            spec.pop("ipFamilies", None)
        if spec.get("ipFamilyPolicy") == old.get("ipFamilyPolicy"):
            spec.pop("ipFamilyPolicy", None)
    if _needs_node_port(old) and not _needs_node_port(spec) and _node_port_numbers(spec) <= _node_port_numbers(old):
        for port in _ports(spec):
            port.pop("nodePort", None)
    if old.get("type") == "LoadBalancer" and spec.get("type") != "LoadBalancer" \
            and spec.get("allocateLoadBalancerNodePorts") is not None \
            and spec.get("allocateLoadBalancerNodePorts") == old.get("allocateLoadBalancerNodePorts"):
        spec.pop("allocateLoadBalancerNodePorts", None)
    if _externally_accessible(old) and not _externally_accessible(spec) \
            and spec.get("externalTrafficPolicy") == old.get("externalTrafficPolicy"):
        spec.pop("externalTrafficPolicy", None)
    if old.get("type") != "ExternalName" and spec.get("type") == "ExternalName" \
            and spec.get("internalTrafficPolicy") == old.get("internalTrafficPolicy"):
        spec.pop("internalTrafficPolicy", None)


def patch_allocated_values(spec: Obj, old: Obj) -> None:
    """Upstream `patchAllocatedValues`: allocated values an update left out are kept (idempotent PUTs)."""
    if _needs_cluster_ip(old) and _needs_cluster_ip(spec):
        if spec.get("clusterIP") in (None, "") and old.get("clusterIP"):
            spec["clusterIP"] = old["clusterIP"]
        if not _cluster_ips(spec) and _cluster_ips(old):
            spec["clusterIPs"] = list(_cluster_ips(old))
    if _needs_node_port(old) and _needs_node_port(spec):
        used = _node_port_numbers(old) & _node_port_numbers(spec)
        by_name = {p.get("name") or "": p.get("nodePort") for p in _ports(old)}
        for port in _ports(spec):
            if port.get("nodePort") in (None, 0):
                previous = by_name.get(port.get("name") or "")
                if _is_int(previous) and previous not in used:
                    port["nodePort"] = previous


def normalize_cluster_ips(spec: Obj, old: Obj | None) -> None:
    """Upstream `normalizeClusterIPs`: keep the singular and the plural field in step."""
    cluster_ip = spec.get("clusterIP") or ""
    if old is None:
        if cluster_ip and not _cluster_ips(spec):
            spec["clusterIPs"] = [cluster_ip]
        return
    old_ip = old.get("clusterIP") or ""
    same_plural = _cluster_ips(spec) == _cluster_ips(old)
    if _cluster_ips(old) and not _cluster_ips(spec) and old_ip == cluster_ip:
        spec["clusterIPs"] = list(_cluster_ips(old))  # an old client patching something else
        same_plural = True
    if old_ip != cluster_ip:
        if old_ip and not cluster_ip and same_plural:
            spec.pop("clusterIPs", None)  # a client clearing the singular clears both
        if cluster_ip and same_plural:
            spec["clusterIPs"] = [cluster_ip]  # the singular changed: the plural follows (and is checked)


def cluster_ip_update_causes(spec: Obj, old: Obj) -> list[Cause]:
    """Upstream `validateUpgradeDowngradeClusterIPs` for one family: the primary IP may not change."""
    if spec.get("type") == "ExternalName" or old.get("type") == "ExternalName":
        return []
    if _headless(spec) and _headless(old):
        return []
    new_ips, old_ips = _cluster_ips(spec), _cluster_ips(old)
    shown = spec.get("clusterIPs")
    if len(new_ips) == len(old_ips):
        return [fielderrors.invalid(f"spec.clusterIPs[{i}]", shown, "may not change once set")
                for i, ip in enumerate(old_ips) if ip != new_ips[i]]
    if len(old_ips) > len(new_ips):
        if not new_ips:
            return [fielderrors.invalid("spec.clusterIPs[0]", shown, "primary clusterIP can not be unset")]
        if new_ips[0] != old_ips[0]:
            return [fielderrors.invalid("spec.clusterIPs[0]", shown, "may not change once set")]
        return []
    if old_ips and new_ips[0] != old_ips[0]:
        return [fielderrors.invalid("spec.clusterIPs[0]", shown, "may not change once set")]
    return []


# ---------------------------------------------------------------------------------------------
# The hook.


class ServiceIPs:
    """Cluster IPs, node ports and `default/kubernetes` of one apiserver (a `registry.WriteHook`)."""

    def __init__(self, *, registry: Registry, rng: random.Random, cidr: str = DEFAULT_SERVICE_CIDR,
                 node_ports: str = DEFAULT_NODE_PORT_RANGE, endpoint_address: str = "127.0.0.1",
                 endpoint_port: int = DEFAULT_SECURE_PORT) -> None:
        """A hook over `registry`'s store; nothing is recorded until `restore`.

        Args:
            registry: The registry whose writes this hook sees (and through which it writes).
            rng: Draws the start of each scan for a free IP or port (seeded: runs repeat).
            cidr: The service CIDR (one family).
            node_ports: The node port range.
            endpoint_address: The apiserver's advertised address, in `default/kubernetes`'s endpoints.
            endpoint_port: The apiserver's port (the `kubernetes` Service's target port).
        """
        self.registry = registry
        self.rng = rng
        self.ips = IPRange.parse(cidr)
        self.node_ports = PortRange.parse(node_ports)
        address = _parse_ip(endpoint_address)
        if address is None:
            raise ValueError(f"not an IP address: {endpoint_address!r}")
        self.endpoint_address = str(address)
        self.endpoint_family = _family(address)
        self.endpoint_port = endpoint_port if 0 < endpoint_port < 65536 else DEFAULT_SECURE_PORT
        self._ip_owner: dict[int, str] = {}
        """Every cluster IP a stored Service holds (as an integer) → that Service's key."""
        self._port_owner: dict[int, str] = {}
        """Every node port a stored Service holds → that Service's key."""
        self._reconciling = False
        """While this hook writes `default/kubernetes` itself (its own writes come back here)."""

    @classmethod
    def install(cls, *, registry: Registry, settings: ServerSettings) -> ServiceIPs:
        """Build the hook for a server's settings, hook it in, rebuild it from the store, reconcile `kubernetes`.

        The RNG is derived from `settings.seed` without drawing from the registry's RNG (uids and
        generated names stay what they were), and is OS-seeded when there is no seed, as the
        registry's is.
        """
        rng = random.Random(f"kubemesh/serviceips/{settings.seed}") if settings.seed is not None else random.Random()
        hook = cls(registry=registry, rng=rng, cidr=settings.service_cluster_ip_range,
                   node_ports=settings.service_node_port_range,
                   endpoint_address=advertised_address(settings), endpoint_port=settings.port)
        registry.hooks.append(hook)
        hook.restore()
        hook.reconcile_kubernetes()
        return hook

    # -- the registry's hook -------------------------------------------------------------------

    def admit(self, kind: Kind, obj: Obj, old: Obj | None) -> None:
        """Default a Service, check what it asks for and choose what it needs (records nothing)."""
        if kind is not SERVICES:
            return
        if obj.get("spec") is None:
            obj["spec"] = {}
        if not isinstance(obj["spec"], dict):
            return  # validation refuses it
        # A fresh copy: a patched or shallow-copied body may share sub-objects with the stored one.
        spec: Obj = _copy(obj["spec"])
        obj["spec"] = spec
        md = _dict(obj.get("metadata"))
        name = str(md.get("name") or md.get("generateName") or "")
        old_spec: Obj | None = None
        if old is not None:
            old_spec = _dict(old.get("spec"))
        svc_type = spec.get("type") or "ClusterIP"
        if svc_type not in TYPES:
            raise errors.invalid(SERVICES, name, [fielderrors.not_supported("spec.type", svc_type, TYPES)])
        spec["type"] = svc_type
        set_defaults(spec)
        if old_spec is not None:
            drop_type_dependent_fields(spec, old_spec)
            patch_allocated_values(spec, old_spec)
        normalize_cluster_ips(spec, old_spec)
        causes = cluster_ip_update_causes(spec, old_spec) if old_spec is not None else []
        causes += self._init_families(spec, old_spec)
        if causes:
            raise errors.invalid(SERVICES, name, causes)
        owner = key_of(old) if old is not None else None
        causes = self._choose_cluster_ip(spec, old_spec, owner)
        if not causes:
            causes = self._choose_node_ports(spec, old_spec, owner)
        if causes:
            raise errors.invalid(SERVICES, name, causes)

    def written(self, kind: Kind, old: Obj | None, new: Obj) -> None:
        """Record what a stored Service holds; put `default/kubernetes` right if a client changed it."""
        if kind is SERVICES:
            key = key_of(new)
            if old is not None:
                self._release(key, old, keep=new)
            self._claim(key, new)
        if kind in (SERVICES, ENDPOINTS, ENDPOINTSLICES) and key_of(new) == KUBERNETES_KEY and not self._reconciling:
            self.reconcile_kubernetes()

    def removed(self, kind: Kind, obj: Obj) -> None:
        """Release what a deleted Service held; recreate a deleted piece of `default/kubernetes`."""
        if kind is SERVICES:
            self._release(key_of(obj), obj)
        if kind in (SERVICES, ENDPOINTS, ENDPOINTSLICES) and key_of(obj) == KUBERNETES_KEY and not self._reconciling:
            self.reconcile_kubernetes()

    def applied(self, kind: Kind, event: EventType, obj: Obj, prev: Obj | None, rv: int) -> None:
        """`--storage etcd`: follow the allocations of committed Services, another apiserver's too (a store publisher).

        The hooks above record a Service's values when this apiserver stages its write; this
        records them once a write is committed, wherever it was made, so that this apiserver does
        not hand out a value another one has given. Two apiservers allocating at the same moment
        can still both pick one value: upstream's allocator keeps a bitmap in etcd, written with a
        compare, which this does not (docs/design.md, "etcd storage layer").
        """
        if kind is not SERVICES:
            return
        key = key_of(obj)
        if event == "DELETED":
            if prev is not None:
                self._release(key, prev)
            return
        if prev is not None:
            self._release(key, prev, keep=obj)
        self._claim(key, obj)

    # -- the allocation's state ----------------------------------------------------------------

    def restore(self) -> None:
        """Rebuild the allocation from the stored Services (at start; after a restart with --data-dir).

        Earlier writes win if two stored Services hold one value (a store edited by hand).
        """
        self._ip_owner.clear()
        self._port_owner.clear()
        for svc in sorted(self.registry.store.items(SERVICES), key=rv_of):
            self._claim(key_of(svc), svc)

    def owner_of_ip(self, ip: str) -> str | None:
        """The key of the Service holding cluster IP `ip`, if any."""
        address = _parse_ip(ip)
        return self._ip_owner.get(int(address)) if address is not None else None

    def owner_of_node_port(self, port: int) -> str | None:
        """The key of the Service holding node port `port`, if any."""
        return self._port_owner.get(port)

    def _claim(self, key: str, svc: Obj) -> None:
        for ip in held_ips(svc):
            holder = self._ip_owner.setdefault(ip, key)
            if holder != key:
                _log.warning("cluster IP held by two services", ip=self.ips.address(ip), holder=holder, other=key)
        for port in held_node_ports(svc):
            holder = self._port_owner.setdefault(port, key)
            if holder != key:
                _log.warning("node port held by two services", port=port, holder=holder, other=key)

    def _release(self, key: str, svc: Obj, *, keep: Obj | None = None) -> None:
        kept_ips = held_ips(keep) if keep is not None else set()
        kept_ports = held_node_ports(keep) if keep is not None else set()
        for ip in held_ips(svc) - kept_ips:
            if self._ip_owner.get(ip) == key:
                del self._ip_owner[ip]
        for port in held_node_ports(svc) - kept_ports:
            if self._port_owner.get(port) == key:
                del self._port_owner[port]

    # -- IP families, cluster IPs, node ports --------------------------------------------------

    def _init_families(self, spec: Obj, old: Obj | None) -> list[Cause]:
        """Upstream `initIPFamilyFields` (with `ValidateServiceClusterIPsRelatedFields`) on a one-family cluster."""
        if spec["type"] == "ExternalName":
            refused = [fielderrors.forbidden(f"spec.{field}", "may not be set for ExternalName services")
                       for field in ("clusterIPs", "ipFamilies") if spec.get(field)]
            if spec.get("ipFamilyPolicy") is not None:
                refused.append(fielderrors.forbidden("spec.ipFamilyPolicy", "may not be set for ExternalName services"))
            if not str(spec.get("externalName") or "").rstrip("."):
                refused.append(fielderrors.required("spec.externalName"))
            return refused
        ours = self.ips.family
        other = "IPv6" if ours == "IPv4" else "IPv4"
        headless_selectorless = spec.get("clusterIP") == NONE and not spec.get("selector")
        if spec.get("ipFamilyPolicy") is None:
            if old is not None and old.get("ipFamilyPolicy") is not None:
                spec["ipFamilyPolicy"] = old["ipFamilyPolicy"]
            else:
                spec["ipFamilyPolicy"] = "RequireDualStack" if headless_selectorless else "SingleStack"
        policy = spec["ipFamilyPolicy"]
        families_raw = spec.get("ipFamilies")
        families: list[Any] = list(families_raw) if isinstance(families_raw, list) else []
        ips = _cluster_ips(spec)
        causes: list[Cause] = []
        cluster_ip = spec.get("clusterIP") or ""
        if cluster_ip:
            if not ips:
                causes.append(fielderrors.required("spec.clusterIPs"))
            elif ips[0] != cluster_ip:
                causes.append(fielderrors.invalid("spec.clusterIPs", ips, "first value must match `clusterIP`"))
        elif ips:
            causes.append(fielderrors.invalid("spec.clusterIPs", ips,
                                              "must be empty when `clusterIP` is not specified"))
        seen: set[Any] = set()
        for i, family in enumerate(families):
            if family not in IP_FAMILIES:
                causes.append(fielderrors.not_supported(f"spec.ipFamilies[{i}]", family, IP_FAMILIES))
            if family in seen:
                causes.append(fielderrors.duplicate(f"spec.ipFamilies[{i}]", family))
            seen.add(family)
        if policy not in IP_FAMILY_POLICIES:
            causes.append(fielderrors.not_supported("spec.ipFamilyPolicy", policy, IP_FAMILY_POLICIES))
        parsed: list[Address] = []
        bad_ips = False
        for i, ip in enumerate(ips):
            if i == 0 and ip == NONE:
                if len(ips) > 1:
                    bad_ips = True
                    causes.append(fielderrors.invalid("spec.clusterIPs", ips,
                                                      "'None' must be the first and only value"))
                continue
            address = _parse_ip(ip)
            if address is None:
                bad_ips = True
                causes.append(fielderrors.invalid(f"spec.clusterIPs[{i}]", ip,
                                                  "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"))
            else:
                parsed.append(address)
        if len(ips) > 2:
            causes.append(fielderrors.invalid("spec.clusterIPs", ips, "may only hold up to 2 values"))
        if not bad_ips:
            if len(parsed) > 1 and len({a.version for a in parsed}) != len(parsed):
                causes.append(fielderrors.invalid("spec.clusterIPs", ips,
                                                  "may specify no more than one IP for each IP family"))
            if ips and ips[0] != NONE:
                for i, address in enumerate(parsed[:len(families)]):
                    if families[i] in IP_FAMILIES and families[i] != _family(address):
                        causes.append(fielderrors.invalid(
                            f"spec.clusterIPs[{i}]", ips[i],
                            f"expected an {families[i]} value as indicated by `ipFamilies[{i}]`"))
        if causes:
            return causes
        if policy == "SingleStack":
            if len(ips) == 2:
                causes.append(fielderrors.invalid("spec.ipFamilyPolicy", policy, "must be 'RequireDualStack' or "
                                                  "'PreferDualStack' when multiple cluster IPs are specified"))
            if len(families) == 2:
                causes.append(fielderrors.invalid("spec.ipFamilyPolicy", policy, "must be 'RequireDualStack' or "
                                                  "'PreferDualStack' when multiple IP families are specified"))
        if not (ips and ips[0] == NONE):
            for i, address in enumerate(parsed):
                if i >= len(families):
                    if _family(address) != ours:
                        causes.append(fielderrors.invalid(f"spec.clusterIPs[{i}]", ips,
                                                          f"{_family(address)} is not configured on this cluster"))
                    else:
                        families.append(ours)
        if causes:
            return causes
        if headless_selectorless:
            if not families:
                families = [ours]
            if len(families) < 2 and policy != "SingleStack":
                families.append(other if families[0] == ours else ours)
            spec["ipFamilies"] = families
            return []
        if policy == "RequireDualStack":
            causes.append(fielderrors.invalid("spec.ipFamilyPolicy", policy,
                                              "this cluster is not configured for dual-stack services"))
        for i, family in enumerate(families):
            if family != ours:
                causes.append(fielderrors.invalid(f"spec.ipFamilies[{i}]", family, "not configured on this cluster"))
        if causes:
            return causes
        spec["ipFamilies"] = families or [ours]
        return []

    def _choose_cluster_ip(self, spec: Obj, old: Obj | None, owner: str | None) -> list[Cause]:
        """Check a requested cluster IP, or draw one, when the write needs one (upstream `allocClusterIPs`)."""
        if not _needs_cluster_ip(spec) or _headless(spec):
            return []
        if old is not None and old.get("type") != "ExternalName" and (_headless(old) or _cluster_ips(old)):
            return []  # keeps its IP (checked above: the primary IP may not change)
        ips = _cluster_ips(spec)
        if not ips:
            chosen = self.ips.band.pick(lambda value: value in self._ip_owner, self.rng)
            if chosen is None:
                raise errors.internal("failed to allocate a serviceIP: range is full")
            text = self.ips.address(chosen)
            spec["clusterIP"] = text
            spec["clusterIPs"] = [text]
            return []
        requested = str(ips[0])
        address = _parse_ip(requested)
        assert address is not None  # checked by _init_families
        if not self.ips.contains(address):
            why = (f"the provided IP ({requested}) is not in the valid range. The range of valid IPs is "
                   f"{self.ips.cidr}")
        elif self._ip_owner.get(int(address), owner) != owner:
            why = "provided IP is already allocated"
        else:
            return []
        return [fielderrors.invalid("spec.clusterIPs", ips, f"failed to allocate IP {requested}: {why}")]

    def _choose_node_ports(self, spec: Obj, old: Obj | None, owner: str | None) -> list[Cause]:
        """Check requested node ports and draw missing ones (upstream `initNodePorts` / `updateNodePorts`)."""
        ports = _ports(spec)
        if not _needs_node_port(spec):
            return [fielderrors.forbidden(f"spec.ports[{i}].nodePort", f"may not be used when `type` is "
                                          f"'{spec['type']}'")
                    for i, p in enumerate(ports) if p.get("nodePort") not in (None, 0)]
        held = _node_port_numbers(old) if old is not None else set()
        causes: list[Cause] = []
        checked: set[int] = set()
        by_protocol: set[tuple[int, Any]] = set()
        for i, port in enumerate(ports):
            number = port.get("nodePort")
            if number in (None, 0) or not _is_int(number):
                continue
            if (number, port.get("protocol")) in by_protocol:
                causes.append(fielderrors.duplicate(f"spec.ports[{i}].nodePort", number))
                continue
            by_protocol.add((number, port.get("protocol")))
            if number in held or number in checked:
                continue  # this Service's own, or checked for an earlier port of this request
            checked.add(number)
            if not self.node_ports.band.contains(number):
                causes.append(fielderrors.invalid(
                    f"spec.ports[{i}].nodePort", number,
                    f"provided port is not in the valid range. The range of valid ports is {self.node_ports.text}"))
            elif self._port_owner.get(number, owner) != owner:
                causes.append(fielderrors.invalid(f"spec.ports[{i}].nodePort", number,
                                                  "provided port is already allocated"))
        if causes:
            return causes
        if spec["type"] == "LoadBalancer" and spec.get("allocateLoadBalancerNodePorts") is False:
            return []  # only what was asked for
        used = _node_port_numbers(spec)
        shared: dict[Any, int] = {p.get("port"): p["nodePort"] for p in ports
                                  if _is_int(p.get("nodePort")) and p["nodePort"] != 0}
        for port in ports:
            if port.get("nodePort") not in (None, 0):
                continue
            number = shared.get(port.get("port"))
            if number is None:
                # Any held port is taken, this Service's own included: one it stops using is
                # released by `written`, and may be drawn again from then on.
                number = self.node_ports.band.pick(lambda value: value in used or value in self._port_owner,
                                                   self.rng)
                if number is None:
                    raise errors.internal("failed to allocate a nodePort: range is full")
                used.add(number)
                shared[port.get("port")] = number
            port["nodePort"] = number
        return []

    # -- default/kubernetes --------------------------------------------------------------------

    @contextlib.contextmanager
    def _own_writes(self) -> Iterator[None]:
        """Mark the hook's own writes: not reconciled again, and attributed to kube-apiserver."""
        self._reconciling = True
        token = WRITER.set(WRITER_IDENTITY)
        try:
            yield
        finally:
            WRITER.reset(token)
            self._reconciling = False

    def kubernetes_service(self) -> Obj:
        """The `default/kubernetes` Service as this apiserver creates it."""
        return {"apiVersion": "v1", "kind": "Service",
                "metadata": {"name": "kubernetes", "namespace": "default", "labels": dict(KUBERNETES_LABELS)},
                "spec": {"type": "ClusterIP", "clusterIP": self.ips.first_address, "ports": self._service_ports(),
                         "sessionAffinity": "None"}}

    def _service_ports(self) -> list[Obj]:
        return [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": self.endpoint_port}]

    def _endpoint_ports(self) -> list[Obj]:
        return [{"name": "https", "port": self.endpoint_port, "protocol": "TCP"}]

    def kubernetes_endpoints(self) -> Obj:
        """The `default/kubernetes` Endpoints (the lease reconciler's, for one apiserver)."""
        return {"apiVersion": "v1", "kind": "Endpoints",
                "metadata": {"name": "kubernetes", "namespace": "default", "labels": {SKIP_MIRROR: "true"}},
                "subsets": [{"addresses": [{"ip": self.endpoint_address}], "ports": self._endpoint_ports()}]}

    def kubernetes_endpoint_slice(self) -> Obj:
        """The `default/kubernetes` EndpointSlice (upstream's endpoints adapter mirrors the Endpoints)."""
        return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": "kubernetes", "namespace": "default",
                             "labels": {SERVICE_NAME_LABEL: "kubernetes"}},
                "addressType": self.endpoint_family,
                "endpoints": [{"addresses": [self.endpoint_address], "conditions": {"ready": True}}],
                "ports": self._endpoint_ports()}

    def reconcile_kubernetes(self) -> None:
        """Create or put right the `kubernetes` Service, Endpoints and EndpointSlice (never raises).

        As upstream, only what the apiserver maintains is reconciled: the Service's ports and
        type; the Endpoints' subsets and skip-mirror label; the slice's address type, endpoints,
        ports and service-name label. Labels and annotations clients add are kept.
        """
        with self._own_writes():
            self._reconcile_service()
            self._reconcile(ENDPOINTS, self.kubernetes_endpoints(), ("subsets",))
            self._reconcile(ENDPOINTSLICES, self.kubernetes_endpoint_slice(), ("addressType", "endpoints", "ports"))

    def _reconcile_service(self) -> None:
        current = self.registry.store.get(SERVICES, KUBERNETES_KEY)
        try:
            if current is None:
                holder = self.owner_of_ip(self.ips.first_address)
                if holder is not None:
                    _log.error("cannot create the kubernetes service: its cluster IP is held by another service",
                               ip=self.ips.first_address, holder=holder)
                    return
                self.registry.create(SERVICES, "default", self.kubernetes_service(), WriteOptions())
                return
            spec = _dict(current.get("spec"))
            if spec.get("ports") == self._service_ports() and spec.get("type") == "ClusterIP":
                return
            _log.warning("resetting the kubernetes service's ports and type")
            body = {**current, "spec": {**spec, "type": "ClusterIP", "ports": self._service_ports()}}
            self.registry.update(SERVICES, "default", "kubernetes", body, WriteOptions())
        except errors.StatusError as exc:
            _log.error("could not reconcile the kubernetes service", error=exc.message)

    def _reconcile(self, kind: Kind, desired: Obj, fields: tuple[str, ...]) -> None:
        current = self.registry.store.get(kind, KUBERNETES_KEY)
        try:
            if current is None:
                self.registry.create(kind, "default", desired, WriteOptions())
                return
            md = current.get("metadata") or {}
            labels = dict(md.get("labels") or {})
            wanted_labels = {**labels, **desired["metadata"]["labels"]}
            if all(current.get(f) == desired.get(f) for f in fields) and labels == wanted_labels:
                return
            body = {**current, "metadata": {**md, "labels": wanted_labels}, **{f: desired[f] for f in fields}}
            self.registry.update(kind, "default", "kubernetes", body, WriteOptions())
        except errors.StatusError as exc:
            _log.error("could not reconcile the kubernetes endpoints", resource=kind.plural, error=exc.message)


def advertised_address(settings: ServerSettings) -> str:
    """The address the `kubernetes` endpoints carry: `--advertise-address`, else the bind address.

    An unspecified (0.0.0.0, ::) or non-literal bind address gives 127.0.0.1: the address
    processes of this mesh reach the apiserver at.
    """
    for candidate in (settings.advertise_address, settings.host):
        address = _parse_ip(candidate)
        if address is not None and not address.is_unspecified:
            return str(address)
    return "127.0.0.1"

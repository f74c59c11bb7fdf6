"""The endpoints controller: a Service's `v1.Endpoints` from the pods its selector matches.

`reconcile(key)` is level-based (upstream `syncService`):

1. A Service that is gone has its Endpoints deleted (a 404 is fine). An ExternalName Service
   and a Service without a selector (`spec.selector` absent or empty) are left alone: their
   Endpoints, if any, are someone else's (the apiserver's `default/kubernetes`, a user's).
2. The pods of the namespace that the selector matches and that may be endpoints (not
   terminal, with `status.podIP`, not being deleted unless `publishNotReadyAddresses`) each
   give an address (`ip`, `nodeName`, `targetRef`, `hostname` when the pod's
   `subdomain` is the Service) per Service port whose `targetPort` resolves on the pod (a
   number, or a container port of that name and protocol); a Ready pod's address goes to
   `addresses`, the others' to `notReadyAddresses` (all ready with
   `publishNotReadyAddresses`). A headless Service without ports gets bare addresses.
3. The subsets are repacked into the canonical form (one subset per distinct set of ports,
   addresses sorted) and truncated to 1000 addresses, ready ones first
   (`endpoints.kubernetes.io/over-capacity: truncated`).
4. The Endpoints object is created or updated only when its subsets, its labels (the
   Service's, plus `service.kubernetes.io/headless` for a Service without a cluster IP) or its
   capacity annotation differ from what is stored; a write carries
   `endpoints.kubernetes.io/last-change-trigger-time` (the earliest Ready transition or Service
   creation not yet exported, as upstream's `TriggerTimeTracker`; absent when nothing new).

**Stale caches.** After each write the controller remembers the resourceVersion it wrote
(`WrittenVersions`); a sync that finds the cache older than that (or without an object it
created) does not write from it: it confirms with a GET and retries with backoff until the
informer has caught up. An update with a stale resourceVersion is a 409, retried likewise.
Creating in a terminating namespace (403 `NamespaceTerminating`) is dropped. At the start of
a term, Endpoints whose Service does not exist are queued, so that they are deleted (upstream
`checkLeftoverEndpoints`).

The pod and Service helpers (`services_for_pod`, `find_port`, `pod_endpoints_changed`,
`TriggerTimeTracker`, `WrittenVersions`) are shared with the EndpointSlice controller
(`kubemesh.controller_manager.endpointslices`).
"""

from __future__ import annotations

import contextlib
import copy
import ipaddress
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import structlog

from kubemesh.controller_manager.controllers import ControllerContext, ControllerSpec, InformerNeed, Started
from kubemesh.controller_manager.objects import (
    Api,
    IndexedStore,
    Store,
    condition,
    index_by_namespace,
    is_ready,
    is_terminal,
    is_terminating,
    node_name_of,
    ts,
)
from kubemesh.services.machinery.client import (
    AlreadyExistsError,
    ApiError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
)
from kubemesh.services.machinery.clock import Clock, format_time
from kubemesh.services.machinery.eventing import ComponentRecorder
from kubemesh.services.machinery.informing import final_state
from kubemesh.services.machinery.queueing import Result, run_workers
from kubemesh.services.model.kinds import (
    ENDPOINTS,
    PODS,
    SERVICES,
    Kind,
    Obj,
    key_of,
    labels_of,
    meta,
    name_of,
    namespace_of,
    rv_of,
    uid_of,
)
from kubemesh.services.model.selectors import LabelSelector, label_selector_from_dict

_log = structlog.get_logger("controller_manager.endpoints")

TRIGGER_TIME: Final = "endpoints.kubernetes.io/last-change-trigger-time"
OVER_CAPACITY: Final = "endpoints.kubernetes.io/over-capacity"
HEADLESS: Final = "service.kubernetes.io/headless"
LEADER_ANNOTATION: Final = "control-plane.alpha.kubernetes.io/leader"
"""Endpoints used as a leader-election lock (old components): never leftovers."""
MAX_CAPACITY: Final = 1000
"""Upstream `maxCapacity`: most addresses one Endpoints object holds."""


class StaleCacheError(Exception):
    """The informer's cache is older than this controller's last write: retry once it has caught up."""


# ---------------------------------------------------------------------------------------------
# Services and pods (shared with the EndpointSlice controller).


def service_selector(svc: Obj) -> LabelSelector | None:
    """The Service's pod selector; None when it has none (absent or empty: it selects nothing here)."""
    selector = (svc.get("spec") or {}).get("selector")
    if not isinstance(selector, dict) or not selector:
        return None
    return label_selector_from_dict({"matchLabels": selector})


def manages_endpoints(svc: Obj) -> bool:
    """Whether the controllers compute this Service's endpoints (a selector, not ExternalName)."""
    return (svc.get("spec") or {}).get("type") != "ExternalName" and service_selector(svc) is not None


def pods_of(svc: Obj, pods: IndexedStore) -> list[Obj]:
    """The cached pods of the Service's namespace that its selector matches, by name."""
    selector = service_selector(svc)
    if selector is None:
        return []
    out = [p for p in pods.by_index("namespace", namespace_of(svc)) if selector.matches(labels_of(p))]
    out.sort(key=name_of)
    return out


def services_for_pod(services: IndexedStore, pod: Obj) -> set[str]:
    """Keys of the cached Services of the pod's namespace whose selector matches it."""
    out: set[str] = set()
    for svc in services.by_index("namespace", namespace_of(pod)):
        selector = service_selector(svc)
        if selector is not None and selector.matches(labels_of(pod)):
            out.add(key_of(svc))
    return out


def pod_ips(pod: Obj) -> list[str]:
    """`status.podIPs` (or `status.podIP`) as strings."""
    status = pod.get("status") or {}
    ips = [str(p.get("ip")) for p in status.get("podIPs") or [] if isinstance(p, dict) and p.get("ip")]
    if not ips and status.get("podIP"):
        ips = [str(status["podIP"])]
    return ips


def should_be_endpoint(pod: Obj, *, include_terminating: bool) -> bool:
    """Upstream `ShouldPodBeInEndpoints`: not terminal, has an IP, not being deleted unless asked."""
    if is_terminal(pod) or not pod_ips(pod):
        return False
    return include_terminating or not is_terminating(pod)


def service_family(svc: Obj) -> str:
    """The IP family of the Service's endpoints: `ipFamilies[0]`, else that of its cluster IP (IPv4)."""
    spec = svc.get("spec") or {}
    families = spec.get("ipFamilies")
    if isinstance(families, list) and families and families[0] in ("IPv4", "IPv6"):
        return str(families[0])
    cluster_ip = spec.get("clusterIP")
    if cluster_ip and cluster_ip != "None" and _version(str(cluster_ip)) == 6:
        return "IPv6"
    return "IPv4"


def _version(ip: str) -> int:
    try:
        return ipaddress.ip_address(ip).version
    except ValueError:
        return 0


def pod_ip_for(pod: Obj, family: str) -> str | None:
    """The pod's IP of `family` (upstream `podToEndpointAddressForService`), None when it has none."""
    want = 6 if family == "IPv6" else 4
    return next((ip for ip in pod_ips(pod) if _version(ip) == want), None)


def should_set_hostname(pod: Obj, svc: Obj) -> bool:
    """A pod with `hostname` whose `subdomain` is this Service (in its namespace) publishes its hostname."""
    spec = pod.get("spec") or {}
    return bool(spec.get("hostname")) and spec.get("subdomain") == name_of(svc) \
        and namespace_of(pod) == namespace_of(svc)


def find_port(pod: Obj, service_port: Obj) -> int | None:
    """Upstream `FindPort`: the pod port a Service port's `targetPort` names, None when it names none.

    A number is taken as it is; a name is looked up among the containers' ports (and restartable
    init containers', the sidecars) of the same protocol.
    """
    target = service_port.get("targetPort")
    if target is None or target == "":
        target = service_port.get("port")
    if isinstance(target, int) and not isinstance(target, bool):
        return target if target > 0 else None
    if not isinstance(target, str):
        return None
    protocol = service_port.get("protocol") or "TCP"
    spec = pod.get("spec") or {}
    containers = [c for c in spec.get("containers") or [] if isinstance(c, dict)]
    containers += [c for c in spec.get("initContainers") or []
                   if isinstance(c, dict) and c.get("restartPolicy") == "Always"]
    for c in containers:
        for port in c.get("ports") or []:
            if isinstance(port, dict) and port.get("name") == target and (port.get("protocol") or "TCP") == protocol:
                number = port.get("containerPort")
                if isinstance(number, int) and not isinstance(number, bool):
                    return number
    return None


def pod_endpoints_changed(old: Obj, new: Obj) -> tuple[bool, bool]:
    """Upstream `podEndpointsChanged`: (what an endpoint shows changed, labels changed)."""
    labels_changed = labels_of(old) != labels_of(new)
    changed = (
        meta(old).get("deletionTimestamp") != meta(new).get("deletionTimestamp")
        or is_ready(old) != is_ready(new)
        or is_terminal(old) != is_terminal(new)
        or pod_ips(old) != pod_ips(new)
        or node_name_of(old) != node_name_of(new)
        or (old.get("spec") or {}).get("hostname") != (new.get("spec") or {}).get("hostname")
        or (old.get("spec") or {}).get("subdomain") != (new.get("spec") or {}).get("subdomain")
    )
    return changed, labels_changed


def services_to_update(services: IndexedStore, old: Obj, new: Obj) -> set[str]:
    """Upstream `GetServicesToUpdateOnPodChange`: the Services a pod update concerns."""
    if meta(old).get("resourceVersion") == meta(new).get("resourceVersion"):
        return set()  # a resync, not a change
    changed, labels_changed = pod_endpoints_changed(old, new)
    if not changed and not labels_changed:
        return set()
    now = services_for_pod(services, new)
    if not labels_changed:
        return now
    before = services_for_pod(services, old)
    # Labels changed: Services it left or joined; with another change, every Service of both.
    return before | now if changed else before ^ now


@dataclass(slots=True)
class _TriggerState:
    pods: dict[str, float] = field(default_factory=dict)
    service: float = 0.0


class TriggerTimeTracker:
    """Upstream `TriggerTimeTracker`: when the change an endpoints write exports happened.

    Per Service it remembers each pod's trigger time (its Ready condition's
    lastTransitionTime) and the Service's (its creation) as of the last sync. A sync exports the
    earliest of those that moved since; a Service seen for the first time exports its creation
    time; nothing new exports nothing (None). Called for one key at a time (the work queue
    never hands one key to two workers).
    """

    def __init__(self) -> None:
        self._states: dict[str, _TriggerState] = {}

    def compute(self, key: str, svc: Obj, pods: Iterable[Obj]) -> float | None:
        """The trigger time to export for this sync of `key` (and remember the current ones)."""
        state = self._states.get(key)
        known = state is not None
        last = state if state is not None else _TriggerState()
        earliest: float | None = None
        current: dict[str, float] = {}
        for pod in pods:
            ready = condition(pod, "Ready")
            t = ts(ready.get("lastTransitionTime")) if ready is not None else None
            if t is None:
                continue
            current[name_of(pod)] = t
            if t > last.pods.get(name_of(pod), float("-inf")):
                earliest = t if earliest is None else min(earliest, t)
        created = ts(meta(svc).get("creationTimestamp")) or 0.0
        if created > last.service:
            earliest = created if earliest is None else min(earliest, created)
        self._states[key] = _TriggerState(pods=current, service=created)
        if not known:
            return created
        return earliest

    def forget(self, key: str) -> None:
        """The Service is gone."""
        self._states.pop(key, None)


@dataclass(slots=True)
class _Written:
    rv: int
    uid: str
    gone: bool = False


class WrittenVersions:
    """What this controller last wrote per object key, to recognise a cache that has not caught up.

    resourceVersions are compared as numbers: kubemesh's are one global, increasing revision
    (upstream compares generations of EndpointSlices and the previous resourceVersion of
    Endpoints, to the same end).
    """

    def __init__(self) -> None:
        self._written: dict[str, _Written] = {}

    def wrote(self, obj: Obj) -> None:
        """`obj` is what the apiserver answered to our create or update."""
        self._written[key_of(obj)] = _Written(rv=rv_of(obj), uid=uid_of(obj))

    def deleted(self, obj: Obj) -> None:
        """We deleted `obj` (as the cache had it)."""
        self._written[key_of(obj)] = _Written(rv=rv_of(obj), uid=uid_of(obj), gone=True)

    def forget(self, key: str) -> None:
        """The informer saw the object go (or its owner is gone): nothing to wait for."""
        self._written.pop(key, None)

    def ours(self, obj: Obj) -> bool:
        """Whether `obj` is exactly the version we wrote last (an informer event of our own write)."""
        w = self._written.get(key_of(obj))
        return w is not None and not w.gone and w.rv == rv_of(obj) and w.uid == uid_of(obj)

    def expected_deletion(self, obj: Obj) -> bool:
        """Whether we deleted `obj` ourselves."""
        w = self._written.get(key_of(obj))
        return w is not None and w.gone and w.uid == uid_of(obj)

    def stale(self, key: str, cached: Obj | None) -> bool:
        """Whether the cache's `cached` (None: absent) is older than what we wrote to `key`."""
        w = self._written.get(key)
        if w is None:
            return False
        if w.gone:
            return cached is not None and uid_of(cached) == w.uid
        return cached is None or rv_of(cached) < w.rv

    def keys(self) -> list[str]:
        """Every key with a remembered write."""
        return list(self._written)

    def __contains__(self, key: object) -> bool:
        return key in self._written

    def __len__(self) -> int:
        return len(self._written)


# ---------------------------------------------------------------------------------------------
# Subsets.


def _address_key(address: Obj) -> tuple[str, str]:
    return str(address.get("ip") or ""), str((address.get("targetRef") or {}).get("uid") or "")


def _ip_sort_key(ip: str) -> tuple[int, int, str]:
    try:
        a = ipaddress.ip_address(ip)
    except ValueError:
        return 9, 0, ip
    return a.version, int(a), ip


def _address_sort_key(address: Obj) -> tuple[Any, ...]:
    ip, uid = _address_key(address)
    return *_ip_sort_key(ip), uid


def _port_sort_key(port: Obj) -> tuple[str, int, str]:
    return str(port.get("name") or ""), int(port.get("port") or 0), str(port.get("protocol") or "")


_NO_PORT: Final = "-"
"""The port key of addresses without ports (a headless Service without ports)."""


def repack_subsets(subsets: Iterable[Obj]) -> list[Obj]:
    """Upstream `RepackSubsets`: one subset per distinct set of ports, in a canonical order.

    An address that is not ready for one port of a set counts as not ready (not ready trumps
    ready). Addresses are sorted by IP and target uid, ports by name, number and protocol, and
    subsets by their first address, so that equal content compares equal.
    """
    addresses: dict[tuple[str, str], Obj] = {}
    ports: dict[str, Obj | None] = {}
    by_port: dict[str, dict[tuple[str, str], bool]] = {}
    for subset in subsets:
        port_list = [p for p in subset.get("ports") or [] if isinstance(p, dict)]
        keys = [repr(sorted(p.items())) for p in port_list] or [_NO_PORT]
        for k, p in zip(keys, port_list, strict=False):
            ports[k] = p
        if not port_list:
            ports[_NO_PORT] = None
        for ready, field_name in ((True, "addresses"), (False, "notReadyAddresses")):
            for address in subset.get(field_name) or []:
                if not isinstance(address, dict):
                    continue
                akey = _address_key(address)
                addresses.setdefault(akey, address)
                for k in keys:
                    seen = by_port.setdefault(k, {})
                    if seen.get(akey, True):
                        seen[akey] = ready
    groups: dict[frozenset[tuple[tuple[str, str], bool]], list[str]] = {}
    for k, seen in by_port.items():
        groups.setdefault(frozenset(seen.items()), []).append(k)
    out: list[Obj] = []
    for members, port_keys in groups.items():
        packed: Obj = {}
        ready_addrs = sorted((addresses[a] for a, ok in members if ok), key=_address_sort_key)
        not_ready = sorted((addresses[a] for a, ok in members if not ok), key=_address_sort_key)
        if ready_addrs:
            packed["addresses"] = ready_addrs
        if not_ready:
            packed["notReadyAddresses"] = not_ready
        port_objs = sorted((po for k in port_keys if (po := ports[k]) is not None), key=_port_sort_key)
        if port_objs:
            packed["ports"] = port_objs
        out.append(packed)
    out.sort(key=lambda s: (_address_sort_key((s.get("addresses") or s.get("notReadyAddresses") or [{}])[0]),
                            [_port_sort_key(p) for p in s.get("ports") or []]))
    return out


def truncate(subsets: list[Obj], capacity: int = MAX_CAPACITY) -> bool:
    """Upstream `truncateEndpoints`: at most `capacity` addresses, ready ones first; True if cut."""
    total_ready = sum(len(s.get("addresses") or []) for s in subsets)
    total_not_ready = sum(len(s.get("notReadyAddresses") or []) for s in subsets)
    if total_ready + total_not_ready <= capacity:
        return False
    truncate_ready = total_ready > capacity
    limit = capacity if truncate_ready else capacity - total_ready
    total = total_ready if truncate_ready else total_not_ready
    room = limit
    for subset in subsets:
        field_name = "addresses" if truncate_ready else "notReadyAddresses"
        have = subset.get(field_name) or []
        take = min(math.ceil(len(have) / total * limit) if total else 0, room)
        subset[field_name] = have[:take]
        if not subset[field_name]:
            subset.pop(field_name)
        if truncate_ready:
            subset.pop("notReadyAddresses", None)
        room -= take
    return True


def endpoint_address(pod: Obj, svc: Obj, ip: str) -> Obj:
    """The EndpointAddress of a pod (upstream `podToEndpointAddressForService`)."""
    address: Obj = {"ip": ip}
    if should_set_hostname(pod, svc):
        address["hostname"] = (pod.get("spec") or {})["hostname"]
    if node_name_of(pod):
        address["nodeName"] = node_name_of(pod)
    address["targetRef"] = {"kind": "Pod", "namespace": namespace_of(pod), "name": name_of(pod), "uid": uid_of(pod)}
    return address


def desired_subsets(svc: Obj, pods: Iterable[Obj]) -> list[Obj]:
    """The repacked subsets of a Service for its selected pods (before truncation)."""
    spec = svc.get("spec") or {}
    publish = spec.get("publishNotReadyAddresses") is True
    family = service_family(svc)
    service_ports = [p for p in spec.get("ports") or [] if isinstance(p, dict)]
    headless = spec.get("clusterIP") == "None"
    raw: list[Obj] = []
    for pod in pods:
        if not should_be_endpoint(pod, include_terminating=publish):
            continue
        ip = pod_ip_for(pod, family)
        if ip is None:
            continue
        address = endpoint_address(pod, svc, ip)
        which = "addresses" if publish or is_ready(pod) else "notReadyAddresses"
        if not service_ports:
            if headless:
                raw.append({which: [address]})
            continue
        for sp in service_ports:
            number = find_port(pod, sp)
            if number is None:
                continue
            port: Obj = {"port": number, "protocol": sp.get("protocol") or "TCP"}
            if sp.get("name"):
                port["name"] = sp["name"]
            if sp.get("appProtocol"):
                port["appProtocol"] = sp["appProtocol"]
            raw.append({which: [address], "ports": [port]})
    return repack_subsets(raw)


def endpoints_labels(svc: Obj) -> dict[str, str]:
    """The labels of a Service's Endpoints: the Service's, plus the headless label without a cluster IP."""
    labels = {k: v for k, v in labels_of(svc).items() if k != HEADLESS}
    cluster_ip = (svc.get("spec") or {}).get("clusterIP")
    if not cluster_ip or cluster_ip == "None":
        labels[HEADLESS] = ""
    return labels


# ---------------------------------------------------------------------------------------------
# The controller.


class ServiceQueueing:
    """The Service and pod handlers both endpoint controllers share: which Services to sync, when.

    A pod event queues the Services it is (or was) selected by, after `batch_period` when one is
    set (upstream's `--endpoint-updates-batch-period`), so a burst of pod changes is one sync.
    """

    services: IndexedStore
    batch_period: float
    enqueue: Callable[[str], None]
    enqueue_after: Callable[[str, float], None]

    def on_service(self, svc: Obj) -> None:
        """A Service was added, changed or deleted."""
        self.enqueue(key_of(svc))

    def _pod_services(self, keys: Iterable[str]) -> None:
        for key in sorted(keys):
            if self.batch_period > 0:
                self.enqueue_after(key, self.batch_period)
            else:
                self.enqueue(key)

    def on_pod_add(self, pod: Obj) -> None:
        """A pod appeared: its Services."""
        self._pod_services(services_for_pod(self.services, pod))

    def on_pod_update(self, old: Obj, new: Obj) -> None:
        """A pod changed: the Services whose endpoints it changes."""
        self._pod_services(services_to_update(self.services, old, new))

    def on_pod_delete(self, pod: Obj) -> None:
        """A pod is gone: its Services."""
        self._pod_services(services_for_pod(self.services, pod))


class EndpointsController(ServiceQueueing):
    """Level-based endpoints reconciler over the shared Service, pod and Endpoints caches."""

    def __init__(self, *, api: Api, services: IndexedStore, pods: IndexedStore, endpoints: Store, clock: Clock,
                 recorder: ComponentRecorder, capacity: int = MAX_CAPACITY, batch_period: float = 0.0) -> None:
        self.api = api
        self.services = services
        self.pods = pods
        self.endpoints = endpoints
        self.clock = clock
        self.recorder = recorder
        self.capacity = capacity
        self.batch_period = batch_period
        self.triggers = TriggerTimeTracker()
        self.written = WrittenVersions()
        self.enqueue: Callable[[str], None] = lambda key: None
        self.enqueue_after: Callable[[str, float], None] = lambda key, delay: self.enqueue(key)
        self.syncs = 0
        self.writes = 0

    # -- event handlers (wired to the shared informers) ---------------------------------------

    def on_endpoints_delete(self, ep: Obj) -> None:
        """Endpoints were deleted: nothing to wait for, and the Service (if any) gets them back."""
        self.written.forget(key_of(ep))
        self.enqueue(key_of(ep))

    def leftovers(self) -> list[str]:
        """Keys of cached Endpoints without a Service (upstream `checkLeftoverEndpoints`)."""
        return sorted(key_of(ep) for ep in self.endpoints.list()
                      if self.services.get(key_of(ep)) is None
                      and LEADER_ANNOTATION not in (meta(ep).get("annotations") or {}))

    # -- reconcile ----------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        """Sync the Endpoints of one Service."""
        self.syncs += 1
        namespace, _, name = key.partition("/")
        svc = self.services.get(key)
        if svc is None:
            self.triggers.forget(key)
            # As upstream, whoever made them; skipped only when neither the cache nor our own
            # writes know of any (the informer's DELETED event of our delete comes back here).
            if self.endpoints.get(key) is not None or key in self.written:
                with contextlib.suppress(NotFoundError):
                    await self.api.delete(ENDPOINTS, name, namespace=namespace)
            self.written.forget(key)
            return None
        if not manages_endpoints(svc):
            return None
        current = self.endpoints.get(key)
        if self.written.stale(key, current) and await self._gone(key, name, namespace):
            current = None
        pods = pods_of(svc, self.pods)
        trigger = self.triggers.compute(key, svc, pods)
        subsets = desired_subsets(svc, pods)
        over = truncate(subsets, self.capacity)
        labels = endpoints_labels(svc)
        if current is not None and repack_subsets(current.get("subsets") or []) == subsets \
                and labels_of(current) == labels \
                and (OVER_CAPACITY in (meta(current).get("annotations") or {})) == over:
            return None
        body: Obj = copy.deepcopy(current) if current is not None else {
            "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name, "namespace": namespace}}
        md = meta(body)
        if labels:
            md["labels"] = labels
        else:
            md.pop("labels", None)
        annotations = dict(md.get("annotations") or {})
        if trigger is not None:
            annotations[TRIGGER_TIME] = format_time(trigger)
        else:
            annotations.pop(TRIGGER_TIME, None)
        if over:
            annotations[OVER_CAPACITY] = "truncated"
        else:
            annotations.pop(OVER_CAPACITY, None)
        if annotations:
            md["annotations"] = annotations
        else:
            md.pop("annotations", None)
        if subsets:
            body["subsets"] = subsets
        else:
            body.pop("subsets", None)
        await self._write(svc, body, create=current is None)
        return None

    async def _gone(self, key: str, name: str, namespace: str) -> bool:
        """The cache is behind our last write of `key`: True if a GET shows the object is gone, else raise.

        Raises:
            StaleCacheError: the object exists; the key is retried (with backoff) until the cache caught up.
        """
        try:
            await self.api.get(ENDPOINTS, name, namespace=namespace)
        except NotFoundError:
            self.written.forget(key)  # deleted by someone else before the cache saw our write
            return True
        raise StaleCacheError(f"endpoints informer cache is out of date for {key}")

    async def _write(self, svc: Obj, body: Obj, *, create: bool) -> None:
        try:
            if create:
                written = await self.api.create(ENDPOINTS, body, namespace=namespace_of(svc))
            else:
                written = await self.api.update(ENDPOINTS, body)
        except ForbiddenError as exc:
            if create and _namespace_terminating(exc):
                return  # the namespace is going: so will the Service
            self._failed(svc, create, exc)
            raise
        except (ConflictError, AlreadyExistsError):
            raise  # the cache is behind: retried with backoff
        except ApiError as exc:
            self._failed(svc, create, exc)
            raise
        self.writes += 1
        self.written.wrote(written)

    def _failed(self, svc: Obj, create: bool, exc: ApiError) -> None:
        ref = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": name_of(svc),
                                                                     "namespace": namespace_of(svc)}}
        if create:
            self.recorder.warning(ref, "FailedToCreateEndpoint", f"Failed to create endpoint for service "
                                  f"{key_of(svc)}: {exc}")
        else:
            self.recorder.warning(ref, "FailedToUpdateEndpoint", f"Failed to update endpoint {key_of(svc)}: {exc}")

    def snapshot(self) -> dict[str, Any]:
        """The controller's part of `/debug/controller-manager`."""
        return {"syncs": self.syncs, "writes": self.writes, "remembered": len(self.written)}


def _namespace_terminating(exc: ApiError) -> bool:
    causes = (exc.status.get("details") or {}).get("causes") or []
    return any(isinstance(c, dict) and c.get("reason") == "NamespaceTerminating" for c in causes)


def _start(ctx: ControllerContext) -> Started:
    s = ctx.settings.endpoints
    c = EndpointsController(api=ctx.api, services=ctx.informer(_SERVICES), pods=ctx.informer(_PODS),
                            endpoints=ctx.informer(_ENDPOINTS), clock=ctx.clock,
                            recorder=ctx.recorder.for_component("endpoint-controller"),
                            capacity=s.max_endpoints_capacity, batch_period=s.endpoint_updates_batch_period)
    q = ctx.queue("endpoint")
    c.enqueue = q.add
    c.enqueue_after = q.add_after
    ctx.on(SERVICES, on_add=lambda o, _i: c.on_service(o), on_update=lambda _old, new: c.on_service(new),
           on_delete=lambda o: c.on_service(final_state(o)))
    ctx.on(PODS, on_add=lambda o, _i: c.on_pod_add(o), on_update=c.on_pod_update,
           on_delete=lambda o: c.on_pod_delete(final_state(o)))
    ctx.on(ENDPOINTS, on_delete=lambda o: c.on_endpoints_delete(final_state(o)))
    for key in c.leftovers():  # the caches are synced before a term starts
        q.add(key)
    return Started(run=run_workers(q, c.reconcile, workers=s.endpoint_workers, name="endpoint"), controller=c,
                   snapshot=c.snapshot)


def namespaced(kind: Kind) -> InformerNeed:
    """The informer of `kind` with the namespace index the endpoint controllers read."""
    return InformerNeed(kind=kind, indexers={"namespace": index_by_namespace})


_SERVICES = namespaced(SERVICES)
_PODS = namespaced(PODS)
_ENDPOINTS = InformerNeed(kind=ENDPOINTS)
CONTROLLER = ControllerSpec(name="endpoint", informers=(_SERVICES, _PODS, _ENDPOINTS), start=_start,
                            debug_key="endpoints")

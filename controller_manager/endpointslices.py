"""The EndpointSlice controller: a Service's `discovery.k8s.io/v1` EndpointSlices from its pods.

`reconcile(key)` is level-based (upstream `syncService` and its reconciler):

1. A Service that is gone needs nothing: its slices carry a controller owner reference to it
   and the garbage collector deletes them. ExternalName Services and Services without a
   selector are left alone (their slices, if any, are someone else's).
2. **Desired endpoints.** Each selected pod that may be an endpoint (not terminal, with an IP;
   terminating pods included) becomes one endpoint of the Service's address type
   (`addressType: IPv4` from `ipFamilies[0]`): `addresses` (its IP), `conditions.ready`
   (Ready and not terminating, or `publishNotReadyAddresses`), `conditions.serving` (Ready),
   `conditions.terminating`, `nodeName`, `zone` (its node's `topology.kubernetes.io/zone`),
   `targetRef` and `hostname` (as for Endpoints). Endpoints are grouped by their resolved ports
   (`name`, `port`, `protocol`, `appProtocol` per Service port whose `targetPort` resolves on the
   pod; a named port may resolve differently per pod): each group goes to slices of its own. A
   pod on a node missing from the cache is left out and the Service retried (upstream does too,
   so that PodGC's removal of such pods is not waited for).
3. **Packing.** Slices of this Service managed by this controller (labels
   `kubernetes.io/service-name` and `endpointslice.kubernetes.io/managed-by:
   endpointslice-controller.k8s.io`, owner reference to the Service) keep the endpoints they
   have that are still desired (updated in place when they changed); slices of ports no longer
   desired, of another address type or owned by an older Service of the same name go. Remaining
   endpoints fill slices being updated anyway, then the closest-fitting unchanged slice, then new
   slices, at most `--max-endpoints-per-slice` (100) each; a create is turned into an update of
   a slice that would be deleted. A Service without endpoints keeps one empty placeholder slice.
   Labels follow the Service's (plus `service.kubernetes.io/headless` without a cluster IP).
   Slices created or updated carry `endpoints.kubernetes.io/last-change-trigger-time`.
4. **Writes only on change**: a slice is written only when its endpoints (compared in a
   canonical order), ports, labels, address type or owner differ from the cached one.

**Stale caches** (upstream `EndpointSliceTracker`): the resourceVersion of every slice written
and the uid of every slice deleted is remembered; a sync whose cache does not show them yet
confirms with a GET and is retried with backoff, never computed from the stale cache. Informer
events of our own writes are ignored; a managed slice changed or deleted by someone else syncs
its Service after `endpointslice_change_min_sync_delay` (1 s).
"""

from __future__ import annotations

import contextlib
import copy
import ipaddress
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final

import structlog

from kubemesh.controller_manager.controllers import ControllerContext, ControllerSpec, InformerNeed, Started
from kubemesh.controller_manager.endpoints import (
    HEADLESS,
    TRIGGER_TIME,
    ServiceQueueing,
    StaleCacheError,
    TriggerTimeTracker,
    WrittenVersions,
    find_port,
    manages_endpoints,
    namespaced,
    pod_ip_for,
    pods_of,
    service_family,
    should_be_endpoint,
    should_set_hostname,
)
from kubemesh.controller_manager.objects import Api, IndexedStore, Store, is_ready, is_terminating, node_name_of
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
    ENDPOINTSLICES,
    NODES,
    PODS,
    SERVICES,
    Obj,
    key_of,
    labels_of,
    meta,
    name_of,
    namespace_of,
    uid_of,
)

_log = structlog.get_logger("controller_manager.endpointslices")

SERVICE_NAME: Final = "kubernetes.io/service-name"
MANAGED_BY: Final = "endpointslice.kubernetes.io/managed-by"
CONTROLLER_NAME: Final = "endpointslice-controller.k8s.io"
ZONE_LABEL: Final = "topology.kubernetes.io/zone"
RESERVED_LABELS: Final = frozenset({SERVICE_NAME, MANAGED_BY, HEADLESS})
RETRY_MISSING_NODE: Final = 5.0
"""Cluster seconds before a Service with a pod on an unknown node is synced again."""


# ---------------------------------------------------------------------------------------------
# Desired state.


def managed_by_us(eps: Obj) -> bool:
    """Whether this controller manages the slice (its managed-by label)."""
    return labels_of(eps).get(MANAGED_BY) == CONTROLLER_NAME


def service_key_of(eps: Obj) -> str | None:
    """The key of the Service a slice belongs to (its service-name label), None without one."""
    service = labels_of(eps).get(SERVICE_NAME)
    return f"{namespace_of(eps)}/{service}" if service else None


def slice_labels(svc: Obj) -> dict[str, str]:
    """Upstream `setEndpointSliceLabels`: the Service's labels (reserved ones dropped) and the reserved ones."""
    labels = {k: v for k, v in labels_of(svc).items() if k not in RESERVED_LABELS}
    cluster_ip = (svc.get("spec") or {}).get("clusterIP")
    if not cluster_ip or cluster_ip == "None":
        labels[HEADLESS] = ""
    labels[SERVICE_NAME] = name_of(svc)
    labels[MANAGED_BY] = CONTROLLER_NAME
    return labels


def owner_reference(svc: Obj) -> Obj:
    """The controller owner reference of a slice to its Service."""
    return {"apiVersion": "v1", "kind": "Service", "name": name_of(svc), "uid": uid_of(svc), "controller": True,
            "blockOwnerDeletion": True}


def endpoint_ports(svc: Obj, pod: Obj) -> list[Obj]:
    """Upstream `getEndpointPorts`: the pod's port for each Service port whose target resolves on it."""
    out: list[Obj] = []
    for sp in (svc.get("spec") or {}).get("ports") or []:
        if not isinstance(sp, dict):
            continue
        number = find_port(pod, sp)
        if number is None:
            continue
        port: Obj = {"name": str(sp.get("name") or ""), "port": number, "protocol": sp.get("protocol") or "TCP"}
        if sp.get("appProtocol"):
            port["appProtocol"] = sp["appProtocol"]
        out.append(port)
    return out


def pod_endpoint(pod: Obj, svc: Obj, ip: str, node: Obj | None) -> Obj:
    """Upstream `podToEndpoint`."""
    serving = is_ready(pod)
    terminating = is_terminating(pod)
    publish = (svc.get("spec") or {}).get("publishNotReadyAddresses") is True
    ep: Obj = {"addresses": [ip],
               "conditions": {"ready": publish or (serving and not terminating), "serving": serving,
                              "terminating": terminating}}
    if should_set_hostname(pod, svc):
        ep["hostname"] = (pod.get("spec") or {})["hostname"]
    if node_name_of(pod):
        ep["nodeName"] = node_name_of(pod)
    ep["targetRef"] = {"kind": "Pod", "namespace": namespace_of(pod), "name": name_of(pod), "uid": uid_of(pod)}
    zone = labels_of(node).get(ZONE_LABEL) if node is not None else None
    if zone:
        ep["zone"] = zone
    return ep


def endpoint_key(ep: Obj) -> tuple[str, str]:
    """What identifies an endpoint across syncs: its pod's uid and its address."""
    return str((ep.get("targetRef") or {}).get("uid") or ""), str((ep.get("addresses") or [""])[0])


def _ports_key(ports: Iterable[Any] | None) -> str:
    return repr(sorted(repr(sorted(p.items())) for p in ports or [] if isinstance(p, dict)))


def _sorted_endpoints(endpoints: Iterable[Any] | None) -> list[Obj]:
    return sorted((e for e in endpoints or [] if isinstance(e, dict)), key=lambda e: (
        _ip_key(str((e.get("addresses") or [""])[0])), str((e.get("targetRef") or {}).get("name") or "")))


def _ip_key(ip: str) -> tuple[int, int, str]:
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return 9, 0, ip
    return address.version, int(address), ip


@dataclass(slots=True)
class _Group:
    """The desired endpoints of one set of ports."""

    ports: list[Obj]
    endpoints: dict[tuple[str, str], Obj] = field(default_factory=dict)


@dataclass(slots=True)
class Plan:
    """What one sync writes: slices to create, to update (complete bodies) and to delete."""

    create: list[Obj] = field(default_factory=list)
    update: list[Obj] = field(default_factory=list)
    delete: list[Obj] = field(default_factory=list)


def _new_slice(svc: Obj, address_type: str, ports: list[Obj]) -> Obj:
    return {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"generateName": f"{name_of(svc)}-", "namespace": namespace_of(svc),
                         "labels": slice_labels(svc), "ownerReferences": [owner_reference(svc)]},
            "addressType": address_type, "endpoints": [], "ports": copy.deepcopy(ports)}


def plan_slices(svc: Obj, existing: list[Obj], groups: dict[str, _Group], *, address_type: str,
                max_per_slice: int) -> Plan:
    """Decide the writes that turn `existing` (this Service's managed slices) into `groups` (pure).

    Slices are visited in name order and endpoints in a canonical order, so one state gives
    one plan. Every slice in the plan is a complete body (`endpoints`, `ports` sorted).
    """
    plan = Plan()
    remaining = {k: dict(g.endpoints) for k, g in groups.items()}
    unchanged: dict[str, list[Obj]] = {}  # by ports key: slices kept as they are (so far)
    updating: dict[str, list[Obj]] = {}  # by ports key: slices rewritten anyway
    for current in sorted(existing, key=name_of):
        pkey = _ports_key(current.get("ports"))
        owners = [r for r in meta(current).get("ownerReferences") or [] if r.get("controller")]
        owned = len(owners) == 1 and owners[0].get("uid") == uid_of(svc)
        if pkey not in remaining or current.get("addressType") != address_type or not owned:
            plan.delete.append(current)
            continue
        wanted = remaining[pkey]
        kept: list[Obj] = []
        changed = False
        for ep in current.get("endpoints") or []:
            if not isinstance(ep, dict):
                changed = True
                continue
            desired = wanted.pop(endpoint_key(ep), None)
            if desired is None:
                changed = True  # no longer an endpoint (or a duplicate)
                continue
            kept.append(desired)
            changed = changed or desired != ep
        body = copy.deepcopy(current)
        body["endpoints"] = kept
        body["ports"] = copy.deepcopy(groups[pkey].ports)
        md = meta(body)
        changed = changed or labels_of(current) != slice_labels(svc) \
            or _sorted_endpoints(current.get("endpoints")) != _sorted_endpoints(kept)
        md["labels"] = slice_labels(svc)
        if not kept:
            plan.delete.append(current)
        elif changed:
            updating.setdefault(pkey, []).append(body)
        else:
            unchanged.setdefault(pkey, []).append(body)
    for pkey, group in groups.items():
        left = _sorted_endpoints(remaining[pkey].values())
        # 1. Into slices that are written anyway.
        for body in updating.get(pkey, []):
            room = max_per_slice - len(body["endpoints"])
            if room > 0 and left:
                body["endpoints"] += left[:room]
                left = left[room:]
        # 2. The closest fit among unchanged slices, else new slices.
        while left:
            target: Obj | None = None
            if len(left) < max_per_slice:
                fits = [b for b in unchanged.get(pkey, []) if max_per_slice - len(b["endpoints"]) >= len(left)]
                if fits:
                    target = min(fits, key=lambda b: max_per_slice - len(b["endpoints"]))
                    unchanged[pkey].remove(target)
                    updating.setdefault(pkey, []).append(target)
            if target is None:
                target = _new_slice(svc, address_type, group.ports)
                plan.create.append(target)
            room = max_per_slice - len(target["endpoints"])
            target["endpoints"] += left[:room]
            left = left[room:]
    plan.update = [b for bodies in updating.values() for b in bodies]
    if not (any(unchanged.values()) or plan.update or plan.create):
        # The placeholder: one empty slice, so that "no endpoints" is observable.
        placeholder = _new_slice(svc, address_type, [])
        reusable = next((s for s in plan.delete if _is_placeholder_of(s, placeholder)), None)
        if reusable is not None:
            plan.delete.remove(reusable)
        else:
            plan.create.append(placeholder)
    # A create takes the name of a slice that would be deleted (one update instead of two writes).
    for doomed in list(plan.delete):
        if not plan.create:
            break
        if doomed.get("addressType") != address_type or not any(
                r.get("uid") == uid_of(svc) and r.get("controller") for r in meta(doomed).get("ownerReferences") or []):
            continue
        created = plan.create.pop(0)
        body = copy.deepcopy(doomed)
        for f in ("addressType", "endpoints", "ports"):
            body[f] = created[f]
        meta(body)["labels"] = slice_labels(svc)
        plan.delete.remove(doomed)
        plan.update.append(body)
    for body in [*plan.create, *plan.update]:
        body["endpoints"] = _sorted_endpoints(body["endpoints"])
    return plan


def _is_placeholder_of(current: Obj, placeholder: Obj) -> bool:
    return (not current.get("endpoints") and not current.get("ports")
            and current.get("addressType") == placeholder["addressType"]
            and labels_of(current) == placeholder["metadata"]["labels"]
            and [r.get("uid") for r in meta(current).get("ownerReferences") or []]
            == [r["uid"] for r in placeholder["metadata"]["ownerReferences"]])


# ---------------------------------------------------------------------------------------------
# The controller.


class EndpointSliceController(ServiceQueueing):
    """Level-based EndpointSlice reconciler over the shared Service, pod, slice and node caches."""

    def __init__(self, *, api: Api, services: IndexedStore, pods: IndexedStore, slices: IndexedStore,
                 nodes: Store, clock: Clock, recorder: ComponentRecorder, max_per_slice: int = 100,
                 batch_period: float = 0.0, change_delay: float = 1.0) -> None:
        self.api = api
        self.services = services
        self.pods = pods
        self.slices = slices
        self.nodes = nodes
        self.clock = clock
        self.recorder = recorder
        self.max_per_slice = max_per_slice
        self.batch_period = batch_period
        self.change_delay = change_delay
        self.triggers = TriggerTimeTracker()
        self.written = WrittenVersions()
        self._by_service: dict[str, set[str]] = {}
        """Service key → keys of the slices whose writes `written` remembers."""
        self.enqueue: Callable[[str], None] = lambda key: None
        self.enqueue_after: Callable[[str, float], None] = lambda key, delay: self.enqueue(key)
        self.syncs = 0
        self.writes = 0

    # -- event handlers (wired to the shared informers) ---------------------------------------

    def on_slice(self, eps: Obj) -> None:
        """A slice was added or changed: someone else's change of one of ours syncs its Service (later)."""
        key = service_key_of(eps)
        if key is None or not managed_by_us(eps) or self.written.ours(eps):
            return
        self.enqueue_after(key, self.change_delay)

    def on_slice_update(self, old: Obj, new: Obj) -> None:
        """A slice changed; one that stopped being ours syncs its Service too."""
        if managed_by_us(old) and not managed_by_us(new):
            key = service_key_of(old)
            if key is not None:
                self.enqueue_after(key, self.change_delay)
        self.on_slice(new)

    def on_slice_delete(self, eps: Obj) -> None:
        """A slice is gone: expected if we deleted it, else its Service is synced (later)."""
        key = service_key_of(eps)
        expected = self.written.expected_deletion(eps)
        self.written.forget(key_of(eps))
        if key is not None:
            self._by_service.get(key, set()).discard(key_of(eps))
        if key is None or not managed_by_us(eps) or expected:
            return
        self.enqueue_after(key, self.change_delay)

    # -- reconcile ----------------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result | None:
        """Sync the EndpointSlices of one Service."""
        self.syncs += 1
        namespace, _, name = key.partition("/")
        svc = self.services.get(key)
        if svc is None:
            # The garbage collector deletes the slices (owner references); nothing to wait for.
            self.triggers.forget(key)
            for slice_key in self._by_service.pop(key, set()):
                self.written.forget(slice_key)
            return None
        if not manages_endpoints(svc):
            return None
        existing = [s for s in self.slices.by_index("namespace", namespace)
                    if managed_by_us(s) and labels_of(s).get(SERVICE_NAME) == name]
        await self._check_fresh(key, existing)
        pods = pods_of(svc, self.pods)
        trigger = self.triggers.compute(key, svc, pods)
        address_type = service_family(svc)
        groups: dict[str, _Group] = {}
        missing_node = False
        publish = (svc.get("spec") or {}).get("publishNotReadyAddresses") is True
        for pod in pods:
            if not should_be_endpoint(pod, include_terminating=True):
                continue
            ip = pod_ip_for(pod, address_type)
            if ip is None:
                continue
            node = self.nodes.get(node_name_of(pod)) if node_name_of(pod) else None
            if node is None and node_name_of(pod) and not publish:
                missing_node = True  # upstream skips the pod and retries the Service
                continue
            ports = endpoint_ports(svc, pod)
            group = groups.setdefault(_ports_key(ports), _Group(ports=ports))
            ep = pod_endpoint(pod, svc, ip, node)
            group.endpoints.setdefault(endpoint_key(ep), ep)
        plan = plan_slices(svc, existing, groups, address_type=address_type, max_per_slice=self.max_per_slice)
        await self._apply(svc, plan, trigger)
        return Result(requeue_after=RETRY_MISSING_NODE) if missing_node else None

    async def _check_fresh(self, key: str, existing: list[Obj]) -> None:
        """Raise StaleCacheError while the cache does not show this controller's last writes of `key`'s slices."""
        cached = {key_of(s): s for s in existing}
        for slice_key in sorted(self._by_service.get(key, set())):
            if not self.written.stale(slice_key, cached.get(slice_key)):
                continue
            namespace, _, name = slice_key.partition("/")
            try:
                await self.api.get(ENDPOINTSLICES, name, namespace=namespace)
            except NotFoundError:
                if slice_key not in cached:  # gone for good (whoever deleted it): nothing to wait for
                    self.written.forget(slice_key)
                    self._by_service.get(key, set()).discard(slice_key)
                    continue
            raise StaleCacheError(f"EndpointSlice informer cache is out of date for {key}")

    def _remember(self, service_key: str, written: Obj) -> None:
        self.written.wrote(written)
        self._by_service.setdefault(service_key, set()).add(key_of(written))

    async def _apply(self, svc: Obj, plan: Plan, trigger: float | None) -> None:
        service_key = key_of(svc)
        for body in [*plan.create, *plan.update]:
            annotations = dict(meta(body).get("annotations") or {})
            if trigger is not None:
                annotations[TRIGGER_TIME] = format_time(trigger)
            if annotations:
                meta(body)["annotations"] = annotations
            if not body["endpoints"]:
                body["endpoints"] = None  # as upstream stores an empty slice: `endpoints: null`
            if not body["ports"]:
                body["ports"] = None
        try:
            for body in plan.create:
                try:
                    created = await self.api.create(ENDPOINTSLICES, body, namespace=namespace_of(svc))
                except ForbiddenError as exc:
                    if _namespace_terminating(exc):
                        return  # the namespace is going: so will the Service
                    raise
                self._remember(service_key, created)
                self.writes += 1
            for body in plan.update:
                updated = await self.api.update(ENDPOINTSLICES, body)
                self._remember(service_key, updated)
                self.writes += 1
            for doomed in plan.delete:
                with contextlib.suppress(NotFoundError):
                    await self.api.delete(ENDPOINTSLICES, name_of(doomed), namespace=namespace_of(doomed),
                                          preconditions={"uid": uid_of(doomed)})
                self.written.deleted(doomed)
                self._by_service.setdefault(service_key, set()).add(key_of(doomed))
                self.writes += 1
        except (ConflictError, AlreadyExistsError):
            raise  # the cache is behind: retried with backoff
        except ApiError as exc:
            self.recorder.warning(svc, "FailedToUpdateEndpointSlices",
                                  f"Error updating Endpoint Slices for Service {service_key}: {exc}")
            raise

    def snapshot(self) -> dict[str, Any]:
        """The controller's part of `/debug/controller-manager`."""
        return {"syncs": self.syncs, "writes": self.writes, "remembered": len(self.written)}


def _namespace_terminating(exc: ApiError) -> bool:
    causes = (exc.status.get("details") or {}).get("causes") or []
    return any(isinstance(c, dict) and c.get("reason") == "NamespaceTerminating" for c in causes)


def _start(ctx: ControllerContext) -> Started:
    s = ctx.settings.endpoints
    c = EndpointSliceController(api=ctx.api, services=ctx.informer(_SERVICES), pods=ctx.informer(_PODS),
                                slices=ctx.informer(_SLICES), nodes=ctx.informer(_NODES), clock=ctx.clock,
                                recorder=ctx.recorder.for_component("endpoint-slice-controller"),
                                max_per_slice=s.max_endpoints_per_slice,
                                batch_period=s.endpointslice_updates_batch_period,
                                change_delay=s.endpointslice_change_min_sync_delay)
    q = ctx.queue("endpointslice")
    c.enqueue = q.add
    c.enqueue_after = q.add_after
    ctx.on(SERVICES, on_add=lambda o, _i: c.on_service(o), on_update=lambda _old, new: c.on_service(new),
           on_delete=lambda o: c.on_service(final_state(o)))
    ctx.on(PODS, on_add=lambda o, _i: c.on_pod_add(o), on_update=c.on_pod_update,
           on_delete=lambda o: c.on_pod_delete(final_state(o)))
    ctx.on(ENDPOINTSLICES, on_add=lambda o, _i: c.on_slice(o), on_update=c.on_slice_update,
           on_delete=lambda o: c.on_slice_delete(final_state(o)))
    return Started(run=run_workers(q, c.reconcile, workers=s.endpointslice_workers, name="endpointslice"),
                   controller=c, snapshot=c.snapshot)


_SERVICES = namespaced(SERVICES)
_PODS = namespaced(PODS)
_SLICES = namespaced(ENDPOINTSLICES)
_NODES = InformerNeed(kind=NODES)
CONTROLLER = ControllerSpec(name="endpointslice", informers=(_SERVICES, _PODS, _SLICES, _NODES), start=_start,
                            debug_key="endpointSlices")

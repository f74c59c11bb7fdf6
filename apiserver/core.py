"""The apiserver's parts, and the one function that assembles them in order.

`assemble(settings)` builds everything that is not HTTP: the cluster clock, the store, the
watch hub, the history, the registry of verbs, the component registry and the metrics, and
returns them as one typed `ApiserverCore`. `kubemesh.apiserver.server.build_app` puts the
HTTP front on a core, and `kubemesh.apiserver.chaos.install` receives the same core
explicitly: nothing is found again through the aiohttp application.

The store's publishers are called synchronously, in this order, for every committed write,
before the write returns to its caller:

1. the watch hub (`WatchHub.publish`): the kind's event window, then every live watcher;
2. the history's `write` record (who wrote what, at which revision);
3. the RBAC authorizer's invalidation (a write to a Role, ClusterRole or binding);
4. chaos, when installed: its write-triggered faults and the samples behind stale reads.

With `--storage etcd` the store publishes the changes its etcd watch applies, not its own writes
(`kubemesh.apiserver.etcdcache`), and the CRD lifecycle (`Establishing.applied`) and the
Services' allocations (`ServiceIPs.applied`) follow the RBAC authorizer, before chaos.

So a history record and a trigger always see a write that watchers were already offered, and
the write's response can reuse the bytes its watch event was encoded into
(`WatchHub.event_at`).
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson
import structlog
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge

from kubemesh.apiserver import rbacdefaults, tables
from kubemesh.apiserver.addons import install_cluster_dns
from kubemesh.apiserver.apiservices import LocalApiServices
from kubemesh.apiserver.authn import Authenticator, load_key
from kubemesh.apiserver.components import ComponentRegistry
from kubemesh.apiserver.controlplane import ControlPlanePods
from kubemesh.apiserver.discovery import GIT_VERSION, Discovery
from kubemesh.apiserver.establishing import Establishing
from kubemesh.apiserver.etcdcache import EtcdCache
from kubemesh.apiserver.history import WRITER, History, Seen
from kubemesh.apiserver.nodeauth import NodeAuthorizer, NodeRestriction
from kubemesh.apiserver.openapi import OpenApi
from kubemesh.apiserver.rbac import Authorizer, EscalationCheck, Rule
from kubemesh.apiserver.registry import Registry
from kubemesh.apiserver.serviceips import ServiceIPs
from kubemesh.apiserver.serving import RequestCheck, Targets
from kubemesh.apiserver.settings import ServerSettings
from kubemesh.apiserver.storage import Backend, EventType, LogBackend, MemoryBackend, Store, StoreWriteError
from kubemesh.apiserver.watching import Flusher, Item, Watcher, WatchHub
from kubemesh.apiserver.webhooks import Webhooks
from kubemesh.services.machinery.clock import ClusterClock
from kubemesh.services.model.kinds import Kind, KindTable, Obj, key_of
from kubemesh.services.process.metrics import RequestStats

Handler = Callable[[], Awaitable[web.StreamResponse]]


class Interceptor(Protocol):
    """Wraps the handling of API requests: may delay one, fail it, or fail it after it ran."""

    def engaged(self, request: web.Request, who: tuple[str, str]) -> bool:
        """Whether this request must go through `intercept` (asked synchronously, for every request)."""
        ...

    async def intercept(self, request: web.Request, who: tuple[str, str], handler: Handler) -> web.StreamResponse:
        """Handle the request, calling `handler` (or not)."""
        ...


@dataclass(slots=True)
class Metrics:
    """The apiserver's Prometheus metrics."""

    registry: CollectorRegistry
    requests: RequestStats
    """`apiserver_request_total` and `apiserver_request_duration_seconds` (observed on every request)."""
    watchers: Gauge
    objects: Gauge
    responses_lost: Counter
    """`apiserver_responses_lost_total{verb,resource}`: writes the store committed whose answer could not be sent."""

    @classmethod
    def create(cls) -> Metrics:
        """Fresh metrics on their own registry."""
        reg = CollectorRegistry()
        requests = RequestStats(requests="apiserver_request", latency="apiserver_request_duration_seconds",
                                buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5))
        reg.register(requests)
        return cls(
            registry=reg,
            requests=requests,
            watchers=Gauge("apiserver_registered_watchers", "Live watch streams", registry=reg),
            objects=Gauge("apiserver_storage_revision", "Current store revision", registry=reg),
            responses_lost=Counter("apiserver_responses_lost", "Committed writes whose response could not be sent",
                                   ["verb", "resource"], registry=reg),
        )


@dataclass(frozen=True, kw_only=True)
class ApiserverCore:
    """Everything one apiserver process serves, assembled (see the module docstring)."""

    settings: ServerSettings
    clock: ClusterClock
    kinds: KindTable
    """The kinds served: the built-in ones and those custom resource definitions add."""
    targets: Targets
    discovery: Discovery
    openapi: OpenApi
    store: Store
    hub: WatchHub
    history: History
    registry: Registry
    components: ComponentRegistry
    metrics: Metrics
    webhooks: Webhooks
    """Admission webhooks: the write path calls them, chaos faults them (`kubemesh.apiserver.webhooks`)."""
    authenticator: Authenticator
    """Who a request comes from: the admin token, ServiceAccount tokens (`kubemesh.apiserver.authn`)."""
    authorizer: Authorizer
    """What a user may do: RBAC (`kubemesh.apiserver.rbac`)."""
    request_checks: list[RequestCheck] = field(default_factory=list)
    """Admission of the requests that carry no new object (a node deleting or evicting a pod)."""
    interceptors: list[Interceptor] = field(default_factory=list)
    """Request interceptors, outermost first (chaos adds its own)."""
    etcd: EtcdCache | None = None
    """`--storage etcd`: what feeds the store from etcd and commits its staged writes."""
    start_steps: list[tuple[str, Callable[[], object]]] = field(default_factory=list)
    apiservers: Callable[[], Awaitable[list[dict[str, Any]]]] | None = None
    """Over etcd: every apiserver of the cluster (`kubemesh.apiserver.sharedstate`); None: this one alone."""
    """In etcd mode, the start-up steps that write, for `serve` to run and commit one by one (else empty)."""


def load_clock(settings: ServerSettings) -> ClusterClock:
    """The cluster clock, continued across restarts when there is a data directory."""
    if settings.data_dir:
        path = Path(settings.data_dir) / "clock.json"
        if path.exists():
            doc = orjson.loads(path.read_bytes())
            if float(doc.get("rate", 0)) == settings.clock_rate:
                return ClusterClock.from_document(doc)
        clock = ClusterClock(rate=settings.clock_rate)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps(clock.document()))
        return clock
    return ClusterClock(rate=settings.clock_rate)


def assemble(settings: ServerSettings, *, store: Store | None = None, etcd: EtcdCache | None = None,
             clock: ClusterClock | None = None, signing_key: bytes | None = None) -> ApiserverCore:
    """Build the parts in order and wire the store's publishers (see the module docstring).

    With `etcd` (`--storage etcd`; `store` is then the cache it feeds), the start-up steps that write
    (RBAC defaults, the `kubernetes` Service, APIServices, cluster DNS) are not run here but left in
    `ApiserverCore.start_steps`: their writes must be committed to etcd one step after the other
    (`kubemesh.apiserver.server.serve`), as each step reads what the ones before wrote. `clock` and
    `signing_key`, when given, are those shared by every apiserver over that etcd
    (`kubemesh.apiserver.sharedstate`); else the clock and key of `--data-dir`, or fresh ones.
    """
    clock = clock if clock is not None else load_clock(settings)
    kinds = KindTable()
    discovery = Discovery(kinds, server_address=f"{settings.host}:{settings.port}")
    if store is None:
        backend: Backend = LogBackend(settings.data_dir, fsync=settings.fsync) if settings.data_dir \
            else MemoryBackend()
        store = Store(backend=backend)
    history = History(clock=clock, capacity=settings.history_capacity, deliveries=settings.history_deliveries)

    def table_row(kind: Kind, obj: Obj) -> Obj:
        return tables.watch_event_table(kind, obj, now=clock.now())

    hub = WatchHub(store=store, now=clock.now, settings=settings.watch, table_row=table_row)
    store.subscribe(hub.publish)  # publisher 1
    store.subscribe(_write_recorder(history))  # publisher 2
    nodes = NodeAuthorizer(store=store, rules=[Rule.of(r) for r in rbacdefaults.node_rules()])
    authorizer = Authorizer(store=store, enabled=settings.authorization_mode == "RBAC", first=nodes)  # publisher 3
    if settings.history_deliveries:
        hub.on_deliver = _delivery_recorder(history, hub.flusher)
    # The registry creates the initial namespaces: after the publishers, so that they are watched.
    rng = random.Random(settings.seed) if settings.seed is not None else random.Random()
    registry = Registry(store=store, clock=clock, rng=rng, kinds=kinds, tolerations=settings.tolerations)
    registry.hooks.append(EscalationCheck(authorizer))
    restriction = NodeRestriction(store=store)
    if authorizer.enabled:
        registry.hooks.append(restriction)
    steps: list[tuple[str, Callable[[], object]]] = []
    if etcd is None:
        rbacdefaults.install(registry=registry)
    else:
        steps.append(("RBAC defaults", lambda: rbacdefaults.install(registry=registry)))
    # CRDs are served from the write path; stored ones are served again before any request.
    establishing = Establishing(registry=registry, kinds=kinds, hub=hub)
    registry.hooks.append(establishing)
    if etcd is not None:  # the CRD lifecycle once a change is committed (Establishing.applied)
        store.subscribe(establishing.applied)
    steps.append(("serving stored CRDs", establishing.restore))
    # cluster IPs, node ports, default/kubernetes
    if etcd is None:
        steps.append(("kubernetes service", lambda: ServiceIPs.install(registry=registry, settings=settings)))
    else:  # allocations also follow committed Services (ServiceIPs.applied)
        steps.append(("kubernetes service",
                      lambda: store.subscribe(ServiceIPs.install(registry=registry, settings=settings).applied)))
    # an APIService per served group version
    steps.append(("APIServices", lambda: LocalApiServices.install(registry=registry, kinds=kinds)))
    components = ComponentRegistry(clock=clock)
    if settings.system_pods:  # kube-system as kubeadm leaves it
        # The control plane's mirror pods follow the components' runs; cluster DNS is created once.
        components.listeners.append(ControlPlanePods(
            registry=registry, address=settings.advertise_address or settings.host, version=GIT_VERSION))
        steps.append(("cluster DNS",
                      lambda: install_cluster_dns(registry=registry, service_cidr=settings.service_cluster_ip_range)))
    if etcd is None:
        for step, run in steps:
            _at_start(step, run)
        steps = []
    return ApiserverCore(settings=settings, clock=clock, kinds=kinds, targets=Targets(kinds), discovery=discovery,
                         openapi=OpenApi(discovery), store=store, hub=hub, history=history, registry=registry,
                         components=components, metrics=Metrics.create(),
                         webhooks=Webhooks(store=store, kinds=kinds, sleep=clock.sleep, wall=time.monotonic,
                                           record=functools.partial(history.append, "webhook")),
                         authenticator=Authenticator(store=store, clock=clock,
                                                     key=signing_key or load_key(settings.data_dir),
                                                     admin_token=settings.token,
                                                     component_identities=settings.component_identities,
                                                     anonymous=settings.anonymous_auth,
                                                     controller_account=rbacdefaults.controller_account),
                         authorizer=authorizer,
                         request_checks=[restriction.admit_request] if authorizer.enabled else [],
                         etcd=etcd, start_steps=steps)


def _at_start(step: str, run: Callable[[], object]) -> None:
    """A start-up step whose writes may fail (a full or read-only disk under --data-dir).

    Its hooks are in place before it writes; when a write fails, the apiserver still starts
    and serves what is stored (writes fail until there is room), and the step's objects stay
    as they were stored.
    """
    try:
        run()
    except StoreWriteError as exc:
        structlog.get_logger("apiserver").error("a start-up write failed; serving what is stored", step=step,
                                                error=str(exc))


def _write_recorder(history: History) -> Callable[[Kind, EventType, Obj, Obj | None, int], None]:
    """The store publisher that records every write in the history, attributed to its writer."""

    def record_write(kind: Kind, event: EventType, obj: Obj, prev: Obj | None, rv: int) -> None:
        component, instance = WRITER.get()
        history.append("write", component=component, instance=instance, resource=kind.plural, event=event,
                       key=key_of(obj), rv=rv)

    return record_write


def _delivery_recorder(history: History, flusher: Flusher) -> Callable[[Watcher, Sequence[Item]], None]:
    """The hub's delivery hook that records what each watcher was sent."""
    # Watchers flushed together mostly deliver the very same items: their `Seen` list is built
    # once and shared by their history entries (nobody mutates a recorded list), and within one
    # flush (`Flusher.batch`) those entries are one.
    last: list[Any] = [None, None]  # [items, seen]

    def record_delivery(w: Watcher, items: Sequence[Item]) -> None:
        component, instance = w.identity
        if items == last[0]:
            seen: list[Seen] = last[1]
        else:
            seen = [event.seen_as(type_) for type_, event, _ in items]
            last[0], last[1] = items, seen
        history.deliveries(component=component, instance=instance, watch=w.id, seen=seen, batch=flusher.batch)

    return record_delivery

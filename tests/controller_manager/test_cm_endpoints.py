"""The endpoints and EndpointSlice controllers: unit tests on fakes, then a real mesh.

* Unit tests (fast): `EndpointsController` and `EndpointSliceController` over `cm_fakes.FakeApi`
  (zero-lag caches) on a `ManualClock`: ready and not-ready addresses, named target ports,
  trigger times, writes only on change, selectorless and ExternalName Services left alone,
  packing into slices of at most `max_per_slice`, the placeholder slice, a stale cache that is
  never written from.
* On a mesh (`slow`, one mesh for the class at 10 cluster s per wall s): a Deployment behind a
  Service; its Endpoints and EndpointSlices list the Running and Ready pods' IPs and follow
  scale up and down; a named target port; a node powered off through the chaos client makes
  its pods not ready after the node-monitor grace period, and they move to
  `notReadyAddresses` / `ready: false`; `kubectl get endpoints,endpointslices` prints them.

Every deadline is in cluster seconds (`MeshEnv.until` reads the apiserver's clock); nothing
asserts on wall time.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from cm_fakes import FakeApi
from cm_mesh import MeshEnv, start_mesh

from kubemesh.controller_manager.catalogue import ALL_CONTROLLERS
from kubemesh.controller_manager.endpoints import (
    OVER_CAPACITY,
    TRIGGER_TIME,
    EndpointsController,
    StaleCacheError,
    find_port,
    repack_subsets,
)
from kubemesh.controller_manager.endpointslices import CONTROLLER_NAME, EndpointSliceController
from kubemesh.controller_manager.settings import add_arguments, from_namespace
from kubemesh.services.machinery.client import NotFoundError
from kubemesh.services.machinery.clock import ManualClock, format_time
from kubemesh.services.machinery.eventing import EventRecorder
from kubemesh.services.mesh.chaos_client import Chaos
from kubemesh.services.model.kinds import (
    DEPLOYMENTS,
    ENDPOINTS,
    ENDPOINTSLICES,
    NODES,
    PODS,
    SERVICES,
    Obj,
)

KEY = "default/web"


# ------------------------------------------------------------------------------------ fakes


class Fixture:
    """A fake apiserver with both controllers on it."""

    def __init__(self, *, max_per_slice: int = 100, capacity: int = 1000) -> None:
        self.clock = ManualClock(start=1_000_000.0)
        self.api = FakeApi(self.clock)
        rec = EventRecorder(None, clock=self.clock, component="kube-controller-manager")
        self.ep = EndpointsController(api=self.api, services=self.api.store(SERVICES), pods=self.api.store(PODS),
                                      endpoints=self.api.store(ENDPOINTS), clock=self.clock,
                                      recorder=rec.for_component("endpoint-controller"), capacity=capacity)
        self.eps = EndpointSliceController(api=self.api, services=self.api.store(SERVICES),
                                           pods=self.api.store(PODS), slices=self.api.store(ENDPOINTSLICES),
                                           nodes=self.api.store(NODES), clock=self.clock,
                                           recorder=rec.for_component("endpoint-slice-controller"),
                                           max_per_slice=max_per_slice)
        for n in ("node-1", "node-2"):
            self.api.add(NODES, {"metadata": {"name": n, "labels": {"topology.kubernetes.io/zone": f"zone-{n[-1]}"}}})

    def service(self, name: str = "web", **spec: Any) -> Obj:
        body: Obj = {"metadata": {"name": name, "labels": {"tier": "front"}},
                     "spec": {"selector": {"app": "web"}, "clusterIP": "10.96.10.10", "ipFamilies": ["IPv4"],
                              "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}]}}
        body["spec"].update(spec)
        return self.api.add(SERVICES, body)

    def pod(self, name: str, ip: str | None, *, ready: bool = True, node: str = "node-1",
            labels: dict[str, str] | None = None, ports: list[Obj] | None = None) -> Obj:
        status: Obj = {"phase": "Running" if ip else "Pending",
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                                       "lastTransitionTime": format_time(self.clock.now())}]}
        if ip:
            status["podIP"], status["podIPs"] = ip, [{"ip": ip}]
        container: Obj = {"name": "main", "image": "nginx"}
        if ports is not None:
            container["ports"] = ports
        return self.api.add(PODS, {"metadata": {"name": name, "labels": labels or {"app": "web"}},
                                   "spec": {"nodeName": node, "containers": [container]}, "status": status})

    def set_ready(self, name: str, ready: bool) -> None:
        pod = self.api.objects["pods"][f"default/{name}"]
        pod["status"]["conditions"] = [{"type": "Ready", "status": "True" if ready else "False",
                                        "lastTransitionTime": format_time(self.clock.now())}]
        pod["metadata"]["resourceVersion"] = str(next(self.api.rv))

    def endpoints(self, name: str = "web") -> Obj:
        return self.api.objects["endpoints"][f"default/{name}"]

    def slices(self, name: str = "web") -> list[Obj]:
        return sorted((s for s in self.api.objects.get("endpointslices", {}).values()
                       if s["metadata"]["labels"].get("kubernetes.io/service-name") == name),
                      key=lambda s: s["metadata"]["name"])

    async def sync(self, key: str = KEY) -> None:
        await self.ep.reconcile(key)
        await self.eps.reconcile(key)


def ips(addresses: list[Obj] | None) -> list[str]:
    return [a["ip"] for a in addresses or []]


def slice_ips(slices: list[Obj], *, ready: bool | None = None) -> list[str]:
    return sorted(e["addresses"][0] for s in slices for e in s.get("endpoints") or []
                  if ready is None or e["conditions"]["ready"] is ready)


# ------------------------------------------------------------------------------- endpoints


async def test_endpoints_list_ready_and_not_ready_pods_with_their_target_port() -> None:
    f = Fixture()
    svc = f.service()
    f.pod("web-a", "10.1.0.2")
    f.pod("web-b", "10.1.0.3", ready=False, node="node-2")
    f.pod("web-c", None)  # no IP yet: not an endpoint
    f.pod("other", "10.1.0.9", labels={"app": "other"})
    await f.ep.reconcile(KEY)
    ep = f.endpoints()
    assert ep["metadata"]["labels"] == {"tier": "front"}
    (subset,) = ep["subsets"]
    assert ips(subset["addresses"]) == ["10.1.0.2"] and ips(subset["notReadyAddresses"]) == ["10.1.0.3"]
    assert subset["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    a = subset["addresses"][0]
    assert a["nodeName"] == "node-1" and a["targetRef"]["kind"] == "Pod" and a["targetRef"]["name"] == "web-a"
    assert subset["notReadyAddresses"][0]["nodeName"] == "node-2"
    # A Service seen for the first time exports its creation as the trigger time.
    assert ep["metadata"]["annotations"][TRIGGER_TIME] == svc["metadata"]["creationTimestamp"]


async def test_endpoints_are_written_only_on_change_and_follow_readiness() -> None:
    f = Fixture()
    f.service()
    f.pod("web-a", "10.1.0.2")
    await f.ep.reconcile(KEY)
    writes = f.api.count("create", "endpoints") + f.api.count("update", "endpoints")
    await f.ep.reconcile(KEY)
    assert f.api.count("create", "endpoints") + f.api.count("update", "endpoints") == writes
    await f.clock.advance(30)
    f.set_ready("web-a", False)
    await f.ep.reconcile(KEY)
    ep = f.endpoints()
    assert "addresses" not in ep["subsets"][0] and ips(ep["subsets"][0]["notReadyAddresses"]) == ["10.1.0.2"]
    assert ep["metadata"]["annotations"][TRIGGER_TIME] == format_time(f.clock.now())


async def test_named_target_ports_resolve_per_pod() -> None:
    f = Fixture()
    f.service(ports=[{"name": "http", "port": 80, "protocol": "TCP", "targetPort": "web"}])
    f.pod("web-a", "10.1.0.2", ports=[{"name": "web", "containerPort": 8080, "protocol": "TCP"}])
    f.pod("web-b", "10.1.0.3", ports=[{"name": "web", "containerPort": 9090, "protocol": "TCP"}])
    f.pod("web-c", "10.1.0.4", ports=[{"name": "metrics", "containerPort": 9100, "protocol": "TCP"}])
    await f.sync()
    subsets = f.endpoints()["subsets"]
    assert [(ips(s["addresses"]), s["ports"][0]["port"]) for s in subsets] == [
        (["10.1.0.2"], 8080), (["10.1.0.3"], 9090)]
    # A pod without the named port is no address of Endpoints, but an endpoint without ports in a slice.
    by_port = {s["ports"][0]["port"] if s["ports"] else None: slice_ips([s]) for s in f.slices()}
    assert by_port == {8080: ["10.1.0.2"], 9090: ["10.1.0.3"], None: ["10.1.0.4"]}
    assert find_port({"spec": {"containers": []}}, {"port": 80, "targetPort": "web"}) is None


async def test_selectorless_and_external_name_services_are_left_alone() -> None:
    f = Fixture()
    f.service("manual", selector=None)
    f.service("external", type="ExternalName", externalName="example.com")
    f.pod("web-a", "10.1.0.2")
    for key in ("default/manual", "default/external"):
        await f.sync(key)
    assert "endpoints" not in f.api.objects and not f.slices("manual") and not f.slices("external")


async def test_a_deleted_service_takes_its_endpoints_and_leftovers_are_found() -> None:
    f = Fixture()
    f.service()
    f.pod("web-a", "10.1.0.2")
    await f.ep.reconcile(KEY)
    f.api.add(ENDPOINTS, {"metadata": {"name": "orphan"}, "subsets": []})
    assert f.ep.leftovers() == ["default/orphan"]
    del f.api.objects["services"][KEY]
    await f.ep.reconcile(KEY)
    assert KEY not in f.api.objects["endpoints"]


async def test_headless_service_without_ports_gets_bare_addresses() -> None:
    f = Fixture()
    f.service(clusterIP="None", ports=None)
    f.pod("web-a", "10.1.0.2")
    await f.sync()
    ep = f.endpoints()
    assert ep["subsets"] == [{"addresses": ep["subsets"][0]["addresses"]}]
    assert ep["metadata"]["labels"]["service.kubernetes.io/headless"] == ""
    (eps,) = f.slices()
    assert eps["ports"] is None and slice_ips([eps]) == ["10.1.0.2"]
    assert eps["metadata"]["labels"]["service.kubernetes.io/headless"] == ""


async def test_endpoints_are_truncated_at_capacity() -> None:
    f = Fixture(capacity=3)
    f.service()
    for i in range(5):
        f.pod(f"web-{i}", f"10.1.0.{10 + i}", ready=i < 2)
    await f.ep.reconcile(KEY)
    ep = f.endpoints()
    (subset,) = ep["subsets"]
    assert len(subset["addresses"]) == 2 and len(subset["notReadyAddresses"]) == 1
    assert ep["metadata"]["annotations"][OVER_CAPACITY] == "truncated"


async def test_a_stale_cache_is_never_written_from() -> None:
    f = Fixture()
    f.service()
    f.pod("web-a", "10.1.0.2")
    await f.ep.reconcile(KEY)
    stale = copy.deepcopy(f.endpoints())
    f.pod("web-b", "10.1.0.3")
    await f.ep.reconcile(KEY)  # writes a newer version
    store = f.api.store(ENDPOINTS)
    store.frozen = {KEY: stale}  # the informer has not seen our last write yet
    f.ep.endpoints = store
    f.pod("web-c", "10.1.0.4")
    updates = f.api.count("update", "endpoints")
    with pytest.raises(StaleCacheError):
        await f.ep.reconcile(KEY)
    assert f.api.count("update", "endpoints") == updates
    store.frozen = None  # caught up
    await f.ep.reconcile(KEY)
    assert ips(f.endpoints()["subsets"][0]["addresses"]) == ["10.1.0.2", "10.1.0.3", "10.1.0.4"]


def test_repack_groups_addresses_by_their_ports_and_not_ready_trumps_ready() -> None:
    a = {"ip": "10.0.0.2"}
    b = {"ip": "10.0.0.1"}
    p80 = {"port": 80, "protocol": "TCP"}
    p90 = {"port": 90, "protocol": "TCP"}
    packed = repack_subsets([{"addresses": [a], "ports": [p80]}, {"addresses": [a], "ports": [p90]},
                             {"addresses": [b], "ports": [p80]}, {"notReadyAddresses": [b], "ports": [p80]}])
    # One subset per distinct set of (address, readiness) per port.
    assert packed == [{"addresses": [a], "notReadyAddresses": [b], "ports": [p80]}, {"addresses": [a], "ports": [p90]}]
    assert repack_subsets([{"addresses": [a], "ports": [p80]}, {"addresses": [a], "ports": [p90]},
                           {"addresses": [b], "ports": [p90]}, {"addresses": [b], "ports": [p80]}]) == [
        {"addresses": [b, a], "ports": [p80, p90]}]


# ---------------------------------------------------------------------------------- slices


async def test_slices_carry_conditions_owner_labels_and_zone() -> None:
    f = Fixture()
    svc = f.service()
    f.pod("web-a", "10.1.0.2")
    f.pod("web-b", "10.1.0.3", ready=False, node="node-2")
    await f.eps.reconcile(KEY)
    (eps,) = f.slices()
    md = eps["metadata"]
    assert md["name"].startswith("web-") and md["labels"] == {
        "tier": "front", "kubernetes.io/service-name": "web", "endpointslice.kubernetes.io/managed-by": CONTROLLER_NAME}
    assert md["ownerReferences"] == [{"apiVersion": "v1", "kind": "Service", "name": "web",
                                      "uid": svc["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]
    assert eps["addressType"] == "IPv4" and eps["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    a, b = eps["endpoints"]
    assert a["addresses"] == ["10.1.0.2"] and a["conditions"] == {"ready": True, "serving": True, "terminating": False}
    assert a["nodeName"] == "node-1" and a["zone"] == "zone-1" and a["targetRef"]["name"] == "web-a"
    assert b["conditions"] == {"ready": False, "serving": False, "terminating": False} and b["zone"] == "zone-2"
    assert md["annotations"][TRIGGER_TIME] == svc["metadata"]["creationTimestamp"]


async def test_terminating_pods_stay_in_slices_but_not_ready() -> None:
    f = Fixture()
    f.service()
    f.pod("web-a", "10.1.0.2")
    f.api.objects["pods"]["default/web-a"]["metadata"]["deletionTimestamp"] = format_time(f.clock.now())
    await f.sync()
    assert "subsets" not in f.endpoints()
    (eps,) = f.slices()
    assert eps["endpoints"][0]["conditions"] == {"ready": False, "serving": True, "terminating": True}


async def test_slices_hold_at_most_max_per_slice_and_shrink_without_churn() -> None:
    f = Fixture(max_per_slice=3)
    f.service()
    for i in range(7):
        f.pod(f"web-{i}", f"10.1.0.{10 + i}")
    await f.eps.reconcile(KEY)
    slices = f.slices()
    assert sorted(len(s["endpoints"]) for s in slices) == [1, 3, 3]
    assert slice_ips(slices) == [f"10.1.0.{10 + i}" for i in range(7)]
    writes = len(f.api.calls)
    await f.eps.reconcile(KEY)
    assert len(f.api.calls) == writes, "an unchanged state writes nothing"
    del f.api.objects["pods"]["default/web-0"]
    await f.eps.reconcile(KEY)
    assert f.api.count("update", "endpointslices") == 1 and f.api.count("delete", "endpointslices") == 0
    assert slice_ips(f.slices()) == [f"10.1.0.{10 + i}" for i in range(1, 7)]


async def test_no_pods_leaves_one_placeholder_slice() -> None:
    f = Fixture()
    f.service()
    f.pod("web-a", "10.1.0.2")
    await f.eps.reconcile(KEY)
    (first,) = f.slices()
    del f.api.objects["pods"]["default/web-a"]
    await f.eps.reconcile(KEY)
    (placeholder,) = f.slices()
    assert placeholder["metadata"]["name"] == first["metadata"]["name"], "updated in place, not recreated"
    assert placeholder["endpoints"] is None and placeholder["ports"] is None
    calls = len(f.api.calls)
    await f.eps.reconcile(KEY)
    assert len(f.api.calls) == calls


async def test_a_slice_changed_by_someone_else_is_put_right() -> None:
    f = Fixture()
    f.service()
    f.pod("web-a", "10.1.0.2")
    await f.eps.reconcile(KEY)
    (eps,) = f.slices()
    queued: list[tuple[str, float]] = []
    f.eps.enqueue_after = lambda key, delay: queued.append((key, delay))
    f.eps.on_slice(copy.deepcopy(eps))
    assert queued == [], "the event of our own write is ignored"
    eps["endpoints"] = []
    eps["metadata"]["resourceVersion"] = str(next(f.api.rv))
    f.eps.on_slice(copy.deepcopy(eps))
    assert queued == [(KEY, 1.0)]
    await f.eps.reconcile(KEY)
    assert slice_ips(f.slices()) == ["10.1.0.2"]


# -------------------------------------------------------------------------------- settings


def test_flags_and_catalogue() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    settings = from_namespace(parser.parse_args([
        "--concurrent-endpoint-syncs", "3", "--concurrent-service-endpoint-syncs", "2",
        "--max-endpoints-per-slice", "50", "--endpoint-updates-batch-period", "500ms",
        "--controllers", "*,-endpointslice"]), known=ALL_CONTROLLERS)
    e = settings.endpoints
    assert (e.endpoint_workers, e.endpointslice_workers, e.max_endpoints_per_slice,
            e.endpoint_updates_batch_period) == (3, 2, 50, 0.5)
    assert settings.enabled("endpoint") and not settings.enabled("endpointslice")
    assert {"endpoint", "endpointslice"} <= set(ALL_CONTROLLERS)
    with pytest.raises(ValueError, match="max-endpoints-per-slice"):
        from_namespace(parser.parse_args(["--max-endpoints-per-slice", "1001"]), known=ALL_CONTROLLERS)


# ------------------------------------------------------------------------------------ mesh

MESH_RATE = 10.0
GRACE = 50.0
"""`--node-monitor-grace-period` of the current profile (pods turn not ready after it)."""
SLACK = 30.0


@pytest_asyncio.fixture(scope="class", loop_scope="module")
async def mesh() -> AsyncIterator[MeshEnv]:
    async for env in start_mesh(nodes=2, rate=MESH_RATE):
        yield env


def deployment(replicas: int) -> Obj:
    labels = {"app": "web"}
    container = {"name": "main", "image": "nginx:1.25", "ports": [{"name": "http", "containerPort": 8080}]}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}}}}


def running_ready_ips(pods: list[Obj]) -> list[str]:
    return sorted(p["status"]["podIP"] for p in pods
                  if (p.get("status") or {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
                  and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or []))


@pytest.mark.slow
@pytest.mark.kubectl
@pytest.mark.asyncio(loop_scope="module")
class TestEndpointsOnAMesh:
    """One mesh, one story: each test starts from where the previous left it (`-k` runs still work)."""

    async def pods(self, env: MeshEnv) -> list[Obj]:
        return list((await env.client.list(PODS, namespace="default", label_selector="app=web"))["items"])

    async def state(self, env: MeshEnv) -> tuple[list[str], list[str], list[str], list[str]]:
        """(Endpoints ready, not ready; slices ready, not ready) IPs of Service web."""
        try:
            subsets = (await env.client.get(ENDPOINTS, "web", namespace="default")).get("subsets") or []
        except NotFoundError:
            subsets = []
        ready = sorted(a["ip"] for s in subsets for a in s.get("addresses") or [])
        not_ready = sorted(a["ip"] for s in subsets for a in s.get("notReadyAddresses") or [])
        slices = (await env.client.list(ENDPOINTSLICES, namespace="default",
                                        label_selector="kubernetes.io/service-name=web"))["items"]
        return ready, not_ready, slice_ips(slices, ready=True), slice_ips(slices, ready=False)

    async def converge(self, env: MeshEnv, *, replicas: int, within: float = 120.0) -> list[str]:
        """Until Endpoints and slices list exactly the Running+Ready pods' IPs, `replicas` of them."""

        async def check() -> list[str] | None:
            want = running_ready_ips(await self.pods(env))
            if len(want) != replicas:
                return None
            got = await self.state(env)
            return want if got == (want, [], want, []) else None

        return await env.until(check, within=within, what=f"endpoints of {replicas} ready pods")

    async def ensure_running(self, env: MeshEnv) -> None:
        try:
            await env.client.get(SERVICES, "web", namespace="default")
            return
        except NotFoundError:  # the first test of the story
            pass
        await env.client.create(DEPLOYMENTS, deployment(2))
        await env.client.create(SERVICES, {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": "http"}]}})

    async def test_endpoints_and_slices_list_the_ready_pods(self, mesh: MeshEnv) -> None:
        env = mesh
        await self.ensure_running(env)
        ips_now = await self.converge(env, replicas=2)
        ep = await env.json("get", "endpoints", "web")
        (subset,) = ep["subsets"]
        assert subset["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}], "the named target port"
        assert ep["metadata"]["annotations"][TRIGGER_TIME]
        assert {a["targetRef"]["name"] for a in subset["addresses"]} == {
            p["metadata"]["name"] for p in await self.pods(env) if p["status"].get("podIP") in ips_now}
        slices = (await env.json("get", "endpointslices", "-l", "kubernetes.io/service-name=web"))["items"]
        assert len(slices) == 1 and slices[0]["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]
        svc = await env.json("get", "service", "web")
        assert slices[0]["metadata"]["ownerReferences"][0]["uid"] == svc["metadata"]["uid"]
        assert svc["spec"]["clusterIP"].startswith("10.") and svc["spec"]["clusterIP"] != "10.96.0.1"

    async def test_they_follow_scale_up_and_down(self, mesh: MeshEnv) -> None:
        env = mesh
        await self.ensure_running(env)
        await env.run("scale", "deployment/web", "--replicas=5")
        await self.converge(env, replicas=5)
        await env.run("scale", "deployment/web", "--replicas=3")
        await self.converge(env, replicas=3)

    async def test_kubectl_prints_endpoints_and_slices(self, mesh: MeshEnv) -> None:
        env = mesh
        await self.ensure_running(env)
        want = await self.converge(env, replicas=len(running_ready_ips(await self.pods(env))) or 2)
        out = await env.run("get", "endpoints,endpointslices")
        lines = out.splitlines()
        ep_line = next(line for line in lines if line.startswith("endpoints/web "))
        assert all(f"{ip}:8080" in ep_line for ip in want[:3]), out
        slice_line = next(line for line in lines if line.startswith("endpointslice.discovery.k8s.io/web-"))
        assert slice_line.split()[1:3] == ["IPv4", "8080"], out
        kube = next(line for line in lines if line.startswith("endpoints/kubernetes "))
        assert "127.0.0.1:" in kube, out  # the apiserver's own address, from the apiserver itself

    async def test_a_powered_off_node_makes_its_pods_not_ready(self, mesh: MeshEnv) -> None:
        env = mesh
        await self.ensure_running(env)
        await env.run("scale", "deployment/web", "--replicas=4")
        await self.converge(env, replicas=4)
        pods = await self.pods(env)
        by_node: dict[str, list[str]] = {}
        for p in pods:
            by_node.setdefault(p["spec"]["nodeName"], []).append(p["status"]["podIP"])
        victim = min(by_node, key=lambda n: (len(by_node[n]), n))  # the others' pods stay ready
        lost = sorted(by_node[victim])
        kept = sorted(ip for n, node_ips in by_node.items() if n != victim for ip in node_ips)
        chaos: Chaos = env.mesh.endpoint.chaos()
        try:
            async with chaos.power_off(victim):

                async def moved() -> tuple[list[str], list[str], list[str], list[str]] | None:
                    got = await self.state(env)
                    return got if got[1] == lost and got[3] == lost else None

                ready, _, s_ready, _ = await env.until(
                    moved, within=GRACE + 5 + SLACK, what=f"{victim}'s pods not ready")
                assert ready == s_ready == kept, "the other node's pods stay ready"
                slices = (await env.client.list(ENDPOINTSLICES, namespace="default",
                                                label_selector="kubernetes.io/service-name=web"))["items"]
                conds = {e["addresses"][0]: e["conditions"] for s in slices for e in s["endpoints"] or []}
                assert all(conds[ip] == {"ready": False, "serving": False, "terminating": False} for ip in lost)
        finally:
            await chaos.close()

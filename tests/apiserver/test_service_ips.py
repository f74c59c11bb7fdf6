"""Service cluster IPs, node ports and `default/kubernetes` against a real apiserver process.

Over HTTP (restkit) and with real kubectl (the oldest and newest installed, `edge_kubectl_version`):

* allocation from 10.96.0.0/12 with upstream's defaults (`ipFamilies`, `ipFamilyPolicy`,
  `internalTrafficPolicy`, `sessionAffinity`, port protocol and target port), seeded runs repeat;
* requested IPs (taken: `provided IP is already allocated`; outside the range), headless
  (with and without a selector) and ExternalName services;
* node ports (allocated in 30000-32767, requested, taken, out of range, shared by ports of one
  number, none for `allocateLoadBalancerNodePorts: false`, forbidden on ClusterIP);
* updates: the primary cluster IP may not change, PUTs without allocated values keep them, a
  switch to ExternalName releases the IP and back allocates one;
* release on delete (the IP and the node port can be asked for again) and the allocation rebuilt
  after a restart with `--data-dir` (no double allocation);
* `default/kubernetes` (`kubectl get svc kubernetes`), its Endpoints and EndpointSlice pointing at
  the apiserver, recreated when deleted and reconciled to a new port after a restart;
* `kubectl expose` (JSON-speaking kubectl 1.27) and `kubectl apply -f` of YAML on every edge
  version (kubectl 1.32+ send protobuf bodies for `create`/`expose`).
"""

from __future__ import annotations

import ipaddress
import json
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from restkit import Json, Rest

from kubemesh.apiserver.serviceips import Band, IPRange, PortRange, advertised_address
from kubemesh.apiserver.settings import ServerSettings

if TYPE_CHECKING:  # conftest is never imported at run time (see tests/conftest.py)
    from conftest import ApiServer, RunKubectl, StartApiServer

SVCS = "/api/v1/namespaces/default/services"
CIDR = ipaddress.ip_network("10.96.0.0/12")
JSON_KUBECTL = "1.27"
"""A kubectl that sends JSON bodies for `create` and `expose` (1.32+ send protobuf)."""


def service(name: str, **spec: Any) -> Json:
    body: Json = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
                  "spec": {"selector": {"app": name}, "ports": [{"name": "http", "port": 80}]}}
    for key, value in spec.items():
        if value is None:
            body["spec"].pop(key, None)
        else:
            body["spec"][key] = value
    return body


async def create(rest: Rest, name: str, **spec: Any) -> Json:
    return await rest.ok("POST", SVCS, service(name, **spec))


async def refused(rest: Rest, body: Json, *, method: str = "POST", path: str = SVCS, **kw: Any) -> str:
    """The 422 message of a write that must fail."""
    status, doc = await rest.call(method, path, body, **kw)
    assert status == 422, (status, doc)
    assert doc["reason"] == "Invalid" and doc["details"]["kind"] == "Service"
    return str(doc["message"])


def in_range(ip: str) -> bool:
    return ipaddress.ip_address(ip) in CIDR


# ------------------------------------------------------------------------------ cluster IPs


async def test_a_service_gets_a_cluster_ip_and_upstream_defaults(rest: Rest) -> None:
    svc = await create(rest, "web", ports=[{"port": 80}, {"name": "dns", "port": 53, "protocol": "UDP",
                                                          "targetPort": "dns"}])
    spec = svc["spec"]
    assert in_range(spec["clusterIP"]) and spec["clusterIP"] != "10.96.0.1"
    assert spec["clusterIPs"] == [spec["clusterIP"]]
    assert (spec["type"], spec["ipFamilies"], spec["ipFamilyPolicy"], spec["internalTrafficPolicy"],
            spec["sessionAffinity"]) == ("ClusterIP", ["IPv4"], "SingleStack", "Cluster", "None")
    assert spec["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 80},
                             {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": "dns"}]
    assert "nodePort" not in spec["ports"][0] and "externalTrafficPolicy" not in spec
    # KEP-3070: dynamic allocation prefers the upper band (the lowest 256 addresses stay for requests).
    assert int(ipaddress.ip_address(spec["clusterIP"])) - int(CIDR.network_address) > 256
    again = await rest.ok("GET", f"{SVCS}/web")
    assert again["spec"] == spec
    others = {(await create(rest, f"web-{i}"))["spec"]["clusterIP"] for i in range(20)}
    assert len(others) == 20 and spec["clusterIP"] not in others


async def test_seeded_servers_allocate_the_same_ips(start_apiserver: StartApiServer) -> None:
    seen: list[list[str]] = []
    for _ in range(2):
        server = await start_apiserver(seed=42)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
            rest = Rest(session, server)
            seen.append([(await create(rest, f"s{i}", type="NodePort"))["spec"]["clusterIP"] for i in range(3)])
        await server.stop()
    assert seen[0] == seen[1]


async def test_requested_ips_are_checked(rest: Rest) -> None:
    msg = await refused(rest, service("taken", clusterIP="10.96.0.1"))
    assert msg == ('Service "taken" is invalid: spec.clusterIPs: Invalid value: ["10.96.0.1"]: '
                   "failed to allocate IP 10.96.0.1: provided IP is already allocated")
    msg = await refused(rest, service("outside", clusterIP="192.168.0.10"))
    assert msg == ('Service "outside" is invalid: spec.clusterIPs: Invalid value: ["192.168.0.10"]: failed to '
                   "allocate IP 192.168.0.10: the provided IP (192.168.0.10) is not in the valid range. "
                   "The range of valid IPs is 10.96.0.0/12")
    assert "must be a valid IP address" in await refused(rest, service("bad", clusterIP="10.96.0.300"))
    # As on a kubeadm cluster, kube-dns holds the range's tenth address.
    assert "provided IP is already allocated" in await refused(rest, service("dns", clusterIP="10.96.0.10"))
    mine = await create(rest, "mine", clusterIP="10.96.0.20")
    assert mine["spec"]["clusterIPs"] == ["10.96.0.20"]
    assert "provided IP is already allocated" in await refused(rest, service("again", clusterIPs=["10.96.0.20"],
                                                                              clusterIP="10.96.0.20"))
    # Released on delete: the address can be asked for again at once.
    await rest.ok("DELETE", f"{SVCS}/mine")
    assert (await create(rest, "again", clusterIP="10.96.0.20"))["spec"]["clusterIP"] == "10.96.0.20"
    # A refused create leaks nothing: the address it asked for stays free.
    assert "is invalid" in await refused(rest, service("leak", clusterIP="10.96.0.11", type="Nope"))
    assert (await create(rest, "noleak", clusterIP="10.96.0.11"))["spec"]["clusterIP"] == "10.96.0.11"
    dry = await rest.ok("POST", SVCS, service("dry", clusterIP="10.96.0.12"), params={"dryRun": "All"})
    assert dry["spec"]["clusterIP"] == "10.96.0.12"
    assert (await create(rest, "wet", clusterIP="10.96.0.12"))["spec"]["clusterIP"] == "10.96.0.12"


async def test_headless_and_external_name_services_get_no_ip(rest: Rest) -> None:
    headless = (await create(rest, "db", clusterIP="None"))["spec"]
    assert (headless["clusterIP"], headless["clusterIPs"], headless["ipFamilies"], headless["ipFamilyPolicy"]) == (
        "None", ["None"], ["IPv4"], "SingleStack")
    bare = (await create(rest, "bare", clusterIP="None", selector=None))["spec"]
    assert (bare["ipFamilies"], bare["ipFamilyPolicy"]) == (["IPv4", "IPv6"], "RequireDualStack")  # as upstream
    ext = (await create(rest, "ext", type="ExternalName", externalName="db.example.com", selector=None,
                        ports=None))["spec"]
    assert ext == {"type": "ExternalName", "externalName": "db.example.com", "sessionAffinity": "None"}
    assert "spec.externalName: Required value" in await refused(rest, service("noname", type="ExternalName"))
    assert "spec.clusterIPs: Forbidden: may not be set for ExternalName services" in await refused(
        rest, service("ipname", type="ExternalName", externalName="x.example.com", clusterIP="10.96.0.20"))


async def test_dual_stack_and_unknown_types_are_refused(rest: Rest) -> None:
    assert await refused(rest, service("dual", ipFamilyPolicy="RequireDualStack")) == (
        'Service "dual" is invalid: spec.ipFamilyPolicy: Invalid value: "RequireDualStack": '
        "this cluster is not configured for dual-stack services")
    assert 'spec.ipFamilies[0]: Invalid value: "IPv6": not configured on this cluster' in await refused(
        rest, service("six", ipFamilies=["IPv6"]))
    assert await refused(rest, service("odd", type="Magic")) == (
        'Service "odd" is invalid: spec.type: Unsupported value: "Magic": supported values: "ClusterIP", '
        '"ExternalName", "LoadBalancer", "NodePort"')
    prefer = (await create(rest, "prefer", ipFamilyPolicy="PreferDualStack"))["spec"]
    assert prefer["ipFamilies"] == ["IPv4"] and len(prefer["clusterIPs"]) == 1


# ------------------------------------------------------------------------------- node ports


async def test_node_ports_are_allocated_checked_and_released(rest: Rest) -> None:
    svc = (await create(rest, "np", type="NodePort", ports=[
        {"name": "http", "port": 80}, {"name": "dns-tcp", "port": 53}, {"name": "dns-udp", "port": 53,
                                                                         "protocol": "UDP"}]))["spec"]
    http, dns_tcp, dns_udp = (p["nodePort"] for p in svc["ports"])
    assert all(30000 <= n <= 32767 for n in (http, dns_tcp)) and http != dns_tcp
    assert dns_udp == dns_tcp, "ports of one number share their node port"
    assert svc["externalTrafficPolicy"] == "Cluster"
    fixed = (await create(rest, "fixed", type="NodePort", ports=[{"port": 80, "nodePort": 30080}]))["spec"]
    assert fixed["ports"][0]["nodePort"] == 30080
    assert await refused(rest, service("dup", type="NodePort", ports=[{"port": 80, "nodePort": 30080}])) == (
        'Service "dup" is invalid: spec.ports[0].nodePort: Invalid value: 30080: provided port is already allocated')
    assert await refused(rest, service("low", type="NodePort", ports=[{"port": 80, "nodePort": 8080}])) == (
        'Service "low" is invalid: spec.ports[0].nodePort: Invalid value: 8080: provided port is not in the valid '
        "range. The range of valid ports is 30000-32767")
    assert "spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'" in await refused(
        rest, service("cip", ports=[{"port": 80, "nodePort": 30081}]))
    lb = (await create(rest, "lb", type="LoadBalancer"))["spec"]
    assert lb["allocateLoadBalancerNodePorts"] is True and 30000 <= lb["ports"][0]["nodePort"] <= 32767
    quiet = (await create(rest, "quiet", type="LoadBalancer", allocateLoadBalancerNodePorts=False))["spec"]
    assert "nodePort" not in quiet["ports"][0]
    # Switching to ClusterIP drops the node port (the client left it as it was) and frees it.
    patched = await rest.ok("PATCH", f"{SVCS}/fixed", {"spec": {"type": "ClusterIP"}},
                            ctype="application/merge-patch+json")
    assert "nodePort" not in patched["spec"]["ports"][0] and "externalTrafficPolicy" not in patched["spec"]
    assert patched["spec"]["clusterIP"] == fixed["clusterIP"]
    await create(rest, "reuse", type="NodePort", ports=[{"port": 80, "nodePort": 30080}])
    await rest.ok("DELETE", f"{SVCS}/np")
    await create(rest, "np2", type="NodePort", ports=[{"port": 80, "nodePort": http}])


# ---------------------------------------------------------------------------------- updates


async def test_the_cluster_ip_may_not_change_but_external_name_switches_release_it(rest: Rest) -> None:
    svc = await create(rest, "web", type="NodePort")
    ip, node_port = svc["spec"]["clusterIP"], svc["spec"]["ports"][0]["nodePort"]
    msg = await refused(rest, {"spec": {"clusterIP": "10.96.0.50"}}, method="PATCH", path=f"{SVCS}/web",
                        ctype="application/merge-patch+json")
    assert msg == 'Service "web" is invalid: spec.clusterIPs[0]: Invalid value: ["10.96.0.50"]: may not change once set'
    assert "may not change once set" in await refused(rest, {"spec": {"clusterIP": "None", "clusterIPs": ["None"]}},
                                                      method="PATCH", path=f"{SVCS}/web",
                                                      ctype="application/merge-patch+json")
    # A PUT of the manifest as written (no clusterIP, no nodePort) keeps what was allocated: a no-op.
    body = service("web", type="NodePort")
    body["metadata"]["resourceVersion"] = svc["metadata"]["resourceVersion"]
    put = await rest.ok("PUT", f"{SVCS}/web", body)
    assert put["spec"] == svc["spec"] and put["metadata"]["resourceVersion"] == svc["metadata"]["resourceVersion"]
    # To ExternalName: the IP, families and node port go (and are free again) ...
    ext = await rest.ok("PATCH", f"{SVCS}/web", {"spec": {"type": "ExternalName", "externalName": "web.example.com"}},
                        ctype="application/merge-patch+json")
    spec = ext["spec"]
    assert not {"clusterIP", "clusterIPs", "ipFamilies", "ipFamilyPolicy", "internalTrafficPolicy"} & set(spec)
    assert "nodePort" not in spec["ports"][0]
    assert (await create(rest, "taker", clusterIP=ip))["spec"]["clusterIP"] == ip
    await create(rest, "porter", type="NodePort", ports=[{"port": 80, "nodePort": node_port}])
    # ... and back: a fresh IP.
    back = await rest.ok("PATCH", f"{SVCS}/web", {"spec": {"type": "ClusterIP", "externalName": None}},
                         ctype="application/merge-patch+json")
    assert in_range(back["spec"]["clusterIP"]) and back["spec"]["clusterIP"] != ip
    assert back["spec"]["ipFamilies"] == ["IPv4"]


# ------------------------------------------------------------------------------- restarts


async def test_allocations_survive_a_restart_without_double_allocation(start_apiserver: StartApiServer,
                                                                       tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = await start_apiserver(data_dir=data, seed=3)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        rest = Rest(session, first)
        before = {(await create(rest, f"s{i}", type="NodePort"))["spec"]["clusterIP"] for i in range(10)}
        kept = await create(rest, "kept", clusterIP="10.96.0.30", type="NodePort",
                            ports=[{"port": 80, "nodePort": 30090}])
        kube_port = (await rest.ok("GET", "/api/v1/namespaces/default/endpoints/kubernetes"))["subsets"][0]["ports"]
        assert kube_port == [{"name": "https", "port": first.port, "protocol": "TCP"}]
    await first.stop()
    # The same seed again: the allocator's draws repeat, and must step over what is stored.
    second = await start_apiserver(data_dir=data, seed=3)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        rest = Rest(session, second)
        assert (await rest.ok("GET", f"{SVCS}/kept"))["spec"] == kept["spec"]
        assert "provided IP is already allocated" in await refused(rest, service("x", clusterIP="10.96.0.30"))
        assert "provided port is already allocated" in await refused(
            rest, service("y", type="NodePort", ports=[{"port": 80, "nodePort": 30090}]))
        after = {(await create(rest, f"t{i}", type="NodePort"))["spec"]["clusterIP"] for i in range(10)}
        assert not before & after and len(after) == 10
        listed = (await rest.ok("GET", SVCS))["items"]
        kubes = [s for s in listed if s["metadata"]["name"] == "kubernetes"]
        assert len(kubes) == 1, "not created twice"
        ports = [p["nodePort"] for s in listed for p in s["spec"].get("ports") or [] if p.get("nodePort")]
        assert len(ports) == len(set(ports))
        # The apiserver's port changed with the restart: the kubernetes Service and endpoints follow.
        assert kubes[0]["spec"]["ports"][0]["targetPort"] == second.port
        ep = await rest.ok("GET", "/api/v1/namespaces/default/endpoints/kubernetes")
        assert ep["subsets"][0]["ports"][0]["port"] == second.port
        eps = await rest.ok("GET", "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/kubernetes")
        assert eps["ports"][0]["port"] == second.port


# --------------------------------------------------------------------------- kubernetes


async def test_the_kubernetes_service_and_its_endpoints(rest: Rest, apiserver: ApiServer) -> None:
    svc = await rest.ok("GET", f"{SVCS}/kubernetes")
    assert svc["metadata"]["labels"] == {"component": "apiserver", "provider": "kubernetes"}
    assert svc["spec"]["clusterIP"] == "10.96.0.1" and svc["spec"]["clusterIPs"] == ["10.96.0.1"]
    assert svc["spec"]["ports"] == [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": apiserver.port}]
    assert "selector" not in svc["spec"]
    ep = await rest.ok("GET", "/api/v1/namespaces/default/endpoints/kubernetes")
    assert ep["metadata"]["labels"] == {"endpointslice.kubernetes.io/skip-mirror": "true"}
    assert ep["subsets"] == [{"addresses": [{"ip": "127.0.0.1"}],
                              "ports": [{"name": "https", "port": apiserver.port, "protocol": "TCP"}]}]
    slices = "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices"
    eps = await rest.ok("GET", f"{slices}/kubernetes")
    assert eps["metadata"]["labels"] == {"kubernetes.io/service-name": "kubernetes"}
    assert (eps["addressType"], eps["endpoints"], eps["ports"]) == (
        "IPv4", [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
        [{"name": "https", "port": apiserver.port, "protocol": "TCP"}])
    # Deleted: back at once, with a new uid (upstream's controllers recreate them).
    for path in (f"{SVCS}/kubernetes", "/api/v1/namespaces/default/endpoints/kubernetes", f"{slices}/kubernetes"):
        old = await rest.ok("GET", path)
        await rest.ok("DELETE", path)
        new = await rest.ok("GET", path)
        assert new["metadata"]["uid"] != old["metadata"]["uid"]
    assert (await rest.ok("GET", f"{SVCS}/kubernetes"))["spec"]["clusterIP"] == "10.96.0.1"
    # Changed by a client: put right.
    broken = await rest.ok("PATCH", "/api/v1/namespaces/default/endpoints/kubernetes",
                           {"subsets": [{"addresses": [{"ip": "10.9.9.9"}], "ports": [{"port": 1}]}]},
                           ctype="application/merge-patch+json")
    assert broken["subsets"][0]["addresses"] == [{"ip": "10.9.9.9"}]  # the client's write did happen
    assert (await rest.ok("GET", "/api/v1/namespaces/default/endpoints/kubernetes"))["subsets"] == ep["subsets"]
    patched = await rest.ok("PATCH", f"{SVCS}/kubernetes", {"metadata": {"labels": {"extra": "yes"}},
                                                          "spec": {"ports": [{"port": 443, "targetPort": 1}]}},
                            ctype="application/merge-patch+json")
    assert patched["metadata"]["labels"]["extra"] == "yes"
    svc = await rest.ok("GET", f"{SVCS}/kubernetes")
    assert svc["spec"]["ports"][0]["targetPort"] == apiserver.port and svc["metadata"]["labels"]["extra"] == "yes"


@pytest.mark.kubectl
async def test_kubectl_get_svc_kubernetes(edge_kubectl_version: str, kubectl: RunKubectl,
                                          apiserver: ApiServer) -> None:
    out = kubectl(edge_kubectl_version, "get", "svc", "kubernetes", "-n", "default", server=apiserver.url)
    assert out.returncode == 0, out.stderr
    header, row = out.stdout.splitlines()
    assert header.split() == ["NAME", "TYPE", "CLUSTER-IP", "EXTERNAL-IP", "PORT(S)", "AGE"]
    assert row.split()[:5] == ["kubernetes", "ClusterIP", "10.96.0.1", "<none>", "443/TCP"]
    out = kubectl(edge_kubectl_version, "get", "endpoints,endpointslices", "kubernetes", "-n", "default",
                  server=apiserver.url)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split()[1:] for line in out.stdout.splitlines() if line.strip()}
    assert rows["endpoints/kubernetes"][0] == f"127.0.0.1:{apiserver.port}", out.stdout
    assert rows["endpointslice.discovery.k8s.io/kubernetes"][:3] == ["IPv4", str(apiserver.port), "127.0.0.1"]


@pytest.mark.kubectl
async def test_kubectl_apply_and_expose_get_cluster_ips(edge_kubectl_version: str, kubectl: RunKubectl,
                                                        apiserver: ApiServer) -> None:
    v = edge_kubectl_version
    manifest = ("apiVersion: v1\nkind: Service\nmetadata:\n  name: applied\nspec:\n  type: NodePort\n"
                "  selector:\n    app: web\n  ports:\n  - name: http\n    port: 80\n    targetPort: http\n")
    out = kubectl(v, "apply", "-f", "-", server=apiserver.url, input=manifest)
    assert out.returncode == 0, out.stderr
    # Applied again (client-side apply patches without the allocated values): nothing changes.
    first = json.loads(kubectl(v, "get", "svc", "applied", "-o", "json", server=apiserver.url).stdout)
    out = kubectl(v, "apply", "-f", "-", server=apiserver.url, input=manifest)
    assert out.returncode == 0 and "unchanged" in out.stdout, (out.stdout, out.stderr)
    again = json.loads(kubectl(v, "get", "svc", "applied", "-o", "json", server=apiserver.url).stdout)
    assert again["spec"] == first["spec"] and in_range(first["spec"]["clusterIP"])
    row = kubectl(v, "get", "svc", "applied", "--no-headers", server=apiserver.url).stdout.split()
    assert row[1:4] == ["NodePort", first["spec"]["clusterIP"], "<none>"]
    assert row[4] == f"80:{first['spec']['ports'][0]['nodePort']}/TCP"
    # kubectl expose (a JSON-speaking kubectl: 1.32+ send protobuf bodies for create/expose).
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
                  "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                           "template": {"metadata": {"labels": {"app": "web"}},
                                        "spec": {"containers": [{"name": "main", "image": "nginx"}]}}}}
    out = kubectl(v, "apply", "-f", "-", server=apiserver.url, input=json.dumps(deployment))
    assert out.returncode == 0, out.stderr
    if v != JSON_KUBECTL:
        return
    out = kubectl(v, "expose", "deployment", "web", "--port=80", "--target-port=8080", "--name=exposed",
                  server=apiserver.url)
    assert out.returncode == 0, out.stderr
    exposed = json.loads(kubectl(v, "get", "svc", "exposed", "-o", "json", server=apiserver.url).stdout)["spec"]
    assert in_range(exposed["clusterIP"]) and exposed["selector"] == {"app": "web"}
    assert exposed["ports"] == [{"port": 80, "protocol": "TCP", "targetPort": 8080}]


# ------------------------------------------------------------------------------ the ranges


def test_ranges_and_bands_as_upstream() -> None:
    ips = IPRange.parse("10.96.0.0/12")
    assert (ips.first_address, ips.band.size, ips.band.static) == ("10.96.0.1", 2**20 - 2, 256)
    small = IPRange.parse("10.0.0.0/28")
    assert (small.band.size, small.band.static) == (14, 0)
    assert PortRange.parse("30000-32767").band == PortRange.parse("30000+2767").band
    assert PortRange.parse("30000-32767").band.static == 86  # min(max(16, 2768/32), 128)
    for bad in ("10.96.0.1/12", "nonsense"):
        with pytest.raises(ValueError):
            IPRange.parse(bad)
    with pytest.raises(ValueError):
        PortRange.parse("32767-30000")
    # The upper band first, from a random start, wrapping; the lower band once it is full.
    band = Band(first=100, size=8, static=4)
    taken = {104, 105, 106}
    assert band.pick(taken.__contains__, random.Random(1)) == 107
    assert band.pick({104, 105, 106, 107}.__contains__, random.Random(1)) in (100, 101, 102, 103)
    assert band.pick(set(range(100, 108)).__contains__, random.Random(1)) is None


def test_advertised_address() -> None:
    assert advertised_address(ServerSettings(host="0.0.0.0")) == "127.0.0.1"
    assert advertised_address(ServerSettings(host="localhost")) == "127.0.0.1"
    assert advertised_address(ServerSettings(host="10.1.2.3")) == "10.1.2.3"
    assert advertised_address(ServerSettings(host="0.0.0.0", advertise_address="192.168.1.5")) == "192.168.1.5"

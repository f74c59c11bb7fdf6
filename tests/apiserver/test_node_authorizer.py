"""The node authorizer and NodeRestriction: a kubelet touches only its own node, lease and pods.

One HTTPS apiserver with an admin token; requests act as nodes by impersonation
(`Impersonate-User: system:node:<n>`, `Impersonate-Group: system:nodes`, kubectl's `--as` and
`--as-group`), which reaches the same decisions as a kubelet's own requests. Pods are bound to
nodes by `spec.nodeName` at creation; the nodes need not exist.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
import pytest

if TYPE_CHECKING:
    from conftest import ApiServer, LaunchApiServer, RunKubectl

ADMIN_TOKEN = "node-authz-admin-token"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"


@pytest.fixture(scope="module")
def server(apiserver_launcher: LaunchApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    s = apiserver_launcher(tmp_path_factory.mktemp("nodeauthz"), token=ADMIN_TOKEN, tls=True)
    yield s
    s.terminate()


@dataclass
class Caller:
    """Requests with the admin token, as the admin or as a node."""

    session: aiohttp.ClientSession
    base: str
    node: str | None = None

    def as_node(self, node: str) -> Caller:
        return Caller(self.session, self.base, node)

    async def call(self, method: str, path: str, body: Any = None, *,
                   ctype: str = "application/json") -> tuple[int, Any]:
        h = {"Authorization": f"Bearer {ADMIN_TOKEN}", "Content-Type": ctype}
        if self.node is not None:
            h["Impersonate-User"] = f"system:node:{self.node}"
            h["Impersonate-Group"] = "system:nodes"
        async with self.session.request(method, self.base + path, headers=h,
                                        data=orjson.dumps(body) if body is not None else None) as resp:
            return resp.status, await resp.json(content_type=None)

    async def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        status, doc = await self.call(method, path, body, **kw)
        assert status in (200, 201), (method, path, status, doc)
        return doc

    async def refused(self, method: str, path: str, body: Any = None, **kw: Any) -> str:
        status, doc = await self.call(method, path, body, **kw)
        assert (status, doc.get("reason")) == (403, "Forbidden"), (method, path, status, doc)
        message: str = doc["message"]
        return message


@pytest.fixture
async def admin(server: ApiServer) -> AsyncIterator[Caller]:
    assert server.ca is not None
    ctx = ssl.create_default_context(cafile=str(server.ca))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx),
                                     timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield Caller(session, server.url)


def _pod(name: str, node: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i", **spec.pop("container", {})}],
                     **spec}}


async def test_a_node_modifies_only_its_own_node_and_not_its_taints(admin: Caller) -> None:
    n1 = admin.as_node("na1")
    await n1.ok("POST", "/api/v1/nodes", {"metadata": {"name": "na1"},
                                          "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}})
    assert await n1.refused("POST", "/api/v1/nodes", {"metadata": {"name": "na2"}}) == \
        'nodes "na2" is forbidden: node "na1" is not allowed to modify node "na2"'
    await admin.ok("POST", "/api/v1/nodes", {"metadata": {"name": "na2"}})
    assert await n1.refused("PATCH", "/api/v1/nodes/na2/status", {"status": {"phase": "Running"}},
                            ctype="application/merge-patch+json") == \
        'nodes "na2" is forbidden: node "na1" is not allowed to modify node "na2"'
    await n1.ok("PATCH", "/api/v1/nodes/na1/status", {"status": {"conditions": [
        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}]}},
        ctype="application/strategic-merge-patch+json")
    assert await n1.refused("PATCH", "/api/v1/nodes/na1", {"spec": {"taints": []}},
                            ctype="application/merge-patch+json") == \
        'nodes "na1" is forbidden: node "na1" is not allowed to modify taints'
    # reading every node stays open (the node rules), deleting is not in them
    assert len((await n1.ok("GET", "/api/v1/nodes"))["items"]) >= 2
    assert await n1.refused("DELETE", "/api/v1/nodes/na2") == (
        'nodes "na2" is forbidden: User "system:node:na1" cannot delete resource "nodes" in API group "" at the '
        "cluster scope")


async def test_a_node_renews_only_its_own_lease(admin: Caller) -> None:
    n1 = admin.as_node("nb1")
    lease = {"metadata": {"name": "nb1"}, "spec": {"holderIdentity": "nb1", "leaseDurationSeconds": 40}}
    created = await n1.ok("POST", LEASES, lease)
    await n1.ok("PUT", f"{LEASES}/nb1", {**lease, "metadata": created["metadata"]})
    assert await n1.refused("POST", LEASES, {**lease, "metadata": {"name": "nb2"}}) == \
        'leases.coordination.k8s.io "nb2" is forbidden: can only access node lease with the same name as the ' \
        "requesting node"
    await admin.ok("POST", LEASES, {**lease, "metadata": {"name": "nb2"}})
    assert await n1.refused("GET", f"{LEASES}/nb2") == (
        'leases.coordination.k8s.io "nb2" is forbidden: User "system:node:nb1" cannot get resource "leases" in '
        'API group "coordination.k8s.io" in the namespace "kube-node-lease": can only access node lease with the '
        "same name as the requesting node")
    assert await n1.refused("GET", LEASES) == (
        'leases.coordination.k8s.io is forbidden: User "system:node:nb1" cannot list resource "leases" in API '
        'group "coordination.k8s.io" in the namespace "kube-node-lease": can only get, create, update, patch, or '
        "delete a node lease")
    assert (await n1.refused("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/nb1")).endswith(
        'can only access leases in the "kube-node-lease" system namespace')


async def test_a_node_reads_only_what_its_pods_refer_to(admin: Caller) -> None:
    ns = "nodeauthz-secrets"
    await admin.ok("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    for name in ("s1", "s2", "s3"):
        await admin.ok("POST", f"/api/v1/namespaces/{ns}/secrets", {"metadata": {"name": name}})
    await admin.ok("POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "c1"}})
    await admin.ok("POST", f"/api/v1/namespaces/{ns}/pods", _pod(
        "p1", "nc1", container={"env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "s1", "key": "k"}}}],
                                "envFrom": [{"configMapRef": {"name": "c1"}}]},
        volumes=[{"name": "v", "secret": {"secretName": "s3"}}]))
    n1, n2 = admin.as_node("nc1"), admin.as_node("nc2")
    await n1.ok("GET", f"/api/v1/namespaces/{ns}/secrets/s1")
    await n1.ok("GET", f"/api/v1/namespaces/{ns}/secrets/s3")
    await n1.ok("GET", f"/api/v1/namespaces/{ns}/configmaps/c1")
    assert await n1.refused("GET", f"/api/v1/namespaces/{ns}/secrets/s2") == (
        f'secrets "s2" is forbidden: User "system:node:nc1" cannot get resource "secrets" in API group "" in the '
        f"namespace \"{ns}\": no relationship found between node 'nc1' and this object")
    assert (await n2.refused("GET", f"/api/v1/namespaces/{ns}/secrets/s1")).endswith(
        "no relationship found between node 'nc2' and this object")
    # one object by name may be watched; the whole collection may not
    await n1.ok("GET", f"/api/v1/namespaces/{ns}/secrets?fieldSelector=metadata.name%3Ds1")
    assert (await n1.refused("GET", f"/api/v1/namespaces/{ns}/secrets")).endswith("No Object name found")
    # the relationship follows the pods as they are: p1 gone, s1 is closed to nc1 again
    await admin.ok("DELETE", f"/api/v1/namespaces/{ns}/pods/p1?gracePeriodSeconds=0")
    await n1.refused("GET", f"/api/v1/namespaces/{ns}/secrets/s1")


async def test_kubectl_can_i_as_a_node(admin: Caller, server: ApiServer, kubectl: RunKubectl,
                                       edge_kubectl_version: str) -> None:
    # kubectl asks the same authorizer (a SelfSubjectAccessReview as the impersonated node)
    ns = f"nodeauthz-kubectl-{edge_kubectl_version.replace('.', '-')}"
    await admin.ok("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    for name in ("s1", "s2"):
        await admin.ok("POST", f"/api/v1/namespaces/{ns}/secrets", {"metadata": {"name": name}})
    await admin.ok("POST", f"/api/v1/namespaces/{ns}/pods", _pod(
        "p", "ne1", volumes=[{"name": "v", "secret": {"secretName": "s2"}}]))
    for what, answer in (("secret/s2", "yes"),
                         ("secret/s1", "no - no relationship found between node 'ne1' and this object"),
                         ("leases/ne1", "yes"),
                         ("leases/ne2", "no - can only access node lease with the same name as the requesting node")):
        where = "kube-node-lease" if what.startswith("leases") else ns
        done = await asyncio.to_thread(kubectl, edge_kubectl_version, "auth", "can-i", "get", what, "-n", where,
                                       "--as=system:node:ne1", "--as-group=system:nodes", server=server.url,
                                       token=ADMIN_TOKEN, ca=server.ca)
        assert done.stdout.strip() == answer, (what, done.stdout, done.stderr)


async def test_a_node_writes_only_the_pods_bound_to_it(admin: Caller) -> None:
    ns = "nodeauthz-pods"
    await admin.ok("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    await admin.ok("POST", f"/api/v1/namespaces/{ns}/pods", _pod("mine", "nd1"))
    await admin.ok("POST", f"/api/v1/namespaces/{ns}/pods", _pod("theirs", "nd2"))
    n1 = admin.as_node("nd1")
    status = {"status": {"phase": "Running"}}
    await n1.ok("PATCH", f"/api/v1/namespaces/{ns}/pods/mine/status", status,
                ctype="application/strategic-merge-patch+json")
    assert await n1.refused("PATCH", f"/api/v1/namespaces/{ns}/pods/theirs/status", status,
                            ctype="application/strategic-merge-patch+json") == \
        'pods "theirs" is forbidden: node "nd1" can only update pod status for pods with spec.nodeName set to itself'
    assert await n1.refused("DELETE", f"/api/v1/namespaces/{ns}/pods/theirs") == \
        'pods "theirs" is forbidden: node "nd1" can only delete pods with spec.nodeName set to itself'
    assert await n1.refused("POST", f"/api/v1/namespaces/{ns}/pods/theirs/eviction", {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "theirs", "namespace": ns}}) == \
        'pods "theirs" is forbidden: node "nd1" can only evict pods with spec.nodeName set to itself'
    assert await n1.refused("POST", f"/api/v1/namespaces/{ns}/pods", _pod("plain", "nd1")) == \
        'pods "plain" is forbidden: pod does not have "kubernetes.io/config.mirror" annotation, node "nd1" can ' \
        "only create mirror pods"
    mirror = _pod("mirror", "nd1")
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "hash"}
    await n1.ok("POST", f"/api/v1/namespaces/{ns}/pods", mirror)
    await n1.ok("DELETE", f"/api/v1/namespaces/{ns}/pods/mine")


async def test_anonymous_requests_with_anonymous_auth(apiserver_launcher: LaunchApiServer,
                                                      tmp_path_factory: pytest.TempPathFactory) -> None:
    # --anonymous-auth (kube-apiserver's default): no token is system:anonymous, and RBAC decides;
    # a wrong token is still 401.
    s = apiserver_launcher(tmp_path_factory.mktemp("anon"), token=ADMIN_TOKEN, tls=True,
                           extra_args=("--anonymous-auth",))
    try:
        assert s.ca is not None
        ctx = ssl.create_default_context(cafile=str(s.ca))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx)) as session:
            async with session.get(f"{s.url}/version") as resp:
                assert resp.status == 200
            async with session.get(f"{s.url}/api") as resp:
                doc = await resp.json()
                assert (resp.status, doc["message"]) == (
                    403, 'forbidden: User "system:anonymous" cannot get path "/api"'), doc
            async with session.get(f"{s.url}/api/v1/namespaces/default/pods") as resp:
                doc = await resp.json()
                assert (resp.status, doc["message"]) == (
                    403, 'pods is forbidden: User "system:anonymous" cannot list resource "pods" in API group "" in '
                         'the namespace "default"'), doc
            async with session.get(f"{s.url}/api", headers={"Authorization": "Bearer wrong"}) as resp:
                assert resp.status == 401
    finally:
        s.terminate()

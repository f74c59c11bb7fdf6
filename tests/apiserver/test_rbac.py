"""RBAC as a cluster enforces it: ServiceAccount tokens, the authorizer, reviews, escalation, impersonation.

One HTTPS apiserver with an admin token serves the module (kubectl sends a token only over
TLS); each test works in its own namespace. kubectl runs at the oldest and the newest
installed version.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
import pytest

if TYPE_CHECKING:
    from conftest import ApiServer, LaunchApiServer, RunKubectl

ADMIN_TOKEN = "rbac-admin-token"


@pytest.fixture(scope="module")
def server(apiserver_launcher: LaunchApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    s = apiserver_launcher(tmp_path_factory.mktemp("rbac"), token=ADMIN_TOKEN, tls=True)
    yield s
    s.terminate()


@dataclass
class Caller:
    """Requests as one bearer token."""

    session: aiohttp.ClientSession
    base: str
    token: str

    async def call(self, method: str, path: str, body: Any = None,
                   headers: dict[str, str] | None = None) -> tuple[int, Any]:
        h = {"Authorization": f"Bearer {self.token}", "Content-Type": "application/json", **(headers or {})}
        async with self.session.request(method, self.base + path, headers=h,
                                        data=orjson.dumps(body) if body is not None else None) as resp:
            return resp.status, await resp.json(content_type=None)

    async def ok(self, method: str, path: str, body: Any = None) -> Any:
        status, doc = await self.call(method, path, body)
        assert status in (200, 201), (method, path, status, doc)
        return doc

    def as_token(self, token: str) -> Caller:
        return Caller(self.session, self.base, token)


@pytest.fixture
async def admin(server: ApiServer) -> AsyncIterator[Caller]:
    assert server.ca is not None
    ctx = ssl.create_default_context(cafile=str(server.ca))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ctx),
                                     timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield Caller(session, server.url, ADMIN_TOKEN)


_namespaces = iter(range(1, 1000))


async def namespace_with_sa(admin: Caller, sa: str = "robot") -> str:
    ns = f"rbac-{next(_namespaces)}"
    await admin.ok("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    await admin.ok("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": sa}})
    return ns


async def token_for(admin: Caller, ns: str, sa: str = "robot", **spec: Any) -> str:
    doc = await admin.ok("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token",
                         {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec})
    token: str = doc["status"]["token"]
    return token


async def grant(admin: Caller, ns: str, rules: list[dict[str, Any]], *, sa: str = "robot", name: str = "r") -> None:
    await admin.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
                   {"metadata": {"name": name}, "rules": rules})
    await admin.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
                   {"metadata": {"name": name},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
                    "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": ns}]})


async def test_service_account_token_is_its_identity_and_denials_read_as_upstream(admin: Caller) -> None:
    ns = await namespace_with_sa(admin)
    sa = admin.as_token(await token_for(admin, ns))
    who = await sa.ok("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                      {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
    info = who["status"]["userInfo"]
    assert info["username"] == f"system:serviceaccount:{ns}:robot"
    assert info["groups"] == ["system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated"]
    status, doc = await sa.call("GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases")
    assert status == 403
    assert doc["reason"] == "Forbidden"
    assert doc["message"] == (f'leases.coordination.k8s.io is forbidden: User "system:serviceaccount:{ns}:robot" '
                              f'cannot list resource "leases" in API group "coordination.k8s.io" in the '
                              f'namespace "{ns}"')
    assert doc["details"] == {"group": "coordination.k8s.io", "kind": "leases"}
    status, doc = await sa.call("GET", "/api/v1/nodes/n1")
    assert doc["message"] == (f'nodes "n1" is forbidden: User "system:serviceaccount:{ns}:robot" cannot get '
                              'resource "nodes" in API group "" at the cluster scope')
    # discovery stays open to every authenticated user (system:discovery)
    assert (await sa.call("GET", "/apis"))[0] == 200
    status, doc = await sa.call("GET", "/kubemesh/v1/history")
    assert (status, doc["message"]) == (403, f'forbidden: User "system:serviceaccount:{ns}:robot" cannot get '
                                              'path "/kubemesh/v1/history"')
    await grant(admin, ns, [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"]}])
    assert (await sa.call("GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"))[0] == 200
    assert (await sa.call("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases"))[0] == 403


async def test_tokens_die_with_their_service_account_and_pod(admin: Caller) -> None:
    ns = await namespace_with_sa(admin)
    token = await token_for(admin, ns)
    sa = admin.as_token(token)
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    assert (await sa.call("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", review))[0] == 201
    await admin.ok("DELETE", f"/api/v1/namespaces/{ns}/serviceaccounts/robot")
    await admin.ok("POST", f"/api/v1/namespaces/{ns}/serviceaccounts", {"metadata": {"name": "robot"}})
    status, doc = await sa.call("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", review)
    assert (status, doc["reason"]) == (401, "Unauthorized")  # same name, another uid
    assert (await admin.as_token(token[:-2] + "xx").call("GET", "/api"))[0] == 401  # bad signature
    # bound to a pod: dies with it
    pod = await admin.ok("POST", f"/api/v1/namespaces/{ns}/pods", {
        "metadata": {"name": "p"}, "spec": {"serviceAccountName": "robot", "containers": [{"name": "c",
                                                                                           "image": "i"}]}})
    bound = admin.as_token(await token_for(admin, ns, boundObjectRef={
        "kind": "Pod", "apiVersion": "v1", "name": "p", "uid": pod["metadata"]["uid"]}))
    who = await bound.ok("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", review)
    assert who["status"]["userInfo"]["extra"]["authentication.kubernetes.io/pod-name"] == ["p"]
    await admin.ok("DELETE", f"/api/v1/namespaces/{ns}/pods/p?gracePeriodSeconds=0")
    assert (await bound.call("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", review))[0] == 401
    status, doc = await admin.call("POST", f"/api/v1/namespaces/{ns}/serviceaccounts/robot/token",
                                   {"spec": {"expirationSeconds": 60}})
    assert status == 422 and "may not specify a duration less than 10 minutes" in doc["message"]


async def test_tokens_expire_on_the_cluster_clock(apiserver_launcher: LaunchApiServer, tmp_path: Path) -> None:
    # 1000 cluster seconds per wall second: a 10-minute token lives 0.6 s
    s = apiserver_launcher(tmp_path, token=ADMIN_TOKEN, clock_rate=1000)
    try:
        async with aiohttp.ClientSession() as session:
            admin = Caller(session, s.url, ADMIN_TOKEN)
            ns = await namespace_with_sa(admin)
            sa = admin.as_token(await token_for(admin, ns, expirationSeconds=600))
            first = await sa.call("GET", "/api")
            await asyncio.sleep(1.0)
            assert (first[0], (await sa.call("GET", "/api"))[0]) == (200, 401)
    finally:
        s.terminate()


async def test_escalation_needs_the_permissions_or_bind(admin: Caller) -> None:
    ns = await namespace_with_sa(admin)
    sa = admin.as_token(await token_for(admin, ns))
    await grant(admin, ns, [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings", "roles"],
                             "verbs": ["create"]}])
    await admin.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", {
        "metadata": {"name": "secrets"}, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]})
    binding = {"metadata": {"name": "b"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "secrets"},
               "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": ns}]}
    status, doc = await sa.call("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", binding)
    assert status == 403
    assert doc["message"] == (
        f'rolebindings.rbac.authorization.k8s.io "b" is forbidden: user "system:serviceaccount:{ns}:robot" '
        f'(groups=["system:serviceaccounts" "system:serviceaccounts:{ns}" "system:authenticated"]) is attempting '
        'to grant RBAC permissions not currently held:\n{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}')
    status, _ = await sa.call("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", {
        "metadata": {"name": "mine"}, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]})
    assert status == 403
    # the bind verb on that role lets it through
    await grant(admin, ns, [{"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["bind"],
                             "resourceNames": ["secrets"]}], name="binder")
    await sa.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", binding)
    # and now it holds get secrets, so a role with just that is no escalation
    await sa.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", {
        "metadata": {"name": "mine"}, "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]})


async def test_aggregated_cluster_roles_and_bootstrap_view(admin: Caller) -> None:
    ns = await namespace_with_sa(admin)
    sa = admin.as_token(await token_for(admin, ns))
    await admin.ok("POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", {
        "metadata": {"name": "view"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                  "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "robot", "namespace": ns}]})
    assert (await sa.call("GET", f"/api/v1/namespaces/{ns}/pods"))[0] == 200
    assert (await sa.call("GET", f"/api/v1/namespaces/{ns}/secrets"))[0] == 403
    assert (await sa.call("GET", "/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"))[0] == 403
    await admin.ok("POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", {
        "metadata": {"name": f"leases-view-{ns}", "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
        "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"]}]})
    assert (await sa.call("GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"))[0] == 200


async def test_impersonation_is_authorized(admin: Caller) -> None:
    ns = await namespace_with_sa(admin)
    sa = admin.as_token(await token_for(admin, ns))
    status, doc = await sa.call("GET", "/api", headers={"Impersonate-User": "bob"})
    assert (status, doc["message"]) == (403, f'users "bob" is forbidden: User "system:serviceaccount:{ns}:robot" '
                                             'cannot impersonate resource "users" in API group "" at the cluster scope')
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    who = await admin.call("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", review,
                           headers={"Impersonate-User": f"system:serviceaccount:{ns}:robot",
                                    "Impersonate-Group": "extra-group"})
    assert who[1]["status"]["userInfo"]["groups"] == ["system:serviceaccounts", f"system:serviceaccounts:{ns}",
                                                      "extra-group", "system:authenticated"]


@pytest.fixture(params=["1.27", "1.33"])
def kubectl_edge(request: pytest.FixtureRequest, kubectl: RunKubectl) -> str:
    version: str = request.param
    return version


async def test_kubectl_create_token_whoami_and_can_i(admin: Caller, server: ApiServer, kubectl: RunKubectl,
                                                     kubectl_edge: str) -> None:
    ns = await namespace_with_sa(admin)
    await grant(admin, ns, [
        {"apiGroups": [""], "resources": ["pods", "pods/log"], "verbs": ["get"]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["cfg1"]},
    ])

    def run(*args: str, token: str = ADMIN_TOKEN) -> tuple[int, str, str]:
        done = kubectl(kubectl_edge, *args, server=server.url, token=token, ca=server.ca)
        return done.returncode, done.stdout.strip(), done.stderr.strip()

    code, token, err = await asyncio.to_thread(run, "create", "token", "robot", "-n", ns)
    assert code == 0, err
    if kubectl_edge != "1.27":  # `auth whoami` is kubectl 1.28+ (alpha before)
        code, out, err = await asyncio.to_thread(run, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")
        assert (code, out) == (0, "kubernetes-admin"), err
        code, out, err = await asyncio.to_thread(run, "auth", "whoami", "-o",
                                                 "jsonpath={.status.userInfo.username}", token=token)
        assert (code, out) == (0, f"system:serviceaccount:{ns}:robot"), err
    as_sa = f"--as=system:serviceaccount:{ns}:robot"
    cases = [
        (["get", "pods"], "yes"), (["list", "pods"], "no"), (["get", "pods", "--subresource=log"], "yes"),
        (["get", "pods", "--subresource=exec"], "no"), (["get", "configmaps/cfg1"], "yes"),
        (["get", "configmaps/cfg2"], "no"), (["create", "selfsubjectaccessreviews.authorization.k8s.io"], "yes"),
    ]
    for verb_args, want in cases:
        code, out, err = await asyncio.to_thread(run, "auth", "can-i", *verb_args, "-n", ns, as_sa)
        assert out == want, (verb_args, out, err)
        code, out, err = await asyncio.to_thread(run, "auth", "can-i", *verb_args, "-n", ns, token=token)
        assert out == want, (verb_args, out, err)
    code, out, err = await asyncio.to_thread(run, "auth", "can-i", "--list", "-n", ns, token=token)
    assert code == 0, err
    lines = out.splitlines()
    assert any(line.split()[:1] == ["configmaps"] and "[cfg1]" in line and "[get]" in line for line in lines), out
    assert any(line.split()[:1] == ["pods/log"] for line in lines), out
    code, out, err = await asyncio.to_thread(run, "auth", "can-i", "delete", "nodes", "--as=bob",
                                             "--as-group=system:masters")
    assert out == "yes", err
    # the SA may not impersonate (client-go's discovery shows a 403 from /api as "unknown"; the body
    # is checked in test_impersonation_is_authorized)
    code, out, err = await asyncio.to_thread(run, "get", "pods", "-n", ns, "--as=bob", token=token)
    assert code != 0 and "Error from server (Forbidden)" in err, err
    code, out, err = await asyncio.to_thread(run, "get", "pods", "-n", ns, "-o", "name", token=token)
    assert code != 0 and (f'pods is forbidden: User "system:serviceaccount:{ns}:robot" cannot list resource "pods" '
                          f'in API group "" in the namespace "{ns}"') in err, err


async def test_rbac_faults_revoke_a_binding_or_a_rule_and_reject_tokens(admin: Caller) -> None:
    ns = await namespace_with_sa(admin)
    sa = admin.as_token(await token_for(admin, ns))
    await grant(admin, ns, [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["list"]},
                            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}])
    leases, configmaps = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases", f"/api/v1/namespaces/{ns}/configmaps"

    async def codes() -> tuple[int, int]:
        return (await sa.call("GET", leases))[0], (await sa.call("GET", configmaps))[0]

    assert await codes() == (200, 200)
    await admin.ok("POST", "/chaos/v1/faults", {"name": f"revoke-{ns}", "type": "rbac.revokeBinding",
                                                "params": {"binding": f"RoleBinding/{ns}/r"}, "duration": None})
    assert await codes() == (403, 403)
    await admin.ok("DELETE", f"/chaos/v1/faults/revoke-{ns}")
    assert await codes() == (200, 200)
    await admin.ok("POST", "/chaos/v1/faults", {"name": f"rule-{ns}", "type": "rbac.revokeBinding",
                                                "params": {"binding": f"RoleBinding/{ns}/r", "rules": [0]},
                                                "duration": None})
    assert await codes() == (403, 200)
    await admin.ok("DELETE", f"/chaos/v1/faults/rule-{ns}")
    await admin.ok("POST", "/chaos/v1/faults", {"name": f"reject-{ns}", "type": "rbac.rejectTokens",
                                                "params": {"user": f"system:serviceaccount:{ns}:robot"},
                                                "duration": None})
    assert await codes() == (401, 401)
    await admin.ok("DELETE", f"/chaos/v1/faults/reject-{ns}")
    assert await codes() == (200, 200)
    status, doc = await admin.call("POST", "/chaos/v1/faults", {"type": "rbac.revokeBinding",
                                                               "params": {"binding": "r"}, "duration": 5})
    assert status == 422 and "ClusterRoleBinding/NAME or RoleBinding/NAMESPACE/NAME" in str(doc), doc

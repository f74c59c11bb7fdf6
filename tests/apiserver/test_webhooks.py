"""Admission webhooks against a real HTTPS webhook server started by the test (kubemesh.apiserver.webhooks).

The server has its own CA and certificate (for 127.0.0.1 and `hook.webhooks.svc`), and the
configurations carry that CA as `caBundle`. The apiserver is a real process. Each route of the
server is one behaviour: deny by label, mutate by JSON patch, hang past the timeout, answer
garbage, answer too much, send a patch that does not apply, redirect. Every refused write leaves
the store as it was, and the apiserver keeps serving.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import pytest
from aiohttp import web
from restkit import Json, Rest

from kubemesh.services.machinery.certs import ensure_certs, server_context

if TYPE_CHECKING:  # conftest is never imported at run time (see tests/conftest.py)
    from conftest import ApiServer, RunKubectl

CMS = "/api/v1/namespaces/default/configmaps"
VALIDATING = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


@dataclass
class HookServer:
    """A TLS AdmissionReview server; `reviews` are the requests it was sent, by route."""

    port: int
    ca_bundle: str
    reviews: dict[str, list[Json]] = field(default_factory=dict)

    def config(self, path: str, *, name: str, service: bool = False, **hook: Any) -> Json:
        client: Json = ({"service": {"namespace": "webhooks", "name": "hook", "port": self.port, "path": path}}
                        if service else {"url": f"https://127.0.0.1:{self.port}{path}"})
        rules = hook.pop("rules", [{"operations": ["CREATE", "UPDATE", "DELETE"], "apiGroups": [""],
                                    "apiVersions": ["v1"], "resources": ["configmaps"]}])
        return {"name": name, "clientConfig": {**client, "caBundle": self.ca_bundle}, "rules": rules,
                "sideEffects": "None", "admissionReviewVersions": ["v1"], **hook}


def answer(review: Json, **response: Any) -> web.Response:
    return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                              "response": {"uid": review["request"]["uid"], **response}})


@pytest.fixture
async def hooks(tmp_path: Path) -> AsyncIterator[HookServer]:
    certs = ensure_certs(tmp_path / "hook-pki", hosts=("hook.webhooks.svc",))
    server = HookServer(port=0, ca_bundle=certs.ca_data())

    async def review_of(request: web.Request) -> Json:
        review: Json = await request.json()
        server.reviews.setdefault(request.path, []).append(review)
        return review

    async def validate(request: web.Request) -> web.Response:
        review = await review_of(request)
        obj = review["request"]["object"] or review["request"]["oldObject"]
        if (obj["metadata"].get("labels") or {}).get("deny"):
            return answer(review, allowed=False, status={"message": "no deny label allowed"})
        return answer(review, allowed=True, warnings=["checked by the test webhook"])

    async def mutate(request: web.Request) -> web.Response:
        review = await review_of(request)
        labels = review["request"]["object"]["metadata"].get("labels")
        ops = ([{"op": "add", "path": "/metadata/labels/mutated", "value": "yes"}] if labels is not None else
               [{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}])
        return answer(review, allowed=True, patchType="JSONPatch", patch=base64.b64encode(orjson.dumps(ops)).decode())

    async def slow(request: web.Request) -> web.Response:
        review = await review_of(request)
        await asyncio.sleep(5)
        return answer(review, allowed=True)

    async def garbage(request: web.Request) -> web.Response:
        await review_of(request)
        return web.Response(text="<html>not an AdmissionReview</html>")

    async def huge(request: web.Request) -> web.Response:
        review = await review_of(request)
        return answer(review, allowed=True, warnings=["x" * (4 * 1024 * 1024)])

    async def bad_patch(request: web.Request) -> web.Response:
        review = await review_of(request)
        ops = [{"op": "replace", "path": "/no/such/field", "value": 1}]
        return answer(review, allowed=True, patchType="JSONPatch", patch=base64.b64encode(orjson.dumps(ops)).decode())

    async def wrong_uid(request: web.Request) -> web.Response:
        await review_of(request)
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                                  "response": {"uid": "not-the-request", "allowed": True}})

    async def redirect(request: web.Request) -> web.Response:
        await review_of(request)
        raise web.HTTPTemporaryRedirect("https://127.0.0.1:1/elsewhere")

    app = web.Application(client_max_size=16 * 1024 * 1024)
    for path, handler in (("/validate", validate), ("/mutate", mutate), ("/slow", slow), ("/garbage", garbage),
                          ("/huge", huge), ("/bad-patch", bad_patch), ("/wrong-uid", wrong_uid),
                          ("/redirect", redirect)):
        app.router.add_post(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_context(certs.cert, certs.key))
    await site.start()
    server.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield server
    finally:
        await runner.cleanup()


async def configure(rest: Rest, collection: str, name: str, *webhooks: Json) -> None:
    kind = "ValidatingWebhookConfiguration" if collection == VALIDATING else "MutatingWebhookConfiguration"
    await rest.ok("POST", collection, {"apiVersion": "admissionregistration.k8s.io/v1", "kind": kind,
                                       "metadata": {"name": name}, "webhooks": list(webhooks)})


def configmap(name: str, **labels: str) -> Json:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": labels},
            "data": {"k": "v"}}


async def test_a_validating_webhook_denies_and_allows_with_warnings(rest: Rest, hooks: HookServer) -> None:
    await configure(rest, VALIDATING, "policy", hooks.config("/validate", name="deny.example.com"))
    status, doc = await rest.call("POST", CMS, configmap("bad", deny="yes"))
    assert (status, doc["reason"], doc["message"]) == (
        403, "Forbidden", 'configmaps "bad" is forbidden: admission webhook "deny.example.com" denied the request: '
        "no deny label allowed")
    assert doc["details"] == {"name": "bad", "kind": "configmaps"}
    assert await rest.status_of("GET", f"{CMS}/bad") == 404  # the store is unchanged
    await rest.ok("POST", CMS, configmap("good"))
    assert rest.last_warnings == ["checked by the test webhook"]
    (review,) = [r for r in hooks.reviews["/validate"] if r["request"]["name"] == "good"]
    request = review["request"]
    assert (request["operation"], request["namespace"], request["kind"], request["resource"]) == (
        "CREATE", "default", {"group": "", "version": "v1", "kind": "ConfigMap"},
        {"group": "", "version": "v1", "resource": "configmaps"})
    assert request["object"]["metadata"]["uid"] and request["oldObject"] is None
    # Updates carry the old object; a delete only the old one.
    good = await rest.ok("GET", f"{CMS}/good")
    denied = {**good, "metadata": {**good["metadata"], "labels": {"deny": "1"}}}
    status, _ = await rest.call("PUT", f"{CMS}/good", denied)
    assert status == 403
    await rest.ok("DELETE", f"{CMS}/good")
    delete = hooks.reviews["/validate"][-1]["request"]
    assert (delete["operation"], delete["object"], delete["oldObject"]["metadata"]["name"]) == ("DELETE", None, "good")


async def test_a_mutating_webhook_patches_what_is_stored(rest: Rest, hooks: HookServer) -> None:
    await configure(rest, MUTATING, "labeler", hooks.config("/mutate", name="label.example.com", service=True))
    created = await rest.ok("POST", CMS, configmap("m1", app="web"))
    assert created["metadata"]["labels"] == {"app": "web", "mutated": "yes"}
    assert (await rest.ok("GET", f"{CMS}/m1"))["metadata"]["labels"] == {"app": "web", "mutated": "yes"}
    # generateName: the webhook sees no name yet, the object is stored under the generated one.
    generated = await rest.ok("POST", CMS, {"metadata": {"generateName": "gen-"}, "data": {}})
    assert generated["metadata"]["name"].startswith("gen-") and generated["metadata"]["labels"] == {"mutated": "yes"}
    # A merge patch goes through the webhook too.
    patched = await rest.ok("PATCH", f"{CMS}/m1", {"metadata": {"labels": {"mutated": None, "tier": "x"}}},
                            ctype="application/merge-patch+json")
    assert patched["metadata"]["labels"] == {"app": "web", "tier": "x", "mutated": "yes"}


@pytest.mark.parametrize(("route", "expected"), [
    ("/slow", "context deadline exceeded"),
    ("/garbage", "not an AdmissionReview"),
    ("/huge", "larger than"),
    ("/wrong-uid", 'got "not-the-request"'),
    ("/redirect", "status code 307"),
    ("/bad-patch", "the patch does not apply"),
])
async def test_a_failing_webhook_fails_closed_or_open_as_its_policy_says(
        rest: Rest, hooks: HookServer, route: str, expected: str) -> None:
    collection = MUTATING if route == "/bad-patch" else VALIDATING
    await configure(rest, collection, "closed", hooks.config(route, name="closed.example.com", timeoutSeconds=1,
                                                             objectSelector={"matchLabels": {"policy": "fail"}}))
    await configure(rest, collection, "open",
                    hooks.config(route, name="open.example.com", timeoutSeconds=1, failurePolicy="Ignore",
                                 objectSelector={"matchLabels": {"policy": "ignore"}}))
    status, doc = await rest.call("POST", CMS, configmap("refused", policy="fail"))
    assert (status, doc["reason"]) == (500, "InternalError"), doc
    assert doc["message"].startswith('Internal error occurred: failed calling webhook "closed.example.com": ')
    assert expected in doc["message"], doc["message"]
    assert await rest.status_of("GET", f"{CMS}/refused") == 404
    await rest.ok("POST", CMS, configmap("admitted", policy="ignore"))
    assert (await rest.ok("GET", "/api/v1/namespaces/default"))["metadata"]["name"] == "default"  # still serving


async def test_namespace_selector_scope_and_equivalent_versions(rest: Rest, hooks: HookServer) -> None:
    await rest.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "guarded", "labels": {"webhooks": "on"}}})
    await configure(rest, VALIDATING, "guard", hooks.config(
        "/validate", name="guard.example.com", namespaceSelector={"matchLabels": {"webhooks": "on"}}))
    assert await rest.status_of("POST", CMS, configmap("free", deny="yes")) == 201  # not a selected namespace
    assert await rest.status_of("POST", "/api/v1/namespaces/guarded/configmaps", configmap("caught", deny="y")) == 403
    # A rule written for autoscaling/v1 also sees writes at v2 under the default matchPolicy (Equivalent).
    await configure(rest, VALIDATING, "hpa", hooks.config("/validate", name="hpa.example.com", rules=[
        {"operations": ["CREATE"], "apiGroups": ["autoscaling"], "apiVersions": ["v1"],
         "resources": ["horizontalpodautoscalers"], "scope": "Namespaced"}]))
    hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
           "metadata": {"name": "h", "labels": {"deny": "y"}},
           "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                    "minReplicas": 1, "maxReplicas": 3}}
    status, doc = await rest.call("POST", "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers", hpa)
    assert status == 403 and 'admission webhook "hpa.example.com" denied' in doc["message"]


async def test_a_webhook_on_a_custom_resource(rest: Rest, hooks: HookServer) -> None:
    await rest.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}})
    await configure(rest, VALIDATING, "widgets", hooks.config("/validate", name="widgets.example.com", rules=[
        {"operations": ["*"], "apiGroups": ["example.com"], "apiVersions": ["*"], "resources": ["widgets"]}]))
    widgets = "/apis/example.com/v1/namespaces/default/widgets"
    body = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w", "labels": {"deny": "1"}}}
    status, doc = await rest.call("POST", widgets, body)
    assert (status, doc["message"]) == (403, 'widgets.example.com "w" is forbidden: admission webhook '
                                             '"widgets.example.com" denied the request: no deny label allowed')
    assert doc["details"] == {"name": "w", "group": "example.com", "kind": "widgets"}


@pytest.mark.kubectl
async def test_kubectl_shows_the_denial(apiserver: ApiServer, rest: Rest, hooks: HookServer,
                                        edge_kubectl_version: str, kubectl: RunKubectl) -> None:
    await configure(rest, VALIDATING, "policy", hooks.config("/validate", name="deny.example.com"))
    res = await asyncio.to_thread(kubectl, edge_kubectl_version, "create", "-f", "-", server=apiserver.url,
                                  input=json.dumps(configmap("bad", deny="yes")))
    assert res.returncode == 1
    assert ('admission webhook "deny.example.com" denied the request: no deny label allowed' in res.stderr), res.stderr


# ------------------------------------------------------------------------- webhook faults (chaos)


async def fault(rest: Rest, spec: Json) -> str:
    created = await rest.ok("POST", "/chaos/v1/faults", spec)
    return str(created["name"])


async def test_webhook_faults_take_effect_under_each_policy_and_heal(rest: Rest, hooks: HookServer) -> None:
    await configure(rest, VALIDATING, "policy",
                    hooks.config("/validate", name="strict.example.com", timeoutSeconds=1,
                                 objectSelector={"matchLabels": {"policy": "fail"}}),
                    hooks.config("/validate", name="lenient.example.com", timeoutSeconds=1, failurePolicy="Ignore",
                                 objectSelector={"matchLabels": {"policy": "ignore"}}))
    cases: list[tuple[Json, str]] = [
             ({"type": "webhook.unreachable"}, "connection refused"),
             ({"type": "webhook.error", "params": {"code": 503}}, "status code 503"),
             ({"type": "webhook.latency", "params": {"delay": 3}}, "context deadline exceeded")]
    for i, (spec, expected) in enumerate(cases):
        name = await fault(rest, {**spec, "target": {"webhookConfiguration": "policy"},
                                  "match": {"verbs": ["create"], "resources": ["configmaps"]}, "duration": None})
        status, doc = await rest.call("POST", CMS, configmap(f"strict-{i}", policy="fail"))
        assert (status, doc["reason"]) == (500, "InternalError"), doc
        assert doc["message"].startswith('Internal error occurred: failed calling webhook "strict.example.com"')
        assert expected in doc["message"], doc["message"]
        assert await rest.status_of("POST", CMS, configmap(f"lenient-{i}", policy="ignore")) == 201
        got = await rest.ok("GET", f"/chaos/v1/faults/{name}")
        assert got["status"]["injected"] == 2
        await rest.ok("DELETE", f"/chaos/v1/faults/{name}")  # healed: the same write goes through
        assert await rest.status_of("POST", CMS, configmap(f"strict-{i}", policy="fail")) == 201
    # One webhook of a configuration, and a match that does not hold (deletes are not faulted).
    await fault(rest, {"type": "webhook.unreachable", "duration": None, "match": {"verbs": ["create"]},
                       "target": {"webhookConfiguration": "policy", "webhook": "lenient.example.com"}})
    assert await rest.status_of("POST", CMS, configmap("still-strict", policy="fail")) == 201
    assert await rest.status_of("DELETE", f"{CMS}/strict-0") == 200
    await rest.ok("POST", "/chaos/v1/reset")
    status, bad = await rest.call("POST", "/chaos/v1/faults", {"type": "webhook.latency", "duration": 5,
                                                              "target": {"component": "scheduler"}})
    assert status == 422 and "target.webhookConfiguration" in str(bad)


async def test_the_history_records_every_webhook_call(apiserver: ApiServer, rest: Rest, hooks: HookServer) -> None:
    await configure(rest, VALIDATING, "policy", hooks.config("/validate", name="deny.example.com"))
    await rest.ok("POST", CMS, configmap("ok"))
    await rest.call("POST", CMS, configmap("no", deny="1"))
    async with rest.session.get(f"{apiserver.url}/kubemesh/v1/history", params={"type": "webhook"},
                                headers=rest.headers) as resp:
        records = [orjson.loads(line) for line in (await resp.read()).splitlines() if line.strip()]
    outcomes = [(r["webhook"], r["operation"], r["key"], r["outcome"]) for r in records]
    assert outcomes == [("deny.example.com", "CREATE", "default/ok", "allowed"),
                        ("deny.example.com", "CREATE", "default/no", "denied")]
    assert all(r["configuration"] == "policy" and r["latency"] >= 0 for r in records)


async def test_webhooks_see_the_requesting_user_with_its_groups(rest: Rest, hooks: HookServer) -> None:
    # A ServiceAccount's write reaches the webhook with its own name, uid and groups, as upstream sends them.
    await rest.ok("POST", "/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": "writer"}})
    await rest.ok("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/roles", {
        "metadata": {"name": "writer"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]}]})
    await rest.ok("POST", "/apis/rbac.authorization.k8s.io/v1/namespaces/default/rolebindings", {
        "metadata": {"name": "writer"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                                                    "name": "writer"},
        "subjects": [{"kind": "ServiceAccount", "name": "writer", "namespace": "default"}]})
    token = (await rest.ok("POST", "/api/v1/namespaces/default/serviceaccounts/writer/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}))["status"]["token"]
    await configure(rest, VALIDATING, "who", hooks.config("/validate", name="who.example.com"))
    before = rest.headers.get("Authorization")
    rest.headers["Authorization"] = f"Bearer {token}"
    try:
        await rest.ok("POST", CMS, configmap("by-writer"))
    finally:
        rest.headers.pop("Authorization")
        if before is not None:
            rest.headers["Authorization"] = before
    (review,) = [r for r in hooks.reviews["/validate"] if r["request"]["name"] == "by-writer"]
    info = review["request"]["userInfo"]
    assert info["username"] == "system:serviceaccount:default:writer"
    assert info["groups"] == ["system:serviceaccounts", "system:serviceaccounts:default", "system:authenticated"]
    assert info["uid"] and "authentication.kubernetes.io/credential-id" in info["extra"]

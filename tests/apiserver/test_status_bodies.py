"""Failure Status bodies byte for byte as kube-apiserver writes them.

Field order `kind, apiVersion, metadata, status, message, reason, details, code`; `details` with
`name`, `group` only outside the core group, `kind` the resource (the Kind for 422 Invalid),
`causes` where upstream gives them; a trailing newline (Go's json.Encoder). The official
Python client puts these bytes in its exceptions' text, so users' logs and assertions read the
same as on a cluster.
"""

from __future__ import annotations

import base64
from typing import TYPE_CHECKING, Any

import aiohttp
import chaoskit
import orjson
import pytest
from restkit import Rest

if TYPE_CHECKING:  # conftest is never imported at run time (see tests/conftest.py)
    from conftest import StartApiServer

CMS = "/api/v1/namespaces/default/configmaps"
DEPLOYS = "/apis/apps/v1/namespaces/default/deployments"


def status(message: str, reason: str, code: int, details: dict[str, Any] | None = None,
           metadata: dict[str, Any] | None = None) -> bytes:
    """The bytes kube-apiserver writes for a failure Status."""
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": metadata or {}, "status": "Failure",
                            "message": message, "reason": reason}
    if details:
        body["details"] = details
    body["code"] = code
    return orjson.dumps(body) + b"\n"


async def raw(rest: Rest, method: str, path: str, body: bytes | None = None, *,
              ctype: str = "application/json", params: dict[str, str] | None = None) -> tuple[int, bytes]:
    headers = {**rest.headers, "Content-Type": ctype, "Accept": "application/json"}
    async with rest.session.request(method, rest.base + path, data=body, headers=headers, params=params) as resp:
        return resp.status, await resp.read()


DEPLOYMENT = orjson.dumps({"metadata": {"name": "d"}, "spec": {
    "selector": {"matchLabels": {"a": "b"}},
    "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}})


@pytest.mark.parametrize("group", ["core", "apps"])
async def test_not_found_already_exists_and_conflict(rest: Rest, group: str) -> None:
    path, resource, body = (CMS, "configmaps", b'{"metadata":{"name":"d"}}') if group == "core" else \
        (DEPLOYS, "deployments.apps", DEPLOYMENT)
    details = {"name": "d", "kind": resource.split(".")[0]}
    if group == "apps":
        details = {"name": "d", "group": "apps", "kind": "deployments"}
    assert await raw(rest, "GET", f"{path}/d") == (404, status(f'{resource} "d" not found', "NotFound", 404, details))
    created, doc = await raw(rest, "POST", path, body)
    assert created == 201, doc
    assert await raw(rest, "POST", path, body) == (
        409, status(f'{resource} "d" already exists', "AlreadyExists", 409, details))
    stale = orjson.loads(body)
    stale["metadata"]["resourceVersion"] = "1"
    assert await raw(rest, "PUT", f"{path}/d", orjson.dumps(stale)) == (409, status(
        f'Operation cannot be fulfilled on {resource} "d": the object has been modified; please apply your changes '
        "to the latest version and try again", "Conflict", 409, details))


async def test_invalid_names_the_kind_and_its_causes(rest: Rest) -> None:
    got = await raw(rest, "POST", CMS, b'{"metadata":{"name":"Bad_Name"}}')
    cause = ('Invalid value: "Bad_Name": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric '
             "characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', "
             "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
    assert got == (422, status(f'ConfigMap "Bad_Name" is invalid: metadata.name: {cause}', "Invalid", 422, {
        "name": "Bad_Name", "kind": "ConfigMap",
        "causes": [{"reason": "FieldValueInvalid", "message": cause, "field": "metadata.name"}]}))


async def test_bad_request_unsupported_media_type_and_forbidden(rest: Rest) -> None:
    code, body = await raw(rest, "POST", CMS, b"{not json")
    assert code == 400 and body.endswith(b',"reason":"BadRequest","code":400}\n'), body
    assert await raw(rest, "POST", CMS, b"{}", ctype="text/plain") == (415, status(
        "the body of the request was in an unknown format - accepted media types include: application/json, "
        "application/yaml, application/vnd.kubernetes.protobuf, application/vnd.kubemesh.msgpack",
        "UnsupportedMediaType", 415))
    assert await raw(rest, "DELETE", "/api/v1/namespaces/default") == (403, status(
        'namespaces "default" is forbidden: this namespace may not be deleted', "Forbidden", 403,
        {"name": "default", "kind": "namespaces"}))


async def test_an_expired_continue_token_carries_the_one_to_go_on_with(rest: Rest) -> None:
    code, body = await raw(rest, "GET", CMS, params={"limit": "1", "continue": "bm90LWEtdG9rZW4"})
    assert code == 400 and body.endswith(b'"reason":"BadRequest","code":400}\n'), body
    doc = orjson.loads(body)
    assert list(doc) == ["kind", "apiVersion", "metadata", "status", "message", "reason", "code"]


# -- 410 Expired: a watch or a list from a revision the window has left, an expired continue token.

WINDOW = 5


async def test_expired_watch_list_and_continue(start_apiserver: StartApiServer) -> None:
    server = await start_apiserver(extra_args=("--watch-window", str(WINDOW)))
    async with aiohttp.ClientSession() as session:
        rest = Rest(session, server)
        rvs = [int((await rest.ok("POST", CMS, {"metadata": {"name": f"cm-{i}"}}))["metadata"]["resourceVersion"])
               for i in range(3)]
        first = await rest.ok("GET", CMS, params={"limit": "1"})
        token = first["metadata"]["continue"]
        rvs += [int((await rest.ok("POST", CMS, {"metadata": {"name": f"cm-{i}"}}))["metadata"]["resourceVersion"])
                for i in range(3, 3 + 2 * WINDOW)]
        # The window keeps the last WINDOW events of the kind; the oldest revision a watch can
        # resume from is the one before them, as the watch cache words it.
        oldest = rvs[-WINDOW] - 1
        too_old = status(f"too old resource version: 1 ({oldest})", "Expired", 410)

        # A watch answers 200, then one ERROR event carrying the Status, then ends.
        code, body = await raw(rest, "GET", CMS, params={"watch": "1", "resourceVersion": "1"})
        assert (code, body) == (200, b'{"type":"ERROR","object":' + too_old.rstrip(b"\n") + b"}\n")
        # A list at that exact revision is the Status itself.
        assert await raw(rest, "GET", CMS, params={"resourceVersion": "1", "resourceVersionMatch": "Exact"}) == (
            410, too_old)

        # The continue token of a list whose revision has left: the token that goes on inconsistently
        # (the same start key, revision -1) in the Status' metadata.
        start = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))["start"]
        go_on = base64.urlsafe_b64encode(orjson.dumps({"v": "meta.k8s.io/v1", "rv": -1, "start": start})).rstrip(b"=")
        assert await raw(rest, "GET", CMS, params={"limit": "1", "continue": token}) == (410, status(
            "The provided continue parameter is too old to display a consistent list result. You can start a new "
            "list without the continue parameter, or use the continue token in this response to retrieve the "
            "remainder of the results. Continuing with the provided token results in an inconsistent list - "
            "objects that were created, modified, or deleted between the time the first chunk was returned and now "
            "may show up in the list.", "Expired", 410, metadata={"continue": go_on.decode()}))


# -- 401 Unauthorized: no token, or a wrong one, on a TLS server with a token.


async def test_unauthorized(start_apiserver: StartApiServer) -> None:
    server = await start_apiserver(token="the-right-token", tls=True)
    unauthorized = status("Unauthorized", "Unauthorized", 401)
    context = server.ssl_context()
    assert context is not None
    connector = aiohttp.TCPConnector(ssl=context)
    async with aiohttp.ClientSession(connector=connector) as session:
        for headers in ({}, {"Authorization": "Bearer a-wrong-token"}, {"Authorization": "Basic dXNlcjpwYXNz"}):
            async with session.get(f"{server.url}/api/v1/namespaces/default/configmaps", headers=headers) as resp:
                assert (resp.status, await resp.read()) == (401, unauthorized), headers
                assert resp.headers["Content-Type"] == "application/json"


# -- 429 TooManyRequests and 500 InternalError.


async def test_too_many_requests_from_a_disruption_budget(rest: Rest) -> None:
    pods = "/api/v1/namespaces/default/pods"
    await rest.ok("POST", pods, {"metadata": {"name": "web-0", "labels": {"app": "web"}},
                                 "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "nginx"}]}})
    pod = await rest.ok("GET", f"{pods}/web-0")
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    await rest.ok("PUT", f"{pods}/web-0/status", pod)
    await rest.ok("POST", "/apis/policy/v1/namespaces/default/poddisruptionbudgets", {
        "metadata": {"name": "web"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}})
    eviction = orjson.dumps({"apiVersion": "policy/v1", "kind": "Eviction",
                             "metadata": {"name": "web-0", "namespace": "default"}})
    # kube-apiserver's eviction: no retryAfterSeconds (0, left out), one DisruptionBudget cause.
    assert await raw(rest, "POST", f"{pods}/web-0/eviction", eviction) == (429, status(
        "Cannot evict pod as it would violate the pod's disruption budget.", "TooManyRequests", 429, {"causes": [
            {"reason": "DisruptionBudget", "message": "The disruption budget web needs 1 healthy pods and has 1 "
                                                      "currently"}]}))


async def test_too_many_requests_and_internal_error_from_request_faults() -> None:
    async with chaoskit.running() as mesh:
        # A 429 as max-in-flight answers it: Retry-After, and the same seconds in the details.
        await mesh.add({"name": "busy", "type": "request.error", "target": {"component": "scheduler"},
                        "params": {"code": 429, "retryAfter": 1,
                                   "message": "Too many requests, please try again later."}, "duration": None})
        async with mesh.session.get(mesh.url + CMS, headers=mesh.headers("scheduler")) as resp:
            assert (resp.status, await resp.read()) == (429, status(
                "Too many requests, please try again later.", "TooManyRequests", 429, {"retryAfterSeconds": 1}))
            assert resp.headers["Retry-After"] == "1"
        # A 500 as an internal error reads: the message prefixed, the bare one as the only cause.
        await mesh.add({"name": "boom", "type": "request.error", "target": {"component": "kubelet"},
                        "params": {"code": 500}, "duration": None})
        async with mesh.session.get(mesh.url + CMS, headers=mesh.headers("kubelet")) as resp:
            assert (resp.status, await resp.read()) == (500, status(
                "Internal error occurred: chaos: fault boom injected 500", "InternalError", 500,
                {"causes": [{"message": "chaos: fault boom injected 500"}]}))

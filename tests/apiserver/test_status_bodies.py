"""Failure Status bodies byte for byte as kube-apiserver writes them.

Field order `kind, apiVersion, metadata, status, message, reason, details, code`; `details` with
`name`, `group` only outside the core group, `kind` the resource (the Kind for 422 Invalid),
`causes` where upstream gives them; a trailing newline (Go's json.Encoder). The official
Python client puts these bytes in its exceptions' text, so users' logs and assertions read the
same as on a cluster.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from restkit import Rest

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

"""Hostile input (issue #25): each defect found by raw requests and a fuzzer is a test of its own.

One apiserver process serves the module, with TLS and a token as the default mesh runs it.
Every rejection is checked for kube-apiserver's code, reason and (where it matters) wording;
every accepted write that should not have been is checked to be absent from the store.
"""

from __future__ import annotations

import gzip
import json
import ssl
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
import pytest
from chaoskit import running

if TYPE_CHECKING:  # conftest is never imported at run time (see tests/conftest.py)
    from conftest import ApiServer, LaunchApiServer

TOKEN = "hostile-token"
NS = "hostile"
CMS = f"/api/v1/namespaces/{NS}/configmaps"
PODS = f"/api/v1/namespaces/{NS}/pods"
SECRETS = f"/api/v1/namespaces/{NS}/secrets"
JSON = "application/json"
APPLY = "application/apply-patch+yaml"

Json = dict[str, Any]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, apiserver_launcher: LaunchApiServer) -> Iterator[ApiServer]:
    """One apiserver process (TLS and a token, as the default mesh) for every test of this module."""
    s = apiserver_launcher(tmp_path_factory.mktemp("hostile"), token=TOKEN, tls=True)
    yield s
    s.terminate()


class Api:
    """Raw requests: bytes in, (status, headers, parsed body) out."""

    def __init__(self, session: aiohttp.ClientSession, server: ApiServer) -> None:
        self.session = session
        self.server = server
        ctx = server.ssl_context()
        assert ctx is not None
        self.ssl: ssl.SSLContext = ctx

    async def send(self, method: str, path: str, body: bytes | Json | None = None, *,
                   ctype: str | None = JSON, params: dict[str, str] | None = None,
                   headers: dict[str, str] | None = None) -> tuple[int, dict[str, list[str]], Any]:
        h = {"Authorization": f"Bearer {TOKEN}", **(headers or {})}
        if ctype is not None:
            h["Content-Type"] = ctype
        data = orjson.dumps(body) if isinstance(body, dict) else body
        async with self.session.request(method, self.server.url + path, data=data, headers=h, params=params,
                                        ssl=self.ssl, compress=None, auto_decompress=False) as resp:
            raw = await resp.read()
            got: dict[str, list[str]] = {}
            for k, v in resp.headers.items():
                got.setdefault(k.lower(), []).append(v)
            return resp.status, got, orjson.loads(raw) if raw and resp.content_type == JSON else raw

    async def status(self, method: str, path: str, body: bytes | Json | None = None, **kw: Any) -> Json:
        """The metav1.Status failure a request must get (asserted to be one)."""
        code, _, doc = await self.send(method, path, body, **kw)
        assert isinstance(doc, dict), (code, doc)
        assert doc.get("kind") == "Status" and doc.get("status") == "Failure" and doc.get("code") == code, doc
        assert 400 <= code < 500, doc
        return doc

    async def absent(self, path: str) -> None:
        code, _, doc = await self.send("GET", path, ctype=None)
        assert code == 404, f"{path} was stored: {doc}"


@pytest.fixture
async def api(server: ApiServer) -> AsyncIterator[Api]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        a = Api(session, server)
        code, _, _ = await a.send("GET", f"/api/v1/namespaces/{NS}", ctype=None)
        if code == 404:
            code, _, doc = await a.send("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
            assert code == 201, doc
        yield a


def cm(name: str, **extra: Any) -> Json:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, **extra}


def pod(name: str, **spec: Any) -> Json:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "nginx"}], **spec}}


# ------------------------------------------------------------------------- no answer lost after a commit


async def test_unknown_field_with_a_control_character_is_answered_with_a_sanitized_warning(api: Api) -> None:
    """`"bo\\ngus": 1` under fieldValidation=Warn: 201 with the field named as Go's %q writes it."""
    body = {**cm("warn-ctl"), "bo\ngus": 1, 'q"\\\x01': 2}
    code, headers, doc = await api.send("POST", CMS, body, params={"fieldValidation": "Warn"})
    assert code == 201, doc
    # upstream: `unknown field %q`, then quoted again as the header's quoted-string
    texts = ['unknown field "bo\\ngus"', 'unknown field "q\\"\\\\\\x01"']
    assert sorted(headers["warning"]) == sorted('299 - "' + t.replace("\\", "\\\\").replace('"', '\\"') + '"'
                                                for t in texts)
    assert doc["metadata"]["name"] == "warn-ctl" and "bo\ngus" not in doc


async def test_a_lost_answer_after_commit_is_counted_and_the_retry_finds_the_object() -> None:
    """The send of a committed write's answer fails (injected): logged, counted, connection closed;
    the client's retry of the create gets 409 AlreadyExists and the object is there."""
    async with running() as mesh:
        await mesh.add({"name": "lose", "type": "request.commitThenFail", "target": {"component": "test"},
                        "match": {"resources": ["configmaps"], "verbs": ["create"]}, "params": {"lose": True},
                        "duration": None})
        with pytest.raises(aiohttp.ClientError):
            await mesh.call("POST", "/api/v1/namespaces/default/configmaps", body=cm("lost"))
        retry = await mesh.call("POST", "/api/v1/namespaces/default/configmaps", body=cm("lost"))
        assert retry.status == 409 and retry.body["reason"] == "AlreadyExists", retry.body
        got = await mesh.call("GET", "/api/v1/namespaces/default/configmaps/lost")
        assert got.status == 200 and got.body["metadata"]["name"] == "lost"
        metrics = await mesh.call("GET", "/metrics")
        text = metrics.body.decode() if isinstance(metrics.body, bytes) else str(metrics.body)
        assert 'apiserver_responses_lost_total{resource="configmaps",verb="create"} 1.0' in text, text[-2000:]
        assert mesh.history("fault", op="inject", fault="lose", effect="commitThenLose")


# ------------------------------------------------------------------------- bounded decoding


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_content_encoding_the_bytes_do_not_match_is_a_400(api: Api, encoding: str) -> None:
    doc = await api.status("POST", CMS, json.dumps(cm(f"enc-{encoding}")).encode(),
                           headers={"Content-Encoding": encoding})
    assert doc["code"] == 400 and doc["reason"] == "BadRequest", doc
    assert f"content-encoding: {encoding}" in doc["message"]
    await api.absent(f"{CMS}/enc-{encoding}")


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
async def test_a_body_the_content_encoding_matches_is_read(api: Api, encoding: str) -> None:
    raw = json.dumps(cm(f"enc-ok-{encoding}")).encode()
    packed = gzip.compress(raw) if encoding == "gzip" else zlib.compress(raw)
    code, _, doc = await api.send("POST", CMS, packed, headers={"Content-Encoding": encoding})
    assert code == 201, doc

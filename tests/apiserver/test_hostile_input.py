"""Hostile input (issue #25): each defect found by raw requests and a fuzzer is a test of its own.

One apiserver process serves the module, with TLS and a token as the default mesh runs it.
Every rejection is checked for kube-apiserver's code, reason and (where it matters) wording;
every accepted write that should not have been is checked to be absent from the store.
"""

from __future__ import annotations

import base64
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


BILLION_LAUGHS = b"""apiVersion: v1
kind: ConfigMap
metadata: {name: laughs}
a: &a [x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
"""


@pytest.mark.parametrize(("ctype", "method", "path", "params"), [
    (APPLY, "PATCH", f"{CMS}/laughs", {"fieldManager": "t"}),
    ("application/yaml", "POST", CMS, {}),
])
async def test_yaml_alias_expansion_beyond_goyamls_bound_is_refused(api: Api, ctype: str, method: str, path: str,
                                                                    params: dict[str, str]) -> None:
    """The "billion laughs" (9^6 = 531,441 list elements from a few hundred bytes): 400, nothing stored."""
    doc = await api.status(method, path, BILLION_LAUGHS, ctype=ctype, params=params)
    assert doc["code"] == 400 and doc["reason"] == "BadRequest"
    assert doc["message"] == ("error decoding YAML: error converting YAML to JSON: yaml: document contains "
                              "excessive aliasing")
    await api.absent(f"{CMS}/laughs")


async def test_yaml_with_a_few_aliases_is_still_read(api: Api) -> None:
    body = (b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: few-aliases, labels: &l {a: b}, "
            b"annotations: *l}\ndata: {x: &v hello, y: *v}\n")
    code, _, doc = await api.send("PATCH", f"{CMS}/few-aliases", body, ctype=APPLY, params={"fieldManager": "t"})
    assert code == 201, doc
    assert doc["data"] == {"x": "hello", "y": "hello"} and doc["metadata"]["annotations"] == {"a": "b"}


async def test_a_recursive_yaml_alias_is_refused(api: Api) -> None:
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: recursive}\ndata: &d {x: *d}\n"
    doc = await api.status("PATCH", f"{CMS}/recursive", body, ctype=APPLY, params={"fieldManager": "t"})
    assert doc["code"] == 400
    await api.absent(f"{CMS}/recursive")


async def test_a_body_beyond_3_mib_is_a_413_in_upstreams_words(api: Api) -> None:
    body = json.dumps(cm("huge", data={"a": "x" * (3 * 1024 * 1024)})).encode()
    doc = await api.status("POST", CMS, body)
    assert (doc["code"], doc["reason"], doc["message"]) == (
        413, "RequestEntityTooLarge", "Request entity too large: limit is 3145728")
    await api.absent(f"{CMS}/huge")


@pytest.mark.parametrize(("method", "ctype"), [
    ("POST", "application/json-patch+json"), ("POST", "*/*"), ("POST", "application/merge-patch+json"),
    ("POST", APPLY), ("PUT", "application/strategic-merge-patch+json"),
])
async def test_a_content_type_the_verb_does_not_take_is_a_415_listing_those_it_does(api: Api, method: str,
                                                                                      ctype: str) -> None:
    name = f"ctype-{method.lower()}"
    path = CMS if method == "POST" else f"{CMS}/{name}"
    doc = await api.status(method, path, cm(name), ctype=ctype)
    assert (doc["code"], doc["reason"]) == (415, "UnsupportedMediaType"), doc
    assert doc["message"] == ("the body of the request was in an unknown format - accepted media types include: "
                              "application/json, application/yaml, application/vnd.kubernetes.protobuf, "
                              "application/vnd.kubemesh.msgpack")
    await api.absent(f"{CMS}/{name}")


async def test_a_patch_content_type_not_taken_lists_the_patch_types(api: Api) -> None:
    code, _, doc = await api.send("POST", CMS, cm("patch-ctype"))
    assert code == 201, doc
    doc = await api.status("PATCH", f"{CMS}/patch-ctype", {"data": {"a": "b"}}, ctype="application/json")
    assert doc["code"] == 415
    assert doc["message"] == ("the body of the request was in an unknown format - accepted media types include: "
                              "application/json-patch+json, application/merge-patch+json, "
                              "application/strategic-merge-patch+json, application/apply-patch+yaml")


# ------------------------------------------------------------------------- apply as upstream


@pytest.mark.parametrize(("body", "shown"), [
    (b"a: 1\nmetadata: {name: ap-none}\n", "/, Kind="),
    (b"kind: ConfigMap\nmetadata: {name: ap-none}\n", "/, Kind=ConfigMap"),
    (b"apiVersion: v1\nmetadata: {name: ap-none}\n", "/v1, Kind="),
    (b"apiVersion: v1\nkind: Secret\nmetadata: {name: ap-none}\n", "/v1, Kind=Secret"),
    (b"apiVersion: apps/v1\nkind: ConfigMap\nmetadata: {name: ap-none}\n", "apps/v1, Kind=ConfigMap"),
])
async def test_apply_needs_the_urls_apiversion_and_kind(api: Api, body: bytes, shown: str) -> None:
    doc = await api.status("PATCH", f"{CMS}/ap-none", body, ctype=APPLY, params={"fieldManager": "t"})
    assert (doc["code"], doc["reason"], doc["message"]) == (400, "BadRequest", f"invalid object type: {shown}")
    await api.absent(f"{CMS}/ap-none")


async def test_apply_to_an_existing_object_needs_apiversion_and_kind_too(api: Api) -> None:
    code, _, doc = await api.send("POST", CMS, cm("ap-existing"))
    assert code == 201, doc
    before = doc["metadata"]["resourceVersion"]
    doc = await api.status("PATCH", f"{CMS}/ap-existing", b"a: 1\n", ctype=APPLY, params={"fieldManager": "t"})
    assert doc["code"] == 400
    code, _, doc = await api.send("GET", f"{CMS}/ap-existing", ctype=None)
    assert doc["metadata"]["resourceVersion"] == before and "a" not in doc


async def test_apply_without_a_field_manager_is_a_422(api: Api) -> None:
    """Upstream (ValidatePatchOptions): `PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value`."""
    doc = await api.status("PATCH", f"{CMS}/ap-nofm", cm("ap-nofm"), ctype=APPLY,
                           headers={"User-Agent": "curl/8.0"})
    assert (doc["code"], doc["reason"]) == (422, "Invalid")
    assert doc["message"] == 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required ' \
                             "for apply patch"
    await api.absent(f"{CMS}/ap-nofm")


# ------------------------------------------------------------------------- query parameters


@pytest.mark.parametrize(("params", "message"), [
    ({"fieldManager": "m" * 200}, "fieldManager: Too long: must have at most 128 bytes"),
    ({"fieldManager": "a\x00b"}, 'fieldManager: Invalid value: "a\\x00b": invalid character U+0000 (at position 1)'),
    ({"dryRun": "Nope"}, 'dryRun: Unsupported value: []string{"Nope"}: supported values: "All"'),
    ({"fieldValidation": "Loose"},
     'fieldValidation: Unsupported value: "Loose": supported values: "", "Ignore", "Strict", "Warn"'),
])
async def test_write_options_are_validated_as_upstream(api: Api, params: dict[str, str], message: str) -> None:
    doc = await api.status("POST", CMS, cm("opts"), params=params)
    assert (doc["code"], doc["reason"]) == (422, "Invalid"), doc
    assert doc["message"] == f'CreateOptions.meta.k8s.io "" is invalid: {message}'
    assert doc["details"]["kind"] == "CreateOptions" and doc["details"]["group"] == "meta.k8s.io"
    await api.absent(f"{CMS}/opts")


async def test_update_and_patch_options_name_their_kind(api: Api) -> None:
    code, _, doc = await api.send("POST", CMS, cm("opts-kinds"))
    assert code == 201, doc
    doc = await api.status("PUT", f"{CMS}/opts-kinds", cm("opts-kinds"), params={"dryRun": "x"})
    assert doc["message"].startswith('UpdateOptions.meta.k8s.io "" is invalid: dryRun')
    doc = await api.status("PATCH", f"{CMS}/opts-kinds", {"data": {"a": "b"}},
                           ctype="application/merge-patch+json", params={"force": "true"})
    assert doc["message"] == ('PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for '
                              "non-apply patch")
    doc = await api.status("DELETE", f"{CMS}/opts-kinds", None, ctype=None, params={"dryRun": "Nope"})
    assert doc["message"] == ('DeleteOptions.meta.k8s.io "" is invalid: dryRun: Unsupported value: '
                              '[]string{"Nope"}: supported values: "All"')
    code, _, _ = await api.send("GET", f"{CMS}/opts-kinds", ctype=None)
    assert code == 200


@pytest.mark.parametrize(("grace", "message"), [
    ("99999999999999999999999", 'strconv.ParseInt: parsing "99999999999999999999999": value out of range'),
    ("9223372036854775808", 'strconv.ParseInt: parsing "9223372036854775808": value out of range'),
    ("-9223372036854775809", 'strconv.ParseInt: parsing "-9223372036854775809": value out of range'),
    ("1.5", 'strconv.ParseInt: parsing "1.5": invalid syntax'),
])
async def test_grace_period_beyond_int64_is_a_400(api: Api, grace: str, message: str) -> None:
    code, _, doc = await api.send("POST", CMS, cm("grace"))
    assert code in (201, 409), doc
    doc = await api.status("DELETE", f"{CMS}/grace", None, ctype=None, params={"gracePeriodSeconds": grace})
    assert (doc["code"], doc["reason"], doc["message"]) == (400, "BadRequest", message)
    code, _, _ = await api.send("GET", f"{CMS}/grace", ctype=None)
    assert code == 200


async def test_grace_period_beyond_int64_in_the_body_is_a_400(api: Api) -> None:
    code, _, doc = await api.send("POST", CMS, cm("grace-body"))
    assert code in (201, 409), doc
    doc = await api.status("DELETE", f"{CMS}/grace-body", b'{"gracePeriodSeconds": 99999999999999999999999}')
    assert (doc["code"], doc["reason"]) == (400, "BadRequest")
    assert "DeleteOptions.gracePeriodSeconds of type int64" in doc["message"]
    code, _, _ = await api.send("GET", f"{CMS}/grace-body", ctype=None)
    assert code == 200


# ------------------------------------------------------------------------- validation on kinds


async def test_a_finalizer_that_is_no_qualified_name_is_a_422(api: Api) -> None:
    doc = await api.status("POST", CMS, {**cm("fin"), "metadata": {"name": "fin", "finalizers": ["x/y/z"]}})
    assert (doc["code"], doc["reason"]) == (422, "Invalid")
    rule = ("a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
            "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
            "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. "
            "'example.com/MyName')")
    assert doc["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "metadata.finalizers",
                                         "message": f'Invalid value: "x/y/z": {rule}'}]
    await api.absent(f"{CMS}/fin")


async def test_a_builtin_kinds_unqualified_finalizer_must_be_a_standard_one(api: Api) -> None:
    doc = await api.status("POST", CMS, {**cm("fin2"), "metadata": {"name": "fin2", "finalizers": ["mine"]}})
    assert doc["details"]["causes"] == [{
        "reason": "FieldValueInvalid", "field": "metadata.finalizers[0]",
        "message": 'Invalid value: "mine": name is neither a standard finalizer name nor is it fully qualified'}]
    code, _, doc = await api.send("POST", CMS, {**cm("fin3"), "metadata": {
        "name": "fin3", "finalizers": ["example.com/mine", "orphan"]}})
    assert code == 201, doc


@pytest.mark.parametrize(("path", "body"), [
    (PODS, pod("qty", containers=[{"name": "c", "image": "nginx", "resources": {"limits": {"cpu": "lots"}}}])),
    (PODS, pod("qty2", containers=[{"name": "c", "image": "nginx", "resources": {"requests": {"memory": "1Gb"}}}])),
    (PODS, pod("qty3", volumes=[{"name": "v", "emptyDir": {"sizeLimit": "big"}}])),
    ("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "qty4"},
                       "status": {"capacity": {"cpu": "many"}}}),
    (f"/apis/apps/v1/namespaces/{NS}/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "qty5"},
        "spec": {"selector": {"matchLabels": {"a": "b"}}, "template": {
            "metadata": {"labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "x1"}}}]}}}}),
])
async def test_a_malformed_quantity_anywhere_is_a_400_as_upstreams_decode_answers(api: Api, path: str,
                                                                                  body: Json) -> None:
    doc = await api.status("POST", path, body)
    assert (doc["code"], doc["reason"]) == (400, "BadRequest"), doc
    kind = body["kind"]
    assert doc["message"] == (f'{kind} in version "v1" cannot be handled as a {kind}: quantities must match the '
                              "regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'")
    await api.absent(f"{path}/{body['metadata']['name']}")


async def test_a_quantity_patched_in_is_checked_too(api: Api) -> None:
    code, _, doc = await api.send("POST", PODS, pod("qty-patch"))
    assert code == 201, doc
    patch = {"spec": {"containers": [{"name": "c", "resources": {"limits": {"memory": "lots"}}}]}}
    doc = await api.status("PATCH", f"{PODS}/qty-patch", patch, ctype="application/strategic-merge-patch+json")
    assert doc["code"] == 400 and "quantities must match" in doc["message"]


@pytest.mark.parametrize(("affinity", "field"), [
    ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "k", "operator": "Bogus", "values": ["v"]}]}]}}},
     "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
     ".matchExpressions[0].operator"),
    ({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"topologyKey": "zone", "labelSelector": {"matchExpressions": [{"key": "k", "operator": "Bogus"}]}}]}},
     "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].labelSelector"
     ".matchExpressions[0].operator"),
    ({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": {
        "topologyKey": "zone", "labelSelector": {"matchExpressions": [{"key": "k", "operator": "Gt",
                                                                       "values": ["1"]}]}}}]}},
     "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm"
     ".labelSelector.matchExpressions[0].operator"),
])
async def test_an_affinity_operator_outside_the_enum_is_a_422(api: Api, affinity: Json, field: str) -> None:
    doc = await api.status("POST", PODS, pod("aff", affinity=affinity))
    assert (doc["code"], doc["reason"]) == (422, "Invalid")
    op = "Gt" if "Gt" in json.dumps(affinity) else "Bogus"
    assert {"reason": "FieldValueInvalid", "field": field,
            "message": f'Invalid value: "{op}": not a valid selector operator'} in doc["details"]["causes"]
    await api.absent(f"{PODS}/aff")


async def test_affinity_values_each_operator_needs(api: Api) -> None:
    base = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "k", "operator": "In"}, {"key": "k", "operator": "Exists", "values": ["x"]},
                              {"key": "k", "operator": "Gt", "values": ["1", "2"]}]}]}}}
    doc = await api.status("POST", PODS, pod("aff-values", affinity=affinity))
    assert doc["details"]["causes"] == [
        {"reason": "FieldValueRequired", "field": f"{base}.matchExpressions[0].values",
         "message": "Required value: must be specified when `operator` is 'In' or 'NotIn'"},
        {"reason": "FieldValueForbidden", "field": f"{base}.matchExpressions[1].values",
         "message": "Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'"},
        {"reason": "FieldValueRequired", "field": f"{base}.matchExpressions[2].values",
         "message": "Required value: must be specified single value when `operator` is 'Lt' or 'Gt'"},
    ]


async def test_a_configmap_with_more_than_1_mib_of_data_is_a_422(api: Api) -> None:
    doc = await api.status("POST", CMS, cm("big", data={"a": "x" * 1_000_000, "b": "y" * 500_000}))
    assert (doc["code"], doc["reason"]) == (422, "Invalid")
    assert doc["details"]["causes"] == [{"reason": "FieldValueTooLong",
                                         "message": "Too long: must have at most 1048576 bytes"}]
    await api.absent(f"{CMS}/big")
    code, _, doc = await api.send("POST", CMS, cm("big-enough", data={"a": "x" * (1024 * 1024)}))
    assert code == 201, doc


async def test_a_secret_with_more_than_1_mib_of_data_is_a_422(api: Api) -> None:
    blob = base64.b64encode(b"\0" * (1024 * 1024 + 1)).decode()
    doc = await api.status("POST", SECRETS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "big"},
                                             "data": {"k": blob}})
    assert doc["details"]["causes"] == [{"reason": "FieldValueTooLong", "field": "data",
                                         "message": "Too long: must have at most 1048576 bytes"}]
    await api.absent(f"{SECRETS}/big")


async def test_a_put_without_a_name_is_a_400_and_stores_nothing(api: Api) -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "a\x01b"}}
    doc = await api.status("PUT", f"{CMS}/put-noname", body)
    assert (doc["code"], doc["reason"], doc["message"]) == (
        400, "BadRequest", "the name of the object (put-noname based on URL) was undeterminable: name must be provided")
    code, _, doc = await api.send("POST", CMS, cm("put-noname-2"))
    assert code == 201, doc
    doc = await api.status("PUT", f"{CMS}/put-noname-2", {**body, "data": {"a": "b"}})
    assert doc["code"] == 400
    code, _, doc = await api.send("GET", f"{CMS}/put-noname-2", ctype=None)
    assert "generateName" not in doc["metadata"] and "data" not in doc


async def test_a_generate_name_that_cannot_start_a_name_is_a_422(api: Api) -> None:
    doc = await api.status("POST", CMS, {"apiVersion": "v1", "kind": "ConfigMap",
                                         "metadata": {"generateName": "a\x01b-"}})
    assert (doc["code"], doc["reason"]) == (422, "Invalid")
    fields = [c["field"] for c in doc["details"]["causes"]]
    assert "metadata.generateName" in fields, doc
    cause = next(c for c in doc["details"]["causes"] if c["field"] == "metadata.generateName")
    assert cause["message"].startswith('Invalid value: "a\\x01b-": a lowercase RFC 1123 subdomain'), cause
    code, _, doc = await api.send("POST", CMS, {"apiVersion": "v1", "kind": "ConfigMap",
                                                "metadata": {"generateName": "fine-"}})
    assert code == 201 and doc["metadata"]["name"].startswith("fine-"), doc


# ------------------------------------------------------------------------- what the fuzzer found


@pytest.mark.parametrize(("encoding", "body"), [
    ("deflate", b"{}"), ("gzip", b"{}"), ("br", b"{}"), ("gzip, x-unknown", b"{}"),
    ("gzip", gzip.compress(b"{}", mtime=0) + b"trailing"),
])
async def test_a_short_body_its_content_encoding_does_not_match_gets_a_status(api: Api, encoding: str,
                                                                            body: bytes) -> None:
    """aiohttp's parser refused these before any handler with a plain-text 400; now a Status."""
    doc = await api.status("POST", CMS, body, headers={"Content-Encoding": encoding})
    assert (doc["code"], doc["reason"]) == (400, "BadRequest"), doc


async def test_a_gzip_bomb_is_a_413_without_inflating_it(api: Api) -> None:
    bomb = gzip.compress(b'{"metadata":{"name":"bomb"},"data":{"a":"' + b"x" * (8 * 1024 * 1024) + b'"}}')
    doc = await api.status("POST", CMS, bomb, headers={"Content-Encoding": "gzip"})
    assert (doc["code"], doc["reason"]) == (413, "RequestEntityTooLarge")
    await api.absent(f"{CMS}/bomb")


async def test_yaml_with_bytes_yaml_cannot_hold_is_a_400(api: Api) -> None:
    """A NUL byte made PyYAML's reader fail before parsing began: a 500."""
    doc = await api.status("POST", PODS, b"\x00" * 64, ctype="application/yaml")
    assert (doc["code"], doc["reason"]) == (400, "BadRequest")


async def test_an_apply_that_creates_with_a_malformed_list_is_a_400(api: Api) -> None:
    """The fuzzer's 500: an apply of a missing object whose keyed list holds a non-object."""
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "apply-bad-list"},
            "status": {"podIPs": [True, {"ip": "10.0.0.1"}]}}
    doc = await api.status("PATCH", f"{PODS}/apply-bad-list", body, ctype=APPLY, params={"fieldManager": "t"})
    assert (doc["code"], doc["reason"]) == (400, "BadRequest"), doc
    await api.absent(f"{PODS}/apply-bad-list")


async def test_a_negative_generation_is_a_422(api: Api) -> None:
    doc = await api.status("POST", CMS, {**cm("neg-gen"), "metadata": {"name": "neg-gen", "generation": -5}})
    assert doc["details"]["causes"] == [{"reason": "FieldValueInvalid", "field": "metadata.generation",
                                         "message": "Invalid value: -5: must be greater than or equal to 0"}]
    await api.absent(f"{CMS}/neg-gen")

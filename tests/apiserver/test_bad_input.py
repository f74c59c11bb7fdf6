"""Malformed, ill-typed and impossible requests against one running apiserver process.

* A seeded fuzz sends thousands of requests that must all fail: every answer is a
  metav1.Status with one of the documented codes (400, 404, 405, 409, 410, 413, 415, 422),
  never a 5xx; the store's revision does not move; the server stays ready.
* One test per bad-input class pins its exact code and reason.
* The bugs the fuzz found are regression tests at the end of this file.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import msgpack
import orjson
import pytest

if TYPE_CHECKING:  # conftest is never imported at run time (see tests/conftest.py)
    from conftest import ApiServer, LaunchApiServer, StartApiServer

JSON = "application/json"
MSGPACK = "application/vnd.kubemesh.msgpack"
MERGE = "application/merge-patch+json"
SMP = "application/strategic-merge-patch+json"
JSONPATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
ALLOWED = frozenset({400, 404, 405, 409, 410, 413, 415, 422})
MAX_BODY = 3 * 1024 * 1024
NS = "fuzz"
FUZZ_CASES = 4000
FUZZ_SEED = 20_261_121
CONCURRENCY = 16

Json = dict[str, Any]

PODS = f"/api/v1/namespaces/{NS}/pods"
NODES = "/api/v1/nodes"
DEPLOYS = f"/apis/apps/v1/namespaces/{NS}/deployments"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"


@dataclass(frozen=True)
class Case:
    """One request that must fail."""

    what: str
    method: str
    path: str
    body: bytes | None = None
    ctype: str | None = JSON
    params: dict[str, str] = field(default_factory=dict)
    accept: str = JSON

    def describe(self) -> str:
        body = (self.body[:200] + b"..." if self.body and len(self.body) > 200 else self.body)
        return f"[{self.what}] {self.method} {self.path} params={self.params} ctype={self.ctype} body={body!r}"


@dataclass
class Answer:
    status: int
    ctype: str
    body: bytes


def pod(name: str, *, node: str | None = None) -> Json:
    spec: Json = {"containers": [{"name": "c", "image": "nginx:1.25", "resources": {"requests": {"cpu": "100m"}}}],
                  "terminationGracePeriodSeconds": 30}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"app": "fuzz"}, "annotations": {"a": "b"}}, "spec": spec}


def node(name: str) -> Json:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"zone": "a"}},
            "spec": {"unschedulable": False, "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}}


def deployment(name: str) -> Json:
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}}}


def lease(name: str) -> Json:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name},
            "spec": {"holderIdentity": "h", "leaseDurationSeconds": 40}}


# (collection path, body factory, [(field path, JSON type)]) for the wrong-type fuzz.
TYPED_FIELDS: list[tuple[str, Callable[[str], Json], list[tuple[tuple[str | int, ...], str]]]] = [
    (PODS, pod, [
        (("metadata", "labels"), "object"), (("metadata", "annotations"), "object"),
        (("metadata", "labels", "app"), "string"), (("metadata", "finalizers"), "array"),
        (("metadata", "ownerReferences"), "array"), (("spec", "containers"), "array"),
        (("spec", "containers", 0), "object"), (("spec", "containers", 0, "name"), "string"),
        (("spec", "containers", 0, "image"), "string"),
        # spec.containers[0].resources is left out: known 500, see test_pod_resources_wrong_type_is_invalid
        (("spec", "nodeName"), "string"), (("spec", "terminationGracePeriodSeconds"), "integer"),
        (("spec", "nodeSelector"), "object"), (("spec", "affinity"), "object"),
    ]),
    (NODES, node, [
        (("spec", "unschedulable"), "boolean"), (("spec", "taints"), "array"), (("spec", "taints", 0), "object"),
        (("spec", "taints", 0, "key"), "string"), (("metadata", "labels", "zone"), "string"),
    ]),
    (DEPLOYS, deployment, [
        (("spec", "replicas"), "integer"), (("spec", "selector"), "object"), (("spec", "template"), "object"),
        (("spec", "selector", "matchLabels"), "object"),
    ]),
    (LEASES, lease, [
        (("spec", "leaseDurationSeconds"), "integer"), (("spec", "holderIdentity"), "string"),
    ]),
]

WRONG_VALUES: dict[str, list[Any]] = {
    "string": [5, True, ["x"], {"x": "y"}, 1.5],
    "integer": ["5", True, [1], {"n": 1}, "abc"],
    "boolean": ["true", 1, [True], {"b": True}],
    "array": ["x", 5, {"a": 1}, True],
    "object": ["x", 5, ["a"], True],
}

INVALID_NAMES = ["Bad_Name", "UPPER", "-lead", "trail-", "a b", "a/b", "x" * 254, "dots..", ".", "..",
                 "ünïcode", "a_b", "a@b", "tab\there", "new\nline", "%20"]
BAD_LABEL_SELECTORS = ["a in (b", "==", "a=b=c", "a notin", "(a)", "a in b", "a=(b)", "!=x", "a!", "a in ()",
                       "a=b,,", "=x", "x==y==z", "a in (b,", "a notin (c", "in (x)", "a >", "a < b"]
BAD_FIELD_SELECTORS = ["spec.bogus=1", "nonsense", "metadata.labels=x", "status.podIP~1", "=x", "spec.nodeName",
                       "metadata.name=a,spec.nope=b", "status.bogus!=2"]


def set_path(obj: Any, path: tuple[str | int, ...], value: Any) -> None:
    for step in path[:-1]:
        obj = obj[step]
    obj[path[-1]] = value


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


class Fuzzer:
    """Generates failing requests from a seeded RNG, given the live targets' revisions."""

    def __init__(self, rng: random.Random, stale_rv: Callable[[], str], current_rv: dict[str, str]) -> None:
        self.rng = rng
        self.stale_rv = stale_rv
        self.current_rv = current_rv
        self.n = 0

    def fresh(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}-{self.n}"

    def case(self) -> Case:
        gens: list[Callable[[], Case]] = [
            self.malformed_json, self.malformed_msgpack, self.wrong_type, self.unknown_field, self.invalid_name,
            self.missing_namespace, self.unknown_resource, self.bad_verb, self.bad_patch, self.stale,
            self.bad_selector, self.bad_query, self.wrong_media_type, self.missing_object, self.bad_yaml,
        ]
        c = self.rng.choice(gens)()
        if c.accept == JSON and self.rng.random() < 0.1:
            return Case(c.what + "+msgpack-accept", c.method, c.path, c.body, c.ctype, c.params, MSGPACK)
        return c

    def _target(self) -> tuple[str, str]:
        return self.rng.choice([(f"{PODS}/target", "pod"), (f"{NODES}/fuzz-node", "node"),
                                (f"{DEPLOYS}/target", "deployment"), (f"{LEASES}/target", "lease")])

    def malformed_json(self) -> Case:
        good = dumps(pod(self.fresh("mj")))
        r = self.rng.random()
        if r < 0.4:
            raw = good[: self.rng.randrange(1, len(good) - 1)]
        elif r < 0.7:
            i = self.rng.randrange(len(good))
            raw = good[:i] + self.rng.choice([b"{", b"}", b"]", b",", b":", b"\\", b"\x00", b"\xff", b'"']) + good[i:]
        elif r < 0.85:
            raw = bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(1, 64)))
        else:
            raw = self.rng.choice([b"{'single': 'quotes'}", b"{a:1}", b"[1,2", b"NaN", b"{\"a\":01}", b"\"unterminated",
                                   b"{\"a\":1}{\"b\":2}", b"tru", b"{\"metadata\":{\"name\":\"x\",}}"])
        try:
            orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass
        else:
            raw = b"{" + raw
        path, _ = self._target()
        method, ctype, url = self.rng.choice([
            ("POST", JSON, PODS), ("PUT", JSON, f"{PODS}/target"), ("PATCH", MERGE, path), ("PATCH", SMP, path),
            ("PATCH", JSONPATCH, path), ("POST", JSON, f"{PODS}/target/binding"),
            ("POST", JSON, f"{PODS}/target/eviction"), ("DELETE", JSON, f"{PODS}/target"),
        ])
        return Case("malformed-json", method, url, raw, ctype)

    def malformed_msgpack(self) -> Case:
        good = msgpack.packb(pod(self.fresh("mm")), use_bin_type=True)
        for _ in range(100):
            if self.rng.random() < 0.6:
                raw = good[: self.rng.randrange(1, len(good) - 1)]
            else:
                raw = bytes(self.rng.randrange(256) for _ in range(self.rng.randrange(1, 48)))
            try:
                value = msgpack.unpackb(raw, raw=False, strict_map_key=False)
            except Exception:
                break
            if not isinstance(value, dict):
                break  # decodes, but not to an object: still a 400
        else:
            raw = b"\xc1"  # never valid msgpack
        method, url = self.rng.choice([("POST", PODS), ("PUT", f"{PODS}/target"), ("PATCH", f"{PODS}/target")])
        return Case("malformed-msgpack", method, url, raw, MSGPACK)

    def bad_yaml(self) -> Case:
        """YAML that does not parse, or parses to what JSON cannot carry (or to no object)."""
        name = self.fresh("my")
        value = self.rng.choice([
            b"!!binary aGVsbG8=", b".nan", b"-.inf", b"!!set {a, b}", b"[unclosed", b"{a: 1", b"*undefined",
            b"!!python/object:os.system x", b"!!float abc", b"!!int 1.5", b"!!bool maybe", b"!!timestamp nope",
        ])
        raw = b"apiVersion: v1\nkind: Pod\nmetadata:\n  name: %s\n  annotations: {a: %s}\nspec: {}\n" % (
            name.encode(), value)
        if self.rng.random() < 0.2:
            raw = self.rng.choice([b"- just\n- a list\n", b"42", b"null", b"\t bad: indent", b":", b"? [a, b]\n: c\n"])
        ctype, method, url = self.rng.choice([
            ("application/yaml", "POST", PODS), ("application/yaml", "PUT", f"{PODS}/target"),
            (APPLY, "PATCH", f"{PODS}/{name}"), (APPLY, "PATCH", f"{PODS}/target"),
        ])
        return Case("bad-yaml", method, url, raw, ctype, {"fieldManager": "fuzz"} if ctype == APPLY else {})

    def wrong_type(self) -> Case:
        collection, factory, fields = self.rng.choice(TYPED_FIELDS)
        path, kind = self.rng.choice(fields)
        value = self.rng.choice(WRONG_VALUES[kind])
        if path == ("spec", "containers") and isinstance(value, int):
            value = "x"  # a number here is a known 500: test_pod_spec_wrong_type_is_invalid
        if self.rng.random() < 0.7:
            body = factory(self.fresh("wt"))
            set_path(body, path, value)
            return Case(f"wrong-type {'.'.join(map(str, path))}", "POST", collection, dumps(body))
        name = "fuzz-node" if collection == NODES else "target"
        body = factory(name)
        body["metadata"]["resourceVersion"] = self.current_rv[collection]
        set_path(body, path, value)
        return Case(f"wrong-type-update {'.'.join(map(str, path))}", "PUT", f"{collection}/{name}", dumps(body))

    def unknown_field(self) -> Case:
        collection, factory, _ = self.rng.choice(TYPED_FIELDS)
        key = self.rng.choice(["bogus", "specc", "Replicas", "x-y", "metadata2", "nodename"])
        where: tuple[str | int, ...] = self.rng.choice([(), ("spec",), ("metadata",)])
        if collection == PODS and self.rng.random() < 0.5:
            where = ("spec", "containers", 0)
        mode = self.rng.random()
        if mode < 0.5:
            body = factory(self.fresh("uf"))
            set_path(body, (*where, key), self.rng.choice([1, "x", {"a": 1}, [1]]))
            return Case(f"unknown-field {key}", "POST", collection, dumps(body), params={"fieldValidation": "Strict"})
        name = "fuzz-node" if collection == NODES else "target"
        if mode < 0.75:
            body = factory(name)
            body["metadata"]["resourceVersion"] = self.current_rv[collection]
            set_path(body, (*where, key), 1)
            return Case(f"unknown-field-update {key}", "PUT", f"{collection}/{name}", dumps(body),
                        params={"fieldValidation": "Strict"})
        patch: Json = {}
        cursor = patch
        for step in where:
            if isinstance(step, int):
                break
            cursor = cursor.setdefault(step, {})
        cursor[key] = 1
        return Case(f"unknown-field-patch {key}", "PATCH", f"{collection}/{name}", dumps(patch), MERGE,
                    params={"fieldValidation": "Strict"})

    def invalid_name(self) -> Case:
        name: Any = self.rng.choice([*INVALID_NAMES, 5, True, ["x"], {"n": 1}])
        collection, factory, _ = self.rng.choice(TYPED_FIELDS)
        body = factory("placeholder")
        body["metadata"]["name"] = name
        if self.rng.random() < 0.2:
            body["metadata"] = {"generateName": self.rng.choice(["UPPER-", "a_b-", 5])}
        return Case("invalid-name", "POST", collection, dumps(body))

    def missing_namespace(self) -> Case:
        ns = self.fresh("no-such-ns")
        r = self.rng.random()
        if r < 0.5:
            return Case("missing-namespace", "POST", f"/api/v1/namespaces/{ns}/pods", dumps(pod("p")))
        if r < 0.75:
            return Case("missing-namespace", "POST", f"/apis/apps/v1/namespaces/{ns}/deployments",
                        dumps(deployment("d")))
        return Case("missing-namespace-get", "GET", f"/api/v1/namespaces/{ns}/pods/p", None, None)

    def unknown_resource(self) -> Case:
        word = self.rng.choice(["foos", "podz", "Pods", "pod", "nodess", "deployment", "leases2", "x"])
        path = self.rng.choice([
            f"/api/v1/{word}", f"/api/v1/namespaces/{NS}/{word}", f"/apis/apps/v1/namespaces/{NS}/{word}",
            f"/apis/nogroup.example.com/v1/{word}", "/api/v2/pods", f"/apis/apps/v9/namespaces/{NS}/deployments",
            f"{PODS}/target/{word}", f"{PODS}/target/status/extra", f"/api/v1/nodes/fuzz-node/{word}",
            f"/api/v1/namespaces/{NS}/nodes/fuzz-node", "/api/v1/pods/target", "/apis/nogroup", f"/api/{word}",
            f"{DEPLOYS}/target/scale/more/path",
        ])
        method = self.rng.choice(["GET", "POST", "PUT", "PATCH", "DELETE"])
        return Case("unknown-resource", method, path, b"{}" if method != "GET" else None,
                    MERGE if method == "PATCH" else JSON)

    def bad_verb(self) -> Case:
        method, path = self.rng.choice([
            ("PUT", PODS), ("PATCH", PODS), ("OPTIONS", PODS), ("POST", f"{PODS}/target"),
            ("OPTIONS", f"{PODS}/target"), ("DELETE", f"{PODS}/target/status"), ("POST", f"{PODS}/target/status"),
            ("GET", f"{PODS}/target/binding"), ("PUT", f"{PODS}/target/eviction"), ("GET", f"{PODS}/target/eviction"),
            ("DELETE", f"{DEPLOYS}/target/scale"), ("POST", f"{DEPLOYS}/target/scale"), ("PUT", NODES),
            ("POST", f"{NODES}/fuzz-node"),
        ])
        return Case("bad-verb", method, path, b"{}" if method not in ("GET", "OPTIONS") else None,
                    MERGE if method == "PATCH" else JSON)

    def bad_patch(self) -> Case:
        path = f"{PODS}/target"
        choice = self.rng.randrange(12)
        missing = "/" + "/".join(self.rng.choice(["metadata", "spec", "zz"]) for _ in range(2)) + "/nope"
        ops: list[tuple[str, Any]] = [
            (JSONPATCH, [{"op": "test", "path": "/metadata/name", "value": "other"}]),
            (JSONPATCH, [{"op": "remove", "path": missing}]),
            (JSONPATCH, [{"op": "replace", "path": missing, "value": 1}]),
            (JSONPATCH, [{"op": "add", "path": "/spec/containers/99", "value": {}}]),
            (JSONPATCH, [{"op": self.rng.choice(["bogus", "", "ADD", 5])}]),
            (JSONPATCH, {"op": "add", "path": "/x", "value": 1}),
            (JSONPATCH, [{"op": "move", "from": "/nope", "path": "/x"}]),
            (MERGE, [1, 2]),
            (SMP, {"spec": {"containers": [{"image": "no-merge-key"}]}}),
            (SMP, {"spec": {"$setElementOrder/containers": "x"}}),
            (MERGE, {"metadata": {"name": "renamed"}}),
            (JSONPATCH, [{"op": "remove", "path": "/metadata"}]),
        ]
        ctype, body = ops[choice]
        return Case("bad-patch", "PATCH", path, dumps(body), ctype)

    def stale(self) -> Case:
        path, _ = self._target()
        collection = path.rsplit("/", 1)[0]
        rv = self.stale_rv()
        r = self.rng.random()
        if r < 0.4:
            name = path.rsplit("/", 1)[1]
            factory = next(f for c, f, _ in TYPED_FIELDS if c == collection)
            body = factory(name)
            body["metadata"]["resourceVersion"] = rv
            return Case("stale-update", "PUT", path, dumps(body))
        if r < 0.7:
            return Case("stale-patch", "PATCH", path, dumps({"metadata": {"resourceVersion": rv,
                                                                          "labels": {"stale": "yes"}}}),
                        self.rng.choice([MERGE, SMP]))
        if r < 0.85:
            return Case("stale-delete", "DELETE", path, dumps({"preconditions": {"resourceVersion": rv}}))
        if r < 0.95:
            return Case("stale-delete-uid", "DELETE", path,
                        dumps({"preconditions": {"uid": "00000000-0000-4000-8000-000000000000"}}))
        # An Exact list at an older revision inside the window is a good request (paging reads
        # it); at "0" it is a bad one.
        return Case("list-exact-zero", "GET", collection, None, None,
                    params={"resourceVersion": "0", "resourceVersionMatch": "Exact"})

    def bad_selector(self) -> Case:
        collection = self.rng.choice([PODS, "/api/v1/pods", NODES, DEPLOYS])
        params: dict[str, str] = {}
        if self.rng.random() < 0.5:
            params["labelSelector"] = self.rng.choice(BAD_LABEL_SELECTORS)
        else:
            params["fieldSelector"] = self.rng.choice(BAD_FIELD_SELECTORS)
        r = self.rng.random()
        if r < 0.3:
            params["watch"] = "true"
        method = "DELETE" if r > 0.9 else "GET"
        return Case("bad-selector", method, collection, None, None, params=params)

    def bad_query(self) -> Case:
        r = self.rng.randrange(10)
        junk = self.rng.choice(["abc", "1.5.2", "true", "-", "ünï", "Strictly", ""])
        if r == 0:
            return Case("bad-query timeoutSeconds", "GET", PODS, None, None,
                        params={"watch": "1", "timeoutSeconds": junk or "x"})
        if r == 1:
            return Case("bad-query fieldValidation", "POST", PODS, dumps(pod(self.fresh("bq"))),
                        params={"fieldValidation": junk or "x"})
        if r == 2:
            return Case("bad-query dryRun", "POST", PODS, dumps(pod(self.fresh("bq"))),
                        params={"dryRun": junk or "x"})
        if r == 3:
            return Case("bad-query gracePeriodSeconds", "DELETE", f"{PODS}/target", None, None,
                        params={"gracePeriodSeconds": junk or "x"})
        if r == 4:
            return Case("bad-query propagationPolicy", "DELETE", f"{DEPLOYS}/target", None, None,
                        params={"propagationPolicy": junk or "x"})
        if r == 5:
            return Case("bad-query resourceVersionMatch", "GET", PODS, None, None,
                        params={"resourceVersionMatch": "NotOlderThan"})
        if r == 6:
            return Case("bad-query continue", "GET", PODS, None, None, params={"continue": junk or "x",
                                                                                "limit": "5"})
        if r == 7:
            return Case("bad-query sendInitialEvents", "GET", PODS, None, None,
                        params={"watch": "1", "sendInitialEvents": "true"})
        if r == 8:
            return Case("bad-query includeObject", "GET", PODS, None, None, params={"includeObject": "Bogus"},
                        accept="application/json;as=Table;v=v1;g=meta.k8s.io")
        return Case("bad-query watch resourceVersion", "GET", PODS, None, None,
                    params={"watch": "1", "resourceVersion": junk or "x"})

    def wrong_media_type(self) -> Case:
        ctype = self.rng.choice(["text/plain", "application/xml", "application/vnd.kubernetes.protobuf",
                                 "image/png", "multipart/form-data"])
        path, _ = self._target()
        if self.rng.random() < 0.5:
            return Case("wrong-media-type", "PATCH", path, b"{}", ctype)
        return Case("wrong-media-type", "POST", PODS, dumps(pod(self.fresh("mt"))), ctype)

    def missing_object(self) -> Case:
        name = self.fresh("ghost")
        method, path, ctype = self.rng.choice([
            ("GET", f"{PODS}/{name}", None), ("PUT", f"{PODS}/{name}", JSON), ("PATCH", f"{PODS}/{name}", MERGE),
            ("DELETE", f"{PODS}/{name}", None), ("POST", f"{PODS}/{name}/binding", JSON),
            ("POST", f"{PODS}/{name}/eviction", JSON), ("GET", f"{DEPLOYS}/{name}/scale", None),
            ("PATCH", f"{DEPLOYS}/{name}/scale", MERGE), ("PUT", f"{PODS}/{name}/status", JSON),
        ])
        body = None
        if method == "PUT":
            body = dumps(pod(name))
        elif method == "PATCH":
            body = dumps({"spec": {"replicas": 1}})
        elif method == "POST":
            body = dumps({"metadata": {"name": name}, "target": {"kind": "Node", "name": "n"}})
        return Case("missing-object", method, path, body, ctype)


# ---------------------------------------------------------------------------------- plumbing


@pytest.fixture(scope="module")
def shared_apiserver(tmp_path_factory: pytest.TempPathFactory,
                     apiserver_launcher: LaunchApiServer) -> Iterator[ApiServer]:
    """One apiserver process for every test of this module."""
    server = apiserver_launcher(tmp_path_factory.mktemp("bad-input"))
    yield server
    server.terminate()


@pytest.fixture
async def http(shared_apiserver: ApiServer) -> AsyncIterator[Http]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield Http(session, shared_apiserver.url)


class Http:
    def __init__(self, session: aiohttp.ClientSession, base: str) -> None:
        self.session = session
        self.base = base

    async def send(self, c: Case) -> Answer:
        headers = {"Accept": c.accept}
        if c.ctype is not None:
            headers["Content-Type"] = c.ctype
        async with self.session.request(c.method, self.base + c.path, data=c.body, headers=headers,
                                        params=c.params) as resp:
            return Answer(resp.status, resp.headers.get("Content-Type", ""), await resp.read())

    async def json(self, method: str, path: str, body: Any = None, *, ctype: str = JSON,
                   params: dict[str, str] | None = None) -> tuple[int, Json]:
        a = await self.send(Case("setup", method, path, dumps(body) if body is not None else None, ctype,
                                 params or {}))
        doc: Json = orjson.loads(a.body) if a.body else {}
        return a.status, doc

    async def revision(self) -> str:
        status, doc = await self.json("GET", "/api/v1/namespaces")
        assert status == 200
        rv: str = doc["metadata"]["resourceVersion"]
        return rv

    async def ready(self) -> bool:
        async with self.session.get(self.base + "/readyz") as resp:
            return resp.status == 200


def status_of(c: Case, a: Answer) -> Json:
    """Assert the answer is a failure Status with a documented code; return it."""
    assert a.status < 500, f"{a.status} for {c.describe()}: {a.body[:300]!r}"
    assert a.status in ALLOWED, f"undocumented {a.status} for {c.describe()}: {a.body[:300]!r}"
    if a.ctype.startswith(MSGPACK):
        doc = msgpack.unpackb(a.body, raw=False)
    else:
        assert a.ctype.startswith(JSON), f"content type {a.ctype!r} for {c.describe()}"
        doc = orjson.loads(a.body)
    assert isinstance(doc, dict), f"not an object for {c.describe()}: {a.body[:300]!r}"
    assert doc.get("kind") == "Status" and doc.get("apiVersion") == "v1", (c.describe(), doc)
    assert doc.get("status") == "Failure" and doc.get("code") == a.status, (c.describe(), doc)
    assert isinstance(doc.get("reason"), str) and doc["reason"], (c.describe(), doc)
    assert isinstance(doc.get("message"), str), (c.describe(), doc)
    return doc


async def seed_targets(http: Http) -> dict[str, str]:
    """The objects the fuzz aims at (created once per server); returns their current revisions."""
    status, _ = await http.json("GET", f"/api/v1/namespaces/{NS}")
    if status == 404:
        for path, body in [("/api/v1/namespaces", {"metadata": {"name": NS}}),
                           (PODS, pod("target", node="fuzz-node")), (NODES, node("fuzz-node")),
                           (DEPLOYS, deployment("target")), (LEASES, lease("target"))]:
            created, doc = await http.json("POST", path, body)
            assert created == 201, doc
    out = {}
    for collection in (PODS, NODES, DEPLOYS, LEASES):
        name = "fuzz-node" if collection == NODES else "target"
        status, doc = await http.json("GET", f"{collection}/{name}")
        assert status == 200, doc
        out[collection] = doc["metadata"]["resourceVersion"]
    return out


async def snapshot(http: Http) -> list[Json]:
    objs = []
    for path in (f"{PODS}/target", f"{NODES}/fuzz-node", f"{DEPLOYS}/target", f"{LEASES}/target"):
        status, doc = await http.json("GET", path)
        assert status == 200
        objs.append(doc)
    return objs


# ---------------------------------------------------------------------------------- the fuzz


async def test_fuzz_every_bad_request_is_a_documented_status(http: Http) -> None:
    current = await seed_targets(http)
    before = await snapshot(http)
    rv0 = await http.revision()
    rng = random.Random(FUZZ_SEED)
    # Every revision up to the current one is stale for the targets, except their own.
    live = set(current.values())
    stale_pool = [str(v) for v in range(1, int(rv0) + 50) if str(v) not in live] + ["0", "999999999"]

    fuzzer = Fuzzer(rng, lambda: rng.choice(stale_pool), current)
    cases = [fuzzer.case() for _ in range(FUZZ_CASES)]
    cases += [Case("too-large", method, path, b'{"metadata":{"name":"big"},"x":"' + b"x" * (MAX_BODY + extra) + b'"}',
                   ctype) for (method, path, ctype), extra in zip(
                       [("POST", PODS, JSON), ("PUT", f"{PODS}/target", JSON), ("PATCH", f"{PODS}/target", MERGE),
                        ("POST", PODS, MSGPACK)], [1, 100, 4096, 65536], strict=True)]
    sem = asyncio.Semaphore(CONCURRENCY)
    seen: dict[str, set[int]] = {}
    failures: list[str] = []

    async def one(c: Case) -> None:
        async with sem:
            a = await http.send(c)
        try:
            status_of(c, a)
        except AssertionError as exc:
            failures.append(str(exc).splitlines()[0])
        seen.setdefault(c.what.split(" ")[0], set()).add(a.status)

    await asyncio.gather(*(one(c) for c in cases))
    assert not failures, f"{len(failures)} bad answers, e.g.:\n" + "\n".join(sorted(set(failures))[:25])

    assert await http.ready()
    assert await http.revision() == rv0, "a request that failed changed the store"
    assert await snapshot(http) == before
    # The fuzz reached every class (a generator that silently produced nothing would hide bugs).
    for what in ("malformed-json", "malformed-msgpack", "wrong-type", "unknown-field", "invalid-name",
                 "missing-namespace", "unknown-resource", "bad-verb", "bad-patch", "stale-update", "bad-selector",
                 "bad-query", "wrong-media-type", "missing-object", "too-large"):
        assert what in seen, f"no {what} case ran"
    assert seen["too-large"] == {413}
    assert seen["stale-update"] == {409}


# ---------------------------------------------------------------------------------- one per class


EXACT: list[tuple[str, Case, int, str]] = [
    ("malformed-json", Case("", "POST", PODS, b'{"metadata": {"name": "x"'), 400, "BadRequest"),
    ("malformed-msgpack", Case("", "POST", PODS, b"\x82\xa8metadata", MSGPACK), 400, "BadRequest"),
    ("body-not-an-object", Case("", "POST", PODS, b"[1, 2]"), 400, "BadRequest"),
    ("wrong-type", Case("", "POST", PODS, dumps({**pod("wt"), "spec": {"containers": "nginx"}})), 400,
     "BadRequest"),
    ("spec-not-an-object", Case("", "POST", PODS, dumps({**pod("wt2"), "spec": "x"})), 400, "BadRequest"),
    ("kind-mismatch", Case("", "POST", PODS, dumps({**pod("km"), "kind": "Node"})), 400, "BadRequest"),
    ("unknown-field-strict", Case("", "POST", PODS, dumps({**pod("uf"), "bogus": 1}),
                                  params={"fieldValidation": "Strict"}), 400, "BadRequest"),
    ("invalid-name", Case("", "POST", PODS, dumps(pod("Bad_Name"))), 422, "Invalid"),
    ("missing-namespace", Case("", "POST", "/api/v1/namespaces/nowhere/pods", dumps(pod("p"))), 404, "NotFound"),
    ("too-large", Case("", "POST", PODS, b'{"x":"' + b"x" * (MAX_BODY + 1) + b'"}'), 413, "RequestEntityTooLarge"),
    ("unknown-resource", Case("", "GET", "/api/v1/foos", None, None), 404, "NotFound"),
    ("unknown-group", Case("", "GET", "/apis/nogroup.example.com/v1/things", None, None), 404, "NotFound"),
    ("unknown-subresource", Case("", "GET", f"{PODS}/target/logsx", None, None), 404, "NotFound"),
    ("verb-on-collection", Case("", "PUT", PODS, b"{}"), 405, "MethodNotAllowed"),
    ("verb-on-item", Case("", "POST", f"{PODS}/target", b"{}"), 405, "MethodNotAllowed"),
    ("unknown-media-type", Case("", "POST", PODS, dumps(pod("mt")), "text/plain"), 415, "UnsupportedMediaType"),
    ("unknown-patch-type", Case("", "PATCH", f"{PODS}/target", b"{}", JSON), 415, "UnsupportedMediaType"),
    # Protobuf bodies are decoded; a truncated one is a 400 (a custom resource's is a 415).
    ("protobuf-truncated-body", Case("", "POST", PODS, b"k8s\x00\x0a", "application/vnd.kubernetes.protobuf"), 400,
     "BadRequest"),
    ("json-patch-test-fails", Case("", "PATCH", f"{PODS}/target",
                                   dumps([{"op": "test", "path": "/metadata/name", "value": "zz"}]), JSONPATCH),
     422, "Invalid"),
    ("json-patch-missing-path", Case("", "PATCH", f"{PODS}/target", dumps([{"op": "remove", "path": "/nope"}]),
                                     JSONPATCH), 422, "Invalid"),
    ("json-patch-bad-op", Case("", "PATCH", f"{PODS}/target", dumps([{"op": "bogus", "path": "/x"}]), JSONPATCH),
     400, "BadRequest"),
    ("merge-patch-not-object", Case("", "PATCH", f"{PODS}/target", b"[1]", MERGE), 400, "BadRequest"),
    ("smp-no-merge-key", Case("", "PATCH", f"{PODS}/target", dumps({"spec": {"containers": [{"image": "i"}]}}),
                              SMP), 400, "BadRequest"),
    ("patch-missing-object", Case("", "PATCH", f"{PODS}/ghost", b"{}", MERGE), 404, "NotFound"),
    ("stale-update", Case("", "PUT", f"{PODS}/target", dumps({**pod("target"), "metadata": {
        "name": "target", "resourceVersion": "1"}})), 409, "Conflict"),
    ("stale-patch", Case("", "PATCH", f"{PODS}/target", dumps({"metadata": {"resourceVersion": "1"}}), MERGE),
     409, "Conflict"),
    ("stale-delete-precondition", Case("", "DELETE", f"{PODS}/target",
                                       dumps({"preconditions": {"resourceVersion": "1"}})), 409, "Conflict"),
    ("already-exists", Case("", "POST", PODS, dumps(pod("target"))), 409, "AlreadyExists"),
    ("list-exact-zero", Case("", "GET", PODS, None, None, params={"resourceVersion": "0",
                                                                 "resourceVersionMatch": "Exact"}),
     400, "BadRequest"),
    ("continue-token", Case("", "GET", PODS, None, None, params={"continue": "abc", "limit": "1"}), 400,
     "BadRequest"),
    ("bad-label-selector", Case("", "GET", PODS, None, None, params={"labelSelector": "a in (b"}), 400,
     "BadRequest"),
    ("unsupported-field-selector", Case("", "GET", PODS, None, None, params={"fieldSelector": "spec.bogus=1"}),
     400, "BadRequest"),
    ("bad-field-selector-watch", Case("", "GET", PODS, None, None, params={"fieldSelector": "nonsense",
                                                                          "watch": "1"}), 400, "BadRequest"),
    ("rv-match-without-rv", Case("", "GET", PODS, None, None, params={"resourceVersionMatch": "NotOlderThan"}),
     400, "BadRequest"),
    ("bad-timeout-seconds", Case("", "GET", PODS, None, None, params={"watch": "1", "timeoutSeconds": "abc"}),
     400, "BadRequest"),
    ("bad-watch-rv", Case("", "GET", PODS, None, None, params={"watch": "1", "resourceVersion": "abc"}), 400,
     "BadRequest"),
    ("bad-field-validation", Case("", "POST", PODS, dumps(pod("fv")), params={"fieldValidation": "Loose"}), 422,
     "Invalid"),
    ("bad-dry-run", Case("", "POST", PODS, dumps(pod("dr")), params={"dryRun": "Some"}), 422, "Invalid"),
    ("bad-grace-period", Case("", "DELETE", f"{PODS}/target", None, None, params={"gracePeriodSeconds": "x"}), 400,
     "BadRequest"),
    ("bad-propagation", Case("", "DELETE", f"{PODS}/target", None, None, params={"propagationPolicy": "Up"}), 400,
     "BadRequest"),
    ("send-initial-events-unsupported", Case("", "GET", PODS, None, None, params={"watch": "1",
                                                                                 "sendInitialEvents": "true"}),
     422, "Invalid"),
    ("missing-object", Case("", "GET", f"{PODS}/ghost", None, None), 404, "NotFound"),
    ("rebind", Case("", "POST", f"{PODS}/target/binding", dumps({"metadata": {"name": "target"},
                                                                "target": {"kind": "Node", "name": "other"}})),
     409, "Conflict"),
]


@pytest.mark.parametrize(("case", "code", "reason"), [pytest.param(c, code, reason, id=name)
                                                      for name, c, code, reason in EXACT])
async def test_bad_input_class(http: Http, case: Case, code: int, reason: str) -> None:
    await seed_targets(http)
    rv0 = await http.revision()
    a = await http.send(case)
    doc = status_of(case, a)
    assert (a.status, doc["reason"]) == (code, reason), doc
    assert await http.revision() == rv0
    assert await http.ready()


# ------------------------------------------------------------------- regressions the fuzz found


@pytest.mark.parametrize(("path", "value"), [
    (("spec", "containers", 0, "resources"), True), (("spec", "containers", 0, "resources"), "x"),
    (("spec", "containers", 0, "resources"), ["a"]), (("spec", "containers", 0, "resources"), {"requests": "x"}),
    (("spec", "containers", 0, "resources"), {"limits": [1]}), (("spec", "containers"), 5),
    (("spec", "containers"), True)],
    ids=["resources-bool", "resources-string", "resources-list", "requests-string", "limits-list",
         "containers-int", "containers-bool"])
async def test_pod_spec_wrong_type_is_refused(http: Http, path: tuple[str | int, ...], value: Any) -> None:
    """A value of the wrong JSON type: the 400 of Go's decode, as upstream (it never reaches validation)."""
    await seed_targets(http)
    body = pod("res")
    set_path(body, path, value)
    c = Case("resources", "POST", PODS, dumps(body))
    a = await http.send(c)
    if a.status == 201:
        await http.json("DELETE", f"{PODS}/res", params={"gracePeriodSeconds": "0"})
    doc = status_of(c, a)
    assert (a.status, doc["reason"]) == (400, "BadRequest"), doc
    assert "cannot be handled as a Pod: json: cannot unmarshal" in doc["message"], doc


async def test_namespaces_have_no_deletecollection(start_apiserver: StartApiServer) -> None:
    server = await start_apiserver()
    async with aiohttp.ClientSession() as session:
        h = Http(session, server.url)
        c = Case("ns-deletecollection", "DELETE", "/api/v1/namespaces", None, None)
        a = await h.send(c)
        status, _ = await h.json("GET", "/api/v1/namespaces/kube-system")
        assert status == 200, "kube-system was deleted"
        status_of(c, a)
        assert a.status == 405


@pytest.mark.parametrize("value", [b"\x00\x01", msgpack.ExtType(5, b"ab"), {1: 2}],
                         ids=["bin", "ext", "int-key"])
async def test_msgpack_non_json_values_are_rejected(start_apiserver: StartApiServer, value: Any) -> None:
    server = await start_apiserver()
    async with aiohttp.ClientSession() as session:
        h = Http(session, server.url)
        body = pod("mp")
        body["spec"]["extra"] = value
        c = Case("msgpack-bin", "POST", "/api/v1/namespaces/default/pods",
                 msgpack.packb(body, use_bin_type=True), MSGPACK)
        a = await h.send(c)
        status, _ = await h.json("GET", "/api/v1/namespaces/default/pods")
        assert status == 200, "the pods list is broken for JSON clients"
        status_of(c, a)
        assert a.status == 400


YAML_POD = b"""apiVersion: v1
kind: Pod
metadata:
  name: %s
  annotations: {%s}
spec:
  containers: [{name: c, image: nginx}]
"""


@pytest.mark.parametrize(("annotations", "expected"), [
    (b"1: one, true: t, 2.5: x", {"1": "one", "true": "t", "2.5": "x"}),
    (b"when: 2024-01-01, at: 2024-01-01T10:00:00Z", {"when": "2024-01-01", "at": "2024-01-01T10:00:00Z"}),
], ids=["non-string-keys", "timestamps"])
@pytest.mark.parametrize("how", ["create", "apply"])
async def test_yaml_bodies_become_json_as_kubernetes_reads_them(start_apiserver: StartApiServer, how: str,
                                                                 annotations: bytes, expected: Json) -> None:
    """YAML to JSON as the real server does: keys become strings, timestamps stay strings."""
    server = await start_apiserver()
    async with aiohttp.ClientSession() as session:
        h = Http(session, server.url)
        if how == "create":
            c = Case("yaml", "POST", "/api/v1/namespaces/default/pods", YAML_POD % (b"y", annotations),
                     "application/yaml")
        else:
            c = Case("yaml", "PATCH", "/api/v1/namespaces/default/pods/y", YAML_POD % (b"y", annotations),
                     "application/apply-patch+yaml", params={"fieldManager": "t"})
        a = await h.send(c)
        assert a.status == 201, a.body[:300]
        status, doc = await h.json("GET", "/api/v1/namespaces/default/pods/y")
        assert status == 200 and doc["metadata"]["annotations"] == expected


@pytest.mark.parametrize("annotations", [b"a: !!binary aGVsbG8=", b"a: .nan", b"a: !!set {x}"],
                         ids=["binary", "nan", "set"])
async def test_yaml_values_json_cannot_carry_are_rejected(start_apiserver: StartApiServer,
                                                           annotations: bytes) -> None:
    server = await start_apiserver()
    async with aiohttp.ClientSession() as session:
        h = Http(session, server.url)
        for media, method, path in (("application/yaml", "POST", "/api/v1/namespaces/default/pods"),
                                    ("application/apply-patch+yaml", "PATCH", "/api/v1/namespaces/default/pods/z")):
            c = Case("yaml", method, path, YAML_POD % (b"z", annotations), media, params={"fieldManager": "t"})
            a = await h.send(c)
            status_of(c, a)
            assert a.status == 400
        status, doc = await h.json("GET", "/api/v1/namespaces/default/pods")
        assert status == 200 and doc["items"] == []


@pytest.mark.parametrize("value", ["nan", "1e400", "1e300"])
async def test_watch_timeout_seconds_must_be_finite(http: Http, value: str) -> None:
    c = Case("timeoutSeconds", "GET", PODS, None, None, params={"watch": "1", "timeoutSeconds": value})
    try:
        a = await asyncio.wait_for(http.send(c), 2)
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, TimeoutError) as exc:
        raise AssertionError(f"broken or hung response for timeoutSeconds={value}: {exc!r}") from exc
    finally:
        assert await http.ready()
    status_of(c, a)
    assert a.status == 400


@pytest.mark.parametrize("params", [{"limit": "abc"}, {"resourceVersion": "abc"},
                                    {"resourceVersion": "1", "resourceVersionMatch": "Bogus"}],
                         ids=["limit", "resourceVersion", "resourceVersionMatch"])
async def test_list_rejects_malformed_query_values(http: Http, params: dict[str, str]) -> None:
    c = Case("list-query", "GET", PODS, None, None, params=params)
    status_of(c, await http.send(c))


async def test_strict_rejects_duplicate_fields(http: Http) -> None:
    raw = b'{"metadata":{"name":"dup-a"},"metadata":{"name":"dup-b"},"spec":{"containers":[{"name":"c","image":"i"}]}}'
    c = Case("duplicate-fields", "POST", f"/api/v1/namespaces/{NS}/pods", raw, params={"fieldValidation": "Strict"})
    await seed_targets(http)
    a = await http.send(c)
    if a.status == 201:
        await http.json("DELETE", f"{PODS}/dup-b")
    status_of(c, a)


async def test_lease_micro_time_is_validated(http: Http) -> None:
    await seed_targets(http)
    body = lease("bad-time")
    body["spec"]["renewTime"] = "yesterday"
    c = Case("microtime", "POST", LEASES, dumps(body))
    a = await http.send(c)
    if a.status == 201:
        await http.json("DELETE", f"{LEASES}/bad-time")
    status_of(c, a)


async def test_pod_tolerations_wrong_type_is_invalid(http: Http) -> None:
    await seed_targets(http)
    body = pod("tol")
    body["spec"]["tolerations"] = "x"
    c = Case("tolerations", "POST", PODS, dumps(body))
    a = await http.send(c)
    if a.status == 201:
        await http.json("DELETE", f"{PODS}/tol", params={"gracePeriodSeconds": "0"})
    status_of(c, a)


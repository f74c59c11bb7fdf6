"""Hostile HTTP against a running apiserver: hypothesis strategies, a raw HTTP/1.1 client, the four checks.

Shared by the CI fuzz (`test_fuzz_hostile.py`, a bounded budget) and the long run
(`scripts/fuzz`, which runs this module as a program and writes what it finds to a file).

What is generated (`requests()`): bodies built from the served OpenAPI schemas of a few kinds
with hostile leaves and shapes (wrong types, control characters, huge numbers, deep nesting,
unknown fields, YAML with aliases, bad quantities and operators), under any of the write verbs,
with hostile query parameters, Content-Type, Content-Encoding and Accept headers, hostile paths,
and broken framing (request smuggling, bad chunks, oversized headers, garbage request lines).

What is checked for every request (`Checker.check`):

* it is answered: never a dropped connection or a timeout;
* never a 5xx; a well-framed request that fails gets a metav1.Status whose code is the
  response's; a request the HTTP parser refuses gets a 4xx (as Go's net/http, a plain 400);
* a write that failed left the store as it was (its revision did not move), and a request
  built to be invalid was not accepted;
* afterwards (`Checker.final`): the apiserver is the same process, alive and ready, and its
  resident memory grew by less than `MAX_RSS_GROWTH`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, urlencode

import msgpack
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

from kubemesh.services.machinery.certs import ensure_certs
from kubemesh.services.mesh.state import free_port

NS: Final = "fuzz"
TOKEN: Final = "fuzz-token"
MAX_RSS_GROWTH: Final = 256 * 1024 * 1024
TIMEOUT: Final = 10.0
WRITES: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON: Final = "application/json"

# (collection path, kind, apiVersion, OpenAPI schema name) of the kinds the bodies are built for.
KINDS: Final = (
    (f"/api/v1/namespaces/{NS}/configmaps", "ConfigMap", "v1", "io.k8s.kubemesh.models.v1.ConfigMap"),
    (f"/api/v1/namespaces/{NS}/pods", "Pod", "v1", "io.k8s.kubemesh.models.v1.Pod"),
    (f"/api/v1/namespaces/{NS}/secrets", "Secret", "v1", "io.k8s.kubemesh.models.v1.Secret"),
    (f"/apis/apps/v1/namespaces/{NS}/deployments", "Deployment", "apps/v1", "io.k8s.kubemesh.models.v1.Deployment"),
    ("/api/v1/nodes", "Node", "v1", "io.k8s.kubemesh.models.v1.Node"),
    (f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases", "Lease", "coordination.k8s.io/v1",
     "io.k8s.kubemesh.models.v1.Lease"),
)
TARGET: Final = "target"
"""The one object of each kind that exists (updates, patches and deletes aim at it)."""

CONTENT_TYPES: Final = (
    JSON, "application/yaml", "application/merge-patch+json", "application/strategic-merge-patch+json",
    "application/json-patch+json", "application/apply-patch+yaml", "application/vnd.kubernetes.protobuf",
    "application/vnd.kubemesh.msgpack", "*/*", "text/plain", "", "application/json; charset=utf-16",
    "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", "application/json;;;q=x",
    "a" * 300,
)
HOSTILE_STRINGS: Final = (
    "", " ", "bo\ngus", "\x00", "a\x00b", "\r\n", "\u202e", "\ud7ff", "💥", "../../etc", "%00", "x" * 300,
    "lots", "1e400", "-1", "NaN", "Bogus", "x/y/z", "a/b", "A_B", "\t", "\"'\\", "${jndi:x}", "\x1b[31m",
    "99999999999999999999999", "true", "null",
)
QUERY_KEYS: Final = (
    "dryRun", "fieldManager", "fieldValidation", "gracePeriodSeconds", "propagationPolicy", "resourceVersion",
    "resourceVersionMatch", "limit", "continue", "labelSelector", "fieldSelector", "timeoutSeconds", "force",
    "includeObject", "orphanDependents", "watch", "allowWatchBookmarks", "sendInitialEvents", "pretty",
)


@dataclass(frozen=True)
class Request:
    """One request as bytes on the wire, and what is expected of it."""

    what: str
    raw: bytes
    method: str
    path: str
    must_fail: bool
    """Built to be invalid: a 2xx is a finding."""
    framed: bool = True
    """Well-framed HTTP: a failure must be a metav1.Status (else a parser-level 4xx is enough)."""

    def describe(self) -> str:
        shown = self.raw if len(self.raw) <= 600 else self.raw[:600] + b"...(%d bytes)" % len(self.raw)
        return f"[{self.what}] {shown!r}"


@dataclass
class Answer:
    status: int | None
    """None: no answer (the connection dropped or timed out)."""
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    error: str = ""
    streaming: bool = False
    """A watch stream's answer: its status line and headers (the stream itself never ends)."""


# ------------------------------------------------------------------------------- building requests


def http_request(method: str, target: str, *, headers: dict[str, str] | None = None, body: bytes = b"",
                 version: str = "HTTP/1.1", host: str = "127.0.0.1") -> bytes:
    """A well-framed request (Content-Length set from the body)."""
    lines = [f"{method} {target} {version}", f"Host: {host}", f"Authorization: Bearer {TOKEN}"]
    for k, v in (headers or {}).items():
        lines.append(f"{k}: {v}")
    if body or method in WRITES:
        lines.append(f"Content-Length: {len(body)}")
    head = "\r\n".join(lines) + "\r\n\r\n"
    return head.encode("utf-8", "surrogateescape") + body


def _leaf(draw: Callable[..., Any]) -> Any:
    return draw(st.one_of(
        st.sampled_from(HOSTILE_STRINGS), st.integers(min_value=-(2**70), max_value=2**70),
        st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none(),
        st.text(max_size=20), st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=5),
                                                                                   st.integers(), max_size=3)))


def _from_schema(draw: Callable[..., Any], schemas: dict[str, Any], schema: dict[str, Any], depth: int) -> Any:
    """A value shaped by an OpenAPI schema, with a hostile leaf now and then."""
    if depth > 6 or draw(st.integers(0, 9)) == 0:
        return _leaf(draw)
    if "allOf" in schema:
        ref = schema["allOf"][0].get("$ref", "")
        return _from_schema(draw, schemas, schemas.get(ref.rsplit("/", 1)[-1], {}), depth + 1)
    if "$ref" in schema:
        return _from_schema(draw, schemas, schemas.get(schema["$ref"].rsplit("/", 1)[-1], {}), depth + 1)
    kind = schema.get("type")
    if kind == "object" and "properties" in schema:
        props = sorted(schema["properties"])
        chosen = draw(st.lists(st.sampled_from(props), max_size=min(4, len(props)), unique=True)) if props else []
        out = {k: _from_schema(draw, schemas, schema["properties"][k], depth + 1) for k in chosen}
        if draw(st.integers(0, 7)) == 0:
            out[draw(st.sampled_from(HOSTILE_STRINGS))] = _leaf(draw)  # an unknown field, maybe with a hostile name
        return out
    if kind == "object":
        values = schema.get("additionalProperties") or {"type": "string"}
        keys = draw(st.lists(st.sampled_from((*HOSTILE_STRINGS[:16], "a", "cpu", "memory")), max_size=3))
        return {k: _from_schema(draw, schemas, values, depth + 1) for k in keys}
    if kind == "array":
        return [_from_schema(draw, schemas, schema.get("items", {}), depth + 1)
                for _ in range(draw(st.integers(0, 2)))]
    if kind == "string":
        return draw(st.one_of(st.sampled_from(HOSTILE_STRINGS), st.text(max_size=12)))
    if kind == "integer":
        return draw(st.integers(min_value=-(2**70), max_value=2**70))
    if kind == "boolean":
        return draw(st.booleans())
    return _leaf(draw)


def _mutations(draw: Callable[..., Any], name: str) -> tuple[str, dict[str, Any]]:
    """One mutation known to make an otherwise valid object invalid (upstream refuses it)."""
    which = draw(st.sampled_from((
        "finalizer", "quantity", "affinity", "name", "generate-name", "label", "big-data", "spec-type",
    )))
    meta: dict[str, Any] = {"name": name}
    if which == "finalizer":
        meta["finalizers"] = [draw(st.sampled_from(("x/y/z", "mine", "a b", "/x", "x/", "UPPER/_")))]
        return which, {"metadata": meta}
    if which == "quantity":
        return which, {"metadata": meta, "spec": {"containers": [
            {"name": "c", "image": "i", "resources": {"limits": {"cpu": draw(st.sampled_from(
                ("lots", "1Gb", "--1", "1..2", "0x10", "1e", "")))}}}]}}
    if which == "affinity":
        return which, {"metadata": meta, "spec": {"containers": [{"name": "c", "image": "i"}], "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "k", "operator": draw(st.sampled_from(("Bogus", "in", "", "Gt"))),
                                       "values": ["a", "b"]}]}]}}}}}
    if which == "name":
        meta["name"] = draw(st.sampled_from(("Bad_Name", "a" * 254, "-x", "x.", "a\x00b", "ü")))
        return which, {"metadata": meta}
    if which == "generate-name":
        return which, {"metadata": {"generateName": draw(st.sampled_from(("a\x01b-", "UP-", "_x-", "a" * 300)))}}
    if which == "label":
        meta["labels"] = {draw(st.sampled_from(("a b", "x/y/z", "", "-a"))): "v"}
        return which, {"metadata": meta}
    if which == "big-data":
        return which, {"metadata": meta, "data": {"a": "x" * (1024 * 1024 + 1)}}
    return which, {"metadata": meta, "spec": draw(st.sampled_from(("x", 5, [1], True)))}


MUTATION_KINDS: Final = {"finalizer": None, "quantity": "Pod", "affinity": "Pod", "name": None,
                         "generate-name": None, "label": None, "big-data": "ConfigMap", "spec-type": "Pod"}


@st.composite
def body_requests(draw: Callable[..., Any], schemas: dict[str, Any]) -> Request:
    """A write with a schema-shaped or known-invalid body, hostile options and headers."""
    collection, kind, api_version, schema_name = draw(st.sampled_from(KINDS))
    verb = draw(st.sampled_from(("POST", "PUT", "PATCH", "DELETE")))
    n = draw(st.integers(0, 10**6))
    must_fail = False
    if draw(st.booleans()):
        which, obj = _mutations(draw, f"m-{n}")
        wanted = MUTATION_KINDS[which]
        if wanted is not None:
            collection, kind, api_version, schema_name = next(k for k in KINDS if k[1] == wanted)
        must_fail = verb in ("POST", "PUT")
        what = f"mutation:{which}"
    else:
        obj = _from_schema(draw, schemas, schemas.get(schema_name, {}), 0)
        if not isinstance(obj, dict):
            obj = {"spec": obj}
        what = "schema"
    if isinstance(obj, dict):
        if draw(st.integers(0, 4)) > 0:
            obj.setdefault("apiVersion", api_version)
            obj.setdefault("kind", kind)
        meta = obj.get("metadata")
        if verb == "PUT" and isinstance(meta, dict) and what != "mutation:name" and draw(st.booleans()):
            meta["name"] = TARGET  # an update of the object that exists (a mutated name stays: it must fail)
    path = collection if verb == "POST" else f"{collection}/{TARGET}"
    ctype = draw(st.sampled_from(CONTENT_TYPES)) if draw(st.integers(0, 3)) == 0 else {
        "POST": JSON, "PUT": JSON, "DELETE": JSON,
        "PATCH": draw(st.sampled_from(("application/merge-patch+json", "application/strategic-merge-patch+json",
                                        "application/json-patch+json", "application/apply-patch+yaml")))}[verb]
    body, faithful = _encode(draw, obj, ctype)
    must_fail = must_fail and faithful and ctype in (JSON, "application/yaml")
    headers: dict[str, str] = {"Content-Type": ctype} if ctype else {}
    encoding = draw(st.sampled_from((None, None, None, "gzip", "deflate", "br", "identity", "gzip, deflate", "x")))
    if encoding is not None:
        headers["Content-Encoding"] = encoding
        if encoding in ("gzip", "deflate") and draw(st.booleans()):
            body = gzip.compress(body) if encoding == "gzip" else zlib.compress(body)
    if draw(st.integers(0, 3)) == 0:
        headers["Accept"] = draw(st.sampled_from((
            "application/vnd.kubemesh.msgpack", "application/json;as=Table;v=v1;g=meta.k8s.io", "*/*", "text/html",
            "application/json;as=Bogus", "application/vnd.kubernetes.protobuf")))
    query = draw(queries())
    if verb == "PATCH" and "apply-patch" in ctype and "fieldManager" not in query and draw(st.booleans()):
        query["fieldManager"] = "fuzz"
    target = path + ("?" + urlencode(query, safe="") if query else "")
    # aiohttp's HTTP parser refuses a `br` body itself (no Brotli decoder installed), with a plain
    # 400 before any handler runs, as for broken framing; upstream never decodes Content-Encoding.
    framed = encoding != "br"
    return Request(what=f"{what} {verb} {kind}", raw=http_request(verb, target, headers=headers, body=body),
                   method=verb, path=path, must_fail=must_fail, framed=framed)


def _encode(draw: Callable[..., Any], obj: Any, ctype: str) -> tuple[bytes, bool]:
    """The body's bytes, and whether they carry `obj` (not junk in its place)."""
    if "yaml" in ctype and draw(st.booleans()):
        return _to_yaml(obj, aliases=draw(st.integers(0, 7))), False
    if draw(st.integers(0, 9)) == 0:
        return draw(st.sampled_from((
            b"", b"{", b"[1,2]", b"null", b"\xff\xfe{}", b'{"a":1}{"b":2}', b'{"a":' * 2000, b"[" * 5000,
            b'{"metadata":{"name":"x","name":"y"}}', b"\x00" * 64, b'{"a":"\\ud800"}', b"1e999999",
        ))), False
    return json.dumps(obj, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass"), True


def _to_yaml(obj: Any, *, aliases: int) -> bytes:
    """The object as flow-style YAML, with `aliases` levels of nine-fold alias nesting appended."""
    text = "obj: " + json.dumps(obj) + "\n"
    if aliases:
        text += "l0: &l0 [x, x, x, x, x, x, x, x, x]\n"
        for i in range(1, aliases):
            text += f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]\n"
    return text.encode("utf-8", "surrogatepass")


@st.composite
def queries(draw: Callable[..., Any]) -> dict[str, str]:
    keys = draw(st.lists(st.sampled_from(QUERY_KEYS), max_size=3, unique=True))
    out: dict[str, str] = {}
    for k in keys:
        out[k] = draw(st.one_of(st.sampled_from(HOSTILE_STRINGS), st.sampled_from(("All", "Strict", "Warn", "1",
                                                                                   "0", "Orphan", "Exact"))))
    return out


@st.composite
def path_requests(draw: Callable[..., Any]) -> Request:
    """Reads and writes on hostile paths (encodings, traversal, unknown resources, odd subresources)."""
    collection = draw(st.sampled_from([k[0] for k in KINDS]))
    segment = draw(st.sampled_from((
        "..", ".", "%2e%2e", "%00", "a%00b", "%zz", "%ff", "a%2Fb", "ü", "x" * 400, "", "watch", "status", "scale",
        "binding", "eviction", "log", "proxy", "exec", "finalize", "%0d%0aX-Injected:%201", "target/../target",
    )))
    method = draw(st.sampled_from(("GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD", "TRACE")))
    prefix = draw(st.sampled_from(("", "/watch", "//", "/api/v1/../../")))
    path = draw(st.sampled_from((f"{collection}/{segment}", f"{collection}/{TARGET}/{segment}",
                                 f"{prefix}{collection}", f"/api/v1/namespaces/{segment}/pods",
                                 f"/apis/{segment}/v1/x", f"/api/{segment}")))
    body = b"{}" if method in WRITES else b""
    headers = {"Content-Type": JSON} if body else {}
    query = draw(queries())
    # percent-encoded as a client sends it (raw non-ASCII bytes in a path are the parser's to refuse)
    target = quote(path, safe="/%") + ("?" + urlencode(query, safe="") if query else "")
    return Request(what=f"path {method}", raw=http_request(method, target, headers=headers, body=body),
                   method=method, path=path, must_fail=False)


FRAMINGS: Final = (
    "smuggle", "bad-chunk", "chunk-overflow", "huge-header", "many-headers", "bad-request-line", "nul-header",
    "obs-fold", "http10", "no-host", "absolute-uri", "bad-method", "space-in-path", "lf-only", "cl-short",
    "cl-negative", "cl-huge", "header-ctl", "double-cl", "expect",
)


@st.composite
def framing_requests(draw: Callable[..., Any]) -> Request:
    """Broken or unusual HTTP framing (answered by the HTTP layer: any 4xx, never a 5xx or silence)."""
    which = draw(st.sampled_from(FRAMINGS))
    path = f"/api/v1/namespaces/{NS}/configmaps"
    body = json.dumps({"metadata": {"name": f"f-{draw(st.integers(0, 10**6))}"}}).encode()
    auth = f"Authorization: Bearer {TOKEN}\r\n".encode()
    head = b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + auth + b"Content-Type: application/json\r\n"
    framed = which in ("http10", "absolute-uri", "expect")  # Go's net/http refuses the rest with a plain 400 too
    raw: bytes
    if which == "smuggle":
        raw = head + b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" % len(body)
    elif which == "bad-chunk":
        raw = head + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n" + body + b"\r\n0\r\n\r\n"
    elif which == "chunk-overflow":
        raw = head + b"Transfer-Encoding: chunked\r\n\r\nffffffffffffffffffff\r\n" + body + b"\r\n0\r\n\r\n"
    elif which == "huge-header":
        raw = head + b"X-Big: " + b"a" * draw(st.sampled_from((9000, 70000))) + b"\r\nContent-Length: 0\r\n\r\n"
    elif which == "many-headers":
        raw = head + b"".join(b"X-%d: y\r\n" % i for i in range(300)) + b"Content-Length: 0\r\n\r\n"
    elif which == "bad-request-line":
        raw = draw(st.sampled_from((b"\x16\x03\x01garbage\r\n\r\n", b"GET\r\n\r\n", b"GET / HTTP/9.9\r\n\r\n",
                                    b"GET / FOO/1.1\r\nHost: x\r\n\r\n", b"\r\n\r\nGET\x00 / HTTP/1.1\r\n\r\n")))
    elif which == "nul-header":
        raw = head + b"X-A: a\x00b\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    elif which == "obs-fold":
        raw = head + b"X-A: a\r\n folded\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    elif which == "http10":
        raw = (b"POST " + path.encode() + b" HTTP/1.0\r\n" + auth
               + b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    elif which == "no-host":
        raw = (b"GET " + path.encode() + b" HTTP/1.1\r\n" + auth + b"\r\n")
    elif which == "absolute-uri":
        raw = b"GET https://127.0.0.1" + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n"
    elif which == "bad-method":
        raw = b"G(E)T " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n"
    elif which == "space-in-path":
        raw = b"GET /api/v1/name spaces HTTP/1.1\r\nHost: x\r\n" + auth + b"\r\n"
    elif which == "lf-only":
        raw = (b"GET " + path.encode() + b" HTTP/1.1\nHost: x\n" + auth.replace(b"\r\n", b"\n") + b"\n")
    elif which == "cl-short":
        raw = head + b"Content-Length: 5\r\n\r\n" + body
    elif which == "cl-negative":
        raw = head + b"Content-Length: -1\r\n\r\n" + body
    elif which == "cl-huge":
        raw = head + b"Content-Length: 99999999999999999999\r\n\r\n" + body
    elif which == "header-ctl":
        raw = head + b"X-A: \x1b[31m\x7f\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    elif which == "double-cl":
        raw = head + b"Content-Length: %d\r\nContent-Length: 1\r\n\r\n" % len(body) + body
    else:
        raw = head + b"Expect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    return Request(what=f"framing:{which}", raw=raw, method="POST", path=path, must_fail=False, framed=framed)


def requests(schemas: dict[str, Any]) -> st.SearchStrategy[Request]:
    """Every kind of hostile request, bodies weighted most."""
    return st.one_of(body_requests(schemas), body_requests(schemas), body_requests(schemas), path_requests(),
                     framing_requests())


# ------------------------------------------------------------------------------- the raw client


class Client:
    """Raw HTTP/1.1 over TLS: a kept-alive connection for well-framed requests, a fresh one otherwise."""

    def __init__(self, host: str, port: int, ssl_context: ssl.SSLContext | None) -> None:
        self.host, self.port, self.ssl = host, port, ssl_context
        self._conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(self.host, self.port, ssl=self.ssl, limit=16 * 1024 * 1024)

    async def close(self) -> None:
        if self._conn is not None:
            self._conn[1].close()
            with contextlib.suppress(Exception):
                await self._conn[1].wait_closed()
            self._conn = None

    async def send(self, req: Request) -> Answer:
        """Send the bytes and read one response; a broken-framing request gets a connection of its own."""
        reuse = req.framed and self._conn is not None
        if not req.framed:
            await self.close()
        for attempt in range(2):
            if self._conn is None:
                try:
                    self._conn = await asyncio.wait_for(self._connect(), TIMEOUT)
                except (OSError, TimeoutError) as exc:
                    return Answer(None, error=f"connect: {type(exc).__name__}: {exc}")
            reader, writer = self._conn
            try:
                writer.write(req.raw)
                await writer.drain()
                answer = await asyncio.wait_for(_read_response(reader, head=req.method == "HEAD",
                                                                stream=_is_watch(req)), TIMEOUT)
            except (OSError, asyncio.IncompleteReadError, EOFError, ssl.SSLError) as exc:
                await self.close()
                if reuse and attempt == 0:
                    continue  # the kept-alive connection had been closed by the server: once more, fresh
                return Answer(None, error=f"{type(exc).__name__}: {exc}")
            except TimeoutError:
                await self.close()
                return Answer(None, error="timeout")
            if not req.framed or answer.headers.get("connection", "").lower() == "close" or answer.streaming:
                await self.close()
            return answer
        return Answer(None, error="unreachable")


def _is_watch(req: Request) -> bool:
    """A request that may be answered with a watch stream (it never ends: its headers are the answer)."""
    target = req.raw.split(b" ", 2)[1] if req.raw.count(b" ") >= 2 else b""
    return req.method == "GET" and (b"watch=" in target or b"/watch/" in target or target.startswith(b"/watch"))


async def _read_response(reader: asyncio.StreamReader, *, head: bool, stream: bool = False) -> Answer:
    line = await reader.readuntil(b"\r\n")
    parts = line.decode("latin-1").split(" ", 2)
    status = int(parts[1])
    headers: dict[str, str] = {}
    while True:
        h = await reader.readuntil(b"\r\n")
        if h == b"\r\n":
            break
        k, _, v = h.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    if status == 100:
        return await _read_response(reader, head=head, stream=stream)
    body = b""
    if stream and status == 200:
        return Answer(status, headers, body, streaming=True)  # a watch: the connection is closed after it
    if head or status in (204, 304):
        return Answer(status, headers, body)
    if headers.get("transfer-encoding", "").lower() == "chunked":
        chunks = []
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")
                break
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
        body = b"".join(chunks)
    elif "content-length" in headers:
        body = await reader.readexactly(int(headers["content-length"]))
    else:
        body = await reader.read()  # until the server closes
    return Answer(status, headers, body)


# ------------------------------------------------------------------------------- the checks


@dataclass
class Finding:
    what: str
    request: str
    answer: str

    def to_json(self) -> dict[str, str]:
        return {"what": self.what, "request": self.request, "answer": self.answer}


class Checker:
    """The four checks over one apiserver process."""

    def __init__(self, client: Client, pid: int) -> None:
        self.client = client
        self.pid = pid
        self.rss0 = rss(pid)
        self.cases = 0
        self.codes: dict[int, int] = {}

    async def revision(self) -> int:
        """The store's revision (a one-item list is read at the current revision)."""
        req = Request("revision", http_request("GET", f"/api/v1/namespaces/{NS}/configmaps?limit=1"), "GET", "",
                      False)
        a = await self.client.send(req)
        assert a.status == 200, f"revision read failed: {a.status} {a.error} {a.body[:200]!r}"
        return int(json.loads(a.body)["metadata"]["resourceVersion"])

    async def check(self, req: Request) -> list[Finding]:
        """Send one request; what it got wrong (empty: nothing)."""
        writes = req.method in WRITES
        before = await self.revision() if writes else 0
        a = await self.client.send(req)
        self.cases += 1
        self.codes[a.status or 0] = self.codes.get(a.status or 0, 0) + 1
        out: list[Finding] = []
        shown = f"{a.status} {a.error} {a.headers} {a.body[:400]!r}"
        if a.status is None:
            return [Finding("unanswered", req.describe(), shown)]
        if a.status >= 500:
            out.append(Finding("5xx", req.describe(), shown))
        if a.status >= 400 and req.framed and req.method != "HEAD" and not _is_status(a):
            out.append(Finding("not-a-status", req.describe(), shown))
        if a.status < 400 and req.must_fail and "dryRun" not in req.raw.split(b" ", 2)[1].decode("latin-1"):
            out.append(Finding("invalid-write-accepted", req.describe(), shown))
        if writes and a.status >= 400:
            after = await self.revision()
            if after != before:
                out.append(Finding("store-changed-by-a-rejected-write", req.describe(),
                                   f"{shown} (revision {before} -> {after})"))
        return out

    async def final(self, proc_alive: Callable[[], bool]) -> list[Finding]:
        """The process checks: same pid alive and ready, memory bounded."""
        out: list[Finding] = []
        if not proc_alive():
            return [Finding("apiserver-died", "", f"pid {self.pid}")]
        a = await self.client.send(Request("readyz", http_request("GET", "/readyz"), "GET", "/readyz", False))
        if a.status != 200:
            out.append(Finding("not-ready", "", f"{a.status} {a.error}"))
        grown = rss(self.pid) - self.rss0
        if grown > MAX_RSS_GROWTH:
            out.append(Finding("memory", "", f"RSS grew by {grown / 2**20:.0f} MiB"))
        return out


def _is_status(a: Answer) -> bool:
    """A metav1.Status failure (JSON, or msgpack for a client that asked for it) whose code is the response's."""
    ctype = a.headers.get("content-type", "")
    try:
        if ctype.startswith("application/vnd.kubemesh.msgpack"):
            doc = msgpack.unpackb(a.body, raw=False)
        elif ctype.startswith(JSON):
            doc = json.loads(a.body)
        else:
            return False
    except ValueError:
        return False
    return (isinstance(doc, dict) and doc.get("kind") == "Status" and doc.get("apiVersion") == "v1"
            and doc.get("status") == "Failure" and doc.get("code") == a.status and bool(doc.get("reason")))


def rss(pid: int) -> int:
    """Resident memory of a process, in bytes (from /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


async def seed_objects(client: Client) -> dict[str, Any]:
    """The namespace and one target object of each kind; returns the served OpenAPI component schemas."""
    async def post(path: str, body: dict[str, Any]) -> None:
        a = await client.send(Request("seed", http_request("POST", path, headers={"Content-Type": JSON},
                                                           body=json.dumps(body).encode()), "POST", path, False))
        assert a.status in (201, 409), f"seeding {path}: {a.status} {a.body[:300]!r}"

    await post("/api/v1/namespaces", {"metadata": {"name": NS}})
    c = {"containers": [{"name": "c", "image": "nginx"}]}
    bodies: dict[str, dict[str, Any]] = {
        "ConfigMap": {"data": {"a": "b"}}, "Pod": {"spec": c}, "Secret": {"data": {"k": "dg=="}},
        "Deployment": {"spec": {"selector": {"matchLabels": {"a": "b"}},
                                "template": {"metadata": {"labels": {"a": "b"}}, "spec": c}}},
        "Node": {}, "Lease": {"spec": {"holderIdentity": "h"}},
    }
    for collection, kind, _, _ in KINDS:
        await post(collection, {"metadata": {"name": TARGET}, **bodies[kind]})
    schemas: dict[str, Any] = {}
    for doc in ("api/v1", "apis/apps/v1", "apis/coordination.k8s.io/v1"):
        a = await client.send(Request("openapi", http_request("GET", f"/openapi/v3/{doc}"), "GET", "", False))
        assert a.status == 200, a
        schemas.update(json.loads(a.body)["components"]["schemas"])
    return schemas


# ------------------------------------------------------------------------------- the long run (scripts/fuzz)


@contextlib.contextmanager
def apiserver_process(workdir: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, ssl.SSLContext]]:
    """A `python -m kubemesh.apiserver` with TLS and a token, as the default mesh runs it."""
    certs = ensure_certs(workdir / "tls")
    token_file = workdir / "token"
    token_file.write_text(TOKEN + "\n")
    port = free_port()
    log = (workdir / "apiserver.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "kubemesh.apiserver", "--host", "127.0.0.1", "--port", str(port),
                             "--token-file", str(token_file), "--tls-cert-file", str(certs.cert),
                             "--tls-private-key-file", str(certs.key)], stdout=log, stderr=subprocess.STDOUT)
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"https://127.0.0.1:{port}/readyz", timeout=2, context=ctx) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.1)
        yield proc, port, ctx
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def main() -> None:
    """`scripts/fuzz`: fuzz a fresh apiserver for a while; print the figures, write the findings."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--out", default="fuzz-findings.jsonl", help="where findings go (JSON lines)")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    args = parser.parse_args()
    out = Path(args.out)
    findings: list[Finding] = []
    with tempfile.TemporaryDirectory() as tmp, apiserver_process(Path(tmp)) as (proc, port, ctx):
        loop = asyncio.new_event_loop()
        client = Client("127.0.0.1", port, ctx)
        schemas = loop.run_until_complete(seed_objects(client))
        checker = Checker(client, proc.pid)
        started = time.monotonic()
        end = started + args.minutes * 60

        @settings(max_examples=500, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck), phases=[Phase.generate])
        @given(requests(schemas))
        def batch(req: Request) -> None:
            if time.monotonic() < end and proc.poll() is None:
                found = loop.run_until_complete(checker.check(req))
                for f in found:
                    findings.append(f)
                    with out.open("a") as fh:
                        fh.write(json.dumps(f.to_json()) + "\n")

        round_ = 0
        while time.monotonic() < end and proc.poll() is None:
            seed(args.seed + round_)(batch)()  # a new seed each round: new requests
            round_ += 1
        findings.extend(loop.run_until_complete(checker.final(lambda: proc.poll() is None)))
        loop.run_until_complete(client.close())
        loop.close()
        elapsed = time.monotonic() - started
    kinds: dict[str, int] = {}
    for f in findings:
        kinds[f.what] = kinds.get(f.what, 0) + 1
    print(f"cases run: {checker.cases}")
    print(f"cases/s: {checker.cases / elapsed:.1f}")
    print(f"answers by status: {dict(sorted(checker.codes.items()))}")
    print(f"findings: {len(findings)} {kinds} (written to {out})")
    sys.exit(1 if findings else 0)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()


__all__ = ["Answer", "Checker", "Client", "Finding", "Request", "apiserver_process", "http_request", "requests",
           "rss", "seed_objects"]

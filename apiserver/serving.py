"""The REST surface: Kubernetes paths and verbs, content negotiation, watch streams.

Paths follow the Kubernetes API (`/api/v1/...`, `/apis/<group>/<version>/...`, legacy
`/watch/` prefixes too). Bodies are JSON (the four patch types included), msgpack for
components, or Kubernetes protobuf for the built-in kinds (`apiserver.protobuf`); responses
are JSON, msgpack when the client asks for it, or a meta.k8s.io Table when kubectl asks for
one. Every failure is a metav1.Status with the code Kubernetes uses;
nothing a client sends can make a handler fail without one (the middleware turns any
unexpected exception into a 500 Status and the server keeps serving).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import uuid
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import orjson
import yaml
from aiohttp import HttpVersion11, web
from aiohttp.abc import AbstractStreamWriter

from kubemesh.apiserver import conversion, discovery, errors, fielderrors, paging, protobuf, reviews, tables
from kubemesh.apiserver.admitting import Admitting
from kubemesh.apiserver.authn import Authenticator
from kubemesh.apiserver.customresources import objects as customobjects
from kubemesh.apiserver.discovery import Discovery
from kubemesh.apiserver.etcdstore import StorageError
from kubemesh.apiserver.openapi import OPENAPI_V2_CONTENT_TYPE, OpenApi
from kubemesh.apiserver.rbac import ADMIN, ASKED, USER, Attributes, Authorizer, User
from kubemesh.apiserver.registry import DeleteOptions, Registry, WriteOptions, patch_media_types, select
from kubemesh.apiserver.watching import WatchHub, encode_event
from kubemesh.services.model import codec
from kubemesh.services.model.codec import Encoding
from kubemesh.services.model.kinds import (
    BINDINGS,
    NAMESPACES,
    PODS,
    REVIEWS,
    SERVICEACCOUNTS,
    Kind,
    KindTable,
    Obj,
)
from kubemesh.services.model.selectors import (
    FieldSelector,
    LabelSelector,
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)

if TYPE_CHECKING:
    from kubemesh.apiserver.etcdcache import EtcdCache

MAX_BODY: Final = 3 * 1024 * 1024
MAX_WATCH_TIMEOUT: Final = 30 * 24 * 3600
PATCH_TYPES: Final = {
    "application/merge-patch+json": "merge",
    "application/strategic-merge-patch+json": "strategic",
    "application/json-patch+json": "json",
    "application/apply-patch+yaml": "apply",
    "application/apply-patch+json": "apply",
}
BODY_MEDIA_TYPES: Final = ("application/json", "application/yaml", protobuf.MEDIA_TYPE, codec.MSGPACK)
"""What a create, update or delete body may be, in upstream's order (protobuf for built-in kinds only;
msgpack is kubemesh's own). An empty Content-Type is read as JSON (upstream: 415)."""
_TRUE: Final = frozenset({"true", "1", "yes", "t", "y"})

RESPONSE_RV: Final = web.RequestKey("kubemesh_rv", str)
"""The resourceVersion of the object a response carries (recorded in the history)."""
VERB: Final = web.RequestKey("kubemesh_verb", str)
"""The request's Kubernetes verb, once the resource handler has worked it out (the history reads it)."""
RESOURCE: Final = web.RequestKey("kubemesh_resource", str)
"""The resource (plural) a request on a resource path names, once resolved (the metrics read it)."""
LOSE_RESPONSE: Final = web.RequestKey("kubemesh_lose_response", str)
"""Set by the chaos fault `request.commitThenFail` with `lose: true` (its name): sending the answer fails."""
RAW_BODY: Final = web.RequestKey("kubemesh_raw_body", bytes)
"""The request body once read: a request run again after an etcd conflict (`server`) reads it again."""


@dataclass(frozen=True, slots=True)
class Written:
    """What `render_written` rendered: in etcd mode the answer is rendered again from the committed object."""

    kind: Kind
    obj: Obj
    status: int
    warnings: list[str] | None


WRITTEN: Final = web.RequestKey("kubemesh_written", Written)


@dataclass(frozen=True, slots=True)
class Target:
    """What a resource path names."""

    kind: Kind
    namespace: str | None
    name: str | None
    sub: str | None
    watch: bool


TARGET: Final = web.RequestKey("kubemesh_target", Target)
WHAT: Final = web.RequestKey("kubemesh_attributes", Attributes)
"""What a request asks to do, as the authorizer saw it (the history records it)."""
DENIED: Final = web.RequestKey("kubemesh_denied", bool)
"""Set when the authorizer refused the request (its 403 is RBAC's, not another one)."""


RequestCheck = Callable[[User | None, Attributes], None]
"""Admission of a request that carries no new object (a node deleting a pod): raise a StatusError to refuse."""


def authorize(request: web.Request, authorizer: Authorizer, user: User, what: Attributes) -> None:
    """Check `what` for `user`; remember it (and a denial) on the request for the history."""
    request[WHAT] = what
    if not authorizer.allowed(user, what):
        request[DENIED] = True
        raise authorizer.refusal(user, what)


def attributes_record(what: Attributes | None, *, denied: bool) -> dict[str, Any] | None:
    """How the history keeps what a request asked (None for a request nobody authorized)."""
    if what is None:
        return None
    if not what.resource_request:
        return {"verb": what.verb, "path": what.path, "allowed": not denied}
    return {"verb": what.verb, "group": what.group, "resource": what.resource, "subresource": what.subresource,
            "namespace": what.namespace, "name": what.name, "allowed": not denied}
"""What a request on a resource path names, once resolved (a protobuf body is decoded by its kind)."""


def flag(value: str | None) -> bool:
    """Kubernetes booleans in queries are case-insensitive (`watch=True` from kubernetes_asyncio)."""
    return value is not None and value.strip().lower() in _TRUE


def identity(request: web.Request) -> tuple[str, str]:
    """Who is asking: (component, instance), from kubemesh headers or the User-Agent."""
    component = request.headers.get("X-Kubemesh-Component")
    if component:
        return component, request.headers.get("X-Kubemesh-Instance", component)
    agent = request.headers.get("User-Agent", "unknown")
    return agent.split("/", 1)[0] or "unknown", agent


def response_encoding(request: web.Request) -> Encoding:
    """Msgpack when the client prefers it, JSON otherwise."""
    accept = request.headers.get("Accept", "")
    return "msgpack" if codec.MSGPACK in accept else "json"


def render(request: web.Request, body: Any, *, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    """Encode a response body in the negotiated encoding."""
    enc = response_encoding(request)
    if isinstance(body, dict):
        md = body.get("metadata")
        if isinstance(md, dict) and "resourceVersion" in md:
            request[RESPONSE_RV] = str(md["resourceVersion"])
    return _response(codec.encode(body, enc), enc, status=status, warnings=warnings)


def _response(body: bytes, enc: Encoding, *, status: int, warnings: list[str] | None) -> web.Response:
    resp = web.Response(body=body, status=status, content_type=codec.content_type(enc))
    if warnings:
        for w in warnings[:20]:
            resp.headers.add("Warning", warning_header(w))
    return resp


def warning_header(text: str) -> str:
    r"""A `Warning: 299 - "<text>"` value that any HTTP stack sends, whatever the text carries.

    Warnings echo request data (an unknown field's name), and a header value with a control
    character is refused by aiohttp when the response is written, after the store has
    committed: the client would see a dropped connection for a write that happened. Control
    characters and unpaired surrogates are written as Go's `%q` writes them (`\n`, `\x01`,
    `\ud800` as U+FFFD), then the text is quoted as RFC 7234's quoted-string, as upstream
    (`net.NewWarningHeader`) does; client-go unquotes it.
    """
    if not _SAFE_TEXT.fullmatch(text):
        text = _UNSAFE_CHAR.sub(_escape_char, text)
    quoted = text.replace("\\", "\\\\").replace('"', '\\"')
    return f'299 - "{quoted}"'


_SAFE_TEXT: Final = re.compile(r"[^\x00-\x1f\x7f-\x9f\ud800-\udfff]*")
_UNSAFE_CHAR: Final = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_GO_ESCAPES: Final = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def _escape_char(match: re.Match[str]) -> str:
    c = match.group()
    if c in _GO_ESCAPES:
        return _GO_ESCAPES[c]
    code = ord(c)
    if code >= 0xD800:
        return "\ufffd"
    return f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}"


def render_status(request: web.Request, exc: errors.StatusError) -> web.Response:
    """A metav1.Status failure (always JSON unless the client is a msgpack component)."""
    enc = response_encoding(request)
    raw = codec.encode(exc.status(), enc)
    if enc == "json":
        raw += b"\n"  # Go's json.Encoder ends what kube-apiserver writes with a newline
    resp = _response(raw, enc, status=exc.code, warnings=None)
    if exc.retry_after is not None:
        resp.headers["Retry-After"] = str(exc.retry_after)
    return resp


async def read_body(request: web.Request) -> tuple[Any, str]:
    """Decode the request body; returns (value, media type)."""
    raw, media = await read_raw(request)
    return decode_body(request, raw, media), media


async def read_raw(request: web.Request) -> tuple[bytes, str]:
    """The request body's bytes (at most MAX_BODY, else 413) and its media type."""
    payload = request.content
    cached = request.get(RAW_BODY)
    try:
        if cached is not None:
            raw = cached
        elif payload.is_eof() and payload.exception() is None:
            # The whole body has arrived (a small body always has, by the time the handler runs):
            # take it as it is buffered, without `read()`'s loop of awaits and its copies.
            raw = payload.read_nowait()
        else:
            raw = await request.read()
    except web.HTTPRequestEntityTooLarge as exc:
        raise errors.too_large(MAX_BODY) from exc
    except web.RequestPayloadError as exc:
        # A body cut short, or (where aiohttp decodes) a Content-Encoding the bytes do not match.
        raise errors.bad_request(f"the request body could not be read: {_cause_text(exc)}") from exc
    request[RAW_BODY] = raw
    coding = request.headers.get("Content-Encoding")
    if coding:  # the application leaves bodies encoded (`server.build_app`: auto_decompress off)
        raw = decode_content(raw, coding)
    media = (request.headers.get("Content-Type") or codec.JSON).split(";", 1)[0].strip().lower()
    if len(raw) > MAX_BODY:
        raise errors.too_large(MAX_BODY)
    return raw, media


def decode_content(raw: bytes, coding: str) -> bytes:
    """A body with its Content-Encoding undone (gzip, deflate, identity; codings applied in order).

    A coding the bytes do not match, or one the server does not know, is a 400; a body that
    inflates beyond `MAX_BODY` is a 413, found without inflating more than that.
    """
    for name in reversed([c.strip().lower() for c in coding.split(",") if c.strip()]):
        if name == "identity":
            continue
        if name not in ("gzip", "x-gzip", "deflate"):
            raise errors.bad_request(f"the request body could not be read: unsupported Content-Encoding: {name}")
        raw = _inflate(raw, name)
    return raw


def _inflate(raw: bytes, name: str) -> bytes:
    # deflate as aiohttp reads it: zlib-wrapped, or raw deflate when the first byte says so
    wbits = 16 + zlib.MAX_WBITS if name != "deflate" else (zlib.MAX_WBITS if raw[:1] and raw[0] & 0xF == 8
                                                             else -zlib.MAX_WBITS)
    inflater = zlib.decompressobj(wbits=wbits)
    try:
        out = inflater.decompress(raw, MAX_BODY + 1)
    except zlib.error as exc:
        raise errors.bad_request(f"the request body could not be read: Can not decode content-encoding: "
                                 f"{'gzip' if name != 'deflate' else name}") from exc
    if len(out) > MAX_BODY:
        raise errors.too_large(MAX_BODY)
    if not inflater.eof or inflater.unused_data:
        raise errors.bad_request(f"the request body could not be read: Can not decode content-encoding: "
                                 f"{'gzip' if name != 'deflate' else name}")
    return out


def _cause_text(exc: BaseException) -> str:
    """What went wrong reading a body, as one printable line (the message echoes no request bytes)."""
    cause = exc.__cause__ or exc
    text = str(getattr(cause, "message", "") or cause).strip()  # aiohttp's HttpProcessingError: its message
    return text.splitlines()[0][:200] if text else type(cause).__name__


def decode_body(request: web.Request, raw: bytes, media: str) -> Any:
    """A body in JSON, YAML, msgpack or protobuf as the JSON-like value it carries (None when empty).

    Protobuf is read only on a resource path (`TARGET`) of a built-in kind; anything else that
    is not one of these media types is a 415.
    """
    if not raw:
        return None
    if media == codec.MSGPACK:
        try:
            value = codec.decode(raw, "msgpack")
            # msgpack can carry what JSON cannot (bytes, ext types, non-string keys); such a
            # value must never reach the store, where JSON readers would fail on it later.
            orjson.dumps(value)
        except codec.DecodeError as exc:
            raise errors.bad_request(f"malformed msgpack body: {exc}") from exc
        except TypeError as exc:
            raise errors.bad_request(f"the msgpack body is not JSON-like: {exc}") from exc
        return value
    patching = request.method == "PATCH"  # a patch's media type was checked against the patch types
    if media == "application/apply-patch+yaml" and patching:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return _load_yaml(raw)
    if media in (codec.JSON, "") or (patching and media.endswith("+json")):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise errors.bad_request(f"malformed JSON body: {exc}") from exc
        if request.query.get("fieldValidation") == "Strict":
            _reject_duplicate_fields(raw)
        return value
    if media in ("application/yaml", "application/x-yaml"):
        return _load_yaml(raw)
    resolved = request.get(TARGET)
    if media == protobuf.MEDIA_TYPE and resolved is not None:  # a built-in kind's body from client-go (kubectl 1.32+)
        return protobuf.decode_protobuf(resolved.kind, raw, resolved.sub, delete=request.method == "DELETE")
    if patching and resolved is not None:
        raise errors.unsupported_media_type(patch_media_types(resolved.kind))
    custom = resolved is not None and resolved.kind.custom is not None
    raise errors.unsupported_media_type(BODY_MEDIA_TYPES[:2] + (() if custom else BODY_MEDIA_TYPES[2:3])
                                        + BODY_MEDIA_TYPES[3:])


class _JsonishLoader(yaml.SafeLoader):
    """YAML as Kubernetes reads it (YAML to JSON).

    Timestamps stay the strings they were written as; mapping keys that YAML reads as numbers,
    booleans or null become their text as they are built (`{1: a, true: b}` is
    `{"1": "a", "true": "b"}`: two keys, where a Python dict would merge 1 and True); a
    non-finite number is refused.
    """

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)
        mapping: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                text = _key_text(key)
            except TypeError as exc:
                raise yaml.constructor.ConstructorError(None, None, str(exc), key_node.start_mark) from exc
            mapping[text] = self.construct_object(value_node, deep=deep)
        return mapping

    def construct_timestamp_text(self, node: yaml.ScalarNode) -> str:
        return self.construct_scalar(node)

    def construct_finite_float(self, node: yaml.ScalarNode) -> float:
        value = self.construct_yaml_float(node)
        if not math.isfinite(value):
            raise yaml.constructor.ConstructorError(None, None, f"{value} is not a JSON number", node.start_mark)
        return value


_JsonishLoader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_JsonishLoader.add_constructor("tag:yaml.org,2002:float", _JsonishLoader.construct_finite_float)
# An explicit `!!timestamp` stays its text too (orjson would accept a datetime, msgpack would not).
_JsonishLoader.add_constructor("tag:yaml.org,2002:timestamp", _JsonishLoader.construct_timestamp_text)


def _load_yaml(raw: bytes) -> Any:
    """A YAML body as the JSON value Kubernetes makes of it (400 when it cannot be one).

    Anything JSON cannot carry (binary, sets, NaN, a list as a key) is refused here rather
    than reaching the store, whose JSON and msgpack encoders (every watch frame) would fail
    on it later.
    """
    loader: _JsonishLoader | None = None
    try:
        loader = _JsonishLoader(raw)  # a SafeLoader: plain data only (its reader refuses bytes YAML cannot hold)
        node = loader.get_single_node()
        if node is not None:
            _check_aliasing(node)
        value = loader.construct_document(node) if node is not None else None
    except errors.StatusError:
        raise
    except Exception as exc:  # explicit tags fail with plain Python errors too (`!!float abc`, `!!bool maybe`)
        raise errors.bad_request(f"malformed YAML body: {type(exc).__name__}: {exc}") from exc
    finally:
        if loader is not None:
            loader.dispose()
    try:
        orjson.dumps(value)
    except TypeError as exc:
        raise errors.bad_request(f"the YAML body is not JSON-like: {exc}") from exc
    return value


# goyaml's bounds on alias expansion (sigs.k8s.io/yaml/goyaml.v2 decode.go), which kube-apiserver's
# YAML decoding inherits: up to 400,000 decoded nodes 99% may come from aliases, from 4,000,000 on
# only 10%, scaled linearly in between; documents of up to 1,000 nodes or 100 aliased ones pass.
_ALIAS_LOW: Final = 400_000
_ALIAS_HIGH: Final = 4_000_000


def _allowed_alias_ratio(decoded: int) -> float:
    if decoded <= _ALIAS_LOW:
        return 0.99
    if decoded >= _ALIAS_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decoded - _ALIAS_LOW) / (_ALIAS_HIGH - _ALIAS_LOW)


def _check_aliasing(root: yaml.Node) -> None:
    """Refuse a YAML document whose aliases would expand it beyond goyaml's bounds (a 400).

    The composed graph shares an aliased node; this walk counts every node as decoding the
    document would (an alias counts its whole expansion) without expanding anything, so the
    "billion laughs" is refused before a single list is built. An alias to a node that
    contains it is refused too (upstream: the anchor's value contains itself).
    """
    decoded = aliased = 0
    entered: dict[int, int] = {}  # id(node) -> `decoded` when its walk began
    size: dict[int, int] = {}  # id(node) -> its expanded node count, once walked
    work: list[tuple[yaml.Node, bool]] = [(root, True)]
    while work:
        node, entering = work.pop()
        nid = id(node)
        if not entering:
            size[nid] = decoded - entered.pop(nid)
            continue
        if nid in size:  # an alias: its whole expansion is decoded again
            decoded += size[nid]
            aliased += size[nid]
            if aliased > 100 and decoded > 1000 and aliased / decoded > _allowed_alias_ratio(decoded):
                raise errors.bad_request("error decoding YAML: error converting YAML to JSON: yaml: "
                                         "document contains excessive aliasing")
            continue
        if nid in entered:
            raise errors.bad_request("error decoding YAML: error converting YAML to JSON: yaml: "
                                     "an anchor's value contains itself")
        entered[nid] = decoded
        decoded += 1
        work.append((node, False))
        if isinstance(node, yaml.SequenceNode):
            work.extend((child, True) for child in reversed(node.value))
        elif isinstance(node, yaml.MappingNode):
            for key, value in reversed(node.value):
                work.append((value, True))
                work.append((key, True))


def _key_text(key: Any) -> str:
    if isinstance(key, str):
        return key
    if isinstance(key, bool):
        return "true" if key else "false"
    if key is None:
        return "null"
    if isinstance(key, int | float):
        return str(key)
    raise TypeError(f"a mapping key of type {type(key).__name__}")


def _reject_duplicate_fields(raw: bytes) -> None:
    """Strict field validation also rejects a JSON object that names a field twice."""
    def check(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise errors.bad_request(f'strict decoding error: json: duplicate field "{key}"')
            seen.add(key)
        return dict(pairs)
    json.loads(raw, object_pairs_hook=check)


class Targets:
    """Resolves request paths to targets over one apiserver's `KindTable`.

    Memoised per path (components write the same few thousand object paths over and over),
    bounded, and forgotten whenever the table changes (a custom resource definition is served
    or removed). Paths that raise (unknown resources) are not memoised.
    """

    _LIMIT: Final = 16_384

    def __init__(self, kinds: KindTable) -> None:
        self.kinds = kinds
        self._generation = kinds.generation
        self._memo: dict[tuple[str, str, str], Target] = {}

    def parse(self, group: str, version: str, tail: str) -> Target:
        """Resolve `[namespaces/<ns>/]<plural>[/<name>[/<sub>]]` within a group version (404 if unknown)."""
        if self._generation != self.kinds.generation:
            self._memo.clear()
            self._generation = self.kinds.generation
        key = (group, version, tail)
        target = self._memo.get(key)
        if target is None:
            target = _parse_target(self.kinds, group, version, tail)
            if len(self._memo) >= self._LIMIT:
                self._memo.clear()
            self._memo[key] = target
        return target


def _parse_target(kinds: KindTable, group: str, version: str, tail: str) -> Target:
    segs = [s for s in tail.split("/") if s]
    watch = False
    if segs and segs[0] == "watch":
        watch = True
        segs = segs[1:]
    namespace: str | None = None
    if len(segs) >= 3 and segs[0] == "namespaces" and kinds.lookup(group, version, segs[2]) is not None:
        namespace = segs[1]
        segs = segs[2:]
    if not segs or len(segs) > 3:
        raise errors.unknown_resource()
    kind = kinds.lookup(group, version, segs[0])
    if kind is None:
        raise errors.unknown_resource()
    if kind.namespaced is False and namespace is not None:
        raise errors.unknown_resource()
    name = segs[1] if len(segs) >= 2 else None
    sub = segs[2] if len(segs) == 3 else None
    if kind.namespaced and name is not None and namespace is None:
        raise errors.unknown_resource()
    if sub is not None and kind.subresource(sub) is None:
        raise errors.unknown_resource()
    return Target(kind=kind, namespace=namespace, name=name, sub=sub, watch=watch)


def include_object(request: web.Request) -> str:
    """The Table row object policy: None, Metadata (the default) or Object."""
    value = request.query.get("includeObject", "Metadata")
    if value not in tables.INCLUDE_OBJECT_POLICIES:
        raise errors.bad_request(f"includeObject must be one of None, Metadata or Object, not {value!r}")
    return value


def selectors(request: web.Request, kind: Kind) -> tuple[LabelSelector | None, FieldSelector | None]:
    """Parse labelSelector and fieldSelector (400 on bad syntax or unsupported fields)."""
    q = request.query
    try:
        labels = parse_label_selector(q["labelSelector"]) if q.get("labelSelector") else None
        fields = parse_field_selector(q["fieldSelector"], kind) if q.get("fieldSelector") else None
    except SelectorError as exc:
        raise errors.bad_request(str(exc)) from exc
    return labels, fields


_OPTIONS_BY_AGENT: dict[str, WriteOptions] = {}


def write_options(request: web.Request) -> WriteOptions:
    """dryRun, fieldValidation, fieldManager and force from the query; the User-Agent's manager name."""
    agent = request.headers.get("User-Agent", "")
    if not request.query_string:
        # Most writes of components carry no query at all: one shared options object per agent.
        opts = _OPTIONS_BY_AGENT.get(agent)
        if opts is None:
            opts = WriteOptions(user_agent_manager=agent_manager(agent))
            if len(_OPTIONS_BY_AGENT) < 1024:
                _OPTIONS_BY_AGENT[agent] = opts
        return opts
    q = request.query
    fv = q.get("fieldValidation", "")
    dry = q.getall("dryRun", [])
    manager = q.get("fieldManager", "")
    causes = options_causes(field_manager=manager, dry_run=dry, field_validation=fv)
    verb = request.get(VERB, "")
    if verb == "patch" and "force" in q and request.headers.get("Content-Type", "").split(";", 1)[0].strip() \
            not in ("application/apply-patch+yaml", "application/apply-patch+json"):
        causes.insert(0, fielderrors.forbidden("force", "may not be specified for non-apply patch"))
    if causes:
        raise errors.options_invalid(_OPTIONS_KINDS.get(verb, "CreateOptions"), causes)
    return WriteOptions(dry_run="All" in dry, field_validation=fv, field_manager=manager,
                        user_agent_manager=agent_manager(agent), force=flag(q.get("force")))


_OPTIONS_KINDS: Final = {"create": "CreateOptions", "update": "UpdateOptions", "patch": "PatchOptions",
                         "delete": "DeleteOptions", "deletecollection": "DeleteOptions"}
FIELD_MANAGER_MAX: Final = 128


def options_causes(*, field_manager: str = "", dry_run: list[str] | tuple[str, ...] = (),
                   field_validation: str = "") -> list[fielderrors.Cause]:
    """What upstream's `Validate{Create,Update,Patch}Options` find wrong in a write's options.

    fieldManager: at most 128 bytes, every character printable; dryRun: only `All`;
    fieldValidation: `Ignore`, `Warn`, `Strict` or empty.
    """
    causes: list[fielderrors.Cause] = []
    if len(field_manager.encode("utf-8", "surrogatepass")) > FIELD_MANAGER_MAX:
        causes.append({"reason": "FieldValueTooLong", "field": "fieldManager",
                       "message": f"Too long: must have at most {FIELD_MANAGER_MAX} bytes"})
    position = 0
    for c in field_manager:
        if not c.isprintable():  # Go's unicode.IsPrint: a space other than U+0020 is not printable either
            causes.append(fielderrors.invalid_text("fieldManager", field_manager,
                                                   f"invalid character U+{ord(c):04X} (at position {position})"))
        position += len(c.encode("utf-8", "surrogatepass"))
    if any(d != "All" for d in dry_run):
        causes.append({"reason": "FieldValueNotSupported", "field": "dryRun",
                       "message": f'Unsupported value: {fielderrors.go_strings(dry_run)}: supported values: "All"'})
    if field_validation not in ("", "Ignore", "Warn", "Strict"):
        causes.append({"reason": "FieldValueNotSupported", "field": "fieldValidation",
                       "message": f"Unsupported value: {fielderrors.go_quote(field_validation)}: supported values: "
                                  '"", "Ignore", "Strict", "Warn"'})
    return causes


def agent_manager(agent: str) -> str:
    """The field manager of a write that names none: the User-Agent's product (before the first `/`)."""
    return agent.split("/", 1)[0][:128] if agent else ""


def _has_flow_control(transport: asyncio.Transport) -> bool:
    """Whether a transport reports its buffer (the direct path needs it to stop in time)."""
    try:
        transport.get_write_buffer_size()
        transport.get_write_buffer_limits()
    except (AttributeError, NotImplementedError):
        return False
    return True


_LAST_FRAME: list[bytes] = [b"", b""]
"""The last chunk a `TransportSink` framed, and its frame: the watchers of one flush are mostly
written the very same chunk object (`watching.ChunkMemo`), which is then framed once."""
_FRAME_MEMO_MAX: Final = 256 * 1024
"""A bigger chunk is not kept for the next writer (it would stay alive until another write)."""


class TransportSink:
    """A watch response written to synchronously (`apiserver.watching.Sink`).

    Chunked-encoding frames go straight to the transport after the response's headers; the
    buffer limit is the transport's own high-water mark, above which it has paused the
    protocol, so `drain` (aiohttp's) returns once the transport has resumed.
    """

    def __init__(self, *, writer: AbstractStreamWriter, transport: asyncio.Transport) -> None:
        self._writer = writer
        self._transport = transport
        self._limit = max(transport.get_write_buffer_limits()[1], 16 * 1024)

    def write(self, data: bytes) -> bool:
        """Send one chunk; False when the connection is closing or its buffer is full."""
        t = self._transport
        if t.is_closing():
            return False
        last = _LAST_FRAME
        if last[0] is data:
            frame = last[1]
        else:
            frame = b"%x\r\n%b\r\n" % (len(data), data)
            if len(data) <= _FRAME_MEMO_MAX:
                last[0], last[1] = data, frame
        t.write(frame)
        return t.get_write_buffer_size() <= self._limit

    async def drain(self) -> None:
        """Wait until the transport has room (aiohttp's flow control)."""
        if self._transport.is_closing():
            raise ConnectionResetError("the watch connection is closing")
        await self._writer.drain()

    def abort(self) -> None:
        """Drop the connection."""
        self._transport.abort()


FRESH_WAIT: Final = 3.0
"""Wall seconds a watch from a revision the etcd watch cache has not applied waits for it (kube's cacher's)."""


class Api:
    """The request handlers, bound to one registry and one watch hub."""

    def __init__(self, *, registry: Registry, hub: WatchHub, targets: Targets, discovery: Discovery,
                 openapi: OpenApi, admitting: Admitting | None = None, authenticator: Authenticator | None = None,
                 authorizer: Authorizer | None = None, request_checks: Sequence[RequestCheck] = (),
                 etcd: EtcdCache | None = None) -> None:
        self.registry = registry
        self.etcd = etcd
        """`--storage etcd`: consistent lists read etcd's revision, and etcd itself when the cache lags it."""
        self.request_checks = tuple(request_checks)
        """Run after authorization on every resource request (`RequestCheck`)."""
        self.authenticator = authenticator
        """Issues ServiceAccount tokens (`serviceaccounts/<name>/token`)."""
        self.authorizer = authorizer
        """Decides every resource request of an authenticated user (None: everything is allowed)."""
        self.admitting = admitting
        """Writes through admission webhooks, when some webhook configuration exists (`admitting`)."""
        self.hub = hub
        self.targets = targets
        self.discovery = discovery
        self.openapi = openapi
        self.shutting_down = False
        self.snapshots = paging.Snapshots()
        """Sorted list snapshots that paged lists read (`paging`)."""
        self._read_from_etcd: list[tuple[str, ...]] = []
        """The names of the latest snapshots read from etcd (valid at their revision whatever the watch window)."""
        self.pod_streams: dict[str, Callable[[web.Request, Target], Awaitable[web.StreamResponse]]] = {}
        """Handlers of pods' log, exec, attach, portforward by subresource (`kubemesh.apiserver.podstreams`)."""

    def routes(self) -> list[web.RouteDef]:
        """Every Kubernetes route this server answers."""
        return [
            web.get("/api", self.api_root),
            web.get("/api/", self.api_root),
            web.get("/apis", self.apis_root),
            web.get("/apis/", self.apis_root),
            web.get("/api/{version}", self.group_version),
            web.get("/apis/{group}", self.group),
            web.get("/apis/{group}/{version}", self.group_version),
            web.route("*", "/api/{version}/{tail:.+}", self.resource),
            web.route("*", "/apis/{group}/{version}/{tail:.+}", self.resource),
            web.get("/version", self.version),
            web.get("/version/", self.version),
            web.get("/openapi/v2", self.openapi_v2),
            web.get("/swagger-2.0.0.pb-v1", self.not_found),
            web.get("/openapi/v3", self.openapi_v3),
            web.get("/openapi/v3/{path:.+}", self.openapi_v3_doc),
        ]

    # ------------------------------------------------------------------------------ discovery

    async def api_root(self, request: web.Request) -> web.Response:
        """GET /api: APIVersions, or the aggregated core group."""
        media = discovery.aggregated_media_type(request.headers.get("Accept", ""))
        if media:
            body = orjson.dumps(self.discovery.aggregated(core=True, media_type=media))
            return web.Response(body=body, headers={"Content-Type": media})
        return render(request, self.discovery.api_versions())

    async def apis_root(self, request: web.Request) -> web.Response:
        """GET /apis: APIGroupList, or the aggregated non-core groups."""
        media = discovery.aggregated_media_type(request.headers.get("Accept", ""))
        if media:
            body = orjson.dumps(self.discovery.aggregated(core=False, media_type=media))
            return web.Response(body=body, headers={"Content-Type": media})
        return render(request, self.discovery.api_group_list())

    async def group(self, request: web.Request) -> web.Response:
        """GET /apis/{group}."""
        doc = self.discovery.api_group(request.match_info["group"])
        if doc is None:
            raise errors.unknown_resource()
        return render(request, doc)

    async def group_version(self, request: web.Request) -> web.Response:
        """GET /api/v1 or /apis/{group}/{version}: APIResourceList."""
        doc = self.discovery.api_resource_list(request.match_info.get("group", ""), request.match_info["version"])
        if doc is None:
            raise errors.unknown_resource()
        return render(request, doc)

    async def version(self, request: web.Request) -> web.Response:
        """GET /version."""
        return render(request, discovery.version_info())

    async def openapi_v2(self, request: web.Request) -> web.Response:
        """GET /openapi/v2: the protobuf stub kubectl 1.27/1.28 validate with."""
        return web.Response(body=self.openapi.v2_protobuf(),
                            headers={"Content-Type": OPENAPI_V2_CONTENT_TYPE})

    async def openapi_v3(self, request: web.Request) -> web.Response:
        """GET /openapi/v3: the index of group-version documents."""
        return render(request, self.openapi.v3_index())

    async def openapi_v3_doc(self, request: web.Request) -> web.Response:
        """GET /openapi/v3/{api/v1|apis/g/v}."""
        doc = self.openapi.v3_document(request.match_info["path"])
        if doc is None:
            raise errors.unknown_resource()
        return render(request, doc)

    async def not_found(self, request: web.Request) -> web.Response:
        """A documented 404."""
        raise errors.unknown_resource()

    # ------------------------------------------------------------------------------ resources

    async def resource(self, request: web.Request) -> web.StreamResponse:
        """Every request on a resource path."""
        group = request.match_info.get("group", "")
        version = request.match_info["version"]
        target = self.targets.parse(group, version, request.match_info["tail"])
        method = request.method
        verb = _verb_of(method, target, request)
        request[VERB] = "create" if method == "POST" else verb  # POST on a subresource creates too
        request[RESOURCE] = target.kind.plural if target.sub is None else f"{target.kind.plural}/{target.sub}"
        request[TARGET] = target
        user = USER.get()
        if user is not None and self.authorizer is not None:
            what = _attributes(request, target, "create" if method == "POST" else verb)
            ASKED.set(what)  # this request's task only: each is served in a context of its own
            authorize(request, self.authorizer, user, what)
            for check in self.request_checks:
                check(user, what)
        if target.sub is None and verb not in target.kind.verbs:
            raise errors.method_not_allowed(f"{verb} is not supported on {target.kind.resource}")
        if target.name is None:
            if method == "GET":
                if target.watch or flag(request.query.get("watch")):
                    return await self.watch(request, target)
                return await self.list_collection(request, target)
            if method == "POST":
                if target.kind is BINDINGS:
                    return await self.create_binding(request, target)
                if target.kind in REVIEWS:
                    body, _ = await read_body(request)
                    assert self.authorizer is not None
                    return render(request, reviews.answer(target.kind, body, user=user or ADMIN,
                                                          authorizer=self.authorizer), status=201)
                return await self.create(request, target)
            if method == "DELETE":
                return await self.delete_collection(request, target)
            raise errors.method_not_allowed()
        if target.sub is None:
            if method == "GET":
                return await self.get(request, target)
            if method == "PUT":
                return await self.update(request, target)
            if method == "PATCH":
                return await self.patch(request, target)
            if method == "DELETE":
                return await self.delete(request, target)
            raise errors.method_not_allowed()
        return await self.subresource(request, target)

    async def get(self, request: web.Request, t: Target) -> web.Response:
        """GET one object (a one-row Table when kubectl asks for one)."""
        assert t.name is not None
        if self.etcd is not None and self.etcd.lagging and not request.query.get("resourceVersion"):
            # A lagging cache (chaos) does not serve a consistent read: etcd does, as kube-apiserver
            # serves every get without a resourceVersion.
            try:
                stored = await self.etcd.read_one(kind=t.kind, namespace=t.namespace, name=t.name)
            except StorageError as exc:
                raise errors.storage_failure(str(exc)) from exc
            if stored is None:
                raise errors.not_found(t.kind, t.name)
        else:
            stored = self.registry.get(t.kind, t.namespace, t.name)
        obj = conversion.at_version(t.kind, stored)
        if tables.wants_table(request.headers.get("Accept")):
            return render(request, tables.to_table(
                t.kind, [obj], now=self.registry.clock.now(),
                resource_version=obj["metadata"]["resourceVersion"],
                include_object=include_object(request)))
        return render(request, obj)

    async def list_collection(self, request: web.Request, t: Target) -> web.Response:
        """LIST with selectors, paged by `limit` and `continue` (see `paging`), at a revision the query names."""
        q = request.query
        match, rv_text, token = q.get("resourceVersionMatch", ""), q.get("resourceVersion", ""), q.get("continue", "")
        if match and not rv_text:
            raise errors.bad_request("resourceVersionMatch is forbidden unless resourceVersion is provided")
        if match not in ("", "NotOlderThan", "Exact"):
            raise errors.bad_request(f"resourceVersionMatch: unsupported value {match!r}")
        if match and token:
            raise errors.bad_request("resourceVersionMatch is forbidden when continue is provided")
        if rv_text and not rv_text.isdigit():
            raise errors.bad_request(f"invalid resourceVersion {rv_text!r}")
        if match == "Exact" and rv_text == "0":
            raise errors.bad_request('resourceVersionMatch "exact" is forbidden for resourceVersion "0"')
        if q.get("limit", "") and not q["limit"].isdigit():
            raise errors.bad_request(f"limit must be a non-negative integer, not {q['limit']!r}")
        if token and rv_text not in ("", "0"):
            raise errors.bad_request("specifying resource version is not allowed when using continue")
        limit = int(q.get("limit") or 0)
        labels, fields = selectors(request, t.kind)
        current = self.registry.store.revision
        # Which revision the list is read at, as kube-apiserver decides it: "0" (or NotOlderThan)
        # is "any recent state", served whole from the watch cache (limit ignored); Exact, or a
        # revision with a limit, is that revision; a continue token carries its own.
        at: int | None = None
        start: str | None = None
        if token:
            cont = paging.Continue.decode(token)
            start = cont.start
            if cont.rv != paging.LATEST:
                at = cont.rv
        elif rv_text not in ("", "0") and (match == "Exact" or (not match and limit > 0)):
            at = int(rv_text)
            if at > current:
                raise errors.too_large_resource_version(at, current)
        if self.etcd is not None and rv_text == "" and not token:
            # A consistent list (no resourceVersion): at etcd's revision now, whichever apiserver
            # wrote last; read from etcd when this cache has not applied it (etcdcache).
            try:
                at, read = await self.etcd.consistent_list(kind=t.kind, namespace=t.namespace)
            except StorageError as exc:
                raise errors.storage_failure(str(exc)) from exc
            if read is None:
                at = None  # the cache has it: served as in memory mode
            else:
                self._remember(t, q, at, select(read, namespace=t.namespace, labels=labels, fields=fields))
        elif self.etcd is not None and at is not None and at > current:
            # A continue page of a list read from etcd, or an exact revision this cache has not reached.
            try:
                read = await self.etcd.read(kind=t.kind, namespace=t.namespace, revision=at)
            except StorageError as exc:
                raise errors.storage_failure(str(exc)) from exc
            self._remember(t, q, at, select(read, namespace=t.namespace, labels=labels, fields=fields))
        paged = token != "" or (limit > 0 and rv_text != "0") or at is not None
        if not paged and at is None:
            items, rv = self.registry.list_objects(t.kind, namespace=t.namespace, labels=labels, fields=fields)
            remaining, next_token = 0, None
        else:
            rv = current if at is None else at
            snapshot, keys = self._snapshot(t, q, labels, fields, rv=rv, token=token, start=start)
            got = paging.page(snapshot, keys, rv=rv, start=start, limit=limit)
            items, remaining, next_token = got.items, got.remaining, got.continue_token
        rv_text = str(rv)
        if tables.wants_table(request.headers.get("Accept")):
            return render(request, tables.to_table(t.kind, items, now=self.registry.clock.now(),
                                                   resource_version=rv_text,
                                                   include_object=include_object(request),
                                                   continue_token=next_token))
        if conversion.differs(t.kind):
            items = [conversion.at_version(t.kind, o) for o in items]
        meta: Obj = {"resourceVersion": rv_text}
        if next_token is not None:
            meta["continue"] = next_token
            if remaining and (labels is None or labels.empty) and (fields is None or fields.empty):
                meta["remainingItemCount"] = remaining
        return render(request, {"kind": list_kind(t.kind), "apiVersion": t.kind.api_version,
                                "metadata": meta, "items": items})

    def _remember(self, t: Target, q: Any, rv: int, items: list[Obj]) -> None:
        """Memoise a list read from etcd at `rv` as the snapshot `_snapshot` finds for that revision."""
        name = (t.kind.resource, str(rv), t.namespace or "", q.get("labelSelector", ""), q.get("fieldSelector", ""))
        self.snapshots.put(name, items)
        self._read_from_etcd.append(name)
        del self._read_from_etcd[:-paging.SNAPSHOTS]

    def _snapshot(self, t: Target, q: Any, labels: LabelSelector | None, fields: FieldSelector | None, *,
                  rv: int, token: str, start: str | None) -> tuple[list[Obj], list[str]]:
        """The list at revision `rv`, sorted by key (memoised; 410 when `rv` has left the watch window)."""
        current = self.registry.store.revision
        name = (t.kind.resource, str(rv), t.namespace or "", q.get("labelSelector", ""), q.get("fieldSelector", ""))
        if rv >= current or (name in self._read_from_etcd and name in self.snapshots):  # (a list read from etcd)
            return self.snapshots.get(name, lambda: self.registry.list_objects(
                t.kind, namespace=t.namespace, labels=labels, fields=fields)[0])
        try:
            state = self.hub.state_at(t.kind, rv)
        except ValueError:
            if not token:
                raise errors.gone(f"too old resource version: {rv} ({self.hub.floor(t.kind)})") from None
            assert start is not None
            raise errors.expired_continue(paging.EXPIRED_MESSAGE, continue_token=paging.Continue(
                rv=paging.LATEST, start=start).encode()) from None
        return self.snapshots.get(name, lambda: select(state.values(), namespace=t.namespace, labels=labels,
                                                      fields=fields))

    async def watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        """A watch stream: newline-delimited JSON events, or concatenated msgpack maps."""
        q = request.query
        labels, fields = selectors(request, t.kind)
        send_initial = flag(q.get("sendInitialEvents"))
        if send_initial and (q.get("resourceVersionMatch") != "NotOlderThan" or not flag(q.get("allowWatchBookmarks"))):
            raise errors.StatusError(422, "Invalid", "sendInitialEvents requires resourceVersionMatch=NotOlderThan "
                                     "and allowWatchBookmarks=true")
        timeout: float | None = None
        if q.get("timeoutSeconds"):
            try:
                timeout = float(q["timeoutSeconds"])
            except ValueError as exc:
                raise errors.bad_request("timeoutSeconds must be a number") from exc
            if not math.isfinite(timeout) or timeout < 0 or timeout > MAX_WATCH_TIMEOUT:
                raise errors.bad_request(f"timeoutSeconds must be between 0 and {MAX_WATCH_TIMEOUT}")
            if timeout == 0:
                timeout = None
        table = tables.wants_table(request.headers.get("Accept"))
        enc = response_encoding(request)
        if t.name is not None:
            raise errors.method_not_allowed("watch a single object with fieldSelector=metadata.name=<name>")
        since = q.get("resourceVersion", "")
        if self.etcd is not None and since.isdigit() and int(since) > self.registry.store.revision:
            # From a revision this cache has not applied yet (a list read from etcd, another
            # apiserver's write): wait for it as kube-apiserver's cacher does, else 504.
            store = self.registry.store
            try:
                await asyncio.wait_for(store.wait_applied(int(since)), FRESH_WAIT)
            except TimeoutError:
                raise errors.too_large_resource_version(int(since), store.revision) from None
        resp = web.StreamResponse(status=200, headers={"Content-Type": codec.content_type(enc),
                                                       "Cache-Control": "no-cache, private"})
        if request.version >= HttpVersion11:
            resp.enable_chunked_encoding()
        else:
            resp.force_close()  # HTTP/1.0 has no chunks: the stream ends with the connection
        try:
            watcher = self.hub.watch(t.kind, namespace=t.namespace, labels=labels, fields=fields,
                                     resource_version=q.get("resourceVersion", ""), send_initial_events=send_initial,
                                     encoding=enc, table=table, bookmarks=flag(q.get("allowWatchBookmarks")),
                                     identity=identity(request))
        except LookupError as exc:
            raise errors.bad_request(str(exc)) from exc
        except ValueError as exc:
            # As the real server: 200, then one ERROR event with the 410 Status, then close.
            await resp.prepare(request)
            await resp.write(encode_event("ERROR", errors.gone(str(exc)).status(), enc))
            return resp
        writer = await resp.prepare(request)
        transport = request.transport
        if transport is not None and writer is not None and resp.chunked and _has_flow_control(transport):
            await resp.write(b"")  # the headers go out now: the direct path writes after them
            watcher.sink = TransportSink(writer=writer, transport=transport)
        try:
            async with asyncio.timeout(timeout):
                async for chunk in watcher.stream():
                    if chunk:
                        await resp.write(chunk)
        except TimeoutError:
            pass  # timeoutSeconds elapsed: end the stream cleanly
        except ConnectionResetError:
            return resp  # the client went away (kubectl closes its watch once satisfied)
        finally:
            # Closed before the response ends: the flusher and chaos must not reach it again.
            watcher.close("stream ended")
            watcher.sink = None
            self.hub.unregister(watcher)
        with contextlib.suppress(ConnectionResetError):
            await resp.write_eof()
        return resp

    def render_written(self, request: web.Request, kind: Kind, obj: Obj, *, status: int = 200,
                       warnings: list[str] | None = None) -> web.Response:
        """The response to a write: the object it stored, in the very bytes its watchers get.

        The write's watch event is found by the object's revision (`WatchHub.event_at`), so the
        object is serialised once per encoding for the response and every watch frame together.
        A no-op update, a dry run or a delete that only marked the object returns another dict
        (no event carries it) and is encoded on its own.
        """
        request[WRITTEN] = Written(kind, obj, status, warnings)
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        event = self.hub.event_at(kind, int(rv)) if rv.isdigit() else None
        if event is None or event.obj is not obj:
            return render(request, conversion.at_version(kind, obj), status=status, warnings=warnings)
        if conversion.differs(kind):
            return render(request, conversion.at_version(kind, obj), status=status, warnings=warnings)
        enc = response_encoding(request)
        request[RESPONSE_RV] = rv
        return _response(event.body(enc), enc, status=status, warnings=warnings)

    async def create(self, request: web.Request, t: Target) -> web.Response:
        """POST a new object."""
        body, _ = await read_body(request)
        warnings: list[str] = []
        if (admitting := self._admitting()) is not None:
            obj = await admitting.create(t.kind, t.namespace, body, write_options(request), warnings=warnings)
        else:
            obj = self.registry.create(t.kind, t.namespace, body, write_options(request), warnings=warnings)
        return self.render_written(request, t.kind, obj, status=201, warnings=warnings)

    async def create_binding(self, request: web.Request, t: Target) -> web.Response:
        """POST /namespaces/{ns}/bindings (the older form of pods/binding)."""
        body, _ = await read_body(request)
        if not isinstance(body, dict) or not (body.get("metadata") or {}).get("name"):
            raise errors.bad_request("a Binding needs metadata.name naming the pod")
        assert t.namespace is not None
        self.registry.bind(t.namespace, body["metadata"]["name"], body, write_options(request))
        return render(request, _binding_echo(body), status=201)

    async def update(self, request: web.Request, t: Target, *, sub: str | None = None) -> web.Response:
        """PUT the object or its status."""
        assert t.name is not None
        body, _ = await read_body(request)
        warnings: list[str] = []
        if (admitting := self._admitting()) is not None:
            obj = await admitting.update(t.kind, t.namespace, t.name, body, write_options(request), subresource=sub,
                                         warnings=warnings)
        else:
            obj = self.registry.update(t.kind, t.namespace, t.name, body, write_options(request), subresource=sub,
                                       warnings=warnings)
        return self.render_written(request, t.kind, obj, warnings=warnings)

    async def patch(self, request: web.Request, t: Target, *, sub: str | None = None) -> web.Response:
        """PATCH with merge, strategic merge, JSON patch or server-side apply."""
        assert t.name is not None
        media = (request.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        patch_type = PATCH_TYPES.get(media)
        if patch_type is None and media == codec.MSGPACK:
            patch_type = request.headers.get("X-Kubemesh-Patch-Type", "merge")
        if patch_type is None:
            raise errors.unsupported_media_type(patch_media_types(t.kind))
        body, _ = await read_body(request)
        warnings: list[str] = []
        if (admitting := self._admitting()) is not None:
            obj, created = await admitting.patch(t.kind, t.namespace, t.name, body, patch_type, write_options(request),
                                                 subresource=sub, warnings=warnings)
        else:
            obj, created = self.registry.patch(t.kind, t.namespace, t.name, body, patch_type, write_options(request),
                                               subresource=sub, warnings=warnings)
        return self.render_written(request, t.kind, obj, status=201 if created else 200, warnings=warnings)

    async def delete(self, request: web.Request, t: Target) -> web.Response:
        """DELETE one object (graceful for bound pods)."""
        assert t.name is not None
        body, _ = await read_body(request)
        opts = DeleteOptions.from_obj(body, dict(request.query))
        if (admitting := self._admitting()) is not None:
            obj = await admitting.delete(t.kind, t.namespace, t.name, opts)
        else:
            obj = self.registry.delete(t.kind, t.namespace, t.name, opts)
        return self.render_written(request, t.kind, obj)

    def _admitting(self) -> Admitting | None:
        """The webhook write path, when there is a webhook configuration at all (else the direct one)."""
        admitting = self.admitting
        return admitting if admitting is not None and admitting.webhooks.configured() else None

    async def delete_collection(self, request: web.Request, t: Target) -> web.Response:
        """DELETE on a collection."""
        body, _ = await read_body(request)
        opts = DeleteOptions.from_obj(body, dict(request.query))
        labels, fields = selectors(request, t.kind)
        items = self.registry.delete_collection(t.kind, t.namespace, labels=labels, fields=fields, opts=opts)
        items = [conversion.at_version(t.kind, o) for o in items]
        return render(request, {"kind": list_kind(t.kind), "apiVersion": t.kind.api_version,
                                "metadata": {"resourceVersion": str(self.registry.store.revision)},
                                "items": items})

    async def subresource(self, request: web.Request, t: Target) -> web.StreamResponse:
        """status, scale, binding, eviction, and the pods' streams (`pod_streams`)."""
        assert t.name is not None and t.sub is not None
        method = request.method
        if t.sub == "status":
            if method == "GET":
                return await self.get(request, t)
            if method == "PUT":
                return await self.update(request, t, sub="status")
            if method == "PATCH":
                return await self.patch(request, t, sub="status")
        elif t.sub == "scale":
            assert t.namespace is not None
            if method == "GET":
                return render(request, self.registry.get_scale(t.kind, t.namespace, t.name))
            if method == "PUT":
                body, _ = await read_body(request)
                return render(request, self.registry.update_scale(t.kind, t.namespace, t.name, body,
                                                                  write_options(request)))
            if method == "PATCH":
                media = (request.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
                patch_type = PATCH_TYPES.get(media)
                if patch_type is None:
                    raise errors.unsupported_media_type(patch_media_types(t.kind))
                body, _ = await read_body(request)
                return render(request, self.registry.patch_scale(t.kind, t.namespace, t.name, body, patch_type,
                                                                 write_options(request)))
        elif t.sub == "finalize" and t.kind is NAMESPACES and method == "PUT":
            body, _ = await read_body(request)
            return render(request, self.registry.finalize_namespace(t.name, body, write_options(request)))
        elif t.sub == "binding" and t.kind is PODS and method == "POST":
            assert t.namespace is not None
            body, _ = await read_body(request)
            self.registry.bind(t.namespace, t.name, body, write_options(request))
            # The real server answers a Status; both Python clients then fail to parse it
            # as a V1Binding. Echoing the Binding is harmless for Go clients and works for all.
            return render(request, _binding_echo(body), status=201)
        elif t.kind is PODS and t.sub in self.pod_streams:
            return await self.pod_streams[t.sub](request, t)
        elif t.sub == "token" and t.kind is SERVICEACCOUNTS and method == "POST" and self.authenticator is not None:
            assert t.namespace is not None
            body, _ = await read_body(request)
            sa = self.registry.get(SERVICEACCOUNTS, t.namespace, t.name)
            jti = str(uuid.UUID(int=self.registry.rng.getrandbits(128), version=4))
            return render(request, self.authenticator.token_request(sa=sa, body=body, jti=jti), status=201)
        elif t.sub == "eviction" and t.kind is PODS and method == "POST":
            assert t.namespace is not None
            body, _ = await read_body(request)
            self.registry.evict(t.namespace, t.name, body)
            return render(request, errors.success(201), status=201)
        raise errors.method_not_allowed()


def list_kind(kind: Kind) -> str:
    """The kind of a list: `PodList`, or a CRD's `listKind`."""
    custom = customobjects.custom_of(kind)
    return custom.list_kind if custom is not None else f"{kind.kind}List"


def _attributes(request: web.Request, t: Target, verb: str) -> Attributes:
    """The authorizer's view of a resource request (upstream's RequestInfo).

    A namespace's own requests are in that namespace; a list or watch whose field selector is
    `metadata.name=<x>` names `<x>` (so `resourceNames` can allow watching one object).
    """
    name = t.name or ""
    if not name and verb in ("list", "watch"):
        selector = request.query.get("fieldSelector", "")
        if selector.startswith("metadata.name=") and "," not in selector:
            name = selector[len("metadata.name="):]
    namespace = t.namespace or (t.name or "" if t.kind is NAMESPACES else "")
    return Attributes(verb=verb, group=t.kind.group, resource=t.kind.plural, subresource=t.sub or "",
                      namespace=namespace, name=name)


def _verb_of(method: str, t: Target, request: web.Request) -> str:
    """The Kubernetes verb a request on a resource path is."""
    if t.name is None:
        if method == "GET":
            return "watch" if (t.watch or flag(request.query.get("watch"))) else "list"
        return {"POST": "create", "DELETE": "deletecollection"}.get(method, method.lower())
    return {"GET": "get", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())


def _binding_echo(body: Any) -> Obj:
    out: Obj = dict(body) if isinstance(body, dict) else {}
    out.setdefault("kind", "Binding")
    out.setdefault("apiVersion", "v1")
    return out

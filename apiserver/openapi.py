"""OpenAPI stubs: `/openapi/v3`, `/openapi/v3/{api/v1 | apis/g/v}` and `/openapi/v2` (protobuf).

What clients depend on: `kubectl create -f`, `apply -f` and `replace -f` validate by default
and fail with "failed to download openapi" unless the server serves OpenAPI. kubectl
1.29-1.33 read the v3 index and the group/version document, then fall back to v2; 1.27 and
1.28 read only v2, as a protobuf gnostic `openapi_v2.Document`. In both, kubectl looks for
the PATCH operation whose `x-kubernetes-group-version-kind` is the object's kind and which
declares a `fieldValidation` query parameter; when it finds one it skips client-side schema
validation and sends `?fieldValidation=Strict` to the server instead.

So these documents hold exactly that: one path per served kind that supports `patch`
(`.../{plural}/{name}`, from the apiserver's `KindTable`), whose PATCH operation has the GVK
extension and the `fieldValidation` parameter (and, for the create-only access reviews, their
POST). They carry no schemas on purpose: with no schema for a kind,
`kubectl apply` takes its strategic-merge metadata from the types compiled into kubectl, which
are complete; a partial schema here would make it compute wrong patches. `kubectl explain`
therefore has nothing to explain.

The v2 document must be served with `OPENAPI_V2_CONTENT_TYPE`, the form without `@`: Go's
mime parser rejects the `@` form kubectl puts in its Accept header.

Every document is built once per generation of the kind table (`OpenApi`) and shared: callers
must not mutate the returned values.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any, Final, TypeVar

import orjson

from kubemesh.apiserver.discovery import SERVER_VERSION, Discovery
from kubemesh.services.model.kinds import Kind, Obj

T = TypeVar("T")

OPENAPI_V2_CONTENT_TYPE: Final = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
"""Content-Type of `/openapi/v2` (kubectl asks for `...spec.v2@v1.0+protobuf`; answer with this)."""

_GVK_EXTENSION: Final = "x-kubernetes-group-version-kind"


def _gv_path(group: str, version: str) -> str:
    """The index key of a group/version: `api/v1` or `apis/{group}/{version}`."""
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _item_path(kind: Kind) -> str:
    ns = "/namespaces/{namespace}" if kind.namespaced else ""
    return f"{kind.prefix}{ns}/{kind.plural}/{{name}}"


def _collection_path(kind: Kind) -> str:
    ns = "/namespaces/{namespace}" if kind.namespaced else ""
    return f"{kind.prefix}{ns}/{kind.plural}"


def _operation_id(kind: Kind) -> str:
    scope = "Namespaced" if kind.namespaced else ""
    return f"patch{scope}{kind.kind}"


# ---------------------------------------------------------------------------------------------
# The documents of one kind table


class OpenApi:
    """The OpenAPI documents of the kinds one apiserver serves, rebuilt when its kind table changes."""

    def __init__(self, discovery: Discovery) -> None:
        self.discovery = discovery
        self.kinds = discovery.kinds
        self._generation = -1
        self._memo: dict[str, Any] = {}

    def _cached(self, key: str, build: Callable[[], T]) -> T:
        if self._generation != self.kinds.generation:
            self._memo.clear()
            self._generation = self.kinds.generation
        if key not in self._memo:
            self._memo[key] = build()
        value: T = self._memo[key]
        return value

    def _patchable(self) -> list[Kind]:
        return [k for k in self.kinds.all() if "patch" in k.verbs]

    def _v3_documents(self) -> dict[str, Obj]:
        def build() -> dict[str, Obj]:
            docs: dict[str, Obj] = {}
            for group, versions in self.discovery.served_group_versions().items():
                for version in versions:
                    paths: Obj = {}
                    for kind in self.kinds.all():
                        if kind.group != group or kind.version != version:
                            continue
                        if "patch" in kind.verbs:
                            paths[_item_path(kind)] = {"patch": _v3_operation(kind)}
                        elif "create" in kind.verbs:  # the access reviews: create-only
                            paths[_collection_path(kind)] = {"post": _v3_create(kind)}
                    docs[_gv_path(group, version)] = {
                        "openapi": "3.0.0",
                        "info": {"title": "Kubernetes", "version": SERVER_VERSION},
                        "paths": paths,
                        "components": {"schemas": {}},
                    }
            return docs
        return self._cached("v3", build)

    def v3_index(self) -> Obj:
        """`GET /openapi/v3`: `{"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=..."}}}`.

        One entry per served group/version; the hash is the SHA-512 of the document, so clients
        may cache documents by URL forever.
        """
        def build() -> Obj:
            paths: Obj = {}
            for path, doc in self._v3_documents().items():
                digest = hashlib.sha512(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)).hexdigest().upper()
                paths[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
            return {"paths": paths}
        return self._cached("v3-index", build)

    def v3_document(self, path: str) -> Obj | None:
        """`GET /openapi/v3/{path}` for `path` like `api/v1` or `apis/apps/v1`, or None if not served.

        Surrounding slashes are ignored; the `hash` query parameter is the caller's to ignore.
        """
        return self._v3_documents().get(path.strip("/"))

    def v2_protobuf(self) -> bytes:
        """`GET /openapi/v2`: the gnostic `openapi_v2.Document`, to serve as `OPENAPI_V2_CONTENT_TYPE`."""
        def build() -> bytes:
            paths = b"".join(_field(2, _field(1, _item_path(kind)) + _field(2, _field(8, _v2_operation(kind))))
                             for kind in self._patchable())
            info = _field(1, "Kubernetes") + _field(2, SERVER_VERSION)
            return _field(1, "2.0") + _field(2, info) + _field(8, paths)
        return self._cached("v2", build)


def _v3_operation(kind: Kind) -> Obj:
    return {
        "operationId": _operation_id(kind),
        _GVK_EXTENSION: {"group": kind.group, "version": kind.version, "kind": kind.kind},
        "parameters": [
            {
                "name": "fieldValidation",
                "in": "query",
                "description": "How the server treats unknown or duplicate fields: Ignore, Warn or Strict.",
                "schema": {"type": "string"},
            }
        ],
        "responses": {"200": {"description": "OK"}},
    }


def _v3_create(kind: Kind) -> Obj:
    scope = "Namespaced" if kind.namespaced else ""
    return {
        "operationId": f"create{scope}{kind.kind}",
        _GVK_EXTENSION: {"group": kind.group, "version": kind.version, "kind": kind.kind},
        "responses": {"201": {"description": "Created"}},
    }


# ---------------------------------------------------------------------------------------------
# OpenAPI v2 (gnostic protobuf, hand-encoded)
#
# Field numbers of OpenAPIv2.proto (github.com/google/gnostic-models):
#   Document{swagger=1, info=2, paths=8}    Info{title=1, version=2}
#   Paths{path=2: NamedPathItem{name=1, value=2: PathItem{patch=8}}}
#   Operation{operation_id=5, parameters=8, vendor_extension=13}
#   ParametersItem{parameter=1} -> Parameter{non_body_parameter=2}
#     -> NonBodyParameter{query_parameter_sub_schema=3} -> QueryParameterSubSchema{in=2, name=4, type=6}
#   NamedAny{name=1, value=2: Any{yaml=2}}


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low = n & 0x7F
        n >>= 7
        if n:
            out.append(low | 0x80)
        else:
            out.append(low)
            return bytes(out)


def _field(number: int, payload: bytes | str) -> bytes:
    """A length-delimited field (wire type 2): a string or an embedded message."""
    data = payload.encode() if isinstance(payload, str) else payload
    return _varint((number << 3) | 2) + _varint(len(data)) + data


def _v2_operation(kind: Kind) -> bytes:
    query = _field(2, "query") + _field(4, "fieldValidation") + _field(6, "string")
    parameter = _field(1, _field(2, _field(3, query)))
    gvk_yaml = f'group: "{kind.group}"\nkind: {kind.kind}\nversion: {kind.version}\n'
    extension = _field(1, _GVK_EXTENSION) + _field(2, _field(2, gvk_yaml))
    return _field(5, _operation_id(kind)) + _field(8, parameter) + _field(13, extension)

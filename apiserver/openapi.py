"""OpenAPI stubs: `/openapi/v3`, `/openapi/v3/{api/v1 | apis/g/v}` and `/openapi/v2` (protobuf).

What clients depend on: `kubectl create -f`, `apply -f` and `replace -f` validate by default
and fail with "failed to download openapi" unless the server serves OpenAPI. kubectl
1.29-1.33 read the v3 index and the group/version document, then fall back to v2; 1.27 and
1.28 read only v2, as a protobuf gnostic `openapi_v2.Document`. In both, kubectl looks for
the PATCH operation whose `x-kubernetes-group-version-kind` is the object's kind and which
declares a `fieldValidation` query parameter; when it finds one it skips client-side schema
validation and sends `?fieldValidation=Strict` to the server instead.

So these documents hold that: one path per served kind that supports `patch`
(`.../{plural}/{name}`, from the apiserver's `KindTable`), whose PATCH operation has the GVK
extension and the `fieldValidation` parameter (and, for the create-only access reviews, their
POST); and, in the v3 documents, a component schema for every kind served, with the GVK
extension `kubectl explain` looks for, so that it explains any field at any depth.

A built-in kind's schema is built from the same `schema.json` validation reads (the official
client's models: every field with its type, `scripts/gen_schema.py`), one schema per model,
named `io.k8s.kubemesh.models.<version>.<Type>` (an honest name: not upstream's Go package). kubectl 1.30+
computes client-side apply patches from v3 schemas, so every list carries the strategic-merge
extensions (`x-kubernetes-patch-merge-key`, `x-kubernetes-patch-strategy`) of the server's own
rules (`patching.MERGE_RULES`): kubectl and the server then agree on every list's strategy, and a
list the table does not key is atomic on both sides. The schemas carry no descriptions (those
would be upstream's text). A custom resource's schema is its CRD's. The v2 document (kubectl
1.27-1.29 read it for apply) has paths only, so those versions take their strategic-merge
metadata from the types compiled into them.

The v2 document must be served with `OPENAPI_V2_CONTENT_TYPE`, the form without `@`: Go's
mime parser rejects the `@` form kubectl puts in its Accept header.

Every document is built once per generation of the kind table (`OpenApi`) and shared: callers
must not mutate the returned values.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any, Final, TypeVar

import orjson

from kubemesh.apiserver.customresources.objects import custom_of
from kubemesh.apiserver.discovery import SERVER_VERSION, Discovery
from kubemesh.apiserver.patching import field_rule
from kubemesh.apiserver.validation import model_types
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
                    schemas: Obj = {}
                    for kind in self.kinds.all():
                        if kind.group != group or kind.version != version:
                            continue
                        custom = custom_of(kind)
                        if custom is not None:
                            schemas[_definition_name(kind)] = _custom_schema(kind, custom.openapi_schema)
                            schemas.setdefault(_OBJECT_META, _OBJECT_META_SCHEMA)
                        else:
                            schemas.update(builtin_schemas(kind))
                    docs[_gv_path(group, version)] = {
                        "openapi": "3.0.0",
                        "info": {"title": "Kubernetes", "version": SERVER_VERSION},
                        "paths": paths,
                        "components": {"schemas": schemas},
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


_OBJECT_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_OBJECT_META_SCHEMA: Final[Obj] = {
    "description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects "
                   "users must create.",
    "type": "object",
    "properties": {
        "name": {"type": "string", "description": "Name must be unique within a namespace."},
        "generateName": {"type": "string", "description": "An optional prefix used by the server to generate a "
                                                          "unique name."},
        "namespace": {"type": "string", "description": "The namespace the object lives in."},
        "labels": {"type": "object", "additionalProperties": {"type": "string"},
                   "description": "Map of string keys and values to organize and categorize objects."},
        "annotations": {"type": "object", "additionalProperties": {"type": "string"},
                        "description": "Unstructured key value map stored with a resource."},
        "uid": {"type": "string", "description": "The unique in time and space value for this object."},
        "resourceVersion": {"type": "string", "description": "The version of this object, for optimistic "
                                                              "concurrency and watches."},
        "generation": {"type": "integer", "format": "int64",
                       "description": "A sequence number representing a specific generation of the desired state."},
        "creationTimestamp": {"type": "string", "format": "date-time", "description": "When this object was "
                                                                                      "created."},
        "deletionTimestamp": {"type": "string", "format": "date-time", "description": "When this object will be "
                                                                                      "deleted."},
        "finalizers": {"type": "array", "items": {"type": "string"}, "description": "Must be empty before the "
                                                                                   "object is deleted from the "
                                                                                   "registry."},
        "ownerReferences": {"type": "array", "items": {"type": "object"}, "description": "Objects depended on by "
                                                                                        "this object."},
    },
}


def _definition_name(kind: Kind) -> str:
    """`com.example.v1.Widget`: the group reversed, then version and kind, as upstream names them."""
    return ".".join([*reversed(kind.group.split(".")), kind.version, kind.kind])


def _custom_schema(kind: Kind, schema: Obj) -> Obj:
    """A custom resource's schema as published: its CRD's, with apiVersion, kind and metadata described."""
    props = dict(schema.get("properties") or {})
    props["apiVersion"] = {"type": "string", "description": "APIVersion defines the versioned schema of this "
                           "representation of an object."}
    props["kind"] = {"type": "string", "description": "Kind is a string value representing the REST resource "
                     "this object represents."}
    props["metadata"] = {"allOf": [{"$ref": f"#/components/schemas/{_OBJECT_META}"}],
                         "description": "Standard object's metadata."}
    out = {**schema, "type": schema.get("type") or "object", "properties": props}
    out[_GVK_EXTENSION] = [{"group": kind.group, "version": kind.version, "kind": kind.kind}]
    return out


_MODEL_PREFIX: Final = "io.k8s.kubemesh.models."
_SCALARS: Final[dict[str, Obj]] = {
    "str": {"type": "string"},
    "int": {"type": "integer", "format": "int64"},
    "float": {"type": "number", "format": "double"},
    "bool": {"type": "boolean"},
    "datetime": {"type": "string", "format": "date-time"},
    "date": {"type": "string", "format": "date"},
    "bytes": {"type": "string", "format": "byte"},
    "object": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
}


_MODEL_NAME: Final = re.compile(r"^((?:[A-Z][a-z]+)*V\d+(?:(?:alpha|beta)\d+)?)([A-Z].*)$")


def schema_name(model: str) -> str:
    """`io.k8s.kubemesh.models.v1.ResourceRequirements` for the client's `V1ResourceRequirements`.

    kubectl shows the last segment as the field's type, so it is the type's own name; the
    segment before it (the client's version prefix) keeps names unique (`corev1.Event`).
    """
    m = _MODEL_NAME.match(model)
    return f"{_MODEL_PREFIX}{m.group(1).lower()}.{m.group(2)}" if m else _MODEL_PREFIX + model


def _ref(model: str) -> Obj:
    return {"allOf": [{"$ref": f"#/components/schemas/{schema_name(model)}"}]}


def _type_schema(spelled: str, models: dict[str, dict[str, str]], todo: list[str]) -> Obj:
    """The schema of a field whose type the client spells `spelled`; models met are queued."""
    for prefix, key in (("List[", "items"), ("list[", "items")):
        if spelled.startswith(prefix) and spelled.endswith("]"):
            return {"type": "array", key: _type_schema(spelled[len(prefix):-1], models, todo)}
    for prefix in ("Dict[str, ", "dict(str, "):
        if spelled.startswith(prefix):
            inner = spelled[len(prefix):-1]
            return {"type": "object", "additionalProperties": _type_schema(inner, models, todo)}
    if spelled in models:
        todo.append(spelled)
        return _ref(spelled)
    return dict(_SCALARS.get(spelled, {}))


def builtin_schemas(kind: Kind) -> dict[str, Obj]:
    """The component schemas of a built-in kind: its model and every model it reaches, by name."""
    kinds, models = model_types()
    root = kinds.get(kind.kind if kind.storage else f"{kind.api_version}/{kind.kind}")
    if root is None or root not in models:
        return {}
    patch_ext = _patch_extensions(kind, root, models)
    out: dict[str, Obj] = {}
    todo = [root]
    while todo:
        model = todo.pop()
        name = schema_name(model)
        if name in out:
            continue
        props: Obj = {}
        for field, spelled in models[model].items():
            prop = _type_schema(spelled, models, todo)
            prop.update(patch_ext.get((model, field), {}))
            props[field] = prop
        out[name] = {"type": "object", "properties": props}
    out[schema_name(root)][_GVK_EXTENSION] = [{"group": kind.group, "version": kind.version, "kind": kind.kind}]
    return out


def _patch_extensions(kind: Kind, root: str, models: dict[str, dict[str, str]]) -> dict[tuple[str, str], Obj]:
    """(model, field) -> the strategic-merge extensions the server's rules give that list field in `kind`."""
    out: dict[tuple[str, str], Obj] = {}

    def walk(model: str, path: tuple[str, ...], stack: frozenset[str]) -> None:
        for field, spelled in models[model].items():
            here = (*path, field)
            rule = field_rule(kind.kind, here)
            ext: Obj = {}
            if rule.merge_key is not None:
                ext = {"x-kubernetes-patch-merge-key": rule.merge_key,
                       "x-kubernetes-patch-strategy": "merge,retainKeys" if rule.retain_keys else "merge"}
            elif rule.primitive_merge:
                ext = {"x-kubernetes-patch-strategy": "merge"}
            elif rule.retain_keys:
                ext = {"x-kubernetes-patch-strategy": "retainKeys"}
            if ext:
                out.setdefault((model, field), ext)
            inner = spelled
            for prefix in ("List[", "list[", "Dict[str, ", "dict(str, "):
                if inner.startswith(prefix):
                    inner = inner[len(prefix):-1]
            if inner in models and inner not in stack and len(here) < 16:
                walk(inner, here, stack | {inner})

    walk(root, (), frozenset({root}))
    return out


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

"""The four PATCH flavours of the Kubernetes API, applied to plain JSON-like dicts.

* `apply_merge_patch`: JSON merge patch (RFC 7386, `application/merge-patch+json`): maps merge
  recursively, `null` deletes a key, every other value (lists included) replaces.
* `apply_json_patch`: JSON patch (RFC 6902, `application/json-patch+json`): add, remove, replace,
  move, copy, test; JSON pointers with `~0`/`~1` escapes; `-` appends to an array.
* `apply_strategic_merge_patch`: strategic merge patch (`application/strategic-merge-patch+json`),
  as kubectl (cordon, taint, drain, client-side apply) and the Python clients (any dict body) send it.
* `apply_server_side_apply`: the merge of server-side apply (`application/apply-patch+yaml`); field
  ownership, conflicts and the removal of fields a manager stops applying are `fieldmanager`'s.

Guarantees shared by all four:

* Inputs are never mutated, and the result shares no dict or list with them: the store keeps old
  versions of objects for watch history, and any aliasing would rewrite that history.
* Failures raise `PatchError` with `code` 400 when the patch document itself is malformed
  (not an object, unknown op, bad directive, list element without its merge key) and 422 when
  it is well-formed but cannot be applied (JSON patch `test` failed, a path that does not exist).

Strategic merge patch semantics (those of k8s.io/apimachinery's strategicpatch):

* Maps merge recursively; `null` deletes the key. A value for a key the target lacks is merged
  into an empty value, so nested `null`s and directives never leak into the stored object.
* A list's strategy comes from `MERGE_RULES`, a table keyed by kind and by the field path from
  the object root (list elements add no segment: `spec.containers.env` is the env list of every
  container). Lists with a merge key merge element-wise by that key; primitive lists marked
  `primitive_merge` (`metadata.finalizers`, node `spec.podCIDRs`) are unioned; every other list is
  atomic and replaced whole (node `spec.taints`, pod `spec.tolerations`, `status.containerStatuses`).
  Maps marked `replace` (PDB `spec.selector`) are replaced whole.
* Directives: `$patch: replace|delete|merge` on a map; `{"$patch": "delete", <key>: v}` and
  `{"$patch": "replace"}` as list elements; `$retainKeys: [...]` (keys of the target not listed
  are cleared first); `$setElementOrder/<list>: [...]` (the order of the merged list, as kubectl
  apply sends every time); `$deleteFromPrimitiveList/<list>: [...]`.
* Order of a merged list: the patch's items take the order of `$setElementOrder` (or of the patch),
  items only in the target keep theirs, and the two sequences are interleaved by their positions
  in the target. Items new to the target therefore come before target-only items unless
  `$setElementOrder` places them, as upstream does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from kubemesh.services.model.kinds import Kind, Obj

__all__ = [
    "MERGE_RULES",
    "FieldRule",
    "PatchError",
    "apply_json_patch",
    "apply_merge_patch",
    "apply_server_side_apply",
    "apply_strategic_merge_patch",
    "field_rule",
    "rules_for",
]


class PatchError(ValueError):
    """A patch that is malformed (`code` 400) or cannot be applied (`code` 422)."""

    def __init__(self, message: str, *, code: int = 422) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _copy(value: Any) -> Any:
    """Deep copy of a JSON-like value (much faster than copy.deepcopy for this shape)."""
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _json_equal(a: Any, b: Any) -> bool:
    """Equality as JSON defines it: numbers by value, but booleans are not numbers."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict):
        return (
            isinstance(b, dict)
            and a.keys() == b.keys()
            and all(_json_equal(v, b[k]) for k, v in a.items())
        )
    if isinstance(a, list):
        return (
            isinstance(b, list)
            and len(a) == len(b)
            and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
        )
    return type(a) is type(b) and bool(a == b)


# ---------------------------------------------------------------------------------------------
# JSON merge patch (RFC 7386).


def _merge(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return _copy(patch)
    result: dict[str, Any] = {k: _copy(v) for k, v in target.items()} if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = _merge(result.get(key), value)
    return result


def apply_merge_patch(target: Obj, patch: Any) -> Obj:
    """Apply an RFC 7386 merge patch; the patch must be an object, as the result must be one."""
    if not isinstance(patch, dict):
        raise PatchError("merge patch must be a JSON object", code=400)
    result: Obj = _merge(target, patch)
    return result


# ---------------------------------------------------------------------------------------------
# JSON patch (RFC 6902).


def _pointer(path: Any, op: str) -> list[str]:
    """Decode a JSON pointer into reference tokens."""
    if not isinstance(path, str):
        raise PatchError(f"json patch {op}: path must be a string", code=400)
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"json patch {op}: invalid JSON pointer {path!r}: must start with '/'", code=400)
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _index(token: str, length: int, *, path: str, allow_end: bool) -> int:
    """A list index from a pointer token; `allow_end` admits `length` (insert at the end)."""
    if token == "-" and allow_end:
        return length
    if not token.isdigit() or (len(token) > 1 and token[0] == "0") or not token.isascii():
        raise PatchError(f"json patch: invalid array index {token!r} in {path!r}")
    i = int(token)
    if i > length or (i == length and not allow_end):
        raise PatchError(f"json patch: array index {i} out of bounds in {path!r}")
    return i


def _parent(doc: Any, tokens: list[str], path: str) -> Any:
    """The container holding the last token of the pointer."""
    cur = doc
    for token in tokens[:-1]:
        if isinstance(cur, dict):
            if token not in cur:
                raise PatchError(f"json patch: path {path!r} does not exist")
            cur = cur[token]
        elif isinstance(cur, list):
            cur = cur[_index(token, len(cur), path=path, allow_end=False)]
        else:
            raise PatchError(f"json patch: path {path!r} does not exist")
    if not isinstance(cur, dict | list):
        raise PatchError(f"json patch: path {path!r} does not exist")
    return cur


def _get(doc: Any, tokens: list[str], path: str) -> Any:
    if not tokens:
        return doc
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"json patch: path {path!r} does not exist")
        return parent[last]
    return parent[_index(last, len(parent), path=path, allow_end=False)]


def _add(doc: Any, tokens: list[str], value: Any, path: str) -> Any:
    """Add `value` (already a private copy) and return the (possibly new) document root."""
    if not tokens:
        return value
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    else:
        parent.insert(_index(last, len(parent), path=path, allow_end=True), value)
    return doc


def _remove(doc: Any, tokens: list[str], path: str) -> Any:
    """Remove the value at the pointer and return it."""
    if not tokens:
        raise PatchError("json patch: cannot remove the whole document")
    parent = _parent(doc, tokens, path)
    last = tokens[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"json patch: path {path!r} does not exist")
        return parent.pop(last)
    return parent.pop(_index(last, len(parent), path=path, allow_end=False))


def apply_json_patch(target: Obj, ops: Any) -> Obj:
    """Apply an RFC 6902 JSON patch; all operations succeed or none takes effect."""
    if not isinstance(ops, list):
        raise PatchError("json patch must be a JSON array of operations", code=400)
    doc: Any = _copy(target)
    for n, operation in enumerate(ops):
        if not isinstance(operation, dict):
            raise PatchError(f"json patch: operation {n} is not an object", code=400)
        op = operation.get("op")
        if op not in ("add", "remove", "replace", "move", "copy", "test"):
            raise PatchError(f"json patch: unexpected kind of operation {op!r}", code=400)
        if "path" not in operation:
            raise PatchError(f"json patch {op}: missing path", code=400)
        path = operation["path"]
        tokens = _pointer(path, op)
        if op in ("add", "replace", "test") and "value" not in operation:
            raise PatchError(f"json patch {op}: missing value", code=400)
        if op == "add":
            doc = _add(doc, tokens, _copy(operation["value"]), path)
        elif op == "remove":
            _remove(doc, tokens, path)
        elif op == "replace":
            if not tokens:
                doc = _copy(operation["value"])
            else:
                _get(doc, tokens, path)  # must exist
                parent = _parent(doc, tokens, path)
                if isinstance(parent, dict):
                    parent[tokens[-1]] = _copy(operation["value"])
                else:
                    i = _index(tokens[-1], len(parent), path=path, allow_end=False)
                    parent[i] = _copy(operation["value"])
        elif op == "test":
            if not _json_equal(_get(doc, tokens, path), operation["value"]):
                raise PatchError(f"json patch: test failed: the value at {path!r} is not the expected one")
        else:
            if "from" not in operation:
                raise PatchError(f"json patch {op}: missing from", code=400)
            source = operation["from"]
            from_tokens = _pointer(source, op)
            if op == "move":
                if from_tokens == tokens:
                    _get(doc, tokens, path)  # a no-op, but the location must exist
                    continue
                if tokens[: len(from_tokens)] == from_tokens:
                    raise PatchError(f"json patch move: cannot move {source!r} into its own child {path!r}")
                doc = _add(doc, tokens, _remove(doc, from_tokens, source), path)
            else:
                doc = _add(doc, tokens, _copy(_get(doc, from_tokens, source)), path)
    if not isinstance(doc, dict):
        raise PatchError("json patch: the result is not a JSON object")
    result: Obj = doc
    return result


# ---------------------------------------------------------------------------------------------
# Strategic merge patch: the patch-strategy table.


@dataclass(frozen=True, slots=True, kw_only=True)
class FieldRule:
    """How strategic merge patch treats one field (the `patchStrategy` struct tags of k8s.io/api)."""

    merge_key: str | None = None
    """A list of maps merged element-wise by this key."""
    primitive_merge: bool = False
    """A list of scalars merged as a set union."""
    replace: bool = False
    """A map replaced whole instead of merged."""
    retain_keys: bool = False
    """Clients may send `$retainKeys` for this field (honoured wherever it appears)."""


_Table = dict[tuple[str, ...], FieldRule]


def _key(name: str, *, retain_keys: bool = False) -> FieldRule:
    return FieldRule(merge_key=name, retain_keys=retain_keys)


_PRIMITIVE: Final = FieldRule(primitive_merge=True)


def _mount(prefix: tuple[str, ...], table: _Table) -> _Table:
    """Re-root a table of paths under `prefix` (a struct embedded at that path)."""
    return {prefix + path: rule for path, rule in table.items()}


_OBJECT_META: Final[_Table] = {
    ("finalizers",): _PRIMITIVE,
    ("ownerReferences",): _key("uid"),
}
_CONTAINER: Final[_Table] = {
    ("ports",): _key("containerPort"),
    ("env",): _key("name"),
    ("volumeMounts",): _key("mountPath"),
    ("volumeDevices",): _key("devicePath"),
}
_POD_SPEC: Final[_Table] = {
    ("containers",): _key("name"),
    **_mount(("containers",), _CONTAINER),
    ("initContainers",): _key("name"),
    **_mount(("initContainers",), _CONTAINER),
    ("ephemeralContainers",): _key("name"),
    **_mount(("ephemeralContainers",), _CONTAINER),
    ("volumes",): _key("name", retain_keys=True),
    ("imagePullSecrets",): _key("name"),
    ("hostAliases",): _key("ip"),
    ("topologySpreadConstraints",): _key("topologyKey"),
    ("schedulingGates",): _key("name"),
    ("resourceClaims",): _key("name", retain_keys=True),
}
_POD_STATUS: Final[_Table] = {
    ("conditions",): _key("type"),
    ("podIPs",): _key("ip"),
    ("hostIPs",): _key("ip"),
    ("resourceClaimStatuses",): _key("name", retain_keys=True),
}
_CONDITIONS: Final[_Table] = {("status", "conditions"): _key("type")}
_POD_TEMPLATE: Final[_Table] = {
    **_mount(("spec", "template", "metadata"), _OBJECT_META),
    **_mount(("spec", "template", "spec"), _POD_SPEC),
}

_KIND_TABLES: Final[dict[str, _Table]] = {
    "Pod": {**_mount(("spec",), _POD_SPEC), **_mount(("status",), _POD_STATUS)},
    "Node": {
        ("spec", "podCIDRs"): _PRIMITIVE,
        ("status", "conditions"): _key("type"),
        ("status", "addresses"): _key("type"),
    },
    "Namespace": _CONDITIONS,
    "Deployment": {**_POD_TEMPLATE, **_CONDITIONS, ("spec", "strategy"): FieldRule(retain_keys=True)},
    "ReplicaSet": {**_POD_TEMPLATE, **_CONDITIONS},
    "DaemonSet": {**_POD_TEMPLATE, **_CONDITIONS},
    "StatefulSet": {**_POD_TEMPLATE, **_CONDITIONS},
    "Service": {("spec", "ports"): _key("port"), **_CONDITIONS},
    "PodDisruptionBudget": {("spec", "selector"): FieldRule(replace=True), **_CONDITIONS},
    "ServiceAccount": {("secrets",): _key("name")},
    "Binding": {},
    "Event": {},
    "ConfigMap": {},
    "Lease": {},
    "PriorityClass": {},
}

MERGE_RULES: Final[Mapping[str, Mapping[tuple[str, ...], FieldRule]]] = {
    kind: {**_mount(("metadata",), _OBJECT_META), **table} for kind, table in _KIND_TABLES.items()
}
"""Patch strategies by kind and by field path from the object root; absent paths are atomic."""

_DEFAULT_RULES: Final[Mapping[tuple[str, ...], FieldRule]] = _mount(("metadata",), _OBJECT_META)
_NO_RULE: Final = FieldRule()


def field_rule(kind: str, path: tuple[str, ...]) -> FieldRule:
    """The strategy of the field at `path` (field names from the root) of objects of `kind`."""
    return MERGE_RULES.get(kind, _DEFAULT_RULES).get(path, _NO_RULE)


# ---------------------------------------------------------------------------------------------
# Strategic merge patch: the engine.

_PATCH: Final = "$patch"
_RETAIN: Final = "$retainKeys"
_ORDER: Final = "$setElementOrder/"
_DELETE_FROM: Final = "$deleteFromPrimitiveList/"


class _Merger:
    """One strategic merge: the kind's rule table and whether `$` directives are interpreted."""

    __slots__ = ("directives", "rules")

    def __init__(self, rules: Mapping[tuple[str, ...], FieldRule], *, directives: bool) -> None:
        self.rules = rules
        self.directives = directives

    # The target values handed to these methods are private copies: they are mutated in place.

    def value(self, original: Any, patch: Any, path: tuple[str, ...]) -> Any:
        """Merge one patch value into one original value (None when the target lacks it)."""
        if isinstance(patch, dict):
            if self.rules.get(path, _NO_RULE).replace:
                return self.merge_map({}, patch, path)
            return self.merge_map(original if isinstance(original, dict) else {}, patch, path)
        if isinstance(patch, list):
            return self.merge_list(original if isinstance(original, list) else [], patch, path, order=None)
        return patch

    def merge_map(
        self, original: dict[str, Any], patch: dict[str, Any], path: tuple[str, ...]
    ) -> dict[str, Any]:
        """Merge a patch map into an original map."""
        if not self.directives:
            for key, value in patch.items():
                if value is None:
                    original.pop(key, None)
                else:
                    original[key] = self.value(original.get(key), value, (*path, key))
            return original

        directive = patch.get(_PATCH)
        if directive is not None:
            if directive == "replace":
                return self.merge_map({}, {k: v for k, v in patch.items() if k != _PATCH}, path)
            if directive == "delete":
                return {}
            if directive != "merge":
                raise PatchError(f"strategic merge patch: unknown patch type {directive!r} in map", code=400)

        if _RETAIN in patch:
            self.retain_keys(original, patch)

        # Deletions from primitive lists first, then lists whose order is set, then the rest.
        for key, value in patch.items():
            if key.startswith(_DELETE_FROM):
                field = key[len(_DELETE_FROM) :]
                if not isinstance(value, list):
                    raise PatchError(f"strategic merge patch: {key} must be a list", code=400)
                current = original.get(field)
                if isinstance(current, list):
                    original[field] = [x for x in current if not any(_json_equal(x, d) for d in value)]
        ordered: set[str] = set()
        for key, value in patch.items():
            if key.startswith(_ORDER):
                field = key[len(_ORDER) :]
                if not isinstance(value, list):
                    raise PatchError(f"strategic merge patch: {key} must be a list", code=400)
                rule = self.rules.get((*path, field), _NO_RULE)
                if (rule.merge_key is None and not rule.primitive_merge) or (
                    field in patch and patch[field] is None
                ):
                    continue  # atomic lists keep the patch's order; a deleted list has none
                ordered.add(field)
                sub = patch.get(field)
                if sub is not None and not isinstance(sub, list):
                    raise PatchError(f"strategic merge patch: {field} must be a list to be ordered", code=400)
                current = original.get(field)
                if sub is None and not isinstance(current, list):
                    continue
                original[field] = self.merge_list(
                    current if isinstance(current, list) else [], sub or [], (*path, field), order=value
                )

        for key, value in patch.items():
            if key in (_PATCH, _RETAIN) or key.startswith((_ORDER, _DELETE_FROM)):
                continue
            if value is None:
                original.pop(key, None)
                continue
            if key in ordered:
                continue
            original[key] = self.value(original.get(key), value, (*path, key))
        return original

    @staticmethod
    def retain_keys(original: dict[str, Any], patch: dict[str, Any]) -> None:
        """Clear the keys of `original` not listed in the patch's `$retainKeys`."""
        retain = patch[_RETAIN]
        if not isinstance(retain, list) or not all(isinstance(k, str) for k in retain):
            raise PatchError("strategic merge patch: $retainKeys must be a list of strings", code=400)
        keep = set(retain)
        for key, value in patch.items():
            if value is None or key.startswith("$"):
                continue
            if key not in keep:
                raise PatchError(
                    f"strategic merge patch: field {key!r} is in the patch but not in $retainKeys", code=400
                )
        for key in [k for k in original if k not in keep]:
            del original[key]

    def merge_list(
        self, original: list[Any], patch: list[Any], path: tuple[str, ...], *, order: list[Any] | None
    ) -> list[Any]:
        """Merge a patch list into an original list following the field's rule."""
        rule = self.rules.get(path, _NO_RULE)
        if rule.merge_key is not None:
            return self.keyed_list(original, patch, path, rule.merge_key, order)
        if rule.primitive_merge:
            return self.primitive_list(original, patch, path, order)
        # Atomic: the patch replaces the list (elements merged into nothing, to drop nulls).
        return [self.value(None, item, path) for item in patch]

    def keyed_list(
        self, original: list[Any], patch: list[Any], path: tuple[str, ...], key: str, order: list[Any] | None
    ) -> list[Any]:
        """Merge lists of maps element-wise by their merge key."""
        dotted = ".".join(path)
        for item in original:
            if not isinstance(item, dict):
                raise PatchError(f"strategic merge patch: {dotted}: list elements must be objects")
        plain: list[dict[str, Any]] = []
        replace = False
        merged = original
        for item in patch:
            if not isinstance(item, dict):
                raise PatchError(f"strategic merge patch: {dotted}: list elements must be objects", code=400)
            directive = item.get(_PATCH) if self.directives else None
            if directive is None:
                if key not in item:
                    raise PatchError(
                        f"strategic merge patch: {dotted}: element has no merge key {key!r}: {item}", code=400
                    )
                plain.append(item)
            elif directive == "delete":
                if key not in item:
                    raise PatchError(
                        f"strategic merge patch: {dotted}: delete directive without merge key {key!r}",
                        code=400,
                    )
                merged = [x for x in merged if not (key in x and _json_equal(x[key], item[key]))]
            elif directive == "replace":
                replace = True
            elif directive == "merge":
                raise PatchError(
                    f"strategic merge patch: {dotted}: merging lists cannot be requested", code=400
                )
            else:
                raise PatchError(
                    f"strategic merge patch: {dotted}: unknown patch type {directive!r}", code=400
                )
        if replace:
            return [self.merge_map({}, item, path) for item in plain]

        server_order = list(merged)
        merged = list(merged)
        for item in plain:
            for i, existing in enumerate(merged):
                if key in existing and _json_equal(existing[key], item[key]):
                    merged[i] = self.merge_map(existing, item, path)
                    break
            else:
                merged.append(self.merge_map({}, item, path))

        wanted: list[Any] = plain if order is None else order + plain
        for item in wanted:
            if not isinstance(item, dict) or key not in item:
                raise PatchError(
                    f"strategic merge patch: {dotted}: $setElementOrder element has no merge key {key!r}",
                    code=400,
                )
        wanted_keys = [item[key] for item in wanted]
        server_keys = [item.get(key) for item in server_order]
        return _interleave(
            merged,
            ident=lambda item: item.get(key),
            wanted=wanted_keys,
            server=server_keys,
        )

    def primitive_list(
        self, original: list[Any], patch: list[Any], path: tuple[str, ...], order: list[Any] | None
    ) -> list[Any]:
        """Merge lists of scalars as a set union."""
        for item in patch:
            if isinstance(item, dict | list):
                raise PatchError(
                    f"strategic merge patch: {'.'.join(path)}: expected a list of scalars", code=400
                )
        merged: list[Any] = []
        for item in original + patch:
            if not any(_json_equal(item, m) for m in merged):
                merged.append(item)
        wanted = patch if order is None else order + patch
        return _interleave(merged, ident=lambda item: item, wanted=list(wanted), server=list(original))


def _position(keys: list[Any], ident: Any) -> int:
    """Index of `ident` in `keys` by JSON equality, or -1."""
    for i, k in enumerate(keys):
        if _json_equal(k, ident):
            return i
    return -1


def _interleave(merged: list[Any], *, ident: Any, wanted: list[Any], server: list[Any]) -> list[Any]:
    """Order a merged list: the patch's items in `wanted` order, the others in target order.

    The patch items and the target-only items are merged as two sorted runs: a target-only item
    goes first when the patch item it competes with also existed in the target, later there.
    """
    patch_items: list[tuple[int, Any]] = []
    server_only: list[Any] = []
    for item in merged:
        pos = _position(wanted, ident(item))
        if pos < 0:
            server_only.append(item)
        else:
            patch_items.append((pos, item))
    patch_items.sort(key=lambda p: p[0])
    server_only.sort(key=lambda item: _position(server, ident(item)))
    out: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(patch_items):
        if j >= len(patch_items):
            out.append(server_only[i])
            i += 1
        elif i >= len(server_only):
            out.append(patch_items[j][1])
            j += 1
        else:
            right = _position(server, ident(patch_items[j][1]))
            left = _position(server, ident(server_only[i]))
            if right >= 0 and left < right:
                out.append(server_only[i])
                i += 1
            else:
                out.append(patch_items[j][1])
                j += 1
    return out


def rules_for(kind: Kind) -> Mapping[tuple[str, ...], FieldRule]:
    """The merge rules of objects of `kind`: the built-in table, or a custom resource's from its schema."""
    schema = getattr(kind.custom, "openapi_schema", None)
    if isinstance(schema, dict):
        return _schema_rules(id(schema), schema)
    return MERGE_RULES.get(kind.kind, _DEFAULT_RULES)


_SCHEMA_RULES: dict[int, tuple[Obj, _Table]] = {}


def _schema_rules(key: int, schema: Obj) -> _Table:
    """A custom resource's merge rules, from its schema's `x-kubernetes-list-type` (cached per schema).

    `map` lists merge by their (first) map key, `set` lists as a union, every other list is
    atomic, as server-side apply treats custom resources.
    """
    cached = _SCHEMA_RULES.get(key)
    if cached is not None and cached[0] is schema:
        return cached[1]
    table: _Table = dict(_mount(("metadata",), _OBJECT_META))

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if not isinstance(node, dict):
            return
        list_type = node.get("x-kubernetes-list-type")
        keys = node.get("x-kubernetes-list-map-keys")
        if list_type == "map" and isinstance(keys, list) and keys:
            table[path] = FieldRule(merge_key=str(keys[0]))
        elif list_type == "set":
            table[path] = _PRIMITIVE
        for name, sub in (node.get("properties") or {}).items():
            walk(sub, (*path, str(name)))
        items = node.get("items")
        if isinstance(items, dict):
            walk((items.get("properties") and {"properties": items["properties"]}) or {}, path)

    walk(schema, ())
    if len(_SCHEMA_RULES) > 256:
        _SCHEMA_RULES.clear()
    _SCHEMA_RULES[key] = (schema, table)
    return table


def apply_strategic_merge_patch(target: Obj, patch: Obj, *, kind: Kind) -> Obj:
    """Apply a strategic merge patch to an object of `kind`."""
    if not isinstance(patch, dict):
        raise PatchError("strategic merge patch must be a JSON object", code=400)
    merger = _Merger(rules_for(kind), directives=True)
    result: Obj = merger.merge_map(_copy(target), patch, ())
    return result


def apply_server_side_apply(target: Obj | None, patch: Obj, *, kind: Kind) -> Obj:
    """Server-side apply's merge: create from the patch, or merge it with SMP rules.

    Maps merge, keyed lists merge by their key, other lists are replaced, `null` deletes; `$` keys
    carry no directive meaning. Ownership (conflicts, fields a manager stops applying) is
    `fieldmanager.apply`'s, which calls this.
    """
    if not isinstance(patch, dict):
        raise PatchError("apply patch must be a JSON (or YAML) object", code=400)
    merger = _Merger(rules_for(kind), directives=False)
    result: Obj = merger.merge_map(_copy(target) if target is not None else {}, patch, ())
    return result

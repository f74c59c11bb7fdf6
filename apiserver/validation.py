"""Validation of objects written to the apiserver: names, unknown fields and required shape.

Three checks and a decode, each returning data the request layer turns into a `metav1.Status`:

* `validate_name(kind, name)`: the rule Kubernetes applies to `metadata.name` of that kind
  (DNS-1123 label for namespaces, DNS-1035 label for services, DNS-1123 subdomain otherwise).
  Returns the message of the `metadata.name` cause (`Invalid value: "X": ...`) or None. The
  apiserver answers 422 with `<Kind> "<name>" is invalid: metadata.name: <message>`.
* `decode_typed(kind, obj)`: the object as kube-apiserver's typed decode leaves it (unknown
  fields and nulls dropped) and the paths (`spec.containers[0].foo`) of the unknown fields, which
  the apiserver reports as warnings (`fieldValidation=Warn`, the default) or answers with a 400
  `strict decoding error: unknown field "spec.foo"` (`Strict`, kubectl's default);
  `unknown_fields(kind, obj)` is only the paths. The schema is `schema.json`, generated at
  development time from the official client's models by `scripts/gen_schema.py`; maps with free
  keys (labels, annotations, data, resource lists, nodeSelector, capacity...) accept any key, and
  kinds without a schema accept everything. A value of the wrong JSON type for its field (a
  string where a bool or an int goes, an object where a list goes, a list where an object goes)
  raises `WrongType`, which the apiserver answers as kube-apiserver's decoder does: 400 `Pod in
  version "v1" cannot be handled as a Pod: json: cannot unmarshal string into Go struct field
  Container.spec.containers.stdin of type bool`. (Numbers are kept in string fields, since
  quantities are typed as strings here; the quantity walk of `protobuf.gojson` checks those.)
* `validate_object(kind, obj)`: the required fields and shapes that the control-plane races and the
  clients depend on, as a list of `Cause` (`{reason, message, field}`, with Kubernetes' reasons
  such as `FieldValueRequired` and field paths such as `spec.containers[0].image`). An empty list
  means valid; otherwise the apiserver answers 422 `Invalid` with the causes in `details.causes`.

This is deliberately a subset of Kubernetes' validation: it checks what a controller, scheduler or
kubelet would trip on (missing containers or images, selectors that do not match their template,
malformed taints and tolerations, non-string labels, a PriorityClass without an integer value),
not every rule of the real apiserver.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from functools import cache
from pathlib import Path
from typing import Any, Final

from kubemesh.apiserver import fielderrors, names
from kubemesh.apiserver.fielderrors import Cause
from kubemesh.services.model.kinds import Kind, Obj
from kubemesh.services.model.selectors import (
    LabelSelector,
    SelectorError,
    label_selector_from_dict,
    validate_label_key,
    validate_label_value,
)

__all__ = ["Cause", "WrongType", "decode_typed", "unknown_fields", "validate_name", "validate_object"]


# ---------------------------------------------------------------------------------------------
# Names.

_show = fielderrors.show


def _first(problems: Callable[[str], tuple[str, ...]]) -> Callable[[str], str | None]:
    """The first problem of a name (upstream's name validators stop at the first)."""
    def check(value: str) -> str | None:
        found = problems(value)
        return found[0] if found else None
    return check


_label_problem = _first(names.label_problems)
_subdomain_problem = _first(names.subdomain_problems)
_dns1035_problem = _first(names.dns1035_problems)

_path_segment_problem = _first(names.path_segment_problems)
_NAME_RULES: Final = {"Namespace": _label_problem, "Service": _dns1035_problem,
                      "Role": _path_segment_problem, "ClusterRole": _path_segment_problem,
                      "RoleBinding": _path_segment_problem, "ClusterRoleBinding": _path_segment_problem,
                      "APIService": _first(names.api_service_name_problems)}
"""Names that are not DNS subdomains: by kind name, as upstream's per-kind name validators."""


def validate_name(kind: Kind, name: str) -> str | None:
    """The message of the `metadata.name` cause if `name` is not valid for `kind`, else None."""
    if not name:
        return "Required value: name or generateName is required"
    problem = _NAME_RULES.get(kind.kind, _subdomain_problem)(name)
    if problem is None:
        return None
    return f"Invalid value: {_show(name)}: {problem}"


# ---------------------------------------------------------------------------------------------
# Unknown fields.

_SCHEMA_PATH: Final = Path(__file__).with_name("schema.json")


@cache
def _document() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(_SCHEMA_PATH.read_text())
    return doc


@cache
def _schema() -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    doc = _document()
    return doc["kinds"], doc["types"]


def model_types() -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """(kind -> model name, model name -> {field: type as the official client spells it}), from schema.json."""
    doc = _document()
    return doc["kinds"], doc["fieldTypes"]


def unknown_fields(kind: Kind | str, obj: Obj) -> list[str]:
    """Dotted paths of the fields of `obj` that objects of `kind` do not have, in document order.

    `kind` may also be the name of a body type without a Kind (`Eviction`, `Scale`, `DeleteOptions`).
    """
    return decode_typed(kind, obj)[1]


def decode_typed(kind: Kind | str, obj: Obj) -> tuple[Obj, list[str]]:
    """What kube-apiserver's typed decode keeps of `obj`, and the unknown fields it dropped.

    A built-in object is decoded into a Go struct and encoded again: a field the struct lacks is
    dropped (and reported: a `Warning`, or a 400 under `fieldValidation=Strict`), and a `null` is
    the field's zero value, which the encoder leaves out. So `creationTimestamp: null` in a pod
    template and no `creationTimestamp` are the same object, with the same pod-template hash,
    as they are upstream (`kubectl rollout undo` sends the former). Unknown fields' paths are
    dotted, in document order. Values inside fields the schema does not describe (`code` "")
    are kept as they are.

    Copy-on-write: neither `obj` nor any of its parts is changed; what changes is copied along
    its path, so parts `obj` shares with a stored object (a patch's result does) stay as they
    are, and an object with nothing to drop is returned itself.

    Raises:
        WrongType: a value's JSON type is not its field's (Go's decoder refuses the body).
    """
    type_name = _schema()[0].get(kind if isinstance(kind, str) else kind.kind)
    out: list[str] = []
    if type_name is None:
        return obj, out
    if _clean(obj, type_name):
        return obj, out  # the common case, found without building a path or a copy
    typed: Obj = _typed(obj, type_name, "", out)
    return typed, out


class WrongType(ValueError):
    """A value whose JSON type its field cannot take, worded as Go's `encoding/json` words it."""

    def __init__(self, *, sent: Any, struct: str, path: str, go_type: str) -> None:
        self.text = (f"json: cannot unmarshal {_json_type(sent)} into Go struct field {struct}.{path} "
                     f"of type {go_type}")
        super().__init__(self.text)


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


_NUMBER: Final = frozenset({int, float})
_TEXT: Final = frozenset({str, int, float})
_SCALARS: Final[dict[str, tuple[frozenset[type], str]]] = {
    # the official client's type -> (the JSON types Go's decode takes for it here, its Go name)
    "bool": (frozenset({bool}), "bool"),
    "int": (frozenset({int}), "int32"),
    "float": (_NUMBER, "float64"),
    "str": (_TEXT, "string"),
    "datetime": (frozenset({str}), "v1.Time"),
    "bytes": (frozenset({str}), "[]uint8"),
}
_MODEL_PREFIX: Final = re.compile(r"^(?:[A-Z][a-z0-9]*)*?V[0-9]+(?:alpha[0-9]+|beta[0-9]+)?(?=[A-Z])")


def _go_name(model: str) -> str:
    """The Go struct name of a model type (`V1Container` -> `Container`, `RbacV1Subject` -> `Subject`)."""
    return _MODEL_PREFIX.sub("", model)


@cache
def _checks(type_name: str) -> dict[str, tuple[str, frozenset[type], str]]:
    """The type checks of a model type's fields: field -> (shape, accepted JSON types, Go type).

    Shapes: `one` (a scalar), `list`/`map` (of scalars), `obj` (a struct: a JSON object),
    `objs` (a list of structs), `objmap` (a map of structs). Fields typed `object` in the client
    (IntOrString, RawExtension, free JSON) take anything and have no entry.
    """
    out: dict[str, tuple[str, frozenset[type], str]] = {}
    for field, typ in (model_types()[1].get(type_name) or {}).items():
        if typ in _SCALARS:
            accepted, go = _SCALARS[typ]
            out[field] = ("one", accepted, go)
        elif typ.startswith("List[") and typ[5:-1] in _SCALARS:
            accepted, go = _SCALARS[typ[5:-1]]
            out[field] = ("list", accepted, f"[]{go}")
        elif typ.startswith("Dict[str, ") and typ[10:-1] in _SCALARS:
            accepted, go = _SCALARS[typ[10:-1]]
            out[field] = ("map", accepted, f"map[string]{go}")
        elif typ.startswith("List[") and typ[5:-1] in model_types()[1]:
            out[field] = ("objs", frozenset({dict}), f"[]v1.{_go_name(typ[5:-1])}")
        elif typ.startswith("Dict[str, ") and typ[10:-1] in model_types()[1]:
            out[field] = ("objmap", frozenset({dict}), f"map[string]v1.{_go_name(typ[10:-1])}")
        elif typ in model_types()[1]:
            out[field] = ("obj", frozenset({dict}), f"v1.{_go_name(typ)}")
    return out


def _fits(check: tuple[str, frozenset[type], str], value: Any) -> bool:
    """Whether Go's decode takes `value` for a field with this check (a null always: the zero value)."""
    shape, accepted = check[0], check[1]
    if shape in ("one", "obj"):
        return type(value) in accepted or (shape == "one" and int in accepted and type(value) is float
                                           and value.is_integer())
    if shape in ("list", "objs"):
        return type(value) is list and all(v is None or type(v) in accepted or (
            int in accepted and type(v) is float and v.is_integer()) for v in value)
    return type(value) is dict and all(v is None or type(v) in accepted for v in value.values())


_Entry = tuple[str, "frozenset[type] | None", str, "tuple[str, frozenset[type], str] | None"]


@cache
def _fast_table(type_name: str) -> dict[str, _Entry] | None:
    """The fast path's one lookup per field; None for a type with no schema.

    field -> (schema code, accepted JSON types of a scalar or None, shape of any other check or
    "", that check or None).
    """
    fields = _schema()[1].get(type_name)
    if fields is None:
        return None
    checks = _checks(type_name)
    table: dict[str, _Entry] = {}
    for key, code in fields.items():
        check = checks.get(key)
        if check is not None and check[0] == "one":
            table[key] = (code, check[1], "", None)
        elif check is not None:
            table[key] = (code, None, check[0], check)
        else:
            table[key] = (code, None, "", None)
    return table


def _clean(value: Mapping[str, Any], type_name: str) -> bool:
    """Whether a typed decode would leave `value` as it is (no unknown field, no null, no wrong type)."""
    table = _fast_table(type_name)
    if table is None:
        return True
    for key, sub in value.items():
        entry = table.get(key)
        if entry is None or sub is None:
            return False
        code, accepted, shape, check = entry
        if accepted is not None:  # a scalar (its code is ""): the common case, one type test
            if type(sub) not in accepted and not (type(sub) is float and int in accepted and sub.is_integer()):
                return False
            continue
        if shape:
            if shape in ("obj", "objmap"):  # the container's type here; its items are walked below
                if type(sub) is not dict:
                    return False
            elif shape == "objs":
                if type(sub) is not list:
                    return False
            elif check is not None and not _fits(check, sub):
                return False
        if not code:
            continue
        head = code[0]
        if head == "[":
            if len(code) > 1 and type(sub) is list:
                rest = code[1:]
                for item in sub:  # a struct each (a null is its zero value); anything else is Go's 400
                    if item is not None and (type(item) is not dict or not _clean(item, rest)):
                        return False
        elif head == "{":
            if len(code) > 1 and type(sub) is dict:
                rest = code[1:]
                for item in sub.values():
                    if item is not None and (type(item) is not dict or not _clean(item, rest)):
                        return False
        elif type(sub) is dict and not _clean(sub, code):
            return False
    return True


def _typed(value: Mapping[str, Any], type_name: str, path: str, out: list[str], *, go_path: str = "") -> Any:
    fields = _schema()[1].get(type_name)
    if fields is None:
        return value
    checks = _checks(type_name)
    changed: dict[str, Any] | None = None
    for key, sub in value.items():
        code = fields.get(key)
        field_go_path = f"{go_path}.{key}" if go_path else str(key)
        if sub is not None and (check := checks.get(key)) is not None and not _fits(check, sub):
            shape = check[0]
            if shape in ("list", "objs", "map") and type(sub) is (list if shape != "map" else dict):
                # the container is right: Go names the element it could not take
                elements = list(sub.values()) if isinstance(sub, dict) else list(sub)
                one = ("one" if shape != "objs" else "obj", check[1], "")
                sent = next(v for v in elements if v is not None and not _fits(one, v))
                go_type = check[2].removeprefix("[]").removeprefix("map[string]")
                raise WrongType(sent=sent, struct=_go_name(type_name), path=field_go_path, go_type=go_type)
            raise WrongType(sent=sub, struct=_go_name(type_name), path=field_go_path, go_type=check[2])
        if code is None or sub is None:
            if code is None:
                out.append(f"{path}.{key}" if path else str(key))
            if changed is None:
                changed = dict(value)
            del changed[key]
        elif code:
            new = _typed_value(sub, code, f"{path}.{key}" if path else str(key), out, go_path=field_go_path)
            if new is not sub:
                if changed is None:
                    changed = dict(value)
                changed[key] = new
    return value if changed is None else changed


def _typed_value(value: Any, code: str, path: str, out: list[str], *, go_path: str) -> Any:
    head, rest = code[0], code[1:]
    if head == "[":
        if rest and isinstance(value, list):
            items = [_typed(item, rest, f"{path}[{i}]", out, go_path=go_path) if isinstance(item, dict) else item
                     for i, item in enumerate(value)]
            if any(a is not b for a, b in zip(items, value, strict=True)):
                return items
        return value
    if head == "{":
        if rest and isinstance(value, dict):
            entries = {k: _typed(item, rest, f"{path}[{k}]", out, go_path=go_path) if isinstance(item, dict)
                       else item for k, item in value.items()}
            if any(entries[k] is not value[k] for k in value):
                return entries
        return value
    if isinstance(value, dict):
        return _typed(value, code, path, out, go_path=go_path)
    return value


# ---------------------------------------------------------------------------------------------
# Object validation.


_required = fielderrors.required
_invalid = fielderrors.invalid
_type = fielderrors.type_invalid
_unsupported = fielderrors.not_supported
_duplicate = fielderrors.duplicate
_forbidden = fielderrors.forbidden


def _at(parent: str, key: str) -> str:
    """The path of field `key` of the object at `parent` ("" for the top level)."""
    return f"{parent}.{key}" if parent else key


_TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")
_TOLERATION_EFFECTS: Final = ("", *_TAINT_EFFECTS)
_TOLERATION_OPERATORS: Final = ("Equal", "Exists")
_PROTOCOLS: Final = ("TCP", "UDP", "SCTP")
_RESTART_POLICIES: Final = ("Always", "OnFailure", "Never")
_WORKLOAD_RESTART_POLICIES: Final = ("Always",)
_DNS_POLICIES: Final = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
_POD_PHASES: Final = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
_POD_SPEC_STRINGS: Final = ("nodeName", "schedulerName", "priorityClassName", "serviceAccountName", "hostname")
# (key, minimum) of the integer fields of a PodSpec, in the order they are checked.
_POD_SPEC_INTEGERS: Final = (("priority", None), ("terminationGracePeriodSeconds", 0), ("activeDeadlineSeconds", 1))
_OWNER_REF_STRINGS: Final = ("apiVersion", "kind", "name", "uid")
_QUANTITY_TYPES: Final = (str, int, float)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Checker:
    """Accumulates causes while walking one object.

    This runs on every write, so the happy path (a valid object) is kept cheap, under two rules:

    * Field paths are built only when a cause is recorded. The accessors take the path of the
      parent object and the key, and join them (`_at`) only on failure; the items of a list are
      checked with the list's path (built once per list) and their index, joined (`f"{at}[{i}]"`)
      only where a cause is added.
    * The Pod checks (the bulk of the writes) test each value inline against the exact type the
      JSON and msgpack decoders produce (`type(v) is str`), and call the accessor only when that
      test fails. An inline test passes only where the accessor would record nothing and return
      the value unchanged, so both routes record the same causes in the same order; anything
      else (a wrong type, a missing required field, a subclass) goes through the accessor.
    """

    __slots__ = ("causes",)

    def __init__(self) -> None:
        self.causes: list[Cause] = []

    def add(self, cause: Cause) -> None:
        self.causes.append(cause)

    # Typed accessors: return the value when it has the type (or is absent: None), else record
    # a type cause (at `_at(parent, key)`) and return None so that the caller skips checks below it.

    def map(
        self, obj: Mapping[str, Any], key: str, parent: str, *, required: bool = False
    ) -> dict[str, Any] | None:
        value = obj.get(key)
        if value is None:
            if required:
                self.add(_required(_at(parent, key)))
            return None
        if not isinstance(value, dict):
            self.add(_type(_at(parent, key), value, "object"))
            return None
        return value

    def list(self, obj: Mapping[str, Any], key: str, parent: str) -> list[Any] | None:
        value = obj.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            self.add(_type(_at(parent, key), value, "array"))
            return None
        return value

    def string(self, obj: Mapping[str, Any], key: str, parent: str, *, required: bool = False) -> str | None:
        value = obj.get(key)
        if value is None or (required and value == ""):
            if required:
                self.add(_required(_at(parent, key)))
            return None
        if not isinstance(value, str):
            self.add(_type(_at(parent, key), value, "string"))
            return None
        return value

    def integer(
        self,
        obj: Mapping[str, Any],
        key: str,
        parent: str,
        *,
        required: bool = False,
        minimum: int | None = None,
    ) -> int | None:
        value = obj.get(key)
        if value is None:
            if required:
                self.add(_required(_at(parent, key)))
            return None
        if not _is_int(value):
            self.add(_type(_at(parent, key), value, "integer"))
            return None
        if minimum is not None and value < minimum:
            self.add(_invalid(_at(parent, key), value, f"must be greater than or equal to {minimum}"))
        return int(value)

    def boolean(self, obj: Mapping[str, Any], key: str, parent: str) -> None:
        value = obj.get(key)
        if value is not None and not isinstance(value, bool):
            self.add(_type(_at(parent, key), value, "boolean"))

    def choice(self, obj: Mapping[str, Any], key: str, parent: str, supported: tuple[str, ...]) -> None:
        value = self.string(obj, key, parent)
        if value is not None and value not in supported:
            self.add(_unsupported(_at(parent, key), value, supported))

    def string_map(self, obj: Mapping[str, Any], key: str, parent: str) -> dict[str, Any] | None:
        value = obj.get(key)
        if type(value) is not dict:
            value = self.map(obj, key, parent)
            if value is None:
                return None
        for k, v in value.items():
            if not isinstance(v, str):
                self.add(_type(f"{_at(parent, key)}[{k}]", v, "string"))
        return value

    # Shared parts.

    def metadata(self, obj: Obj) -> None:
        meta = obj.get("metadata")
        if type(meta) is not dict:
            meta = self.map(obj, "metadata", "")
            if meta is None:
                return
        for key in ("name", "generateName", "namespace"):
            value = meta.get(key)
            if value is not None and type(value) is not str:
                self.string(meta, key, "metadata")
        if meta.get("labels") is not None:
            labels = self.string_map(meta, "labels", "metadata")
            for key, value in (labels or {}).items():
                problem = validate_label_key(str(key))
                if problem is not None:
                    self.add(_invalid("metadata.labels", key, problem))
                if isinstance(value, str):
                    problem = validate_label_value(value)
                    if problem is not None:
                        self.add(_invalid("metadata.labels", value, problem))
        if meta.get("annotations") is not None:
            annotations = self.string_map(meta, "annotations", "metadata")
            if annotations:
                size = 0
                for key, value in annotations.items():
                    problem = validate_label_key(str(key))
                    if problem is not None:
                        self.add(_invalid("metadata.annotations", key, problem))
                    size += len(key) + (len(value) if isinstance(value, str) else 0)
                if size > 256 * 1024:
                    self.add({
                        "reason": "FieldValueTooLong",
                        "message": "Too long: must have at most 262144 bytes",
                        "field": "metadata.annotations",
                    })
        if meta.get("finalizers") is not None:
            for i, item in enumerate(self.list(meta, "finalizers", "metadata") or ()):
                if not isinstance(item, str):
                    self.add(_type(f"metadata.finalizers[{i}]", item, "string"))
        if meta.get("ownerReferences") is not None:
            at = "metadata.ownerReferences"
            for i, ref in enumerate(self.list(meta, "ownerReferences", "metadata") or ()):
                if not isinstance(ref, dict):
                    self.add(_type(f"{at}[{i}]", ref, "object"))
                    continue
                for key in _OWNER_REF_STRINGS:
                    value = ref.get(key)
                    if type(value) is not str or not value:
                        self.string(ref, key, f"{at}[{i}]", required=True)
                for key in ("controller", "blockOwnerDeletion"):
                    value = ref.get(key)
                    if value is not None and type(value) is not bool:
                        self.boolean(ref, key, f"{at}[{i}]")

    def container(self, c: Any, at: str, i: int, names: set[str]) -> None:
        """Check item `i` of the container list at path `at`; `names` are the names seen so far."""
        if not isinstance(c, dict):
            self.add(_type(f"{at}[{i}]", c, "object"))
            return
        name = c.get("name")
        if type(name) is not str or not name:
            name = self.string(c, "name", f"{at}[{i}]", required=True)
        if name is not None:
            problem = _label_problem(name)
            if problem is not None:
                self.add(_invalid(f"{at}[{i}].name", name, problem))
            elif name in names:
                self.add(_duplicate(f"{at}[{i}].name", name))
            names.add(name)
        image = c.get("image")
        if type(image) is not str or not image:
            self.string(c, "image", f"{at}[{i}]", required=True)
        ports = c.get("ports")
        if ports is not None and type(ports) is not list:
            ports = self.list(c, "ports", f"{at}[{i}]")
        for j, port in enumerate(ports) if ports else ():
            if not isinstance(port, dict):
                self.add(_type(f"{at}[{i}].ports[{j}]", port, "object"))
                continue
            number = port.get("containerPort")
            if type(number) is not int or not 0 < number < 65536:
                number = self.integer(port, "containerPort", f"{at}[{i}].ports[{j}]", required=True)
                if number is not None and not 0 < number < 65536:
                    detail = "must be between 1 and 65535, inclusive"
                    self.add(_invalid(f"{at}[{i}].ports[{j}].containerPort", number, detail))
            protocol = port.get("protocol")
            if protocol is not None and (type(protocol) is not str or protocol not in _PROTOCOLS):
                self.choice(port, "protocol", f"{at}[{i}].ports[{j}]", _PROTOCOLS)
        env = c.get("env")
        if env is not None and type(env) is not list:
            env = self.list(c, "env", f"{at}[{i}]")
        for j, var in enumerate(env) if env else ():
            if not isinstance(var, dict):
                self.add(_type(f"{at}[{i}].env[{j}]", var, "object"))
                continue
            var_name = var.get("name")
            if type(var_name) is not str or not var_name:
                self.string(var, "name", f"{at}[{i}].env[{j}]", required=True)
            value = var.get("value")
            if value is not None and type(value) is not str:
                self.string(var, "value", f"{at}[{i}].env[{j}]")
        for key in ("command", "args"):
            args = c.get(key)
            if args is not None and type(args) is not list:
                args = self.list(c, key, f"{at}[{i}]")
            for j, arg in enumerate(args) if args else ():
                if not isinstance(arg, str):
                    self.add(_type(f"{at}[{i}].{key}[{j}]", arg, "string"))
        resources = c.get("resources")
        if resources is not None and type(resources) is not dict:
            resources = self.map(c, "resources", f"{at}[{i}]")
        if resources is not None:
            for part in ("limits", "requests"):
                amounts = resources.get(part)
                if amounts is not None and type(amounts) is not dict:
                    amounts = self.map(resources, part, f"{at}[{i}].resources")
                for res, amount in amounts.items() if amounts else ():
                    if type(amount) is str:
                        continue
                    if not isinstance(amount, _QUANTITY_TYPES) or isinstance(amount, bool):
                        self.add(_type(f"{at}[{i}].resources.{part}[{res}]", amount, "quantity"))

    def pod_spec(self, spec: dict[str, Any], field: str, *, workload: bool) -> None:
        names: set[str] = set()
        if spec.get("initContainers") is not None:
            at = f"{field}.initContainers"
            for i, c in enumerate(self.list(spec, "initContainers", field) or ()):
                self.container(c, at, i, names)
        containers = spec.get("containers")
        if containers is not None and type(containers) is not list:
            containers = self.list(spec, "containers", field)
        if not containers:
            if containers is not None or "containers" not in spec or spec["containers"] is None:
                self.add(_required(f"{field}.containers"))
        else:
            at = f"{field}.containers"
            for i, c in enumerate(containers):
                self.container(c, at, i, names)
        supported = _WORKLOAD_RESTART_POLICIES if workload else _RESTART_POLICIES
        for key, choices in (("restartPolicy", supported), ("dnsPolicy", _DNS_POLICIES)):
            value = spec.get(key)
            if value is not None and (type(value) is not str or value not in choices):
                self.choice(spec, key, field, choices)
        for key in _POD_SPEC_STRINGS:
            value = spec.get(key)
            if value is not None and type(value) is not str:
                self.string(spec, key, field)
        if spec.get("nodeSelector") is not None:
            self.string_map(spec, "nodeSelector", field)
        for key, minimum in _POD_SPEC_INTEGERS:
            value = spec.get(key)
            if value is not None and (type(value) is not int or (minimum is not None and value < minimum)):
                self.integer(spec, key, field, minimum=minimum)
        host_network = spec.get("hostNetwork")
        if host_network is not None and type(host_network) is not bool:
            self.boolean(spec, "hostNetwork", field)
        affinity = spec.get("affinity")
        if affinity is not None and type(affinity) is not dict:
            self.map(spec, "affinity", field)
        tolerations = spec.get("tolerations")
        if tolerations is not None and type(tolerations) is not list:
            tolerations = self.list(spec, "tolerations", field)
        if tolerations:
            at = f"{field}.tolerations"
            for i, tol in enumerate(tolerations):
                self.toleration(tol, at, i)

    def toleration(self, tol: Any, at: str, i: int) -> None:
        """Check item `i` of the toleration list at path `at`."""
        if not isinstance(tol, dict):
            self.add(_type(f"{at}[{i}]", tol, "object"))
            return
        key = tol.get("key")
        if key is not None and type(key) is not str:
            key = self.string(tol, "key", f"{at}[{i}]")
        if key:
            problem = validate_label_key(key)
            if problem is not None:
                self.add(_invalid(f"{at}[{i}].key", key, problem))
        operator = tol.get("operator") or "Equal"
        if operator not in _TOLERATION_OPERATORS:
            self.add(_unsupported(f"{at}[{i}].operator", operator, _TOLERATION_OPERATORS))
        value = tol.get("value")
        if value is not None and type(value) is not str:
            value = self.string(tol, "value", f"{at}[{i}]")
        if operator == "Exists" and value:
            self.add(_invalid(f"{at}[{i}].operator", value, "value must be empty when `operator` is 'Exists'"))
        if not key and operator != "Exists":
            self.add(_invalid(f"{at}[{i}].operator", operator, "operator must be Exists when `key` is empty"))
        effect = tol.get("effect")
        if effect is not None and (type(effect) is not str or effect not in _TOLERATION_EFFECTS):
            self.choice(tol, "effect", f"{at}[{i}]", _TOLERATION_EFFECTS)
        seconds = tol.get("tolerationSeconds")
        if seconds is not None:
            if type(seconds) is not int:
                self.integer(tol, "tolerationSeconds", f"{at}[{i}]")
            if effect != "NoExecute":
                detail = "effect must be 'NoExecute' when `tolerationSeconds` is set"
                self.add(_invalid(f"{at}[{i}].effect", effect, detail))

    def selector(self, sel: dict[str, Any], field: str) -> LabelSelector | None:
        """Check a metav1.LabelSelector; the parsed selector, or None when it does not parse."""
        try:
            return label_selector_from_dict(sel)
        except SelectorError as exc:
            self.add(_invalid(field, sel, str(exc)))
            return None

    # Kinds.

    def workload(self, obj: Obj, kind: str) -> None:
        spec = self.map(obj, "spec", "", required=True)
        if spec is None:
            return
        if kind != "DaemonSet":
            self.integer(spec, "replicas", "spec", minimum=0)
        self.integer(spec, "minReadySeconds", "spec", minimum=0)
        selector = self.map(spec, "selector", "spec", required=True)
        template = self.map(spec, "template", "spec", required=True)
        if kind == "Deployment":
            strategy = self.map(spec, "strategy", "spec")
            if strategy is not None:
                self.choice(strategy, "type", "spec.strategy", ("Recreate", "RollingUpdate"))
        parsed = self.selector(selector, "spec.selector") if selector is not None else None
        if parsed is not None:
            if parsed.empty:
                self.add(_invalid("spec.selector", selector, f"empty selector is invalid for {kind.lower()}"))
            elif template is not None:
                tmeta = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
                labels = tmeta.get("labels") if isinstance(tmeta, dict) else None
                labels = labels if isinstance(labels, dict) else {}
                if not parsed.matches(labels):
                    detail = "`selector` does not match template `labels`"
                    self.add(_invalid("spec.template.metadata.labels", labels, detail))
        if template is not None:
            tmeta = self.map(template, "metadata", "spec.template")
            if tmeta is not None:
                labels = self.string_map(tmeta, "labels", "spec.template.metadata")
                for key in labels or {}:
                    problem = validate_label_key(str(key))
                    if problem is not None:
                        self.add(_invalid("spec.template.metadata.labels", key, problem))
            tspec = self.map(template, "spec", "spec.template", required=True)
            if tspec is not None:
                self.pod_spec(tspec, "spec.template.spec", workload=True)

    def node(self, obj: Obj) -> None:
        spec = self.map(obj, "spec", "")
        if spec is not None:
            self.boolean(spec, "unschedulable", "spec")
            for key in ("podCIDR", "providerID"):
                self.string(spec, key, "spec")
            seen: set[tuple[str, str]] = set()
            for i, taint in enumerate(self.list(spec, "taints", "spec") or ()):
                field = f"spec.taints[{i}]"
                if not isinstance(taint, dict):
                    self.add(_type(field, taint, "object"))
                    continue
                taint_key = self.string(taint, "key", field, required=True)
                if taint_key:
                    problem = validate_label_key(taint_key)
                    if problem is not None:
                        self.add(_invalid(f"{field}.key", taint_key, problem))
                value = self.string(taint, "value", field)
                if value:
                    problem = validate_label_value(value)
                    if problem is not None:
                        self.add(_invalid(f"{field}.value", value, problem))
                effect = taint.get("effect")
                if not effect:
                    self.add(_required(f"{field}.effect"))
                else:
                    self.choice(taint, "effect", field, _TAINT_EFFECTS)
                if taint_key and isinstance(effect, str):
                    if (taint_key, effect) in seen:
                        self.add(_duplicate(field, {"key": taint_key, "effect": effect}))
                    seen.add((taint_key, effect))
        status = self.map(obj, "status", "")
        if status is not None:
            at = "status.conditions"
            for i, cond in enumerate(self.list(status, "conditions", "status") or ()):
                if not isinstance(cond, dict):
                    self.add(_type(f"{at}[{i}]", cond, "object"))
                    continue
                kind = cond.get("type")
                if type(kind) is not str or not kind:
                    self.string(cond, "type", f"{at}[{i}]", required=True)
                value = cond.get("status")
                if value is None:
                    self.add(_required(f"{at}[{i}].status"))
                elif type(value) is not str or value not in ("True", "False", "Unknown"):
                    self.choice(cond, "status", f"{at}[{i}]", ("True", "False", "Unknown"))
            at = "status.addresses"
            for i, addr in enumerate(self.list(status, "addresses", "status") or ()):
                if not isinstance(addr, dict):
                    self.add(_type(f"{at}[{i}]", addr, "object"))
                    continue
                for key in ("type", "address"):
                    value = addr.get(key)
                    if type(value) is not str or not value:
                        self.string(addr, key, f"{at}[{i}]", required=True)
            for part in ("capacity", "allocatable"):
                self.map(status, part, "status")

    def pod(self, obj: Obj, *, with_spec: bool = True) -> None:
        spec = obj.get("spec")
        if type(spec) is not dict:
            spec = self.map(obj, "spec", "", required=True)
        if spec is not None and with_spec:
            self.pod_spec(spec, "spec", workload=False)
        status = obj.get("status")
        if status is not None and type(status) is not dict:
            status = self.map(obj, "status", "")
        if status is not None:
            phase = status.get("phase")
            if phase is not None and (type(phase) is not str or phase not in _POD_PHASES):
                self.choice(status, "phase", "status", _POD_PHASES)
            conditions = status.get("conditions")
            if conditions is not None and type(conditions) is not list:
                conditions = self.list(status, "conditions", "status")
            at = "status.conditions"
            for i, cond in enumerate(conditions or ()):
                if not isinstance(cond, dict):
                    self.add(_type(f"{at}[{i}]", cond, "object"))
                    continue
                for key in ("type", "status"):
                    value = cond.get(key)
                    if type(value) is not str or not value:
                        self.string(cond, key, f"{at}[{i}]", required=True)
            nominated = status.get("nominatedNodeName")
            if nominated is not None and type(nominated) is not str:
                self.string(status, "nominatedNodeName", "status")

    def lease(self, obj: Obj) -> None:
        spec = self.map(obj, "spec", "")
        if spec is None:
            return
        self.string(spec, "holderIdentity", "spec")
        self.integer(spec, "leaseDurationSeconds", "spec", minimum=1)
        self.integer(spec, "leaseTransitions", "spec", minimum=0)
        for key in ("acquireTime", "renewTime"):
            self.string(spec, key, "spec")

    def event(self, obj: Obj) -> None:
        self.map(obj, "involvedObject", "", required=True)
        for key in ("reason", "message", "type", "reportingComponent", "reportingInstance", "action"):
            self.string(obj, key, "")
        self.integer(obj, "count", "", minimum=0)
        self.map(obj, "source", "")

    def priority_class(self, obj: Obj) -> None:
        value = self.integer(obj, "value", "", required=True)
        name = str((obj.get("metadata") or {}).get("name") or "")
        if value is not None and value > 1_000_000_000 and not name.startswith("system-"):
            self.add(_forbidden("value", "maximum allowed value of a user defined priority is 1000000000"))
        self.boolean(obj, "globalDefault", "")
        self.string(obj, "description", "")
        self.choice(obj, "preemptionPolicy", "", ("Never", "PreemptLowerPriority"))

    def config_map(self, obj: Obj) -> None:
        for part in ("data", "binaryData"):
            data = self.string_map(obj, part, "")
            for key in data or {}:
                if not re.fullmatch(r"[-._a-zA-Z0-9]+", str(key)) or len(str(key)) > 253:
                    detail = "a valid config key must consist of alphanumerics, '-', '_' or '.'"
                    self.add(_invalid(part, key, detail))

    def service(self, obj: Obj) -> None:
        spec = self.map(obj, "spec", "")
        if spec is None:
            return
        for i, port in enumerate(self.list(spec, "ports", "spec") or ()):
            field = f"spec.ports[{i}]"
            if not isinstance(port, dict):
                self.add(_type(field, port, "object"))
                continue
            number = self.integer(port, "port", field, required=True)
            if number is not None and not 0 < number < 65536:
                self.add(_invalid(f"{field}.port", number, "must be between 1 and 65535, inclusive"))
        self.string_map(spec, "selector", "spec")

    def pdb(self, obj: Obj) -> None:
        spec = self.map(obj, "spec", "")
        if spec is None:
            return
        selector = self.map(spec, "selector", "spec")
        if selector is not None:
            self.selector(selector, "spec.selector")
        if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
            self.add(_invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set"))

    def namespace(self, obj: Obj) -> None:
        spec = self.map(obj, "spec", "")
        for i, item in enumerate((self.list(spec, "finalizers", "spec") if spec else None) or ()):
            if not isinstance(item, str):
                self.add(_type(f"spec.finalizers[{i}]", item, "string"))

    def binding(self, obj: Obj) -> None:
        target = self.map(obj, "target", "", required=True)
        if target is not None:
            self.string(target, "name", "target", required=True)


def validate_object(kind: Kind, obj: Obj, *, spec_known_valid: bool = False) -> list[Cause]:
    """The causes that make `obj` invalid as an object of `kind` (empty when it is valid).

    `spec_known_valid`: the spec is equal to a spec this function already accepted (an update
    that leaves the spec alone: validation is a pure function of the object, so the pod and
    workload spec checks, the costly part, are skipped).
    """
    check = _Checker()
    check.metadata(obj)
    if kind.custom is not None:
        return check.causes  # a custom resource: its CRD's schema checks the rest (customresources.objects)
    for part in ("spec", "status"):
        value = obj.get(part)
        if value is not None and not isinstance(value, dict):
            check.add(_type(part, value, "object"))
            return check.causes
    name = kind.kind
    if name == "Pod":
        check.pod(obj, with_spec=not spec_known_valid)
    elif name in ("Deployment", "ReplicaSet", "DaemonSet"):
        if not spec_known_valid:
            check.workload(obj, name)
    elif name == "Node":
        check.node(obj)
    elif name == "Lease":
        check.lease(obj)
    elif name == "Event":
        check.event(obj)
    elif name == "PriorityClass":
        check.priority_class(obj)
    elif name == "ConfigMap":
        check.config_map(obj)
    elif name == "Service":
        check.service(obj)
    elif name == "PodDisruptionBudget":
        check.pdb(obj)
    elif name == "Namespace":
        check.namespace(obj)
    elif name == "Binding":
        check.binding(obj)
    return check.causes

r"""Kubernetes protobuf bodies as the JSON-like dicts a Go client's JSON would have carried.

A body is the magic `k8s\x00` and a `runtime.Unknown`: {typeMeta {apiVersion, kind}, raw,
contentEncoding, contentType}; `raw` is the object's own message. The `protobuf` library
parses the bytes (`schema.compiled()`); this module maps the parsed messages to JSON.

The mapping is the one a Go client makes: protobuf into the Go struct, the struct through
`encoding/json`, so the result is exactly the JSON body kubectl 1.27-1.31 sends for the same
object, and what kube-apiserver stores for it:

* fields in Go struct order under their JSON names (`$ref`, `x-kubernetes-*`, `webhooks` ...),
  inlined structs merged in place (`Volume.volumeSource`, `Probe.handler`, ...);
* a Go value field (not a pointer) takes its zero value when absent; with `omitempty` a
  zero scalar or an empty list, map or byte string is left out; without it, it is written
  (`0`, `false`, `""`), and an empty list or map is `null`;
* a pointer field is written when present (even with a zero value), left out when absent;
* a struct is always written: `spec: {}`, `status: {}`;
* the hand-written JSON of apimachinery: `Time` -> `2024-01-02T03:04:05Z` (zero: null),
  `MicroTime` with six fractional digits, `Duration` -> Go's duration string, `IntOrString` ->
  a number or a string, `Quantity` -> its string (absent: "0"), `RawExtension`, `FieldsV1` and
  apiextensions `JSON` -> the embedded JSON (empty: null), and apiextensions'
  `JSONSchemaPropsOr{Array,Bool,StringArray}` -> a schema, a list or a boolean;
* `bytes` -> standard base64 (a Go `[]byte` value field is like a pointer: absent is nil);
  map keys sorted (as Go writes them); text that is not UTF-8 gets U+FFFD (as Go's encoder
  does), except in a map key, which is refused (upstream validation refuses such keys in every
  map of the built-in kinds anyway); a `double` with an integral value is an int (JSON `1`).

Every failure is a `ProtobufError` (a ValueError) with a message for the 400.
"""

from __future__ import annotations

import base64
import functools
import math
import operator
from collections.abc import Callable
from typing import Any, Final

import orjson

from kubemesh.apiserver.protobuf import goformats
from kubemesh.apiserver.protobuf.schema import SPECIAL, UNKNOWN, Compiled, Slot, compiled
from kubemesh.services.model.quantities import QUANTITY_FORMAT

MAGIC: Final = b"k8s\x00"


class ProtobufError(ValueError):
    """A body that is not a valid protobuf message of its kind (the reason is the message)."""


def unwrap(raw: bytes) -> tuple[str, str, bytes]:
    """(apiVersion, kind, the object's message bytes) of an enveloped body; either name may be ""."""
    if not raw.startswith(MAGIC):
        raise ProtobufError("provided data does not appear to be a protobuf message, expected prefix "
                            "[107 56 115 0]")
    c = compiled()
    envelope = _parse(c, UNKNOWN, raw[len(MAGIC):])
    meta = envelope.f1
    return _text(meta.f1), _text(meta.f2), bytes(envelope.f2)


def decode_message(name: str, data: bytes) -> dict[str, Any]:
    """The JSON form of the message `name` (a table entry) encoded in `data`."""
    c = compiled()
    try:
        result: dict[str, Any] = _decoders()[name](_parse(c, name, data))
    except UnicodeDecodeError as exc:  # the library cannot look up a map entry by a key that is not UTF-8
        raise ProtobufError(f"a map key of a {_short(name)} is not valid UTF-8: {exc}") from None
    return result


def _parse(c: Compiled, name: str, data: bytes) -> Any:
    # Imported here, as `schema.compiled` imports the library (`c` is built, so it is loaded).
    from google.protobuf.message import DecodeError  # type: ignore[import-untyped]  # noqa: PLC0415

    try:
        return c.classes[name].FromString(data)
    except DecodeError as exc:
        raise ProtobufError(f"unable to parse the {_short(name)} message: malformed protobuf data "
                            f"(truncated, or of a wrong wire type)") from exc
    except RecursionError as exc:
        raise ProtobufError(f"unable to parse the {_short(name)} message: nested too deeply") from exc


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _text(value: str | bytes) -> str:
    """A parsed `string`: upb gives `str`, or `bytes` when the text is not UTF-8 (replaced as Go's JSON does)."""
    return value if value.__class__ is str else value.decode("utf-8", "replace")  # type: ignore[union-attr]


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _double(value: float) -> Any:
    if not math.isfinite(value):
        raise ProtobufError(f"json: unsupported value: {value}")
    if value.is_integer() and abs(value) < 2 ** 63:
        return int(value)
    return value


# ------------------------------------------------------------------------------------ compiled walkers
#
# Walking the tables field by field for every message of every body is slow in Python (a pod
# has a few hundred fields to look at). Instead, each message gets a function generated once
# from its slots: straight-line code, one statement per field, applying the rules of the module
# docstring. `_source` is the whole of it; what follows is the expression or statement each
# kind of field compiles to.

_SCALAR_EXPR: Final = {
    "string": "({0} if {0}.__class__ is str else _text({0}))",
    "bytes": "_b64({})",
    "double": "_double({})",
    "int32": "{}",
    "int64": "{}",
    "bool": "{}",
}


def _function_names(c: Compiled) -> dict[str, str]:
    return {name: f"_m{i}" for i, name in enumerate(c.slots)}


def _value_expr(c: Compiled, names: dict[str, str], typ: str, var: str) -> str:
    """The Python expression converting `var` (a parsed value of type `typ`) to JSON."""
    if typ in _SCALAR_EXPR:
        return _SCALAR_EXPR[typ].format(var)
    special = SPECIAL.get(typ)
    if special is not None:
        return f"_{special}({var})"
    if typ in c.lists:
        return f"([_text(x) for x in {var}.f1] or None)"
    return f"{names[typ]}({var})"


def _slot_lines(c: Compiled, names: dict[str, str], slot: Slot) -> list[str]:
    attr, key, typ = slot.attr, repr(slot.json), slot.type
    none = [] if slot.omitempty else ["    else:", f"        o[{key}] = None"]
    if slot.shape == "val":
        if slot.is_message:
            if not slot.json:  # an inlined struct: its fields join this object's
                return [f"    o.update({names[typ]}(m.{attr}))"]
            return [f"    o[{key}] = {_value_expr(c, names, typ, f'm.{attr}')}"]
        if slot.omitempty:  # a zero value is left out
            return [f"    v = m.{attr}", "    if v:", f"        o[{key}] = {_value_expr(c, names, typ, 'v')}"]
        return [f"    v = m.{attr}", f"    o[{key}] = {_value_expr(c, names, typ, 'v')}"]
    if slot.shape == "ptr":
        return [f"    if m.HasField({attr!r}):", f"        v = m.{attr}",
                f"        o[{key}] = {_value_expr(c, names, typ, 'v')}", *none]
    if slot.shape == "bytes":  # a Go []byte: nil when absent, empty when sent empty
        keep = "" if not slot.omitempty else f" and m.{attr}"
        lines = [f"    if m.HasField({attr!r}){keep}:", f"        o[{key}] = _b64(m.{attr})"]
        if not slot.omitempty:
            lines += [f"    elif not m.HasField({attr!r}):", f"        o[{key}] = None"]
        return lines
    if slot.shape == "list":
        return [f"    v = m.{attr}", "    if v:",
                f"        o[{key}] = [{_value_expr(c, names, typ, 'x')} for x in v]", *none]
    # a map (a key sent twice kept its last value, as in Go), keys sorted as Go writes them
    return [f"    v = m.{attr}", "    if v:",
            f"        o[{key}] = dict(sorted([(_text(k), {_value_expr(c, names, typ, 'x')}) for k, x in v.items()], "
            "key=_first))",
            *none]


def _source(c: Compiled) -> str:
    """The Python source of one walker per message: `_m<i>(parsed message) -> dict`."""
    names = _function_names(c)
    lines: list[str] = []
    for name, slots in c.slots.items():
        lines += [f"def {names[name]}(m):  # {name}", "    o = {}"]
        for slot in slots:
            lines += _slot_lines(c, names, slot)
        lines += ["    return o", ""]
    return "\n".join(lines)


@functools.cache
def _decoders() -> dict[str, Callable[[Any], dict[str, Any]]]:
    """The walker of every message, compiled once."""
    c = compiled()
    namespace: dict[str, Any] = {"_b64": _b64, "_double": _double, "_text": _text, "_first": operator.itemgetter(0)}
    for special, form in _SPECIAL_FORMS.items():
        namespace[f"_{special}"] = _guarded(special, form)
    exec(compile(_source(c), "<kubemesh protobuf walkers>", "exec"), namespace)
    return {name: namespace[fn] for name, fn in _function_names(c).items()}


def _guarded(special: str, form: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """`form`, with the ValueErrors of Go's formats (a time out of range) as ProtobufErrors."""
    if special not in ("time", "microtime"):
        return form

    def guarded(msg: Any) -> Any:
        try:
            return form(msg)
        except ValueError as exc:
            raise ProtobufError(f"{_GO_NAMES[special]}: {exc}") from exc

    return guarded


def _struct(name: str, msg: Any) -> dict[str, Any]:
    result: dict[str, Any] = _decoders()[name](msg)
    return result


def _time(msg: Any) -> Any:
    if not msg.HasField("f1") and not msg.HasField("f2"):
        return None  # an empty Time message is Go's zero time
    return goformats.format_time(msg.f1)


def _micro_time(msg: Any) -> Any:
    if not msg.HasField("f1") and not msg.HasField("f2"):
        return None
    return goformats.format_micro_time(msg.f1, msg.f2)


def _duration(msg: Any) -> Any:
    return goformats.format_duration(msg.f1)


def _int_or_string(msg: Any) -> Any:
    kind = msg.f1
    if kind == 0:
        return msg.f2
    if kind == 1:
        return _text(msg.f3)
    raise ProtobufError(f"impossible IntOrString.Type {kind}")


def _quantity(msg: Any) -> Any:
    if not msg.HasField("f1"):
        return "0"  # Go's zero Quantity
    text = _text(msg.f1)
    if not text:
        raise ProtobufError(QUANTITY_FORMAT)
    return text


def _raw(msg: Any) -> Any:
    data = msg.f1
    if not data:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ProtobufError(f"an embedded object is not JSON: {exc}") from exc


def _or_array(msg: Any) -> Any:
    if msg.f2:
        return [_struct(_PROPS, v) for v in msg.f2]
    return _struct(_PROPS, msg.f1) if msg.HasField("f1") else None


def _or_bool(msg: Any) -> Any:
    if msg.HasField("f2"):
        return _struct(_PROPS, msg.f2)
    return bool(msg.f1)


def _or_string_array(msg: Any) -> Any:
    if msg.f2:
        return [_text(v) for v in msg.f2]
    return _struct(_PROPS, msg.f1) if msg.HasField("f1") else None


_GO_NAMES: Final = {"time": "Time", "microtime": "MicroTime"}
_PROPS: Final = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps"
_SPECIAL_FORMS: Final = {
    "time": _time,
    "microtime": _micro_time,
    "duration": _duration,
    "intorstring": _int_or_string,
    "quantity": _quantity,
    "raw": _raw,
    "orarray": _or_array,
    "orbool": _or_bool,
    "orstringarray": _or_string_array,
}

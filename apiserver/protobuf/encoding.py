r"""JSON-like objects as the Kubernetes protobuf bodies a Go client sends (for tests and benchmarks).

The apiserver never answers in protobuf; this is the inverse of `decoding`, from the same
tables, so that tests and benchmarks can send what kubectl 1.32+ sends without kubectl:

* every Go value field is written, zero or not (as Go's generated marshallers do), every
  struct too; a pointer field, a list or a map only when the JSON has it (not null);
* the hand-written JSON forms are read back: RFC 3339 times, Go duration strings, a number or
  a string for IntOrString, a Quantity's string, embedded JSON, apiextensions' schema-or-x;
* the envelope is `k8s\x00` + runtime.Unknown {typeMeta {apiVersion, kind}, raw, "", ""}.

For an object in Go's JSON form (what `decoding` produces), `decode(encode(obj)) == obj`.
A value that does not fit its field raises `ValueError` (or the library's TypeError).
"""

from __future__ import annotations

import base64
from typing import Any, Final

import orjson

from kubemesh.apiserver.protobuf import goformats
from kubemesh.apiserver.protobuf.decoding import MAGIC
from kubemesh.apiserver.protobuf.schema import SPECIAL, UNKNOWN, Compiled, compiled, message_for

_PROPS: Final = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps"
_ZERO: Final = {"string": "", "bytes": b"", "int32": 0, "int64": 0, "bool": False, "double": 0.0}


def encode_protobuf(obj: dict[str, Any]) -> bytes:
    """The enveloped protobuf body of `obj` (its apiVersion and kind name the message)."""
    api_version, kind = str(obj.get("apiVersion") or ""), str(obj.get("kind") or "")
    name = message_for(api_version, kind)
    if name is None:
        raise ValueError(f"no protobuf message for {api_version} {kind}")
    return wrap(api_version, kind, encode_message(name, obj))


def wrap(api_version: str, kind: str, data: bytes) -> bytes:
    r"""`k8s\x00` + the runtime.Unknown carrying `data` as an object of `kind` at `api_version`."""
    c = compiled()
    envelope = c.classes[UNKNOWN]()
    envelope.f1.f1 = api_version
    envelope.f1.f2 = kind
    envelope.f2 = data
    envelope.f3 = ""
    envelope.f4 = ""
    return MAGIC + bytes(envelope.SerializeToString())


def encode_message(name: str, obj: dict[str, Any]) -> bytes:
    """The message `name` (a table entry) holding `obj`, serialised."""
    c = compiled()
    msg = c.classes[name]()
    _fill_struct(c, name, msg, obj)
    return bytes(msg.SerializeToString())


def _fill_struct(c: Compiled, name: str, msg: Any, obj: Any) -> None:
    if obj is None:
        obj = {}
    if not isinstance(obj, dict):
        raise ValueError(f"{name.rsplit('.', 1)[-1]} must be an object, not {obj!r}")
    for slot in c.slots[name]:
        if slot.shape == "val" and slot.is_message:
            target = getattr(msg, slot.attr)
            target.SetInParent()
            _fill_message(c, slot.type, target, obj if not slot.json else obj.get(slot.json))
            continue
        value = obj.get(slot.json)
        if slot.shape == "val":
            setattr(msg, slot.attr, _zero(slot.type) if value is None else _scalar(slot.type, value))
        elif value is None:
            continue
        elif slot.shape in ("ptr", "bytes"):
            if slot.is_message:
                target = getattr(msg, slot.attr)
                target.SetInParent()
                _fill_message(c, slot.type, target, value)
            else:
                setattr(msg, slot.attr, _scalar(slot.type, value))
        elif slot.shape == "list":
            container = getattr(msg, slot.attr)
            for item in value:
                if slot.is_message:
                    _fill_message(c, slot.type, container.add(), item)
                else:
                    container.append(_scalar(slot.type, item))
        else:
            container = getattr(msg, slot.attr)
            for key, item in value.items():
                if slot.is_message:
                    target = container[key]  # creates the entry
                    _fill_message(c, slot.type, target, item)
                else:
                    container[key] = _scalar(slot.type, item)


def _zero(typ: str) -> Any:
    return _ZERO[typ]


def _scalar(typ: str, value: Any) -> Any:
    if typ == "string":
        if not isinstance(value, str):
            raise ValueError(f"expected a string, not {value!r}")
        return value
    if typ == "bytes":
        return base64.b64decode(value, validate=True)
    if typ == "bool":
        if not isinstance(value, bool):
            raise ValueError(f"expected a boolean, not {value!r}")
        return value
    if typ == "double":
        return float(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, not {value!r}")
    return value


def _fill_message(c: Compiled, name: str, msg: Any, value: Any) -> None:
    special = SPECIAL.get(name)
    if special is not None:
        _fill_special(c, special, msg, value)
    elif name in c.lists:
        for item in value or ():
            msg.f1.append(_scalar("string", item))
    else:
        _fill_struct(c, name, msg, value)


def _fill_special(c: Compiled, special: str, msg: Any, value: Any) -> None:
    if special in ("time", "microtime"):
        if value is not None:
            seconds, nanos = goformats.parse_time(value)
            msg.f1 = seconds
            msg.f2 = nanos if special == "microtime" else 0
    elif special == "duration":
        msg.f1 = goformats.parse_duration(value) if value is not None else 0
    elif special == "intorstring":
        if isinstance(value, str):
            msg.f1, msg.f2, msg.f3 = 1, 0, value
        else:
            msg.f1, msg.f2, msg.f3 = 0, _scalar("int32", value if value is not None else 0), ""
    elif special == "quantity":
        msg.f1 = str(value if value is not None else "0")
    elif special == "raw":
        if value is not None:
            msg.f1 = orjson.dumps(value)
    elif special == "orarray":
        if isinstance(value, list):
            for item in value:
                _fill_struct(c, _PROPS, msg.f2.add(), item)
        elif value is not None:
            msg.f1.SetInParent()
            _fill_struct(c, _PROPS, msg.f1, value)
    elif special == "orbool":
        if isinstance(value, bool):
            msg.f1 = value
        else:
            msg.f1 = True
            msg.f2.SetInParent()
            _fill_struct(c, _PROPS, msg.f2, value)
    elif special == "orstringarray":
        if isinstance(value, list):
            for item in value:
                msg.f2.append(_scalar("string", item))
        elif value is not None:
            msg.f1.SetInParent()
            _fill_struct(c, _PROPS, msg.f1, value)
    else:  # pragma: no cover - SPECIAL and this function list the same forms
        raise AssertionError(special)

"""The generated message tables compiled for the wire parser: descriptors, classes and field plans.

`messages.py` holds facts (numbers, types, JSON names, Go shapes); this module turns them
into what decoding and encoding walk:

* one protobuf `DescriptorPool` with a message class per table entry (the `protobuf`
  library parses and serialises the wire bytes; we never read varints ourselves). Every field
  is named `f<number>`; the file is proto2, so scalars have presence and the parser does not
  reject text that is not UTF-8 (upb hands such a `string` over as `bytes`, which decoding
  turns into text as Go's JSON encoder does); a `map` field is a proto map (string keys;
  a key sent twice keeps its last value, as in Go);
* for each message, a tuple of `Slot`s in JSON order.

Everything is built once, on first use (`compiled()`), and is immutable afterwards.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, Final

from kubemesh.apiserver.protobuf import messages

# The protobuf library is imported by `compiled()`, with the first protobuf body: the tables and
# `message_for` serve every write (`gojson`), the library only protobuf's (about 40 ms of every
# apiserver start-up otherwise).

PACKAGE: Final = "kubemesh.k8sproto"
SCALARS: Final = frozenset({"string", "int32", "int64", "bool", "bytes", "double"})

TIME: Final = "k8s.io.apimachinery.pkg.apis.meta.v1.Time"
MICRO_TIME: Final = "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime"
DURATION: Final = "k8s.io.apimachinery.pkg.apis.meta.v1.Duration"
FIELDS_V1: Final = "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1"
DELETE_OPTIONS: Final = "k8s.io.apimachinery.pkg.apis.meta.v1.DeleteOptions"
INT_OR_STRING: Final = "k8s.io.apimachinery.pkg.util.intstr.IntOrString"
QUANTITY: Final = "k8s.io.apimachinery.pkg.api.resource.Quantity"
RAW_EXTENSION: Final = "k8s.io.apimachinery.pkg.runtime.RawExtension"
UNKNOWN: Final = "k8s.io.apimachinery.pkg.runtime.Unknown"
_APIEXT: Final = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1."
EXT_JSON: Final = _APIEXT + "JSON"
PROPS_OR_ARRAY: Final = _APIEXT + "JSONSchemaPropsOrArray"
PROPS_OR_BOOL: Final = _APIEXT + "JSONSchemaPropsOrBool"
PROPS_OR_STRING_ARRAY: Final = _APIEXT + "JSONSchemaPropsOrStringArray"

SPECIAL: Final = {
    TIME: "time",
    MICRO_TIME: "microtime",
    DURATION: "duration",
    INT_OR_STRING: "intorstring",
    QUANTITY: "quantity",
    RAW_EXTENSION: "raw",
    FIELDS_V1: "raw",
    EXT_JSON: "raw",
    PROPS_OR_ARRAY: "orarray",
    PROPS_OR_BOOL: "orbool",
    PROPS_OR_STRING_ARRAY: "orstringarray",
}
"""Messages whose Go types write their JSON by hand (MarshalJSON), by the form they take."""

_TYPES: Final = {"string": "TYPE_STRING", "bytes": "TYPE_BYTES", "int32": "TYPE_INT32", "int64": "TYPE_INT64",
                  "bool": "TYPE_BOOL", "double": "TYPE_DOUBLE"}
"""The FieldDescriptorProto type of each scalar, by name."""


@dataclass(frozen=True, slots=True)
class Slot:
    """One field of a message as decoding and encoding see it.

    `attr` is the attribute of the parsed message (`f<number>`); `json` the JSON name ("" when
    the Go field is inlined); `type` a scalar name or a message name; `shape` is `val`, `ptr`,
    `list` or `map` (for a map, `type` is the value's type; the parsed field is a mapping), or
    `bytes` for a Go `[]byte` value field (nil and empty differ, as for a pointer).
    """

    attr: str
    json: str
    type: str
    shape: str
    omitempty: bool

    @property
    def is_message(self) -> bool:
        """Whether values of this field are messages (else scalars)."""
        return self.type not in SCALARS


@dataclass(frozen=True, slots=True)
class Compiled:
    """The message classes and slot plans of every table entry."""

    classes: dict[str, Any]
    slots: dict[str, tuple[Slot, ...]]
    kinds: dict[tuple[str, str], str]
    lists: frozenset[str]


def _class_name(index: int) -> str:
    return f"M{index}"


def _file_descriptor(names: dict[str, str]) -> Any:
    """A FileDescriptorProto (proto2) with one message per table entry, named `M<i>`."""
    from google.protobuf import descriptor_pb2  # type: ignore[import-untyped]  # noqa: PLC0415 - see the imports

    fd = descriptor_pb2.FileDescriptorProto(name="kubemesh_k8s_messages.proto", package=PACKAGE, syntax="proto2")
    for full, short in names.items():
        msg = fd.message_type.add(name=short)
        for number, _json, typ, shape, _omitempty in messages.MESSAGES[full]:
            field = msg.field.add(name=f"f{number}", number=number)
            if shape == "map":
                entry = msg.nested_type.add(name=f"E{number}")
                entry.options.map_entry = True
                entry.field.add(name="key", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
                value = entry.field.add(name="value", number=2,
                                        label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
                _set_type(value, typ, names)
                field.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
                field.type_name = f".{PACKAGE}.{short}.E{number}"
                field.label = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED
                continue
            _set_type(field, typ, names)
            field.label = (descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED if shape == "list"
                           else descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
    return fd


def _set_type(field: Any, typ: str, names: dict[str, str]) -> None:
    from google.protobuf import descriptor_pb2  # noqa: PLC0415 - see the imports

    if typ in _TYPES:
        field.type = getattr(descriptor_pb2.FieldDescriptorProto, _TYPES[typ])
    else:
        field.type = descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE
        field.type_name = f".{PACKAGE}.{names[typ]}"


@functools.cache
def compiled() -> Compiled:
    """Build (once) the descriptor pool, the message classes and the slot plans."""
    from google.protobuf import descriptor_pool, message_factory  # noqa: PLC0415 - see the imports

    names = {full: _class_name(i) for i, full in enumerate(messages.MESSAGES)}
    pool = descriptor_pool.DescriptorPool()
    pool.Add(_file_descriptor(names))
    classes = {full: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{PACKAGE}.{short}"))
               for full, short in names.items()}
    slots = {full: tuple(Slot(attr=f"f{number}", json=json, type=typ,
                              shape="bytes" if (typ, shape) == ("bytes", "val") else shape, omitempty=omitempty)
                         for number, json, typ, shape, omitempty in fields)
             for full, fields in messages.MESSAGES.items()}
    return Compiled(classes=classes, slots=slots, kinds=dict(messages.KINDS), lists=messages.LISTS)


def message_for(api_version: str, kind: str) -> str | None:
    """The message of a kind at an apiVersion (DeleteOptions in every group version), or None."""
    if kind == "DeleteOptions":
        return DELETE_OPTIONS
    return messages.KINDS.get((api_version, kind))

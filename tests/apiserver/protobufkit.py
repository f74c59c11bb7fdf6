"""Hypothesis strategies for objects in Go's JSON form, from the protobuf message tables.

`go_json(message)` draws what a Go client's `encoding/json` writes for a value of that message:
every Go value field (zero or not) unless `omitempty` drops it, every struct, pointers only when
set, `null` for an unset pointer, list or map without `omitempty`, and the hand-written forms of
apimachinery (times, durations, IntOrString, quantities, embedded JSON) and apiextensions. This
restates the rules independently of `kubemesh.apiserver.protobuf.decoding`, so a test that
encodes such an object to protobuf and decodes it back checks the decoder against the rules.

`protobuf_body(obj)` and `wire(...)` build bodies as kubectl 1.32+ sends them.
"""

from __future__ import annotations

import base64
import datetime as dt
from typing import Any, Final

from hypothesis import strategies as st

from kubemesh.apiserver.protobuf import encode_protobuf
from kubemesh.apiserver.protobuf.goformats import format_duration
from kubemesh.apiserver.protobuf.schema import SPECIAL, Slot, compiled

Json = dict[str, Any]
PROPS: Final = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps"
PROTOBUF: Final = "application/vnd.kubernetes.protobuf"

# Canonical quantity strings (what Go's Quantity.String() writes).
QUANTITIES: Final = ("0", "1", "100m", "1500m", "2", "64Mi", "1Gi", "10k", "5M", "250m", "1e3", "12345")
_EPOCH: Final = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

_text = st.text(st.characters(codec="utf-8"), max_size=6)
_int32 = st.integers(-(2 ** 31), 2 ** 31 - 1)
_int64 = st.integers(-(2 ** 63), 2 ** 63 - 1)


def _double_json(x: float) -> Any:
    """Go writes an integral float64 as an integer literal, which JSON readers take as an int."""
    return int(x) if x.is_integer() and abs(x) < 2 ** 63 else x


SCALARS: Final[dict[str, st.SearchStrategy[Any]]] = {
    "string": _text,
    "int32": _int32,
    "int64": _int64,
    "bool": st.booleans(),
    "double": st.floats(allow_nan=False, allow_infinity=False).map(_double_json),
    "bytes": st.binary(max_size=8).map(lambda b: base64.b64encode(b).decode()),
}


def _zero(value: Any) -> bool:
    return value in ("", 0, False) and not isinstance(value, list | dict)


def time_text(seconds: int) -> str:
    """RFC 3339 to the second in UTC, as metav1.Time writes it."""
    return (_EPOCH + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time_text(seconds: int, micros: int) -> str:
    """RFC 3339 with six fractional digits in UTC, as metav1.MicroTime writes it."""
    return (_EPOCH + dt.timedelta(seconds=seconds, microseconds=micros)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_seconds = st.integers(0, 4_102_444_800)  # 1970 .. 2100
_json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-(2 ** 53), 2 ** 53), _text)
_json_value: st.SearchStrategy[Any] = st.recursive(
    _json_leaf, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                        st.dictionaries(_text, inner, max_size=3)), max_leaves=6)


def _present() -> st.SearchStrategy[bool]:
    """An optional part is there about one time in three (keeps the trees small)."""
    return st.integers(0, 2).map(lambda n: n == 0)


@st.composite
def go_json(draw: st.DrawFn, name: str, depth: int = 3) -> Any:
    """The Go JSON form of one value of message `name` (may be None for hand-written forms)."""
    c = compiled()
    special = SPECIAL.get(name)
    if special is not None:
        return draw(_special(special, depth))
    if name in c.lists:
        return draw(st.one_of(st.none(), st.lists(_text, min_size=1, max_size=3)))
    out: Json = {}
    for slot in c.slots[name]:
        _draw_slot(draw, slot, out, depth)
    return out


def _draw_slot(draw: st.DrawFn, slot: Slot, out: Json, depth: int) -> None:
    deeper = depth > 0
    if slot.shape == "val":
        if slot.is_message:
            value = draw(go_json(slot.type, depth - 1))
            if not slot.json:
                out.update(value)
            else:
                out[slot.json] = value
            return
        value = draw(SCALARS[slot.type])
        if not (slot.omitempty and _zero(value)):
            out[slot.json] = value
        return
    if not deeper or not draw(_present()):
        if not slot.omitempty:
            out[slot.json] = None
        return
    if slot.shape in ("ptr", "bytes"):
        if slot.is_message:
            out[slot.json] = draw(go_json(slot.type, depth - 1).filter(lambda v: v is not None))
        else:
            value = draw(SCALARS[slot.type])
            if not (slot.shape == "bytes" and slot.omitempty and value == ""):  # an empty []byte with omitempty
                out[slot.json] = value
    elif slot.shape == "list":
        item = go_json(slot.type, depth - 1) if slot.is_message else SCALARS[slot.type]
        if slot.is_message and SPECIAL.get(slot.type) is None:
            item = item.filter(lambda v: v is not None)
        out[slot.json] = draw(st.lists(item, min_size=1, max_size=2))
    else:
        item = go_json(slot.type, depth - 1) if slot.is_message else SCALARS[slot.type]
        entries = draw(st.dictionaries(_text, item, min_size=1, max_size=2))
        out[slot.json] = dict(sorted(entries.items()))


def _special(special: str, depth: int) -> st.SearchStrategy[Any]:
    if special == "time":
        return st.one_of(st.none(), _seconds.map(time_text))
    if special == "microtime":
        return st.one_of(st.none(), st.builds(micro_time_text, _seconds, st.integers(0, 999_999)))
    if special == "duration":
        return _int64.map(format_duration)
    if special == "intorstring":
        return st.one_of(_int32, _text)
    if special == "quantity":
        return st.sampled_from(QUANTITIES)
    if special == "raw":
        return st.one_of(st.none(), _json_value.filter(lambda v: v is not None))
    schema = go_json(PROPS, depth - 1) if depth > 0 else st.just(_empty_props())
    if special == "orarray":
        return st.one_of(schema, st.lists(schema, min_size=1, max_size=2))
    if special == "orbool":
        return st.one_of(st.booleans(), schema)
    assert special == "orstringarray"
    return st.one_of(schema, st.lists(_text, min_size=1, max_size=2))


def _empty_props() -> Json:
    """JSONSchemaProps with nothing set (every field of it is omitempty)."""
    return {}


def protobuf_body(obj: Json) -> bytes:
    """The body kubectl 1.32+ would send for `obj` (its apiVersion and kind pick the message)."""
    return encode_protobuf(obj)


def kind_message(api_version: str, kind: str) -> str:
    """The message name of a kind."""
    return compiled().kinds[(api_version, kind)]

"""A real-world-sized CRD schema (thousands of lines, deeply nested, like cert-manager's or the
Prometheus operator's), compiled once and used on objects of matching size."""

from __future__ import annotations

import copy
import time
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from kubemesh.apiserver.structural import StructuralSchema

ROOT = "spec.versions[0].schema.openAPIV3Schema"


def _leaf_props(prefix: str) -> dict[str, Any]:
    return {
        f"{prefix}Name": {"type": "string", "description": f"The name of the {prefix}.", "maxLength": 63,
                          "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
        f"{prefix}Count": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 1000,
                           "description": "How many."},
        f"{prefix}Mode": {"type": "string", "enum": ["Auto", "Manual", "Off"], "default": "Auto"},
        f"{prefix}Enabled": {"type": "boolean"},
        f"{prefix}Port": {"x-kubernetes-int-or-string": True,
                          "anyOf": [{"type": "integer"}, {"type": "string"}]},
        f"{prefix}Tags": {"type": "array", "items": {"type": "string", "maxLength": 32},
                          "x-kubernetes-list-type": "set", "maxItems": 16},
        f"{prefix}Labels": {"type": "object", "additionalProperties": {"type": "string"}},
        f"{prefix}Timeout": {"type": "string", "format": "duration"},
        f"{prefix}Ratio": {"type": "number", "minimum": 0, "maximum": 1},
        f"{prefix}Entries": {
            "type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["key"], "maxItems": 32,
            "items": {"type": "object", "required": ["key"], "properties": {
                "key": {"type": "string", "maxLength": 64}, "value": {"type": "string", "maxLength": 256},
                "effect": {"type": "string", "enum": ["NoSchedule", "NoExecute"]}}},
        },
    }


def build(depth: int, width: int, prefix: str = "n") -> dict[str, Any]:
    props = _leaf_props(prefix)
    if depth > 0:
        for i in range(width):
            props[f"{prefix}Child{i}"] = build(depth - 1, width, f"{prefix}{i}")
    return {
        "type": "object", "description": f"Settings of {prefix}.", "properties": props,
        "x-kubernetes-validations": [
            {"rule": f"!has(self.{prefix}Count) || self.{prefix}Count <= 500 || self.{prefix}Mode == 'Manual'",
             "message": "counts above 500 need Manual mode"},
        ],
    }


def instance(depth: int, width: int, prefix: str = "n") -> dict[str, Any]:
    obj: dict[str, Any] = {
        f"{prefix}Name": "a-name", f"{prefix}Count": 3, f"{prefix}Mode": "Auto", f"{prefix}Enabled": True,
        f"{prefix}Port": "http", f"{prefix}Tags": ["a", "b"], f"{prefix}Labels": {"app": "x"},
        f"{prefix}Timeout": "30s", f"{prefix}Ratio": 0.5,
        f"{prefix}Entries": [{"key": "a", "value": "1"}, {"key": "b", "effect": "NoSchedule"}],
    }
    if depth > 0:
        for i in range(width):
            obj[f"{prefix}Child{i}"] = instance(depth - 1, width, f"{prefix}{i}")
    return obj


SCHEMA: dict[str, Any] = {"type": "object", "properties": {
    "spec": build(4, 3),
    "status": {"type": "object", "properties": {
        "conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                       "items": {"type": "object", "required": ["type", "status"], "properties": {
                           "type": {"type": "string"}, "status": {"type": "string", "enum": ["True", "False",
                                                                                             "Unknown"]},
                           "lastTransitionTime": {"type": "string", "format": "date-time"},
                           "message": {"type": "string", "maxLength": 32768}}}},
        "observedGeneration": {"type": "integer", "format": "int64"}}},
}}


def test_the_schema_is_real_world_sized() -> None:
    assert len(yaml.safe_dump(SCHEMA).splitlines()) > 5000


def test_large_schema_compiles_and_validates() -> None:
    started = time.perf_counter()
    schema, causes = StructuralSchema.compile(SCHEMA, path=ROOT, status_subresource=True)
    compile_seconds = time.perf_counter() - started
    assert causes == []
    assert schema is not None
    print(f"compile: {compile_seconds * 1000:.0f} ms")  # informal; no timing assert

    obj: dict[str, Any] = {"apiVersion": "example.com/v1", "kind": "Big", "metadata": {"name": "big"},
                           "spec": instance(4, 3), "status": {"observedGeneration": 1}}
    assert schema.prune(copy.deepcopy(obj)) == []
    assert schema.validate(obj) == []

    broken = copy.deepcopy(obj)
    leaf = broken["spec"]["nChild0"]["n0Child1"]["n01Child2"]
    leaf["n012Count"] = 900
    leaf["n012Name"] = "Not_Valid"
    leaf["n012Entries"].append({"key": "a"})
    causes = schema.validate(broken)
    assert [c["field"] for c in causes] == ["spec.nChild0.n0Child1.n01Child2.n012Name",
                                            "spec.nChild0.n0Child1.n01Child2.n012Entries[2]",
                                            "spec.nChild0.n0Child1.n01Child2"]
    assert causes[1]["message"] == 'Duplicate value: {"key":"a"}'
    assert causes[-1]["message"] == "Invalid value: counts above 500 need Manual mode"


def test_large_schema_defaults() -> None:
    schema, _ = StructuralSchema.compile(SCHEMA, path=ROOT)
    assert schema is not None
    obj: dict[str, Any] = {"spec": {"nChild0": {}}}
    schema.default(obj)
    assert obj == {"spec": {"nMode": "Auto", "nChild0": {"n0Mode": "Auto"}}}


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
COMPILED, _ = StructuralSchema.compile(SCHEMA, path=ROOT)


@settings(max_examples=150, deadline=None)
@given(junk=JSON, where=st.sampled_from(["nName", "nCount", "nPort", "nTags", "nLabels", "nEntries", "nChild0",
                                         "nTimeout", "nRatio", "other"]))
def test_any_json_is_handled_without_exceptions(junk: Any, where: str) -> None:
    assert COMPILED is not None
    obj = {"spec": instance(1, 1)}
    obj["spec"][where] = junk
    old = copy.deepcopy(obj)
    causes = COMPILED.validate(obj, old=old) + COMPILED.validate(obj)
    assert all(set(c) == {"reason", "field", "message"} for c in causes)
    COMPILED.prune(obj)
    COMPILED.default(obj)
    COMPILED.validate(obj)

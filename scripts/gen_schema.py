"""Generate `apiserver/schema.json`, the known-fields tree used for `fieldValidation=Strict`.

Run at development time (the `kubernetes` client is a test dependency only; the apiserver
reads the generated JSON and never imports it):

    .venv/bin/python scripts/gen_schema.py

The tree is built from the official client's models: each model class has `openapi_types`
(python attribute -> type string) and `attribute_map` (python attribute -> JSON name). Every
type reachable from a served kind is written once, by model name, so the file stays compact.

Format:

    {"kinds": {"Pod": "V1Pod", ..., "autoscaling/v1/HorizontalPodAutoscaler": "V1HorizontalPodAutoscaler"},
     "types": {"V1Pod": {"apiVersion": "", "metadata": "V1ObjectMeta", ...}, ...},
     "fieldTypes": {"V1Pod": {"apiVersion": "str", "metadata": "V1ObjectMeta", ...}, ...}}

`fieldTypes` keeps each field's type as the client spells it (`str`, `int`, `bool`, `float`,
`datetime`, `object`, `list[V1Container]`, `dict(str, str)`, ...): the OpenAPI documents' component
schemas are built from it (apiserver/openapi.py).

A field's value says what may appear below it:

* `""`: a leaf (string, number, boolean, time, or free-form `object`): nothing is checked below;
* `"V1Foo"`: an object of that type;
* `"[V1Foo"`: a list of those objects; `"["`: a list of scalars or free values;
* `"{V1Foo"`: a map with free keys whose values are those objects; `"{"`: a map with free keys
  and free values (labels, annotations, data, resource lists, nodeSelector, capacity, ...).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kubemesh.services.model.kinds import KINDS  # noqa: E402

EXTRA_KINDS = {"Eviction": "V1Eviction", "Scale": "V1Scale", "DeleteOptions": "V1DeleteOptions"}
"""Bodies of subresources and options that are not served kinds of their own."""

_LIST = re.compile(r"^(?:List\[(.*)\]|list\[(.*)\])$")
_DICT = re.compile(r"^(?:Dict\[str, (.*)\]|dict\(str, (.*)\))$")


def _models() -> Any:
    from kubernetes.client import models  # noqa: PLC0415 - a test dependency, needed only when regenerating

    return models


def _is_model(models: Any, name: str) -> bool:
    cls = getattr(models, name, None)
    return cls is not None and hasattr(cls, "openapi_types") and hasattr(cls, "attribute_map")


def _encode(models: Any, type_str: str, todo: list[str]) -> str:
    """The compact code of one field's type, queueing model types for their own entry."""
    m = _LIST.match(type_str)
    if m:
        inner = m.group(1) or m.group(2)
        if _is_model(models, inner):
            todo.append(inner)
            return "[" + inner
        return "["
    m = _DICT.match(type_str)
    if m:
        inner = m.group(1) or m.group(2)
        if _is_model(models, inner):
            todo.append(inner)
            return "{" + inner
        return "{"
    if _is_model(models, type_str):
        todo.append(type_str)
        return type_str
    return ""


def model_for(models: Any, kind: str, version: str = "v1") -> str:
    """The client's model name for a kind (core Event is `CoreV1Event` in recent clients)."""
    for candidate in (f"{version.capitalize()}{kind}", f"CoreV1{kind}"):
        if _is_model(models, candidate):
            return candidate
    raise SystemExit(f"no model for kind {kind}")


def build() -> dict[str, Any]:
    """Build the schema document."""
    models = _models()
    # A kind's storage version by its name; another served version by `<apiVersion>/<Kind>`.
    kinds = {(k.kind if k.storage else f"{k.api_version}/{k.kind}"): model_for(models, k.kind, k.version)
             for k in KINDS}
    kinds.update(EXTRA_KINDS)
    types: dict[str, dict[str, str]] = {}
    field_types: dict[str, dict[str, str]] = {}
    todo = list(kinds.values())
    while todo:
        name = todo.pop()
        if name in types:
            continue
        cls = getattr(models, name)
        fields: dict[str, str] = {}
        spelled: dict[str, str] = {}
        for attr, type_str in cls.openapi_types.items():
            fields[cls.attribute_map[attr]] = _encode(models, type_str, todo)
            spelled[cls.attribute_map[attr]] = type_str
        types[name] = dict(sorted(fields.items()))
        field_types[name] = dict(sorted(spelled.items()))
    return {"kinds": dict(sorted(kinds.items())), "types": dict(sorted(types.items())),
            "fieldTypes": dict(sorted(field_types.items()))}


def main() -> None:
    """Write apiserver/schema.json."""
    out = ROOT / "apiserver" / "schema.json"
    doc = build()
    out.write_text(json.dumps(doc, separators=(",", ":"), sort_keys=False) + "\n")
    print(f"wrote {out.relative_to(ROOT)}: {len(doc['kinds'])} kinds, {len(doc['types'])} types")


if __name__ == "__main__":
    main()

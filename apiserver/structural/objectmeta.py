"""ObjectMeta and TypeMeta inside custom objects.

Which metadata fields exist, and the checks of embedded resources (`x-kubernetes-embedded-resource`).

Upstream decodes `metadata` into a Go `ObjectMeta`, which silently loses unknown fields (and
reports them, for `fieldValidation`, as `metadata.foo`); `prune_object_meta` does the same on
the JSON. `validate_embedded` mirrors `objectmeta.Validate` for embedded resources: `apiVersion`
and `kind` are required strings (kind a mixed-case DNS-1035 label), `metadata` an object with a
usable name.
"""

from __future__ import annotations

from typing import Any, Final

from kubemesh.apiserver import names
from kubemesh.apiserver.structural.causes import Cause, child, index, invalid, required

__all__ = ["prune_object_meta", "validate_embedded"]

# Field -> schema of its value: None for scalars, "map" for string maps, or a dict of item fields.
_OWNER_REF: Final[dict[str, Any]] = {k: None for k in ("apiVersion", "kind", "name", "uid", "controller",
                                                        "blockOwnerDeletion")}
_MANAGED: Final[dict[str, Any]] = {k: None for k in ("manager", "operation", "apiVersion", "time", "fieldsType",
                                                      "fieldsV1", "subresource")}
OBJECT_META_FIELDS: Final[dict[str, Any]] = {
    **{k: None for k in ("name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
                         "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "finalizers")},
    "labels": "map", "annotations": "map", "ownerReferences": _OWNER_REF, "managedFields": _MANAGED,
}


_PLAIN_META_FIELDS: Final = frozenset(k for k, spec in OBJECT_META_FIELDS.items() if not isinstance(spec, dict))


def prune_object_meta(meta: Any, path: str, pruned: list[str]) -> None:
    """Drop what a Go ObjectMeta cannot hold, recording `<path>.<field>` for each unknown field."""
    if not isinstance(meta, dict):
        return
    if meta.keys() <= _PLAIN_META_FIELDS and meta.get("creationTimestamp", 0) is not None:
        return  # the usual metadata: known fields, no owner references or managed fields to look into
    for name in list(meta):
        spec = OBJECT_META_FIELDS.get(name, False)
        if spec is False:
            pruned.append(f"{path}.{name}")
            del meta[name]
        elif isinstance(spec, dict) and isinstance(meta[name], list):
            for i, item in enumerate(meta[name]):
                if isinstance(item, dict):
                    for field in [f for f in item if f not in spec]:
                        pruned.append(f"{path}.{name}[{i}].{field}")
                        del item[field]
    if meta.get("creationTimestamp", 0) is None:
        del meta["creationTimestamp"]


def _path_segment_problems(name: str, prefix: bool) -> list[str]:
    if not prefix and name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{bad}'" for bad in ("/", "%") if bad in name]


def validate_embedded(obj: dict[str, Any], path: str) -> list[Cause]:
    """The TypeMeta and ObjectMeta checks of one embedded resource at `path`."""
    errs: list[Cause] = []
    if "apiVersion" not in obj:
        errs.append(required(child(path, "apiVersion")))
    if "kind" not in obj:
        errs.append(required(child(path, "kind")))
    for name, value in obj.items():
        if name == "apiVersion":
            if not isinstance(value, str):
                errs.append(invalid(child(path, name), value, "must be a string"))
            elif not value:
                errs.append(invalid(child(path, name), value, "must not be empty"))
            elif value.count("/") > 1:
                errs.append(invalid(child(path, name), value, f"unexpected GroupVersion string: {value}"))
        elif name == "kind":
            if not isinstance(value, str):
                errs.append(invalid(child(path, name), value, "must be a string"))
            elif not value:
                errs.append(invalid(child(path, name), value, "must not be empty"))
            elif problems := list(names.dns1035_problems(value.lower())):
                errs.append(invalid(child(path, name), value,
                                    "may have mixed case, but should otherwise match: " + ",".join(problems)))
        elif name == "metadata":
            errs.extend(_validate_meta(value, child(path, "metadata")))
    return errs


def _validate_meta(meta: Any, path: str) -> list[Cause]:
    if not isinstance(meta, dict):
        return [invalid(path, meta, "must be an object")]
    errs: list[Cause] = []
    for field in ("name", "generateName", "namespace"):
        value = meta.get(field)
        if value is not None and not isinstance(value, str):
            errs.append(invalid(child(path, field), value, "must be a string"))
        elif field != "namespace" and value:
            errs.extend(invalid(child(path, field), value, problem)
                        for problem in _path_segment_problems(value, prefix=field == "generateName"))
    for field in ("labels", "annotations"):
        value = meta.get(field)
        if value is not None and (not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values())):
            errs.append(invalid(child(path, field), value, "must be a map of strings"))
    finalizers = meta.get("finalizers")
    if isinstance(finalizers, list):
        errs.extend(invalid(index(child(path, "finalizers"), i), f, "must be a string")
                    for i, f in enumerate(finalizers) if not isinstance(f, str))
    return errs

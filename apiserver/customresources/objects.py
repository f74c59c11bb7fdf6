"""What a write of a custom object goes through, in kube-apiserver's order.

1. **Decode**: the body must be a JSON object of the right apiVersion and kind (the registry
   checks that for every kind).
2. **Prune** (`prepare`): fields the version's structural schema does not specify are dropped;
   with `fieldValidation=Strict` the write is refused instead (400, `strict decoding error:
   unknown field "spec.foo"`), with `Warn` (the default) each is reported in a `Warning`
   header, with `Ignore` silently. `apiVersion`, `kind` and `metadata` are never pruned.
3. **Default**: the schema's `default`s are applied.
4. **Validate** (`validate`): the schema's value validations and CEL rules (transition rules
   see the stored object as `oldSelf`), every failure with its field path.
5. **Store** at the storage version (`to_storage`): with the `None` conversion strategy the
   versions of one resource differ only in `apiVersion`, so reading at another version
   (`at_version`) rewrites that field alone.

`generation` starts at 1 and moves on every change outside `metadata` and `status` (outside
`metadata` only, when the status subresource is off), as upstream's custom resource strategy.
"""

from __future__ import annotations

from typing import Any

from kubemesh.apiserver import errors
from kubemesh.apiserver.customresources.definitions import CustomKind
from kubemesh.apiserver.fielderrors import Cause, go_quote
from kubemesh.services.model.kinds import Kind, Obj


def custom_of(kind: Kind) -> CustomKind | None:
    """The custom part of a kind a CRD defined, None for a built-in kind."""
    custom = kind.custom
    return custom if isinstance(custom, CustomKind) else None


def prepare(kind: Kind, obj: Obj, *, field_validation: str, warnings: list[str] | None) -> None:
    """Prune unknown fields and apply defaults, in place (a 400 for unknown fields under Strict)."""
    custom = custom_of(kind)
    if custom is None or custom.schema is None:
        return
    pruned = custom.schema.prune(obj)
    if pruned:
        if field_validation == "Strict":
            text = ", ".join(f"unknown field {go_quote(p)}" for p in pruned)
            raise errors.bad_request(f"strict decoding error: {text}")
        if field_validation != "Ignore" and warnings is not None:
            warnings.extend(f"unknown field {go_quote(p)}" for p in pruned)
    custom.schema.default(obj)
    if custom.deprecation_warning and warnings is not None and custom.deprecation_warning not in warnings:
        warnings.append(custom.deprecation_warning)


def validate(kind: Kind, obj: Obj, *, old: Obj | None, status_write: bool = False) -> list[Cause]:
    """The schema's and the CEL rules' causes against `obj` (empty when valid).

    A write of the status subresource (`status_write`) checks `status` against its schema (the
    rest is the stored object's, already valid), and the rules on the whole object.
    """
    custom = custom_of(kind)
    if custom is None or custom.schema is None:
        return []
    if status_write:
        return custom.schema.validate_status(obj, old=old)
    return custom.schema.validate(obj, old=old)


def generation_changed(kind: Kind, old: Obj, new: Obj) -> bool:
    """Whether an update moves `metadata.generation`: any change outside metadata (and status)."""
    custom = custom_of(kind)
    skip = {"metadata", "status"} if custom is not None and custom.status else {"metadata"}
    keys = (set(old) | set(new)) - skip - {"apiVersion", "kind"}
    return any(old.get(k) != new.get(k) for k in keys)


def to_storage(kind: Kind, obj: Obj) -> None:
    """Set the storage version's apiVersion on an object about to be stored."""
    custom = custom_of(kind)
    if custom is not None:
        obj["apiVersion"] = custom.storage_api_version
        obj["kind"] = kind.kind


def at_version(kind: Kind, obj: Any) -> Any:
    """`obj` as read at `kind`'s version (the stored dict itself when nothing differs)."""
    if isinstance(obj, dict) and kind.custom is not None and obj.get("apiVersion") != kind.api_version:
        return {**obj, "apiVersion": kind.api_version}
    return obj

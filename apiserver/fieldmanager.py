"""Server-side apply's field ownership: `metadata.managedFields`, apply conflicts, fields a manager drops.

Every manager (the `fieldManager` of a request) owns a set of fields per operation (`Apply` or
`Update`) and subresource, kept in `metadata.managedFields` in the `FieldsV1` form clients read
(`{"f:spec": {"f:replicas": {}}}`, keyed list elements as `k:{"name":"c"}`, set elements as
`v:"x"`, a node owned itself as `"."`). What follows from it, as kube-apiserver does it:

* **Apply** (`apply`): the applied configuration's fields become the manager's Apply set. A field
  another manager owns whose value the configuration would change is a conflict: 409 with every
  conflicting field, unless `force=true`, which takes those fields from their managers. A field
  the manager applied before, applies no more and nobody else owns is removed from the object.
* **Update** (`update`: create, PUT, merge/JSON/strategic patch): the fields whose values the
  write changed become the writer's (Update operation) and stop being anyone else's; fields the
  write removed stop being anyone's.

Where kubemesh differs, on purpose: an object's fields are tracked from the first write that
names a `fieldManager` (kubectl always does) or applies, and from then on every write of it is
tracked (the manager of a write without one is its User-Agent's product name, as upstream). A
write by a component that names no manager, of an object nobody applied, carries no
managedFields: kubemesh's own controllers and kubelets pay nothing for a bookkeeping only
server-side apply reads. Lists are associative where the kind's strategic-merge rules give a
merge key (containers by name...) or `x-kubernetes-list-type: map` says so for a custom resource,
sets where they are `set`, atomic otherwise (owned whole).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

from kubemesh.apiserver import errors
from kubemesh.apiserver.patching import FieldRule, apply_server_side_apply, rules_for
from kubemesh.services.model.kinds import Kind, Obj

Path = tuple[str, ...]

SELF: Final = "."
"""The path element of a node that is owned itself (a list element, not only its fields)."""
_IGNORED_META: Final = frozenset({"name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp",
                                  "managedFields", "selfLink", "deletionTimestamp", "deletionGracePeriodSeconds"})
_NO_RULE: Final = FieldRule()


# -- field sets -------------------------------------------------------------------------------


def fieldset(kind: Kind, obj: Obj, *, subresource: str | None = None) -> set[Path]:
    """The fields `obj` sets, as paths of FieldsV1 elements (leaves, and keyed elements themselves).

    `apiVersion`, `kind` and the server-owned metadata are nobody's; the status of a kind with a
    status subresource belongs to its status writes, everything else to the main resource's.
    """
    rules = rules_for(kind)
    out: set[Path] = set()
    for key, value in obj.items():
        if key in ("apiVersion", "kind"):
            continue
        if kind.has_status and (key == "status") != (subresource == "status"):
            continue
        if key == "metadata" and isinstance(value, dict):
            meta = {k: v for k, v in value.items() if k not in _IGNORED_META}
            if meta:
                _walk(meta, ("f:metadata",), ("metadata",), rules, out)
            continue
        _field(value, (f"f:{key}",), (key,), rules, out)
    return out


def _walk(value: Mapping[str, Any], path: Path, names: Path, rules: Mapping[Path, FieldRule], out: set[Path]) -> None:
    for key, sub in value.items():
        _field(sub, (*path, f"f:{key}"), (*names, key), rules, out)


def _field(value: Any, path: Path, names: Path, rules: Mapping[Path, FieldRule], out: set[Path]) -> None:
    if isinstance(value, dict) and value:
        _walk(value, path, names, rules, out)
        return
    if isinstance(value, list) and value:
        rule = rules.get(names, _NO_RULE)
        if rule.merge_key is not None:
            for item in value:
                if isinstance(item, dict) and rule.merge_key in item:
                    here = (*path, _key_element(rule.merge_key, item[rule.merge_key]))
                    out.add((*here, SELF))
                    _walk({k: v for k, v in item.items() if k != rule.merge_key}, here, names, rules, out)
            return
        if rule.primitive_merge:
            out.update((*path, "v:" + _compact(item)) for item in value)
            return
    out.add(path)  # a scalar, an empty map or list, or an atomic list: owned whole


def _key_element(key: str, value: Any) -> str:
    return "k:" + _compact({key: value})


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def to_fields_v1(paths: Iterable[Path]) -> Obj:
    """The FieldsV1 document of a set of paths."""
    root: Obj = {}
    for path in sorted(paths):
        node = root
        for element in path:
            node = node.setdefault(element, {})
    return root


def from_fields_v1(doc: Any, prefix: Path = ()) -> set[Path]:
    """The set of paths of a FieldsV1 document (what a client sent or the store kept)."""
    out: set[Path] = set()
    if not isinstance(doc, dict):
        return out
    for element, sub in doc.items():
        if element == SELF:
            out.add((*prefix, SELF))
        elif isinstance(sub, dict) and sub:
            out |= from_fields_v1(sub, (*prefix, str(element)))
        else:
            out.add((*prefix, str(element)))
    return out


# -- values at paths --------------------------------------------------------------------------

_MISSING: Final = object()


def value_at(obj: Any, path: Path) -> Any:
    """The value at `path` in `obj` (`_MISSING` when it is not there)."""
    node = obj
    for element in path:
        if element == SELF:
            return node
        node = _child(node, element)
        if node is _MISSING:
            return _MISSING
    return node


def _child(node: Any, element: str) -> Any:
    kind, _, text = element.partition(":")
    if kind == "f":
        return node.get(text, _MISSING) if isinstance(node, dict) else _MISSING
    if not isinstance(node, list):
        return _MISSING
    wanted = json.loads(text)
    if kind == "k":
        for item in node:
            if isinstance(item, dict) and all(item.get(k) == v for k, v in wanted.items()):
                return item
    elif kind == "v":
        for item in node:
            if item == wanted:
                return item
    return _MISSING


def remove_at(obj: Obj, path: Path) -> None:
    """Remove the field or element at `path` from `obj` (in place); emptied maps and lists go too."""
    if path and path[-1] == SELF:
        path = path[:-1]
    if not path:
        return
    parents: list[tuple[Any, str]] = []
    node: Any = obj
    for element in path[:-1]:
        parents.append((node, element))
        node = _child(node, element)
        if node is _MISSING:
            return
    _drop(node, path[-1])
    # Upward: a map or list the removal emptied is left out, as a typed encode leaves it out.
    for parent, element in reversed(parents):
        child = _child(parent, element)
        if child is _MISSING or child:
            break
        _drop(parent, element)


def _drop(node: Any, element: str) -> None:
    kind, _, text = element.partition(":")
    if kind == "f" and isinstance(node, dict):
        node.pop(text, None)
    elif isinstance(node, list):
        target = _child(node, element)
        if target is not _MISSING:
            node.remove(target)


# -- managedFields entries --------------------------------------------------------------------


class Entry:
    """One managedFields entry: a manager's fields for one operation and subresource."""

    __slots__ = ("api_version", "fields", "manager", "operation", "subresource", "time")

    def __init__(self, *, manager: str, operation: str, api_version: str, time: str, fields: set[Path],
                 subresource: str = "") -> None:
        self.manager = manager
        self.operation = operation
        self.api_version = api_version
        self.time = time
        self.fields = fields
        self.subresource = subresource

    @classmethod
    def parse(cls, raw: Any) -> Entry | None:
        """The entry of one managedFields item (None for one without a manager)."""
        if not isinstance(raw, dict) or not raw.get("manager"):
            return None
        return cls(manager=str(raw["manager"]), operation=str(raw.get("operation") or "Update"),
                   api_version=str(raw.get("apiVersion") or ""), time=str(raw.get("time") or ""),
                   fields=from_fields_v1(raw.get("fieldsV1")), subresource=str(raw.get("subresource") or ""))

    def same(self, manager: str, operation: str, subresource: str) -> bool:
        """Whether this is the entry of `manager`'s `operation` on `subresource`."""
        return (self.manager, self.operation, self.subresource) == (manager, operation, subresource)

    def to_dict(self) -> Obj:
        """The managedFields item."""
        out: Obj = {"manager": self.manager, "operation": self.operation, "apiVersion": self.api_version,
                    "time": self.time, "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(self.fields)}
        if self.subresource:
            out["subresource"] = self.subresource
        return out


def entries_of(obj: Obj | None) -> list[Entry]:
    """The managedFields entries of a stored object."""
    raw = ((obj or {}).get("metadata") or {}).get("managedFields")
    if not isinstance(raw, list):
        return []
    return [e for e in (Entry.parse(r) for r in raw) if e is not None]


def tracked(obj: Obj | None) -> bool:
    """Whether a stored object's fields are tracked (it carries managedFields)."""
    return bool(((obj or {}).get("metadata") or {}).get("managedFields"))


def _covered(path: Path, paths: set[Path]) -> bool:
    """Whether `path` or one of its prefixes is in `paths` (owning a node whole owns what is in it)."""
    return any(path[:i] in paths for i in range(1, len(path) + 1))


def _without(fields: set[Path], taken: set[Path]) -> set[Path]:
    """`fields` less every path in `taken` and every path below one of them."""
    if not taken:
        return fields
    return {p for p in fields if not _covered(p, taken)}


def _render(entries: list[Entry]) -> list[Obj]:
    return [e.to_dict() for e in entries if e.fields]


def _path_text(path: Path) -> str:
    out = []
    for element in path:
        kind, _, text = element.partition(":")
        if element == SELF:
            continue
        if kind == "f":
            out.append("." + text)
        elif kind == "k":
            pairs = json.loads(text)
            out.append("[" + ",".join(f"{k}={json.dumps(v)}" for k, v in pairs.items()) + "]")
        else:
            out.append(f"[={text}]")
    return "".join(out)


def update(kind: Kind, old: Obj | None, new: Obj, *, manager: str, subresource: str | None, now: str,
           owned: set[Path] | None = None) -> list[Obj]:
    """The managedFields of `new` after an Update by `manager` of `old` (None: a create).

    `owned` is what a create's body set (before defaulting: defaults are nobody's); for an
    update, the fields whose values differ from `old` become the manager's.
    """
    sub = subresource or ""
    entries = entries_of(old)
    new_fields = fieldset(kind, new, subresource=subresource)
    if old is None:
        changed = owned if owned is not None else new_fields
    else:
        changed = {p for p in new_fields if p[-1] != SELF and value_at(old, p) != value_at(new, p)}
        changed |= {p for p in new_fields if p[-1] == SELF and value_at(old, p) is _MISSING}
    removed = fieldset(kind, old, subresource=subresource) - new_fields if old is not None else set()
    out: list[Entry] = []
    mine: Entry | None = None
    for e in entries:
        if e.same(manager, "Update", sub):
            mine = e
            continue
        if e.subresource == sub:
            e.fields = _without(e.fields, changed | removed)
        out.append(e)
    fields = (_without(mine.fields, removed) if mine else set()) | changed
    if mine is not None and fields == mine.fields:
        out.append(mine)  # nothing of its changed: the entry (and its time) stays as it was
    else:
        out.append(Entry(manager=manager, operation="Update", api_version=kind.api_version, time=now,
                         fields=fields, subresource=sub))
    return _render(out)


def apply(kind: Kind, live: Obj | None, config: Obj, *, manager: str, force: bool, subresource: str | None,
          now: str) -> Obj:
    """The object server-side apply of `config` by `manager` makes of `live`, with its managedFields.

    Raises the 409 of upstream's apply conflicts unless `force`.
    """
    sub = subresource or ""
    entries = entries_of(live)
    applied = fieldset(kind, config, subresource=subresource)
    conflicts: dict[tuple[str, str], list[Path]] = {}
    if live is not None:
        for e in entries:
            if e.subresource != sub or e.same(manager, "Apply", sub):
                continue
            for p in sorted(applied & e.fields):
                if p[-1] != SELF and value_at(config, p) != value_at(live, p):
                    conflicts.setdefault((e.manager, e.api_version), []).append(p)
    if conflicts and not force:
        raise _conflict_error(conflicts)
    taken = {p for ps in conflicts.values() for p in ps}
    mine: Entry | None = None
    out: list[Entry] = []
    for e in entries:
        if e.same(manager, "Apply", sub):
            mine = e
            continue
        if e.subresource == sub:
            e.fields = _without(e.fields, taken)
        out.append(e)
    base = live
    if mine is not None and live is not None:
        others = set().union(*(e.fields for e in out if e.subresource == sub))
        dropped = [p for p in mine.fields - applied if not _covered(p, others) and not _covered(p, applied)]
        if dropped:
            base = json.loads(json.dumps(live))
            for p in sorted(dropped, key=len, reverse=True):
                remove_at(base, p)
    merged = apply_server_side_apply(base, config, kind=kind)
    if mine is not None and mine.fields == applied and mine.api_version == kind.api_version:
        out.append(mine)
    else:
        out.append(Entry(manager=manager, operation="Apply", api_version=kind.api_version, time=now,
                         fields=applied, subresource=sub))
    merged.setdefault("metadata", {})["managedFields"] = _render(out)
    return merged


def _conflict_error(conflicts: dict[tuple[str, str], list[Path]]) -> errors.StatusError:
    count = sum(len(ps) for ps in conflicts.values())
    parts = []
    causes: list[Obj] = []
    for (manager, api_version), paths in conflicts.items():
        who = f'conflict with "{manager}" using {api_version}' if len(paths) == 1 else \
            f'conflicts with "{manager}" using {api_version}'
        texts = [_path_text(p) for p in paths]
        parts.append(f"{who}: {texts[0]}" if len(texts) == 1 else who + ":\n" + "\n".join(f"- {t}" for t in texts))
        causes.extend({"reason": "FieldManagerConflict", "message": f'conflict with "{manager}" using {api_version}',
                       "field": t} for t in texts)
    noun = "conflict" if count == 1 else "conflicts"
    return errors.StatusError(409, "Conflict", f"Apply failed with {count} {noun}: " + "\n".join(parts),
                              details={"causes": causes})


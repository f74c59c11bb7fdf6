"""Queries over the apiserver's history records (`GET /kubemesh/v1/history`).

A record is a dict with `index`, `time` (cluster seconds) and `type` (`request`, `write`,
`delivery`, `fault`), plus the fields of its type: `component`, `instance`, `verb`, `resource`,
`event`, `key`, `rv`, ... (see `kubemesh.apiserver.history`). The scenarios' oracles and their
context both read the history through these two functions.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

Record = dict[str, Any]


def select(records: Iterable[Record], *, type: str | None = None, resource: str | None = None,
           event: str | None = None, key: str | None = None, component: str | None = None,
           verb: str | None = None, after: float | None = None, before: float | None = None) -> list[Record]:
    """Records matching every given field (`after`/`before` on cluster time, inclusive)."""
    out = []
    for r in records:
        if type is not None and r.get("type") != type:
            continue
        if resource is not None and r.get("resource") != resource:
            continue
        if event is not None and r.get("event") != event:
            continue
        if key is not None and r.get("key") != key:
            continue
        if component is not None and r.get("component") != component:
            continue
        if verb is not None and r.get("verb") != verb:
            continue
        t = float(r.get("time") or 0.0)
        if after is not None and t < after:
            continue
        if before is not None and t > before:
            continue
        out.append(r)
    return out


def first(records: Sequence[Record], **match: Any) -> Record | None:
    """The first record matching (see `select`), or None."""
    found = select(records, **match)
    return found[0] if found else None

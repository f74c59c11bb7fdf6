"""Taints and tolerations, read from wire objects as upstream's `v1helper` reads them.

Guarantees:

* `toleration_matches` is `Toleration.ToleratesTaint` to the letter: an effect, when set, must
  equal the taint's; a key, when set, must equal the taint's; then operator `Exists` matches
  any value, `Equal` (or no operator) matches an equal value (absent counts as ""), and any
  other operator matches nothing.
* `tolerates` is `TolerationsTolerateTaint` (some toleration matches the taint);
  `tolerates_all` asks that of every taint.
* `taints_of` and `tolerations_of` never return None and skip entries that are not maps, so
  that a malformed object does not crash a controller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kubemesh.services.model.kinds import Obj


def taints_of(node: Obj) -> list[dict[str, Any]]:
    """`spec.taints` of a node (never None)."""
    taints = (node.get("spec") or {}).get("taints")
    return [t for t in taints if isinstance(t, dict)] if isinstance(taints, list) else []


def tolerations_of(pod: Obj) -> list[dict[str, Any]]:
    """`spec.tolerations` of a pod (never None)."""
    tols = (pod.get("spec") or {}).get("tolerations")
    return [t for t in tols if isinstance(t, dict)] if isinstance(tols, list) else []


def toleration_matches(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Whether one toleration tolerates one taint (upstream `Toleration.ToleratesTaint`)."""
    effect = toleration.get("effect") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    key = toleration.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    if op == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    """Whether some toleration tolerates the taint (upstream `TolerationsTolerateTaint`)."""
    return any(toleration_matches(t, taint) for t in tolerations)


def tolerates_all(tolerations: Iterable[Mapping[str, Any]], taints: Iterable[Mapping[str, Any]]) -> bool:
    """Whether every taint is tolerated by at least one toleration."""
    tols = list(tolerations)
    return all(tolerates(tols, taint) for taint in taints)

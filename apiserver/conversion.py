"""Versions of one resource: objects are stored at one version and read and written at any served one.

A custom resource's versions differ only in `apiVersion` (the `None` conversion strategy,
`customresources.objects`). A built-in resource served at a second version has a converter
here: the autoscaling/v1 HorizontalPodAutoscaler, which kubectl 1.27-1.31 `autoscale` creates,
over the stored autoscaling/v2 one. A write at the other version is converted up to the
storage version at the registry's door (`up`, then everything runs at the storage kind: its
validation, defaulting, typed decode and managed fields); a read is converted down at the HTTP
layer's (`at_version`), for gets, lists, watch events and write responses alike.

The v1/v2 conversion follows upstream's: the CPU utilization target is v2's `Resource` metric
`cpu` of type `Utilization`; what v1 cannot say (other metrics, `behavior`, status conditions
and current metrics) rides in the `autoscaling.alpha.kubernetes.io/...` annotations, so a v2
object read and written back at v1 loses nothing.

Guarantees: `up` and `at_version` never change their argument; `at_version` returns the stored
object itself when the kind is its storage version.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from kubemesh.apiserver.customresources import objects as customobjects
from kubemesh.services.model.kinds import HORIZONTALPODAUTOSCALERS, HORIZONTALPODAUTOSCALERS_V1, Kind, Obj


@dataclass(frozen=True, slots=True, kw_only=True)
class Converter:
    """How one served version of a built-in resource maps onto its storage version."""

    storage: Kind
    up: Callable[[Obj], Obj]
    """An object at the served version, at the storage version."""
    down: Callable[[Obj], Obj]
    """A stored object at the served version."""


def storage_of(kind: Kind) -> Kind | None:
    """The storage kind a write at `kind` is converted to (None: `kind` is stored as it is)."""
    conv = CONVERTERS.get(kind)
    return conv.storage if conv is not None else None


def up(kind: Kind, body: Any) -> Any:
    """A request body at `kind`'s version, converted to its storage version (a non-object as it is)."""
    conv = CONVERTERS.get(kind)
    if conv is None or not isinstance(body, dict):
        return body
    return conv.up(body)


def differs(kind: Kind) -> bool:
    """Whether objects read at `kind` differ from the stored ones (a watcher converts each event)."""
    return kind in CONVERTERS or getattr(kind.custom, "storage_api_version", kind.api_version) != kind.api_version


def at_version(kind: Kind, obj: Any) -> Any:
    """`obj` (as stored) read at `kind`'s version; the stored dict itself when nothing differs."""
    conv = CONVERTERS.get(kind)
    if conv is not None and isinstance(obj, dict):
        return conv.down(obj)
    return customobjects.at_version(kind, obj)


# -- autoscaling/v1 <-> autoscaling/v2 HorizontalPodAutoscaler ---------------------------------

_METRICS: Final = "autoscaling.alpha.kubernetes.io/metrics"
_BEHAVIOR: Final = "autoscaling.alpha.kubernetes.io/behavior"
_CONDITIONS: Final = "autoscaling.alpha.kubernetes.io/conditions"
_CURRENT: Final = "autoscaling.alpha.kubernetes.io/current-metrics"


def _is_cpu_utilization(metric: Any) -> bool:
    resource = metric.get("resource") if isinstance(metric, dict) else None
    return (isinstance(resource, dict) and metric.get("type") == "Resource" and resource.get("name") == "cpu"
            and (resource.get("target") or {}).get("type") == "Utilization")


def _annotations(obj: Obj) -> dict[str, Any]:
    md = obj.get("metadata")
    ann = md.get("annotations") if isinstance(md, dict) else None
    return dict(ann) if isinstance(ann, dict) else {}


def _with_annotations(obj: Obj, ann: dict[str, Any]) -> Obj:
    md = dict(obj.get("metadata") or {})
    if ann:
        md["annotations"] = ann
    else:
        md.pop("annotations", None)
    return {**obj, "metadata": md}


def _loads(text: Any) -> Any:
    try:
        return json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None


def _hpa_up(v1: Obj) -> Obj:
    ann = _annotations(v1)
    out: Obj = {k: v for k, v in v1.items() if k not in ("spec", "status")}
    out["apiVersion"] = HORIZONTALPODAUTOSCALERS.api_version
    spec_in = v1.get("spec")
    if isinstance(spec_in, dict):
        spec = {k: v for k, v in spec_in.items() if k != "targetCPUUtilizationPercentage"}
        metrics = [m for m in (_loads(ann.pop(_METRICS, None)) or []) if not _is_cpu_utilization(m)]
        cpu = spec_in.get("targetCPUUtilizationPercentage")
        if cpu is not None:
            metrics.insert(0, {"type": "Resource", "resource": {
                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": cpu}}})
        if metrics:
            spec["metrics"] = metrics
        behavior = _loads(ann.pop(_BEHAVIOR, None))
        if isinstance(behavior, dict):
            spec["behavior"] = behavior
        out["spec"] = spec
    status_in = v1.get("status")
    if isinstance(status_in, dict):
        status = {k: v for k, v in status_in.items() if k != "currentCPUUtilizationPercentage"}
        current = [m for m in (_loads(ann.pop(_CURRENT, None)) or []) if not _is_cpu_current(m)]
        cpu_now = status_in.get("currentCPUUtilizationPercentage")
        if cpu_now is not None:
            current.insert(0, {"type": "Resource", "resource": {
                "name": "cpu", "current": {"averageUtilization": cpu_now}}})
        if current:
            status["currentMetrics"] = current
        conditions = _loads(ann.pop(_CONDITIONS, None))
        if isinstance(conditions, list):
            status["conditions"] = conditions
        out["status"] = status
    else:
        for key in (_CURRENT, _CONDITIONS):
            ann.pop(key, None)
    return _with_annotations(out, ann)


def _is_cpu_current(metric: Any) -> bool:
    resource = metric.get("resource") if isinstance(metric, dict) else None
    return (isinstance(resource, dict) and metric.get("type") == "Resource" and resource.get("name") == "cpu"
            and (resource.get("current") or {}).get("averageUtilization") is not None)


def _hpa_down(v2: Obj) -> Obj:
    ann = _annotations(v2)
    out: Obj = {k: v for k, v in v2.items() if k not in ("spec", "status")}
    out["apiVersion"] = HORIZONTALPODAUTOSCALERS_V1.api_version
    spec_in = v2.get("spec")
    if isinstance(spec_in, dict):
        spec = {k: v for k, v in spec_in.items() if k not in ("metrics", "behavior")}
        metrics = spec_in.get("metrics") or []
        cpu = next((m for m in metrics if _is_cpu_utilization(m)), None)
        if cpu is not None:
            spec["targetCPUUtilizationPercentage"] = cpu["resource"]["target"].get("averageUtilization")
        others = [m for m in metrics if m is not cpu]
        if others:
            ann[_METRICS] = json.dumps(others, separators=(",", ":"))
        if spec_in.get("behavior"):
            ann[_BEHAVIOR] = json.dumps(spec_in["behavior"], separators=(",", ":"))
        out["spec"] = spec
    status_in = v2.get("status")
    if isinstance(status_in, dict):
        status = {k: v for k, v in status_in.items() if k not in ("currentMetrics", "conditions")}
        current = status_in.get("currentMetrics") or []
        cpu_now = next((m for m in current if _is_cpu_current(m)), None)
        if cpu_now is not None:
            status["currentCPUUtilizationPercentage"] = cpu_now["resource"]["current"]["averageUtilization"]
        others = [m for m in current if m is not cpu_now]
        if others:
            ann[_CURRENT] = json.dumps(others, separators=(",", ":"))
        if status_in.get("conditions"):
            ann[_CONDITIONS] = json.dumps(status_in["conditions"], separators=(",", ":"))
        out["status"] = status
    return _with_annotations(out, ann)


CONVERTERS: Final[dict[Kind, Converter]] = {
    HORIZONTALPODAUTOSCALERS_V1: Converter(storage=HORIZONTALPODAUTOSCALERS, up=_hpa_up, down=_hpa_down),
}
"""The built-in kinds served at a version other than their storage one, and how."""

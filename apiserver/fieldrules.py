"""Rules kube-apiserver applies to every built-in kind that the per-kind checks (`validation`) leave out.

Each is found from one source: the model types in `schema.json` (which fields hold quantities,
where a pod spec sits in each kind) rather than a check per field.

* **Quantities** (`resource.Quantity`): every field whose Go type is a Quantity or a
  ResourceList, in any kind and at any depth (container resources, a node's capacity, a
  quota's hard limits, an emptyDir's sizeLimit...). Upstream parses them while decoding the
  body, so a value that is no quantity (`"lots"`) is a 400 BadRequest before validation:
  `Pod in version "v1" cannot be handled as a Pod: quantities must match the regular
  expression ...` (`quantity_error`).
* **Finalizer names** (`metadata.finalizers`): qualified names (apimachinery's
  `ValidateFinalizerName`), and for the kinds kube-apiserver's own validation serves (not
  CRDs, APIServices or custom resources), a name without a `/` must be one of the standard
  finalizers (the core validation's `validateKubeFinalizerName`).
* **ConfigMap and Secret size**: at most 1 MiB of data in all (`data` and `binaryData`;
  a Secret's `data` decoded and its `stringData`).
* **Selector operators** in pod (anti-)affinity terms and node affinity: the operator enum
  and the values each operator needs, in every kind that carries a pod spec.
* **generateName**: the prefix must be valid as the start of a name of the kind (a prefix
  the server completes: a trailing `-` is fine); **generation** is never negative.

`causes(kind, obj)` returns the 422 causes, worded as upstream words them (v1.30).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any, Final

from kubemesh.apiserver import errors, fielderrors, names
from kubemesh.apiserver.fielderrors import Cause
from kubemesh.apiserver.validation import model_types, validate_name
from kubemesh.services.model.kinds import Kind, Obj
from kubemesh.services.model.quantities import parse_quantity

# ---------------------------------------------------------------------------------------------
# Quantities.

_MAP: Final = "map"
_ONE: Final = "one"
QUANTITY_FIELDS: Final[dict[str, dict[str, str]]] = {
    "V1ResourceRequirements": {"limits": _MAP, "requests": _MAP},
    "V1VolumeResourceRequirements": {"limits": _MAP, "requests": _MAP},
    "V1NodeStatus": {"allocatable": _MAP, "capacity": _MAP},
    "V1ResourceQuotaSpec": {"hard": _MAP},
    "V1ResourceQuotaStatus": {"hard": _MAP, "used": _MAP},
    "V1LimitRangeItem": {"default": _MAP, "defaultRequest": _MAP, "max": _MAP, "maxLimitRequestRatio": _MAP,
                         "min": _MAP},
    "V1PersistentVolumeSpec": {"capacity": _MAP},
    "V1PersistentVolumeClaimStatus": {"allocatedResources": _MAP, "capacity": _MAP},
    "V1EmptyDirVolumeSource": {"sizeLimit": _ONE},
    "V1PodSpec": {"overhead": _MAP},
    "V1ResourceFieldSelector": {"divisor": _ONE},
    "V1ContainerStatus": {"allocatedResources": _MAP},
    "V1PodStatus": {"allocatedResources": _MAP},
}
"""The model fields whose Go type is `resource.Quantity` (one) or `ResourceList` (a map of them)."""

QUANTITY_FORMAT: Final = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"


@cache
def _types() -> dict[str, dict[str, str]]:
    """Model type -> {field: type code} (`schema.json`'s `types`, as the typed decode reads them)."""
    doc = json.loads(Path(__file__).with_name("schema.json").read_text())
    types: dict[str, dict[str, str]] = doc["types"]
    return types


def _target(code: str) -> str:
    """The model type a field's type code leads to ("" for scalars)."""
    return code[1:] if code[:1] in ("[", "{") else code


@cache
def _reaching() -> frozenset[str]:
    """The model types from which some quantity field can be reached (the walk enters only these)."""
    types = _types()
    reach = {t for t in QUANTITY_FIELDS if t in types}
    changed = True
    while changed:
        changed = False
        for name, fields in types.items():
            if name not in reach and any(_target(code) in reach for code in fields.values() if code):
                reach.add(name)
                changed = True
    return frozenset(reach)


def quantity_error(kind: Kind, obj: Obj) -> errors.StatusError | None:
    """The 400 a body with a malformed quantity gets (None when every quantity parses)."""
    type_name = model_types()[0].get(kind.kind)
    if type_name is None or kind.custom is not None or type_name not in _reaching():
        return None
    for value in _quantities(obj, type_name):
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            continue  # a wrong JSON type: the per-kind checks answer it (422)
        try:
            parse_quantity(value)
        except (ValueError, ArithmeticError):
            return errors.bad_request(f'{kind.kind} in version "{kind.version}" cannot be handled as a '
                                      f"{kind.kind}: {QUANTITY_FORMAT}")
    return None


@cache
def _plan(type_name: str) -> tuple[tuple[str, str, str], ...]:
    """The fields of a model type the quantity walk looks at: (field, how, model type below).

    `how` is `map` or `one` (a quantity field), or `[`, `{` or `.` (a list, map or object of
    a type from which a quantity can be reached); every other field is skipped unread.
    """
    reach = _reaching()
    quantity = QUANTITY_FIELDS.get(type_name, {})
    steps: list[tuple[str, str, str]] = [(key, shape, "") for key, shape in quantity.items()]
    for key, code in (_types().get(type_name) or {}).items():
        if key in quantity or not code or _target(code) not in reach:
            continue
        steps.append((key, code[0] if code[0] in "[{" else ".", _target(code)))
    return tuple(steps)


def _quantities(value: Mapping[str, Any], type_name: str) -> Iterator[Any]:
    """Every value in a quantity field of `value` (of model type `type_name`), at any depth."""
    work: list[tuple[Mapping[str, Any], str]] = [(value, type_name)]
    while work:
        obj, name = work.pop()
        for key, how, target in _plan(name):
            sub = obj.get(key)
            if sub is None:
                continue
            if how == _MAP:
                if isinstance(sub, dict):
                    yield from sub.values()
            elif how == _ONE:
                yield sub
            elif how == "[":
                if isinstance(sub, list):
                    work.extend((item, target) for item in sub if isinstance(item, dict))
            elif how == "{":
                if isinstance(sub, dict):
                    work.extend((item, target) for item in sub.values() if isinstance(item, dict))
            elif isinstance(sub, dict):
                work.append((sub, target))


# ---------------------------------------------------------------------------------------------
# 422 causes.

MAX_DATA_SIZE: Final = 1024 * 1024
"""A ConfigMap's or Secret's data in all (upstream's `MaxSecretSize`)."""
STANDARD_FINALIZERS: Final = ("kubernetes", "orphan", "foregroundDeletion")
_QUALIFIED_NAME: Final = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_QUALIFIED_RULE: Final = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric "
    "character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
_SELECTOR_OPERATORS: Final = ("In", "NotIn", "Exists", "DoesNotExist")
_NODE_SELECTOR_OPERATORS: Final = (*_SELECTOR_OPERATORS, "Gt", "Lt")
_GENERIC_META_GROUPS: Final = frozenset({"apiextensions.k8s.io", "apiregistration.k8s.io"})
"""Groups served outside kube-apiserver's core validation (apiextensions, kube-aggregator): their
metadata is checked by apimachinery's generic rules only, without the standard-finalizer rule."""
POD_SPEC_PATHS: Final[dict[str, tuple[str, ...]]] = {
    "Pod": ("spec",),
    "PodTemplate": ("template", "spec"),
    "ReplicationController": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "Job": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
"""Where each kind that carries a pod spec holds it."""


def qualified_name_problems(value: str) -> list[str]:
    """What is wrong with `value` as a qualified name (apimachinery's `IsQualifiedName`, v1.30 wording)."""
    parts = value.split("/")
    problems: list[str] = []
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            problems.append("prefix part must be non-empty")
        else:
            problems.extend(f"prefix part {p}" for p in names.subdomain_problems(prefix))
    else:
        return [f"a qualified name {_QUALIFIED_RULE} with an optional DNS subdomain prefix and '/' "
                "(e.g. 'example.com/MyName')"]
    if not name:
        problems.append("name part must be non-empty")
    elif len(name) > 63:
        problems.append("name part must be no more than 63 characters")
    if not _QUALIFIED_NAME.fullmatch(name):
        problems.append(f"name part {_QUALIFIED_RULE}")
    return problems


def causes(kind: Kind, obj: Obj) -> list[Cause]:
    """The 422 causes of the rules above (empty when `obj` keeps them all)."""
    out: list[Cause] = []
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        _finalizers(meta, builtin=kind.custom is None and kind.group not in _GENERIC_META_GROUPS, out=out)
        out.extend(generate_name_causes(kind, meta))
        generation = meta.get("generation")
        if isinstance(generation, int) and not isinstance(generation, bool) and generation < 0:
            out.append({"reason": "FieldValueInvalid", "field": "metadata.generation",
                        "message": f"Invalid value: {generation}: must be greater than or equal to 0"})
    if kind.custom is not None:
        return out
    if kind.kind == "ConfigMap":
        _config_map_size(obj, out)
    elif kind.kind == "Secret":
        _secret_size(obj, out)
    path = POD_SPEC_PATHS.get(kind.kind)
    if path is not None:
        spec: Any = obj
        for step in path:
            spec = spec.get(step) if isinstance(spec, dict) else None
        if isinstance(spec, dict) and isinstance(spec.get("affinity"), dict):
            _affinity(spec["affinity"], ".".join((*path, "affinity")), out)
    return out


def _finalizers(meta: Mapping[str, Any], *, builtin: bool, out: list[Cause]) -> None:
    finalizers = meta.get("finalizers")
    if not isinstance(finalizers, list):
        return
    for value in finalizers:
        if isinstance(value, str):
            out.extend(fielderrors.invalid_text("metadata.finalizers", value, p)
                       for p in qualified_name_problems(value))
    if "orphan" in finalizers and "foregroundDeletion" in finalizers:
        shown = fielderrors.go_strings([f for f in finalizers if isinstance(f, str)])
        out.append({"reason": "FieldValueInvalid", "field": "metadata.finalizers",
                    "message": f"Invalid value: {shown}: finalizer orphan and foregroundDeletion cannot be both set"})
    if builtin:
        for i, value in enumerate(finalizers):
            if isinstance(value, str) and "/" not in value and value not in STANDARD_FINALIZERS:
                out.append(fielderrors.invalid_text(f"metadata.finalizers[{i}]", value,
                                                    "name is neither a standard finalizer name nor is it fully "
                                                    "qualified"))


def generate_name_causes(kind: Kind, meta: Mapping[str, Any]) -> list[Cause]:
    """The causes of a bad `metadata.generateName`, checked as upstream does: its trailing `-` masked."""
    out: list[Cause] = []
    prefix = meta.get("generateName")
    if not isinstance(prefix, str) or not prefix:
        return out
    # upstream's maskTrailingDash: "abc-" is checked as "aba" (the dash the suffix follows is fine)
    text = prefix[:-2] + "a" if len(prefix) > 1 and prefix.endswith("-") else prefix
    problem = validate_name(kind, text)
    if problem is not None:
        detail = problem.split(": ", 2)[-1]  # validate_name words a metadata.name cause: keep its rule
        out.append(fielderrors.invalid_text("metadata.generateName", prefix, detail))
    return out


def _too_long(field: str) -> Cause:
    cause: Cause = {"reason": "FieldValueTooLong", "message": f"Too long: must have at most {MAX_DATA_SIZE} bytes"}
    if field:
        cause["field"] = field
    return cause


def _config_map_size(obj: Obj, out: list[Cause]) -> None:
    total = 0
    data = obj.get("data")
    if isinstance(data, dict):
        total += sum(len(v.encode("utf-8", "surrogatepass")) for v in data.values() if isinstance(v, str))
    binary = obj.get("binaryData")
    if isinstance(binary, dict):
        total += sum(_decoded_size(v) for v in binary.values() if isinstance(v, str))
    if total > MAX_DATA_SIZE:
        out.append(_too_long(""))  # upstream's path is empty: the whole object


def _secret_size(obj: Obj, out: list[Cause]) -> None:
    total = 0
    data = obj.get("data")
    if isinstance(data, dict):
        total += sum(_decoded_size(v) for v in data.values() if isinstance(v, str))
    string_data = obj.get("stringData")
    if isinstance(string_data, dict):  # merged into data before validation upstream
        total += sum(len(v.encode("utf-8", "surrogatepass")) for v in string_data.values() if isinstance(v, str))
    if total > MAX_DATA_SIZE:
        out.append(_too_long("data"))


def _decoded_size(text: str) -> int:
    try:
        return len(base64.b64decode(text, validate=False))
    except (binascii.Error, ValueError):
        return len(text) * 3 // 4


def _selector_terms(affinity: Mapping[str, Any], at: str) -> Iterator[tuple[Any, str, bool]]:
    """(requirement, its path, whether it is a node selector requirement) in an affinity."""
    node = affinity.get("nodeAffinity")
    if isinstance(node, dict):
        base = f"{at}.nodeAffinity"
        required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(required, dict) and isinstance(required.get("nodeSelectorTerms"), list):
            for i, term in enumerate(required["nodeSelectorTerms"]):
                yield from _node_term(term, f"{base}.requiredDuringSchedulingIgnoredDuringExecution"
                                            f".nodeSelectorTerms[{i}]")
        preferred = node.get("preferredDuringSchedulingIgnoredDuringExecution")
        if isinstance(preferred, list):
            for i, weighted in enumerate(preferred):
                if isinstance(weighted, dict):
                    yield from _node_term(weighted.get("preference"),
                                          f"{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference")
    for which in ("podAffinity", "podAntiAffinity"):
        pod = affinity.get(which)
        if not isinstance(pod, dict):
            continue
        base = f"{at}.{which}"
        required = pod.get("requiredDuringSchedulingIgnoredDuringExecution")
        if isinstance(required, list):
            for i, term in enumerate(required):
                yield from _pod_term(term, f"{base}.requiredDuringSchedulingIgnoredDuringExecution[{i}]")
        preferred = pod.get("preferredDuringSchedulingIgnoredDuringExecution")
        if isinstance(preferred, list):
            for i, weighted in enumerate(preferred):
                if isinstance(weighted, dict):
                    yield from _pod_term(weighted.get("podAffinityTerm"),
                                         f"{base}.preferredDuringSchedulingIgnoredDuringExecution[{i}]"
                                         ".podAffinityTerm")


def _node_term(term: Any, at: str) -> Iterator[tuple[Any, str, bool]]:
    if not isinstance(term, dict):
        return
    for key in ("matchExpressions", "matchFields"):
        if isinstance(term.get(key), list):
            for j, req in enumerate(term[key]):
                yield req, f"{at}.{key}[{j}]", True


def _pod_term(term: Any, at: str) -> Iterator[tuple[Any, str, bool]]:
    if not isinstance(term, dict):
        return
    for key in ("labelSelector", "namespaceSelector"):
        selector = term.get(key)
        if isinstance(selector, dict) and isinstance(selector.get("matchExpressions"), list):
            for j, req in enumerate(selector["matchExpressions"]):
                yield req, f"{at}.{key}.matchExpressions[{j}]", False


def _affinity(affinity: Mapping[str, Any], at: str, out: list[Cause]) -> None:
    """Selector requirements as upstream checks them: the operator, then the values it needs.

    As `ValidateNodeSelectorRequirement` and `ValidateLabelSelectorRequirement` do.
    """
    for req, path, node in _selector_terms(affinity, at):
        if not isinstance(req, dict):
            continue
        op = req.get("operator")
        values = req.get("values")
        count = len(values) if isinstance(values, list) else 0
        if op in ("In", "NotIn"):
            if count == 0:
                out.append(fielderrors.required(f"{path}.values",
                                                "must be specified when `operator` is 'In' or 'NotIn'"))
        elif op in ("Exists", "DoesNotExist"):
            if count > 0:
                out.append(fielderrors.forbidden(f"{path}.values",
                                                 "may not be specified when `operator` is 'Exists' or "
                                                 "'DoesNotExist'"))
        elif node and op in ("Gt", "Lt"):
            if count != 1:
                out.append(fielderrors.required(f"{path}.values",
                                                "must be specified single value when `operator` is 'Lt' or 'Gt'"))
        elif isinstance(op, str):
            out.append(fielderrors.invalid_text(f"{path}.operator", op, "not a valid selector operator"))

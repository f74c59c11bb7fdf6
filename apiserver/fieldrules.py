"""Rules kube-apiserver applies to every built-in kind that the per-kind checks (`validation`) leave out.

Each is found from one source (where a pod spec sits in each kind, ...) rather than a check per
field. Quantities are checked where they are decoded (`kubemesh.apiserver.protobuf.gojson`: every
Quantity field of every kind, from the generated message table, a malformed one a 400).

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
import re
from collections.abc import Iterator, Mapping
from typing import Any, Final

from kubemesh.apiserver import fielderrors, names
from kubemesh.apiserver.fielderrors import Cause
from kubemesh.apiserver.validation import validate_name
from kubemesh.services.model.kinds import Kind, Obj

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

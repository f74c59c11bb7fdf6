"""Validation of objects written to the apiserver: names, unknown fields and required shape.

Three checks, each returning data the request layer turns into a `metav1.Status`:

* `validate_name(kind, name)`: the rule Kubernetes applies to `metadata.name` of that kind
  (DNS-1123 label for namespaces, DNS-1035 label for services, DNS-1123 subdomain otherwise).
  Returns the message of the `metadata.name` cause (`Invalid value: "X": ...`) or None. The
  apiserver answers 422 with `<Kind> "<name>" is invalid: metadata.name: <message>`.
* `unknown_fields(kind, obj)`: the paths (`spec.containers[0].foo`) of fields the kind's schema
  does not have, for `fieldValidation=Strict` (kubectl's default): the apiserver answers 400
  `strict decoding error: unknown field "spec.foo"`. The schema is `schema.json`, generated at
  development time from the official client's models by `scripts/gen_schema.py`; maps with free
  keys (labels, annotations, data, resource lists, nodeSelector, capacity...) accept any key, and
  kinds without a schema accept everything.
* `validate_object(kind, obj)`: the required fields and shapes that the control-plane races and the
  clients depend on, as a list of `Cause` (`{reason, message, field}`, with Kubernetes' reasons
  such as `FieldValueRequired` and field paths such as `spec.containers[0].image`). An empty list
  means valid; otherwise the apiserver answers 422 `Invalid` with the causes in `details.causes`.

This is deliberately a subset of Kubernetes' validation: it checks what a controller, scheduler or
kubelet would trip on (missing containers or images, selectors that do not match their template,
malformed taints and tolerations, non-string labels, a PriorityClass without an integer value),
not every rule of the real apiserver.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Final, TypedDict

from services.kinds import Kind, Obj
from services.selectors import (
    SelectorError,
    label_selector_from_dict,
    validate_label_key,
    validate_label_value,
)

__all__ = ["Cause", "unknown_fields", "validate_name", "validate_object"]


class Cause(TypedDict):
    """One entry of `Status.details.causes`."""

    reason: str
    message: str
    field: str


# ---------------------------------------------------------------------------------------------
# Names.

_DNS1123_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS1123_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS1035_LABEL: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")

_LABEL_RULE: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_SUBDOMAIN_RULE: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS1035_RULE: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
    "start with an alphabetic character, and end with an alphanumeric character"
)


def _show(value: Any) -> str:
    """A value as causes print it: JSON, cut short."""
    try:
        text = json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


@lru_cache(maxsize=65536)
def _label_problem(value: str) -> str | None:
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _DNS1123_LABEL.fullmatch(value):
        return _LABEL_RULE
    return None


@lru_cache(maxsize=65536)
def _subdomain_problem(value: str) -> str | None:
    if len(value) > 253:
        return "must be no more than 253 characters"
    if not _DNS1123_SUBDOMAIN.fullmatch(value):
        return _SUBDOMAIN_RULE
    return None


@lru_cache(maxsize=65536)
def _dns1035_problem(value: str) -> str | None:
    if len(value) > 63:
        return "must be no more than 63 characters"
    if not _DNS1035_LABEL.fullmatch(value):
        return _DNS1035_RULE
    return None


_NAME_RULES: Final = {"Namespace": _label_problem, "Service": _dns1035_problem}


def validate_name(kind: Kind, name: str) -> str | None:
    """The message of the `metadata.name` cause if `name` is not valid for `kind`, else None."""
    if not name:
        return "Required value: name or generateName is required"
    problem = _NAME_RULES.get(kind.kind, _subdomain_problem)(name)
    if problem is None:
        return None
    return f"Invalid value: {_show(name)}: {problem}"


# ---------------------------------------------------------------------------------------------
# Unknown fields.

_SCHEMA_PATH: Final = Path(__file__).with_name("schema.json")


@cache
def _schema() -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    doc = json.loads(_SCHEMA_PATH.read_text())
    return doc["kinds"], doc["types"]


def _walk_type(value: Mapping[str, Any], type_name: str, path: str, out: list[str]) -> None:
    fields = _schema()[1].get(type_name)
    if fields is None:
        return
    for key, sub in value.items():
        here = f"{path}.{key}" if path else str(key)
        code = fields.get(key)
        if code is None:
            out.append(here)
        elif code and sub is not None:
            _walk_value(sub, code, here, out)


def _walk_value(value: Any, code: str, path: str, out: list[str]) -> None:
    """Descend into `value` whose schema code is `code` (see scripts/gen_schema.py)."""
    head, rest = code[0], code[1:]
    if head == "[":
        if rest and isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    _walk_type(item, rest, f"{path}[{i}]", out)
    elif head == "{":
        if rest and isinstance(value, dict):
            for key, item in value.items():
                if isinstance(item, dict):
                    _walk_type(item, rest, f"{path}[{key}]", out)
    elif isinstance(value, dict):
        _walk_type(value, code, path, out)


def unknown_fields(kind: Kind | str, obj: Obj) -> list[str]:
    """Dotted paths of the fields of `obj` that objects of `kind` do not have, in document order.

    `kind` may also be the name of a body type without a Kind (`Eviction`, `Scale`, `DeleteOptions`).
    """
    name = kind if isinstance(kind, str) else kind.kind
    type_name = _schema()[0].get(name)
    out: list[str] = []
    if type_name is not None:
        _walk_type(obj, type_name, "", out)
    return out


# ---------------------------------------------------------------------------------------------
# Object validation.


def _required(field: str) -> Cause:
    return {"reason": "FieldValueRequired", "message": "Required value", "field": field}


def _invalid(field: str, value: Any, detail: str) -> Cause:
    message = f"Invalid value: {_show(value)}: {detail}"
    return {"reason": "FieldValueInvalid", "message": message, "field": field}


def _type(field: str, value: Any, expected: str) -> Cause:
    return {
        "reason": "FieldValueTypeInvalid",
        "message": f"Invalid value: {_show(value)}: must be of type {expected}",
        "field": field,
    }


def _unsupported(field: str, value: Any, supported: tuple[str, ...]) -> Cause:
    listed = ", ".join(f'"{s}"' for s in supported)
    return {
        "reason": "FieldValueNotSupported",
        "message": f"Unsupported value: {_show(value)}: supported values: {listed}",
        "field": field,
    }


def _duplicate(field: str, value: Any) -> Cause:
    return {"reason": "FieldValueDuplicate", "message": f"Duplicate value: {_show(value)}", "field": field}


def _forbidden(field: str, detail: str) -> Cause:
    return {"reason": "FieldValueForbidden", "message": f"Forbidden: {detail}", "field": field}


_TAINT_EFFECTS: Final = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Checker:
    """Accumulates causes while walking one object."""

    def __init__(self) -> None:
        self.causes: list[Cause] = []

    def add(self, cause: Cause) -> None:
        self.causes.append(cause)

    # Typed accessors: return the value when it has the type (or is absent: None), else record
    # a type cause and return None so that the caller skips checks below it.

    def map(
        self, obj: Mapping[str, Any], key: str, field: str, *, required: bool = False
    ) -> dict[str, Any] | None:
        value = obj.get(key)
        if value is None:
            if required:
                self.add(_required(field))
            return None
        if not isinstance(value, dict):
            self.add(_type(field, value, "object"))
            return None
        return value

    def list(self, obj: Mapping[str, Any], key: str, field: str) -> list[Any] | None:
        value = obj.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            self.add(_type(field, value, "array"))
            return None
        return value

    def string(self, obj: Mapping[str, Any], key: str, field: str, *, required: bool = False) -> str | None:
        value = obj.get(key)
        if value is None or (required and value == ""):
            if required:
                self.add(_required(field))
            return None
        if not isinstance(value, str):
            self.add(_type(field, value, "string"))
            return None
        return value

    def integer(
        self,
        obj: Mapping[str, Any],
        key: str,
        field: str,
        *,
        required: bool = False,
        minimum: int | None = None,
    ) -> int | None:
        value = obj.get(key)
        if value is None:
            if required:
                self.add(_required(field))
            return None
        if not _is_int(value):
            self.add(_type(field, value, "integer"))
            return None
        if minimum is not None and value < minimum:
            self.add(_invalid(field, value, f"must be greater than or equal to {minimum}"))
        return int(value)

    def boolean(self, obj: Mapping[str, Any], key: str, field: str) -> None:
        value = obj.get(key)
        if value is not None and not isinstance(value, bool):
            self.add(_type(field, value, "boolean"))

    def choice(self, obj: Mapping[str, Any], key: str, field: str, supported: tuple[str, ...]) -> None:
        value = self.string(obj, key, field)
        if value is not None and value not in supported:
            self.add(_unsupported(field, value, supported))

    def string_map(self, obj: Mapping[str, Any], key: str, field: str) -> dict[str, Any] | None:
        value = self.map(obj, key, field)
        if value is None:
            return None
        for k, v in value.items():
            if not isinstance(v, str):
                self.add(_type(f"{field}[{k}]", v, "string"))
        return value

    # Shared parts.

    def metadata(self, obj: Obj) -> None:
        meta = self.map(obj, "metadata", "metadata")
        if meta is None:
            return
        self.string(meta, "name", "metadata.name")
        self.string(meta, "generateName", "metadata.generateName")
        self.string(meta, "namespace", "metadata.namespace")
        labels = self.string_map(meta, "labels", "metadata.labels")
        for key, value in (labels or {}).items():
            problem = validate_label_key(str(key))
            if problem is not None:
                self.add(_invalid("metadata.labels", key, problem))
            if isinstance(value, str):
                problem = validate_label_value(value)
                if problem is not None:
                    self.add(_invalid("metadata.labels", value, problem))
        annotations = self.string_map(meta, "annotations", "metadata.annotations")
        if annotations:
            size = 0
            for key, value in annotations.items():
                problem = validate_label_key(str(key))
                if problem is not None:
                    self.add(_invalid("metadata.annotations", key, problem))
                size += len(key) + (len(value) if isinstance(value, str) else 0)
            if size > 256 * 1024:
                self.add({
                    "reason": "FieldValueTooLong",
                    "message": "Too long: must have at most 262144 bytes",
                    "field": "metadata.annotations",
                })
        for i, item in enumerate(self.list(meta, "finalizers", "metadata.finalizers") or []):
            if not isinstance(item, str):
                self.add(_type(f"metadata.finalizers[{i}]", item, "string"))
        for i, ref in enumerate(self.list(meta, "ownerReferences", "metadata.ownerReferences") or []):
            field = f"metadata.ownerReferences[{i}]"
            if not isinstance(ref, dict):
                self.add(_type(field, ref, "object"))
                continue
            for key in ("apiVersion", "kind", "name", "uid"):
                self.string(ref, key, f"{field}.{key}", required=True)
            self.boolean(ref, "controller", f"{field}.controller")
            self.boolean(ref, "blockOwnerDeletion", f"{field}.blockOwnerDeletion")

    def container(self, c: Any, field: str, names: set[str]) -> None:
        if not isinstance(c, dict):
            self.add(_type(field, c, "object"))
            return
        name = self.string(c, "name", f"{field}.name", required=True)
        if name is not None:
            problem = _label_problem(name)
            if problem is not None:
                self.add(_invalid(f"{field}.name", name, problem))
            elif name in names:
                self.add(_duplicate(f"{field}.name", name))
            names.add(name)
        self.string(c, "image", f"{field}.image", required=True)
        for j, port in enumerate(self.list(c, "ports", f"{field}.ports") or []):
            pf = f"{field}.ports[{j}]"
            if not isinstance(port, dict):
                self.add(_type(pf, port, "object"))
                continue
            number = self.integer(port, "containerPort", f"{pf}.containerPort", required=True)
            if number is not None and not 0 < number < 65536:
                self.add(_invalid(f"{pf}.containerPort", number, "must be between 1 and 65535, inclusive"))
            self.choice(port, "protocol", f"{pf}.protocol", ("TCP", "UDP", "SCTP"))
        for j, env in enumerate(self.list(c, "env", f"{field}.env") or []):
            if not isinstance(env, dict):
                self.add(_type(f"{field}.env[{j}]", env, "object"))
                continue
            self.string(env, "name", f"{field}.env[{j}].name", required=True)
            self.string(env, "value", f"{field}.env[{j}].value")
        for key in ("command", "args"):
            for j, arg in enumerate(self.list(c, key, f"{field}.{key}") or []):
                if not isinstance(arg, str):
                    self.add(_type(f"{field}.{key}[{j}]", arg, "string"))
        resources = self.map(c, "resources", f"{field}.resources")
        if resources is not None:
            for part in ("limits", "requests"):
                amounts = self.map(resources, part, f"{field}.resources.{part}")
                for res, amount in (amounts or {}).items():
                    if not isinstance(amount, str | int | float) or isinstance(amount, bool):
                        self.add(_type(f"{field}.resources.{part}[{res}]", amount, "quantity"))

    def pod_spec(self, spec: dict[str, Any], field: str, *, workload: bool) -> None:
        names: set[str] = set()
        for i, c in enumerate(self.list(spec, "initContainers", f"{field}.initContainers") or []):
            self.container(c, f"{field}.initContainers[{i}]", names)
        containers = self.list(spec, "containers", f"{field}.containers")
        if not containers:
            if containers is not None or "containers" not in spec or spec["containers"] is None:
                self.add(_required(f"{field}.containers"))
        else:
            for i, c in enumerate(containers):
                self.container(c, f"{field}.containers[{i}]", names)
        supported = ("Always",) if workload else ("Always", "OnFailure", "Never")
        self.choice(spec, "restartPolicy", f"{field}.restartPolicy", supported)
        dns_policies = ("ClusterFirstWithHostNet", "ClusterFirst", "Default", "None")
        self.choice(spec, "dnsPolicy", f"{field}.dnsPolicy", dns_policies)
        for key in ("nodeName", "schedulerName", "priorityClassName", "serviceAccountName", "hostname"):
            self.string(spec, key, f"{field}.{key}")
        self.string_map(spec, "nodeSelector", f"{field}.nodeSelector")
        self.integer(spec, "priority", f"{field}.priority")
        grace = "terminationGracePeriodSeconds"
        self.integer(spec, grace, f"{field}.{grace}", minimum=0)
        self.integer(spec, "activeDeadlineSeconds", f"{field}.activeDeadlineSeconds", minimum=1)
        self.boolean(spec, "hostNetwork", f"{field}.hostNetwork")
        self.map(spec, "affinity", f"{field}.affinity")
        for i, tol in enumerate(self.list(spec, "tolerations", f"{field}.tolerations") or []):
            self.toleration(tol, f"{field}.tolerations[{i}]")

    def toleration(self, tol: Any, field: str) -> None:
        if not isinstance(tol, dict):
            self.add(_type(field, tol, "object"))
            return
        key = self.string(tol, "key", f"{field}.key")
        if key:
            problem = validate_label_key(key)
            if problem is not None:
                self.add(_invalid(f"{field}.key", key, problem))
        operator = tol.get("operator") or "Equal"
        if operator not in ("Equal", "Exists"):
            self.add(_unsupported(f"{field}.operator", operator, ("Equal", "Exists")))
        value = self.string(tol, "value", f"{field}.value")
        if operator == "Exists" and value:
            self.add(_invalid(f"{field}.operator", value, "value must be empty when `operator` is 'Exists'"))
        if not key and operator != "Exists":
            self.add(_invalid(f"{field}.operator", operator, "operator must be Exists when `key` is empty"))
        self.choice(tol, "effect", f"{field}.effect", ("", "NoSchedule", "PreferNoSchedule", "NoExecute"))
        if tol.get("tolerationSeconds") is not None:
            self.integer(tol, "tolerationSeconds", f"{field}.tolerationSeconds")
            if tol.get("effect") != "NoExecute":
                detail = "effect must be 'NoExecute' when `tolerationSeconds` is set"
                self.add(_invalid(f"{field}.effect", tol.get("effect"), detail))

    def selector(self, sel: dict[str, Any], field: str) -> bool:
        """Check a metav1.LabelSelector; True when it parses."""
        try:
            label_selector_from_dict(sel)
        except SelectorError as exc:
            self.add(_invalid(field, sel, str(exc)))
            return False
        return True

    # Kinds.

    def workload(self, obj: Obj, kind: str) -> None:
        spec = self.map(obj, "spec", "spec", required=True)
        if spec is None:
            return
        if kind != "DaemonSet":
            self.integer(spec, "replicas", "spec.replicas", minimum=0)
        self.integer(spec, "minReadySeconds", "spec.minReadySeconds", minimum=0)
        selector = self.map(spec, "selector", "spec.selector", required=True)
        template = self.map(spec, "template", "spec.template", required=True)
        if kind == "Deployment":
            strategy = self.map(spec, "strategy", "spec.strategy")
            if strategy is not None:
                self.choice(strategy, "type", "spec.strategy.type", ("Recreate", "RollingUpdate"))
        if selector is not None and self.selector(selector, "spec.selector"):
            parsed = label_selector_from_dict(selector)
            if parsed.empty:
                self.add(_invalid("spec.selector", selector, f"empty selector is invalid for {kind.lower()}"))
            elif template is not None:
                tmeta = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
                labels = tmeta.get("labels") if isinstance(tmeta, dict) else None
                labels = labels if isinstance(labels, dict) else {}
                if not parsed.matches(labels):
                    detail = "`selector` does not match template `labels`"
                    self.add(_invalid("spec.template.metadata.labels", labels, detail))
        if template is not None:
            tmeta = self.map(template, "metadata", "spec.template.metadata")
            if tmeta is not None:
                labels = self.string_map(tmeta, "labels", "spec.template.metadata.labels")
                for key in labels or {}:
                    problem = validate_label_key(str(key))
                    if problem is not None:
                        self.add(_invalid("spec.template.metadata.labels", key, problem))
            tspec = self.map(template, "spec", "spec.template.spec", required=True)
            if tspec is not None:
                self.pod_spec(tspec, "spec.template.spec", workload=True)

    def node(self, obj: Obj) -> None:
        spec = self.map(obj, "spec", "spec")
        if spec is not None:
            self.boolean(spec, "unschedulable", "spec.unschedulable")
            for key in ("podCIDR", "providerID"):
                self.string(spec, key, f"spec.{key}")
            seen: set[tuple[str, str]] = set()
            for i, taint in enumerate(self.list(spec, "taints", "spec.taints") or []):
                field = f"spec.taints[{i}]"
                if not isinstance(taint, dict):
                    self.add(_type(field, taint, "object"))
                    continue
                taint_key = self.string(taint, "key", f"{field}.key", required=True)
                if taint_key:
                    problem = validate_label_key(taint_key)
                    if problem is not None:
                        self.add(_invalid(f"{field}.key", taint_key, problem))
                value = self.string(taint, "value", f"{field}.value")
                if value:
                    problem = validate_label_value(value)
                    if problem is not None:
                        self.add(_invalid(f"{field}.value", value, problem))
                effect = taint.get("effect")
                if not effect:
                    self.add(_required(f"{field}.effect"))
                else:
                    self.choice(taint, "effect", f"{field}.effect", _TAINT_EFFECTS)
                if taint_key and isinstance(effect, str):
                    if (taint_key, effect) in seen:
                        self.add(_duplicate(field, {"key": taint_key, "effect": effect}))
                    seen.add((taint_key, effect))
        status = self.map(obj, "status", "status")
        if status is not None:
            for i, cond in enumerate(self.list(status, "conditions", "status.conditions") or []):
                field = f"status.conditions[{i}]"
                if not isinstance(cond, dict):
                    self.add(_type(field, cond, "object"))
                    continue
                self.string(cond, "type", f"{field}.type", required=True)
                self.choice(cond, "status", f"{field}.status", ("True", "False", "Unknown"))
                if cond.get("status") is None:
                    self.add(_required(f"{field}.status"))
            for i, addr in enumerate(self.list(status, "addresses", "status.addresses") or []):
                field = f"status.addresses[{i}]"
                if not isinstance(addr, dict):
                    self.add(_type(field, addr, "object"))
                    continue
                self.string(addr, "type", f"{field}.type", required=True)
                self.string(addr, "address", f"{field}.address", required=True)
            for part in ("capacity", "allocatable"):
                self.map(status, part, f"status.{part}")

    def pod(self, obj: Obj, *, with_spec: bool = True) -> None:
        spec = self.map(obj, "spec", "spec", required=True)
        if spec is not None and with_spec:
            self.pod_spec(spec, "spec", workload=False)
        status = self.map(obj, "status", "status")
        if status is not None:
            phases = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
            self.choice(status, "phase", "status.phase", phases)
            for i, cond in enumerate(self.list(status, "conditions", "status.conditions") or []):
                field = f"status.conditions[{i}]"
                if not isinstance(cond, dict):
                    self.add(_type(field, cond, "object"))
                    continue
                self.string(cond, "type", f"{field}.type", required=True)
                self.string(cond, "status", f"{field}.status", required=True)
            self.string(status, "nominatedNodeName", "status.nominatedNodeName")

    def lease(self, obj: Obj) -> None:
        spec = self.map(obj, "spec", "spec")
        if spec is None:
            return
        self.string(spec, "holderIdentity", "spec.holderIdentity")
        self.integer(spec, "leaseDurationSeconds", "spec.leaseDurationSeconds", minimum=1)
        self.integer(spec, "leaseTransitions", "spec.leaseTransitions", minimum=0)
        for key in ("acquireTime", "renewTime"):
            self.string(spec, key, f"spec.{key}")

    def event(self, obj: Obj) -> None:
        self.map(obj, "involvedObject", "involvedObject", required=True)
        for key in ("reason", "message", "type", "reportingComponent", "reportingInstance", "action"):
            self.string(obj, key, key)
        self.integer(obj, "count", "count", minimum=0)
        self.map(obj, "source", "source")

    def priority_class(self, obj: Obj) -> None:
        value = self.integer(obj, "value", "value", required=True)
        name = str((obj.get("metadata") or {}).get("name") or "")
        if value is not None and value > 1_000_000_000 and not name.startswith("system-"):
            self.add(_forbidden("value", "maximum allowed value of a user defined priority is 1000000000"))
        self.boolean(obj, "globalDefault", "globalDefault")
        self.string(obj, "description", "description")
        self.choice(obj, "preemptionPolicy", "preemptionPolicy", ("Never", "PreemptLowerPriority"))

    def config_map(self, obj: Obj) -> None:
        for part in ("data", "binaryData"):
            data = self.string_map(obj, part, part)
            for key in data or {}:
                if not re.fullmatch(r"[-._a-zA-Z0-9]+", str(key)) or len(str(key)) > 253:
                    detail = "a valid config key must consist of alphanumerics, '-', '_' or '.'"
                    self.add(_invalid(part, key, detail))

    def service(self, obj: Obj) -> None:
        spec = self.map(obj, "spec", "spec")
        if spec is None:
            return
        for i, port in enumerate(self.list(spec, "ports", "spec.ports") or []):
            field = f"spec.ports[{i}]"
            if not isinstance(port, dict):
                self.add(_type(field, port, "object"))
                continue
            number = self.integer(port, "port", f"{field}.port", required=True)
            if number is not None and not 0 < number < 65536:
                self.add(_invalid(f"{field}.port", number, "must be between 1 and 65535, inclusive"))
        self.string_map(spec, "selector", "spec.selector")

    def pdb(self, obj: Obj) -> None:
        spec = self.map(obj, "spec", "spec")
        if spec is None:
            return
        selector = self.map(spec, "selector", "spec.selector")
        if selector is not None:
            self.selector(selector, "spec.selector")
        if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
            self.add(_invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set"))

    def namespace(self, obj: Obj) -> None:
        spec = self.map(obj, "spec", "spec")
        for i, item in enumerate((self.list(spec, "finalizers", "spec.finalizers") if spec else None) or []):
            if not isinstance(item, str):
                self.add(_type(f"spec.finalizers[{i}]", item, "string"))

    def binding(self, obj: Obj) -> None:
        target = self.map(obj, "target", "target", required=True)
        if target is not None:
            self.string(target, "name", "target.name", required=True)


def validate_object(kind: Kind, obj: Obj, *, spec_known_valid: bool = False) -> list[Cause]:
    """The causes that make `obj` invalid as an object of `kind` (empty when it is valid).

    `spec_known_valid`: the spec is equal to a spec this function already accepted (an update
    that leaves the spec alone: validation is a pure function of the object, so the pod and
    workload spec checks, the costly part, are skipped).
    """
    check = _Checker()
    check.metadata(obj)
    for part in ("spec", "status"):
        if part in obj and obj[part] is not None and not isinstance(obj[part], dict):
            check.add(_type(part, obj[part], "object"))
            return check.causes
    name = kind.kind
    if name == "Pod":
        check.pod(obj, with_spec=not spec_known_valid)
    elif name in ("Deployment", "ReplicaSet", "DaemonSet"):
        if not spec_known_valid:
            check.workload(obj, name)
    elif name == "Node":
        check.node(obj)
    elif name == "Lease":
        check.lease(obj)
    elif name == "Event":
        check.event(obj)
    elif name == "PriorityClass":
        check.priority_class(obj)
    elif name == "ConfigMap":
        check.config_map(obj)
    elif name == "Service":
        check.service(obj)
    elif name == "PodDisruptionBudget":
        check.pdb(obj)
    elif name == "Namespace":
        check.namespace(obj)
    elif name == "Binding":
        check.binding(obj)
    return check.causes

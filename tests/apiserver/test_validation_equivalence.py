"""Object validation reports a broken field at its exact path, whatever else the object holds.

A property test: generate a valid pod (init and app containers with ports, env, command, args
and resources; tolerations; owner references, labels, annotations, finalizers; a status),
break one field (a value of the wrong type, a required field removed or emptied, an invalid or
duplicate container name, an out-of-range port, an unsupported or too small value) and check
that `validate_object`

* reports a cause at exactly the path of the broken field, with the reason of the breakage;
* reports nothing outside the broken field's container, toleration or owner reference;
* with `spec_known_valid`, reports the same causes minus those under `spec.`;
* reports the same spec causes, under `spec.template.spec`, for the pod spec as the template
  of a Deployment.

The valid pod is valid before and after admission (defaulting), so the checks also hold on
the shapes the apiserver validates on updates.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kubemesh.apiserver import admission
from kubemesh.apiserver.validation import validate_object
from kubemesh.services.model.kinds import DEPLOYMENTS, PODS

_NAMES = st.from_regex(r"[a-z]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
_LABEL_KEYS = st.sampled_from(["app", "tier", "example.com/team", "k8s.io/part-of"])
_LABEL_VALUES = st.from_regex(r"([a-z0-9]([-a-z0-9_.]{0,8}[a-z0-9])?)?", fullmatch=True)
_QUANTITIES = st.one_of(st.sampled_from(["100m", "1", "64Mi", "1Gi"]), st.integers(0, 8), st.floats(0, 4))

_PORT = st.fixed_dictionaries(
    {"containerPort": st.integers(1, 65535)}, optional={"protocol": st.sampled_from(["TCP", "UDP", "SCTP"])}
)
_ENV = st.fixed_dictionaries({"name": st.sampled_from(["A", "MODE", "PATH"])}, optional={"value": st.text(max_size=5)})
_CONTAINER_FIELDS = st.fixed_dictionaries(
    {"image": st.sampled_from(["nginx", "nginx:1.25", "registry.example/app@sha256:abc"])},
    optional={
        "ports": st.lists(_PORT, max_size=2),
        "env": st.lists(_ENV, max_size=2),
        "command": st.lists(st.sampled_from(["sh", "-c", "sleep"]), max_size=2),
        "args": st.lists(st.sampled_from(["1", "--x"]), max_size=2),
        "resources": st.fixed_dictionaries(
            {},
            optional={part: st.dictionaries(st.sampled_from(["cpu", "memory"]), _QUANTITIES)
                      for part in ("limits", "requests")},
        ),
    },
)
_TOLERATION = st.one_of(
    st.fixed_dictionaries({"operator": st.just("Exists")},
                          optional={"effect": st.sampled_from(["", "NoSchedule", "PreferNoSchedule"])}),
    st.fixed_dictionaries({"key": st.sampled_from(["k", "example.com/gpu"]), "operator": st.just("Equal"),
                           "value": st.sampled_from(["", "v"]), "effect": st.just("NoExecute")},
                          optional={"tolerationSeconds": st.integers(0, 600)}),
)
_OWNER = st.fixed_dictionaries(
    {"apiVersion": st.just("apps/v1"), "kind": st.just("ReplicaSet"), "name": _NAMES, "uid": st.uuids().map(str)},
    optional={"controller": st.booleans(), "blockOwnerDeletion": st.booleans()},
)
_CONDITION = st.fixed_dictionaries(
    {"type": st.sampled_from(["Ready", "PodScheduled"]), "status": st.sampled_from(["True", "False"])}
)


@st.composite
def _valid_pods(draw: st.DrawFn) -> dict[str, Any]:
    """A valid pod; its container names are unique across init and app containers."""
    names = draw(st.lists(_NAMES, min_size=1, max_size=4, unique=True))
    split = draw(st.integers(0, len(names) - 1))
    containers = [{"name": name, **draw(_CONTAINER_FIELDS)} for name in names]
    labels = draw(st.dictionaries(_LABEL_KEYS, _LABEL_VALUES, min_size=1, max_size=3))
    metadata: dict[str, Any] = {"name": draw(_NAMES), "namespace": "default", "labels": labels}
    metadata.update(draw(st.fixed_dictionaries({}, optional={
        "annotations": st.dictionaries(_LABEL_KEYS, st.text(max_size=5), max_size=2),
        "finalizers": st.lists(st.sampled_from(["example.com/f", "kubernetes"]), max_size=2),
        "ownerReferences": st.lists(_OWNER, min_size=1, max_size=2),
    })))
    spec: dict[str, Any] = {"containers": containers[split:]}
    if split:
        spec["initContainers"] = containers[:split]
    spec.update(draw(st.fixed_dictionaries({}, optional={
        "restartPolicy": st.just("Always"),  # the only policy a workload template accepts
        "dnsPolicy": st.sampled_from(["ClusterFirst", "Default"]),
        "nodeName": _NAMES,
        "nodeSelector": st.dictionaries(_LABEL_KEYS, _LABEL_VALUES, max_size=2),
        "priority": st.integers(-10, 10**9),
        "terminationGracePeriodSeconds": st.integers(0, 60),
        "activeDeadlineSeconds": st.integers(1, 600),
        "hostNetwork": st.booleans(),
        "affinity": st.just({}),
        "tolerations": st.lists(_TOLERATION, max_size=3),
    })))
    pod: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if draw(st.booleans()):
        pod["status"] = draw(st.fixed_dictionaries(
            {"phase": st.sampled_from(["Pending", "Running"])},
            optional={"conditions": st.lists(_CONDITION, max_size=2), "nominatedNodeName": _NAMES},
        ))
    if draw(st.booleans()):
        status = pod.pop("status", None)
        admission.admit_create(PODS, pod, priority=lambda name: None, priority_classes=[])
        if status is not None:
            pod["status"] = status
    return pod


# ---------------------------------------------------------------------------------------------
# Where a field can be broken: its path (as causes print it), the expected type, and the scope
# of the causes breaking it may add (its container, toleration or owner reference).

class _Key(str):
    """A key of a map with free keys (labels, resource lists...): causes print it in brackets."""

    __slots__ = ()


_Path = tuple[str | int, ...]


def _render(path: _Path) -> str:
    """A path as causes print it: `spec.containers[0].resources.limits[cpu]`."""
    text = str(path[0])
    for part in path[1:]:
        text += f"[{part}]" if isinstance(part, int | _Key) else f".{part}"
    return text


@dataclass(frozen=True)
class _Site:
    path: _Path
    expected: str  # "string", "integer", "boolean", "object", "array" or "quantity"
    required: bool = False
    scope: _Path | None = None  # the object whose paths the causes may have (default: the field itself)

    @property
    def field(self) -> str:
        return _render(self.path)

    @property
    def scope_field(self) -> str:
        return _render(self.scope if self.scope is not None else self.path)


def _sites(pod: dict[str, Any]) -> list[_Site]:
    sites = [_Site((part,), "object") for part in ("metadata", "spec", "status")]
    meta, spec = pod["metadata"], pod["spec"]
    sites += [_Site(("metadata", key), "string") for key in ("name", "generateName", "namespace")]
    for part in ("labels", "annotations"):
        if part in meta:
            sites.append(_Site(("metadata", part), "object"))
            sites += [_Site(("metadata", part, _Key(key)), "string") for key in meta[part]]
    if "finalizers" in meta:
        sites.append(_Site(("metadata", "finalizers"), "array"))
        sites += [_Site(("metadata", "finalizers", i), "string") for i in range(len(meta["finalizers"]))]
    for i in range(len(meta.get("ownerReferences", []))):
        ref: _Path = ("metadata", "ownerReferences", i)
        sites.append(_Site(ref, "object"))
        sites += [_Site((*ref, key), "string", required=True) for key in ("apiVersion", "kind", "name", "uid")]
        sites += [_Site((*ref, key), "boolean") for key in ("controller", "blockOwnerDeletion")]
    for group in ("initContainers", "containers"):
        if group not in spec:
            continue
        sites.append(_Site(("spec", group), "array"))
        for i, c in enumerate(spec[group]):
            at: _Path = ("spec", group, i)
            sites.append(_Site(at, "object"))
            sites += [_Site((*at, key), "string", required=True, scope=at) for key in ("name", "image")]
            for key in ("ports", "env", "command", "args"):
                sites.append(_Site((*at, key), "array", scope=at))
            for j, _ in enumerate(c.get("ports", [])):
                sites.append(_Site((*at, "ports", j), "object", scope=at))
                sites.append(_Site((*at, "ports", j, "containerPort"), "integer", required=True, scope=at))
                sites.append(_Site((*at, "ports", j, "protocol"), "string", scope=at))
            for j, _ in enumerate(c.get("env", [])):
                sites.append(_Site((*at, "env", j), "object", scope=at))
                sites.append(_Site((*at, "env", j, "name"), "string", required=True, scope=at))
                sites.append(_Site((*at, "env", j, "value"), "string", scope=at))
            for key in ("command", "args"):
                sites += [_Site((*at, key, j), "string", scope=at) for j in range(len(c.get(key, [])))]
            sites.append(_Site((*at, "resources"), "object", scope=at))
            for part, amounts in (c.get("resources") or {}).items():
                sites.append(_Site((*at, "resources", part), "object", scope=at))
                sites += [_Site((*at, "resources", part, _Key(res)), "quantity", scope=at) for res in amounts]
    sites += [_Site(("spec", key), "string") for key in (
        "restartPolicy", "dnsPolicy", "nodeName", "schedulerName", "priorityClassName", "serviceAccountName", "hostname"
    )]
    sites.append(_Site(("spec", "nodeSelector"), "object"))
    sites += [_Site(("spec", "nodeSelector", _Key(key)), "string") for key in spec.get("nodeSelector", {})]
    sites += [_Site(("spec", key), "integer")
              for key in ("priority", "terminationGracePeriodSeconds", "activeDeadlineSeconds")]
    sites += [_Site(("spec", "hostNetwork"), "boolean"), _Site(("spec", "affinity"), "object")]
    sites.append(_Site(("spec", "tolerations"), "array"))
    for i in range(len(spec.get("tolerations", []))):
        at = ("spec", "tolerations", i)
        sites.append(_Site(at, "object"))
        sites += [_Site((*at, key), "string", scope=at) for key in ("key", "value", "effect")]
        sites.append(_Site((*at, "tolerationSeconds"), "integer", scope=at))
    if "status" in pod:
        sites.append(_Site(("status", "phase"), "string"))
        sites.append(_Site(("status", "conditions"), "array"))
        for i in range(len(pod["status"].get("conditions", []))):
            at = ("status", "conditions", i)
            sites.append(_Site(at, "object"))
            sites += [_Site((*at, key), "string", required=True) for key in ("type", "status")]
        sites.append(_Site(("status", "nominatedNodeName"), "string"))
    return sites


_WRONG: dict[str, list[Any]] = {
    "string": [1, True, 2.5, [], {}, ["x"]],
    "integer": ["1", True, 2.5, [], {}],
    "boolean": ["true", 1, 0, [], {}],
    "object": ["x", 1, True, [], ["a"]],
    "array": ["x", 1, True, {}, {"a": 1}],
    "quantity": [True, False, [], {}, ["1"]],
}


def _set(obj: Any, path: _Path, value: Any) -> None:
    for part in path[:-1]:
        obj = obj[part]
    obj[path[-1]] = value


def _delete(obj: Any, path: _Path) -> None:
    for part in path[:-1]:
        obj = obj[part]
    del obj[path[-1]]


def _causes(kind: Any, obj: dict[str, Any], **kw: Any) -> list[tuple[str, str]]:
    return [(c["field"], c["reason"]) for c in validate_object(kind, obj, **kw)]


def _within(field: str, scope: str) -> bool:
    return field == scope or field.startswith((f"{scope}.", f"{scope}["))


def _as_template(spec: dict[str, Any]) -> dict[str, Any]:
    """A valid Deployment whose pod template has `spec`."""
    labels = {"app": "web"}
    return {
        "metadata": {"name": "d"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


def _check_broken(pod: dict[str, Any], field: str, reason: str, scope: str) -> None:
    """`pod` is a valid pod with the field at path `field` broken so that it fails with `reason`."""
    causes = _causes(PODS, pod)
    assert (field, reason) in causes, (field, reason, causes)
    assert all(_within(f, scope) for f, _ in causes), (scope, causes)
    spec_causes = [(f, r) for f, r in causes if f.startswith("spec.")]
    # spec_known_valid skips exactly the spec checks (the spec itself must still be an object).
    skipped = _causes(PODS, pod, spec_known_valid=True)
    assert skipped == (causes if field == "spec" else [c for c in causes if c not in spec_causes])
    # The same spec as a workload's pod template: the same causes, under spec.template.spec.
    if field.startswith("spec."):
        deployment = _as_template(pod["spec"])
        assert _causes(DEPLOYMENTS, deployment) == [(f"spec.template.{f}", r) for f, r in spec_causes]


def _containers(pod: dict[str, Any]) -> list[tuple[_Path, dict[str, Any]]]:
    """(path, container) of the init then the app containers: the order names are checked in."""
    spec = pod["spec"]
    groups = ("initContainers", "containers")
    return [(("spec", group, i), c) for group in groups for i, c in enumerate(spec.get(group, []))]


@given(_valid_pods())
def test_generated_pods_are_valid(pod: dict[str, Any]) -> None:
    assert validate_object(PODS, pod) == []
    assert validate_object(PODS, pod, spec_known_valid=True) == []
    assert validate_object(DEPLOYMENTS, _as_template(pod["spec"])) == []


@given(_valid_pods(), st.fixed_dictionaries({expected: st.sampled_from(values) for expected, values in _WRONG.items()}))
def test_a_value_of_the_wrong_type_is_reported_at_its_path(pod: dict[str, Any], wrong: dict[str, Any]) -> None:
    for site in _sites(pod):
        broken = copy.deepcopy(pod)
        _set(broken, site.path, wrong[site.expected])
        _check_broken(broken, site.field, "FieldValueTypeInvalid", site.scope_field)


@given(_valid_pods())
def test_a_missing_required_field_is_reported_at_its_path(pod: dict[str, Any]) -> None:
    required = [site for site in _sites(pod) if site.required]
    required += [_Site(("spec",), "object", required=True), _Site(("spec", "containers"), "array", required=True)]
    for site in required:
        removed = copy.deepcopy(pod)
        _delete(removed, site.path)
        _check_broken(removed, site.field, "FieldValueRequired", site.scope_field)
        if site.expected in ("string", "array"):
            emptied = copy.deepcopy(pod)
            _set(emptied, site.path, "" if site.expected == "string" else [])
            _check_broken(emptied, site.field, "FieldValueRequired", site.scope_field)


@given(_valid_pods(), st.sampled_from(["C_1", "-web", "web-", "a.b", "a" * 64, "web app", "Web"]))
def test_an_invalid_container_name_is_reported_at_its_path(pod: dict[str, Any], name: str) -> None:
    for i in range(len(_containers(pod))):
        broken = copy.deepcopy(pod)
        at, c = _containers(broken)[i]
        c["name"] = name
        _check_broken(broken, _render((*at, "name")), "FieldValueInvalid", _render(at))


@given(_valid_pods(), st.data())
def test_a_duplicate_container_name_is_reported_at_the_later_one(pod: dict[str, Any], data: st.DataObject) -> None:
    containers = _containers(pod)
    if len(containers) < 2:
        return
    first, later = sorted(data.draw(st.lists(st.integers(0, len(containers) - 1), min_size=2, max_size=2, unique=True)))
    at, c = containers[later]
    c["name"] = containers[first][1]["name"]
    _check_broken(pod, _render((*at, "name")), "FieldValueDuplicate", _render(at))


@given(_valid_pods(), st.sampled_from([0, -1, 65536, 70000, 10**12]))
def test_a_port_out_of_range_is_reported_at_its_path(pod: dict[str, Any], number: int) -> None:
    for at, c in _containers(pod):
        for j in range(len(c.get("ports", []))):
            broken = copy.deepcopy(pod)
            _set(broken, (*at, "ports", j, "containerPort"), number)
            _check_broken(broken, _render((*at, "ports", j, "containerPort")), "FieldValueInvalid", _render(at))


@given(_valid_pods())
def test_an_unsupported_or_too_small_value_is_reported_at_its_path(pod: dict[str, Any]) -> None:
    cases: list[tuple[_Path, Any, str, _Path]] = [
        (("spec", "restartPolicy"), "Sometimes", "FieldValueNotSupported", ("spec", "restartPolicy")),
        (("spec", "dnsPolicy"), "Nope", "FieldValueNotSupported", ("spec", "dnsPolicy")),
        (("spec", "terminationGracePeriodSeconds"), -1, "FieldValueInvalid", ("spec", "terminationGracePeriodSeconds")),
        (("spec", "activeDeadlineSeconds"), 0, "FieldValueInvalid", ("spec", "activeDeadlineSeconds")),
    ]
    for at, c in _containers(pod):
        cases += [((*at, "ports", j, "protocol"), "tcp", "FieldValueNotSupported", at)
                  for j in range(len(c.get("ports", [])))]
    for i in range(len(pod["spec"].get("tolerations", []))):
        at = ("spec", "tolerations", i)
        cases.append(((*at, "effect"), "NoRun", "FieldValueNotSupported", at))
    if "status" in pod:
        cases.append((("status", "phase"), "Done", "FieldValueNotSupported", ("status", "phase")))
    for path, value, reason, scope in cases:
        broken = copy.deepcopy(pod)
        _set(broken, path, value)
        _check_broken(broken, _render(path), reason, _render(scope))

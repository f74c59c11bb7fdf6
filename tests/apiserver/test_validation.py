"""Object validation: names, strict unknown fields, required shapes."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubemesh.apiserver import admission
from kubemesh.apiserver.validation import unknown_fields, validate_name, validate_object
from kubemesh.services.model.kinds import (
    BINDINGS,
    CONFIGMAPS,
    DAEMONSETS,
    DEPLOYMENTS,
    EVENTS,
    KINDS,
    LEASES,
    NAMESPACES,
    NODES,
    PODS,
    PRIORITYCLASSES,
    REPLICASETS,
    SERVICES,
    Kind,
)

# ---------------------------------------------------------------------------------------------
# Names.


@pytest.mark.parametrize(
    ("kind", "name", "ok"),
    [
        (PODS, "web-1", True),
        (PODS, "web.example.com", True),
        (PODS, "a" * 253, True),
        (PODS, "a" * 254, False),
        (PODS, "Web", False),
        (PODS, "web_1", False),
        (PODS, "-web", False),
        (PODS, "web.", False),
        (PODS, "..", False),
        (PODS, "a/b", False),
        (NODES, "node-1.zone-a", True),
        (NAMESPACES, "kube-system", True),
        (NAMESPACES, "a.b", False),
        (NAMESPACES, "a" * 64, False),
        (NAMESPACES, "a" * 63, True),
        (SERVICES, "1svc", False),
        (SERVICES, "svc1", True),
        (DEPLOYMENTS, "", False),
    ],
)
def test_validate_name(kind: Kind, name: str, ok: bool) -> None:
    message = validate_name(kind, name)
    assert (message is None) is ok
    if name and not ok:
        assert message is not None
        assert message.startswith(f'Invalid value: "{name[:40]}')


def test_validate_name_messages() -> None:
    assert "RFC 1123 subdomain" in (validate_name(PODS, "Bad") or "")
    assert "RFC 1123 label" in (validate_name(NAMESPACES, "a.b") or "")
    assert "no more than 253" in (validate_name(PODS, "a" * 300) or "")
    assert (validate_name(PODS, "") or "").startswith("Required value")


# ---------------------------------------------------------------------------------------------
# Unknown fields.


def _pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "namespace": "default",
            "labels": {"any/key": "v"},
            "annotations": {"x": "y"},
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:metadata": {}}}],
        },
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "nginx",
                    "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": 1}, "requests": {"memory": "1Gi"}},
                    "ports": [{"containerPort": 80}],
                }
            ],
            "nodeSelector": {"disk": "ssd"},
            **spec,
        },
        "status": {"phase": "Pending"},
    }


def test_unknown_fields_accepts_real_objects() -> None:
    assert unknown_fields(PODS, _pod()) == []
    node = {
        "metadata": {"name": "n"},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "podCIDRs": ["10.0.0.0/24"]},
        "status": {
            "capacity": {"cpu": "4", "pods": "110"},
            "allocatable": {"cpu": "4"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2024-01-01T00:00:00Z"}],
            "nodeInfo": {"kubeletVersion": "v1.33.0"},
        },
    }
    assert unknown_fields(NODES, node) == []
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"anything": "goes"}}
    assert unknown_fields(CONFIGMAPS, cm) == []
    deploy = {
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "strategy": {"rollingUpdate": {"maxSurge": "25%"}},
            "template": {"metadata": {"labels": {"a": "b"}}, "spec": _pod()["spec"]},
        }
    }
    assert unknown_fields(DEPLOYMENTS, deploy) == []
    lease = {"spec": {"holderIdentity": "x", "renewTime": "2024-01-01T00:00:00.000000Z"}}
    assert unknown_fields(LEASES, lease) == []


def test_unknown_fields_reports_paths() -> None:
    pod = _pod(foo=1)
    pod["spec"]["containers"][0]["imagee"] = "typo"
    pod["spec"]["containers"][0]["ports"][0]["bogus"] = True
    pod["metadata"]["nope"] = {}
    pod["extra"] = 1
    assert unknown_fields(PODS, pod) == [
        "metadata.nope",
        "spec.containers[0].ports[0].bogus",  # document order: ports precedes the added key
        "spec.containers[0].imagee",
        "spec.foo",
        "extra",
    ]


def test_unknown_fields_extra_bodies() -> None:
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}, "deleteOptions": {}}
    assert unknown_fields("Eviction", eviction) == []
    assert unknown_fields("Scale", {"spec": {"replicas": 3}, "oops": 1}) == ["oops"]
    assert unknown_fields("DeleteOptions", {"propagationPolicy": "Background", "gracePeriodSeconds": 0}) == []
    assert unknown_fields("NoSuchKind", {"anything": 1}) == []
    binding = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}}
    assert unknown_fields(BINDINGS, binding) == []


def test_schema_covers_every_kind() -> None:
    doc = json.loads((Path(__file__).parents[2] / "apiserver" / "schema.json").read_text())
    for kind in KINDS:
        assert kind.kind in doc["kinds"], kind.kind
    for extra in ("Eviction", "Scale", "DeleteOptions"):
        assert extra in doc["kinds"]
    # every referenced type has an entry
    for fields in doc["types"].values():
        for code in fields.values():
            name = code.lstrip("[{")
            assert not name or name in doc["types"], name


def test_schema_is_current() -> None:
    pytest.importorskip("kubernetes")

    path = Path(__file__).parents[2] / "scripts" / "gen_schema.py"
    spec = importlib.util.spec_from_file_location("gen_schema", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    on_disk = json.loads((Path(__file__).parents[2] / "apiserver" / "schema.json").read_text())
    assert module.build() == on_disk, "apiserver/schema.json is stale: run scripts/gen_schema.py"


# ---------------------------------------------------------------------------------------------
# Object validation.


def _fields(causes: list[Any]) -> list[tuple[str, str]]:
    return [(c["field"], c["reason"]) for c in causes]


def test_valid_pod() -> None:
    assert validate_object(PODS, _pod()) == []


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": []}, [("spec.containers", "FieldValueRequired")]),
        ({"containers": None}, [("spec.containers", "FieldValueRequired")]),
        ({"containers": [{"name": "c"}]}, [("spec.containers[0].image", "FieldValueRequired")]),
        ({"containers": [{"image": "i"}]}, [("spec.containers[0].name", "FieldValueRequired")]),
        ({"containers": [{"name": "c", "image": ""}]}, [("spec.containers[0].image", "FieldValueRequired")]),
        (
            {"containers": [{"name": "c", "image": "i"}, {"name": "c", "image": "j"}]},
            [("spec.containers[1].name", "FieldValueDuplicate")],
        ),
        ({"containers": [{"name": "C_1", "image": "i"}]}, [("spec.containers[0].name", "FieldValueInvalid")]),
        ({"containers": "nginx"}, [("spec.containers", "FieldValueTypeInvalid")]),
        (
            {"containers": [{"name": "c", "image": "i", "ports": [{"containerPort": 70000}]}]},
            [("spec.containers[0].ports[0].containerPort", "FieldValueInvalid")],
        ),
        (
            {"containers": [{"name": "c", "image": "i"}], "restartPolicy": "Sometimes"},
            [("spec.restartPolicy", "FieldValueNotSupported")],
        ),
        (
            {"containers": [{"name": "c", "image": "i"}], "tolerations": [{"key": "k", "operator": "Maybe"}]},
            [("spec.tolerations[0].operator", "FieldValueNotSupported")],
        ),
        (
            {
                "containers": [{"name": "c", "image": "i"}],
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}],
            },
            [("spec.tolerations[0].effect", "FieldValueInvalid")],
        ),
        (
            {"containers": [{"name": "c", "image": "i"}], "priority": "high"},
            [("spec.priority", "FieldValueTypeInvalid")],
        ),
    ],
)
def test_invalid_pod_specs(spec: dict[str, Any], expected: list[tuple[str, str]]) -> None:
    pod = {"metadata": {"name": "p"}, "spec": spec}
    assert _fields(validate_object(PODS, pod)) == expected


def test_pod_tolerations_of_default_admission_are_valid() -> None:
    spec = {
        "containers": [{"name": "c", "image": "i"}],
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {"operator": "Exists"},
        ],
    }
    assert validate_object(PODS, {"metadata": {"name": "p"}, "spec": spec}) == []


def test_pod_without_spec_and_bad_top_level_shapes() -> None:
    assert _fields(validate_object(PODS, {"metadata": {"name": "p"}})) == [("spec", "FieldValueRequired")]
    assert _fields(validate_object(PODS, {"metadata": "p", "spec": []})) == [
        ("metadata", "FieldValueTypeInvalid"),
        ("spec", "FieldValueTypeInvalid"),
    ]


def test_metadata_checks() -> None:
    cm = {
        "metadata": {
            "name": "c",
            "labels": {"app": 1, "bad key": "v", "ok": "-bad"},
            "annotations": {"a": 2},
            "finalizers": ["x", 3],
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs"}],
        }
    }
    assert _fields(validate_object(CONFIGMAPS, cm)) == [
        ("metadata.labels[app]", "FieldValueTypeInvalid"),
        ("metadata.labels", "FieldValueInvalid"),
        ("metadata.labels", "FieldValueInvalid"),
        ("metadata.annotations[a]", "FieldValueTypeInvalid"),
        ("metadata.finalizers[1]", "FieldValueTypeInvalid"),
        ("metadata.ownerReferences[0].uid", "FieldValueRequired"),
    ]


def _workload(kind: str, **overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web", "extra": "x"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        },
    }
    if kind != "DaemonSet":
        spec["replicas"] = 1
    spec.update(overrides)
    return {"metadata": {"name": "w"}, "spec": spec}


@pytest.mark.parametrize("kind", [DEPLOYMENTS, REPLICASETS, DAEMONSETS])
def test_workloads(kind: Kind) -> None:
    assert validate_object(kind, _workload(kind.kind)) == []
    assert _fields(validate_object(kind, _workload(kind.kind, selector=None))) == [
        ("spec.selector", "FieldValueRequired")
    ]
    assert _fields(validate_object(kind, _workload(kind.kind, selector={}))) == [
        ("spec.selector", "FieldValueInvalid")
    ]
    mismatched = _workload(kind.kind, selector={"matchLabels": {"app": "db"}})
    assert _fields(validate_object(kind, mismatched)) == [("spec.template.metadata.labels", "FieldValueInvalid")]
    bad_op = _workload(kind.kind, selector={"matchExpressions": [{"key": "a", "operator": "Near"}]})
    assert _fields(validate_object(kind, bad_op)) == [("spec.selector", "FieldValueInvalid")]
    no_template = _workload(kind.kind, template=None)
    assert _fields(validate_object(kind, no_template)) == [("spec.template", "FieldValueRequired")]
    no_image = _workload(kind.kind)
    del no_image["spec"]["template"]["spec"]["containers"][0]["image"]
    assert _fields(validate_object(kind, no_image)) == [
        ("spec.template.spec.containers[0].image", "FieldValueRequired")
    ]
    never = _workload(kind.kind)
    never["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    assert _fields(validate_object(kind, never)) == [("spec.template.spec.restartPolicy", "FieldValueNotSupported")]
    assert _fields(validate_object(kind, {"metadata": {"name": "w"}})) == [("spec", "FieldValueRequired")]


def test_deployment_specifics() -> None:
    assert _fields(validate_object(DEPLOYMENTS, _workload("Deployment", replicas=-1))) == [
        ("spec.replicas", "FieldValueInvalid")
    ]
    assert _fields(validate_object(DEPLOYMENTS, _workload("Deployment", strategy={"type": "Blue"}))) == [
        ("spec.strategy.type", "FieldValueNotSupported")
    ]


def test_node() -> None:
    node: dict[str, Any] = {
        "metadata": {"name": "n"},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "unschedulable": True},
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}],
            "addresses": [{"type": "Hostname", "address": "n"}],
        },
    }
    assert validate_object(NODES, node) == []
    node["spec"]["taints"] = [{"key": "k"}, {"effect": "NoExecute"}, {"key": "k", "effect": "Sometimes"}]
    node["spec"]["unschedulable"] = "yes"
    node["status"]["conditions"] = [{"type": "Ready"}]
    assert _fields(validate_object(NODES, node)) == [
        ("spec.unschedulable", "FieldValueTypeInvalid"),
        ("spec.taints[0].effect", "FieldValueRequired"),
        ("spec.taints[1].key", "FieldValueRequired"),
        ("spec.taints[2].effect", "FieldValueNotSupported"),
        ("status.conditions[0].status", "FieldValueRequired"),
    ]
    dup = {"metadata": {"name": "n"}, "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}] * 2}}
    assert _fields(validate_object(NODES, dup)) == [("spec.taints[1]", "FieldValueDuplicate")]


def test_lease_event_priorityclass_binding() -> None:
    lease: dict[str, Any] = {"metadata": {"name": "n"}, "spec": {"holderIdentity": "n", "leaseDurationSeconds": 40}}
    assert validate_object(LEASES, lease) == []
    lease["spec"]["leaseDurationSeconds"] = 0
    assert _fields(validate_object(LEASES, lease)) == [("spec.leaseDurationSeconds", "FieldValueInvalid")]

    assert _fields(validate_object(EVENTS, {"metadata": {"name": "e"}, "reason": "X"})) == [
        ("involvedObject", "FieldValueRequired")
    ]
    assert validate_object(EVENTS, {"metadata": {"name": "e"}, "involvedObject": {"kind": "Pod"}, "count": 1}) == []

    assert validate_object(PRIORITYCLASSES, {"metadata": {"name": "high"}, "value": 1000}) == []
    assert _fields(validate_object(PRIORITYCLASSES, {"metadata": {"name": "high"}})) == [
        ("value", "FieldValueRequired")
    ]
    assert _fields(validate_object(PRIORITYCLASSES, {"metadata": {"name": "high"}, "value": True})) == [
        ("value", "FieldValueTypeInvalid")
    ]
    assert _fields(validate_object(PRIORITYCLASSES, {"metadata": {"name": "high"}, "value": 2_000_000_000})) == [
        ("value", "FieldValueForbidden")
    ]
    system = {"metadata": {"name": "system-node-critical"}, "value": 2_000_001_000}
    assert validate_object(PRIORITYCLASSES, system) == []

    assert _fields(validate_object(BINDINGS, {"metadata": {"name": "p"}, "target": {"kind": "Node"}})) == [
        ("target.name", "FieldValueRequired")
    ]


def test_cause_shape() -> None:
    (cause,) = validate_object(PODS, {"metadata": {"name": "p"}, "spec": {"containers": []}})
    assert cause == {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}
    (cause,) = validate_object(
        PODS, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}], "restartPolicy": "X"}}
    )
    assert cause["message"] == 'Unsupported value: "X": supported values: "Always", "OnFailure", "Never"'


# ---------------------------------------------------------------------------------------------
# Admission keeps valid objects valid: the registry validates before admission only.

_CONTAINER = st.fixed_dictionaries(
    {"name": st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True), "image": st.just("img:1")},
    optional={
        "ports": st.lists(st.fixed_dictionaries({"containerPort": st.integers(1, 65535)},
                                                optional={"protocol": st.sampled_from(["TCP", "UDP"])}),
                          max_size=2),
        "resources": st.fixed_dictionaries({}, optional={
            part: st.dictionaries(st.sampled_from(["cpu", "memory"]), st.sampled_from(["100m", "1", "64Mi"]))
            for part in ("requests", "limits")}),
    },
)
_TOLERATION = st.one_of(
    st.fixed_dictionaries({"operator": st.just("Exists")}, optional={"effect": st.just("NoSchedule")}),
    st.fixed_dictionaries({"key": st.just("k"), "operator": st.just("Equal"), "value": st.just("v"),
                           "effect": st.just("NoExecute")}, optional={"tolerationSeconds": st.integers(0, 600)}),
)


@given(
    containers=st.lists(_CONTAINER, min_size=1, max_size=3, unique_by=lambda c: str(c["name"])),
    restart=st.sampled_from([None, "Always", "OnFailure", "Never"]),
    tolerations=st.lists(_TOLERATION, max_size=2),
    priority_class=st.sampled_from([None, "high"]),
)
def test_admitted_pods_stay_valid(containers: list[dict[str, Any]], restart: str | None,
                                  tolerations: list[dict[str, Any]], priority_class: str | None) -> None:
    spec: dict[str, Any] = {"containers": containers}
    if restart is not None:
        spec["restartPolicy"] = restart
    if tolerations:
        spec["tolerations"] = tolerations
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    pod = {"metadata": {"name": "p"}, "spec": spec}
    assert validate_object(PODS, pod) == []
    high: dict[str, Any] = {"metadata": {"name": "high"}, "value": 1000}
    admission.admit_create(PODS, pod, priority=lambda name: high if name == "high" else None,
                           priority_classes=[high])
    assert validate_object(PODS, pod) == []


@pytest.mark.parametrize("kind", [DEPLOYMENTS, REPLICASETS, DAEMONSETS])
def test_admitted_workloads_stay_valid(kind: Kind) -> None:
    obj = _workload(kind.kind)
    admission.admit_create(kind, obj, priority=lambda name: None, priority_classes=[])
    assert validate_object(kind, obj) == []


def test_admitted_namespace_stays_valid() -> None:
    ns: dict[str, Any] = {"metadata": {"name": "ns"}}
    admission.admit_create(NAMESPACES, ns, priority=lambda name: None, priority_classes=[])
    assert validate_object(NAMESPACES, ns) == []

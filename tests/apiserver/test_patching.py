"""PATCH semantics: merge patch, JSON patch, strategic merge patch (kubectl's bodies), apply."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kubemesh.apiserver.patching import (
    PatchError,
    apply_json_patch,
    apply_merge_patch,
    apply_server_side_apply,
    apply_strategic_merge_patch,
    field_rule,
)
from kubemesh.services.model.kinds import CONFIGMAPS, DEPLOYMENTS, NODES, PODDISRUPTIONBUDGETS, PODS

# ---------------------------------------------------------------------------------------------
# Helpers: JSON strategies and aliasing checks.

_scalar = st.one_of(st.booleans(), st.integers(-5, 5), st.text("abc", max_size=3))
_json = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text("abcd", max_size=2), inner, max_size=3)
    ),
    max_leaves=12,
)
_doc = st.dictionaries(st.text("abcd", max_size=2), _json, max_size=4)


def _containers(value: Any) -> list[int]:
    """ids of every dict and list inside a JSON value."""
    out: list[int] = []
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            out.append(id(v))
            stack.extend(v.values())
        elif isinstance(v, list):
            out.append(id(v))
            stack.extend(v)
    return out


def _assert_no_sharing(result: Any, *inputs: Any) -> None:
    owned = set(_containers(result))
    for i in inputs:
        assert not owned & set(_containers(i)), "result shares a container with an input"


def _merge_diff(a: Any, b: Any) -> Any:
    """An RFC 7386 patch that turns a into b (b holds no nulls)."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return copy.deepcopy(b)
    patch: dict[str, Any] = {k: None for k in a if k not in b}
    for k, v in b.items():
        if k not in a:
            patch[k] = copy.deepcopy(v)
        elif a[k] != v or type(a[k]) is not type(v):
            patch[k] = _merge_diff(a[k], v)
    return patch


# ---------------------------------------------------------------------------------------------
# JSON merge patch.


def test_merge_patch_basics() -> None:
    target: dict[str, Any] = {"metadata": {"labels": {"app": "web", "x": "1"}}, "spec": {"list": [1, 2]}}
    out = apply_merge_patch(target, {"metadata": {"labels": {"app": None, "new": "y"}}, "spec": {"list": [3]}})
    assert out == {"metadata": {"labels": {"x": "1", "new": "y"}}, "spec": {"list": [3]}}
    assert target["metadata"]["labels"]["app"] == "web"  # input untouched
    _assert_no_sharing(out, target)


def test_merge_patch_kubectl_label_and_scale() -> None:
    node = {"metadata": {"name": "node1", "labels": {"app": "a"}}}
    assert apply_merge_patch(node, {"metadata": {"labels": {"foo": "bar"}}})["metadata"]["labels"] == {
        "app": "a",
        "foo": "bar",
    }
    assert apply_merge_patch(node, {"metadata": {"labels": {"app": None}}})["metadata"]["labels"] == {}
    scale = {"spec": {"replicas": 1}, "status": {"replicas": 1}}
    assert apply_merge_patch(scale, {"spec": {"replicas": 3}})["spec"]["replicas"] == 3


def test_merge_patch_rejects_non_objects() -> None:
    with pytest.raises(PatchError) as err:
        apply_merge_patch({}, [1])
    assert err.value.code == 400


@given(_doc, _doc)
def test_merge_patch_of_diff_gives_target(a: dict[str, Any], b: dict[str, Any]) -> None:
    before = copy.deepcopy(a)
    out = apply_merge_patch(a, _merge_diff(a, b))
    assert out == b
    assert a == before
    _assert_no_sharing(out, a)


@given(_doc)
def test_merge_patch_empty_is_identity(a: dict[str, Any]) -> None:
    assert apply_merge_patch(a, {}) == a


# ---------------------------------------------------------------------------------------------
# JSON patch.


def test_json_patch_operations() -> None:
    doc = {"a": {"b": [1, 2, 3]}, "c": "x", "d~/e": 1}
    ops = [
        {"op": "add", "path": "/a/b/1", "value": 9},
        {"op": "add", "path": "/a/b/-", "value": 10},
        {"op": "remove", "path": "/a/b/0"},
        {"op": "replace", "path": "/c", "value": {"y": 1}},
        {"op": "move", "from": "/c", "path": "/m"},
        {"op": "copy", "from": "/a/b", "path": "/copied"},
        {"op": "test", "path": "/d~0~1e", "value": 1.0},
        {"op": "add", "path": "/new", "value": None},
    ]
    out = apply_json_patch(doc, ops)
    assert out == {"a": {"b": [9, 2, 3, 10]}, "m": {"y": 1}, "copied": [9, 2, 3, 10], "d~/e": 1, "new": None}
    assert doc == {"a": {"b": [1, 2, 3]}, "c": "x", "d~/e": 1}
    _assert_no_sharing(out, doc, ops)
    assert out["copied"] is not out["a"]["b"]


@pytest.mark.parametrize(
    ("ops", "code"),
    [
        ([{"op": "test", "path": "/a", "value": 2}], 422),
        ([{"op": "test", "path": "/a", "value": True}], 422),  # booleans are not numbers
        ([{"op": "remove", "path": "/missing"}], 422),
        ([{"op": "replace", "path": "/missing", "value": 1}], 422),
        ([{"op": "add", "path": "/x/y", "value": 1}], 422),
        ([{"op": "add", "path": "/l/5", "value": 1}], 422),
        ([{"op": "add", "path": "/l/01", "value": 1}], 422),
        ([{"op": "remove", "path": "/l/-"}], 422),
        ([{"op": "move", "from": "/l", "path": "/l/0"}], 422),
        ([{"op": "replace", "path": "", "value": [1]}], 422),
        ([{"op": "bogus", "path": "/a"}], 400),
        ([{"op": "add", "path": "a", "value": 1}], 400),
        ([{"op": "add", "path": "/a"}], 400),
        ([{"op": "copy", "path": "/a"}], 400),
        ([{"path": "/a"}], 400),
        (["add"], 400),
        ({"op": "add"}, 400),
    ],
)
def test_json_patch_errors(ops: Any, code: int) -> None:
    doc = {"a": 1, "l": [1]}
    with pytest.raises(PatchError) as err:
        apply_json_patch(doc, ops)
    assert err.value.code == code
    assert doc == {"a": 1, "l": [1]}


def test_json_patch_is_atomic_and_root_ops() -> None:
    doc = {"a": 1}
    with pytest.raises(PatchError):
        apply_json_patch(doc, [{"op": "remove", "path": "/a"}, {"op": "test", "path": "/a", "value": 1}])
    assert doc == {"a": 1}
    assert apply_json_patch(doc, [{"op": "replace", "path": "", "value": {"b": 2}}]) == {"b": 2}
    assert apply_json_patch(doc, [{"op": "move", "from": "/a", "path": "/a"}]) == {"a": 1}


@given(_doc, _doc)
def test_json_patch_add_then_remove_roundtrips(a: dict[str, Any], b: dict[str, Any]) -> None:
    key = "zz~/"
    pointer = "/zz~0~1"
    added = apply_json_patch(a, [{"op": "add", "path": pointer, "value": b}])
    assert added[key] == b
    assert apply_json_patch(added, [{"op": "test", "path": pointer, "value": b}]) == added
    assert apply_json_patch(added, [{"op": "remove", "path": pointer}]) == a
    _assert_no_sharing(added, a, b)


@given(_doc)
def test_json_patch_replace_every_key_with_itself(a: dict[str, Any]) -> None:
    ops = [{"op": "replace", "path": "/" + k.replace("~", "~0").replace("/", "~1"), "value": v} for k, v in a.items()]
    assert apply_json_patch(a, ops) == a


# ---------------------------------------------------------------------------------------------
# Strategic merge patch: kubectl's bodies (API surface, section 13).


def _deployment() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "annotations": {"keep": "me"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {
                            "name": "nginx",
                            "image": "nginx:1.25",
                            "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "x"}],
                            "ports": [{"containerPort": 80}],
                        },
                        {"name": "sidecar", "image": "busybox"},
                    ],
                },
            },
        },
        "status": {"replicas": 2},
    }


def test_smp_kubectl_apply_with_set_element_order() -> None:
    live = _deployment()
    body = json.loads(
        '{"metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"}},'
        '"spec":{"template":{"spec":{"$setElementOrder/containers":[{"name":"nginx"}],'
        '"containers":[{"$setElementOrder/env":[{"name":"A"}],"env":[{"name":"A","value":"2"}],'
        '"image":"nginx:1.26","name":"nginx"}]}}}}'
    )
    before = copy.deepcopy(live)
    out = apply_strategic_merge_patch(live, body, kind=DEPLOYMENTS)
    assert live == before
    _assert_no_sharing(out, live, body)
    containers = out["spec"]["template"]["spec"]["containers"]
    # The sidecar was not removed by the order directive (kubectl sends $patch: delete for that).
    assert [c["name"] for c in containers] == ["nginx", "sidecar"]
    nginx = containers[0]
    assert nginx["image"] == "nginx:1.26"
    assert nginx["env"] == [{"name": "A", "value": "2"}, {"name": "B", "value": "x"}]
    assert nginx["ports"] == [{"containerPort": 80}]
    assert out["metadata"]["annotations"] == {"keep": "me", "kubectl.kubernetes.io/last-applied-configuration": "{}"}
    assert not any(k.startswith("$") for c in containers for k in c)
    assert "$setElementOrder/containers" not in out["spec"]["template"]["spec"]


def test_smp_set_element_order_reorders_and_deletes() -> None:
    live = _deployment()
    body = {
        "spec": {
            "template": {
                "spec": {
                    "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "new"}],
                    "containers": [{"name": "new", "image": "x"}, {"$patch": "delete", "name": "nginx"}],
                }
            }
        }
    }
    out = apply_strategic_merge_patch(live, body, kind=DEPLOYMENTS)
    assert out["spec"]["template"]["spec"]["containers"] == [
        {"name": "sidecar", "image": "busybox"},
        {"name": "new", "image": "x"},
    ]


def test_smp_new_items_without_order_come_first_as_upstream() -> None:
    pod = {"spec": {"containers": [{"name": "a", "image": "1"}, {"name": "b", "image": "2"}]}}
    out = apply_strategic_merge_patch(pod, {"spec": {"containers": [{"name": "c", "image": "3"}]}}, kind=PODS)
    assert [c["name"] for c in out["spec"]["containers"]] == ["c", "a", "b"]
    out = apply_strategic_merge_patch(pod, {"spec": {"containers": [{"name": "b", "image": "9"}]}}, kind=PODS)
    assert out["spec"]["containers"] == [{"name": "a", "image": "1"}, {"name": "b", "image": "9"}]


def _node() -> dict[str, Any]:
    return {
        "metadata": {"name": "node1", "finalizers": ["a"]},
        "spec": {
            "podCIDRs": ["10.0.0.0/24"],
            "taints": [
                {"key": "k", "value": "v", "effect": "NoSchedule"},
                {"key": "k", "value": "v", "effect": "NoExecute"},
            ],
        },
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady"},
                {"type": "MemoryPressure", "status": "False"},
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
        },
    }


def test_smp_taints_are_atomic() -> None:
    node = _node()
    # kubectl taint node node1 k:NoExecute- sends the full new list.
    body = {"spec": {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}}
    out = apply_strategic_merge_patch(node, body, kind=NODES)
    assert out["spec"]["taints"] == [{"key": "k", "value": "v", "effect": "NoSchedule"}]
    # Removing the last taint sends null.
    out = apply_strategic_merge_patch(out, {"spec": {"taints": None}}, kind=NODES)
    assert "taints" not in out["spec"]
    assert out["spec"]["podCIDRs"] == ["10.0.0.0/24"]


def test_smp_cordon_uncordon() -> None:
    node = _node()
    cordoned = apply_strategic_merge_patch(node, {"spec": {"unschedulable": True}}, kind=NODES)
    assert cordoned["spec"]["unschedulable"] is True
    uncordoned = apply_strategic_merge_patch(cordoned, {"spec": {"unschedulable": None}}, kind=NODES)
    assert "unschedulable" not in uncordoned["spec"]
    assert uncordoned == node


def test_smp_node_status_conditions_merge_by_type() -> None:
    node = _node()
    body = {
        "status": {
            "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "MemoryPressure"}],
            "conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}],
        }
    }
    out = apply_strategic_merge_patch(node, body, kind=NODES)
    assert out["status"]["conditions"] == [
        {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"},
        {"type": "MemoryPressure", "status": "False"},
    ]
    out = apply_strategic_merge_patch(
        node, {"status": {"conditions": [{"type": "DiskPressure", "status": "False"}]}}, kind=NODES
    )
    assert [c["type"] for c in out["status"]["conditions"]] == ["DiskPressure", "Ready", "MemoryPressure"]


def test_smp_primitive_lists() -> None:
    node = _node()
    out = apply_strategic_merge_patch(node, {"metadata": {"finalizers": ["b", "a"]}}, kind=NODES)
    assert sorted(out["metadata"]["finalizers"]) == ["a", "b"]
    assert len(out["metadata"]["finalizers"]) == 2
    out = apply_strategic_merge_patch(out, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}, kind=NODES)
    assert out["metadata"]["finalizers"] == ["b"]
    out = apply_strategic_merge_patch(
        node,
        {"metadata": {"$setElementOrder/finalizers": ["c", "a"], "finalizers": ["c"]}},
        kind=NODES,
    )
    assert out["metadata"]["finalizers"] == ["c", "a"]
    out = apply_strategic_merge_patch(node, {"spec": {"podCIDRs": ["fd00::/64"]}}, kind=NODES)
    assert set(out["spec"]["podCIDRs"]) == {"10.0.0.0/24", "fd00::/64"}


def test_smp_pod_status_lists() -> None:
    pod: dict[str, Any] = {
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [{"name": "c", "ready": False, "restartCount": 0}],
            "podIPs": [{"ip": "10.0.0.5"}],
        },
    }
    body = {
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [{"name": "c", "ready": True, "restartCount": 0, "image": "i"}],
        }
    }
    out = apply_strategic_merge_patch(pod, body, kind=PODS)
    assert {c["type"]: c["status"] for c in out["status"]["conditions"]} == {"Ready": "True", "PodScheduled": "True"}
    assert out["status"]["containerStatuses"] == [{"name": "c", "ready": True, "restartCount": 0, "image": "i"}]
    assert out["status"]["podIPs"] == [{"ip": "10.0.0.5"}]
    # tolerations are atomic
    pod["spec"]["tolerations"] = [{"key": "a", "operator": "Exists"}]
    out = apply_strategic_merge_patch(pod, {"spec": {"tolerations": [{"key": "b", "operator": "Exists"}]}}, kind=PODS)
    assert out["spec"]["tolerations"] == [{"key": "b", "operator": "Exists"}]


def test_smp_directives_on_maps_and_lists() -> None:
    dep = _deployment()
    # $retainKeys: switching the strategy to Recreate clears rollingUpdate.
    out = apply_strategic_merge_patch(
        dep, {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}, kind=DEPLOYMENTS
    )
    assert out["spec"]["strategy"] == {"type": "Recreate"}
    # $patch: replace on a map.
    out = apply_strategic_merge_patch(
        dep, {"metadata": {"annotations": {"$patch": "replace", "only": "this"}}}, kind=DEPLOYMENTS
    )
    assert out["metadata"]["annotations"] == {"only": "this"}
    # $patch: delete on a map empties it.
    out = apply_strategic_merge_patch(dep, {"spec": {"strategy": {"$patch": "delete"}}}, kind=DEPLOYMENTS)
    assert out["spec"]["strategy"] == {}
    # $patch: replace as a list element replaces the list.
    body: dict[str, Any] = {
        "spec": {
            "template": {"spec": {"containers": [{"$patch": "replace"}, {"name": "only", "image": "x"}]}}
        }
    }
    out = apply_strategic_merge_patch(dep, body, kind=DEPLOYMENTS)
    assert out["spec"]["template"]["spec"]["containers"] == [{"name": "only", "image": "x"}]
    # null inside a keyed element deletes that field of the element.
    body = {"spec": {"template": {"spec": {"containers": [{"name": "nginx", "ports": None}]}}}}
    out = apply_strategic_merge_patch(dep, body, kind=DEPLOYMENTS)
    assert "ports" not in out["spec"]["template"]["spec"]["containers"][0]
    # env elements merge by name inside containers.
    env_patch = [{"name": "B", "value": None}]
    body = {"spec": {"template": {"spec": {"containers": [{"name": "nginx", "env": env_patch}]}}}}
    out = apply_strategic_merge_patch(dep, body, kind=DEPLOYMENTS)
    assert out["spec"]["template"]["spec"]["containers"][0]["env"] == [{"name": "A", "value": "1"}, {"name": "B"}]


def test_smp_values_new_to_the_target_carry_no_nulls_or_directives() -> None:
    out = apply_strategic_merge_patch(
        {"metadata": {"name": "x"}},
        {"spec": {"a": None, "b": {"$patch": "replace", "c": 1}, "containers": [{"name": "n", "x": None}]}},
        kind=PODS,
    )
    assert out["spec"] == {"b": {"c": 1}, "containers": [{"name": "n"}]}


def test_smp_pdb_selector_is_replaced() -> None:
    pdb = {"spec": {"selector": {"matchLabels": {"a": "1"}}, "minAvailable": 1}}
    out = apply_strategic_merge_patch(
        pdb,
        {"spec": {"selector": {"matchExpressions": [{"key": "b", "operator": "Exists"}]}}},
        kind=PODDISRUPTIONBUDGETS,
    )
    assert out["spec"]["selector"] == {"matchExpressions": [{"key": "b", "operator": "Exists"}]}


@pytest.mark.parametrize(
    "body",
    [
        {"spec": {"containers": [{"image": "no-name"}]}},
        {"spec": {"containers": [{"$patch": "delete"}]}},
        {"spec": {"containers": [{"$patch": "merge", "name": "a"}]}},
        {"spec": {"containers": ["not-a-map"]}},
        {"spec": {"$patch": "bogus"}},
        {"spec": {"$retainKeys": ["a"], "b": 1}},
        {"spec": {"$retainKeys": "a"}},
        {"metadata": {"finalizers": [{"a": 1}]}},
        {"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}},
        {"spec": {"$setElementOrder/containers": [{"image": "x"}]}},
    ],
)
def test_smp_malformed(body: dict[str, Any]) -> None:
    pod = {"metadata": {"finalizers": ["a"]}, "spec": {"containers": [{"name": "a", "image": "i"}]}}
    with pytest.raises(PatchError) as err:
        apply_strategic_merge_patch(pod, body, kind=PODS)
    assert err.value.code == 400


def test_smp_rule_table_paths() -> None:
    assert field_rule("Pod", ("spec", "containers")).merge_key == "name"
    assert field_rule("Deployment", ("spec", "template", "spec", "containers")).merge_key == "name"
    assert field_rule("Deployment", ("spec", "template", "spec", "containers", "ports")).merge_key == "containerPort"
    assert field_rule("DaemonSet", ("spec", "template", "spec", "volumes")).retain_keys
    assert field_rule("Node", ("spec", "taints")).merge_key is None
    assert field_rule("Node", ("spec", "podCIDRs")).primitive_merge
    assert field_rule("Pod", ("status", "containerStatuses")).merge_key is None
    assert field_rule("ConfigMap", ("metadata", "ownerReferences")).merge_key == "uid"
    assert field_rule("Unknown", ("metadata", "finalizers")).primitive_merge
    assert field_rule("Service", ("spec", "ports")).merge_key == "port"


@given(_doc, _doc)
def test_smp_without_lists_is_a_merge_patch(a: dict[str, Any], b: dict[str, Any]) -> None:
    # On a kind without rules, maps behave as in RFC 7386 and lists are atomic.
    def no_dollar(v: Any) -> Any:
        if isinstance(v, dict):
            return {k.replace("$", ""): no_dollar(x) for k, x in v.items()}
        if isinstance(v, list):
            return [no_dollar(x) for x in v]
        return v

    a, b = no_dollar(a), no_dollar(b)
    patch = _merge_diff(a, b)
    out = apply_strategic_merge_patch(a, patch, kind=CONFIGMAPS)
    assert out == b
    _assert_no_sharing(out, a, patch)


# ---------------------------------------------------------------------------------------------
# Server-side apply stand-in.


def test_server_side_apply_creates_and_merges() -> None:
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1"}, "data": {"a": "1", "b": None}}
    created = apply_server_side_apply(None, body, kind=CONFIGMAPS)
    assert created == {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm1"}, "data": {"a": "1"}}
    _assert_no_sharing(created, body)
    live = {**created, "metadata": {"name": "cm1", "resourceVersion": "5", "uid": "u"}}
    merged = apply_server_side_apply(live, {"metadata": {"name": "cm1"}, "data": {"c": "3"}}, kind=CONFIGMAPS)
    assert merged["data"] == {"a": "1", "c": "3"}
    assert merged["metadata"]["uid"] == "u"


def test_server_side_apply_keyed_lists() -> None:
    live = _deployment()
    applied = {
        "spec": {"template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.27"}]}}},
    }
    out = apply_server_side_apply(live, applied, kind=DEPLOYMENTS)
    containers = out["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["nginx", "sidecar"]
    assert containers[0]["image"] == "nginx:1.27"
    assert containers[0]["env"][0] == {"name": "A", "value": "1"}
    with pytest.raises(PatchError):
        apply_server_side_apply(live, [], kind=DEPLOYMENTS)  # type: ignore[arg-type]

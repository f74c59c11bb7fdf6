"""The least-privilege report's logic: the minimal rules for what was done, denials, unused grants."""

from __future__ import annotations

from typing import Any

from kubemesh.services.tools.rbac_cli import build_report, minimal_rules, render

USER = "system:serviceaccount:ops:op"


def req(verb: str, group: str, resource: str, *, ns: str = "ops", name: str = "", sub: str = "",
        allowed: bool = True, user: str = USER) -> dict[str, Any]:
    return {"type": "request", "user": user, "attributes": {
        "verb": verb, "group": group, "resource": resource, "subresource": sub, "namespace": ns, "name": name,
        "allowed": allowed}}


def test_minimal_rules_keep_names_only_where_every_request_named_one() -> None:
    done = [("list", "coordination.k8s.io", "leases", "", "ops", ""),
            ("get", "coordination.k8s.io", "leases", "", "ops", "op"),
            ("update", "coordination.k8s.io", "leases", "", "ops", "op"),
            ("create", "coordination.k8s.io", "leases", "", "ops", ""),
            ("get", "", "pods", "log", "ops", "p1"), ("list", "", "configmaps", "", "ops", ""),
            ("list", "", "pods", "", "ops", "")]
    assert minimal_rules(done) == [
        {"apiGroups": [""], "resources": ["configmaps", "pods"], "verbs": ["list"]},
        {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"], "resourceNames": ["p1"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create", "list"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "update"],
         "resourceNames": ["op"]},
    ]


def test_report_lists_denials_unused_grants_and_a_role_of_the_one_namespace() -> None:
    records = [req("list", "coordination.k8s.io", "leases", allowed=False), req("get", "", "pods", name="p"),
               req("get", "", "pods", name="p"), req("list", "", "secrets", user="someone-else"),
               {"type": "write", "resource": "pods"}]
    granted = [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]},
               {"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]},
               {"apiGroups": ["authorization.k8s.io"], "resources": ["selfsubjectaccessreviews"], "verbs": ["create"]}]
    report = build_report(USER, records, granted)
    assert report.denied == [("list", "coordination.k8s.io", "leases", "", "ops", "")]
    assert sum(report.requests.values()) == 3
    assert report.unused == [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]}]
    role, binding = report.role
    assert (role["kind"], role["metadata"]["namespace"], binding["kind"]) == ("Role", "ops", "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "op", "namespace": "ops"}]
    text = render(report)
    assert "DENIED   list" in text and "{apiGroups: [coordination.k8s.io], resources: [leases], verbs: [list]}" in text


def test_requests_in_several_namespaces_need_a_cluster_role() -> None:
    report = build_report(USER, [req("list", "", "pods", ns="a"), req("list", "", "nodes", ns="")], [])
    assert [o["kind"] for o in report.role] == ["ClusterRole", "ClusterRoleBinding"]

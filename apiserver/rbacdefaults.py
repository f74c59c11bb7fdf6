"""The default ClusterRoles and ClusterRoleBindings kube-apiserver creates at start (its RBAC bootstrap policy).

Clients rely on these: every authenticated user may discover the API (`system:discovery`),
read public information (`system:public-info-viewer`) and ask what it may do
(`system:basic-user`); `cluster-admin` is bound to `system:masters`; `admin`, `edit` and
`view` are the user-facing roles, aggregated from the `system:aggregate-to-*` ClusterRoles
(and from any ClusterRole a user labels `rbac.authorization.k8s.io/aggregate-to-<role>`);
the scheduler and the controller-manager have their own roles, bound to their users.

Objects carry `kubernetes.io/bootstrapping: rbac-defaults` and are created only when missing
(a restart over a data directory keeps a user's edits, as upstream does with autoupdate off).
The rules are written for kubemesh's served kinds, after upstream's policy: same names, same
intent, not a copy.
"""

from __future__ import annotations

from typing import Any, Final

from kubemesh.apiserver.history import WRITER
from kubemesh.apiserver.registry import Registry, WriteOptions
from kubemesh.services.model.kinds import CLUSTERROLEBINDINGS, CLUSTERROLES, Obj

_RO: Final = ["get", "list", "watch"]
_RW: Final = ["create", "delete", "deletecollection", "patch", "update"]


def _r(groups: list[str], resources: list[str], verbs: list[str], names: list[str] | None = None) -> Obj:
    out: Obj = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names:
        out["resourceNames"] = names
    return out


def _u(urls: list[str], verbs: list[str]) -> Obj:
    return {"nonResourceURLs": urls, "verbs": verbs}


_VIEW_RULES: Final = [
    _r([""], ["configmaps", "endpoints", "persistentvolumeclaims", "persistentvolumeclaims/status", "pods",
              "replicationcontrollers", "replicationcontrollers/scale", "serviceaccounts", "services",
              "services/status"], _RO),
    _r([""], ["bindings", "events", "limitranges", "namespaces/status", "pods/log", "pods/status",
              "replicationcontrollers/status", "resourcequotas", "resourcequotas/status"], _RO),
    _r([""], ["namespaces"], _RO),
    _r(["discovery.k8s.io"], ["endpointslices"], _RO),
    _r(["apps"], ["controllerrevisions", "daemonsets", "daemonsets/status", "deployments", "deployments/scale",
                  "deployments/status", "replicasets", "replicasets/scale", "replicasets/status", "statefulsets",
                  "statefulsets/scale", "statefulsets/status"], _RO),
    _r(["autoscaling"], ["horizontalpodautoscalers", "horizontalpodautoscalers/status"], _RO),
    _r(["batch"], ["cronjobs", "cronjobs/status", "jobs", "jobs/status"], _RO),
    _r(["policy"], ["poddisruptionbudgets", "poddisruptionbudgets/status"], _RO),
    _r(["networking.k8s.io"], ["ingresses", "ingresses/status", "networkpolicies"], _RO),
]
_EDIT_RULES: Final = [
    _r([""], ["pods/attach", "pods/exec", "pods/portforward", "pods/proxy", "secrets", "services/proxy"], _RO),
    _r([""], ["serviceaccounts"], ["impersonate"]),
    _r([""], ["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"], _RW),
    _r([""], ["pods/eviction"], ["create"]),
    _r([""], ["configmaps", "events", "persistentvolumeclaims", "replicationcontrollers",
              "replicationcontrollers/scale", "secrets", "serviceaccounts", "services", "services/proxy"], _RW),
    _r([""], ["serviceaccounts/token"], ["create"]),
    _r(["apps"], ["daemonsets", "deployments", "deployments/rollback", "deployments/scale", "replicasets",
                  "replicasets/scale", "statefulsets", "statefulsets/scale"], _RW),
    _r(["autoscaling"], ["horizontalpodautoscalers"], _RW),
    _r(["batch"], ["cronjobs", "jobs"], _RW),
    _r(["policy"], ["poddisruptionbudgets"], _RW),
    _r(["networking.k8s.io"], ["ingresses", "networkpolicies"], _RW),
    _r(["coordination.k8s.io"], ["leases"], [*_RO, *_RW]),
    _r(["discovery.k8s.io"], ["endpointslices"], _RW),
]
_ADMIN_RULES: Final = [
    _r(["authorization.k8s.io"], ["localsubjectaccessreviews"], ["create"]),
    _r(["rbac.authorization.k8s.io"], ["rolebindings", "roles"], [*_RO, *_RW]),
]


def _role(name: str, rules: list[Obj], *, labels: dict[str, str] | None = None,
          aggregate_from: str | None = None) -> Obj:
    obj: Obj = {"metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults",
                                                      **(labels or {})},
                             "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
                "rules": rules}
    if aggregate_from is not None:
        obj["aggregationRule"] = {"clusterRoleSelectors": [
            {"matchLabels": {f"rbac.authorization.k8s.io/aggregate-to-{aggregate_from}": "true"}}]}
    return obj


def _binding(name: str, role: str, subjects: list[Obj]) -> Obj:
    out: Obj = {"metadata": {"name": name, "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
                             "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role}}
    if subjects:
        out["subjects"] = subjects
    return out


def _group(name: str) -> Obj:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": name}


def _user(name: str) -> Obj:
    return {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}


_EVENTS: Final = _r(["", "events.k8s.io"], ["events"], ["create", "patch", "update"])
_PODS_MANAGED: Final = _r([""], ["pods"], ["create", "delete", "list", "patch", "watch"])

CONTROLLER_ACCOUNTS: Final[dict[str, tuple[str, list[Obj]]]] = {
    # controller (`--controllers` name) -> (its ServiceAccount in kube-system, its
    # system:controller:<account> rules), as upstream's controller roles grant them for what
    # kubemesh's controllers do; reads come from the controller-manager's shared informers
    "node-lifecycle": ("node-controller", [
        _r([""], ["nodes"], ["delete", "get", "list", "patch", "update"]),
        _r([""], ["nodes/status"], ["patch", "update"]),
        _r([""], ["pods/status"], ["patch", "update"]),
        _r([""], ["pods"], ["delete", "list"]), _EVENTS]),
    "taint-eviction": ("taint-eviction-controller", [
        _r([""], ["pods"], ["delete", "get", "list", "watch"]),
        _r([""], ["pods/status"], ["patch", "update"]), _EVENTS]),
    "replicaset": ("replicaset-controller", [
        _r(["apps", "extensions"], ["replicasets"], ["get", "list", "update", "watch"]),
        _r(["apps", "extensions"], ["replicasets/status", "replicasets/finalizers"], ["update"]),
        _PODS_MANAGED, _EVENTS]),
    "replicationcontroller": ("replication-controller", [
        _r([""], ["replicationcontrollers"], ["get", "list", "update", "watch"]),
        _r([""], ["replicationcontrollers/status", "replicationcontrollers/finalizers"], ["update"]),
        _PODS_MANAGED, _EVENTS]),
    "deployment": ("deployment-controller", [
        _r(["apps", "extensions"], ["deployments"], ["get", "list", "patch", "update", "watch"]),
        _r(["apps", "extensions"], ["deployments/status", "deployments/finalizers"], ["update"]),
        _r(["apps", "extensions"], ["replicasets"], ["create", "delete", "get", "list", "patch", "update", "watch"]),
        _r([""], ["pods"], ["get", "list", "update", "watch"]), _EVENTS]),
    "garbage-collector": ("generic-garbage-collector", [_r(["*"], ["*"], ["delete", "get", "list", "patch",
                                                                        "update", "watch"])]),
    "podgc": ("pod-garbage-collector", [
        _r([""], ["pods"], ["delete", "list", "watch"]),
        _r([""], ["pods/status"], ["patch", "update"]),
        _r([""], ["nodes"], ["get", "list", "watch"])]),
    "daemonset": ("daemon-set-controller", [
        _r(["apps", "extensions"], ["daemonsets"], ["get", "list", "watch"]),
        _r(["apps", "extensions"], ["daemonsets/status", "daemonsets/finalizers"], ["update"]),
        _r([""], ["nodes"], ["list", "watch"]), _PODS_MANAGED,
        _r([""], ["pods/binding"], ["create"]),
        _r(["apps"], ["controllerrevisions"], ["create", "delete", "get", "list", "patch", "update", "watch"]),
        _EVENTS]),
    "namespace": ("namespace-controller", [
        _r([""], ["namespaces"], ["delete", "get", "list", "watch"]),
        _r([""], ["namespaces/finalize", "namespaces/status"], ["update"]),
        _r(["*"], ["*"], ["delete", "deletecollection", "get", "list"])]),
    "job": ("job-controller", [
        _r(["batch"], ["jobs"], ["get", "list", "patch", "update", "watch"]),
        _r(["batch"], ["jobs/status", "jobs/finalizers"], ["update"]),
        _PODS_MANAGED, _EVENTS]),
    "cronjob": ("cronjob-controller", [
        _r(["batch"], ["cronjobs"], ["get", "list", "update", "watch"]),
        _r(["batch"], ["jobs"], ["create", "delete", "get", "list", "patch", "update", "watch"]),
        _r(["batch"], ["cronjobs/status", "cronjobs/finalizers"], ["update"]),
        _r([""], ["pods"], ["delete", "list"]), _EVENTS]),
    "ttl-after-finished": ("ttl-after-finished-controller", [
        _r(["batch"], ["jobs"], ["delete", "get", "list", "watch"]), _EVENTS]),
    "statefulset": ("statefulset-controller", [
        _r([""], ["pods"], ["create", "delete", "get", "list", "patch", "update", "watch"]),
        _r(["apps"], ["statefulsets"], ["get", "list", "watch"]),
        _r(["apps"], ["statefulsets/status", "statefulsets/finalizers"], ["update"]),
        _r([""], ["persistentvolumeclaims"], ["create", "get", "patch", "update"]),
        _r(["apps"], ["controllerrevisions"], ["create", "delete", "get", "list", "patch", "update", "watch"]),
        _EVENTS]),
    "endpoint": ("endpoint-controller", [
        _r([""], ["services", "pods"], ["get", "list", "watch"]),
        _r([""], ["endpoints"], ["create", "delete", "get", "list", "update"]),
        _r([""], ["endpoints/restricted"], ["create"]), _EVENTS]),
    "endpointslice": ("endpointslice-controller", [
        _r([""], ["services", "pods", "nodes"], ["get", "list", "watch"]),
        _r([""], ["services/finalizers"], ["update"]),
        _r(["discovery.k8s.io"], ["endpointslices"], ["create", "delete", "get", "list", "update"]), _EVENTS]),
    "clusterrole-aggregation": ("clusterrole-aggregation-controller", [
        _r(["rbac.authorization.k8s.io"], ["clusterroles"], ["escalate", "get", "list", "patch", "update",
                                                                "watch"])]),
}
"""Every controller's ServiceAccount and rules (`controller_account`)."""


def controller_account(controller: str) -> str:
    """The kube-system ServiceAccount a controller acts as (`<name>-controller` for one not in the table)."""
    entry = CONTROLLER_ACCOUNTS.get(controller)
    return entry[0] if entry is not None else f"{controller}-controller"


def _sa(name: str) -> Obj:
    return {"kind": "ServiceAccount", "name": name, "namespace": "kube-system"}


def cluster_roles() -> list[Obj]:
    """The bootstrap ClusterRoles."""
    return [
        _role("cluster-admin", [_r(["*"], ["*"], ["*"]), _u(["*"], ["*"])]),
        _role("admin", [], aggregate_from="admin"),
        _role("edit", [], aggregate_from="edit",
              labels={"rbac.authorization.k8s.io/aggregate-to-admin": "true"}),
        _role("view", [], aggregate_from="view",
              labels={"rbac.authorization.k8s.io/aggregate-to-edit": "true"}),
        _role("system:aggregate-to-admin", _ADMIN_RULES,
              labels={"rbac.authorization.k8s.io/aggregate-to-admin": "true"}),
        _role("system:aggregate-to-edit", _EDIT_RULES,
              labels={"rbac.authorization.k8s.io/aggregate-to-edit": "true"}),
        _role("system:aggregate-to-view", _VIEW_RULES,
              labels={"rbac.authorization.k8s.io/aggregate-to-view": "true"}),
        _role("system:basic-user", [_r(["authorization.k8s.io"], ["selfsubjectaccessreviews",
                                                                  "selfsubjectrulesreviews"], ["create"]),
                                    _r(["authentication.k8s.io"], ["selfsubjectreviews"], ["create"])]),
        _role("system:discovery", [_u(["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi",
                                       "/openapi/*", "/readyz", "/version", "/version/"], ["get"])]),
        _role("system:public-info-viewer", [_u(["/healthz", "/livez", "/readyz", "/version", "/version/"],
                                               ["get"])]),
        _role("system:kube-scheduler", [
            _r(["", "events.k8s.io"], ["events"], ["create", "patch", "update"]),
            _r(["coordination.k8s.io"], ["leases"], ["create"]),
            _r(["coordination.k8s.io"], ["leases"], ["get", "update"], ["kube-scheduler"]),
            _r([""], ["nodes"], _RO),
            _r([""], ["pods"], ["delete", *_RO]),
            _r([""], ["bindings", "pods/binding"], ["create"]),
            _r([""], ["pods/status"], ["patch", "update"]),
            _r([""], ["replicationcontrollers", "services"], _RO),
            _r(["apps", "extensions"], ["replicasets"], _RO),
            _r(["apps"], ["statefulsets"], _RO),
            _r(["policy"], ["poddisruptionbudgets"], _RO),
            _r([""], ["persistentvolumeclaims", "persistentvolumes"], _RO),
            _r(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
            _r(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
            _r(["storage.k8s.io"], ["csinodes", "csidrivers", "csistoragecapacities", "storageclasses"], _RO),
            _r([""], ["namespaces"], _RO),
            _r(["scheduling.k8s.io"], ["priorityclasses"], _RO),
            _r(["resource.k8s.io"], ["*"], _RO),
        ]),
        _role("system:kube-controller-manager", [
            _r(["", "events.k8s.io"], ["events"], ["create", "patch", "update"]),
            _r(["coordination.k8s.io"], ["leases"], ["create"]),
            _r(["coordination.k8s.io"], ["leases"], ["get", "update"], ["kube-controller-manager"]),
            _r([""], ["secrets", "serviceaccounts"], ["create"]),
            _r([""], ["secrets"], ["delete"]),
            _r([""], ["configmaps", "namespaces", "secrets", "serviceaccounts"], ["get"]),
            _r([""], ["secrets", "serviceaccounts"], ["update"]),
            _r(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
            _r(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
            _r(["*"], ["*"], ["list", "watch"]),
            _r([""], ["serviceaccounts/token"], ["create"]),
        ]),
        *(_role(f"system:controller:{account}", rules) for account, rules in CONTROLLER_ACCOUNTS.values()),
        _role("kubemesh:component", [_u(["/kubemesh/*", "/clock"], ["get", "post", "put", "patch", "delete"])]),
        _role("system:node", [
            _r(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
            _r(["authorization.k8s.io"], ["localsubjectaccessreviews", "subjectaccessreviews"], ["create"]),
            _r([""], ["services"], _RO),
            _r([""], ["nodes"], ["create", "get", "list", "watch"]),
            _r([""], ["nodes/status"], ["patch", "update"]),
            _r([""], ["nodes"], ["patch", "update"]),
            _r(["", "events.k8s.io"], ["events"], ["create", "patch", "update"]),
            _r([""], ["pods"], _RO),
            _r([""], ["pods"], ["create", "delete"]),
            _r([""], ["pods/status"], ["patch", "update"]),
            _r([""], ["pods/eviction"], ["create"]),
            _r([""], ["configmaps", "secrets"], ["get", "list", "watch"]),
            _r([""], ["persistentvolumeclaims", "persistentvolumes"], ["get"]),
            _r([""], ["endpoints"], ["get"]),
            _r(["coordination.k8s.io"], ["leases"], ["create", "delete", "get", "patch", "update"]),
        ]),
    ]


def cluster_role_bindings() -> list[Obj]:
    """The bootstrap ClusterRoleBindings."""
    return [
        _binding("cluster-admin", "cluster-admin", [_group("system:masters")]),
        _binding("system:basic-user", "system:basic-user", [_group("system:authenticated")]),
        _binding("system:discovery", "system:discovery", [_group("system:authenticated")]),
        _binding("system:public-info-viewer", "system:public-info-viewer",
                 [_group("system:authenticated"), _group("system:unauthenticated")]),
        _binding("system:kube-scheduler", "system:kube-scheduler", [_user("system:kube-scheduler")]),
        _binding("system:kube-controller-manager", "system:kube-controller-manager",
                 [_user("system:kube-controller-manager")]),
        # as upstream since 1.8: bound to nobody; the node authorizer (`kubemesh.apiserver.nodeauth`)
        # grants nodes the role's rules, narrowed to what each node's pods refer to
        _binding("system:node", "system:node", []),
        *(_binding(f"system:controller:{account}", f"system:controller:{account}", [_sa(account)])
          for account, _ in CONTROLLER_ACCOUNTS.values()),
        # the mesh's own endpoints: announcing an admin endpoint, reading the cluster clock
        _binding("kubemesh:component", "kubemesh:component", [
            _user("system:kube-scheduler"), _user("system:kube-controller-manager"), _group("system:nodes")]),
    ]


def node_rules() -> list[Obj]:
    """The `system:node` role's rules: the node authorizer's fixed rules."""
    return next(list(r["rules"]) for r in cluster_roles() if r["metadata"]["name"] == "system:node")


def install(*, registry: Registry) -> None:
    """Create the bootstrap objects that are missing."""
    token = WRITER.set(("kube-apiserver", "rbac/bootstrap-roles"))
    try:
        for kind, objs in ((CLUSTERROLES, cluster_roles()), (CLUSTERROLEBINDINGS, cluster_role_bindings())):
            for obj in objs:
                name: Any = obj["metadata"]["name"]
                if registry.store.get(kind, name) is None:
                    registry.create(kind, None, {"kind": kind.kind, "apiVersion": kind.api_version, **obj},
                                    WriteOptions())
    finally:
        WRITER.reset(token)

"""One realistic minimal manifest per kind kubemesh serves, for tests that walk every kind.

`SAMPLES[(group, version, kind)](ns)` is a fresh manifest of that kind, named for the test
namespace `ns` (cluster-scoped objects carry `ns` in their names, so two tests never
collide). The manifests are what a user or a chart writes (no status, no defaults), and fit
together: the Deployment, its Service, Ingress, PodDisruptionBudget and HPAs select or name
`app: web`; the StatefulSet's headless Service is `db`. `sample(kind, ns)` fails the test
for a kind with no entry, so that a newly served kind cannot be left out of the walks.

Create-only kinds (reviews, bindings) have entries too: their create is answered, not stored.
A Binding names a pod (`SCHEDULER_LESS`) that no scheduler will bind first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import pytest

from kubemesh.services.model.kinds import Kind

Obj = dict[str, Any]
Sample = Callable[[str], Obj]

IMAGE: Final = "registry.k8s.io/pause:3.9"
IMAGE_ROLLED: Final = "registry.k8s.io/pause:3.10"
SCHEDULER_LESS: Final = "unscheduled"
"""The pod the Binding sample binds: its `schedulerName` is one no scheduler answers to."""


def _meta(name: str, ns: str | None = None, **labels: str) -> Obj:
    md: Obj = {"name": name}
    if ns is not None:
        md["namespace"] = ns
    if labels:
        md["labels"] = dict(labels)
    return md


def _pod_spec(*, restart: str | None = None, command: list[str] | None = None) -> Obj:
    container: Obj = {"name": "main", "image": IMAGE, "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}
    if command:
        container["command"] = command
    spec: Obj = {"containers": [container]}
    if restart:
        spec["restartPolicy"] = restart
    return spec


def _template(**labels: str) -> Obj:
    return {"metadata": {"labels": dict(labels)}, "spec": _pod_spec()}


def _ro(api_version: str, kind: str, md: Obj, **rest: Any) -> Obj:
    return {"apiVersion": api_version, "kind": kind, "metadata": md, **rest}


def _crd(ns: str) -> Obj:
    group = f"{ns}.example.com"
    schema = {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"}, "color": {"type": "string"}}},
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}
    return _ro("apiextensions.k8s.io/v1", "CustomResourceDefinition", _meta(f"widgets.{group}"), spec={
        "group": group, "scope": "Namespaced",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema},
                      "subresources": {"status": {}}}]})


def _webhooks(ns: str, field: str) -> list[Obj]:
    # Rules that match nothing a test creates: the webhook is stored and listed, never called.
    return [{"name": f"{field}.{ns}.example.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
             "failurePolicy": "Ignore", "timeoutSeconds": 5,
             "clientConfig": {"service": {"namespace": ns, "name": "webhook", "path": f"/{field}", "port": 443}},
             "rules": [{"apiGroups": ["nothing.example.com"], "apiVersions": ["v1"], "operations": ["CREATE"],
                        "resources": ["nothings"], "scope": "*"}]}]


SAMPLES: Final[dict[tuple[str, str, str], Sample]] = {
    ("", "v1", "Namespace"): lambda ns: _ro("v1", "Namespace", _meta(ns, team="conformance")),
    ("", "v1", "Node"): lambda ns: _ro("v1", "Node", _meta(f"{ns}-node"), spec={
        # A Node no kubelet hosts: tainted so that no workload lands on it.
        "taints": [{"key": "example.com/conformance", "value": ns, "effect": "NoSchedule"}]}),
    ("", "v1", "Pod"): lambda ns: _ro("v1", "Pod", _meta("solo", ns, app="solo"), spec=_pod_spec()),
    ("", "v1", "Binding"): lambda ns: _ro("v1", "Binding", _meta(SCHEDULER_LESS, ns),
                                          target={"apiVersion": "v1", "kind": "Node", "name": "PLACEHOLDER"}),
    ("", "v1", "Event"): lambda ns: _ro("v1", "Event", _meta("solo.conformance", ns), reason="Tested",
                                        message="a hand-written event", type="Normal", count=1,
                                        involvedObject={"apiVersion": "v1", "kind": "Pod", "name": "solo",
                                                        "namespace": ns},
                                        source={"component": "conformance"},
                                        firstTimestamp="2026-01-01T00:00:00Z", lastTimestamp="2026-01-01T00:00:00Z"),
    ("", "v1", "ConfigMap"): lambda ns: _ro("v1", "ConfigMap", _meta("settings", ns),
                                            data={"LOG_LEVEL": "info", "app.properties": "color=blue\n"}),
    ("", "v1", "Secret"): lambda ns: _ro("v1", "Secret", _meta("credentials", ns), type="Opaque",
                                         stringData={"username": "admin", "password": "s3cr3t"}),
    ("", "v1", "ServiceAccount"): lambda ns: _ro("v1", "ServiceAccount", _meta("builder", ns)),
    ("", "v1", "Service"): lambda ns: _ro("v1", "Service", _meta("web", ns), spec={
        "selector": {"app": "web"}, "ports": [{"name": "http", "port": 80, "targetPort": 8080}]}),
    ("", "v1", "Endpoints"): lambda ns: _ro("v1", "Endpoints", _meta("external", ns), subsets=[
        {"addresses": [{"ip": "192.0.2.10"}], "ports": [{"name": "https", "port": 443, "protocol": "TCP"}]}]),
    ("", "v1", "PersistentVolumeClaim"): lambda ns: _ro("v1", "PersistentVolumeClaim", _meta("uploads", ns),
                                                        spec={"accessModes": ["ReadWriteOnce"],
                                                              "resources": {"requests": {"storage": "1Gi"}}}),
    ("", "v1", "PersistentVolume"): lambda ns: _ro("v1", "PersistentVolume", _meta(f"{ns}-pv"), spec={
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
        "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": f"/tmp/{ns}"}}),
    ("", "v1", "ReplicationController"): lambda ns: _ro("v1", "ReplicationController", _meta("legacy", ns), spec={
        "replicas": 1, "selector": {"app": "legacy"}, "template": _template(app="legacy")}),
    # Counts and cores as a YAML manifest writes them: numbers (the server answers strings).
    ("", "v1", "ResourceQuota"): lambda ns: _ro("v1", "ResourceQuota", _meta("compute", ns), spec={
        "hard": {"pods": 50, "requests.cpu": 20, "requests.memory": "20Gi"}}),
    ("", "v1", "LimitRange"): lambda ns: _ro("v1", "LimitRange", _meta("defaults", ns), spec={
        "limits": [{"type": "Container", "defaultRequest": {"cpu": "10m"}, "default": {"cpu": "500m"}}]}),
    ("coordination.k8s.io", "v1", "Lease"): lambda ns: _ro("coordination.k8s.io/v1", "Lease", _meta("leader", ns),
                                                           spec={"holderIdentity": "replica-a",
                                                                 "leaseDurationSeconds": 15}),
    ("apps", "v1", "Deployment"): lambda ns: _ro("apps/v1", "Deployment", _meta("web", ns, app="web"), spec={
        "replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": _template(app="web")}),
    ("apps", "v1", "ReplicaSet"): lambda ns: _ro("apps/v1", "ReplicaSet", _meta("cache", ns), spec={
        "replicas": 1, "selector": {"matchLabels": {"app": "cache"}}, "template": _template(app="cache")}),
    ("apps", "v1", "DaemonSet"): lambda ns: _ro("apps/v1", "DaemonSet", _meta("agent", ns), spec={
        "selector": {"matchLabels": {"app": "agent"}}, "template": _template(app="agent")}),
    ("apps", "v1", "StatefulSet"): lambda ns: _ro("apps/v1", "StatefulSet", _meta("db", ns), spec={
        "serviceName": "db", "replicas": 2, "selector": {"matchLabels": {"app": "db"}},
        "template": _template(app="db")}),
    ("apps", "v1", "ControllerRevision"): lambda ns: _ro(
        "apps/v1", "ControllerRevision", _meta("manual-1", ns), revision=1,
        data={"spec": {"template": _template(app="manual")}}),
    ("batch", "v1", "Job"): lambda ns: _ro("batch/v1", "Job", _meta("migrate", ns), spec={
        "backoffLimit": 2, "template": {"spec": _pod_spec(restart="Never", command=["sh", "-c", "true"])}}),
    ("batch", "v1", "CronJob"): lambda ns: _ro("batch/v1", "CronJob", _meta("report", ns), spec={
        "schedule": "*/1 * * * *", "successfulJobsHistoryLimit": 1, "jobTemplate": {"spec": {
            "template": {"spec": _pod_spec(restart="OnFailure", command=["date"])}}}}),
    ("autoscaling", "v2", "HorizontalPodAutoscaler"): lambda ns: _ro(
        "autoscaling/v2", "HorizontalPodAutoscaler", _meta("web", ns), spec={
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1, "maxReplicas": 4,
            "metrics": [{"type": "Resource", "resource": {
                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]}),
    ("autoscaling", "v1", "HorizontalPodAutoscaler"): lambda ns: _ro(
        "autoscaling/v1", "HorizontalPodAutoscaler", _meta("web-v1", ns), spec={
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "minReplicas": 1, "maxReplicas": 3, "targetCPUUtilizationPercentage": 70}),
    ("scheduling.k8s.io", "v1", "PriorityClass"): lambda ns: _ro(
        "scheduling.k8s.io/v1", "PriorityClass", _meta(f"{ns}-high"), value=1000,
                                                                 description="batch work that may wait"),
    ("policy", "v1", "PodDisruptionBudget"): lambda ns: _ro("policy/v1", "PodDisruptionBudget", _meta("web", ns),
                                                            spec={"minAvailable": 1,
                                                                  "selector": {"matchLabels": {"app": "web"}}}),
    ("discovery.k8s.io", "v1", "EndpointSlice"): lambda ns: _ro(
        "discovery.k8s.io/v1", "EndpointSlice", _meta("external-abc", ns, **{"kubernetes.io/service-name": "external"}),
        addressType="IPv4", endpoints=[{"addresses": ["192.0.2.10"], "conditions": {"ready": True}}],
        ports=[{"name": "https", "port": 443, "protocol": "TCP"}]),
    ("networking.k8s.io", "v1", "Ingress"): lambda ns: _ro("networking.k8s.io/v1", "Ingress", _meta("web", ns), spec={
        "rules": [{"host": f"{ns}.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": {
            "service": {"name": "web", "port": {"name": "http"}}}}]}}]}),
    ("networking.k8s.io", "v1", "IngressClass"): lambda ns: _ro(
        "networking.k8s.io/v1", "IngressClass", _meta(f"{ns}-nginx"),
                                                                spec={"controller": "example.com/ingress-nginx"}),
    ("networking.k8s.io", "v1", "NetworkPolicy"): lambda ns: _ro(
        "networking.k8s.io/v1", "NetworkPolicy", _meta("web-ingress", ns), spec={
        "podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Ingress"],
        "ingress": [{"from": [{"podSelector": {"matchLabels": {"role": "frontend"}}}],
                     "ports": [{"protocol": "TCP", "port": 8080}]}]}),
    ("storage.k8s.io", "v1", "StorageClass"): lambda ns: _ro("storage.k8s.io/v1", "StorageClass", _meta(f"{ns}-fast"),
                                                             provisioner="example.com/fast-disk",
                                                             reclaimPolicy="Delete",
                                                             volumeBindingMode="WaitForFirstConsumer"),
    ("rbac.authorization.k8s.io", "v1", "Role"): lambda ns: _ro(
        "rbac.authorization.k8s.io/v1", "Role", _meta("reader", ns), rules=[
        {"apiGroups": [""], "resources": ["pods", "configmaps"], "verbs": ["get", "list", "watch"]}]),
    ("rbac.authorization.k8s.io", "v1", "RoleBinding"): lambda ns: _ro(
        "rbac.authorization.k8s.io/v1", "RoleBinding", _meta("reader", ns),
        subjects=[{"kind": "ServiceAccount", "name": "builder", "namespace": ns}],
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"}),
    ("rbac.authorization.k8s.io", "v1", "ClusterRole"): lambda ns: _ro(
        "rbac.authorization.k8s.io/v1", "ClusterRole", _meta(f"{ns}-node-reader"),
        rules=[{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "watch"]}]),
    ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding"): lambda ns: _ro(
        "rbac.authorization.k8s.io/v1", "ClusterRoleBinding", _meta(f"{ns}-node-reader"),
        subjects=[{"kind": "ServiceAccount", "name": "builder", "namespace": ns}],
        roleRef={"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{ns}-node-reader"}),
    ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration"): lambda ns: _ro(
        "admissionregistration.k8s.io/v1", "ValidatingWebhookConfiguration", _meta(f"{ns}-policy"),
        webhooks=_webhooks(ns, "validate")),
    ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration"): lambda ns: _ro(
        "admissionregistration.k8s.io/v1", "MutatingWebhookConfiguration", _meta(f"{ns}-defaults"),
        webhooks=_webhooks(ns, "mutate")),
    ("apiextensions.k8s.io", "v1", "CustomResourceDefinition"): _crd,
    # An aggregated API (a metrics server), not the group of the sample CRD: kube-aggregator registers that one.
    ("apiregistration.k8s.io", "v1", "APIService"): lambda ns: _ro(
        "apiregistration.k8s.io/v1", "APIService", _meta(f"v1beta1.metrics.{ns}.example.com"), spec={
            "group": f"metrics.{ns}.example.com", "version": "v1beta1",
            "groupPriorityMinimum": 1000, "versionPriority": 15,
            "service": {"namespace": ns, "name": "api", "port": 443}, "insecureSkipTLSVerify": True}),
    ("authorization.k8s.io", "v1", "SelfSubjectAccessReview"): lambda ns: _ro(
        "authorization.k8s.io/v1", "SelfSubjectAccessReview", {},
        spec={"resourceAttributes": {"namespace": ns, "verb": "list", "resource": "pods"}}),
    ("authorization.k8s.io", "v1", "SelfSubjectRulesReview"): lambda ns: _ro(
        "authorization.k8s.io/v1", "SelfSubjectRulesReview", {}, spec={"namespace": ns}),
    ("authorization.k8s.io", "v1", "SubjectAccessReview"): lambda ns: _ro(
        "authorization.k8s.io/v1", "SubjectAccessReview", {}, spec={
            "user": "jane", "groups": ["developers"],
            "resourceAttributes": {"namespace": ns, "verb": "get", "resource": "configmaps"}}),
    ("authentication.k8s.io", "v1", "SelfSubjectReview"): lambda ns: _ro(
        "authentication.k8s.io/v1", "SelfSubjectReview", {}),
}


def sample(kind: Kind, ns: str) -> Obj:
    """A fresh manifest of `kind` for namespace `ns`; fails the test if the kind has no sample."""
    make = SAMPLES.get((kind.group, kind.version, kind.kind))
    if make is None:
        pytest.fail(f"no sample manifest for {kind.api_version} {kind.kind}: add one to tests/kindsamples.py",
                    pytrace=False)
    return make(ns)


def custom_resource(crd: Obj, ns: str, name: str = "first") -> Obj:
    """An object of the sample CRD's kind."""
    spec = crd["spec"]
    return {"apiVersion": f"{spec['group']}/{spec['versions'][0]['name']}", "kind": spec["names"]["kind"],
            "metadata": {"name": name, "namespace": ns}, "spec": {"size": 3, "color": "blue"}}


def unscheduled_pod(ns: str) -> Obj:
    """The pod the Binding sample binds (no scheduler answers to its `schedulerName`)."""
    spec = _pod_spec()
    spec["schedulerName"] = "nobody"
    return _ro("v1", "Pod", _meta(SCHEDULER_LESS, ns, app=SCHEDULER_LESS), spec=spec)

"""`kubectl get` prints the built-in kinds as it does against kube-apiserver 1.33 (real kubectl, real apiserver).

Objects of every kind that has an upstream printer (and of the kinds that keep the default Name
and Created At columns) are created over HTTP, their status written through the status
subresource where the kind has one (no controller runs here to write it), and `kubectl get
<plural>` (and `-o wide`) must print the upstream header line and the expected cells, on the
oldest and the newest installed kubectl (`edge_kubectl_version`): the columns are the server's,
so both print the same.

Cells are read at the offsets of the header's column names, where kubectl's tab writer aligns
them, so a cell holding spaces (`*/5 * * * *`, `80, 443`) or nothing at all is read right.
"""

from __future__ import annotations

import base64
import re
import subprocess
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest
from restkit import Json, Rest

from kubemesh.services.machinery.clock import format_time, time_or_none

if TYPE_CHECKING:  # conftest is never imported at run time (see tests/conftest.py)
    from conftest import ApiServer, RunKubectl

pytestmark = pytest.mark.kubectl

NS = "/api/v1/namespaces/default"
APPS = "/apis/apps/v1/namespaces/default"
BATCH = "/apis/batch/v1/namespaces/default"
NETWORKING = "/apis/networking.k8s.io/v1"
RBAC = "/apis/rbac.authorization.k8s.io/v1"
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


async def create(rest: Rest, collection: str, body: Json, status: Json | None = None) -> Json:
    """POST the object; then PUT `status` through its status subresource, as its controller would."""
    created = await rest.ok("POST", collection, body)
    if status is None:
        return created
    path = f"{collection}/{created['metadata']['name']}/status"
    return await rest.ok("PUT", path, {**created, "status": {**(created.get("status") or {}), **status}})


def template(app: str, image: str, **spec: Any) -> Json:
    return {"metadata": {"labels": {"app": app}}, "spec": {"containers": [{"name": app, "image": image}], **spec}}


def shifted(timestamp: str, seconds: float) -> str:
    """A timestamp `seconds` after another (before it when negative)."""
    t = time_or_none(timestamp)
    assert t is not None
    return format_time(t + seconds)


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


# ------------------------------------------------------------------------------------ objects


async def seed_core(rest: Rest) -> None:
    """Secrets, a service account, endpoints and an endpoint slice, volumes and claims, and an RC."""
    await create(rest, f"{NS}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tls"}, "type": "kubernetes.io/tls",
        "data": {"tls.crt": b64("cert"), "tls.key": b64("key")}})
    await create(rest, f"{NS}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds"},
        "stringData": {"user": "admin", "password": "hunter2"}})
    await create(rest, f"{NS}/serviceaccounts", {
        "apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "builder"},
        "secrets": [{"name": "builder-token"}]})
    await create(rest, f"{NS}/endpoints", {
        "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "web"},
        "subsets": [{"addresses": [{"ip": "10.1.0.5"}, {"ip": "10.1.0.6"}],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}]})
    await create(rest, f"{NS}/endpoints", {
        "apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "many"},
        "subsets": [{"addresses": [{"ip": f"10.2.0.{i}"} for i in range(1, 6)], "ports": [{"port": 8080}]}]})
    await create(rest, f"{NS}/endpoints", {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": "empty"}})
    await create(rest, "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices", {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-abc12", "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4", "ports": [{"name": "http", "port": 80, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["10.1.0.5"], "conditions": {"ready": True}}]})
    await create(rest, "/api/v1/persistentvolumes", {
        "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-1"},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "standard",
                 "volumeMode": "Filesystem", "hostPath": {"path": "/data/pv-1"},
                 "claimRef": {"namespace": "default", "name": "db"}}}, status={"phase": "Bound"})
    await create(rest, f"{NS}/persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                 "storageClassName": "standard", "volumeMode": "Filesystem"}})
    await create(rest, f"{NS}/persistentvolumeclaims", {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "db"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}},
                 "storageClassName": "standard", "volumeMode": "Filesystem", "volumeName": "pv-1"}},
        status={"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "10Gi"}})
    await create(rest, f"{NS}/replicationcontrollers", {
        "apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "legacy"},
        "spec": {"replicas": 2, "selector": {"app": "legacy"}, "template": template("legacy", "nginx:1.25")}},
        status={"replicas": 2, "readyReplicas": 1})


async def seed_workloads(rest: Rest) -> dict[str, str]:
    """A statefulset with a revision, jobs (complete and suspended), a cron job and an autoscaler."""
    sts = await create(rest, f"{APPS}/statefulsets", {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "db"},
        "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                 "template": template("db", "postgres:16")}},
        status={"replicas": 3, "readyReplicas": 1, "currentReplicas": 3, "updatedReplicas": 3,
                "availableReplicas": 1})
    await create(rest, f"{APPS}/controllerrevisions", {
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {"name": "db-7d9f8c", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": sts["metadata"]["uid"],
             "controller": True, "blockOwnerDeletion": True}]},
        "data": {"spec": {}}, "revision": 2})
    pi = await rest.ok("POST", f"{BATCH}/jobs", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "pi"},
        "spec": {"completions": 1, "template": template("pi", "perl:5.34", restartPolicy="Never")}})
    start = pi["metadata"]["creationTimestamp"]
    done = shifted(start, 95)
    conditions = [{"type": t, "status": "True", "lastProbeTime": done, "lastTransitionTime": done}
                  for t in ("SuccessCriteriaMet", "Complete")]
    await rest.ok("PUT", f"{BATCH}/jobs/pi/status", {**pi, "status": {
        "succeeded": 1, "startTime": start, "completionTime": done, "conditions": conditions}})
    paused = await rest.ok("POST", f"{BATCH}/jobs", {
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "paused"},
        "spec": {"suspend": True, "template": template("paused", "busybox:1.36", restartPolicy="Never")}})
    at = paused["metadata"]["creationTimestamp"]
    await rest.ok("PUT", f"{BATCH}/jobs/paused/status", {**paused, "status": {"conditions": [
        {"type": "Suspended", "status": "True", "reason": "JobSuspended", "lastProbeTime": at,
         "lastTransitionTime": at}]}})
    backup = await rest.ok("POST", f"{BATCH}/cronjobs", {
        "apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "backup"},
        "spec": {"schedule": "*/5 * * * *", "timeZone": "Etc/UTC",
                 "jobTemplate": {"spec": {"template": template("backup", "busybox:1.36", restartPolicy="OnFailure")}}}})
    await rest.ok("PUT", f"{BATCH}/cronjobs/backup/status", {**backup, "status": {
        "lastScheduleTime": shifted(backup["metadata"]["creationTimestamp"], -5 * 3600)}})
    await create(rest, "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers", {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "web"},
        "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
                 "minReplicas": 2, "maxReplicas": 10,
                 "metrics": [{"type": "Resource", "resource": {
                     "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]}},
        status={"currentReplicas": 2, "desiredReplicas": 2, "currentMetrics": [
            {"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 42,
                                                                       "averageValue": "105m"}}}]})
    return {"job_uid": pi["metadata"]["uid"]}


async def seed_cluster_kinds(rest: Rest) -> dict[str, str]:
    """Networking, storage, RBAC, admission and API registration objects."""
    await create(rest, f"{NETWORKING}/namespaces/default/ingresses", {
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": {"name": "web"},
        "spec": {"ingressClassName": "nginx", "tls": [{"hosts": ["a.example.com"], "secretName": "tls"}],
                 "rules": [{"host": "a.example.com", "http": {"paths": [
                     {"path": "/", "pathType": "Prefix",
                      "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}},
        status={"loadBalancer": {"ingress": [{"ip": "203.0.113.10"}]}})
    await create(rest, f"{NETWORKING}/ingressclasses", {
        "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "nginx"},
        "spec": {"controller": "k8s.io/ingress-nginx"}})
    await create(rest, f"{NETWORKING}/ingressclasses", {
        "apiVersion": "networking.k8s.io/v1", "kind": "IngressClass", "metadata": {"name": "external"},
        "spec": {"controller": "example.com/lb", "parameters": {
            "apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "external"}}})
    await create(rest, f"{NETWORKING}/namespaces/default/networkpolicies", {
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "db"},
        "spec": {"podSelector": {"matchLabels": {"app": "db"}}, "policyTypes": ["Ingress"]}})
    await create(rest, "/apis/storage.k8s.io/v1/storageclasses", {
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": "standard", "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
        "provisioner": "rancher.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"})
    rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}
    role = await create(rest, f"{RBAC}/namespaces/default/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "reader"},
        "rules": [rule]})
    await create(rest, f"{RBAC}/clusterroles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "pod-reader"},
        "rules": [rule]})
    await create(rest, f"{RBAC}/namespaces/default/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "readers"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
        "subjects": [{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"},
                     {"kind": "Group", "name": "devs", "apiGroup": "rbac.authorization.k8s.io"},
                     {"kind": "ServiceAccount", "name": "builder", "namespace": "default"}]})
    await create(rest, f"{RBAC}/clusterrolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "ops"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "pod-reader"},
        "subjects": [{"kind": "Group", "name": "ops", "apiGroup": "rbac.authorization.k8s.io"}]})

    def webhook(name: str) -> Json:
        return {"name": name, "clientConfig": {"url": f"https://127.0.0.1:9/{name}"},
                "rules": [{"apiGroups": ["example.com"], "apiVersions": ["v1"], "operations": ["CREATE"],
                           "resources": ["gadgets"]}],
                "sideEffects": "None", "admissionReviewVersions": ["v1"], "failurePolicy": "Ignore"}

    await create(rest, f"{ADMISSION}/validatingwebhookconfigurations", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": "policy"}, "webhooks": [webhook("check.example.com")]})
    await create(rest, f"{ADMISSION}/mutatingwebhookconfigurations", {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "defaults"}, "webhooks": [webhook("a.example.com"), webhook("b.example.com")]})
    crd = await create(rest, "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
                 "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                     "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]}})
    await create(rest, "/apis/apiregistration.k8s.io/v1/apiservices", {
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": "v1beta1.metrics.example.com"},
        "spec": {"group": "metrics.example.com", "version": "v1beta1", "groupPriorityMinimum": 100,
                 "versionPriority": 100, "insecureSkipTLSVerify": True,
                 "service": {"namespace": "kube-system", "name": "metrics", "port": 443}}},
        status={"conditions": [{"type": "Available", "status": "False", "reason": "ServiceNotFound",
                                "message": 'service/metrics in "kube-system" is not present',
                                "lastTransitionTime": role["metadata"]["creationTimestamp"]}]})
    await create(rest, "/apis/apiregistration.k8s.io/v1/apiservices", {
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": "v1.local.example.com"},
        "spec": {"group": "local.example.com", "version": "v1", "groupPriorityMinimum": 100, "versionPriority": 15}})
    return {"role_created": role["metadata"]["creationTimestamp"], "crd_created": crd["metadata"]["creationTimestamp"]}


# ------------------------------------------------------------------------------------ reading tables


def read_table(out: str) -> tuple[list[str], dict[str, dict[str, str]]]:
    """The header's column names, and each row's cells by column name, keyed by the row's NAME."""
    lines = [ln.rstrip() for ln in out.splitlines() if ln.strip()]
    assert lines, "kubectl printed no table"
    head = lines[0]
    names = re.split(r" {2,}", head.strip())  # names may hold one space (ACCESS MODES), never two
    starts: list[int] = []
    for name in names:
        starts.append(head.index(name, starts[-1] + 1 if starts else 0))
    rows: dict[str, dict[str, str]] = {}
    for line in lines[1:]:
        cells = [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        row = dict(zip(names, cells, strict=True))
        rows[row["NAME"]] = row
    return names, rows


@dataclass
class Expect:
    """What `kubectl get <plural>` must print: the header line and some rows' cells (by NAME)."""

    plural: str
    header: str
    rows: dict[str, dict[str, str]]
    wide: str = ""
    """The columns `-o wide` adds (after the others), when it adds any."""
    wide_rows: dict[str, dict[str, str]] = field(default_factory=dict)


def expectations(seeded: dict[str, str]) -> list[Expect]:
    return [
        Expect("secrets", "NAME TYPE DATA AGE",
               {"tls": {"TYPE": "kubernetes.io/tls", "DATA": "2"}, "creds": {"TYPE": "Opaque", "DATA": "2"}}),
        Expect("serviceaccounts", "NAME SECRETS AGE", {"builder": {"SECRETS": "1"}}),
        Expect("endpoints", "NAME ENDPOINTS AGE", {
            "web": {"ENDPOINTS": "10.1.0.5:80,10.1.0.6:80"},
            "many": {"ENDPOINTS": "10.2.0.1:8080,10.2.0.2:8080,10.2.0.3:8080 + 2 more..."},
            "empty": {"ENDPOINTS": "<none>"}}),
        Expect("endpointslices", "NAME ADDRESSTYPE PORTS ENDPOINTS AGE",
               {"web-abc12": {"ADDRESSTYPE": "IPv4", "PORTS": "80", "ENDPOINTS": "10.1.0.5"}}),
        Expect("persistentvolumeclaims",
               "NAME STATUS VOLUME CAPACITY ACCESS MODES STORAGECLASS VOLUMEATTRIBUTESCLASS AGE", {
                   "data": {"STATUS": "Pending", "VOLUME": "", "CAPACITY": "", "ACCESS MODES": "",
                            "STORAGECLASS": "standard", "VOLUMEATTRIBUTESCLASS": "<unset>"},
                   "db": {"STATUS": "Bound", "VOLUME": "pv-1", "CAPACITY": "10Gi", "ACCESS MODES": "RWO",
                          "STORAGECLASS": "standard", "VOLUMEATTRIBUTESCLASS": "<unset>"}},
               wide="VOLUMEMODE", wide_rows={"db": {"VOLUMEMODE": "Filesystem"}}),
        Expect("persistentvolumes", "NAME CAPACITY ACCESS MODES RECLAIM POLICY STATUS CLAIM STORAGECLASS "
                                    "VOLUMEATTRIBUTESCLASS REASON AGE",
               {"pv-1": {"CAPACITY": "10Gi", "ACCESS MODES": "RWO", "RECLAIM POLICY": "Retain", "STATUS": "Bound",
                         "CLAIM": "default/db", "STORAGECLASS": "standard", "VOLUMEATTRIBUTESCLASS": "<unset>",
                         "REASON": ""}},
               wide="VOLUMEMODE", wide_rows={"pv-1": {"VOLUMEMODE": "Filesystem"}}),
        Expect("replicationcontrollers", "NAME DESIRED CURRENT READY AGE",
               {"legacy": {"DESIRED": "2", "CURRENT": "2", "READY": "1"}},
               wide="CONTAINERS IMAGES SELECTOR",
               wide_rows={"legacy": {"CONTAINERS": "legacy", "IMAGES": "nginx:1.25", "SELECTOR": "app=legacy"}}),
        Expect("statefulsets", "NAME READY AGE", {"db": {"READY": "1/3"}},
               wide="CONTAINERS IMAGES", wide_rows={"db": {"CONTAINERS": "db", "IMAGES": "postgres:16"}}),
        Expect("controllerrevisions", "NAME CONTROLLER REVISION AGE",
               {"db-7d9f8c": {"CONTROLLER": "statefulset.apps/db", "REVISION": "2"}}),
        Expect("jobs", "NAME STATUS COMPLETIONS DURATION AGE", {
            "pi": {"STATUS": "Complete", "COMPLETIONS": "1/1", "DURATION": "95s"},
            "paused": {"STATUS": "Suspended", "COMPLETIONS": "0/1", "DURATION": ""}},
               wide="CONTAINERS IMAGES SELECTOR", wide_rows={"pi": {
                   "CONTAINERS": "pi", "IMAGES": "perl:5.34",
                   "SELECTOR": f"batch.kubernetes.io/controller-uid={seeded['job_uid']}"}}),
        Expect("cronjobs", "NAME SCHEDULE TIMEZONE SUSPEND ACTIVE LAST SCHEDULE AGE", {"backup": {
            "SCHEDULE": "*/5 * * * *", "TIMEZONE": "Etc/UTC", "SUSPEND": "False", "ACTIVE": "0",
            "LAST SCHEDULE": "5h"}},
               wide="CONTAINERS IMAGES SELECTOR",
               wide_rows={"backup": {"CONTAINERS": "backup", "IMAGES": "busybox:1.36", "SELECTOR": "<none>"}}),
        Expect("horizontalpodautoscalers", "NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS AGE", {"web": {
            "REFERENCE": "Deployment/web", "TARGETS": "cpu: 42%/80%", "MINPODS": "2", "MAXPODS": "10",
            "REPLICAS": "2"}}),
        Expect("ingresses", "NAME CLASS HOSTS ADDRESS PORTS AGE", {"web": {
            "CLASS": "nginx", "HOSTS": "a.example.com", "ADDRESS": "203.0.113.10", "PORTS": "80, 443"}}),
        Expect("ingressclasses", "NAME CONTROLLER PARAMETERS AGE", {
            "nginx": {"CONTROLLER": "k8s.io/ingress-nginx", "PARAMETERS": "<none>"},
            "external": {"CONTROLLER": "example.com/lb", "PARAMETERS": "IngressParameters.k8s.example.com/external"}}),
        Expect("networkpolicies", "NAME POD-SELECTOR AGE", {"db": {"POD-SELECTOR": "app=db"}}),
        Expect("storageclasses", "NAME PROVISIONER RECLAIMPOLICY VOLUMEBINDINGMODE ALLOWVOLUMEEXPANSION AGE",
               {"standard (default)": {"PROVISIONER": "rancher.io/local-path", "RECLAIMPOLICY": "Delete",
                                       "VOLUMEBINDINGMODE": "WaitForFirstConsumer", "ALLOWVOLUMEEXPANSION": "false"}}),
        Expect("roles", "NAME CREATED AT", {"reader": {"CREATED AT": seeded["role_created"]}}),
        Expect("clusterroles", "NAME CREATED AT", {"pod-reader": {}}),
        Expect("rolebindings", "NAME ROLE AGE", {"readers": {"ROLE": "Role/reader"}},
               wide="USERS GROUPS SERVICEACCOUNTS",
               wide_rows={"readers": {"USERS": "alice", "GROUPS": "devs", "SERVICEACCOUNTS": "default/builder"}}),
        Expect("clusterrolebindings", "NAME ROLE AGE", {"ops": {"ROLE": "ClusterRole/pod-reader"}},
               wide="USERS GROUPS SERVICEACCOUNTS",
               wide_rows={"ops": {"USERS": "", "GROUPS": "ops", "SERVICEACCOUNTS": ""}}),
        Expect("validatingwebhookconfigurations", "NAME WEBHOOKS AGE", {"policy": {"WEBHOOKS": "1"}}),
        Expect("mutatingwebhookconfigurations", "NAME WEBHOOKS AGE", {"defaults": {"WEBHOOKS": "2"}}),
        Expect("customresourcedefinitions", "NAME CREATED AT",
               {"gadgets.example.com": {"CREATED AT": seeded["crd_created"]}}),
        Expect("apiservices", "NAME SERVICE AVAILABLE AGE", {
            "v1beta1.metrics.example.com": {"SERVICE": "kube-system/metrics", "AVAILABLE": "False (ServiceNotFound)"},
            "v1.local.example.com": {"SERVICE": "Local", "AVAILABLE": "Unknown"}}),
    ]


def check(out: str, header: str, expected: dict[str, dict[str, str]], what: str) -> None:
    names, rows = read_table(out)
    assert " ".join(names) == header, f"{what}: header\n{out}"
    for name, cells in expected.items():
        assert name in rows, f"{what}: no row {name!r}\n{out}"
        got = {column: rows[name][column] for column in cells}
        assert got == cells, f"{what}: row {name!r}\n{out}"
        if "AGE" in rows[name]:
            assert re.fullmatch(r"\d+[smhd]\S*", rows[name]["AGE"]), f"{what}: age of {name!r}\n{out}"


async def test_kubectl_get_prints_upstream_columns(edge_kubectl_version: str, kubectl: RunKubectl,
                                                   apiserver: ApiServer, rest: Rest) -> None:
    await seed_core(rest)
    seeded = {**await seed_workloads(rest), **await seed_cluster_kinds(rest)}

    def get(*args: str) -> str:
        res: subprocess.CompletedProcess[str] = kubectl(edge_kubectl_version, "get", *args, server=apiserver.url)
        assert res.returncode == 0, f"kubectl get {' '.join(args)} failed:\n{res.stderr}\n{res.stdout}"
        return res.stdout

    for expect in expectations(seeded):
        check(get(expect.plural), expect.header, expect.rows, expect.plural)
        if expect.wide:
            wide_header = f"{expect.header} {expect.wide}"
            wide_rows = {name: {**cells, **expect.wide_rows.get(name, {})} for name, cells in expect.rows.items()}
            check(get(expect.plural, "-o", "wide"), wide_header, wide_rows, f"{expect.plural} -o wide")

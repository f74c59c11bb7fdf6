from __future__ import annotations

from typing import Any

import orjson
import pytest

from kubemesh.apiserver.tables import column_definitions, human_duration, to_table, wants_table, watch_event_table
from kubemesh.services.machinery.clock import format_time
from kubemesh.services.model.kinds import (
    APISERVICES,
    CLUSTERROLEBINDINGS,
    CLUSTERROLES,
    CONFIGMAPS,
    CONTROLLERREVISIONS,
    CRONJOBS,
    CUSTOMRESOURCEDEFINITIONS,
    DAEMONSETS,
    DEPLOYMENTS,
    ENDPOINTS,
    ENDPOINTSLICES,
    EVENTS,
    HORIZONTALPODAUTOSCALERS,
    INGRESSCLASSES,
    INGRESSES,
    JOBS,
    KINDS,
    LEASES,
    MUTATINGWEBHOOKCONFIGURATIONS,
    NAMESPACES,
    NETWORKPOLICIES,
    NODES,
    PERSISTENTVOLUMECLAIMS,
    PERSISTENTVOLUMES,
    PODDISRUPTIONBUDGETS,
    PODS,
    PRIORITYCLASSES,
    REPLICASETS,
    REPLICATIONCONTROLLERS,
    ROLEBINDINGS,
    ROLES,
    SECRETS,
    SERVICEACCOUNTS,
    SERVICES,
    STATEFULSETS,
    STORAGECLASSES,
    VALIDATINGWEBHOOKCONFIGURATIONS,
    Kind,
    Obj,
)

NOW = 1_800_000_000.0
KUBECTL_GET_ACCEPT = (
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
)


def ago(seconds: float) -> str:
    return format_time(NOW - seconds)


def cells(kind: Kind, obj: Obj) -> list[Any]:
    table = to_table(kind, [obj], now=NOW, resource_version="7")
    row: list[Any] = table["rows"][0]["cells"]
    return row


def header(kind: Kind, *, wide: bool = False) -> list[str]:
    return [c["name"] for c in column_definitions(kind) if wide or c["priority"] == 0]


def visible(kind: Kind, obj: Obj) -> list[Any]:
    """The cells kubectl shows without -o wide."""
    return [c for c, d in zip(cells(kind, obj), column_definitions(kind), strict=True) if d["priority"] == 0]


# -- negotiation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (KUBECTL_GET_ACCEPT, True),
        ("application/json;as=Table;v=v1beta1;g=meta.k8s.io", True),
        ("application/json;g=meta.k8s.io;v=v1;as=Table", True),
        ("application/json", False),
        ("application/vnd.kubernetes.protobuf,application/json", False),
        ("application/json, */*", False),
        ("application/json," + KUBECTL_GET_ACCEPT, False),
        ("application/json;as=Table;v=v2;g=meta.k8s.io", False),
        ("application/json;as=PartialObjectMetadataList;v=v1;g=meta.k8s.io", False),
        (None, False),
        ("", False),
    ],
)
def test_wants_table(accept: str | None, expected: bool) -> None:
    assert wants_table(accept) is expected


# -- durations ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [
        (-5, "<invalid>"),
        (-1.5, "0s"),
        (-0.4, "0s"),
        (0, "0s"),
        (45, "45s"),
        (45.9, "45s"),
        (119, "119s"),
        (120, "2m"),
        (150, "2m30s"),
        (300, "5m"),
        (599, "9m59s"),
        (600, "10m"),
        (179 * 60 + 59, "179m"),
        (3 * 3600, "3h"),
        (3 * 3600 + 20 * 60 + 5, "3h20m"),
        (8 * 3600, "8h"),
        (47 * 3600 + 3599, "47h"),
        (48 * 3600, "2d"),
        (2 * 86400 + 3 * 3600, "2d3h"),
        (7 * 86400 + 23 * 3600, "7d23h"),
        (8 * 86400, "8d"),
        (400 * 86400, "400d"),
        (730 * 86400, "2y"),
        (740 * 86400, "2y10d"),
        (9 * 365 * 86400, "9y"),
    ],
)
def test_human_duration(seconds: float, expected: str) -> None:
    assert human_duration(seconds) == expected


# -- pods --------------------------------------------------------------------------------------


def pod(
    name: str = "web-1",
    *,
    phase: str = "Running",
    statuses: list[Obj] | None = None,
    node: str | None = "node-1",
    created: float = 300,
    **extra_status: Any,
) -> Obj:
    spec: Obj = {"containers": [{"name": "app", "image": "nginx"}]}
    if node:
        spec["nodeName"] = node
    status: Obj = {"phase": phase, **extra_status}
    if statuses is not None:
        status["containerStatuses"] = statuses
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": "u-" + name,
            "resourceVersion": "5",
            "creationTimestamp": ago(created),
            "labels": {"app": "web"},
        },
        "spec": spec,
        "status": status,
    }


def running(ready: bool = True, restarts: int = 0, **extra: Any) -> Obj:
    return {
        "name": "app",
        "ready": ready,
        "restartCount": restarts,
        "image": "nginx",
        "imageID": "",
        "state": {"running": {"startedAt": ago(200)}},
        **extra,
    }


def test_running_pod() -> None:
    p = pod(statuses=[running()], podIP="10.1.0.5", podIPs=[{"ip": "10.1.0.5"}])
    assert header(PODS) == ["Name", "Ready", "Status", "Restarts", "Age"]
    assert header(PODS, wide=True)[5:] == ["IP", "Node", "Nominated Node", "Readiness Gates"]
    assert cells(PODS, p) == ["web-1", "1/1", "Running", "0", "5m", "10.1.0.5", "node-1", "<none>", "<none>"]


def test_terminating_pod() -> None:
    p = pod(statuses=[running()])
    p["metadata"]["deletionTimestamp"] = ago(-30)
    assert visible(PODS, p) == ["web-1", "1/1", "Terminating", "0", "5m"]


def test_terminating_pod_on_lost_node_is_unknown() -> None:
    p = pod(statuses=[running()], reason="NodeLost")
    p["metadata"]["deletionTimestamp"] = ago(10)
    assert visible(PODS, p)[2] == "Unknown"


def test_pending_unscheduled_pod() -> None:
    p = pod(
        phase="Pending",
        node=None,
        created=45,
        conditions=[{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}],
    )
    assert cells(PODS, p) == ["web-1", "0/1", "Pending", "0", "45s", "<none>", "<none>", "<none>", "<none>"]


def test_nominated_pod() -> None:
    p = pod(phase="Pending", node=None, nominatedNodeName="node-2")
    assert cells(PODS, p)[7] == "node-2"


def test_container_creating_pod() -> None:
    waiting = {
        "name": "app",
        "ready": False,
        "restartCount": 0,
        "state": {"waiting": {"reason": "ContainerCreating"}},
    }
    assert visible(PODS, pod(phase="Pending", statuses=[waiting]))[1:3] == ["0/1", "ContainerCreating"]


def test_completed_and_error_pods() -> None:
    done = {
        "name": "app",
        "ready": False,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
    }
    table = to_table(PODS, [pod(phase="Succeeded", statuses=[done])], now=NOW, resource_version="1")
    row = table["rows"][0]
    assert row["cells"][1:3] == ["0/1", "Completed"]
    assert row["conditions"][0]["type"] == "Completed"
    failed = {
        "name": "app",
        "ready": False,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 1, "reason": "Error"}},
    }
    assert visible(PODS, pod(phase="Failed", statuses=[failed]))[2] == "Error"
    no_reason = {"name": "app", "state": {"terminated": {"exitCode": 137}}}
    assert visible(PODS, pod(phase="Failed", statuses=[no_reason]))[2] == "ExitCode:137"
    signal = {"name": "app", "state": {"terminated": {"exitCode": 0, "signal": 9}}}
    assert visible(PODS, pod(phase="Failed", statuses=[signal]))[2] == "Signal:9"


def test_completed_pod_being_deleted_stays_completed() -> None:
    done = {"name": "app", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    p = pod(phase="Succeeded", statuses=[done])
    p["metadata"]["deletionTimestamp"] = ago(1)
    assert visible(PODS, p)[2] == "Completed"


def test_evicted_pod() -> None:
    p = pod(phase="Failed", reason="Evicted", message="The node was low on resource: memory.")
    assert visible(PODS, p)[1:3] == ["0/1", "Evicted"]


def test_crash_looping_pod_restarts_with_last_restart_age() -> None:
    status = {
        "name": "app",
        "ready": False,
        "restartCount": 2,
        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
        "lastState": {"terminated": {"exitCode": 1, "finishedAt": ago(300)}},
    }
    assert visible(PODS, pod(statuses=[status]))[1:4] == ["0/1", "CrashLoopBackOff", "2 (5m ago)"]


def test_completed_container_with_running_sibling() -> None:
    done = {"name": "a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
    p = pod(statuses=[running(), done], conditions=[{"type": "Ready", "status": "True"}])
    p["spec"]["containers"].append({"name": "a"})
    assert visible(PODS, p)[1:3] == ["1/2", "Running"]
    p["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    assert visible(PODS, p)[2] == "NotReady"


def test_init_containers() -> None:
    p = pod(phase="Pending", statuses=[])
    p["spec"]["initContainers"] = [{"name": "init"}]
    p["status"]["initContainerStatuses"] = [{"name": "init", "state": {"running": {}}}]
    assert visible(PODS, p)[1:3] == ["0/1", "Init:0/1"]
    p["status"]["initContainerStatuses"] = [{"name": "init", "state": {"waiting": {"reason": "ErrImagePull"}}}]
    assert visible(PODS, p)[2] == "Init:ErrImagePull"
    p["status"]["initContainerStatuses"] = [{"name": "init", "state": {"terminated": {"exitCode": 2}}}]
    assert visible(PODS, p)[2] == "Init:ExitCode:2"


def test_sidecar_init_container_counts_as_a_container() -> None:
    p = pod(statuses=[running()], conditions=[{"type": "Initialized", "status": "True"}])
    p["spec"]["initContainers"] = [{"name": "proxy", "restartPolicy": "Always"}]
    p["status"]["initContainerStatuses"] = [
        {"name": "proxy", "started": True, "ready": True, "restartCount": 1, "state": {"running": {}}}
    ]
    assert visible(PODS, p)[1:4] == ["2/2", "Running", "1"]


def test_scheduling_gated_pod_and_readiness_gates() -> None:
    p = pod(
        phase="Pending",
        node=None,
        conditions=[
            {"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"},
            {"type": "example.com/lb", "status": "True"},
        ],
    )
    p["spec"]["readinessGates"] = [{"conditionType": "example.com/lb"}, {"conditionType": "example.com/x"}]
    row = cells(PODS, p)
    assert row[2] == "SchedulingGated"
    assert row[8] == "1/2"


# -- nodes -------------------------------------------------------------------------------------


def node(
    name: str = "node-1",
    *,
    ready: str | None = "True",
    unschedulable: bool = False,
    labels: dict[str, str] | None = None,
) -> Obj:
    status: Obj = {
        "addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": "10.0.0.1"}],
        "nodeInfo": {
            "kubeletVersion": "v1.30.0-kubemesh",
            "osImage": "Emulated",
            "kernelVersion": "6.1",
            "containerRuntimeVersion": "kubemesh://0.1",
        },
    }
    if ready is not None:
        status["conditions"] = [
            {"type": "MemoryPressure", "status": "False"},
            {"type": "Ready", "status": ready},
        ]
    n: Obj = {
        "metadata": {"name": name, "creationTimestamp": ago(3 * 86400), "labels": labels or {}},
        "spec": {},
        "status": status,
    }
    if unschedulable:
        n["spec"]["unschedulable"] = True
    return n


def test_not_ready_cordoned_node() -> None:
    assert header(NODES) == ["Name", "Status", "Roles", "Age", "Version"]
    row = cells(NODES, node(ready="False", unschedulable=True))
    assert row == [
        "node-1",
        "NotReady,SchedulingDisabled",
        "<none>",
        "3d",
        "v1.30.0-kubemesh",
        "10.0.0.1",
        "<none>",
        "Emulated",
        "6.1",
        "kubemesh://0.1",
    ]


def test_node_status_words() -> None:
    assert visible(NODES, node())[1] == "Ready"
    assert visible(NODES, node(ready="Unknown"))[1] == "NotReady"
    assert visible(NODES, node(ready=None))[1] == "Unknown"
    assert visible(NODES, node(ready=None, unschedulable=True))[1] == "Unknown,SchedulingDisabled"


def test_node_roles() -> None:
    labels = {
        "node-role.kubernetes.io/worker": "",
        "node-role.kubernetes.io/control-plane": "",
        "node-role.kubernetes.io/": "x",
        "kubernetes.io/hostname": "node-1",
    }
    assert visible(NODES, node(labels=labels))[2] == "control-plane,worker"
    assert visible(NODES, node(labels={"kubernetes.io/role": "infra"}))[2] == "infra"


def test_node_wide_defaults() -> None:
    bare: Obj = {"metadata": {"name": "bare"}}
    assert cells(NODES, bare) == [
        "bare",
        "Unknown",
        "<none>",
        "<unknown>",
        "",
        "<none>",
        "<none>",
        "<unknown>",
        "<unknown>",
        "<unknown>",
    ]


# -- workloads ---------------------------------------------------------------------------------


def workload(spec: Obj, status: Obj) -> Obj:
    return {
        "metadata": {"name": "web", "namespace": "default", "creationTimestamp": ago(600)},
        "spec": {
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "spec": {
                    "containers": [
                        {"name": "app", "image": "nginx:1.27"},
                        {"name": "log", "image": "busybox"},
                    ]
                }
            },
            **spec,
        },
        "status": status,
    }


def test_deployment_two_of_three() -> None:
    d = workload({"replicas": 3}, {"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2})
    assert header(DEPLOYMENTS) == ["Name", "Ready", "Up-to-date", "Available", "Age"]
    assert cells(DEPLOYMENTS, d) == ["web", "2/3", 3, 2, "10m", "app,log", "nginx:1.27,busybox", "app=web"]


def test_deployment_selector_expressions_and_defaults() -> None:
    d = workload({}, {})
    d["spec"]["selector"] = {
        "matchLabels": {"tier": "front"},
        "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["prod", "dev"]},
            {"key": "zone", "operator": "DoesNotExist"},
            {"key": "app", "operator": "Exists"},
        ],
    }
    row = cells(DEPLOYMENTS, d)
    assert row[1:4] == ["0/1", 0, 0]  # replicas default to 1
    assert row[7] == "app,env in (dev,prod),tier=front,!zone"


def test_replicaset() -> None:
    rs = workload({"replicas": 3}, {"replicas": 3, "readyReplicas": 1})
    assert header(REPLICASETS) == ["Name", "Desired", "Current", "Ready", "Age"]
    assert cells(REPLICASETS, rs) == ["web", 3, 3, 1, "10m", "app,log", "nginx:1.27,busybox", "app=web"]


def test_daemonset() -> None:
    ds = workload(
        {},
        {
            "desiredNumberScheduled": 4,
            "currentNumberScheduled": 4,
            "numberReady": 3,
            "updatedNumberScheduled": 4,
            "numberAvailable": 3,
        },
    )
    ds["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/os": "linux"}
    assert header(DAEMONSETS) == [
        "Name",
        "Desired",
        "Current",
        "Ready",
        "Up-to-date",
        "Available",
        "Node Selector",
        "Age",
    ]
    assert cells(DAEMONSETS, ds)[:8] == ["web", 4, 4, 3, 4, 3, "kubernetes.io/os=linux", "10m"]
    ds["spec"]["template"]["spec"].pop("nodeSelector")
    assert cells(DAEMONSETS, ds)[6] == "<none>"


# -- other kinds -------------------------------------------------------------------------------


def test_event() -> None:
    ev: Obj = {
        "metadata": {"name": "web-1.17a", "namespace": "default"},
        "involvedObject": {
            "kind": "Pod",
            "name": "web-1",
            "namespace": "default",
            "fieldPath": "spec.containers{app}",
        },
        "reason": "Scheduled",
        "message": "Successfully assigned default/web-1 to node-1\n",
        "type": "Normal",
        "source": {"component": "default-scheduler"},
        "firstTimestamp": ago(600),
        "lastTimestamp": ago(60),
    }
    assert header(EVENTS) == ["Last Seen", "Type", "Reason", "Object", "Message"]
    assert cells(EVENTS, ev) == [
        "60s",
        "Normal",
        "Scheduled",
        "pod/web-1",
        "spec.containers{app}",
        "default-scheduler",
        "Successfully assigned default/web-1 to node-1",
        "10m",
        1,
        "web-1.17a",
    ]
    new_style: Obj = {
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "Node"},
        "eventTime": ago(30),
        "reportingComponent": "kubelet",
        "reportingInstance": "node-1",
        "series": {"count": 4, "lastObservedTime": ago(5)},
    }
    row = cells(EVENTS, new_style)
    assert row[0] == "5s"
    assert row[3] == "node"
    assert row[5] == "kubelet, node-1"
    assert row[7:9] == ["30s", 4]


def test_lease_namespace_priorityclass() -> None:
    lease: Obj = {
        "metadata": {"name": "node-1", "creationTimestamp": ago(90)},
        "spec": {"holderIdentity": "node-1"},
    }
    assert cells(LEASES, lease) == ["node-1", "node-1", "90s"]
    assert cells(LEASES, {"metadata": {"name": "x"}, "spec": {}}) == ["x", "", "<unknown>"]
    ns: Obj = {
        "metadata": {"name": "default", "creationTimestamp": ago(86400)},
        "status": {"phase": "Active"},
    }
    assert header(NAMESPACES) == ["Name", "Status", "Age"]
    assert cells(NAMESPACES, ns) == ["default", "Active", "24h"]
    pc: Obj = {"metadata": {"name": "high", "creationTimestamp": ago(30)}, "value": 1000}
    assert header(PRIORITYCLASSES) == ["Name", "Value", "Global-Default", "Age"]
    assert visible(PRIORITYCLASSES, pc) == ["high", 1000, False, "30s"]
    pc["globalDefault"] = True
    assert visible(PRIORITYCLASSES, pc)[2] is True


def test_configmap_service_pdb() -> None:
    cm: Obj = {"metadata": {"name": "cfg", "creationTimestamp": ago(5)}, "data": {"a": "1", "b": "2"}}
    assert cells(CONFIGMAPS, cm) == ["cfg", 2, "5s"]
    svc: Obj = {
        "metadata": {"name": "web", "creationTimestamp": ago(5)},
        "spec": {
            "type": "NodePort",
            "clusterIPs": ["10.96.0.10"],
            "selector": {"app": "web"},
            "ports": [{"port": 80, "nodePort": 30080, "protocol": "TCP"}, {"port": 53, "protocol": "UDP"}],
        },
    }
    assert cells(SERVICES, svc) == [
        "web",
        "NodePort",
        "10.96.0.10",
        "<none>",
        "80:30080/TCP,53/UDP",
        "5s",
        "app=web",
    ]
    lb: Obj = {"metadata": {"name": "lb"}, "spec": {"type": "LoadBalancer", "ports": []}}
    assert cells(SERVICES, lb)[3:5] == ["<pending>", "<none>"]
    pdb: Obj = {
        "metadata": {"name": "web", "creationTimestamp": ago(5)},
        "spec": {"minAvailable": "50%"},
        "status": {"disruptionsAllowed": 1},
    }
    assert cells(PODDISRUPTIONBUDGETS, pdb) == ["web", "50%", "N/A", 1, "5s"]


def test_kind_without_printer_gets_default_columns() -> None:
    widget = Kind(
        group="example.com", version="v1", kind="Widget", plural="widgets", singular="widget", namespaced=True
    )
    table = to_table(
        widget,
        [{"metadata": {"name": "w", "creationTimestamp": "2027-01-15T08:00:00+00:00"}}],
        now=NOW,
        resource_version="3",
    )
    assert [(c["name"], c["type"]) for c in table["columnDefinitions"]] == [
        ("Name", "string"),
        ("Created At", "date"),
    ]
    assert table["rows"][0]["cells"] == ["w", "2027-01-15T08:00:00Z"]


# -- kinds printed as kube-apiserver 1.33 prints them ------------------------------------------


def meta(name: str = "x", seconds: float = 90, **extra: Any) -> Obj:
    return {"name": name, "namespace": "default", "creationTimestamp": ago(seconds), **extra}


@pytest.mark.parametrize(
    ("kind", "columns", "wide"),
    [
        (SECRETS, "NAME TYPE DATA AGE", ""),
        (SERVICEACCOUNTS, "NAME SECRETS AGE", ""),
        (ENDPOINTS, "NAME ENDPOINTS AGE", ""),
        (ENDPOINTSLICES, "NAME ADDRESSTYPE PORTS ENDPOINTS AGE", ""),
        (
            PERSISTENTVOLUMECLAIMS,
            "NAME STATUS VOLUME CAPACITY ACCESS_MODES STORAGECLASS VOLUMEATTRIBUTESCLASS AGE",
            "VOLUMEMODE",
        ),
        (
            PERSISTENTVOLUMES,
            "NAME CAPACITY ACCESS_MODES RECLAIM_POLICY STATUS CLAIM STORAGECLASS VOLUMEATTRIBUTESCLASS REASON AGE",
            "VOLUMEMODE",
        ),
        (REPLICATIONCONTROLLERS, "NAME DESIRED CURRENT READY AGE", "CONTAINERS IMAGES SELECTOR"),
        (STATEFULSETS, "NAME READY AGE", "CONTAINERS IMAGES"),
        (CONTROLLERREVISIONS, "NAME CONTROLLER REVISION AGE", ""),
        (JOBS, "NAME STATUS COMPLETIONS DURATION AGE", "CONTAINERS IMAGES SELECTOR"),
        (CRONJOBS, "NAME SCHEDULE TIMEZONE SUSPEND ACTIVE LAST_SCHEDULE AGE", "CONTAINERS IMAGES SELECTOR"),
        (HORIZONTALPODAUTOSCALERS, "NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS AGE", ""),
        (INGRESSES, "NAME CLASS HOSTS ADDRESS PORTS AGE", ""),
        (INGRESSCLASSES, "NAME CONTROLLER PARAMETERS AGE", ""),
        (NETWORKPOLICIES, "NAME POD-SELECTOR AGE", ""),
        (STORAGECLASSES, "NAME PROVISIONER RECLAIMPOLICY VOLUMEBINDINGMODE ALLOWVOLUMEEXPANSION AGE", ""),
        (ROLEBINDINGS, "NAME ROLE AGE", "USERS GROUPS SERVICEACCOUNTS"),
        (CLUSTERROLEBINDINGS, "NAME ROLE AGE", "USERS GROUPS SERVICEACCOUNTS"),
        (VALIDATINGWEBHOOKCONFIGURATIONS, "NAME WEBHOOKS AGE", ""),
        (MUTATINGWEBHOOKCONFIGURATIONS, "NAME WEBHOOKS AGE", ""),
        (APISERVICES, "NAME SERVICE AVAILABLE AGE", ""),
        (ROLES, "NAME CREATED_AT", ""),
        (CLUSTERROLES, "NAME CREATED_AT", ""),
        (CUSTOMRESOURCEDEFINITIONS, "NAME CREATED_AT", ""),
    ],
    ids=lambda v: v.kind if isinstance(v, Kind) else None,
)
def test_headers_as_kubectl_prints_them(kind: Kind, columns: str, wide: str) -> None:
    """kubectl upper-cases the names and turns spaces into underscores only here, for comparing."""

    def shout(names: list[str]) -> str:
        return " ".join(n.upper().replace(" ", "_") for n in names)

    assert shout(header(kind)) == columns
    assert shout(header(kind, wide=True)) == f"{columns} {wide}".strip()
    assert column_definitions(kind)[0]["format"] == "name"


def test_column_types_follow_upstream() -> None:
    def types(kind: Kind) -> dict[str, str]:
        return {c["name"]: c["type"] for c in column_definitions(kind)}

    assert types(SECRETS) == {"Name": "string", "Type": "string", "Data": "string", "Age": "string"}
    assert types(CRONJOBS)["Suspend"] == "boolean"
    assert types(CRONJOBS)["Active"] == "integer"
    assert [types(REPLICATIONCONTROLLERS)[n] for n in ("Desired", "Current", "Ready")] == ["integer"] * 3
    assert types(VALIDATINGWEBHOOKCONFIGURATIONS)["Webhooks"] == "integer"
    assert set(types(HORIZONTALPODAUTOSCALERS).values()) == {"string"}
    assert types(CUSTOMRESOURCEDEFINITIONS)["Created At"] == "date"


def test_secret_and_serviceaccount() -> None:
    secret: Obj = {"metadata": meta("tls"), "type": "kubernetes.io/tls", "data": {"tls.crt": "eA==", "tls.key": "eA=="}}
    assert cells(SECRETS, secret) == ["tls", "kubernetes.io/tls", 2, "90s"]
    assert cells(SECRETS, {"metadata": meta("e"), "type": "Opaque"}) == ["e", "Opaque", 0, "90s"]
    sa: Obj = {"metadata": meta("builder", 3 * 3600), "secrets": [{"name": "builder-token"}]}
    assert cells(SERVICEACCOUNTS, sa) == ["builder", 1, "3h"]
    assert cells(SERVICEACCOUNTS, {"metadata": meta("default")}) == ["default", 0, "90s"]


def test_endpoints() -> None:
    ep: Obj = {
        "metadata": meta("web"),
        "subsets": [
            {
                "addresses": [{"ip": "10.1.0.5"}, {"ip": "10.1.0.6"}],
                "ports": [{"name": "http", "port": 80}, {"name": "https", "port": 443}],
            }
        ],
    }
    assert cells(ENDPOINTS, ep) == ["web", "10.1.0.5:80,10.1.0.6:80,10.1.0.5:443 + 1 more...", "90s"]
    ep["subsets"] = [{"addresses": [{"ip": "fd00::1"}], "ports": [{"port": 8080}]}, {"addresses": [{"ip": "10.0.0.9"}]}]
    assert cells(ENDPOINTS, ep)[1] == "[fd00::1]:8080,10.0.0.9"
    ep["subsets"] = [{"notReadyAddresses": [{"ip": "10.1.0.7"}], "ports": [{"port": 80}]}]
    assert cells(ENDPOINTS, ep)[1] == ""  # subsets, but no ready address
    assert cells(ENDPOINTS, {"metadata": meta("none")})[1] == "<none>"


def test_endpointslice() -> None:
    eps: Obj = {
        "metadata": meta("web-abc12"),
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "metrics"}, {}],
        "endpoints": [{"addresses": [f"10.1.0.{i}"]} for i in range(1, 6)],
    }
    assert cells(ENDPOINTSLICES, eps) == [
        "web-abc12",
        "IPv4",
        "80,metrics,*",
        "10.1.0.1,10.1.0.2,10.1.0.3 + 2 more...",
        "90s",
    ]
    empty: Obj = {"metadata": meta("empty"), "addressType": "IPv6", "ports": None, "endpoints": None}
    assert cells(ENDPOINTSLICES, empty)[1:4] == ["IPv6", "<unset>", "<unset>"]


def test_persistent_volume_claims() -> None:
    pending: Obj = {
        "metadata": meta("data", 120),
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "standard",
        },
        "status": {"phase": "Pending"},
    }
    assert cells(PERSISTENTVOLUMECLAIMS, pending) == [
        "data",
        "Pending",
        "",
        "",
        "",
        "standard",
        "<unset>",
        "2m",
        "<unset>",
    ]
    bound: Obj = {
        "metadata": meta("db", 120, annotations={"volume.beta.kubernetes.io/storage-class": "legacy"}),
        "spec": {
            "volumeName": "pv-1",
            "volumeMode": "Filesystem",
            "storageClassName": "standard",
            "volumeAttributesClassName": "gold",
        },
        "status": {
            "phase": "Bound",
            "capacity": {"storage": "1024Mi"},
            "accessModes": ["ReadWriteMany", "ReadWriteOnce", "ReadWriteOnce"],
        },
    }
    assert cells(PERSISTENTVOLUMECLAIMS, bound) == [
        "db",
        "Bound",
        "pv-1",
        "1Gi",
        "RWO,RWX",
        "legacy",
        "gold",
        "2m",
        "Filesystem",
    ]
    bound["metadata"]["deletionTimestamp"] = ago(1)
    assert cells(PERSISTENTVOLUMECLAIMS, bound)[1] == "Terminating"


def test_persistent_volumes() -> None:
    pv: Obj = {
        "metadata": {"name": "pv-1", "creationTimestamp": ago(2 * 86400)},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteOncePod", "ReadOnlyMany"],
            "persistentVolumeReclaimPolicy": "Retain",
            "claimRef": {"namespace": "default", "name": "db"},
            "storageClassName": "standard",
            "volumeMode": "Block",
        },
        "status": {"phase": "Bound"},
    }
    assert cells(PERSISTENTVOLUMES, pv) == [
        "pv-1",
        "10Gi",
        "ROX,RWOP",
        "Retain",
        "Bound",
        "default/db",
        "standard",
        "<unset>",
        "",
        "2d",
        "Block",
    ]
    released: Obj = {"metadata": {"name": "old"}, "spec": {}, "status": {"phase": "Failed", "reason": "Recycle"}}
    assert cells(PERSISTENTVOLUMES, released) == [
        "old",
        "0",
        "",
        "",
        "Failed",
        "",
        "",
        "<unset>",
        "Recycle",
        "<unknown>",
        "<unset>",
    ]


@pytest.mark.parametrize(
    ("written", "printed"),
    [
        ("10Gi", "10Gi"),
        ("1024Mi", "1Gi"),
        ("1.5Gi", "1536Mi"),
        ("0.5Gi", "512Mi"),
        ("1.5Ki", "1536"),
        ("1000M", "1G"),
        ("1500M", "1500M"),
        ("0.5", "500m"),
        ("1e3", "1e3"),
        ("12e2", "1200"),
        (5, "5"),
        ("0", "0"),
        ("lots", "lots"),
        ("1e999999999", "1e999999999"),  # printed as written, not computed
    ],
)
def test_capacity_is_printed_as_a_canonical_quantity(written: Any, printed: str) -> None:
    pv: Obj = {"metadata": {"name": "pv"}, "spec": {"capacity": {"storage": written}}}
    assert cells(PERSISTENTVOLUMES, pv)[1] == printed


def test_replicationcontroller_and_statefulset() -> None:
    rc = workload({"replicas": 3, "selector": {"app": "web"}}, {"replicas": 3, "readyReplicas": 2})
    assert cells(REPLICATIONCONTROLLERS, rc) == ["web", 3, 3, 2, "10m", "app,log", "nginx:1.27,busybox", "app=web"]
    rc["spec"].pop("selector")
    rc["spec"].pop("replicas")
    assert cells(REPLICATIONCONTROLLERS, rc)[1] == 1
    assert cells(REPLICATIONCONTROLLERS, rc)[7] == "<none>"
    sts = workload({"replicas": 3}, {"replicas": 3, "readyReplicas": 1})
    assert cells(STATEFULSETS, sts) == ["web", "1/3", "10m", "app,log", "nginx:1.27,busybox"]
    assert cells(STATEFULSETS, workload({}, {}))[1] == "0/1"


def test_controllerrevision() -> None:
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "u1", "controller": True}
    cr: Obj = {"metadata": meta("web-7d9f", 600, ownerReferences=[owner]), "revision": 2}
    assert cells(CONTROLLERREVISIONS, cr) == ["web-7d9f", "statefulset.apps/web", 2, "10m"]
    cr["metadata"]["ownerReferences"] = [{**owner, "apiVersion": "v1", "kind": "Pod", "name": "p"}]
    assert cells(CONTROLLERREVISIONS, cr)[1] == "pod/p"
    cr["metadata"]["ownerReferences"] = [{**owner, "controller": False}]
    assert cells(CONTROLLERREVISIONS, cr)[1] == "<none>"


def job(spec: Obj, status: Obj, **extra_meta: Any) -> Obj:
    j = workload(spec, status)
    j["metadata"].update(extra_meta)
    j["spec"]["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": "u-1"}}
    return j


def test_job_completions_and_duration() -> None:
    done = job(
        {"completions": 1, "parallelism": 1},
        {
            "succeeded": 1,
            "startTime": ago(500),
            "completionTime": ago(405),
            "conditions": [{"type": "SuccessCriteriaMet", "status": "True"}, {"type": "Complete", "status": "True"}],
        },
    )
    assert cells(JOBS, done) == [
        "web",
        "Complete",
        "1/1",
        "95s",
        "10m",
        "app,log",
        "nginx:1.27,busybox",
        "batch.kubernetes.io/controller-uid=u-1",
    ]
    running = job({"completions": 5, "parallelism": 2}, {"succeeded": 3, "active": 2, "startTime": ago(150)})
    assert visible(JOBS, running) == ["web", "Running", "3/5", "2m30s", "10m"]
    queue = job({"parallelism": 4}, {})
    assert visible(JOBS, queue)[1:4] == ["Running", "0/1 of 4", ""]
    assert visible(JOBS, job({}, {}))[2] == "0/1"


@pytest.mark.parametrize(
    ("conditions", "deleting", "expected"),
    [
        ([{"type": "Failed", "status": "True"}], True, "Failed"),
        ([{"type": "Complete", "status": "False"}], True, "Terminating"),
        ([{"type": "Suspended", "status": "True"}], False, "Suspended"),
        ([{"type": "FailureTarget", "status": "True"}], False, "FailureTarget"),
        ([{"type": "Suspended", "status": "False"}], False, "Running"),
    ],
)
def test_job_status(conditions: list[Obj], deleting: bool, expected: str) -> None:
    j = job({"completions": 1}, {"conditions": conditions})
    if deleting:
        j["metadata"]["deletionTimestamp"] = ago(0)
    assert visible(JOBS, j)[1] == expected


def test_cronjob() -> None:
    cj: Obj = {
        "metadata": meta("backup", 2 * 86400),
        "spec": {
            "schedule": "*/5 * * * *",
            "timeZone": "Europe/Paris",
            "suspend": False,
            "jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "b", "image": "busybox"}]}}}},
        },
        "status": {"active": [{"name": "backup-1"}], "lastScheduleTime": ago(240)},
    }
    assert cells(CRONJOBS, cj) == [
        "backup",
        "*/5 * * * *",
        "Europe/Paris",
        "False",
        1,
        "4m",
        "2d",
        "b",
        "busybox",
        "<none>",
    ]
    cj["spec"] = {"schedule": "@hourly", "suspend": True}
    cj["status"] = {}
    assert visible(CRONJOBS, cj) == ["backup", "@hourly", "<none>", "True", 0, "<none>", "2d"]
    cj["spec"].pop("suspend")
    assert visible(CRONJOBS, cj)[3] == "<unset>"


def hpa(metrics: list[Obj], current: list[Obj], **spec: Any) -> Obj:
    return {
        "metadata": meta("web", 300),
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "maxReplicas": 10,
            "metrics": metrics,
            **spec,
        },
        "status": {"currentReplicas": 2, "desiredReplicas": 2, "currentMetrics": current},
    }


def cpu(target: Obj) -> Obj:
    return {"type": "Resource", "resource": {"name": "cpu", "target": target}}


def test_hpa() -> None:
    utilization = hpa(
        [cpu({"type": "Utilization", "averageUtilization": 80})],
        [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 42}}}],
        minReplicas=2,
    )
    assert cells(HORIZONTALPODAUTOSCALERS, utilization) == [
        "web",
        "Deployment/web",
        "cpu: 42%/80%",
        "2",
        10,
        2,
        "5m",
    ]
    unread = hpa([cpu({"type": "Utilization", "averageUtilization": 80})], [])
    assert cells(HORIZONTALPODAUTOSCALERS, unread)[2:4] == ["cpu: <unknown>/80%", "<unset>"]
    assert cells(HORIZONTALPODAUTOSCALERS, hpa([], []))[2] == "<none>"


def test_hpa_metric_kinds() -> None:
    metrics = [
        cpu({"type": "AverageValue", "averageValue": "500m"}),
        {"type": "Pods", "pods": {"metric": {"name": "qps"}, "target": {"type": "AverageValue", "averageValue": "1k"}}},
        {"type": "External", "external": {"metric": {"name": "queue"}, "target": {"type": "Value", "value": "30"}}},
    ]
    current = [
        {"type": "Resource", "resource": {"name": "cpu", "current": {"averageValue": "0.25"}}},
        {"type": "Pods", "pods": {"metric": {"name": "qps"}, "current": {"averageValue": "1500"}}},
    ]
    assert cells(HORIZONTALPODAUTOSCALERS, hpa(metrics, current))[2] == "cpu: 250m/500m, 1500/1k + 1 more..."
    others = [
        {"type": "External", "external": {"target": {"type": "AverageValue", "averageValue": "2"}}},
        {"type": "Object", "object": {"target": {"type": "Value", "value": "7"}}},
    ]
    reading = [
        {"type": "External", "external": {"current": {"value": "9"}}},
        {"type": "Object", "object": {"current": {"value": "6"}}},
    ]
    assert cells(HORIZONTALPODAUTOSCALERS, hpa(others, reading))[2] == "<unknown>/2 (avg), 6/7"
    strange: list[Obj] = [
        {
            "type": "ContainerResource",
            "containerResource": {"name": "memory", "container": "app", "target": {"type": "Utilization"}},
        },
        {"type": "Custom"},
    ]
    assert cells(HORIZONTALPODAUTOSCALERS, hpa(strange, []))[2] == "memory: <unknown>/<auto>, <unknown type>"


def test_ingress() -> None:
    ing: Obj = {
        "metadata": meta("web"),
        "spec": {
            "ingressClassName": "nginx",
            "rules": [{"host": "a.example.com"}, {"host": "b.example.com"}],
            "tls": [{"hosts": ["a.example.com"], "secretName": "tls"}],
        },
        "status": {
            "loadBalancer": {
                "ingress": [{"ip": "203.0.113.10"}, {"hostname": "lb.example.com"}, {"ip": "203.0.113.10"}]
            }
        },
    }
    assert cells(INGRESSES, ing) == [
        "web",
        "nginx",
        "a.example.com,b.example.com",
        "203.0.113.10,lb.example.com",
        "80, 443",
        "90s",
    ]
    ing["spec"] = {"defaultBackend": {"service": {"name": "web", "port": {"number": 80}}}}
    ing["status"] = {"loadBalancer": {}}
    assert cells(INGRESSES, ing)[1:5] == ["<none>", "*", "", "80"]
    ing["spec"] = {"rules": [{"host": "a"}, {}, {"host": "b"}, {"host": "c"}, {"host": "d"}, {}]}
    assert cells(INGRESSES, ing)[2] == "a,b,c + 3 more..."


def test_ingressclass_and_networkpolicy() -> None:
    ic: Obj = {
        "metadata": {"name": "nginx", "creationTimestamp": ago(60)},
        "spec": {
            "controller": "k8s.io/ingress-nginx",
            "parameters": {"apiGroup": "k8s.example.com", "kind": "IngressParameters", "name": "external"},
        },
    }
    assert cells(INGRESSCLASSES, ic) == [
        "nginx",
        "k8s.io/ingress-nginx",
        "IngressParameters.k8s.example.com/external",
        "60s",
    ]
    ic["spec"]["parameters"] = {"kind": "ConfigMap", "name": "cfg", "scope": "Namespace", "namespace": "x"}
    assert cells(INGRESSCLASSES, ic)[2] == "ConfigMap/cfg"
    ic["spec"].pop("parameters")
    assert cells(INGRESSCLASSES, ic)[2] == "<none>"
    np: Obj = {"metadata": meta("deny"), "spec": {"podSelector": {"matchLabels": {"app": "db"}}}}
    assert cells(NETWORKPOLICIES, np) == ["deny", "app=db", "90s"]
    np["spec"]["podSelector"] = {}
    assert cells(NETWORKPOLICIES, np)[1] == "<none>"


def test_storageclass() -> None:
    sc: Obj = {
        "metadata": {
            "name": "standard",
            "creationTimestamp": ago(86400),
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": "rancher.io/local-path",
        "reclaimPolicy": "Retain",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": True,
    }
    assert cells(STORAGECLASSES, sc) == [
        "standard (default)",
        "rancher.io/local-path",
        "Retain",
        "WaitForFirstConsumer",
        True,
        "24h",
    ]
    plain: Obj = {"metadata": {"name": "fast"}, "provisioner": "csi.example.com"}
    assert cells(STORAGECLASSES, plain) == ["fast", "csi.example.com", "Delete", "Immediate", False, "<unknown>"]


def test_role_bindings() -> None:
    rb: Obj = {
        "metadata": meta("readers", 45),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [
            {"kind": "User", "name": "alice"},
            {"kind": "Group", "name": "devs"},
            {"kind": "User", "name": "bob"},
            {"kind": "ServiceAccount", "name": "ci", "namespace": "tools"},
        ],
    }
    assert cells(ROLEBINDINGS, rb) == ["readers", "ClusterRole/view", "45s", "alice, bob", "devs", "tools/ci"]
    crb: Obj = {"metadata": {"name": "admins"}, "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"}}
    assert cells(CLUSTERROLEBINDINGS, crb) == ["admins", "ClusterRole/cluster-admin", "<unknown>", "", "", ""]


def test_webhooks_and_apiservices() -> None:
    hooks: Obj = {"metadata": {"name": "policy", "creationTimestamp": ago(30)}, "webhooks": [{"name": "a"}, {}]}
    assert cells(VALIDATINGWEBHOOKCONFIGURATIONS, hooks) == ["policy", 2, "30s"]
    assert cells(MUTATINGWEBHOOKCONFIGURATIONS, {"metadata": {"name": "none"}}) == ["none", 0, "<unknown>"]
    local: Obj = {
        "metadata": {"name": "v1.apps", "creationTimestamp": ago(30)},
        "spec": {"group": "apps", "version": "v1"},
        "status": {"conditions": [{"type": "Available", "status": "True", "reason": "Local"}]},
    }
    assert cells(APISERVICES, local) == ["v1.apps", "Local", "True", "30s"]
    remote: Obj = {
        "metadata": {"name": "v1beta1.metrics.k8s.io", "creationTimestamp": ago(30)},
        "spec": {"service": {"namespace": "kube-system", "name": "metrics-server"}},
        "status": {"conditions": [{"type": "Available", "status": "False", "reason": "MissingEndpoints"}]},
    }
    assert cells(APISERVICES, remote)[1:3] == ["kube-system/metrics-server", "False (MissingEndpoints)"]
    remote["status"] = {}
    assert cells(APISERVICES, remote)[2] == "Unknown"


def test_roles_and_crds_keep_the_default_columns() -> None:
    role: Obj = {"metadata": {"name": "reader", "creationTimestamp": "2027-01-15T08:00:00Z"}, "rules": []}
    for kind in (ROLES, CLUSTERROLES, CUSTOMRESOURCEDEFINITIONS):
        assert cells(kind, role) == ["reader", "2027-01-15T08:00:00Z"]


# -- the Table envelope ------------------------------------------------------------------------


def test_table_envelope_and_partial_object_metadata() -> None:
    pods = [pod("a", statuses=[running()]), pod("b", statuses=[running()])]
    table = to_table(PODS, pods, now=NOW, resource_version="1009", continue_token="tok")
    assert table["kind"] == "Table"
    assert table["apiVersion"] == "meta.k8s.io/v1"
    assert table["metadata"] == {"resourceVersion": "1009", "continue": "tok"}
    assert [r["cells"][0] for r in table["rows"]] == ["a", "b"]
    obj = table["rows"][0]["object"]
    assert obj == {
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": pods[0]["metadata"],
    }
    assert "continue" not in to_table(PODS, pods, now=NOW, resource_version="1")["metadata"]
    assert orjson.loads(orjson.dumps(table)) == table


def test_include_object() -> None:
    p = pod(statuses=[running()])
    full = to_table(PODS, [p], now=NOW, resource_version="1", include_object="Object")["rows"][0]["object"]
    assert full["kind"] == "Pod" and full["apiVersion"] == "v1"
    assert full["spec"] == p["spec"]
    assert "kind" not in p  # the stored object is not modified
    d = workload({}, {})
    assert (
        to_table(DEPLOYMENTS, [d], now=NOW, resource_version="1", include_object="Object")["rows"][0]["object"][
            "apiVersion"
        ]
        == "apps/v1"
    )
    none = to_table(PODS, [p], now=NOW, resource_version="1", include_object="None")["rows"][0]
    assert "object" not in none
    with pytest.raises(ValueError, match="includeObject"):
        to_table(PODS, [p], now=NOW, resource_version="1", include_object="Everything")


def test_watch_event_table() -> None:
    n = node(ready="False")
    n["metadata"]["resourceVersion"] = "77"
    table = watch_event_table(NODES, n, now=NOW)
    assert table["metadata"] == {"resourceVersion": "77"}
    assert len(table["rows"]) == 1
    assert table["rows"][0]["cells"][1] == "NotReady"
    assert table["columnDefinitions"][0]["name"] == "Name"


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.kind)
def test_every_kind_prints_one_cell_per_column_even_for_empty_objects(kind: Kind) -> None:
    defs = column_definitions(kind)
    for c in defs:
        assert set(c) == {"name", "type", "format", "description", "priority"}
        assert c["priority"] in (0, 1)
        assert c["description"]
    for obj in ({}, {"metadata": {"name": "x"}, "spec": None, "status": "garbage"}):
        table = to_table(kind, [obj], now=NOW, resource_version="1")
        assert len(table["rows"][0]["cells"]) == len(defs)

from __future__ import annotations

from typing import Any

import orjson
import pytest

from kubemesh.apiserver.tables import column_definitions, human_duration, to_table, wants_table, watch_event_table
from kubemesh.services.machinery.clock import format_time
from kubemesh.services.model.kinds import (
    CONFIGMAPS,
    DAEMONSETS,
    DEPLOYMENTS,
    EVENTS,
    KINDS,
    LEASES,
    NAMESPACES,
    NODES,
    PODDISRUPTIONBUDGETS,
    PODS,
    PRIORITYCLASSES,
    REPLICASETS,
    SERVICES,
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

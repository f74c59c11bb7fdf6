"""What Go's decode and encode of a built-in object does, done by the apiserver on every write.

* Status counters without `omitempty` in their json tags are always written, zeros included:
  a new ReplicaSet reads `status: {replicas: 0}` before its controller's first sync, and a
  status update that leaves them out gets them back (the official clients' typed models
  require most of them).
* A `resource.Quantity` sent as a JSON number (`cpu: 1` in a YAML manifest) is answered as its
  canonical string (`"1"`, `0.5` → `"500m"`), in specs and statuses alike.

The official clients' typed APIs (`kubernetes` in a worker thread, `kubernetes_asyncio`) create,
read and list DaemonSets, ReplicaSets, StatefulSets and ReplicationControllers that no
controller has synced yet (the failure the issue reported: `create_namespaced_daemon_set`
raising although the object was stored).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import kubernetes.client as _k8s
import kubernetes_asyncio.client as _ak8s
import pytest
from restkit import Rest

if TYPE_CHECKING:  # conftest is never imported at run time (see tests/conftest.py)
    from conftest import ApiServer

# The client packages are only partly annotated: use them untyped.
k8s: Any = _k8s
ak8s: Any = _ak8s

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

NS = "/namespaces/default"
TEMPLATE = {"metadata": {"labels": {"app": "a"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
SELECTOR = {"matchLabels": {"app": "a"}}

ZEROS: list[tuple[str, dict[str, Any], dict[str, int]]] = [
    ("/apis/apps/v1" + NS + "/replicasets", {"spec": {"selector": SELECTOR, "template": TEMPLATE}},
     {"replicas": 0}),
    ("/api/v1" + NS + "/replicationcontrollers", {"spec": {"selector": {"app": "a"}, "template": TEMPLATE}},
     {"replicas": 0}),
    ("/apis/apps/v1" + NS + "/statefulsets", {"spec": {"selector": SELECTOR, "serviceName": "s",
                                                       "template": TEMPLATE}},
     {"replicas": 0, "availableReplicas": 0}),
    ("/apis/apps/v1" + NS + "/daemonsets", {"spec": {"selector": SELECTOR, "template": TEMPLATE}},
     {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0, "numberReady": 0}),
    ("/apis/policy/v1" + NS + "/poddisruptionbudgets", {"spec": {"selector": SELECTOR, "minAvailable": 1}},
     {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0}),
    ("/apis/autoscaling/v2" + NS + "/horizontalpodautoscalers", {"spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}, "maxReplicas": 3}},
     {"desiredReplicas": 0}),
]


@pytest.mark.parametrize(("path", "body", "zeros"), ZEROS, ids=[p.rsplit("/", 1)[1] for p, _, _ in ZEROS])
async def test_status_counters_are_written_zeros_included(rest: Rest, path: str, body: dict[str, Any],
                                                          zeros: dict[str, int]) -> None:
    created = await rest.ok("POST", path, {"metadata": {"name": "x"}, **body})
    assert zeros.items() <= created["status"].items(), created["status"]
    # A status update that leaves the counters out (a controller writing only what it knows).
    created["status"] = {}
    updated = await rest.ok("PUT", f"{path}/x/status", created)
    assert zeros.items() <= updated["status"].items(), updated["status"]
    patched = await rest.ok("PATCH", f"{path}/x/status", {"status": {next(iter(zeros)): None}},
                            ctype="application/merge-patch+json")
    assert zeros.items() <= patched["status"].items(), patched["status"]
    assert (await rest.ok("GET", f"{path}/x"))["status"] == patched["status"]


async def test_numeric_quantities_are_answered_as_canonical_strings(rest: Rest) -> None:
    pod = await rest.ok("POST", "/api/v1" + NS + "/pods", {"metadata": {"name": "p"}, "spec": {
        "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": 0.5, "memory": 1073741824},
                                                                  "limits": {"cpu": 1}}}],
        "volumes": [{"name": "scratch", "emptyDir": {"sizeLimit": 1000}}]}})
    assert pod["spec"]["containers"][0]["resources"] == {"requests": {"cpu": "500m", "memory": "1073741824"},
                                                         "limits": {"cpu": "1"}}
    assert pod["spec"]["volumes"][0]["emptyDir"] == {"sizeLimit": "1k"}

    deploy = await rest.ok("POST", "/apis/apps/v1" + NS + "/deployments", {"metadata": {"name": "d"}, "spec": {
        "selector": SELECTOR, "template": {**TEMPLATE, "spec": {"containers": [
            {"name": "c", "image": "i", "resources": {"requests": {"cpu": "250m", "memory": 64}}}]}}}})
    assert deploy["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "250m", "memory": "64"}}, "strings are kept as written; numbers become strings"

    quota = "/api/v1" + NS + "/resourcequotas"
    await rest.ok("POST", quota, {"metadata": {"name": "q"}, "spec": {"hard": {"pods": 10, "requests.cpu": 2.5}}})
    patched = await rest.ok("PATCH", f"{quota}/q", {"spec": {"hard": {"pods": 20}}},
                            ctype="application/merge-patch+json")
    assert patched["spec"]["hard"] == {"pods": "20", "requests.cpu": "2500m"}
    patched["status"] = {"hard": {"pods": 20}, "used": {"pods": 0}}
    status = await rest.ok("PUT", f"{quota}/q/status", patched)
    assert status["status"] == {"hard": {"pods": "20"}, "used": {"pods": "0"}}

    node = await rest.ok("POST", "/api/v1/nodes", {"metadata": {"name": "n"}, "status": {
        "capacity": {"cpu": 4, "memory": "8Gi", "pods": 110}}})
    assert node["status"]["capacity"] == {"cpu": "4", "memory": "8Gi", "pods": "110"}

    hpa = await rest.ok("POST", "/apis/autoscaling/v2" + NS + "/horizontalpodautoscalers", {
        "metadata": {"name": "h"}, "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d"}, "maxReplicas": 3,
            "metrics": [{"type": "Pods", "pods": {"metric": {"name": "qps"},
                                                  "target": {"type": "AverageValue", "averageValue": 100}}}]}})
    assert hpa["spec"]["metrics"][0]["pods"]["target"] == {"type": "AverageValue", "averageValue": "100"}


# -- The calls the issue saw fail, through the official clients' typed APIs.

WORKLOADS: list[tuple[str, str, dict[str, Any]]] = [
    ("daemon_set", "DaemonSet", {"selector": SELECTOR, "template": TEMPLATE}),
    ("replica_set", "ReplicaSet", {"selector": SELECTOR, "template": TEMPLATE}),
    ("stateful_set", "StatefulSet", {"selector": SELECTOR, "serviceName": "s", "template": TEMPLATE}),
]


def sync_workloads(url: str) -> list[str]:
    api_client = k8s.ApiClient(k8s.Configuration(host=url))
    try:
        apps = k8s.AppsV1Api(api_client)
        made = []
        for plural, kind, spec in WORKLOADS:
            body = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": f"sync-{plural.replace('_', '-')}"},
                    "spec": spec}
            created = getattr(apps, f"create_namespaced_{plural}")("default", body)
            made.append(created.metadata.name)
            getattr(apps, f"read_namespaced_{plural}_status")(created.metadata.name, "default")
            getattr(apps, f"list_{plural}_for_all_namespaces")()
        core = k8s.CoreV1Api(api_client)
        rc = core.create_namespaced_replication_controller("default", {
            "apiVersion": "v1", "kind": "ReplicationController", "metadata": {"name": "sync-rc"},
            "spec": {"selector": {"app": "a"}, "template": TEMPLATE}})
        made.append(rc.metadata.name)
        core.list_replication_controller_for_all_namespaces()
        return made
    finally:
        api_client.close()


async def test_the_typed_apis_read_every_workload_before_its_controller_syncs(apiserver: ApiServer) -> None:
    made = await asyncio.to_thread(sync_workloads, apiserver.url)
    assert made == ["sync-daemon-set", "sync-replica-set", "sync-stateful-set", "sync-rc"]
    async with ak8s.ApiClient(configuration=ak8s.Configuration(host=apiserver.url)) as api_client:
        apps = ak8s.AppsV1Api(api_client)
        for plural, kind, spec in WORKLOADS:
            body = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": f"async-{plural.replace('_', '-')}"},
                    "spec": spec}
            created = await getattr(apps, f"create_namespaced_{plural}")("default", body)
            listed = await getattr(apps, f"list_namespaced_{plural}")("default")
            assert created.metadata.name in [item.metadata.name for item in listed.items]
        ds = await apps.read_namespaced_daemon_set("async-daemon-set", "default")
        assert (ds.status.current_number_scheduled, ds.status.number_misscheduled, ds.status.desired_number_scheduled,
                ds.status.number_ready) == (0, 0, 0, 0)

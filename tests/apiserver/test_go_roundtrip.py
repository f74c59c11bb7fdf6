"""What Go's decode and encode of a built-in object does, done by the apiserver on every write.

* Status counters without `omitempty` in their json tags are always written, zeros included:
  a new ReplicaSet reads `status: {replicas: 0}` before its controller's first sync, and a
  status update that leaves them out gets them back (the official clients' typed models
  require most of them).
* A `resource.Quantity` sent as a JSON number (`cpu: 1` in a YAML manifest) is answered as its
  canonical string (`"1"`, `0.5` → `"500m"`), in specs and statuses alike.
"""

from __future__ import annotations

from typing import Any

import pytest
from restkit import Rest

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

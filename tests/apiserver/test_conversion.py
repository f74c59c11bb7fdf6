"""A built-in resource at two versions: the autoscaling/v1 HorizontalPodAutoscaler over the stored v2.

Writes at v1 are stored at v2 and read back at either version; what v1 cannot say rides in
upstream's `autoscaling.alpha.kubernetes.io/...` annotations, so nothing is lost either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from restkit import Rest

from kubemesh.apiserver.conversion import at_version, up
from kubemesh.services.model.kinds import HORIZONTALPODAUTOSCALERS_V1

if TYPE_CHECKING:
    pass

V1 = "/apis/autoscaling/v1/namespaces/default/horizontalpodautoscalers"
V2 = "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers"
TARGET = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"}


def cpu(target: int) -> dict[str, Any]:
    return {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization",
                                                                         "averageUtilization": target}}}


async def test_a_v1_object_is_stored_at_v2_and_read_at_both(rest: Rest) -> None:
    created = await rest.ok("POST", V1, {"apiVersion": "autoscaling/v1", "kind": "HorizontalPodAutoscaler",
                                         "metadata": {"name": "web"}, "spec": {
                                             "scaleTargetRef": TARGET, "minReplicas": 2, "maxReplicas": 5,
                                             "targetCPUUtilizationPercentage": 80}})
    assert created["apiVersion"] == "autoscaling/v1" and created["spec"]["targetCPUUtilizationPercentage"] == 80
    at_v2 = await rest.ok("GET", f"{V2}/web")
    assert at_v2["apiVersion"] == "autoscaling/v2" and at_v2["spec"]["metrics"] == [cpu(80)]
    assert "targetCPUUtilizationPercentage" not in at_v2["spec"]
    listed = await rest.ok("GET", V1)
    assert listed["items"][0]["apiVersion"] == "autoscaling/v1"
    assert listed["items"][0]["spec"]["targetCPUUtilizationPercentage"] == 80
    # A merge patch at v1 is applied to the object as read at v1.
    patched = await rest.ok("PATCH", f"{V1}/web", {"spec": {"targetCPUUtilizationPercentage": 50}},
                            ctype="application/merge-patch+json")
    assert patched["spec"]["targetCPUUtilizationPercentage"] == 50
    assert (await rest.ok("GET", f"{V2}/web"))["spec"]["metrics"] == [cpu(50)]
    events = await rest.watch_lines(V1, params={"resourceVersion": created["metadata"]["resourceVersion"]}, until=1)
    assert events[0]["type"] == "MODIFIED" and events[0]["object"]["apiVersion"] == "autoscaling/v1"
    assert events[0]["object"]["spec"]["targetCPUUtilizationPercentage"] == 50


async def test_what_v1_cannot_say_survives_a_round_trip_through_it(rest: Rest) -> None:
    memory = {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue",
                                                                             "averageValue": "500Mi"}}}
    behavior = {"scaleDown": {"stabilizationWindowSeconds": 60}}
    v2 = await rest.ok("POST", V2, {"metadata": {"name": "rich"}, "spec": {
        "scaleTargetRef": TARGET, "maxReplicas": 4, "metrics": [cpu(70), memory], "behavior": behavior}})
    at_v1 = await rest.ok("GET", f"{V1}/rich")
    assert at_v1["spec"]["targetCPUUtilizationPercentage"] == 70
    assert "autoscaling.alpha.kubernetes.io/metrics" in at_v1["metadata"]["annotations"]
    # Written back at v1 unchanged: the same object, no new revision.
    back = await rest.ok("PUT", f"{V1}/rich", at_v1)
    assert back["metadata"]["resourceVersion"] == v2["metadata"]["resourceVersion"]
    again = await rest.ok("GET", f"{V2}/rich")
    assert again["spec"]["metrics"] == [cpu(70), memory] and again["spec"]["behavior"] == behavior
    assert "annotations" not in again["metadata"]


def test_conversion_leaves_its_argument_alone() -> None:
    v1 = {"apiVersion": "autoscaling/v1", "metadata": {"name": "x"},
          "spec": {"maxReplicas": 3, "targetCPUUtilizationPercentage": 60}, "status": {"currentReplicas": 1}}
    snapshot = repr(v1)
    stored = up(HORIZONTALPODAUTOSCALERS_V1, v1)
    assert repr(v1) == snapshot
    assert stored["spec"] == {"maxReplicas": 3, "metrics": [cpu(60)]}
    assert at_version(HORIZONTALPODAUTOSCALERS_V1, stored) == v1

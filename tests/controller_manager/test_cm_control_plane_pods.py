"""The control plane's mirror pods in kube-system, on a real mesh (kubemesh.apiserver.controlplane).

`kubectl get pods -n kube-system` lists kube-apiserver, kube-controller-manager and kube-scheduler
pods, Running, on the oldest and the newest kubectl; a `component.crash` fault on the scheduler
(re-executed in place) shows as one restart with the crash's exit code in `lastState`; a restart
by the launcher (a clean stop, then a new process) as a second one, exit code 0. PodGC leaves
the pods alone although their host has no Node object. Cluster DNS is there as kubeadm leaves
it: the coredns Deployment's two pods Running on the emulated nodes, behind the kube-dns Service
at 10.96.0.10.
"""

from __future__ import annotations

from typing import Any

import pytest
from cm_e2e import Story, kubectl_binary, start_story

from kubemesh.services.mesh.kubectl import Kubectl
from kubemesh.services.model.kinds import DEPLOYMENTS, ENDPOINTS, PODS, SERVICES, Obj

pytestmark = pytest.mark.kubectl

NS = "kube-system"
SCHEDULER = "kube-scheduler-kubemesh-control-plane"
EXPECTED = {"kube-apiserver-kubemesh-control-plane", "kube-controller-manager-kubemesh-control-plane", SCHEDULER}


async def test_control_plane_pods_follow_their_processes() -> None:
    async for story in start_story(nodes=1, rate=10.0):
        await control_plane_story(story)


def container(pod: Obj | None) -> dict[str, Any]:
    statuses: list[dict[str, Any]] = ((pod or {}).get("status") or {}).get("containerStatuses") or [{}]
    return statuses[0]


async def control_plane_story(story: Story) -> None:
    for version in ("1.27", "1.33"):
        kubectl = Kubectl(story.env.mesh.kubeconfig_path, binary=kubectl_binary(version))
        out = await kubectl("get", "pods", "-n", NS, timeout=60)
        rows = {ln.split()[0]: ln.split()[1:4] for ln in out.splitlines()[1:]}
        assert set(rows) >= EXPECTED, (version, out)
        for name in EXPECTED:
            assert rows[name] == ["1/1", "Running", "0"], (version, out)

    pod = await story.get(PODS, SCHEDULER, NS)
    assert pod is not None
    assert pod["metadata"]["labels"] == {"component": "kube-scheduler", "tier": "control-plane"}
    assert pod["spec"]["nodeName"] == "kubemesh-control-plane" and pod["spec"]["priority"] == 2_000_001_000
    first_run = container(pod)["containerID"]

    await story.env.mesh.chaos.add({"type": "component.crash", "target": {"component": "scheduler"},
                                    "params": {"exitCode": 3, "restart": True}})

    async def restarted(count: int) -> Obj | None:
        pod = await story.get(PODS, SCHEDULER, NS)
        return pod if container(pod).get("restartCount") == count and container(pod).get("ready") else None

    pod = await story.until(lambda: restarted(1), within=300, what="the scheduler pod's first restart")
    last = container(pod)["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"], last["containerID"]) == (3, "Error", first_run)
    out = await story.run("get", "pod", "-n", NS, SCHEDULER)
    assert out.splitlines()[1].split()[3] == "1", out

    await story.env.mesh.restart("scheduler")
    pod = await story.until(lambda: restarted(2), within=300, what="the scheduler pod's second restart")
    last = container(pod)["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"]) == (0, "Completed")

    # PodGC's quarantine for pods of missing nodes is 40 cluster seconds: these stay.
    async def all_there() -> bool:
        names = {p["metadata"]["name"] for p in await story.items(PODS, NS)}
        return names >= EXPECTED

    await story.holds(all_there, during=60, what="the control plane's pods are not collected by PodGC")

    await cluster_dns_story(story)


async def cluster_dns_story(story: Story) -> None:
    service = await story.get(SERVICES, "kube-dns", NS)
    assert service is not None and service["spec"]["clusterIP"] == "10.96.0.10"

    async def serving() -> list[str] | None:
        deployment = await story.get(DEPLOYMENTS, "coredns", NS)
        endpoints = await story.get(ENDPOINTS, "kube-dns", NS)
        ready = ((deployment or {}).get("status") or {}).get("readyReplicas")
        ips = [a["ip"] for s in (endpoints or {}).get("subsets") or [] for a in s.get("addresses") or []]
        return sorted(ips) if ready == 2 and len(ips) == 2 else None

    await story.until(serving, within=120, what="coredns 2/2 ready behind kube-dns")
    out = await story.run("get", "deployment", "-n", NS, "coredns")
    assert out.splitlines()[1].split()[:2] == ["coredns", "2/2"], out

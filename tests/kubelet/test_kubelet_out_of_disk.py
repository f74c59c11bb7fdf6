"""1.7's OutOfDisk condition, end to end on real processes under the 1.7 profile.

The v1.7 kubelet's disk-space manager (`--low-diskspace-threshold-mb`, 256 in the profile)
reports OutOfDisk from free node disk (`nodefs.available`, from the pods' emulated usage), and
refuses new pods while it is True; v1.7's scheduler keeps every pod off such a node
(`pressure-predicates`, the node condition filter); when the node stops posting, the
node-lifecycle controller turns OutOfDisk Unknown along with Ready. Today's profile reports no
such condition at all. Placement is asserted on bindings and the pods' own status.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
from waits import eventually

from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.mesh.launching import Mesh, MeshSpec
from kubemesh.services.model.kinds import EVENTS, NODES, PODS, Obj

pytestmark = [pytest.mark.slow, pytest.mark.asyncio]

T = TypeVar("T")
RATE = 10.0
FULL = "node-1"
SILENT = "node-2"
HOSTNAME = "kubernetes.io/hostname"


async def until(check: Callable[[], Awaitable[T | None]], *, within: float, what: str) -> T:
    """`eventually`, bounded in cluster seconds (`within`) at the mesh's clock rate."""
    return await eventually(check, within=within / RATE, what=what, interval=0.05)


def condition(node: Obj, ctype: str) -> dict[str, Any] | None:
    return next((c for c in (node.get("status") or {}).get("conditions") or [] if c.get("type") == ctype), None)


def pinned(name: str, node: str, *, disk: str | None = None, bind: bool = False) -> Obj:
    spec: Obj = {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.9",
                                 "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
    if bind:
        spec["nodeName"] = node
    else:
        spec["nodeSelector"] = {HOSTNAME: node}
    meta: Obj = {"name": name, "namespace": "default"}
    if disk:
        meta["annotations"] = {"kubemesh.io/usage": f"disk={disk}"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


async def test_out_of_disk_under_the_1_7_profile() -> None:
    spec = MeshSpec(nodes=3, clock_rate=RATE, seed=7, profile="1.7", start_timeout=120.0)
    async with Mesh(spec) as mesh, mesh.client() as client:
        nodes = (await client.list(NODES))["items"]
        for n in nodes:
            ood = condition(n, "OutOfDisk")
            assert ood is not None and ood["status"] == "False", n["metadata"]["name"]
            assert ood["reason"] == "KubeletHasSufficientDisk"

        # Fill node-1's disk to 200Mi free (100Gi of ephemeral storage): under the 256 MiB floor.
        await client.create(PODS, pinned("filler", FULL, disk="102200Mi"), namespace="default")

        async def out_of_disk() -> dict[str, Any] | None:
            c = condition(await client.get(NODES, FULL), "OutOfDisk")
            return c if c is not None and c["status"] == "True" else None

        c = await until(out_of_disk, within=40, what=f"{FULL} reports OutOfDisk=True")
        assert c["reason"] == "KubeletOutOfDisk"
        filler = await client.get(PODS, "filler", namespace="default")
        assert filler["status"].get("phase") == "Running", "the disk-space manager evicts nothing"
        await asyncio.sleep(0.5)  # the scheduler's node informer catches up with what we read

        # The scheduler keeps a pod off the node (1.7's node condition filter) ...
        await client.create(PODS, pinned("kept-off", FULL), namespace="default")

        async def refused() -> str | None:
            events = (await client.list(EVENTS, namespace="default"))["items"]
            mine = [e for e in events if e.get("reason") == "FailedScheduling"
                    and (e.get("involvedObject") or {}).get("name") == "kept-off"]
            return str(mine[-1].get("message")) if mine else None

        message = await until(refused, within=30, what="FailedScheduling for kept-off")
        assert "out of disk space" in message, message
        assert not (await client.get(PODS, "kept-off", namespace="default"))["spec"].get("nodeName")

        # ... and the kubelet refuses one bound there directly (no scheduler involved).
        await client.create(PODS, pinned("direct", FULL, bind=True), namespace="default")

        async def rejected() -> Obj | None:
            status = (await client.get(PODS, "direct", namespace="default")).get("status") or {}
            return status if status.get("phase") == "Failed" else None

        status = await until(rejected, within=30, what="the kubelet rejects direct")
        assert status.get("reason") == "OutOfDisk", status
        assert "lack of disk space" in str(status.get("message")), status

        # A node that stops posting: OutOfDisk turns Unknown with Ready (v1.7's node controller).
        async with mesh.endpoint.chaos() as chaos, chaos.power_off(SILENT):
            async def unknown() -> Obj | None:
                node = await client.get(NODES, SILENT)
                ready, ood = condition(node, "Ready"), condition(node, "OutOfDisk")
                ok = (ready or {}).get("status") == "Unknown" and (ood or {}).get("status") == "Unknown"
                return node if ok else None

            node = await until(unknown, within=120, what=f"{SILENT} Ready and OutOfDisk Unknown")
            ood = condition(node, "OutOfDisk")
            assert ood is not None and ood["reason"] == "NodeStatusUnknown", ood

        # Freeing the disk clears the condition and the kept-off pod is placed.
        await client.delete(PODS, "filler", namespace="default", grace_period_seconds=0)

        async def placed() -> str | None:
            return (await client.get(PODS, "kept-off", namespace="default"))["spec"].get("nodeName") or None

        assert await until(placed, within=120, what="kept-off bound once the disk is free") == FULL


async def test_no_out_of_disk_condition_today(kubemesh_client: ApiClient) -> None:
    for n in (await kubemesh_client.list(NODES))["items"]:
        assert condition(n, "OutOfDisk") is None

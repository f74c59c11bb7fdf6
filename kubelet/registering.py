"""Node registration: the Node object a kubelet creates for itself, and the create loop.

Guarantees:

* The Node carries the labels a real kubelet (and the cloud node controller) put on it:
  hostname, os, arch (current and `beta.` forms), zone and region (current and the legacy
  `failure-domain.beta` forms the seeds' v1.7 clusters read); capacity, allocatable,
  addresses (InternalIP, Hostname), `daemonEndpoints` pointing at this process's admin port,
  nodeInfo, a pod CIDR and the initial conditions (so a fresh Node is Ready at once).
* Addresses are derived from the node's index and never collide within 65,535 nodes: node
  `i` has InternalIP `172.(16+i/65536).(i/256%256).(i%256)` and pod CIDR `10.(i/256%256).(i%256).0/24`.
* `register` retries until the Node exists (pauses 0.1 s doubling up to 7 s, as upstream).
  When the Node exists already (a kubelet restart, or a power-on), it is adopted: its labels
  are reconciled and its uid returned. As upstream, registration happens once per kubelet
  start: a Node deleted later is not recreated until the node is powered on again.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Mapping
from typing import Any

import structlog

from kubemesh.kubelet.heartbeating import HeartbeatApi, backoff_schedule
from kubemesh.kubelet.resources import Resources
from kubemesh.services.machinery.client import AlreadyExistsError, ApiError
from kubemesh.services.machinery.clock import Clock
from kubemesh.services.model.kinds import NODES, Obj
from kubemesh.services.model.wellknown import LABEL_HOSTNAME, LABEL_REGION, LABEL_ZONE

log = structlog.get_logger("kubelet.registering")


def node_ip(index: int) -> str:
    """The InternalIP of node number `index`."""
    return f"172.{16 + (index >> 16) % 16}.{(index >> 8) & 255}.{index & 255}"


def pod_cidr(index: int) -> str:
    """The pod CIDR of node number `index` (a /24)."""
    return f"10.{(index >> 8) & 255}.{index & 255}.0/24"


def node_labels(*, name: str, zone: str, region: str) -> dict[str, str]:
    """The well-known labels of a Linux amd64 node in `zone`."""
    return {
        LABEL_HOSTNAME: name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "beta.kubernetes.io/os": "linux",
        "beta.kubernetes.io/arch": "amd64",
        LABEL_ZONE: zone,
        LABEL_REGION: region,
        "failure-domain.beta.kubernetes.io/zone": zone,
        "failure-domain.beta.kubernetes.io/region": region,
        "node.kubernetes.io/instance-type": "kubemesh.emulated",
    }


def _stable_uuid(*parts: str) -> str:
    return str(uuid.UUID(bytes=hashlib.sha256("/".join(parts).encode()).digest()[:16], version=4))


def full_status(*, name: str, index: int, capacity: Resources, allocatable: Resources, admin_port: int,
                kubelet_version: str, boot: str) -> Obj:
    """The parts of NodeStatus that do not change while the node runs."""
    return {
        "capacity": capacity.to_quantities(),
        "allocatable": allocatable.to_quantities(),
        "addresses": [{"type": "InternalIP", "address": node_ip(index)},
                      {"type": "Hostname", "address": name}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": admin_port}},
        "nodeInfo": {
            "machineID": _stable_uuid("machine", name).replace("-", ""),
            "systemUUID": _stable_uuid("system", name),
            "bootID": _stable_uuid("boot", name, boot),
            "kernelVersion": "6.8.0-kubemesh",
            "osImage": "kubemesh emulated node",
            "containerRuntimeVersion": "containerd://1.7.0-kubemesh",
            "kubeletVersion": kubelet_version,
            "kubeProxyVersion": kubelet_version,
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }


def node_object(*, name: str, index: int, labels: Mapping[str, str], status: Obj, instance: str,
                conditions: list[dict[str, Any]]) -> Obj:
    """The Node a kubelet registers."""
    cidr = pod_cidr(index)
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name, "labels": dict(labels),
            "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                            "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                            "kubemesh.io/kubelet-instance": instance},
        },
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr], "providerID": f"kubemesh://{instance}/{name}"},
        "status": {**status, "conditions": conditions},
    }


async def register(api: HeartbeatApi, node: Obj, *, clock: Clock) -> Obj:
    """Create `node` (or adopt the existing one), retrying until it succeeds; the Node."""
    name = node["metadata"]["name"]
    pauses = backoff_schedule(initial=0.05, maximum=7.0)
    while True:
        try:
            try:
                return await api.create(NODES, node)
            except AlreadyExistsError:
                existing = await api.get(NODES, name)
                want = node["metadata"]["labels"]
                have = (existing.get("metadata") or {}).get("labels") or {}
                if any(have.get(k) != v for k, v in want.items()):
                    existing = await api.patch(NODES, name, {"metadata": {"labels": want}})
                return existing
        except ApiError as exc:
            pause = next(pauses)
            log.warning("unable to register node", node=name, error=str(exc), retry_in=pause)
            await clock.sleep(pause)

"""Cluster DNS as kubeadm installs it: the `kube-dns` Service and the `coredns` Deployment in kube-system.

`kubeadm init` ends with its addon phase, which creates CoreDNS through the API: a ServiceAccount,
the `coredns` ConfigMap holding the Corefile, a Deployment of two replicas and the `kube-dns`
Service on the tenth address of the service range (10.96.0.10 by default), which is what
kubelets hand pods as their nameserver. Tests and operators look for them (`kubectl get deploy
-n kube-system coredns`, pods that resolve `kube-dns.kube-system`).

`install_cluster_dns` creates whichever of the four is missing when the apiserver starts; from
there on they are ordinary objects: the Deployment and ReplicaSet controllers run its pods, the
scheduler places them on the emulated nodes (they tolerate the control-plane taint and
`CriticalAddonsOnly`, as kubeadm's manifest does), the kubelets run them like any other pod and
the endpoints controllers fill the Service. A user who deletes them gets them back only at the
next start of an apiserver with `--data-dir`, as a `kubeadm init phase addon coredns` would.
The writes are attributed to `kubeadm` in the history.
"""

from __future__ import annotations

import ipaddress
from typing import Final

import structlog

from kubemesh.apiserver import errors
from kubemesh.apiserver.history import WRITER
from kubemesh.apiserver.registry import Registry, WriteOptions
from kubemesh.services.model.kinds import CONFIGMAPS, DEPLOYMENTS, SERVICEACCOUNTS, SERVICES, Kind, Obj

_log = structlog.get_logger("apiserver.addons")

NAMESPACE: Final = "kube-system"
COREDNS_IMAGE: Final = "registry.k8s.io/coredns/coredns:v1.11.3"
LABELS: Final = {"k8s-app": "kube-dns"}

COREFILE: Final = """.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30
    loop
    reload
    loadbalance
}
"""


def dns_service_ip(service_cidr: str) -> str:
    """The tenth address of the service range: where kubeadm puts `kube-dns`."""
    network = ipaddress.ip_network(service_cidr, strict=False)
    return str(network.network_address + 10)


def cluster_dns_objects(*, service_cidr: str) -> list[tuple[Kind, Obj]]:
    """The ServiceAccount, ConfigMap, Deployment and Service, in creation order."""
    meta = {"namespace": NAMESPACE}
    dns_ports = [{"name": "dns", "port": 53, "protocol": "UDP"},
                 {"name": "dns-tcp", "port": 53, "protocol": "TCP"},
                 {"name": "metrics", "port": 9153, "protocol": "TCP"}]
    container = {
        "name": "coredns", "image": COREDNS_IMAGE, "imagePullPolicy": "IfNotPresent",
        "args": ["-conf", "/etc/coredns/Corefile"],
        "resources": {"limits": {"memory": "170Mi"}, "requests": {"cpu": "100m", "memory": "70Mi"}},
        "ports": [{"name": p["name"], "containerPort": p["port"], "protocol": p["protocol"]} for p in dns_ports],
        "volumeMounts": [{"name": "config-volume", "mountPath": "/etc/coredns", "readOnly": True}],
    }
    deployment: Obj = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {**meta, "name": "coredns", "labels": dict(LABELS)},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": dict(LABELS)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 1}},
            "template": {
                "metadata": {"labels": dict(LABELS)},
                "spec": {
                    "priorityClassName": "system-cluster-critical",
                    "serviceAccountName": "coredns",
                    "dnsPolicy": "Default",
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"},
                                    {"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}],
                    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{
                        "weight": 100, "podAffinityTerm": {
                            "labelSelector": {"matchExpressions": [
                                {"key": "k8s-app", "operator": "In", "values": ["kube-dns"]}]},
                            "topologyKey": "kubernetes.io/hostname"}}]}},
                    "containers": [container],
                    "volumes": [{"name": "config-volume", "configMap": {
                        "name": "coredns", "items": [{"key": "Corefile", "path": "Corefile"}]}}],
                },
            },
        },
    }
    service: Obj = {
        "apiVersion": "v1", "kind": "Service",
        "metadata": {**meta, "name": "kube-dns",
                     "labels": {**LABELS, "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"},
                     "annotations": {"prometheus.io/port": "9153", "prometheus.io/scrape": "true"}},
        "spec": {"selector": dict(LABELS), "clusterIP": dns_service_ip(service_cidr), "ports": dns_ports},
    }
    return [
        (SERVICEACCOUNTS, {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {**meta, "name": "coredns"}}),
        (CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {**meta, "name": "coredns"},
                      "data": {"Corefile": COREFILE}}),
        (DEPLOYMENTS, deployment),
        (SERVICES, service),
    ]


def install_cluster_dns(*, registry: Registry, service_cidr: str) -> None:
    """Create whichever of cluster DNS's objects is missing (see the module docstring)."""
    token = WRITER.set(("kubeadm", "addon/coredns"))
    try:
        for kind, obj in cluster_dns_objects(service_cidr=service_cidr):
            name = obj["metadata"]["name"]
            if registry.store.get(kind, f"{NAMESPACE}/{name}") is not None:
                continue
            try:
                registry.create(kind, NAMESPACE, obj, WriteOptions())
            except errors.StatusError as exc:  # e.g. 10.96.0.10 taken by a Service a user made first
                _log.warning("could not create a cluster DNS object", kind=kind.kind, name=name, error=str(exc))
    finally:
        WRITER.reset(token)

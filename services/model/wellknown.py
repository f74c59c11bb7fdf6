"""Kubernetes' well-known taint, label and annotation keys: one spelling for every package.

The names follow upstream's (`k8s.io/api/core/v1/well_known_taints.go` and
`well_known_labels.go`): the node lifecycle controller, the kubelet, the scheduler, admission
and the scenarios all read them from here.
"""

from __future__ import annotations

from typing import Final

TAINT_NOT_READY: Final = "node.kubernetes.io/not-ready"
TAINT_UNREACHABLE: Final = "node.kubernetes.io/unreachable"
TAINT_OUT_OF_SERVICE: Final = "node.kubernetes.io/out-of-service"
TAINT_UNSCHEDULABLE: Final = "node.kubernetes.io/unschedulable"
TAINT_MEMORY_PRESSURE: Final = "node.kubernetes.io/memory-pressure"
TAINT_DISK_PRESSURE: Final = "node.kubernetes.io/disk-pressure"
TAINT_PID_PRESSURE: Final = "node.kubernetes.io/pid-pressure"
TAINT_NETWORK_UNAVAILABLE: Final = "node.kubernetes.io/network-unavailable"
TAINT_OUT_OF_DISK: Final = "node.kubernetes.io/out-of-disk"
"""TaintNodesByCondition's taint for OutOfDisk=True (v1.12 until the condition was removed; only 1.7's
kubelet, `--low-diskspace-threshold-mb`, reports the condition here)."""

LABEL_HOSTNAME: Final = "kubernetes.io/hostname"
LABEL_ZONE: Final = "topology.kubernetes.io/zone"
LABEL_REGION: Final = "topology.kubernetes.io/region"

ANNOTATION_MIRROR: Final = "kubernetes.io/config.mirror"
"""A kubelet's mirror of a static pod (kubemesh: the control plane's own pods in kube-system)."""

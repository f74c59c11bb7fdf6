"""Admission: the defaulting and mutating plugins that the races depend on.

* Defaulting of the fields clients require (a pod's restartPolicy, schedulerName,
  terminationGracePeriodSeconds, container pull policies, qosClass; a Deployment's strategy
  and progress deadline; ...), so that kubectl, the Python clients and the components read
  the same shapes a real apiserver returns; the status counters Go's encoder always writes
  (a ReplicaSet's `replicas: 0`, a DaemonSet's four), on creation and on every status write
  (`complete_status`).
* DefaultTolerationSeconds: every pod that does not already tolerate them gets
  `node.kubernetes.io/not-ready:NoExecute` and `node.kubernetes.io/unreachable:NoExecute`
  tolerations of 300 s. This is why pods on a powered-off node are deleted five minutes
  after the node's NoExecute taint appears.
* Priority: `spec.priority` resolved from `spec.priorityClassName` (or the global default
  PriorityClass), with the two built-in system classes; an unknown class is Forbidden.

All functions mutate the fresh dict they are given (a decoded request body) in place.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

from kubemesh.services.model.kinds import (
    CRONJOBS,
    DAEMONSETS,
    DEPLOYMENTS,
    HORIZONTALPODAUTOSCALERS,
    INGRESSES,
    JOBS,
    NAMESPACES,
    PERSISTENTVOLUMECLAIMS,
    PODDISRUPTIONBUDGETS,
    PODS,
    REPLICASETS,
    REPLICATIONCONTROLLERS,
    SECRETS,
    SERVICES,
    STATEFULSETS,
    Kind,
    Obj,
)
from kubemesh.services.model.wellknown import TAINT_NOT_READY, TAINT_UNREACHABLE

DEFAULT_TOLERATION_SECONDS: Final = 300
NOT_READY_TAINT: Final = TAINT_NOT_READY
UNREACHABLE_TAINT: Final = TAINT_UNREACHABLE

SYSTEM_PRIORITY_CLASSES: Final[dict[str, int]] = {
    "system-node-critical": 2_000_001_000,
    "system-cluster-critical": 2_000_000_000,
}

PriorityLookup = Callable[[str], "Obj | None"]

_STATUS_ON_CREATE: Final[dict[Kind, Obj]] = {
    # The status fields kube-apiserver's strategies (or the kind's controller on its first sync)
    # set, so that clients' typed models, which require some of them, can read every response.
    SERVICES: {"loadBalancer": {}},
    INGRESSES: {"loadBalancer": {}},
    PERSISTENTVOLUMECLAIMS: {"phase": "Pending"},
    HORIZONTALPODAUTOSCALERS: {"currentReplicas": 0, "desiredReplicas": 0},
}

_STATUS_ZEROS: Final[dict[Kind, Obj]] = {
    # The status counters Go's encoder always writes (their json tags have no omitempty): a
    # typed status has them from its creation on, zeros included, whoever writes the status
    # (the controller's first sync, or a client's status update that leaves them out). The
    # official clients' models require most of them.
    REPLICASETS: {"replicas": 0},
    REPLICATIONCONTROLLERS: {"replicas": 0},
    STATEFULSETS: {"replicas": 0, "availableReplicas": 0},
    DAEMONSETS: {"currentNumberScheduled": 0, "numberMisscheduled": 0, "desiredNumberScheduled": 0,
                 "numberReady": 0},
    PODDISRUPTIONBUDGETS: {"disruptionsAllowed": 0, "currentHealthy": 0, "desiredHealthy": 0, "expectedPods": 0},
    HORIZONTALPODAUTOSCALERS: {"desiredReplicas": 0},
}


def complete_status(kind: Kind, obj: Obj) -> None:
    """Add the status counters a typed status always carries (`_STATUS_ZEROS`) where they are absent."""
    zeros = _STATUS_ZEROS.get(kind)
    if zeros is None:
        return
    status = obj.get("status")
    if not isinstance(status, dict):
        status = obj["status"] = {}
    elif any(key not in status for key in zeros):
        status = obj["status"] = dict(status)  # it may be shared with the stored object (copy-on-write)
    for key, zero in zeros.items():
        status.setdefault(key, zero)


class AdmissionError(Exception):
    """Admission refused the object (rendered as 403 Forbidden)."""


def default_container(c: dict[str, Any]) -> None:
    """Default the fields kubectl and the Python clients expect on a container."""
    image = str(c.get("image") or "")
    if "imagePullPolicy" not in c:
        tag = image.rsplit("/", 1)[-1]
        c["imagePullPolicy"] = "Always" if (":" not in tag or tag.endswith(":latest")) and "@" not in tag \
            else "IfNotPresent"
    c.setdefault("terminationMessagePath", "/dev/termination-log")
    c.setdefault("terminationMessagePolicy", "File")
    c.setdefault("resources", {})
    for port in c.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")


def default_pod_spec(spec: dict[str, Any]) -> None:
    """Default a PodSpec (also inside workload templates)."""
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("securityContext", {})
    spec.setdefault("enableServiceLinks", True)
    for field in ("containers", "initContainers"):
        for c in spec.get(field) or []:
            if isinstance(c, dict):
                default_container(c)


def qos_class(spec: dict[str, Any]) -> str:
    """The pod's QoS class: Guaranteed, Burstable or BestEffort (as the kubelet computes it)."""
    containers = [c for c in (spec.get("containers") or []) if isinstance(c, dict)]
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        requests = res.get("requests") or {}
        limits = res.get("limits") or {}
        if requests or limits:
            any_set = True
        for name in ("cpu", "memory"):
            lim = limits.get(name)
            req = requests.get(name, lim)
            if lim is None or str(req) != str(lim):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed and containers else "Burstable"


@dataclass(frozen=True, slots=True, kw_only=True)
class TolerationDefaults:
    """What DefaultTolerationSeconds adds: the release's taint keys and the flags' seconds."""

    not_ready_key: str = NOT_READY_TAINT
    """`node.alpha.kubernetes.io/notReady` before 1.9 (a version profile sets it)."""
    unreachable_key: str = UNREACHABLE_TAINT
    not_ready_seconds: int = DEFAULT_TOLERATION_SECONDS
    """`--default-not-ready-toleration-seconds`."""
    unreachable_seconds: int = DEFAULT_TOLERATION_SECONDS
    """`--default-unreachable-toleration-seconds`."""


def add_default_tolerations(spec: dict[str, Any], defaults: TolerationDefaults = TolerationDefaults()) -> None:
    """DefaultTolerationSeconds: tolerate not-ready and unreachable NoExecute for 300 s."""
    tolerations = spec.get("tolerations")
    if not isinstance(tolerations, list):
        tolerations = []
    for key, seconds in ((defaults.not_ready_key, defaults.not_ready_seconds),
                         (defaults.unreachable_key, defaults.unreachable_seconds)):
        tolerated = any(
            isinstance(t, dict)
            and ((t.get("operator") == "Exists" and not t.get("key")) or t.get("key") == key)
            and t.get("effect") in (None, "", "NoExecute")
            for t in tolerations
        )
        if not tolerated:
            tolerations.append({"key": key, "operator": "Exists", "effect": "NoExecute",
                                "tolerationSeconds": seconds})
    spec["tolerations"] = tolerations


def resolve_priority(spec: dict[str, Any], *, lookup: PriorityLookup, classes: Iterable[Obj]) -> None:
    """Set spec.priority (and preemptionPolicy) from the pod's PriorityClass."""
    name = spec.get("priorityClassName")
    value: int | None = None
    policy: str | None = None
    if name:
        if name in SYSTEM_PRIORITY_CLASSES:
            value = SYSTEM_PRIORITY_CLASSES[name]
        else:
            pc = lookup(str(name))
            if pc is None:
                raise AdmissionError(f"no PriorityClass with name {name} was found")
            value = int(pc.get("value") or 0)
            policy = pc.get("preemptionPolicy")
    else:
        for pc in classes:
            if pc.get("globalDefault"):
                spec["priorityClassName"] = pc["metadata"]["name"]
                value = int(pc.get("value") or 0)
                policy = pc.get("preemptionPolicy")
                break
    spec["priority"] = value if value is not None else 0
    spec.setdefault("preemptionPolicy", policy or "PreemptLowerPriority")


def admit_create(kind: Kind, obj: Obj, *, priority: PriorityLookup, priority_classes: Iterable[Obj],
                 tolerations: TolerationDefaults = TolerationDefaults()) -> None:
    """Mutating admission and defaulting for a new object."""
    spec = obj.get("spec")
    if kind is SECRETS:
        obj.setdefault("type", "Opaque")
    if kind in _STATUS_ON_CREATE:
        obj["status"] = dict(_STATUS_ON_CREATE[kind])
    complete_status(kind, obj)
    if kind in (STATEFULSETS, JOBS, CRONJOBS, REPLICATIONCONTROLLERS) and isinstance(spec, dict):
        default_workload(kind, spec)
        obj.setdefault("status", {})
        return
    if kind is PODS and isinstance(spec, dict):
        default_pod_spec(spec)
        add_default_tolerations(spec, tolerations)
        resolve_priority(spec, lookup=priority, classes=priority_classes)
        obj["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}
    elif kind in (DEPLOYMENTS, REPLICASETS, DAEMONSETS) and isinstance(spec, dict):
        default_workload(kind, spec)
        obj["status"] = dict(_STATUS_ZEROS.get(kind, {}))
    elif kind is NAMESPACES:
        # As upstream's namespace strategy: every new namespace carries the `kubernetes` finalizer
        # (kubectl 1.27-1.31 send `spec: {}`), so that its content is deleted before it goes.
        obj["status"] = {"phase": "Active"}
        ns_spec = obj.get("spec")
        if not isinstance(ns_spec, dict):
            ns_spec = obj["spec"] = {}
        finalizers = ns_spec.get("finalizers") or []
        if "kubernetes" not in finalizers:
            ns_spec["finalizers"] = [*finalizers, "kubernetes"]


def finish_create(kind: Kind, obj: Obj) -> None:
    """Defaults that need the new object's uid: a Job's generated selector.

    Unless `spec.manualSelector` is true, a Job selects its pods by its own uid (the label
    `batch.kubernetes.io/controller-uid`, set on the template together with the job's name,
    in the current and the legacy unprefixed form), so two Jobs of one name never share pods.
    """
    if kind is not JOBS:
        return
    spec = obj.get("spec")
    if not isinstance(spec, dict) or spec.get("manualSelector") is True:
        return
    md = obj["metadata"]
    uid, name = md["uid"], md["name"]
    spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    template = spec.setdefault("template", {})
    if isinstance(template, dict):
        tmd = template.setdefault("metadata", {})
        if isinstance(tmd, dict):
            labels = tmd.get("labels")
            labels = dict(labels) if isinstance(labels, dict) else {}
            labels.update({"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": name,
                           "controller-uid": uid, "job-name": name})
            tmd["labels"] = labels


def default_workload(kind: Kind, spec: dict[str, Any]) -> None:
    """Default a Deployment, ReplicaSet or DaemonSet spec."""
    template = spec.get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        default_pod_spec(template["spec"])
    if kind is DEPLOYMENTS:
        spec.setdefault("replicas", 1)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
        strategy = spec.setdefault("strategy", {})
        if isinstance(strategy, dict):
            strategy.setdefault("type", "RollingUpdate")
            if strategy["type"] == "RollingUpdate":
                ru = strategy.setdefault("rollingUpdate", {})
                if isinstance(ru, dict):
                    ru.setdefault("maxUnavailable", "25%")
                    ru.setdefault("maxSurge", "25%")
    elif kind is REPLICASETS:
        spec.setdefault("replicas", 1)
    elif kind is STATEFULSETS:
        spec.setdefault("replicas", 1)
        spec.setdefault("podManagementPolicy", "OrderedReady")
        spec.setdefault("revisionHistoryLimit", 10)
        us = spec.setdefault("updateStrategy", {})
        if isinstance(us, dict):
            us.setdefault("type", "RollingUpdate")
            if us["type"] == "RollingUpdate":
                us.setdefault("rollingUpdate", {"partition": 0})
        spec.setdefault("persistentVolumeClaimRetentionPolicy", {"whenDeleted": "Retain", "whenScaled": "Retain"})
    elif kind is JOBS:
        if spec.get("completions") is None and spec.get("parallelism") is None:
            spec["completions"] = 1
        spec.setdefault("parallelism", 1)
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
    elif kind is CRONJOBS:
        spec.setdefault("concurrencyPolicy", "Allow")
        spec.setdefault("suspend", False)
        spec.setdefault("successfulJobsHistoryLimit", 3)
        spec.setdefault("failedJobsHistoryLimit", 1)
        job_template = spec.get("jobTemplate")
        if isinstance(job_template, dict) and isinstance(job_template.get("spec"), dict):
            default_workload(JOBS, job_template["spec"])
    elif kind is REPLICATIONCONTROLLERS:
        spec.setdefault("replicas", 1)
        labels = ((template or {}).get("metadata") or {}).get("labels") if isinstance(template, dict) else None
        if not spec.get("selector") and isinstance(labels, dict):
            spec["selector"] = dict(labels)
    elif kind is DAEMONSETS:
        spec.setdefault("revisionHistoryLimit", 10)
        us = spec.setdefault("updateStrategy", {})
        if isinstance(us, dict):
            us.setdefault("type", "RollingUpdate")
            if us["type"] == "RollingUpdate":
                us.setdefault("rollingUpdate", {"maxUnavailable": 1, "maxSurge": 0})


def default_update(kind: Kind, obj: Obj) -> None:
    """Defaulting on updates (a client may PUT a template without defaults)."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if kind is PODS:
        default_pod_spec(spec)
    elif kind in (DEPLOYMENTS, REPLICASETS, DAEMONSETS, STATEFULSETS, JOBS, CRONJOBS, REPLICATIONCONTROLLERS):
        default_workload(kind, spec)


class DecodeError(ValueError):
    """A body that does not decode into its kind's Go type (kube-apiserver answers 400)."""


def fold_secret(obj: Obj) -> None:
    """A Secret as stored: `stringData` folded into `data` (base64), every `data` value checked.

    In kube-apiserver `data` is a map of byte slices, so a value that is not base64 fails while
    the body is decoded (a 400 BadRequest), before validation; `stringData` is write-only and
    overrides `data` key by key. Raises DecodeError with the decoder's reason.
    """
    string_data = obj.pop("stringData", None)
    data = obj.get("data")
    if data is not None and not isinstance(data, dict):
        raise DecodeError("json: cannot unmarshal into Go struct field Secret.data of type map[string][]uint8")
    folded: dict[str, Any] = {}
    for key, value in (data or {}).items():
        if not isinstance(value, str):
            raise DecodeError("json: cannot unmarshal into Go struct field Secret.data of type []uint8")
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise DecodeError(f"illegal base64 data at input byte {_first_bad_byte(value)}") from None
        folded[key] = value
    if string_data is not None:
        if not isinstance(string_data, dict):
            raise DecodeError("json: cannot unmarshal into Go struct field Secret.stringData of type "
                              "map[string]string")
        for key, value in string_data.items():
            if not isinstance(value, str):
                raise DecodeError("json: cannot unmarshal into Go struct field Secret.stringData of type string")
            folded[key] = base64.b64encode(value.encode()).decode()
    if folded or data is not None:
        obj["data"] = folded


def _first_bad_byte(value: str) -> int:
    """The offset Go's base64 decoder reports for the first byte it cannot take."""
    alphabet = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")
    for i, ch in enumerate(value):
        if ch not in alphabet:
            return i
    return len(value)  # only the length is wrong: the decoder fails at the end

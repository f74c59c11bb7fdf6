"""Server-side Table output (`meta.k8s.io/v1 Table`), as `kubectl get` asks for it.

What clients depend on:

* kubectl `get` sends `Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...,application/json`
  (`wants_table`). Without a Table it prints only NAME and AGE.
* kubectl prints the cells verbatim, so every cell is formatted here as kubectl's printers
  (`pkg/printers/internalversion`) format them: ages in the HumanDuration style (`45s`, `5m`,
  `2d3h`), the pod STATUS reason (Pending, ContainerCreating, Running, Terminating, Completed,
  Error, Evicted, Init:0/1...), READY `1/1`, RESTARTS `2 (5m ago)`, node STATUS `Ready`,
  `NotReady`, `Unknown`, with `,SchedulingDisabled` when cordoned, ROLES from
  `node-role.kubernetes.io/*` labels.
* Rows always carry every cell: columns with `priority: 1` are shown only with `-o wide`,
  and kubectl drops them itself.
* `metadata.resourceVersion` is always set: `kubectl get -w` starts its watch from it.
* Each row's `object` is a `PartialObjectMetadata` by default (`includeObject=Metadata`),
  the full object with `includeObject=Object` (`--sort-by`), absent with `None`. kubectl needs
  the metadata for `-A` (NAMESPACE), `--show-labels` and `-L`.
* Watch events for a Table watch carry a one-row Table each (`watch_event_table`), with the
  column definitions every time and the object's resourceVersion.

Kinds with a printer: Pod, Node, Namespace, Event, Lease, Deployment, ReplicaSet, DaemonSet,
PriorityClass, ConfigMap, Service, PodDisruptionBudget, and (as kube-apiserver 1.33 prints them)
Secret, ServiceAccount, Endpoints, EndpointSlice, PersistentVolumeClaim, PersistentVolume,
ReplicationController, StatefulSet, ControllerRevision, Job, CronJob, HorizontalPodAutoscaler,
Ingress, IngressClass, NetworkPolicy, StorageClass, RoleBinding, ClusterRoleBinding, the two
webhook configurations and APIService (the aggregator's columns). Every other kind gets the
apiserver's default columns, Name and Created At, as Role, ClusterRole and
CustomResourceDefinition do upstream too.

Time is the cluster's: callers pass `now` (cluster seconds) and nothing here reads a clock.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from kubemesh.apiserver.customresources.definitions import Column
from kubemesh.apiserver.customresources.objects import custom_of
from kubemesh.apiserver.discovery import parse_accept
from kubemesh.services.machinery.clock import format_time, time_or_none
from kubemesh.services.model.kinds import Kind, Obj
from kubemesh.services.model.quantities import canonical_quantity

TABLE_API_VERSION: Final = "meta.k8s.io/v1"
INCLUDE_OBJECT_POLICIES: Final = ("None", "Metadata", "Object")

_NONE: Final = "<none>"
_UNKNOWN: Final = "<unknown>"


def wants_table(accept: str | None) -> bool:
    """Whether the client's most preferred media type we can serve is a Table.

    A Table is `application/json;as=Table;g=meta.k8s.io;v=v1` (or `v1beta1`, which has the
    same shape). A plain JSON range preferred before it means the client wants the object
    or list itself.
    """
    for r in parse_accept(accept):
        if r.is_plain_json():
            return False
        if (
            r.mime == "application/json"
            and r.params.get("as") == "Table"
            and r.params.get("g") == "meta.k8s.io"
            and r.params.get("v") in ("v1", "v1beta1")
        ):
            return True
    return False


# ---------------------------------------------------------------------------------------------
# Small readers: objects are JSON-like dicts that may lack any field.


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            return 0
    return 0


# ---------------------------------------------------------------------------------------------
# Durations, as kubectl prints them.


def human_duration(seconds: float) -> str:
    """A duration with two or three significant figures, as Kubernetes' `HumanDuration` writes it.

    Under 2 minutes: `45s`; under 10 minutes: `5m` or `5m30s`; under 3 hours: `95m`; under
    8 hours: `3h` or `3h20m`; under 2 days: `30h`; under 8 days: `2d` or `2d3h`; under 2
    years: `300d`; under 8 years: `3y` or `3y100d`; then `10y`. Up to one second in the
    future counts as `0s` (clock skew); further in the future is `<invalid>`.
    """
    whole = int(seconds)  # truncates toward zero, as Go's int(d.Seconds())
    if whole < -1:
        return "<invalid>"
    if whole < 0:
        return "0s"
    if whole < 120:
        return f"{whole}s"
    minutes = whole // 60
    if minutes < 10:
        secs = whole % 60
        return f"{minutes}m" if secs == 0 else f"{minutes}m{secs}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = whole // 3600
    if hours < 8:
        mins = minutes % 60
        return f"{hours}h" if mins == 0 else f"{hours}h{mins}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        rest = hours % 24
        return f"{hours // 24}d" if rest == 0 else f"{hours // 24}d{rest}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    if hours < 24 * 365 * 8:
        years, days = divmod(hours // 24, 365)
        return f"{years}y" if days == 0 else f"{years}y{days}d"
    return f"{hours // 24 // 365}y"


def _since(timestamp: Any, now: float) -> str:
    """The age of a timestamp field (`<unknown>` when unset), like kubectl's AGE column."""
    t = time_or_none(timestamp)
    return _UNKNOWN if t is None else human_duration(now - t)


def _age(obj: Obj, now: float) -> str:
    return _since(_dict(obj.get("metadata")).get("creationTimestamp"), now)


# ---------------------------------------------------------------------------------------------
# Column definitions.


def _col(name: str, type_: str, description: str, *, priority: int = 0, fmt: str = "") -> Obj:
    return {"name": name, "type": type_, "format": fmt, "description": description, "priority": priority}


_NAME_COL: Final = _col("Name", "string", "The name of the object, unique within its namespace.", fmt="name")
_AGE_COL: Final = _col("Age", "string", "Time since the object was created (its creationTimestamp).")
_CONTAINERS_COL: Final = _col("Containers", "string", "The names of the template's containers.", priority=1)
_IMAGES_COL: Final = _col("Images", "string", "The images of the template's containers.", priority=1)
_SELECTOR_COL: Final = _col("Selector", "string", "The label selector of the pods it manages.", priority=1)

_BINDING_COLUMNS: Final = (
    _NAME_COL,
    _col("Role", "string", "The role the binding grants, as kind/name."),
    _AGE_COL,
    _col("Users", "string", "The users the role is granted to.", priority=1),
    _col("Groups", "string", "The groups the role is granted to.", priority=1),
    _col("ServiceAccounts", "string", "The service accounts the role is granted to, as namespace/name.",
         priority=1),
)
_WEBHOOK_COLUMNS: Final = (
    _NAME_COL,
    _col("Webhooks", "integer", "Number of webhooks the configuration registers."),
    _AGE_COL,
)

_COLUMNS: Final[Mapping[tuple[str, str], tuple[Obj, ...]]] = {
    ("", "Pod"): (
        _NAME_COL,
        _col("Ready", "string", "Ready containers out of all containers of the pod."),
        _col("Status", "string", "The pod's aggregate status, derived from its phase and containers."),
        _col("Restarts", "string", "Container restarts, and how long ago the last one was."),
        _AGE_COL,
        _col("IP", "string", "The pod's first IP address.", priority=1),
        _col("Node", "string", "The node the pod is bound to.", priority=1),
        _col("Nominated Node", "string", "The node preemption nominated for the pod.", priority=1),
        _col("Readiness Gates", "string", "Readiness gates that are true out of all.", priority=1),
    ),
    ("", "Node"): (
        _NAME_COL,
        _col("Status", "string", "Ready, NotReady or Unknown, and SchedulingDisabled when cordoned."),
        _col("Roles", "string", "The roles named by the node's node-role.kubernetes.io labels."),
        _AGE_COL,
        _col("Version", "string", "The kubelet version the node reports."),
        _col("Internal-IP", "string", "The node's first InternalIP address.", priority=1),
        _col("External-IP", "string", "The node's first ExternalIP address.", priority=1),
        _col("OS-Image", "string", "The operating system image the node reports.", priority=1),
        _col("Kernel-Version", "string", "The kernel version the node reports.", priority=1),
        _col("Container-Runtime", "string", "The container runtime the node reports.", priority=1),
    ),
    ("", "Namespace"): (
        _NAME_COL,
        _col("Status", "string", "The namespace's phase: Active or Terminating."),
        _AGE_COL,
    ),
    ("", "Event"): (
        _col("Last Seen", "string", "Time since the event was last observed."),
        _col("Type", "string", "Normal or Warning."),
        _col("Reason", "string", "Short machine-readable reason for the event."),
        _col("Object", "string", "The object the event is about, as kind/name."),
        _col("Subobject", "string", "The part of the object the event is about.", priority=1),
        _col("Source", "string", "The component (and host) that reported the event.", priority=1),
        _col("Message", "string", "Human-readable description of the event."),
        _col("First Seen", "string", "Time since the event was first observed.", priority=1),
        _col("Count", "string", "How many times the event was observed.", priority=1),
        _col("Name", "string", "The name of the event object.", priority=1, fmt="name"),
    ),
    ("", "ConfigMap"): (
        _NAME_COL,
        _col("Data", "integer", "Number of data and binaryData keys."),
        _AGE_COL,
    ),
    ("", "Service"): (
        _NAME_COL,
        _col("Type", "string", "The service type: ClusterIP, NodePort, LoadBalancer or ExternalName."),
        _col("Cluster-IP", "string", "The service's cluster IP."),
        _col("External-IP", "string", "External addresses of the service."),
        _col("Port(s)", "string", "The service's ports, as port[:nodePort]/protocol."),
        _AGE_COL,
        _col("Selector", "string", "The label selector of the service's pods.", priority=1),
    ),
    ("coordination.k8s.io", "Lease"): (
        _NAME_COL,
        _col("Holder", "string", "The identity holding the lease."),
        _AGE_COL,
    ),
    ("apps", "Deployment"): (
        _NAME_COL,
        _col("Ready", "string", "Ready replicas out of desired replicas."),
        _col("Up-to-date", "integer", "Replicas running the latest pod template."),
        _col("Available", "integer", "Replicas available to serve."),
        _AGE_COL,
        _CONTAINERS_COL,
        _IMAGES_COL,
        _SELECTOR_COL,
    ),
    ("apps", "ReplicaSet"): (
        _NAME_COL,
        _col("Desired", "integer", "The replicas the spec asks for."),
        _col("Current", "integer", "The replicas that exist."),
        _col("Ready", "integer", "The replicas that are ready."),
        _AGE_COL,
        _CONTAINERS_COL,
        _IMAGES_COL,
        _SELECTOR_COL,
    ),
    ("apps", "DaemonSet"): (
        _NAME_COL,
        _col("Desired", "integer", "Nodes that should run the daemon pod."),
        _col("Current", "integer", "Nodes that run at least one daemon pod."),
        _col("Ready", "integer", "Nodes whose daemon pod is ready."),
        _col("Up-to-date", "integer", "Nodes running the latest daemon pod template."),
        _col("Available", "integer", "Nodes whose daemon pod is available."),
        _col("Node Selector", "string", "The node selector of the pod template."),
        _AGE_COL,
        _CONTAINERS_COL,
        _IMAGES_COL,
        _SELECTOR_COL,
    ),
    ("scheduling.k8s.io", "PriorityClass"): (
        _NAME_COL,
        _col("Value", "integer", "The priority pods of this class get."),
        _col("Global-Default", "boolean", "Whether pods without a class get this one."),
        _AGE_COL,
        _col("PreemptionPolicy", "string", "Whether pods of this class may preempt others.", priority=1),
    ),
    ("policy", "PodDisruptionBudget"): (
        _NAME_COL,
        _col("Min Available", "string", "Pods that must stay available."),
        _col("Max Unavailable", "string", "Pods that may be unavailable."),
        _col("Allowed Disruptions", "integer", "Pods that may be disrupted now."),
        _AGE_COL,
    ),
    # -- kinds Helm charts and operators create (kube-apiserver 1.33's printers) -----------------
    ("", "Secret"): (
        _NAME_COL,
        _col("Type", "string", "What the secret holds (Opaque, kubernetes.io/tls, ...), which fixes its keys."),
        _col("Data", "string", "Number of keys in the secret's data."),
        _AGE_COL,
    ),
    ("", "ServiceAccount"): (
        _NAME_COL,
        _col("Secrets", "string", "Number of secrets listed for the service account."),
        _AGE_COL,
    ),
    ("", "Endpoints"): (
        _NAME_COL,
        _col("Endpoints", "string", "Addresses and ports of the endpoints, the first three of them."),
        _AGE_COL,
    ),
    ("discovery.k8s.io", "EndpointSlice"): (
        _NAME_COL,
        _col("AddressType", "string", "The kind of address the slice carries: IPv4, IPv6 or FQDN."),
        _col("Ports", "string", "The ports of the slice, the first three of them."),
        _col("Endpoints", "string", "The addresses of the slice's endpoints, the first three of them."),
        _AGE_COL,
    ),
    ("", "PersistentVolumeClaim"): (
        _NAME_COL,
        _col("Status", "string", "The claim's phase: Pending, Bound or Lost (Terminating while deleted)."),
        _col("Volume", "string", "The persistent volume bound to the claim."),
        _col("Capacity", "string", "The storage the bound volume provides."),
        _col("Access Modes", "string", "The access modes the bound volume provides (RWO, ROX, RWX, RWOP)."),
        _col("StorageClass", "string", "The storage class the claim asks for."),
        _col("VolumeAttributesClass", "string", "The volume attributes class the claim asks for."),
        _AGE_COL,
        _col("VolumeMode", "string", "Whether the claim wants a filesystem or a raw block volume.", priority=1),
    ),
    ("", "PersistentVolume"): (
        _NAME_COL,
        _col("Capacity", "string", "The storage the volume provides."),
        _col("Access Modes", "string", "The ways the volume can be mounted (RWO, ROX, RWX, RWOP)."),
        _col("Reclaim Policy", "string", "What happens to the volume once its claim is released."),
        _col("Status", "string", "The volume's phase: Available, Bound, Released or Failed."),
        _col("Claim", "string", "The claim bound to the volume, as namespace/name."),
        _col("StorageClass", "string", "The storage class the volume belongs to."),
        _col("VolumeAttributesClass", "string", "The volume attributes class of the volume."),
        _col("Reason", "string", "Why the volume is in its phase, when a reason is given."),
        _AGE_COL,
        _col("VolumeMode", "string", "Whether the volume is a filesystem or a raw block device.", priority=1),
    ),
    ("", "ReplicationController"): (
        _NAME_COL,
        _col("Desired", "integer", "The replicas the spec asks for."),
        _col("Current", "integer", "The replicas that exist."),
        _col("Ready", "integer", "The replicas that are ready."),
        _AGE_COL,
        _CONTAINERS_COL,
        _IMAGES_COL,
        _SELECTOR_COL,
    ),
    ("apps", "StatefulSet"): (
        _NAME_COL,
        _col("Ready", "string", "Ready replicas out of desired replicas."),
        _AGE_COL,
        _CONTAINERS_COL,
        _IMAGES_COL,
    ),
    ("apps", "ControllerRevision"): (
        _NAME_COL,
        _col("Controller", "string", "The object that owns the revision, as kind.group/name."),
        _col("Revision", "string", "The revision number of the stored state."),
        _AGE_COL,
    ),
    ("batch", "Job"): (
        _NAME_COL,
        _col("Status", "string", "Where the job stands: Running, Complete, Failed, Suspended, ..."),
        _col("Completions", "string", "Pods that succeeded out of the completions asked for."),
        _col("Duration", "string", "How long the job ran, or has been running."),
        _AGE_COL,
        _CONTAINERS_COL,
        _IMAGES_COL,
        _SELECTOR_COL,
    ),
    ("batch", "CronJob"): (
        _NAME_COL,
        _col("Schedule", "string", "The cron schedule the jobs are created on."),
        _col("Timezone", "string", "The time zone the schedule is read in."),
        _col("Suspend", "boolean", "Whether creating further jobs is suspended."),
        _col("Active", "integer", "Jobs of the cron job that are running."),
        _col("Last Schedule", "string", "Time since a job was last scheduled."),
        _AGE_COL,
        _CONTAINERS_COL,
        _IMAGES_COL,
        _SELECTOR_COL,
    ),
    ("autoscaling", "HorizontalPodAutoscaler"): (
        _NAME_COL,
        _col("Reference", "string", "The object whose scale is managed, as kind/name."),
        _col("Targets", "string", "Current and target values of the metrics scaling is based on."),
        _col("MinPods", "string", "The fewest replicas the autoscaler scales down to."),
        _col("MaxPods", "string", "The most replicas the autoscaler scales up to."),
        _col("Replicas", "string", "The replicas the target had when last observed."),
        _AGE_COL,
    ),
    ("networking.k8s.io", "Ingress"): (
        _NAME_COL,
        _col("Class", "string", "The IngressClass that implements the ingress."),
        _col("Hosts", "string", "The hosts the rules match requests against."),
        _col("Address", "string", "The load balancer's addresses for the ingress."),
        _col("Ports", "string", "The ports the ingress serves: 80, and 443 with TLS."),
        _AGE_COL,
    ),
    ("networking.k8s.io", "IngressClass"): (
        _NAME_COL,
        _col("Controller", "string", "The controller that implements ingresses of the class."),
        _col("Parameters", "string", "The object holding the class's parameters, as kind.group/name."),
        _AGE_COL,
    ),
    ("networking.k8s.io", "NetworkPolicy"): (
        _NAME_COL,
        _col("Pod-Selector", "string", "The pods the policy applies to."),
        _AGE_COL,
    ),
    ("storage.k8s.io", "StorageClass"): (
        _NAME_COL,  # with " (default)" after the name of the default class
        _col("Provisioner", "string", "The volume plugin that provisions volumes of the class."),
        _col("ReclaimPolicy", "string", "What happens to provisioned volumes once their claim is released."),
        _col("VolumeBindingMode", "string", "When claims are bound and volumes provisioned."),
        _col("AllowVolumeExpansion", "string", "Whether claims of the class may be resized."),
        _AGE_COL,
    ),
    ("rbac.authorization.k8s.io", "RoleBinding"): _BINDING_COLUMNS,
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): _BINDING_COLUMNS,
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"): _WEBHOOK_COLUMNS,
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"): _WEBHOOK_COLUMNS,
    ("apiregistration.k8s.io", "APIService"): (
        _NAME_COL,
        _col("Service", "string", "The service that serves the API, or Local when this apiserver does."),
        _col("Available", "string", "Whether the API is available, with the reason when it is not."),
        _AGE_COL,
    ),
}

_DEFAULT_COLUMNS: Final = (
    _NAME_COL,
    _col("Created At", "date", "When the object was created (its creationTimestamp)."),
)


def column_definitions(kind: Kind) -> tuple[Obj, ...]:
    """The Table columns of a kind (the default Name and Created At when it has no printer)."""
    custom = custom_of(kind)
    if custom is not None:
        return _custom_columns(custom.columns)
    return _COLUMNS.get((kind.group, kind.kind), _DEFAULT_COLUMNS)


# A custom resource prints Name and its CRD's additionalPrinterColumns, or Name and Age when it
# declares none (apiextensions' table convertor).
_CUSTOM_AGE: Final = _col("Age", "date", "CreationTimestamp is a timestamp representing the server time when "
                          "this object was created.")


@functools.lru_cache(maxsize=256)
def _custom_columns(columns: tuple[Column, ...]) -> tuple[Obj, ...]:
    if not columns:
        return (_NAME_COL, _CUSTOM_AGE)
    return (_NAME_COL, *(_col(c.name, c.type, c.description, priority=c.priority, fmt=c.format) for c in columns))


def _custom_cell(column: Column, obj: Obj, now: float) -> Any:
    values = column.path.values(obj)
    if not values:
        return None
    if len(values) > 1:
        return column.path.text(obj)
    value = values[0]
    if column.type == "date":  # printed as an age, as the apiserver's table convertor does
        return _since(value, now) if isinstance(value, str) else None
    if column.type == "integer" and isinstance(value, int) and not isinstance(value, bool):
        return value
    if column.type == "number" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if column.type == "boolean" and isinstance(value, bool):
        return value
    if isinstance(value, (dict, list)):
        return column.path.text(obj)
    return value if isinstance(value, str) else _str(value)


def _print_custom(columns: tuple[Column, ...], obj: Obj, now: float) -> Row:
    meta = _dict(obj.get("metadata"))
    if not columns:
        return [_str(meta.get("name")), _age(obj, now)], None
    return [_str(meta.get("name")), *(_custom_cell(c, obj, now) for c in columns)], None


# ---------------------------------------------------------------------------------------------
# Formatting helpers shared by printers.


def _format_labels(labels: Any) -> str:
    """`k=v,k2=v2` sorted by key, `<none>` when empty (labels.FormatLabels)."""
    items = sorted(_dict(labels).items())
    return ",".join(f"{k}={v}" for k, v in items) if items else _NONE


def _selector_string(selector: Any) -> str:
    """A LabelSelector as a selector string: requirements sorted by key, `k=v`, `k in (a,b)`, `k`, `!k`."""
    sel = _dict(selector)
    reqs: list[tuple[str, str]] = [(str(k), f"{k}={v}") for k, v in _dict(sel.get("matchLabels")).items()]
    for expr in _list(sel.get("matchExpressions")):
        e = _dict(expr)
        key, op = _str(e.get("key")), _str(e.get("operator"))
        values = ",".join(sorted(str(v) for v in _list(e.get("values"))))
        if op == "In":
            reqs.append((key, f"{key} in ({values})"))
        elif op == "NotIn":
            reqs.append((key, f"{key} notin ({values})"))
        elif op == "Exists":
            reqs.append((key, key))
        elif op == "DoesNotExist":
            reqs.append((key, f"!{key}"))
    reqs.sort(key=lambda r: r[0])
    return ",".join(text for _, text in reqs)


def _format_selector(selector: Any) -> str:
    """metav1.FormatLabelSelector: the selector string, `<none>` when it selects everything or is unset."""
    return _selector_string(selector) or _NONE


def _containers(template_spec: Any) -> tuple[str, str]:
    containers = [_dict(c) for c in _list(_dict(template_spec).get("containers"))]
    names = ",".join(_str(c.get("name")) for c in containers)
    return names, ",".join(_str(c.get("image")) for c in containers)


def _template_spec(obj: Obj) -> dict[str, Any]:
    return _dict(_dict(_dict(obj.get("spec")).get("template")).get("spec"))


def _int_or_string(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "N/A"
    return str(value)


def _name(obj: Obj) -> str:
    return _str(_dict(obj.get("metadata")).get("name"))


def _at(obj: Any, *keys: str) -> Any:
    """The value at a path of keys, or None where a level is missing or not an object."""
    for key in keys:
        obj = _dict(obj).get(key)
    return obj


def _or(value: Any, default: str) -> str:
    """A string field that upstream keeps as a pointer: `default` when unset (absent or null)."""
    return value if isinstance(value, str) else default


def _some(entries: list[str], empty: str) -> str:
    """The first three entries, then `+ N more...` (the printers' listWithMoreString); `empty` when none."""
    text = ",".join(entries[:3])
    if len(entries) > 3:
        return f"{text} + {len(entries) - 3} more..."
    return text or empty


def _host_port(host: str, port: int) -> str:
    """net.JoinHostPort: IPv6 addresses in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _load_balancer(status: Any) -> str:
    """A load balancer status as its distinct IPs or hostnames, sorted (the Address column)."""
    ingress = _list(_dict(_dict(status).get("loadBalancer")).get("ingress"))
    found = {_str(_dict(i).get("ip")) or _str(_dict(i).get("hostname")) for i in ingress}
    return ",".join(sorted(found - {""}))


def _access_modes(modes: Any) -> str:
    """Access modes abbreviated in a fixed order, duplicates dropped (GetAccessModesAsString)."""
    present = set(_list(modes))
    short = (("ReadWriteOnce", "RWO"), ("ReadOnlyMany", "ROX"), ("ReadWriteMany", "RWX"), ("ReadWriteOncePod", "RWOP"))
    return ",".join(abbrev for mode, abbrev in short if mode in present)


_BETA_STORAGE_CLASS: Final = "volume.beta.kubernetes.io/storage-class"


def _storage_class(obj: Obj) -> str:
    """The class of a volume or claim: the beta annotation first, then spec.storageClassName."""
    annotations = _dict(_dict(obj.get("metadata")).get("annotations"))
    if _BETA_STORAGE_CLASS in annotations:
        return _str(annotations[_BETA_STORAGE_CLASS])
    return _str(_dict(obj.get("spec")).get("storageClassName"))


def _quantity(value: Any) -> str:
    """A quantity as `resource.Quantity.String()` prints it (`canonical_quantity`)."""
    return canonical_quantity(value)


# ---------------------------------------------------------------------------------------------
# Printers: one row of cells per object (wide cells included), plus optional row conditions.

Row = tuple[list[Any], list[Obj] | None]
_Printer = Callable[[Obj, float], Row]

_NODE_UNREACHABLE_REASON: Final = "NodeLost"


def _restartable_init(container: Any) -> bool:
    return _dict(container).get("restartPolicy") == "Always"


def _condition_true(conditions: Any, type_: str) -> bool:
    for cond in _list(conditions):
        c = _dict(cond)
        if c.get("type") == type_:
            return c.get("status") == "True"
    return False


def _terminated_reason(term: dict[str, Any], prefix: str = "") -> str:
    if _str(term.get("reason")):
        return prefix + _str(term["reason"])
    signal = _int(term.get("signal"))
    if signal:
        return f"{prefix}Signal:{signal}"
    return f"{prefix}ExitCode:{_int(term.get('exitCode'))}"


def _last_finished(status: dict[str, Any]) -> float | None:
    term = _dict(_dict(status.get("lastState")).get("terminated"))
    return time_or_none(term.get("finishedAt")) if term else None


def _later(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def _print_pod(pod: Obj, now: float) -> Row:
    spec = _dict(pod.get("spec"))
    status = _dict(pod.get("status"))
    meta = _dict(pod.get("metadata"))
    phase = _str(status.get("phase"))
    reason = _str(status.get("reason")) or phase
    for cond in _list(status.get("conditions")):
        c = _dict(cond)
        if c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated":
            reason = "SchedulingGated"

    init_specs = [_dict(c) for c in _list(spec.get("initContainers"))]
    init_by_name = {_str(c.get("name")): c for c in init_specs}
    total = len(_list(spec.get("containers"))) + sum(1 for c in init_specs if _restartable_init(c))
    ready = 0
    restarts = 0
    last_restart: float | None = None
    sidecar_restarts = 0
    sidecar_last_restart: float | None = None

    initializing = False
    for i, raw in enumerate(_list(status.get("initContainerStatuses"))):
        cs = _dict(raw)
        count = _int(cs.get("restartCount"))
        finished = _last_finished(cs)
        restarts += count
        last_restart = _later(last_restart, finished)
        restartable = _restartable_init(init_by_name.get(_str(cs.get("name"))))
        if restartable:
            sidecar_restarts += count
            sidecar_last_restart = _later(sidecar_last_restart, finished)
        state = _dict(cs.get("state"))
        term = state.get("terminated")
        wait = _dict(state.get("waiting"))
        if isinstance(term, dict) and _int(term.get("exitCode")) == 0:
            continue
        if restartable and cs.get("started") is True:
            if cs.get("ready") is True:
                ready += 1
            continue
        if isinstance(term, dict):
            reason = _terminated_reason(term, "Init:")
        elif _str(wait.get("reason")) and wait.get("reason") != "PodInitializing":
            reason = "Init:" + _str(wait.get("reason"))
        else:
            reason = f"Init:{i}/{len(init_specs)}"
        initializing = True
        break

    if not initializing or _condition_true(status.get("conditions"), "Initialized"):
        restarts = sidecar_restarts
        last_restart = sidecar_last_restart
        has_running = False
        for raw in reversed(_list(status.get("containerStatuses"))):
            cs = _dict(raw)
            restarts += _int(cs.get("restartCount"))
            last_restart = _later(last_restart, _last_finished(cs))
            state = _dict(cs.get("state"))
            wait = _dict(state.get("waiting"))
            term = state.get("terminated")
            if _str(wait.get("reason")):
                reason = _str(wait.get("reason"))
            elif isinstance(term, dict):
                reason = _terminated_reason(term)
            elif cs.get("ready") is True and isinstance(state.get("running"), dict):
                has_running = True
                ready += 1
        if reason == "Completed" and has_running:
            reason = "Running" if _condition_true(status.get("conditions"), "Ready") else "NotReady"

    if meta.get("deletionTimestamp"):
        if status.get("reason") == _NODE_UNREACHABLE_REASON:
            reason = "Unknown"
        elif phase not in ("Succeeded", "Failed"):
            reason = "Terminating"

    restarts_cell = str(restarts)
    if restarts and last_restart is not None:
        restarts_cell = f"{restarts} ({human_duration(now - last_restart)} ago)"

    ips = _list(status.get("podIPs"))
    ip = _str(_dict(ips[0]).get("ip")) if ips else _str(status.get("podIP"))
    gates = _list(spec.get("readinessGates"))
    gates_cell = _NONE
    if gates:
        true_count = sum(
            1 for g in gates if _condition_true(status.get("conditions"), _str(_dict(g).get("conditionType")))
        )
        gates_cell = f"{true_count}/{len(gates)}"
    cells: list[Any] = [
        _str(meta.get("name")),
        f"{ready}/{total}",
        reason,
        restarts_cell,
        _age(pod, now),
        ip or _NONE,
        _str(spec.get("nodeName")) or _NONE,
        _str(status.get("nominatedNodeName")) or _NONE,
        gates_cell,
    ]
    conditions: list[Obj] | None = None
    if phase in ("Succeeded", "Failed"):
        message = "The pod completed." if phase == "Succeeded" else "The pod failed."
        conditions = [{"type": "Completed", "status": "True", "reason": phase, "message": message}]
    return cells, conditions


def _node_roles(labels: dict[str, Any]) -> str:
    roles: set[str] = set()
    prefix = "node-role.kubernetes.io/"
    for key, value in labels.items():
        if key.startswith(prefix):
            if role := key.removeprefix(prefix):
                roles.add(role)
        elif key == "kubernetes.io/role" and value:
            roles.add(str(value))
    return ",".join(sorted(roles)) or _NONE


def _node_address(status: dict[str, Any], type_: str) -> str:
    for addr in _list(status.get("addresses")):
        a = _dict(addr)
        if a.get("type") == type_:
            return _str(a.get("address"))
    return _NONE


def _print_node(node: Obj, now: float) -> Row:
    meta = _dict(node.get("metadata"))
    status = _dict(node.get("status"))
    info = _dict(status.get("nodeInfo"))
    words: list[str] = []
    for cond in _list(status.get("conditions")):
        c = _dict(cond)
        if c.get("type") == "Ready":
            words = ["Ready" if c.get("status") == "True" else "NotReady"]
    if not words:
        words = ["Unknown"]
    if _dict(node.get("spec")).get("unschedulable") is True:
        words.append("SchedulingDisabled")
    cells: list[Any] = [
        _str(meta.get("name")),
        ",".join(words),
        _node_roles(_dict(meta.get("labels"))),
        _age(node, now),
        _str(info.get("kubeletVersion")),
        _node_address(status, "InternalIP"),
        _node_address(status, "ExternalIP"),
        _str(info.get("osImage")) or _UNKNOWN,
        _str(info.get("kernelVersion")) or _UNKNOWN,
        _str(info.get("containerRuntimeVersion")) or _UNKNOWN,
    ]
    return cells, None


def _print_namespace(ns: Obj, now: float) -> Row:
    phase = _str(_dict(ns.get("status")).get("phase"))
    return [_str(_dict(ns.get("metadata")).get("name")), phase, _age(ns, now)], None


def _print_event(ev: Obj, now: float) -> Row:
    first = _since(ev.get("firstTimestamp"), now)
    if time_or_none(ev.get("firstTimestamp")) is None:
        first = _since(ev.get("eventTime"), now)
    last = _since(ev.get("lastTimestamp"), now)
    if time_or_none(ev.get("lastTimestamp")) is None:
        last = first
    count = _int(ev.get("count"))
    series = ev.get("series")
    if isinstance(series, dict):
        last = _since(series.get("lastObservedTime"), now)
        count = _int(series.get("count"))
    elif count == 0:
        count = 1
    involved = _dict(ev.get("involvedObject"))
    target = _str(involved.get("kind")).lower()
    if _str(involved.get("name")):
        target = f"{target}/{_str(involved.get('name'))}"
    source = _dict(ev.get("source"))
    component = _str(source.get("component")) or _str(ev.get("reportingComponent"))
    host = _str(source.get("host")) or _str(ev.get("reportingInstance"))
    cells: list[Any] = [
        last,
        _str(ev.get("type")),
        _str(ev.get("reason")),
        target,
        _str(involved.get("fieldPath")),
        f"{component}, {host}" if host else component,
        _str(ev.get("message")).strip(),
        first,
        count,
        _str(_dict(ev.get("metadata")).get("name")),
    ]
    return cells, None


def _print_configmap(cm: Obj, now: float) -> Row:
    count = len(_dict(cm.get("data"))) + len(_dict(cm.get("binaryData")))
    return [_str(_dict(cm.get("metadata")).get("name")), count, _age(cm, now)], None


def _service_external_ip(spec: dict[str, Any], status: dict[str, Any]) -> str:
    external = [str(x) for x in _list(spec.get("externalIPs"))]
    svc_type = _str(spec.get("type")) or "ClusterIP"
    if svc_type in ("ClusterIP", "NodePort"):
        return ",".join(external) or _NONE
    if svc_type == "LoadBalancer":
        ingress = _list(_dict(status.get("loadBalancer")).get("ingress"))
        lb = sorted({_str(_dict(i).get("ip")) or _str(_dict(i).get("hostname")) for i in ingress} - {""})
        lb_text = ",".join(lb)
        if len(lb_text) > 16:
            lb_text = lb_text[:13] + "..."
        if external:
            return ",".join([*(lb_text.split(",") if lb_text else []), *external])
        return lb_text or "<pending>"
    if svc_type == "ExternalName":
        return _str(spec.get("externalName"))
    return "<unknown>"


def _print_service(svc: Obj, now: float) -> Row:
    spec = _dict(svc.get("spec"))
    cluster_ips = _list(spec.get("clusterIPs"))
    cluster_ip = _str(cluster_ips[0]) if cluster_ips else _str(spec.get("clusterIP"))
    ports: list[str] = []
    for raw in _list(spec.get("ports")):
        p = _dict(raw)
        proto = _str(p.get("protocol")) or "TCP"
        node_port = _int(p.get("nodePort"))
        port = _int(p.get("port"))
        ports.append(f"{port}:{node_port}/{proto}" if node_port > 0 else f"{port}/{proto}")
    cells: list[Any] = [
        _str(_dict(svc.get("metadata")).get("name")),
        _str(spec.get("type")) or "ClusterIP",
        cluster_ip or _NONE,
        _service_external_ip(spec, _dict(svc.get("status"))),
        ",".join(ports) or _NONE,
        _age(svc, now),
        _format_labels(spec.get("selector")),
    ]
    return cells, None


def _print_lease(lease: Obj, now: float) -> Row:
    holder = _str(_dict(lease.get("spec")).get("holderIdentity"))
    return [_str(_dict(lease.get("metadata")).get("name")), holder, _age(lease, now)], None


def _print_deployment(dep: Obj, now: float) -> Row:
    spec = _dict(dep.get("spec"))
    status = _dict(dep.get("status"))
    desired = _int(spec.get("replicas")) if "replicas" in spec else 1
    names, images = _containers(_template_spec(dep))
    cells: list[Any] = [
        _str(_dict(dep.get("metadata")).get("name")),
        f"{_int(status.get('readyReplicas'))}/{desired}",
        _int(status.get("updatedReplicas")),
        _int(status.get("availableReplicas")),
        _age(dep, now),
        names,
        images,
        _selector_string(spec.get("selector")),
    ]
    return cells, None


def _print_replicaset(rs: Obj, now: float) -> Row:
    spec = _dict(rs.get("spec"))
    status = _dict(rs.get("status"))
    desired = _int(spec.get("replicas")) if "replicas" in spec else 1
    names, images = _containers(_template_spec(rs))
    cells: list[Any] = [
        _str(_dict(rs.get("metadata")).get("name")),
        desired,
        _int(status.get("replicas")),
        _int(status.get("readyReplicas")),
        _age(rs, now),
        names,
        images,
        _format_selector(spec.get("selector")),
    ]
    return cells, None


def _print_daemonset(ds: Obj, now: float) -> Row:
    spec = _dict(ds.get("spec"))
    status = _dict(ds.get("status"))
    template = _template_spec(ds)
    names, images = _containers(template)
    cells: list[Any] = [
        _str(_dict(ds.get("metadata")).get("name")),
        _int(status.get("desiredNumberScheduled")),
        _int(status.get("currentNumberScheduled")),
        _int(status.get("numberReady")),
        _int(status.get("updatedNumberScheduled")),
        _int(status.get("numberAvailable")),
        _format_labels(template.get("nodeSelector")),
        _age(ds, now),
        names,
        images,
        _format_selector(spec.get("selector")),
    ]
    return cells, None


def _print_priorityclass(pc: Obj, now: float) -> Row:
    cells: list[Any] = [
        _str(_dict(pc.get("metadata")).get("name")),
        _int(pc.get("value")),
        pc.get("globalDefault") is True,
        _age(pc, now),
        _str(pc.get("preemptionPolicy")),
    ]
    return cells, None


def _print_pdb(pdb: Obj, now: float) -> Row:
    spec = _dict(pdb.get("spec"))
    cells: list[Any] = [
        _str(_dict(pdb.get("metadata")).get("name")),
        _int_or_string(spec.get("minAvailable")),
        _int_or_string(spec.get("maxUnavailable")),
        _int(_dict(pdb.get("status")).get("disruptionsAllowed")),
        _age(pdb, now),
    ]
    return cells, None


def _print_secret(secret: Obj, now: float) -> Row:
    cells: list[Any] = [_name(secret), _str(secret.get("type")), len(_dict(secret.get("data"))), _age(secret, now)]
    return cells, None


def _print_serviceaccount(sa: Obj, now: float) -> Row:
    return [_name(sa), len(_list(sa.get("secrets"))), _age(sa, now)], None


def _print_endpoints(ep: Obj, now: float) -> Row:
    """ENDPOINTS: `ip:port` for every address and port (bare IPs where a subset has no ports)."""
    subsets = [_dict(s) for s in _list(ep.get("subsets"))]
    entries: list[str] = []
    for ss in subsets:
        ips = [_str(_dict(a).get("ip")) for a in _list(ss.get("addresses"))]
        ports = _list(ss.get("ports"))
        if not ports:
            entries += ips
        for port in ports:
            entries += [_host_port(ip, _int(_dict(port).get("port"))) for ip in ips]
    return [_name(ep), _some(entries, "") if subsets else _NONE, _age(ep, now)], None


def _print_endpointslice(eps: Obj, now: float) -> Row:
    ports = [_dict(p) for p in _list(eps.get("ports"))]
    port_texts = [str(_int(p["port"])) if p.get("port") is not None else _or(p.get("name"), "*") for p in ports]
    addresses = [_str(a) for e in _list(eps.get("endpoints")) for a in _list(_dict(e).get("addresses"))]
    cells: list[Any] = [
        _name(eps),
        _str(eps.get("addressType")),
        _some(port_texts, "<unset>"),
        _some(addresses, "<unset>"),
        _age(eps, now),
    ]
    return cells, None


def _volume_phase(obj: Obj) -> str:
    if _dict(obj.get("metadata")).get("deletionTimestamp"):
        return "Terminating"
    return _str(_dict(obj.get("status")).get("phase"))


def _print_pvc(pvc: Obj, now: float) -> Row:
    """Capacity and access modes are the bound volume's, blank until the claim is bound."""
    spec = _dict(pvc.get("spec"))
    status = _dict(pvc.get("status"))
    bound = bool(_str(spec.get("volumeName")))
    cells: list[Any] = [
        _name(pvc),
        _volume_phase(pvc),
        _str(spec.get("volumeName")),
        _quantity(_dict(status.get("capacity")).get("storage")) if bound else "",
        _access_modes(status.get("accessModes")) if bound else "",
        _storage_class(pvc),
        _or(spec.get("volumeAttributesClassName"), "<unset>"),
        _age(pvc, now),
        _or(spec.get("volumeMode"), "<unset>"),
    ]
    return cells, None


def _print_pv(pv: Obj, now: float) -> Row:
    spec = _dict(pv.get("spec"))
    claim = spec.get("claimRef")
    cells: list[Any] = [
        _name(pv),
        _quantity(_dict(spec.get("capacity")).get("storage")),
        _access_modes(spec.get("accessModes")),
        _str(spec.get("persistentVolumeReclaimPolicy")),
        _volume_phase(pv),
        f"{_str(_dict(claim).get('namespace'))}/{_str(_dict(claim).get('name'))}" if isinstance(claim, dict) else "",
        _storage_class(pv),
        _or(spec.get("volumeAttributesClassName"), "<unset>"),
        _str(_dict(pv.get("status")).get("reason")),
        _age(pv, now),
        _or(spec.get("volumeMode"), "<unset>"),
    ]
    return cells, None


def _desired_replicas(obj: Obj) -> int:
    """spec.replicas, which defaults to 1."""
    spec = _dict(obj.get("spec"))
    return _int(spec.get("replicas")) if "replicas" in spec else 1


def _print_replicationcontroller(rc: Obj, now: float) -> Row:
    status = _dict(rc.get("status"))
    names, images = _containers(_template_spec(rc))
    cells: list[Any] = [
        _name(rc),
        _desired_replicas(rc),
        _int(status.get("replicas")),
        _int(status.get("readyReplicas")),
        _age(rc, now),
        names,
        images,
        _format_labels(_dict(rc.get("spec")).get("selector")),
    ]
    return cells, None


def _print_statefulset(sts: Obj, now: float) -> Row:
    ready = _int(_dict(sts.get("status")).get("readyReplicas"))
    names, images = _containers(_template_spec(sts))
    return [_name(sts), f"{ready}/{_desired_replicas(sts)}", _age(sts, now), names, images], None


def _controller_of(meta: dict[str, Any]) -> str:
    """The controlling owner as `kind.group/name` in lower case (`statefulset.apps/web`), `<none>` if none."""
    for raw in _list(meta.get("ownerReferences")):
        ref = _dict(raw)
        if ref.get("controller") is not True:
            continue
        api_version, kind = _str(ref.get("apiVersion")), _str(ref.get("kind"))
        group = api_version.rpartition("/")[0]
        group_kind = f"{kind}.{group}" if group else kind
        return f"{group_kind.lower()}/{_str(ref.get('name'))}" if group_kind else _str(ref.get("name"))
    return _NONE


def _print_controllerrevision(cr: Obj, now: float) -> Row:
    meta = _dict(cr.get("metadata"))
    return [_name(cr), _controller_of(meta), _int(cr.get("revision")), _age(cr, now)], None


def _job_status(job: Obj) -> str:
    conditions = _dict(job.get("status")).get("conditions")
    if _condition_true(conditions, "Complete"):
        return "Complete"
    if _condition_true(conditions, "Failed"):
        return "Failed"
    if _dict(job.get("metadata")).get("deletionTimestamp"):
        return "Terminating"
    if _condition_true(conditions, "Suspended"):
        return "Suspended"
    if _condition_true(conditions, "FailureTarget"):
        return "FailureTarget"
    return "Running"


def _job_completions(spec: dict[str, Any], succeeded: int) -> str:
    """`3/5` for a job with completions; `0/1`, or `0/1 of 4` for a work queue with parallelism 4."""
    if spec.get("completions") is not None:
        return f"{succeeded}/{_int(spec['completions'])}"
    parallelism = _int(spec.get("parallelism"))
    return f"{succeeded}/1 of {parallelism}" if parallelism > 1 else f"{succeeded}/1"


def _job_duration(status: dict[str, Any], now: float) -> str:
    """From start to completion, or to now while the job runs; blank before it starts."""
    start = time_or_none(status.get("startTime"))
    if start is None:
        return ""
    end = time_or_none(status.get("completionTime"))
    return human_duration((now if end is None else end) - start)


def _print_job(job: Obj, now: float) -> Row:
    spec = _dict(job.get("spec"))
    status = _dict(job.get("status"))
    names, images = _containers(_template_spec(job))
    cells: list[Any] = [
        _name(job),
        _job_status(job),
        _job_completions(spec, _int(status.get("succeeded"))),
        _job_duration(status, now),
        _age(job, now),
        names,
        images,
        _format_selector(spec.get("selector")),
    ]
    return cells, None


def _bool_text(value: Any) -> str:
    """A *bool field as printBoolPtr writes it: True, False or <unset>."""
    return ("True" if value else "False") if isinstance(value, bool) else "<unset>"


def _print_cronjob(cj: Obj, now: float) -> Row:
    spec = _dict(cj.get("spec"))
    status = _dict(cj.get("status"))
    job_spec = _dict(_dict(spec.get("jobTemplate")).get("spec"))
    names, images = _containers(_at(job_spec, "template", "spec"))
    last = _since(status["lastScheduleTime"], now) if status.get("lastScheduleTime") is not None else _NONE
    cells: list[Any] = [
        _name(cj),
        _str(spec.get("schedule")),
        _or(spec.get("timeZone"), _NONE),
        _bool_text(spec.get("suspend")),
        len(_list(status.get("active"))),
        last,
        _age(cj, now),
        names,
        images,
        _format_selector(job_spec.get("selector")),
    ]
    return cells, None


def _quantity_or_nil(value: Any) -> str:
    """A *Quantity's String(): `<nil>` when unset."""
    return "<nil>" if value is None else _quantity(value)


_HPA_SOURCES: Final = {"Resource": "resource", "ContainerResource": "containerResource", "Pods": "pods",
                       "Object": "object", "External": "external"}


def _hpa_metric(spec: dict[str, Any], status: dict[str, Any] | None) -> str:
    """One TARGETS entry, `current/target` (`cpu: 40%/80%`, `2/5 (avg)`), `<unknown>` before a reading."""
    type_ = _str(spec.get("type"))
    source = _HPA_SOURCES.get(type_)
    if source is None:
        return "<unknown type>"
    target = _dict(_at(spec, source, "target"))
    reading = status.get(source) if status is not None else None
    seen = isinstance(reading, dict)
    current = _dict(_dict(reading).get("current"))
    if type_ in ("Resource", "ContainerResource"):
        name = _str(_at(spec, source, "name"))
        if target.get("averageValue") is not None:
            now_value = _quantity_or_nil(current.get("averageValue")) if seen else _UNKNOWN
            return f"{name}: {now_value}/{_quantity(target['averageValue'])}"
        used, goal = current.get("averageUtilization"), target.get("averageUtilization")
        now_value = f"{_int(used)}%" if seen and used is not None else _UNKNOWN
        return f"{name}: {now_value}/{f'{_int(goal)}%' if goal is not None else '<auto>'}"
    if type_ == "Pods":
        now_value = _quantity_or_nil(current.get("averageValue")) if seen else _UNKNOWN
        return f"{now_value}/{_quantity_or_nil(target.get('averageValue'))}"
    # Object and External: an average per pod, or a total value.
    if target.get("averageValue") is not None:
        average = current.get("averageValue")
        now_value = _quantity(average) if seen and average is not None else _UNKNOWN
        return f"{now_value}/{_quantity(target['averageValue'])} (avg)"
    now_value = _quantity_or_nil(current.get("value")) if seen else _UNKNOWN
    return f"{now_value}/{_quantity_or_nil(target.get('value'))}"


def _hpa_targets(specs: list[Any], statuses: list[Any]) -> str:
    """Every metric's entry (the first two, then `+ N more...`), `<none>` without metrics."""
    if not specs:
        return _NONE
    entries = [
        _hpa_metric(_dict(spec), _dict(statuses[i]) if i < len(statuses) else None) for i, spec in enumerate(specs)
    ]
    text = ", ".join(entries[:2])
    return f"{text} + {len(entries) - 2} more..." if len(entries) > 2 else text


def _print_hpa(hpa: Obj, now: float) -> Row:
    spec = _dict(hpa.get("spec"))
    status = _dict(hpa.get("status"))
    ref = _dict(spec.get("scaleTargetRef"))
    min_pods = spec.get("minReplicas")
    cells: list[Any] = [
        _name(hpa),
        f"{_str(ref.get('kind'))}/{_str(ref.get('name'))}",
        _hpa_targets(_list(spec.get("metrics")), _list(status.get("currentMetrics"))),
        str(_int(min_pods)) if min_pods is not None else "<unset>",
        _int(spec.get("maxReplicas")),
        _int(status.get("currentReplicas")),
        _age(hpa, now),
    ]
    return cells, None


def _ingress_hosts(rules: list[Any]) -> str:
    """The first three rule hosts, `*` when no rule names one; `+ N more...` counts the rules left."""
    hosts: list[str] = []
    more = False
    for rule in rules:
        more = more or len(hosts) == 3
        host = _str(_dict(rule).get("host"))
        if host and not more:
            hosts.append(host)
    if not hosts:
        return "*"
    return f"{','.join(hosts)} + {len(rules) - 3} more..." if more else ",".join(hosts)


def _print_ingress(ing: Obj, now: float) -> Row:
    spec = _dict(ing.get("spec"))
    cells: list[Any] = [
        _name(ing),
        _or(spec.get("ingressClassName"), _NONE),
        _ingress_hosts(_list(spec.get("rules"))),
        _load_balancer(ing.get("status")),
        "80, 443" if _list(spec.get("tls")) else "80",
        _age(ing, now),
    ]
    return cells, None


def _print_ingressclass(ic: Obj, now: float) -> Row:
    spec = _dict(ic.get("spec"))
    params = spec.get("parameters")
    parameters = _NONE
    if isinstance(params, dict):
        group = params.get("apiGroup")
        kind = _str(params.get("kind")) + (f".{group}" if isinstance(group, str) else "")
        parameters = f"{kind}/{_str(params.get('name'))}"
    return [_name(ic), _str(spec.get("controller")), parameters, _age(ic, now)], None


def _print_networkpolicy(np: Obj, now: float) -> Row:
    selector = _format_selector(_dict(np.get("spec")).get("podSelector"))
    return [_name(np), selector, _age(np, now)], None


_DEFAULT_CLASS_ANNOTATIONS: Final = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)


def _print_storageclass(sc: Obj, now: float) -> Row:
    annotations = _dict(_dict(sc.get("metadata")).get("annotations"))
    default = any(annotations.get(a) == "true" for a in _DEFAULT_CLASS_ANNOTATIONS)
    cells: list[Any] = [
        _name(sc) + (" (default)" if default else ""),
        _str(sc.get("provisioner")),
        _or(sc.get("reclaimPolicy"), "Delete"),
        _or(sc.get("volumeBindingMode"), "Immediate"),
        sc.get("allowVolumeExpansion") is True,
        _age(sc, now),
    ]
    return cells, None


def _subjects(subjects: Any) -> tuple[str, str, str]:
    """Users, groups and service accounts (`namespace/name`) of a binding, each joined with `, `."""
    users: list[str] = []
    groups: list[str] = []
    accounts: list[str] = []
    for raw in _list(subjects):
        s = _dict(raw)
        name = _str(s.get("name"))
        if s.get("kind") == "User":
            users.append(name)
        elif s.get("kind") == "Group":
            groups.append(name)
        elif s.get("kind") == "ServiceAccount":
            accounts.append(f"{_str(s.get('namespace'))}/{name}")
    return ", ".join(users), ", ".join(groups), ", ".join(accounts)


def _print_binding(binding: Obj, now: float) -> Row:
    """A RoleBinding or ClusterRoleBinding."""
    ref = _dict(binding.get("roleRef"))
    role = f"{_str(ref.get('kind'))}/{_str(ref.get('name'))}"
    return [_name(binding), role, _age(binding, now), *_subjects(binding.get("subjects"))], None


def _print_webhooks(config: Obj, now: float) -> Row:
    """A Validating- or MutatingWebhookConfiguration."""
    return [_name(config), len(_list(config.get("webhooks"))), _age(config, now)], None


def _print_apiservice(svc: Obj, now: float) -> Row:
    ref = _dict(svc.get("spec")).get("service")
    service = "Local"
    if isinstance(ref, dict):
        service = f"{_str(ref.get('namespace'))}/{_str(ref.get('name'))}"
    available = "Unknown"
    for raw in _list(_dict(svc.get("status")).get("conditions")):
        c = _dict(raw)
        if c.get("type") == "Available":
            status, reason = _str(c.get("status")), _str(c.get("reason"))
            available = f"{status} ({reason})" if status != "True" and reason else status
            break
    return [_name(svc), service, available, _age(svc, now)], None


def _print_default(obj: Obj, now: float) -> Row:
    meta = _dict(obj.get("metadata"))
    created = time_or_none(meta.get("creationTimestamp"))
    return [_str(meta.get("name")), format_time(created) if created is not None else ""], None


_PRINTERS: Final[Mapping[tuple[str, str], _Printer]] = {
    ("", "Pod"): _print_pod,
    ("", "Node"): _print_node,
    ("", "Namespace"): _print_namespace,
    ("", "Event"): _print_event,
    ("", "ConfigMap"): _print_configmap,
    ("", "Service"): _print_service,
    ("coordination.k8s.io", "Lease"): _print_lease,
    ("apps", "Deployment"): _print_deployment,
    ("apps", "ReplicaSet"): _print_replicaset,
    ("apps", "DaemonSet"): _print_daemonset,
    ("scheduling.k8s.io", "PriorityClass"): _print_priorityclass,
    ("policy", "PodDisruptionBudget"): _print_pdb,
    ("", "Secret"): _print_secret,
    ("", "ServiceAccount"): _print_serviceaccount,
    ("", "Endpoints"): _print_endpoints,
    ("discovery.k8s.io", "EndpointSlice"): _print_endpointslice,
    ("", "PersistentVolumeClaim"): _print_pvc,
    ("", "PersistentVolume"): _print_pv,
    ("", "ReplicationController"): _print_replicationcontroller,
    ("apps", "StatefulSet"): _print_statefulset,
    ("apps", "ControllerRevision"): _print_controllerrevision,
    ("batch", "Job"): _print_job,
    ("batch", "CronJob"): _print_cronjob,
    ("autoscaling", "HorizontalPodAutoscaler"): _print_hpa,
    ("networking.k8s.io", "Ingress"): _print_ingress,
    ("networking.k8s.io", "IngressClass"): _print_ingressclass,
    ("networking.k8s.io", "NetworkPolicy"): _print_networkpolicy,
    ("storage.k8s.io", "StorageClass"): _print_storageclass,
    ("rbac.authorization.k8s.io", "RoleBinding"): _print_binding,
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): _print_binding,
    ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration"): _print_webhooks,
    ("admissionregistration.k8s.io", "MutatingWebhookConfiguration"): _print_webhooks,
    ("apiregistration.k8s.io", "APIService"): _print_apiservice,
}


# ---------------------------------------------------------------------------------------------
# Tables.


def _row_object(kind: Kind, obj: Obj, include_object: str) -> Obj | None:
    if include_object == "None":
        return None
    if include_object == "Object":
        if obj.get("kind") and obj.get("apiVersion"):
            return obj
        # List items may omit kind and apiVersion; kubectl decodes row objects by them.
        return {**obj, "kind": kind.kind, "apiVersion": kind.api_version}
    metadata = obj.get("metadata") or {}
    return {"kind": "PartialObjectMetadata", "apiVersion": TABLE_API_VERSION, "metadata": metadata}


def _row(kind: Kind, obj: Obj, now: float, include_object: str) -> Obj:
    custom = custom_of(kind)
    if custom is not None:
        cells, conditions = _print_custom(custom.columns, obj, now)
    else:
        printer = _PRINTERS.get((kind.group, kind.kind), _print_default)
        cells, conditions = printer(obj, now)
    row: Obj = {"cells": cells}
    if conditions:
        row["conditions"] = conditions
    row_object = _row_object(kind, obj, include_object)
    if row_object is not None:
        row["object"] = row_object
    return row


@functools.lru_cache(maxsize=64)
def _column_list(group: str, kind_name: str) -> list[Obj]:
    return list(_COLUMNS.get((group, kind_name), _DEFAULT_COLUMNS))


def to_table(
    kind: Kind,
    objects: Sequence[Obj],
    *,
    now: float,
    resource_version: str,
    include_object: str = "Metadata",
    continue_token: str | None = None,
) -> Obj:
    """A `meta.k8s.io/v1 Table` of `objects` (a list, or one object for a GET), in their order.

    `now` is cluster time in seconds (ages are computed against it); `resource_version` is
    the list's (or the object's) resourceVersion; `include_object` is the request's
    `includeObject` (`None`, `Metadata` or `Object`; ValueError otherwise, which the caller
    answers with 400); `continue_token` is set on `metadata.continue` when the list is
    paged. The returned Table shares the objects' metadata dicts: serialise it, do not
    mutate it.
    """
    if include_object not in INCLUDE_OBJECT_POLICIES:
        raise ValueError(f"includeObject must be one of {', '.join(INCLUDE_OBJECT_POLICIES)}, not {include_object!r}")
    metadata: Obj = {"resourceVersion": resource_version}
    if continue_token:
        metadata["continue"] = continue_token
    return {
        "kind": "Table",
        "apiVersion": TABLE_API_VERSION,
        "metadata": metadata,
        "columnDefinitions": list(column_definitions(kind)) if kind.custom is not None
        else _column_list(kind.group, kind.kind),
        "rows": [_row(kind, obj, now, include_object) for obj in objects],
    }


def watch_event_table(kind: Kind, obj: Obj, *, now: float, include_object: str = "Metadata") -> Obj:
    """The object of a watch event on a Table watch: a one-row Table at the object's resourceVersion."""
    rv = str(_dict(obj.get("metadata")).get("resourceVersion") or "")
    return to_table(kind, [obj], now=now, resource_version=rv, include_object=include_object)

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
PriorityClass, ConfigMap, Service, PodDisruptionBudget. Every other kind gets the apiserver's
default columns, Name and Created At.

Time is the cluster's: callers pass `now` (cluster seconds) and nothing here reads a clock.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from kubemesh.apiserver.discovery import parse_accept
from kubemesh.services.machinery.clock import format_time, time_or_none
from kubemesh.services.model.kinds import Kind, Obj

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
}

_DEFAULT_COLUMNS: Final = (
    _NAME_COL,
    _col("Created At", "date", "When the object was created (its creationTimestamp)."),
)


def column_definitions(kind: Kind) -> tuple[Obj, ...]:
    """The Table columns of a kind (the default Name and Created At when it has no printer)."""
    return _COLUMNS.get((kind.group, kind.kind), _DEFAULT_COLUMNS)


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
        "columnDefinitions": _column_list(kind.group, kind.kind),
        "rows": [_row(kind, obj, now, include_object) for obj in objects],
    }


def watch_event_table(kind: Kind, obj: Obj, *, now: float, include_object: str = "Metadata") -> Obj:
    """The object of a watch event on a Table watch: a one-row Table at the object's resourceVersion."""
    rv = str(_dict(obj.get("metadata")).get("resourceVersion") or "")
    return to_table(kind, [obj], now=now, resource_version=rv, include_object=include_object)

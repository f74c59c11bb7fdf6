"""The registry of API kinds kubemesh serves: one `Kind` per resource.

Everything that needs to know what a resource is reads it from here: the apiserver's
routing, storage and discovery documents, the API client's URL building and the
components' informers. Adding a kind is one entry in `KINDS`.

Objects travel as plain JSON-like dicts (`Obj`), as they do on the wire; the helpers at
the end of this module read the few fields every layer needs, so that no caller digs
through nested dicts by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

Obj = dict[str, Any]
"""A Kubernetes object as it travels on the wire: a JSON-like dict."""

FieldGetter = Callable[[Obj], str]

_ALL_VERBS: Final = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")


def _path(*names: str) -> FieldGetter:
    """Read a dotted path as the string a field selector compares against."""

    def get(obj: Obj) -> str:
        cur: Any = obj
        for name in names:
            if not isinstance(cur, dict):
                return ""
            cur = cur.get(name)
        if cur is None:
            return ""
        if isinstance(cur, bool):
            return "true" if cur else "false"
        if isinstance(cur, list):
            return ",".join(str(x.get("ip", "")) if isinstance(x, dict) else str(x) for x in cur)
        return str(cur)

    return get


@dataclass(frozen=True, slots=True, kw_only=True)
class Subresource:
    """A subresource such as `pods/status` or `deployments/scale`."""

    name: str
    kind: str
    verbs: tuple[str, ...]
    group: str | None = None
    """Set when the subresource's kind lives in another group (eviction: policy/v1)."""
    version: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Kind:
    """One served resource: where it lives, what it is called and how it is selected.

    Kinds are singletons from `KINDS`: they compare and hash by identity.
    """

    group: str
    """API group; "" for the core group."""
    version: str
    kind: str
    plural: str
    singular: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = _ALL_VERBS
    subresources: tuple[Subresource, ...] = ()
    fields: Mapping[str, FieldGetter] = field(default_factory=dict)
    """Field-selector fields beyond metadata.name and metadata.namespace."""
    has_status: bool = True
    """Whether `status` is a separate part that the main resource's writes leave alone."""

    @property
    def api_version(self) -> str:
        """`v1` for the core group, `group/version` otherwise."""
        return self.version if not self.group else f"{self.group}/{self.version}"

    @property
    def prefix(self) -> str:
        """The URL prefix of the group version: `/api/v1` or `/apis/apps/v1`."""
        return f"/api/{self.version}" if not self.group else f"/apis/{self.group}/{self.version}"

    @property
    def resource(self) -> str:
        """`plural` or `plural.group`, as Kubernetes names resources in errors and RBAC."""
        return self.plural if not self.group else f"{self.plural}.{self.group}"

    def subresource(self, name: str) -> Subresource | None:
        """The subresource called `name`, if this kind has it."""
        for sub in self.subresources:
            if sub.name == name:
                return sub
        return None

    def field_getter(self, name: str) -> FieldGetter | None:
        """The getter for a field selector field, or None if the field is not supported."""
        if name == "metadata.name":
            return _path("metadata", "name")
        if name == "metadata.namespace":
            return _path("metadata", "namespace")
        return self.fields.get(name)

    def url(self, *, namespace: str | None = None, name: str | None = None, sub: str | None = None) -> str:
        """The path of the collection, of one object, or of one object's subresource."""
        parts = [self.prefix]
        if self.namespaced and namespace is not None:
            parts.append(f"/namespaces/{namespace}")
        parts.append(f"/{self.plural}")
        if name is not None:
            parts.append(f"/{name}")
            if sub is not None:
                parts.append(f"/{sub}")
        return "".join(parts)


_STATUS = ("get", "patch", "update")

NAMESPACES: Final = Kind(
    group="", version="v1", kind="Namespace", plural="namespaces", singular="namespace",
    namespaced=False, short_names=("ns",),
    verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
    subresources=(Subresource(name="status", kind="Namespace", verbs=_STATUS),),
    fields={"status.phase": _path("status", "phase")},
)
NODES: Final = Kind(
    group="", version="v1", kind="Node", plural="nodes", singular="node", namespaced=False,
    short_names=("no",),
    subresources=(Subresource(name="status", kind="Node", verbs=_STATUS),),
    fields={"spec.unschedulable": _path("spec", "unschedulable")},
)
PODS: Final = Kind(
    group="", version="v1", kind="Pod", plural="pods", singular="pod", namespaced=True,
    short_names=("po",), categories=("all",),
    subresources=(
        Subresource(name="status", kind="Pod", verbs=_STATUS),
        Subresource(name="binding", kind="Binding", verbs=("create",)),
        Subresource(name="eviction", kind="Eviction", verbs=("create",), group="policy", version="v1"),
    ),
    fields={
        "spec.nodeName": _path("spec", "nodeName"),
        "spec.restartPolicy": _path("spec", "restartPolicy"),
        "spec.schedulerName": _path("spec", "schedulerName"),
        "spec.serviceAccountName": _path("spec", "serviceAccountName"),
        "spec.hostNetwork": _path("spec", "hostNetwork"),
        "status.phase": _path("status", "phase"),
        "status.podIP": _path("status", "podIP"),
        "status.podIPs": _path("status", "podIPs"),
        "status.nominatedNodeName": _path("status", "nominatedNodeName"),
    },
)
BINDINGS: Final = Kind(
    group="", version="v1", kind="Binding", plural="bindings", singular="binding", namespaced=True,
    verbs=("create",), has_status=False,
)
EVENTS: Final = Kind(
    group="", version="v1", kind="Event", plural="events", singular="event", namespaced=True,
    short_names=("ev",), has_status=False,
    fields={
        **{
            f"involvedObject.{f}": _path("involvedObject", f)
            for f in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
        },
        "reason": _path("reason"),
        "reportingComponent": _path("reportingComponent"),
        "source": _path("source", "component"),
        "type": _path("type"),
    },
)
CONFIGMAPS: Final = Kind(
    group="", version="v1", kind="ConfigMap", plural="configmaps", singular="configmap",
    namespaced=True, short_names=("cm",), has_status=False,
)
SERVICES: Final = Kind(
    group="", version="v1", kind="Service", plural="services", singular="service", namespaced=True,
    short_names=("svc",), categories=("all",),
    subresources=(Subresource(name="status", kind="Service", verbs=_STATUS),),
)
LEASES: Final = Kind(
    group="coordination.k8s.io", version="v1", kind="Lease", plural="leases", singular="lease",
    namespaced=True, has_status=False,
)
_SCALE = Subresource(name="scale", kind="Scale", verbs=_STATUS, group="autoscaling", version="v1")
DEPLOYMENTS: Final = Kind(
    group="apps", version="v1", kind="Deployment", plural="deployments", singular="deployment",
    namespaced=True, short_names=("deploy",), categories=("all",),
    subresources=(Subresource(name="status", kind="Deployment", verbs=_STATUS), _SCALE),
)
REPLICASETS: Final = Kind(
    group="apps", version="v1", kind="ReplicaSet", plural="replicasets", singular="replicaset",
    namespaced=True, short_names=("rs",), categories=("all",),
    subresources=(Subresource(name="status", kind="ReplicaSet", verbs=_STATUS), _SCALE),
    fields={"status.replicas": _path("status", "replicas")},
)
DAEMONSETS: Final = Kind(
    group="apps", version="v1", kind="DaemonSet", plural="daemonsets", singular="daemonset",
    namespaced=True, short_names=("ds",), categories=("all",),
    subresources=(Subresource(name="status", kind="DaemonSet", verbs=_STATUS),),
)
PRIORITYCLASSES: Final = Kind(
    group="scheduling.k8s.io", version="v1", kind="PriorityClass", plural="priorityclasses",
    singular="priorityclass", namespaced=False, short_names=("pc",), has_status=False,
)
PODDISRUPTIONBUDGETS: Final = Kind(
    group="policy", version="v1", kind="PodDisruptionBudget", plural="poddisruptionbudgets",
    singular="poddisruptionbudget", namespaced=True, short_names=("pdb",),
    subresources=(Subresource(name="status", kind="PodDisruptionBudget", verbs=_STATUS),),
)

KINDS: Final[tuple[Kind, ...]] = (
    NAMESPACES, NODES, PODS, BINDINGS, EVENTS, CONFIGMAPS, SERVICES, LEASES,
    DEPLOYMENTS, REPLICASETS, DAEMONSETS, PRIORITYCLASSES, PODDISRUPTIONBUDGETS,
)

STORED_KINDS: Final[tuple[Kind, ...]] = tuple(k for k in KINDS if "get" in k.verbs)
"""Kinds with objects in the store (bindings are create-only and never stored)."""

_BY_PATH: Final[dict[tuple[str, str, str], Kind]] = {(k.group, k.version, k.plural): k for k in KINDS}


def lookup(group: str, version: str, plural: str) -> Kind | None:
    """The kind served at `group/version/plural`, or None."""
    return _BY_PATH.get((group, version, plural))


def group_versions() -> dict[str, list[str]]:
    """Every served group with its versions, the core group as ""."""
    out: dict[str, list[str]] = {}
    for k in KINDS:
        versions = out.setdefault(k.group, [])
        if k.version not in versions:
            versions.append(k.version)
    return out


# ---------------------------------------------------------------------------------------------
# Field access shared by every layer.


def meta(obj: Obj) -> dict[str, Any]:
    """The object's metadata dict (created empty if absent)."""
    m = obj.get("metadata")
    if not isinstance(m, dict):
        m = {}
        obj["metadata"] = m
    return m


def name_of(obj: Obj) -> str:
    """metadata.name, or ""."""
    return str((obj.get("metadata") or {}).get("name") or "")


def namespace_of(obj: Obj) -> str:
    """metadata.namespace, or "" for cluster-scoped objects."""
    return str((obj.get("metadata") or {}).get("namespace") or "")


def key_of(obj: Obj) -> str:
    """The cache key client-go uses: `namespace/name`, or `name` when cluster-scoped."""
    ns = namespace_of(obj)
    return f"{ns}/{name_of(obj)}" if ns else name_of(obj)


def uid_of(obj: Obj) -> str:
    """metadata.uid, or ""."""
    return str((obj.get("metadata") or {}).get("uid") or "")


def rv_of(obj: Obj) -> int:
    """metadata.resourceVersion as an int (0 when absent or not numeric)."""
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(rv) if rv else 0
    except (TypeError, ValueError):
        return 0


def labels_of(obj: Obj) -> dict[str, str]:
    """metadata.labels (never None)."""
    labels = (obj.get("metadata") or {}).get("labels")
    return labels if isinstance(labels, dict) else {}

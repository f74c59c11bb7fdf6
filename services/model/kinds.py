"""The API kinds kubemesh serves: one `Kind` per resource and version, and the table that holds them.

Everything that needs to know what a resource is reads it from here: the apiserver's
routing, storage and discovery documents, the API client's URL building and the
components' informers. Adding a built-in kind is one entry in `KINDS`; custom resource
definitions add kinds at run time to an apiserver's `KindTable`, and everything derived from
the table (discovery, OpenAPI, storage buckets, watch windows) follows.

Objects travel as plain JSON-like dicts (`Obj`), as they do on the wire; the helpers at
the end of this module read the few fields every layer needs, so that no caller digs
through nested dicts by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
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


def field_path(*names: str) -> FieldGetter:
    """A field-selector getter for the field at `names` (`field_path("spec", "color")`)."""
    return _path(*names)


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
    """One served resource at one version: where it lives, what it is called and how it is selected.

    Kinds are singletons (the entries of `KINDS`, or those a custom resource definition adds):
    they compare and hash by identity. The versions of one resource share its storage
    (`resource`); the one marked `storage` is the version objects are kept in.
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
    storage: bool = True
    """Whether objects are stored at this version (one version of a resource is)."""
    custom: Any = None
    """For a custom resource: what its definition says (`kubemesh.apiserver.crds.CustomKind`)."""
    api_version: str = field(init=False)
    """`v1` for the core group, `group/version` otherwise."""
    prefix: str = field(init=False)
    """The URL prefix of the group version: `/api/v1` or `/apis/apps/v1`."""
    resource: str = field(init=False)
    """`plural` or `plural.group`, as Kubernetes names resources in errors and RBAC; the storage key."""

    def __post_init__(self) -> None:
        # Derived once: they are read on every request and every stored write.
        object.__setattr__(self, "api_version", self.version if not self.group else f"{self.group}/{self.version}")
        object.__setattr__(self, "prefix", f"/api/{self.version}" if not self.group
                           else f"/apis/{self.group}/{self.version}")
        object.__setattr__(self, "resource", self.plural if not self.group else f"{self.plural}.{self.group}")

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
    subresources=(Subresource(name="finalize", kind="Namespace", verbs=("update",)),
                  Subresource(name="status", kind="Namespace", verbs=_STATUS)),
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
        # Served by kubemesh.apiserver.podstreams: the log from the pod's kubelet; exec, attach
        # and portforward refused (emulated containers run no processes).
        Subresource(name="log", kind="Pod", verbs=("get",)),
        Subresource(name="exec", kind="PodExecOptions", verbs=("create", "get")),
        Subresource(name="attach", kind="PodAttachOptions", verbs=("create", "get")),
        Subresource(name="portforward", kind="PodPortForwardOptions", verbs=("create", "get")),
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

# -- what Helm charts and operators create besides ------------------------------------------

SECRETS: Final = Kind(
    group="", version="v1", kind="Secret", plural="secrets", singular="secret", namespaced=True,
    has_status=False, fields={"type": _path("type")},
)
SERVICEACCOUNTS: Final = Kind(
    group="", version="v1", kind="ServiceAccount", plural="serviceaccounts", singular="serviceaccount",
    namespaced=True, short_names=("sa",), has_status=False,
    subresources=(Subresource(name="token", kind="TokenRequest", verbs=("create",), group="authentication.k8s.io",
                              version="v1"),),
)
ENDPOINTS: Final = Kind(
    group="", version="v1", kind="Endpoints", plural="endpoints", singular="endpoints", namespaced=True,
    short_names=("ep",), has_status=False,
)
PERSISTENTVOLUMECLAIMS: Final = Kind(
    group="", version="v1", kind="PersistentVolumeClaim", plural="persistentvolumeclaims",
    singular="persistentvolumeclaim", namespaced=True, short_names=("pvc",),
    subresources=(Subresource(name="status", kind="PersistentVolumeClaim", verbs=_STATUS),),
)
RESOURCEQUOTAS: Final = Kind(
    group="", version="v1", kind="ResourceQuota", plural="resourcequotas", singular="resourcequota",
    namespaced=True, short_names=("quota",),
    subresources=(Subresource(name="status", kind="ResourceQuota", verbs=_STATUS),),
)
LIMITRANGES: Final = Kind(
    group="", version="v1", kind="LimitRange", plural="limitranges", singular="limitrange", namespaced=True,
    short_names=("limits",), has_status=False,
)
PERSISTENTVOLUMES: Final = Kind(
    group="", version="v1", kind="PersistentVolume", plural="persistentvolumes", singular="persistentvolume",
    namespaced=False, short_names=("pv",),
    subresources=(Subresource(name="status", kind="PersistentVolume", verbs=_STATUS),),
)
REPLICATIONCONTROLLERS: Final = Kind(
    group="", version="v1", kind="ReplicationController", plural="replicationcontrollers",
    singular="replicationcontroller", namespaced=True, short_names=("rc",), categories=("all",),
    subresources=(Subresource(name="status", kind="ReplicationController", verbs=_STATUS), _SCALE),
    fields={"status.replicas": _path("status", "replicas")},
)
STATEFULSETS: Final = Kind(
    group="apps", version="v1", kind="StatefulSet", plural="statefulsets", singular="statefulset",
    namespaced=True, short_names=("sts",), categories=("all",),
    subresources=(Subresource(name="status", kind="StatefulSet", verbs=_STATUS), _SCALE),
)
CONTROLLERREVISIONS: Final = Kind(
    group="apps", version="v1", kind="ControllerRevision", plural="controllerrevisions",
    singular="controllerrevision", namespaced=True, has_status=False,
)
JOBS: Final = Kind(
    group="batch", version="v1", kind="Job", plural="jobs", singular="job", namespaced=True,
    categories=("all",), subresources=(Subresource(name="status", kind="Job", verbs=_STATUS),),
    fields={"status.successful": _path("status", "succeeded")},
)
CRONJOBS: Final = Kind(
    group="batch", version="v1", kind="CronJob", plural="cronjobs", singular="cronjob", namespaced=True,
    short_names=("cj",), categories=("all",),
    subresources=(Subresource(name="status", kind="CronJob", verbs=_STATUS),),
)
HORIZONTALPODAUTOSCALERS: Final = Kind(
    group="autoscaling", version="v2", kind="HorizontalPodAutoscaler", plural="horizontalpodautoscalers",
    singular="horizontalpodautoscaler", namespaced=True, short_names=("hpa",), categories=("all",),
    subresources=(Subresource(name="status", kind="HorizontalPodAutoscaler", verbs=_STATUS),),
)
HORIZONTALPODAUTOSCALERS_V1: Final = Kind(
    group="autoscaling", version="v1", kind="HorizontalPodAutoscaler", plural="horizontalpodautoscalers",
    singular="horizontalpodautoscaler", namespaced=True, short_names=("hpa",), categories=("all",),
    subresources=(Subresource(name="status", kind="HorizontalPodAutoscaler", verbs=_STATUS),), storage=False,
)
"""The autoscaling/v1 version kubectl 1.27-1.31 `autoscale` creates, stored at v2 (`apiserver.conversion`)."""
ENDPOINTSLICES: Final = Kind(
    group="discovery.k8s.io", version="v1", kind="EndpointSlice", plural="endpointslices",
    singular="endpointslice", namespaced=True, has_status=False,
)
INGRESSES: Final = Kind(
    group="networking.k8s.io", version="v1", kind="Ingress", plural="ingresses", singular="ingress",
    namespaced=True, short_names=("ing",),
    subresources=(Subresource(name="status", kind="Ingress", verbs=_STATUS),),
)
INGRESSCLASSES: Final = Kind(
    group="networking.k8s.io", version="v1", kind="IngressClass", plural="ingressclasses",
    singular="ingressclass", namespaced=False, has_status=False,
)
NETWORKPOLICIES: Final = Kind(
    group="networking.k8s.io", version="v1", kind="NetworkPolicy", plural="networkpolicies",
    singular="networkpolicy", namespaced=True, short_names=("netpol",), has_status=False,
)
STORAGECLASSES: Final = Kind(
    group="storage.k8s.io", version="v1", kind="StorageClass", plural="storageclasses", singular="storageclass",
    namespaced=False, short_names=("sc",), has_status=False,
)
_RBAC = "rbac.authorization.k8s.io"
ROLES: Final = Kind(group=_RBAC, version="v1", kind="Role", plural="roles", singular="role", namespaced=True,
                    has_status=False)
ROLEBINDINGS: Final = Kind(group=_RBAC, version="v1", kind="RoleBinding", plural="rolebindings",
                           singular="rolebinding", namespaced=True, has_status=False)
CLUSTERROLES: Final = Kind(group=_RBAC, version="v1", kind="ClusterRole", plural="clusterroles",
                           singular="clusterrole", namespaced=False, has_status=False)
CLUSTERROLEBINDINGS: Final = Kind(group=_RBAC, version="v1", kind="ClusterRoleBinding",
                                  plural="clusterrolebindings", singular="clusterrolebinding", namespaced=False,
                                  has_status=False)
_ADMISSION = "admissionregistration.k8s.io"
VALIDATINGWEBHOOKCONFIGURATIONS: Final = Kind(
    group=_ADMISSION, version="v1", kind="ValidatingWebhookConfiguration",
    plural="validatingwebhookconfigurations", singular="validatingwebhookconfiguration", namespaced=False,
    has_status=False,
)
MUTATINGWEBHOOKCONFIGURATIONS: Final = Kind(
    group=_ADMISSION, version="v1", kind="MutatingWebhookConfiguration",
    plural="mutatingwebhookconfigurations", singular="mutatingwebhookconfiguration", namespaced=False,
    has_status=False,
)
CUSTOMRESOURCEDEFINITIONS: Final = Kind(
    group="apiextensions.k8s.io", version="v1", kind="CustomResourceDefinition",
    plural="customresourcedefinitions", singular="customresourcedefinition", namespaced=False,
    short_names=("crd", "crds"), categories=("api-extensions",),
    subresources=(Subresource(name="status", kind="CustomResourceDefinition", verbs=_STATUS),),
)
APISERVICES: Final = Kind(
    group="apiregistration.k8s.io", version="v1", kind="APIService", plural="apiservices", singular="apiservice",
    namespaced=False, categories=("api-extensions",),
    subresources=(Subresource(name="status", kind="APIService", verbs=_STATUS),),
)
# Reviews: created and answered, never stored (like bindings).
SELFSUBJECTACCESSREVIEWS: Final = Kind(
    group="authorization.k8s.io", version="v1", kind="SelfSubjectAccessReview",
    plural="selfsubjectaccessreviews", singular="selfsubjectaccessreview", namespaced=False, verbs=("create",),
    has_status=False,
)
SELFSUBJECTRULESREVIEWS: Final = Kind(
    group="authorization.k8s.io", version="v1", kind="SelfSubjectRulesReview",
    plural="selfsubjectrulesreviews", singular="selfsubjectrulesreview", namespaced=False, verbs=("create",),
    has_status=False,
)
SUBJECTACCESSREVIEWS: Final = Kind(
    group="authorization.k8s.io", version="v1", kind="SubjectAccessReview", plural="subjectaccessreviews",
    singular="subjectaccessreview", namespaced=False, verbs=("create",), has_status=False,
)
SELFSUBJECTREVIEWS: Final = Kind(
    group="authentication.k8s.io", version="v1", kind="SelfSubjectReview", plural="selfsubjectreviews",
    singular="selfsubjectreview", namespaced=False, verbs=("create",), has_status=False,
)

REVIEWS: Final[frozenset[Kind]] = frozenset({SELFSUBJECTACCESSREVIEWS, SELFSUBJECTRULESREVIEWS,
                                             SUBJECTACCESSREVIEWS, SELFSUBJECTREVIEWS})
"""Kinds a client creates to ask a question: answered at once, never stored."""

KINDS: Final[tuple[Kind, ...]] = (
    NAMESPACES, NODES, PODS, BINDINGS, EVENTS, CONFIGMAPS, SERVICES, LEASES,
    DEPLOYMENTS, REPLICASETS, DAEMONSETS, PRIORITYCLASSES, PODDISRUPTIONBUDGETS,
    SECRETS, SERVICEACCOUNTS, ENDPOINTS, PERSISTENTVOLUMECLAIMS, PERSISTENTVOLUMES, REPLICATIONCONTROLLERS,
    RESOURCEQUOTAS, LIMITRANGES, STATEFULSETS, CONTROLLERREVISIONS, JOBS, CRONJOBS,
    HORIZONTALPODAUTOSCALERS, HORIZONTALPODAUTOSCALERS_V1, ENDPOINTSLICES, INGRESSES, INGRESSCLASSES,
    NETWORKPOLICIES, STORAGECLASSES, ROLES, ROLEBINDINGS, CLUSTERROLES, CLUSTERROLEBINDINGS,
    VALIDATINGWEBHOOKCONFIGURATIONS, MUTATINGWEBHOOKCONFIGURATIONS, CUSTOMRESOURCEDEFINITIONS, APISERVICES,
    SELFSUBJECTACCESSREVIEWS, SELFSUBJECTRULESREVIEWS, SUBJECTACCESSREVIEWS, SELFSUBJECTREVIEWS,
)

STORED_KINDS: Final[tuple[Kind, ...]] = tuple(k for k in KINDS if "get" in k.verbs and k.storage)
"""Kinds with objects in the store (bindings are create-only and never stored)."""

_BY_PATH: Final[dict[tuple[str, str, str], Kind]] = {(k.group, k.version, k.plural): k for k in KINDS}


def lookup(group: str, version: str, plural: str) -> Kind | None:
    """The built-in kind served at `group/version/plural`, or None (an apiserver asks its `KindTable`)."""
    return _BY_PATH.get((group, version, plural))


def group_versions(kinds: Iterable[Kind] = KINDS) -> dict[str, list[str]]:
    """Every group of `kinds` with its versions, the core group as "", in first-seen order."""
    out: dict[str, list[str]] = {}
    for k in kinds:
        versions = out.setdefault(k.group, [])
        if k.version not in versions:
            versions.append(k.version)
    return out


class KindTable:
    """The kinds one apiserver serves: the built-in ones, and those custom resource definitions add.

    Not a module-level registry: each apiserver (and each in-process test) has its own. Every
    change increases `generation`, so that what is derived from the table (discovery and
    OpenAPI documents) knows when to rebuild, and is told to the listeners (`on_change`), in
    the order the changes happen.
    """

    def __init__(self, builtin: Iterable[Kind] = KINDS) -> None:
        self._kinds: list[Kind] = list(builtin)
        self.builtin: frozenset[Kind] = frozenset(self._kinds)
        self.generation = 0
        self._listeners: list[Callable[[Kind, bool], None]] = []
        self._reindex()

    def _reindex(self) -> None:
        self._by_path = {(k.group, k.version, k.plural): k for k in self._kinds}
        self._by_resource = {k.resource: k for k in self._kinds if k.storage}
        for k in self._kinds:  # a resource whose storage version is not served: any served version
            self._by_resource.setdefault(k.resource, k)
        self._all = tuple(self._kinds)
        self._stored = tuple(k for k in self._kinds if "get" in k.verbs)

    def lookup(self, group: str, version: str, plural: str) -> Kind | None:
        """The kind served at `group/version/plural`, or None."""
        return self._by_path.get((group, version, plural))

    def by_resource(self, resource: str) -> Kind | None:
        """The storage version of a resource (`plural.group`), or None."""
        return self._by_resource.get(resource)

    def by_kind(self, group: str, kind: str) -> list[Kind]:
        """Every served version of a kind named `kind` in `group`."""
        return [k for k in self._kinds if k.group == group and k.kind == kind]

    def all(self) -> tuple[Kind, ...]:
        """Every served kind, built-in first, in the order they were added."""
        return self._all

    def stored(self) -> tuple[Kind, ...]:
        """The kinds with objects in the store (bindings are create-only)."""
        return self._stored

    def group_versions(self) -> dict[str, list[str]]:
        """Every served group with its versions, the core group as ""."""
        return group_versions(self._kinds)

    def on_change(self, listener: Callable[[Kind, bool], None]) -> None:
        """Call `listener(kind, added)` for every kind added (True) or removed (False) from now on."""
        self._listeners.append(listener)

    def add(self, kind: Kind) -> None:
        """Serve one more kind (a custom resource's version); replaces one at the same path."""
        old = self.lookup(kind.group, kind.version, kind.plural)
        if old is not None:
            if old in self.builtin:
                raise ValueError(f"{kind.plural}.{kind.group}/{kind.version} is a built-in kind")
            self.remove(old)
        self._kinds.append(kind)
        self._reindex()
        self.generation += 1
        for listener in list(self._listeners):
            listener(kind, True)

    def remove(self, kind: Kind) -> None:
        """Stop serving a kind (its objects stay in the store until someone deletes them)."""
        if kind in self.builtin:
            raise ValueError(f"{kind.resource} is a built-in kind")
        if kind not in self._kinds:
            return
        self._kinds.remove(kind)
        self._reindex()
        self.generation += 1
        for listener in list(self._listeners):
            listener(kind, False)


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

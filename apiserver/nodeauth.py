"""The node authorizer and the NodeRestriction admission: what a kubelet may touch, as upstream limits it.

A kubelet acts as `system:node:<node>` in the group `system:nodes` (with the apiserver's
`--component-identities`; see `kubemesh.apiserver.authn`). Upstream does not grant nodes their
rights through an RBAC binding but through two dedicated pieces, modelled here with the same
split:

* **the node authorizer** (`NodeAuthorizer`, asked before RBAC for node users):
  - Secrets, ConfigMaps, PersistentVolumeClaims, PersistentVolumes and ServiceAccount tokens
    only when a pod bound to the node refers to them (upstream keeps a graph; kubemesh walks
    the node's pods, which the store indexes by `spec.nodeName`). `get`, and `list`/`watch` of
    one object by name; anything else is no opinion, and RBAC decides;
  - Leases only in `kube-node-lease`, only the node's own (by name; a create names no object
    yet, so admission checks it), and only get, create, update, patch, delete;
  - every other request against the fixed node rules (the `system:node` role's rules), which
    upstream compiles in rather than binds.

  A denial keeps the node authorizer's reason, which upstream appends to the 403's sentence
  (`...: no relationship found between node 'n1' and this object`).
* **NodeRestriction** (`NodeRestriction`, a registry write hook, plus `admit_request` for the
  verbs that carry no new object): a node may create and modify only its own Node and may not
  change its taints after registration; may create only mirror pods bound to itself; may
  update the status of, delete and evict only pods bound to itself; may create only its own
  Lease. Refusals are 403s worded as the admission plugin words them. (Upstream also refuses
  label changes through a pod's status; kubemesh's status writes keep the stored metadata, so
  there is nothing to refuse.)

Invariant: relationship answers are never cached; they follow the pods as they are now, so a
pod bound to a node opens its Secrets to that node in the same write that binds it, and its
deletion closes them. Only the fixed-rule answers are cached (they never change).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from kubemesh.apiserver import errors
from kubemesh.apiserver.rbac import ASKED, USER, Attributes, Rule, User
from kubemesh.apiserver.storage import Store
from kubemesh.services.model.kinds import LEASES, NODES, PERSISTENTVOLUMECLAIMS, PODS, Kind, Obj

NODES_GROUP: Final = "system:nodes"
NODE_PREFIX: Final = "system:node:"
LEASE_NAMESPACE: Final = "kube-node-lease"
MIRROR_ANNOTATION: Final = "kubernetes.io/config.mirror"
_GRAPH_VERBS: Final = frozenset({"get", "list", "watch"})
_LEASE_VERBS: Final = frozenset({"get", "create", "update", "patch", "delete"})


def node_of(user: User | None) -> str | None:
    """The node a user is (`system:node:<name>` in `system:nodes`), None for everyone else."""
    if user is None or NODES_GROUP not in user.groups or not user.name.startswith(NODE_PREFIX):
        return None
    return user.name[len(NODE_PREFIX):]


def _pod_refs(pod: Obj) -> Iterable[tuple[str, str]]:
    """(resource, name) pairs a pod refers to: what its node may read."""
    spec = pod.get("spec") or {}
    sa = spec.get("serviceAccountName") or spec.get("serviceAccount")
    if sa:
        yield "serviceaccounts", str(sa)
    for ref in spec.get("imagePullSecrets") or []:
        if isinstance(ref, dict) and ref.get("name"):
            yield "secrets", str(ref["name"])
    for vol in spec.get("volumes") or []:
        if not isinstance(vol, dict):
            continue
        if isinstance(vol.get("secret"), dict) and vol["secret"].get("secretName"):
            yield "secrets", str(vol["secret"]["secretName"])
        if isinstance(vol.get("configMap"), dict) and vol["configMap"].get("name"):
            yield "configmaps", str(vol["configMap"]["name"])
        if isinstance(vol.get("persistentVolumeClaim"), dict) and vol["persistentVolumeClaim"].get("claimName"):
            yield "persistentvolumeclaims", str(vol["persistentVolumeClaim"]["claimName"])
        projected = vol.get("projected")
        for src in (projected.get("sources") or []) if isinstance(projected, dict) else []:
            if not isinstance(src, dict):
                continue
            for key, resource in (("secret", "secrets"), ("configMap", "configmaps")):
                if isinstance(src.get(key), dict) and src[key].get("name"):
                    yield resource, str(src[key]["name"])
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or []),
                  *(spec.get("ephemeralContainers") or [])]
    for c in containers:
        if not isinstance(c, dict):
            continue
        for src in c.get("envFrom") or []:
            if isinstance(src, dict):
                for key, resource in (("secretRef", "secrets"), ("configMapRef", "configmaps")):
                    if isinstance(src.get(key), dict) and src[key].get("name"):
                        yield resource, str(src[key]["name"])
        for env in c.get("env") or []:
            vf = env.get("valueFrom") if isinstance(env, dict) else None
            if isinstance(vf, dict):
                for key, resource in (("secretKeyRef", "secrets"), ("configMapKeyRef", "configmaps")):
                    if isinstance(vf.get(key), dict) and vf[key].get("name"):
                        yield resource, str(vf[key]["name"])


class NodeAuthorizer:
    """Upstream's node authorizer over one store (see the module docstring)."""

    def __init__(self, *, store: Store, rules: Iterable[Rule]) -> None:
        self.store = store
        self.rules = tuple(rules)
        """The fixed node rules (the `system:node` role's)."""
        self._fixed: dict[Attributes, bool] = {}

    def opinion(self, user: User, a: Attributes) -> tuple[bool, str] | None:
        """For a node user: whether it may do `a` and, when not, the reason; None for other users."""
        node = node_of(user)
        return None if node is None else self.decide(node, a)

    def decide(self, node: str, a: Attributes) -> tuple[bool, str]:
        """Whether node `node` may do `a`; when not, the reason upstream appends to the 403 ("" for none)."""
        if a.resource_request and a.group == "" and a.resource in ("secrets", "configmaps",
                                                                    "persistentvolumeclaims", "persistentvolumes") \
                and a.subresource == "":
            return self._related(node, a)
        if a.resource_request and a.group == "" and a.resource == "serviceaccounts" and a.subresource == "token":
            if a.verb != "create":
                return False, "can only create tokens for individual service accounts"
            return self._related(node, a)
        if a.resource_request and a.group == "coordination.k8s.io" and a.resource == "leases":
            return self._lease(node, a)
        got = self._fixed.get(a)
        if got is None:
            got = any(r.allows(a) for r in self.rules)
            if len(self._fixed) > 10_000:
                self._fixed.clear()
            self._fixed[a] = got
        return got, ""

    def _related(self, node: str, a: Attributes) -> tuple[bool, str]:
        if a.subresource == "token":
            pass  # create, checked by the caller
        elif a.resource in ("secrets", "configmaps"):
            if a.verb not in _GRAPH_VERBS:
                return False, "can only read resources of this type"
        elif a.verb != "get":
            return False, "can only get individual resources of this type"
        if not a.name:
            return False, "No Object name found"
        if self._refers(node, a.resource, a.namespace, a.name):
            return True, ""
        return False, f"no relationship found between node '{node}' and this object"

    def _refers(self, node: str, resource: str, namespace: str, name: str) -> bool:
        if resource == "persistentvolumes":
            for pod in self.store.pods_on_node(node):
                ns = pod["metadata"].get("namespace", "")
                for res, claim in _pod_refs(pod):
                    if res != "persistentvolumeclaims":
                        continue
                    pvc = self.store.get(PERSISTENTVOLUMECLAIMS, f"{ns}/{claim}")
                    if pvc is not None and (pvc.get("spec") or {}).get("volumeName") == name:
                        return True
            return False
        for pod in self.store.pods_on_node(node):
            if pod["metadata"].get("namespace", "") != namespace:
                continue
            if (resource, name) in set(_pod_refs(pod)):
                return True
        return False

    @staticmethod
    def _lease(node: str, a: Attributes) -> tuple[bool, str]:
        if a.verb not in _LEASE_VERBS:
            return False, "can only get, create, update, patch, or delete a node lease"
        if a.namespace != LEASE_NAMESPACE:
            return False, f'can only access leases in the "{LEASE_NAMESPACE}" system namespace'
        if a.verb != "create" and a.name != node:
            return False, "can only access node lease with the same name as the requesting node"
        return True, ""


def _forbidden(kind: Kind, name: str, why: str) -> errors.StatusError:
    """Admission's 403: `pods "x" is forbidden: <why>`."""
    qualified = f"{kind.plural}.{kind.group}" if kind.group else kind.plural
    head = f'{qualified} "{name}"' if name else qualified
    return errors.forbidden(kind, name, f"{head} is forbidden: {why}")


class NodeRestriction:
    """Upstream's NodeRestriction admission plugin (see the module docstring)."""

    def __init__(self, *, store: Store) -> None:
        self.store = store

    def admit(self, kind: Kind, obj: Obj, old: Obj | None) -> None:
        """A create (`old` None) or update by a node: only its own Node, mirror pods, pod status and Lease."""
        node = node_of(USER.get())
        if node is None:
            return
        asked = ASKED.get()
        sub = asked.subresource if asked is not None else ""
        md = obj.get("metadata") or {}
        name = str(md.get("name") or (asked.name if asked is not None else "") or "")
        if kind is NODES:
            if name != node:
                raise _forbidden(kind, name, f'node "{node}" is not allowed to modify node "{name}"')
            if old is not None and _taints(old) != _taints(obj):
                raise _forbidden(kind, name, f'node "{node}" is not allowed to modify taints')
        elif kind is PODS:
            if old is None:
                self._admit_mirror_pod(kind, node, name, obj)
            elif sub != "status":  # status writes are checked by `admit_request`
                raise _forbidden(kind, name, f'node "{node}" can only update pod status and create and delete '
                                 "mirror pods")
        elif kind is LEASES and old is None and name != node:
            raise _forbidden(kind, name, "can only access node lease with the same name as the requesting node")

    @staticmethod
    def _admit_mirror_pod(kind: Kind, node: str, name: str, obj: Obj) -> None:
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        if MIRROR_ANNOTATION not in annotations:
            raise _forbidden(kind, name, f'pod does not have "{MIRROR_ANNOTATION}" annotation, node "{node}" can '
                             "only create mirror pods")
        if str((obj.get("spec") or {}).get("nodeName") or "") != node:
            raise _forbidden(kind, name, f'node "{node}" can only create pods with spec.nodeName set to itself')

    def admit_request(self, user: User | None, what: Attributes) -> None:
        """A node's write that names its object in the path: checked against the stored object (403).

        Status writes (a pod's, a node's), deletes and evictions; creates and main-resource
        updates are checked on their new object by `admit`.
        """
        node = node_of(user)
        if node is None or what.group != "" or not what.name:
            return
        if what.resource == "nodes" and what.verb in ("update", "patch", "delete") and what.name != node:
            raise _forbidden(NODES, what.name, f'node "{node}" is not allowed to modify node "{what.name}"')
        if what.resource != "pods":
            return
        if what.verb == "delete" and what.subresource == "":
            action = "delete pods"
        elif what.verb == "create" and what.subresource == "eviction":
            action = "evict pods"
        elif what.verb in ("update", "patch") and what.subresource == "status":
            action = "update pod status for pods"
        else:
            return
        pod = self.store.get(PODS, f"{what.namespace}/{what.name}")
        if pod is None:
            return  # the handler answers 404
        if str((pod.get("spec") or {}).get("nodeName") or "") != node:
            raise _forbidden(PODS, what.name, f'node "{node}" can only {action} with spec.nodeName set to itself')

    def written(self, kind: Kind, old: Obj | None, new: Obj) -> None:
        """Nothing to do after a write."""

    def removed(self, kind: Kind, obj: Obj) -> None:
        """Nothing to do after a removal."""


def _taints(node: Obj) -> Any:
    return (node.get("spec") or {}).get("taints") or []

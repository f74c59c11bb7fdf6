"""APIService objects for the group versions this apiserver serves itself, as kube-aggregator registers them.

In a cluster, kube-aggregator fronts kube-apiserver and keeps one `apiregistration.k8s.io/v1`
APIService per served group version (`v1.`, `v1.apps`, ...): its autoregister controller creates
those of the built-in groups at start-up (label `kube-aggregator.kubernetes.io/automanaged:
onstart`) and those of custom resource groups while a CRD serves them (label value `true`,
group priority 1000, version priority 100), and its availability controller marks every one
without a `spec.service` Available with reason `Local`. Clients list them to learn what the
cluster serves (`kubectl get apiservices`, the client suites' "cluster is alive" checks).

`LocalApiServices` does the same here, in the write path (a `registry.WriteHook` plus a
`KindTable` listener), so that what the table serves and what the APIServices say never
disagree for longer than one request:

* at start-up, every served group version gets its APIService (a restart with `--data-dir`
  creates only the missing ones);
* a group version a CRD starts serving gets one; when the last kind of a CRD-registered group
  version leaves the table, its APIService goes;
* an automanaged APIService deleted by a client while its group version is still served is
  created again, as the autoregister controller does.

APIServices a user creates (no automanaged label) are stored and listed as given; kubemesh
proxies to no aggregated server, so a user's APIService with a `spec.service` is never
Available (a `status` written by the user stays as written).
"""

from __future__ import annotations

from typing import Final

import structlog

from kubemesh.apiserver import errors
from kubemesh.apiserver.registry import DeleteOptions, Registry, WriteOptions
from kubemesh.services.machinery.clock import format_time
from kubemesh.services.model.kinds import APISERVICES, Kind, KindTable, Obj

_log = structlog.get_logger("apiserver.apiservices")

AUTOMANAGED: Final = "kube-aggregator.kubernetes.io/automanaged"
ON_START: Final = "onstart"
"""The label value of the built-in group versions' APIServices."""
SYNCED: Final = "true"
"""The label value of the APIServices a custom resource definition's group versions get."""

# (groupPriorityMinimum, versionPriority) of the built-in group versions: the values
# kube-apiserver registers them with, so that discovery orders groups as a cluster does.
_PRIORITIES: Final[dict[tuple[str, str], tuple[int, int]]] = {
    ("", "v1"): (18000, 1),
    ("apps", "v1"): (17800, 15),
    ("events.k8s.io", "v1"): (17750, 15),
    ("authentication.k8s.io", "v1"): (17700, 15),
    ("authorization.k8s.io", "v1"): (17600, 15),
    ("autoscaling", "v2"): (17500, 30),
    ("autoscaling", "v1"): (17500, 15),
    ("batch", "v1"): (17400, 15),
    ("certificates.k8s.io", "v1"): (17300, 15),
    ("networking.k8s.io", "v1"): (17200, 15),
    ("policy", "v1"): (17100, 15),
    ("rbac.authorization.k8s.io", "v1"): (17000, 15),
    ("storage.k8s.io", "v1"): (16800, 15),
    ("apiextensions.k8s.io", "v1"): (16700, 15),
    ("admissionregistration.k8s.io", "v1"): (16700, 15),
    ("scheduling.k8s.io", "v1"): (16600, 15),
    ("coordination.k8s.io", "v1"): (16500, 15),
    ("node.k8s.io", "v1"): (16300, 15),
    ("discovery.k8s.io", "v1"): (16200, 15),
    ("flowcontrol.apiserver.k8s.io", "v1"): (16100, 21),
}
_UNLISTED: Final = (16000, 15)
"""A built-in group upstream's table does not list (the aggregator's own group, for one)."""
_CUSTOM: Final = (1000, 100)
"""Custom resource groups: low group priority, versions ordered kube-like among themselves."""


def name_of_group_version(group: str, version: str) -> str:
    """An APIService's name: `<version>.<group>` (`v1.` for the core group)."""
    return f"{version}.{group}"


def local_api_service(group: str, version: str, *, label: str, now: str) -> Obj:
    """The APIService of a group version served by this apiserver, Available as a local one."""
    group_priority, version_priority = (_CUSTOM if label == SYNCED
                                        else _PRIORITIES.get((group, version), _UNLISTED))
    return {
        "apiVersion": APISERVICES.api_version, "kind": APISERVICES.kind,
        "metadata": {"name": name_of_group_version(group, version), "labels": {AUTOMANAGED: label}},
        "spec": {"group": group, "version": version, "groupPriorityMinimum": group_priority,
                 "versionPriority": version_priority},
        "status": {"conditions": [{"type": "Available", "status": "True", "lastTransitionTime": now,
                                   "reason": "Local", "message": "Local APIServices are always available"}]},
    }


class LocalApiServices:
    """Keeps one automanaged APIService per group version the `KindTable` serves (a `registry.WriteHook`)."""

    def __init__(self, *, registry: Registry, kinds: KindTable) -> None:
        self.registry = registry
        self.kinds = kinds

    @classmethod
    def install(cls, *, registry: Registry, kinds: KindTable) -> LocalApiServices:
        """Hook it in, follow the table, and register every group version served now."""
        hook = cls(registry=registry, kinds=kinds)
        registry.hooks.append(hook)
        kinds.on_change(hook._table_changed)
        for group, versions in kinds.group_versions().items():
            for version in versions:
                hook._ensure(group, version)
        return hook

    # -- the registry's hook -----------------------------------------------------------------

    def admit(self, kind: Kind, obj: Obj, old: Obj | None) -> None:
        """Nothing to check: APIServices are validated like any object."""

    def written(self, kind: Kind, old: Obj | None, new: Obj) -> None:
        """Nothing to do on writes: a client may relabel or edit an APIService, as upstream allows."""

    def removed(self, kind: Kind, obj: Obj) -> None:
        """An automanaged APIService of a group version still served comes back."""
        if kind is not APISERVICES:
            return
        labels = (obj.get("metadata") or {}).get("labels") or {}
        spec = obj.get("spec") or {}
        group, version = str(spec.get("group") or ""), str(spec.get("version") or "")
        if labels.get(AUTOMANAGED) in (ON_START, SYNCED) and self._served(group, version):
            self._ensure(group, version)

    # -- following the table -------------------------------------------------------------------

    def _table_changed(self, kind: Kind, added: bool) -> None:
        if kind in self.kinds.builtin:
            return
        if added:
            self._ensure(kind.group, kind.version)
        elif not self._served(kind.group, kind.version):
            self._drop(kind.group, kind.version)

    def _served(self, group: str, version: str) -> bool:
        return version in self.kinds.group_versions().get(group, [])

    def _ensure(self, group: str, version: str) -> None:
        name = name_of_group_version(group, version)
        if self.registry.store.get(APISERVICES, name) is not None:
            return
        builtin = any(k.group == group and k.version == version for k in self.kinds.builtin)
        obj = local_api_service(group, version, label=ON_START if builtin else SYNCED,
                                now=format_time(self.registry.clock.now()))
        status = obj.pop("status")
        try:
            created = self.registry.create(APISERVICES, None, obj, WriteOptions())
            self.registry.update(APISERVICES, None, name, {**created, "status": status}, WriteOptions(),
                                 subresource="status")
        except errors.StatusError as exc:  # never fails a CRD's write: the next change retries
            _log.warning("could not register an APIService", apiservice=name, error=str(exc))

    def _drop(self, group: str, version: str) -> None:
        name = name_of_group_version(group, version)
        obj = self.registry.store.get(APISERVICES, name)
        if obj is None or ((obj.get("metadata") or {}).get("labels") or {}).get(AUTOMANAGED) != SYNCED:
            return
        try:
            self.registry.delete(APISERVICES, None, name, DeleteOptions())
        except errors.StatusError as exc:
            _log.warning("could not remove an APIService", apiservice=name, error=str(exc))

"""The CRD lifecycle in the write path: names accepted, Established, served, and cleaned up on delete.

kube-apiserver runs small controllers beside its CRD registry (naming, establishing,
finalizing); here they run synchronously, as a `WriteHook` of the registry, right after each
write of a CRD or of a custom object, so that a CRD is served by the time the request that
created it has its answer... almost: the response carries the CRD as first stored, and the
status write that establishes it follows before the next request is read (kubectl's `wait
--for condition=established` and a `kubectl apply` of a CRD with its objects work at once).

* **Create/update** (`admit`): defaulted and checked (`definitions.check_definition`; a 422
  with every cause), its schemas compiled once.
* **Established** (`written`): `status.acceptedNames` are the spec's names unless another
  CRD of the group holds one of them (then `NamesAccepted` is False with upstream's reasons
  and the CRD is not served); `Established` turns True with them; `storedVersions` gains
  the storage version. The served versions join the `KindTable` (`definitions.served_kinds`):
  discovery, OpenAPI, routing and field selectors follow from the table.
* **Delete**: the registry puts the `customresourcecleanup.apiextensions.k8s.io` finalizer on
  the CRD; here it turns `Terminating`, new objects are refused (405), every object is
  deleted as a DELETE would (finalizers honoured: an object whose finalizer nobody removes
  keeps the CRD Terminating, as upstream), and once none is left the kinds leave the table,
  their watches end and the finalizer goes, which removes the CRD.
* **Restart**: `restore` re-serves every stored CRD (a CRD caught Terminating resumes its cleanup).
"""

from __future__ import annotations

from typing import Any, Final

import structlog

from kubemesh.apiserver import errors
from kubemesh.apiserver.customresources.definitions import (
    CLEANUP_FINALIZER,
    Checked,
    check_definition,
    default_definition,
    established,
    served_kinds,
    terminating,
)
from kubemesh.apiserver.registry import DeleteOptions, Registry, WriteOptions
from kubemesh.apiserver.storage import EventType
from kubemesh.apiserver.watching import WatchHub
from kubemesh.services.machinery.clock import format_time
from kubemesh.services.model.kinds import CUSTOMRESOURCEDEFINITIONS, Kind, KindTable, Obj

_log = structlog.get_logger("apiserver.establishing")

CRDS: Final = CUSTOMRESOURCEDEFINITIONS


class Establishing:
    """The CRD lifecycle of one apiserver (a `registry.WriteHook`)."""

    def __init__(self, *, registry: Registry, kinds: KindTable, hub: WatchHub) -> None:
        self.registry = registry
        self.kinds = kinds
        self.hub = hub
        self._checked: dict[str, Checked] = {}
        """The last accepted check (compiled schemas) of each CRD by name."""
        self._served: dict[str, list[Kind]] = {}
        """The kinds each CRD serves now."""
        self._busy: set[str] = set()
        """CRDs being reconciled (their own writes come back here: reconciled once)."""

    # -- the registry's hook -----------------------------------------------------------------

    def admit(self, kind: Kind, obj: Obj, old: Obj | None) -> None:
        """Default and check a CRD; refuse new objects of a terminating CRD."""
        if kind is CRDS:
            default_definition(obj)
            if old is not None and "status" not in obj and "status" in old:
                obj["status"] = old["status"]  # the main resource keeps status; checking reads storedVersions
            try:
                checked = check_definition(obj, old=old, kinds=self.kinds)
            except RecursionError:
                raise errors.invalid(kind, str((obj.get("metadata") or {}).get("name") or ""), [{
                    "reason": "FieldValueInvalid", "field": "spec.versions",
                    "message": "Invalid value: \"object\": a schema is nested too deeply to be handled"}]) from None
            if checked.causes:
                raise errors.invalid(kind, str((obj.get("metadata") or {}).get("name") or ""),
                                     [dict(c) for c in checked.causes])
            self._checked[str(obj["metadata"]["name"])] = checked
            return
        custom = kind.custom
        if custom is not None and old is None:
            crd = self.registry.store.get(CRDS, custom.definition)
            if crd is None or terminating(crd):
                raise errors.StatusError(405, "MethodNotAllowed",
                                         "create not allowed while custom resource definition is terminating")

    def written(self, kind: Kind, old: Obj | None, new: Obj) -> None:
        """A CRD changed: (re)establish or clean up."""
        if kind is CRDS:
            self.reconcile(str(new["metadata"]["name"]))

    def removed(self, kind: Kind, obj: Obj) -> None:
        """A CRD left the store (stop serving it), or an object of a terminating CRD did."""
        if kind is CRDS:
            self._unserve(str(obj["metadata"]["name"]))
        elif kind.custom is not None:
            crd = self.registry.store.get(CRDS, kind.custom.definition)
            if crd is not None and terminating(crd):
                self.reconcile(kind.custom.definition)

    def applied(self, kind: Kind, event: EventType, obj: Obj, prev: Obj | None, rv: int) -> None:
        """`--storage etcd`: a change the watch cache applied, this apiserver's or another's (a store publisher).

        There the hooks above run when a write is staged, before it is committed and visible; this
        reconciles again once it is (a CRD created through another apiserver is served here too,
        and a terminating CRD's finalizer goes once its last object is gone). Its writes are made
        outside a request: queued and committed in order (`kubemesh.apiserver.etcdcache`).
        """
        try:
            if kind is CRDS:
                self.reconcile(str(obj["metadata"]["name"]))
            elif event == "DELETED" and kind.custom is not None:
                crd = self.registry.store.get(CRDS, kind.custom.definition)
                if crd is not None and terminating(crd):
                    self.reconcile(kind.custom.definition)
        except errors.StatusError as exc:  # called from the watch: a failure must not stop the cache
            _log.warning("reconciling a CRD after a committed change failed", resource=kind.resource,
                         error=str(exc))

    # -- reconciling ---------------------------------------------------------------------------

    def restore(self) -> None:
        """Serve every stored CRD again (after a restart with --data-dir)."""
        for crd in list(self.registry.store.items(CRDS)):
            self.reconcile(str(crd["metadata"]["name"]))

    def reconcile(self, name: str) -> None:
        """Bring one CRD's status and serving in line with its spec (re-entrant calls are ignored)."""
        if name in self._busy:
            return
        self._busy.add(name)
        try:
            crd = self.registry.store.get(CRDS, name)
            if crd is None:
                self._unserve(name)
            elif terminating(crd):
                self._clean_up(crd)
            else:
                self._establish(crd)
        finally:
            self._busy.discard(name)

    def _check(self, crd: Obj) -> Checked:
        name = str(crd["metadata"]["name"])
        checked = self._checked.get(name)
        if checked is None:
            checked = check_definition(crd, old=None, kinds=self.kinds)
            self._checked[name] = checked
        return checked

    def _establish(self, crd: Obj) -> None:
        name = str(crd["metadata"]["name"])
        checked = self._check(crd)
        if checked.causes:  # stored before a rule tightened (or by hand): leave it unserved
            _log.warning("stored CRD is invalid; not serving it", crd=name, causes=checked.causes)
            self._unserve(name)
            return
        status = self._status(crd)
        if status != crd.get("status"):
            crd = self.registry.update(CRDS, None, name, {**crd, "status": status}, WriteOptions(),
                                       subresource="status")
        if established(crd):
            self._serve(name, served_kinds(crd, checked))
        else:
            self._unserve(name)

    def _status(self, crd: Obj) -> Obj:
        """The status upstream's naming and establishing controllers would write."""
        spec = crd["spec"]
        now = format_time(self.registry.clock.now())
        old = crd.get("status") or {}
        names = spec["names"]
        conflict = self._name_conflict(crd)
        conditions: list[Obj] = []
        if conflict is None:
            accepted: Obj = {k: v for k, v in names.items() if v not in (None, [], "")}
            conditions.append(_condition(old, "NamesAccepted", "True", "NoConflicts", "no conflicts found", now))
            conditions.append(_condition(old, "Established", "True", "InitialNamesAccepted",
                                         "the initial names have been accepted", now))
        else:
            reason, message = conflict
            accepted = old.get("acceptedNames") or {"plural": "", "kind": ""}
            conditions.append(_condition(old, "NamesAccepted", "False", reason, message, now))
            was = next((c for c in old.get("conditions") or [] if c.get("type") == "Established"), None)
            if was is not None and was.get("status") == "True":
                conditions.append(was)  # once established, a later names conflict does not unserve it
            else:
                conditions.append(_condition(old, "Established", "False", "NotAccepted", "not all names are accepted",
                                             now))
        storage = next(v["name"] for v in spec["versions"] if v.get("storage") is True)
        stored = list(old.get("storedVersions") or [])
        if storage not in stored:
            stored.append(storage)
        return {"conditions": conditions, "acceptedNames": accepted, "storedVersions": stored}

    def _name_conflict(self, crd: Obj) -> tuple[str, str] | None:
        """(reason, message) when another CRD of the group already holds one of this CRD's names.

        As upstream's naming controller: plurals and singulars share one namespace of resource
        names, kinds and list kinds another, short names a third; checked in that order.
        """
        spec = crd["spec"]
        names = spec["names"]
        resources: set[str] = set()
        kinds: set[str] = set()
        shorts: set[str] = set()
        for other in self.registry.store.items(CRDS):
            if other["metadata"]["name"] == crd["metadata"]["name"] or \
                    (other.get("spec") or {}).get("group") != spec["group"]:
                continue
            theirs = (other.get("status") or {}).get("acceptedNames") or {}
            resources.update(v for v in (theirs.get("plural"), theirs.get("singular")) if v)
            kinds.update(v for v in (theirs.get("kind"), theirs.get("listKind")) if v)
            shorts.update(theirs.get("shortNames") or ())
        checks = (("plural", resources, "PluralConflict"), ("singular", resources, "SingularConflict"),
                  ("kind", kinds, "KindConflict"), ("listKind", kinds, "ListKindConflict"))
        for field, taken, reason in checks[:2]:
            if names.get(field) in taken:
                return reason, f'"{names[field]}" is already in use'
        clash = [s for s in names.get("shortNames") or () if s in shorts]
        if clash:
            return "ShortNamesConflict", f'"{clash[0]}" is already in use'
        for field, taken, reason in checks[2:]:
            if names.get(field) in taken:
                return reason, f'"{names[field]}" is already in use'
        return None

    def _clean_up(self, crd: Obj) -> None:
        """Delete every object of a terminating CRD; drop the finalizer once none is left."""
        name = str(crd["metadata"]["name"])
        now = format_time(self.registry.clock.now())
        status = dict(crd.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Terminating"]
        kinds = self._served.get(name) or []
        storage = next((k for k in kinds if k.storage), kinds[0] if kinds else None)
        remaining = list(self.registry.store.items(storage)) if storage is not None else []
        message = "CustomResource deletion is in progress" if remaining else "CustomResource deletion is complete"
        reason = "InstanceDeletionInProgress" if remaining else "InstanceDeletionCompleted"
        conditions.append(_condition(crd.get("status") or {}, "Terminating", "True", reason, message, now))
        if conditions != status.get("conditions"):
            crd = self.registry.update(CRDS, None, name, {**crd, "status": {**status, "conditions": conditions}},
                                       WriteOptions(), subresource="status")
        assert storage is not None or not remaining
        for obj in remaining:
            md = obj["metadata"]
            if md.get("deletionTimestamp"):
                continue  # already deleting, waiting for its own finalizers
            try:
                assert storage is not None
                self.registry.delete(storage, md.get("namespace"), md["name"], DeleteOptions())
            except errors.StatusError as exc:
                if exc.code != 404:
                    _log.warning("could not delete a custom object", crd=name, object=md["name"], error=str(exc))
        if storage is not None and any(True for _ in self.registry.store.items(storage)):
            return  # objects with finalizers remain: the last one's removal brings us back here
        crd = self.registry.store.get(CRDS, name) or crd
        finalizers = [f for f in crd["metadata"].get("finalizers") or [] if f != CLEANUP_FINALIZER]
        if finalizers != list(crd["metadata"].get("finalizers") or []):
            self._unserve(name)
            body: Any = {**crd, "metadata": {**crd["metadata"], "finalizers": finalizers}}
            self.registry.update(CRDS, None, name, body, WriteOptions())

    # -- serving -------------------------------------------------------------------------------

    def _serve(self, name: str, kinds: list[Kind]) -> None:
        old = self._served.get(name) or []
        if [_identity(k) for k in old] == [_identity(k) for k in kinds]:
            return
        for kind in old:
            self.kinds.remove(kind)
        for kind in kinds:
            self.kinds.add(kind)
        self._served[name] = kinds
        _log.info("serving custom resource", crd=name, versions=[k.version for k in kinds])

    def _unserve(self, name: str) -> None:
        kinds = self._served.pop(name, None)
        if not kinds:
            return
        for kind in kinds:
            self.kinds.remove(kind)
        self.hub.close_resource(kinds[0].resource, f"the custom resource definition {name} was deleted")
        _log.info("stopped serving custom resource", crd=name)


def _identity(kind: Kind) -> tuple[Any, ...]:
    """What makes two kinds of one CRD the same for serving (a status-only write keeps them)."""
    return (kind.group, kind.version, kind.kind, kind.plural, kind.singular, kind.namespaced, kind.short_names,
            kind.categories, kind.subresources, kind.storage, id(kind.custom.schema) if kind.custom else None,
            kind.custom.columns if kind.custom else None, tuple(kind.fields))


def _condition(old_status: Obj, ctype: str, status: str, reason: str, message: str, now: str) -> Obj:
    """A condition whose lastTransitionTime moves only when its status does."""
    previous = next((c for c in old_status.get("conditions") or [] if c.get("type") == ctype), None)
    since = previous["lastTransitionTime"] if previous is not None and previous.get("status") == status and \
        previous.get("lastTransitionTime") else now
    return {"type": ctype, "status": status, "lastTransitionTime": since, "reason": reason, "message": message}

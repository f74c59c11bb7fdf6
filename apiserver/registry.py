"""The semantics of every verb, over the store: what Kubernetes does on create, update, patch, delete.

* Create: name or generateName, DNS-1123 validation, the namespace must exist and not be
  terminating, admission and defaulting, server-set metadata (uid, creationTimestamp,
  generation 1), 409 AlreadyExists.
* Update and patch: optimistic concurrency (a stale `metadata.resourceVersion` is 409),
  immutable metadata kept, `status` left alone by main-resource writes and the rest left
  alone by status writes, `generation` bumped when the spec changes, and a write that
  changes nothing is not a write (no new revision, no event), as in Kubernetes.
* Delete: graceful deletion for pods (a bound, non-terminal pod gets deletionTimestamp and
  deletionGracePeriodSeconds and stays until the kubelet deletes it with grace 0), finalizers
  block removal until an update empties them, Orphan and Foreground propagation add their
  finalizers for the garbage collector, uid/resourceVersion preconditions.
* Subresources: status, pods/binding (409 if already bound), pods/eviction (PDB checks,
  429 when a budget would be violated), deployments|replicasets/scale.

All times are cluster time from the injected clock; uids and generated names come from the
injected RNG, so a run with a seed repeats.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Protocol

from kubemesh.apiserver import admission, conversion, errors, fieldmanager, fieldrules
from kubemesh.apiserver.customresources import objects as customobjects
from kubemesh.apiserver.customresources.definitions import CLEANUP_FINALIZER
from kubemesh.apiserver.fielderrors import go_quote, go_strings
from kubemesh.apiserver.paging import key_of
from kubemesh.apiserver.patching import (
    PatchError,
    apply_json_patch,
    apply_merge_patch,
    apply_strategic_merge_patch,
)
from kubemesh.apiserver.protobuf.gojson import MalformedQuantity, quantities_as_strings
from kubemesh.apiserver.storage import EventType, Store
from kubemesh.apiserver.validation import WrongType, decode_typed, validate_name, validate_object
from kubemesh.services.machinery.clock import Clock, format_micro_time, format_time, parse_time
from kubemesh.services.model.kinds import (
    CUSTOMRESOURCEDEFINITIONS,
    DAEMONSETS,
    DEPLOYMENTS,
    NAMESPACES,
    PODDISRUPTIONBUDGETS,
    PODS,
    PRIORITYCLASSES,
    REPLICASETS,
    SECRETS,
    Kind,
    KindTable,
    Obj,
    labels_of,
)
from kubemesh.services.model.quantities import QUANTITY_FORMAT
from kubemesh.services.model.selectors import FieldSelector, LabelSelector, SelectorError, label_selector_from_dict

_NAME_CHARS: Final = "bcdfghjklmnpqrstvwxz2456789"
_IMMUTABLE_META: Final = ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                          "generation", "name", "namespace")
INITIAL_NAMESPACES: Final = ("default", "kube-system", "kube-public", "kube-node-lease")


@dataclass(frozen=True, slots=True, kw_only=True)
class WriteOptions:
    """Query options of a write request."""

    dry_run: bool = False
    field_validation: str = ""
    """"Strict", "Warn", "Ignore" or "" (the server default: Warn)."""
    field_manager: str = ""
    """The request's `fieldManager` ("": none named; then fields are tracked only where they already are)."""
    user_agent_manager: str = ""
    """The manager of a write that names none: its User-Agent's product name, as upstream."""
    force: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteOptions:
    """metav1.DeleteOptions, from the body or the query."""

    grace_period_seconds: int | None = None
    propagation_policy: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    dry_run: bool = False

    @classmethod
    def from_obj(cls, body: Any, query: dict[str, str]) -> DeleteOptions:
        """Merge the body's DeleteOptions with query parameters (the Python clients use both)."""
        body = body if isinstance(body, dict) else {}
        grace: Any = body.get("gracePeriodSeconds", query.get("gracePeriodSeconds"))
        policy = body.get("propagationPolicy", query.get("propagationPolicy"))
        if policy is None and body.get("orphanDependents") is True:
            policy = "Orphan"
        pre = body.get("preconditions") or {}
        dry = body.get("dryRun") or ([query["dryRun"]] if "dryRun" in query else [])
        if not isinstance(dry, list) or not all(isinstance(d, str) for d in dry):
            raise errors.bad_request("dryRun must be a list of strings")
        if any(d != "All" for d in dry):
            raise errors.options_invalid("DeleteOptions", [{
                "reason": "FieldValueNotSupported", "field": "dryRun",
                "message": f'Unsupported value: {go_strings(dry)}: supported values: "All"'}])
        grace_int = _grace_period(grace, from_query="gracePeriodSeconds" not in body)
        if policy is not None and policy not in ("Orphan", "Background", "Foreground"):
            raise errors.bad_request(f"invalid propagationPolicy: {policy!r}")
        if not isinstance(pre, dict):
            raise errors.bad_request("preconditions must be an object")
        return cls(grace_period_seconds=grace_int, propagation_policy=policy,
                   uid=pre.get("uid"), resource_version=pre.get("resourceVersion"),
                   dry_run=bool(dry))


_INT64: Final = (-(2**63), 2**63 - 1)


def _grace_period(grace: Any, *, from_query: bool) -> int | None:
    """The `gracePeriodSeconds` option as a Go int64 (a 400 in upstream's words when it is not one)."""
    if grace is None or grace == "":
        return None
    if from_query:
        text = str(grace)
        try:
            value = int(text, 10) if text.strip() == text else None
        except ValueError:
            value = None
        if value is None:
            raise errors.bad_request(f'strconv.ParseInt: parsing "{text}": invalid syntax')
        if not _INT64[0] <= value <= _INT64[1]:
            raise errors.bad_request(f'strconv.ParseInt: parsing "{text}": value out of range')
        return value
    if isinstance(grace, bool) or not isinstance(grace, int) or not _INT64[0] <= grace <= _INT64[1]:
        if isinstance(grace, bool):
            shown = "bool"
        elif isinstance(grace, int | float):
            shown = f"number {json.dumps(grace)}"
        else:
            shown = "string" if isinstance(grace, str) else "array" if isinstance(grace, list) else "object"
        raise errors.bad_request(f"json: cannot unmarshal {shown} into Go struct field "
                                 "DeleteOptions.gracePeriodSeconds of type int64")
    return grace


class WriteHook(Protocol):
    """Something the registry tells about writes (the CRD lifecycle, the namespace lifecycle)."""

    def admit(self, kind: Kind, obj: Obj, old: Obj | None) -> None:
        """Check or complete a create (`old` None) or update before it is validated; raise StatusError to refuse."""
        ...

    def written(self, kind: Kind, old: Obj | None, new: Obj) -> None:
        """An object was stored (created when `old` is None)."""
        ...

    def removed(self, kind: Kind, obj: Obj) -> None:
        """An object left the store."""
        ...


class Registry:
    """Every verb's semantics over one Store."""

    def __init__(self, *, store: Store, clock: Clock, rng: random.Random, kinds: KindTable | None = None,
                 tolerations: admission.TolerationDefaults | None = None) -> None:
        self.store = store
        self.tolerations = tolerations or admission.TolerationDefaults()
        """DefaultTolerationSeconds' keys and seconds (a version profile's taint names)."""
        self.clock = clock
        self.rng = rng
        self.kinds = kinds if kinds is not None else KindTable()
        self.hooks: list[WriteHook] = []
        """Told about every write, in the write path, after the store has it (see `WriteHook`)."""
        for ns in INITIAL_NAMESPACES:
            if store.get(NAMESPACES, ns) is None:
                self.create(NAMESPACES, None, {"metadata": {"name": ns}}, WriteOptions())

    # ------------------------------------------------------------------------------ reads

    def get(self, kind: Kind, namespace: str | None, name: str) -> Obj:
        """The object, or 404."""
        obj = self.store.get(kind, _key(kind, namespace, name))
        if obj is None:
            raise errors.not_found(kind, name)
        return obj

    def list_objects(self, kind: Kind, *, namespace: str | None, labels: LabelSelector | None,
             fields: FieldSelector | None) -> tuple[list[Obj], int]:
        """Matching objects sorted by key (`namespace/name`, as etcd orders them), and the revision read at."""
        node = fields.exact("spec.nodeName") if (kind is PODS and fields is not None) else None
        source = self.store.pods_on_node(node) if node is not None else self.store.items(kind, namespace=namespace)
        out = select(source, namespace=namespace, labels=labels, fields=fields)
        out.sort(key=key_of)
        return out, self.store.revision

    # ------------------------------------------------------------------------------ create

    def create(self, kind: Kind, namespace: str | None, body: Any, opts: WriteOptions,
               *, warnings: list[str] | None = None, managed: list[Obj] | None = None) -> Obj:
        """Create an object from a freshly decoded body (which this call takes over)."""
        storage = conversion.storage_of(kind)
        if storage is not None:  # a write at another version is a write at the storage version
            return self.create(storage, namespace, conversion.up(kind, body), opts, warnings=warnings, managed=managed)
        obj = self._check_body(kind, body)
        md = obj.setdefault("metadata", {})
        if not isinstance(md, dict):
            raise errors.bad_request("metadata must be an object")
        ns = self._namespace_for(kind, namespace, md)
        name = md.get("name")
        if not name:
            gen = md.get("generateName")
            if not gen:
                raise errors.invalid(kind, "", [{"reason": "FieldValueRequired", "field": "metadata.name",
                                                 "message": "name or generateName is required"}])
            name = str(gen) + "".join(self.rng.choice(_NAME_CHARS) for _ in range(5))
        if not isinstance(name, str):
            raise errors.bad_request("metadata.name must be a string")
        problem = validate_name(kind, name)
        if problem:
            # upstream checks generateName first: a bad prefix makes a bad name
            raise errors.invalid(kind, name, [*fieldrules.generate_name_causes(kind, md),
                                              {"reason": "FieldValueInvalid", "field": "metadata.name",
                                               "message": problem}])
        obj = self._field_validation(kind, name, obj, opts, warnings)
        md = obj["metadata"]  # a typed decode may have copied it
        # What the body sets, before defaulting (defaults are nobody's), when fields are tracked.
        owned = fieldmanager.fieldset(kind, obj) if managed is None and opts.field_manager else None
        if kind.namespaced:
            nso = self.store.get(NAMESPACES, ns)
            if nso is None:
                raise errors.namespace_not_found(ns)
            if (nso.get("status") or {}).get("phase") == "Terminating":
                # Worded as upstream's NamespaceLifecycle admission, with the cause client-go checks.
                err = errors.forbidden(kind, name, f'{kind.resource} "{name}" is forbidden: unable to create new '
                                       f"content in namespace {ns} because it is being terminated")
                err.details = {**(err.details or {}), "causes": [{
                    "reason": "NamespaceTerminating", "field": "metadata.namespace",
                    "message": f"namespace {ns} is being terminated"}]}
                raise err
        if self.store.get(kind, _key(kind, ns, name)) is not None:
            raise errors.already_exists(kind, name)
        for hook in self.hooks:
            hook.admit(kind, obj, None)
        # Shape first: admission and defaulting assume the types validation guarantees.
        causes = (validate_object(kind, obj) + fieldrules.causes(kind, obj) + _time_causes(kind, obj)
                  + customobjects.validate(kind, obj, old=None))
        if causes:
            raise errors.invalid(kind, name, [dict(c) for c in causes])
        try:
            admission.admit_create(kind, obj, priority=self._priority_class,
                                   priority_classes=self.store.items(PRIORITYCLASSES), tolerations=self.tolerations)
        except admission.AdmissionError as exc:
            raise errors.forbidden(kind, name, f'{kind.plural} "{name}" is forbidden: {exc}') from exc
        # No second validation: admission only adds values it builds itself (defaults, default
        # tolerations, the priority of a PriorityClass), valid by construction; the tests check
        # that admitted objects still validate (tests/apiserver/test_validation.py).
        for field in ("resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "managedFields",
                      "selfLink"):
            md.pop(field, None)
        md["name"] = name
        if kind.namespaced:
            md["namespace"] = ns
        else:
            md.pop("namespace", None)
        md["uid"] = random_uuid(self.rng)
        md["creationTimestamp"] = format_time(self.clock.now())
        admission.finish_create(kind, obj)
        if "spec" in obj or kind.custom is not None or kind in _ALWAYS_GENERATION:
            md["generation"] = 1
        obj["kind"] = kind.kind
        obj["apiVersion"] = kind.api_version
        customobjects.to_storage(kind, obj)
        if managed is not None:
            md["managedFields"] = managed
        elif owned is not None:
            md["managedFields"] = fieldmanager.update(kind, None, obj, manager=opts.field_manager, subresource=None,
                                                      now=md["creationTimestamp"], owned=owned)
        if opts.dry_run:
            return obj
        return self._write(kind, obj, None, event="ADDED")

    # ------------------------------------------------------------------------------ update

    def update(self, kind: Kind, namespace: str | None, name: str, body: Any, opts: WriteOptions,
               *, subresource: str | None = None, warnings: list[str] | None = None) -> Obj:
        """PUT: replace the object (or only its status) with optimistic concurrency."""
        storage = conversion.storage_of(kind)
        if storage is not None:
            return self.update(storage, namespace, name, conversion.up(kind, body), opts, subresource=subresource,
                               warnings=warnings)
        new = self._check_body(kind, body)
        md = new.get("metadata")
        if not isinstance(md, dict):
            raise errors.bad_request("metadata must be an object")
        if not md.get("name"):
            # upstream's checkName, before the object is looked up: the body must name it
            raise errors.bad_request(f"the name of the object ({name} based on URL) was undeterminable: "
                                     "name must be provided")
        old = self.get(kind, namespace, name)
        if md.get("name") not in (None, name):
            raise errors.bad_request(f"the name of the object ({md.get('name')}) does not match the name on "
                                     f"the URL ({name})")
        if kind.namespaced and md.get("namespace") not in (None, "", namespace):
            raise errors.bad_request("the namespace of the object does not match the namespace on the URL")
        new = self._field_validation(kind, name, new, opts, warnings)
        return self._commit_update(kind, old, new, opts, subresource=subresource)

    def patch(self, kind: Kind, namespace: str | None, name: str, patch: Any, patch_type: str,
              opts: WriteOptions, *, subresource: str | None = None,
              warnings: list[str] | None = None) -> tuple[Obj, bool]:
        """PATCH with any of the four types; returns (object, created) — apply may create."""
        storage = conversion.storage_of(kind)
        if storage is not None:
            return self._patch_at_version(kind, storage, namespace, name, patch, patch_type, opts,
                                          subresource=subresource, warnings=warnings), False
        key = _key(kind, namespace, name)
        old = self.store.get(kind, key)
        if patch_type == "apply":
            if not isinstance(patch, dict):
                raise errors.bad_request("an apply patch must be an object")
            if not opts.field_manager:
                raise errors.StatusError(422, "Invalid", 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: '
                                         "Required value: is required for apply patch")
            if patch.get("apiVersion") != kind.api_version or patch.get("kind") != kind.kind:
                # As upstream's field manager (versionCheckManager): the applied object's
                # group, version and kind must be the served ones, present and exact.
                raise errors.bad_request(f"invalid object type: {_gvk_text(patch)}")
        managed: list[Obj] | None = None
        if old is None:
            if patch_type != "apply" or subresource is not None:
                raise errors.not_found(kind, name)
            try:
                body = fieldmanager.apply(kind, None, patch, manager=opts.field_manager, force=opts.force,
                                          subresource=None, now=format_time(self.clock.now()))
            except PatchError as exc:  # an apply that creates fails as one that updates does
                raise _patch_status(exc) from exc
            md = body.setdefault("metadata", {})
            md["name"] = name
            managed = md.pop("managedFields", None)
            return self.create(kind, namespace, body, opts, warnings=warnings, managed=managed), True
        if patch_type == "apply":
            try:
                patched = fieldmanager.apply(kind, old, patch, manager=opts.field_manager, force=opts.force,
                                             subresource=subresource, now=format_time(self.clock.now()))
            except PatchError as exc:
                raise _patch_status(exc) from exc
            managed = patched["metadata"].pop("managedFields", None)
        else:
            patched = self._patched(kind, old, patch, patch_type)
        if patched["metadata"].get("name", name) != name:
            raise errors.bad_request("a patch cannot change metadata.name")
        patched = self._field_validation(kind, name, patched, opts, warnings)
        return self._commit_update(kind, old, patched, opts, subresource=subresource, managed=managed), False

    def _patch_at_version(self, kind: Kind, storage: Kind, namespace: str | None, name: str, patch: Any,
                          patch_type: str, opts: WriteOptions, *, subresource: str | None,
                          warnings: list[str] | None) -> Obj:
        """A patch sent at a version other than the storage one: applied to the object as read at it.

        The result goes back to the storage version as an update that must find the object as
        it was read (its resourceVersion), so no write can fall in between.
        """
        if patch_type == "apply":
            raise errors.StatusError(415, "UnsupportedMediaType", "the body of the request was in an unknown "
                                     f"format: application/apply-patch+yaml (server-side apply at {kind.api_version}; "
                                     f"apply at {storage.api_version})")
        old = self.get(storage, namespace, name)
        patched = self._patched(kind, conversion.at_version(kind, old), patch, patch_type)
        patched["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        return self.update(storage, namespace, name, conversion.up(kind, patched), opts, subresource=subresource,
                           warnings=warnings)

    def _patched(self, kind: Kind, old: Obj, patch: Any, patch_type: str) -> Obj:
        """`old` with a (non-apply) patch applied; the patch's failures as Status errors."""
        try:
            patched = self._apply_patch(kind, old, patch, patch_type)
        except PatchError as exc:
            raise _patch_status(exc) from exc
        if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
            raise errors.StatusError(422, "Invalid", "the patch produced an object without metadata")
        return patched

    def _apply_patch(self, kind: Kind, old: Obj, patch: Any, patch_type: str) -> Any:
        if patch_type == "json":
            return apply_json_patch(old, patch)
        if not isinstance(patch, dict):
            raise PatchError("the patch must be a JSON object", code=400)
        if patch_type == "merge":
            return apply_merge_patch(old, patch)
        if patch_type == "strategic":
            if kind.custom is not None:
                raise errors.unsupported_media_type(patch_media_types(kind))
            return apply_strategic_merge_patch(old, patch, kind=kind)
        raise errors.unsupported_media_type(patch_media_types(kind))

    def _commit_update(self, kind: Kind, old: Obj, new: Obj, opts: WriteOptions,
                       *, subresource: str | None, managed: list[Obj] | None = None) -> Obj:
        name = old["metadata"]["name"]
        sent_rv = new["metadata"].get("resourceVersion")
        if sent_rv not in (None, "") and str(sent_rv) != old["metadata"]["resourceVersion"]:
            raise errors.conflict(kind, name)
        if subresource == "status":
            spec_changed = False  # a status write keeps the stored spec
            candidate: Obj = {**old, "metadata": dict(old["metadata"])}
            if "status" in new:
                candidate["status"] = new["status"]
            else:
                candidate.pop("status", None)
            admission.complete_status(kind, candidate)
        else:
            candidate = new
            self._decode_fields(kind, candidate)
            for hook in self.hooks:
                hook.admit(kind, candidate, old)
            md = candidate["metadata"]
            for field in _IMMUTABLE_META:
                if field in old["metadata"]:
                    md[field] = old["metadata"][field]
                else:
                    md.pop(field, None)
            md.pop("managedFields", None)
            candidate["kind"] = kind.kind
            candidate["apiVersion"] = kind.api_version
            customobjects.to_storage(kind, candidate)
            if kind.has_status:
                if "status" in old:
                    candidate["status"] = old["status"]
                else:
                    candidate.pop("status", None)
            # A PUT may carry a spec without its defaults, so defaulting runs before the spec is
            # compared; a spec equal to the stored one is already defaulted (defaulting only
            # fills what is absent), so it is compared first and defaulted only if it differs.
            spec_changed = candidate.get("spec") != old.get("spec")
            if spec_changed:
                admission.default_update(kind, candidate)
                spec_changed = candidate.get("spec") != old.get("spec")
            if kind is PODS:
                self._check_pod_update(old, candidate)
            moved = customobjects.generation_changed(kind, old, candidate) if kind.custom is not None else spec_changed
            if "generation" in old["metadata"] and moved:
                md["generation"] = int(old["metadata"]["generation"]) + 1
        causes = (validate_object(kind, candidate, spec_known_valid=not spec_changed)
                  + fieldrules.causes(kind, candidate) + _time_causes(kind, candidate)
                  + customobjects.validate(kind, candidate, old=old, status_write=subresource == "status"))
        if causes:
            raise errors.invalid(kind, name, [dict(c) for c in causes])
        candidate["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"]
        if managed is not None:
            candidate["metadata"]["managedFields"] = managed
        elif opts.field_manager or fieldmanager.tracked(old):
            manager = opts.field_manager or opts.user_agent_manager or "unknown"
            candidate["metadata"]["managedFields"] = fieldmanager.update(
                kind, old, candidate, manager=manager, subresource=subresource, now=format_time(self.clock.now()))
        if candidate == old:
            return old  # a no-op write: no new revision, no event
        if opts.dry_run:
            return candidate
        md = candidate["metadata"]
        if _finished(kind, candidate):
            # The last finalizer is gone from an object being deleted: it goes now.
            return self._remove(kind, _key(kind, md.get("namespace"), name))
        return self._write(kind, candidate, old, event="MODIFIED")

    def _check_pod_update(self, old: Obj, new: Obj) -> None:
        """Pod specs are mostly immutable; the scheduler binds through pods/binding only."""
        old_node = (old.get("spec") or {}).get("nodeName")
        new_node = (new.get("spec") or {}).get("nodeName")
        if old_node and new_node != old_node:
            raise errors.invalid(PODS, old["metadata"]["name"], [{
                "reason": "FieldValueForbidden", "field": "spec.nodeName",
                "message": "pod updates may not change spec.nodeName"}])

    # ------------------------------------------------------------------------------ delete

    def delete(self, kind: Kind, namespace: str | None, name: str, opts: DeleteOptions) -> Obj:
        """DELETE with graceful deletion, finalizers, propagation and preconditions."""
        old = self.get(kind, namespace, name)
        md = old["metadata"]
        if opts.uid is not None and opts.uid != md.get("uid"):
            raise errors.conflict(kind, name, f"Precondition failed: UID in precondition: {opts.uid}, "
                                  f"UID in object meta: {md.get('uid')}")
        if opts.resource_version is not None and opts.resource_version != md.get("resourceVersion"):
            raise errors.conflict(kind, name, "Precondition failed: resourceVersion in precondition: "
                                  f"{opts.resource_version}, resourceVersion in object meta: "
                                  f"{md.get('resourceVersion')}")
        if kind is NAMESPACES:
            return self._delete_namespace(old, opts)
        finalizers = list(md.get("finalizers") or [])
        policy = opts.propagation_policy
        if policy == "Orphan" and "orphan" not in finalizers:
            finalizers.append("orphan")
        elif policy == "Foreground" and "foregroundDeletion" not in finalizers:
            finalizers.append("foregroundDeletion")
        if kind is CUSTOMRESOURCEDEFINITIONS and CLEANUP_FINALIZER not in finalizers:
            finalizers.append(CLEANUP_FINALIZER)  # its objects go first (apiserver.establishing)
        grace = self._grace(kind, old, opts)
        if grace == 0 and not finalizers:
            if opts.dry_run:
                return old
            return self._remove(kind, _key(kind, namespace, name))
        # Graceful or blocked by finalizers: mark the object and leave it in place.
        now = self.clock.now()
        new_md = dict(md)
        current = md.get("deletionGracePeriodSeconds")
        if md.get("deletionTimestamp") and current is not None and grace >= int(current) \
                and finalizers == list(md.get("finalizers") or []):
            return old  # already terminating with a grace period no longer than this one
        new_md["deletionTimestamp"] = format_time(now + grace)
        new_md["deletionGracePeriodSeconds"] = grace
        if finalizers:
            new_md["finalizers"] = finalizers
        if opts.dry_run:
            return {**old, "metadata": new_md}
        return self._write(kind, {**old, "metadata": new_md}, old, event="MODIFIED")

    def _grace(self, kind: Kind, obj: Obj, opts: DeleteOptions) -> int:
        """The grace period a delete gets: only bound, non-terminal pods are graceful."""
        if kind is not PODS:
            return 0
        spec = obj.get("spec") or {}
        phase = (obj.get("status") or {}).get("phase")
        if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
            return 0
        grace = opts.grace_period_seconds
        if grace is None:
            grace = int(spec.get("terminationGracePeriodSeconds", 30))
        return max(0, grace)

    def _delete_namespace(self, ns_obj: Obj, opts: DeleteOptions) -> Obj:
        """Start a namespace's deletion: it turns Terminating and waits for the namespace controller.

        As upstream: the namespace gets its deletionTimestamp and phase Terminating and keeps
        its `kubernetes` finalizer (`spec.finalizers`); the namespace controller deletes its
        contents and then removes the finalizer through `namespaces/{name}/finalize`, and the
        namespace goes when no finalizer is left. Creating in it meanwhile is a 403. The four
        namespaces the system relies on cannot be deleted.
        """
        name = ns_obj["metadata"]["name"]
        if name in INITIAL_NAMESPACES:
            raise errors.forbidden(NAMESPACES, name, f'namespaces "{name}" is forbidden: this namespace may not '
                                   "be deleted")
        md = ns_obj["metadata"]
        if md.get("deletionTimestamp"):
            return ns_obj
        new = {**ns_obj, "metadata": {**md, "deletionTimestamp": format_time(self.clock.now()),
                                      "deletionGracePeriodSeconds": 0},
               "status": {**(ns_obj.get("status") or {}), "phase": "Terminating"}}
        if opts.propagation_policy == "Orphan":
            new["metadata"]["finalizers"] = [*(md.get("finalizers") or []), "orphan"]
        if opts.dry_run:
            return new
        if _finished(NAMESPACES, new):
            return self._remove(NAMESPACES, name)
        return self._write(NAMESPACES, new, ns_obj, event="MODIFIED")

    def finalize_namespace(self, name: str, body: Any, opts: WriteOptions) -> Obj:
        """PUT namespaces/{name}/finalize: replace `spec.finalizers` (and nothing else)."""
        old = self.get(NAMESPACES, None, name)
        if not isinstance(body, dict) or not isinstance(body.get("spec") or {}, dict):
            raise errors.bad_request("a Namespace must be an object")
        finalizers = (body.get("spec") or {}).get("finalizers") or []
        if not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers):
            raise errors.invalid(NAMESPACES, name, [{"reason": "FieldValueInvalid", "field": "spec.finalizers",
                                                     "message": "must be a list of finalizer names"}])
        sent_rv = (body.get("metadata") or {}).get("resourceVersion")
        if sent_rv not in (None, "") and str(sent_rv) != old["metadata"]["resourceVersion"]:
            raise errors.conflict(NAMESPACES, name)
        new = {**old, "spec": {**(old.get("spec") or {}), "finalizers": finalizers}}
        if not finalizers:
            new["spec"].pop("finalizers")
        if new == old or opts.dry_run:
            return new
        if _finished(NAMESPACES, new):
            return self._remove(NAMESPACES, name)
        return self._write(NAMESPACES, new, old, event="MODIFIED")

    def delete_collection(self, kind: Kind, namespace: str | None, *, labels: LabelSelector | None,
                          fields: FieldSelector | None, opts: DeleteOptions) -> list[Obj]:
        """DELETE on a collection: delete every matching object with the same options."""
        items, _ = self.list_objects(kind, namespace=namespace, labels=labels, fields=fields)
        out = []
        for obj in items:
            try:
                out.append(self.delete(kind, obj["metadata"].get("namespace"), obj["metadata"]["name"], opts))
            except errors.StatusError as exc:
                if exc.code != 404:
                    raise
        return out

    # ------------------------------------------------------------------------------ subresources

    def bind(self, namespace: str, name: str, binding: Any, opts: WriteOptions) -> Obj:
        """pods/binding: set spec.nodeName once, with the PodScheduled condition."""
        if not isinstance(binding, dict):
            raise errors.bad_request("a Binding must be an object")
        target = binding.get("target")
        if not isinstance(target, dict) or not target.get("name"):
            raise errors.invalid(PODS, name, [{"reason": "FieldValueRequired", "field": "target.name",
                                               "message": "a binding needs a target node name"}])
        pod = self.get(PODS, namespace, name)
        want_uid = (binding.get("metadata") or {}).get("uid")
        if want_uid and want_uid != pod["metadata"].get("uid"):
            raise errors.conflict(PODS, name, f"Precondition failed: UID in precondition: {want_uid}, "
                                  f"UID in object meta: {pod['metadata'].get('uid')}")
        node = str(target["name"])
        if (pod.get("spec") or {}).get("nodeName"):
            raise errors.conflict(PODS, name, f"pod {name} is already assigned to node "
                                  f"\"{pod['spec']['nodeName']}\"")
        if pod["metadata"].get("deletionTimestamp"):
            raise errors.conflict(PODS, name, f"pod {name} is being deleted, cannot be assigned to a host")
        status = dict(pod.get("status") or {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                           "lastTransitionTime": format_time(self.clock.now())})
        status["conditions"] = conditions
        new = {**pod, "metadata": dict(pod["metadata"]), "spec": {**pod["spec"], "nodeName": node},
               "status": status}
        if opts.dry_run:
            return new
        return self._write(PODS, new, pod, event="MODIFIED")

    def evict(self, namespace: str, name: str, eviction: Any) -> Obj:
        """pods/eviction: a graceful delete unless a PodDisruptionBudget forbids it (429)."""
        if not isinstance(eviction, dict):
            raise errors.bad_request("an Eviction must be an object")
        pod = self.get(PODS, namespace, name)
        phase = (pod.get("status") or {}).get("phase")
        if phase not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp"):
            for pdb in self.store.items(PODDISRUPTIONBUDGETS, namespace=namespace):
                denied = self._pdb_denies(pdb, pod)
                if denied is not None:
                    # As upstream's eviction: no retryAfterSeconds (0 is left out), one cause.
                    desired, current = denied
                    raise errors.StatusError(
                        429, "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        details={"causes": [{"reason": "DisruptionBudget", "message":
                                 f"The disruption budget {pdb['metadata']['name']} needs {desired} healthy pods "
                                 f"and has {current} currently"}]})
        raw_opts = eviction.get("deleteOptions") or {}
        opts = DeleteOptions.from_obj(raw_opts, {})
        return self.delete(PODS, namespace, name, opts)

    def _pdb_denies(self, pdb: Obj, pod: Obj) -> tuple[int, int] | None:
        """None if the budget allows evicting `pod`; else (healthy pods it needs, healthy pods there are)."""
        spec = pdb.get("spec") or {}
        try:
            selector = label_selector_from_dict(spec.get("selector"))
        except SelectorError:
            return None
        if not selector.matches(labels_of(pod)):
            return None
        ns = pod["metadata"].get("namespace")
        matching = [p for p in self.store.items(PODS, namespace=ns) if selector.matches(labels_of(p))]
        healthy = sum(1 for p in matching if _pod_healthy(p))
        total = len(matching)
        if "minAvailable" in spec:
            need = _int_or_percent(spec["minAvailable"], total, round_up=True)
        elif "maxUnavailable" in spec:
            need = total - _int_or_percent(spec["maxUnavailable"], total, round_up=True)
        else:
            return None
        return None if healthy - 1 >= need else (need, healthy)

    def get_scale(self, kind: Kind, namespace: str, name: str) -> Obj:
        """The autoscaling/v1 Scale of a Deployment or ReplicaSet."""
        obj = self.get(kind, namespace, name)
        return _scale_of(kind, obj)

    def update_scale(self, kind: Kind, namespace: str, name: str, scale: Any, opts: WriteOptions) -> Obj:
        """Write spec.replicas of the parent from a Scale."""
        if not isinstance(scale, dict) or not isinstance(scale.get("spec"), dict):
            raise errors.bad_request("a Scale must be an object with spec")
        replicas = scale["spec"].get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise errors.invalid(kind, name, [{"reason": "FieldValueInvalid", "field": "spec.replicas",
                                               "message": "must be a non-negative integer"}])
        obj = self.get(kind, namespace, name)
        sent_rv = (scale.get("metadata") or {}).get("resourceVersion")
        if sent_rv and sent_rv != obj["metadata"]["resourceVersion"]:
            raise errors.conflict(kind, name)
        new = copy.deepcopy(obj)
        custom = customobjects.custom_of(kind)
        if custom is not None and custom.scale is not None:
            _set_path(new, custom.scale.spec_replicas, replicas)
        else:
            new["spec"]["replicas"] = replicas
        updated = self._commit_update(kind, obj, new, opts, subresource=None)
        return _scale_of(kind, updated)

    def patch_scale(self, kind: Kind, namespace: str, name: str, patch: Any, patch_type: str,
                    opts: WriteOptions) -> Obj:
        """PATCH on scale: patch the Scale document, then write it back."""
        current = self.get_scale(kind, namespace, name)
        try:
            if patch_type == "json":
                patched = apply_json_patch(current, patch)
            elif isinstance(patch, dict):
                patched = apply_merge_patch(current, patch)
            else:
                raise errors.bad_request("the patch must be a JSON object")
        except PatchError as exc:
            raise errors.StatusError(exc.code, "Invalid" if exc.code == 422 else "BadRequest", str(exc)) from exc
        return self.update_scale(kind, namespace, name, patched, opts)

    # ------------------------------------------------------------------------------ helpers

    def _write(self, kind: Kind, obj: Obj, old: Obj | None, *, event: EventType) -> Obj:
        stored = self.store.write(kind, obj, event=event)
        for hook in self.hooks:
            hook.written(kind, old, stored)
        return stored

    def _remove(self, kind: Kind, key: str) -> Obj:
        final = self.store.remove(kind, key)
        assert final is not None
        for hook in self.hooks:
            hook.removed(kind, final)
        return final

    def _check_body(self, kind: Kind, body: Any) -> Obj:
        if not isinstance(body, dict):
            raise errors.bad_request(f"the body of a {kind.kind} must be a JSON object")
        api_version = body.get("apiVersion")
        body_kind = body.get("kind")
        if body_kind not in (None, "", kind.kind) or api_version not in (None, "", kind.api_version):
            raise errors.bad_request(f"the API version in the data ({api_version}) and kind ({body_kind}) "
                                     f"do not match the expected {kind.api_version} {kind.kind}")
        if "metadata" in body and not isinstance(body["metadata"], dict):
            raise errors.bad_request("metadata must be an object")
        if kind.custom is None:  # a custom resource's spec and status are what its schema says
            for field in ("spec", "status"):
                if field in body and body[field] is not None and not isinstance(body[field], dict):
                    raise errors.bad_request(f"{field} must be an object")
        self._decode_fields(kind, body)
        return body

    @staticmethod
    def _decode_fields(kind: Kind, obj: Obj) -> None:
        """What kube-apiserver's decoder does to a kind's typed fields (a 400 when it cannot)."""
        if kind is SECRETS:
            try:
                admission.fold_secret(obj)
            except admission.DecodeError as exc:
                raise errors.bad_request(f'{kind.kind} in version "{kind.version}" cannot be handled as a '
                                         f"{kind.kind}: {exc}") from None

    def _namespace_for(self, kind: Kind, namespace: str | None, md: dict[str, Any]) -> str:
        if not kind.namespaced:
            return ""
        body_ns = md.get("namespace")
        if namespace and body_ns and body_ns != namespace:
            raise errors.bad_request("the namespace of the provided object does not match the namespace "
                                     "sent on the request")
        ns = namespace or body_ns
        if not ns:
            raise errors.bad_request("a namespace is required for namespaced resources")
        return str(ns)

    def _field_validation(self, kind: Kind, name: str, obj: Obj, opts: WriteOptions,
                          warnings: list[str] | None) -> Obj:
        """`obj` as a typed decode leaves it (`decode_typed`; a custom object: pruned by its schema).

        Unknown fields are dropped in every mode, as upstream: warned about under `Warn` (the
        default), refused with a 400 under `Strict`, silently under `Ignore`. A quantity sent as
        a JSON number is kept as its canonical string, as Go's round trip writes it.
        """
        mode = opts.field_validation or "Warn"
        if kind.custom is not None:
            customobjects.prepare(kind, obj, field_validation=mode, warnings=warnings)
            return obj
        try:
            obj, unknown = decode_typed(kind, obj)
        except WrongType as exc:  # Go's decode refuses the body: a 400 before any validation
            raise errors.bad_request(f'{kind.kind} in version "{kind.version}" cannot be handled as a '
                                     f"{kind.kind}: {exc.text}") from None
        try:
            obj = quantities_as_strings(kind.api_version, kind.kind, obj)
        except MalformedQuantity:  # upstream's decode fails on it: a 400 before any 422
            raise errors.bad_request(f'{kind.kind} in version "{kind.version}" cannot be handled as a '
                                     f"{kind.kind}: {QUANTITY_FORMAT}") from None
        if not unknown or mode == "Ignore":
            return obj
        if mode == "Strict":
            text = ", ".join(f"unknown field {go_quote(f)}" for f in unknown)
            raise errors.bad_request(f"strict decoding error: {text}")
        if warnings is not None:
            warnings.extend(f"unknown field {go_quote(f)}" for f in unknown)
        return obj

    def _priority_class(self, name: str) -> Obj | None:
        return self.store.get(PRIORITYCLASSES, name)


def patch_media_types(kind: Kind) -> tuple[str, ...]:
    """The Content-Types a PATCH of `kind` takes, in upstream's order (no strategic merge for custom resources)."""
    if kind.custom is not None:
        return ("application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml")
    return ("application/json-patch+json", "application/merge-patch+json", "application/strategic-merge-patch+json",
            "application/apply-patch+yaml")


def _gvk_text(body: Obj) -> str:
    """An object's group, version and kind as Go prints a `schema.GroupVersionKind` (`apps/v1, Kind=Deployment`)."""
    api_version, kind = body.get("apiVersion"), body.get("kind")
    api_version = api_version if isinstance(api_version, str) else ""
    group, _, version = api_version.rpartition("/")
    if api_version.count("/") > 1:
        group, version = "", ""  # not a group version: Go's parse fails and leaves both empty
    return f"{group}/{version}, Kind={kind if isinstance(kind, str) else ''}"


_MICRO_TIMES: Final[dict[str, tuple[tuple[str, ...], ...]]] = {
    "Lease": (("spec", "renewTime"), ("spec", "acquireTime")),
    "Event": (("eventTime",),),
}
_TIMES: Final[dict[str, tuple[tuple[str, ...], ...]]] = {
    "Event": (("firstTimestamp",), ("lastTimestamp",)),
}


def _patch_status(exc: PatchError) -> errors.StatusError:
    return errors.bad_request(str(exc)) if exc.code == 400 else errors.StatusError(422, "Invalid", str(exc))


def select(objects: Iterable[Obj], *, namespace: str | None, labels: LabelSelector | None,
           fields: FieldSelector | None) -> list[Obj]:
    """The objects in `namespace` (every one when None) that both selectors match, in their order."""
    out = []
    for obj in objects:
        if namespace and obj["metadata"].get("namespace") != namespace:
            continue
        if labels is not None and not labels.empty and not labels.matches(labels_of(obj)):
            continue
        if fields is not None and not fields.empty and not fields.matches(obj):
            continue
        out.append(obj)
    return out


def random_uuid(rng: random.Random) -> str:
    """A version-4 UUID string drawn from `rng` (the text of `uuid.UUID(int=..., version=4)`, built directly)."""
    bits = (rng.getrandbits(128) & ~(0xC000 << 48)) | (0x8000 << 48)  # the RFC 4122 variant
    bits = (bits & ~(0xF000 << 64)) | (4 << 76)  # version 4
    h = f"{bits:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _time_causes(kind: Kind, obj: Obj) -> list[Any]:
    """Check and normalise timestamps clients send (Python clients send `+00:00` offsets).

    Stored as Kubernetes writes them (`Z`, seconds for Time, microseconds for MicroTime), so
    that Go clients such as `kubectl describe node`, which reads the node's Lease, parse them.
    """
    causes: list[Any] = []
    for micro, table in ((True, _MICRO_TIMES), (False, _TIMES)):
        for path in table.get(kind.kind, ()):
            parent: Any = obj
            for part in path[:-1]:
                parent = parent.get(part) if isinstance(parent, dict) else None
            if not isinstance(parent, dict) or parent.get(path[-1]) in (None, ""):
                continue
            value = parent[path[-1]]
            try:
                t = parse_time(value) if isinstance(value, str) else None
            except ValueError:
                t = None
            if t is None:
                causes.append({"reason": "FieldValueInvalid", "field": ".".join(path),
                               "message": f"Invalid value: {value!r}: must be an RFC 3339 timestamp"})
            else:
                parent[path[-1]] = format_micro_time(t) if micro else format_time(t)
    return causes


def _finished(kind: Kind, obj: Obj) -> bool:
    """Whether an object being deleted has nothing left to wait for (then it leaves the store).

    A finalizer blocks removal; so does a pod's grace period (its kubelet deletes it with
    grace 0), and a namespace's `spec.finalizers` (its contents are still being deleted).
    """
    md = obj["metadata"]
    if not md.get("deletionTimestamp") or md.get("finalizers"):
        return False
    if kind is NAMESPACES:
        return not (obj.get("spec") or {}).get("finalizers")
    return not md.get("deletionGracePeriodSeconds")


def _key(kind: Kind, namespace: str | None, name: str) -> str:
    return f"{namespace}/{name}" if kind.namespaced else name


def _pod_healthy(pod: Obj) -> bool:
    if pod["metadata"].get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    if status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])


def _int_or_percent(value: Any, total: int, *, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        pct = int(value[:-1])
        n = total * pct
        return -(-n // 100) if round_up else n // 100
    return int(value)


def _get_path(obj: Obj, path: tuple[str, ...]) -> Any:
    cur: Any = obj
    for name in path:
        if not isinstance(cur, dict):
            return None
        cur = cur.get(name)
    return cur


def _set_path(obj: Obj, path: tuple[str, ...], value: Any) -> None:
    cur = obj
    for name in path[:-1]:
        nxt = cur.get(name)
        if not isinstance(nxt, dict):
            nxt = cur[name] = {}
        cur = nxt
    cur[path[-1]] = value


def _scale_of(kind: Kind, obj: Obj) -> Obj:
    """The autoscaling/v1 Scale of an object: from spec.replicas and its selector, or a CRD's scale paths."""
    md = obj["metadata"]
    custom = customobjects.custom_of(kind)
    if custom is not None and custom.scale is not None:
        paths = custom.scale
        spec_replicas = _get_path(obj, paths.spec_replicas)
        status_replicas = _get_path(obj, paths.status_replicas)
        selector = _get_path(obj, paths.label_selector) if paths.label_selector else None
        sel_text = selector if isinstance(selector, str) else ""
    else:
        spec_replicas = (obj.get("spec") or {}).get("replicas")
        status_replicas = (obj.get("status") or {}).get("replicas")
        labels = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
        sel_text = ",".join(f"{k}={v}" for k, v in sorted(labels.items()))
    status: Obj = {"replicas": int(status_replicas or 0)}
    if sel_text:
        status["selector"] = sel_text
    return {
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {k: md[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                     if k in md},
        "spec": {"replicas": int(spec_replicas or 0)},
        "status": status,
    }


ScaleKinds: Final = (DEPLOYMENTS, REPLICASETS)
_ALWAYS_GENERATION: Final = frozenset({DEPLOYMENTS, REPLICASETS, DAEMONSETS, PODS})
Now = Callable[[], float]

"""Writes that pass through admission webhooks: mutate, validate, then commit.

The registry's write path is synchronous (nothing else is admitted between a request's checks
and its store write), and a webhook call is not: so a write that some webhook configuration
exists for is done here in steps, each step a synchronous registry call, the webhook calls
between them. Without any configuration the request handlers call the registry directly and
none of this runs.

* **create**: the body as decoded (kind, apiVersion and namespace filled in) goes to the
  mutating webhooks, as upstream sends them the object before validation; the mutated body
  is checked by a dry run of the create (validation, defaulting, a generated name), that
  object goes to the validating webhooks, and the mutated body, with the generated name, is
  created for real.
* **update** (PUT, status included): the same, with the stored object as `oldObject`.
* **patch** (merge, strategic, JSON, apply): a dry run applies the patch; the result goes to
  the mutating webhooks; if they changed nothing, the validating webhooks see it and the patch
  is applied for real; if they did, the patched and mutated object is validated by a dry run of
  an update at the revision the patch was applied to, shown to the validating webhooks and
  written as that update (a write in between is a 409 Conflict, where kube-apiserver would
  apply the patch again). An apply that creates the object is a CREATE.
* **delete**: the stored object goes to the validating webhooks as `oldObject`.

Between two steps another request may commit: what the validating webhooks saw is what is
written unless the object changed meanwhile, which the commit's resourceVersion precondition
refuses (updates) or its AlreadyExists check does (creates), as with etcd's transactions.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from kubemesh.apiserver.rbac import ADMIN, USER
from kubemesh.apiserver.registry import DeleteOptions, Registry, WriteOptions
from kubemesh.apiserver.webhooks import Attributes, Webhooks
from kubemesh.services.model.kinds import Kind, Obj


class Admitting:
    """The registry's verbs with the webhook passes around them."""

    def __init__(self, *, registry: Registry, webhooks: Webhooks) -> None:
        self.registry = registry
        self.webhooks = webhooks

    async def create(self, kind: Kind, namespace: str | None, body: Any, opts: WriteOptions,
                     *, warnings: list[str]) -> Obj:
        """POST through the webhooks."""
        if not isinstance(body, dict):
            return self.registry.create(kind, namespace, body, opts, warnings=warnings)
        draft = _as_sent(kind, namespace, body)
        md = draft.get("metadata")
        attrs = Attributes(kind=kind, operation="CREATE", namespace=namespace,
                           name=str(md.get("name") or "") if isinstance(md, dict) else "",
                           obj=draft, dry_run=opts.dry_run, user=_user_name(),
                           user_info=_user_info(),
                           options={"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"})
        verdict = await self.webhooks.mutate(attrs)
        warnings += verdict.warnings
        mutated = verdict.obj if verdict.obj is not None else draft
        final = self.registry.create(kind, namespace, copy.deepcopy(mutated), _dry(opts))
        warnings += await self.webhooks.validate(dataclasses.replace(
            attrs, obj=final, name=str(final["metadata"]["name"])))
        mutated.setdefault("metadata", {})["name"] = final["metadata"]["name"]  # the name the dry run generated
        return self.registry.create(kind, namespace, mutated, opts, warnings=warnings)

    async def update(self, kind: Kind, namespace: str | None, name: str, body: Any, opts: WriteOptions,
                     *, subresource: str | None, warnings: list[str]) -> Obj:
        """PUT (of the object or its status) through the webhooks."""
        old = self.registry.get(kind, namespace, name)
        if not isinstance(body, dict):
            return self.registry.update(kind, namespace, name, body, opts, subresource=subresource, warnings=warnings)
        attrs = Attributes(kind=kind, operation="UPDATE", namespace=namespace, name=name, subresource=subresource,
                           obj=_as_sent(kind, namespace, body), old=old, dry_run=opts.dry_run, user=_user_name(),
                           user_info=_user_info(),
                           options={"kind": "UpdateOptions", "apiVersion": "meta.k8s.io/v1"})
        verdict = await self.webhooks.mutate(attrs)
        warnings += verdict.warnings
        mutated = verdict.obj if verdict.obj is not None else attrs.obj
        final = self.registry.update(kind, namespace, name, copy.deepcopy(mutated), _dry(opts),
                                     subresource=subresource)
        warnings += await self.webhooks.validate(dataclasses.replace(attrs, obj=final))
        return self.registry.update(kind, namespace, name, mutated, opts, subresource=subresource, warnings=warnings)

    async def patch(self, kind: Kind, namespace: str | None, name: str, patch: Any, patch_type: str,
                    opts: WriteOptions, *, subresource: str | None, warnings: list[str]) -> tuple[Obj, bool]:
        """PATCH through the webhooks (see the module docstring)."""
        draft, created = self.registry.patch(kind, namespace, name, copy.deepcopy(patch), patch_type, _dry(opts),
                                             subresource=subresource)
        old = None if created else self.registry.get(kind, namespace, name)
        attrs = Attributes(kind=kind, operation="CREATE" if created else "UPDATE", namespace=namespace, name=name,
                           subresource=subresource, obj=draft, old=old, dry_run=opts.dry_run, user=_user_name(),
                           user_info=_user_info(),
                           options={"kind": "PatchOptions", "apiVersion": "meta.k8s.io/v1"})
        verdict = await self.webhooks.mutate(attrs)
        warnings += verdict.warnings
        if verdict.obj is None or verdict.obj == draft:
            warnings += await self.webhooks.validate(attrs)
            return self.registry.patch(kind, namespace, name, patch, patch_type, opts, subresource=subresource,
                                       warnings=warnings)
        mutated = verdict.obj
        if created:
            final = self.registry.create(kind, namespace, copy.deepcopy(mutated), _dry(opts))
            warnings += await self.webhooks.validate(dataclasses.replace(attrs, obj=final))
            return self.registry.create(kind, namespace, mutated, opts, warnings=warnings), True
        assert old is not None
        mutated.setdefault("metadata", {})["resourceVersion"] = old["metadata"]["resourceVersion"]
        final = self.registry.update(kind, namespace, name, copy.deepcopy(mutated), _dry(opts),
                                     subresource=subresource)
        warnings += await self.webhooks.validate(dataclasses.replace(attrs, obj=final))
        return self.registry.update(kind, namespace, name, mutated, opts, subresource=subresource,
                                    warnings=warnings), False

    async def delete(self, kind: Kind, namespace: str | None, name: str, opts: DeleteOptions) -> Obj:
        """DELETE after the validating webhooks saw the object going."""
        old = self.registry.get(kind, namespace, name)
        await self.webhooks.validate(Attributes(
            kind=kind, operation="DELETE", namespace=namespace, name=name, old=old, dry_run=opts.dry_run,
            user=_user_name(), user_info=_user_info(),
            options={"kind": "DeleteOptions", "apiVersion": "meta.k8s.io/v1"}))
        return self.registry.delete(kind, namespace, name, opts)


def _user_name() -> str:
    """The name of the user whose write is admitted (the admin for the apiserver's own writes)."""
    user = USER.get()
    return user.name if user is not None else ADMIN.name


def _user_info() -> Obj:
    """The admitted write's user as webhooks see it (`userInfo`: name, uid, groups, extra)."""
    user = USER.get()
    return (user if user is not None else ADMIN).info()


def _dry(opts: WriteOptions) -> WriteOptions:
    return dataclasses.replace(opts, dry_run=True)


def _as_sent(kind: Kind, namespace: str | None, body: Obj) -> Obj:
    """The body as the webhooks see it: a copy with its kind, apiVersion and namespace filled in."""
    obj = copy.deepcopy(body)
    obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
    md = obj.get("metadata")
    if isinstance(md, dict) and kind.namespaced and namespace:
        md.setdefault("namespace", namespace)
    return obj

"""A CustomResourceDefinition checked and defaulted as apiextensions-apiserver does, and the kinds it serves.

`default_definition` fills what the apiextensions v1 defaulting fills (`names.singular`,
`names.listKind`, `conversion.strategy`); `check_definition` returns every cause of a 422
with the field paths and wording of upstream's CRD validation, and the compiled schema of
every version (a schema is compiled once, here, and reused for every object);
`served_kinds` turns an established CRD into one `Kind` per served version.

What upstream does that this does not: conversion webhooks (a `Webhook` strategy is
accepted and served as `None`: objects change only their `apiVersion` between versions,
with a warning on the CRD's writes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from kubemesh.apiserver import fielderrors as fe
from kubemesh.apiserver import names as dns
from kubemesh.apiserver.fielderrors import Cause
from kubemesh.apiserver.jsonpath import Path, PathError, compile_path
from kubemesh.services.model.kinds import Kind, KindTable, Obj, Subresource, field_path

if TYPE_CHECKING:
    # The structural schemas (with the CEL rules) are imported with the first CRD (see
    # `check_definition`): they are the apiserver's largest import that a cluster without
    # custom resources never uses, and its cold start waits for every import.
    from kubemesh.apiserver.structural import StructuralSchema

CLEANUP_FINALIZER: Final = "customresourcecleanup.apiextensions.k8s.io"
"""Put on a CRD when it is deleted; removed once all its objects are gone."""
APPROVAL_ANNOTATION: Final = "api-approved.kubernetes.io"
"""Required on CRDs in the protected `*.k8s.io` and `*.kubernetes.io` groups."""

_COLUMN_TYPES: Final = ("boolean", "date", "integer", "number", "string")
_COLUMN_FORMATS: Final = ("byte", "date", "date-time", "double", "float", "int32", "int64", "password")
_ALL_VERBS: Final = ("delete", "deletecollection", "get", "list", "patch", "create", "update", "watch")
_STATUS_VERBS: Final = ("get", "patch", "update")


@dataclass(frozen=True, slots=True, kw_only=True)
class Column:
    """One `additionalPrinterColumns` entry."""

    name: str
    type: str
    format: str
    description: str
    priority: int
    path: Path


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalePaths:
    """The `scale` subresource's paths, as field names (`("spec", "replicas")`)."""

    spec_replicas: tuple[str, ...]
    status_replicas: tuple[str, ...]
    label_selector: tuple[str, ...] | None


@dataclass(frozen=True, slots=True, kw_only=True)
class CustomKind:
    """What a CRD says about one of its served versions (the `custom` of its `Kind`)."""

    definition: str
    """The CRD's name (`widgets.example.com`)."""
    list_kind: str
    schema: StructuralSchema | None
    """The version's compiled schema (None only for a CRD that has none: v1 requires one)."""
    openapi_schema: Obj
    """The version's `openAPIV3Schema`, as written (published in the OpenAPI documents)."""
    columns: tuple[Column, ...]
    status: bool
    """Whether the status subresource is on (then main writes keep status, status writes keep the rest)."""
    scale: ScalePaths | None
    deprecation_warning: str | None
    """The warning sent with every request on a deprecated version, else None."""
    storage_api_version: str
    """The `apiVersion` objects are stored at."""


# ---------------------------------------------------------------------------------------------
# Defaulting


def default_definition(crd: Obj) -> None:
    """Fill the fields apiextensions v1 defaults (in place; a malformed CRD is left to checking)."""
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return
    names = spec.get("names")
    if isinstance(names, dict) and isinstance(names.get("kind"), str) and names["kind"]:
        names.setdefault("singular", names["kind"].lower())
        names.setdefault("listKind", names["kind"] + "List")
    conversion = spec.setdefault("conversion", {"strategy": "None"})
    if isinstance(conversion, dict):
        conversion.setdefault("strategy", "None")
        webhook = conversion.get("webhook")
        if conversion.get("strategy") == "Webhook" and isinstance(webhook, dict):
            client = webhook.get("clientConfig")
            if isinstance(client, dict) and isinstance(client.get("service"), dict):
                client["service"].setdefault("port", 443)


# ---------------------------------------------------------------------------------------------
# Checking


def _dns1035(field: str, value: str, causes: list[Cause], *, mixed_case: bool = False) -> None:
    subject = value.lower() if mixed_case else value
    if len(subject) > 63 or not dns.DNS1035_LABEL.fullmatch(subject):
        detail = (f"may have mixed case, but should otherwise match: {dns.DNS1035_RULE}" if mixed_case
                  else dns.DNS1035_RULE)
        causes.append(fe.invalid(field, value, detail))


def _check_names(names: Any, field: str, causes: list[Cause], *, spec_names: bool) -> None:
    if not isinstance(names, dict):
        causes.append(fe.required(field))
        return
    for key in ("plural", "singular", "kind", "listKind"):
        value = names.get(key)
        if not isinstance(value, str) or not value:
            if spec_names:
                causes.append(fe.required(f"{field}.{key}"))
            continue
        _dns1035(f"{field}.{key}", value, causes, mixed_case=key in ("kind", "listKind"))
    if names.get("kind") and names.get("kind") == names.get("listKind"):
        causes.append(fe.invalid(f"{field}.listKind", names["listKind"], "kind and listKind may not be the same"))
    for key in ("shortNames", "categories"):
        seen: set[str] = set()
        for i, value in enumerate(names.get(key) or []):
            if not isinstance(value, str):
                causes.append(fe.type_invalid(f"{field}.{key}[{i}]", value, "string"))
                continue
            _dns1035(f"{field}.{key}[{i}]", value, causes)
            if value in seen:
                causes.append(fe.duplicate(f"{field}.{key}[{i}]", value))
            seen.add(value)


def _check_column(col: Any, field: str, causes: list[Cause]) -> Column | None:
    if not isinstance(col, dict):
        causes.append(fe.type_invalid(field, col, "object"))
        return None
    ok = True
    if not col.get("name"):
        causes.append(fe.required(f"{field}.name"))
        ok = False
    ctype = col.get("type")
    if not ctype:
        causes.append(fe.required(f"{field}.type", f"must be one of {','.join(_COLUMN_TYPES)}"))
        ok = False
    elif ctype not in _COLUMN_TYPES:
        causes.append(fe.invalid(f"{field}.type", ctype, f"must be one of {','.join(_COLUMN_TYPES)}"))
        ok = False
    fmt = col.get("format") or ""
    if fmt and fmt not in _COLUMN_FORMATS:
        causes.append(fe.invalid(f"{field}.format", fmt, f"must be one of {','.join(_COLUMN_FORMATS)}"))
        ok = False
    source = col.get("jsonPath")
    path: Path | None = None
    if not source:
        causes.append(fe.required(f"{field}.jsonPath"))
        ok = False
    else:
        try:
            path = compile_path(str(source))
        except PathError as exc:
            causes.append(fe.invalid(f"{field}.jsonPath", source, str(exc)))
            ok = False
    if not ok or path is None:
        return None
    return Column(name=str(col["name"]), type=str(ctype), format=str(fmt),
                  description=str(col.get("description") or ""), priority=int(col.get("priority") or 0), path=path)


def _simple_path(value: Any, field: str, under: str, causes: list[Cause]) -> tuple[str, ...] | None:
    if not isinstance(value, str) or not value:
        causes.append(fe.required(field))
        return None
    if not value.startswith("."):
        causes.append(fe.invalid(field, value, "must be a simple json path starting with ."))
        return None
    try:
        names = compile_path(value).simple_fields()
    except PathError:
        names = None
    if names is None:
        causes.append(fe.invalid(field, value, "must be a json path in the dot notation"))
        return None
    if names[0] != under or len(names) < 2:
        causes.append(fe.invalid(field, value, f"should be a json path under .{under}"))
        return None
    return names


def _check_subresources(subs: Any, field: str, causes: list[Cause]) -> tuple[bool, ScalePaths | None]:
    if subs is None:
        return False, None
    if not isinstance(subs, dict):
        causes.append(fe.type_invalid(field, subs, "object"))
        return False, None
    status = subs.get("status") is not None
    scale = subs.get("scale")
    paths: ScalePaths | None = None
    if scale is not None:
        if not isinstance(scale, dict):
            causes.append(fe.type_invalid(f"{field}.scale", scale, "object"))
        else:
            spec_path = _simple_path(scale.get("specReplicasPath"), f"{field}.scale.specReplicasPath", "spec", causes)
            status_path = _simple_path(scale.get("statusReplicasPath"), f"{field}.scale.statusReplicasPath",
                                       "status", causes)
            selector = None
            if scale.get("labelSelectorPath"):
                selector = _simple_path(scale["labelSelectorPath"], f"{field}.scale.labelSelectorPath", "status",
                                        causes)
            if spec_path and status_path:
                paths = ScalePaths(spec_replicas=spec_path, status_replicas=status_path, label_selector=selector)
    return status, paths


@dataclass(frozen=True, slots=True, kw_only=True)
class Checked:
    """The outcome of `check_definition`."""

    causes: list[Cause]
    schemas: dict[str, StructuralSchema | None]
    """Compiled schema by version name (for a valid CRD)."""
    columns: dict[str, tuple[Column, ...]]
    subresources: dict[str, tuple[bool, ScalePaths | None]]
    warnings: list[str]


def check_definition(crd: Obj, *, old: Obj | None, kinds: KindTable) -> Checked:
    """Every reason to refuse this CRD (create when `old` is None, else update), and its compiled parts."""
    causes: list[Cause] = []
    warnings: list[str] = []
    schemas: dict[str, StructuralSchema | None] = {}
    columns: dict[str, tuple[Column, ...]] = {}
    subresources: dict[str, tuple[bool, ScalePaths | None]] = {}
    md = crd.get("metadata") or {}
    spec = crd.get("spec")
    if not isinstance(spec, dict):
        return Checked(causes=[fe.required("spec")], schemas={}, columns={}, subresources={}, warnings=[])
    group = spec.get("group")
    names = spec.get("names") if isinstance(spec.get("names"), dict) else {}
    plural = names.get("plural") if isinstance(names, dict) else None

    name = str(md.get("name") or "")
    if isinstance(plural, str) and isinstance(group, str) and name != f"{plural}.{group}":
        causes.append(fe.invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))

    if not group:
        causes.append(fe.required("spec.group"))
    elif not isinstance(group, str) or len(group) > 253 or not dns.DNS1123_SUBDOMAIN.fullmatch(group):
        causes.append(fe.invalid("spec.group", group, dns.SUBDOMAIN_RULE))
    elif "." not in group:
        causes.append(fe.invalid("spec.group", group, "should be a domain with at least one dot"))
    elif _protected(group) and not (md.get("annotations") or {}).get(APPROVAL_ANNOTATION):
        causes.append(fe.required(
            f"metadata.annotations[{APPROVAL_ANNOTATION}]",
            f'protected groups must have approval annotation "{APPROVAL_ANNOTATION}", see '
            "https://github.com/kubernetes/enhancements/pull/1111"))

    scope = spec.get("scope")
    if not scope:
        causes.append(fe.required("spec.scope"))
    elif scope not in ("Cluster", "Namespaced"):
        causes.append(fe.not_supported("spec.scope", scope, ("Cluster", "Namespaced")))

    _check_names(spec.get("names"), "spec.names", causes, spec_names=True)
    if isinstance(group, str) and isinstance(plural, str):
        builtin = next((k for k in kinds.builtin if k.group == group and k.plural == plural), None)
        if builtin is not None:
            causes.append(fe.invalid("spec.names.plural", plural,
                                     f'conflicts with the built-in resource "{builtin.resource}"'))

    versions = spec.get("versions")
    if not isinstance(versions, list) or not versions:
        causes.append(fe.required("spec.versions", "must have exactly one version marked as storage version"))
        versions = []
    storage_count = 0
    seen: set[str] = set()
    for i, version in enumerate(versions):
        field = f"spec.versions[{i}]"
        if not isinstance(version, dict):
            causes.append(fe.type_invalid(field, version, "object"))
            continue
        vname = version.get("name")
        if not isinstance(vname, str) or not vname:
            causes.append(fe.required(f"{field}.name"))
        else:
            _dns1035(f"{field}.name", vname, causes)
            if vname in seen:
                causes.append(fe.duplicate(f"{field}.name", vname))
            seen.add(vname)
        if version.get("storage") is True:
            storage_count += 1
        status_on, scale = _check_subresources(version.get("subresources"), f"{field}.subresources", causes)
        schema_doc = (version.get("schema") or {}).get("openAPIV3Schema") if isinstance(version.get("schema"),
                                                                                     dict) else None
        compiled: StructuralSchema | None = None
        if not isinstance(schema_doc, dict):
            causes.append(fe.required(f"{field}.schema.openAPIV3Schema", "schemas are required"))
        else:
            from kubemesh.apiserver.structural import StructuralSchema  # noqa: PLC0415 - see the imports

            compiled, schema_causes = StructuralSchema.compile(schema_doc, path=f"{field}.schema.openAPIV3Schema",
                                                               status_subresource=status_on)
            causes.extend(schema_causes)
        cols: list[Column] = []
        for j, col in enumerate(version.get("additionalPrinterColumns") or []):
            checked = _check_column(col, f"{field}.additionalPrinterColumns[{j}]", causes)
            if checked is not None:
                cols.append(checked)
        for j, sel in enumerate(version.get("selectableFields") or []):
            if not isinstance(sel, dict) or not isinstance(sel.get("jsonPath"), str):
                causes.append(fe.required(f"{field}.selectableFields[{j}].jsonPath"))
                continue
            try:
                ok = compile_path(sel["jsonPath"]).simple_fields() is not None
            except PathError:
                ok = False
            if not ok:
                causes.append(fe.invalid(f"{field}.selectableFields[{j}].jsonPath", sel["jsonPath"],
                                         "must be a simple json path in the dot notation"))
        if isinstance(vname, str):
            schemas[vname] = compiled
            columns[vname] = tuple(cols)
            subresources[vname] = (status_on, scale)
    if versions and storage_count != 1:
        causes.append(fe.invalid("spec.versions", [v.get("name") for v in versions if isinstance(v, dict)],
                                 "must have exactly one version marked as storage version"))

    conversion = spec.get("conversion") or {}
    strategy = conversion.get("strategy") if isinstance(conversion, dict) else None
    if strategy not in ("None", "Webhook"):
        causes.append(fe.not_supported("spec.conversion.strategy", strategy, ("None", "Webhook")))
    elif strategy == "Webhook":
        if not isinstance(conversion.get("webhook"), dict):
            causes.append(fe.required("spec.conversion.webhook", "required when strategy is set to Webhook"))
        elif len(versions) > 1:
            warnings.append("kubemesh serves spec.conversion.strategy Webhook as None: objects are not converted "
                            "between versions, only their apiVersion changes")
    elif isinstance(conversion, dict) and conversion.get("webhook") is not None:
        causes.append(fe.forbidden("spec.conversion.webhook", "should not be set when strategy is not set to Webhook"))

    if old is not None:
        _check_update(crd, old, causes)
    stored = (crd.get("status") or {}).get("storedVersions") or []
    served_names = {v.get("name") for v in versions if isinstance(v, dict)}
    for i, v in enumerate(stored):
        if v not in served_names:
            causes.append(fe.invalid(f"status.storedVersions[{i}]", v, "must appear in spec.versions"))
    return Checked(causes=causes, schemas=schemas, columns=columns, subresources=subresources, warnings=warnings)


def _check_update(crd: Obj, old: Obj, causes: list[Cause]) -> None:
    spec, old_spec = crd.get("spec") or {}, old.get("spec") or {}
    if spec.get("group") != old_spec.get("group"):
        causes.append(fe.immutable("spec.group", spec.get("group")))
    if (spec.get("names") or {}).get("plural") != (old_spec.get("names") or {}).get("plural"):
        causes.append(fe.immutable("spec.names.plural", (spec.get("names") or {}).get("plural")))
    if established(old):
        if spec.get("scope") != old_spec.get("scope"):
            causes.append(fe.immutable("spec.scope", spec.get("scope")))
        if (spec.get("names") or {}).get("kind") != (old_spec.get("names") or {}).get("kind"):
            causes.append(fe.immutable("spec.names.kind", (spec.get("names") or {}).get("kind")))


def _protected(group: str) -> bool:
    return group in ("k8s.io", "kubernetes.io") or group.endswith(".k8s.io") or group.endswith(".kubernetes.io")


# ---------------------------------------------------------------------------------------------
# Status and served kinds


def condition(crd: Obj, ctype: str) -> dict[str, Any] | None:
    """The CRD's condition of type `ctype`, or None."""
    for c in (crd.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == ctype:
            return c
    return None


def established(crd: Obj) -> bool:
    """Whether the CRD's Established condition is True."""
    c = condition(crd, "Established")
    return c is not None and c.get("status") == "True"


def terminating(crd: Obj) -> bool:
    """Whether the CRD is being deleted."""
    return bool((crd.get("metadata") or {}).get("deletionTimestamp"))


def served_kinds(crd: Obj, checked: Checked) -> list[Kind]:
    """One `Kind` per served version of an established CRD, under its accepted names."""
    spec = crd["spec"]
    accepted = (crd.get("status") or {}).get("acceptedNames") or spec["names"]
    group = spec["group"]
    storage = next(v["name"] for v in spec["versions"] if v.get("storage") is True)
    storage_api_version = f"{group}/{storage}"
    out: list[Kind] = []
    for version in spec["versions"]:
        if not version.get("served"):
            continue
        vname = version["name"]
        status_on, scale = checked.subresources.get(vname, (False, None))
        subs: list[Subresource] = []
        if status_on:
            subs.append(Subresource(name="status", kind=accepted["kind"], verbs=_STATUS_VERBS))
        if scale is not None:
            subs.append(Subresource(name="scale", kind="Scale", verbs=_STATUS_VERBS, group="autoscaling",
                                    version="v1"))
        fields = {}
        for sel in version.get("selectableFields") or []:
            names = compile_path(sel["jsonPath"]).simple_fields()
            if names:
                fields[".".join(names)] = field_path(*names)
        deprecation: str | None = None
        if version.get("deprecated"):
            deprecation = version.get("deprecationWarning") or (
                f"{group}/{vname} {accepted['kind']} is deprecated")
        custom = CustomKind(
            definition=crd["metadata"]["name"], list_kind=accepted.get("listKind") or accepted["kind"] + "List",
            schema=checked.schemas.get(vname),
            openapi_schema=(version.get("schema") or {}).get("openAPIV3Schema") or {},
            columns=checked.columns.get(vname, ()), status=status_on, scale=scale, deprecation_warning=deprecation,
            storage_api_version=storage_api_version)
        out.append(Kind(
            group=group, version=vname, kind=accepted["kind"], plural=accepted["plural"],
            singular=accepted.get("singular") or accepted["kind"].lower(),
            namespaced=spec["scope"] == "Namespaced", short_names=tuple(accepted.get("shortNames") or ()),
            categories=tuple(accepted.get("categories") or ()), verbs=_ALL_VERBS, subresources=tuple(subs),
            fields=fields, has_status=status_on, storage=vname == storage, custom=custom))
    return out

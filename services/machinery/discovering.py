"""What an apiserver serves, as `Kind`s: aggregated discovery read the way controllers read it.

The garbage collector and the namespace controller act on every resource the server has,
custom resources included, so they cannot use a fixed table: they ask the server
(`discover`), as upstream's controllers ask discovery, and get one `Kind` per resource at its
preferred version. Built-in resources come back as the `KINDS` singletons (so that code
comparing kinds by identity keeps working); the others as new `Kind`s built from their
discovery entries.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.model.kinds import KINDS, Kind, Subresource

AGGREGATED_V2: Final = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"

_BUILTIN: Final = {(k.group, k.version, k.plural): k for k in KINDS}


async def discover(client: ApiClient) -> list[Kind]:
    """Every resource the server serves, at its group's preferred version (the first listed)."""
    out: list[Kind] = []
    for path in ("/api", "/apis"):
        doc = await client.request("GET", path, accept=AGGREGATED_V2)
        for group_doc in (doc or {}).get("items") or []:
            group = str((group_doc.get("metadata") or {}).get("name") or "")
            versions = group_doc.get("versions") or []
            if versions:
                out.extend(_kinds_of(group, versions[0]))
    return out


def _kinds_of(group: str, version_doc: dict[str, Any]) -> Iterable[Kind]:
    version = str(version_doc.get("version") or "")
    for r in version_doc.get("resources") or []:
        plural = str(r.get("resource") or "")
        builtin = _BUILTIN.get((group, version, plural))
        if builtin is not None:
            yield builtin
            continue
        response = r.get("responseKind") or {}
        subresources = tuple(
            Subresource(name=str(s.get("subresource")), kind=str((s.get("responseKind") or {}).get("kind") or ""),
                        verbs=tuple(s.get("verbs") or ()))
            for s in r.get("subresources") or [])
        yield Kind(group=group, version=version, kind=str(response.get("kind") or ""), plural=plural,
                   singular=str(r.get("singularResource") or ""), namespaced=r.get("scope") == "Namespaced",
                   short_names=tuple(r.get("shortNames") or ()), categories=tuple(r.get("categories") or ()),
                   verbs=tuple(r.get("verbs") or ()), subresources=subresources,
                   has_status=any(s.name == "status" for s in subresources))

"""Discovery documents: `/version`, `/api`, `/apis`, `/apis/{g}`, `/api/v1`, `/apis/{g}/{v}`.

Every document is generated from the apiserver's `KindTable` (`Discovery`), never hand-listed, so a
built-in kind added to `KINDS`, or a custom resource definition being served, is in discovery at once.

What clients depend on (kubectl 1.27-1.33, client-go, the Python clients):

* Legacy discovery is the baseline every client understands: `/api` is `APIVersions`,
  `/apis` is `APIGroupList`, and each group/version is an `APIResourceList`. The
  group/version lists are served even when aggregated discovery is, because `kubectl drain`
  always reads `/api/v1` to find `pods/eviction`.
* Resource entries carry `shortNames` (`po`, `no`, `deploy`...), `categories` (`all` drives
  `kubectl get all`) and `verbs` (`watch` for `-w`, `list` for `get`).
* Subresources are entries named `plural/sub`. Those whose kind lives in another group name
  it: `pods/eviction` is `policy/v1 Eviction` (without it drain falls back to
  policy/v1beta1), `deployments/scale` is `autoscaling/v1 Scale` (kubectl scale, which
  resolves the Scale kind from this entry alone).
* Only group/versions that serve at least one resource are listed (`Discovery.served_group_versions`):
  client-go fails legacy discovery ("received empty response for: autoscaling/v1") on an
  empty `APIResourceList`. policy/v1 is listed because PodDisruptionBudgets live there;
  autoscaling/v1, which only the scale subresource names, is not.
* Aggregated discovery (`apidiscovery.k8s.io` `v2` asked for by 1.30+, `v2beta1` by
  1.27-1.29) is served only when the Accept header asks for it, answered with the exact
  media type as Content-Type (`aggregated_media_type`). `/api` then holds only the core
  group and `/apis` every other group; client-go uses aggregated documents only when both
  roots returned them.
* `/version` reports v1.30.0 (see `version_info`).

`parse_accept` is the small Accept-header parser that discovery and Table negotiation share.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable
from typing import Any, Final, NamedTuple, TypeVar

from kubemesh.services.model.kinds import Kind, KindTable, Obj, Subresource

T = TypeVar("T")
_KUBE_VERSION: Final = re.compile(r"v(\d+)(?:(alpha|beta)(\d+))?")

SERVER_MAJOR: Final = "1"
SERVER_MINOR: Final = "30"
SERVER_VERSION: Final = f"v{SERVER_MAJOR}.{SERVER_MINOR}.0"
"""The Kubernetes release whose API this server speaks (OpenAPI documents report it too)."""
GIT_VERSION: Final = f"{SERVER_VERSION}-kubemesh"

AGGREGATED_V2: Final = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
AGGREGATED_V2BETA1: Final = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
_AGGREGATED: Final = {"v2": AGGREGATED_V2, "v2beta1": AGGREGATED_V2BETA1}


# ---------------------------------------------------------------------------------------------
# Accept header parsing (shared with Table negotiation).


class MediaRange(NamedTuple):
    """One entry of an Accept header: `type/subtype;param=value;...`."""

    type: str
    subtype: str
    params: dict[str, str]
    q: float

    @property
    def mime(self) -> str:
        """`type/subtype`, lower case."""
        return f"{self.type}/{self.subtype}"

    def is_plain_json(self) -> bool:
        """Whether this range accepts an ordinary JSON document (`application/json`, `*/*`...)."""
        if self.mime not in ("application/json", "application/*", "*/*"):
            return False
        return "as" not in self.params


def parse_accept(accept: str | None) -> list[MediaRange]:
    """The media ranges of an Accept header, most preferred first (q=0 entries dropped).

    Order among equal `q` is the client's order, which is how client-go states its
    preference (aggregated v2, then v2beta1, then plain JSON).
    """
    ranges: list[MediaRange] = []
    for raw in (accept or "").split(","):
        parts = [p.strip() for p in raw.split(";")]
        mime = parts[0].lower()
        if "/" not in mime:
            continue
        type_, subtype = (s.strip() for s in mime.split("/", 1))
        params: dict[str, str] = {}
        for part in parts[1:]:
            key, sep, value = part.partition("=")
            if sep:
                params[key.strip().lower()] = value.strip().strip('"')
        try:
            q = float(params.pop("q", "1"))
        except ValueError:
            q = 1.0
        if q > 0:
            ranges.append(MediaRange(type_, subtype, params, q))
    ranges.sort(key=lambda r: -r.q)  # stable: ties keep the client's order
    return ranges


# ---------------------------------------------------------------------------------------------
# /version


def version_info() -> Obj:
    """`GET /version`: a `version.Info` for Kubernetes v1.30.0 (`gitVersion` v1.30.0-kubemesh).

    kubectl warns when client and server minor versions differ by more than one. Minor 30
    is the middle of the supported clients 1.27-1.33: 1.29, 1.30 and 1.31 print no
    warning, and no client is more than three minors away (with 1.31, 1.27 would be four
    away), so the worst warning is as small as it can be.
    """
    return _version_info()


@functools.cache
def _version_info() -> Obj:
    return {
        "major": SERVER_MAJOR,
        "minor": SERVER_MINOR,
        "gitVersion": GIT_VERSION,
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2024-04-17T17:27:03Z",
        "goVersion": "go1.22.2",
        "compiler": "gc",
        "platform": "linux/amd64",
    }


# ---------------------------------------------------------------------------------------------
# The documents of one kind table.


def version_priority(version: str) -> tuple[int, int, int]:
    """Kubernetes' version order, highest first when sorted: v1 > v1beta2 > v1beta1 > v1alpha1 > other.

    A custom resource's preferred version is its highest by this order (as upstream sorts them).
    """
    m = _KUBE_VERSION.fullmatch(version)
    if m is None:
        return (3, 0, 0)
    major, stage, minor = int(m.group(1)), m.group(2), int(m.group(3) or 0)
    rank = {"": 0, "beta": 1, "alpha": 2}[stage or ""]
    return (rank, -major, -minor)


class Discovery:
    """The discovery documents of one apiserver's `KindTable`, rebuilt when the table changes.

    Each document is built once per table generation and the same dict returned to every
    caller until the table changes (a custom resource definition is served or removed):
    callers serialise it and must not mutate it.
    """

    def __init__(self, kinds: KindTable, *, server_address: str) -> None:
        self.kinds = kinds
        self.server_address = server_address
        self._generation = -1
        self._memo: dict[tuple[str, ...], Any] = {}

    def _cached(self, key: tuple[str, ...], build: Callable[[], T]) -> T:
        if self._generation != self.kinds.generation:
            self._memo.clear()
            self._generation = self.kinds.generation
        if key not in self._memo:
            self._memo[key] = build()
        value: T = self._memo[key]
        return value

    def served_group_versions(self) -> dict[str, tuple[str, ...]]:
        """Every group (core as "") with the versions that serve at least one kind, preferred first."""
        def build() -> dict[str, tuple[str, ...]]:
            out: dict[str, tuple[str, ...]] = {}
            for group, versions in self.kinds.group_versions().items():
                served = [v for v in versions if self._kinds_in(group, v)]
                if not served:
                    continue
                # Built-in groups keep the table's order; a group with several versions (a custom
                # resource's) lists the preferred one first, as upstream does.
                out[group] = tuple(sorted(served, key=version_priority)) if len(served) > 1 else tuple(served)
            return out
        return self._cached(("served",), build)

    def _kinds_in(self, group: str, version: str) -> list[Kind]:
        return [k for k in self.kinds.all() if k.group == group and k.version == version]

    def _named_groups(self) -> list[str]:
        return [g for g in self.served_group_versions() if g]

    def _group_doc(self, group: str) -> Obj:
        versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in self.served_group_versions()[group]]
        return {"name": group, "versions": versions, "preferredVersion": dict(versions[0])}

    def api_versions(self) -> Obj:
        """`GET /api`: the `APIVersions` of the core group, reachable at the server's address."""
        return self._cached(("api",), lambda: {
            "kind": "APIVersions",
            "versions": list(self.served_group_versions().get("", ())),
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": self.server_address}],
        })

    def api_group_list(self) -> Obj:
        """`GET /apis`: the `APIGroupList` of every named group (including policy and autoscaling)."""
        return self._cached(("apis",), lambda: {"kind": "APIGroupList", "apiVersion": "v1",
                                                "groups": [self._group_doc(g) for g in self._named_groups()]})

    def api_group(self, group: str) -> Obj | None:
        """`GET /apis/{group}`: the `APIGroup`, or None if the group is not served."""
        if not group or group not in self.served_group_versions():
            return None
        return self._cached(("group", group), lambda: {"kind": "APIGroup", "apiVersion": "v1",
                                                       **self._group_doc(group)})

    def api_resource_list(self, group: str, version: str) -> Obj | None:
        """`GET /api/v1` or `GET /apis/{group}/{version}`: the `APIResourceList`, or None if not served.

        Resources and their subresources (`pods/eviction`, `pods/binding`, `*/status`,
        `deployments/scale`...) are listed sorted by name, as the real apiserver lists them.
        """
        if version not in self.served_group_versions().get(group, ()):
            return None

        def build() -> Obj:
            resources: list[Obj] = []
            for kind in self._kinds_in(group, version):
                resources.append(_resource_entry(kind))
                resources.extend(_subresource_entry(kind, sub) for sub in kind.subresources)
            resources.sort(key=lambda r: str(r["name"]))
            return {"kind": "APIResourceList", "apiVersion": "v1",
                    "groupVersion": f"{group}/{version}" if group else version, "resources": resources}
        return self._cached(("resources", group, version), build)

    def aggregated(self, *, core: bool, media_type: str) -> Obj:
        """The `APIGroupDiscoveryList` for `/api` (core=True) or `/apis` (core=False).

        `media_type` is what `aggregated_media_type` returned; it picks the document's
        `apiVersion` (`apidiscovery.k8s.io/v2` or `/v2beta1`, otherwise identical).
        Raises ValueError for any other media type.
        """
        for version, mt in _AGGREGATED.items():
            if mt == media_type:
                build = functools.partial(self._aggregated, core, version)
                return self._cached(("aggregated", str(core), version), build)
        raise ValueError(f"not an aggregated discovery media type: {media_type!r}")

    def _aggregated_group(self, group: str) -> Obj:
        versions: list[Obj] = []
        for version in self.served_group_versions()[group]:
            resources = sorted((_aggregated_resource(k) for k in self._kinds_in(group, version)),
                               key=lambda r: str(r["resource"]))
            versions.append({"version": version, "resources": resources, "freshness": "Current"})
        return {"metadata": {"name": group}, "versions": versions}

    def _aggregated(self, core: bool, version: str) -> Obj:
        groups: Iterable[str] = [""] if core else self._named_groups()
        return {"kind": "APIGroupDiscoveryList", "apiVersion": f"apidiscovery.k8s.io/{version}", "metadata": {},
                "items": [self._aggregated_group(g) for g in groups]}


def _resource_entry(kind: Kind) -> Obj:
    entry: Obj = {
        "name": kind.plural,
        "singularName": kind.singular,
        "namespaced": kind.namespaced,
        "kind": kind.kind,
        "verbs": sorted(kind.verbs),
    }
    if kind.short_names:
        entry["shortNames"] = list(kind.short_names)
    if kind.categories:
        entry["categories"] = list(kind.categories)
    return entry


def _subresource_entry(kind: Kind, sub: Subresource) -> Obj:
    entry: Obj = {"name": f"{kind.plural}/{sub.name}", "singularName": "", "namespaced": kind.namespaced}
    if sub.group is not None:
        entry["group"] = sub.group
        entry["version"] = sub.version or kind.version
    entry["kind"] = sub.kind
    entry["verbs"] = sorted(sub.verbs)
    return entry


def _response_kind(group: str, version: str, kind: str) -> Obj:
    return {"group": group, "version": version, "kind": kind}


def _aggregated_resource(kind: Kind) -> Obj:
    entry: Obj = {
        "resource": kind.plural,
        "responseKind": _response_kind(kind.group, kind.version, kind.kind),
        "scope": "Namespaced" if kind.namespaced else "Cluster",
        "singularResource": kind.singular,
        "verbs": sorted(kind.verbs),
    }
    if kind.short_names:
        entry["shortNames"] = list(kind.short_names)
    if kind.categories:
        entry["categories"] = list(kind.categories)
    if kind.subresources:
        entry["subresources"] = [
            {
                "subresource": sub.name,
                "responseKind": _response_kind(
                    kind.group if sub.group is None else sub.group, sub.version or kind.version, sub.kind
                ),
                "verbs": sorted(sub.verbs),
            }
            for sub in sorted(kind.subresources, key=lambda s: s.name)
        ]
    return entry


def aggregated_media_type(accept: str | None) -> str | None:
    """The Content-Type to answer `/api` or `/apis` with, if the Accept header asks for aggregated discovery.

    Returns `AGGREGATED_V2` or `AGGREGATED_V2BETA1` (the client's most preferred of the two),
    or None when the client prefers a plain JSON document (legacy discovery) or did not ask.
    Aggregated forms we do not serve (protobuf) are skipped.
    """
    for r in parse_accept(accept):
        if r.is_plain_json():
            return None
        if (
            r.mime == "application/json"
            and r.params.get("g") == "apidiscovery.k8s.io"
            and r.params.get("as") == "APIGroupDiscoveryList"
            and r.params.get("v") in _AGGREGATED
        ):
            return _AGGREGATED[r.params["v"]]
    return None

"""The discovery and OpenAPI documents of the built-in kinds, for tests that inspect them directly.

One `Discovery` and one `OpenApi` over a fresh `KindTable` (built-in kinds only), and their
documents under short names.
"""

from __future__ import annotations

from kubemesh.apiserver.discovery import Discovery
from kubemesh.apiserver.openapi import OpenApi
from kubemesh.services.model.kinds import KindTable, Obj

DISCOVERY = Discovery(KindTable(), server_address="127.0.0.1:6443")
OPENAPI = OpenApi(DISCOVERY)


def api_versions(*, server_address: str) -> Obj:
    """`GET /api` as a server at `server_address` answers it."""
    return Discovery(DISCOVERY.kinds, server_address=server_address).api_versions()


def aggregated_discovery(*, core: bool, media_type: str) -> Obj:
    """`GET /api` (core) or `/apis` in an aggregated discovery media type."""
    return DISCOVERY.aggregated(core=core, media_type=media_type)


def served_group_versions() -> dict[str, tuple[str, ...]]:
    """Every served group with its versions, preferred first."""
    return DISCOVERY.served_group_versions()


api_group = DISCOVERY.api_group
api_group_list = DISCOVERY.api_group_list
api_resource_list = DISCOVERY.api_resource_list
openapi_v2_protobuf = OPENAPI.v2_protobuf
openapi_v3_document = OPENAPI.v3_document
openapi_v3_index = OPENAPI.v3_index

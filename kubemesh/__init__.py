"""kubemesh: the Kubernetes control plane as an asyncio microservice mesh.

What a user imports, all from here (names load on first use, so importing `kubemesh` costs
nothing for a component process that only needs one subpackage)::

    from kubemesh import Mesh, MeshSpec, PODS

    async with Mesh(MeshSpec(nodes=3, clock_rate=60)) as mesh:
        async with mesh.client() as client:
            pods = await client.list(PODS, namespace="default")
        async with mesh.chaos.power_off("node-1"):
            ...

* running a mesh: `Mesh`, `MeshSpec`, `MeshError`; reaching one that runs already (a state
  folder, a kubeconfig, the compose stack): `MeshEndpoint`;
* the API: `ApiClient` and its errors (`ApiError`, `NotFoundError`, `ConflictError`, ...), the
  kinds (`Kind`, `KINDS`, `PODS`, `NODES`, ...);
* chaos: `Chaos`, `FaultContext`, and the triggers `delivered` and `written`;
* the history: `History`;
* what the pytest fixtures hand out: `KubemeshCluster`, `Kubectl`, `KubectlError`, `MeshRequest`.

The packages below (`kubemesh.services`, `kubemesh.apiserver`, `kubemesh.kubelet`,
`kubemesh.controller_manager`, `kubemesh.scheduler`, `kubemesh.scenarios`) are the
implementation; docs/design.md says what stands on what.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any


def _version() -> str:
    # importlib.metadata costs every process that imports kubemesh some 30-100 ms at start-up
    # (it scans the installed distributions): read only when `kubemesh.__version__` is.
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415

    try:
        return version("kubemesh")
    except PackageNotFoundError:  # pragma: no cover - running from a tree that was never installed
        return "0.0.0"


if TYPE_CHECKING:
    from kubemesh.services.machinery.client import (
        AlreadyExistsError,
        ApiClient,
        ApiError,
        ConflictError,
        GoneError,
        InvalidError,
        NotFoundError,
    )
    from kubemesh.services.mesh.chaos_client import Chaos, FaultContext, delivered, written
    from kubemesh.services.mesh.endpoint import History, MeshEndpoint, MeshError
    from kubemesh.services.mesh.kubectl import Kubectl, KubectlError
    from kubemesh.services.mesh.launching import Mesh, MeshSpec
    from kubemesh.services.model.kinds import (
        CONFIGMAPS,
        DAEMONSETS,
        DEPLOYMENTS,
        EVENTS,
        KINDS,
        LEASES,
        NAMESPACES,
        NODES,
        PODDISRUPTIONBUDGETS,
        PODS,
        PRIORITYCLASSES,
        REPLICASETS,
        SERVICES,
        Kind,
        Obj,
    )
    from kubemesh.services.tools.testing import KubemeshCluster, MeshRequest

_EXPORTS: dict[str, str] = {
    **dict.fromkeys(("AlreadyExistsError", "ApiClient", "ApiError", "ConflictError", "GoneError", "InvalidError",
                     "NotFoundError"), "kubemesh.services.machinery.client"),
    **dict.fromkeys(("Chaos", "FaultContext", "delivered", "written"), "kubemesh.services.mesh.chaos_client"),
    **dict.fromkeys(("Mesh", "MeshSpec"), "kubemesh.services.mesh.launching"),
    **dict.fromkeys(("History", "MeshEndpoint", "MeshError"), "kubemesh.services.mesh.endpoint"),
    **dict.fromkeys(("Kubectl", "KubectlError"), "kubemesh.services.mesh.kubectl"),
    **dict.fromkeys(("KubemeshCluster", "MeshRequest"), "kubemesh.services.tools.testing"),
    **dict.fromkeys(("CONFIGMAPS", "DAEMONSETS", "DEPLOYMENTS", "EVENTS", "KINDS", "LEASES", "NAMESPACES", "NODES",
                     "PODDISRUPTIONBUDGETS", "PODS", "PRIORITYCLASSES", "REPLICASETS", "SERVICES", "Kind", "Obj"),
                    "kubemesh.services.model.kinds"),
}

__all__ = [  # noqa: RUF022 - grouped as _EXPORTS is
    "__version__",
    "AlreadyExistsError", "ApiClient", "ApiError", "ConflictError", "GoneError", "InvalidError", "NotFoundError",
    "Chaos", "FaultContext", "delivered", "written",
    "History", "MeshEndpoint", "MeshError",
    "Kubectl", "KubectlError",
    "Mesh", "MeshSpec",
    "KubemeshCluster", "MeshRequest",
    "CONFIGMAPS", "DAEMONSETS", "DEPLOYMENTS", "EVENTS", "KINDS", "LEASES", "NAMESPACES", "NODES",
    "PODDISRUPTIONBUDGETS", "PODS", "PRIORITYCLASSES", "REPLICASETS", "SERVICES", "Kind", "Obj",
]


def __getattr__(name: str) -> Any:
    """Load a public name from the module that defines it, on first use (PEP 562)."""
    if name == "__version__":
        value: Any = _version()
        globals()[name] = value
        return value
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kubemesh' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})

"""Every controller the controller-manager can run, in start order: one entry per controller.

`--controllers` names them (all by default); each entry is the `CONTROLLER` spec at the end of
its module (`kubemesh.controller_manager.controllers` says what a spec holds).
"""

from __future__ import annotations

from typing import Final

from kubemesh.controller_manager import (
    clusterroleaggregation,
    cronjob,
    daemonset,
    deployment,
    endpoints,
    endpointslices,
    garbagecollector,
    job,
    namespace,
    nodelifecycle,
    podgc,
    replicaset,
    statefulset,
    tainteviction,
    ttlafterfinished,
)
from kubemesh.controller_manager.controllers import ControllerSpec

CONTROLLERS: Final[tuple[ControllerSpec, ...]] = (
    nodelifecycle.CONTROLLER,
    tainteviction.CONTROLLER,
    replicaset.CONTROLLER,
    replicaset.RC_CONTROLLER,
    deployment.CONTROLLER,
    garbagecollector.CONTROLLER,
    podgc.CONTROLLER,
    daemonset.CONTROLLER,
    namespace.CONTROLLER,
    job.CONTROLLER,
    cronjob.CONTROLLER,
    ttlafterfinished.CONTROLLER,
    statefulset.CONTROLLER,
    endpoints.CONTROLLER,
    endpointslices.CONTROLLER,
    clusterroleaggregation.CONTROLLER,
)

ALL_CONTROLLERS: Final[tuple[str, ...]] = tuple(spec.name for spec in CONTROLLERS)
"""Every controller's `--controllers` name."""

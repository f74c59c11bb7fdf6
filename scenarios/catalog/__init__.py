"""The scenario catalog: one module per scenario, in the order `kubemesh scenario list` shows."""

from __future__ import annotations

from typing import Final

from kubemesh.scenarios.catalog.force_delete_zombie import ForceDeleteZombie
from kubemesh.scenarios.catalog.ghost_node_affinity import GhostNodeAffinity
from kubemesh.scenarios.catalog.lagging_apiserver_restart import LaggingApiserverRestart
from kubemesh.scenarios.catalog.large_cluster_threshold import LargeClusterThreshold
from kubemesh.scenarios.catalog.missed_node_delete import MissedNodeDelete
from kubemesh.scenarios.catalog.node_heartbeat_eviction import NodeHeartbeatEviction
from kubemesh.scenarios.catalog.node_pressure_predicates import NodePressurePredicates
from kubemesh.scenarios.catalog.nominated_node_race import NominatedNodeRace
from kubemesh.scenarios.catalog.pre_lease_heartbeat import PreLeaseHeartbeat
from kubemesh.scenarios.catalog.ready_false_eviction import ReadyFalseEviction
from kubemesh.scenarios.catalog.recreate_stuck_terminating import RecreateStuckTerminating
from kubemesh.scenarios.catalog.stale_update_unnominates import StaleUpdateUnnominates
from kubemesh.scenarios.catalog.statefulset_stuck_terminating import StatefulSetStuckTerminating
from kubemesh.scenarios.catalog.zone_disruption import ZoneDisruption
from kubemesh.scenarios.framework import Scenario

SCENARIOS: Final[tuple[Scenario, ...]] = (
    GhostNodeAffinity(),
    MissedNodeDelete(),
    NominatedNodeRace(),
    StaleUpdateUnnominates(),
    NodeHeartbeatEviction(),
    RecreateStuckTerminating(),
    StatefulSetStuckTerminating(),
    ForceDeleteZombie(),
    NodePressurePredicates(),
    ZoneDisruption(),
    PreLeaseHeartbeat(),
    ReadyFalseEviction(),
    LargeClusterThreshold(),
    LaggingApiserverRestart(),
)

"""The scenario catalog: one module per scenario, in the order `kubemesh scenario list` shows."""

from __future__ import annotations

from typing import Final

from scenarios.catalog.force_delete_zombie import ForceDeleteZombie
from scenarios.catalog.ghost_node_affinity import GhostNodeAffinity
from scenarios.catalog.missed_node_delete import MissedNodeDelete
from scenarios.catalog.node_heartbeat_eviction import NodeHeartbeatEviction
from scenarios.catalog.node_pressure_predicates import NodePressurePredicates
from scenarios.catalog.nominated_node_race import NominatedNodeRace
from scenarios.catalog.recreate_stuck_terminating import RecreateStuckTerminating
from scenarios.catalog.stale_update_unnominates import StaleUpdateUnnominates
from scenarios.catalog.zone_disruption import ZoneDisruption
from scenarios.framework import Scenario

SCENARIOS: Final[tuple[Scenario, ...]] = (
    GhostNodeAffinity(),
    MissedNodeDelete(),
    NominatedNodeRace(),
    StaleUpdateUnnominates(),
    NodeHeartbeatEviction(),
    RecreateStuckTerminating(),
    ForceDeleteZombie(),
    NodePressurePredicates(),
    ZoneDisruption(),
)

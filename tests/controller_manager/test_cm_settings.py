"""Flags, profiles and their defaults."""

from __future__ import annotations

import argparse

import pytest

from kubemesh.controller_manager.catalogue import ALL_CONTROLLERS, CONTROLLERS
from kubemesh.controller_manager.settings import (
    from_namespace,
    parse_controllers,
    parse_flags,
    profile_bugs,
)


def parse(*argv: str) -> argparse.Namespace:
    return parse_flags(argv)


def test_defaults_current_profile() -> None:
    s = from_namespace(parse(), known=ALL_CONTROLLERS)
    nl = s.node_lifecycle
    assert (nl.node_monitor_period, nl.node_monitor_grace_period, nl.node_startup_grace_period) == (5, 50, 60)
    assert (nl.pod_eviction_timeout, nl.node_eviction_rate, nl.secondary_node_eviction_rate) == (300, 0.1, 0.01)
    assert (nl.large_cluster_size_threshold, nl.unhealthy_zone_threshold) == (50, 0.55)
    assert s.controllers == ALL_CONTROLLERS and not s.leader_elect
    assert all(s.enabled(name) for name in ALL_CONTROLLERS)


@pytest.mark.parametrize(("profile", "grace", "bugs"), [
    ("1.7", 40, {"legacy-pod-eviction", "no-out-of-service-gc"}),
    ("1.8", 40, {"legacy-pod-eviction", "no-out-of-service-gc"}),
    ("1.13", 40, {"no-out-of-service-gc"}),
    ("1.15", 40, {"no-out-of-service-gc"}),
    ("1.28", 40, set()),
    ("current", 50, set()),
])
def test_profiles(profile: str, grace: float, bugs: set[str]) -> None:
    s = from_namespace(parse("--profile", profile), known=ALL_CONTROLLERS)
    assert s.node_lifecycle.node_monitor_grace_period == grace
    assert profile_bugs(s.profile) == bugs
    alpha = profile in ("1.7", "1.8")
    assert s.node_lifecycle.not_ready_taint_key == ("node.alpha.kubernetes.io/notReady" if alpha
                                                    else "node.kubernetes.io/not-ready")


def test_explicit_flags_override_profile() -> None:
    s = from_namespace(parse("--profile", "1.7", "--node-monitor-grace-period", "1m", "--pod-eviction-timeout", "30s",
                             "--controllers", "*,-podgc", "--leader-elect"), known=ALL_CONTROLLERS)
    assert s.node_lifecycle.node_monitor_grace_period == 60
    assert s.node_lifecycle.pod_eviction_timeout == 30
    assert s.controllers is not None and "podgc" not in s.controllers and s.leader_elect
    assert not s.enabled("podgc") and s.enabled("node-lifecycle")


def test_unknown_controller_rejected() -> None:
    with pytest.raises(ValueError, match="unknown controller"):
        parse_controllers("node-lifecycle,bogus", known=ALL_CONTROLLERS)


def test_catalogue_names_are_unique_and_every_spec_declares_its_caches() -> None:
    assert len(set(ALL_CONTROLLERS)) == len(ALL_CONTROLLERS)
    for spec in CONTROLLERS:
        assert spec.informers, spec.name

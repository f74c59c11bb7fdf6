"""Version profiles: the table, how every component applies it, `-NAME`, and `kubemesh profiles`."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

import pytest

from kubemesh.apiserver.__main__ import parse_args as apiserver_args
from kubemesh.apiserver.admission import TolerationDefaults, add_default_tolerations
from kubemesh.controller_manager.settings import add_arguments as cm_arguments
from kubemesh.kubelet.running import add_arguments as kubelet_arguments
from kubemesh.kubelet.running import settings_from_args as kubelet_settings
from kubemesh.scheduler.running import add_arguments as scheduler_arguments
from kubemesh.scheduler.running import settings_from_args as scheduler_settings
from kubemesh.services.mesh.launching import MeshSpec
from kubemesh.services.model import profiles
from kubemesh.services.model.bugs import BY_NAME, UnknownBugError, parse_bugs
from kubemesh.services.process.component import common_arguments
from kubemesh.services.tools import cli

COMPONENT_FLAGS: dict[str, Callable[[argparse.ArgumentParser], None]] = {
    "controller_manager": cm_arguments, "kubelet": kubelet_arguments, "scheduler": scheduler_arguments}


def component_parser(component: str) -> argparse.ArgumentParser:
    """A component's parser as `component.main` builds it (its own flags, then the common ones)."""
    p = argparse.ArgumentParser()
    COMPONENT_FLAGS[component](p)
    common_arguments(p)
    return p


def parsed(component: str, *argv: str) -> argparse.Namespace:
    """What `component.main` parses: the profile's defaults applied, explicit flags winning."""
    p = component_parser(component)
    ns = p.parse_args(list(argv))
    profiles.apply_defaults(p, component=component, profile=ns.profile)
    return p.parse_args(list(argv))


@pytest.mark.parametrize("profile", profiles.PROFILES)
@pytest.mark.parametrize("component", sorted(COMPONENT_FLAGS))
def test_every_flag_a_profile_sets_exists_and_parses(profile: str, component: str) -> None:
    ns = parsed(component, "--profile", profile)
    for flag, value in profiles.resolve(profile).flag_defaults(component).items():
        assert getattr(ns, flag.replace("-", "_")) is not None, (flag, value)


@pytest.mark.parametrize("profile", profiles.PROFILES)
def test_apiserver_takes_every_profile(profile: str) -> None:
    s = apiserver_args(["--profile", profile])
    alpha = profile in ("1.7", "1.8")
    assert s.profile == profile
    assert s.tolerations.not_ready_key == (profiles.ALPHA_NOT_READY if alpha else profiles.GA_NOT_READY)
    assert s.tolerations.unreachable_key == (profiles.ALPHA_UNREACHABLE if alpha else profiles.GA_UNREACHABLE)


def test_table_names_known_switches_and_current_turns_every_one_off() -> None:
    for rel in profiles.RELEASES:
        for change in rel.changes:
            if isinstance(change, profiles.Switch):
                assert change.name in BY_NAME, change.name
            assert change.source, change
    assert profiles.resolve("current").bugs() == frozenset()
    assert profiles.resolve("1.7").bugs() == {"legacy-pod-eviction", "no-node-lease", "no-out-of-service-gc",
                                              "ghost-node-affinity-error", "keep-missed-node", "pressure-predicates"}
    assert profiles.resolve("1.13").bugs("scheduler") == {"nominate-after-patch", "stale-update-unnominates"}
    assert profiles.resolve("1.14").bugs("scheduler") == {"stale-update-unnominates"}
    assert profiles.resolve("1.15").bugs() == {"no-out-of-service-gc"}
    with pytest.raises(profiles.UnknownProfileError):
        profiles.resolve("1.99")


def test_a_release_inherits_and_overrides_defaults() -> None:
    assert profiles.resolve("1.7").flag_defaults("controller_manager")["node-monitor-grace-period"] == "40s"
    assert profiles.resolve("1.28").flag_defaults("controller_manager")["node-monitor-grace-period"] == "40s"
    assert profiles.resolve("current").flag_defaults("controller_manager")["node-monitor-grace-period"] == "50s"
    assert profiles.resolve("1.8").flag_defaults("scheduler")["pod-max-backoff-seconds"] == "60"
    assert profiles.resolve("current").flag_defaults("scheduler")["pod-max-backoff-seconds"] == "10"


def test_explicit_flags_win_over_the_profile() -> None:
    s = scheduler_settings(parsed("scheduler", "--profile", "1.7"))
    assert (s.percentage_of_nodes_to_score, s.pod_max_backoff, s.assumed_pod_ttl) == (100, 60.0, 30.0)
    s = scheduler_settings(parsed("scheduler", "--profile", "1.7", "--pod-max-backoff-seconds", "5"))
    assert s.pod_max_backoff == 5.0
    k = kubelet_settings(parsed("kubelet", "--profile", "1.7", "--node-status-update-frequency", "4"))
    assert k.node_status_update_frequency == 4.0


def test_apply_defaults_refuses_a_flag_the_component_lacks() -> None:
    p = argparse.ArgumentParser()
    profiles.add_argument(p)
    with pytest.raises(LookupError, match="--node-monitor-grace-period"):
        profiles.apply_defaults(p, component="controller_manager", profile="1.7")


def test_profile_switches_join_and_minus_turns_one_off() -> None:
    on = profiles.resolve("1.7").bugs("controller_manager")
    assert parse_bugs(component="controller_manager", environ={}, profile=on) == on
    assert parse_bugs(component="controller_manager", cli=["-legacy-pod-eviction"], environ={},
                      profile=on) == {"no-out-of-service-gc"}
    assert parse_bugs(component="controller_manager", environ={"KUBEMESH_BUGS": "-no-out-of-service-gc"},
                      profile=on) == {"legacy-pod-eviction"}
    # A switch of another component is ignored, a typo is an error, with or without the minus.
    assert parse_bugs(component="kubelet", cli=["-legacy-pod-eviction"], environ={}) == frozenset()
    with pytest.raises(UnknownBugError):
        parse_bugs(component="kubelet", cli=["-no-such-bug"], environ={})


def test_mesh_spec_takes_a_profile_and_turned_off_switches() -> None:
    spec = MeshSpec(profile="1.7", bugs=("-legacy-pod-eviction",))
    assert spec.profile == "1.7"
    with pytest.raises(profiles.UnknownProfileError):
        MeshSpec(profile="1.99")


def test_default_tolerations_use_the_release_keys() -> None:
    spec: dict[str, Any] = {}
    add_default_tolerations(spec, TolerationDefaults(not_ready_key=profiles.ALPHA_NOT_READY,
                                                     unreachable_key=profiles.ALPHA_UNREACHABLE))
    assert [(t["key"], t["tolerationSeconds"]) for t in spec["tolerations"]] == [
        (profiles.ALPHA_NOT_READY, 300), (profiles.ALPHA_UNREACHABLE, 300)]


def test_kubemesh_profiles_lists_values_with_sources(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["profiles", "1.7"]) == 0
    out = capsys.readouterr().out
    assert "profile 1.7" in out and "--node-monitor-grace-period" in out and "40s" in out
    assert "switch legacy-pod-eviction" in out and "node.alpha.kubernetes.io/notReady" in out
    assert cli.main(["profiles", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["name"] for d in doc] == list(profiles.PROFILES)
    assert all(v["source"] for d in doc for v in (*d["defaults"], *d["switches"], *d["features"]))
    assert cli.main(["profiles", "1.99"]) == 2

"""The eviction manager's parts: emulated usage, signals, thresholds, grace periods, conditions, ranking.

The node-level behaviour (a node evicting from its signals and posting the conditions) is in
`test_kubelet_nodes.py`; the scenario `node-pressure-predicates` runs it on a real mesh.
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from kubemesh.kubelet.pressure import (
    EvictionManager,
    Observation,
    container_usage,
    eviction_message,
    observe,
    parse_duration,
    parse_grace_periods,
    parse_thresholds,
    pod_usage,
    rank_for_eviction,
)
from kubemesh.kubelet.running import add_arguments, settings_from_args
from kubemesh.kubelet.settings import KubeletSettings
from kubemesh.services.model.kinds import Obj

Mi = 1024 * 1024
DEFAULT = 64 * Mi


def pod(name: str, *, requests: dict[str, str] | None = None, usage: str | None = None, priority: int = 0,
        containers: int = 1, notes: dict[str, str] | None = None) -> Obj:
    annotations = dict(notes or {})
    if usage is not None:
        annotations["kubemesh.io/usage"] = usage
    spec: dict[str, Any] = {"priority": priority, "containers": [
        {"name": f"c{i}", "resources": {"requests": dict(requests or {})}} for i in range(containers)]}
    return {"metadata": {"name": name, "annotations": annotations}, "spec": spec}


def names(pods: list[Obj]) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


# -- usage -------------------------------------------------------------------------------------


def test_usage_defaults_pod_level_and_per_container() -> None:
    assert container_usage(pod("a", requests={"memory": "100Mi"}), default_container_memory=DEFAULT) == {
        "c0": {"memory": 100 * Mi, "disk": 0, "pids": 1}}
    assert pod_usage(pod("b"), "memory", default_container_memory=DEFAULT) == DEFAULT
    two = pod("c", containers=2, usage="memory=300Mi,disk=1Gi,pids=50")
    assert container_usage(two, default_container_memory=DEFAULT) == {
        "c0": {"memory": 300 * Mi, "disk": 1024 * Mi, "pids": 50}, "c1": {"memory": 0, "disk": 0, "pids": 0}}
    per = pod("d", containers=2, notes={"kubemesh.io/usage.c1": "memory=1Gi,pids=7"})
    assert pod_usage(per, "memory", default_container_memory=DEFAULT) == DEFAULT + 1024 * Mi
    assert pod_usage(per, "pids", default_container_memory=DEFAULT) == 8
    legacy = pod("e", notes={"kubemesh.io/memory-usage": "3Gi"})
    assert pod_usage(legacy, "memory", default_container_memory=DEFAULT) == 3 * 1024 * Mi
    # Malformed annotations count as absent.
    assert pod_usage(pod("f", usage="memory=lots"), "memory", default_container_memory=DEFAULT) == DEFAULT


def test_signals_are_capacity_minus_usage() -> None:
    obs = observe([pod("a", usage="memory=1Gi,disk=10Gi,pids=100"), pod("b")],
                  capacity={"memory": 4096 * Mi, "disk": 100 * 1024 * Mi, "pids": 1000},
                  default_container_memory=DEFAULT)
    assert obs["memory.available"] == Observation(available=4096 * Mi - 1024 * Mi - DEFAULT, capacity=4096 * Mi)
    assert obs["nodefs.available"].available == 90 * 1024 * Mi
    assert obs["pid.available"].available == 1000 - 101


# -- ranking -----------------------------------------------------------------------------------


def test_memory_ranking_exceeds_requests_then_priority_then_excess() -> None:
    guaranteed = pod("guaranteed", requests={"memory": "1Gi"})
    within = pod("within", requests={"memory": "1Gi"}, usage="memory=512Mi")
    over_small = pod("over-small", requests={"memory": "100Mi"}, usage="memory=200Mi")
    over_big = pod("over-big", requests={"memory": "100Mi"}, usage="memory=900Mi")
    over_important = pod("over-important", requests={"memory": "100Mi"}, usage="memory=3Gi", priority=1000)
    best_effort = pod("best-effort")
    ranked = rank_for_eviction([guaranteed, within, over_small, over_big, over_important, best_effort], "memory",
                               default_container_memory=DEFAULT)
    assert names(ranked) == ["over-big", "over-small", "best-effort", "over-important", "guaranteed", "within"]


def test_disk_and_pid_ranking() -> None:
    quiet = pod("quiet", usage="disk=1Gi")
    loud = pod("loud", usage="disk=5Gi")
    requested = pod("requested", requests={"ephemeral-storage": "10Gi"}, usage="disk=8Gi")
    assert names(rank_for_eviction([requested, quiet, loud], "disk", default_container_memory=DEFAULT)) == [
        "loud", "quiet", "requested"]
    many = pod("many", usage="pids=500")
    few = pod("few", usage="pids=5")
    vip = pod("vip", usage="pids=900", priority=10)
    assert names(rank_for_eviction([few, vip, many], "pids", default_container_memory=DEFAULT)) == [
        "many", "few", "vip"]


# -- thresholds --------------------------------------------------------------------------------


def test_threshold_and_grace_period_syntax() -> None:
    hard = parse_thresholds("memory.available<100Mi,nodefs.available<10%", hard=True)
    assert [(t.signal, t.value(1000 * Mi)) for t in hard] == [("memory.available", 100 * Mi),
                                                              ("nodefs.available", 100 * Mi)]
    assert parse_duration("1m30s") == 90 and parse_duration("2h") == 7200 and parse_duration("45") == 45
    grace = parse_grace_periods("memory.available=1m30s")
    soft = parse_thresholds("memory.available<1Gi", hard=False, grace_periods=grace)
    assert soft[0].grace_period == 90 and not soft[0].hard
    for bad in ("memory.available>1Gi", "cpu.available<1", "memory.available<110%",
                "memory.available<1Mi,memory.available<2Mi"):
        with pytest.raises(ValueError):
            parse_thresholds(bad, hard=True)
    with pytest.raises(ValueError, match="grace period"):
        parse_thresholds("memory.available<1Gi", hard=False, grace_periods={})
    with pytest.raises(ValueError):
        KubeletSettings(eviction_soft="memory.available<1Gi")  # no grace period
    assert [t.signal for t in KubeletSettings().eviction_thresholds()] == [
        "memory.available", "nodefs.available", "imagefs.available", "nodefs.inodesFree"]


def _obs(memory_available_mi: int) -> dict[str, Observation]:
    return {"memory.available": Observation(available=memory_available_mi * Mi, capacity=4096 * Mi),
            "nodefs.available": Observation(available=90, capacity=100),
            "pid.available": Observation(available=1000, capacity=1000)}


def test_hard_threshold_acts_at_once_and_the_condition_outlives_it() -> None:
    m = EvictionManager(thresholds=parse_thresholds("memory.available<100Mi", hard=True), transition_period=300)
    assert m.synchronize(now=0, observations=_obs(500)).conditions == frozenset()
    d = m.synchronize(now=10, observations=_obs(50))
    assert d.conditions == {"MemoryPressure"} and d.act_on is not None and d.act_on.signal == "memory.available"
    # Relieved: no more evictions, but MemoryPressure stays for the transition period.
    d = m.synchronize(now=20, observations=_obs(500))
    assert d.act_on is None and d.conditions == {"MemoryPressure"}
    assert m.synchronize(now=309, observations=_obs(500)).conditions == {"MemoryPressure"}
    assert m.synchronize(now=311, observations=_obs(500)).conditions == frozenset()


def test_soft_threshold_reports_pressure_at_once_and_evicts_after_its_grace_period() -> None:
    grace = parse_grace_periods("memory.available=1m")
    m = EvictionManager(thresholds=[*parse_thresholds("memory.available<100Mi", hard=True),
                                    *parse_thresholds("memory.available<1Gi", hard=False, grace_periods=grace)],
                        transition_period=0)
    d = m.synchronize(now=0, observations=_obs(600))
    assert d.conditions == {"MemoryPressure"} and d.act_on is None
    assert m.synchronize(now=50, observations=_obs(600)).act_on is None
    d = m.synchronize(now=60, observations=_obs(600))
    assert d.act_on is not None and not d.act_on.hard
    # Met again after a gap: the grace period starts over.
    assert m.synchronize(now=70, observations=_obs(2000)).conditions == frozenset()
    assert m.synchronize(now=80, observations=_obs(600)).act_on is None
    # A hard threshold acts first, whatever the soft ones say.
    d = m.synchronize(now=90, observations=_obs(50))
    assert d.act_on is not None and d.act_on.hard


def test_disk_and_pid_thresholds_give_their_conditions() -> None:
    m = EvictionManager(thresholds=parse_thresholds("nodefs.available<10%,pid.available<5%", hard=True),
                        transition_period=0)
    obs = {**_obs(2000), "nodefs.available": Observation(available=5, capacity=100),
           "pid.available": Observation(available=10, capacity=1000)}
    d = m.synchronize(now=0, observations=obs)
    assert d.conditions == {"DiskPressure", "PIDPressure"}
    assert d.act_on is not None and d.act_on.signal == "nodefs.available"


def test_eviction_message_in_upstreams_words() -> None:
    t = parse_thresholds("memory.available<100Mi", hard=True)[0]
    p = pod("bu", requests={"memory": "64Mi"}, usage="memory=600Mi")
    msg = eviction_message(resource="memory", threshold=t, observation=Observation(available=91244 * 1024,
                                                                                   capacity=4096 * Mi),
                           pod=p, default_container_memory=DEFAULT)
    assert msg == ("The node was low on resource: memory. Threshold quantity: 100Mi, available: 91244Ki. "
                   "Container c0 was using 600Mi, request is 64Mi, has larger consumption of memory. ")
    disk = parse_thresholds("nodefs.available<10%", hard=True)[0]
    msg = eviction_message(resource="ephemeral-storage", threshold=disk,
                           observation=Observation(available=1024, capacity=100 * 1024 * Mi),
                           pod=pod("d", usage="disk=2Gi"), default_container_memory=DEFAULT)
    assert msg.startswith("The node was low on resource: ephemeral-storage. Threshold quantity: 10737418240, "
                          "available: 1Ki. Container c0 was using 2048Mi, request is 0, ")


def test_kubelet_flags() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    args = parser.parse_args(["--eviction-hard", "memory.available<200Mi", "--eviction-soft", "memory.available<1Gi",
                              "--eviction-soft-grace-period", "memory.available=1m30s",
                              "--eviction-pressure-transition-period", "1m", "--max-pids", "1000"])
    s = settings_from_args(args)
    assert [(t.signal, t.text, t.hard, t.grace_period) for t in s.eviction_thresholds()] == [
        ("memory.available", "200Mi", True, 0.0), ("memory.available", "1Gi", False, 90.0)]
    assert s.eviction_pressure_transition_period == 60 and s.max_pids == 1000
    with pytest.raises(ValueError):
        settings_from_args(parser.parse_args(["--eviction-hard", "memory.available>1Gi"]))

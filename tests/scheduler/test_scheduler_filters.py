"""Filters, scores and preemption victim selection on hand-built NodeInfos."""

from __future__ import annotations

import random

import pytest
from schedkit import info, node, pod, term

from kubemesh.scheduler.caching import NodeInfo, SchedulerCache
from kubemesh.scheduler.filtering import (
    F_AFFINITY,
    F_ANTI,
    F_DISK_PRESSURE,
    F_EXISTING_ANTI,
    F_MEMORY_PRESSURE,
    F_NODE_AFFINITY,
    F_UNSCHEDULABLE,
    FitError,
    PodFilter,
    compute_affinity_state,
    find_feasible,
    num_feasible_nodes_to_find,
)
from kubemesh.scheduler.preempting import Candidate, eligible_to_preempt, find_candidate, pick_candidate
from kubemesh.scheduler.queueing import Nominator
from kubemesh.scheduler.scoring import compute_inter_pod_scores, score_nodes, select_host
from kubemesh.services.model.kinds import Obj
from kubemesh.services.model.podutil import tolerates


def ni_of(n: Obj, *pods: Obj) -> NodeInfo:
    ni = NodeInfo(n["metadata"]["name"], n)
    for p in pods:
        ni.add_pod(info(p))
    return ni


def check(p: Obj, n: Obj, *pods: Obj) -> object:
    return PodFilter(info(p)).check(ni_of(n, *pods))


def test_unschedulable_node() -> None:
    assert check(pod("a"), node("n", unschedulable=True)) is F_UNSCHEDULABLE
    tol = [{"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
    assert check(pod("a", tolerations=tol), node("n", unschedulable=True)) is None


def predicates(p: Obj, n: Obj) -> object:
    """The check under the bug switch `pressure-predicates` (the scheduler before TaintNodesByCondition)."""
    return PodFilter(info(p), pressure_predicates=True).check(ni_of(n))


def test_disk_and_pid_pressure_predicates_keep_every_pod_off() -> None:
    n = node("n", conditions={"DiskPressure": "True"})
    assert predicates(pod("be"), n) is F_DISK_PRESSURE
    assert predicates(pod("burstable", cpu="100m"), n) is F_DISK_PRESSURE
    pid = predicates(pod("burstable", cpu="100m"), node("n", conditions={"PIDPressure": "True"}))
    assert pid is not None and pid.reasons == ("node(s) had pid pressure",)  # type: ignore[attr-defined]


def test_memory_pressure_predicate_keeps_only_best_effort_off() -> None:
    n = node("n", conditions={"MemoryPressure": "True"})
    assert predicates(pod("be"), n) is F_MEMORY_PRESSURE
    assert predicates(pod("burstable", memory="10Mi"), n) is None


def test_conditions_alone_keep_no_pod_off_today() -> None:
    # Today the scheduler reads taints, not conditions (TaintNodesByCondition).
    for ctype in ("MemoryPressure", "DiskPressure", "PIDPressure"):
        assert check(pod("be"), node("n", conditions={ctype: "True"})) is None


def test_pressure_taints_from_controller_manager() -> None:
    mem_taint = node("n", taints=[{"key": "node.kubernetes.io/memory-pressure", "effect": "NoSchedule"}])
    f = check(pod("be"), mem_taint)
    assert f is not None and "untolerated taint {node.kubernetes.io/memory-pressure}" in f.reasons[0]  # type: ignore[attr-defined]
    # No implicit toleration for Burstable pods (PodTolerationRestriction is off by default) ...
    assert check(pod("burstable", cpu="1"), mem_taint) is not None
    tol = [{"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}]
    assert check(pod("burstable", cpu="1", tolerations=tol), mem_taint) is None
    disk_taint = node("n", taints=[{"key": "node.kubernetes.io/disk-pressure", "effect": "NoSchedule"}])
    assert check(pod("burstable", cpu="1"), disk_taint) is not None
    # ... while the predicates of the switch ignore the condition taints, which did not exist then.
    assert predicates(pod("burstable", cpu="1"), mem_taint) is None


def test_taints_and_tolerations() -> None:
    t = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
    n = node("n", taints=[t, {"key": "soft", "effect": "PreferNoSchedule"}])
    f = check(pod("a"), n)
    assert f is not None and f.reasons == ("node(s) had untolerated taint {dedicated: gpu}",)  # type: ignore[attr-defined]
    assert check(pod("a", tolerations=[{"key": "dedicated", "value": "gpu"}]), n) is None
    assert check(pod("a", tolerations=[{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}]), n) is None
    assert check(pod("a", tolerations=[{"key": "dedicated", "value": "cpu"}]), n) is not None
    assert tolerates([{"operator": "Exists"}], t)
    assert not tolerates([{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}], t)


def test_node_selector_and_affinity() -> None:
    n = node("n", labels={"disk": "ssd", "gen": "5"})
    assert check(pod("a", node_selector={"disk": "ssd"}), n) is None
    assert check(pod("a", node_selector={"disk": "hdd"}), n) is F_NODE_AFFINITY
    p = pod("a")
    p["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["6"]}]},
            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd", "nvme"]}]},
        ]}}}
    assert check(p, n) is None
    p["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"] = [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["m"]}]}]
    assert check(p, n) is F_NODE_AFFINITY


def test_resources_fit() -> None:
    n = node("n", cpu="2", memory="1Gi", pods=2)
    assert check(pod("a", cpu="1"), n, pod("x", cpu="1", node_name="n")) is None
    f = check(pod("a", cpu="1500m", memory="2Gi"), n, pod("x", cpu="1", node_name="n"))
    assert f is not None and f.reasons == ("Insufficient cpu", "Insufficient memory")  # type: ignore[attr-defined]
    f = check(pod("a"), n, pod("x", node_name="n"), pod("y", node_name="n"))
    assert f is not None and f.reasons == ("Too many pods",)  # type: ignore[attr-defined]


def test_nominated_pods_of_higher_or_equal_priority_count() -> None:
    n = ni_of(node("n", cpu="4"))
    nom = Nominator()
    nom.add(info(pod("big", cpu="3", priority=10)), node="n")
    assert PodFilter(info(pod("small", cpu="2", priority=10)), nominator=nom).check(n) is not None
    assert PodFilter(info(pod("small", cpu="2", priority=5)), nominator=nom).check(n) is not None
    # A higher-priority pod does not yield to a lower nomination.
    assert PodFilter(info(pod("vip", cpu="2", priority=100)), nominator=nom).check(n) is None
    # The nominee itself is not counted twice.
    assert PodFilter(info(pod("big", cpu="3", priority=10)), nominator=nom).check(n) is None


def _anti_cluster() -> tuple[SchedulerCache, list[NodeInfo]]:
    c = SchedulerCache()
    for name, zone in (("n1", "a"), ("n2", "a"), ("n3", "b")):
        c.add_node(node(name, zone=zone))
    c.add_pod(info(pod("web-0", labels={"app": "web"}, node_name="n1",
                       anti=[term({"app": "web"})])))
    return c, c.nodes()


def test_required_anti_affinity_hostname_and_existing_pods_rule() -> None:
    c, nodes = _anti_cluster()
    p = info(pod("web-1", labels={"app": "web"}, anti=[term({"app": "web"})]))
    state = compute_affinity_state(p, nodes, any_required_anti=True)
    pf = PodFilter(p, affinity=state)
    assert pf.check(nodes[0]) is F_EXISTING_ANTI
    assert pf.check(nodes[1]) is None and pf.check(nodes[2]) is None
    # A pod without anti-affinity is still kept off by the existing pod's rule.
    other = info(pod("x", labels={"app": "web"}))
    st2 = compute_affinity_state(other, nodes, any_required_anti=c.required_anti_pods > 0)
    assert PodFilter(other, affinity=st2).check(nodes[0]) is F_EXISTING_ANTI
    # ... and a pod the rule does not select is not.
    free = info(pod("y", labels={"app": "db"}))
    assert compute_affinity_state(free, nodes, any_required_anti=True) is None


def test_required_anti_affinity_zone() -> None:
    c = SchedulerCache()
    for name, zone in (("n1", "a"), ("n2", "a"), ("n3", "b")):
        c.add_node(node(name, zone=zone))
    c.add_pod(info(pod("db-0", labels={"app": "db"}, node_name="n1")))
    p = info(pod("db-1", labels={"app": "db"}, anti=[term({"app": "db"}, "topology.kubernetes.io/zone")]))
    nodes = c.nodes()
    pf = PodFilter(p, affinity=compute_affinity_state(p, nodes, any_required_anti=False))
    assert [pf.check(n) for n in nodes] == [F_ANTI, F_ANTI, None]


def test_required_affinity_zone_and_first_pod_of_group() -> None:
    c = SchedulerCache()
    for name, zone in (("n1", "a"), ("n2", "a"), ("n3", "b")):
        c.add_node(node(name, zone=zone))
    zone_term = term({"app": "cache"}, "topology.kubernetes.io/zone")
    first = info(pod("cache-0", labels={"app": "cache"}, affinity=[zone_term]))
    nodes = c.nodes()
    pf = PodFilter(first, affinity=compute_affinity_state(first, nodes, any_required_anti=False))
    assert all(pf.check(n) is None for n in nodes)  # selects itself: may start anywhere
    stranger = info(pod("s", affinity=[term({"app": "cache"}, "topology.kubernetes.io/zone")]))
    pf = PodFilter(stranger, affinity=compute_affinity_state(stranger, nodes, any_required_anti=False))
    assert all(pf.check(n) is F_AFFINITY for n in nodes)
    c.add_pod(info(pod("cache-0", labels={"app": "cache"}, node_name="n3")))
    pf = PodFilter(stranger, affinity=compute_affinity_state(stranger, nodes, any_required_anti=False))
    assert [pf.check(n) for n in nodes] == [F_AFFINITY, F_AFFINITY, None]


def test_adaptive_number_of_nodes() -> None:
    assert num_feasible_nodes_to_find(50) == 50
    assert num_feasible_nodes_to_find(1000) == 420  # 50% - 8% of 1000
    assert num_feasible_nodes_to_find(5000) == 500  # 50% - 40% = 10%
    assert num_feasible_nodes_to_find(100_000) == 5000  # floor of 5%
    assert num_feasible_nodes_to_find(150) == 100  # never fewer than 100
    assert num_feasible_nodes_to_find(1000, percentage=20) == 200
    assert num_feasible_nodes_to_find(1000, percentage=100) == 1000


def test_find_feasible_round_robin_and_fit_error_message() -> None:
    nodes = [ni_of(node(f"n{i}", cpu="1")) for i in range(5)]
    r = find_feasible(PodFilter(info(pod("a", cpu="100m"))), nodes, want=2, start=3)
    assert [n.name for n in r.feasible] == ["n3", "n4"] and r.processed == 2
    nodes.append(ni_of(node("tainted", taints=[{"key": "k", "effect": "NoSchedule"}])))
    r = find_feasible(PodFilter(info(pod("a", cpu="2"))), nodes, want=2)
    assert r.feasible == []
    err = FitError(info(pod("a")), num_nodes=6, failures=r.failures)
    assert str(err) == "0/6 nodes are available: 1 node(s) had untolerated taint {k}, 5 Insufficient cpu."


def test_scores_prefer_free_and_balanced_nodes() -> None:
    busy = ni_of(node("busy", cpu="4", memory="8Gi"), pod("x", cpu="3", memory="1Gi", node_name="busy"))
    free = ni_of(node("free", cpu="4", memory="8Gi"))
    p = info(pod("a", cpu="500m", memory="1Gi"))
    scores = score_nodes(p, [busy, free])
    assert scores[1] > scores[0]
    assert select_host([busy, free], scores, random.Random(1)).name == "free"


def test_prefer_no_schedule_and_preferred_node_affinity() -> None:
    soft = ni_of(node("soft", taints=[{"key": "k", "effect": "PreferNoSchedule"}]))
    plain = ni_of(node("plain"))
    assert score_nodes(info(pod("a")), [soft, plain])[1] > score_nodes(info(pod("a")), [soft, plain])[0]
    ssd = ni_of(node("ssd", labels={"disk": "ssd"}))
    p = pod("a")
    p["spec"]["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}}]}}
    s = score_nodes(info(p), [plain, ssd])
    assert s[1] > s[0]


def test_preferred_anti_affinity_spreads() -> None:
    c = SchedulerCache()
    c.add_node(node("n1"))
    c.add_node(node("n2"))
    c.add_pod(info(pod("w0", labels={"app": "w"}, node_name="n1")))
    p = info(pod("w1", labels={"app": "w"}, preferred_anti=[(100, term({"app": "w"}))]))
    nodes = c.nodes()
    inter = compute_inter_pod_scores(p, nodes, any_affinity_pods=False)
    assert inter is not None
    s = score_nodes(p, nodes, inter_pod=inter)
    assert s[1] > s[0]


def test_select_host_breaks_ties_with_the_rng() -> None:
    nodes = [ni_of(node(f"n{i}")) for i in range(4)]
    picks = {select_host(nodes, [5, 5, 5, 5], random.Random(seed)).name for seed in range(40)}
    assert picks == {"n0", "n1", "n2", "n3"}
    assert select_host(nodes, [1, 9, 5, 9], random.Random(0)).name in {"n1", "n3"}


# ---- preemption ------------------------------------------------------------------------


def test_minimal_victims_lowest_priority_first() -> None:
    n = ni_of(node("n", cpu="4"), pod("v1", cpu="1", priority=1, node_name="n"),
              pod("v5", cpu="1", priority=5, node_name="n"), pod("v3", cpu="2", priority=3, node_name="n"))
    pf = PodFilter(info(pod("p", cpu="2", priority=10)))
    fail = pf.check(n)
    assert fail is not None
    cand = find_candidate(pf, [n], {"n": fail}, state=None, rng=random.Random(0))
    assert cand is not None
    # Removing v3 (2 cpu) suffices; v5 is more important and v1 alone is not enough.
    assert [v.name for v in cand.victims] == ["v3"]


def test_no_victims_among_equal_or_higher_priority() -> None:
    n = ni_of(node("n", cpu="2"), pod("x", cpu="2", priority=10, node_name="n"))
    pf = PodFilter(info(pod("p", cpu="1", priority=10)))
    fail = pf.check(n)
    assert fail is not None
    assert find_candidate(pf, [n], {"n": fail}, state=None, rng=random.Random(0)) is None


def test_unresolvable_nodes_are_not_candidates() -> None:
    n = ni_of(node("n", cpu="2", taints=[{"key": "k", "effect": "NoSchedule"}]),
              pod("x", cpu="2", priority=1, node_name="n"))
    pf = PodFilter(info(pod("p", cpu="1", priority=10)))
    fail = pf.check(n)
    assert fail is not None and fail.unresolvable
    assert find_candidate(pf, [n], {"n": fail}, state=None, rng=random.Random(0)) is None


def test_preemption_resolves_anti_affinity() -> None:
    c = SchedulerCache()
    c.add_node(node("n1"))
    c.add_pod(info(pod("low", labels={"app": "w"}, priority=1, node_name="n1")))
    p = info(pod("p", labels={"app": "x"}, priority=10, anti=[term({"app": "w"})]))
    nodes = c.nodes()
    state = compute_affinity_state(p, nodes, any_required_anti=False)
    pf = PodFilter(p, affinity=state)
    fail = pf.check(nodes[0])
    assert fail is F_ANTI
    cand = find_candidate(pf, nodes, {"n1": fail}, state=state, rng=random.Random(0))
    assert cand is not None and [v.name for v in cand.victims] == ["low"]


def test_pick_candidate_order() -> None:
    a, b, c3 = (info(pod(n, priority=p)) for n, p in (("a", 5), ("b", 1), ("c", 1)))
    assert pick_candidate([Candidate("x", (a,)), Candidate("y", (b, c3))]).node == "y"  # type: ignore[union-attr]
    assert pick_candidate([Candidate("x", (b, c3)), Candidate("y", (b,))]).node == "y"  # type: ignore[union-attr]
    assert pick_candidate([Candidate("x", (b,)), Candidate("y", ())]).node == "y"  # type: ignore[union-attr]
    assert pick_candidate([]) is None


@pytest.mark.parametrize("policy,ok", [("Never", False), ("PreemptLowerPriority", True)])
def test_preemption_policy(policy: str, ok: bool) -> None:
    assert eligible_to_preempt(info(pod("p", policy=policy)), nominated_node=None, node_infos={})[0] is ok


def test_not_eligible_while_victims_terminate_on_nominated_node() -> None:
    n = ni_of(node("n"), pod("v", priority=1, node_name="n", terminating=True))
    ok, _ = eligible_to_preempt(info(pod("p", priority=10)), nominated_node="n", node_infos={"n": n})
    assert not ok

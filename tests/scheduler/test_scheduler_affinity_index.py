"""The cache's incremental inter-pod affinity index counts what the scan over every placed pod counts.

Randomized, seeded clusters: nodes with and without zone/rack labels, pods with required and
preferred (anti-)affinity over those keys, then random cache operations (assume, confirm, move,
relabel, forget, delete, node deletion into a ghost, node re-registration with other labels).
After every step, for a set of incoming pods, the pre-pass state built from the index equals the
one built by scanning every placed pod of the snapshot, and the scoring pre-pass skipped for
"no pod scores others" gives what the full scoring pass gives.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from schedkit import info, node, pod

from kubemesh.scheduler.caching import SchedulerCache
from kubemesh.scheduler.filtering import AffinityState, PodFilter, affinity_state_from_index, compute_affinity_state
from kubemesh.scheduler.podinfo import PodInfo
from kubemesh.scheduler.scoring import compute_inter_pod_scores
from kubemesh.services.model.kinds import Obj

KEYS = ("kubernetes.io/hostname", "topology.kubernetes.io/zone", "example.com/rack")
NAMESPACES = ("default", "other")


def _labels(rng: random.Random) -> dict[str, str]:
    out: dict[str, str] = {}
    if rng.random() < 0.8:
        out["app"] = rng.choice("abc")
    if rng.random() < 0.5:
        out["tier"] = rng.choice("xy")
    return out


def _term(rng: random.Random) -> Obj:
    selector: Obj
    r = rng.random()
    if r < 0.6:
        selector = {"matchLabels": {"app": rng.choice("abc")}}
    elif r < 0.8:
        selector = {"matchExpressions": [{"key": "tier", "operator": rng.choice(["In", "NotIn"]),
                                          "values": [rng.choice("xy")]}]}
    else:
        selector = {"matchExpressions": [{"key": "app", "operator": "Exists"}]}
    t: Obj = {"labelSelector": selector, "topologyKey": rng.choice(KEYS)}
    r = rng.random()
    if r < 0.15:
        t["namespaceSelector"] = {}
    elif r < 0.3:
        t["namespaces"] = [rng.choice(NAMESPACES)]
    return t


def _pod(rng: random.Random, name: str, node_name: str | None = None) -> Obj:
    kw: dict[str, Any] = {}
    if rng.random() < 0.4:
        kw["anti"] = [_term(rng) for _ in range(rng.randint(1, 2))]
    if rng.random() < 0.25:
        kw["affinity"] = [_term(rng) for _ in range(rng.randint(1, 2))]
    if rng.random() < 0.2:
        kw["preferred"] = [(rng.randint(1, 100), _term(rng))]
    if rng.random() < 0.2:
        kw["preferred_anti"] = [(rng.randint(1, 100), _term(rng))]
    return pod(name, ns=rng.choice(NAMESPACES), labels=_labels(rng), node_name=node_name, **kw)


def _node(rng: random.Random, name: str) -> Obj:
    extra = {"example.com/rack": f"r{rng.randint(0, 3)}"} if rng.random() < 0.6 else {}
    zone = f"z{rng.randint(0, 2)}" if rng.random() < 0.8 else None
    return node(name, zone=zone, labels=extra)


def _same(pi: PodInfo, cache: SchedulerCache) -> None:
    nodes = cache.nodes()
    scanned = compute_affinity_state(pi, nodes, any_required_anti=cache.required_anti_pods > 0)
    indexed = affinity_state_from_index(pi, cache.affinity_index, cache.node_infos_by_name(),
                                        any_required_anti=cache.required_anti_pods > 0)
    assert _counts(indexed) == _counts(scanned), pi
    if scanned is not None and indexed is not None:
        pf = PodFilter(pi)
        for ni in nodes:
            assert pf.check(ni, affinity=indexed) == pf.check(ni, affinity=scanned)
    full = compute_inter_pod_scores(pi, nodes, any_affinity_pods=cache.affinity_pods > 0)
    skipped = compute_inter_pod_scores(pi, nodes, any_affinity_pods=cache.scoring_affinity_pods > 0)
    assert (None if full is None else full.pairs) == (None if skipped is None else skipped.pairs)


def _counts(state: AffinityState | None) -> object:
    if state is None:
        return None
    return state.existing_anti, state.anti, state.affinity


@pytest.mark.parametrize("seed", range(12))
def test_index_matches_the_scan_on_random_clusters(seed: int) -> None:
    rng = random.Random(seed)
    cache = SchedulerCache()
    names = [f"n{i}" for i in range(12)]
    for name in names[:10]:
        cache.add_node(_node(rng, name))
    placed: dict[str, Obj] = {}
    counter = 0
    incoming = [info(_pod(rng, f"in-{i}")) for i in range(10)]
    for _step in range(150):
        op = rng.random()
        if op < 0.35 or not placed:
            counter += 1
            obj = _pod(rng, f"p{counter}", rng.choice(names))
            pi = info(obj)
            if rng.random() < 0.5:
                cache.assume_pod(pi)
            else:
                cache.add_pod(pi)
            placed[pi.key] = obj
        elif op < 0.45:
            # The watch confirms an assumed pod (possibly on another node), or re-adds a known one.
            key = rng.choice(sorted(placed))
            obj = placed[key]
            moved = {**obj, "spec": {**obj["spec"], "nodeName": rng.choice(names)}}
            cache.add_pod(info(moved))
            placed[key] = moved
        elif op < 0.6:
            # Relabelled: the pod now belongs to another label group.
            key = rng.choice(sorted(placed))
            obj = placed[key]
            new = {**obj, "metadata": {**obj["metadata"], "labels": _labels(rng)}}
            cache.update_pod(info(new))
            placed[key] = new
        elif op < 0.72:
            key = rng.choice(sorted(placed))
            cache.remove_pod(key)
            del placed[key]
        elif op < 0.78:
            key = rng.choice(sorted(placed))
            if cache.is_assumed(key):
                cache.forget_pod(key)
                del placed[key]
        elif op < 0.86:
            cache.remove_node(rng.choice(names))  # a ghost while pods remain
        else:
            cache.add_node(_node(rng, rng.choice(names)))  # back, or relabelled
        for pi in incoming:
            _same(pi, cache)
        for key in rng.sample(sorted(placed), min(3, len(placed))):
            # A placed pod's own group as the incoming pod (replicas of one workload).
            _same(info({**placed[key], "spec": {**placed[key]["spec"], "nodeName": ""}}), cache)
    # Everything removed: the index is empty again.
    for key in sorted(placed):
        cache.remove_pod(key)
    assert not cache.affinity_index.groups and not cache.affinity_index.anti_terms
    assert cache.required_anti_pods == cache.affinity_pods == cache.scoring_affinity_pods == 0

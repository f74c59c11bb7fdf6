"""Preemption: when a pod fits nowhere, pick a node and the fewest, least important victims.

Upstream's DefaultPreemption, without PodDisruptionBudgets:

* **Eligibility.** A pod with `preemptionPolicy: Never` never preempts. A pod already nominated to
  a node where a lower-priority pod is still terminating waits for that pod instead of preempting
  again (its earlier preemption is still taking effect).
* **Candidates.** Only nodes whose failure preemption can resolve (resources, anti-affinity) are
  tried, from a random offset, until `max(10% of them, 100)` candidates are found.
* **Victims on a node.** Remove every pod of lower priority; if the pod still does not fit, the
  node is no candidate. Otherwise add the removed pods back one by one, most important first
  (higher priority, then earlier start), keeping each one that still leaves room: the rest are
  the victims. Pods nominated to the node with at least the preemptor's priority count as
  present, as in filtering.
* **Choice.** A node needing no victims; else the lowest highest-victim priority, then the lowest
  sum of victim priorities, then the fewest victims, then the most recently started
  highest-priority victims, then the first found.

This module decides; `scheduler.scheduling` carries it out (nominate, patch, delete victims).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kubemesh.scheduler.caching import NodeInfo
from kubemesh.scheduler.filtering import AffinityState, Failure, PodFilter
from kubemesh.scheduler.podinfo import PodInfo


@dataclass(frozen=True, slots=True)
class Candidate:
    """A node on which the preemptor fits once `victims` are gone."""

    node: str
    victims: tuple[PodInfo, ...]


def eligible_to_preempt(pod: PodInfo, *, nominated_node: str | None,
                        node_infos: Mapping[str, NodeInfo]) -> tuple[bool, str]:
    """Whether the pod may preempt now, and why not."""
    if pod.preemption_policy == "Never":
        return False, "not eligible due to preemptionPolicy=Never."
    if nominated_node:
        ni = node_infos.get(nominated_node)
        if ni is not None and any(p.terminating and p.priority < pod.priority for p in ni.pods.values()):
            return False, "not eligible due to a terminating pod on the nominated node."
    return True, ""


def select_victims_on_node(pod_filter: PodFilter, node: NodeInfo,
                           state: AffinityState | None) -> list[PodInfo] | None:
    """The minimal victims on one node, or None if even removing every lower pod is not enough."""
    pod = pod_filter.pod
    lower = [p for p in node.pods.values() if p.priority < pod.priority]
    if not lower:
        return None
    what_if = node.clone(without=[p.key for p in lower])
    st = state.copy() if state is not None else None
    labels = node.labels
    if st is not None:
        for p in lower:
            st.update(p, labels, -1)
    if pod_filter.check(what_if, affinity=st) is not None:
        return None
    lower.sort(key=lambda p: (-p.priority, p.start_time))
    victims: list[PodInfo] = []
    for p in lower:
        what_if.add_pod(p)
        if st is not None:
            st.update(p, labels, 1)
        if pod_filter.check(what_if, affinity=st) is not None:
            what_if.remove_pod(p.key)
            if st is not None:
                st.update(p, labels, -1)
            victims.append(p)
    return victims


def _rank(c: Candidate) -> tuple[int, int, int, float]:
    top = max(v.priority for v in c.victims)
    total = sum(v.priority + 2**31 for v in c.victims)
    latest_start = max((v.start_time for v in c.victims if v.priority == top), default=0.0)
    return top, total, len(c.victims), -latest_start


def pick_candidate(candidates: Sequence[Candidate]) -> Candidate | None:
    """The best candidate by upstream's criteria (module docstring); first wins ties."""
    if not candidates:
        return None
    for c in candidates:
        if not c.victims:
            return c
    return min(candidates, key=_rank)


def find_candidate(pod_filter: PodFilter, nodes: Sequence[NodeInfo], failures: Mapping[str, Failure], *,
                   state: AffinityState | None, rng: random.Random, min_percentage: int = 10,
                   min_absolute: int = 100) -> Candidate | None:
    """Dry-run preemption on the nodes where it can help and choose the best candidate."""
    potential = [ni for ni in nodes
                 if ni.name in failures and not failures[ni.name].unresolvable]
    if not potential:
        return None
    want = max(len(potential) * min_percentage // 100, min_absolute)
    offset = rng.randrange(len(potential))
    found: list[Candidate] = []
    for i in range(len(potential)):
        ni = potential[(offset + i) % len(potential)]
        victims = select_victims_on_node(pod_filter, ni, state)
        if victims is not None:
            found.append(Candidate(ni.name, tuple(victims)))
            if len(found) >= want:
                break
    return pick_candidate(found)

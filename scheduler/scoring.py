"""Scores: ranking the feasible nodes, and picking one.

Upstream's default score plugins, each giving 0..100 per node, summed with upstream's weights:

* **NodeResourcesFit, least allocated** (weight 1): the mean over cpu and memory of the share
  that stays free once the pod is placed.
* **NodeResourcesBalancedAllocation** (weight 1): `(1 - std) * 100` of the cpu and memory shares
  requested once the pod is placed, so that nodes are not filled on one resource only.
* **InterPodAffinity** (weight 2): preferred affinity (+weight) and anti-affinity (-weight) of the
  pod, and symmetrically the preferred terms and required affinity terms of placed pods that
  select the pod, summed per topology pair and scaled min..max to 0..100.
* **NodeAffinity** (weight 2): the weights of the preferred node affinity terms a node matches,
  scaled to 0..100 by the best node.
* **TaintToleration** (weight 3): fewer untolerated PreferNoSchedule taints is better.

Scoring uses the non-zero requests (`nz_*`), as upstream does, so BestEffort pods still spread.
`select_host` takes the best total and breaks ties uniformly at random with the injected RNG.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

from kubemesh.scheduler.caching import NodeInfo
from kubemesh.scheduler.filtering import Pair
from kubemesh.scheduler.podinfo import PodInfo
from kubemesh.services.model.podutil import tolerates

MAX_SCORE = 100
WEIGHT_FIT = 1
WEIGHT_BALANCED = 1
WEIGHT_INTER_POD = 2
WEIGHT_NODE_AFFINITY = 2
WEIGHT_TAINT = 3


def resource_scores(pod: PodInfo, node: NodeInfo) -> tuple[int, int]:
    """(least allocated, balanced allocation) for the pod on the node."""
    cpu_cap, mem_cap = node.alloc_cpu, node.alloc_mem
    cpu = node.nz_cpu + pod.nz_cpu
    mem = node.nz_mem + pod.nz_mem
    if cpu_cap <= 0 or mem_cap <= 0:
        return 0, 0
    free_cpu = (cpu_cap - cpu) * MAX_SCORE // cpu_cap if cpu <= cpu_cap else 0
    free_mem = (mem_cap - mem) * MAX_SCORE // mem_cap if mem <= mem_cap else 0
    least = (free_cpu + free_mem) // 2
    f_cpu = min(cpu / cpu_cap, 1.0)
    f_mem = min(mem / mem_cap, 1.0)
    balanced = int((1.0 - abs(f_cpu - f_mem) / 2.0) * MAX_SCORE)
    return least, balanced


class InterPodScores:
    """Topology pair scores of preferred (anti-)affinity, both directions (upstream's PreScore)."""

    def __init__(self, pod: PodInfo, *, hard_weight: int = 1) -> None:
        self.pod = pod
        self.hard_weight = hard_weight
        self.pairs: dict[Pair, int] = {}
        self.keys: set[str] = set()

    def _add(self, key: str, labels: Mapping[str, str], weight: int) -> None:
        value = labels.get(key)
        if value is None or weight == 0:
            return
        pair = (key, value)
        self.pairs[pair] = self.pairs.get(pair, 0) + weight
        self.keys.add(key)

    def account(self, existing: PodInfo, node: NodeInfo) -> None:
        """Add one placed pod's contribution."""
        pod = self.pod
        labels = node.labels
        for w in pod.preferred_affinity:
            if w.term.matches(existing):
                self._add(w.term.topology_key, labels, w.weight)
        for w in pod.preferred_anti_affinity:
            if w.term.matches(existing):
                self._add(w.term.topology_key, labels, -w.weight)
        if existing.has_affinity:
            if self.hard_weight:
                for t in existing.affinity_terms:
                    if t.matches(pod):
                        self._add(t.topology_key, labels, self.hard_weight)
            for w in existing.preferred_affinity:
                if w.term.matches(pod):
                    self._add(w.term.topology_key, labels, w.weight)
            for w in existing.preferred_anti_affinity:
                if w.term.matches(pod):
                    self._add(w.term.topology_key, labels, -w.weight)

    def raw(self, node: NodeInfo) -> int:
        """The node's summed pair score before scaling."""
        labels = node.labels
        total = 0
        for key in self.keys:
            value = labels.get(key)
            if value is not None:
                total += self.pairs.get((key, value), 0)
        return total


def compute_inter_pod_scores(pod: PodInfo, nodes: Sequence[NodeInfo], *, any_affinity_pods: bool,
                             hard_weight: int = 1) -> InterPodScores | None:
    """The pre-pass over placed pods; None when no pod has preferences that concern this one."""
    has_pref = bool(pod.preferred_affinity or pod.preferred_anti_affinity)
    if not has_pref and not any_affinity_pods:
        return None
    scores = InterPodScores(pod, hard_weight=hard_weight)
    for ni in nodes:
        pods = ni.pods if has_pref else ni.pods_with_affinity
        for existing in pods.values():
            scores.account(existing, ni)
    return scores if scores.pairs else None


def score_nodes(pod: PodInfo, nodes: Sequence[NodeInfo], *,
                inter_pod: InterPodScores | None = None) -> list[int]:
    """Total weighted score of each node (same order as `nodes`)."""
    totals: list[int] = []
    prefer_taints = False
    # `resource_scores` inlined (the same arithmetic, `min(x, 1.0)` as a comparison): this loop
    # runs over every feasible node of every cycle.
    pod_cpu, pod_mem = pod.nz_cpu, pod.nz_mem
    append = totals.append
    for ni in nodes:
        if ni.prefer_taints:
            prefer_taints = True
        cpu_cap, mem_cap = ni.alloc_cpu, ni.alloc_mem
        if cpu_cap <= 0 or mem_cap <= 0:
            append(0)
            continue
        cpu = ni.nz_cpu + pod_cpu
        mem = ni.nz_mem + pod_mem
        if cpu <= cpu_cap:
            free_cpu = (cpu_cap - cpu) * MAX_SCORE // cpu_cap
            f_cpu = cpu / cpu_cap
        else:
            free_cpu, f_cpu = 0, 1.0
        if mem <= mem_cap:
            free_mem = (mem_cap - mem) * MAX_SCORE // mem_cap
            f_mem = mem / mem_cap
        else:
            free_mem, f_mem = 0, 1.0
        append((free_cpu + free_mem) // 2 * WEIGHT_FIT
               + int((1.0 - abs(f_cpu - f_mem) / 2.0) * MAX_SCORE) * WEIGHT_BALANCED)
    if prefer_taints:
        counts = [sum(1 for t in ni.prefer_taints if not tolerates(pod.tolerations, t)) for ni in nodes]
        worst = max(counts)
        for i, c in enumerate(counts):
            score = MAX_SCORE - c * MAX_SCORE // worst if worst else MAX_SCORE
            totals[i] += score * WEIGHT_TAINT
    else:
        for i in range(len(totals)):
            totals[i] += MAX_SCORE * WEIGHT_TAINT
    if pod.preferred_node_terms:
        raw = [sum(w for w, t in pod.preferred_node_terms if t.matches(ni.name, ni.labels)) for ni in nodes]
        best = max(raw) if raw else 0
        if best > 0:
            for i, r in enumerate(raw):
                totals[i] += r * MAX_SCORE // best * WEIGHT_NODE_AFFINITY
    if inter_pod is not None:
        raw = [inter_pod.raw(ni) for ni in nodes]
        lo, hi = min(raw), max(raw)
        if hi > lo:
            for i, r in enumerate(raw):
                totals[i] += (r - lo) * MAX_SCORE // (hi - lo) * WEIGHT_INTER_POD
    return totals


def select_host(nodes: Sequence[NodeInfo], scores: Sequence[int], rng: random.Random) -> NodeInfo:
    """The best-scoring node; ties broken uniformly at random (reservoir sampling)."""
    best = nodes[0]
    best_score = scores[0]
    ties = 1
    for ni, s in zip(nodes[1:], scores[1:], strict=True):
        if s > best_score:
            best, best_score, ties = ni, s, 1
        elif s == best_score:
            ties += 1
            if rng.randrange(ties) == 0:
                best = ni
    return best

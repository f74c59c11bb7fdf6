"""Controller expectations: do not act again until the cache has seen our own writes.

A ReplicaSet (or DaemonSet) that just created 3 pods must not count its pods again until the
informer has delivered those 3 ADDED events, or it would create 3 more. Before each batch of
writes the controller records how many creations and deletions it expects; the informer
handlers lower the counts as the events arrive; `satisfied(key)` is true when both counts are
at most 0, or when the expectation is older than the TTL (5 min upstream), which is exactly
the escape hatch behind #129795 (expectations expire while the pod informer still lags, and
the controller creates duplicates). Deletions are tracked by pod key, so a deletion observed
twice (update with deletionTimestamp, then DELETE) counts once.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubemesh.services.machinery.clock import Clock


@dataclass(slots=True)
class _Expectation:
    add: int
    dels: set[str]
    at: float


class Expectations:
    """Per-controller-key expectations on the cluster clock."""

    def __init__(self, *, clock: Clock, ttl: float = 300.0) -> None:
        self._clock = clock
        self.ttl = ttl
        self._exp: dict[str, _Expectation] = {}

    def expect_creations(self, key: str, n: int) -> None:
        """Expect `n` creations (replaces any previous expectation)."""
        self._exp[key] = _Expectation(add=n, dels=set(), at=self._clock.now())

    def expect_deletions(self, key: str, pod_keys: list[str]) -> None:
        """Expect the deletions of these pods (replaces any previous expectation)."""
        self._exp[key] = _Expectation(add=0, dels=set(pod_keys), at=self._clock.now())

    def creation_observed(self, key: str) -> None:
        """An ADDED pod event for this controller arrived (or a create failed)."""
        e = self._exp.get(key)
        if e is not None:
            e.add -= 1

    def deletion_observed(self, key: str, pod_key: str) -> None:
        """A pod of this controller is gone or being deleted (or a delete failed)."""
        e = self._exp.get(key)
        if e is not None:
            e.dels.discard(pod_key)

    def satisfied(self, key: str) -> bool:
        """Whether the controller may act: expectations met, expired, or none recorded."""
        e = self._exp.get(key)
        if e is None:
            return True
        if e.add <= 0 and not e.dels:
            return True
        return self._clock.now() - e.at > self.ttl

    def delete(self, key: str) -> None:
        """Forget the controller's expectations (it was deleted)."""
        self._exp.pop(key, None)

    def pending(self, key: str) -> tuple[int, int]:
        """(creations, deletions) still expected."""
        e = self._exp.get(key)
        return (0, 0) if e is None else (max(0, e.add), len(e.dels))

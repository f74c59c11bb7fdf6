from __future__ import annotations

from typing import Any

import pytest

from kubemesh.services.model.podutil import taints_of, tolerates, tolerates_all, toleration_matches, tolerations_of

NOT_READY = {"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}
DEDICATED = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


@pytest.mark.parametrize(("toleration", "taint", "expected"), [
    ({"operator": "Exists"}, NOT_READY, True),  # tolerates everything
    ({"key": "node.kubernetes.io/not-ready", "operator": "Exists"}, NOT_READY, True),
    ({"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}, NOT_READY, False),
    ({"key": "dedicated", "value": "gpu"}, DEDICATED, True),  # Equal is the default operator
    ({"key": "dedicated", "operator": "Equal", "value": "cpu"}, DEDICATED, False),
    ({"key": "other", "operator": "Exists"}, DEDICATED, False),
    ({"key": "dedicated", "operator": "Lt", "value": "gpu"}, DEDICATED, False),  # unknown operators match nothing
    ({"operator": "Equal"}, NOT_READY, True),  # ToleratesTaint to the letter (validation forbids this one)
])
def test_toleration_matches(toleration: dict[str, Any], taint: dict[str, Any], expected: bool) -> None:
    assert toleration_matches(toleration, taint) is expected


def test_tolerates_and_tolerates_all() -> None:
    tols = [{"key": "dedicated", "operator": "Exists"}]
    assert tolerates(tols, DEDICATED)
    assert not tolerates(tols, NOT_READY)
    assert not tolerates([], DEDICATED)
    assert tolerates_all(tols, [DEDICATED])
    assert not tolerates_all(tols, [DEDICATED, NOT_READY])
    assert tolerates_all([], [])


def test_readers_never_return_none() -> None:
    assert taints_of({}) == [] and tolerations_of({"spec": None}) == []
    assert taints_of({"spec": {"taints": [DEDICATED, "junk"]}}) == [DEDICATED]
    assert tolerations_of({"spec": {"tolerations": [{"operator": "Exists"}]}}) == [{"operator": "Exists"}]

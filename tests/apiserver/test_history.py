"""The history ring: order, bounds, compact delivery records, reads from either end."""

from __future__ import annotations

from apiserver.history import History
from services.clock import ManualClock


def make(capacity: int) -> History:
    return History(clock=ManualClock(), capacity=capacity)


def test_records_are_numbered_in_order_and_the_ring_drops_the_oldest() -> None:
    h = make(10)
    for i in range(7):
        h.append("request", n=i)
    h.deliveries(component="scheduler", instance="s-0", watch=3,
                 events=[("pods", "ADDED", f"default/p{i}", 100 + i) for i in range(6)])
    assert (h.first_index, h.last_index) == (4, 13)
    assert [r["index"] for r in h.since(0)] == list(range(4, 14))
    assert h.since(12) == [{"index": 13, "time": h.clock.now(), "type": "delivery", "component": "scheduler",
                            "instance": "s-0", "watch": 3, "resource": "pods", "event": "ADDED",
                            "key": "default/p5", "rv": 105}]


def test_since_filters_by_type_and_limit_from_both_ends_of_the_ring() -> None:
    h = make(1000)
    for i in range(300):
        h.append("request", n=i)
        h.deliveries(component="c", instance="i", watch=1, events=[("pods", "MODIFIED", "default/p", i)])
    early = h.since(10, types=["request"], limit=3)  # read from the front
    assert [r["n"] for r in early] == [5, 6, 7]
    late = h.since(590, types=["delivery"])  # read from the back
    assert [r["rv"] for r in late] == [295, 296, 297, 298, 299]
    assert all(r["type"] == "delivery" for r in late)
    assert h.since(10_000) == []  # beyond the newest record: nothing, not an error


def test_subscribers_see_every_record_as_a_dict() -> None:
    h = make(100)
    seen: list[dict[str, object]] = []
    h.subscribe(seen.append)
    h.append("write", key="a")
    h.deliveries(component="c", instance="i", watch=2, events=[("nodes", "DELETED", "n1", 7)])
    assert [(r["type"], r.get("key")) for r in seen] == [("write", "a"), ("delivery", "n1")]

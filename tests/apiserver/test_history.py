"""The history ring: order, bounds, compact delivery records, reads from either end."""

from __future__ import annotations

import random

from kubemesh.apiserver.history import History
from kubemesh.services.machinery.clock import ManualClock


def make(capacity: int) -> History:
    return History(clock=ManualClock(), capacity=capacity)


def test_records_are_numbered_in_order_and_the_ring_drops_the_oldest() -> None:
    h = make(10)
    for i in range(7):
        h.append("request", n=i)
    h.deliveries(component="scheduler", instance="s-0", watch=3,
                 seen=[("pods", "ADDED", f"default/p{i}", 100 + i) for i in range(6)])
    assert (h.first_index, h.last_index) == (4, 13)
    assert [r["index"] for r in h.since(0)] == list(range(4, 14))
    assert h.since(12) == [{"index": 13, "time": h.clock.now(), "type": "delivery", "component": "scheduler",
                            "instance": "s-0", "watch": 3, "resource": "pods", "event": "ADDED",
                            "key": "default/p5", "rv": 105}]


def test_since_filters_by_type_and_limit_from_both_ends_of_the_ring() -> None:
    h = make(1000)
    for i in range(300):
        h.append("request", n=i)
        h.deliveries(component="c", instance="i", watch=1, seen=[("pods", "MODIFIED", "default/p", i)])
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
    h.deliveries(component="c", instance="i", watch=2, seen=[("nodes", "DELETED", "n1", 7)])
    assert [(r["type"], r.get("key")) for r in seen] == [("write", "a"), ("delivery", "n1")]


def test_since_matches_a_plain_list_of_records_whatever_the_ring_holds() -> None:
    rng = random.Random(5)
    for capacity in (1, 7, 50):
        h = make(capacity)
        plain: list[dict[str, object]] = []
        for step in range(400):
            if rng.random() < 0.4:
                h.append("request", n=step, path=f"/p/{step % 3}", attributes={"verb": "get", "n": step % 2})
                plain.append({"index": h.last_index, "time": h.clock.now(), "type": "request", "n": step,
                              "path": f"/p/{step % 3}", "attributes": {"verb": "get", "n": step % 2}})
            else:
                seen = [("pods", "MODIFIED", f"default/p{step}", step * 10 + j) for j in range(rng.randint(1, 4))]
                first = h.last_index + 1
                h.deliveries(component="c", instance="i", watch=step, seen=seen)
                plain.extend({"index": first + j, "time": h.clock.now(), "type": "delivery", "component": "c",
                              "instance": "i", "watch": step, "resource": r, "event": e, "key": k, "rv": rv}
                             for j, (r, e, k, rv) in enumerate(seen))
            kept = [r for r in plain if r["index"] >= h.first_index]  # type: ignore[operator]
            assert len(kept) <= capacity + 3  # whole writes go together
            for since in (0, h.first_index - 1, h.first_index + 2, h.last_index - 3, h.last_index):
                for types in (None, ["delivery"], ["request"]):
                    want = [r for r in kept if r["index"] > since and (types is None or r["type"] in types)]  # type: ignore[operator]
                    assert h.since(since, types=types) == want
                    assert h.since(since, types=types, limit=2) == want[:2]


async def test_deliveries_of_one_flush_read_back_as_one_record_each_in_order() -> None:
    """Watchers written in one flush with the same events (one `batch`, one `seen` list) are recorded together.

    What is read back is what separate calls would give: one record per delivery, numbered
    in order, each with its own watcher; the ring still drops whole entries, oldest first.
    """
    rng = random.Random(11)
    for capacity in (3, 40, 10_000):
        clock = ManualClock()
        h = History(clock=clock, capacity=capacity)
        plain: list[dict[str, object]] = []
        batch = 0
        for step in range(300):
            if rng.random() < 0.2:
                h.append("request", n=step)
                plain.append({"index": h.last_index, "time": h.clock.now(), "type": "request", "n": step})
                continue
            batch += 1
            seen = [("pods", "ADDED", f"default/p{step}", step * 10 + j) for j in range(rng.randint(1, 3))]
            for w in range(rng.randint(1, 5)):
                if rng.random() < 0.2:  # a watcher that saw something else in this flush: its own list
                    mine = [("pods", "DELETED", f"default/q{step}", step * 10)]
                else:
                    mine = seen
                first = h.last_index + 1
                h.deliveries(component="c", instance=f"i{w}", watch=w, seen=mine, batch=batch)
                plain.extend({"index": first + j, "time": h.clock.now(), "type": "delivery", "component": "c",
                              "instance": f"i{w}", "watch": w, "resource": r, "event": e, "key": k, "rv": rv}
                             for j, (r, e, k, rv) in enumerate(mine))
            await clock.advance(0.5)
        kept = [r for r in plain if r["index"] >= h.first_index]  # type: ignore[operator]
        assert h.last_index == len(plain)
        assert h.since(0) == kept
        for since in (h.first_index + 1, h.last_index - 7):
            assert h.since(since, types=["delivery"], limit=4) == [
                r for r in kept if r["index"] > since and r["type"] == "delivery"][:4]  # type: ignore[operator]

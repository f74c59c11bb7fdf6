"""Zone states, limiter rates per state, the timed queue and master disruption mode."""

from __future__ import annotations

import pytest

from kubemesh.controller_manager.zones import (
    Disruption,
    RateLimitedTimedQueue,
    TimedValue,
    TokenBucket,
    ZoneState,
    compute_zone_state,
    zone_key,
    zone_qps,
)
from kubemesh.services.machinery.clock import ManualClock

T = 0.55


def statuses(ready: int, not_ready: int) -> list[str | None]:
    out: list[str | None] = ["True"] * ready
    return out + ["Unknown"] * not_ready


@pytest.mark.parametrize(("ready", "not_ready", "state"), [
    (1, 2, ZoneState.NORMAL),            # 67 % but only 2 not ready: never partial
    (0, 2, ZoneState.FULL_DISRUPTION),   # no ready node: full, however few
    (2, 3, ZoneState.PARTIAL_DISRUPTION),  # 3 not ready, 60 %
    (46, 54, ZoneState.NORMAL),          # 54 %
    (45, 55, ZoneState.PARTIAL_DISRUPTION),  # 55 % (>=)
    (0, 0, ZoneState.NORMAL),            # empty zone
    (10, 0, ZoneState.NORMAL),
    (0, 1, ZoneState.FULL_DISRUPTION),
])
def test_zone_state_boundaries(ready: int, not_ready: int, state: ZoneState) -> None:
    n, got = compute_zone_state(statuses(ready, not_ready), unhealthy_threshold=T)
    assert n == not_ready
    assert got == state


def test_missing_ready_condition_counts_not_ready() -> None:
    assert compute_zone_state([None, None, None, "True"], unhealthy_threshold=T)[1] == ZoneState.PARTIAL_DISRUPTION


@pytest.mark.parametrize(("state", "size", "qps"), [
    (ZoneState.NORMAL, 10, 0.1),
    (ZoneState.FULL_DISRUPTION, 10, 0.1),
    (ZoneState.PARTIAL_DISRUPTION, 50, 0.0),    # not larger than the threshold: stop
    (ZoneState.PARTIAL_DISRUPTION, 51, 0.01),   # large zone: secondary rate
    (ZoneState.INITIAL, 3, 0.1),
])
def test_limiter_rate_per_state(state: ZoneState, size: int, qps: float) -> None:
    assert zone_qps(state, size, healthy_qps=0.1, secondary_qps=0.01, large_cluster_threshold=50) == qps


def test_zone_key_uses_region_and_zone() -> None:
    node = {"metadata": {"labels": {"topology.kubernetes.io/zone": "a", "topology.kubernetes.io/region": "r"}}}
    assert zone_key(node) == "r:\x00:a"
    assert zone_key({"metadata": {}}) == ""


async def test_token_bucket_on_the_cluster_clock() -> None:
    clock = ManualClock()
    b = TokenBucket(clock=clock, qps=0.1)
    assert b.try_accept()          # starts full
    assert not b.try_accept()
    await clock.advance(9.9)
    assert not b.try_accept()
    await clock.advance(0.1)
    assert b.try_accept()
    stopped = TokenBucket(clock=clock, qps=0.0)
    await clock.advance(1000)
    assert not stopped.try_accept()


async def test_timed_queue_is_unique_until_removed_and_rate_limited() -> None:
    clock = ManualClock()
    q = RateLimitedTimedQueue(clock=clock, qps=0.1)
    assert q.add("n1", "u1")
    assert not q.add("n1", "u1")
    q.add("n2", "u2")
    seen: list[str] = []

    def act(v: TimedValue) -> tuple[bool, float]:
        seen.append(v.value)
        return True, 0.0

    assert q.try_process(act) == ["n1"]
    assert q.try_process(act) == []
    await clock.advance(10)
    assert q.try_process(act) == ["n2"]
    # processed values stay remembered: a second outage report is a no-op until removed
    assert not q.add("n1", "u1")
    assert q.remove("n1")
    assert q.add("n1", "u1")


async def test_failed_action_is_retried_later() -> None:
    clock = ManualClock()
    q = RateLimitedTimedQueue(clock=clock, qps=100)
    q.add("n1", "u1")
    assert q.try_process(lambda v: (False, 2.0)) == []
    await clock.advance(2.5)
    assert q.try_process(lambda v: (True, 0.0)) == []
    await clock.advance(0.6)
    assert q.try_process(lambda v: (True, 0.0)) == ["n1"]


async def test_swap_limiter_to_zero_stops_and_back_resumes_without_burst() -> None:
    clock = ManualClock()
    q = RateLimitedTimedQueue(clock=clock, qps=0.1)
    for i in range(3):
        q.add(f"n{i}", "")
    assert q.try_process(lambda v: (True, 0.0)) == ["n0"]
    q.swap_limiter(0.0)
    await clock.advance(100)
    assert q.try_process(lambda v: (True, 0.0)) == []
    q.swap_limiter(0.01)
    assert q.qps == 0.01
    # the old (stopped) limiter had no token, so the new one starts drained
    assert q.try_process(lambda v: (True, 0.0)) == []
    await clock.advance(100)
    assert q.try_process(lambda v: (True, 0.0)) == ["n1"]


def _disruption(clock: ManualClock) -> Disruption:
    return Disruption(clock=clock, healthy_qps=0.1, secondary_qps=0.01, large_cluster_threshold=50,
                      unhealthy_threshold=T)


async def test_partial_disruption_large_and_small_zone() -> None:
    clock = ManualClock()
    d = _disruption(clock)
    d.update({"big": statuses(60, 0), "small": statuses(20, 0)})
    assert d.states == {"big": ZoneState.NORMAL, "small": ZoneState.NORMAL}
    assert d.queues["big"].qps == 0.1
    res = d.update({"big": statuses(26, 34), "small": statuses(9, 11)})
    assert res.changed == {"big": ZoneState.PARTIAL_DISRUPTION, "small": ZoneState.PARTIAL_DISRUPTION}
    assert d.queues["big"].qps == 0.01      # 60 > 50: secondary rate
    assert d.queues["small"].qps == 0.0     # 20 <= 50: evictions stop


async def test_one_zone_fully_down_keeps_normal_rate_other_untouched() -> None:
    clock = ManualClock()
    d = _disruption(clock)
    d.update({"a": statuses(30, 0), "b": statuses(30, 0)})
    res = d.update({"a": statuses(0, 30), "b": statuses(30, 0)})
    assert not res.entered_master_disruption
    assert d.states["a"] == ZoneState.FULL_DISRUPTION
    assert d.queues["a"].qps == 0.1
    assert d.states["b"] == ZoneState.NORMAL


async def test_master_disruption_mode_enter_and_exit() -> None:
    clock = ManualClock()
    d = _disruption(clock)
    d.update({"a": statuses(30, 0), "b": statuses(30, 0)})
    res = d.update({"a": statuses(0, 30), "b": statuses(0, 30)})
    assert res.entered_master_disruption and d.master_disruption
    assert d.queues["a"].qps == 0.0 and d.queues["b"].qps == 0.0
    # staying fully disrupted changes nothing
    assert d.update({"a": statuses(0, 30), "b": statuses(0, 30)}) == type(res)()
    res = d.update({"a": statuses(30, 0), "b": statuses(0, 30)})
    assert res.exited_master_disruption
    assert d.snapshot()["masterDisruption"] is False
    assert d.states == {"a": ZoneState.NORMAL, "b": ZoneState.FULL_DISRUPTION}
    assert d.queues["a"].qps == 0.1 and d.queues["b"].qps == 0.1


async def test_single_zone_all_down_is_master_disruption() -> None:
    clock = ManualClock()
    d = _disruption(clock)
    d.update({"": statuses(3, 0)})
    assert d.update({"": statuses(0, 3)}).entered_master_disruption
    snap = d.snapshot()
    assert snap["masterDisruption"] is True


async def test_value_readded_while_its_action_runs_is_done_once() -> None:
    """A monitor pass that re-queues a node while its taint write is in flight costs no token.

    Upstream's RemoveFromQueue drops the value's entry whatever it is by then; keeping the
    fresh entry would spend the next token on a node already tainted (a doubled gap).
    """
    clock = ManualClock()
    q = RateLimitedTimedQueue(clock=clock, qps=0.1)
    q.add("n0", "u0")
    q.add("n1", "u1")

    async def requeued_meanwhile(v: TimedValue) -> tuple[bool, float]:
        assert q.remove(v.value)  # the pass saw the node untainted in its (stale) cache
        assert q.add(v.value, "u0")
        return True, 0.0

    assert await q.atry_process(requeued_meanwhile) == ["n0"]
    assert [v.value for v in q.items()] == ["n1"]
    assert "n0" in q.known()  # remembered: handled once for this outage
    await clock.advance(10)

    async def ok(v: TimedValue) -> tuple[bool, float]:
        return True, 0.0

    assert await q.atry_process(ok) == ["n1"]


async def test_failed_action_of_a_value_removed_meanwhile_is_not_retried() -> None:
    clock = ManualClock()
    q = RateLimitedTimedQueue(clock=clock, qps=100)
    q.add("n0", "u0")

    async def healthy_meanwhile(v: TimedValue) -> tuple[bool, float]:
        q.remove(v.value)  # the node became Ready: forgotten
        return False, 0.0

    assert await q.atry_process(healthy_meanwhile) == []
    assert q.items() == [] and q.known() == set()


async def test_state_since_is_the_time_of_the_last_change() -> None:
    clock = ManualClock()
    d = _disruption(clock)
    A = ":\x00:a"  # zone "a", no region
    d.update({A: statuses(60, 0)})
    await clock.advance(5)
    t0 = clock.now()
    d.update({A: statuses(26, 34)})
    await clock.advance(5)
    d.update({A: statuses(26, 34)})  # unchanged: the time stays
    zone = d.snapshot()["zones"]
    assert isinstance(zone, dict)
    assert zone["a"]["state"] == "PartialDisruption" and zone["a"]["stateSince"] == t0
    assert d.snapshot()["masterDisruptionSince"] is None
    await clock.advance(5)
    d.update({A: statuses(0, 60)})
    assert d.snapshot()["masterDisruptionSince"] == clock.now()


async def test_next_due_is_when_the_next_token_and_the_head_are_both_there() -> None:
    clock = ManualClock()
    q = RateLimitedTimedQueue(clock=clock, qps=0.1)
    assert q.next_due() is None  # nothing queued
    t0 = clock.now()
    q.add("n0", "")
    q.add("n1", "")
    assert q.next_due() == t0  # a full bucket: at once
    assert q.try_process(lambda v: (True, 0.0)) == ["n0"]
    assert q.next_due() == pytest.approx(t0 + 10)
    await clock.advance(4)
    assert q.next_due() == pytest.approx(t0 + 10)
    q.swap_limiter(0.0)
    assert q.next_due() is None  # stopped: never
    q.swap_limiter(0.01)
    assert q.next_due() == pytest.approx(t0 + 4 + 100)  # swapped in drained


async def test_zone_transitions_are_logged_with_their_times() -> None:
    clock = ManualClock()
    d = _disruption(clock)
    zone = ":\x00:a"
    t0 = clock.now()
    d.update({zone: statuses(30, 0)})
    await clock.advance(5)
    d.update({zone: statuses(10, 20)})
    zones = d.snapshot()["zones"]
    assert isinstance(zones, dict)
    assert zones["a"]["transitions"] == [{"state": "Initial", "at": t0}, {"state": "Normal", "at": t0},
                                         {"state": "PartialDisruption", "at": t0 + 5}]

"""The scheduling queue (order, backoff, unschedulable moves) and the nominator."""

from __future__ import annotations

import asyncio

from schedkit import info, pod, with_status

from kubemesh.scheduler.queueing import ClusterEvent, Nominator, SchedulingQueue
from kubemesh.services.machinery.clock import ManualClock


def make_queue(clock: ManualClock | None = None, *, stale: bool = False) -> tuple[SchedulingQueue, ManualClock]:
    clk = clock or ManualClock()
    return SchedulingQueue(clock=clk, nominator=Nominator(stale_update_unnominates=stale)), clk


async def test_priority_then_fifo() -> None:
    q, clk = make_queue()
    q.add(info(pod("low1", priority=1)))
    await clk.advance(1)
    q.add(info(pod("high", priority=10)))
    await clk.advance(1)
    q.add(info(pod("low2", priority=1)))
    order = []
    while (qpi := q.pop_nowait()) is not None:
        order.append(qpi.info.name)
    assert order == ["high", "low1", "low2"]


async def test_pop_waits_for_a_pod() -> None:

    q, _ = make_queue()
    task = asyncio.create_task(q.pop())
    await asyncio.sleep(0)
    assert not task.done()
    q.add(info(pod("a")))
    qpi = await asyncio.wait_for(task, 1)
    assert qpi.info.name == "a" and qpi.attempts == 1


async def test_exponential_backoff_capped() -> None:
    q, _clk = make_queue()
    q.add(info(pod("a")))
    durations = []
    for _ in range(6):
        qpi = q.pop_nowait()
        assert qpi is not None
        durations.append(q.backoff_duration(qpi))
        q.requeue(qpi, cycle=q.scheduling_cycle)
        assert q.activate(qpi.key)
    assert durations == [1, 2, 4, 8, 10, 10]


async def test_unschedulable_moves_on_event_through_backoff() -> None:
    q, clk = make_queue()
    q.add(info(pod("a")))
    qpi = q.pop_nowait()
    assert qpi is not None
    q.requeue(qpi, cycle=q.scheduling_cycle, plugins={"NodeResourcesFit"})
    assert q.where("default/a") == "unschedulable"
    # A node label change cannot cure a resource failure... (NodeUpdate can: allocatable)
    assert q.move_pods_on_event(ClusterEvent.ASSIGNED_POD_ADD) == 0
    assert q.where("default/a") == "unschedulable"
    # ...a pod deletion can; the pod's backoff (1 s) is still running, so it goes to backoffQ.
    assert q.move_pods_on_event(ClusterEvent.ASSIGNED_POD_DELETE) == 1
    assert q.where("default/a") == "backoff"
    assert q.flush_backoff_completed() == 0
    await clk.advance(1.0)
    assert q.flush_backoff_completed() == 1
    assert q.where("default/a") == "active"


async def test_event_during_cycle_sends_failed_pod_to_backoff() -> None:
    q, _ = make_queue()
    q.add(info(pod("a")))
    qpi = q.pop_nowait()
    assert qpi is not None
    cycle = q.scheduling_cycle
    q.move_pods_on_event(ClusterEvent.NODE_ADD)  # arrives while the pod is being scheduled
    q.requeue(qpi, cycle=cycle, plugins={"NodeResourcesFit"})
    assert q.where("default/a") == "backoff"


async def test_unschedulable_leftover_flush() -> None:
    q, clk = make_queue()
    q.add(info(pod("a")))
    qpi = q.pop_nowait()
    assert qpi is not None
    q.requeue(qpi, cycle=q.scheduling_cycle, plugins={"NodeAffinity"})
    await clk.advance(299)
    assert q.flush_unschedulable_leftover() == 0
    await clk.advance(1)
    assert q.flush_unschedulable_leftover() == 1
    assert q.where("default/a") == "active"


async def test_in_flight_update_and_delete() -> None:
    q, _ = make_queue()
    p = pod("a")
    q.add(info(p))
    qpi = q.pop_nowait()
    assert qpi is not None
    newer = with_status(p, message="x")
    q.update(info(p), info(newer))
    assert q.where("default/a") == "in-flight"  # not queued twice
    q.requeue(qpi, cycle=q.scheduling_cycle)
    assert qpi.info.resource_version == newer["metadata"]["resourceVersion"]
    q.pop_nowait()  # nothing active
    q.activate("default/a")
    qpi2 = q.pop_nowait()
    assert qpi2 is not None
    q.delete("default/a")
    q.requeue(qpi2, cycle=q.scheduling_cycle)
    assert q.where("default/a") is None


async def test_spec_update_moves_unschedulable_pod() -> None:
    q, clk = make_queue()
    p = pod("a")
    q.add(info(p))
    qpi = q.pop_nowait()
    assert qpi is not None
    q.requeue(qpi, cycle=q.scheduling_cycle, plugins={"TaintToleration"})
    status_only = with_status(p, message="x")
    q.update(info(p), info(status_only))
    assert q.where("default/a") == "unschedulable"
    tolerating = {**status_only, "spec": {**status_only["spec"], "tolerations": [{"operator": "Exists"}]}}
    await clk.advance(5)
    q.update(info(status_only), info(tolerating))
    assert q.where("default/a") == "active"


def test_nominator_add_delete() -> None:
    n = Nominator()
    p = info(pod("p", priority=10))
    n.add(p, node="n1")
    assert n.node_of("default/p") == "n1"
    assert [x.key for x in n.pods_for_node("n1")] == ["default/p"]
    n.add(p, node="n2")  # re-nomination moves it
    assert n.pods_for_node("n1") == [] and n.node_of("default/p") == "n2"
    n.delete("default/p")
    assert len(n) == 0 and not n.has_nominations("n2")
    n.add(info(pod("q", nominated="n3")))  # from status.nominatedNodeName
    assert n.node_of("default/q") == "n3"


def test_nominator_stale_update_fixed_keeps_in_memory_nomination() -> None:
    # kubernetes#77990: an update where neither version carries nominatedNodeName keeps it.
    n = Nominator(stale_update_unnominates=False)
    p = pod("p", priority=10)
    n.add(info(p), node="n1")
    n.update(info(p), info(with_status(p, conditions=[{"type": "PodScheduled", "status": "False"}])))
    assert n.node_of("default/p") == "n1"


def test_nominator_stale_update_buggy_unnominates() -> None:
    # kubernetes#74931: the same stale update drops the reservation.
    n = Nominator(stale_update_unnominates=True)
    p = pod("p", priority=10)
    n.add(info(p), node="n1")
    n.update(info(p), info(with_status(p, conditions=[{"type": "PodScheduled", "status": "False"}])))
    assert n.node_of("default/p") is None


def test_nominator_update_follows_the_object_when_it_speaks() -> None:
    for stale in (False, True):
        n = Nominator(stale_update_unnominates=stale)
        p = pod("p")
        n.add(info(p), node="n1")
        with_nnn = with_status(p, nominatedNodeName="n2")
        n.update(info(p), info(with_nnn))
        assert n.node_of("default/p") == "n2"
        cleared = with_status(with_nnn, nominatedNodeName=None)
        n.update(info(with_nnn), info(cleared))
        assert n.node_of("default/p") is None


async def test_queue_feeds_nominator() -> None:
    q, _ = make_queue()
    p = pod("p", nominated="n1")
    q.add(info(p))
    assert q.nominator.node_of("default/p") == "n1"
    q.delete("default/p")
    assert q.nominator.node_of("default/p") is None
    assert q.dump()["nominated"] == {}

"""The scheduler cache: NodeInfo accounting, ghosts, assumed pods and the per-cycle view."""

from __future__ import annotations

import pytest
from schedkit import bound, info, node, pod

from kubemesh.scheduler.caching import CacheError, SchedulerCache
from kubemesh.scheduler.podinfo import PodInfo, bytes_of, milli_cpu


def test_quantities() -> None:
    assert milli_cpu("100m") == 100
    assert milli_cpu("1.5") == 1500
    assert milli_cpu(2) == 2000
    assert milli_cpu("0.0001") == 1  # rounded up as Kubernetes does
    assert bytes_of("128Mi") == 128 * 1024 * 1024
    assert bytes_of("1G") == 10**9
    assert bytes_of("1e3") == 1000
    assert bytes_of("nonsense") == 0


def test_pod_requests_and_qos() -> None:
    p = pod("a", cpu="250m", memory="64Mi")
    p["spec"]["containers"].append({"name": "d", "resources": {"limits": {"cpu": "1"}}})
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"requests": {"cpu": "2"}}}]
    pi = PodInfo(p)
    assert pi.cpu == 2000  # init container dominates 1250m
    assert pi.mem == 64 * 1024 * 1024
    assert not pi.best_effort
    be = PodInfo(pod("b"))
    assert be.best_effort
    assert (be.cpu, be.mem) == (0, 0)
    assert be.nz_cpu == 100 and be.nz_mem == 200 * 1024 * 1024


def test_node_and_pod_accounting() -> None:
    c = SchedulerCache()
    c.add_node(node("n1", cpu="4"))
    c.add_pod(info(pod("a", cpu="1", node_name="n1")))
    c.add_pod(info(pod("b", cpu="500m", node_name="n1", anti=[{"labelSelector": {}, "topologyKey": "x"}])))
    ni = c.node_info("n1")
    assert ni is not None
    assert ni.req_cpu == 1500 and len(ni.pods) == 2
    assert set(ni.pods_with_affinity) == {"default/b"}
    assert c.required_anti_pods == 1
    c.remove_pod("default/b")
    assert ni.req_cpu == 1000 and c.required_anti_pods == 0
    c.update_pod(info(pod("a", cpu="2", node_name="n1")))
    assert ni.req_cpu == 2000


def test_deleted_node_with_pods_becomes_ghost_until_last_pod_leaves() -> None:
    c = SchedulerCache()
    c.add_node(node("n1"))
    c.add_node(node("n2"))
    c.add_pod(info(pod("a", node_name="n1")))
    c.add_pod(info(pod("b", node_name="n1")))
    # Node DELETE arrives before the pod DELETEs (different watches): the NodeInfo stays.
    c.remove_node("n1")
    ghost = c.node_info("n1")
    assert ghost is not None and ghost.ghost
    assert [n.name for n in c.nodes()] == ["n2"]  # the snapshot leaves ghosts out
    assert {n.name for n in c.all_node_infos()} == {"n1", "n2"}
    c.remove_pod("default/a")
    assert c.node_info("n1") is not None
    c.remove_pod("default/b")
    assert c.node_info("n1") is None  # the last pod took the ghost with it


def test_ghost_node_coming_back_is_a_node_again() -> None:
    c = SchedulerCache()
    c.add_node(node("n1"))
    c.add_pod(info(pod("a", cpu="1", node_name="n1")))
    c.remove_node("n1")
    assert c.nodes() == []
    c.add_node(node("n1"))
    ni = c.node_info("n1")
    assert ni is not None and not ni.ghost and ni.req_cpu == 1000
    assert [n.name for n in c.nodes()] == ["n1"]


def test_empty_node_delete_removes_it() -> None:
    c = SchedulerCache()
    c.add_node(node("n1"))
    c.remove_node("n1")
    assert c.node_info("n1") is None and c.nodes() == []


def test_pod_before_its_node() -> None:
    c = SchedulerCache()
    c.add_pod(info(pod("a", cpu="1", node_name="n1")))
    assert c.nodes() == []
    c.add_node(node("n1"))
    ni = c.node_info("n1")
    assert ni is not None and ni.req_cpu == 1000 and c.nodes() == [ni]


def test_assume_confirm() -> None:
    c = SchedulerCache(assumed_pod_ttl=30)
    c.add_node(node("n1"))
    p = pod("a", cpu="1")
    c.assume_pod(info(p).with_node("n1"))
    assert c.is_assumed("default/a")
    assert c.node_info("n1").req_cpu == 1000  # type: ignore[union-attr]
    with pytest.raises(CacheError):
        c.assume_pod(info(p).with_node("n1"))
    c.finish_binding("default/a", now=100)
    c.add_pod(info(bound(p, "n1")))
    assert not c.is_assumed("default/a")
    assert c.cleanup_assumed_pods(now=10_000) == []
    assert c.node_info("n1").req_cpu == 1000  # type: ignore[union-attr]


def test_assumed_pod_expires_when_binding_never_confirms() -> None:
    c = SchedulerCache(assumed_pod_ttl=30)
    c.add_node(node("n1"))
    c.assume_pod(info(pod("a", cpu="1")).with_node("n1"))
    # Not expired before the binding finished, however long it takes.
    assert c.cleanup_assumed_pods(now=1e12) == []
    c.finish_binding("default/a", now=100)
    assert c.cleanup_assumed_pods(now=129) == []
    assert c.cleanup_assumed_pods(now=130) == ["default/a"]
    assert c.node_info("n1").req_cpu == 0  # type: ignore[union-attr]
    assert c.expired == 1
    # A late ADD after expiry accounts the pod again.
    c.add_pod(info(pod("a", cpu="1", node_name="n1")))
    assert c.node_info("n1").req_cpu == 1000  # type: ignore[union-attr]


def test_forget_undoes_assume_and_confirm_moves_to_real_node() -> None:
    c = SchedulerCache()
    c.add_node(node("n1"))
    c.add_node(node("n2"))
    p = pod("a", cpu="1")
    c.assume_pod(info(p).with_node("n1"))
    c.forget_pod("default/a")
    assert c.node_info("n1").req_cpu == 0 and c.pod_count == 0  # type: ignore[union-attr]
    c.assume_pod(info(p).with_node("n1"))
    c.add_pod(info(bound(p, "n2")))  # the watch is the truth
    assert c.node_info("n1").req_cpu == 0  # type: ignore[union-attr]
    assert c.node_info("n2").req_cpu == 1000  # type: ignore[union-attr]


def test_remove_uses_cached_node() -> None:
    c = SchedulerCache()
    c.add_node(node("n1"))
    c.add_pod(info(pod("a", cpu="1", node_name="n1")))
    c.remove_pod("default/a")
    assert c.node_info("n1").req_cpu == 0  # type: ignore[union-attr]
    c.remove_pod("default/a")  # idempotent


def test_view_is_rebuilt_only_when_node_set_changes() -> None:
    c = SchedulerCache()
    c.add_node(node("n1"))
    v1 = c.nodes()
    c.update_node(node("n1", cpu="8"))
    c.add_pod(info(pod("a", node_name="n1")))
    assert c.nodes() is v1
    c.add_node(node("n2"))
    assert c.nodes() is not v1 and len(c.nodes()) == 2


def test_dump_shows_ghosts_and_assumed() -> None:
    c = SchedulerCache()
    c.add_node(node("n1"))
    c.add_node(node("n2"))
    c.add_pod(info(pod("a", node_name="n1")))
    c.assume_pod(info(pod("b")).with_node("n2"))
    c.remove_node("n1")
    d = c.dump()
    assert d["ghosts"] == ["n1"]
    assert d["assumedPods"][0]["pod"] == "default/b"
    assert {n["name"] for n in d["nodes"]} == {"n1", "n2"}

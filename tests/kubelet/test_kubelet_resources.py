import pytest

from kubemesh.kubelet.pressure import pressure_rejection, rank_for_memory_eviction
from kubemesh.kubelet.resources import Resources, admit, allocatable_of, pod_requests, qos_class
from kubemesh.kubelet.settings import KubeletSettings, parse_capacity
from kubemesh.services.model.kinds import Obj


def pod(name: str, *containers: dict[str, dict[str, str]], priority: int | None = None,
        annotations: dict[str, str] | None = None) -> Obj:
    spec: Obj = {"containers": [{"name": f"c{i}", "image": "nginx", "resources": r}
                                for i, r in enumerate(containers)]}
    if priority is not None:
        spec["priority"] = priority
    return {"metadata": {"name": name, "namespace": "default", "annotations": annotations or {}}, "spec": spec}


def test_pod_requests_take_limits_as_default_and_init_max() -> None:
    p = pod("a", {"limits": {"cpu": "500m", "memory": "1Gi"}}, {"requests": {"cpu": "250m"}})
    p["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {"cpu": "2"}}}]
    r = pod_requests(p)
    assert r.get("cpu") == 2000  # the init container dominates
    assert r.get("memory") == 2**30
    assert r.get("pods") == 1


def test_qos_classes() -> None:
    assert qos_class(pod("be", {})) == "BestEffort"
    assert qos_class(pod("g", {"limits": {"cpu": "1", "memory": "1Gi"}})) == "Guaranteed"
    assert qos_class(pod("g2", {"limits": {"cpu": "1", "memory": "1Gi"},
                                "requests": {"cpu": "1", "memory": "1Gi"}})) == "Guaranteed"
    assert qos_class(pod("b", {"requests": {"cpu": "1"}})) == "Burstable"
    assert qos_class(pod("b2", {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m"}})) == "Burstable"


def test_admission_reasons() -> None:
    alloc = Resources.from_quantities({"cpu": "2", "memory": "4Gi", "pods": "2"})
    big_cpu = pod("cpu", {"requests": {"cpu": "3"}})
    rej = admit(big_cpu, allocatable=alloc, admitted=[])
    assert rej is not None and rej.reason == "OutOfcpu"
    assert "requested: 3000, used: 0, capacity: 2000" in rej.message
    big_mem = pod("mem", {"requests": {"memory": "5Gi"}})
    rej = admit(big_mem, allocatable=alloc, admitted=[])
    assert rej is not None and rej.reason == "OutOfmemory"
    small = pod("s", {"requests": {"cpu": "1"}})
    assert admit(small, allocatable=alloc, admitted=[]) is None
    rej = admit(small, allocatable=alloc, admitted=[pod("x", {}), pod("y", {})])
    assert rej is not None and rej.reason == "OutOfpods"
    rej = admit(small, allocatable=alloc, admitted=[pod("z", {"requests": {"cpu": "1500m"}})])
    assert rej is not None and rej.reason == "OutOfcpu"


def test_allocatable_and_capacity_parsing() -> None:
    alloc = allocatable_of(capacity={"cpu": "8", "memory": "32Gi", "pods": "110"},
                           reserved={"cpu": "100m", "memory": "1Gi", "ephemeral-storage": "1Gi"})
    assert alloc.to_quantities() == {"pods": "110", "cpu": "7900m", "memory": "31Gi"}
    assert parse_capacity("cpu=4, memory=8Gi,pods=20") == {"cpu": "4", "memory": "8Gi", "pods": "20"}
    with pytest.raises(ValueError):
        parse_capacity("cpu")
    with pytest.raises(ValueError):
        parse_capacity("cpu=lots")


def test_settings_defaults_and_names() -> None:
    s = KubeletSettings(nodes=3, node_prefix="worker", node_offset=10)
    assert s.node_names() == ["worker-11", "worker-12", "worker-13"]
    assert s.lease_renew_interval == 10.0
    assert s.status_report_interval == 10.0
    assert s.node_capacity()["pods"] == "110"
    with pytest.raises(ValueError):
        KubeletSettings(node_lease_renew_interval_fraction=1.5)


def test_memory_eviction_ranking_besteffort_first() -> None:
    guaranteed = pod("guaranteed", {"limits": {"cpu": "1", "memory": "1Gi"}})
    burstable_within = pod("burstable-within", {"requests": {"memory": "1Gi"}})
    burstable_over = pod("burstable-over", {"requests": {"memory": "1Gi"}},
                         annotations={"kubemesh.io/memory-usage": "3Gi"})
    besteffort = pod("besteffort", {})
    besteffort_high = pod("besteffort-high", {}, priority=1000)
    ranked = rank_for_memory_eviction([guaranteed, burstable_within, besteffort_high, burstable_over, besteffort],
                                      default_container_usage=64 * 2**20)
    names = [p["metadata"]["name"] for p in ranked]
    # Over requests first (by priority, then by excess), then the rest by priority.
    assert names[:3] == ["burstable-over", "besteffort", "besteffort-high"]
    assert set(names[3:]) == {"guaranteed", "burstable-within"}


def test_pressure_admission() -> None:
    be, bu = pod("be", {}), pod("bu", {"requests": {"memory": "1Gi"}})
    assert pressure_rejection(be, conditions={"MemoryPressure": "False"}) is None
    rej = pressure_rejection(be, conditions={"MemoryPressure": "True"})
    assert rej is not None and rej.reason == "Evicted" and "MemoryPressure" in rej.message
    assert pressure_rejection(bu, conditions={"MemoryPressure": "True"}) is None
    assert pressure_rejection(bu, conditions={"DiskPressure": "True"}) is not None
    critical = pod("crit", {}, priority=2_000_001_000)
    assert pressure_rejection(critical, conditions={"DiskPressure": "True"}) is None

import asyncio
import random
from typing import Any

from fakes_kubelet import FakeApi

from kubemesh.kubelet.heartbeating import LEASE_NAMESPACE
from kubemesh.kubelet.nodes import EmulatedNode, NodeIdentity, PodSource
from kubemesh.kubelet.podworking import PodView, PodWorker
from kubemesh.kubelet.settings import KubeletSettings
from kubemesh.services.machinery.clock import ManualClock
from kubemesh.services.model.kinds import Obj

START = 1_700_000_000.0


class ApiView:
    """A node's pod view straight over the fake API's objects."""

    def __init__(self, api: FakeApi, node: str) -> None:
        self.api = api
        self.node = node

    def get(self, key: str) -> Obj | None:
        ns, name = key.split("/", 1)
        obj = self.api.objects.get(("pods", ns, name))
        return obj if obj is not None and obj["spec"].get("nodeName") == self.node else None

    def keys(self) -> list[str]:
        return [f"{ns}/{n}" for (p, ns, n), o in self.api.objects.items()
                if p == "pods" and o["spec"].get("nodeName") == self.node]


class FakeSource(PodSource):
    def __init__(self, api: FakeApi, node: str) -> None:
        self.api = api
        self.node = node
        self.worker: PodWorker | None = None

    def attach(self, worker: PodWorker) -> PodView:
        self.worker = worker
        return ApiView(self.api, self.node)

    async def run(self, worker: PodWorker) -> None:
        worker.resync_all()
        await asyncio.Event().wait()

    def detach(self, worker: PodWorker) -> None:
        self.worker = None


def make_node(api: FakeApi, clock: ManualClock, index: int = 1, **kw: Any) -> EmulatedNode:
    settings = KubeletSettings(**kw)
    name = f"node-{index}"
    return EmulatedNode(identity=NodeIdentity(name=name, index=index, instance="kubelet-0", admin_port=10250),
                        settings=settings, clock=clock, rng=random.Random(index), heartbeat_api=api, pod_api=api,
                        pods=FakeSource(api, name))


def add_pod(api: FakeApi, name: str, node: str = "node-1", resources: dict[str, Any] | None = None,
            **spec: Any) -> None:
    api.objects[("pods", "default", name)] = {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {"nodeName": node, "containers": [{"name": "app", "image": "nginx",
                                                   "resources": resources or {}}], **spec},
        "status": {"phase": "Pending"},
    }


def pod_of(api: FakeApi, name: str) -> Obj | None:
    return api.objects.get(("pods", "default", name))


async def run_for(clock: ManualClock, seconds: float, step: float = 0.5) -> None:
    for _ in range(int(seconds / step)):
        await clock.advance(step)


def lease_updates(api: FakeApi, node: str) -> list[float]:
    return [c.at for c in api.calls if c.verb == "update" and c.kind == "leases" and c.name == node]


async def test_registration_lease_and_status() -> None:
    clock = ManualClock(START)
    api = FakeApi(clock)
    node = make_node(api, clock, zone="zone-b")
    node.power_on()
    await run_for(clock, 30)
    obj = api.objects[("nodes", "", "node-1")]
    labels = obj["metadata"]["labels"]
    assert labels["topology.kubernetes.io/zone"] == "zone-b" and labels["kubernetes.io/hostname"] == "node-1"
    assert obj["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 10250
    assert obj["status"]["allocatable"]["cpu"] == "7900m"
    assert {c["type"]: c["status"] for c in obj["status"]["conditions"]}["Ready"] == "True"
    lease = api.objects[("leases", LEASE_NAMESPACE, "node-1")]
    assert lease["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    assert len(lease_updates(api, "node-1")) >= 2
    assert api.count("patch", "nodes") >= 3
    node.power_off()
    await node.wait_stopped()


async def test_power_off_stops_only_that_node() -> None:
    clock = ManualClock(START)
    api = FakeApi(clock)
    n1, n2 = make_node(api, clock, 1), make_node(api, clock, 2)
    n1.power_on()
    n2.power_on()
    await run_for(clock, 15)
    assert n1.power_off() and not n1.power_off()
    off_at = clock.now()
    await run_for(clock, 60)
    assert not [t for t in lease_updates(api, "node-1") if t > off_at]
    assert len([t for t in lease_updates(api, "node-2") if t > off_at]) >= 5
    assert not [c for c in api.calls if c.name == "node-1" and c.at > off_at]
    assert n1.running_tasks() == []
    n1.power_on()
    await run_for(clock, 15)
    assert [t for t in lease_updates(api, "node-1") if t > off_at]
    assert n1.boots == 2
    for n in (n1, n2):
        n.power_off()
        await n.wait_stopped()


async def test_lease_and_status_stop_resume() -> None:
    clock = ManualClock(START)
    api = FakeApi(clock)
    n = make_node(api, clock)
    n.power_on()
    await run_for(clock, 5)
    assert n.stop_lease() and not n.stop_lease()
    t0 = clock.now()
    await run_for(clock, 30)
    assert not [t for t in lease_updates(api, "node-1") if t > t0]
    status_posts = [c.at for c in api.calls if c.verb == "patch" and c.kind == "nodes" and c.at > t0]
    assert len(status_posts) >= 2  # status goes on
    assert n.resume_lease()
    await run_for(clock, 1)
    assert [t for t in lease_updates(api, "node-1") if t > t0]
    n.stop_status()
    t1 = clock.now()
    await run_for(clock, 30)
    assert not [c for c in api.calls if c.verb == "patch" and c.kind == "nodes" and c.at > t1]
    n.resume_status()
    await run_for(clock, 1)
    assert [c for c in api.calls if c.verb == "patch" and c.kind == "nodes" and c.at > t1]
    n.power_off()
    await n.wait_stopped()


async def test_no_node_lease_switch() -> None:
    clock = ManualClock(START)
    api = FakeApi(clock)
    n = make_node(api, clock, no_node_lease=True)
    n.power_on()
    await run_for(clock, 30)
    assert not [c for c in api.calls if c.kind == "leases"]
    assert api.count("patch", "nodes") >= 3
    n.power_off()
    await n.wait_stopped()


async def test_pod_runs_and_graceful_deletion_completes() -> None:
    clock = ManualClock(START)
    api = FakeApi(clock)
    n = make_node(api, clock, pod_start_delay=2.0, container_stop_delay=1.0)
    n.power_on()
    await run_for(clock, 1)
    add_pod(api, "web")
    n.pods.enqueue("default/web")
    await run_for(clock, 1)
    p = pod_of(api, "web")
    assert p is not None and p["status"]["phase"] == "Pending"
    await run_for(clock, 2)
    p = pod_of(api, "web")
    assert p is not None and p["status"]["phase"] == "Running" and p["status"]["podIP"].startswith("10.0.1.")
    # Graceful delete: the apiserver sets deletionTimestamp; the kubelet finishes it.
    p["metadata"]["deletionTimestamp"] = "2023-11-14T22:13:30Z"
    p["metadata"]["deletionGracePeriodSeconds"] = 30
    n.pods.enqueue("default/web")
    await run_for(clock, 3)
    assert pod_of(api, "web") is None
    deletes = [c for c in api.calls if c.verb == "delete"]
    assert len(deletes) == 1
    assert deletes[0].options == {"grace_period_seconds": 0, "preconditions": {"uid": "uid-web"}}
    last_status = [c for c in api.calls if c.verb == "patch" and c.kind == "pods"][-1]
    assert last_status.body["status"]["phase"] == "Succeeded"
    assert last_status.body["metadata"] == {"uid": "uid-web"}
    assert last_status.at <= deletes[0].at
    n.power_off()
    await n.wait_stopped()


async def test_admission_rejects_out_of_pods_and_cpu() -> None:
    clock = ManualClock(START)
    api = FakeApi(clock)
    n = make_node(api, clock, capacity={"cpu": "2", "memory": "4Gi", "pods": "2"}, reserved={})
    n.power_on()
    await run_for(clock, 1)
    add_pod(api, "a", resources={"requests": {"cpu": "1500m"}})
    n.pods.enqueue("default/a")
    await run_for(clock, 1)
    add_pod(api, "b", resources={"requests": {"cpu": "1"}})
    n.pods.enqueue("default/b")
    add_pod(api, "c")
    n.pods.enqueue("default/c")
    await run_for(clock, 1)
    add_pod(api, "d")
    n.pods.enqueue("default/d")
    await run_for(clock, 1)
    b, c, d = pod_of(api, "b"), pod_of(api, "c"), pod_of(api, "d")
    assert b is not None and b["status"]["phase"] == "Failed" and b["status"]["reason"] == "OutOfcpu"
    assert c is not None and c["status"]["phase"] != "Failed"
    assert d is not None and d["status"]["reason"] == "OutOfpods"
    n.power_off()
    await n.wait_stopped()


async def test_memory_pressure_from_usage_evicts_besteffort_first() -> None:
    clock = ManualClock(START)
    api = FakeApi(clock)
    n = make_node(api, clock, pod_start_delay=1.0, capacity={"memory": "4Gi"}, eviction_pressure_transition_period=60)
    n.power_on()
    await run_for(clock, 1)
    add_pod(api, "guaranteed", resources={"limits": {"cpu": "1", "memory": "1Gi"}})
    add_pod(api, "besteffort")
    n.pods.resync_all()
    await run_for(clock, 12)
    assert {c["type"]: c["status"] for c in api.objects[("nodes", "", "node-1")]["status"]["conditions"]}[
        "MemoryPressure"] == "False"
    # The BestEffort pod's usage grows until memory.available (4Gi - 1Gi - 3000Mi = 72Mi) is
    # under the hard threshold (100Mi).
    be = pod_of(api, "besteffort")
    assert be is not None
    # An update, as the informer delivers it: a new object.
    api.objects[("pods", "default", "besteffort")] = {
        **be, "metadata": {**be["metadata"], "annotations": {"kubemesh.io/usage": "memory=3000Mi"}}}
    n.pods.enqueue("default/besteffort")
    await run_for(clock, 12)
    be, g = pod_of(api, "besteffort"), pod_of(api, "guaranteed")
    assert be is not None and be["status"]["phase"] == "Failed" and be["status"]["reason"] == "Evicted"
    assert be["status"]["message"] == ("The node was low on resource: memory. Threshold quantity: 100Mi, available: "
                                       "72Mi. Container app was using 3000Mi, request is 0, has larger consumption "
                                       "of memory. ")
    assert g is not None and g["status"]["phase"] == "Running"
    node_obj = api.objects[("nodes", "", "node-1")]
    assert {c["type"]: c["status"] for c in node_obj["status"]["conditions"]}["MemoryPressure"] == "True"
    # A new BestEffort pod is refused while the condition lasts (the transition period) ...
    add_pod(api, "late")
    n.pods.enqueue("default/late")
    await run_for(clock, 1)
    late = pod_of(api, "late")
    assert late is not None and late["status"]["reason"] == "Evicted"
    assert late["status"]["message"] == "The node had condition: [MemoryPressure]. "
    # ... and the condition clears once no threshold was met for the transition period.
    await run_for(clock, 80)
    node_obj = api.objects[("nodes", "", "node-1")]
    assert {c["type"]: c["status"] for c in node_obj["status"]["conditions"]}["MemoryPressure"] == "False"
    g = pod_of(api, "guaranteed")
    assert g is not None and g["status"]["phase"] == "Running"
    n.power_off()
    await n.wait_stopped()


async def test_partition_keeps_containers_until_heal_then_reports_the_kill() -> None:
    clock = ManualClock(START)
    api = FakeApi(clock)
    n = make_node(api, clock, pod_start_delay=1.0)
    n.power_on()
    await run_for(clock, 1)
    add_pod(api, "db")
    add_pod(api, "cache")
    n.pods.resync_all()
    await run_for(clock, 2)
    assert n.partition() and not n.partition()
    assert set(n.running_tasks()) == {"evict"}
    posts = n.status.posts if n.status else 0
    before = {k for k in api.objects if k[0] == "events"}  # the containers' Started events
    # While the node is cut off, one pod is force-deleted from the API: the machine still runs it.
    del api.objects[("pods", "default", "db")]
    await run_for(clock, 30)
    assert n.pods.describe()["pods"]["default/db"]["running"] == ["app"]
    assert (n.status.posts if n.status else 0) == posts  # nothing reached the apiserver
    assert {k for k in api.objects if k[0] == "events"} == before
    assert n.heal() and not n.heal()
    await run_for(clock, 2)
    assert "default/db" not in n.pods.describe()["pods"] and "default/cache" in n.pods.describe()["pods"]
    events = [o for k, o in api.objects.items() if k[0] == "events" and k not in before]
    assert [(e["reason"], e["message"], e["source"]["host"], e["involvedObject"]["uid"]) for e in events] == [
        ("Killing", "Stopping container app", "node-1", "uid-db")]
    assert sorted((api.objects[k]["reason"], api.objects[k]["involvedObject"]["uid"]) for k in before) == [
        ("Started", "uid-cache"), ("Started", "uid-db")]
    assert (n.status.posts if n.status else 0) > posts
    n.power_off()
    await n.wait_stopped()


async def test_force_deleted_pod_is_gone_after_power_on() -> None:
    clock = ManualClock(START)
    api = FakeApi(clock)
    n = make_node(api, clock, pod_start_delay=1.0)
    n.power_on()
    await run_for(clock, 1)
    add_pod(api, "db")
    n.pods.resync_all()
    await run_for(clock, 2)
    n.power_off()
    del api.objects[("pods", "default", "db")]
    n.power_on()
    await run_for(clock, 2)
    assert n.pods.describe()["pods"] == {}
    n.power_off()
    await n.wait_stopped()


async def test_power_on_reboots_containers() -> None:
    clock = ManualClock(START)
    api = FakeApi(clock)
    n = make_node(api, clock, pod_start_delay=1.0)
    n.power_on()
    await run_for(clock, 1)
    add_pod(api, "web")
    n.pods.resync_all()
    await run_for(clock, 2)
    n.power_off()
    await run_for(clock, 10)
    n.power_on()
    await run_for(clock, 3)
    p = pod_of(api, "web")
    assert p is not None
    cs = p["status"]["containerStatuses"][0]
    assert cs["restartCount"] == 1 and "running" in cs["state"]
    n.power_off()
    await n.wait_stopped()


async def test_container_fail_and_slow() -> None:
    clock = ManualClock(START)
    api = FakeApi(clock)
    n = make_node(api, clock, pod_start_delay=1.0)
    n.power_on()
    await run_for(clock, 1)
    n.pods.faults.start_delay = 20.0
    add_pod(api, "slow")
    n.pods.enqueue("default/slow")
    await run_for(clock, 10)
    p = pod_of(api, "slow")
    assert p is not None and p["status"]["phase"] == "Pending"
    await run_for(clock, 15)
    p = pod_of(api, "slow")
    assert p is not None and p["status"]["phase"] == "Running"
    hit = n.pods.fail_containers(now=clock.now(), pods=["default/slow"], container=None, exit_code=137,
                                 reason="OOMKilled")
    assert hit == {"default/slow": ["app"]}
    await run_for(clock, 1)
    p = pod_of(api, "slow")
    assert p is not None
    assert p["status"]["containerStatuses"][0]["lastState"]["terminated"]["reason"] == "OOMKilled"
    n.power_off()
    await n.wait_stopped()

"""The chaos front door end to end: real apiserver, kubelet, scheduler and controller-manager processes.

One mesh for the module (3 nodes, cluster clock at 20x). Every test injects faults through
`/chaos/v1` and checks, against the real components, that the fault takes effect on its target
only, that the history shows it, and that once it ends (or is reset) the target works normally.
After every test the `clean_slate` fixture checks that `GET /chaos/v1/leftovers` holds nothing,
resets, and checks that the whole mesh is healthy again (nodes powered and renewing, no
condition overrides, no slow containers, components unpaused, clocks unskewed, nothing crashed).

Waits poll with wall-clock deadlines that only bound the test; what is asserted is order and
cluster time, never how long something took on the wall clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import pytest
import pytest_asyncio

from kubemesh.services.machinery.certs import client_context
from kubemesh.services.machinery.client import ApiClient, InvalidError, NotFoundError
from kubemesh.services.machinery.clock import ClusterClock, parse_time
from kubemesh.services.mesh.chaos_client import Chaos, delivered
from kubemesh.services.mesh.endpoint import node_is_ready
from kubemesh.services.mesh.launching import Mesh, MeshSpec
from kubemesh.services.model.kinds import EVENTS, LEASES, NODES, PODS, Obj

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]

RATE = 20.0
NS = "default"
LABEL = "kubemesh-e2e"
NODE_NAMES = ("node-1", "node-2", "node-3")
GHOST = "ghost-1"
"""A Node object no kubelet hosts: the trigger test deletes it."""
T = TypeVar("T")


# ------------------------------------------------------------------------------------- helpers


async def eventually(check: Callable[[], Awaitable[T | None]], *, limit: float = 30.0, what: str = "") -> T:
    """Poll `check` until it returns something truthy; the wall deadline only bounds the test."""
    deadline = time.monotonic() + limit
    last: T | None = None
    while True:
        last = await check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out waiting for {what}; last: {last!r}")
        await asyncio.sleep(0.05)


@dataclass
class Env:
    """The module's mesh and the clients the tests use on it."""

    mesh: Mesh
    chaos: Chaos
    api: ApiClient
    http: aiohttp.ClientSession
    clock: ClusterClock

    # -- cluster time ---------------------------------------------------------------------------

    def now(self) -> float:
        """The apiserver's cluster time (computed locally from its clock document)."""
        return self.clock.now()

    async def until(self, cluster_time: float) -> None:
        """Sleep until the cluster clock reaches `cluster_time`."""
        await self.clock.sleep(cluster_time - self.clock.now())

    # -- admin endpoints ------------------------------------------------------------------------

    async def registry(self) -> dict[str, dict[str, Any]]:
        """The apiserver's component registry by instance."""
        comps = await self.mesh.endpoint.components()
        assert comps is not None
        return comps

    async def admin_url(self, instance: str) -> str:
        """The admin URL an instance registered (it changes when the process restarts)."""
        return str((await self.registry())[instance]["adminURL"]).rstrip("/")

    async def admin(self, instance: str, method: str, path: str, body: Any = None) -> Any:
        """One call to a component's admin endpoint (with the mesh token); the JSON answer."""
        url = await self.admin_url(instance)
        async with self.http.request(method, url + path, json=body) as resp:
            assert resp.status == 200, f"{method} {url}{path}: {resp.status} {await resp.text()}"
            return await resp.json(content_type=None)

    async def kubelet_nodes(self) -> dict[str, dict[str, Any]]:
        """`GET /nodes` of the kubelet: every hosted node's state by name."""
        doc = await self.admin("kubelet-0", "GET", "/nodes")
        return {n["name"]: n for n in doc["nodes"]}

    async def scheduler_time(self) -> float:
        """The scheduler's own clock (`/debug/scheduler`)."""
        return float((await self.admin("scheduler", "GET", "/debug/scheduler"))["time"])

    async def cm_time(self) -> float:
        """The controller-manager's own clock (`/debug/controller-manager`)."""
        return float((await self.admin("controller-manager", "GET", "/debug/controller-manager"))["now"])

    async def assert_offset(self, instance: str, expected: float) -> None:
        """The component's clock runs `expected` cluster seconds ahead of the apiserver's.

        The reading is bracketed by two readings of the apiserver clock, so a slow answer
        widens the bracket instead of failing the check (2 s of slack for anchoring).
        """
        read = self.scheduler_time if instance == "scheduler" else self.cm_time
        t0 = self.now()
        theirs = await read()
        t1 = self.now()
        assert theirs - t1 - 2 <= expected <= theirs - t0 + 2, (instance, theirs - t1, theirs - t0, expected)

    # -- chaos ----------------------------------------------------------------------------------

    async def leftovers(self) -> dict[str, int]:
        """`GET /chaos/v1/leftovers`."""
        out: dict[str, int] = await self.api.request("GET", "/chaos/v1/leftovers")
        return out

    async def last_index(self) -> int:
        """The history's newest index."""
        doc = await self.api.request("GET", "/chaos/v1/history", params={"since": str(10**12)})
        return int(doc["lastIndex"])

    async def faults_since(self, since: int, fault: str | None = None) -> list[dict[str, Any]]:
        """Fault records after `since` (of one fault)."""
        return await self.chaos.history(since=since, types=["fault"], fault=fault)

    async def deliveries(self, since: int) -> list[dict[str, Any]]:
        """Delivery records after `since`."""
        return await self.chaos.history(since=since, types=["delivery"])

    # -- objects --------------------------------------------------------------------------------

    async def leases(self) -> dict[str, float]:
        """Node Lease renew times (cluster seconds) by node."""
        doc = await self.api.list(LEASES, namespace="kube-node-lease")
        return {i["metadata"]["name"]: parse_time(i["spec"]["renewTime"]) for i in doc["items"]
                if i["spec"].get("renewTime")}

    async def node(self, name: str) -> Obj:
        """One Node object."""
        return await self.api.get(NODES, name)

    async def pod(self, name: str) -> Obj | None:
        """One pod (None when it is gone)."""
        try:
            return await self.api.get(PODS, name, namespace=NS)
        except NotFoundError:
            return None

    async def create_pod(self, name: str, *, node: str | None = None, selector: dict[str, str] | None = None) -> Obj:
        """A one-container pod, pinned to `node` (bypassing the scheduler) or left to the scheduler."""
        spec: Obj = {"terminationGracePeriodSeconds": 1,
                     "containers": [{"name": "app", "image": "nginx:1.25",
                                     "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
        if node is not None:
            spec["nodeName"] = node
        if selector is not None:
            spec["nodeSelector"] = selector
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": name, "namespace": NS, "labels": {LABEL: "1"}}, "spec": spec}
        return await self.api.create(PODS, body)

    async def bound_node(self, name: str) -> str | None:
        """The node a pod is bound to (None while it is not)."""
        pod = await self.pod(name)
        return None if pod is None else pod["spec"].get("nodeName")

    async def running(self, name: str) -> Obj | None:
        """The pod once its phase is Running."""
        pod = await self.pod(name)
        return pod if pod is not None and (pod.get("status") or {}).get("phase") == "Running" else None

    async def cleanup_objects(self) -> None:
        """Force-delete every pod of the tests and the ghost node."""
        pods = await self.api.list(PODS, namespace=NS, label_selector=LABEL)
        for p in pods["items"]:
            with contextlib.suppress(NotFoundError):
                await self.api.delete(PODS, p["metadata"]["name"], namespace=NS, grace_period_seconds=0)
        with contextlib.suppress(NotFoundError):
            await self.api.delete(NODES, GHOST)

        async def gone() -> bool:
            return not (await self.api.list(PODS, namespace=NS, label_selector=LABEL))["items"]

        await eventually(gone, what="test pods gone")


ZERO = {"liveFaults": 0, "pendingEvents": 0, "suppressedBookmarks": 0, "effects": 0, "stalledRequests": 0,
        "timers": 0}


async def assert_healthy(env: Env) -> None:
    """Nothing chaos did is left: processes up, nodes powered, renewing and Ready, components normal."""
    assert env.mesh.crashed() == [], f"crashed: {env.mesh.crashed()}"
    assert await env.leftovers() == ZERO
    assert await env.chaos.list() == []
    nodes = await env.kubelet_nodes()
    for name in NODE_NAMES:
        n = nodes[name]
        assert n["powered"] is True and n["partitioned"] is False, n
        assert n["lease"]["stopped"] is False and n["status"]["stopped"] is False, n
        assert n["overrides"] == [], n
        assert n["faults"]["startDelay"] == 0 and n["faults"]["stopDelay"] is None, n
    for inst in ("scheduler", "controller-manager", "kubelet-0"):
        tasks = await env.admin(inst, "GET", "/debug/tasks")
        assert tasks["paused"] is False, inst
        points = await env.admin(inst, "GET", "/chaos/points")
        assert all(p["armed"] is None and p["paused"] == 0 for p in points["points"]), points
    for inst in ("scheduler", "controller-manager"):
        informers = await env.admin(inst, "GET", "/chaos/informers")
        assert not any(i["frozen"] for i in informers["informers"]), informers
    # Component clocks agree with the apiserver's (the skew of a reset fault is undone).
    await env.assert_offset("scheduler", 0)
    await env.assert_offset("controller-manager", 0)
    # Every lease renews again and every node is Ready.
    t0 = env.now()

    async def renewed() -> bool:
        leases = await env.leases()
        return all(leases.get(n, 0) > t0 for n in NODE_NAMES)

    await eventually(renewed, what="every node Lease renewed after the reset")

    async def ready() -> bool:
        return all([node_is_ready(await env.node(n)) for n in NODE_NAMES])

    await eventually(ready, what="every node Ready")


# ------------------------------------------------------------------------------------- fixtures


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env() -> AsyncIterator[Env]:
    """One real mesh for the module."""
    spec = MeshSpec(nodes=3, clock_rate=RATE, seed=17, start_timeout=90.0)
    async with Mesh(spec) as mesh:
        chaos = mesh.endpoint.chaos()
        http = aiohttp.ClientSession(headers=mesh.endpoint.headers(component="test"),
                                     timeout=aiohttp.ClientTimeout(total=10), connector=mesh.endpoint.connector())
        api = mesh.client("e2e")
        try:
            clock = ClusterClock.from_document(await api.get_clock())
            yield Env(mesh=mesh, chaos=chaos, api=api, http=http, clock=clock)
        finally:
            await api.close()
            await http.close()
            await chaos.close()


@pytest_asyncio.fixture(autouse=True, loop_scope="module")
async def clean_slate(env: Env) -> AsyncIterator[None]:
    """Before: a reset mesh. After: nothing held, then a reset leaves everything healthy."""
    await env.chaos.reset()
    yield
    try:
        assert await env.leftovers() == ZERO, "chaos still holds something after the test"
    finally:
        await env.chaos.reset()
        await env.cleanup_objects()
    await assert_healthy(env)


def fault_ops(records: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(op, outcome) of fault records."""
    return [(r["op"], r["outcome"]) for r in records]


def assert_lifecycle(records: list[dict[str, Any]], *, target: str | None = None, recovered: bool = True) -> None:
    """create → inject ok (on `target`) → end → recover ok, in this order."""
    ops = fault_ops(records)
    assert ops[0] == ("create", "ok"), ops
    injects = [r for r in records if r["op"] == "inject"]
    assert injects and all(r["outcome"] == "ok" for r in injects), injects
    if target is not None:
        assert [r["detail"]["target"] for r in injects] == [target], injects
    assert ("end", "ok") in ops, ops
    assert ops.index(("inject", "ok")) < ops.index(("end", "ok")), ops
    if recovered:
        assert ("recover", "ok") in ops, ops
        assert ops.index(("end", "ok")) < ops.index(("recover", "ok")), ops


# ------------------------------------------------------------------------------------- API edges


async def test_missing_or_wrong_token_is_401_and_injects_nothing(env: Env) -> None:
    since = await env.last_index()
    spec = {"type": "node.powerOff", "target": {"node": "node-1"}, "duration": None}
    ssl_ctx = client_context(env.mesh.ca_path) if env.mesh.ca_path else None
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl_ctx if ssl_ctx else True)) as bare:
        url = env.mesh.apiserver_url
        for headers in ({}, {"Authorization": "Bearer not-the-token"}):
            async with bare.post(f"{url}/chaos/v1/faults", json=spec, headers=headers) as resp:
                assert resp.status == 401, await resp.text()
            async with bare.post(f"{url}/chaos/v1/reset", headers=headers) as resp:
                assert resp.status == 401
            async with bare.get(f"{url}/chaos/v1/history", headers=headers) as resp:
                assert resp.status == 401
    assert await env.chaos.list() == []
    assert await env.faults_since(since) == []
    assert (await env.kubelet_nodes())["node-1"]["powered"] is True


@pytest.mark.parametrize(("spec", "field", "reason"), [
    ({"type": "node.melt", "target": {"node": "node-1"}, "duration": None}, "type", "FieldValueInvalid"),
    ({"type": "node.powerOff", "target": {"node": "node-1"}}, "duration", "FieldValueInvalid"),
    ({"type": "node.condition", "target": {"node": "node-1"}, "duration": None}, "params.type",
     "FieldValueInvalid"),
    ({"type": "node.powerOff", "target": {"node": "node-9"}, "duration": None}, "target.node", "FieldValueNotFound"),
    ({"type": "component.pause", "target": {"component": "etcd"}, "duration": None}, "target.component",
     "FieldValueNotFound"),
    ({"type": "component.pause", "target": {"component": "scheduler", "instance": "scheduler-7"}, "duration": None},
     "target.instance", "FieldValueNotFound"),
    ({"type": "partition", "target": {"component": "kube-schedulr"}, "duration": None}, "target.component",
     "FieldValueNotFound"),
    ({"type": "watch.hold", "target": {"component": "scheduler"}, "match": {"resources": ["gizmos"]},
      "duration": None}, "match.resources", "FieldValueInvalid"),
], ids=["unknown-type", "no-duration", "no-condition-type", "unknown-node", "unknown-component",
        "unknown-instance", "kubemesh-component-misspelt", "unknown-resource"])
async def test_bad_spec_or_unknown_target_is_422_and_injects_nothing(env: Env, spec: dict[str, Any], field: str,
                                                                     reason: str) -> None:
    since = await env.last_index()
    with pytest.raises(InvalidError) as err:
        await env.chaos.add(spec)
    assert err.value.code == 422
    causes = (err.value.status.get("details") or {}).get("causes") or []
    assert any(c["field"] == field and c.get("reason") == reason for c in causes), causes
    assert field in str(err.value)
    assert await env.chaos.list() == []
    assert await env.faults_since(since) == []
    assert await env.leftovers() == ZERO


async def test_apply_with_one_bad_item_injects_none_of_them(env: Env) -> None:
    since = await env.last_index()
    good = {"name": "e2e-apply-good", "type": "node.powerOff", "target": {"node": "node-1"}, "duration": None}
    bad = {"name": "e2e-apply-bad", "type": "node.powerOff", "target": {"node": "node-9"}, "duration": None}
    with pytest.raises(InvalidError) as err:
        await env.chaos.apply([good, bad])
    causes = (err.value.status.get("details") or {}).get("causes") or []
    assert [c["field"] for c in causes] == ["items[1].target.node"], causes
    assert await env.chaos.list() == []
    assert await env.faults_since(since) == []
    assert (await env.kubelet_nodes())["node-1"]["powered"] is True


async def test_mesh_chaos_property(env: Env) -> None:
    """`Mesh.chaos` is the documented way in."""
    chaos = env.mesh.chaos
    assert await chaos.list() == []


# ------------------------------------------------------------------------------------- node faults


async def test_power_off_stops_one_node_and_power_on_resumes(env: Env) -> None:
    since = await env.last_index()
    async with env.chaos.power_off("node-2", name="e2e-power") as fault:
        st = await fault.status()
        assert st["status"]["phase"] == "Active" and st["status"]["targets"] == ["node-2"]
        states = {n: s["powered"] for n, s in (await env.kubelet_nodes()).items()}
        assert states == {"node-1": True, "node-2": False, "node-3": True}
        before = await env.leases()

        async def neighbours_renewed() -> bool:
            now = await env.leases()
            return now["node-1"] >= before["node-1"] + 25 and now["node-3"] >= before["node-3"] + 25

        await eventually(neighbours_renewed, what="node-1 and node-3 renewing while node-2 is off")
        assert (await env.leases())["node-2"] == before["node-2"]
        assert await env.leftovers() == {**ZERO, "liveFaults": 1, "effects": 1}
    assert_lifecycle(await env.faults_since(since, "e2e-power"), target="node-2")
    t_on = env.now()

    async def renews_again() -> bool:
        return (await env.leases())["node-2"] > t_on

    await eventually(renews_again, what="node-2 renewing after power-on")
    assert (await env.kubelet_nodes())["node-2"]["powered"] is True

    # A reset heals a power-off too.
    await env.chaos.add({"name": "e2e-power-2", "type": "node.powerOff", "target": {"node": "node-3"},
                         "duration": None})
    assert (await env.kubelet_nodes())["node-3"]["powered"] is False
    out = await env.chaos.reset()
    assert [f["name"] for f in out["healed"]] == ["e2e-power-2"]
    assert (await env.kubelet_nodes())["node-3"]["powered"] is True


async def test_power_off_duration_ends_by_itself(env: Env) -> None:
    since = await env.last_index()
    await env.chaos.add({"name": "e2e-power-ttl", "type": "node.powerOff", "target": {"node": "node-1"},
                         "duration": 30})
    assert (await env.kubelet_nodes())["node-1"]["powered"] is False

    async def recovered() -> bool:
        return bool((await env.chaos.get("e2e-power-ttl"))["status"]["phase"] == "Recovered")

    await eventually(recovered, what="the 30 s power-off to end")
    records = await env.faults_since(since, "e2e-power-ttl")
    assert_lifecycle(records, target="node-1")
    end = next(r for r in records if r["op"] == "end")
    assert end["detail"]["reason"] == "duration elapsed"
    assert (await env.kubelet_nodes())["node-1"]["powered"] is True


async def test_lease_stop_stops_only_the_lease(env: Env) -> None:
    since = await env.last_index()
    spec = {"name": "e2e-lease", "type": "node.leaseStop", "target": {"node": "node-1"}}
    async with env.chaos.fault(spec):
        nodes = await env.kubelet_nodes()
        assert [n for n, s in nodes.items() if s["lease"]["stopped"]] == ["node-1"]
        syncs = status_syncs(nodes["node-1"])
        before = await env.leases()

        async def others_renewed() -> bool:
            now = await env.leases()
            return now["node-2"] >= before["node-2"] + 25 and now["node-3"] >= before["node-3"] + 25

        await eventually(others_renewed, what="node-2 and node-3 renewing")
        assert (await env.leases())["node-1"] == before["node-1"]
        # The node still syncs its status (a post, or a read of its Node between reports): only
        # the Lease stopped.
        assert status_syncs((await env.kubelet_nodes())["node-1"]) > syncs
    assert_lifecycle(await env.faults_since(since, "e2e-lease"), target="node-1")
    t_end = env.now()

    async def renews_again() -> bool:
        return (await env.leases())["node-1"] > t_end

    await eventually(renews_again, what="node-1 renewing after the fault")


async def test_partition_keeps_containers_and_the_node_reports_at_heal(env: Env) -> None:
    await env.create_pod("e2e-cut", node="node-2")
    first = await eventually(lambda: env.running("e2e-cut"), what="e2e-cut Running on node-2")
    uid = first["metadata"]["uid"]
    since = await env.last_index()
    spec = {"name": "e2e-partition", "type": "node.partition", "target": {"node": "node-2"}}
    async with env.chaos.fault(spec):
        nodes = await env.kubelet_nodes()
        assert [n for n, s in nodes.items() if s["partitioned"]] == ["node-2"]
        assert nodes["node-2"]["powered"] is True
        before = await env.leases()
        # Force-deleted while the node cannot hear of it.
        await env.api.delete(PODS, "e2e-cut", namespace=NS, grace_period_seconds=0)

        async def others_renewed() -> bool:
            now = await env.leases()
            return now["node-1"] >= before["node-1"] + 25 and now["node-3"] >= before["node-3"] + 25

        await eventually(others_renewed, what="node-1 and node-3 renewing")
        assert (await env.leases())["node-2"] == before["node-2"]
        machine = await env.admin("kubelet-0", "GET", "/nodes/node-2")
        assert machine["pods"]["default/e2e-cut"]["running"] == ["app"], machine["pods"]
        assert not [e for e in (await env.api.list(EVENTS, namespace=NS))["items"]
                    if e.get("reason") == "Killing" and e["involvedObject"].get("uid") == uid]
    assert_lifecycle(await env.faults_since(since, "e2e-partition"), target="node-2")

    async def reported() -> list[Obj]:
        return [e for e in (await env.api.list(EVENTS, namespace=NS))["items"]
                if e.get("reason") == "Killing" and e["involvedObject"].get("uid") == uid]

    kills = await eventually(reported, what="node-2 reporting the kill once healed")
    assert [(e["source"]["host"], e["message"]) for e in kills] == [("node-2", "Stopping container app")]
    assert "default/e2e-cut" not in (await env.admin("kubelet-0", "GET", "/nodes/node-2"))["pods"]


async def test_status_stop_stops_only_status_posts(env: Env) -> None:
    since = await env.last_index()
    spec = {"name": "e2e-status", "type": "node.statusStop", "target": {"node": "node-3"}}
    async with env.chaos.fault(spec):
        nodes = await env.kubelet_nodes()
        assert [n for n, s in nodes.items() if s["status"]["stopped"]] == ["node-3"]
        syncs = {n: status_syncs(s) for n, s in nodes.items()}
        before = await env.leases()

        async def others_synced_twice() -> bool:
            now = await env.kubelet_nodes()
            return all(status_syncs(now[n]) >= syncs[n] + 2 for n in ("node-1", "node-2"))

        await eventually(others_synced_twice, what="node-1 and node-2 syncing their status")
        assert status_syncs((await env.kubelet_nodes())["node-3"]) == syncs["node-3"]
        # The Lease still renews.
        assert (await env.leases())["node-3"] > before["node-3"]
    assert_lifecycle(await env.faults_since(since, "e2e-status"), target="node-3")
    after = status_syncs((await env.kubelet_nodes())["node-3"])

    async def syncs_again() -> bool:
        return status_syncs((await env.kubelet_nodes())["node-3"]) > after

    await eventually(syncs_again, what="node-3 syncing its status after the fault")


def status_syncs(machine: dict[str, Any]) -> int:
    """A node's status syncs so far (posts, and reads of its Node between reports), from the kubelet's admin."""
    return int(machine["status"]["posts"]) + int(machine["status"].get("reads", 0))


def condition(node: Obj, type_: str) -> dict[str, Any] | None:
    """One condition of a Node."""
    for c in (node.get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return dict(c)
    return None


async def check_condition_set_and_cleared(env: Env, ctype: str, node: str) -> None:
    """A node.condition fault shows on its node only, and is gone from the Node once it ends."""
    since = await env.last_index()
    name = f"e2e-cond-{ctype.lower()}"
    def status_of(obj: Obj) -> str | None:
        c = condition(obj, ctype)
        return None if c is None else str(c["status"])

    before = {n: status_of(await env.node(n)) for n in NODE_NAMES}
    assert before[node] != "True", before
    async with env.chaos.node_condition(node, ctype, "True", name=name):

        async def visible() -> dict[str, Any] | None:
            c = condition(await env.node(node), ctype)
            return c if c is not None and c["status"] == "True" else None

        await eventually(visible, what=f"condition {ctype}=True on {node}")
        for other in NODE_NAMES:
            if other != node:
                assert status_of(await env.node(other)) == before[other]
        assert (await env.kubelet_nodes())[node]["overrides"] == [ctype]
    assert_lifecycle(await env.faults_since(since, name), target=node)
    assert (await env.kubelet_nodes())[node]["overrides"] == []

    async def cleared() -> bool:
        return status_of(await env.node(node)) == before[node]

    await eventually(cleared, limit=10, what=f"condition {ctype} cleared on {node}")
    assert node_is_ready(await env.node(node))


async def test_node_condition_set_and_cleared_on_the_node(env: Env) -> None:
    await check_condition_set_and_cleared(env, "DiskPressure", "node-2")


async def test_custom_node_condition_is_removed_when_cleared(env: Env) -> None:
    await check_condition_set_and_cleared(env, "ChaosE2E", "node-3")


def container_status(pod: Obj) -> dict[str, Any]:
    """The first container's status."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return dict(statuses[0])


async def test_containers_fail_hits_only_the_target_node(env: Env) -> None:
    await env.create_pod("fail-a", node="node-1")
    await env.create_pod("fail-b", node="node-2")
    await eventually(lambda: env.running("fail-a"), what="fail-a Running")
    await eventually(lambda: env.running("fail-b"), what="fail-b Running")
    since = await env.last_index()
    f = await env.chaos.add({"name": "e2e-fail", "type": "node.containersFail", "target": {"node": "node-1"},
                             "params": {"exitCode": 3, "reason": "ChaosE2E"}, "duration": None})
    assert f["status"]["phase"] == "Recovered"  # one-shot: done at once, nothing to undo

    async def restarted() -> Obj | None:
        pod = await env.pod("fail-a")
        cs = container_status(pod) if pod else {}
        last = (cs.get("lastState") or {}).get("terminated") or {}
        return pod if cs.get("restartCount", 0) >= 1 and last.get("exitCode") == 3 else None

    await eventually(restarted, what="fail-a's container exited 3 and restarted")
    pod_b = await env.pod("fail-b")
    assert pod_b is not None and container_status(pod_b).get("restartCount", 0) == 0
    records = await env.faults_since(since, "e2e-fail")
    assert_lifecycle(records, target="node-1", recovered=False)
    # The restarted container runs again: the node works normally.
    await eventually(lambda: env.running("fail-a"), what="fail-a Running again")


async def test_containers_slow_delays_starts_on_the_target_node_only(env: Env) -> None:
    delay = 100.0
    since = await env.last_index()
    spec = {"name": "e2e-slow", "type": "node.containersSlow", "target": {"node": "node-2"},
            "params": {"startDelay": delay}}
    async with env.chaos.fault(spec):
        delays = {n: s["faults"]["startDelay"] for n, s in (await env.kubelet_nodes()).items()}
        assert delays == {"node-1": 0, "node-2": delay, "node-3": 0}
        await env.create_pod("slow-a", node="node-2")
        await env.create_pod("slow-b", node="node-3")
        fast = await eventually(lambda: env.running("slow-b"), what="slow-b Running")
        slow = await eventually(lambda: env.running("slow-a"), limit=60, what="slow-a Running")
    assert_lifecycle(await env.faults_since(since, "e2e-slow"), target="node-2")

    def start_lag(pod: Obj) -> float:
        started = container_status(pod)["state"]["running"]["startedAt"]
        return parse_time(started) - parse_time(pod["metadata"]["creationTimestamp"])

    # Cluster-time lags written by the kubelet: the delayed start took the delay, the others did not.
    assert start_lag(slow) >= delay - 1, slow
    assert start_lag(fast) < delay, fast
    await env.create_pod("slow-c", node="node-2")
    after = await eventually(lambda: env.running("slow-c"), what="slow-c Running")
    assert start_lag(after) < delay, after


# ------------------------------------------------------------------------------------- component faults


async def scheduler_binds(env: Env, name: str) -> str:
    """Create a pod for the scheduler and wait until it is bound."""
    await env.create_pod(name)
    node = await eventually(lambda: env.bound_node(name), what=f"{name} bound")
    return node


async def stays_unbound(env: Env, name: str, cluster_seconds: float) -> None:
    """`name` is still unbound after `cluster_seconds` of cluster time."""
    await env.until(env.now() + cluster_seconds)
    assert await env.bound_node(name) is None, f"{name} was bound"


async def test_pause_scheduler_stops_binding_until_resumed(env: Env) -> None:
    await scheduler_binds(env, "pause-warm")
    since = await env.last_index()
    async with env.chaos.pause("scheduler", name="e2e-pause"):
        assert (await env.admin("scheduler", "GET", "/debug/tasks"))["paused"] is True
        assert (await env.admin("controller-manager", "GET", "/debug/tasks"))["paused"] is False
        await env.create_pod("pause-a")
        await stays_unbound(env, "pause-a", 40)
    assert_lifecycle(await env.faults_since(since, "e2e-pause"), target="scheduler")
    await eventually(lambda: env.bound_node("pause-a"), what="pause-a bound after resume")


async def test_pause_is_forwarded_and_undone(env: Env) -> None:
    """What the pause fault itself does, whatever the components make of it."""
    since = await env.last_index()
    async with env.chaos.pause("scheduler", name="e2e-pause-gate"):
        assert (await env.admin("scheduler", "GET", "/debug/tasks"))["paused"] is True
        assert (await env.admin("controller-manager", "GET", "/debug/tasks"))["paused"] is False
        assert (await env.admin("kubelet-0", "GET", "/debug/tasks"))["paused"] is False
    assert_lifecycle(await env.faults_since(since, "e2e-pause-gate"), target="scheduler")
    assert (await env.admin("scheduler", "GET", "/debug/tasks"))["paused"] is False
    await scheduler_binds(env, "pause-after")


async def test_freeze_scheduler_pod_informer_hides_a_deletion(env: Env) -> None:
    await scheduler_binds(env, "freeze-a")
    since = await env.last_index()
    spec = {"name": "e2e-freeze", "type": "component.freezeInformer", "target": {"component": "scheduler"},
            "params": {"informer": "pods"}}
    async with env.chaos.fault(spec) as fault:
        assert (await fault.status())["status"]["phase"] == "Active"
        listing = (await env.admin("scheduler", "GET", "/chaos/informers"))["informers"]
        frozen = {i["name"]: i["frozen"] for i in listing}
        assert frozen["pods"] is True and not any(v for k, v in frozen.items() if k != "pods"), frozen
        cm = (await env.admin("controller-manager", "GET", "/chaos/informers"))["informers"]
        assert not any(i["frozen"] for i in cm), cm
        await env.api.delete(PODS, "freeze-a", namespace=NS, grace_period_seconds=0)

        def pods_in_scheduler_cache(doc: dict[str, Any]) -> str:
            return repr(doc.get("cache"))

        async def delivered_to_scheduler() -> bool:
            recs = await env.deliveries(since)
            return any(r["component"] == "scheduler" and r["event"] == "DELETED"
                       and r["key"] == f"{NS}/freeze-a" for r in recs)

        await eventually(delivered_to_scheduler, what="the DELETED event delivered to the scheduler")
        # Delivered, but the frozen informer does not apply it: the scheduler still has the pod.
        await env.until(env.now() + 10)
        assert "freeze-a" in pods_in_scheduler_cache(await env.admin("scheduler", "GET", "/debug/scheduler"))
    assert_lifecycle(await env.faults_since(since, "e2e-freeze"), target="scheduler")

    async def applied() -> bool:
        doc = await env.admin("scheduler", "GET", "/debug/scheduler")
        return "freeze-a" not in pods_in_scheduler_cache(doc)

    await eventually(applied, what="the scheduler applying the buffered deletion")


async def test_chaos_point_armed_and_disarmed_on_the_component(env: Env) -> None:
    listing = await env.api.request("GET", "/chaos/v1/points")
    by_inst = {i["instance"]: i for i in listing["items"]}
    assert set(by_inst) == {"scheduler", "controller-manager"}
    assert all("error" not in i for i in listing["items"]), listing
    # No component declares a point today; then an undeclared one shows the arm/disarm round trip.
    declared = sorted(p["name"] for p in by_inst["controller-manager"]["points"] or ())
    point = declared[0] if declared else "e2e.never-hit"
    since = await env.last_index()
    spec = {"name": "e2e-point", "type": "component.chaosPoint", "target": {"component": "controller_manager"},
            "params": {"point": point, "action": "pause", "after": 1_000_000}}
    async with env.chaos.fault(spec):
        pts = {p["name"]: p for p in (await env.admin("controller-manager", "GET", "/chaos/points"))["points"]}
        assert pts[point]["armed"] is not None and pts[point]["armed"]["action"] == "pause"
        others = (await env.admin("scheduler", "GET", "/chaos/points"))["points"]
        assert all(p["armed"] is None for p in others)
    assert_lifecycle(await env.faults_since(since, "e2e-point"), target="controller-manager")
    pts = {p["name"]: p for p in (await env.admin("controller-manager", "GET", "/chaos/points"))["points"]}
    assert pts[point]["armed"] is None and pts[point]["paused"] == 0


async def test_crash_with_restart_reexecs_the_component(env: Env) -> None:
    await scheduler_binds(env, "crash-warm")
    before = await env.registry()
    pid = next(p.pid for p in env.mesh.processes if p.name == "scheduler")
    cm_url = before["controller-manager"]["adminURL"]
    since = await env.last_index()
    f = await env.chaos.add({"name": "e2e-crash", "type": "component.crash", "target": {"component": "scheduler"},
                             "params": {"restart": True, "exitCode": 7}, "duration": None})
    assert f["status"]["phase"] == "Recovered"

    async def reregistered() -> bool:
        reg = await env.registry()
        return bool(reg["scheduler"]["adminURL"] != before["scheduler"]["adminURL"])

    await eventually(reregistered, what="the restarted scheduler registering a new admin endpoint")
    assert_lifecycle(await env.faults_since(since, "e2e-crash"), target="scheduler", recovered=False)
    # Re-executed in place: same pid, not a crash in the launcher's eyes; the others untouched.
    assert next(p.pid for p in env.mesh.processes if p.name == "scheduler") == pid
    assert env.mesh.crashed() == []
    assert (await env.registry())["controller-manager"]["adminURL"] == cm_url
    await scheduler_binds(env, "crash-after")


async def test_crash_without_restart_then_mesh_restart(env: Env) -> None:
    since = await env.last_index()
    await env.chaos.add({"name": "e2e-crash-exit", "type": "component.crash",
                         "target": {"component": "controller_manager"}, "params": {"exitCode": 7},
                         "duration": None})

    async def exited() -> list[Any]:
        return [p for p in env.mesh.crashed() if p.name == "controller-manager"]

    dead = await eventually(exited, what="the controller-manager exiting")
    assert dead[0].returncode == 7
    assert [p.name for p in env.mesh.crashed()] == ["controller-manager"]
    assert_lifecycle(await env.faults_since(since, "e2e-crash-exit"), target="controller-manager",
                     recovered=False)
    await env.mesh.restart("controller-manager")
    assert env.mesh.crashed() == []


async def test_clock_skew_and_jump_on_one_component(env: Env) -> None:
    since = await env.last_index()
    skew = 5000.0
    spec = {"name": "e2e-skew", "type": "clock.skew", "target": {"component": "scheduler"},
            "params": {"seconds": skew}}
    async with env.chaos.fault(spec):
        await env.assert_offset("scheduler", skew)
        await env.assert_offset("controller-manager", 0)
        # Overlapping clock faults add up on the same component.
        jump = {"name": "e2e-jump", "type": "clock.jump", "target": {"component": "scheduler"},
                "params": {"seconds": 1000}}
        async with env.chaos.fault(jump):
            await env.assert_offset("scheduler", skew + 1000)
        await env.assert_offset("scheduler", skew)
    await env.assert_offset("scheduler", 0)
    assert_lifecycle(await env.faults_since(since, "e2e-skew"), target="scheduler")
    assert_lifecycle(await env.faults_since(since, "e2e-jump"), target="scheduler")
    # A jump on the controller-manager, healed by a reset.
    await env.chaos.add({"name": "e2e-jump-cm", "type": "clock.jump", "target": {"component": "controller_manager"},
                         "params": {"seconds": 777}, "duration": None})
    await env.assert_offset("controller-manager", 777)
    await env.assert_offset("scheduler", 0)
    out = await env.chaos.reset()
    assert [f["name"] for f in out["healed"]] == ["e2e-jump-cm"]
    await env.assert_offset("controller-manager", 0)
    await scheduler_binds(env, "clock-after")


# ------------------------------------------------------------------------------------- request and watch faults


async def test_partition_cuts_off_the_scheduler_only(env: Env) -> None:
    await scheduler_binds(env, "part-warm")
    since = await env.last_index()
    async with env.chaos.partition("scheduler", name="e2e-part"):
        await env.create_pod("part-a")
        before = await env.leases()
        await stays_unbound(env, "part-a", 30)
        # The kubelet is not cut off: the leases go on.
        assert all(v > before[n] for n, v in (await env.leases()).items() if n in NODE_NAMES)
    records = await env.faults_since(since, "e2e-part")
    injects = [r for r in records if r["op"] == "inject"]
    assert injects and {(r["detail"]["component"], r["detail"]["instance"]) for r in injects} == {
        ("scheduler", "scheduler")}
    assert fault_ops(records)[0] == ("create", "ok") and ("end", "ok") in fault_ops(records)
    # The partition shows in the request records too: the scheduler's requests were cut (444).
    reqs = await env.chaos.history(since=since, types=["request"])
    assert any(r["component"] == "scheduler" and r["code"] == 444 for r in reqs)
    assert not any(r["component"] != "scheduler" and r["code"] == 444 for r in reqs)
    await eventually(lambda: env.bound_node("part-a"), limit=45, what="part-a bound after the partition")


async def test_watch_hold_hides_a_pod_from_the_scheduler_only(env: Env) -> None:
    await scheduler_binds(env, "hold-warm")
    since = await env.last_index()
    async with env.chaos.hold_watch(component="scheduler", resource="pods", name="hold-a", namespace=NS,
                                    fault_name="e2e-hold"):
        await env.create_pod("hold-a")

        async def others_saw_it() -> bool:
            recs = await env.deliveries(since)
            return any(r["component"] == "controller_manager" and r["key"] == f"{NS}/hold-a" for r in recs)

        await eventually(others_saw_it, what="the controller-manager receiving hold-a")
        await stays_unbound(env, "hold-a", 30)
        recs = await env.deliveries(since)
        assert not any(r["component"] == "scheduler" and r["key"] == f"{NS}/hold-a" for r in recs)
        left = await env.leftovers()
        assert left["pendingEvents"] >= 1 and left["suppressedBookmarks"] >= 1 and left["liveFaults"] == 1
    assert_lifecycle(await env.faults_since(since, "e2e-hold"), recovered=False)
    await eventually(lambda: env.bound_node("hold-a"), what="hold-a bound once released")
    recs = await env.deliveries(since)
    assert any(r["component"] == "scheduler" and r["key"] == f"{NS}/hold-a" and r["event"] == "ADDED"
               for r in recs)


async def test_trigger_holds_pod_deletes_until_node_delete_delivered(env: Env) -> None:
    since_setup = await env.last_index()
    await env.api.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": GHOST}})
    await env.create_pod("trig-a", selector={"kubemesh-e2e/nowhere": "true"})

    async def both_know() -> bool:
        recs = await env.deliveries(since_setup)
        seen = {(r["component"], r["key"]) for r in recs}
        return all((c, k) in seen for c in ("scheduler", "controller_manager") for k in (GHOST, f"{NS}/trig-a"))

    await eventually(both_know, what="scheduler and controller-manager knowing the ghost node and the pod")
    since = await env.last_index()
    hold = env.chaos.hold_watch(component="scheduler", resource="pods", event_types=["DELETED"],
                                release_on=delivered("scheduler", "nodes", name=GHOST, event_types=["DELETED"]),
                                fault_name="e2e-trigger")
    async with hold as fault:
        await env.api.delete(PODS, "trig-a", namespace=NS, grace_period_seconds=0)

        async def cm_got_pod_delete() -> bool:
            return any(r["component"] == "controller_manager" and r["event"] == "DELETED" and r["key"] == f"{NS}/trig-a"
                       for r in await env.deliveries(since))

        await eventually(cm_got_pod_delete, what="the controller-manager receiving the pod DELETE")
        await env.until(env.now() + 10)
        assert (await env.leftovers())["pendingEvents"] >= 1
        assert (await fault.status())["status"]["phase"] == "Active"
        await env.api.delete(NODES, GHOST)

        async def released() -> bool:
            return bool((await fault.status())["status"]["phase"] == "Recovered")

        await eventually(released, what="the release trigger firing")

        async def scheduler_got_pod_delete() -> bool:
            return any(r["component"] == "scheduler" and r["event"] == "DELETED" and r["key"] == f"{NS}/trig-a"
                       for r in await env.deliveries(since))

        await eventually(scheduler_got_pod_delete, what="the scheduler receiving the held pod DELETE")
    recs = await env.deliveries(since)

    def index_of(component: str, resource: str, key: str) -> int:
        return next(int(r["index"]) for r in recs if r["component"] == component and r["resource"] == resource
                    and r["event"] == "DELETED" and r["key"] == key)

    # The scheduler received the node DELETE first, the pod DELETE after it ...
    assert index_of("scheduler", "nodes", GHOST) < index_of("scheduler", "pods", f"{NS}/trig-a")
    # ... while the controller-manager received them in the order they happened.
    assert index_of("controller_manager", "pods", f"{NS}/trig-a") < index_of("controller_manager", "nodes", GHOST)
    records = await env.faults_since(since, "e2e-trigger")
    ops = fault_ops(records)
    assert ops.index(("create", "ok")) < ops.index(("trigger", "ok")) < ops.index(("end", "ok")), ops
    trig = next(r for r in records if r["op"] == "trigger")
    assert trig["detail"]["component"] == "scheduler" and trig["detail"]["key"] == GHOST
    assert trig["index"] < index_of("scheduler", "pods", f"{NS}/trig-a")

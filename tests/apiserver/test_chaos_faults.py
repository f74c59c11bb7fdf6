"""One test per fault type: it hits its target only, shows in the history, and leaves nothing behind.

Two clients identify as different components (`X-Kubemesh-Component`): the scheduler is
the target, the controller-manager must not notice anything.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from chaoskit import Mesh, running, settle, watch

from kubemesh.services.mesh.state import free_port
from kubemesh.services.process import chaospoints

S, CM = "scheduler", "controller_manager"
CLEAN = {"liveFaults": 0, "pendingEvents": 0, "suppressedBookmarks": 0, "effects": 0, "stalledRequests": 0,
         "timers": 0}


async def healed(mesh: Mesh, name: str | None = None) -> None:
    """Remove the fault (or reset) and check nothing is left behind."""
    if name is None:
        assert (await mesh.call("POST", "/chaos/v1/reset")).status == 200
    else:
        assert (await mesh.call("DELETE", f"/chaos/v1/faults/{name}")).status == 200
    await settle()
    assert mesh.engine.leftovers() == CLEAN


# ------------------------------------------------------------------------------------ requests


async def test_latency_slows_the_target_only() -> None:
    async with running(clock_rate=100.0) as mesh:
        await mesh.add({"name": "slow", "type": "request.latency", "target": {"component": S},
                        "match": {"verbs": ["list"], "resources": ["pods"]}, "params": {"delay": 20, "jitter": 2},
                        "duration": None})
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        assert (await mesh.call("GET", "/api/v1/pods", component=S)).status == 200
        assert loop.time() - t0 >= 0.17
        t0 = loop.time()
        assert (await mesh.call("GET", "/api/v1/pods", component=CM)).status == 200
        assert (await mesh.call("GET", "/api/v1/nodes", component=S)).status == 200  # not matched
        assert loop.time() - t0 < 0.15
        injects = mesh.history("fault", op="inject", fault="slow")
        assert len(injects) == 1 and injects[0]["component"] == S and 18 <= injects[0]["delay"] <= 22
        await healed(mesh, "slow")
        t0 = loop.time()
        assert (await mesh.call("GET", "/api/v1/pods", component=S)).status == 200
        assert loop.time() - t0 < 0.15


@pytest.mark.parametrize(("code", "reason", "retry_after"), [
    (409, "Conflict", None), (410, "Expired", None), (429, "TooManyRequests", "1"), (500, "InternalError", None),
    (503, "ServiceUnavailable", "1"), (504, "Timeout", None)])
async def test_error_status_hits_the_target_only(code: int, reason: str, retry_after: str | None) -> None:
    async with running() as mesh:
        await mesh.add({"name": "err", "type": "request.error", "target": {"component": S},
                        "params": {"code": code}, "duration": None})
        r = await mesh.call("GET", "/api/v1/pods", component=S)
        assert r.status == code and r.body["reason"] == reason
        assert r.headers.get("Retry-After") == retry_after
        assert (await mesh.call("GET", "/api/v1/pods", component=CM)).status == 200
        assert mesh.history("request", component=S, code=code)
        assert mesh.history("fault", op="inject", fault="err", code=code)
        await healed(mesh, "err")
        assert (await mesh.call("GET", "/api/v1/pods", component=S)).status == 200


async def test_stall_holds_requests_until_the_fault_ends() -> None:
    async with running() as mesh:
        await mesh.add({"name": "stall", "type": "request.stall", "target": {"component": S}, "duration": None})
        held = asyncio.ensure_future(mesh.call("GET", "/api/v1/pods", component=S))
        await settle(0.1)
        assert not held.done()
        assert mesh.engine.stalled == 1
        assert (await mesh.call("GET", "/api/v1/pods", component=CM)).status == 200
        await healed(mesh, "stall")
        assert (await held).status == 200


async def test_reset_cuts_the_connection_of_the_target_only() -> None:
    async with running() as mesh:
        await mesh.add({"name": "rst", "type": "request.reset", "target": {"component": S},
                        "match": {"verbs": ["create"]}, "duration": None})
        with pytest.raises(aiohttp.ClientError):
            await mesh.create_pod("p1", component=S)
        assert (await mesh.call("GET", "/api/v1/namespaces/default/pods/p1", component=CM)).status == 404
        await mesh.create_pod("p2", component=CM)
        assert mesh.history("fault", op="inject", fault="rst", effect="reset")
        await healed(mesh, "rst")
        await mesh.create_pod("p1", component=S)


async def test_commit_then_fail_stores_the_write_and_answers_an_error() -> None:
    async with running() as mesh:
        await mesh.add({"name": "ctf", "type": "request.commitThenFail", "target": {"component": S},
                        "match": {"resources": ["pods"]}, "params": {"code": 504}, "duration": None})
        r = await mesh.call("POST", "/api/v1/namespaces/default/pods", component=S,
                            body={"metadata": {"name": "p1"}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
        assert r.status == 504
        assert (await mesh.call("GET", "/api/v1/namespaces/default/pods/p1", component=S)).status == 200
        assert mesh.history("write", component=S, key="default/p1", event="ADDED")
        assert mesh.history("fault", op="inject", fault="ctf", effect="commitThenFail")
        await mesh.create_pod("p2", component=CM)  # 201 for the others
        await healed(mesh, "ctf")
        await mesh.create_pod("p3", component=S)


async def test_partition_of_a_component_and_of_a_node() -> None:
    async with running() as mesh:
        await mesh.create_node("node-1")
        await mesh.create_node("node-2")
        s_watch = await watch(mesh, "pods", component=S)
        cm_watch = await watch(mesh, "pods", component=CM)
        await mesh.add({"name": "cut", "type": "partition", "target": {"component": S}, "duration": None})
        await s_watch.wait_end()
        assert not cm_watch.ended
        with pytest.raises(aiohttp.ClientError):
            await mesh.call("GET", "/api/v1/pods", component=S)
        with pytest.raises(aiohttp.ClientError):
            await mesh.call("GET", "/clock", component=S)
        assert (await mesh.call("GET", "/api/v1/pods", component=CM)).status == 200
        await healed(mesh, "cut")
        assert (await mesh.call("GET", "/api/v1/pods", component=S)).status == 200
        # a node: its kubelet clients (instance = node name) only
        await mesh.add({"name": "cut-node", "type": "partition", "target": {"node": "node-1"}, "duration": None})
        with pytest.raises(aiohttp.ClientError):
            await mesh.call("GET", "/api/v1/nodes/node-1", component="kubelet", instance="node-1")
        assert (await mesh.call("GET", "/api/v1/nodes/node-2", component="kubelet", instance="node-2")).status == 200
        assert mesh.history("fault", op="inject", fault="cut-node", instance="node-1")
        await healed(mesh, "cut-node")
        await cm_watch.stop()


# ------------------------------------------------------------------------------------ watches


async def _pods_and_watches(mesh: Mesh) -> tuple[Any, Any]:
    s = await watch(mesh, "pods", component=S)
    cm = await watch(mesh, "pods", component=CM)
    return s, cm


async def _label(mesh: Mesh, name: str, value: str, *, component: str = "test") -> None:
    r = await mesh.call("PATCH", f"/api/v1/namespaces/default/pods/{name}", component=component,
                        body={"metadata": {"labels": {"v": value}}}, content_type="application/merge-patch+json")
    assert r.status == 200, r.body


async def _nominate(mesh: Mesh, name: str, node: str) -> None:
    r = await mesh.call("PATCH", f"/api/v1/namespaces/default/pods/{name}/status", component=S,
                        body={"status": {"nominatedNodeName": node}}, content_type="application/merge-patch+json")
    assert r.status == 200, r.body


async def test_hold_keeps_per_object_order_and_releases_in_order() -> None:
    async with running() as mesh:
        await mesh.create_pod("p1")
        await mesh.create_pod("p2")
        s, cm = await _pods_and_watches(mesh)
        # hold the echo of the scheduler's own nominatedNodeName patch (race B)
        await mesh.add({"name": "echo", "type": "watch.hold", "target": {"component": S},
                        "match": {"resources": ["pods"], "name": "p1", "eventTypes": ["MODIFIED"],
                                  "fields": ["~status.nominatedNodeName"]}, "duration": None})
        await _nominate(mesh, "p1", "node-1")
        await _label(mesh, "p1", "later")   # not matched (no change of the field), must not overtake
        await _label(mesh, "p2", "x")       # another object: passes
        await cm.wait_for(3)
        await s.wait_for(1)
        await settle()
        assert s.names() == [("MODIFIED", "p2")]
        assert s_bookmarks_suppressed(mesh, S)
        f = await mesh.fault("echo")
        assert f["status"]["injected"] == 1
        await healed(mesh, "echo")
        await s.wait_for(3)
        p1 = [e["object"] for e in s.events if e["object"]["metadata"]["name"] == "p1"]
        assert p1[0]["status"].get("nominatedNodeName") == "node-1"
        assert p1[1]["metadata"]["labels"] == {"v": "later"}
        assert [e[1] for e in cm.names()] == ["p1", "p1", "p2"]
        assert mesh.history("fault", op="recover", fault="echo", effect="release")
        await s.stop()
        await cm.stop()


def s_bookmarks_suppressed(mesh: Mesh, component: str) -> bool:
    return all(st.watcher.suppress_bookmarks for st in mesh.engine.watch.states.values()
               if st.watcher.identity[0] == component and st.pending)


async def test_hold_with_break_object_order_lets_later_events_overtake() -> None:
    async with running() as mesh:
        await mesh.create_pod("p1")
        s, _ = await _pods_and_watches(mesh)
        await mesh.add({"name": "byz", "type": "watch.hold", "target": {"component": S},
                        "match": {"resources": ["pods"], "fields": ["status.nominatedNodeName"]},
                        "breakObjectOrder": True, "duration": None})
        await _nominate(mesh, "p1", "n1")
        await mesh.call("PATCH", "/chaos/v1/faults/byz", body={"match": {"resources": ["pods"], "fields": [
            {"path": "metadata.labels.v", "op": "equals", "value": "never"}]}})
        await _label(mesh, "p1", "later")
        await s.wait_for(1)
        assert s.events[0]["object"]["metadata"]["labels"] == {"v": "later"}
        await healed(mesh)
        await s.wait_for(2)
        assert s.events[1]["object"]["status"]["nominatedNodeName"] == "n1"  # the stale state arrives last
        await s.stop()


async def test_delay_delivers_late_to_the_target_only() -> None:
    async with running(clock_rate=100.0) as mesh:
        s, cm = await _pods_and_watches(mesh)
        await mesh.add({"name": "late", "type": "watch.delay", "target": {"component": S},
                        "match": {"resources": ["pods"]}, "params": {"delay": 30}, "duration": None})
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await mesh.create_pod("p1")
        await cm.wait_for(1)
        assert s.names() == []
        await s.wait_for(1)
        assert loop.time() - t0 >= 0.28
        assert mesh.history("fault", op="inject", fault="late", effect="delay")
        assert mesh.history("fault", op="recover", fault="late", effect="deliver")
        await healed(mesh, "late")
        await mesh.create_pod("p2")
        await s.wait_for(2, within=0.2)
        await s.stop()
        await cm.stop()


async def test_drop_loses_events_for_the_target_only() -> None:
    async with running() as mesh:
        await mesh.create_pod("p1")
        s, cm = await _pods_and_watches(mesh)
        await mesh.add({"name": "lose", "type": "watch.drop", "target": {"component": S},
                        "match": {"resources": ["pods"], "eventTypes": ["DELETED"]}, "duration": None})
        await mesh.call("DELETE", "/api/v1/namespaces/default/pods/p1?gracePeriodSeconds=0", component="test")
        await mesh.create_pod("p2")
        await cm.wait_for(2)
        await s.wait_for(1)
        await settle()
        assert s.names() == [("ADDED", "p2")]
        assert cm.names() == [("DELETED", "p1"), ("ADDED", "p2")]
        assert mesh.history("fault", op="inject", fault="lose", effect="drop", key="default/p1")
        assert not mesh.history("delivery", component=S, key="default/p1")
        await healed(mesh, "lose")
        await s.stop()
        await cm.stop()


async def test_duplicate_sends_events_twice_to_the_target_only() -> None:
    async with running() as mesh:
        s, cm = await _pods_and_watches(mesh)
        await mesh.add({"name": "dup", "type": "watch.duplicate", "target": {"component": S},
                        "match": {"resources": ["pods"]}, "duration": None})
        await mesh.create_pod("p1")
        await s.wait_for(2)
        await cm.wait_for(1)
        await settle()
        assert s.names() == [("ADDED", "p1"), ("ADDED", "p1")]
        assert cm.names() == [("ADDED", "p1")]
        await healed(mesh, "dup")
        await mesh.create_pod("p2")
        await s.wait_for(3)
        await settle()
        assert len(s.names()) == 3
        await s.stop()
        await cm.stop()


async def test_reorder_shuffles_across_objects_but_keeps_each_objects_order() -> None:
    async with running() as mesh:
        for i in range(4):
            await mesh.create_pod(f"p{i}")
        s, cm = await _pods_and_watches(mesh)
        await mesh.add({"name": "mix", "type": "watch.reorder", "target": {"component": S},
                        "match": {"resources": ["pods"]}, "params": {"window": 8, "maxDelay": 100},
                        "duration": None})
        sent = []
        for round_ in range(2):
            for i in range(4):
                await _label(mesh, f"p{i}", str(round_))
                sent.append((f"p{i}", str(round_)))
        await s.wait_for(8)
        await cm.wait_for(8)
        got = [(e["object"]["metadata"]["name"], e["object"]["metadata"]["labels"]["v"]) for e in s.events]
        assert sorted(got) == sorted(sent)
        assert got != sent  # seed 7: the window is shuffled
        for i in range(4):
            assert [v for n, v in got if n == f"p{i}"] == ["0", "1"]  # per-object order kept
        assert [(e["object"]["metadata"]["name"], e["object"]["metadata"]["labels"]["v"]) for e in cm.events] == sent
        assert mesh.history("fault", op="recover", fault="mix", effect="reorder")
        await healed(mesh, "mix")
        await s.stop()
        await cm.stop()


async def test_close_ends_the_target_streams_only() -> None:
    async with running() as mesh:
        s, cm = await _pods_and_watches(mesh)
        s_nodes = await watch(mesh, "nodes", component=S)
        f = await mesh.add({"name": "bye", "type": "watch.close", "target": {"component": S},
                            "match": {"resources": ["pods"]}, "duration": None})
        assert f["status"]["injected"] == 1 and f["status"]["phase"] == "Recovered"  # one-shot
        await s.wait_end()
        await settle()
        assert not cm.ended and not s_nodes.ended
        await healed(mesh, "bye")
        await cm.stop()
        await s_nodes.stop()


async def test_gone_forces_410_on_existing_and_new_watches() -> None:
    async with running() as mesh:
        s, cm = await _pods_and_watches(mesh)
        await mesh.add({"name": "expire", "type": "watch.gone", "target": {"component": S},
                        "match": {"resources": ["pods"]}, "params": {"newWatches": True}, "duration": None})
        await s.wait_end()
        assert s.events[-1]["type"] == "ERROR" and s.events[-1]["object"]["code"] == 410
        again = await watch(mesh, "pods", component=S)
        await again.wait_end()
        assert again.events[-1]["object"]["code"] == 410
        assert not cm.ended
        await healed(mesh, "expire")
        fresh = await watch(mesh, "pods", component=S)
        await mesh.create_pod("p1")
        await fresh.wait_for(1)
        await fresh.stop()
        await cm.stop()


async def test_no_bookmarks_for_the_target_and_none_past_held_events() -> None:
    async with running(bookmark_interval=0.02) as mesh:
        s = await watch(mesh, "pods", component=S, bookmarks=True)
        cm = await watch(mesh, "pods", component=CM, bookmarks=True)
        await mesh.add({"name": "quiet", "type": "watch.noBookmarks", "target": {"component": S},
                        "duration": None})
        await settle(0.01)
        n = len(s.events)
        await settle(0.2)
        assert len(s.events) == n
        assert any(e["type"] == "BOOKMARK" for e in cm.events)
        await healed(mesh, "quiet")
        await settle(0.2)
        assert any(e["type"] == "BOOKMARK" for e in s.events[n:])
        # while a hold keeps an event, no bookmark may claim its revision was delivered
        await mesh.add({"name": "h", "type": "watch.hold", "target": {"component": S},
                        "match": {"resources": ["pods"]}, "duration": None})
        pod = await mesh.create_pod("p1")
        rv = int(pod["metadata"]["resourceVersion"])
        m = len(s.events)
        await settle(0.2)
        assert all(int(e["object"]["metadata"]["resourceVersion"]) < rv for e in s.events[m:])
        await healed(mesh, "h")
        await s.wait_for(1)
        await s.stop()
        await cm.stop()


async def test_stale_reads_serve_the_target_from_the_past() -> None:
    async with running() as mesh:
        await mesh.create_pod("p1")
        await mesh.create_pod("p2")
        await _label(mesh, "p1", "new")
        await mesh.add({"name": "lag", "type": "reads.stale", "target": {"component": S},
                        "params": {"revisions": 2}, "duration": None})
        current = mesh.revision()
        r = await mesh.call("GET", "/api/v1/namespaces/default/pods", component=S)
        assert r.body["metadata"]["resourceVersion"] == str(current - 2)
        assert [p["metadata"]["name"] for p in r.body["items"]] == ["p1"]
        assert (await mesh.call("GET", "/api/v1/namespaces/default/pods/p2", component=S)).status == 404
        p1 = (await mesh.call("GET", "/api/v1/namespaces/default/pods/p1", component=S)).body
        assert "labels" not in p1["metadata"] or p1["metadata"]["labels"] in ({}, None)
        r = await mesh.call("GET", "/api/v1/namespaces/default/pods", component=CM)
        assert [p["metadata"]["name"] for p in r.body["items"]] == ["p1", "p2"]
        assert mesh.history("fault", op="inject", fault="lag", effect="stale", rv=current - 2)
        await healed(mesh, "lag")
        r = await mesh.call("GET", "/api/v1/namespaces/default/pods", component=S)
        assert len(r.body["items"]) == 2


async def test_stale_reads_by_cluster_seconds() -> None:
    async with running(clock_rate=100.0) as mesh:
        await mesh.create_pod("old")
        await asyncio.sleep(0.2)  # 20 cluster seconds
        await mesh.create_pod("new")
        await mesh.add({"name": "lag", "type": "reads.stale", "target": {"component": S},
                        "params": {"seconds": 10}, "duration": None})
        r = await mesh.call("GET", "/api/v1/namespaces/default/pods", component=S)
        assert [p["metadata"]["name"] for p in r.body["items"]] == ["old"]
        await healed(mesh)


# ------------------------------------------------------------------------------------ triggers


async def test_hold_scheduler_pod_deletes_until_node_delete_was_delivered() -> None:
    async with running() as mesh:
        await mesh.create_node("node-1")
        for name in ("p1", "p2"):
            await mesh.create_pod(name, node="node-1")
        s_pods, cm_pods = await _pods_and_watches(mesh)
        s_nodes = await watch(mesh, "nodes", component=S)
        cm_nodes = await watch(mesh, "nodes", component=CM)
        await mesh.add({"name": "ghost", "type": "watch.hold", "target": {"component": S},
                        "match": {"resources": ["pods"], "eventTypes": ["DELETED"]}, "duration": None,
                        "trigger": {"action": "release", "on": "delivered", "component": S, "resource": "nodes",
                                    "name": "node-1", "eventTypes": ["DELETED"]}})
        for name in ("p1", "p2"):
            r = await mesh.call("DELETE", f"/api/v1/namespaces/default/pods/{name}?gracePeriodSeconds=0")
            assert r.status == 200
        await cm_pods.wait_for(2, type_="DELETED")
        await settle()
        assert s_pods.names("DELETED") == []
        assert (await mesh.fault("ghost"))["status"]["phase"] == "Active"
        await mesh.call("DELETE", "/api/v1/nodes/node-1")
        await s_pods.wait_for(2, type_="DELETED")
        await cm_nodes.wait_for(1, type_="DELETED")
        deliveries = mesh.history("delivery")

        def order(component: str) -> list[tuple[str, str]]:
            return [(d["resource"], d["key"]) for d in deliveries
                    if d["component"] == component and d["event"] == "DELETED"]

        assert order(S) == [("nodes", "node-1"), ("pods", "default/p1"), ("pods", "default/p2")]
        assert order(CM) == [("pods", "default/p1"), ("pods", "default/p2"), ("nodes", "node-1")]
        f = await mesh.fault("ghost")
        assert f["status"]["phase"] == "Recovered" and f["status"]["injected"] == 2
        assert f["status"]["recovered"] == 2 and f["status"]["triggerCounts"] == [1]
        ops = [r["op"] for r in mesh.history("fault", fault="ghost")]
        assert ops == ["create", "inject", "inject", "trigger", "end", "recover", "recover"]
        await healed(mesh, "ghost")
        for st in (s_pods, cm_pods, s_nodes, cm_nodes):
            await st.stop()


async def test_arm_trigger_with_occurrence_and_cluster_delay() -> None:
    async with running(clock_rate=100.0) as mesh:
        s, cm = await _pods_and_watches(mesh)
        await mesh.add({"name": "armed", "type": "watch.drop", "target": {"component": S},
                        "match": {"resources": ["pods"]}, "duration": None,
                        "trigger": {"action": "arm", "on": "written", "component": CM, "resource": "pods",
                                    "eventTypes": ["ADDED"], "occurrence": 2, "delay": 10}})
        assert (await mesh.fault("armed"))["status"]["phase"] == "Pending"
        await mesh.create_pod("a", component=CM)
        await mesh.create_pod("b", component="test")  # another writer: does not count
        await settle()
        assert (await mesh.fault("armed"))["status"]["phase"] == "Pending"
        await mesh.create_pod("c", component=CM)     # the 2nd write: armed 10 cluster seconds later
        await mesh.create_pod("d")
        await s.wait_for(4)
        await asyncio.sleep(0.2)
        assert (await mesh.fault("armed"))["status"]["phase"] == "Active"
        await mesh.create_pod("e")
        await cm.wait_for(5)
        await settle()
        assert [n for _, n in s.names()] == ["a", "b", "c", "d"]
        await healed(mesh, "armed")
        await s.stop()
        await cm.stop()


# ------------------------------------------------------------------------------------ forwarding


class StandIn:
    """A stand-in admin endpoint (kubelet or component) that records calls."""

    def __init__(self, *, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.calls: list[tuple[str, str, Any]] = []
        self.slow = False
        self.crashes: list[tuple[int, bool]] = []
        self.frozen: list[str] = []
        self.points = chaospoints.ChaosPoints(crash=lambda code, restart: self.crashes.append((code, restart)))
        stand_in = self

        class Informer:
            def __init__(self, name: str) -> None:
                self.name = name

            def freeze(self) -> None:
                stand_in.frozen.append(self.name)

            def unfreeze(self) -> None:
                stand_in.frozen.remove(self.name)

        self.app = web.Application()
        self.app.add_routes(chaospoints.routes(points=self.points, informers={"pods": Informer("pods")},
                                               crash=lambda code, restart: self.crashes.append((code, restart)),
                                               crash_delay=0.0))
        self.app.router.add_route("*", "/{tail:.*}", self.record)
        self.server = TestServer(self.app, host=host, port=port)

    async def record(self, request: web.Request) -> web.Response:
        raw = await request.read()
        self.calls.append((request.method, request.path, orjson.loads(raw) if raw else None))
        if self.slow:
            await asyncio.sleep(1.0)
        return web.json_response({"ok": True})

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    def paths(self) -> list[str]:
        return [f"{m} {p}" for m, p, _ in self.calls]


@contextlib.asynccontextmanager
async def stand_in(*, host: str = "127.0.0.1", port: int | None = None) -> AsyncIterator[StandIn]:
    s = StandIn(host=host, port=port)
    await s.server.start_server()
    try:
        yield s
    finally:
        await s.server.close()


async def register_kubelet(mesh: Mesh, instance: str, s: StandIn, nodes: list[str]) -> None:
    r = await mesh.call("PUT", f"/kubemesh/v1/components/{instance}", component="kubelet", instance=instance,
                        body={"component": "kubelet", "instance": instance, "adminURL": s.url, "nodes": nodes})
    assert r.status == 200, r.body


async def test_node_faults_are_forwarded_to_the_hosting_kubelet_and_undone() -> None:
    # Two kubelets on one port, as in containers (on two loopback addresses): node faults are
    # routed by the nodes each kubelet registered, never by the port on the Node object.
    port = free_port()
    async with running(forward_timeout=0.3) as mesh, stand_in(port=port) as kubelet, \
            stand_in(host="127.0.0.2", port=port) as other:
        await mesh.create_node("node-1", port=port)
        await mesh.create_node("node-2", port=port)
        await register_kubelet(mesh, "kubelet-2", other, ["node-2"])
        await register_kubelet(mesh, "kubelet-1", kubelet, ["node-1"])
        f = await mesh.add({"name": "off", "type": "node.powerOff", "target": {"node": "node-1"}, "duration": None})
        assert f["status"] | {"injected": 1, "phase": "Active", "targets": ["node-1"]} == f["status"]
        # overlapping: a second power-off; the node comes back only when both ended
        await mesh.add({"name": "off2", "type": "node.powerOff", "target": {"node": "node-1"}, "duration": None})
        await mesh.add({"name": "mp", "type": "node.condition", "target": {"node": "node-1"},
                        "params": {"type": "MemoryPressure"}, "duration": None})
        await mesh.add({"name": "lease", "type": "node.leaseStop", "target": {"node": "node-1"}, "duration": None})
        await mesh.add({"name": "slow", "type": "node.containersSlow", "target": {"node": "node-1"},
                        "params": {"startDelay": 5}, "duration": None})
        fail = await mesh.add({"name": "oom", "type": "node.containersFail", "target": {"node": "node-1"},
                               "params": {"reason": "OOMKilled", "exitCode": 137}, "duration": None})
        assert fail["status"]["phase"] == "Recovered"  # one-shot
        await mesh.call("DELETE", "/chaos/v1/faults/off")
        assert "POST /nodes/node-1/power-on" not in kubelet.paths()
        await mesh.call("DELETE", "/chaos/v1/faults/off2")
        await healed(mesh)
        assert kubelet.paths() == [
            "POST /nodes/node-1/power-off", "POST /nodes/node-1/power-off", "POST /nodes/node-1/conditions",
            "POST /nodes/node-1/lease/stop", "POST /nodes/node-1/containers/slow",
            "POST /nodes/node-1/containers/fail", "POST /nodes/node-1/power-on",
            "DELETE /nodes/node-1/conditions/MemoryPressure", "POST /nodes/node-1/lease/resume",
            "POST /nodes/node-1/containers/slow"]
        assert kubelet.calls[2][2] == {"type": "MemoryPressure", "status": "True"}
        assert kubelet.calls[-1][2] == {"startDelay": 0, "stopDelay": None}
        assert other.calls == []
        assert [r["outcome"] for r in mesh.history("fault", op="inject", fault="off")] == ["ok"]
        # no answer in time: the outcome is unknown (info), and it is still recovered
        kubelet.slow = True
        f = await mesh.add({"name": "unsure", "type": "node.statusStop", "target": {"node": "node-1"},
                            "duration": None})
        assert f["status"]["lastError"] and "unknown" in f["status"]["lastError"]
        assert [r["outcome"] for r in mesh.history("fault", op="inject", fault="unsure")] == ["info"]
        kubelet.slow = False
        await healed(mesh, "unsure")
        assert kubelet.paths()[-1] == "POST /nodes/node-1/status/resume"


async def test_component_faults_are_forwarded_to_the_admin_endpoint() -> None:
    async with running() as mesh, stand_in() as sched, stand_in() as cm:
        for inst, comp, admin in (("sched-1", S, sched), ("cm-1", CM, cm)):
            r = await mesh.call("PUT", f"/kubemesh/v1/components/{inst}",
                                body={"component": comp, "instance": inst, "adminURL": admin.url})
            assert r.status == 200
        await mesh.add({"name": "p", "type": "component.pause", "target": {"component": S}, "duration": None})
        await mesh.add({"name": "sk1", "type": "clock.skew", "target": {"component": S},
                        "params": {"seconds": 30}, "duration": None})
        await mesh.add({"name": "sk2", "type": "clock.skew", "target": {"instance": "sched-1"},
                        "params": {"seconds": -5}, "duration": None})
        await mesh.add({"name": "fr", "type": "component.freezeInformer", "target": {"component": S},
                        "params": {"informer": "pods"}, "duration": None})
        assert sched.frozen == ["pods"]
        await mesh.add({"name": "pt", "type": "component.chaosPoint", "target": {"component": S},
                        "params": {"point": "scheduler.after_bind", "action": "crash", "after": 1},
                        "duration": None})
        await sched.points.hit("scheduler.after_bind")
        assert sched.crashes == []
        await sched.points.hit("scheduler.after_bind")
        assert sched.crashes == [(1, False)]
        crash = await mesh.add({"name": "boom", "type": "component.crash", "target": {"component": S},
                                "params": {"restart": True}, "duration": None})
        assert crash["status"]["phase"] == "Recovered"
        await settle()
        assert sched.crashes[-1] == (1, True)
        skews = [body["skew"] for m, p, body in sched.calls if p == "/chaos/clock"]
        assert skews == [30, 25]
        await healed(mesh)
        skews = [body["skew"] for m, p, body in sched.calls if p == "/chaos/clock"]
        assert skews[-1] == 0
        assert "POST /chaos/resume" in sched.paths()
        assert sched.frozen == [] and sched.points.armed == {}
        assert cm.calls == [] and cm.crashes == []


async def test_chaos_point_pause_blocks_the_task_until_disarmed() -> None:
    points = chaospoints.ChaosPoints(crash=lambda code, restart: None)
    points.declare("a.b")
    points.arm("a.b", action="pause")
    task = asyncio.ensure_future(points.hit("a.b"))
    await settle()
    assert not task.done() and points.describe()[0]["paused"] == 1
    assert points.disarm("a.b")
    await task
    await points.hit("a.b")  # disarmed: passes
    assert points.describe()[0]["hits"] == 2

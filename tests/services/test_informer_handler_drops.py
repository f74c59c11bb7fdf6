"""Handler drops (chaos `component.dropHandler`): the store applies a change, the handlers miss it.

The informer runs against the small fake apiserver of `test_informing`. The point of the fault
is the difference with a stream that lost the event (`watch.drop`): there a relist repairs the
store and the handlers hear of it as `DeletedFinalStateUnknown`; here the store was right all
along, so a relist finds nothing to repair and the handlers' consumer stays wrong for good.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from test_informing import FakeApi, informing

from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.machinery.clock import ManualClock
from kubemesh.services.machinery.informing import HandlerDrop, Informer
from kubemesh.services.model.kinds import NODES, PODS, Obj
from kubemesh.services.process import chaospoints


@pytest.fixture
async def fake() -> AsyncIterator[FakeApi]:
    api = FakeApi()
    server = TestServer(api.app(), shutdown_timeout=1.0)
    await server.start_server()
    api.url = str(server.make_url("")).rstrip("/")
    yield api
    api.end_watches()
    await server.close()


def test_rule_matching_and_occurrence() -> None:
    pod: Obj = {"metadata": {"name": "p1", "namespace": "default", "resourceVersion": "5"}}
    node: Obj = {"metadata": {"name": "node-1", "resourceVersion": "6"}}
    any_delete = HandlerDrop(event_types=frozenset({"DELETED"}))
    assert any_delete.matches("DELETED", pod) and any_delete.matches("DELETED", node)
    assert not any_delete.matches("ADDED", pod)
    named = HandlerDrop(name="node-1")
    assert named.matches("MODIFIED", node) and not named.matches("MODIFIED", pod)
    assert HandlerDrop(namespace="").matches("ADDED", node)  # cluster-scoped: namespace ""
    assert not HandlerDrop(namespace="kube-system").matches("ADDED", pod)
    second = HandlerDrop(occurrence=2)
    assert [second.take("MODIFIED", pod) for _ in range(3)] == [False, True, False]
    assert second.describe() | {"seen": 3, "dropped": 1, "droppedKeys": ["MODIFIED default/p1@5"]} == \
        second.describe()


async def test_a_dropped_delete_leaves_the_store_right_and_the_handlers_wrong_even_after_a_relist(
        fake: FakeApi) -> None:
    for name in ("p1", "p2"):
        fake.add(name, node="node-1")
    async with informing(fake) as h:
        await h.informer.wait_for_sync()
        await h.until(lambda: len(fake.watch_queries) == 1)
        h.rec.calls.clear()
        h.informer.add_handler_drop("lose-p1", HandlerDrop(event_types=frozenset({"DELETED"}), name="p1"))
        fake.delete("p1")
        fake.update("p2")
        fake.delete("p2")
        await h.caught_up()
        assert h.informer.get("default/p1") is None  # the store applied it ...
        assert h.rec.calls == [("update", "default/p2", 2, 4), ("delete", "default/p2", 5)]  # ... handlers missed it
        rule = h.informer.handler_drops["lose-p1"]
        assert (rule.seen, rule.dropped, rule.dropped_keys) == (1, 1, ["DELETED default/p1@3"])
        # A relist (410) compares the list with the store: both lack p1, so nothing is repaired.
        fake.expire()
        fake.send_gone()
        await h.until(lambda: len(fake.list_queries) == 2, advance=True)
        await h.caught_up()
        assert h.store_matches()
        assert h.rec.calls == [("update", "default/p2", 2, 4), ("delete", "default/p2", 5)]
        # Disarmed: later notifications flow again; what was dropped stays dropped.
        removed = h.informer.remove_handler_drop("lose-p1")
        assert removed is rule and h.informer.handler_drops == {}
        assert h.informer.remove_handler_drop("lose-p1") is None
        fake.add("p3")
        await h.caught_up()
        assert h.rec.calls[-1] == ("add", "default/p3", 6, False)


async def test_relist_notifications_and_uid_changes_can_be_dropped(fake: FakeApi) -> None:
    fake.add("p1")
    fake.add("p2")
    async with informing(fake) as h:
        await h.informer.wait_for_sync()
        await h.until(lambda: len(fake.watch_queries) == 1)
        h.rec.calls.clear()
        h.informer.add_handler_drop("adds", HandlerDrop(event_types=frozenset({"ADDED"})))
        # p2 replaced under the same key while the stream is silent; a relist finds the new UID:
        # its DELETED (tombstone) is delivered, its ADDED dropped.
        fake.silent = True
        fake.delete("p2")
        fake.add("p2", new_uid=True)
        fake.expire()
        fake.silent = False
        fake.send_gone()
        await h.until(lambda: len(fake.list_queries) == 2, advance=True)
        await h.caught_up()
        assert h.rec.calls == [("unknown", "default/p2", 2)]
        assert h.informer.get("default/p2") is not None
        assert h.informer.handler_drops["adds"].dropped_keys == ["ADDED default/p2@4"]


async def test_no_rule_means_every_notification_is_delivered(fake: FakeApi) -> None:
    fake.add("p1")
    async with informing(fake) as h:
        await h.informer.wait_for_sync()
        await h.until(lambda: len(fake.watch_queries) == 1)
        h.informer.add_handler_drop("x", HandlerDrop(name="other"))
        fake.update("p1")
        fake.delete("p1")
        await h.caught_up()
        assert [c[0] for c in h.rec.calls] == ["add", "update", "delete"]
        assert h.informer.handler_drops["x"].seen == 0


# ---- the admin routes the apiserver forwards `component.dropHandler` to ---------------------


@pytest.fixture
async def admin() -> AsyncIterator[tuple[TestClient[web.Request, web.Application], dict[str, Informer]]]:
    client = ApiClient("http://127.0.0.1:9", component="test", instance="t")
    clock = ManualClock()
    informers = {"nodes": Informer(client, NODES, clock=clock), "pods": Informer(client, PODS, clock=clock),
                 "frozen-only": _FreezeOnly()}
    app = web.Application()
    app.add_routes(chaospoints.routes(points=chaospoints.ChaosPoints(), informers=informers))
    tc: TestClient[web.Request, web.Application] = TestClient(TestServer(app))
    await tc.start_server()
    try:
        yield tc, informers  # type: ignore[misc]
    finally:
        await tc.close()
        await client.close()


class _FreezeOnly:
    """An informer-like object without handler drops (it is skipped)."""

    kind = PODS

    def freeze(self) -> None: ...

    def unfreeze(self) -> None: ...


async def _json(resp: Any) -> Any:
    return await resp.json(content_type=None)


async def test_admin_routes_arm_list_and_disarm(admin: tuple[TestClient[web.Request, web.Application],
                                                             dict[str, Informer]]) -> None:
    tc, informers = admin
    body = {"resources": ["nodes"], "eventTypes": ["DELETED"], "name": "node-1", "namespace": None,
            "occurrence": None}
    r = await tc.post("/chaos/handler-drops/drop-nodes", json=body)
    assert r.status == 200 and (await _json(r))["informers"] == ["nodes"]
    rule = informers["nodes"].handler_drops["drop-nodes"]
    assert (rule.event_types, rule.name, rule.occurrence) == (frozenset({"DELETED"}), "node-1", None)
    assert informers["pods"].handler_drops == {}
    listed = (await _json(await tc.get("/chaos/handler-drops")))["drops"]
    assert [(d["id"], d["informer"], d["resource"], d["dropped"]) for d in listed] == [
        ("drop-nodes", "nodes", "nodes", 0)]
    r = await tc.delete("/chaos/handler-drops/drop-nodes")
    assert r.status == 200
    assert [d["informer"] for d in (await _json(r))["removed"]] == ["nodes"]
    assert informers["nodes"].handler_drops == {}
    again = await tc.delete("/chaos/handler-drops/drop-nodes")  # idempotent (recovery may repeat)
    assert again.status == 200 and (await _json(again))["removed"] == []


@pytest.mark.parametrize(("body", "status"), [
    ({}, 400),
    ({"resources": []}, 400),
    ({"resources": ["pods"], "eventTypes": ["GONE"]}, 400),
    ({"resources": ["pods"], "occurrence": 0}, 400),
    ({"resources": ["pods"], "name": 3}, 400),
    ({"resources": ["leases"]}, 404),
])
async def test_admin_route_rejects_bad_rules(admin: tuple[TestClient[web.Request, web.Application],
                                                          dict[str, Informer]], body: dict[str, Any],
                                             status: int) -> None:
    tc, informers = admin
    r = await tc.post("/chaos/handler-drops/bad", json=body)
    assert r.status == status, await r.text()
    assert all(i.handler_drops == {} for n, i in informers.items() if n != "frozen-only")

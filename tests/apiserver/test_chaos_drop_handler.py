"""`component.dropHandler`: the spec, and forwarding to a component's handler-drop admin routes.

The component is a stand-in admin endpoint serving `kubemesh.services.process.chaospoints` routes over real
(not running) informers, so the test checks what the component ends up armed with.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from chaoskit import Mesh, running, settle

from kubemesh.apiserver.chaos.spec import SpecError, parse
from kubemesh.services.machinery.client import ApiClient
from kubemesh.services.machinery.clock import ManualClock
from kubemesh.services.machinery.informing import Informer
from kubemesh.services.model.kinds import NODES, PODS
from kubemesh.services.process import chaospoints

DROP: dict[str, Any] = {"type": "component.dropHandler", "target": {"component": "scheduler"},
                        "match": {"resources": ["nodes"], "eventTypes": ["DELETED"], "name": "node-1"},
                        "duration": None}


def test_spec_normalizes_and_names_by_default() -> None:
    spec = parse({**DROP, "params": {"occurrence": 2}})
    assert spec.category == "component"
    assert spec.name == "component-dropHandler-scheduler".lower()
    assert spec.to_dict()["match"] == {"resources": ["nodes"], "eventTypes": ["DELETED"], "name": "node-1"}
    assert spec.params == {"occurrence": 2}
    assert parse(DROP).params == {}


@pytest.mark.parametrize(("spec", "field"), [
    ({**DROP, "match": {"eventTypes": ["DELETED"]}}, "match.resources"),
    ({**DROP, "match": None}, "match.resources"),
    ({**DROP, "match": {"resources": ["pods/status"]}}, "match.resources"),
    ({**DROP, "match": {"resources": ["widgets"]}}, "match.resources"),
    ({**DROP, "match": {"resources": ["nodes"], "eventTypes": ["GONE"]}}, "match.eventTypes"),
    ({**DROP, "match": {"resources": ["nodes"], "verbs": ["get"]}}, "match.verbs"),
    ({**DROP, "match": {"resources": ["nodes"], "fields": ["spec.unschedulable"]}}, "match.fields"),
    ({**DROP, "params": {"occurrence": 0}}, "params.occurrence"),
    ({**DROP, "params": {"occurrence": "first"}}, "params.occurrence"),
    ({**DROP, "params": {"informer": "nodes"}}, "params.informer"),
    ({**DROP, "target": {"node": "node-1"}}, "target.node"),
    ({**DROP, "target": {"component": "*"}}, "target.component"),
])
def test_invalid_specs_name_the_field_at_fault(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        parse(spec)
    assert field in [c["field"] for c in err.value.causes], err.value.causes


def test_other_component_faults_still_take_no_match() -> None:
    with pytest.raises(SpecError) as err:
        parse({"type": "component.pause", "target": {"component": "scheduler"}, "duration": None,
               "match": {"resources": ["nodes"]}})
    assert [c["field"] for c in err.value.causes] == ["match"]


async def test_invalid_spec_is_422_over_http_and_nothing_is_created() -> None:
    async with running() as mesh:
        r = await mesh.call("POST", "/chaos/v1/faults", body={**DROP, "match": {"eventTypes": ["DELETED"]}})
        assert r.status == 422
        assert "match.resources" in [c["field"] for c in r.body["details"]["causes"]]
        assert (await mesh.call("GET", "/chaos/v1/faults")).body["items"] == []


@contextlib.asynccontextmanager
async def component(mesh: Mesh, *, name: str = "scheduler", instance: str = "sched-1"
                    ) -> AsyncIterator[dict[str, Informer]]:
    """A registered component whose admin endpoint serves the chaos routes over real informers."""
    client = ApiClient("http://127.0.0.1:9", component=name, instance=instance)
    clock = ManualClock()
    informers = {"nodes": Informer(client, NODES, clock=clock), "pods": Informer(client, PODS, clock=clock)}
    app = web.Application()
    app.add_routes(chaospoints.routes(points=chaospoints.ChaosPoints(), informers=informers))
    server = TestServer(app)
    await server.start_server()
    try:
        r = await mesh.call("PUT", f"/kubemesh/v1/components/{instance}",
                            body={"component": name, "instance": instance,
                                  "adminURL": str(server.make_url("")).rstrip("/")})
        assert r.status == 200, r.body
        yield informers
    finally:
        await server.close()
        await client.close()


async def test_forwarded_to_the_component_and_undone_when_deleted() -> None:
    async with running() as mesh, component(mesh) as sched, component(mesh, name="controller_manager",
                                                                      instance="cm-1") as cm:
        f = await mesh.add({**DROP, "name": "miss-node-1", "params": {"occurrence": 1}})
        assert f["status"]["phase"] == "Active" and f["status"]["injected"] == 1
        assert f["status"]["targets"] == ["sched-1"]
        rule = sched["nodes"].handler_drops["miss-node-1"]
        assert (rule.event_types, rule.name, rule.namespace, rule.occurrence) == (
            frozenset({"DELETED"}), "node-1", None, 1)
        assert sched["pods"].handler_drops == {} and cm["nodes"].handler_drops == {}
        # A patch of the match re-arms the component with the new rule.
        r = await mesh.call("PATCH", "/chaos/v1/faults/miss-node-1", body={"match": {"name": "node-2"}})
        assert r.status == 200, r.body
        assert sched["nodes"].handler_drops["miss-node-1"].name == "node-2"
        r = await mesh.call("DELETE", "/chaos/v1/faults/miss-node-1")
        assert r.status == 200 and r.body["status"]["phase"] == "Recovered"
        await settle()
        assert sched["nodes"].handler_drops == {}
        ops = [(x["op"], x["outcome"]) for x in mesh.history("fault", fault="miss-node-1")
               if x["op"] in ("inject", "recover")]
        assert ops == [("inject", "ok"), ("recover", "ok"), ("inject", "ok"), ("recover", "ok")]
        assert mesh.engine.leftovers()["effects"] == 0


async def test_a_resource_the_component_does_not_watch_fails_the_fault() -> None:
    async with running() as mesh, component(mesh) as sched:
        f = await mesh.add({**DROP, "name": "no-leases", "match": {"resources": ["leases"]}})
        assert f["status"]["phase"] == "Failed"
        assert "no informer of leases" in f["status"]["lastError"]
        assert all(i.handler_drops == {} for i in sched.values())
        assert mesh.engine.leftovers()["effects"] == 0


async def test_an_unregistered_component_is_422() -> None:
    async with running() as mesh:
        r = await mesh.call("POST", "/chaos/v1/faults", body=DROP)
        assert r.status == 422
        assert "target.component" in [c["field"] for c in r.body["details"]["causes"]]

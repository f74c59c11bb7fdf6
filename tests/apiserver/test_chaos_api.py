"""The chaos API itself: spec validation, CRUD, the desired set, reset, auth, TTLs, overlaps."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import pytest
from chaoskit import TOKEN, running, watch

from kubemesh.services.mesh.chaos_client import FaultFailedError, InvalidError, delivered
from kubemesh.services.mesh.endpoint import MeshEndpoint
from kubemesh.services.model import codec
from kubemesh.services.tools.chaos_cli import build_spec, parse_trigger
from kubemesh.services.tools.cli import build_parser, builtin_commands

LATENCY: dict[str, Any] = {"type": "request.latency", "target": {"component": "scheduler"},
                           "params": {"delay": 0.01}, "duration": None}


@pytest.mark.parametrize(("spec", "field"), [
    ({"type": "nope", "target": {"component": "scheduler"}, "duration": None}, "type"),
    ({"type": "request.error", "target": {"component": "scheduler"}, "params": {"code": 418},
      "duration": None}, "params.code"),
    ({"type": "request.error", "target": {"component": "scheduler"}, "params": {"code": 500, "retryAfter": 3},
      "duration": None}, "params.retryAfter"),
    ({"type": "request.latency", "target": {"component": "scheduler"}, "params": {"delay": 1}}, "duration"),
    ({"type": "request.latency", "target": {"component": "scheduler"}, "params": {"delay": -1},
      "duration": None}, "params.delay"),
    ({"type": "request.latency", "params": {"delay": 1}, "duration": None}, "target"),
    ({**LATENCY, "probability": 1.5}, "probability"),
    ({**LATENCY, "target": {"component": "scheduler", "mode": "fixed"}}, "target.value"),
    ({**LATENCY, "match": {"verbs": ["frobnicate"]}}, "match.verbs"),
    ({**LATENCY, "match": {"resources": ["widgets"]}}, "match.resources"),
    ({**LATENCY, "match": {"eventTypes": ["DELETED"]}}, "match.eventTypes"),
    ({"type": "watch.hold", "target": {"component": "scheduler"}, "match": {"eventTypes": ["GONE"]},
      "duration": None}, "match.eventTypes"),
    ({"type": "watch.hold", "target": {"component": "scheduler"}, "duration": None,
      "trigger": {"action": "release", "on": "seen", "resource": "nodes"}}, "trigger.on"),
    ({"type": "watch.hold", "target": {"component": "scheduler"}, "duration": None,
      "trigger": {"action": "release"}}, "trigger.resource"),
    ({"type": "watch.drop", "target": {"component": "scheduler"}, "duration": None,
      "breakObjectOrder": True}, "breakObjectOrder"),
    ({"type": "reads.stale", "target": {"component": "scheduler"}, "duration": None}, "params.revisions"),
    ({"type": "request.commitThenFail", "target": {"component": "scheduler"}, "match": {"verbs": ["get"]},
      "duration": None}, "match.verbs"),
    ({"type": "node.powerOff", "target": {"component": "scheduler"}, "duration": None}, "target.component"),
    ({"type": "node.powerOff", "target": {"node": "node-1"}, "duration": None, "match": {"verbs": ["get"]}},
      "match"),
    ({**LATENCY, "name": "Bad_Name"}, "name"),
    ({**LATENCY, "colour": "red"}, "colour"),
    ({**LATENCY, "params": {"delay": 1, "speed": 2}}, "params.speed"),
])
async def test_invalid_specs_are_422_with_the_field_at_fault_and_nothing_is_created(spec: dict[str, Any],
                                                                                    field: str) -> None:
    async with running() as mesh:
        before = len(mesh.history("fault"))
        r = await mesh.call("POST", "/chaos/v1/faults", body=spec)
        assert r.status == 422, r.body
        assert r.body["reason"] == "Invalid"
        fields = [c["field"] for c in r.body["details"]["causes"]]
        assert field in fields, fields
        assert (await mesh.call("GET", "/chaos/v1/faults")).body["items"] == []
        assert len(mesh.history("fault")) == before


async def test_unknown_targets_are_422_and_nothing_is_injected() -> None:
    async with running() as mesh:
        for spec, field in [
            ({**LATENCY, "target": {"component": "shceduler"}}, "target.component"),
            ({**LATENCY, "target": {"component": "controller-manager"}}, "target.component"),
            ({"type": "node.powerOff", "target": {"node": "node-9"}, "duration": None}, "target.node"),
            ({"type": "component.pause", "target": {"component": "scheduler"}, "duration": None},
             "target.component"),
        ]:
            r = await mesh.call("POST", "/chaos/v1/faults", body=spec)
            assert r.status == 422, (spec, r.body)
            assert field in [c["field"] for c in r.body["details"]["causes"]]
            assert field in r.body["message"]
        assert mesh.history("fault") == []
        assert mesh.engine.leftovers()["liveFaults"] == 0


async def test_crud_in_json_and_msgpack() -> None:
    async with running() as mesh:
        created = await mesh.add({**LATENCY, "name": "slow-sched"})
        assert created["status"]["phase"] == "Active"
        assert created["target"] == {"component": "scheduler", "mode": "all"}
        assert created["duration"] is None
        # default names, unique
        a = await mesh.add(LATENCY)
        b = await mesh.add(LATENCY)
        assert a["name"] == "request-latency-scheduler" and b["name"] == "request-latency-scheduler-2"
        # duplicate explicit name
        r = await mesh.call("POST", "/chaos/v1/faults", body={**LATENCY, "name": "slow-sched"})
        assert r.status == 409
        names = [f["name"] for f in (await mesh.call("GET", "/chaos/v1/faults")).body["items"]]
        assert names == ["slow-sched", "request-latency-scheduler", "request-latency-scheduler-2"]
        # PATCH
        r = await mesh.call("PATCH", "/chaos/v1/faults/slow-sched", body={"params": {"delay": 0.5},
                                                                          "probability": 0.5})
        assert r.status == 200, r.body
        assert r.body["params"]["delay"] == 0.5 and r.body["probability"] == 0.5
        r = await mesh.call("PATCH", "/chaos/v1/faults/slow-sched", body={"type": "request.error"})
        assert r.status == 422 and r.body["details"]["causes"][0]["field"] == "type"
        r = await mesh.call("PATCH", "/chaos/v1/faults/slow-sched", body={"params": {"delay": -3}})
        assert r.status == 422 and r.body["details"]["causes"][0]["field"] == "params.delay"
        # msgpack in and out
        packed = msgpack.packb({**LATENCY, "name": "packed"})
        async with mesh.session.post(mesh.url + "/chaos/v1/faults", data=packed,
                                     headers={**mesh.headers("test"), "Content-Type": codec.MSGPACK,
                                              "Accept": codec.MSGPACK}) as resp:
            assert resp.status == 201
            assert resp.headers["Content-Type"].startswith(codec.MSGPACK)
            body: dict[str, Any] = msgpack.unpackb(await resp.read())
            assert body["name"] == "packed" and body["status"]["phase"] == "Active"
        # DELETE heals and removes
        r = await mesh.call("DELETE", "/chaos/v1/faults/slow-sched")
        assert r.status == 200 and r.body["status"]["phase"] == "Recovered"
        assert (await mesh.call("GET", "/chaos/v1/faults/slow-sched")).status == 404
        assert (await mesh.call("DELETE", "/chaos/v1/faults/slow-sched")).status == 404
        ops = [(r["op"], r["fault"]) for r in mesh.history("fault") if r["fault"] == "slow-sched"]
        assert ops == [("create", "slow-sched"), ("update", "slow-sched"), ("end", "slow-sched"),
                       ("delete", "slow-sched")]
        # the chaos requests are in the history too
        assert mesh.history("request", path="/chaos/v1/faults", verb="create")


async def test_put_reconciles_to_the_desired_set() -> None:
    async with running() as mesh:
        await mesh.add({**LATENCY, "name": "keep"})
        await mesh.add({**LATENCY, "name": "change"})
        await mesh.add({**LATENCY, "name": "drop"})
        desired = [{**LATENCY, "name": "keep"},
                   {**LATENCY, "name": "change", "params": {"delay": 2}},
                   {**LATENCY, "name": "new"}]
        r = await mesh.call("PUT", "/chaos/v1/faults", body={"items": desired})
        assert r.status == 200, r.body
        assert r.body["unchanged"] == ["keep"]
        assert r.body["replaced"] == ["change"]
        assert r.body["created"] == ["new"]
        assert r.body["removed"] == ["drop"]
        assert sorted(f["name"] for f in r.body["items"]) == ["change", "keep", "new"]
        assert (await mesh.fault("change"))["params"]["delay"] == 2
        # an invalid desired set changes nothing
        r = await mesh.call("PUT", "/chaos/v1/faults", body={"items": [{**LATENCY, "name": "x"},
                                                                       {"type": "request.error"}]})
        assert r.status == 422
        assert "items[1].target" in [c["field"] for c in r.body["details"]["causes"]]
        assert sorted(f["name"] for f in (await mesh.call("GET", "/chaos/v1/faults")).body["items"]) == \
            ["change", "keep", "new"]


async def test_reset_heals_everything_and_says_what() -> None:
    async with running() as mesh:
        await mesh.create_pod("p0")
        await mesh.add({**LATENCY, "name": "a"})
        await mesh.add({"name": "b", "type": "watch.hold", "target": {"component": "scheduler"},
                        "match": {"resources": ["pods"]}, "duration": None})
        await mesh.add({"name": "c", "type": "request.error", "target": {"component": "scheduler"},
                        "params": {"code": 500}, "duration": 0.001})
        await asyncio.sleep(0.05)
        assert (await mesh.fault("c"))["status"]["phase"] == "Recovered"
        r = await mesh.call("POST", "/chaos/v1/reset")
        assert r.status == 200
        assert sorted(f["name"] for f in r.body["healed"]) == ["a", "b"]
        assert all(f["status"]["phase"] == "Recovered" for f in r.body["healed"])
        assert sorted(r.body["removed"]) == ["a", "b", "c"]
        assert (await mesh.call("GET", "/chaos/v1/faults")).body["items"] == []
        assert mesh.engine.leftovers() == {"liveFaults": 0, "pendingEvents": 0, "suppressedBookmarks": 0,
                                           "effects": 0, "stalledRequests": 0, "timers": 0}
        again = await mesh.call("POST", "/chaos/v1/reset")
        assert again.body == {"healed": [], "removed": []}


async def test_the_token_is_required_and_a_refused_request_changes_nothing() -> None:
    async with running() as mesh:
        calls: list[tuple[str, str, Any]] = [("POST", "/chaos/v1/faults", LATENCY), ("GET", "/chaos/v1/faults", None),
                                   ("POST", "/chaos/v1/reset", None), ("PUT", "/chaos/v1/faults", {"items": []}),
                                   ("GET", "/chaos/v1/history", None)]
        for method, path, body in calls:
            r = await mesh.call(method, path, body=body, token=False)
            assert r.status == 401, (method, path)
            r = await mesh.call(method, path, body=body, token="wrong")
            assert r.status == 401
        assert mesh.engine.faults == {}
        assert mesh.history("fault") == []
        assert (await mesh.call("POST", "/chaos/v1/faults", body=LATENCY, token=TOKEN)).status == 201


async def test_ttl_expiry_on_a_fast_clock_recovers_the_fault() -> None:
    async with running(clock_rate=1000.0) as mesh:
        # 1,000 cluster seconds are one wall second: long enough for the request below even on
        # a loaded machine, short enough to wait for.
        f = await mesh.add({"name": "blip", "type": "request.error", "target": {"component": "scheduler"},
                            "params": {"code": 503}, "duration": 1000})
        assert f["status"]["endsAt"] == pytest.approx(f["status"]["activatedAt"] + 1000)
        r = await mesh.call("GET", "/api/v1/pods", component="scheduler")
        assert r.status == 503 and r.headers["Retry-After"] == "1"
        async with asyncio.timeout(30):  # a bound in wall seconds, not an expectation
            while True:
                f = await mesh.fault("blip")
                if f["status"]["phase"] == "Recovered":
                    break
                await asyncio.sleep(0.05)
        assert f["status"]["endedAt"] >= f["status"]["endsAt"]
        assert (await mesh.call("GET", "/api/v1/pods", component="scheduler")).status == 200
        ends = mesh.history("fault", op="end", fault="blip")
        assert ends and ends[0]["reason"] == "duration elapsed"
        # a TTL given as "ttl" is the same
        g = await mesh.add({"name": "blip2", "type": "request.error", "target": {"component": "scheduler"},
                            "params": {"code": 500}, "ttl": 5})
        assert g["duration"] == 5


async def test_overlapping_request_faults_have_defined_precedence() -> None:
    async with running(clock_rate=100.0) as mesh:
        await mesh.add({"name": "lat1", "type": "request.latency", "target": {"component": "scheduler"},
                        "params": {"delay": 5}, "duration": None})
        await mesh.add({"name": "lat2", "type": "request.latency", "target": {"component": "scheduler"},
                        "params": {"delay": 5}, "duration": None})
        await mesh.add({"name": "e1", "type": "request.error", "target": {"component": "scheduler"},
                        "params": {"code": 500}, "duration": None})
        await mesh.add({"name": "e2", "type": "request.error", "target": {"component": "scheduler"},
                        "params": {"code": 429, "retryAfter": 7}, "duration": None})
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        r = await mesh.call("GET", "/api/v1/pods", component="scheduler")
        elapsed = loop.time() - t0
        assert elapsed >= 0.095  # 5 + 5 cluster seconds at rate 100: latencies add up
        assert r.status == 500  # the first error wins
        assert (await mesh.fault("e2"))["status"]["injected"] == 0
        await mesh.call("DELETE", "/chaos/v1/faults/e1")
        r = await mesh.call("GET", "/api/v1/pods", component="scheduler")
        assert r.status == 429 and r.headers["Retry-After"] == "7"
        # a partition wins over everything else, and no latency is paid
        await mesh.add({"name": "cut", "type": "partition", "target": {"component": "scheduler"}, "duration": None})
        t0 = loop.time()
        with pytest.raises(Exception, match=r"disconnected|reset|Connection"):
            await mesh.call("GET", "/api/v1/pods", component="scheduler")
        assert loop.time() - t0 < 0.09
        await mesh.call("POST", "/chaos/v1/reset")
        assert (await mesh.call("GET", "/api/v1/pods", component="scheduler")).status == 200


async def test_overlapping_holds_release_only_when_both_ended() -> None:

    async with running() as mesh:
        for name in ("h1", "h2"):
            await mesh.add({"name": name, "type": "watch.hold", "target": {"component": "scheduler"},
                            "match": {"resources": ["pods"]}, "duration": None})
        s = await watch(mesh, "pods", component="scheduler")
        await mesh.create_pod("p1")
        await asyncio.sleep(0.05)
        assert s.names() == []
        await mesh.call("DELETE", "/chaos/v1/faults/h1")
        await asyncio.sleep(0.05)
        assert s.names() == []
        await mesh.call("DELETE", "/chaos/v1/faults/h2")
        await s.wait_for(1)
        assert s.names() == [("ADDED", "p1")]
        await s.stop()


async def test_a_live_name_cannot_be_reused_but_an_ended_one_can() -> None:
    async with running(clock_rate=1000.0) as mesh:
        await mesh.add({**LATENCY, "name": "n", "duration": 1})
        await asyncio.sleep(0.05)
        assert (await mesh.fault("n"))["status"]["phase"] == "Recovered"
        again = await mesh.add({**LATENCY, "name": "n"})
        assert again["status"]["phase"] == "Active"


async def test_history_endpoint_serves_items_jsonl_and_filters() -> None:
    async with running() as mesh:
        await mesh.add({**LATENCY, "name": "x"})
        r = await mesh.call("GET", "/chaos/v1/history?type=fault&fault=x")
        assert r.status == 200
        assert [i["op"] for i in r.body["items"]] == ["create"]
        assert r.body["lastIndex"] >= r.body["items"][-1]["index"]
        r = await mesh.call("GET", "/chaos/v1/history?type=fault&format=jsonl")
        assert r.headers["Content-Type"].startswith("application/jsonl")
        assert isinstance(r.body, bytes) and r.body.count(b"\n") == 1


async def test_python_client_context_managers_remove_their_fault_even_when_the_body_raises() -> None:
    async with running() as mesh, MeshEndpoint(url=mesh.url, token=TOKEN).chaos() as chaos:
        with pytest.raises(RuntimeError, match="boom"):
            async with chaos.hold_watch(component="scheduler", resource="pods", event_types=["DELETED"],
                                        release_on=delivered("scheduler", "nodes", name="node-1",
                                                             event_types=["DELETED"], delay=30)) as held:
                f = await held.status()
                assert f["status"]["phase"] == "Active"
                assert f["trigger"][0]["action"] == "release" and f["trigger"][0]["delay"] == 30
                raise RuntimeError("boom")
        assert await chaos.list() == []
        async with chaos.partition("scheduler", name="cut"):
            assert [f["name"] for f in await chaos.list()] == ["cut"]
        assert await chaos.list() == []
        with pytest.raises(InvalidError):
            await chaos.add({"type": "request.error", "target": {"component": "scheduler"}, "duration": None})
        records = await chaos.history(types=["fault"])
        assert {r["op"] for r in records} >= {"create", "end", "delete"}
        assert (await chaos.reset()) == {"healed": [], "removed": []}


def test_cli_builds_specs_and_triggers() -> None:
    assert parse_trigger("delivered:scheduler:nodes/node-1:DELETED+30#2", "release") == {
        "action": "release", "on": "delivered", "component": "scheduler", "resource": "nodes", "name": "node-1",
        "eventTypes": ["DELETED"], "occurrence": 2, "delay": 30.0}
    parser = build_parser(builtin_commands())
    args = parser.parse_args(["chaos", "add", "request.error", "--component", "scheduler", "--param", "code=503",
                              "--verb", "list", "--forever"])
    assert build_spec(args) == {"type": "request.error", "target": {"component": "scheduler"},
                                "match": {"verbs": ["list"]}, "params": {"code": 503}, "duration": None}
    args = parser.parse_args(["chaos", "add", "webhook.latency", "--webhook-configuration", "policy", "--webhook",
                              "strict.example.com", "--param", "delay=3", "--verb", "create", "--duration", "60"])
    assert build_spec(args) == {"type": "webhook.latency",
                                "target": {"webhookConfiguration": "policy", "webhook": "strict.example.com"},
                                "match": {"verbs": ["create"]}, "params": {"delay": 3}, "duration": 60.0}


async def test_a_fault_for_a_client_not_yet_connected_waits_for_it_then_takes_effect() -> None:
    """Users set up faults first and start their controller second (issue: faults for unconnected clients)."""
    async with running() as mesh:
        spec = {"name": "slow-op", "type": "request.error", "target": {"component": "my-operator"},
                "params": {"code": 503}, "duration": None}
        created = await mesh.add(spec)
        assert created["status"]["phase"] == "Active"
        assert 'no client component "my-operator" has connected yet' in created["status"]["note"]
        # Another client is not affected; the operator's first request (named by its User-Agent, as
        # client-go and kopf name themselves) gets the fault and the note goes away.
        assert (await mesh.call("GET", "/api/v1/namespaces", component="other")).status == 200
        ua = {"User-Agent": "my-operator/v1.2.3 (linux/amd64) kubernetes/abc"}
        async with mesh.session.get(mesh.url + "/api/v1/namespaces", headers={**ua, **mesh.headers(None)}) as resp:
            assert resp.status == 503
        fault = await mesh.fault("slow-op")
        assert "note" not in fault["status"] and fault["status"]["injected"] == 1
        assert [r["detail"]["connected"]["component"] for r in mesh.history("fault", op="update")] == ["my-operator"]


async def test_a_fault_that_cannot_be_applied_raises_in_python_and_is_removed_by_its_context() -> None:
    async with running() as mesh, MeshEndpoint(url=mesh.url, token=TOKEN).chaos() as chaos:
        await mesh.create_node("node-1")  # a Node no kubelet registered: nothing can power it off
        with pytest.raises(FaultFailedError, match="could not be applied: no admin endpoint found for node-1"):
            await chaos.add({"name": "off", "type": "node.powerOff", "target": {"node": "node-1"}, "duration": None})
        assert [f["status"]["phase"] for f in await chaos.list()] == ["Failed"]  # listed, for `chaos get`
        await chaos.reset()
        with pytest.raises(FaultFailedError):
            async with chaos.power_off("node-1"):
                pytest.fail("the body must not run when the fault did nothing")
        assert await chaos.list() == []


async def test_faults_that_act_once_need_no_duration() -> None:
    async with running() as mesh:
        for spec in ({"type": "watch.close", "target": {"component": "scheduler"}},
                     {"type": "watch.gone", "target": {"component": "scheduler"}}):
            r = await mesh.call("POST", "/chaos/v1/faults", body=spec)
            assert r.status == 201, (spec, r.body)
            assert r.body["duration"] is None, r.body
        # A watch.gone that answers new watches lasts, so it still needs one; so do lasting types.
        for spec in ({"type": "watch.gone", "target": {"component": "scheduler"}, "params": {"newWatches": True}},
                     {"type": "watch.hold", "target": {"component": "scheduler"}}):
            r = await mesh.call("POST", "/chaos/v1/faults", body=spec)
            assert r.status == 422 and "duration" in [c["field"] for c in r.body["details"]["causes"]], r.body

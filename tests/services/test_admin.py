"""The admin endpoint: health as Kubernetes serves it, token enforcement, metrics, routes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from kubemesh.services.machinery.clock import ManualClock
from kubemesh.services.machinery.queueing import WorkQueue
from kubemesh.services.process.admin import AdminServer, AdminSettings, json_response
from kubemesh.services.process.metrics import Metrics

pytestmark = pytest.mark.timeout(20)

TOKEN = "s3cret"


@pytest.fixture
async def admin() -> AsyncIterator[AdminServer]:
    server = AdminServer(component="test", instance="test-1", settings=AdminSettings(token=TOKEN))
    port = await server.start()
    assert port > 0 and server.url == f"http://127.0.0.1:{port}"
    yield server
    await server.stop()


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


AUTH = {"Authorization": f"Bearer {TOKEN}"}


async def fetch(http: aiohttp.ClientSession, method: str, url: str, **kw: object) -> tuple[int, str]:
    async with http.request(method, url, **kw) as resp:  # type: ignore[arg-type]
        return resp.status, await resp.text()


async def test_health_endpoints_are_open_and_ok(admin: AdminServer, http: aiohttp.ClientSession) -> None:
    for endpoint in ("healthz", "livez", "readyz"):
        assert await fetch(http, "GET", f"{admin.url}/{endpoint}") == (200, "ok")


async def test_verbose_lists_the_checks(admin: AdminServer, http: aiohttp.ClientSession) -> None:
    status, body = await fetch(http, "GET", f"{admin.url}/readyz?verbose")
    assert status == 200
    assert body.splitlines() == ["[+]ping ok", "[+]shutdown ok", "readyz check passed"]


async def test_a_failing_check_fails_its_endpoint_only(admin: AdminServer, http: aiohttp.ClientSession) -> None:
    synced = False

    async def informers_synced() -> bool:
        return synced

    admin.add_check("informer-sync", informers_synced, endpoints=("readyz",))
    status, body = await fetch(http, "GET", f"{admin.url}/readyz")
    assert status == 500
    assert "[-]informer-sync failed: reason withheld" in body.splitlines()
    assert body.splitlines()[-1] == "readyz check failed"
    assert await fetch(http, "GET", f"{admin.url}/livez") == (200, "ok")
    # One check on its own, and excluding it.
    status, body = await fetch(http, "GET", f"{admin.url}/readyz/informer-sync")
    assert status == 500 and body.startswith("internal server error")
    assert (await fetch(http, "GET", f"{admin.url}/readyz?exclude=informer-sync"))[0] == 200
    assert (await fetch(http, "GET", f"{admin.url}/readyz/nope"))[0] == 404
    synced = True
    assert await fetch(http, "GET", f"{admin.url}/readyz") == (200, "ok")


async def test_a_raising_check_counts_as_failed(admin: AdminServer, http: aiohttp.ClientSession) -> None:
    def broken() -> bool:
        raise RuntimeError("disk on fire")

    admin.add_check("disk", broken, endpoints=("livez",))
    status, body = await fetch(http, "GET", f"{admin.url}/livez/disk")
    assert status == 500 and "disk on fire" in body


async def test_shutting_down_fails_readiness(admin: AdminServer, http: aiohttp.ClientSession) -> None:
    admin.set_shutting_down()
    status, body = await fetch(http, "GET", f"{admin.url}/readyz?verbose")
    assert status == 500 and "[-]shutdown failed: reason withheld" in body
    assert (await fetch(http, "GET", f"{admin.url}/livez"))[0] == 200


async def test_metrics_need_the_token(admin: AdminServer, http: aiohttp.ClientSession) -> None:
    async with http.get(f"{admin.url}/metrics") as resp:
        assert resp.status == 401
        status = await resp.json()
    assert status == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": "Unauthorized", "reason": "Unauthorized", "code": 401}
    assert (await fetch(http, "GET", f"{admin.url}/metrics",
                        headers={"Authorization": "Bearer wrong"}))[0] == 401
    assert (await fetch(http, "GET", f"{admin.url}/metrics", headers={"Authorization": TOKEN}))[0] == 401


async def test_metrics_expose_the_process_registry(admin: AdminServer, http: aiohttp.ClientSession) -> None:
    admin.metrics.counter("reconciles", "Reconciles done.", labels=["controller"]).labels("rs").inc(3)
    queue: WorkQueue[str] = WorkQueue(clock=ManualClock(), name="replicaset")
    queue.add("a")
    queue.add("b")
    admin.metrics.track_queue(queue)
    async with http.get(f"{admin.url}/metrics", headers=AUTH) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = await resp.text()
    assert 'kubemesh_reconciles_total{controller="rs"} 3.0' in text
    assert 'workqueue_depth{name="replicaset"} 2.0' in text
    assert 'workqueue_adds_total{name="replicaset"} 2.0' in text


def test_metric_helpers_are_idempotent_and_registries_separate() -> None:
    a, b = Metrics(process_collectors=False), Metrics(process_collectors=False)
    assert a.gauge("nodes", "Nodes.") is a.gauge("nodes", "Nodes.")
    assert a.gauge("nodes", "Nodes.") is not b.gauge("nodes", "Nodes.")
    with pytest.raises(ValueError):
        a.counter("nodes", "Nodes.")


async def test_component_routes_can_be_added_after_start(admin: AdminServer,
                                                          http: aiohttp.ClientSession) -> None:
    async def node(request: web.Request) -> web.Response:
        return json_response({"node": request.match_info["name"]})

    admin.add_route("GET", "/debug/nodes/{name}", node)
    async with http.get(f"{admin.url}/debug/nodes/node-1", headers=AUTH) as resp:
        assert resp.status == 200
        assert await resp.json() == {"node": "node-1"}
    assert (await fetch(http, "GET", f"{admin.url}/debug/nodes/node-1"))[0] == 401
    assert (await fetch(http, "POST", f"{admin.url}/debug/nodes/node-1", headers=AUTH))[0] == 405
    assert (await fetch(http, "GET", f"{admin.url}/debug/else", headers=AUTH))[0] == 404
    with pytest.raises(ValueError):
        admin.add_route("GET", "/healthz/mine", node)


async def test_without_a_token_everything_is_open(http: aiohttp.ClientSession) -> None:
    server = AdminServer(component="test", instance="t")
    await server.start()
    try:
        assert (await fetch(http, "GET", f"{server.url}/metrics"))[0] == 200
    finally:
        await server.stop()
        await server.stop()  # idempotent

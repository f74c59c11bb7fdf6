"""The component bootstrap against a tiny fake apiserver."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from kubemesh.services.machinery.clock import ClusterClock
from kubemesh.services.process.component import ComponentContext, common_arguments, main, run_component
from kubemesh.services.process.logs import reset_logging

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    yield
    reset_logging()  # the bootstrap configures process-wide logging


class FakeApiserver:
    def __init__(self) -> None:
        self.registrations: list[dict[str, Any]] = []
        self.registered = asyncio.Event()
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def clock(self, request: web.Request) -> web.Response:
        return web.json_response({"rate": 60.0, "epochWall": 1000.0, "epochCluster": 2000.0, "now": 0})

    async def register(self, request: web.Request) -> web.Response:
        body = await request.json()
        body["header"] = request.headers.get("X-Kubemesh-Component")
        self.registrations.append(body)
        self.registered.set()
        return web.json_response(body)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/clock", self.clock)
        app.router.add_put("/kubemesh/v1/components/{instance}", self.register)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"


@pytest.fixture
async def apiserver() -> AsyncIterator[FakeApiserver]:
    server = FakeApiserver()
    await server.start()
    yield server
    assert server.runner is not None
    await server.runner.cleanup()


def parse(argv: list[str]) -> argparse.Namespace:
    return common_arguments(argparse.ArgumentParser()).parse_args(argv)


async def test_a_component_starts_registers_serves_chaos_hooks_and_stops(apiserver: FakeApiserver) -> None:
    seen: dict[str, ComponentContext] = {}
    gate_passed = asyncio.Event()

    async def run(ctx: ComponentContext, args: argparse.Namespace) -> None:
        seen["ctx"] = ctx
        while not ctx.stop.is_set():
            await ctx.gate()
            gate_passed.set()
            await asyncio.sleep(0.01)

    args = parse(["--apiserver", apiserver.url, "--seed", "7", "--drain-timeout", "1",
                  "--encoding", "json", "--log-level", "warning"])
    task = asyncio.create_task(run_component(component="scheduler", run=run, args=args, instance="sched-1",
                                             bugs=frozenset({"keep-missed-node"}), token="tok"))
    await asyncio.wait_for(apiserver.registered.wait(), 10)
    ctx = seen["ctx"]
    reg = apiserver.registrations[0]
    assert reg["component"] == "scheduler" and reg["instance"] == "sched-1"
    assert reg["adminURL"] == ctx.admin.url and reg["header"] == "scheduler"
    assert reg["bugs"] == ["keep-missed-node"]  # published for attached scenario runs
    assert isinstance(ctx.clock, ClusterClock) and ctx.clock.rate == 60.0
    assert ctx.bugs == frozenset({"keep-missed-node"})
    auth = {"Authorization": "Bearer tok"}
    async with aiohttp.ClientSession(headers=auth) as http:
        async with http.post(f"{ctx.admin.url}/chaos/clock", json={"jump": 30}) as resp:
            assert resp.status == 200
            assert (await resp.json())["skew"] == 30
        async with http.post(f"{ctx.admin.url}/chaos/clock", json={"skew": -5}) as resp:
            assert (await resp.json())["skew"] == -5
        async with http.post(f"{ctx.admin.url}/chaos/clock", json={}) as resp:
            assert resp.status == 400
        async with http.post(f"{ctx.admin.url}/chaos/pause") as resp:
            assert await resp.json() == {"paused": True}
        assert ctx.paused
        await asyncio.sleep(0.05)
        gate_passed.clear()
        await asyncio.sleep(0.05)
        assert not gate_passed.is_set()  # the loop is held at the gate
        async with http.post(f"{ctx.admin.url}/chaos/resume") as resp:
            assert await resp.json() == {"paused": False}
        await asyncio.wait_for(gate_passed.wait(), 5)
        async with http.get(f"{ctx.admin.url}/debug/tasks") as resp:
            assert "scheduler:run" in (await resp.json())["tasks"]
        async with http.post(f"{ctx.admin.url}/chaos/pause", headers={"Authorization": "Bearer x"}) as resp:
            assert resp.status == 401
    ctx.supervisor.request_stop("test")  # what SIGTERM does
    report = await asyncio.wait_for(task, 10)
    assert report.clean and report.exit_code == 0
    assert report.stuck == ()


async def test_a_failing_run_gives_exit_code_one(apiserver: FakeApiserver) -> None:
    async def run(ctx: ComponentContext, args: argparse.Namespace) -> None:
        raise RuntimeError("cannot start")

    args = parse(["--apiserver", apiserver.url, "--log-level", "error"])
    report = await asyncio.wait_for(run_component(component="kubelet", run=run, args=args, instance="k",
                                                  bugs=frozenset(), token=None), 10)
    assert report.failed == ("kubelet:run",) and report.exit_code == 1


def test_main_gives_up_when_the_apiserver_never_answers() -> None:
    async def run(ctx: ComponentContext, args: argparse.Namespace) -> None:
        raise AssertionError("must not run")

    code = main(component="scheduler", run=run,
                argv=["--apiserver", "http://127.0.0.1:9", "--startup-timeout", "0.3", "--log-level", "error"])
    assert code == 1


def test_main_rejects_unknown_bug_switches() -> None:
    async def run(ctx: ComponentContext, args: argparse.Namespace) -> None:
        raise AssertionError("must not run")

    with pytest.raises(SystemExit) as exc:
        main(component="scheduler", run=run, argv=["--bugs", "no-such-bug"])
    assert exc.value.code == 2

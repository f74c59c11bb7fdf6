"""Test kit for the chaos front door: an in-process apiserver with chaos installed, clients
that identify as components, raw watch streams and history helpers."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from aiohttp.test_utils import TestServer

from kubemesh.apiserver.chaos import CHAOS, ChaosEngine, install
from kubemesh.apiserver.core import ApiserverCore, assemble
from kubemesh.apiserver.server import ServerSettings, build_app
from kubemesh.apiserver.watching import WatchSettings

TOKEN = "s3cret"


@dataclass
class Response:
    status: int
    body: Any
    headers: dict[str, str]


@dataclass
class Mesh:
    """An apiserver with chaos, served on loopback."""

    server: TestServer
    app: web.Application
    core: ApiserverCore
    session: aiohttp.ClientSession
    token: str | None

    @property
    def url(self) -> str:
        return str(self.server.make_url("")).rstrip("/")

    @property
    def engine(self) -> ChaosEngine:
        return self.app[CHAOS]

    def headers(self, component: str | None, instance: str | None = None,
                token: str | bool | None = True) -> dict[str, str]:
        h: dict[str, str] = {}
        if component:
            h["X-Kubemesh-Component"] = component
            h["X-Kubemesh-Instance"] = instance or f"{component}-0"
        tok = self.token if token is True else (token or None)
        if tok:
            h["Authorization"] = f"Bearer {tok}"
        return h

    async def call(self, method: str, path: str, *, component: str | None = "test", instance: str | None = None,
                   body: Any = None, token: str | bool | None = True, content_type: str = "application/json",
                   wait: float = 10.0) -> Response:
        headers = self.headers(component, instance, token)
        data = None
        if body is not None:
            data = orjson.dumps(body)
            headers["Content-Type"] = content_type
        async with self.session.request(method, self.url + path, data=data, headers=headers,
                                        timeout=aiohttp.ClientTimeout(total=wait)) as resp:
            raw = await resp.read()
            ctype = resp.headers.get("Content-Type", "")
            parsed: Any = None
            if raw and "json" in ctype and "jsonl" not in ctype:
                parsed = orjson.loads(raw)
            elif raw:
                parsed = raw
            return Response(resp.status, parsed, dict(resp.headers))

    async def add(self, spec: dict[str, Any]) -> dict[str, Any]:
        r = await self.call("POST", "/chaos/v1/faults", body=spec)
        assert r.status == 201, r.body
        body: dict[str, Any] = r.body
        return body

    async def fault(self, name: str) -> dict[str, Any]:
        r = await self.call("GET", f"/chaos/v1/faults/{name}")
        assert r.status == 200, r.body
        body: dict[str, Any] = r.body
        return body

    async def create_pod(self, name: str, *, component: str = "test", node: str | None = None,
                         namespace: str = "default") -> dict[str, Any]:
        spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox"}]}
        if node:
            spec["nodeName"] = node
        r = await self.call("POST", f"/api/v1/namespaces/{namespace}/pods", component=component,
                            body={"metadata": {"name": name}, "spec": spec})
        assert r.status == 201, r.body
        body: dict[str, Any] = r.body
        return body

    async def create_node(self, name: str, *, port: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"metadata": {"name": name}}
        r = await self.call("POST", "/api/v1/nodes", component="test", body=body)
        assert r.status == 201, r.body
        if port is not None:
            status = {"status": {"daemonEndpoints": {"kubeletEndpoint": {"Port": port}}}}
            r = await self.call("PATCH", f"/api/v1/nodes/{name}/status", component="test", body=status,
                                content_type="application/merge-patch+json")
            assert r.status == 200, r.body
        out: dict[str, Any] = r.body
        return out

    def history(self, type_: str | None = None, **where: Any) -> list[dict[str, Any]]:
        recs = self.core.history.since(0, types=[type_] if type_ else None)
        out = []
        for r in recs:
            merged = {**r, **(r.get("detail") or {})}
            if all(merged.get(k) == v for k, v in where.items()):
                out.append(merged)
        return out

    def revision(self) -> int:
        return self.engine.store.revision


@contextlib.asynccontextmanager
async def running(*, token: str | None = TOKEN, clock_rate: float = 1.0, seed: int = 7,
                  bookmark_interval: float = 5.0, forward_timeout: float = 5.0) -> AsyncIterator[Mesh]:
    # component_identities off: the tests stand in for components with their headers only, and
    # write what those components' own roles would not let them (a "controller-manager" creating pods).
    settings = ServerSettings(token=token, clock_rate=clock_rate, seed=seed, chaos=False,
                              watch=WatchSettings(bookmark_interval=bookmark_interval), component_identities=False)
    core = assemble(settings)
    app = build_app(core)
    install(app, core, rng=random.Random(seed), token=token, forward_timeout=forward_timeout)
    server = TestServer(app)
    await server.start_server()
    session = aiohttp.ClientSession()
    try:
        yield Mesh(server=server, app=app, core=core, session=session, token=token)
    finally:
        await session.close()
        await server.close()


@dataclass
class Stream:
    """A raw JSON watch stream read in the background."""

    events: list[dict[str, Any]] = field(default_factory=list)
    ended: bool = False
    task: asyncio.Task[None] | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def names(self, type_: str | None = None) -> list[tuple[str, str]]:
        return [(e["type"], e["object"]["metadata"].get("name", "")) for e in self.events
                if e["type"] != "BOOKMARK" and (type_ is None or e["type"] == type_)]

    async def wait_for(self, n: int, *, within: float = 5.0, type_: str | None = None) -> None:
        async with asyncio.timeout(within):
            while len(self.names(type_)) < n:
                self.changed.clear()
                if self.ended:
                    raise AssertionError(f"stream ended with {self.events}")
                await self.changed.wait()

    async def wait_end(self, within: float = 5.0) -> None:
        async with asyncio.timeout(within):
            while not self.ended:
                self.changed.clear()
                await self.changed.wait()

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


async def watch(mesh: Mesh, resource: str, *, component: str, instance: str | None = None,
                rv: str | None = None, namespace: str | None = None, bookmarks: bool = False) -> Stream:
    """Open a watch as `component` and read it in the background; returns once it is registered."""
    if rv is None:
        rv = str(mesh.revision())
    prefix = f"/api/v1/namespaces/{namespace}" if namespace else "/api/v1"
    path = f"{prefix}/{resource}?watch=true&resourceVersion={rv}"
    if bookmarks:
        path += "&allowWatchBookmarks=true"
    stream = Stream()
    before = {w.id for w in mesh.engine.hub.watchers}
    started = asyncio.Event()

    async def read() -> None:
        try:
            async with mesh.session.get(mesh.url + path, headers=mesh.headers(component, instance)) as resp:
                started.set()
                async for line in resp.content:
                    if line.strip():
                        stream.events.append(orjson.loads(line))
                        stream.changed.set()
        except (aiohttp.ClientError, ConnectionResetError):
            pass
        finally:
            started.set()
            stream.ended = True
            stream.changed.set()

    stream.task = asyncio.get_running_loop().create_task(read())
    await started.wait()  # headers arrive after the hub registered the watcher
    assert stream.ended or {w.id for w in mesh.engine.hub.watchers} - before
    return stream


async def settle(seconds: float = 0.05) -> None:
    await asyncio.sleep(seconds)

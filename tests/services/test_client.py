"""ApiClient against a scripted aiohttp server: encodings, errors, retries, identity, watch."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import msgpack
import orjson
import pytest
from aiohttp import TCPConnector, web
from aiohttp.test_utils import TestServer

from kubemesh.services.machinery.client import (
    AlreadyExistsError,
    ApiClient,
    ApiConnectionError,
    ApiError,
    BadRequestError,
    ConflictError,
    ForbiddenError,
    GoneError,
    InvalidError,
    NotFoundError,
    RetrySettings,
    ServerError,
    TooManyRequestsError,
    UnauthorizedError,
    WatchEvent,
)
from kubemesh.services.model import codec
from kubemesh.services.model.codec import Encoding
from kubemesh.services.model.kinds import NODES, PODS, Obj

# ---------------------------------------------------------------------------------------------
# The scripted server.


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    content_type: str
    body: Any


Responder = Callable[[web.Request, Recorded], Awaitable[web.StreamResponse]]


def status_obj(code: int, reason: str, message: str = "boom", **extra: Any) -> Obj:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code, **extra}


def reply(request: web.Request, status: int, body: Any,
          headers: dict[str, str] | None = None) -> web.Response:
    enc: Encoding = "msgpack" if codec.MSGPACK in request.headers.get("Accept", "") else "json"
    return web.Response(status=status, body=codec.encode(body, enc),
                        headers={"Content-Type": codec.content_type(enc), **(headers or {})})


def ok(body: Any, status: int = 200) -> Responder:
    async def respond(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return reply(request, status, body)
    return respond


def echo(status: int = 201) -> Responder:
    async def respond(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return reply(request, status, rec.body)
    return respond


def error(code: int, reason: str, message: str = "boom", headers: dict[str, str] | None = None) -> Responder:
    async def respond(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return reply(request, code, status_obj(code, reason, message), headers)
    return respond


@dataclass
class Fake:
    app: web.Application = field(default_factory=web.Application)
    requests: list[Recorded] = field(default_factory=list)
    routes: dict[tuple[str, str], list[Responder]] = field(default_factory=dict)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""

    def __post_init__(self) -> None:
        self.app.router.add_route("*", "/{tail:.*}", self.handle)

    def on(self, method: str, path: str, *responders: Responder) -> None:
        """Answer with the responders in order; the last one repeats."""
        self.routes[(method, path)] = list(responders)

    def calls(self, method: str, path: str) -> list[Recorded]:
        return [r for r in self.requests if r.method == method and r.path == path]

    def stall(self) -> Responder:
        async def respond(request: web.Request, rec: Recorded) -> web.StreamResponse:
            await self.release.wait()
            return reply(request, 200, {})
        return respond

    async def handle(self, request: web.Request) -> web.StreamResponse:
        data = await request.read()
        ctype = request.headers.get("Content-Type", "")
        body: Any = None
        if data:
            body = codec.decode(data, codec.encoding_of(ctype) or "json")
        rec = Recorded(request.method, request.path, dict(request.query), dict(request.headers), ctype, body)
        self.requests.append(rec)
        script = self.routes.get((request.method, request.path))
        if not script:
            return reply(request, 404, status_obj(404, "NotFound", "no such route"))
        responder = script.pop(0) if len(script) > 1 else script[0]
        return await responder(request, rec)


@pytest.fixture
async def fake() -> AsyncIterator[Fake]:
    f = Fake()
    server = TestServer(f.app, shutdown_timeout=1.0)
    await server.start_server()
    f.url = str(server.make_url("")).rstrip("/")
    yield f
    f.release.set()
    await server.close()


class RecordingClock:
    """Records backoff sleeps and returns at once."""

    rate: float = 1.0

    def __init__(self) -> None:
        self.sleeps: list[float] = []

    def now(self) -> float:
        return 0.0

    def to_wall(self, seconds: float) -> float:
        return seconds

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await asyncio.sleep(0)


def make_client(fake: Fake, *, encoding: Encoding = "msgpack", attempts: int = 3, timeout: float = 10.0,
                clock: RecordingClock | None = None, **kw: Any) -> ApiClient:
    return ApiClient(fake.url, component="scheduler", instance="sched-1", encoding=encoding,
                     timeout=timeout, retry=RetrySettings(max_attempts=attempts),
                     clock=clock or RecordingClock(), **kw)


POD: Obj = {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p1", "namespace": "default", "resourceVersion": "7", "uid": "u1"},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "x"}]}}
POD_PATH = "/api/v1/namespaces/default/pods/p1"

# ---------------------------------------------------------------------------------------------
# Encodings and identity.


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
async def test_get_decodes_the_negotiated_encoding(fake: Fake, encoding: Encoding) -> None:
    fake.on("GET", POD_PATH, ok(POD))
    async with make_client(fake, encoding=encoding) as client:
        got = await client.get(PODS, "p1", namespace="default")
    assert got == POD
    accept = fake.requests[0].headers["Accept"]
    assert accept.startswith(codec.MSGPACK if encoding == "msgpack" else codec.JSON)


async def test_a_json_answer_to_a_msgpack_client_is_understood(fake: Fake) -> None:
    async def json_only(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return web.Response(body=orjson.dumps(POD), content_type="application/json")

    fake.on("GET", POD_PATH, json_only)
    async with make_client(fake, encoding="msgpack") as client:
        assert await client.get(PODS, "p1", namespace="default") == POD


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
async def test_create_sends_the_body_in_the_client_encoding(fake: Fake, encoding: Encoding) -> None:
    fake.on("POST", "/api/v1/namespaces/default/pods", echo())
    async with make_client(fake, encoding=encoding) as client:
        created = await client.create(PODS, POD)
    assert created == POD
    rec = fake.requests[0]
    assert rec.content_type == codec.content_type(encoding)
    assert rec.body == POD


async def test_update_puts_to_the_object_or_its_subresource(fake: Fake) -> None:
    fake.on("PUT", POD_PATH + "/status", echo(200))
    async with make_client(fake) as client:
        assert await client.update(PODS, POD, subresource="status") == POD
    assert fake.requests[0].body == POD


async def test_identity_headers_and_token_are_sent_on_every_request(fake: Fake) -> None:
    fake.on("GET", "/clock", ok({"rate": 60.0, "epochWall": 1.0, "epochCluster": 2.0, "now": 3.0}))
    node_list = {"kind": "NodeList", "metadata": {"resourceVersion": "5"}, "items": []}
    fake.on("GET", "/api/v1/nodes", ok(node_list))
    async with make_client(fake, token="s3cret") as client:
        assert (await client.get_clock())["rate"] == 60.0
        await client.list(NODES, label_selector="a=b", field_selector="spec.unschedulable=false",
                          resource_version="4")
    assert len(fake.requests) == 2
    for rec in fake.requests:
        assert rec.headers["X-Kubemesh-Component"] == "scheduler"
        assert rec.headers["X-Kubemesh-Instance"] == "sched-1"
        assert re.fullmatch(r"kubemesh-scheduler/[\w.+-]+ \(sched-1\)", rec.headers["User-Agent"])
        assert rec.headers["Authorization"] == "Bearer s3cret"
    assert fake.requests[1].query == {"labelSelector": "a=b", "fieldSelector": "spec.unschedulable=false",
                                      "resourceVersion": "4"}


async def test_patch_uses_the_patch_media_type_and_a_json_body(fake: Fake) -> None:
    fake.on("PATCH", POD_PATH, ok(POD))
    async with make_client(fake, encoding="msgpack") as client:
        await client.patch(PODS, "p1", {"metadata": {"labels": {"a": "b"}}}, namespace="default")
        await client.patch(PODS, "p1", {"spec": {}}, namespace="default", patch_type="strategic")
        await client.patch(PODS, "p1", [{"op": "remove", "path": "/spec/x"}], namespace="default",
                           patch_type="json")
        await client.patch(PODS, "p1", {"spec": {}}, namespace="default", patch_type="apply")
    types = [r.content_type for r in fake.requests]
    assert types == ["application/merge-patch+json", "application/strategic-merge-patch+json",
                     "application/json-patch+json", "application/apply-patch+yaml"]
    assert fake.requests[0].body == {"metadata": {"labels": {"a": "b"}}}
    assert fake.requests[2].body == [{"op": "remove", "path": "/spec/x"}]
    assert fake.requests[3].query == {"fieldManager": "scheduler"}


async def test_delete_sends_delete_options_in_the_body(fake: Fake) -> None:
    graceful = {**POD, "metadata": {**POD["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    fake.on("DELETE", POD_PATH, ok(graceful), ok({"kind": "Status", "apiVersion": "v1", "status": "Success"}))
    async with make_client(fake) as client:
        first = await client.delete(PODS, "p1", namespace="default", grace_period_seconds=30,
                                    propagation_policy="Background", preconditions={"uid": "u1"})
        second = await client.delete(PODS, "p1", namespace="default")
    assert first == graceful
    assert second is None
    assert fake.requests[0].body == {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 30,
                                     "propagationPolicy": "Background", "preconditions": {"uid": "u1"}}
    assert fake.requests[1].body == {"apiVersion": "v1", "kind": "DeleteOptions"}


async def test_bind_posts_a_binding_and_evict_an_eviction(fake: Fake) -> None:
    fake.on("POST", POD_PATH + "/binding", ok({"kind": "Status", "status": "Success"}, 201))
    fake.on("POST", POD_PATH + "/eviction", ok({"kind": "Status", "status": "Success"}, 201))
    async with make_client(fake) as client:
        await client.bind(namespace="default", pod="p1", node="node-2", uid="u1")
        await client.evict(namespace="default", pod="p1", grace_period_seconds=5)
    binding, eviction = (r.body for r in fake.requests)
    assert binding == {"apiVersion": "v1", "kind": "Binding",
                       "metadata": {"name": "p1", "namespace": "default", "uid": "u1"},
                       "target": {"apiVersion": "v1", "kind": "Node", "name": "node-2"}}
    assert eviction == {"apiVersion": "policy/v1", "kind": "Eviction",
                        "metadata": {"name": "p1", "namespace": "default"},
                        "deleteOptions": {"apiVersion": "v1", "kind": "DeleteOptions",
                                          "gracePeriodSeconds": 5}}


# ---------------------------------------------------------------------------------------------
# Errors.


@pytest.mark.parametrize(("code", "reason", "cls"), [
    (400, "BadRequest", BadRequestError),
    (401, "Unauthorized", UnauthorizedError),
    (403, "Forbidden", ForbiddenError),
    (404, "NotFound", NotFoundError),
    (409, "Conflict", ConflictError),
    (409, "AlreadyExists", AlreadyExistsError),
    (410, "Expired", GoneError),
    (422, "Invalid", InvalidError),
    (429, "TooManyRequests", TooManyRequestsError),
    (500, "InternalError", ServerError),
    (503, "ServiceUnavailable", ServerError),
    (504, "Timeout", ServerError),
    (405, "MethodNotAllowed", ApiError),
])
@pytest.mark.parametrize("encoding", ["json", "msgpack"])
async def test_error_statuses_map_to_typed_errors(fake: Fake, encoding: Encoding, code: int, reason: str,
                                                  cls: type[ApiError]) -> None:
    fake.on("GET", POD_PATH, error(code, reason, f"pods \"p1\" {reason}"))
    async with make_client(fake, encoding=encoding, attempts=1) as client:
        with pytest.raises(ApiError) as info:
            await client.get(PODS, "p1", namespace="default")
    assert type(info.value) is cls
    assert (info.value.code, info.value.reason) == (code, reason)
    assert info.value.message == f"pods \"p1\" {reason}"
    assert info.value.status["kind"] == "Status"


async def test_a_body_that_is_not_a_status_still_gives_a_typed_error(fake: Fake) -> None:
    async def plain(request: web.Request, rec: Recorded) -> web.StreamResponse:
        return web.Response(status=404, text="404: Not Found")

    fake.on("GET", POD_PATH, plain)
    async with make_client(fake, attempts=1) as client:
        with pytest.raises(NotFoundError) as info:
            await client.get(PODS, "p1", namespace="default")
    assert info.value.code == 404
    assert "Not Found" in info.value.message


async def test_conflict_and_already_exists_are_distinct(fake: Fake) -> None:
    assert not issubclass(AlreadyExistsError, ConflictError)
    assert issubclass(ApiConnectionError, ApiError)


# ---------------------------------------------------------------------------------------------
# Retries.


async def test_reads_retry_on_server_errors_and_429(fake: Fake) -> None:
    clock = RecordingClock()
    fake.on("GET", POD_PATH, error(500, "InternalError"), error(429, "TooManyRequests"),
            error(503, "ServiceUnavailable"), ok(POD))
    async with make_client(fake, attempts=5, clock=clock) as client:
        assert await client.get(PODS, "p1", namespace="default") == POD
    assert len(fake.calls("GET", POD_PATH)) == 4
    assert len(clock.sleeps) == 3


async def test_reads_give_up_after_max_attempts(fake: Fake) -> None:
    clock = RecordingClock()
    fake.on("GET", POD_PATH, error(500, "InternalError"))
    async with make_client(fake, attempts=3, clock=clock) as client:
        with pytest.raises(ServerError):
            await client.get(PODS, "p1", namespace="default")
    assert len(fake.calls("GET", POD_PATH)) == 3


async def test_backoff_grows_exponentially_with_bounded_jitter(fake: Fake) -> None:
    clock = RecordingClock()
    fake.on("GET", POD_PATH, error(500, "InternalError"))
    retry = RetrySettings(max_attempts=6, base_backoff=1.0, max_backoff=4.0, jitter=0.5)
    async with ApiClient(fake.url, component="c", instance="i", retry=retry, clock=clock) as client:
        with pytest.raises(ServerError):
            await client.get(PODS, "p1", namespace="default")
    caps = [1.0, 2.0, 4.0, 4.0, 4.0]
    assert len(clock.sleeps) == len(caps)
    for slept, cap in zip(clock.sleeps, caps, strict=True):
        assert cap * 0.5 <= slept <= cap


async def test_writes_are_not_retried_on_server_errors(fake: Fake) -> None:
    clock = RecordingClock()
    fake.on("POST", "/api/v1/namespaces/default/pods", error(500, "InternalError"), echo())
    async with make_client(fake, attempts=5, clock=clock) as client:
        with pytest.raises(ServerError):
            await client.create(PODS, POD)
    assert len(fake.calls("POST", "/api/v1/namespaces/default/pods")) == 1
    assert clock.sleeps == []


async def test_writes_retry_on_429_honouring_retry_after(fake: Fake) -> None:
    clock = RecordingClock()
    fake.on("POST", "/api/v1/namespaces/default/pods",
            error(429, "TooManyRequests", headers={"Retry-After": "2"}), echo())
    async with make_client(fake, attempts=5, clock=clock) as client:
        assert await client.create(PODS, POD) == POD
    assert len(fake.calls("POST", "/api/v1/namespaces/default/pods")) == 2
    assert clock.sleeps == [2.0]


async def test_a_write_that_timed_out_is_not_retried(fake: Fake) -> None:
    fake.on("POST", "/api/v1/namespaces/default/pods", fake.stall())
    async with make_client(fake, attempts=5, timeout=0.2) as client:
        with pytest.raises(ApiConnectionError) as info:
            await client.create(PODS, POD)
    assert info.value.maybe_applied
    assert len(fake.calls("POST", "/api/v1/namespaces/default/pods")) == 1


async def test_a_read_that_timed_out_is_retried(fake: Fake) -> None:
    fake.on("GET", POD_PATH, fake.stall(), ok(POD))
    async with make_client(fake, attempts=5, timeout=0.2) as client:
        assert await client.get(PODS, "p1", namespace="default") == POD
    assert len(fake.calls("GET", POD_PATH)) == 2


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


async def test_a_write_is_retried_when_the_connection_is_refused() -> None:
    clock = RecordingClock()
    client = ApiClient(f"http://127.0.0.1:{_closed_port()}", component="kubelet", instance="k-1",
                       retry=RetrySettings(max_attempts=3), clock=clock)
    async with client:
        with pytest.raises(ApiConnectionError) as info:
            await client.create(PODS, POD)
    assert not info.value.maybe_applied
    assert len(clock.sleeps) == 2


async def test_backoff_sleeps_wall_time_on_the_clocks_timer(fake: Fake) -> None:
    clock = RecordingClock()
    clock.rate = 60.0
    fake.on("POST", "/api/v1/namespaces/default/pods",
            error(429, "TooManyRequests", headers={"Retry-After": "1"}), echo())
    async with make_client(fake, clock=clock) as client:
        await client.create(PODS, POD)
    assert clock.sleeps == [60.0]  # 1 wall second = 60 cluster seconds at rate 60


# ---------------------------------------------------------------------------------------------
# Shared connector.


async def test_clients_sharing_a_connector_do_not_wait_for_each_other(fake: Fake) -> None:
    fake.on("GET", "/api/v1/nodes/stalled", fake.stall())
    fake.on("GET", "/api/v1/nodes/fine", ok({"kind": "Node", "metadata": {"name": "fine"}}))
    connector = TCPConnector(limit=0, limit_per_host=0)
    a = ApiClient(fake.url, component="kubelet", instance="node-a", connector=connector)
    b = ApiClient(fake.url, component="kubelet", instance="node-b", connector=connector)
    stalled = asyncio.create_task(a.get(NODES, "stalled"))
    try:
        # b completes while a's request is still held by the server.
        assert (await b.get(NODES, "fine"))["metadata"]["name"] == "fine"
        assert not stalled.done()
        assert fake.calls("GET", "/api/v1/nodes/stalled")[0].headers["X-Kubemesh-Instance"] == "node-a"
        assert fake.calls("GET", "/api/v1/nodes/fine")[0].headers["X-Kubemesh-Instance"] == "node-b"
    finally:
        fake.release.set()
        await stalled
        await a.close()
        await b.close()
    assert not connector.closed  # not owned by the clients
    await connector.close()


# ---------------------------------------------------------------------------------------------
# Watch.


def frame(event: Obj, encoding: Encoding) -> bytes:
    if encoding == "msgpack":
        packed: bytes = msgpack.packb(event, use_bin_type=True)
        return packed
    return orjson.dumps(event) + b"\n"


def watch_stream(frames: list[bytes], *, encoding: Encoding, split: bool = True) -> Responder:
    async def respond(request: web.Request, rec: Recorded) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": codec.content_type(encoding)})
        await resp.prepare(request)
        for f in frames:
            if split:  # frames cut across chunks must be reassembled
                half = len(f) // 2
                await resp.write(f[:half])
                await asyncio.sleep(0)
                await resp.write(f[half:])
            else:
                await resp.write(f)
        await resp.write_eof()
        return resp
    return respond


EVENTS: list[Obj] = [
    {"type": "ADDED", "object": POD},
    {"type": "MODIFIED", "object": {**POD, "metadata": {**POD["metadata"], "resourceVersion": "8"}}},
    {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": "9"}}},
    {"type": "DELETED", "object": {**POD, "metadata": {**POD["metadata"], "resourceVersion": "10"}}},
    {"type": "ERROR", "object": status_obj(410, "Expired", "too old resource version: 5 (10)")},
]


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
async def test_watch_decodes_the_stream_in_both_encodings(fake: Fake, encoding: Encoding) -> None:
    fake.on("GET", "/api/v1/pods", watch_stream([frame(e, encoding) for e in EVENTS], encoding=encoding))
    async with make_client(fake, encoding=encoding) as client:
        got = [ev async for ev in client.watch(PODS, resource_version="6", timeout_seconds=300,
                                               field_selector="spec.nodeName=node-1")]
    assert got == [WatchEvent(e["type"], e["object"]) for e in EVENTS]
    assert fake.requests[0].query == {"watch": "true", "resourceVersion": "6", "allowWatchBookmarks": "true",
                                      "timeoutSeconds": "300", "fieldSelector": "spec.nodeName=node-1"}


async def test_watch_all_frames_in_one_chunk(fake: Fake) -> None:
    blob = b"".join(frame(e, "json") for e in EVENTS)
    fake.on("GET", "/api/v1/pods", watch_stream([blob], encoding="json", split=False))
    async with make_client(fake, encoding="json") as client:
        got = [ev.type async for ev in client.watch(PODS, resource_version="6")]
    assert got == ["ADDED", "MODIFIED", "BOOKMARK", "DELETED", "ERROR"]


async def test_watch_answered_410_at_request_time_raises_gone(fake: Fake) -> None:
    fake.on("GET", "/api/v1/pods", error(410, "Expired", "too old resource version"))
    async with make_client(fake) as client:
        with pytest.raises(GoneError):
            async for _ in client.watch(PODS, resource_version="1"):
                pass


async def test_watch_malformed_frame_raises_decode_error(fake: Fake) -> None:
    fake.on("GET", "/api/v1/pods", watch_stream([b'{"type": "ADDED"}\n'], encoding="json"))
    async with make_client(fake, encoding="json") as client:
        with pytest.raises(codec.DecodeError):
            async for _ in client.watch(PODS, resource_version="1"):
                pass


async def test_a_slow_watch_consumer_pushes_back_on_the_server(fake: Fake) -> None:
    """The client reads only as fast as it yields: the server's writes block."""
    big = frame({"type": "MODIFIED", "object": {**POD, "data": "x" * 4000}}, "msgpack")
    total = 16384  # 64 MiB: more than any socket buffers hold
    written = 0

    async def flood(request: web.Request, rec: Recorded) -> web.StreamResponse:
        nonlocal written
        resp = web.StreamResponse(headers={"Content-Type": codec.MSGPACK})
        await resp.prepare(request)
        with contextlib.suppress(ConnectionError):
            for _ in range(total):
                await resp.write(big)
                written += 1
        return resp

    fake.on("GET", "/api/v1/pods", flood)
    async with make_client(fake) as client:
        stream = client.watch(PODS, resource_version="1")
        async with contextlib.aclosing(stream):
            first = await anext(stream)
            assert first.type == "MODIFIED"
            # Wait until the server is blocked: its counter stops moving.
            last, still = -1, 0
            for _ in range(400):
                await asyncio.sleep(0.02)
                still = still + 1 if written == last else 0
                last = written
                if still >= 5:
                    break
            assert written < total


async def test_a_watch_broken_mid_stream_raises_a_connection_error(fake: Fake) -> None:
    async def broken(request: web.Request, rec: Recorded) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": codec.JSON})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(frame(EVENTS[0], "json"))
        await asyncio.sleep(0.01)
        assert request.transport is not None
        request.transport.close()  # no terminating chunk: the stream is cut
        return resp

    fake.on("GET", "/api/v1/pods", broken)
    got: list[WatchEvent] = []
    async with make_client(fake, encoding="json") as client:
        with pytest.raises(ApiConnectionError):
            async for ev in client.watch(PODS, resource_version="6"):
                got.append(ev)
    assert got == [WatchEvent("ADDED", POD)]

"""The write path's shortcuts give the same answers as the long way round.

* A write's response reuses the bytes its watch event carries: over HTTP, the response body
  and the watched object are byte-identical, in JSON and in msgpack, and a write that makes
  no new revision (a no-op update, a dry run) is still answered with its own object.
* uids are built without `uuid.UUID` but are the same strings.
* Request metrics are plain counters exported as the usual Prometheus series, labelled by
  resource (never by raw path).
"""

from __future__ import annotations

import gc
import random
import uuid
from typing import TYPE_CHECKING, Any

import aiohttp
import msgpack
import orjson
import pytest

from kubemesh.apiserver.core import assemble
from kubemesh.apiserver.registry import DeleteOptions, Registry, WriteOptions, random_uuid
from kubemesh.apiserver.serving import Targets
from kubemesh.apiserver.settings import ServerSettings
from kubemesh.apiserver.storage import Store
from kubemesh.apiserver.watching import WatchSettings
from kubemesh.services.machinery.clock import ManualClock
from kubemesh.services.model.codec import MSGPACK
from kubemesh.services.model.kinds import DEPLOYMENTS, PODS, KindTable

if TYPE_CHECKING:
    from conftest import ApiServer

POD_PATH = "/api/v1/namespaces/default/pods"


def pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "w"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.25", "ports": [{"containerPort": 80}]}]}}


def test_random_uuid_is_the_text_of_a_version_4_uuid() -> None:
    a, b = random.Random(7), random.Random(7)
    for _ in range(20_000):
        text = random_uuid(a)
        assert text == str(uuid.UUID(int=b.getrandbits(128), version=4))
        assert uuid.UUID(text).version == 4


def test_parse_target_memo_returns_equal_targets_and_still_raises() -> None:
    parse_target = Targets(KindTable()).parse
    first = parse_target("", "v1", "namespaces/default/pods/p1/status")
    assert parse_target("", "v1", "namespaces/default/pods/p1/status") == first
    assert (first.kind, first.namespace, first.name, first.sub) == (PODS, "default", "p1", "status")
    for _ in range(2):  # an unknown resource raises every time (exceptions are never cached)
        with pytest.raises(Exception, match="server could not find"):
            parse_target("", "v1", "namespaces/default/nosuchthings")


class _Watch:
    """A raw watch stream of pods in one encoding, read frame by frame."""

    def __init__(self, resp: aiohttp.ClientResponse, encoding: str) -> None:
        self.resp = resp
        self.encoding = encoding
        self.unpacker = msgpack.Unpacker(raw=False)
        self.buffer = b""

    async def next_object_bytes(self) -> bytes:
        """The encoded `object` of the next event (re-encoded the way the server encodes it)."""
        while True:
            if self.encoding == "json":
                if b"\n" in self.buffer:
                    line, self.buffer = self.buffer.split(b"\n", 1)
                    return orjson.dumps(orjson.loads(line)["object"])
            else:
                for frame in self.unpacker:
                    return msgpack.packb(frame["object"], use_bin_type=True)
            chunk = await self.resp.content.readany()
            assert chunk, "the watch ended"
            if self.encoding == "json":
                self.buffer += chunk
            else:
                self.unpacker.feed(chunk)


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
async def test_a_write_response_is_the_object_its_watchers_get(apiserver: ApiServer, encoding: str) -> None:
    ct = MSGPACK if encoding == "msgpack" else "application/json"

    def enc(v: Any) -> bytes:
        return msgpack.packb(v, use_bin_type=True) if encoding == "msgpack" else orjson.dumps(v)

    headers = {"Content-Type": ct, "Accept": ct}
    async with aiohttp.ClientSession(apiserver.url) as http, \
            http.get(f"{POD_PATH}?watch=true&resourceVersion=0", headers={"Accept": ct}) as w:
        watch = _Watch(w, encoding)
        async with http.post(POD_PATH, data=enc(pod("p1")), headers=headers) as r:
            assert r.status == 201
            created = await r.read()
        assert await watch.next_object_bytes() == created
        obj = msgpack.unpackb(created) if encoding == "msgpack" else orjson.loads(created)
        obj["metadata"]["labels"]["app"] = "w2"
        async with http.put(f"{POD_PATH}/p1", data=enc(obj), headers=headers) as r:
            assert r.status == 200
            updated = await r.read()
        assert await watch.next_object_bytes() == updated
        # A no-op update makes no event: it is answered with the stored object all the same.
        same = msgpack.unpackb(updated) if encoding == "msgpack" else orjson.loads(updated)
        async with http.put(f"{POD_PATH}/p1", data=enc(same), headers=headers) as r:
            assert r.status == 200
            assert await r.read() == updated
        # A dry run is answered with the object it would have stored, not the last event's.
        async with http.post(f"{POD_PATH}?dryRun=All", data=enc(pod("p2")), headers=headers) as r:
            assert r.status == 201
            dry = await r.read()
        dry_obj = msgpack.unpackb(dry) if encoding == "msgpack" else orjson.loads(dry)
        assert dry_obj["metadata"]["name"] == "p2"
        async with http.delete(f"{POD_PATH}/p1", headers={"Accept": ct}) as r:
            assert r.status == 200
            deleted = await r.read()
        assert await watch.next_object_bytes() == deleted


async def test_request_metrics_are_labelled_by_resource_not_by_path(apiserver: ApiServer) -> None:
    async with aiohttp.ClientSession(apiserver.url) as http:
        async with http.post(POD_PATH, json=pod("m1")) as r:
            assert r.status == 201
        async with http.get(f"{POD_PATH}/m1/status") as r:
            assert r.status == 200
        for i in range(5):
            async with http.get(f"/no/such/path/{i}") as r:
                assert r.status == 404
        async with http.get("/metrics") as r:
            text = await r.text()
    assert 'apiserver_request_total{code="201",resource="pods",verb="create"} 1.0' in text
    assert 'apiserver_request_total{code="200",resource="pods/status",verb="get"} 1.0' in text
    assert 'apiserver_request_total{code="404",resource="unmatched",verb="GET"} 5.0' in text
    assert "/no/such/path" not in text
    assert 'apiserver_request_duration_seconds_count{verb="create"} 1.0' in text
    assert 'apiserver_request_duration_seconds_bucket{le="+Inf",verb="create"} 1.0' in text


class _NullSink:
    def write(self, data: bytes) -> bool:
        return True

    async def drain(self) -> None:
        return None

    def abort(self) -> None:
        return None


async def test_writes_and_their_fan_out_leave_no_cyclic_garbage() -> None:
    """The garbage-collector policy (services/gctuning.py) relies on this: refcounting frees it all."""

    # A small window, so that events leave it (and would become garbage) during the test.
    core = assemble(ServerSettings(host="127.0.0.1", port=1, watch=WatchSettings(window=50)))
    registry, hub = core.registry, core.hub
    watchers = []
    for i in range(5):
        w = hub.watch(PODS, namespace=None, labels=None, fields=None, resource_version="",
                      send_initial_events=False, encoding="msgpack" if i % 2 else "json", table=False,
                      bookmarks=False, identity=("test", f"w{i}"))
        w.sink, w.direct = _NullSink(), True
        watchers.append(w)
    opts = WriteOptions()

    def churn(prefix: str) -> None:
        for i in range(200):
            created = registry.create(PODS, "default", pod(f"{prefix}{i}"), opts)
            changed = {**created, "metadata": {**created["metadata"], "labels": {"app": "x"}}}
            registry.update(PODS, "default", f"{prefix}{i}", changed, opts)
            if i % 10 == 9:
                hub.flusher.flush()
        for i in range(200):
            registry.delete(PODS, "default", f"{prefix}{i}", DeleteOptions())
        hub.flusher.flush()

    churn("warm-")  # first-use caches are not garbage
    gc.collect()
    gc.disable()
    try:
        churn("p-")
        assert gc.collect() == 0
    finally:
        gc.enable()
    assert all(w.delivered == 1200 for w in watchers)


def test_an_update_without_the_defaults_is_defaulted_and_is_not_a_spec_change() -> None:
    """A PUT of a spec stripped of its defaults (as some clients send) changes nothing in it."""

    reg = Registry(store=Store(), clock=ManualClock(), rng=random.Random(3))
    opts = WriteOptions()
    deploy = {"apiVersion": "apps/v1", "kind": "Deployment",
              "metadata": {"name": "d", "namespace": "default"},
              "spec": {"selector": {"matchLabels": {"app": "d"}},
                       "template": {"metadata": {"labels": {"app": "d"}},
                                    "spec": {"containers": [{"name": "c", "image": "nginx:1.25"}]}}}}
    stored = reg.create(DEPLOYMENTS, "default", orjson.loads(orjson.dumps(deploy)), opts)
    assert stored["metadata"]["generation"] == 1
    assert stored["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    bare = orjson.loads(orjson.dumps(deploy))
    bare["metadata"]["labels"] = {"touched": "yes"}
    updated = reg.update(DEPLOYMENTS, "default", "d", bare, opts)
    assert updated["spec"] == stored["spec"]  # defaulted again, to the same spec
    assert updated["metadata"]["generation"] == 1
    assert updated["metadata"]["labels"] == {"touched": "yes"}
    same = orjson.loads(orjson.dumps(updated))
    same["spec"]["replicas"] = 3
    scaled = reg.update(DEPLOYMENTS, "default", "d", same, opts)
    assert scaled["metadata"]["generation"] == 2

"""`python -m kubemesh.apiserver --storage etcd` against a real etcd: the HTTP API over etcd.

One etcd for the module (`etcdkit`); each test's apiservers keep their objects under a prefix
of the test's own (`--etcd-prefix`). Checked through the HTTP API (tests/restkit.py), with etcd
read and written directly through `kubemesh.apiserver.etcdstore` (as another apiserver would).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from etcdkit import running_etcd
from restkit import Rest

from kubemesh.apiserver.etcdcache import CacheStore, EtcdCache, Preloaded
from kubemesh.apiserver.etcdstore import EtcdSettings, EtcdStore, decode_object, encode_object, object_key
from kubemesh.services.model.kinds import CONFIGMAPS, KindTable, key_of

if TYPE_CHECKING:
    from conftest import ApiServer, StartApiServer

CM = "/api/v1/namespaces/default/configmaps"


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A single-member etcd on free loopback ports: its client URL."""
    with running_etcd(tmp_path_factory.mktemp("etcd")) as url:
        yield url


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    """This test's key prefix in etcd."""
    return "/t-" + str(request.node.name).replace("[", "-").rstrip("]")


@pytest.fixture
async def direct(etcd: str, prefix: str) -> AsyncIterator[EtcdStore]:
    """etcd itself, under this test's prefix (another apiserver's view)."""
    async with await EtcdStore.open(settings=EtcdSettings(endpoints=(etcd,), prefix=prefix, timeout=5.0)) as s:
        yield s


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
        yield s


async def start(start_apiserver: StartApiServer, etcd: str, prefix: str) -> ApiServer:
    return await start_apiserver(extra_args=("--storage", "etcd", "--etcd-endpoints", etcd, "--etcd-prefix", prefix,
                                             "--no-system-pods"))


def cm(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


async def mod_revision(direct: EtcdStore, name: str) -> int | None:
    kv = await direct.get(key=direct.key(resource="configmaps", namespace="default", name=name))
    return kv.mod_revision if kv is not None else None


async def test_crud_and_watch_carry_etcd_revisions(start_apiserver: StartApiServer, etcd: str, prefix: str,
                                                   direct: EtcdStore, session: aiohttp.ClientSession) -> None:
    server = await start(start_apiserver, etcd, prefix)
    rest = Rest(session, server)
    listed = await rest.ok("GET", CM)
    watch = asyncio.create_task(rest.watch_lines(CM, params={"resourceVersion": listed["metadata"]["resourceVersion"]},
                                                 until=3))
    await asyncio.sleep(0.2)

    created = await rest.ok("POST", CM, cm("c1", a="1"))
    rv1 = int(created["metadata"]["resourceVersion"])
    assert rv1 == await mod_revision(direct, "c1")
    kv = await direct.get(key=direct.key(resource="configmaps", namespace="default", name="c1"))
    assert kv is not None
    stored = decode_object(kv)
    assert stored["data"] == {"a": "1"} and stored["metadata"]["uid"] == created["metadata"]["uid"]
    got = await rest.ok("GET", f"{CM}/c1")
    assert got["metadata"]["resourceVersion"] == str(rv1)  # read after the write: the cache has applied it

    updated = await rest.ok("PUT", f"{CM}/c1", {**got, "data": {"a": "2"}})
    rv2 = int(updated["metadata"]["resourceVersion"])
    assert rv2 > rv1 and rv2 == await mod_revision(direct, "c1")

    # A stale resourceVersion: kube's 409 with its message, nothing written.
    status, doc = await rest.call("PUT", f"{CM}/c1", {**got, "data": {"a": "3"}})
    assert status == 409, doc
    assert doc["reason"] == "Conflict"
    assert doc["message"] == ('Operation cannot be fulfilled on configmaps "c1": the object has been modified; '
                              "please apply your changes to the latest version and try again")
    assert await mod_revision(direct, "c1") == rv2

    status, doc = await rest.call("POST", CM, cm("c1"))
    assert status == 409 and doc["reason"] == "AlreadyExists", doc

    deleted = await rest.ok("DELETE", f"{CM}/c1")
    rv3 = int(deleted["metadata"]["resourceVersion"])
    assert rv3 > rv2 and await mod_revision(direct, "c1") is None
    assert await rest.status_of("GET", f"{CM}/c1") == 404

    events = await asyncio.wait_for(watch, 10)
    assert [(e["type"], int(e["object"]["metadata"]["resourceVersion"])) for e in events] == \
        [("ADDED", rv1), ("MODIFIED", rv2), ("DELETED", rv3)]
    listed = await rest.ok("GET", CM)
    assert int(listed["metadata"]["resourceVersion"]) >= rv3 and listed["items"] == []


async def test_restart_keeps_every_object(start_apiserver: StartApiServer, etcd: str, prefix: str,
                                          session: aiohttp.ClientSession) -> None:
    first = await start(start_apiserver, etcd, prefix)
    rest = Rest(session, first)
    for i in range(5):
        await rest.ok("POST", CM, cm(f"k{i}", i=str(i)))
    before = {o["metadata"]["name"]: o for o in (await rest.ok("GET", CM))["items"]}
    namespaces = sorted(o["metadata"]["name"] for o in (await rest.ok("GET", "/api/v1/namespaces"))["items"])
    await first.stop()

    second = await start(start_apiserver, etcd, prefix)
    rest = Rest(session, second)
    after = {o["metadata"]["name"]: o for o in (await rest.ok("GET", CM))["items"]}
    assert after == before
    # The start-up steps found their objects and wrote no second copy of any.
    assert sorted(o["metadata"]["name"] for o in (await rest.ok("GET", "/api/v1/namespaces"))["items"]) == namespaces


async def test_a_write_straight_into_etcd_reaches_watchers(start_apiserver: StartApiServer, etcd: str, prefix: str,
                                                          direct: EtcdStore, session: aiohttp.ClientSession) -> None:
    server = await start(start_apiserver, etcd, prefix)
    rest = Rest(session, server)
    listed = await rest.ok("GET", CM)
    watch = asyncio.create_task(rest.watch_lines(CM, params={"resourceVersion": listed["metadata"]["resourceVersion"]},
                                                 until=1))
    await asyncio.sleep(0.2)
    obj = cm("foreign", by="another apiserver")
    obj["metadata"].update(namespace="default", uid="00000000-0000-4000-8000-000000000001",
                           creationTimestamp="2026-01-01T00:00:00Z")
    revision = await direct.create(key=object_key(resource="configmaps", namespace="default", name="foreign",
                                                  prefix=prefix), value=encode_object(obj))
    (event,) = await asyncio.wait_for(watch, 10)
    assert event["type"] == "ADDED"
    assert event["object"]["metadata"]["resourceVersion"] == str(revision)
    assert event["object"]["data"] == {"by": "another apiserver"}
    got = await rest.ok("GET", f"{CM}/foreign")
    assert got["metadata"]["resourceVersion"] == str(revision)


async def test_two_apiservers_over_one_etcd(start_apiserver: StartApiServer, etcd: str, prefix: str,
                                            session: aiohttp.ClientSession) -> None:
    a = Rest(session, await start(start_apiserver, etcd, prefix))
    b = Rest(session, await start(start_apiserver, etcd, prefix))
    listed = await b.ok("GET", CM)
    watch = asyncio.create_task(b.watch_lines(CM, params={"resourceVersion": listed["metadata"]["resourceVersion"]},
                                              until=1))
    await asyncio.sleep(0.2)
    created = await a.ok("POST", CM, cm("shared"))
    (event,) = await asyncio.wait_for(watch, 10)
    assert (event["type"], event["object"]["metadata"]["resourceVersion"]) == \
        ("ADDED", created["metadata"]["resourceVersion"])

    # Concurrent read-modify-writes of one object through both (merge patches without a
    # resourceVersion: each apiserver reads its cache and commits with a compare; the loser of a
    # race runs again): no update is lost.
    async def patch(rest: Rest, key: str) -> None:
        await rest.ok("PATCH", f"{CM}/shared", {"data": {key: "x"}}, ctype="application/merge-patch+json")

    await asyncio.gather(*(patch(a if i % 2 else b, f"p{i}") for i in range(20)))
    final = await a.ok("GET", f"{CM}/shared")
    assert sorted(final["data"]) == sorted(f"p{i}" for i in range(20))


async def test_revisions_older_than_the_cache_after_a_compaction_are_gone(
        start_apiserver: StartApiServer, etcd: str, prefix: str, direct: EtcdStore,
        session: aiohttp.ClientSession) -> None:
    first = await start(start_apiserver, etcd, prefix)
    rest = Rest(session, first)
    rv1 = int((await rest.ok("POST", CM, cm("old")))["metadata"]["resourceVersion"])
    got = await rest.ok("GET", f"{CM}/old")
    rv2 = int((await rest.ok("PUT", f"{CM}/old", {**got, "data": {"a": "2"}}))["metadata"]["resourceVersion"])
    await direct.compact(revision=rv2)
    await first.stop()

    # A new apiserver's cache starts at etcd's revision now: a watch or an exact list from before is
    # 410 (a watch: as kube-apiserver, a 200 stream whose one event is an ERROR carrying the 410).
    rest = Rest(session, await start(start_apiserver, etcd, prefix))
    (event,) = await rest.watch_lines(CM, params={"resourceVersion": str(rv1)}, until=1)
    assert event["type"] == "ERROR"
    assert (event["object"]["code"], event["object"]["reason"]) == (410, "Expired"), event
    assert event["object"]["message"].startswith(f"too old resource version: {rv1} (")
    status, doc = await rest.call("GET", CM, params={"resourceVersion": str(rv1), "resourceVersionMatch": "Exact"})
    assert status == 410 and doc["reason"] == "Expired", doc
    # The current state is whole.
    assert (await rest.ok("GET", f"{CM}/old"))["metadata"]["resourceVersion"] == str(rv2)


async def test_a_crd_created_through_one_apiserver_is_served_by_the_other(
        start_apiserver: StartApiServer, etcd: str, prefix: str, session: aiohttp.ClientSession) -> None:
    a = Rest(session, await start(start_apiserver, etcd, prefix))
    b = Rest(session, await start(start_apiserver, etcd, prefix))
    schema = {"type": "object", "properties": {"spec": {"type": "object",
                                                        "properties": {"size": {"type": "integer"}}}}}
    await a.ok("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
                 "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": schema}}]}})
    gadgets = "/apis/example.com/v1/namespaces/default/gadgets"
    for _ in range(100):  # B serves it once its watch cache has applied the CRD
        if await b.status_of("GET", gadgets) == 200:
            break
        await asyncio.sleep(0.05)
    created = await b.ok("POST", gadgets, {"apiVersion": "example.com/v1", "kind": "Gadget",
                                           "metadata": {"name": "g1"}, "spec": {"size": 3}})
    for _ in range(100):
        status, got = await a.call("GET", f"{gadgets}/g1")
        if status == 200:
            break
        await asyncio.sleep(0.05)
    assert got["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    assert got["spec"] == {"size": 3}


async def test_a_cache_whose_watch_was_compacted_relists(etcd: str, prefix: str, direct: EtcdStore) -> None:
    """In process: a cache started from a revision etcd has compacted since lists again and publishes the difference."""
    def key(name: str) -> bytes:
        return object_key(resource="configmaps", namespace="default", name=name, prefix=prefix)

    def value(name: str, **data: str) -> bytes:
        obj = cm(name, **data)
        obj["metadata"]["namespace"] = "default"
        return encode_object(obj)

    await direct.create(key=key("kept"), value=value("kept"))
    rv_gone = await direct.create(key=key("gone"), value=value("gone"))
    rv_changed = await direct.create(key=key("changed"), value=value("changed", v="1"))
    async with await EtcdStore.open(settings=EtcdSettings(endpoints=(etcd,), prefix=prefix, timeout=5.0)) as mine:
        revision, objects = await EtcdCache.load(mine)
        store = CacheStore(backend=Preloaded(revision=revision, objects=objects))
        seen: list[tuple[str, str, int]] = []
        store.subscribe(lambda kind, event, obj, prev, rv: seen.append((event, key_of(obj), rv)))
        cache = EtcdCache(etcd=mine, store=store, revision=revision, compaction_interval=0)
        # While the cache does not follow yet: changes, then a compaction past all of them. A watch
        # would deliver both updates of "changed"; the relist sees only the last state.
        rv_changed = await direct.update(key=key("changed"), value=value("changed", v="1b"),
                                         expected_mod_revision=rv_changed)
        rv_changed = await direct.update(key=key("changed"), value=value("changed", v="2"),
                                         expected_mod_revision=rv_changed)
        rv_new = await direct.create(key=key("new"), value=value("new"))
        rv_deleted, _ = await direct.delete(key=key("gone"), expected_mod_revision=rv_gone)
        await direct.compact(revision=rv_deleted)
        cache.start(KindTable())
        try:
            await asyncio.wait_for(store.wait_applied(rv_deleted), 10)
            assert seen == [("MODIFIED", "default/changed", rv_changed), ("ADDED", "default/new", rv_new),
                            ("DELETED", "default/gone", rv_deleted)]
            assert sorted(key_of(o) for o in store.items(CONFIGMAPS)) == ["default/changed", "default/kept",
                                                                          "default/new"]
            changed = store.get(CONFIGMAPS, "default/changed")
            assert changed is not None and changed["data"] == {"v": "2"}
            # And it follows from there on.
            rv_after = await direct.create(key=key("after"), value=value("after"))
            await asyncio.wait_for(store.wait_applied(rv_after), 10)
            assert store.get(CONFIGMAPS, "default/after") is not None
        finally:
            await cache.close()


async def test_a_cluster_ip_taken_through_one_apiserver_is_taken_for_the_other(
        start_apiserver: StartApiServer, etcd: str, prefix: str, session: aiohttp.ClientSession) -> None:
    a = Rest(session, await start(start_apiserver, etcd, prefix))
    b = Rest(session, await start(start_apiserver, etcd, prefix))
    services = "/api/v1/namespaces/default/services"

    def svc(name: str, ip: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"ports": [{"port": 80}]}
        if ip is not None:
            spec["clusterIP"] = ip
        return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec}

    ip = (await a.ok("POST", services, svc("first")))["spec"]["clusterIP"]
    for _ in range(100):  # B has applied it once it serves it
        if await b.status_of("GET", f"{services}/first") == 200:
            break
        await asyncio.sleep(0.05)
    status, doc = await b.call("POST", services, svc("second", ip))
    assert status == 422, doc
    assert "already allocated" in doc["message"], doc


async def test_a_lagging_watch_cache_serves_old_state_but_never_to_a_consistent_list(
        start_apiserver: StartApiServer, etcd: str, prefix: str, session: aiohttp.ClientSession) -> None:
    """kubernetes#59848's ingredient: one apiserver's watch cache behind etcd (chaos `apiserver.watchCacheLag`).

    A list at resourceVersion "0" is what that cache holds (the past); a list without one is
    consistent, read from etcd when the cache has not caught up; a watch from a revision the
    cache has not reached waits for it and then answers 504; writes through it still succeed.
    """
    a = Rest(session, await start(start_apiserver, etcd, prefix))
    b = Rest(session, await start(start_apiserver, etcd, prefix))
    await a.ok("POST", CM, cm("before"))
    await b.ok("POST", "/chaos/v1/faults", {"name": "lag", "type": "apiserver.watchCacheLag", "duration": None})
    created = await a.ok("POST", CM, cm("during"))
    rv = created["metadata"]["resourceVersion"]

    def names(doc: dict[str, Any]) -> list[str]:
        return sorted(i["metadata"]["name"] for i in doc["items"])

    async def cached_names() -> list[str]:
        return names(await b.ok("GET", CM, params={"resourceVersion": "0"}))

    assert await cached_names() == ["before"]  # the frozen cache's past
    consistent = await b.ok("GET", CM)
    assert names(consistent) == ["before", "during"]
    assert int(consistent["metadata"]["resourceVersion"]) >= int(rv)
    paged = await b.ok("GET", CM, params={"limit": "1"})  # a consistent list read from etcd pages too
    rest_page = await b.ok("GET", CM, params={"limit": "1", "continue": paged["metadata"]["continue"]})
    assert names(paged) + names(rest_page) == ["before", "during"]
    status, doc = await b.call("GET", CM, params={"watch": "true", "resourceVersion": rv})
    assert status == 504 and doc["reason"] == "Timeout", doc
    assert doc["message"].startswith(f"Too large resource version: {rv}, current: ")
    mine = await b.ok("POST", CM, cm("through-b"))  # answered from etcd's result, not the frozen cache
    assert int(mine["metadata"]["resourceVersion"]) > int(rv)
    # A get without a resourceVersion is consistent; a write that loses its compare against the
    # stale cache runs again on etcd's current object (GuaranteedUpdate), losing no update.
    await a.ok("PATCH", f"{CM}/before", {"data": {"x": "1"}}, ctype="application/merge-patch+json")
    assert (await b.ok("GET", f"{CM}/before"))["data"] == {"x": "1"}
    patched = await b.ok("PATCH", f"{CM}/before", {"data": {"y": "2"}}, ctype="application/merge-patch+json")
    assert patched["data"] == {"x": "1", "y": "2"}
    fresh = await b.ok("GET", f"{CM}/before")  # an update with the resourceVersion a consistent get gave
    updated = await b.ok("PUT", f"{CM}/before", {**fresh, "data": {**fresh["data"], "z": "3"}})
    assert updated["data"] == {"x": "1", "y": "2", "z": "3"}
    assert await cached_names() == ["before"]  # the cache itself is still frozen

    await b.ok("DELETE", "/chaos/v1/faults/lag")
    for _ in range(100):  # the held changes are applied, in order, once the lag ends
        if await cached_names() == ["before", "during", "through-b"]:
            break
        await asyncio.sleep(0.05)
    assert await cached_names() == ["before", "during", "through-b"]
    cached = await b.ok("GET", f"{CM}/before", params={"resourceVersion": "0"})
    assert cached["data"] == {"x": "1", "y": "2", "z": "3"}


async def test_an_apiserver_partitioned_from_etcd_fails_its_writes_and_serves_its_past(
        start_apiserver: StartApiServer, etcd: str, prefix: str, session: aiohttp.ClientSession) -> None:
    """Chaos `apiserver.etcdPartition`: every etcd call of that apiserver fails (500, etcd's error), its
    cache stops; the other apiserver goes on; healed, it catches up and writes again."""
    a = Rest(session, await start(start_apiserver, etcd, prefix))
    b = Rest(session, await start(start_apiserver, etcd, prefix))
    await a.ok("POST", CM, cm("before"))
    await b.ok("POST", "/chaos/v1/faults", {"name": "cut", "type": "apiserver.etcdPartition", "duration": None})
    status, doc = await b.call("POST", CM, cm("refused"))
    assert status == 500 and doc["message"].startswith("etcdserver: request timed out (chaos: fault cut"), doc
    assert "reason" not in doc  # kube-apiserver's answer to an etcd error: code 500, reason Unknown
    status, doc = await b.call("GET", CM)  # a consistent list needs etcd
    assert status == 500, doc
    await a.ok("POST", CM, cm("elsewhere"))  # the other apiserver is not cut off
    cached = await b.ok("GET", CM, params={"resourceVersion": "0"})
    assert [i["metadata"]["name"] for i in cached["items"]] == ["before"]
    await b.ok("DELETE", "/chaos/v1/faults/cut")
    await b.ok("POST", CM, cm("after"))
    names = [i["metadata"]["name"] for i in (await b.ok("GET", CM))["items"]]
    assert names == ["after", "before", "elsewhere"] and await a.status_of("GET", f"{CM}/refused") == 404


async def test_a_watch_cache_lag_is_refused_without_etcd(start_apiserver: StartApiServer,
                                                          session: aiohttp.ClientSession) -> None:
    rest = Rest(session, await start_apiserver())
    status, doc = await rest.call("POST", "/chaos/v1/faults", {"type": "apiserver.watchCacheLag", "duration": 5})
    assert status == 422, doc
    assert "needs an apiserver over etcd (--storage etcd" in doc["message"]
    status, doc = await rest.call("POST", "/chaos/v1/faults", {"type": "apiserver.watchCacheLag", "duration": 5,
                                                               "target": {"component": "scheduler"}})
    assert status == 422 and "apiserver faults act on the apiserver they are created on" in doc["message"], doc

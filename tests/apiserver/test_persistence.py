"""Durability with --data-dir: a `kill -9` loses no acknowledged write, and revisions keep going up."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aiohttp

if TYPE_CHECKING:  # conftest is never imported at run time (see tests/conftest.py)
    from conftest import ApiServer, StartApiServer

NS = "persist"
PODS = f"/api/v1/namespaces/{NS}/pods"
N = 200
Json = dict[str, Any]


def pod(name: str, *, node: str | None = None) -> Json:
    spec: Json = {"containers": [{"name": "c", "image": "nginx:1.25"}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"i": name}}, "spec": spec}


class Rest:
    def __init__(self, session: aiohttp.ClientSession, server: ApiServer) -> None:
        self.session = session
        self.base = server.url

    async def call(self, method: str, path: str, body: Any = None, *, ctype: str = "application/json",
                   params: dict[str, str] | None = None) -> tuple[int, Json]:
        async with self.session.request(method, self.base + path, params=params, headers={"Content-Type": ctype},
                                        data=json.dumps(body).encode() if body is not None else None) as resp:
            doc: Json = await resp.json(content_type=None)
            return resp.status, doc

    async def ok(self, method: str, path: str, body: Any = None, **kw: Any) -> Json:
        status, doc = await self.call(method, path, body, **kw)
        assert status in (200, 201), (method, path, status, doc)
        return doc


def rv(obj: Json) -> int:
    return int(obj["metadata"]["resourceVersion"])


async def test_kill_9_loses_no_acknowledged_write(start_apiserver: StartApiServer, tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = await start_apiserver(data_dir=data, seed=1)
    expected: dict[str, Json] = {}
    deleted: set[str] = set()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        rest = Rest(session, srv)
        await rest.ok("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
        node = await rest.ok("POST", "/api/v1/nodes", {"metadata": {"name": "node-1", "labels": {"a": "b"}}})
        sem = asyncio.Semaphore(16)

        async def create(i: int) -> None:
            async with sem:
                obj = await rest.ok("POST", PODS, pod(f"p-{i:03d}", node="node-1" if i % 10 == 0 else None))
            expected[obj["metadata"]["name"]] = obj

        await asyncio.gather(*(create(i) for i in range(N)))
        # Updates of every kind: merge patch, strategic merge patch, PUT, status.
        for i in range(0, N, 4):
            name = f"p-{i:03d}"
            expected[name] = await rest.ok("PATCH", f"{PODS}/{name}", {"metadata": {"labels": {"patched": "yes"}}},
                                           ctype="application/merge-patch+json")
        for i in range(1, N, 8):
            name = f"p-{i:03d}"
            expected[name] = await rest.ok("PATCH", f"{PODS}/{name}/status",
                                           {"status": {"phase": "Running", "podIP": f"10.0.0.{i % 250}"}},
                                           ctype="application/strategic-merge-patch+json")
        put = dict(expected["p-002"])
        put["metadata"] = {**put["metadata"], "annotations": {"put": "yes"}}
        expected["p-002"] = await rest.ok("PUT", f"{PODS}/p-002", put)
        # Deletions: unbound pods go at once; a bound pod only becomes terminating.
        for i in range(3, N, 10):
            name = f"p-{i:03d}"
            await rest.ok("DELETE", f"{PODS}/{name}")
            deleted.add(name)
            expected.pop(name)
        terminating = await rest.ok("DELETE", f"{PODS}/p-010")
        assert terminating["metadata"]["deletionTimestamp"]
        expected["p-010"] = terminating
        lease = await rest.ok("POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {
            "metadata": {"name": "node-1"}, "spec": {"holderIdentity": "node-1", "leaseDurationSeconds": 40}})
        highest = max([rv(o) for o in expected.values()] + [rv(node), rv(lease)])
        _, listed = await rest.call("GET", PODS)
        assert int(listed["metadata"]["resourceVersion"]) == highest

    srv.kill()
    assert srv.proc.returncode == -9

    srv2 = await start_apiserver(data_dir=data, seed=1)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        rest = Rest(session, srv2)
        listed = await rest.ok("GET", PODS)
        got = {o["metadata"]["name"]: o for o in listed["items"]}
        assert set(got) == set(expected)
        for name, obj in expected.items():
            assert got[name] == obj, name
        assert not deleted & set(got)
        assert int(listed["metadata"]["resourceVersion"]) >= highest
        assert (await rest.ok("GET", "/api/v1/nodes/node-1")) == node
        assert (await rest.ok("GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-1")) == lease
        # The revision counter continues: a new write is above everything seen before the kill.
        after = await rest.ok("PATCH", f"{PODS}/p-000", {"metadata": {"labels": {"after": "restart"}}},
                              ctype="application/merge-patch+json")
        assert rv(after) > highest
        created = await rest.ok("POST", PODS, pod("p-new"))
        assert rv(created) > rv(after)
        # A uid survives, and a name freed before the kill can be taken again.
        assert after["metadata"]["uid"] == expected["p-000"]["metadata"]["uid"]
        again = await rest.ok("POST", PODS, pod("p-003"))
        assert rv(again) > rv(created)


async def test_kill_9_during_concurrent_writes(start_apiserver: StartApiServer, tmp_path: Path) -> None:
    """Writes in flight at the kill: every one that was acknowledged survives it."""
    data = tmp_path / "data"
    srv = await start_apiserver(data_dir=data)
    acked: dict[str, int] = {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        rest = Rest(session, srv)
        await rest.ok("POST", "/api/v1/namespaces", {"metadata": {"name": NS}})
        killed = asyncio.Event()

        async def writer(w: int) -> None:
            i = 0
            while not killed.is_set():
                name = f"w{w}-{i}"
                i += 1
                with contextlib.suppress(aiohttp.ClientError, ConnectionError, TimeoutError):
                    status, doc = await rest.call("POST", PODS, pod(name))
                    if status == 201:
                        acked[name] = rv(doc)
                        if len(acked) >= 150:
                            if not killed.is_set():
                                killed.set()
                                srv.kill()
                            return

        await asyncio.gather(*(writer(w) for w in range(8)))
    assert srv.proc.returncode == -9
    highest = max(acked.values())

    srv2 = await start_apiserver(data_dir=data)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        rest = Rest(session, srv2)
        listed = await rest.ok("GET", PODS)
        got = {o["metadata"]["name"]: rv(o) for o in listed["items"]}
        missing = sorted(set(acked) - set(got))
        assert not missing, f"acknowledged writes lost by kill -9: {missing[:10]}"
        assert all(got[name] == acked[name] for name in acked)
        # Recovered revisions are unique (one global counter) and a new write goes above all of them.
        assert len(set(got.values())) == len(got)
        created = await rest.ok("POST", PODS, pod("after-restart"))
        assert rv(created) > max(highest, *got.values())

    # A second crash and restart on the same directory (log replayed on top of the earlier one).
    srv2.kill()
    srv3 = await start_apiserver(data_dir=data)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        rest = Rest(session, srv3)
        again = await rest.ok("GET", f"{PODS}/after-restart")
        assert again == created
        newer = await rest.ok("POST", PODS, pod("after-second-restart"))
        assert rv(newer) > rv(created)

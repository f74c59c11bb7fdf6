"""List pagination as kube-apiserver pages: `limit`, `continue` at the first page's revision, expiry.

Against a real apiserver process, with the JSON client of the tests, the official Python client
(which follows `_continue` by hand, as controllers do) and kubectl (which pages its `get` with
`--chunk-size`).
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import TYPE_CHECKING, Any

import aiohttp
import pytest
from restkit import Rest

if TYPE_CHECKING:
    from conftest import ApiServer, RunKubectl, StartApiServer

CMS = "/api/v1/namespaces/default/configmaps"


async def make(rest: Rest, count: int, *, ns: str = "default", prefix: str = "cm", labels: Any = None) -> None:
    for i in range(count):
        md: dict[str, Any] = {"name": f"{prefix}-{i:03d}"}
        if labels is not None:
            md["labels"] = labels(i)
        await rest.ok("POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": md, "data": {"i": str(i)}})


async def pages(rest: Rest, path: str, **params: str) -> list[dict[str, Any]]:
    out = []
    token = ""
    while True:
        query = dict(params)
        if token:
            query["continue"] = token
        doc = await rest.ok("GET", path, params=query)
        out.append(doc)
        token = doc["metadata"].get("continue", "")
        if not token:
            return out


def names(doc: dict[str, Any]) -> list[str]:
    return [o["metadata"]["name"] for o in doc["items"]]


async def test_limit_pages_in_key_order_with_remaining_counts(rest: Rest) -> None:
    await make(rest, 7)
    got = await pages(rest, CMS, limit="3")
    assert [names(p) for p in got] == [["cm-000", "cm-001", "cm-002"], ["cm-003", "cm-004", "cm-005"], ["cm-006"]]
    assert [p["metadata"].get("remainingItemCount") for p in got] == [4, 1, None]
    assert len({p["metadata"]["resourceVersion"] for p in got}) == 1
    # A limit at least the list's size is one page, with no token.
    whole = await rest.ok("GET", CMS, params={"limit": "7"})
    assert len(whole["items"]) == 7 and "continue" not in whole["metadata"]


async def test_later_pages_are_read_at_the_first_pages_revision(rest: Rest) -> None:
    await make(rest, 6)
    first = await rest.ok("GET", CMS, params={"limit": "2"})
    rv = first["metadata"]["resourceVersion"]
    # Writes in between: a delete of an unread object, an update, a new object that sorts later.
    await rest.ok("DELETE", f"{CMS}/cm-004")
    await rest.ok("PATCH", f"{CMS}/cm-003", {"data": {"i": "changed"}}, ctype="application/merge-patch+json")
    await rest.ok("POST", CMS, {"metadata": {"name": "cm-999"}})
    rest_pages = []
    token = first["metadata"]["continue"]
    while token:
        doc = await rest.ok("GET", CMS, params={"limit": "2", "continue": token})
        assert doc["metadata"]["resourceVersion"] == rv
        rest_pages.append(doc)
        token = doc["metadata"].get("continue", "")
    items = [o for p in rest_pages for o in p["items"]]
    assert [o["metadata"]["name"] for o in items] == ["cm-002", "cm-003", "cm-004", "cm-005"]
    assert next(o for o in items if o["metadata"]["name"] == "cm-003")["data"] == {"i": "3"}
    # A fresh list sees the writes.
    assert names(await rest.ok("GET", CMS)) == ["cm-000", "cm-001", "cm-002", "cm-003", "cm-005", "cm-999"]


async def test_selectors_and_namespaces_page_without_remaining_counts(rest: Rest) -> None:
    await rest.ok("POST", "/api/v1/namespaces", {"metadata": {"name": "other"}})
    await make(rest, 5, labels=lambda i: {"parity": "even" if i % 2 == 0 else "odd"})
    await make(rest, 3, ns="other", prefix="x")
    got = await pages(rest, CMS, limit="2", labelSelector="parity=even")
    assert [names(p) for p in got] == [["cm-000", "cm-002"], ["cm-004"]]
    assert all("remainingItemCount" not in p["metadata"] for p in got)
    every = await pages(rest, "/api/v1/configmaps", limit="3", fieldSelector="metadata.namespace!=kube-system")
    listed = [(o["metadata"]["namespace"], o["metadata"]["name"]) for p in every for o in p["items"]]
    assert [x for x in listed if x[0] in ("default", "other")] == (
        [("default", f"cm-{i:03d}") for i in range(5)] + [("other", f"x-{i:03d}") for i in range(3)])


async def test_tokens_that_are_not_tokens_and_revisions_not_reached(rest: Rest) -> None:
    await make(rest, 3)
    for bad in ("abc", base64.urlsafe_b64encode(b'{"v":"meta.k8s.io/v0","rv":1,"start":"a"}').decode(),
                base64.urlsafe_b64encode(b'{"v":"meta.k8s.io/v1","rv":0,"start":"a"}').decode()):
        status, doc = await rest.call("GET", CMS, params={"limit": "1", "continue": bad})
        assert status == 400 and doc["reason"] == "BadRequest", doc
        assert doc["message"].startswith("invalid continue token: continue key is not valid"), doc
    token = (await rest.ok("GET", CMS, params={"limit": "1"}))["metadata"]["continue"]
    status, doc = await rest.call("GET", CMS, params={"limit": "1", "continue": token, "resourceVersion": "5"})
    assert (status, doc["message"]) == (400, "specifying resource version is not allowed when using continue")
    status, doc = await rest.call("GET", CMS, params={"continue": token, "resourceVersion": "5",
                                                       "resourceVersionMatch": "Exact"})
    assert (status, doc["message"]) == (400, "resourceVersionMatch is forbidden when continue is provided")
    current = int((await rest.ok("GET", CMS))["metadata"]["resourceVersion"])
    status, doc = await rest.call("GET", CMS, params={"resourceVersion": str(current + 1000),
                                                       "resourceVersionMatch": "Exact"})
    assert status == 504 and doc["reason"] == "Timeout", doc
    # "current" is the store's revision: over etcd a consistent list may name a newer one than the
    # watch cache has applied yet (KUBEMESH_TEST_ETCD runs these tests there).
    head, _, store_rv = doc["message"].rpartition(" ")
    assert head == f"Too large resource version: {current + 1000}, current:" and int(store_rv) <= current
    assert doc["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"


async def test_an_exact_list_reads_an_older_revision_and_zero_ignores_the_limit(rest: Rest) -> None:
    await make(rest, 2)
    rv = (await rest.ok("GET", CMS))["metadata"]["resourceVersion"]
    await make(rest, 2, prefix="later")
    at = await rest.ok("GET", CMS, params={"resourceVersion": rv, "resourceVersionMatch": "Exact"})
    assert names(at) == ["cm-000", "cm-001"] and at["metadata"]["resourceVersion"] == rv
    # A revision with a limit (and no match) is exact too; "0" is the watch cache's whole list.
    assert names(await rest.ok("GET", CMS, params={"resourceVersion": rv, "limit": "5"})) == ["cm-000", "cm-001"]
    zero = await rest.ok("GET", CMS, params={"resourceVersion": "0", "limit": "1"})
    assert len(zero["items"]) == 4 and "continue" not in zero["metadata"]


async def test_a_token_older_than_the_window_expires_with_an_inconsistent_token(
        start_apiserver: StartApiServer) -> None:
    server = await start_apiserver(extra_args=("--watch-window", "5"))
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        rest = Rest(session, server)
        await make(rest, 4)
        first = await rest.ok("GET", CMS, params={"limit": "2"})
        await make(rest, 10, prefix="z")  # the window moves past the first page's revision
        status, doc = await rest.call("GET", CMS, params={"limit": "2", "continue": first["metadata"]["continue"]})
        assert status == 410 and doc["reason"] == "Expired", doc
        assert doc["message"].startswith("The provided continue parameter is too old to display a consistent list")
        # The Status's token goes on from the same key at the current revision.
        rest_of: list[str] = []
        token = doc["metadata"]["continue"]
        while token:
            page = await rest.ok("GET", CMS, params={"limit": "5", "continue": token})
            rest_of.extend(names(page))
            token = page["metadata"].get("continue", "")
        assert rest_of == ["cm-002", "cm-003"] + [f"z-{i:03d}" for i in range(10)]
        status, doc = await rest.call("GET", CMS, params={"resourceVersion": first["metadata"]["resourceVersion"],
                                                           "resourceVersionMatch": "Exact"})
        assert status == 410 and doc["message"].startswith("too old resource version"), doc


async def test_the_official_client_pages_through_a_list(apiserver: ApiServer, rest: Rest) -> None:
    kubernetes = pytest.importorskip("kubernetes")
    await make(rest, 11)
    conf = kubernetes.client.Configuration()
    conf.host = apiserver.url
    if apiserver.token:
        conf.api_key = {"authorization": f"Bearer {apiserver.token}"}
    api = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(conf))
    seen: list[str] = []
    token = None
    counts = []
    while True:
        page = await asyncio.to_thread(api.list_namespaced_config_map, "default", limit=4, _continue=token)
        seen.extend(cm.metadata.name for cm in page.items)
        counts.append(page.metadata.remaining_item_count)
        token = page.metadata._continue
        if not token:
            break
    assert seen == [f"cm-{i:03d}" for i in range(11)] and counts == [7, 3, None]


@pytest.mark.kubectl
async def test_kubectl_get_pages_with_chunk_size(apiserver: ApiServer, rest: Rest, kubectl: RunKubectl,
                                                 edge_kubectl_version: str) -> None:
    await make(rest, 9)

    def run(*args: str) -> str:
        done = kubectl(edge_kubectl_version, *args, server=apiserver.url, token=apiserver.token)
        assert done.returncode == 0, done.stderr
        return done.stdout

    out = await asyncio.to_thread(run, "get", "configmaps", "--chunk-size=2", "-o", "name")
    assert [line for line in out.splitlines() if line.startswith("configmap/cm-")] == [
        f"configmap/cm-{i:03d}" for i in range(9)]
    table = await asyncio.to_thread(run, "get", "configmaps", "--chunk-size=4", "--no-headers")
    assert [line.split()[0] for line in table.splitlines() if line.startswith("cm-")] == [
        f"cm-{i:03d}" for i in range(9)]
    raw = json.loads(await asyncio.to_thread(run, "get", "--raw", "/api/v1/namespaces/default/configmaps?limit=4"))
    assert raw["metadata"]["remainingItemCount"] == 5

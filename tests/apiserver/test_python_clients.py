"""The official Python clients (`kubernetes`, sync, and `kubernetes_asyncio`) against the apiserver.

The sync client runs in a worker thread (`asyncio.to_thread`), so a server in this process
keeps serving while it blocks. The 410 tests build the apiserver in-process with a watch
window of 5 events, so that a watch from an old revision is really too old.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING, Any

import kubernetes
import kubernetes_asyncio
import pytest
from aiohttp import web
from kubernetes import client as _k8s
from kubernetes import watch as _k8s_watch
from kubernetes_asyncio import client as _ak8s
from kubernetes_asyncio import watch as _ak8s_watch

from kubemesh.apiserver.core import assemble
from kubemesh.apiserver.server import ServerSettings, build_app
from kubemesh.apiserver.watching import WatchSettings

if TYPE_CHECKING:  # conftest is never imported at run time (see tests/conftest.py)
    from conftest import ApiServer

# The client packages are only partly annotated: use them untyped.
k8s: Any = _k8s
k8s_watch: Any = _k8s_watch
ak8s: Any = _ak8s
ak8s_watch: Any = _ak8s_watch
ApiException: Any = k8s.ApiException
AsyncApiException: Any = ak8s.ApiException

NS = "default"
NODE = "node-1"
WINDOW = 5
WATCH_TIMEOUT = 10
Json = dict[str, Any]

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def node_body(name: str = NODE) -> Json:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}


def pod_body(name: str, *, node: str | None = None, labels: dict[str, str] | None = None) -> Json:
    spec: Json = {"containers": [{"name": "c", "image": "nginx:1.25",
                                  "resources": {"requests": {"cpu": "100m"}}}]}
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {"app": name}},
            "spec": spec}


@contextlib.contextmanager
def sync_api(url: str) -> Iterator[Any]:
    """A kubernetes.client.CoreV1Api on `url`."""
    api_client = k8s.ApiClient(k8s.Configuration(host=url))
    try:
        yield k8s.CoreV1Api(api_client)
    finally:
        api_client.close()


@contextlib.asynccontextmanager
async def async_api(url: str) -> AsyncIterator[Any]:
    """A kubernetes_asyncio.client.CoreV1Api on `url`."""
    async with ak8s.ApiClient(configuration=ak8s.Configuration(host=url)) as api_client:
        yield ak8s.CoreV1Api(api_client)


@contextlib.asynccontextmanager
async def in_process_apiserver(window: int) -> AsyncIterator[str]:
    """The apiserver app in this process with a small watch window; yields its URL."""
    app = build_app(assemble(ServerSettings(host="127.0.0.1", port=0, seed=7, watch=WatchSettings(window=window))))
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


def versions() -> str:
    return f"kubernetes {kubernetes.__version__}, kubernetes_asyncio {kubernetes_asyncio.__version__}"


# ------------------------------------------------------------------------------------ sync client


def sync_crud(url: str) -> None:
    with sync_api(url) as v1:
        v1.create_node(node_body())
        created = v1.create_namespaced_pod(NS, pod_body("web-1", node=NODE, labels={"app": "web"}))
        assert created.metadata.uid and created.metadata.resource_version
        assert created.metadata.creation_timestamp is not None
        v1.create_namespaced_pod(NS, pod_body("web-2", labels={"app": "web"}))
        v1.create_namespaced_pod(NS, pod_body("db-1", node=NODE, labels={"app": "db"}))
        with pytest.raises(ApiException) as dup:
            v1.create_namespaced_pod(NS, pod_body("db-1"))
        assert dup.value.status == 409

        got = v1.read_namespaced_pod("web-1", NS)
        assert got.spec.node_name == NODE and got.metadata.labels == {"app": "web"}
        with pytest.raises(ApiException) as missing:
            v1.read_namespaced_pod("nope", NS)
        assert missing.value.status == 404

        web = v1.list_namespaced_pod(NS, label_selector="app=web")
        assert sorted(p.metadata.name for p in web.items) == ["web-1", "web-2"]
        on_node = v1.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={NODE}")
        assert sorted(p.metadata.name for p in on_node.items) == ["db-1", "web-1"]
        both = v1.list_namespaced_pod(NS, label_selector="app in (web,db)", field_selector="spec.nodeName=")
        assert [p.metadata.name for p in both.items] == ["web-2"]
        assert int(web.metadata.resource_version) >= int(created.metadata.resource_version)

        # A dict body is a strategic merge patch: containers merge by name.
        patched = v1.patch_namespaced_pod("web-1", NS, {
            "metadata": {"labels": {"tier": "front"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.26"}]}})
        assert patched.metadata.labels == {"app": "web", "tier": "front"}
        [container] = patched.spec.containers
        assert container.image == "nginx:1.26" and container.resources.requests == {"cpu": "100m"}
        assert int(patched.metadata.resource_version) > int(got.metadata.resource_version)

        # Replace with the resourceVersion read before the patch: 409 Conflict.
        stale = got
        stale.metadata.labels = {"app": "web", "stale": "yes"}
        with pytest.raises(ApiException) as conflict:
            v1.replace_namespaced_pod("web-1", NS, stale)
        assert conflict.value.status == 409
        assert "the object has been modified" in str(conflict.value.body)
        fresh = v1.read_namespaced_pod("web-1", NS)
        fresh.metadata.labels = {"app": "web", "replaced": "yes"}
        replaced = v1.replace_namespaced_pod("web-1", NS, fresh)
        assert replaced.metadata.labels == {"app": "web", "replaced": "yes"}

        # A binding must not crash the client's response parsing.
        v1.create_namespaced_pod_binding("web-2", NS, k8s.V1Binding(
            metadata=k8s.V1ObjectMeta(name="web-2"), target=k8s.V1ObjectReference(kind="Node", name=NODE)))
        assert v1.read_namespaced_pod("web-2", NS).spec.node_name == NODE
        with pytest.raises(ApiException) as rebind:
            v1.create_namespaced_pod_binding("web-2", NS, k8s.V1Binding(
                metadata=k8s.V1ObjectMeta(name="web-2"), target=k8s.V1ObjectReference(kind="Node", name="node-2")))
        assert rebind.value.status == 409

        # Graceful deletion of a bound pod: it stays, terminating; grace 0 removes it.
        terminating = v1.delete_namespaced_pod("web-1", NS)
        assert terminating.metadata.deletion_timestamp is not None
        assert terminating.metadata.deletion_grace_period_seconds == 30
        assert v1.read_namespaced_pod("web-1", NS).metadata.deletion_timestamp is not None
        v1.delete_namespaced_pod("web-1", NS, grace_period_seconds=0)
        with pytest.raises(ApiException) as gone:
            v1.read_namespaced_pod("web-1", NS)
        assert gone.value.status == 404


def sync_watch_resume(url: str) -> None:
    with sync_api(url) as v1:
        v1.create_namespaced_pod(NS, pod_body("w-0"))
        rv = v1.list_namespaced_pod(NS).metadata.resource_version
        v1.create_namespaced_pod(NS, pod_body("w-1"))
        v1.patch_namespaced_pod("w-0", NS, {"metadata": {"labels": {"seen": "yes"}}})
        v1.delete_namespaced_pod("w-1", NS)
        w = k8s_watch.Watch()
        seen: list[tuple[str, str]] = []
        for ev in w.stream(v1.list_namespaced_pod, NS, resource_version=rv, timeout_seconds=WATCH_TIMEOUT):
            seen.append((ev["type"], ev["object"].metadata.name))
            if len(seen) == 3:
                w.stop()
        assert seen == [("ADDED", "w-1"), ("MODIFIED", "w-0"), ("DELETED", "w-1")]
        # Resuming from the revision of the second event replays only what came after it.
        w2 = k8s_watch.Watch()
        objs = []
        for ev in w2.stream(v1.list_namespaced_pod, NS, resource_version=rv, timeout_seconds=WATCH_TIMEOUT):
            objs.append(ev["object"])
            if len(objs) == 2:
                w2.stop()
        w3 = k8s_watch.Watch()
        for ev in w3.stream(v1.list_namespaced_pod, NS, resource_version=objs[1].metadata.resource_version,
                            timeout_seconds=WATCH_TIMEOUT):
            assert (ev["type"], ev["object"].metadata.name) == ("DELETED", "w-1")
            w3.stop()


def sync_watch_expired(url: str) -> None:
    with sync_api(url) as v1:
        v1.create_namespaced_pod(NS, pod_body("old"))
        old_rv = v1.list_namespaced_pod(NS).metadata.resource_version
        for i in range(WINDOW * 3):
            v1.patch_namespaced_pod("old", NS, {"metadata": {"labels": {"i": str(i)}}})
        w = k8s_watch.Watch()
        with pytest.raises(ApiException) as expired:
            for _ in w.stream(v1.list_namespaced_pod, NS, resource_version=old_rv, timeout_seconds=WATCH_TIMEOUT):
                pass
        assert expired.value.status == 410
        # Relist and watch again from the fresh revision.
        fresh = v1.list_namespaced_pod(NS)
        assert fresh.items[0].metadata.labels["i"] == str(WINDOW * 3 - 1)
        v1.patch_namespaced_pod("old", NS, {"metadata": {"labels": {"after": "relist"}}})
        w2 = k8s_watch.Watch()
        for ev in w2.stream(v1.list_namespaced_pod, NS, resource_version=fresh.metadata.resource_version,
                            timeout_seconds=WATCH_TIMEOUT):
            assert ev["type"] == "MODIFIED" and ev["object"].metadata.labels["after"] == "relist"
            w2.stop()
            break
        else:
            raise AssertionError("the watch after the relist delivered nothing")


async def test_sync_client_crud(apiserver: ApiServer) -> None:
    await asyncio.to_thread(sync_crud, apiserver.url)


async def test_sync_client_watch_resumes(apiserver: ApiServer) -> None:
    await asyncio.to_thread(sync_watch_resume, apiserver.url)


async def test_sync_client_watch_too_old_then_relist() -> None:
    async with in_process_apiserver(WINDOW) as url:
        await asyncio.to_thread(sync_watch_expired, url)


# ------------------------------------------------------------------------------------ asyncio client


async def test_async_client_crud(apiserver: ApiServer) -> None:
    async with async_api(apiserver.url) as v1:
        await v1.create_node(node_body())
        created = await v1.create_namespaced_pod(NS, pod_body("a-1", node=NODE, labels={"app": "a"}))
        await v1.create_namespaced_pod(NS, pod_body("a-2", labels={"app": "a"}))
        await v1.create_namespaced_pod(NS, pod_body("b-1", labels={"app": "b"}))

        got = await v1.read_namespaced_pod("a-1", NS)
        assert got.metadata.uid == created.metadata.uid
        listed = await v1.list_namespaced_pod(NS, label_selector="app=a")
        assert sorted(p.metadata.name for p in listed.items) == ["a-1", "a-2"]
        unbound = await v1.list_namespaced_pod(NS, field_selector="spec.nodeName=", label_selector="app!=b")
        assert [p.metadata.name for p in unbound.items] == ["a-2"]
        with pytest.raises(AsyncApiException) as bad:
            await v1.list_namespaced_pod(NS, field_selector="spec.nosuchfield=x")
        assert bad.value.status == 400

        patched = await v1.patch_namespaced_pod("a-1", NS, {
            "metadata": {"annotations": {"note": "x"}},
            "spec": {"containers": [{"name": "c", "image": "nginx:1.27"}]}})
        assert patched.metadata.annotations == {"note": "x"}
        assert patched.spec.containers[0].image == "nginx:1.27"
        assert patched.spec.containers[0].resources.requests == {"cpu": "100m"}

        got.metadata.labels = {"app": "a", "stale": "yes"}
        with pytest.raises(AsyncApiException) as conflict:
            await v1.replace_namespaced_pod("a-1", NS, got)
        assert conflict.value.status == 409

        await v1.create_namespaced_pod_binding("a-2", NS, ak8s.V1Binding(
            metadata=ak8s.V1ObjectMeta(name="a-2"), target=ak8s.V1ObjectReference(kind="Node", name=NODE)))
        assert (await v1.read_namespaced_pod("a-2", NS)).spec.node_name == NODE

        terminating = await v1.delete_namespaced_pod("a-2", NS, grace_period_seconds=15)
        assert terminating.metadata.deletion_timestamp is not None
        assert terminating.metadata.deletion_grace_period_seconds == 15
        still = await v1.read_namespaced_pod("a-2", NS)
        await v1.delete_namespaced_pod("a-2", NS, grace_period_seconds=0,
                                       body=ak8s.V1DeleteOptions(preconditions=ak8s.V1Preconditions(
                                           uid=still.metadata.uid)))
        with pytest.raises(AsyncApiException) as gone:
            await v1.read_namespaced_pod("a-2", NS)
        assert gone.value.status == 404
        await v1.delete_namespaced_pod("b-1", NS)  # unbound: removed at once
        with pytest.raises(AsyncApiException):
            await v1.read_namespaced_pod("b-1", NS)


async def test_async_client_watch_resumes(apiserver: ApiServer) -> None:
    async with async_api(apiserver.url) as v1:
        await v1.create_namespaced_pod(NS, pod_body("w-0"))
        rv = (await v1.list_namespaced_pod(NS)).metadata.resource_version
        await v1.create_namespaced_pod(NS, pod_body("w-1"))
        await v1.patch_namespaced_pod("w-0", NS, {"metadata": {"labels": {"seen": "yes"}}})
        seen: list[tuple[str, str]] = []
        w = ak8s_watch.Watch()
        async with asyncio.timeout(WATCH_TIMEOUT * 2):
            async for ev in w.stream(v1.list_namespaced_pod, NS, resource_version=rv,
                                     timeout_seconds=WATCH_TIMEOUT):
                seen.append((ev["type"], ev["object"].metadata.name))
                if len(seen) == 1:
                    # A live event after the replayed ones.
                    await v1.delete_namespaced_pod("w-1", NS)
                if len(seen) == 3:
                    w.stop()
        assert seen == [("ADDED", "w-1"), ("MODIFIED", "w-0"), ("DELETED", "w-1")]


async def test_async_client_watch_too_old_then_relist() -> None:
    async with in_process_apiserver(WINDOW) as url, async_api(url) as v1:
        await v1.create_namespaced_pod(NS, pod_body("old"))
        old_rv = (await v1.list_namespaced_pod(NS)).metadata.resource_version
        for i in range(WINDOW * 3):
            await v1.patch_namespaced_pod("old", NS, {"metadata": {"labels": {"i": str(i)}}})
        w = ak8s_watch.Watch()
        with pytest.raises(AsyncApiException) as expired:
            async with asyncio.timeout(WATCH_TIMEOUT * 2):
                async for _ in w.stream(v1.list_namespaced_pod, NS, resource_version=old_rv,
                                        timeout_seconds=WATCH_TIMEOUT):
                    pass
        assert expired.value.status == 410
        fresh = await v1.list_namespaced_pod(NS)
        await v1.patch_namespaced_pod("old", NS, {"metadata": {"labels": {"after": "relist"}}})
        w2 = ak8s_watch.Watch()
        events = []
        async with asyncio.timeout(WATCH_TIMEOUT * 2):
            async for ev in w2.stream(v1.list_namespaced_pod, NS, resource_version=fresh.metadata.resource_version,
                                      timeout_seconds=WATCH_TIMEOUT):
                events.append(ev)
                w2.stop()
        assert len(events) == 1, versions()
        assert events[0]["type"] == "MODIFIED" and events[0]["object"].metadata.labels["after"] == "relist"

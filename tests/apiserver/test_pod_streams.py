"""pods/log, exec, attach and portforward on an apiserver process without kubelets (`kubemesh.apiserver.podstreams`).

What the apiserver answers by itself: the container choice, the options' validation, an
unbound pod's empty log, a node nobody serves, and the refusal of exec, attach and
portforward, also for the upgrade requests kubectl sends (WebSocket and SPDY), which get a
400 Status rather than a switch of protocols. The kubelet's side runs in
tests/controller_manager/test_cm_pod_logs.py.
"""

from __future__ import annotations

import aiohttp
import orjson
import pytest
from restkit import Rest

from kubemesh.services.model.kinds import Obj

NS = "/api/v1/namespaces/default/pods"
NOT_SUPPORTED = "is not supported by kubemesh: its containers are emulated and run no processes"


def pod(name: str, *, node: str | None, containers: tuple[str, ...] = ("main",), init: tuple[str, ...] = ()) -> Obj:
    spec: Obj = {"containers": [{"name": c, "image": "busybox"} for c in containers]}
    if init:
        spec["initContainers"] = [{"name": c, "image": "busybox"} for c in init]
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


@pytest.fixture
async def pods(rest: Rest) -> Rest:
    await rest.ok("POST", NS, pod("bound", node="node-x"))
    await rest.ok("POST", NS, pod("multi", node="node-x", containers=("main", "side"), init=("setup",)))
    await rest.ok("POST", NS, pod("unbound", node=None))
    return rest


async def raw(rest: Rest, method: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, str, bytes]:
    async with rest.session.request(method, rest.base + path, headers={**rest.headers, **(headers or {})}) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.read()


async def test_log_choices_options_and_locations(pods: Rest) -> None:
    rest = pods
    status, doc = await rest.call("GET", f"{NS}/multi/log")
    assert (status, doc["reason"]) == (400, "BadRequest")
    assert doc["message"] == "a container name must be specified for pod multi, choose one of: [setup main side]"
    status, doc = await rest.call("GET", f"{NS}/multi/log", params={"container": "nope"})
    assert (status, doc["message"]) == (400, "container nope is not valid for pod multi")
    status, doc = await rest.call("GET", f"{NS}/missing/log")
    assert (status, doc["message"]) == (404, 'pods "missing" not found')
    status, doc = await rest.call("GET", f"{NS}/bound/log", params={"limitBytes": "0"})
    assert (status, doc["reason"]) == (422, "Invalid")
    assert doc["message"] == 'PodLogOptions "bound" is invalid: limitBytes: Invalid value: 0: must be greater than 0'
    status, doc = await rest.call("GET", f"{NS}/bound/log",
                                  params={"sinceSeconds": "5", "sinceTime": "2026-01-01T00:00:00Z"})
    assert (status, doc["reason"]) == (422, "Invalid")
    status, doc = await rest.call("GET", f"{NS}/missing/log", params={"limitBytes": "0"})
    assert (status, doc["reason"]) == (422, "Invalid")  # the options are validated before the pod is read
    status, doc = await rest.call("GET", f"{NS}/bound/log", params={"tailLines": "x"})
    assert (status, doc["reason"]) == (400, "BadRequest")
    # Bound to a node no kubelet registered: the location cannot be reached.
    status, doc = await rest.call("GET", f"{NS}/bound/log")
    assert (status, doc["reason"], doc["message"]) == (500, "InternalError",
                                                       'Internal error occurred: no kubelet serves node "node-x"')
    # Not bound to a node: no location, no content.
    assert await raw(rest, "GET", f"{NS}/unbound/log") == (204, "", b"")
    assert (await rest.call("POST", f"{NS}/bound/log"))[0] == 405


WEBSOCKET = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
             "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol": "v5.channel.k8s.io"}
SPDY = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1", "X-Stream-Protocol-Version": "v4.channel.k8s.io"}


@pytest.mark.parametrize("sub", ["exec", "attach", "portforward"])
async def test_process_subresources_are_refused_with_a_status(pods: Rest, sub: str) -> None:
    rest = pods
    query = "" if sub == "portforward" else "?container=side&command=ls&stdout=true"
    target = 'pod "multi"' if sub == "portforward" else 'pod "multi", container "side"'
    for method, headers in (("GET", WEBSOCKET), ("POST", SPDY), ("POST", {}), ("GET", {})):
        status, ctype, body = await raw(rest, method, f"{NS}/multi/{sub}{query}", headers)
        doc = orjson.loads(body)
        assert (status, ctype, doc["kind"], doc["reason"]) == (400, "application/json", "Status", "BadRequest"), \
            (method, headers, doc)
        assert doc["message"] == f"pods/{sub} {NOT_SUPPORTED} ({target})"
    status, doc = await rest.call("POST", f"{NS}/unbound/{sub}")
    assert (status, doc["message"]) == (400, "pod unbound does not have a host assigned")
    status, doc = await rest.call("POST", f"{NS}/missing/{sub}")
    assert (status, doc["message"]) == (404, 'pods "missing" not found')
    if sub != "portforward":
        status, doc = await rest.call("POST", f"{NS}/multi/{sub}")
        assert status == 400 and doc["message"].startswith("a container name must be specified for pod multi")


async def test_the_server_keeps_serving_after_a_refused_upgrade(pods: Rest) -> None:
    # An upgrade request answered without switching leaves the connection usable or closed, never stuck.
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:
        for _ in range(3):
            async with session.get(pods.base + f"{NS}/bound/exec?container=main",
                                   headers={**pods.headers, **WEBSOCKET}) as resp:
                assert resp.status == 400
            async with session.get(pods.base + f"{NS}/bound", headers=pods.headers) as resp:
                assert resp.status == 200

"""The kubelet's admin routes: node operations for chaos and for people, on the admin port.

All bodies and answers are JSON. `{node}` is a node name hosted by this process (404
otherwise). Every operation acts on that one node, is idempotent, and answers the node's
state after it (`changed` says whether anything changed).

| route                                   | body                                              |
|-----------------------------------------|---------------------------------------------------|
| `GET  /nodes`                           | list every hosted node's state                    |
| `GET  /nodes/{node}`                    | one node: pods, containers, logStreams            |
| `POST /nodes/{node}/power-off`          | all loops stop; pods stay as they are in the API  |
| `POST /nodes/{node}/power-on`           | boot again (a kubelet restart)                    |
| `POST /nodes/{node}/lease/stop`         | stop only the Lease renewals                      |
| `POST /nodes/{node}/lease/resume`       | renew again                                       |
| `POST /nodes/{node}/status/stop`        | stop only the NodeStatus posts                    |
| `POST /nodes/{node}/status/resume`      | post again                                        |
| `POST /nodes/{node}/conditions`         | `{"type", "status", "reason"?, "message"?}` set   |
| `DELETE /nodes/{node}/conditions/{type}`| clear an override                                 |
| `POST /nodes/{node}/containers/fail`    | `{"namespace"?, "pod"?, "container"?, "exitCode"?,|
|                                         | "reason"?}`: running containers exit (see below)  |
| `POST /nodes/{node}/containers/slow`    | `{"startDelay"?: s, "stopDelay"?: s or null}`     |
| `POST /nodes/{node}/partition`          | cut the node off the apiserver; containers run on |
| `POST /nodes/{node}/heal`               | reconnect (the loops start again and relist)      |
| `GET  /nodes/{node}/containerLogs/{namespace}/{pod}/{container}` | a container's log (below)|
| `GET|POST /nodes/{node}/exec|attach/{namespace}/{pod}/{container}` | websocket or SPDY       |
| `GET|POST /nodes/{node}/portforward/{namespace}/{pod}` | SPDY, or SPDY in a websocket (`streams`) |
| `POST /nodes/{node}/containers/freeze`  | `{"namespace"?, "pod", "container"?, "frozen"}`   |

`containers/fail`: without `pod`, every pod of the node; `namespace` defaults to `default`;
`exitCode` to 1 and `reason` to `Error`. `{"reason": "OOMKilled", "exitCode": 137}` is an OOM
kill: the container is restarted in place by its restartPolicy, unlike an eviction.

`containers/slow`: `startDelay` is added to every new container start (slow image pulls),
`stopDelay` replaces the time containers take to exit after SIGTERM (beyond the grace period
they are killed); cluster seconds, 0 and null clear them.

`partition`: the machine keeps running its containers (and its eviction manager) but cannot
reach the apiserver: no Lease, no NodeStatus, no pod watch, no pod writes (`EmulatedNode.partition`).
`heal` reconnects; the pod informer relists, and containers of pods deleted from the API
meanwhile are stopped then, each with a `Killing` event. The chaos front door's `node.partition`
fault maps onto these two.

`containerLogs`: the emulated container's log as text/plain, as the kubelet's
`/containerLogs` serves it (`kubemesh.kubelet.containerlogs`), with the query parameters
`previous`, `follow`, `timestamps`, `tailLines`, `sinceSeconds`, `sinceTime`, `limitBytes`
(the apiserver validated them; malformed ones are ignored). 404 when the node runs no such
pod, 400 (the kubelet's words) when the container's state has no log, 500 while the node is
powered off. A `follow` stream ends when the run ends, its pod leaves the node, or the
client leaves.

`exec`/`attach` (process runtime only, `kubemesh.kubelet.streams`): 404 when the node runs no
such pod, 400 when the pod is emulated or the container runs no process. `containers/freeze`
sends SIGSTOP (`frozen: true`) or SIGCONT to the processes of the pod's containers (all, or the
one named): a frozen process answers no probe, so its liveness probe fails for real.

Condition types: Ready, MemoryPressure, DiskPressure, PIDPressure (reported, and admission
refuses new pods; an override evicts nothing: the eviction manager evicts from its signals, the
pods' emulated usage, `kubemesh.kubelet.pressure`), or any other.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from kubemesh.kubelet import streams
from kubemesh.kubelet.containerlogs import LogOptions
from kubemesh.kubelet.lifecycle import LogUnavailable
from kubemesh.kubelet.nodes import EmulatedNode
from kubemesh.services.machinery.clock import Clock, parse_time

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda v: json.dumps(v, sort_keys=True))


async def _body(request: web.Request) -> dict[str, Any]:
    if not request.can_read_body:
        return {}
    try:
        data = await request.json()
    except ValueError as exc:
        raise web.HTTPBadRequest(text=f"body is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise web.HTTPBadRequest(text="body must be a JSON object")
    return data


def routes(nodes: Mapping[str, EmulatedNode], *, clock: Clock) -> list[web.RouteDef]:
    """The admin routes over the process's nodes."""

    def node_of(request: web.Request) -> EmulatedNode:
        node = nodes.get(request.match_info["node"])
        if node is None:
            raise web.HTTPNotFound(text=f"node {request.match_info['node']!r} is not hosted here")
        return node

    def op(action: Callable[[EmulatedNode, dict[str, Any]], Any]) -> Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            node = node_of(request)
            body = await _body(request)
            try:
                result = action(node, body)
            except (KeyError, TypeError, ValueError) as exc:
                raise web.HTTPBadRequest(text=f"bad request: {exc}") from exc
            out: dict[str, Any] = {"node": node.describe()}
            if isinstance(result, bool):
                out["changed"] = result
            elif result is not None:
                out["result"] = result
            return _json(out)

        return handler

    async def list_nodes(request: web.Request) -> web.StreamResponse:
        return _json({"nodes": [n.describe() for n in nodes.values()]})

    async def get_node(request: web.Request) -> web.StreamResponse:
        return _json(node_of(request).describe(pods=True))

    def set_condition(node: EmulatedNode, body: dict[str, Any]) -> None:
        ctype, status = str(body["type"]), str(body.get("status", "True"))
        if status not in ("True", "False", "Unknown"):
            raise ValueError("status must be True, False or Unknown")
        node.set_condition(ctype, status, reason=body.get("reason"), message=body.get("message"))

    async def clear_condition(request: web.Request) -> web.StreamResponse:
        node = node_of(request)
        changed = node.clear_condition(request.match_info["type"])
        return _json({"node": node.describe(), "changed": changed})

    def fail(node: EmulatedNode, body: dict[str, Any]) -> dict[str, list[str]]:
        pods = None
        if body.get("pod"):
            pods = [f"{body.get('namespace') or 'default'}/{body['pod']}"]
        return node.pods.fail_containers(now=clock.now(), pods=pods, container=body.get("container"),
                                         exit_code=int(body.get("exitCode", 1)),
                                         reason=str(body.get("reason", "Error")))

    def slow(node: EmulatedNode, body: dict[str, Any]) -> None:
        if "startDelay" in body:
            node.pods.faults.start_delay = float(body["startDelay"] or 0.0)
        if "stopDelay" in body:
            node.pods.faults.stop_delay = None if body["stopDelay"] is None else float(body["stopDelay"])

    async def container_log(request: web.Request) -> web.StreamResponse:
        node = node_of(request)
        info = request.match_info
        if not node.powered:
            raise web.HTTPInternalServerError(text=f'node "{node.name}" is powered off')
        try:
            run, alive = node.pods.container_log(f"{info['namespace']}/{info['pod']}", info["container"],
                                                 previous=_flag(request.query.get("previous")))
        except KeyError:
            raise web.HTTPNotFound(text=f'pod "{info["pod"]}" does not exist') from None
        except LogUnavailable as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
        opts = _log_options(request, now=clock.now())
        resp = web.StreamResponse(status=200, headers={"Content-Type": "text/plain"})
        await resp.prepare(request)

        def wanted() -> bool:
            # The run is still this node's and the client is still there: aiohttp does not
            # cancel a handler whose client left, and a quiet follow stream writes nothing
            # that would fail, so the stream looks at its connection between polls.
            transport = request.transport
            return alive() and transport is not None and not transport.is_closing()

        node.pods.log_streams += 1
        try:
            async for chunk in run.follow(clock=clock, opts=opts, alive=wanted):
                await resp.write(chunk)
            await resp.write_eof()
        except ConnectionResetError:
            pass  # the client left
        finally:
            node.pods.log_streams -= 1
        return resp

    def runs_of(node: EmulatedNode, namespace: str, pod: str, *, sub: str = "", container: str = "") -> Any:
        entry = node.pods.entries.get(f"{namespace}/{pod}")
        if entry is None:
            raise web.HTTPNotFound(text=f'pod "{pod}" does not exist')
        if entry.processes is None or node.pods.processes is None:
            # The apiserver's words for a kubelet that runs no processes (`kubemesh.apiserver.podstreams`).
            target = f'pod "{pod}"' + (f', container "{container}"' if container else "")
            raise web.HTTPBadRequest(text=f"pods/{sub} is not supported by kubemesh: its containers are emulated "
                                          f"and run no processes ({target})")
        return entry.processes

    def exec_or_attach(*, attach: bool) -> Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            node = node_of(request)
            info = request.match_info
            processes = runs_of(node, info["namespace"], info["pod"], sub="attach" if attach else "exec",
                                container=info["container"])
            run = processes.run_of(info["container"])
            if run is None:
                raise web.HTTPBadRequest(text=f'container {info["container"]} is not running in pod {info["pod"]}')
            assert node.pods.processes is not None
            return await streams.serve(request, runtime=node.pods.processes, run=run, attach=attach)

        return handler

    async def portforward(request: web.Request) -> web.StreamResponse:
        node = node_of(request)
        info = request.match_info
        processes = runs_of(node, info["namespace"], info["pod"], sub="portforward")
        return await streams.serve_portforward(request, pod=info["pod"],
                                               uid=str((processes.pod.get("metadata") or {}).get("uid", "")))

    def freeze(node: EmulatedNode, body: dict[str, Any]) -> dict[str, list[str]]:
        processes = runs_of(node, str(body.get("namespace") or "default"), str(body["pod"]), sub="freeze")
        return {"frozen" if body.get("frozen", True) else "thawed":
                processes.freeze(container=body.get("container"), frozen=bool(body.get("frozen", True)))}

    return [
        web.get("/nodes", list_nodes),
        *(method(f"/nodes/{{node}}/{op}/{{namespace}}/{{pod}}/{{container}}", exec_or_attach(attach=op == "attach"))
          for method in (web.get, web.post) for op in ("exec", "attach")),
        web.get("/nodes/{node}/portforward/{namespace}/{pod}", portforward),
        web.post("/nodes/{node}/portforward/{namespace}/{pod}", portforward),
        web.post("/nodes/{node}/containers/freeze", op(freeze)),
        web.get("/nodes/{node}/containerLogs/{namespace}/{pod}/{container}", container_log),
        web.get("/nodes/{node}", get_node),
        web.post("/nodes/{node}/power-off", op(lambda n, b: n.power_off())),
        web.post("/nodes/{node}/power-on", op(lambda n, b: n.power_on())),
        web.post("/nodes/{node}/lease/stop", op(lambda n, b: n.stop_lease())),
        web.post("/nodes/{node}/lease/resume", op(lambda n, b: n.resume_lease())),
        web.post("/nodes/{node}/status/stop", op(lambda n, b: n.stop_status())),
        web.post("/nodes/{node}/status/resume", op(lambda n, b: n.resume_status())),
        web.post("/nodes/{node}/conditions", op(set_condition)),
        web.delete("/nodes/{node}/conditions/{type}", clear_condition),
        web.post("/nodes/{node}/containers/fail", op(fail)),
        web.post("/nodes/{node}/containers/slow", op(slow)),
        web.post("/nodes/{node}/partition", op(lambda n, b: n.partition())),
        web.post("/nodes/{node}/heal", op(lambda n, b: n.heal())),
    ]


def _flag(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true", "t", "yes")


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _log_options(request: web.Request, *, now: float) -> LogOptions:
    """The PodLogOptions of a log request (sinceSeconds counts back from the cluster time `now`)."""
    q = request.query
    since: float | None = None
    seconds = _int(q.get("sinceSeconds"))
    if seconds is not None:
        since = now - seconds
    elif q.get("sinceTime"):
        try:
            since = parse_time(q["sinceTime"])
        except ValueError:
            since = None
    tail, limit = _int(q.get("tailLines")), _int(q.get("limitBytes"))
    return LogOptions(follow=_flag(q.get("follow")), timestamps=_flag(q.get("timestamps")),
                      tail_lines=tail if tail is not None and tail >= 0 else None, since=since,
                      limit_bytes=limit if limit is not None and limit > 0 else None)
